"""One compression with the job's options: ``nncf.compress_weights`` (HQQ-aware) of an IR or a PyTorch model, in
timed phases, with self-calibration decided and a group size that does not fit a model said in one line."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nncf
import openvino as ov

import nncf_hqq
from nncf_hqq._nncf import WeightCompression
from nncf_hqq.llm.layout import read_model
from nncf_hqq.llm.options import GROUP_SIZE_DEFAULT_TEXT
from nncf_hqq.llm.options import SELF_CALIBRATION_MODES
from nncf_hqq.llm.options import CompressionOptions
from nncf_hqq.llm.options import JobError
from nncf_hqq.llm.sanity import generation_bos_token_id
from nncf_hqq.llm.stand_in import running
from nncf_hqq.llm.stand_in import runs_in_place_of_float
from nncf_hqq.llm.stand_in import statistics_collected_on
from nncf_hqq.llm.timing import COMPRESSION_PHASE
from nncf_hqq.llm.timing import LOADING_PHASE
from nncf_hqq.llm.timing import SELF_CALIBRATION_PHASE
from nncf_hqq.llm.timing import STATISTICS_PHASE
from nncf_hqq.llm.timing import StepTimer
from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT
from nncf_hqq.self_calibration import check_generative
from nncf_hqq.self_calibration import self_calibration_dataset

#: The smallest group size ``GroupSizeError`` proposes; below it, per-channel compression.
SMALLEST_PROPOSED_GROUP_SIZE = 16
#: A layer NNCF's group-size check names: ``"NAME" (channel size: N)``.
_FAILED_LAYER = re.compile(r'"([^"]+)" \(channel size: (\d+)\)')


class GroupSizeError(JobError, nncf.InvalidGroupSizeError):
    """The group size given does not divide the input channels of some layers: NNCF's error, in one line that says
    which option fixes it."""


def group_size_error(err: nncf.InvalidGroupSizeError, group_size: int | None) -> nncf.InvalidGroupSizeError:
    """NNCF's multi-line ``InvalidGroupSizeError`` (every layer listed) as a ``GroupSizeError``: how many layers, the
    first, and a group size that divides them all (the greatest common divisor of the one given and their channels)
    or per channel; the default (``GROUP_SIZE_DEFAULT_TEXT``) is named too. NNCF's own error when it lists none."""
    failed = [(name, int(channels)) for name, channels in _FAILED_LAYER.findall(str(err))]
    if not failed or group_size is None:
        return err
    common = math.gcd(group_size, *(channels for _, channels in failed))
    fits = common if common >= SMALLEST_PROPOSED_GROUP_SIZE else -1
    name, channels = failed[0]
    msg = (
        "group size {size} does not divide the input channels of {count} layers (the first: {name}, {channels}): "
        "pass {group_size=" + str(fits) + "}, which divides every layer, or leave {group_size} out for {default}"
    )
    return GroupSizeError(
        msg, size=group_size, count=len(failed), name=name, channels=channels, default=GROUP_SIZE_DEFAULT_TEXT
    )


