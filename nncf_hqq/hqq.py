"""Half-Quadratic Quantization (HQQ) as a step of NNCF's weight-compression pipeline.

``HQQ`` is written like NNCF's ``ScaleEstimation``: ``HQQ.apply`` takes the model, its ``NNCFGraph``, NNCF's
per-weight compression parameters and (optionally) the calibration statistics, and returns the compressed weights
(codes, scales, zero points) by weight name for the backend to write. The maths is backend-agnostic
(``nncf_hqq.maths``, run through the compiled kernels of ``nncf_hqq.kernels`` where they apply); what HQQ needs to
know about a weight's place in the model (the input energy of its channels, its attention role) comes from the
backend (``HQQAlgoBackend``).
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import nncf
import numpy as np
from nncf import CompressWeightsMode
from nncf.common.logging import nncf_logger
from nncf.tensor import Tensor
from nncf.tensor import TensorBackend
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns

from nncf_hqq._nncf import CompressedWeight
from nncf_hqq._nncf import NNCFGraph
from nncf_hqq._nncf import ScaleEstimation
from nncf_hqq._nncf import WeightCompressionAlgoBackend
from nncf_hqq._nncf import WeightCompressionConfig
from nncf_hqq._nncf import WeightCompressionParameters
from nncf_hqq._nncf import process_stats
from nncf_hqq.kernels import proximal
from nncf_hqq.kernels import refine
from nncf_hqq.kernels import symmetric
from nncf_hqq.kernels.activations import refine_scale_on_activations
from nncf_hqq.maths.conversion import contiguous
from nncf_hqq.maths.conversion import to_compressed_weight
from nncf_hqq.maths.conversion import to_symmetric_compressed_weight
from nncf_hqq.maths.core import equivalent_inputs
from nncf_hqq.maths.core import rtn_scale_zero_point
from nncf_hqq.maths.core import split_into_groups
from nncf_hqq.maths.error_feedback import error_feedback_codes
from nncf_hqq.maths.grids import symmetric_init
from nncf_hqq.maths.guard import choose_per_row
from nncf_hqq.maths.solver import hqq_solve
from nncf_hqq.parameters import AttentionRole
from nncf_hqq.parameters import HQQParameters
from nncf_hqq.parameters import Importance

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
#: ``unit_gain`` acts on codes of this many bits or more: measured better on a real model at 3 and 4 bits; at 2
#: bits the quantization noise it scales up with the signal is as large as the signal, and on a random test model
#: it made the outputs worse, so 2-bit codes keep the refined scale (docs/research-log.md).
UNIT_GAIN_MIN_BITS = 3
#: Added to every input importance, relative to their mean, so that no group has a total weight of zero.
IMPORTANCE_FLOOR = 1e-4


def reduction_axes_tuple(reduction_axes: int | tuple[int, ...], ndim: int) -> tuple[int, ...]:
    """NNCF's reduction axes of a weight as a sorted tuple of non-negative axes."""
    axes = (reduction_axes,) if isinstance(reduction_axes, int) else tuple(reduction_axes)
    return tuple(sorted(axis % ndim for axis in axes))


def merge_reduction_axes(weight: Tensor, axes: tuple[int, ...]) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
    """``weight`` with its reduction ``axes`` moved last and merged into one (so that per-channel HQQ runs over
    all of them as one group), and the map of a result in that layout back to NNCF's: codes ``[*kept, n]`` to the
    weight's shape, per-channel parameters ``[*kept, 1]`` to the weight's shape with size 1 on every reduced axis."""
    ndim = weight.ndim
    last = tuple(range(ndim - len(axes), ndim))
    moved = fns.moveaxis(weight, axes, last)
    kept_shape = tuple(moved.shape[: ndim - len(axes)])
    reduced_shape = tuple(moved.shape[ndim - len(axes) :])
    merged = moved.reshape((*kept_shape, int(np.prod(reduced_shape))))

    def restore(tensor: Tensor) -> Tensor:
        unmerged = reduced_shape if tensor.shape[-1] != 1 else (1,) * len(axes)
        return fns.moveaxis(tensor.reshape((*kept_shape, *unmerged)), last, axes)

    return merged, restore


def split_samples_in_halves(activations: Tensor) -> tuple[Tensor, Tensor]:
    """Calibration inputs ``[..., samples]`` cut in two along the samples: the first half to fit, the second to
    judge on. Token rows are stored sample by sample (``nncf_hqq.statistics``), so the halves hold different
    sequences (the one at the cut shared when the count of samples is odd)."""
    half = activations.shape[-1] // 2
    return activations[..., :half], activations[..., half:]


