from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from typing import TypeVar

import nncf
from nncf.common.graph.graph import NNCFGraph
from nncf.common.graph.graph import NNCFNode
from nncf.common.tensor_statistics.statistics import WCTensorStatistic
from nncf.common.utils.backend import BackendType
from nncf.common.utils.backend import get_backend
from nncf.parameters import CompressWeightsMode
from nncf.quantization.algorithms.weight_compression.activation_stats import process_stats
from nncf.quantization.algorithms.weight_compression.backend import HQQAlgoBackend
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionParameters
from nncf.quantization.algorithms.weight_compression.hqq_solver import choose_per_group
from nncf.quantization.algorithms.weight_compression.hqq_solver import equivalent_inputs
from nncf.quantization.algorithms.weight_compression.hqq_solver import refine_least_squares
from nncf.quantization.algorithms.weight_compression.hqq_solver import refine_scale_on_activations
from nncf.quantization.algorithms.weight_compression.hqq_solver import rtn_scale_zero_point
from nncf.quantization.algorithms.weight_compression.hqq_solver import solve_zero_point
from nncf.quantization.algorithms.weight_compression.hqq_solver import split_into_groups
from nncf.quantization.algorithms.weight_compression.hqq_solver import stored_group_error
from nncf.quantization.algorithms.weight_compression.hqq_solver import to_compressed_weight
from nncf.quantization.algorithms.weight_compression.hqq_solver import with_unit_gain
from nncf.quantization.algorithms.weight_compression.parameters import CompressedWeight
from nncf.tensor import Tensor
from nncf.tensor import TensorBackend
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns

TModel = TypeVar("TModel")

HQQ_MODES = (CompressWeightsMode.INT4_ASYM, CompressWeightsMode.INT8_ASYM)
# Starts s / f of the refinement of the inverse scale s on calibration data, and its steps from each.
SCALE_ESTIMATION_FACTORS = (1.0, 0.95, 0.9, 0.85)
SCALE_ESTIMATION_STEPS = 4
# Added to every input energy, relative to their mean, so that no group has a total weight of zero.
IMPORTANCE_FLOOR = 1e-4
# How many operations after a layer its output is followed towards an attention.
ATTENTION_SEARCH_DEPTH = 12
ATTENTION_VALUE_PORT = 2


