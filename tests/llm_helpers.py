"""Helpers of the LLM tooling's tests: a word-level tokenizer, running the command line, loading a written model dir
with optimum-intel and openvino_genai, and reading what it holds."""

from __future__ import annotations

import re
from collections.abc import Iterator
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

from nncf_hqq.llm import cli
from nncf_hqq.llm.layout import MODEL_XML
from nncf_hqq.llm.layout import ir_xml

VOCAB_WORDS = 250
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def word_level_tokenizer() -> Any:
    """A HF tokenizer of ``w0`` ... ``w249`` and a few signs, adding the BOS token ``<s>`` (id 1)."""
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


def perturbed(ir_dir: Path, rel_noise: float = 0.3, seed: int = 0) -> ov.Model:
    """The IR with Gaussian noise added to every 2-D float weight (a stand-in for a badly compressed model)."""
    model = ov.Core().read_model(ir_xml(ir_dir))
    rng = np.random.default_rng(seed)
    for node in model.get_ordered_ops():
        shape = tuple(node.get_output_shape(0)) if node.get_type_name() == "Constant" else ()
        if len(shape) == 2 and node.get_element_type() == ov.Type.f32 and min(shape) >= 64:
            data = node.get_data()
            noisy = data + rel_noise * float(data.std()) * rng.standard_normal(data.shape)
            node.output(0).replace(ov.op.Constant(noisy.astype(np.float32)).output(0))
    return model


def run_cli(args: Sequence[object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``nncf-hqq ARGS`` in this process: its exit code, stdout and stderr."""
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def zero_point_types(model_dir: Path) -> set[ov.Type]:
    """Element types of the decompression zero-point constants of a saved model."""
    model = ov.Core().read_model(model_dir / MODEL_XML)
    return {
        op.get_element_type()
        for op in model.get_ops()
        if op.get_type_name() == "Constant" and op.get_friendly_name().endswith("/zero_point")
    }


def generate(model_dir: Path, tokenizer: Any, n_tokens: int = 4) -> Any:
    """Load ``model_dir`` with optimum-intel and greedily generate ``n_tokens`` after a short prompt."""
    optimum_intel = pytest.importorskip("optimum.intel")
    model = optimum_intel.OVModelForCausalLM.from_pretrained(model_dir)
    inputs = tokenizer("w1 w2 w3", return_tensors="pt")
    output = model.generate(**inputs, max_new_tokens=n_tokens, min_new_tokens=n_tokens, do_sample=False)
    assert output.shape[1] == inputs["input_ids"].shape[1] + n_tokens
    return output


def genai_generate(model_dir: Path, tokenizer: Any, n_tokens: int = 4) -> list[int]:
    """Load ``model_dir`` with ``openvino_genai.LLMPipeline`` and greedily generate ``n_tokens``; its tokenizer and
    detokenizer IRs must agree with the HF tokenizer. Returns the generated token ids."""
    openvino_genai = pytest.importorskip("openvino_genai")
    pipe = openvino_genai.LLMPipeline(str(model_dir), "CPU")
    prompt = "w1 w2 w3"
    encoded = pipe.get_tokenizer().encode(prompt)
    assert encoded.input_ids.data.tolist() == [tokenizer(prompt)["input_ids"]]
    config = openvino_genai.GenerationConfig(max_new_tokens=n_tokens, min_new_tokens=n_tokens, do_sample=False)
    tokens = pipe.generate(encoded, config).tokens[0]
    assert len(tokens) == n_tokens
    text = pipe.generate([prompt], config).texts[0]
    assert text == pipe.get_tokenizer().decode(tokens) == tokenizer.decode(tokens, skip_special_tokens=True)
    return list(tokens)


def assert_phases_timed(err: str, phase_seconds: dict[str, float], expected: Sequence[str]) -> None:
    """Each expected phase logged one line with its seconds on stderr (not a terminal: no start line) and is in the
    phase summary and in the recorded ``phase_seconds`` (in the order the phases started)."""
    assert list(phase_seconds) == list(expected)
    summaries = [line for line in err.splitlines() if line.startswith(f"[{cli.PROG}] phases: ")]
    assert len(summaries) == 1
    for name in expected:
        assert f"[{cli.PROG}] {name} ...\n" not in err
        assert len(re.findall(rf"\[{cli.PROG}\] {re.escape(name)}: \d+\.\d s\n", err)) == 1
        assert re.search(rf"(: |, |\(){re.escape(name)} \d+\.\d s", summaries[0])
        assert phase_seconds[name] >= 0.0


def recording_released_files(released: list[list[Path]]) -> Any:
    """A ``releasing_file_pages`` that does its job and appends the files it was given to ``released``."""
    from nncf_hqq.openvino import pages

    @contextmanager
    def recorded(*paths: Path, **kwargs: float) -> Iterator[None]:
        with pages.releasing_file_pages(*paths, **kwargs):
            released.append([Path(p).resolve() for p in paths])
            yield

    return recorded