def as_float32_numpy(weight: Tensor) -> Tensor:
    """The weight as a float32 numpy tensor, whatever its backend: HQQ's maths and compiled kernels run on numpy.
    OpenVINO tensors (also bf16/f16 ones) are converted, torch tensors (any dtype, any device) cast to float32 and
    copied to the host. A float32 numpy tensor, or a float32 CPU torch tensor, is not copied (nothing downstream
    writes into it)."""
    if weight.backend == TensorBackend.ov:
        weight = weight.as_numpy_tensor()
    elif weight.backend != TensorBackend.numpy:
        weight = weight.astype(TensorDataType.float32).as_numpy_tensor()
    return weight if weight.dtype == TensorDataType.float32 else weight.astype(TensorDataType.float32)


def norm_input_energy(gamma: np.ndarray, beta: np.ndarray | None) -> np.ndarray | None:
    """Expected energy ``gamma^2 + beta^2`` of each input channel of a MatMul fed by a normalisation
    ``x_hat * gamma (+ beta)`` (``x_hat`` of zero mean and unit mean square per token), floored by
    ``IMPORTANCE_FLOOR`` times its mean; None when it is not finite. The backends find ``gamma`` and ``beta`` in
    their graphs; this is the input importance ``Importance.NORM_GAIN`` weights HQQ's objectives with."""
    energy = gamma.astype(np.float64) ** 2 + (0.0 if beta is None else beta.astype(np.float64) ** 2)
    if not np.isfinite(energy).all():
        return None
    return (energy + IMPORTANCE_FLOOR * energy.mean()).astype(np.float32)


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
    """Half-Quadratic Quantization: the scales and zero points of the weights compressed in one mode."""

    def __init__(
        self,
        params: HQQParameters,
        mode: CompressWeightsMode = CompressWeightsMode.INT4_ASYM,
        num_bits: int | None = None,
        subset_size: int = 32,
        scale_estimation_params: Any | None = None,
    ) -> None:
        """
        :param params: HQQ's hyper-parameters.
        :param mode: the primary compression mode; HQQ decides the layers compressed in it. Layers in the backup
            precision (e.g. INT8_ASYM embeddings and lm_head under INT4_ASYM) keep NNCF's round-to-nearest, so
            the largest layers keep OpenVINO's fastest integer-zero-point kernels.
        :param num_bits: bits of the codes HQQ writes instead of the mode's (a ``LowBitMode`` below INT4_ASYM);
            every layer of the primary precision then gets HQQ's parameters with an f16 zero point.
        :param subset_size: calibration samples per layer used by ``compress_on_activations`` (NNCF's Scale
            Estimation ``subset_size``).
        :param scale_estimation_params: NNCF's ``AdvancedScaleEstimationParameters`` of the call: the settings of
            the Scale Estimation the output-error guard compares with (NNCF's defaults when None).
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
        self.subset_size = subset_size
        self.scale_estimation_params = scale_estimation_params
        #: token-row statistics by MatMul name (``nncf_hqq.statistics``), set by the pipeline when
        #: ``params.calibration_token_rows`` asks for them; what the data-aware steps fit where present.
        self.token_statistics: dict[str, Any] = {}

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
        reduction_axis: int | tuple[int, ...],
        config: WeightCompressionConfig,
        importance: np.ndarray | None = None,
        role: AttentionRole | None = None,
    ) -> CompressedWeight:
        """Compresses one weight; the result's tensors are in the grouped shape NNCF uses.

        :param reduction_axis: NNCF's reduction axis, or axes: several (a convolution's, some embeddings') are
            compressed per channel over all of them (``compress_over_axes``).
        :param importance: optional per-input-channel weights (length ``weight.shape[reduction_axis]``); not used
            with several reduction axes.
        :param role: the weight's attention role; roles in ``params.rtn_roles`` get NNCF's round-to-nearest.
        """
        axes = reduction_axes_tuple(reduction_axis, weight.ndim)
        if len(axes) > 1:
            return self.compress_over_axes(weight, axes, config, role)
        params, bits = self.params, self.bits(config)
        grouped, axis = split_into_groups(as_float32_numpy(weight), axes[0], config.group_size)
        weights = None
        if importance is not None:
            weights = importance_along_groups(importance, tuple(weight.shape), axes[0], config.group_size)
        gain = params.unit_gain and bits >= UNIT_GAIN_MIN_BITS and not self.keeps_rtn(role)
        if config.mode not in SYMMETRIC_MODES:
            return self.compress_asymmetric(grouped, axis, bits, weights, role, gain)
        result = self.compress_symmetric(grouped, axis, bits, weights, role)
        return refine.with_unit_gain(grouped, result, axis) if gain else result

    def compress_over_axes(
        self,
        weight: Tensor,
        axes: tuple[int, ...],
        config: WeightCompressionConfig,
        role: AttentionRole | None = None,
    ) -> CompressedWeight:
        """Per-channel HQQ of a weight NNCF reduces over several axes: the axes merged into one group per output
        channel, the result in NNCF's per-channel layout (parameters with size 1 on every reduced axis)."""
        if config.group_size != -1:
            msg = f"groups of {config.group_size} need a single reduction axis, got {axes}; use group_size=-1"
            raise ValueError(msg)
        merged, restore = merge_reduction_axes(as_float32_numpy(weight), axes)
        result = self.compress(merged, merged.ndim - 1, config, None, role)
        zero_point = None if result.zero_point is None else restore(result.zero_point)
        return CompressedWeight(restore(result.tensor), restore(result.scale), zero_point)

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
            inverse_scale, zero = proximal.solve(grouped, axis, bits, params)
        else:
            inverse_scale, zero = hqq_solve(grouped, axis, bits, params, weights)
        return refine.finish(grouped, inverse_scale, zero, axis, bits, params, weights, unit_gain)

    def compress_symmetric(
        self, grouped: Tensor, axis: int, bits: int, weights: Tensor | None, role: AttentionRole | None
    ) -> CompressedWeight:
        """Symmetric HQQ (``nncf_hqq.kernels.symmetric``), or NNCF's symmetric RTN for a role in ``rtn_roles``."""
        if self.keeps_rtn(role):
            return to_symmetric_compressed_weight(grouped, symmetric_init(grouped, axis, bits), bits)
        return symmetric.compress(grouped, axis, bits, self.params, weights)

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
        return self.refine_on_activations(weight, reduction_axis, config, activations, base)

    def refine_on_activations(
        self,
        weight: Tensor,
        reduction_axis: int,
        config: WeightCompressionConfig,
        activations: Tensor,
        base: CompressedWeight,
    ) -> CompressedWeight:
        """``base`` (a data-free result of ``weight``) with its scales refined on calibration ``activations``
        (``[in, samples]`` or ``[experts, in, samples]``), its zero points kept; a symmetric ``base`` as it is."""
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
        inputs = as_float32_numpy(activations)
        grouped_inputs = inputs.reshape((*inputs.shape[:-2], -1, group_size, inputs.shape[-1]))
        if grouped_inputs.shape[-1] > group_size:  # more samples (token rows) than a group has inputs
            grouped_inputs = equivalent_inputs(grouped_inputs)
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

    def with_error_feedback(
        self, weight: Tensor, axis: int, config: WeightCompressionConfig, activations: Tensor, grid: CompressedWeight
    ) -> tuple[CompressedWeight, ...]:
        """``grid``'s scales and zero points with codes rounded by GPTQ's error feedback on ``activations``
        (``[in, samples]``; ``maths.error_feedback``); nothing for a symmetric grid or a weight that is not 2-D."""
        if grid.zero_point is None or weight.ndim != 2:
            return ()
        weight = as_float32_numpy(weight)
        to_canonical, from_canonical = group_layout_moves(config.group_size, axis)
        inverse_scale = 1.0 / to_canonical(grid.scale.astype(TensorDataType.float32))
        zero = to_canonical(grid.zero_point.astype(TensorDataType.float32))
        canonical = fns.moveaxis(weight, axis, -1)
        codes = error_feedback_codes(
            canonical,
            inverse_scale,
            zero,
            as_float32_numpy(activations),
            self.bits(config),
            self.params.error_feedback_damp,
        )
        grouped_codes = from_canonical(codes.reshape(tuple(to_canonical(grid.tensor).shape)))
        return (CompressedWeight(contiguous(grouped_codes.astype(grid.tensor.dtype)), grid.scale, grid.zero_point),)

    def check_weights(
        self,
        model: Any,
        graph: NNCFGraph,
        all_weight_params: list[WeightCompressionParameters],
        backend_entity: HQQAlgoBackend,
    ) -> None:
        """Raises ``nncf.ValidationError`` naming the first weight HQQ cannot compress (NaN/Inf values, or groups
        over several reduction axes), before anything touches the model. A weight with several reduction axes
        compressed per channel is fine: HQQ merges the axes into one group per channel."""
        for wp in all_weight_params:
            if not self.is_applicable(wp.compression_config):
                continue
            shape = backend_entity.get_weight_shape(wp.node_with_weight, wp.weight_port_id, graph)
            axes = reduction_axes_tuple(wp.reduction_axes, len(shape))
            group_size = wp.compression_config.group_size
            if len(axes) > 1 and group_size != -1:
                msg = (
                    f"Weight '{wp.weight_name}' of layer '{wp.node_with_weight.node_name}' is reduced over the axes "
                    f"{axes}; HQQ forms groups along one axis, so it compresses such a weight per channel only, not "
                    f"in groups of {group_size}. The model was not modified."
                )
                raise nncf.ValidationError(msg)
            if not backend_entity.weight_is_finite(wp, model, graph):
                msg = (
                    f"Weight '{wp.weight_name}' of layer '{wp.node_with_weight.node_name}' contains NaN or Inf "
                    "values; HQQ cannot compress it. The model was not modified."
                )
                raise nncf.ValidationError(msg)
            backend_entity.release_weight(wp)

    def apply(
        self,
        model: Any,
        graph: NNCFGraph,
        all_weight_params: list[WeightCompressionParameters],
        statistics: Mapping[str, Any] | None,
        backend_entity: HQQAlgoBackend,
    ) -> Mapping[str, CompressedWeight]:
        """HQQ's compressed weights of every weight it decides, by weight name, for the backend to write.

        Like NNCF's ``ScaleEstimation.apply``. A weight HQQ leaves to NNCF's round-to-nearest (other precisions;
        roles in ``params.rtn_roles`` when there are no statistics for it) has no entry. Each compressed weight is
        computed when the backend reads it (see ``HQQCompressedWeights``), so that one layer's codes are held at a
        time, and from the weight as it is then (steps between ``apply`` and the writer, such as AWQ, may change
        it).

        :param statistics: calibration statistics by node name (after AWQ, when it ran); a weight whose node has
            them is refined on its calibration inputs (``compress_on_activations``), the others are data-free.
        """
        planned: dict[str, _PlannedWeight] = {}
        for wp in all_weight_params:
            if not self.is_applicable(wp.compression_config):
                continue
            role = backend_entity.attention_role(wp) if self.uses_roles else None
            node_statistics = None if statistics is None else statistics.get(wp.node_with_weight.node_name)
            if node_statistics is None and not self.writes_all_layers and self.keeps_rtn(role):
                continue  # NNCF's own RTN, bit for bit (with statistics: RTN refined on them)
            tokens = self.token_statistics.get(wp.node_with_weight.node_name) if node_statistics is not None else None
            planned[wp.weight_name] = _PlannedWeight(wp, role, node_statistics, tokens)
        if statistics is not None and self.params.output_guard and self.params.guard_reference:
            planned = self.with_scale_estimation_references(planned, model, graph, statistics, backend_entity)
        return HQQCompressedWeights(self, planned, model, graph, backend_entity)

    def with_scale_estimation_references(
        self,
        planned: dict[str, _PlannedWeight],
        model: Any,
        graph: NNCFGraph,
        statistics: Mapping[str, Any],
        backend_entity: HQQAlgoBackend,
    ) -> dict[str, _PlannedWeight]:
        """``planned`` with NNCF's own Scale Estimation result (scales and zero points) for every weight that has
        calibration statistics: the output-error guard's reference, computed as NNCF would at this point."""
        with_statistics = [p.params for p in planned.values() if p.statistics is not None]
        if not with_statistics:
            return planned
        se = self.scale_estimation_params
        algorithm = (
            ScaleEstimation(self.subset_size)
            if se is None
            else ScaleEstimation(se.subset_size, se.initial_steps, se.scale_steps, se.weight_penalty)
        )
        references = algorithm.apply(model, graph, with_statistics, dict(statistics), backend_entity)
        backend_entity.release_working_memory()
        return {
            name: dataclasses.replace(p, reference=references.get(name)) if p.statistics is not None else p
            for name, p in planned.items()
        }

    def compress_planned(
        self, planned: _PlannedWeight, model: Any, graph: NNCFGraph, backend_entity: HQQAlgoBackend
    ) -> CompressedWeight:
        """The compressed weight of one planned weight (see ``apply``), from the weight and the graph as they are
        now (after AWQ, when it ran)."""
        wp = planned.params
        weight = backend_entity.get_weight(wp.node_with_weight, wp.weight_port_id, model, graph)
        axes = reduction_axes_tuple(wp.reduction_axes, weight.ndim)
        config = wp.compression_config
        if len(axes) > 1:
            if planned.statistics is not None:
                nncf_logger.info(
                    f"HQQ compresses '{wp.weight_name}' without its calibration data: it is reduced over the axes "
                    f"{axes}, and the data-aware refinement works along one"
                )
            return self.compress_over_axes(weight, axes, config, planned.role)
        axis = axes[0]
        importance = backend_entity.input_importance(wp, weight.shape[axis]) if self.uses_norm_gain else None
        if planned.statistics is None:
            return self.compress(weight, axis, config, importance, planned.role)
        activations = self.calibration_inputs(planned, graph, backend_entity)
        if not self.params.output_guard:
            return self.compress_on_activations(weight, axis, config, activations, importance, planned.role)
        held_out = self.params.guard_held_out and activations.shape[-1] >= 2
        fit, check = split_samples_in_halves(activations) if held_out else (activations, activations)
        base = self.compress(weight, axis, config, importance, None)
        candidate = self.refine_on_activations(weight, axis, config, fit, base)
        others = (base,) if held_out else ()
        if self.params.error_feedback and planned.token_statistics is not None:
            others = (*others, *self.with_error_feedback(weight, axis, config, fit, candidate))
        result, _ = self.guard_on_outputs(weight, axis, config, check, candidate, planned.reference, others)
        return result

    def calibration_inputs(self, planned: _PlannedWeight, graph: NNCFGraph, backend_entity: HQQAlgoBackend) -> Tensor:
        """The inputs ``[in, samples]`` the data-aware steps fit for a planned weight: all its token rows when it
        has them (``params.calibration_token_rows``), else ``subset_size`` of NNCF's per-sample means."""
        if planned.token_statistics is not None:
            _, rows = process_stats(planned.token_statistics, -1)
            return rows
        wp = planned.params
        activation_axis, _ = backend_entity.get_activation_channel_axis_and_shape(graph, wp.node_with_weight)
        _, activations = process_stats(planned.statistics, self.subset_size, act_ch_axis=activation_axis)
        return activations

    def guard_on_outputs(
        self,
        weight: Tensor,
        axis: int,
        config: WeightCompressionConfig,
        activations: Tensor,
        candidate: CompressedWeight,
        reference: CompressedWeight | None,
        others: tuple[CompressedWeight, ...] = (),
    ) -> tuple[CompressedWeight, list[int]]:
        """Every output row from whichever of ``candidate`` (HQQ's), ``reference`` (NNCF's Scale Estimation scales
        and zero points, when given), NNCF's round-to-nearest and ``others`` (in the weight's grouped layout) has
        the least output error on ``activations`` (``maths.guard.choose_per_row``); also returns the rows each
        gave, in that order (0 for a missing reference)."""
        bits = self.bits(config)
        weight = as_float32_numpy(weight)
        grouped, grouped_axis = split_into_groups(weight, axis, config.group_size)
        symmetric = candidate.zero_point is None
        if symmetric:
            rtn = to_symmetric_compressed_weight(grouped, symmetric_init(grouped, grouped_axis, bits), bits)
        else:
            rtn = to_compressed_weight(grouped, *rtn_scale_zero_point(grouped, grouped_axis, bits), bits, True)
        candidates = [candidate, rtn, *others]
        has_reference = reference is not None and reference.scale is not None
        if has_reference:
            candidates.insert(1, encoded_reference(grouped, reference, bits, symmetric))
        inputs = as_float32_numpy(activations)
        if inputs.shape[-1] > inputs.shape[-2]:  # more samples (token rows) than the layer has inputs
            inputs = equivalent_inputs(inputs)
        result, counts = choose_per_row(weight, candidates, inputs, axis, config.group_size != -1)
        return result, counts if has_reference else [counts[0], 0, *counts[1:]]