class HQQ:
    """
    Half-Quadratic Quantization (HQQ) of the weights in the primary mode: per group HQQ's float zero point, then a
    least-squares scale and zero point that clip no extreme weight, the error weighted by the energy of each input
    channel; round-to-nearest where it is better and for attention values; a scale for unit gain. With statistics,
    in Scale Estimation's place, the scales are then refined on them.
    """

    def __init__(
        self,
        mode: CompressWeightsMode,
        num_iterations: int = 20,
        refinement_steps: int = 5,
        unit_gain: bool = True,
        rtn_value_projections: bool = True,
        subset_size: int = 32,
    ):
        """
        :param mode: The primary compression mode, INT4_ASYM or INT8_ASYM (the backup mode keeps rounding).
        :param num_iterations: Maximal number of HQQ's zero-point iterations.
        :param refinement_steps: Steps of least-squares refinement of the scales and zero points.
        :param unit_gain: Whether every group's scale is finally set for unit gain along its weights.
        :param rtn_value_projections: Whether the layers that produce attention values keep round-to-nearest.
        :param subset_size: The number of calibration samples the scales are refined on.
        """
        self._mode = mode
        self._num_iterations = num_iterations
        self._refinement_steps = refinement_steps
        self._unit_gain = unit_gain
        self._rtn_value_projections = rtn_value_projections
        self._subset_size = subset_size
        self._backend_entity = None

    def _set_backend_entity(self, model: TModel) -> None:
        model_backend = get_backend(model)
        if model_backend == BackendType.OPENVINO:
            from nncf.quantization.algorithms.weight_compression.openvino_backend import OVHQQAlgoBackend

            self._backend_entity = OVHQQAlgoBackend(model)
        elif model_backend == BackendType.TORCH:
            from nncf.quantization.algorithms.weight_compression.torch_backend import PTHQQAlgoBackend

            self._backend_entity = PTHQQAlgoBackend()
        else:
            msg = f"Cannot return backend-specific HQQ entity because {model_backend.value} is not supported!"
            raise nncf.UnsupportedBackendError(msg)

    def apply(
        self,
        model: TModel,
        graph: NNCFGraph,
        all_weight_params: list[WeightCompressionParameters],
        statistics: dict[str, WCTensorStatistic] | None = None,
        backend_entity: HQQAlgoBackend | None = None,
    ) -> Mapping[str, CompressedWeight]:
        """
        :param model: Model for applying algorithm.
        :param graph: Model graph.
        :param all_weight_params: List of all weight parameters.
        :param statistics: Input activation statistics for each node, to refine the scales of its weights on.
        :param backend_entity: Weight compression algorithm backend.
        :return: The compressed weights by weight name, each computed when read, from the weight as it is then. A
            weight left to rounding (another mode, attention values without statistics) has no entry.
        """
        self._backend_entity = backend_entity
        if not isinstance(backend_entity, HQQAlgoBackend):
            self._set_backend_entity(model)
        planned = {}
        for wp in all_weight_params:
            axes = (wp.reduction_axes,) if isinstance(wp.reduction_axes, int) else wp.reduction_axes
            if wp.compression_config.mode != self._mode or len(axes) != 1:
                continue
            node_statistics = None if statistics is None else statistics.get(wp.node_with_weight.node_name)
            keep_rtn = self._rtn_value_projections and self._is_attention_value(graph, wp.node_with_weight)
            if not keep_rtn or node_statistics is not None:
                planned[wp.weight_name] = (wp, axes[0], keep_rtn, node_statistics)
        return HQQCompressedWeights(planned, lambda item: self._compress_planned(model, graph, item))

    def _compress_planned(self, model: TModel, graph: NNCFGraph, planned: tuple) -> CompressedWeight:
        wp, axis, keep_rtn, statistics = planned
        weight = self._backend_entity.get_weight(wp.node_with_weight, wp.weight_port_id, model, graph)
        axis = axis % weight.ndim
        float_weight = _as_float32_numpy(weight)
        importance = self._input_importance(model, graph, wp.node_with_weight, weight.shape[axis])
        result = self.compress(float_weight, axis, wp.compression_config, importance, keep_rtn)
        if statistics is not None:
            activation_axis, _ = self._backend_entity.get_activation_channel_axis_and_shape(graph, wp.node_with_weight)
            _, activations = process_stats(statistics, self._subset_size, act_ch_axis=activation_axis)
            activations = _as_float32_numpy(activations)
            result = self.refine_on_activations(float_weight, axis, wp.compression_config, activations, result)
        zero_point = result.zero_point
        if zero_point.dtype.is_float():  # the writers store a float16 zero point as it is
            zero_point = zero_point.astype(TensorDataType.float16)
        tensors = (result.tensor, result.scale, zero_point)
        if weight.backend != TensorBackend.numpy:
            tensors = tuple(fns.as_tensor_like(weight, t.data) for t in tensors)
        return CompressedWeight(*tensors)

    def compress(
        self,
        weight: Tensor,
        reduction_axis: int,
        config: WeightCompressionConfig,
        importance: Tensor | None = None,
        keep_rtn: bool = False,
    ) -> CompressedWeight:
        """
        Data-free HQQ of a float32 weight (round-to-nearest with keep_rtn), the error of each input channel weighted
        by the importance.
        """
        grouped, axis = split_into_groups(weight, reduction_axis, config.group_size)
        num_bits = config.num_bits
        rtn = to_compressed_weight(grouped, *rtn_scale_zero_point(grouped, axis, num_bits), num_bits, True)
        if keep_rtn:
            return rtn
        weights = None
        if importance is not None:
            shape = [1] * weight.ndim
            shape[reduction_axis] = importance.size
            weights, _ = split_into_groups(importance.reshape(tuple(shape)), reduction_axis, config.group_size)
        inverse_scale, zero = solve_zero_point(grouped, axis, num_bits, self._num_iterations)
        if self._refinement_steps:
            steps = self._refinement_steps
            inverse_scale, zero = refine_least_squares(
                grouped, inverse_scale, zero, axis, num_bits, steps, weights, True
            )
        result = to_compressed_weight(grouped, 1.0 / inverse_scale, zero, num_bits, False)
        errors = (stored_group_error(grouped, compressed, axis, weights) for compressed in (result, rtn))
        result = choose_per_group(next(errors) <= next(errors), result, rtn)
        return with_unit_gain(grouped, result, axis) if self._unit_gain else result

    def refine_on_activations(
        self,
        weight: Tensor,
        reduction_axis: int,
        config: WeightCompressionConfig,
        activations: Tensor,
        compressed: CompressedWeight,
    ) -> CompressedWeight:
        """
        The compressed weight with its scales refined on calibration inputs [in, samples], its zero points kept.
        """
        integer_zero_point = compressed.zero_point.dtype == TensorDataType.int32
        group_size = config.group_size if config.group_size != -1 else weight.shape[reduction_axis]
        canonical, _ = split_into_groups(fns.moveaxis(weight, reduction_axis, -1), -1, group_size)
        to_canonical, from_canonical = _group_layout_moves(config.group_size, reduction_axis)
        inverse_scale = 1.0 / to_canonical(compressed.scale)
        zero = to_canonical(compressed.zero_point.astype(TensorDataType.float32))
        inputs = activations.reshape((-1, group_size, activations.shape[-1]))
        if inputs.shape[-1] > group_size:
            inputs = equivalent_inputs(inputs)
        inverse_scale = refine_scale_on_activations(
            canonical, inverse_scale, zero, inputs, config.num_bits, SCALE_ESTIMATION_STEPS, SCALE_ESTIMATION_FACTORS
        )
        grouped, _ = split_into_groups(weight, reduction_axis, config.group_size)
        # C-contiguous copies: OpenVINO constants are built from the raw buffer
        scale, zero_point = (fns.flatten(t).reshape(t.shape) for t in map(from_canonical, (1.0 / inverse_scale, zero)))
        return to_compressed_weight(grouped, scale, zero_point, config.num_bits, integer_zero_point)

    def _input_importance(self, model: TModel, graph: NNCFGraph, node: NNCFNode, channels: int) -> Tensor | None:
        """The expected energy gamma^2 + beta^2 of the input channels of a layer fed by x_hat * gamma + beta."""
        if node.metatype not in self._backend_entity.matmul_metatypes:
            return None
        affine = self._backend_entity.get_normalization_affine(model, graph, node, channels)
        if affine is None:
            return None
        gamma, beta = (None if t is None else _as_float32_numpy(t).reshape((-1,)) for t in affine)
        energy = gamma.astype(TensorDataType.float64) ** 2
        if beta is not None:
            energy = energy + beta.astype(TensorDataType.float64) ** 2
        if not fns.all(fns.abs(energy) < float("inf")):
            return None
        return (energy + IMPORTANCE_FLOOR * fns.mean(energy)).astype(TensorDataType.float32)

    def _is_attention_value(self, graph: NNCFGraph, node: NNCFNode) -> bool:
        """
        Whether the layer's output reaches an attention's value, through no other MatMul: the value port of a scaled
        dot-product attention, or the second operand of a MatMul whose other operand is a softmax.
        """
        backend = self._backend_entity
        frontier, seen = [(node, 0)], set()
        while frontier:
            current, depth = frontier.pop(0)
            for edge in graph.get_output_edges(current):
                consumer, port = edge.to_node, edge.input_port_id
                if consumer.metatype in backend.scaled_dot_product_attention_metatypes:
                    return port == ATTENTION_VALUE_PORT
                if consumer.metatype in backend.matmul_metatypes:
                    others = [e.from_node for e in graph.get_input_edges(consumer) if e.input_port_id != port]
                    if port == 1 and any(
                        _skip_noops(graph, o, backend).metatype in backend.softmax_metatypes for o in others
                    ):
                        return True
                elif consumer.metatype not in backend.shapeof_metatypes and consumer.node_key not in seen:
                    seen.add(consumer.node_key)
                    if depth < ATTENTION_SEARCH_DEPTH:
                        frontier.append((consumer, depth + 1))
        return False


