from typing import TypeVar

import nncf
from nncf.common.graph.graph import NNCFGraph
from nncf.common.graph.graph import NNCFNode
from nncf.common.logging.track_progress import track
from nncf.common.utils.backend import BackendType
from nncf.common.utils.backend import get_backend
from nncf.parameters import CompressWeightsMode
from nncf.quantization.algorithms.weight_compression.backend import WeightCompressionAlgoBackend
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionParameters
from nncf.quantization.algorithms.weight_compression.hqq_solver import solve_zero_point
from nncf.quantization.algorithms.weight_compression.hqq_solver import stored_scale_zero_point
from nncf.quantization.algorithms.weight_compression.hqq_steps import choose_per_group
from nncf.quantization.algorithms.weight_compression.hqq_steps import quantize_as_stored
from nncf.quantization.algorithms.weight_compression.hqq_steps import refine_weighted_least_squares
from nncf.quantization.algorithms.weight_compression.hqq_steps import stored_group_error
from nncf.quantization.algorithms.weight_compression.hqq_steps import with_unit_gain
from nncf.quantization.algorithms.weight_compression.parameters import CompressedWeight
from nncf.quantization.algorithms.weight_compression.weight_lowering import ReductionAxes
from nncf.quantization.algorithms.weight_compression.weight_lowering import calculate_integer_quantization_params
from nncf.quantization.algorithms.weight_compression.weight_lowering import get_reduction_channel_size
from nncf.quantization.algorithms.weight_compression.weight_lowering import reshape_weight_for_grouped_quantization
from nncf.tensor import Tensor
from nncf.tensor import TensorBackend
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns

TModel = TypeVar("TModel")

HQQ_MODES = (CompressWeightsMode.INT4_ASYM, CompressWeightsMode.INT8_ASYM)
# Added to every input energy, relative to their mean, so that no group has a total weight of zero.
IMPORTANCE_FLOOR = 1e-4
ATTENTION_VALUE_PORT = 2  # the values' input of a scaled dot-product attention (query, key, value, mask)


