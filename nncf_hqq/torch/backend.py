"""HQQ's Torch backend: the graph facts ``HQQ`` asks for, and the writer of its compressed weights.

``HQQPTBackend`` is NNCF's Torch weight-compression backend with three additions:
- it answers ``HQQAlgoBackend``'s questions from the traced ``NNCFGraph`` (``nncf_hqq.torch.graph``);
- it writes HQQ's compressed weights (computed in numpy by the same ``HQQ`` step as on the OpenVINO path): a float
  zero point with ``FloatZeroPointDecompressor``, an integer zero point or a symmetric weight with NNCF's own
  decompressors and packing, HQQ's codes kept as they are; weights HQQ does not decide get NNCF's own RTN;
- it compresses the parameters matched by ``target_parameters`` (``nncf_hqq.torch.targets``), e.g. MoE experts.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import nncf
import numpy as np
import torch
from nncf.tensor import Tensor
from nncf.tensor import TensorBackend

from nncf_hqq._nncf import CompressedWeight
from nncf_hqq._nncf import GraphModelWrapper
from nncf_hqq._nncf import NNCFGraph
from nncf_hqq._nncf import PT2InsertionCommand
from nncf_hqq._nncf import PT2ModelTransformer
from nncf_hqq._nncf import PTTargetPoint
from nncf_hqq._nncf import PTWeightCompressionAlgoBackend
from nncf_hqq._nncf import TargetType
from nncf_hqq._nncf import TransformationLayout
from nncf_hqq._nncf import WeightCompressionConfig
from nncf_hqq._nncf import WeightCompressionParameters
from nncf_hqq._nncf import compress_weight
from nncf_hqq._nncf import get_const_data
from nncf_hqq._nncf import get_const_node
from nncf_hqq._nncf import track
from nncf_hqq.hqq import HQQ
from nncf_hqq.hqq import HQQAlgoBackend
from nncf_hqq.parameters import AttentionRole
from nncf_hqq.torch.decompression import decompressor_for
from nncf_hqq.torch.decompression import packed_u4_shape
from nncf_hqq.torch.graph import attention_role
from nncf_hqq.torch.graph import norm_gain_importance
from nncf_hqq.torch.graph import parameter_importance
from nncf_hqq.torch.targets import ParameterTarget
from nncf_hqq.torch.targets import owner_and_attribute
from nncf_hqq.torch.targets import select_targets

#: The progress-bar description of the targeted parameters.
TARGETS_DESCRIPTION = "Applying HQQ to target parameters"


class HQQPTBackend(HQQAlgoBackend, PTWeightCompressionAlgoBackend):
    """NNCF's Torch weight-compression backend that answers HQQ's questions and writes HQQ's results."""

    def __init__(
        self,
        hqq: HQQ,
        target_patterns: Sequence[str] = (),
        explicit_targets: bool = False,
        target_config: WeightCompressionConfig | None = None,
        ignored_scope: nncf.IgnoredScope | None = None,
    ) -> None:
        """
        :param target_patterns: glob patterns of the parameter names to compress besides NNCF's weights.
        :param explicit_targets: whether the user gave the patterns (a pattern matching nothing is then an error).
        :param target_config: the compression config of the targeted parameters (the primary mode and group size).
        :param ignored_scope: NNCF's ignored scope; a parameter it names is not targeted.
        """
        super().__init__()
        self.hqq = hqq
        self.target_patterns = tuple(target_patterns)
        self.explicit_targets = explicit_targets
        self.target_config = target_config
        self.ignored_scope = ignored_scope
        #: HQQ's compressed weights for the next ``transform_model`` that gets none from NNCF (``HQQ.apply``'s result).
        self.hqq_weights: Mapping[str, CompressedWeight] | None = None
        #: The parameters to compress besides NNCF's weights, chosen and checked by ``prepare``.
        self.parameter_targets: list[ParameterTarget] = []
        self._model: torch.nn.Module | None = None
        self._graph: NNCFGraph | None = None

    def prepare(self, model: Any, graph: NNCFGraph, all_weight_params: list[WeightCompressionParameters]) -> None:
        """Keeps the model and graph for the graph facts, and chooses and checks the targeted parameters."""
        self._model = model.model if isinstance(model, GraphModelWrapper) else model
        self._graph = graph
        if self.target_config is None or not self.target_patterns:
            return
        compressed_by_nncf = {wp.weight_name for wp in all_weight_params}
        self.parameter_targets = select_targets(
            self._model,
            self.target_patterns,
            self.explicit_targets,
            compressed_by_nncf,
            self.target_config,
            self.ignored_scope,
        )

    def input_importance(self, wp: WeightCompressionParameters, channels: int) -> np.ndarray | None:
        model, graph = self._prepared()
        port = self.get_activation_port_id(wp.node_with_weight, graph)
        return norm_gain_importance(graph, model, wp.node_with_weight, port, channels)

    def attention_role(self, wp: WeightCompressionParameters) -> AttentionRole | None:
        _, graph = self._prepared()
        return attention_role(graph, wp.node_with_weight)

    def _prepared(self) -> tuple[torch.nn.Module, NNCFGraph]:
        if self._model is None or self._graph is None:
            msg = "HQQPTBackend.prepare must run before HQQ asks about the graph."
            raise nncf.InternalError(msg)
        return self._model, self._graph

    def transform_model(
        self,
        model: GraphModelWrapper,
        graph: NNCFGraph,
        weight_compression_parameters: Iterable[WeightCompressionParameters],
        precomputed_compressed_weights: Mapping[str, CompressedWeight] | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> GraphModelWrapper:
        """Writes every weight (HQQ's where it decided them, NNCF's RTN elsewhere), then the targeted parameters.

        Writes the DQ format only: ``nncf_hqq.compress_weights`` refuses the others and LoRA correction, which
        NNCF's Torch backend has no writer for either.
        """
        hqq_weights = precomputed_compressed_weights
        if hqq_weights is None:
            hqq_weights, self.hqq_weights = self.hqq_weights or {}, None  # consumed (they hold this backend)
        transformer = PT2ModelTransformer(model)
        module = model.model
        layout = TransformationLayout()
        for wp in weight_compression_parameters:
            layout.register(self._weight_command(module, graph, wp, hqq_weights))
        for target in track(self.parameter_targets, description=TARGETS_DESCRIPTION):
            layout.register(self._parameter_command(module, graph, target))
        module.requires_grad_(False)
        return transformer.transform(layout)

    def _weight_command(
        self,
        module: torch.nn.Module,
        graph: NNCFGraph,
        wp: WeightCompressionParameters,
        hqq_weights: Mapping[str, CompressedWeight],
    ) -> PT2InsertionCommand:
        weight_node = get_const_node(wp.node_with_weight, wp.weight_port_id, graph)
        weight = get_const_data(weight_node, module)
        if wp.weight_name in hqq_weights:
            compressed = as_torch(hqq_weights[wp.weight_name], weight.device)
        else:
            compressed = compress_weight(Tensor(weight), wp.reduction_axes, wp.compression_config)
        if not is_float_zero_point(compressed):
            return self.get_dq_insertion_command(compressed, wp, module, graph, weight_node)
        bits = self.hqq.bits(wp.compression_config)
        return compressed_parameter_command(module, weight_node.layer_attributes.name, compressed, bits)

    def _parameter_command(
        self, module: torch.nn.Module, graph: NNCFGraph, target: ParameterTarget
    ) -> PT2InsertionCommand:
        owner, attribute = owner_and_attribute(module, target.name)
        parameter = getattr(owner, attribute)
        importance = None
        if self.hqq.uses_norm_gain:
            importance = parameter_importance(graph, module, target.name, parameter.shape[target.axis])
        result = self.hqq.compress(Tensor(parameter.detach()), target.axis, target.config, importance)
        compressed = as_torch(result, parameter.device)
        return compressed_parameter_command(module, target.name, compressed, self.hqq.bits(target.config))


def is_float_zero_point(compressed: CompressedWeight) -> bool:
    """Whether the zero point is a float tensor (HQQ's) rather than integer codes (NNCF's RTN)."""
    zero_point = compressed.zero_point
    if zero_point is None:
        return False
    data = zero_point.data
    return torch.is_floating_point(data) if isinstance(data, torch.Tensor) else np.issubdtype(data.dtype, np.floating)


def as_torch(compressed: CompressedWeight, device: torch.device) -> CompressedWeight:
    """HQQ's compressed weight (numpy tensors) as torch tensors on ``device``."""

    def convert(tensor: Tensor | None) -> Tensor | None:
        if tensor is None or tensor.backend == TensorBackend.torch:
            return tensor
        data = tensor.as_numpy_tensor().data if tensor.backend == TensorBackend.ov else tensor.data
        return Tensor(torch.from_numpy(np.ascontiguousarray(data)).to(device))

    return CompressedWeight(convert(compressed.tensor), convert(compressed.scale), convert(compressed.zero_point))


def compressed_parameter_command(
    module: torch.nn.Module, name: str, compressed: CompressedWeight, bits: int
) -> PT2InsertionCommand:
    """Stores the codes of ``compressed`` in place of the parameter ``name`` (the same ``Parameter`` object, as
    NNCF does, so tied parameters stay tied) and returns the command that hooks its decompressor on it (NNCF's DQ
    insertion point)."""
    owner, attribute = owner_and_attribute(module, name)
    parameter = getattr(owner, attribute)
    zero_point = None if compressed.zero_point is None else compressed.zero_point.data
    codes_shape = tuple(compressed.tensor.shape)
    decompressor = decompressor_for(
        compressed.scale.data, zero_point, codes_shape, bits, tuple(parameter.shape), parameter.dtype
    )
    packed = decompressor.pack_weight(compressed.tensor.data)
    parameter.requires_grad = False
    parameter.data = packed.reshape(packed_u4_shape(tuple(parameter.shape))) if bits == 4 else packed
    target = PTTargetPoint(TargetType.OPERATOR_POST_HOOK, target_node_name=name)
    return PT2InsertionCommand([target], decompressor)
