"""Tests of the compress job's output check (nncf_hqq.llm.output_check): the self-calibrated compression against the
data-free HQQ and RTN ones on held-out generated text, the closest kept; the float model run once, before any
candidate; one candidate besides the kept one in memory; NNCF's bitwidth table shown once, the kept one's.

The model is the tiny Llama of tests/conftest.py (the ``llm`` extra; skipped without it).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import openvino as ov
import pytest
from nncf.common.logging import nncf_logger

from nncf_hqq.llm import compress
from nncf_hqq.llm import compression
from nncf_hqq.llm import evaluation
from nncf_hqq.llm import output_check
from nncf_hqq.llm.compression import compress_model
from nncf_hqq.llm.compression import self_calibrated
from nncf_hqq.llm.evaluation import METRICS
from nncf_hqq.llm.layout import ir_xml
from nncf_hqq.llm.layout import read_model
from nncf_hqq.llm.logs import BITWIDTH_TABLE
from nncf_hqq.llm.options import CompressionOptions
from tests.llm_helpers import genai_generate
from tests.llm_helpers import zero_point_types


def test_the_job_keeps_the_candidate_closest_to_the_float_model(tiny_llm: tuple[Path, Any], tmp_path: Path) -> None:
    lines: list[str] = []
    result = compress(tiny_llm[0], tmp_path / "out", group_size=64, log=lines.append)
    check = result.record["output_check"]
    names = ["self-calibrated", "data-free", "rtn"]
    assert list(check["metrics"]) == ["fp", *names]
    assert check["held_out_sequences"] == output_check.OUTPUT_CHECK_SEQUENCES
    kl = {name: check["metrics"][name]["kl"] for name in names}
    assert check["chosen"] == min(names, key=kl.__getitem__) and kl[check["chosen"]] > 0.0
    assert result.output_check is not None and result.output_check.chosen == check["chosen"]
    assert any(line.endswith(f"keeping {check['chosen']}") for line in lines)
    # the record describes the model written: its options are the chosen candidate's
    assert result.record["options"]["hqq"] is (check["chosen"] != "rtn")
    assert (result.record["self_calibration"] is not None) is (check["chosen"] == "self-calibrated")
    phases = ["output check reference", "self-calibration text", "compression", "statistics", "output check"]
    assert list(result.phase_seconds) == [*phases, "saving", "tokenizer conversion"]
    assert result.phase_seconds["statistics"] <= result.phase_seconds["compression"]
    assert [e.phase for e in result.memory_estimates] == [
        "output check reference",
        "self-calibration text",
        "statistics",
        "compression",
        "output check",
    ]


def test_the_least_kl_candidate_is_written(
    tiny_llm: tuple[Path, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the measured KL made to favour NNCF's RTN, RTN's model (u4 zero points, no HQQ) is what is written."""
    original = output_check.evaluate_llms

    def rtn_closest(reference: Any, candidates: Any, windows: Any) -> dict[str, dict[str, float]]:
        assert len(windows) == output_check.OUTPUT_CHECK_SEQUENCES
        metrics = original(reference, candidates, windows)
        if "rtn" in candidates:  # the candidates are evaluated one at a time
            metrics["rtn"]["kl"] = 0.0
        return metrics

    monkeypatch.setattr(output_check, "evaluate_llms", rtn_closest)
    lines: list[str] = []
    result = compress(tiny_llm[0], tmp_path / "out", group_size=64, log=lines.append)
    assert result.record["output_check"]["chosen"] == "rtn" and any(line.endswith("keeping rtn") for line in lines)
    assert result.record["options"]["hqq"] is False and result.record["self_calibration"] is None
    assert "RTN (no HQQ)" in result.description
    assert ov.Type.f16 not in zero_point_types(tmp_path / "out")
    genai_generate(tmp_path / "out", tiny_llm[1])


