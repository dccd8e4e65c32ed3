"""The compress job's output check: the self-calibrated compression against the data-free HQQ and RTN ones on
held-out text the float model generates, and the one closest to the float model kept."""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from nncf_hqq.llm.compression import compress_model
from nncf_hqq.llm.compression import compress_timed
from nncf_hqq.llm.evaluation import METRICS
from nncf_hqq.llm.evaluation import Metrics
from nncf_hqq.llm.evaluation import RecordedLogits
from nncf_hqq.llm.evaluation import evaluate_llms
from nncf_hqq.llm.layout import ir_xml
from nncf_hqq.llm.layout import read_model
from nncf_hqq.llm.layout import remove_ir
from nncf_hqq.llm.logs import bitwidth_tables_held_back
from nncf_hqq.llm.logs import show
from nncf_hqq.llm.options import CompressionOptions
from nncf_hqq.llm.stand_in import model_for
from nncf_hqq.llm.stand_in import running
from nncf_hqq.llm.timing import OUTPUT_CHECK_PHASE
from nncf_hqq.llm.timing import OUTPUT_REFERENCE_PHASE
from nncf_hqq.llm.timing import StepTimer
from nncf_hqq.llm.timing import silent_timer
from nncf_hqq.openvino.pages import release_file_mappings
from nncf_hqq.openvino.pages import releasing_file_pages
from nncf_hqq.self_calibration import SelfCalibration
from nncf_hqq.self_calibration import generate_sequences

#: Held-out sequences on which the job checks a self-calibrated model (``compress_checked_on_outputs``).
OUTPUT_CHECK_SEQUENCES = 8


def output_check_candidates(
    data_free: CompressionOptions, self_calibrated: CompressionOptions
) -> dict[str, CompressionOptions]:
    """The compressions the output check compares, in the order that decides ties: the self-calibrated one, the
    same options without data (Scale Estimation off; AWQ, if asked, data-free) and NNCF's round to nearest."""
    data_free = dataclasses.replace(data_free, scale_estimation=False, self_calibration=None, token_rows=0)
    return {
        "self-calibrated": self_calibrated,
        "data-free": data_free,
        "rtn": dataclasses.replace(data_free, hqq=False, zero_point=None),
    }


def held_out_sequences(model: ov.Model, params: SelfCalibration) -> list[np.ndarray]:
    """``OUTPUT_CHECK_SEQUENCES`` sequences the float model generates like its calibration sequences, with the
    next seed (so none is a calibration sequence), as 1-D token windows."""
    count = OUTPUT_CHECK_SEQUENCES
    held_out = params.replace(num_samples=count, batch_size=min(params.batch_size, count), seed=params.seed + 1)
    return list(generate_sequences(model, held_out))


@dataclass(frozen=True)
class OutputCheck:
    """What the output check measured: every candidate's KL divergence from the float model, top-1 agreement and
    perplexity on the held-out generated sequences (the float model as ``fp``), and the candidate kept."""

    chosen: str
    metrics: Mapping[str, Mapping[str, float]]

    def record(self) -> dict[str, Any]:
        return {
            "chosen": self.chosen,
            "held_out_sequences": OUTPUT_CHECK_SEQUENCES,
            "metrics": {name: {k: m[k] for k in METRICS} for name, m in self.metrics.items()},
        }