@dataclass(frozen=True)
class _PlannedWeight:
    """What ``HQQ.apply`` has decided about one weight before computing it."""

    params: WeightCompressionParameters
    role: AttentionRole | None
    statistics: Any
    token_statistics: Any = None
    reference: CompressedWeight | None = None


class HQQCompressedWeights(Mapping[str, CompressedWeight]):
    """HQQ's compressed weights by weight name, each computed when it is read.

    NNCF's writer reads every weight's entry once, right before it writes that weight, so HQQ's codes exist for one
    layer at a time and the work happens inside NNCF's own progress bar. Reading an entry twice computes it twice.
    """

    def __init__(
        self,
        hqq: HQQ,
        planned: dict[str, _PlannedWeight],
        model: Any,
        graph: NNCFGraph,
        backend_entity: HQQAlgoBackend,
    ) -> None:
        self._hqq = hqq
        self._planned = planned
        self._model = model
        self._graph = graph
        self._backend_entity = backend_entity

    def __getitem__(self, weight_name: str) -> CompressedWeight:
        return self._hqq.compress_planned(self._planned[weight_name], self._model, self._graph, self._backend_entity)

    def __iter__(self) -> Iterator[str]:
        return iter(self._planned)

    def __len__(self) -> int:
        return len(self._planned)

    def __contains__(self, weight_name: object) -> bool:
        return weight_name in self._planned


