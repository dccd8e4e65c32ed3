"""Tests of nncf_hqq.llm.evaluation: the PROTOCOL.md metrics of LLMs, on the tiny exported Llama (tests/conftest.py)
against direct numpy computations, and the streamed reductions against float64 ones. The model tests need the ``llm``
extra and skip without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from nncf_hqq.llm import evaluation as ev
from nncf_hqq.llm import texts
from nncf_hqq.llm.compression import compress_model
from nncf_hqq.llm.layout import ir_xml
from nncf_hqq.llm.layout import read_model
from nncf_hqq.llm.options import CompressionOptions
from nncf_hqq.llm.texts import wikitext_windows
from tests.llm_helpers import perturbed

WINDOW = 32
N_WINDOWS = 4


@pytest.fixture(scope="module")
def windows(tiny_llm: tuple[Path, Any], text_path: Path) -> list[np.ndarray]:
    return wikitext_windows(tiny_llm[1], text_path, N_WINDOWS, window=WINDOW)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x - np.logaddexp.reduce(x, axis=-1, keepdims=True)


def test_log_softmax64_is_normalised_and_float64() -> None:
    x = np.random.default_rng(0).standard_normal((5, 300)).astype(np.float32) * 20
    lp = ev.log_softmax64(x)
    assert lp.dtype == np.float64
    np.testing.assert_allclose(np.exp(lp).sum(axis=-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(lp, _log_softmax(x), atol=1e-10)


# --------------------------------------------------------------------------------------------------------------------
# The tiny exported Llama
# --------------------------------------------------------------------------------------------------------------------


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
    same = ov.Core().read_model(ir_xml(ir_dir))
    results = ev.evaluate_llms(ir_dir, {"same_model": same, "same_xml": ir_xml(ir_dir)}, windows)
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


#: Half a unit of the last digit ``nncf-hqq evaluate`` prints (reports.format_table): agreement to those digits.
PRINTED = {"ppl": 5e-4, "kl": 5e-6, "top1": 5e-5}


@pytest.mark.parametrize("chunk", [None, 8, 5], ids=["one_request", "chunks_of_8", "chunks_of_5"])
def test_metrics_agree_with_float64_to_the_printed_digits(
    tiny_llm: tuple[Path, Any], windows: list[np.ndarray], chunk: int | None
) -> None:
    ir_dir = tiny_llm[0]
    noisy = perturbed(ir_dir)
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
    noisy = perturbed(ir_dir)
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
    noisy = perturbed(ir_dir)
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


def test_reference_name_is_reserved(tiny_llm: tuple[Path, Any], windows: list[np.ndarray]) -> None:
    with pytest.raises(ValueError, match="reserved"):
        ev.evaluate_llms(tiny_llm[0], {"fp": tiny_llm[0]}, windows)


def test_evaluating_one_candidate_at_a_time_gives_the_metrics_of_all_at_once(
    tiny_llm: tuple[Path, Any], text_path: Path
) -> None:
    windows = texts.token_windows(texts.tokenize_text(tiny_llm[1], text_path), 3, 32)
    model = read_model(tiny_llm[0])
    hqq = compress_model(read_model(tiny_llm[0]), CompressionOptions(group_size=64))
    rtn = compress_model(model, CompressionOptions(group_size=64, hqq=False))
    candidates = {"hqq": hqq, "rtn": rtn, "same": tiny_llm[0]}
    together = ev.evaluate_llms(tiny_llm[0], candidates, windows, chunk=16)
    apart = ev.evaluate_llms(tiny_llm[0], candidates, windows, chunk=16, one_at_a_time=True)
    assert list(apart) == list(together) == ["fp", "hqq", "rtn", "same"]
    for name in together:
        assert {k: apart[name][k] for k in ev.METRICS} == {k: together[name][k] for k in ev.METRICS}
    assert apart["same"]["kl"] == 0.0 and apart["hqq"]["kl"] > 0.0
