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
from nncf.quantization.algorithms.weight_compression.parameters import CompressedWeight
from nncf.quantization.algorithms.weight_compression.weight_lowering import ReductionAxes
from nncf.quantization.algorithms.weight_compression.weight_lowering import get_reduction_channel_size
from nncf.quantization.algorithms.weight_compression.weight_lowering import reshape_weight_for_grouped_quantization
from nncf.tensor import Tensor
from nncf.tensor import TensorBackend
from nncf.tensor import TensorDataType

TModel = TypeVar("TModel")

HQQ_MODES = (CompressWeightsMode.INT4_ASYM, CompressWeightsMode.INT8_ASYM)
ATTENTION_VALUE_PORT = 2  # the values' input of a scaled dot-product attention (query, key, value, mask)


class HQQ:
    """
    Half-Quadratic Quantization (HQQ), data-free: per group a float zero point from HQQ's iterations with the scale of
    the group's range. Returns the scales and float16 zero points; NNCF's quantization computes the codes from them.
    Layers that produce attention values keep round-to-nearest (attention averages their errors over the tokens).

    Reference: H. Badri, A. Shaji, "Half-Quadratic Quantization of Large Machine Learning Models", 2023.
    """

    def __init__(
        self,
        mode: CompressWeightsMode,
        num_iterations: int = 20,
        rtn_value_projections: bool = True,
    ):
        """
        :param mode: The primary compression mode, INT4_ASYM or INT8_ASYM; weights in another mode (the backup mode)
            keep NNCF's round-to-nearest.
        :param num_iterations: Maximal number of HQQ's zero-point iterations of a group (each group iterates until
            its zero point converges).
        :param rtn_value_projections: Whether the layers that produce attention values keep round-to-nearest.
        """
        self._mode = mode
        self._num_iterations = num_iterations
        self._rtn_value_projections = rtn_value_projections
        self._backend_entity = None

    @property
    def available_backends(self) -> list[BackendType]:
        return [BackendType.OPENVINO]

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
        Computes the scale and zero point of every weight compressed in the primary mode, from the weight as it is
        (after AWQ, when it ran); a weight reduced over several axes or producing attention values keeps
        round-to-nearest (no entry).

        :param model: Model for applying algorithm.
        :param graph: Model graph.
        :param all_weight_params: List of all weight parameters.
        :param backend_entity: Weight compression algorithm backend.
        :return: Per weight name, a CompressedWeight holding no codes, the scale and the float16 zero point.
        """
        self._set_backend_entity(model, backend_entity)
        result = {}
        for wp in track(all_weight_params, description="Applying HQQ"):
            config, axes = wp.compression_config, wp.reduction_axes
            if config.mode != self._mode or not (isinstance(axes, int) or len(axes) == 1):  # several axes: rounding
                continue
            if self._rtn_value_projections and self._is_attention_value(graph, wp.node_with_weight):
                continue
            weight = self._backend_entity.get_weight(wp.node_with_weight, wp.weight_port_id, model, graph)
            result[wp.weight_name] = self.calculate_quantization_params(weight, axes, config)
        return result

    def calculate_quantization_params(
        self, weight: Tensor, reduction_axes: ReductionAxes, config: WeightCompressionConfig
    ) -> CompressedWeight:
        """
        HQQ's scale and float zero point of one weight, in the shape NNCF's quantization expects for the config.

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