class HQQAlgoBackend(WeightCompressionAlgoBackend):
    """What ``HQQ`` needs from a model backend beyond NNCF's weight-compression backend (whose ``get_weight``,
    ``get_weight_shape`` and ``get_activation_channel_axis_and_shape`` it uses too)."""

    def prepare(self, model: Any, graph: NNCFGraph, all_weight_params: list[WeightCompressionParameters]) -> None:
        """Called once before HQQ reads the model and before anything changes it: a backend may keep the graph and
        check what it will write, raising ``nncf.ValidationError`` while the model is still untouched. Does
        nothing by default."""

    @abstractmethod
    def input_importance(self, wp: WeightCompressionParameters, channels: int) -> np.ndarray | None:
        """Data-free energy of each of the ``channels`` input channels of the weight's MatMul, or None."""

    @abstractmethod
    def attention_role(self, wp: WeightCompressionParameters) -> AttentionRole | None:
        """The attention input the weight's MatMul produces, or None."""

    def weight_is_finite(self, wp: WeightCompressionParameters, model: Any, graph: NNCFGraph) -> bool:
        """Whether the weight holds no NaN/Inf value (by default checked on ``get_weight``'s values)."""
        return all_finite(as_numpy(self.get_weight(wp.node_with_weight, wp.weight_port_id, model, graph)))

    def release_weight(self, wp: WeightCompressionParameters) -> None:
        """A hint that the weight will not be read again soon: a backend whose weights live in a memory-mapped file
        may drop their resident pages (reading the weight later stays correct). By default nothing."""

    def release_working_memory(self) -> None:
        """A hint that a step over every weight (Scale Estimation's reference pass) has ended: a backend may drop
        what it can rebuild on demand, such as compiled models cached per weight shape, and return freed heap to
        the system, so that none of it is held while the writer compresses. By default nothing."""


