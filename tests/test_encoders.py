"""Encoders through ``nncf-hqq compress`` and ``evaluate``: tiny random sentence-transformers models built from
configs (a BERT one with mean pooling and Normalize, a Gemma-3-text one with mean pooling, two Dense layers and
Normalize; tokenizers built offline with the ``tokenizers`` library), the task inference and ``--task``, the
refusal of tasks ``compress`` does not handle, and the encoder recipe. Needs the ``llm`` extra (sentence-transformers
included); skips without it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

from nncf_hqq.llm import cli
from nncf_hqq.llm import encoders
from nncf_hqq.llm import export
from nncf_hqq.llm import layout
from nncf_hqq.llm.evaluation import compile_model
from nncf_hqq.llm.options import ZERO_POINT_FORMATS
from nncf_hqq.llm.options import CompressionOptions
from nncf_hqq.parameters import HQQ_REFERENCE
from tests.llm_helpers import PNG_MAGIC
from tests.llm_helpers import perturbed
from tests.llm_helpers import run_cli
from tests.llm_helpers import word_level_tokenizer

WORDS = 60
HIDDEN = 64
#: The width the Gemma model's Dense layers end on (another width than the hidden size: the Dense layers are in).
DENSE_OUT = 32
SENTENCES = ["w1 w2 w3 w4", "w5 w6 w7 w8", "w9 w10 w11 w12"]


def _wordpiece_tokenizer() -> Any:
    """A BERT tokenizer (WordPiece over ``w0``..``w59``) built offline."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {token: i for i, token in enumerate([*specials, ".", ",", *(f"w{i}" for i in range(WORDS))])}
    backend = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token="[UNK]"))
    backend.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    backend.decoder = tokenizers.decoders.WordPiece()
    return transformers.BertTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]"
    )


def _bpe_tokenizer() -> Any:
    """A SentencePiece-style BPE tokenizer (Metaspace; letters, digits and two merges) built offline."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    pieces = ["<pad>", "<eos>", "<bos>", "<unk>", "▁", ".", *"abcdefghijklmnopqrstuvwxyz0123456789", "▁w", "▁w1"]
    vocab = {piece: i for i, piece in enumerate(pieces)}
    model = tokenizers.models.BPE(vocab, [("▁", "w"), ("▁w", "1")], unk_token="<unk>")
    backend = tokenizers.Tokenizer(model)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace()
    backend.decoder = tokenizers.decoders.Metaspace()
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single="<bos> $A <eos>", special_tokens=[("<bos>", 2), ("<eos>", 1)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>", bos_token="<bos>", eos_token="<eos>"
    )


def save_sentence_transformer(model: Any, tokenizer: Any, out_dir: Path, modules: list[Any]) -> Path:
    """``model`` and ``tokenizer`` as a sentence-transformers dir: a Transformer module over them, then ``modules``
    (pooling, Dense, Normalize), saved with ``SentenceTransformer.save``."""
    st = pytest.importorskip("sentence_transformers")
    model.save_pretrained(out_dir / "hf")
    tokenizer.save_pretrained(out_dir / "hf")
    transformer = st.models.Transformer(str(out_dir / "hf"), max_seq_length=64)
    st.SentenceTransformer(modules=[transformer, *modules]).save(str(out_dir / "st"))
    return out_dir / "st"


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT sentence-transformers dir: mean pooling, Normalize."""
    st = pytest.importorskip("sentence_transformers")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("optimum.intel")
    tokenizer = _wordpiece_tokenizer()
    config = transformers.BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    modules = [st.models.Pooling(HIDDEN, "mean"), st.models.Normalize()]
    root = tmp_path_factory.mktemp("bert_st")
    return save_sentence_transformer(transformers.BertModel(config).eval(), tokenizer, root, modules)


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Gemma-3-text sentence-transformers dir: mean pooling, Dense 64 -> 128 -> 32, Normalize."""
    st = pytest.importorskip("sentence_transformers")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("optimum.intel")
    tokenizer = _bpe_tokenizer()
    config = transformers.Gemma3TextConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        query_pre_attn_scalar=16,
        sliding_window=256,
        use_bidirectional_attention=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    torch.manual_seed(0)
    identity = torch.nn.Identity()
    modules = [
        st.models.Pooling(HIDDEN, "mean"),
        st.models.Dense(HIDDEN, 2 * HIDDEN, bias=False, activation_function=identity),
        st.models.Dense(2 * HIDDEN, DENSE_OUT, bias=False, activation_function=identity),
        st.models.Normalize(),
    ]
    root = tmp_path_factory.mktemp("gemma_st")
    return save_sentence_transformer(transformers.Gemma3TextModel(config).eval(), tokenizer, root, modules)


@pytest.fixture(scope="module")
def lines_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(7)
    lines = [" = Heading = ", ""]
    lines += [" ".join(f"w{j}" for j in rng.integers(0, WORDS, size=int(rng.integers(3, 12)))) for _ in range(40)]
    path = tmp_path_factory.mktemp("text") / "lines.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _compress(args: list[Any], capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    code, out, err = run_cli(["compress", *args], capsys)
    assert code == 0, err
    return out, err


@pytest.fixture(scope="module")
def bert_compressed(bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """(OUT, stdout, stderr) of ``compress`` on the BERT sentence-transformers dir, data-free."""
    out_dir = tmp_path_factory.mktemp("bert_out") / "int4"
    out, err = io.StringIO(), io.StringIO()  # a module fixture has no capsys
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["compress", str(bert_dir), str(out_dir), "--group-size", "64"])
    assert code == 0, err.getvalue()
    return out_dir, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def bert_float_ir(bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The float IR of the BERT sentence-transformers dir, exported as ``compress`` exports it."""
    out = tmp_path_factory.mktemp("bert_fp") / "fp"
    return export.export_to_openvino(bert_dir, out, export.ENCODER_TASK, export.SENTENCE_TRANSFORMERS)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# --------------------------------------------------------------------------------------------------------------------
