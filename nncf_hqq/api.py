"""``compress_weights``: NNCF's entry point with the ``hqq`` and ``hqq_params`` options."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any
from typing import ParamSpec
from typing import TypeVar

import nncf
import openvino as ov
from nncf import BackupMode
from nncf import CompressionFormat
from nncf import CompressWeightsMode
from nncf import Dataset
from nncf import IgnoredScope
from nncf import SensitivityMetric
from nncf.quantization.advanced_parameters import AdvancedCompressionParameters as NNCFAdvancedCompressionParameters

from nncf_hqq._nncf import check_user_compression_configuration
from nncf_hqq._nncf import check_versions
from nncf_hqq._nncf import original_compress_weights
from nncf_hqq.hqq import HQQ
from nncf_hqq.hqq import SUPPORTED_MODES
from nncf_hqq.integration import weight_compression_with_hqq
from nncf_hqq.parameters import HQQ_DEFAULT
from nncf_hqq.parameters import HQQParameters
from nncf_hqq.parameters import LowBitMode
from nncf_hqq.parameters import ZeroPointFormat
from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT
from nncf_hqq.self_calibration import SelfCalibration
from nncf_hqq.self_calibration import self_calibration_dataset
from nncf_hqq.self_calibration import self_calibration_subset_size

TModel = TypeVar("TModel")
P = ParamSpec("P")
R = TypeVar("R")

#: ``dataset=SELF_DATASET``: calibration text the model generates itself (``nncf_hqq.self_calibration``).
SELF_DATASET = "self"

#: The modes HQQ writes on PyTorch models: NNCF's Torch backend has decompressors for 4- and 8-bit codes.
TORCH_MODES = (
    CompressWeightsMode.INT4_ASYM,
    CompressWeightsMode.INT4_SYM,
    CompressWeightsMode.INT8_ASYM,
    CompressWeightsMode.INT8_SYM,
)
TORCH_MODE_NAMES = ", ".join(mode.name for mode in TORCH_MODES)


def arguments_bound_first(function: Callable[P, R]) -> Callable[P, R]:
    """``function`` that binds its arguments to its signature before it runs, as NNCF's ``compress_weights`` does
    (its telemetry decorator), so that a wrong argument (an unknown keyword, a positional one) raises NNCF's
    ``TypeError``, word for word."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def bound_first(*args: P.args, **kwargs: P.kwargs) -> R:
        signature.bind(*args, **kwargs)
        return function(*args, **kwargs)

    return bound_first


@dataclasses.dataclass
class AdvancedCompressionParameters(NNCFAdvancedCompressionParameters):
    """NNCF's advanced compression parameters plus ``hqq_params`` (used when ``hqq=True``)."""

    hqq_params: HQQParameters | None = None


