"""The protocol's texts as model inputs (shared/PROTOCOL.md): reading a text, tokenizing it, its evaluation windows
and its calibration samples, as stateful-LLM inputs or an ``nncf.Dataset``.

* Evaluation: the whole text (``\\r\\n`` -> ``\\n``) tokenized at once with default special tokens, the first N
  non-overlapping 512-token windows.
* Calibration for data-aware methods: random 256-token windows (seed 0) of the text, as stateful LLM inputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import nncf
import numpy as np

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

WINDOW = 512
CALIBRATION_SEQ_LEN = 256


def read_text(text_path: str | Path) -> str:
    """The text of a file as PROTOCOL.md reads it: UTF-8, ``\\r\\n`` replaced by ``\\n`` (nothing else touched)."""
    with open(text_path, encoding="utf-8", newline="") as f:
        return f.read().replace("\r\n", "\n")


def tokenize_text(tokenizer: PreTrainedTokenizerBase, text_path: str | Path) -> np.ndarray:
    """The whole text tokenized at once with the tokenizer's default special tokens, as int64 ids."""
    ids = tokenizer(read_text(text_path), verbose=False)["input_ids"]
    return np.asarray(ids, dtype=np.int64)


def wikitext_windows(
    tokenizer: PreTrainedTokenizerBase, text_path: str | Path, n_windows: int, window: int = WINDOW
) -> list[np.ndarray]:
    """The first ``n_windows`` non-overlapping ``window``-token windows of the tokenized text (int64 arrays)."""
    return token_windows(tokenize_text(tokenizer, text_path), n_windows, window, str(text_path))


def token_windows(ids: np.ndarray, n_windows: int, window: int = WINDOW, source: str = "the text") -> list[np.ndarray]:
    """The first ``n_windows`` non-overlapping ``window``-token windows of ``ids`` (copies)."""
    if n_windows * window > ids.size:
        msg = f"{source} has {ids.size} tokens, fewer than {n_windows} windows of {window}"
        raise ValueError(msg)
    return [ids[i * window : (i + 1) * window].copy() for i in range(n_windows)]


def wikitext_lines(text_path: str | Path, n: int) -> list[str]:
    """The first ``n`` non-empty lines that are not ``= Heading =`` lines, stripped."""
    lines: list[str] = []
    for raw in read_text(text_path).split("\n"):
        line = raw.strip()
        if line and not (line.startswith("=") and line.endswith("=")):
            lines.append(line)
            if len(lines) == n:
                break
    return lines


def llm_inputs(input_ids: np.ndarray, start: int = 0) -> dict[str, np.ndarray]:
    """Stateful-LLM prefill inputs for one sequence, as optimum-intel feeds them (batch 1, no padding).

    :param start: tokens already in the state (a later piece of a sequence prefilled in several requests).
    """
    ids = np.asarray(input_ids, dtype=np.int64).reshape(1, -1)
    return {
        "input_ids": ids,
        "attention_mask": np.ones((1, start + ids.shape[1]), dtype=np.int64),
        "position_ids": np.arange(start, start + ids.shape[1], dtype=np.int64).reshape(1, -1),
        "beam_idx": np.zeros(1, dtype=np.int32),
    }


def calibration_samples(
    tokenizer: PreTrainedTokenizerBase,
    text_path: str | Path,
    n: int = 128,
    seq_len: int = CALIBRATION_SEQ_LEN,
    seed: int = 0,
) -> list[dict[str, np.ndarray]]:
    """``n`` windows of ``seq_len`` tokens at random starts (``np.random.default_rng(seed)``) of the tokenized text.

    Each sample is a dict of stateful-LLM inputs (``input_ids``, ``attention_mask``, ``position_ids``, ``beam_idx``)
    ready for ``nncf.Dataset(samples)`` on an optimum-intel OpenVINO LLM.
    """
    return token_calibration_samples(tokenize_text(tokenizer, text_path), n, seq_len, seed, str(text_path))


def token_calibration_samples(
    ids: np.ndarray, n: int = 128, seq_len: int = CALIBRATION_SEQ_LEN, seed: int = 0, source: str = "the text"
) -> list[dict[str, np.ndarray]]:
    """:func:`calibration_samples` of already tokenized text ``ids``."""
    if ids.size < seq_len:
        msg = f"{source} has {ids.size} tokens, fewer than seq_len={seq_len}"
        raise ValueError(msg)
    starts = np.random.default_rng(seed).integers(0, ids.size - seq_len + 1, size=n)
    return [llm_inputs(ids[s : s + seq_len]) for s in starts]


def load_tokenizer(model_dir: str | Path) -> PreTrainedTokenizerBase:
    """``AutoTokenizer.from_pretrained(model_dir)`` (the exported IR dirs carry their tokenizer files)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


def prompt_text_token_ids(tokenizer_dir: str | Path, text_path: str | Path) -> tuple[int, ...]:
    """The token ids of a short user text (no special tokens added), for ``SelfCalibration.prompt_token_ids``."""
    tokenizer = load_tokenizer(tokenizer_dir)
    ids = tokenizer(read_text(text_path), add_special_tokens=False, verbose=False)["input_ids"]
    return tuple(int(i) for i in ids)


def calibration_dataset(tokenizer_dir: str | Path, text_path: str | Path, n: int) -> nncf.Dataset:
    """``nncf.Dataset`` of ``n`` random 256-token windows of the text (PROTOCOL.md's calibration, seed 0)."""
    tokenizer = load_tokenizer(tokenizer_dir)
    return nncf.Dataset(calibration_samples(tokenizer, text_path, n=n))


def torch_calibration_dataset(tokenizer_dir: str | Path, text_path: str | Path, n: int) -> nncf.Dataset:
    """``calibration_dataset``'s windows as torch ``input_ids``/``attention_mask`` for a transformers model."""
    import torch

    tokenizer = load_tokenizer(tokenizer_dir)
    samples = calibration_samples(tokenizer, text_path, n=n)
    keys = ("input_ids", "attention_mask")
    return nncf.Dataset([{key: torch.from_numpy(sample[key]) for key in keys} for sample in samples])