# compress
# --------------------------------------------------------------------------------------------------------------------
def test_bert_sentence_transformer_is_compressed_data_free_and_loads_with_optimum_intel(
    bert_dir: Path, bert_compressed: tuple[Path, str, str]
) -> None:
    from optimum.intel import OVSentenceTransformer
    from sentence_transformers import SentenceTransformer

    out_dir, out, err = bert_compressed
    assert "as feature-extraction (sentence-transformers, with its pooling; a sentence-transformers model)" in err
    assert f"the encoder recipe is {encoders.ENCODER_DATA_FREE.name}" in err
    assert "Self-calibration" not in err and "Output check" not in err
    assert "OVSentenceTransformer" in out
    record = json.loads((out_dir / layout.RECORD_NAME).read_text())
    assert record["encoder"] == {
        "recipe": encoders.ENCODER_DATA_FREE.name,
        "task": "feature-extraction",
        "library": "sentence_transformers",
        "calibration_lines": 0,
    }
    assert record["options"]["awq"] == encoders.ENCODER_DATA_FREE.awq
    assert record["options"]["hqq"] == encoders.ENCODER_DATA_FREE.hqq
    assert record["self_calibration"] is None and record["dataset"] is None
    model = ov.Core().read_model(out_dir / layout.MODEL_XML)
    outputs = {name for port in model.outputs for name in port.get_names()}
    assert {"token_embeddings", "sentence_embedding"} <= outputs and "logits" not in outputs
    assert ov.Type.f16 in {op.get_element_type() for op in model.get_ops() if "zero_point" in op.get_friendly_name()}
    assert (out_dir / layout.TOKENIZER_XML).is_file() and not (out_dir / layout.DETOKENIZER_XML).exists()
    embeddings = OVSentenceTransformer.from_pretrained(out_dir).encode(SENTENCES)
    float_embeddings = SentenceTransformer(str(bert_dir)).encode(SENTENCES)
    assert embeddings.shape == (len(SENTENCES), HIDDEN)
    assert np.allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-4)  # the Normalize module is in the IR
    assert 0.95 < _cosines(embeddings, float_embeddings).min() < 1.0