class HQQCompressedWeights(Mapping[str, CompressedWeight]):
    """
    HQQ's compressed weights by weight name, each computed when the writer reads it.
    """

    def __init__(self, planned: dict[str, tuple], compute: Callable[[tuple], CompressedWeight]):
        self._planned = planned
        self._compute = compute

    def __getitem__(self, weight_name: str) -> CompressedWeight:
        return self._compute(self._planned[weight_name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._planned)

    def __len__(self) -> int:
        return len(self._planned)


def _as_float32_numpy(tensor: Tensor) -> Tensor:
    if tensor.backend == TensorBackend.ov:
        tensor = tensor.as_numpy_tensor()
    elif tensor.backend != TensorBackend.numpy:
        tensor = tensor.astype(TensorDataType.float32).as_numpy_tensor()
    return tensor if tensor.dtype == TensorDataType.float32 else tensor.astype(TensorDataType.float32)


def _skip_noops(graph: NNCFGraph, node: NNCFNode, backend: HQQAlgoBackend) -> NNCFNode:
    while node.metatype in backend.noop_metatypes and graph.get_input_edges(node):
        node = min(graph.get_input_edges(node), key=lambda edge: edge.input_port_id).from_node
    return node


def _group_layout_moves(group_size: int, axis: int) -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]:
    """The maps of per-group parameters from NNCF's grouped layout to [..., out, groups, 1] and back."""
    if group_size == -1:
        return lambda t: fns.moveaxis(t, axis, -1)[..., None], lambda t: fns.moveaxis(t[..., 0], -1, axis)
    return lambda t: fns.moveaxis(t, (axis, axis + 1), (-2, -1)), lambda t: fns.moveaxis(t, (-2, -1), (axis, axis + 1))
