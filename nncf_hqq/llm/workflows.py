"""Building blocks of the ``nncf-hqq`` command line: compress a model into a directory that optimum-intel loads,
evaluate OpenVINO LLMs against a reference, and report (text table, JSON, PNG bar chart).

Nothing here writes to stdout: the command line (``nncf_hqq.llm.cli``) does the user-facing output. The heavy optional
dependencies (transformers, optimum-intel, matplotlib) are imported only where they are needed.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import re
import shutil
import tempfile
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nncf
import numpy as np
import openvino as ov
from nncf import BackupMode
from nncf import CompressWeightsMode
from nncf.common.logging import nncf_logger

import nncf_hqq
from nncf_hqq._nncf import WeightCompression
from nncf_hqq.hqq import SUPPORTED_MODES
from nncf_hqq.llm import evaluation
from nncf_hqq.llm import models
from nncf_hqq.llm import sanity
from nncf_hqq.llm.timing import StepTimer
from nncf_hqq.openvino.graph import moe_gate_matmuls
from nncf_hqq.openvino.pages import release_file_mappings
from nncf_hqq.parameters import HQQ_DEFAULT
from nncf_hqq.parameters import HQQParameters
from nncf_hqq.parameters import LowBitMode
from nncf_hqq.parameters import ZeroPointFormat
from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT
from nncf_hqq.self_calibration import SelfCalibration
from nncf_hqq.self_calibration import check_generative
from nncf_hqq.self_calibration import generate_sequences
from nncf_hqq.self_calibration import self_calibration_dataset
from nncf_hqq.self_calibration import self_calibration_subset_size

#: The ``--mode`` choices: the modes HQQ handles (``nncf_hqq.hqq.SUPPORTED_MODES``) by NNCF's names, and the
#: asymmetric low-bit modes only HQQ writes (``nncf_hqq.LowBitMode``).
MODES: dict[str, CompressWeightsMode | LowBitMode] = {
    **{mode.value: mode for mode in SUPPORTED_MODES},
    **{mode.value: mode for mode in LowBitMode},
}
INT8_MODES = ("int8_asym", "int8_sym")
#: The modes ``--backend torch`` compresses (``nncf_hqq.api.TORCH_MODES``).
TORCH_MODES = ("int4_asym", "int4_sym", "int8_asym", "int8_sym")
LOW_BIT_MODES = tuple(mode.value for mode in LowBitMode)
BACKUP_MODES: dict[str, BackupMode] = {
    "int8_asym": BackupMode.INT8_ASYM,
    "int8_sym": BackupMode.INT8_SYM,
    "none": BackupMode.NONE,
}
ZERO_POINT_FORMATS: dict[str, ZeroPointFormat] = {
    "float": ZeroPointFormat.FLOAT,
    "int": ZeroPointFormat.INTEGER,
    "split": ZeroPointFormat.SPLIT,
}

MODEL_XML = "openvino_model.xml"
MODEL_BIN = "openvino_model.bin"
RECORD_NAME = "nncf_hqq_compression.json"
#: The OpenVINO tokenizer and detokenizer IRs that ``openvino_genai.LLMPipeline`` loads beside the model.
TOKENIZER_XML = "openvino_tokenizer.xml"
DETOKENIZER_XML = "openvino_detokenizer.xml"
METRICS = ("ppl", "kl", "top1")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


# --------------------------------------------------------------------------------------------------------------------
# Compression
# --------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompressionOptions:
    """What ``nncf-hqq compress`` asks of ``nncf.compress_weights``; ``None`` means NNCF's default.

    :param zero_point: ``"float"`` or ``"int"`` (HQQ's zero-point format); ``None`` keeps ``HQQ_DEFAULT``'s.
    :param token_rows: HQQ's ``calibration_token_rows`` (0: ``HQQ_DEFAULT``'s, NNCF's per-sample means).
    :param self_calibration: calibrate on text the model generates (used when no dataset is given).
    :param hqq_base: HQQ's parameters before ``zero_point`` and ``token_rows`` apply (None: ``HQQ_DEFAULT``).
    """

    mode: str = "int4_asym"
    group_size: int | None = None
    ratio: float | None = None
    backup_mode: str | None = None
    awq: bool = False
    scale_estimation: bool = False
    hqq: bool = True
    zero_point: str | None = None
    subset_size: int = 128
    ignore: tuple[str, ...] = ()
    quantize_routers: bool = False
    self_calibration: SelfCalibration | None = None
    token_rows: int = 0
    hqq_base: HQQParameters | None = None

    def hqq_params(self) -> HQQParameters | None:
        """``hqq_base`` (``HQQ_DEFAULT``) with the requested zero-point format and token rows, or None (HQQ_DEFAULT
        itself / no HQQ)."""
        if not self.hqq or (self.zero_point is None and self.token_rows == 0):
            return self.hqq_base if self.hqq else None
        changes: dict[str, Any] = {"calibration_token_rows": self.token_rows}
        if self.zero_point is not None:
            changes["zero_point_format"] = ZERO_POINT_FORMATS[self.zero_point]
        return (self.hqq_base or HQQ_DEFAULT).replace(**changes)

    def ignored_scope(self, model: ov.Model) -> nncf.IgnoredScope | None:
        """The layers kept in float: ``ignore`` (regular expressions over layer names) and, unless
        ``quantize_routers``, the MoE routers and scalar gates (``nncf_hqq.moe_gate_matmuls``)."""
        names = [] if self.quantize_routers else moe_gate_matmuls(model)
        if not names and not self.ignore:
            return None
        return nncf.IgnoredScope(names=names, patterns=list(self.ignore))

    def nncf_kwargs(
        self, dataset: nncf.Dataset | None = None, ignored_scope: nncf.IgnoredScope | None = None
    ) -> dict[str, Any]:
        """Keyword arguments of ``nncf.compress_weights`` (with ``hqq``/``hqq_params``) for these options."""
        return {
            "ignored_scope": ignored_scope,
            "mode": MODES[self.mode],
            "group_size": self.group_size,
            "ratio": self.ratio,
            "backup_mode": BACKUP_MODES[self.backup_mode] if self.backup_mode else None,
            "awq": True if self.awq else None,
            "scale_estimation": True if self.scale_estimation else None,
            "dataset": dataset if dataset is not None else self.self_calibration,
            "subset_size": (
                self_calibration_subset_size(self.subset_size, self.self_calibration)
                if self.self_calibration is not None
                else self.subset_size
            ),
            "hqq": self.hqq,
            "hqq_params": self.hqq_params(),
        }


def compress_model(model: Any, options: CompressionOptions, dataset: nncf.Dataset | None = None) -> Any:
    """``nncf.compress_weights`` (HQQ-aware, see ``nncf_hqq.compress_weights``) with the given options, on an
    ``ov.Model`` or a PyTorch model (which needs ``dataset``). MoE routers are found, and kept in float, in an
    ``ov.Model`` only."""
    if isinstance(model, ov.Model):
        ignored = options.ignored_scope(model)
    else:
        ignored = nncf.IgnoredScope(patterns=list(options.ignore)) if options.ignore else None
    return nncf_hqq.compress_weights(model, **options.nncf_kwargs(dataset, ignored))


#: The phases of ``nncf-hqq compress`` that ``compress_timed`` and ``save_model_dir`` time (``StepTimer`` names).
EXPORT_PHASE = "export"
LOADING_PHASE = "loading"
SELF_CALIBRATION_PHASE = "self-calibration text"
COMPRESSION_PHASE = "compression"
STATISTICS_PHASE = "statistics"
OUTPUT_CHECK_PHASE = "output check"
#: The output check's first step, before any compression: the held-out sequences and the float model's logits on them.
OUTPUT_REFERENCE_PHASE = "output check reference"
SAVING_PHASE = "saving"
TOKENIZER_PHASE = "tokenizer conversion"


@contextmanager
def statistics_timed(timer: StepTimer) -> Iterator[None]:
    """For the duration, NNCF's collection of activation statistics for weight compression (the pass of the model
    over the calibration data, ``WeightCompression._collect_statistics`` in NNCF 3.4) is timed as
    ``STATISTICS_PHASE``. Data-free compressions collect none. Without that method nothing is timed."""
    name = "_collect_statistics"
    original = getattr(WeightCompression, name, None)
    if original is None:
        yield
        return

    def timed(*args: Any, **kwargs: Any) -> Any:
        with timer.step(STATISTICS_PHASE):
            return original(*args, **kwargs)

    setattr(WeightCompression, name, timed)
    try:
        yield
    finally:
        setattr(WeightCompression, name, original)


def compress_timed(
    model: Any, options: CompressionOptions, dataset: nncf.Dataset | None = None, timer: StepTimer | None = None
) -> Any:
    """``compress_model`` in timed phases: the self-calibration text the float model generates (when ``options``
    self-calibrate and no ``dataset`` is given), then the compression, with NNCF's statistics nested in it. The
    same model as ``compress_model`` (the text is generated as ``nncf_hqq.compress_weights`` generates it)."""
    if timer is None:
        return compress_model(model, options, dataset)
    if dataset is None and options.self_calibration is not None and isinstance(model, ov.Model):
        with timer.step(SELF_CALIBRATION_PHASE):
            dataset = self_calibration_dataset(model, options.self_calibration)
    with timer.step(COMPRESSION_PHASE), statistics_timed(timer):
        return compress_model(model, options, dataset)


#: The modes ``compress`` self-calibrates in (4-bit groups: AWQ and Scale Estimation apply).
SELF_CALIBRATION_MODES = ("int4_asym", "int4_sym")


def self_calibration_obstacle(options: CompressionOptions, model: ov.Model) -> str | None:
    """Why ``compress`` does not self-calibrate ``model`` with ``options`` (None: it does)."""
    if not options.hqq:
        return "--no-hqq compresses with NNCF's plain round to nearest, without data"
    if options.mode not in SELF_CALIBRATION_MODES:
        return f"{options.mode} is compressed without data (self-calibration applies to int4_asym and int4_sym)"
    try:
        check_generative(model)
    except (nncf.ValidationError, nncf.UnsupportedBackendError):
        return (
            "the model cannot generate (an encoder, or an LLM exported without its KV-cache state), so HQQ compresses "
            "it data-free; pass --dataset TEXT_FILE to calibrate on real text"
        )
    return None


def self_calibrated(
    options: CompressionOptions, files_dir: Path | None, samples: int, prompt_token_ids: Sequence[int] | None = None
) -> CompressionOptions:
    """``options`` with AWQ, Scale Estimation and self-calibration on (``samples`` sequences), generation starting
    from the model's BOS token (``generation_config.json``/``config.json`` in ``files_dir``; random start tokens
    when there is none), followed by a window of ``prompt_token_ids`` (a short user text) when given."""
    bos = sanity.generation_bos_token_id(files_dir)
    params = SELF_CALIBRATION_DEFAULT.replace(
        num_samples=samples,
        start_token_ids=(bos,) if bos is not None else None,
        prompt_token_ids=tuple(prompt_token_ids) if prompt_token_ids is not None else None,
    )
    return dataclasses.replace(options, awq=True, scale_estimation=True, self_calibration=params)


#: Held-out sequences on which ``compress`` checks a self-calibrated model (``compress_checked_on_outputs``).
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
) -> tuple[ov.Model, CompressionOptions, OutputCheck]:
    """The model of ``model_xml`` compressed as each of ``output_check_candidates``, and the one whose
    outputs on held-out generated sequences are closest to the float model's (least KL divergence), with its
    options and what was measured. Judged on the whole model's outputs, so the result is never worse than RTN's
    there. ``timer`` times the float model's part as ``OUTPUT_REFERENCE_PHASE``, the self-calibrated compression's
    phases (``compress_timed``), then the rest of the check as ``OUTPUT_CHECK_PHASE``.

    The float model is never compiled beside a compressed one: before any compression it generates the held-out
    sequences and its logits on them are recorded in a file (``evaluation.RecordedLogits``, in a temporary directory
    under ``scratch_dir``, by default the system's; ``sequences x seq_len x vocab`` float32, removed on return),
    against which the candidates are then evaluated one at a time, each compressed from its own read of
    ``model_xml``. Memory holds the candidate kept so far, the one being compressed or evaluated, and one logits
    block per model: nothing else refers to a candidate, so one that is not kept is freed at once. After each
    compression the pages of the IR's weights file that it read are dropped (``release_file_mappings``): a
    compressed model read from that file keeps it mapped, and the pages NNCF's RTN read would otherwise stay
    resident through the evaluations.
    """
    if self_calibrated.self_calibration is None:
        msg = "the output check compares a self-calibrated compression: self_calibrated.self_calibration is None"
        raise ValueError(msg)
    timer = timer or StepTimer(lambda _: None)
    candidates = output_check_candidates(data_free, self_calibrated)
    weights_file = models.ir_xml(model_xml).with_suffix(".bin")
    with tempfile.TemporaryDirectory(prefix=".nncf-hqq-output-check-", dir=scratch_dir) as scratch:
        with timer.step(OUTPUT_REFERENCE_PHASE):
            held_out = held_out_sequences(read_model(model_xml), self_calibrated.self_calibration)
            release_file_mappings(weights_file)
            reference = evaluation.RecordedLogits.record(model_xml, held_out, Path(scratch) / "float_logits.bin")
            release_file_mappings(weights_file)
        kept, chosen, metrics = _compress_candidates(model_xml, candidates, reference, held_out, log, timer)
        reference.close()
    summary = ", ".join(f"{name} {metrics[name]['kl']:.4f}" for name in candidates)
    log(f"Output check on {len(held_out)} held-out generated sequences, KL vs float: {summary}; keeping {chosen}")
    return kept, candidates[chosen], OutputCheck(chosen, metrics)


def _compress_candidates(
    model_xml: Path,
    candidates: Mapping[str, CompressionOptions],
    reference: evaluation.RecordedLogits,
    held_out: Sequence[np.ndarray],
    log: Callable[[str], None],
    timer: StepTimer,
) -> tuple[ov.Model, str, dict[str, evaluation.Metrics]]:
    """Every candidate compressed from ``model_xml`` (the first in ``compress_timed``'s phases) and evaluated
    against ``reference``: the least-KL one (ties keep the earlier), its name, and
    every candidate's metrics with the reference's as ``fp``."""
    weights_file = models.ir_xml(model_xml).with_suffix(".bin")
    (first, first_options), *others = candidates.items()
    log(f"Output check: compressing the {first} candidate")
    kept = compress_timed(read_model(model_xml), first_options, None, timer)
    release_file_mappings(weights_file)
    with timer.step(OUTPUT_CHECK_PHASE):
        metrics = evaluation.evaluate_llms(reference, {first: kept}, held_out)
        chosen = first
        for name, options in others:
            log(f"Output check: compressing the {name} candidate")
            candidate = compress_model(read_model(model_xml), options)
            release_file_mappings(weights_file)  # the float weights NNCF's RTN read stay mapped in the candidate
            metrics[name] = evaluation.evaluate_llms(reference, {name: candidate}, held_out)[name]
            if metrics[name]["kl"] < metrics[chosen]["kl"]:
                chosen, kept = name, candidate
            del candidate
    return kept, chosen, metrics


#: ``--backend`` choices. ``auto`` and ``openvino``: an OpenVINO IR is compressed as it is, a HF model is exported to
#: an IR first; ``torch``: a HF model is compressed in PyTorch and written as a transformers checkpoint.
BACKENDS = ("auto", "openvino", "torch")
#: Files of a HF model dir that ``save_pretrained`` writes itself (the rest, e.g. the tokenizer, is copied).
_CHECKPOINT_FILE = re.compile(r"(config\.json|generation_config\.json|.*\.safetensors|.*\.bin|.*\.index\.json)")


def backend_for(model: str, backend: str) -> str:
    """The backend that compresses ``model``: ``openvino`` or ``torch``; a ValueError when the input cannot go there."""
    kind = model_kind(model)
    if backend == "torch" and kind in ("ir_xml", "ir_dir"):
        msg = f"MODEL {model!r} is an OpenVINO IR: it is compressed with --backend openvino (torch needs a HF model)"
        raise ValueError(msg)
    return "torch" if backend == "torch" else "openvino"


def torch_example_dataset(vocab_size: int, length: int = 8) -> nncf.Dataset:
    """One short ``input_ids``/``attention_mask`` sample: what NNCF's Torch backend traces the model with when no
    calibration data is given."""
    import torch

    ids = (torch.arange(1, length + 1) % vocab_size)[None]
    return nncf.Dataset([{"input_ids": ids, "attention_mask": torch.ones_like(ids)}])


def torch_calibration_dataset(tokenizer_dir: str | Path, text_path: str | Path, n: int) -> nncf.Dataset:
    """``calibration_dataset``'s windows as torch ``input_ids``/``attention_mask`` for a transformers model."""
    import torch

    tokenizer = evaluation.load_tokenizer(tokenizer_dir)
    samples = evaluation.calibration_samples(tokenizer, text_path, n=n)
    keys = ("input_ids", "attention_mask")
    return nncf.Dataset([{key: torch.from_numpy(sample[key]) for key in keys} for sample in samples])


def compress_hf_checkpoint(
    model: str,
    out_dir: Path,
    options: CompressionOptions,
    dataset: nncf.Dataset | None = None,
    timer: StepTimer | None = None,
) -> list[str]:
    """Compresses a HF causal LM in PyTorch (NNCF's Torch backend) and writes a transformers checkpoint to
    ``out_dir`` that ``AutoModelForCausalLM.from_pretrained`` loads compressed after ``import nncf_hqq.torch``.
    Returns the names of the files copied from the source dir (tokenizer and the like). ``timer`` times the phases
    ``loading``, ``compression`` (``statistics`` in it) and ``saving``."""
    from transformers import AutoModelForCausalLM

    timer = timer or StepTimer(lambda _: None)
    source = Path(model).expanduser()
    with timer.step(LOADING_PHASE):
        hf_model = AutoModelForCausalLM.from_pretrained(source if source.is_dir() else model, dtype="auto").eval()
    if dataset is None:
        dataset = torch_example_dataset(hf_model.config.get_text_config().vocab_size)
    with timer.step(COMPRESSION_PHASE), statistics_timed(timer):
        compressed = compress_model(hf_model, options, dataset)
    with timer.step(SAVING_PHASE):
        out_dir.mkdir(parents=True, exist_ok=True)
        compressed.save_pretrained(out_dir)
        copied = []
        if source.is_dir():
            for src in sorted(p for p in source.iterdir() if p.is_file() and not _CHECKPOINT_FILE.fullmatch(p.name)):
                shutil.copy2(src, out_dir / src.name)
                copied.append(src.name)
    return copied


def read_model(model_xml: str | Path) -> ov.Model:
    """``ov.Core().read_model`` of an IR ``.xml`` (or of the ``openvino_model.xml`` in a directory)."""
    return ov.Core().read_model(models.ir_xml(model_xml))


@dataclass(frozen=True)
class SourceModel:
    """An OpenVINO IR to compress and the directory holding its config/tokenizer files (if any); ``export``: what
    a HF model was exported as (None for an IR given as it is)."""

    xml: Path
    files_dir: Path | None
    export: models.ExportTask | None = None


def is_ir_dir(path: Path) -> bool:
    return path.is_dir() and (path / MODEL_XML).is_file()


def is_genai_dir(path: Path) -> bool:
    """Whether ``path`` holds what ``openvino_genai.LLMPipeline`` loads: the model, tokenizer and detokenizer IRs."""
    return all((path / name).is_file() for name in (MODEL_XML, TOKENIZER_XML, DETOKENIZER_XML))


def is_hf_dir(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file() and not (path / MODEL_XML).is_file()


def looks_like_hub_id(name: str) -> bool:
    """Whether a string that is not an existing path reads as a Hugging Face hub id (``org/name`` or ``name``)."""
    return bool(_HUB_ID.fullmatch(name)) and not name.endswith(".xml")


def model_kind(model: str) -> str:
    """``"ir_xml"``, ``"ir_dir"``, ``"hf_dir"`` or ``"hub_id"``; a ValueError that says why for anything else."""
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".xml":
        return "ir_xml"
    if is_ir_dir(path):
        return "ir_dir"
    if is_hf_dir(path):
        return "hf_dir"
    if path.exists():
        msg = f"MODEL {model!r} is neither an OpenVINO IR (.xml, or a dir with {MODEL_XML}) nor a HF model dir"
        raise ValueError(msg)
    if not looks_like_hub_id(model):
        msg = f"MODEL {model!r} does not exist (expected an OpenVINO IR .xml or dir, a HF model dir or a hub id)"
        raise ValueError(msg)
    return "hub_id"


@contextmanager
def source_model(
    model: str, log: Callable[[str], None] | None = None, timer: StepTimer | None = None, task: str | None = None
) -> Iterator[SourceModel]:
    """The IR of ``model``: an IR ``.xml``, an IR dir, or a HF dir / hub id exported (weights in the checkpoint's
    precision) into a temporary dir (timed as the phase ``export`` by ``timer``) for the task optimum infers
    (``task`` overrides it): a causal LM with its KV cache, or an encoder (a sentence-transformers model with its
    pooling and Dense / Normalize modules). Any other task, and a family the installed stack cannot export for it,
    are refused before loading."""
    kind = model_kind(model)
    path = Path(model).expanduser()
    if kind == "ir_xml":
        yield SourceModel(path, path.parent if (path.parent / "config.json").is_file() else None)
        return
    if kind == "ir_dir":
        yield SourceModel(path / MODEL_XML, path)
        return
    export = export_task(model, task)
    model_type = models.hf_model_type(path) if kind == "hf_dir" else None
    with tempfile.TemporaryDirectory(prefix="nncf-hqq-export-") as tmp:
        if log is not None:
            what = export.describe()
            log(f"Exporting {model} to OpenVINO IR (in the checkpoint's precision) with optimum-intel as {what}")
        try:
            with (timer or StepTimer(lambda _: None)).step(EXPORT_PHASE):
                source = path if kind == "hf_dir" else model
                ir_dir = models.export_to_openvino(source, Path(tmp) / "ov", export.export_task, export.library)
        except Exception as err:
            where = "the Hugging Face hub (is it reachable?)" if kind == "hub_id" else str(path)
            family = f" (model family {model_type!r}, {export.export_task})" if model_type else ""
            msg = f"could not export {model}{family} from {where}: {type(err).__name__}: {err}"
            raise RuntimeError(msg) from err
        yield SourceModel(ir_dir / MODEL_XML, ir_dir, export)


def export_task(model: str, task: str | None = None) -> models.ExportTask:
    """What a HF dir or hub id is exported as (``models.infer_export_task``; ``task`` overrides the inference),
    checked: UnsupportedTaskError for a task ``compress`` does not handle, UnsupportedFamilyError for a family the
    installed transformers / optimum-intel cannot export for it."""
    export = models.infer_export_task(model, task)
    models.check_task(export, model)
    path = Path(model).expanduser()
    model_type = models.hf_model_type(path) if path.is_dir() else None
    if model_type is not None:
        obstacle = models.export_obstacle(model_type, export.export_task, export.library)
        if obstacle is not None:
            raise models.UnsupportedFamilyError(obstacle)
    return export


def prompt_text_token_ids(tokenizer_dir: str | Path, text_path: str | Path) -> tuple[int, ...]:
    """The token ids of a short user text (no special tokens added), for ``SelfCalibration.prompt_token_ids``."""
    tokenizer = evaluation.load_tokenizer(tokenizer_dir)
    ids = tokenizer(evaluation.read_text(text_path), add_special_tokens=False, verbose=False)["input_ids"]
    return tuple(int(i) for i in ids)


def calibration_dataset(tokenizer_dir: str | Path, text_path: str | Path, n: int) -> nncf.Dataset:
    """``nncf.Dataset`` of ``n`` random 256-token windows of the text (PROTOCOL.md's calibration, seed 0)."""
    tokenizer = evaluation.load_tokenizer(tokenizer_dir)
    return nncf.Dataset(evaluation.calibration_samples(tokenizer, text_path, n=n))


def side_files(files_dir: Path) -> list[Path]:
    """The files of an optimum-intel model dir other than the model IR: config, generation config, tokenizer..."""
    return sorted(p for p in files_dir.iterdir() if p.is_file() and p.name not in (MODEL_XML, MODEL_BIN, RECORD_NAME))


def generates_text(model: ov.Model) -> bool:
    """Whether ``model`` outputs next-token ``logits`` (an LLM, whose GenAI dir needs a detokenizer too; an encoder's
    needs only the tokenizer)."""
    return any("logits" in port.get_names() for port in model.outputs)


def write_openvino_tokenizers(tokenizer_dir: str | Path, out_dir: Path, with_detokenizer: bool = True) -> list[str]:
    """Convert the Hugging Face tokenizer of ``tokenizer_dir`` with ``openvino_tokenizers.convert_tokenizer`` into
    ``out_dir/openvino_tokenizer.xml/.bin`` and, with ``with_detokenizer``, ``openvino_detokenizer.xml/.bin``: what
    ``openvino_genai`` loads beside the model (an LLM needs both, an encoder only the tokenizer).

    Returns the names of the ``.xml`` files written. Raises what loading or converting the tokenizer raises
    (``ImportError`` without the openvino-tokenizers package).
    """
    import openvino_tokenizers

    hf_tokenizer = evaluation.load_tokenizer(tokenizer_dir)
    converted = openvino_tokenizers.convert_tokenizer(hf_tokenizer, with_detokenizer=with_detokenizer)
    irs = converted if with_detokenizer else (converted,)
    names = [TOKENIZER_XML, DETOKENIZER_XML][: len(irs)]
    out_dir.mkdir(parents=True, exist_ok=True)
    for ir, name in zip(irs, names, strict=True):
        ov.save_model(ir, out_dir / name)
    return names


def ensure_openvino_tokenizers(
    out_dir: Path,
    tokenizer_dir: Path | None,
    with_detokenizer: bool,
    log: Callable[[str], None],
    timer: StepTimer | None = None,
) -> list[str]:
    """The OpenVINO tokenizer IRs of ``out_dir``: kept when already there (copied from the source), otherwise
    written by ``write_openvino_tokenizers`` (timed as ``TOKENIZER_PHASE``). Returns the names written; when they
    cannot be, says why in one ``warning:`` line through ``log`` and returns none (the model dir stays usable with
    optimum-intel, not with openvino_genai)."""
    needed = [TOKENIZER_XML, DETOKENIZER_XML] if with_detokenizer else [TOKENIZER_XML]
    if all((out_dir / name).is_file() for name in needed):
        return []
    consequence = f"openvino_genai will not load {out_dir} (the model itself is written)"
    if tokenizer_dir is None:
        log(f"warning: no tokenizer beside the source model to convert to {TOKENIZER_XML}: {consequence}")
        return []
    try:
        with (timer or StepTimer(lambda _: None)).step(TOKENIZER_PHASE):
            written = write_openvino_tokenizers(tokenizer_dir, out_dir, with_detokenizer)
    except Exception as err:
        reason = (str(err).strip().splitlines() or [""])[0][:200]
        if isinstance(err, ImportError):
            reason += " (pip install -e '.[llm]' installs openvino-tokenizers)"
        log(f"warning: the tokenizer of {tokenizer_dir} was not converted to OpenVINO ({reason}): {consequence}")
        return []
    log(f"OpenVINO tokenizer IRs for openvino_genai: {', '.join(written)}")
    return written


def save_model_dir(
    model: ov.Model,
    out_dir: Path,
    files_dir: Path | None,
    record: Mapping[str, Any] | None = None,
    *,
    tokenizer_dir: Path | None = None,
    log: Callable[[str], None] | None = None,
    timer: StepTimer | None = None,
) -> list[str]:
    """Write ``openvino_model.xml/.bin`` into ``out_dir``, copy the side files of ``files_dir`` and make it an OpenVINO
    GenAI dir: the tokenizer IRs (``ensure_openvino_tokenizers``, from ``tokenizer_dir``, by default ``files_dir``;
    with a detokenizer when the model ``generates_text``).

    Returns the names of the copied files. ``record`` (what was done) goes to ``nncf_hqq_compression.json`` with
    ``phase_seconds``, the seconds of every phase ``timer`` timed (saving and tokenizer conversion included).
    """
    timer = timer or StepTimer(lambda _: None)
    with timer.step(SAVING_PHASE):
        out_dir.mkdir(parents=True, exist_ok=True)
        ov.save_model(model, out_dir / MODEL_XML, compress_to_fp16=False)
        copied = []
        for src in side_files(files_dir) if files_dir is not None else []:
            shutil.copy2(src, out_dir / src.name)
            copied.append(src.name)
    tokenizer_dir = tokenizer_dir or files_dir
    ensure_openvino_tokenizers(out_dir, tokenizer_dir, generates_text(model), log or nncf_logger.info, timer)
    if record is not None:
        record = {**record, "phase_seconds": dict(timer.seconds)}
        (out_dir / RECORD_NAME).write_text(json.dumps(record, indent=2, default=str) + "\n")
    return copied


def versions() -> dict[str, str]:
    return {
        "nncf": nncf.__version__,
        "openvino": ov.get_version(),
        "nncf_hqq": nncf_hqq.__version__,
        "python": platform.python_version(),
    }


# --------------------------------------------------------------------------------------------------------------------
# Evaluation and reports
# --------------------------------------------------------------------------------------------------------------------
#: The phases of ``nncf-hqq evaluate`` (``evaluate_against``).
TOKENIZATION_PHASE = "tokenization"
REFERENCE_CHECK_PHASE = "reference check"
EVALUATION_PHASE = "evaluation"


def default_text() -> Path | None:
    """The shared WikiText-2 test text when it is there (``shared/data/wikitext-2-raw/wiki.test.raw``)."""
    try:
        return models.shared_path("data/wikitext-2-raw/wiki.test.raw")
    except FileNotFoundError:
        return None


def evaluate_against(
    reference: evaluation.ModelLike,
    candidates: Mapping[str, evaluation.ModelLike],
    tokenizer_dir: str | Path,
    text_path: str | Path,
    n_windows: int,
    window: int = evaluation.WINDOW,
    reference_name: str = "fp",
    warn: Callable[[str], None] | None = None,
    timer: StepTimer | None = None,
    one_at_a_time: bool = True,
    config: Mapping[str, str] | None = None,
) -> dict[str, evaluation.Metrics]:
    """PPL, KL vs the reference and top-1 agreement on the first ``n_windows`` windows of the text.

    ``warn`` receives the findings of ``nncf_hqq.llm.sanity`` (text and tokenizer, then the reference perplexity).
    ``timer`` times the phases: ``tokenization``, ``reference check`` (compiling the reference, the sanity checks)
    and ``evaluation``. ``one_at_a_time``: the candidates are compiled and evaluated one after another
    (``evaluation.evaluate_llms``), so memory holds one compiled candidate at a time. ``config``: the OpenVINO CPU
    properties of every model (``evaluation.inference_config``; default f32).
    """
    timer = timer or StepTimer(lambda _: None)
    with timer.step(TOKENIZATION_PHASE):
        tokenizer = evaluation.load_tokenizer(tokenizer_dir)
        text = evaluation.read_text(text_path)
        ids = evaluation.tokenize_text(tokenizer, text_path)
        windows = evaluation.token_windows(ids, n_windows, window, str(text_path))
    with timer.step(REFERENCE_CHECK_PHASE):
        reference_llm = evaluation.StatefulLLM(reference, config)
        findings = sanity.check_tokenized_text(text, ids, reference_llm, model_files_dir(reference), f"{text_path}")
    with timer.step(EVALUATION_PHASE):
        results = evaluation.evaluate_llms(
            reference_llm,
            candidates,
            windows,
            reference_name=reference_name,
            one_at_a_time=one_at_a_time,
            config=config,
        )
    final = sanity.perplexity_warning(results[reference_name]["ppl"], "the reference's perplexity on the windows")
    for finding in [*findings, *([final] if final else [])]:
        if warn is not None:
            warn(finding)
    return results


def check_calibration_text(model_xml: Path, files_dir: Path | None, tokenizer_dir: Path, text_path: Path) -> list[str]:
    """``nncf_hqq.llm.sanity``'s checks of a calibration text, with the model to compress as the reference."""
    tokenizer = evaluation.load_tokenizer(tokenizer_dir)
    ids = evaluation.tokenize_text(tokenizer, text_path)
    llm = evaluation.StatefulLLM(model_xml)
    return sanity.check_tokenized_text(evaluation.read_text(text_path), ids, llm, files_dir, str(text_path))


def model_files_dir(model: evaluation.ModelLike) -> Path | None:
    """The directory of an IR given as a path (where its config.json is); None for in-memory models."""
    if not isinstance(model, str | Path):
        return None
    path = Path(model)
    return path.parent if path.suffix == ".xml" else path


#: A metric column of ``format_table``: the metric's key, its header, the column's width and its number format.
Column = tuple[str, str, int, str]
#: The columns of the LLM metrics (``evaluation.evaluate_llms``).
LLM_COLUMNS: tuple[Column, ...] = (("ppl", "PPL", 10, ".3f"), ("kl", "KL", 10, ".5f"), ("top1", "top-1", 9, ".4f"))


def format_table(
    results: Mapping[str, Mapping[str, float]],
    extra: Mapping[str, Mapping[str, float]] | None = None,
    columns: Sequence[Column] = LLM_COLUMNS,
) -> str:
    """A fixed-width text table: one row per model, PPL / KL / top-1 (or other ``columns``) and ``extra`` columns
    (e.g. compress s)."""
    extra = extra or {}
    extra_columns = sorted({column for row in extra.values() for column in row})
    width = max([len("model"), *(len(name) for name in results)]) + 2
    header = f"{'model':<{width}}" + "".join(f"{title:>{w}}" for _, title, w, _ in columns)
    header += "".join(f"{c:>14}" for c in extra_columns)
    lines = [header, "-" * len(header)]
    for name, m in results.items():
        values = [extra.get(name, {}).get(column) for column in extra_columns]
        cells = "".join(f"{'-':>14}" if v is None else f"{v:>14.1f}" for v in values)
        metrics = "".join(f"{m[key]:>{w}{fmt}}" for key, _, w, fmt in columns)
        lines.append(f"{name:<{width}}{metrics}{cells}")
    return "\n".join(lines)


def write_json(path: Path, record: Mapping[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return path


def require_matplotlib() -> None:
    """Raise a RuntimeError with the install hint when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        msg = "matplotlib is needed for the PNG chart: pip install -e '.[llm]' (or pip install matplotlib)"
        raise RuntimeError(msg) from err


#: The charts of ``write_png`` for the LLM metrics: metric key -> title.
LLM_CHARTS: dict[str, str] = {
    "ppl": "perplexity (lower is better)",
    "kl": "KL vs reference (lower)",
    "top1": "top-1 agreement",
}
#: Metrics whose best value is 1 (the reference's): their axes end just above 1.
AGREEMENT_METRICS = frozenset({"top1", "cosine", "cosine_min", "neighbour_agreement"})


def write_png(
    path: Path,
    results: Mapping[str, Mapping[str, float]],
    title: str,
    reference: str = "fp",
    charts: Mapping[str, str] = LLM_CHARTS,
) -> Path:
    """A bar chart (Agg backend, no display needed) per metric of ``charts``: by default perplexity, KL vs the
    reference and top-1 agreement."""
    require_matplotlib()
    from matplotlib.figure import Figure

    names = list(results)
    colors = ["0.6" if name == reference else f"C{i % 10}" for i, name in enumerate(names)]
    figure = Figure(figsize=(max(9.0, 3.0 + 1.6 * len(names)), 4.2), layout="constrained")
    axes = figure.subplots(1, len(charts))
    for ax, (metric, label) in zip(axes, charts.items(), strict=True):
        values = [results[name][metric] for name in names]
        bars = ax.bar(range(len(names)), values, color=colors)
        ax.bar_label(bars, fmt="%.4g", fontsize=7)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(label, fontsize=9)
        if metric == "ppl":
            low, high = min(values), max(values)
            ax.set_ylim(low - 0.15 * (high - low + 1e-9) if low > 0 else 0, high + 0.1 * (high - low + 1e-9))
        if metric in AGREEMENT_METRICS:
            ax.set_ylim(min(values) - 0.05 * (1 - min(values) + 1e-3), 1.0 + 0.03 * (1 - min(values) + 1e-3))
    figure.suptitle(title, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    return path


def model_label(path: str | Path) -> str:
    """A short name for a model path: its directory name (for ``.../openvino_model.xml`` too) or the file stem."""
    p = Path(path)
    if p.suffix == ".xml":
        return p.parent.name if p.name == MODEL_XML and p.parent.name else p.stem
    return p.name or str(p)


def unique_labels(paths: Sequence[str]) -> dict[str, str]:
    """``{label: path}`` for ``NAME=PATH`` or plain paths (labels from ``model_label``); raises on duplicates."""
    labelled: dict[str, str] = {}
    for item in paths:
        name, sep, path = item.partition("=")
        if not sep or not name or Path(item).exists():
            name, path = model_label(item), item
        if name in labelled:
            msg = f"two models are named {name!r}; name them with NAME=PATH"
            raise ValueError(msg)
        labelled[name] = path
    return labelled