def test_nncfs_bitwidth_table_is_shown_once_for_the_kept_candidate(
    tiny_llm: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three candidates are compressed, one table is shown: the kept one's (RTN, compressed last: its table was made
    after the check began compressing it), after the choice is said."""
    events: list[tuple[float, str]] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            events.append((record.created, record.getMessage()))

    original = output_check.evaluate_llms

    def rtn_closest(reference: Any, candidates: Any, windows: Any) -> dict[str, dict[str, float]]:
        metrics = original(reference, candidates, windows)
        if "rtn" in candidates:
            metrics["rtn"]["kl"] = 0.0
        return metrics

    monkeypatch.setattr(output_check, "evaluate_llms", rtn_closest)
    handler = Collect()
    nncf_logger.addHandler(handler)
    try:
        data_free = CompressionOptions(group_size=64)
        calibrated = self_calibrated(data_free, tiny_llm[0], 4)
        output_check.compress_checked_on_outputs(
            ir_xml(tiny_llm[0]), data_free, calibrated, log=lambda line: events.append((time.time(), line))
        )
    finally:
        nncf_logger.removeHandler(handler)
    messages = [message for _, message in events]
    [table] = [i for i, message in enumerate(messages) if message.startswith(BITWIDTH_TABLE)]
    assert messages[table - 1].endswith("keeping rtn")
    [rtn_started] = [when for when, message in events if message == "Output check: compressing the rtn candidate"]
    assert events[table][0] >= rtn_started


def test_output_check_candidates_are_data_free_hqq_and_rtn() -> None:
    data_free = CompressionOptions(group_size=64, scale_estimation=True, zero_point="float")
    calibrated = self_calibrated(data_free, None, 4)
    candidates = output_check.output_check_candidates(data_free, calibrated)
    assert list(candidates) == ["self-calibrated", "data-free", "rtn"]
    assert candidates["self-calibrated"] is calibrated
    assert candidates["data-free"].scale_estimation is False and candidates["data-free"].self_calibration is None
    assert candidates["data-free"].hqq is True and candidates["data-free"].zero_point == "float"
    assert candidates["rtn"].hqq is False and candidates["rtn"].group_size == 64


def test_token_rows_option_is_hqqs_calibration_token_rows() -> None:
    from nncf_hqq import HQQ_TOKEN_ROWS

    assert CompressionOptions(token_rows=32).hqq_params() == HQQ_TOKEN_ROWS
    both = CompressionOptions(token_rows=8, zero_point="int").hqq_params()
    assert both is not None and both.calibration_token_rows == 8 and both.zero_point_format.value == "integer"
    assert CompressionOptions().hqq_params() is None
    calibrated = CompressionOptions(scale_estimation=True, token_rows=32)
    candidates = output_check.output_check_candidates(calibrated, calibrated)
    assert candidates["self-calibrated"].token_rows == 32 and candidates["data-free"].token_rows == 0


def test_output_check_measures_what_evaluating_all_candidates_at_once_measures(
    tiny_llm: tuple[Path, Any],
) -> None:
    """The output check compresses and evaluates its candidates one at a time; its metrics and choice are those of
    the three candidates compressed first and evaluated together."""
    xml = ir_xml(tiny_llm[0])
    data_free = CompressionOptions(group_size=64)
    calibrated = self_calibrated(data_free, tiny_llm[0], 4)
    model, options, check = output_check.compress_checked_on_outputs(xml, data_free, calibrated, log=lambda _: None)
    assert calibrated.self_calibration is not None
    held_out = output_check.held_out_sequences(read_model(xml), calibrated.self_calibration)
    candidates = output_check.output_check_candidates(data_free, calibrated)
    compressed = {name: compress_model(read_model(xml), o) for name, o in candidates.items()}
    together = evaluation.evaluate_llms(xml, compressed, held_out)
    assert check.record()["metrics"] == {name: {k: m[k] for k in METRICS} for name, m in together.items()}
    assert check.chosen == min(candidates, key=lambda name: together[name]["kl"])
    assert options == candidates[check.chosen]
    assert isinstance(model, ov.Model)


def test_output_check_runs_the_float_model_once_before_any_candidate_and_removes_its_recording(
    tiny_llm: tuple[Path, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The float model is compiled for evaluation once, to record its logits into ``scratch_dir``, before the first
    candidate is compressed; the candidates are evaluated against that recording, which is removed afterwards."""
    events: list[str] = []
    recordings: list[Path] = []
    compile_llm, compress = evaluation.StatefulLLM.__init__, output_check.compress_model
    make_recording = evaluation.RecordedLogits.__init__

    def compiled(self: Any, model: Any, *args: Any) -> None:
        events.append("compile candidate" if Path(model).name.startswith("candidate-") else "compile float")
        compile_llm(self, model, *args)

    def recorded(self: Any, path: Path, *args: Any) -> None:
        recordings.append(path)
        make_recording(self, path, *args)

    def compressed(*args: Any, **kwargs: Any) -> Any:
        events.append("compress")
        return compress(*args, **kwargs)

    monkeypatch.setattr(evaluation.StatefulLLM, "__init__", compiled)
    monkeypatch.setattr(evaluation.RecordedLogits, "__init__", recorded)
    monkeypatch.setattr(output_check, "compress_model", compressed)
    monkeypatch.setattr(compression, "compress_model", compressed)  # the first candidate's, in compress_timed
    xml = ir_xml(tiny_llm[0])
    data_free = CompressionOptions(group_size=64)
    calibrated = self_calibrated(data_free, tiny_llm[0], 4)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    output_check.compress_checked_on_outputs(xml, data_free, calibrated, log=lambda _: None, scratch_dir=scratch)
    assert events == ["compile float"] + ["compress", "compile candidate"] * 3
    assert len(recordings) == 1 and recordings[0].parent.parent == scratch
    assert list(scratch.iterdir()) == []