def compress_model(model: Any, options: CompressionOptions, dataset: nncf.Dataset | None = None) -> Any:
    """``nncf.compress_weights`` (HQQ-aware, see ``nncf_hqq.compress_weights``) with the given options, on an
    ``ov.Model`` or a PyTorch model (which needs ``dataset``). MoE routers are found, and kept in float, in an
    ``ov.Model`` only. A group size that does not divide some layers raises ``GroupSizeError``."""
    if isinstance(model, ov.Model):
        ignored = options.ignored_scope(model)
    else:
        ignored = nncf.IgnoredScope(patterns=list(options.ignore)) if options.ignore else None
    try:
        return nncf_hqq.compress_weights(model, **options.nncf_kwargs(dataset, ignored))
    except nncf.InvalidGroupSizeError as err:
        raise group_size_error(err, options.group_size) from err


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
    model: Any,
    options: CompressionOptions,
    dataset: nncf.Dataset | None = None,
    timer: StepTimer | None = None,
    stand_in: Path | None = None,
) -> Any:
    """``compress_model`` in timed phases: the self-calibration text the float model generates (when ``options``
    self-calibrate and no ``dataset`` is given), then the compression, with NNCF's statistics nested in it. The
    same model as ``compress_model`` (the text is generated as ``nncf_hqq.compress_weights`` generates it).
    ``stand_in``: the float model's INT8 copy (``nncf_hqq.llm.stand_in``), which generates the text and runs the
    statistics' pass in its place (each where ``STAND_IN_PHASES`` says so)."""
    if timer is None:
        return compress_model(model, options, dataset)
    if dataset is None and options.self_calibration is not None and isinstance(model, ov.Model):
        with timer.step(SELF_CALIBRATION_PHASE):
            generator = model
            if runs_in_place_of_float(stand_in, SELF_CALIBRATION_PHASE) and stand_in is not None:
                generator = read_model(stand_in)
            with running(stand_in):
                dataset = self_calibration_dataset(generator, options.self_calibration)
            del generator
    with timer.step(COMPRESSION_PHASE), statistics_timed(timer), statistics_collected_on(stand_in):
        return compress_model(model, options, dataset)


def self_calibration_obstacle(options: CompressionOptions, model: ov.Model) -> str | None:
    """Why the job does not self-calibrate ``model`` with ``options`` (None: it does), as a message that names options
    (``nncf_hqq.llm.options.render``)."""
    if not options.hqq:
        return "{no_hqq} compresses with NNCF's plain round to nearest, without data"
    if options.mode not in SELF_CALIBRATION_MODES:
        return f"{options.mode} is compressed without data (self-calibration applies to int4_asym and int4_sym)"
    try:
        check_generative(model)
    except (nncf.ValidationError, nncf.UnsupportedBackendError):
        return (
            "the model cannot generate (an encoder, or an LLM exported without its KV-cache state), so HQQ compresses "
            "it data-free; pass {dataset=TEXT_FILE} to calibrate on real text"
        )
    return None


def self_calibrated(
    options: CompressionOptions, files_dir: Path | None, samples: int, prompt_token_ids: Sequence[int] | None = None
) -> CompressionOptions:
    """``options`` with AWQ, Scale Estimation and self-calibration on (``samples`` sequences), generation starting
    from the model's BOS token (``generation_config.json``/``config.json`` in ``files_dir``; random start tokens
    when there is none), followed by a window of ``prompt_token_ids`` (a short user text) when given."""
    bos = generation_bos_token_id(files_dir)
    params = SELF_CALIBRATION_DEFAULT.replace(
        num_samples=samples,
        start_token_ids=(bos,) if bos is not None else None,
        prompt_token_ids=tuple(prompt_token_ids) if prompt_token_ids is not None else None,
    )
    return dataclasses.replace(options, awq=True, scale_estimation=True, self_calibration=params)


def torch_example_dataset(vocab_size: int, length: int = 8) -> nncf.Dataset:
    """One short ``input_ids``/``attention_mask`` sample: what NNCF's Torch backend traces the model with when no
    calibration data is given."""
    import torch

    ids = (torch.arange(1, length + 1) % vocab_size)[None]
    return nncf.Dataset([{"input_ids": ids, "attention_mask": torch.ones_like(ids)}])


def compress_hf_model(
    model: str | Path, options: CompressionOptions, dataset: nncf.Dataset | None, timer: StepTimer
) -> Any:
    """A HF causal LM (a dir or a hub id) loaded in PyTorch (``LOADING_PHASE``) and compressed through NNCF's Torch
    backend (``COMPRESSION_PHASE``, ``STATISTICS_PHASE`` in it), traced with ``dataset`` or one short sample."""
    from transformers import AutoModelForCausalLM

    with timer.step(LOADING_PHASE):
        hf_model = AutoModelForCausalLM.from_pretrained(str(model), dtype="auto").eval()
    if dataset is None:
        dataset = torch_example_dataset(hf_model.config.get_text_config().vocab_size)
    with timer.step(COMPRESSION_PHASE), statistics_timed(timer):
        return compress_model(hf_model, options, dataset)