def compress_checked_on_outputs(
    model_xml: Path,
    data_free: CompressionOptions,
    self_calibrated: CompressionOptions,
    log: Callable[[str], None],
    timer: StepTimer | None = None,
    scratch_dir: Path | None = None,
    stand_in: Path | None = None,
) -> tuple[ov.Model, CompressionOptions, OutputCheck]:
    """The model of ``model_xml`` compressed as each of ``output_check_candidates``, and the one whose
    outputs on held-out generated sequences are closest to the float model's (least KL divergence), with its
    options and what was measured. Judged on the whole model's outputs, so the result is never worse than RTN's
    there. ``timer`` times the float model's part as ``OUTPUT_REFERENCE_PHASE``, the self-calibrated compression's
    phases (``compress_timed``), then the rest of the check as ``OUTPUT_CHECK_PHASE``.

    The float model is never compiled beside a compressed one: before any compression it generates the held-out
    sequences and its logits on them are recorded in a file (``RecordedLogits``, in a temporary directory
    under ``scratch_dir``, by default the system's; ``sequences x seq_len x vocab`` float32, removed on return),
    against which the candidates are then evaluated one at a time, each compressed from its own read of
    ``model_xml``, written beside the recording and freed before it is compiled from its file: memory holds the one
    candidate being compressed, or compiled, and one logits block per model, never a candidate kept beside them (the
    kept one's files wait on disk; the others are removed once beaten). After each compression the pages of the
    IR's weights file that it read are dropped (``release_file_mappings``): the pages NNCF's RTN read would
    otherwise stay resident. The kept candidate is read back into memory, so nothing returned refers to the removed
    directory. NNCF's bitwidth table is shown once, the kept candidate's, after the choice.
    ``stand_in``: the float model's INT8 copy (``nncf_hqq.llm.stand_in``), which generates the held-out sequences and
    gives the reference logits in its place, and serves the self-calibrated candidate (``compress_timed``).
    """
    if self_calibrated.self_calibration is None:
        msg = "the output check compares a self-calibrated compression: self_calibrated.self_calibration is None"
        raise ValueError(msg)
    timer = timer or silent_timer()
    candidates = output_check_candidates(data_free, self_calibrated)
    weights_file = ir_xml(model_xml).with_suffix(".bin")
    with tempfile.TemporaryDirectory(prefix=".nncf-hqq-output-check-", dir=scratch_dir) as scratch:
        with timer.step(OUTPUT_REFERENCE_PHASE), running(stand_in):
            reference_xml = model_for(OUTPUT_REFERENCE_PHASE, model_xml, stand_in)
            held_out = held_out_sequences(read_model(reference_xml), self_calibrated.self_calibration)
            release_file_mappings(weights_file, reference_xml.with_suffix(".bin"))
            reference = RecordedLogits.record(reference_xml, held_out, Path(scratch) / "float_logits.bin")
            release_file_mappings(weights_file, reference_xml.with_suffix(".bin"))
        kept, chosen, metrics, tables = _compress_candidates(
            model_xml, candidates, reference, held_out, log, timer, Path(scratch), stand_in
        )
        reference.close()
    summary = ", ".join(f"{name} {metrics[name]['kl']:.4f}" for name in candidates)
    log(f"Output check on {len(held_out)} held-out generated sequences, KL vs float: {summary}; keeping {chosen}")
    show(tables)
    return kept, candidates[chosen], OutputCheck(chosen, metrics)


def _compress_candidates(
    model_xml: Path,
    candidates: Mapping[str, CompressionOptions],
    reference: RecordedLogits,
    held_out: Sequence[np.ndarray],
    log: Callable[[str], None],
    timer: StepTimer,
    scratch: Path,
    stand_in: Path | None = None,
) -> tuple[ov.Model, str, dict[str, Metrics], list[logging.LogRecord]]:
    """Every candidate compressed from ``model_xml`` (the first in ``compress_timed``'s phases), written to
    ``scratch`` (``spill``) and evaluated from there against ``reference``: the least-KL one (ties keep the earlier)
    read back, its name, every candidate's metrics with the reference's as ``fp``, and the kept one's bitwidth table
    (held back: ``bitwidth_tables_held_back``)."""
    weights_file = ir_xml(model_xml).with_suffix(".bin")
    (first, first_options), *others = candidates.items()
    log(f"Output check: compressing the {first} candidate")
    with bitwidth_tables_held_back() as tables:
        model = compress_timed(read_model(model_xml), first_options, None, timer, stand_in)
    release_file_mappings(weights_file)
    with timer.step(OUTPUT_CHECK_PHASE):
        kept_xml = spill(model, scratch, first)
        del model
        metrics = evaluate_spilled(reference, first, kept_xml, held_out)
        chosen = first
        for name, options in others:
            log(f"Output check: compressing the {name} candidate")
            with bitwidth_tables_held_back() as candidate_tables:
                candidate_xml = spill(compress_model(read_model(model_xml), options), scratch, name)
            release_file_mappings(weights_file)  # the float weights NNCF's RTN read
            metrics[name] = evaluate_spilled(reference, name, candidate_xml, held_out)[name]
            beaten = candidate_xml
            if metrics[name]["kl"] < metrics[chosen]["kl"]:
                chosen, beaten, kept_xml, tables = name, kept_xml, candidate_xml, candidate_tables
            remove_ir(beaten)
        kept = read_model_into_memory(kept_xml)
    return kept, chosen, metrics, tables


def spill(model: ov.Model, scratch: Path, name: str) -> Path:
    """Writes a compressed candidate to ``scratch`` as an IR named after it (as the job saves a model: no f16
    conversion) and returns the ``.xml``; the caller's reference is the last one, so the model is freed on return."""
    xml = scratch / f"candidate-{name}.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    return xml


def evaluate_spilled(
    reference: RecordedLogits, name: str, xml: Path, held_out: Sequence[np.ndarray]
) -> dict[str, Metrics]:
    """``evaluate_llms`` of the candidate written at ``xml``, compiled from its file; the pages of its weights file
    are dropped while it runs (``releasing_file_pages``), so memory holds the compiled candidate alone."""
    with releasing_file_pages(xml.with_suffix(".bin")):
        return evaluate_llms(reference, {name: xml}, held_out)


def read_model_into_memory(xml: Path) -> ov.Model:
    """The model of ``xml`` with its weights read into memory (no mapping of the file), so the file can be removed
    on every system while the model lives."""
    core = ov.Core()
    core.set_property({"ENABLE_MMAP": False})
    return core.read_model(xml)
