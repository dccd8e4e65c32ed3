"""HQQ as a step of NNCF's weight-compression pipeline (like NNCF's Scale Estimation)."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable

import numpy as np
from nncf import CompressWeightsMode
from nncf.common.logging.track_progress import track
from nncf.tensor import Tensor
from nncf.tensor import TensorBackend
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns

from nncf_hqq import fast_path
from nncf_hqq import fast_refine
from nncf_hqq import fast_symmetric
from nncf_hqq._nncf_glue import CompressedWeight
from nncf_hqq._nncf_glue import WeightCompressionConfig
from nncf_hqq._nncf_glue import WeightCompressionParameters
from nncf_hqq.conversion import to_compressed_weight
from nncf_hqq.conversion import to_symmetric_compressed_weight
from nncf_hqq.parameters import AttentionRole
from nncf_hqq.parameters import HQQParameters
from nncf_hqq.parameters import Importance
from nncf_hqq.solver import hqq_solve
from nncf_hqq.solver import refine_scale_on_activations
from nncf_hqq.solver import rtn_scale_zero_point
from nncf_hqq.solver import split_into_groups
from nncf_hqq.solver import symmetric_init

#: Starting points ``s / f`` of the data-aware scale refinement (``HQQ.compress_on_activations``).
SCALE_ESTIMATION_FACTORS = (1.0, 0.95, 0.9, 0.85)

#: The compression modes HQQ handles: asymmetric (float or integer zero point) and symmetric (scale only).
ASYMMETRIC_MODES = (CompressWeightsMode.INT4_ASYM, CompressWeightsMode.INT8_ASYM)
SYMMETRIC_MODES = (
    CompressWeightsMode.INT4_SYM,
    CompressWeightsMode.INT8_SYM,
    CompressWeightsMode.INT3_SYM,
    CompressWeightsMode.INT2_SYM,
)
SUPPORTED_MODES = ASYMMETRIC_MODES + SYMMETRIC_MODES
#: ``unit_gain`` acts on codes of this many bits or more: measured better on a real model at 3 and 4 bits
#: (docs/quality.md); at 2 bits the quantization noise it scales up with the signal is as large as the signal,
#: and on a random test model it made the outputs worse, so 2-bit codes keep the refined scale.
UNIT_GAIN_MIN_BITS = 3


def single_reduction_axis(reduction_axes: int | tuple[int, ...], weight_name: str) -> int:
    """The one axis along which groups are formed; HQQ, like NNCF's grouped RTN, needs exactly one."""
    axes = (reduction_axes,) if isinstance(reduction_axes, int) else tuple(reduction_axes)
    if len(axes) != 1:
        msg = f"HQQ expects a single reduction axis for weight '{weight_name}', got {axes}."
        raise ValueError(msg)
    return axes[0]


def as_float32_numpy(weight: Tensor) -> Tensor:
    """OpenVINO tensors (also bf16/f16 ones) become float32 numpy tensors; others are cast. A float32 tensor is
    returned as it is (no weight-sized copy: nothing downstream writes into it)."""
    if weight.backend == TensorBackend.ov:
        weight = weight.as_numpy_tensor()
    return weight if weight.dtype == TensorDataType.float32 else weight.astype(TensorDataType.float32)


def importance_along_groups(
    importance: np.ndarray, weight_shape: tuple[int, ...], reduction_axis: int, group_size: int
) -> Tensor:
    """A per-input-channel vector reshaped to broadcast against the grouped weight."""
    shape = [1] * len(weight_shape)
    shape[reduction_axis] = importance.size
    grouped, _ = split_into_groups(Tensor(importance.reshape(shape)), reduction_axis, group_size)
    return grouped


def group_layout_moves(group_size: int, axis: int) -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]:
    """Maps per-group parameters between NNCF's grouped layout of a weight and ``[..., out, groups, 1]``.

    NNCF keeps the groups where the reduction axis was (``[.., groups, 1, ..]``, or ``[.., 1, ..]`` per channel);
    the canonical layout has them last, which is what the data-aware refinement works in.
    """
    if group_size == -1:
        return (
            lambda t: fns.moveaxis(t, axis, -1)[..., None],
            lambda t: fns.moveaxis(t[..., 0], -1, axis),
        )
    return (
        lambda t: fns.moveaxis(t, (axis, axis + 1), (-2, -1)),
        lambda t: fns.moveaxis(t, (-2, -1), (axis, axis + 1)),
    )