@arguments_bound_first
def compress_weights(
    model: TModel,
    *,
    mode: CompressWeightsMode | LowBitMode = CompressWeightsMode.INT8_ASYM,
    ratio: float | None = None,
    group_size: int | None = None,
    ignored_scope: IgnoredScope | None = None,
    all_layers: bool | None = None,
    dataset: Dataset | SelfCalibration | str | None = None,
    sensitivity_metric: SensitivityMetric | None = None,
    subset_size: int = 128,
    awq: bool | None = None,
    scale_estimation: bool | None = None,
    gptq: bool | None = None,
    lora_correction: bool | None = None,
    backup_mode: BackupMode | None = None,
    compression_format: CompressionFormat = CompressionFormat.DQ,
    advanced_parameters: NNCFAdvancedCompressionParameters | None = None,
    hqq: bool | None = None,
    hqq_params: HQQParameters | dict[str, Any] | None = None,
    target_parameters: Sequence[str] | None = None,
) -> TModel:
    """``nncf.compress_weights`` with Half-Quadratic Quantization.

    All NNCF parameters mean what they mean in ``nncf.compress_weights``; with ``hqq`` falsy the call is
    NNCF's own, unchanged. With ``hqq=True`` HQQ decides the scales and zero points of the layers compressed in
    ``mode``; layers in the backup precision keep NNCF's round-to-nearest. OpenVINO models: modes INT4_ASYM,
    INT8_ASYM, INT4_SYM, INT8_SYM, INT3_SYM, INT2_SYM, and ``nncf_hqq.LowBitMode.INT3_ASYM`` / ``INT2_ASYM``.
    PyTorch models (``torch.nn.Module``, through NNCF's Torch backend, which needs ``dataset`` to trace the
    model): INT4_ASYM, INT8_ASYM, INT4_SYM, INT8_SYM; a transformers model can then be saved with
    ``save_pretrained`` and loaded back after ``import nncf_hqq.torch`` (``nncf_hqq.torch.checkpoint``).

    :param dataset: NNCF's calibration dataset; or ``"self"`` (or an ``nncf_hqq.SelfCalibration``): the float
        model (a stateful OpenVINO LLM) first generates its own calibration text (``nncf_hqq.self_calibration``),
        with or without ``hqq``. Recommended with ``awq=True, scale_estimation=True, hqq=True``. Then a
        ``subset_size`` left at its default (128) becomes the number of generated sequences. Without ``hqq``, any
        other value is passed to NNCF as it is.
    :param hqq: whether to use HQQ.
    :param hqq_params: HQQ's hyper-parameters: an ``HQQParameters``, or a dict of fields to change in the
        recommended configuration (``HQQParameters()``). They can also be given as
        ``nncf_hqq.AdvancedCompressionParameters(hqq_params=...)``. Defaults to ``HQQParameters()``.
    :param target_parameters: (PyTorch models) glob patterns of parameter names that HQQ compresses in ``mode``
        besides the weights NNCF finds, e.g. the 3D expert tensors of MoE layers, which NNCF leaves in float.
        Defaults to transformers' expert tensors (``nncf_hqq.torch.DEFAULT_TARGET_PARAMETERS``); ``()`` targets
        none. A given pattern that matches no parameter is an error.
    :return: the model with compressed weights.
    """
    nncf_arguments = {
        "mode": mode,
        "ratio": ratio,
        "group_size": group_size,
        "ignored_scope": ignored_scope,
        "all_layers": all_layers,
        "dataset": dataset,
        "sensitivity_metric": sensitivity_metric,
        "subset_size": subset_size,
        "awq": awq,
        "scale_estimation": scale_estimation,
        "gptq": gptq,
        "lora_correction": lora_correction,
        "backup_mode": backup_mode,
        "compression_format": compression_format,
        "advanced_parameters": advanced_parameters,
    }
    self_calibration = self_calibration_request(dataset)
    if self_calibration is not None:
        validate_self_calibration(model, nncf_arguments)
        nncf_arguments["subset_size"] = self_calibration_subset_size(subset_size, self_calibration)
    if not hqq:
        validate_without_hqq(mode, hqq_params, target_parameters, advanced_parameters)
        nncf_arguments["dataset"] = calibration_dataset(model, self_calibration, nncf_arguments)
        return original_compress_weights(model, **nncf_arguments)
    validate_dataset_argument(dataset)
    low_bit = low_bit_mode(mode)
    params = resolve_hqq_parameters(hqq_params, advanced_parameters)
    torch_model = is_torch_model(model)
    if low_bit is not None:
        validate_low_bit_request(low_bit, params, nncf_arguments, torch_model)
        nncf_arguments["mode"] = mode = CompressWeightsMode.INT4_ASYM
    validate_hqq_request(model, mode, gptq, compression_format)
    validate_target_parameters(target_parameters, torch_model)
    if torch_model and params.zero_point_format == ZeroPointFormat.SPLIT:
        msg = (
            "zero_point_format='split' is an OpenVINO graph format (integer zero points plus output corrections); "
            "PyTorch models take 'float' or 'integer'. openvino.convert_model of a model compressed with 'float' "
            "keeps its f16 zero points."
        )
        raise nncf.ValidationError(msg)
    scale_estimation_params = (advanced_parameters or NNCFAdvancedCompressionParameters()).scale_estimation_params
    hqq_algorithm = HQQ(
        params,
        mode,
        low_bit.num_bits if low_bit is not None else None,
        scale_estimation_params.subset_size,
        scale_estimation_params,
    )
    nncf_arguments["dataset"] = calibration_dataset(model, self_calibration, nncf_arguments)
    with weight_compression_with_hqq(hqq_algorithm, torch_model, target_parameters):
        compressed = original_compress_weights(model, **nncf_arguments)
    if torch_model:
        from nncf_hqq.torch import describe_compressed_model  # imports torch

        describe_compressed_model(compressed)
    return compressed


def self_calibration_request(dataset: object) -> SelfCalibration | None:
    """The self-calibration a ``dataset`` argument asks for: ``"self"`` (``SELF_CALIBRATION_DEFAULT``) or a
    ``SelfCalibration``; None for anything else, which is NNCF's to judge."""
    if isinstance(dataset, SelfCalibration):
        return dataset
    if isinstance(dataset, str) and dataset == SELF_DATASET:
        return SELF_CALIBRATION_DEFAULT
    return None