def encoded_reference(grouped: Tensor, reference: CompressedWeight, bits: int, symmetric: bool) -> CompressedWeight:
    """NNCF's Scale Estimation result (a scale, and an integer zero point unless ``symmetric``, without codes) as a
    compressed weight: the nearest codes of the grouped weight for those parameters."""
    scale = as_float32_numpy(reference.scale)
    if symmetric:
        return to_symmetric_compressed_weight(grouped, scale, bits)
    return to_compressed_weight(grouped, scale, as_float32_numpy(reference.zero_point), bits, True)


def as_numpy(weight: Tensor) -> np.ndarray:
    """The weight's values as a numpy array (OpenVINO tensors, also bf16/f16 ones, converted; torch tensors as
    float32 on the host)."""
    if weight.backend == TensorBackend.numpy:
        return weight.data
    return weight.as_numpy_tensor().data if weight.backend == TensorBackend.ov else as_float32_numpy(weight).data


def all_finite(data: np.ndarray) -> bool:
    """Whether an array holds no NaN/Inf. A sum is NaN/Inf when an element is (no weight-sized temporary); only
    when it is (or overflows) are the elements checked one by one."""
    with np.errstate(over="ignore", invalid="ignore"):
        accumulator = np.float32 if data.dtype.itemsize < 4 else None  # f16 sums overflow early
        if np.isfinite(np.add.reduce(data, axis=None, dtype=accumulator)):
            return True
    return bool(np.isfinite(data).all())