class HQQ:
    """Computes HQQ's compressed weights for the layers of a weight-compression pipeline."""

    def __init__(
        self,
        params: HQQParameters,
        mode: CompressWeightsMode = CompressWeightsMode.INT4_ASYM,
        num_bits: int | None = None,
    ) -> None:
        """
        :param params: HQQ's hyper-parameters.
        :param mode: the primary compression mode; HQQ decides the layers compressed in it. Layers in the backup
            precision (e.g. INT8_ASYM embeddings and lm_head under INT4_ASYM) keep NNCF's round-to-nearest, so
            the largest layers keep OpenVINO's fastest integer-zero-point kernels.
        :param num_bits: bits of the codes HQQ writes instead of the mode's (a ``LowBitMode`` below INT4_ASYM);
            every layer of the primary precision then gets HQQ's parameters with an f16 zero point.
        """
        if mode not in SUPPORTED_MODES:
            msg = f"HQQ supports the modes {', '.join(m.name for m in SUPPORTED_MODES)}; got {mode}."
            raise ValueError(msg)
        if num_bits is not None and (mode != CompressWeightsMode.INT4_ASYM or not 1 <= num_bits < 4):
            msg = f"num_bits={num_bits} needs mode INT4_ASYM and 1 <= num_bits < 4; got {mode}."
            raise ValueError(msg)
        self.params = params
        self.mode = mode
        self.num_bits = num_bits

    def bits(self, config: WeightCompressionConfig) -> int:
        """Bits of the codes HQQ writes for a weight compressed with ``config``."""
        return self.num_bits if self.num_bits is not None and self.is_applicable(config) else config.num_bits

    @property
    def writes_all_layers(self) -> bool:
        """Whether HQQ writes every applicable layer itself, also those that keep round-to-nearest parameters
        (low-bit codes: NNCF's own writer would store them with the mode's bits)."""
        return self.num_bits is not None

    def is_applicable(self, config: WeightCompressionConfig | None) -> bool:
        """Whether HQQ decides the quantization parameters of a weight compressed with ``config``."""
        return config is not None and config.mode == self.mode

    def keeps_rtn(self, role: AttentionRole | None) -> bool:
        """Whether a weight with this attention role is left to round-to-nearest."""
        return role is not None and role in self.params.rtn_roles

    @property
    def uses_roles(self) -> bool:
        """Whether ``compress`` expects the attention role of each weight."""
        return bool(self.params.rtn_roles)

    @property
    def uses_norm_gain(self) -> bool:
        """Whether ``compress`` expects norm-gain importance for layers that have it."""
        return self.params.importance == Importance.NORM_GAIN

    def compress(
        self,
        weight: Tensor,
        reduction_axis: int,
        config: WeightCompressionConfig,
        importance: np.ndarray | None = None,
        role: AttentionRole | None = None,
    ) -> CompressedWeight:
        """Compresses one weight; the result's tensors are in the grouped shape NNCF uses.

        :param importance: optional per-input-channel weights (length ``weight.shape[reduction_axis]``).
        :param role: the weight's attention role; roles in ``params.rtn_roles`` get NNCF's round-to-nearest.
        """
        params, bits = self.params, self.bits(config)
        grouped, axis = split_into_groups(as_float32_numpy(weight), reduction_axis, config.group_size)
        weights = None
        if importance is not None:
            weights = importance_along_groups(importance, tuple(weight.shape), reduction_axis, config.group_size)
        gain = params.unit_gain and bits >= UNIT_GAIN_MIN_BITS and not self.keeps_rtn(role)
        if config.mode not in SYMMETRIC_MODES:
            return self.compress_asymmetric(grouped, axis, bits, weights, role, gain)
        result = self.compress_symmetric(grouped, axis, bits, weights, role)
        return fast_refine.with_unit_gain(grouped, result, axis) if gain else result

    def compress_asymmetric(
        self,
        grouped: Tensor,
        axis: int,
        bits: int,
        weights: Tensor | None,
        role: AttentionRole | None,
        unit_gain: bool = False,
    ) -> CompressedWeight:
        """Asymmetric HQQ (proximal zero-point loop, refinement, guard, then ``unit_gain`` if asked), or NNCF's
        RTN for a role in ``rtn_roles``."""
        params = self.params
        if self.keeps_rtn(role):
            rtn = to_compressed_weight(grouped, *rtn_scale_zero_point(grouped, axis, bits), bits, True)
            if not self.writes_all_layers:
                return rtn
            return CompressedWeight(rtn.tensor, rtn.scale, rtn.zero_point.astype(TensorDataType.float32))
        if weights is None or not params.weighted_proximal:
            inverse_scale, zero = fast_path.solve(grouped, axis, bits, params)
        else:
            inverse_scale, zero = hqq_solve(grouped, axis, bits, params, weights)
        return fast_refine.finish(grouped, inverse_scale, zero, axis, bits, params, weights, unit_gain)

    def compress_symmetric(
        self, grouped: Tensor, axis: int, bits: int, weights: Tensor | None, role: AttentionRole | None
    ) -> CompressedWeight:
        """Symmetric HQQ (``nncf_hqq.fast_symmetric``), or NNCF's symmetric RTN for a role in ``rtn_roles``."""
        if self.keeps_rtn(role):
            return to_symmetric_compressed_weight(grouped, symmetric_init(grouped, axis, bits), bits)
        return fast_symmetric.compress(grouped, axis, bits, self.params, weights)

    def compress_on_activations(
        self,
        weight: Tensor,
        reduction_axis: int,
        config: WeightCompressionConfig,
        activations: Tensor,
        importance: np.ndarray | None = None,
        role: AttentionRole | None = None,
    ) -> CompressedWeight:
        """HQQ (or RTN for a role in ``rtn_roles``), then scale refinement on calibration inputs that keeps the
        zero points.

        :param activations: calibration inputs of the layer, ``[in, samples]`` (or ``[experts, in, samples]``).
        """
        base = self.compress(weight, reduction_axis, config, importance, role)
        if base.zero_point is None:  # symmetric: the data-aware refinement is written for zero points
            return base
        integer_zero_point = not np.issubdtype(base.zero_point.as_numpy_tensor().data.dtype, np.floating)
        weight = as_float32_numpy(weight)
        axis = reduction_axis % weight.ndim
        group_size = config.group_size if config.group_size != -1 else weight.shape[axis]
        canonical, _ = split_into_groups(fns.moveaxis(weight, axis, -1), -1, group_size)
        to_canonical, from_canonical = group_layout_moves(config.group_size, axis)
        inverse_scale = 1.0 / to_canonical(base.scale)
        zero = to_canonical(base.zero_point.astype(TensorDataType.float32))
        inputs = activations.astype(TensorDataType.float32)
        grouped_inputs = inputs.reshape((*inputs.shape[:-2], -1, group_size, inputs.shape[-1]))
        inverse_scale = refine_scale_on_activations(
            canonical,
            inverse_scale,
            zero,
            grouped_inputs,
            self.bits(config),
            self.params.scale_estimation_rounds,
            SCALE_ESTIMATION_FACTORS,
        )
        grouped, _ = split_into_groups(weight, axis, config.group_size)
        scale = from_canonical(1.0 / inverse_scale)
        return to_compressed_weight(grouped, scale, from_canonical(zero), self.bits(config), integer_zero_point)

    def apply(
        self,
        weights: Iterable[tuple[WeightCompressionParameters, Tensor]],
    ) -> dict[str, CompressedWeight]:
        """Compresses every applicable weight, like NNCF's Scale Estimation ``apply``.

        :param weights: pairs of NNCF's per-weight compression parameters and the weight itself.
        :return: precomputed compressed weights by weight name, for the backend to write.
        """
        result: dict[str, CompressedWeight] = {}
        for wp, weight in track(list(weights), description="Applying HQQ"):
            if self.is_applicable(wp.compression_config):
                axis = single_reduction_axis(wp.reduction_axes, wp.weight_name)
                result[wp.weight_name] = self.compress(weight, axis, wp.compression_config)
        return result