def validate_dataset_argument(dataset: object) -> None:
    """With ``hqq=True``, a string other than ``"self"`` is an error (without HQQ, NNCF judges it)."""
    if isinstance(dataset, str) and dataset != SELF_DATASET:
        msg = (
            f"dataset={dataset!r} is not a dataset; pass an nncf.Dataset, {SELF_DATASET!r} (calibration text the "
            "model generates itself) or an nncf_hqq.SelfCalibration."
        )
        raise nncf.ValidationError(msg)


def validate_self_calibration(model: object, nncf_arguments: dict[str, Any]) -> None:
    """Self-calibration generates with an OpenVINO model, and only for a call that uses data."""
    if is_torch_model(model):
        msg = (
            "Self-calibration (dataset='self') generates with an OpenVINO model; for a PyTorch model pass an "
            "nncf.Dataset of real inputs."
        )
        raise nncf.UnsupportedBackendError(msg)
    validate_data_is_used(nncf_arguments)


def validate_data_is_used(nncf_arguments: dict[str, Any]) -> None:
    """Self-calibration generates text for minutes on a large model: refuse it when no step of the call uses data
    (AWQ, Scale Estimation, GPTQ, LoRA correction, or mixed precision with ``ratio`` < 1)."""
    data_aware = [n for n in ("awq", "scale_estimation", "gptq", "lora_correction") if nncf_arguments[n]]
    ratio = nncf_arguments["ratio"]
    if not data_aware and (ratio is None or ratio >= 1.0):
        msg = (
            "dataset='self' generates calibration text, but no step of this call uses data: add awq=True and "
            "scale_estimation=True (recommended), gptq=True, lora_correction=True or ratio < 1, or drop the dataset."
        )
        raise nncf.ValidationError(msg)


def validate_without_hqq(
    mode: object,
    hqq_params: object,
    target_parameters: object,
    advanced_parameters: NNCFAdvancedCompressionParameters | None,
) -> None:
    """Without ``hqq``, only ``nncf_hqq``'s own objects are refused (HQQ's options, a ``LowBitMode``); everything
    else reaches NNCF as it was given, so NNCF raises what it raises."""
    given = {
        "hqq_params": hqq_params,
        "target_parameters": target_parameters,
        "advanced_parameters.hqq_params": getattr(advanced_parameters, "hqq_params", None),
    }
    for name, value in given.items():
        if value is not None:
            msg = f"{name} was given but hqq is not enabled; pass hqq=True to use HQQ."
            raise nncf.ValidationError(msg)
    if isinstance(mode, LowBitMode):
        msg = f"mode={mode.name} is written by HQQ only (NNCF has no such mode); pass hqq=True."
        raise nncf.ValidationError(msg)


def calibration_dataset(
    model: Any, self_calibration: SelfCalibration | None, nncf_arguments: dict[str, Any]
) -> Dataset | None:
    """The ``nncf.Dataset`` NNCF gets: the given one, or the model's self-generated one. Before generating (minutes
    on a large model), NNCF's own check of the other arguments runs, so that a call NNCF refuses fails at once."""
    if self_calibration is None:
        return nncf_arguments["dataset"]
    check_user_compression_configuration(**{**nncf_arguments, "dataset": Dataset([None])})
    return self_calibration_dataset(model, self_calibration)