def test_output_check_holds_no_candidate_beside_the_one_it_compresses_or_evaluates(
    tiny_llm: tuple[Path, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each candidate is better than the one before, so each replaces the kept one: when a candidate is compressed or
    evaluated, no other candidate is alive in memory (each waits on disk, compiled from its file), at most the kept
    one's files are beside it, and the model returned holds the last candidate's weights, read back from its file."""
    import gc
    import hashlib
    import weakref

    alive: list[int] = []
    outputs: list[weakref.ref[Any]] = []
    digests: list[str] = []
    on_disk: list[int] = []
    compress, evaluate = output_check.compress_model, output_check.evaluate_llms
    kl = {"self-calibrated": 3.0, "data-free": 2.0, "rtn": 1.0}
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    def weights_digest(model: ov.Model) -> str:
        constants = [op.get_data().tobytes() for op in model.get_ordered_ops() if op.get_type_name() == "Constant"]
        return hashlib.sha256(b"".join(sorted(constants))).hexdigest()

    def candidate_files() -> int:
        return len(list(scratch.glob("*/candidate-*.bin")))

    def compressed(*args: Any, **kwargs: Any) -> Any:
        gc.collect()
        alive.append(sum(ref() is not None for ref in outputs))
        on_disk.append(candidate_files())
        result = compress(*args, **kwargs)
        outputs.append(weakref.ref(result))
        digests.append(weights_digest(result))
        return result

    def evaluated(reference: Any, candidates: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        gc.collect()
        alive.append(sum(ref() is not None for ref in outputs))
        on_disk.append(candidate_files())
        assert all(isinstance(candidate, Path) for candidate in candidates.values())
        metrics = evaluate(reference, candidates, *args, **kwargs)
        return {name: {**m, "kl": kl.get(name, 0.0)} for name, m in metrics.items()}

    monkeypatch.setattr(output_check, "compress_model", compressed)
    monkeypatch.setattr(compression, "compress_model", compressed)  # the first candidate's, in compress_timed
    monkeypatch.setattr(output_check, "evaluate_llms", evaluated)
    data_free = CompressionOptions(group_size=64)
    calibrated = self_calibrated(data_free, tiny_llm[0], 4)
    kept, _, check = output_check.compress_checked_on_outputs(
        ir_xml(tiny_llm[0]), data_free, calibrated, log=lambda _: None, scratch_dir=scratch
    )
    assert check.chosen == "rtn" and len(digests) == 3 and len(set(digests)) == 3
    assert alive == [0] * 6  # compress, evaluate; three times
    assert on_disk == [0, 1, 1, 2, 1, 2]  # the kept one's files, and the one evaluated
    assert weights_digest(kept) == digests[-1]
    assert list(scratch.iterdir()) == []
