"""Hyper-parameters of the HQQ solver and the presets built from them."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import nncf


class ZeroPointFormat(str, Enum):
    """How the zero point of an asymmetric group is stored in the compressed model.

    FLOAT: an f16 constant (OpenVINO CPU runs such layers without its int8 dynamic quantization, more slowly).
    INTEGER: u4/u8 like NNCF's RTN (fastest OpenVINO kernels); HQQ then optimises under that constraint.
    SPLIT: HQQ's float zero point written as the nearest integer one (u4/u8, RTN's fast kernels) plus a
        correction of the layer's output from the sums of its input over each group (``nncf_hqq.openvino.split``;
        int8 correction weights, rounded to about the f16 zero point's own precision): the float zero point's
        model on the integer zero point's kernels, plus the corrections' cost (docs/inference.md). OpenVINO
        backend only.
    """

    FLOAT = "float"
    INTEGER = "integer"
    SPLIT = "split"


class EarlyStopScope(str, Enum):
    """Where the early-stop test of the proximal loop is applied.

    TENSOR: one mean absolute error over the whole weight, as in the published solver.
    GROUP: every quantization group keeps its own best iterate.
    """

    TENSOR = "tensor"
    GROUP = "group"


class Importance(str, Enum):
    """Data-free weighting of the input channels of a MatMul in HQQ's objectives.

    NONE: every weight counts the same (the published objective).
    NORM_GAIN: input channel j counts gamma_j^2, where gamma is the per-channel gain of the normalisation
        layer (RMSNorm/LayerNorm multiplier) that feeds the MatMul: the expected energy of that input channel.
        MatMuls not fed by such a gain keep equal weights.
    """

    NONE = "none"
    NORM_GAIN = "norm_gain"


class AttentionRole(str, Enum):
    """Which attention input a projection MatMul produces (see ``nncf_hqq.openvino.graph``)."""

    QUERY = "query"
    KEY = "key"
    VALUE = "value"


def role_of_outputs(reached: list[AttentionRole]) -> AttentionRole | None:
    """The role of a projection whose output reaches the attention inputs ``reached`` (nearest first): a fused
    projection (Phi-3's ``qkv_proj``) that produces the values among others counts as a value projection, so the
    answer does not depend on which of its outputs a graph search meets first; otherwise the nearest role."""
    if AttentionRole.VALUE in reached:
        return AttentionRole.VALUE
    return reached[0] if reached else None


class LowBitMode(str, Enum):
    """Asymmetric modes below 4 bits, which NNCF has no ``CompressWeightsMode`` for. Pass one as ``mode`` with
    ``hqq=True``: NNCF plans the compression as INT4_ASYM (groups, ratio, backup layers, ignored scope) and HQQ
    writes every layer of the primary precision with ``num_bits`` codes (u2/u3) and f16 scales and zero points.

    On OpenVINO 2026.4 CPU (docs/inference.md): u2 codes with an f16 zero point run compressed; u3 codes run but
    are decompressed to f32 at compile time (no memory saving on CPU); integer u2 zero points fail at inference,
    so these modes take float zero points only.
    """

    INT3_ASYM = "int3_asym"
    INT2_ASYM = "int2_asym"

    @property
    def num_bits(self) -> int:
        return 3 if self is LowBitMode.INT3_ASYM else 2


@dataclass(frozen=True)
class HQQParameters:
    """Hyper-parameters of Half-Quadratic Quantization (Badri & Shaji, 2023).

    ``HQQParameters()`` is the recommended configuration, what ``hqq=True`` uses (also named ``HQQ_DEFAULT``); the
    measurements behind it are in docs/quality.md. ``HQQ_REFERENCE`` is the published solver exactly. Change a
    few fields of either with ``replace`` (``HQQ_REFERENCE.replace(iterations=40)``); a dict given as
    ``hqq_params`` changes the recommended configuration the same way.

    :param lp_norm: p of the lp "norm" (0 < p <= 1) whose proximal (shrinkage) operator sparsifies the error.
    :param beta: initial penalty weight of the half-quadratic splitting (> 0).
    :param kappa: factor by which beta grows each iteration (>= 1).
    :param shrinkage: sparsify the error with the lp proximal operator in every iteration (the published solver;
        off by default).
        False: the sparse error term is zero, so each update is the least-squares zero point (or symmetric scale)
        for the current codes. The two agree wherever no error exceeds the shrinkage-free bound (about 0.17 for
        the published ``beta``, ``lp_norm``), which is where HQQ runs on LLM weights of the usual magnitude; only
        without the shrinkage does the loop not depend on the weights' absolute magnitude, which AWQ's channel
        scaling changes (``lp_norm``, ``beta`` and ``kappa`` are then unused).
    :param iterations: maximal number of proximal iterations (>= 0; 0 keeps the min/max initialisation).
    :param early_stop: stop as soon as the mean absolute error stops decreasing.
    :param early_stop_scope: whether the early stop watches the whole tensor or every group separately.
    :param return_best: return the best iterate seen (default). The published solver instead returns the zero
        point produced by the step after the last improvement (a step that was never evaluated).
    :param zero_point_format: FLOAT (f16 zero point), INTEGER (u4/u8 zero point, optimised under the constraint) or
        SPLIT (HQQ's float zero point, stored as an integer one plus an output correction; see ``ZeroPointFormat``).
    :param rtn_guard: per group, keep NNCF's round-to-nearest result where it reconstructs the weight better
        (by the same, possibly importance-weighted, squared error), so that this error is never above RTN's.
    :param refine_rounds: rounds of alternating least squares after the proximal loop: nearest codes, then the
        (weighted) least-squares scale and zero point for those codes; every group keeps its best iterate. With
        an INTEGER zero point, the zero point is rounded first and only the scale is refit.
    :param preserve_extremes: in the refinement (and in the symmetric modes' proximal scale loop), never let a
        group's min or max be clipped (the scale is capped so both land within half a step of the code range).
        Outlier weights matter more to the model's outputs than their share of the squared error.
    :param importance: data-free weighting of input channels in the refinement and the RTN guard (see
        ``Importance``), and in the proximal loop too when ``weighted_proximal``.
    :param weighted_proximal: also weight the asymmetric proximal loop by ``importance``. Off by default: that
        weighted loop runs on the numpy reference only (no compiled fast path), dozens of times slower, for no
        measurable gain. Symmetric modes always weight their (compiled) scale loop by ``importance``: measured
        better there (both: docs/research-log.md).
    :param unit_gain: finally multiply every group's scale by ``<W, W> / <W_hat, W>`` (codes and zero point
        kept), so that the reconstruction has unit gain along the weight. The least-squares refinement minimises the
        squared error, which attenuates each group by the relative energy of its error; over a deep model that
        attenuation lowers output quality (docs/quality.md). Acts on codes of 3 bits or more
        (``nncf_hqq.hqq.UNIT_GAIN_MIN_BITS``); weights left to RTN by ``rtn_roles`` are not touched.
    :param rtn_roles: attention projections (by ``AttentionRole``) that keep NNCF's round-to-nearest (integer
        zero point) instead of HQQ, e.g. ``("value",)``; found in the OpenVINO graph, data-free.
    :param scale_estimation_rounds: with ``scale_estimation=True`` (calibration data), rounds of data-aware scale
        refinement that start from HQQ's result and keep its zero points (see ``core.refine_scale_on_activations``).
    :param output_guard: with ``scale_estimation=True`` (calibration data), every output channel of a layer takes
        whichever of HQQ's result, NNCF's Scale Estimation result and NNCF's round-to-nearest reproduces the layer's
        outputs on the calibration inputs best (``nncf_hqq.maths.guard``), so that no layer's output error there is
        above NNCF's. HQQ then also competes on the attention roles in ``rtn_roles`` (the outputs decide).
    :param guard_reference: with ``output_guard``, NNCF's Scale Estimation result is one of the guard's choices
        (computed by NNCF's ``ScaleEstimation`` on the same statistics before the writer). False: the guard chooses
        between HQQ's result and NNCF's round-to-nearest, and NNCF's Scale Estimation does not run (about half of a
        data-aware compression's time on Qwen2.5-1.5B's shapes); no layer's output error on the calibration inputs
        is then above round-to-nearest's.
    :param calibration_token_rows: with ``scale_estimation=True`` (calibration data), how many token rows of each
        calibration sample's input to a layer HQQ's scale refinement and output guard fit (drawn at random, a fixed
        seed per layer; ``nncf_hqq.statistics``). 0: NNCF's per-sample means over the tokens, what NNCF's Scale
        Estimation fits (the guard's NNCF reference is always computed on those).
    :param guard_held_out: with ``output_guard``, HQQ's refinement fits the first half of the calibration samples
        and the guard judges on the second half, where HQQ's data-free result competes too; so a row keeps the
        refinement only where it carries over to samples it did not fit.
    :param error_feedback: with ``calibration_token_rows`` > 0, the guard also weighs HQQ's refined grid with its
        codes rounded column by column with GPTQ's error feedback on the token rows' second moment
        (``nncf_hqq.maths.error_feedback``) instead of to the nearest level. 2-D weights with an asymmetric grid.
    :param error_feedback_damp: the share of the second moment's mean diagonal added to its diagonal before it is
        inverted for ``error_feedback`` (GPTQ's dampening; more for fewer token rows).
    """

    lp_norm: float = 0.7
    beta: float = 10.0
    kappa: float = 1.01
    shrinkage: bool = False
    iterations: int = 20
    early_stop: bool = True
    early_stop_scope: EarlyStopScope = EarlyStopScope.TENSOR
    return_best: bool = True
    zero_point_format: ZeroPointFormat = ZeroPointFormat.FLOAT
    rtn_guard: bool = True
    refine_rounds: int = 5
    preserve_extremes: bool = True
    importance: Importance = Importance.NORM_GAIN
    weighted_proximal: bool = False
    scale_estimation_rounds: int = 4
    unit_gain: bool = True
    rtn_roles: tuple[AttentionRole, ...] = (AttentionRole.VALUE,)
    output_guard: bool = True
    guard_reference: bool = True
    calibration_token_rows: int = 0
    guard_held_out: bool = False
    error_feedback: bool = False
    error_feedback_damp: float = 0.1

    def __post_init__(self) -> None:
        _check_number("lp_norm", self.lp_norm, lambda v: 0.0 < v <= 1.0, "in (0, 1]")
        _check_number("beta", self.beta, lambda v: v > 0.0, "> 0")
        _check_number("kappa", self.kappa, lambda v: v >= 1.0, ">= 1")
        _check_number("error_feedback_damp", self.error_feedback_damp, lambda v: v > 0.0, "> 0")
        for name in ("iterations", "refine_rounds", "scale_estimation_rounds", "calibration_token_rows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                msg = f"HQQParameters.{name} must be an integer >= 0, got {value!r}."
                raise nncf.ValidationError(msg)
        for name in (
            "shrinkage",
            "early_stop",
            "return_best",
            "rtn_guard",
            "preserve_extremes",
            "weighted_proximal",
            "unit_gain",
            "output_guard",
            "guard_reference",
            "guard_held_out",
            "error_feedback",
        ):
            if not isinstance(getattr(self, name), bool):
                msg = f"HQQParameters.{name} must be a bool, got {getattr(self, name)!r}."
                raise nncf.ValidationError(msg)
        if self.error_feedback and self.calibration_token_rows == 0:
            msg = (
                "HQQParameters.error_feedback=True needs calibration_token_rows > 0 (the error feedback fits token "
                "rows; NNCF's per-sample means are too few), got calibration_token_rows=0."
            )
            raise nncf.ValidationError(msg)
        _coerce_enum(self, "early_stop_scope", EarlyStopScope)
        _coerce_enum(self, "zero_point_format", ZeroPointFormat)
        _coerce_enum(self, "importance", Importance)
        _coerce_roles(self)

    def replace(self, **changes: Any) -> HQQParameters:
        """A copy with the given fields changed, validated like a new instance."""
        known = {field.name for field in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            msg = f"Unknown HQQ parameter(s) {unknown}; known: {sorted(known)}."
            raise nncf.ValidationError(msg)
        return dataclasses.replace(self, **changes)


def _check_number(name: str, value: object, ok: Callable[[float], bool], expected: str) -> None:
    finite = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not finite or not ok(float(value)):  # type: ignore[arg-type]
        msg = f"HQQParameters.{name} must be a finite number {expected}, got {value!r}."
        raise nncf.ValidationError(msg)


def _coerce_enum(params: HQQParameters, name: str, enum_cls: type[Enum]) -> None:
    value = getattr(params, name)
    try:
        object.__setattr__(params, name, enum_cls(value))
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in enum_cls)
        msg = f"HQQParameters.{name} must be one of {allowed}, got {value!r}."
        raise nncf.ValidationError(msg) from None


def _coerce_roles(params: HQQParameters) -> None:
    roles = params.rtn_roles
    allowed = ", ".join(repr(r.value) for r in AttentionRole)
    if isinstance(roles, (str, AttentionRole)) or not isinstance(roles, (tuple, list, set, frozenset)):
        msg = f"HQQParameters.rtn_roles must be a tuple of roles ({allowed}), got {roles!r}."
        raise nncf.ValidationError(msg)
    try:
        coerced = tuple(sorted({AttentionRole(r) for r in roles}, key=lambda r: r.value))
    except ValueError:
        msg = f"HQQParameters.rtn_roles must hold roles from {allowed}, got {roles!r}."
        raise nncf.ValidationError(msg) from None
    object.__setattr__(params, "rtn_roles", coerced)


#: What ``hqq=True`` uses: ``HQQParameters()``. The published solver (returning its best iterate) without its lp
#: shrinkage; 5 rounds of least-squares refinement that never clip a group's minimum or maximum weight; objectives
#: weighted by the norm-gain input energy; the per-group RTN guard; NNCF's RTN for attention value projections; and
#: finally scales rescaled to unit gain along the weight. Chosen by model-quality measurements (docs/quality.md).
HQQ_DEFAULT = HQQParameters()

#: ``HQQ_DEFAULT`` with HQQ's data-aware refinement and output guard fitting 32 token rows of each calibration
#: sample instead of NNCF's per-sample means (``calibration_token_rows``). On self-generated text (32 sequences):
#: better KL and top-1 on SmolLM2 and the Qwen model and better perplexity on the Qwen model, at 1.5x the
#: compression time of ``HQQ_DEFAULT`` (docs/self_calibration.md). The rows kept grow with the number of samples.
HQQ_TOKEN_ROWS = HQQ_DEFAULT.replace(calibration_token_rows=32)

#: What NNCF with the whole pull-request series (upstream/, patches 0001-0005) writes with its default
#: ``AdvancedHQQParameters``: ``HQQ_DEFAULT`` with HQQ's iterations run until each group converges (its zero point,
#: or symmetric scale, no longer changes) and the last iterate kept, instead of the early stop on the tensor's mean
#: absolute error and its best iterate: NNCF's solver runs every block of groups to its end in one thread, which
#: the tensor's stop would synchronise every iteration (docs/upstreaming.md, the compression time of 0001).
HQQ_SERIES = HQQ_DEFAULT.replace(early_stop=False, return_best=False)

#: What NNCF with HQQ's core pull request (upstream/, patch 0001) writes with its default ``AdvancedHQQParameters``:
#: HQQ's zero-point iterations (each group until it converges) and NNCF's RTN for the attention value projections,
#: without least-squares rounds, input weighting, RTN guard or unit gain (0003 adds those back, the rounds beside the
#: RTN guard that catches the groups they make worse: the series' sum is ``HQQ_SERIES``). 0001 has no compiled
#: kernels: it writes the bytes of this preset's numpy references (``NNCF_DISABLE_OPTIMIZED_COMPRESSION`` set), which
#: the kernels reproduce to f32 rounding.
HQQ_CORE = HQQ_SERIES.replace(
    importance=Importance.NONE, rtn_guard=False, unit_gain=False, output_guard=False, refine_rounds=0
)

#: The solver exactly as published in the reference ``hqq`` library (legacy proximal solver, float zero point):
#: min/max initialisation, 20 proximal zero-point iterations with the lp shrinkage (p = 0.7, beta = 10,
#: kappa = 1.01), early stop on the tensor's mean absolute error, and the zero point of the step after the last
#: improvement.
HQQ_REFERENCE = HQQParameters(
    shrinkage=True,
    return_best=False,
    rtn_guard=False,
    refine_rounds=0,
    preserve_extremes=False,
    importance=Importance.NONE,
    unit_gain=False,
    rtn_roles=(),
    output_guard=False,
)