def test_gemma3_sentence_transformer_keeps_pooling_dense_and_normalize(
    gemma_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from optimum.intel import OVSentenceTransformer
    from sentence_transformers import SentenceTransformer

    out_dir = tmp_path / "int4"
    _, err = _compress([gemma_dir, out_dir, "--group-size", "64"], capsys)
    assert "as feature-extraction (sentence-transformers" in err
    if encoders.ENCODER_DATA_FREE.awq:
        assert "No matching patterns" not in err  # data-free AWQ finds Gemma's gated MLPs
    model = ov.Core().read_model(out_dir / layout.MODEL_XML)
    outputs = {name for port in model.outputs for name in port.get_names()}
    assert "logits" not in outputs and model.output("sentence_embedding").get_partial_shape()[-1] == DENSE_OUT
    reference = SentenceTransformer(str(gemma_dir))
    compressed = OVSentenceTransformer.from_pretrained(out_dir)
    for sentence in SENTENCES:  # one at a time: what each sentence gives on its own
        embedding = compressed.encode([sentence])
        assert embedding.shape == (1, DENSE_OUT)
        assert np.linalg.norm(embedding) == pytest.approx(1.0, abs=1e-4)
        assert 0.9 < _cosines(embedding, reference.encode([sentence]))[0] < 1.0


@pytest.mark.parametrize(
    ("architecture", "task"),
    [("BertForSequenceClassification", "text-classification"), ("T5ForConditionalGeneration", "text2text-generation")],
    ids=["classifier", "seq2seq"],
)
def test_model_of_another_task_is_refused_in_one_line(
    architecture: str, task: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("optimum.intel")
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    model_type = "t5" if architecture.startswith("T5") else "bert"
    (hf_dir / "config.json").write_text(json.dumps({"model_type": model_type, "architectures": [architecture]}))
    code, out, err = run_cli(["compress", hf_dir, tmp_path / "out"], capsys)
    assert code == 1 and out == ""
    [line] = [line for line in err.splitlines() if "error:" in line]
    assert f"is a {task} model (architecture {architecture})" in line and "--task" in line
    assert not (tmp_path / "out").exists()


def test_task_option_overrides_the_inferred_task(
    bert_dir: Path, bert_float_ir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--task text-generation`` asks for the causal-LM export of the BERT dir (which optimum-intel has not);
    ``--task feature-extraction`` exports a classifier's encoder; an IR takes no ``--task``."""
    code, _, err = run_cli(["compress", bert_dir, tmp_path / "llm", "--task", "text-generation"], capsys)
    assert code == 1 and "no OpenVINO export of it for text-generation-with-past" in err
    code, _, err = run_cli(["compress", bert_float_ir, tmp_path / "ir", "--task", "feature-extraction"], capsys)
    assert code == 2 and "--task applies to a HF model" in err
    code, _, err = run_cli(["compress", bert_dir, tmp_path / "bad", "--task", "image-classification"], capsys)
    assert code == 2 and "invalid choice: 'image-classification'" in err
    code, _, err = run_cli(["compress", bert_dir, tmp_path / "torch", "--backend", "torch"], capsys)
    assert code == 2 and "--backend torch compresses causal LMs" in err


def test_classifier_exports_its_encoder_with_task_feature_extraction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from optimum.intel import OVModelForFeatureExtraction

    tokenizer = _wordpiece_tokenizer()
    config = transformers.BertConfig(
        vocab_size=len(tokenizer), hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64
    )
    torch.manual_seed(0)
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path / "hf")
    tokenizer.save_pretrained(tmp_path / "hf")
    out_dir = tmp_path / "int4"
    _, err = _compress([tmp_path / "hf", out_dir, "--group-size", "64", "--task", "feature-extraction"], capsys)
    assert "as feature-extraction (transformers; --task)" in err
    model = OVModelForFeatureExtraction.from_pretrained(out_dir)
    hidden = model(**tokenizer(SENTENCES[:1], return_tensors="pt")).last_hidden_state
    assert tuple(hidden.shape) == (1, 6, HIDDEN)


def test_causal_lm_still_takes_the_llm_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from nncf_hqq.self_calibration import check_generative
    from tests.tiny_families import save_tiny_family

    hf_dir = save_tiny_family("llama", tmp_path / "hf", word_level_tokenizer())
    expected = export.ExportTask("text-generation", "transformers", "architecture LlamaForCausalLM")
    assert export.infer_export_task(hf_dir) == expected
    _, err = _compress([hf_dir, tmp_path / "out", "--group-size", "64", "--no-self-calibration"], capsys)
    assert "as text-generation (transformers; architecture LlamaForCausalLM)" in err
    assert "Encoder:" not in err
    record = json.loads((tmp_path / "out" / layout.RECORD_NAME).read_text())
    assert "encoder" not in record
    assert check_generative(ov.Core().read_model(tmp_path / "out" / layout.MODEL_XML)) > 0


def test_encoder_calibrated_on_text_lines(
    bert_float_ir: Path, lines_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "calibrated"
    out, err = _compress(
        [bert_float_ir, out_dir, "--group-size", "64", "--dataset", lines_path, "--subset-size", "8"], capsys
    )
    assert f"the encoder recipe is {encoders.ENCODER_CALIBRATED.name}" in err and "8 random lines" in err
    assert "AWQ, Scale Estimation, HQQ" in out
    record = json.loads((out_dir / layout.RECORD_NAME).read_text())
    assert record["encoder"]["calibration_lines"] == 8 and record["options"]["scale_estimation"] is True
    code, _, err = run_cli(["compress", bert_float_ir, tmp_path / "se", "--scale-estimation"], capsys)
    assert code == 2 and "an encoder cannot generate it: add --dataset" in err
    code, _, err = run_cli(["compress", bert_float_ir, tmp_path / "ref", "--no-guard-reference"], capsys)
    assert code == 2 and "--guard-reference needs calibration data; an encoder cannot generate it" in err


# --------------------------------------------------------------------------------------------------------------------
# the recipe
# --------------------------------------------------------------------------------------------------------------------
def test_encoder_recipe_applies_where_the_command_line_leaves_it_open() -> None:
    default = CompressionOptions(group_size=64)
    assert encoders.recipe_for(default, calibrated=False) is encoders.ENCODER_DATA_FREE
    assert encoders.recipe_for(default, calibrated=True) is encoders.ENCODER_CALIBRATED
    assert encoders.recipe_for(CompressionOptions(awq=True), calibrated=True) is None  # the user's choice
    assert encoders.recipe_for(CompressionOptions(hqq=False), calibrated=False) is None  # --no-hqq: RTN
    assert encoders.recipe_for(CompressionOptions(mode="int8_asym"), calibrated=False) is None
    options = encoders.with_recipe(default, encoders.EncoderRecipe("data-free AWQ + HQQ", awq=True))
    assert options.awq and options.hqq and not options.scale_estimation and options.hqq_params() is None
    reference = encoders.with_recipe(default, encoders.EncoderRecipe("HQQ_REFERENCE", hqq_params=HQQ_REFERENCE))
    assert reference.hqq_params() == HQQ_REFERENCE and not reference.awq
    integer = dataclasses.replace(reference, zero_point="int").hqq_params()
    assert integer == HQQ_REFERENCE.replace(zero_point_format=ZERO_POINT_FORMATS["int"])
    assert not encoders.with_recipe(default, encoders.EncoderRecipe("RTN", hqq=False)).hqq


# --------------------------------------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------------------------------------
def test_embedding_cosine_on_a_tiny_bert(tmp_path: Path) -> None:
    pytest.importorskip("optimum.intel")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *(f"w{i}" for i in range(50))])}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(vocab), hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    transformers.BertModel(config).eval().save_pretrained(tmp_path / "hf")
    tokenizer.save_pretrained(tmp_path / "hf")
    ir_dir = export.export_encoder_to_openvino(tmp_path / "hf", tmp_path / "ov")
    lines = ["w1 w2 w3", "w4 w5", "w6 w7 w8 w9 w10 w11", "w3"]
    assert encoders.embedding_cosine(ir_dir, ir_dir, tokenizer, lines) == pytest.approx(1.0, abs=1e-9)
    noisy = encoders.embedding_cosine(ir_dir, perturbed(ir_dir, rel_noise=1.0), tokenizer, lines)
    assert 0.0 < noisy < 0.9999
    # padding must not change a line's embedding: pooled alone == pooled in a padded batch
    compiled = compile_model(ir_dir, encoders.ENCODER_CONFIG)
    together = encoders.mean_pooled(compiled, tokenizer, lines)
    alone = np.concatenate([encoders.mean_pooled(compiled, tokenizer, [line]) for line in lines])
    np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-6)


