"""HQQ's OpenVINO backend: the graph facts ``HQQ`` asks for, and the writer of its compressed weights.

``HQQOVBackend`` is NNCF's OpenVINO weight-compression backend with three additions:
- it answers ``HQQAlgoBackend``'s questions from the OpenVINO graph (``nncf_hqq.openvino.graph``);
- it writes HQQ's compressed weights: a float zero point as an f16 decompression subgraph
  (``nncf_hqq.openvino.decompression``), anything else through NNCF's own writer (``OVWeightCompressionAlgoBackend``),
  which writes HQQ's codes as they are;
  with ``ZeroPointFormat.SPLIT`` the f16 zero points are then split into integer ones plus output corrections
  (``nncf_hqq.openvino.split``);
- it holds one rescaled weight of AWQ's at a time (``nncf_hqq.openvino.rescaling``), and lets go of each weight's
  constant once the writer has replaced it (NNCF's writer keeps them all until it ends).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any

import numpy as np
import openvino as ov
from nncf.tensor import Tensor

from nncf_hqq._nncf import AWQ
from nncf_hqq._nncf import CompressedWeight
from nncf_hqq._nncf import NNCFGraph
from nncf_hqq._nncf import WeightCompressionConfig
from nncf_hqq._nncf import WeightCompressionParameters
from nncf_hqq._nncf import awq_backend_replaced
from nncf_hqq._nncf import awq_scales_observed
from nncf_hqq._nncf import clear_ov_model_cache
from nncf_hqq.hqq import HQQ
from nncf_hqq.hqq import HQQAlgoBackend
from nncf_hqq.openvino.decompression import float_zero_point_decompression
from nncf_hqq.openvino.decompression import is_float_zero_point
from nncf_hqq.openvino.graph import attention_role
from nncf_hqq.openvino.graph import norm_gain_importance
from nncf_hqq.openvino.pages import FileMappingSnapshot
from nncf_hqq.openvino.pages import return_free_heap
from nncf_hqq.openvino.rescaling import RescaledConstants
from nncf_hqq.openvino.rescaling import RescalingAWQBackend
from nncf_hqq.openvino.split import split_float_zero_points
from nncf_hqq.openvino.writer import OVWeightCompressionAlgoBackend
from nncf_hqq.parameters import AttentionRole
from nncf_hqq.parameters import ZeroPointFormat


class HQQOVBackend(HQQAlgoBackend, OVWeightCompressionAlgoBackend):
    """NNCF's OpenVINO weight-compression backend that answers HQQ's questions and writes HQQ's results."""

    #: NNCF's constants by name, as ``RescaledConstants`` (until NNCF's writer sets it to None when it ends).
    name_to_node_mapping: dict[str, ov.Node]

    def __init__(self, model: ov.Model, hqq: HQQ) -> None:
        super().__init__(model)
        self.name_to_node_mapping = RescaledConstants(self.name_to_node_mapping, float_values)
        self.hqq = hqq
        #: HQQ's compressed weights for the next ``transform_model`` that gets none from NNCF (``HQQ.apply``'s result),
        #: which consumes them: they hold this backend and the model, a cycle only the garbage collector would free.
        self.hqq_weights: Mapping[str, CompressedWeight] | None = None
        #: Names of the weights the last ``transform_model`` wrote with an f16 zero point.
        self.float_zero_point_weights: set[str] = set()
        #: Where the model's constants lay when first looked up: in its IR file's mapping, or not.
        self.file_mappings = FileMappingSnapshot()

    def in_graph(self, weight_name: str) -> ov.Node:
        """The constant the graph holds for a weight (the stored one while AWQ's rescaling of it is deferred): where
        the graph is walked from it."""
        constants = self.name_to_node_mapping
        return constants.in_graph(weight_name) if isinstance(constants, RescaledConstants) else constants[weight_name]

    def input_importance(self, wp: WeightCompressionParameters, channels: int) -> np.ndarray | None:
        return norm_gain_importance(self.in_graph(wp.weight_name), channels)

    def attention_role(self, wp: WeightCompressionParameters) -> AttentionRole | None:
        return attention_role(self.in_graph(wp.weight_name))

    def release_weight(self, wp: WeightCompressionParameters) -> None:
        release_constant_pages(self.in_graph(wp.weight_name), self.file_mappings)

    def release_working_memory(self) -> None:
        """Drops NNCF's compiled weight-lowering models (one per function and weight shape, each holding its
        buffers: Scale Estimation fills the cache, and NNCF would clear it only when its writer ends) and gives the
        freed heap back (on a Qwen2.5-1.5B IR after Scale Estimation: 0.37 GiB, about 7 copies of the largest
        weight in float32)."""
        clear_ov_model_cache()
        return_free_heap()

    @contextlib.contextmanager
    def awq_rescaling_deferred(self, awq: AWQ) -> Iterator[None]:
        """Within the context (NNCF's steps from AWQ to the writer), the weights ``awq`` rescales are kept as
        factors on their stored constants and built one at a time when read (``nncf_hqq.openvino.rescaling``);
        the writer puts each into the graph just before it compresses it (``transform_model``). On leaving,
        any still deferred is put into the graph."""
        constants = self.name_to_node_mapping
        if not isinstance(constants, RescaledConstants):
            yield
            return
        try:
            with awq_backend_replaced(RescalingAWQBackend), awq_scales_observed(awq, constants.observe_scale):
                yield
        finally:
            constants.scale = None
            constants.materialise_all()

    def weight_is_finite(self, wp: WeightCompressionParameters, model: ov.Model, graph: NNCFGraph) -> bool:
        """``HQQAlgoBackend.weight_is_finite``; a bf16 constant is checked on its bits, without converting it."""
        node = self.name_to_node_mapping[wp.weight_name]
        if node.get_type_name() == "Constant" and node.get_element_type() == ov.Type.bf16:
            return bfloat16_all_finite(node.get_tensor_view().data.view(np.uint16))
        return super().weight_is_finite(wp, model, graph)

    def get_weight(self, node_with_weight: Any, weight_port_id: int, model: ov.Model, graph: NNCFGraph) -> Tensor:
        """NNCF's ``get_weight`` (the weight as a float numpy tensor; bf16 as float32), with bf16 constants converted
        in numpy (``bfloat16_as_float32``) instead of by ``Node.get_data``, which takes about 7x longer."""
        name = node_with_weight.layer_attributes.constant_attributes[weight_port_id]["name"]
        return Tensor(float_values(self.name_to_node_mapping[name]))

    def _replace_node(self, const_node: ov.Node, new_node: ov.Node) -> None:
        """NNCF's replacement of a weight by its compressed subgraph, then the weight's pages dropped."""
        super()._replace_node(const_node, new_node)
        release_constant_pages(const_node, self.file_mappings)

    def transform_model(
        self,
        model: ov.Model,
        graph: NNCFGraph,
        weight_compression_parameters: Iterable[WeightCompressionParameters],
        precomputed_compressed_weights: Mapping[str, CompressedWeight] | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> ov.Model:
        """NNCF's ``transform_model``, with HQQ's compressed weights when no earlier step supplied any."""
        if precomputed_compressed_weights is None:
            precomputed_compressed_weights, self.hqq_weights = self.hqq_weights, None
        self.float_zero_point_weights = set()
        constants = self.name_to_node_mapping
        in_turn = weight_compression_parameters
        if isinstance(constants, RescaledConstants):
            in_turn = constants_in_turn(weight_compression_parameters, constants)
        model = super().transform_model(model, graph, in_turn, precomputed_compressed_weights, *args, **kwargs)
        if self.hqq.params.zero_point_format == ZeroPointFormat.SPLIT and self.float_zero_point_weights:
            split_float_zero_points(model, self.float_zero_point_weights)
        return model

    def _create_compression_subgraph(
        self,
        weight: Tensor,
        compression_config: WeightCompressionConfig,
        reduction_axes: tuple[int, ...],
        const_node_name: str,
        weight_port_id: int,
        const_dtype: ov.Type,
        should_add_convert_node: bool,
        precomputed_compressed_weight: CompressedWeight | None = None,
    ) -> tuple[ov.Node, CompressedWeight]:
        compressed = precomputed_compressed_weight
        if compressed is None or not is_float_zero_point(compressed):
            return super()._create_compression_subgraph(
                weight,
                compression_config,
                reduction_axes,
                const_node_name,
                weight_port_id,
                const_dtype,
                should_add_convert_node,
                compressed,
            )
        output_type = const_dtype if should_add_convert_node else None
        bits = self.hqq.bits(compression_config)
        self.float_zero_point_weights.add(const_node_name)
        node = float_zero_point_decompression(
            compressed, bits, tuple(weight.shape), const_node_name, weight_port_id, output_type
        )
        return node, compressed


def constants_in_turn(
    weight_compression_parameters: Iterable[WeightCompressionParameters], constants: RescaledConstants
) -> Iterator[WeightCompressionParameters]:
    """The weights NNCF's writer compresses, each with its rescaled constant put into the graph just before
    (``RescaledConstants.materialise``) and its entry in ``constants`` dropped once the writer has replaced it, so
    that the replaced constant is freed then, not when the writer ends."""
    for wp in weight_compression_parameters:
        constants.materialise(wp.weight_name)
        yield wp
        constants.pop(wp.weight_name, None)


def float_values(node: ov.Node) -> np.ndarray:
    """A constant's values as NNCF's ``get_weight`` returns them: bf16 as float32 (``bfloat16_as_float32``), other
    types as stored."""
    if node.get_type_name() == "Constant" and node.get_element_type() == ov.Type.bf16:
        return bfloat16_as_float32(node)
    return np.asarray(node.data)


def bfloat16_as_float32(node: ov.Node) -> np.ndarray:
    """The values of a bf16 constant as a new float32 array, exactly: a bf16 value is the upper half of the float32
    with the same value, so its 16 bits shifted left by 16 are that float32's bits."""
    bits = node.get_tensor_view().data.view(np.uint16)
    values = np.empty(bits.shape, dtype=np.uint32)
    np.left_shift(bits, 16, out=values, dtype=np.uint32)
    return values.view(np.float32)


#: Elements checked at a time by ``bfloat16_all_finite`` (its temporary stays small).
FINITE_CHECK_BLOCK = 1 << 22


def bfloat16_all_finite(bits: np.ndarray) -> bool:
    """Whether bf16 values (their bits as uint16) hold no NaN/Inf: those, and only those, have all 8 exponent bits
    set, so their bits without the sign are at least 0x7F80."""
    flat = bits.reshape(-1)
    for begin in range(0, flat.size, FINITE_CHECK_BLOCK):
        block = flat[begin : begin + FINITE_CHECK_BLOCK]
        if block.size and int(np.bitwise_and(block, 0x7FFF).max()) >= 0x7F80:
            return False
    return True


def release_constant_pages(node: ov.Node, mappings: FileMappingSnapshot) -> None:
    """Drops the resident pages of a constant when they are those of the model's IR file
    (``nncf_hqq.openvino.pages``): compressing a model read from disk then holds one weight's pages at a time."""
    if node.get_type_name() == "Constant":
        mappings.release(node.get_tensor_view().data)
