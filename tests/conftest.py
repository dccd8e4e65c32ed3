"""The fixtures the LLM tooling's tests share: a text in the WikiText layout and a tiny random Llama exported by
optimum-intel (with the HF checkpoint it was exported from). Built once per session; the tests only read them.
They need the ``llm`` extra and skip without it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.llm_helpers import VOCAB_WORDS
from tests.llm_helpers import word_level_tokenizer

#: No NNCF telemetry in the processes the tests start (NNCF's switch for its CI; NNCF itself sends none inside
#: pytest). An event forks a child from a telemetry thread, and OpenBLAS's fork handler stops the BLAS threads that
#: a matmul in flight on the main thread waits for: the equivalence runs hung about one in five (research log,
#: 2026-12-07, evening).
NO_TELEMETRY = {"NNCF_CI": "1"}
os.environ.update(NO_TELEMETRY)


@pytest.fixture(scope="session")
def text_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Lines of random words with ``= Heading =`` lines between them and CRLF line endings."""
    rng = np.random.default_rng(123)
    lines = ["", " = Heading = ", ""]
    for i in range(60):
        lines.append(" " + " ".join(f"w{j}" for j in rng.integers(0, VOCAB_WORDS, size=8)) + " .")
        if i % 10 == 9:
            lines += ["", f" = = Section {i} = = ", ""]
    path = tmp_path_factory.mktemp("text") / "wiki.test.raw"
    path.write_bytes("\r\n".join(lines).encode("utf-8"))
    return path


@pytest.fixture(scope="session")
def tiny_llm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """(OpenVINO IR dir, tokenizer) of a tiny random Llama exported by optimum-intel; hidden size 64, so NNCF's
    default group size of 128 does not divide its attention and MLP inputs (as SmolLM2's 576)."""
    pytest.importorskip("optimum.intel")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from nncf_hqq.llm.export import export_to_openvino

    tokenizer = word_level_tokenizer()
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
    return export_to_openvino(root / "hf", root / "ov"), tokenizer


@pytest.fixture(scope="session")
def hf_dir(tiny_llm: tuple[Path, Any]) -> Path:
    """The HF checkpoint the tiny IR was exported from."""
    return tiny_llm[0].parent / "hf"