def test_nearest_neighbours_and_row_cosines() -> None:
    embeddings = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    assert encoders.nearest_neighbours(embeddings).tolist() == [1, 0, 3, 2]
    assert encoders.cosine_rows(embeddings, 2 * embeddings) == pytest.approx(np.ones(4))


def test_evaluate_encoders_prints_a_table_and_writes_json_and_png(
    bert_compressed: tuple[Path, str, str],
    bert_float_ir: Path,
    lines_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["evaluate", f"hqq={bert_compressed[0]}", "--reference", bert_float_ir, "--text", lines_path]
    json_path, png_path = tmp_path / "ev.json", tmp_path / "ev.png"
    code, out, err = run_cli([*args, "--lines", 20, "--json", json_path, "--png", png_path], capsys)
    assert code == 0, err
    header, _, fp_row, hqq_row, *_ = out.splitlines()
    assert header.split() == ["model", "cosine", "min", "cos", "NN", "agree"]
    assert fp_row.split() == ["fp", "1.00000", "1.00000", "1.0000"]
    assert hqq_row.split()[0] == "hqq"
    record = json.loads(json_path.read_text())
    assert record["kind"] == "encoder" and record["lines"] == 20
    assert record["pooling"] == "the model's sentence_embedding output"
    hqq = record["results"]["hqq"]
    assert set(hqq) == {"cosine", "cosine_min", "neighbour_agreement", "seconds"}
    assert 0.95 < hqq["cosine_min"] <= hqq["cosine"] < 1.0 and 0.0 <= hqq["neighbour_agreement"] <= 1.0
    assert png_path.read_bytes().startswith(PNG_MAGIC)
    code, _, err = run_cli([*args, "--lines", 1], capsys)
    assert code == 2 and "--lines must be at least 2" in err
    code, _, err = run_cli([*args, "--lines", 100], capsys)
    assert code == 1 and "fewer than 100 (--lines)" in err