def is_torch_model(model: object) -> bool:
    """Whether ``model`` is a ``torch.nn.Module`` (without importing torch: one cannot exist before it is)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def low_bit_mode(mode: object) -> LowBitMode | None:
    """The ``LowBitMode`` that ``mode`` names (the enum or its value, e.g. ``"int2_asym"``), else None."""
    if isinstance(mode, LowBitMode):
        return mode
    if isinstance(mode, str) and not isinstance(mode, CompressWeightsMode):
        try:
            return LowBitMode(mode.lower())
        except ValueError:
            return None
    return None


def validate_low_bit_request(
    low_bit: LowBitMode, params: HQQParameters, nncf_arguments: dict[str, Any], torch_model: bool = False
) -> None:
    """What a ``LowBitMode`` cannot be combined with: NNCF's data-aware steps work on the 4-bit grid of the
    INT4_ASYM plan, OpenVINO CPU fails on integer u2 zero points, and the Torch backend stores 4- and 8-bit codes
    only."""
    if torch_model:
        msg = f"mode={low_bit.name} is written for OpenVINO models only; PyTorch models take {TORCH_MODE_NAMES}."
        raise nncf.ValidationError(msg)
    data_aware = [name for name in ("awq", "scale_estimation", "gptq", "lora_correction") if nncf_arguments[name]]
    if data_aware:
        msg = (
            f"mode={low_bit.name} cannot be combined with {', '.join(data_aware)}: NNCF's data-aware steps would "
            "optimise a 4-bit grid. Use INT4_ASYM with them, or the low-bit mode data-free."
        )
        raise nncf.ValidationError(msg)
    if params.zero_point_format != ZeroPointFormat.FLOAT:
        msg = (
            f"mode={low_bit.name} needs float zero points (HQQParameters.zero_point_format='float'); integer "
            f"u{low_bit.num_bits} zero points fail at inference on OpenVINO CPU (docs/openvino_u2_reproducer.py)."
        )
        raise nncf.ValidationError(msg)


def resolve_hqq_parameters(
    hqq_params: HQQParameters | dict[str, Any] | None, advanced_parameters: NNCFAdvancedCompressionParameters | None
) -> HQQParameters:
    """The HQQ parameters from ``hqq_params`` or the advanced parameters (not both), else ``HQQ_DEFAULT``; a dict
    changes those fields of ``HQQ_DEFAULT``."""
    advanced = getattr(advanced_parameters, "hqq_params", None)
    if hqq_params is not None and advanced is not None:
        msg = "HQQ parameters were given twice: as hqq_params and as advanced_parameters.hqq_params. Give one."
        raise nncf.ValidationError(msg)
    chosen = hqq_params if hqq_params is not None else advanced
    if chosen is None:
        return HQQ_DEFAULT
    if isinstance(chosen, HQQParameters):
        return chosen
    if isinstance(chosen, dict):
        return HQQ_DEFAULT.replace(**chosen)
    msg = f"hqq_params must be an nncf_hqq.HQQParameters or a dict, got {type(chosen).__name__}."
    raise nncf.ValidationError(msg)


def validate_hqq_request(
    model: object, mode: CompressWeightsMode, gptq: bool | None, compression_format: CompressionFormat
) -> None:
    """Rejects what HQQ cannot do yet, before anything touches the model."""
    torch_model = is_torch_model(model)
    if not isinstance(model, ov.Model) and not torch_model:
        msg = (
            f"HQQ weight compression supports OpenVINO models (openvino.Model) and PyTorch models "
            f"(torch.nn.Module); got a {type(model).__module__}.{type(model).__name__}. Convert the model with "
            "openvino.convert_model or export it with optimum-intel first."
        )
        raise nncf.UnsupportedBackendError(msg)
    check_versions()
    supported = ", ".join(m.name for m in SUPPORTED_MODES)
    if mode not in SUPPORTED_MODES:
        msg = f"HQQ supports the modes {supported}; got mode={getattr(mode, 'name', mode)}."
        raise nncf.ValidationError(msg)
    if torch_model and mode not in TORCH_MODES:
        msg = (
            f"HQQ supports the modes {TORCH_MODE_NAMES} on PyTorch models (NNCF's Torch backend stores 4- and 8-bit "
            f"codes); got mode={mode.name}. Compress an OpenVINO model for {mode.name}."
        )
        raise nncf.ValidationError(msg)
    if gptq:
        msg = "HQQ cannot be combined with GPTQ (gptq=True); use hqq=True with AWQ/Scale Estimation, or GPTQ alone."
        raise nncf.ValidationError(msg)
    if compression_format != CompressionFormat.DQ:
        msg = f"HQQ writes the DQ compression format only; got compression_format={compression_format}."
        raise nncf.ValidationError(msg)


def validate_target_parameters(target_parameters: Sequence[str] | None, torch_model: bool) -> None:
    """``target_parameters`` is for PyTorch models, a sequence of glob patterns (not a single string)."""
    if target_parameters is None:
        return
    if not torch_model:
        msg = (
            "target_parameters applies to PyTorch models only; on an OpenVINO model NNCF finds every MatMul weight, "
            "3D MoE expert weights included."
        )
        raise nncf.ValidationError(msg)
    if isinstance(target_parameters, str) or not all(isinstance(p, str) for p in target_parameters):
        msg = f"target_parameters must be a sequence of glob patterns (strings), got {target_parameters!r}."
        raise nncf.ValidationError(msg)