class HQQ:
    """
    Half-Quadratic Quantization (HQQ) of the weights in the primary mode: per group HQQ's float zero point, then
    least-squares steps that clip no extreme weight, the error weighted by the energy of each input channel;
    round-to-nearest where it is better and for attention values; a scale for unit gain.
    """

    def __init__(
        self,
        mode: CompressWeightsMode,
        num_iterations: int = 20,
        refinement_steps: int = 5,
        rtn_value_projections: bool = True,
        input_energy_weighting: bool = True,
        rtn_group_fallback: bool = True,
        unit_gain: bool = True,
    ):
        """
        :param mode: The primary compression mode, INT4_ASYM or INT8_ASYM (the backup mode keeps rounding).
        :param num_iterations: Maximal number of HQQ's zero-point iterations of a group (each group iterates until
            its zero point converges).
        :param refinement_steps: Steps of least-squares refinement of the scales and zero points.
        :param rtn_value_projections: Whether the layers that produce attention values keep round-to-nearest.
        :param input_energy_weighting: Whether the error of each input channel is weighted by the energy of the
            normalization feeding the layer.
        :param rtn_group_fallback: Whether a group keeps round-to-nearest where it reconstructs the group better.
        :param unit_gain: Whether every group's scale is finally set for unit gain along its weights.
        """
        self._mode = mode
        self._num_iterations = num_iterations
        self._refinement_steps = refinement_steps
        self._input_energy_weighting = input_energy_weighting
        self._rtn_group_fallback = rtn_group_fallback
        self._unit_gain = unit_gain
        self._rtn_value_projections = rtn_value_projections
        self._backend_entity = None

    @property
    def available_backends(self) -> list[BackendType]:
        return [BackendType.OPENVINO, BackendType.TORCH]

    def _set_backend_entity(self, model: TModel, wc_backend_entity: WeightCompressionAlgoBackend | None = None) -> None:
        """
        Creates a helper class with a backend-specific logic of the algorithm.

        :param model: Backend-specific input model.
        :param wc_backend_entity: Weight compression algorithm backend (its node mapping is reused).
        """
        model_backend = get_backend(model)
        if model_backend == BackendType.OPENVINO:
            from nncf.quantization.algorithms.weight_compression.openvino_backend import OVHQQAlgoBackend

            mapping = getattr(wc_backend_entity, "name_to_node_mapping", None)
            self._backend_entity = OVHQQAlgoBackend(model, mapping)
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
        backend_entity: WeightCompressionAlgoBackend | None = None,
    ) -> dict[str, CompressedWeight]:
        """
        Computes the compressed weight of every weight in the primary mode, from the weight as it is (after AWQ, when
        it ran), before the model is transformed.

        :param model: Model for applying algorithm.
        :param graph: Model graph.
        :param all_weight_params: List of all weight parameters.
        :param backend_entity: Weight compression algorithm backend.
        :return: The compressed weights by weight name. A weight left to rounding (another mode, attention values)
            has no entry.
        """
        self._set_backend_entity(model, backend_entity)
        planned = []
        for wp in all_weight_params:
            axes = wp.reduction_axes
            if wp.compression_config.mode != self._mode or not (isinstance(axes, int) or len(axes) == 1):
                continue  # several reduction axes: rounding
            if not (self._rtn_value_projections and self._is_attention_value(graph, wp.node_with_weight)):
                planned.append(wp)
        return {
            wp.weight_name: self._compress_planned(model, graph, wp)
            for wp in track(planned, description="Applying HQQ")
        }

    def _compress_planned(self, model: TModel, graph: NNCFGraph, wp: WeightCompressionParameters) -> CompressedWeight:
        weight = self._backend_entity.get_weight(wp.node_with_weight, wp.weight_port_id, model, graph)
        _, axis = get_reduction_channel_size(weight.shape, wp.reduction_axes)
        axis = axis % weight.ndim
        float_weight = _as_float32_numpy(weight)
        importance = None
        if self._input_energy_weighting:
            importance = self._input_importance(model, graph, wp.node_with_weight, weight.shape[axis])
        result = self.compress(float_weight, axis, wp.compression_config, importance)
        zero_point = result.zero_point
        if zero_point.dtype.is_float():  # the writers store a float16 one as it is
            zero_point = zero_point.astype(TensorDataType.float16)
        tensors = (result.tensor, result.scale, zero_point)
        if weight.backend != TensorBackend.numpy:
            tensors = tuple(fns.as_tensor_like(weight, t.data) for t in tensors)
        return CompressedWeight(*tensors)

    def calculate_quantization_params(
        self, weight: Tensor, reduction_axes: ReductionAxes, config: WeightCompressionConfig
    ) -> CompressedWeight:
        """
        HQQ's solver alone on one weight (the scale of each group's range and the float zero point of HQQ's
        iterations, in the shape NNCF's quantization expects for the config), on the weight's own backend; `compress`
        runs the data-free steps after it.

        :param weight: The weight, a tensor of the model's backend (it stays on its device).
        :param reduction_axes: The axis along which the weight's groups lie.
        :param config: The compression config (INT4_ASYM or INT8_ASYM).
        :return: A CompressedWeight holding no codes, the scale and the float16 zero point.
        """
        if weight.backend == TensorBackend.ov:
            weight = weight.as_numpy_tensor()
        if config.group_size == -1:
            _, axis = get_reduction_channel_size(weight.shape, reduction_axes)
        else:
            weight, axis = reshape_weight_for_grouped_quantization(weight, reduction_axes, config.group_size)
        inverse_scale, zero = solve_zero_point(weight, axis, config.num_bits, self._num_iterations)
        scale, zero_point = stored_scale_zero_point(1.0 / inverse_scale, zero)
        return CompressedWeight(None, scale, zero_point.astype(TensorDataType.float16))

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
        reduction_axis = reduction_axis % weight.ndim
        grouped, axis = _grouped(weight, reduction_axis, config.group_size)
        weights = None
        if importance is not None:
            shape = [1] * weight.ndim
            shape[reduction_axis] = importance.size
            weights, _ = _grouped(importance.reshape(tuple(shape)), reduction_axis, config.group_size)
        result = self._compress_asymmetric(grouped, axis, config, weights, keep_rtn)
        if not self._unit_gain or keep_rtn:
            return result
        return with_unit_gain(grouped, result, axis)

    def _compress_asymmetric(
        self, grouped: Tensor, axis: int, config: WeightCompressionConfig, weights: Tensor | None, keep_rtn: bool
    ) -> CompressedWeight:
        rtn = quantize_as_stored(grouped, config, *calculate_integer_quantization_params(grouped, axis, config), True)
        if keep_rtn:
            return rtn
        num_bits = config.num_bits
        inverse_scale, zero = solve_zero_point(grouped, axis, num_bits, self._num_iterations)
        steps = self._refinement_steps
        if steps:
            inverse_scale, zero = refine_weighted_least_squares(
                grouped, inverse_scale, zero, axis, num_bits, steps, weights, True
            )
        result = quantize_as_stored(grouped, config, 1.0 / inverse_scale, zero, False)
        if not self._rtn_group_fallback:
            return result
        errors = (stored_group_error(grouped, compressed, axis, weights) for compressed in (result, rtn))
        return choose_per_group(next(errors) <= next(errors), result, rtn)

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
        Whether the layer's output reaches an attention's values through no other MatMul: the value port of a scaled
        dot-product attention, or the second operand of a MatMul whose first operand is a softmax (or its conversion).

        :param graph: Model graph.
        :param node: The layer with the weight.
        """
        backend = self._backend_entity
        frontier, seen = [node], {node.node_key}
        while frontier:
            for edge in graph.get_output_edges(frontier.pop()):
                consumer, port = edge.to_node, edge.input_port_id
                if consumer.metatype in backend.scaled_dot_product_attention_metatypes:
                    if port == ATTENTION_VALUE_PORT:  # also a fused QKV layer, whichever output is met first
                        return True
                elif consumer.metatype in backend.matmul_metatypes:
                    first = graph.get_input_edge_by_port_id(consumer, 0).from_node if port == 1 else None
                    while first is not None and first.metatype in backend.convert_metatypes:
                        first = graph.get_input_edge_by_port_id(first, 0).from_node
                    if first is not None and first.metatype in backend.softmax_metatypes:
                        return True
                elif consumer.metatype not in backend.shapeof_metatypes and consumer.node_key not in seen:
                    seen.add(consumer.node_key)
                    frontier.append(consumer)
        return False


def _grouped(tensor: Tensor, reduction_axis: int, group_size: int) -> tuple[Tensor, int]:
    """NNCF's grouping of the tensor along the axis, or the tensor as it is per channel (group_size -1)."""
    if group_size == -1:
        return tensor, reduction_axis
    return reshape_weight_for_grouped_quantization(tensor, reduction_axis, group_size)


def _as_float32_numpy(tensor: Tensor) -> Tensor:
    if tensor.backend == TensorBackend.ov:
        tensor = tensor.as_numpy_tensor()
    elif tensor.backend != TensorBackend.numpy:
        tensor = tensor.astype(TensorDataType.float32).as_numpy_tensor()
    return tensor if tensor.dtype == TensorDataType.float32 else tensor.astype(TensorDataType.float32)
