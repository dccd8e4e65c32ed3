"""Tests of nncf_hqq.llm.texts: reading the protocol's texts, their evaluation windows and calibration samples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nncf_hqq.llm import texts
from nncf_hqq.llm.evaluation import compile_model
from tests.llm_helpers import word_level_tokenizer

WINDOW = 32
N_WINDOWS = 4


def test_read_text_replaces_crlf_only(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"a\r\nb\rc\n")
    assert texts.read_text(path) == "a\nb\rc\n"


def test_windows_are_consecutive_non_overlapping_and_deterministic(text_path: Path) -> None:
    tokenizer = word_level_tokenizer()
    ids = texts.tokenize_text(tokenizer, text_path)
    assert ids[0] == tokenizer.bos_token_id  # default special tokens are on
    first = texts.wikitext_windows(tokenizer, text_path, N_WINDOWS, window=WINDOW)
    second = texts.wikitext_windows(tokenizer, text_path, N_WINDOWS, window=WINDOW)
    assert [w.shape for w in first] == [(WINDOW,)] * N_WINDOWS
    assert all(w.dtype == np.int64 for w in first)
    np.testing.assert_array_equal(np.concatenate(first), ids[: N_WINDOWS * WINDOW])
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="fewer than"):
        texts.wikitext_windows(tokenizer, text_path, 10_000, window=WINDOW)


def test_wikitext_lines_skip_blank_and_heading_lines(text_path: Path) -> None:
    lines = texts.wikitext_lines(text_path, 12)
    assert len(lines) == 12
    assert all(line and not line.startswith("=") and line == line.strip() for line in lines)
    assert lines[0].startswith("w")


def test_calibration_samples_follow_the_stateful_llm_layout(text_path: Path) -> None:
    tokenizer = word_level_tokenizer()
    ids = texts.tokenize_text(tokenizer, text_path)
    samples = texts.calibration_samples(tokenizer, text_path, n=8, seq_len=16, seed=0)
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
    again = texts.calibration_samples(tokenizer, text_path, n=8, seq_len=16, seed=0)
    other = texts.calibration_samples(tokenizer, text_path, n=8, seq_len=16, seed=1)
    assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(samples, again, strict=True))
    assert not all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(samples, other, strict=True))


def test_calibration_samples_run_through_the_export(tiny_llm: tuple[Path, Any], text_path: Path) -> None:
    ir_dir, tokenizer = tiny_llm
    compiled = compile_model(ir_dir)
    request = compiled.create_infer_request()
    for sample in texts.calibration_samples(tokenizer, text_path, n=2, seq_len=16):
        request.reset_state()
        request.infer(sample)
        assert request.get_tensor("logits").data.shape == (1, 16, len(tokenizer))
