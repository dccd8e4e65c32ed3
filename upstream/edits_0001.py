"""The edits of NNCF 3.4.0's files that the core pull request (0001) makes: ``hqq=`` from ``compress_weights`` to
``WeightCompression``, ``AdvancedHQQParameters``, HQQ in Scale Estimation's slot, the writers that keep final codes
and float zero points, and HQQ's graph questions answered by the OpenVINO and Torch backends.

Each ``Edit`` replaces one anchor (NNCF 3.4.0's lines, quoted exactly) that must occur exactly once in its file."""

from __future__ import annotations

from edit import Edit
from edit import append
from edit import insert_after
from edit import insert_before

NNCF_INIT = "src/nncf/__init__.py"
QUANTIZE_MODEL = "src/nncf/quantization/quantize_model.py"
ADVANCED_PARAMETERS = "src/nncf/quantization/advanced_parameters.py"
WC = "src/nncf/quantization/algorithms/weight_compression"
ALGORITHM = f"{WC}/algorithm.py"
BACKEND = f"{WC}/backend.py"
WEIGHT_LOWERING = f"{WC}/weight_lowering.py"
OV_BACKEND = f"{WC}/openvino_backend.py"
PT_BACKEND = f"{WC}/torch_backend.py"
PT_LAYERS = "src/nncf/torch/quantization/layers.py"
OV_IMPL = "src/nncf/openvino/quantization/quantize_model.py"
PT_IMPL = "src/nncf/torch/function_hook/quantization/quantize_model.py"
FX_IMPL = "src/nncf/experimental/torch/fx/quantization/quantize_model.py"
ONNX_IMPL = "src/nncf/onnx/quantization/quantize_model.py"

ADVANCED_HQQ_PARAMETERS = '''@api()
@dataclass
class AdvancedHQQParameters:
    """
    Contains advanced parameters for HQQ (Half-Quadratic Quantization).

    :param num_iterations: Maximal number of HQQ's zero-point iterations. Defaults to 20.
    :type num_iterations: int
    :param refinement_steps: Steps of least-squares refinement of the scales and zero points. Defaults to 5.
    :type refinement_steps: int
    :param unit_gain: Whether the scale of every group is finally set so that the group is reproduced with unit
        gain along its weights. Defaults to True.
    :type unit_gain: bool
    :param rtn_value_projections: Whether the layers that produce attention values keep round-to-nearest.
        Defaults to True.
    :type rtn_value_projections: bool
    """

    num_iterations: int = 20
    refinement_steps: int = 5
    unit_gain: bool = True
    rtn_value_projections: bool = True


'''

HQQ_DOC = (
    "    :param hqq: Indicates whether to use HQQ (Half-Quadratic Quantization) for the layers compressed in the\n"
    "        INT4_ASYM or INT8_ASYM mode: per group, a float zero point and a scale optimised data-free. With\n"
    "        scale_estimation, HQQ's scales are refined on the calibration data instead. OpenVINO and PyTorch\n"
    "        models, DQ compression format, not with GPTQ.\n"
    "    :type hqq: bool\n"
)

CHECK_HQQ = """
    if hqq:
        if mode not in HQQ_MODES:
            msg = f"HQQ supports the {', '.join(m.value for m in HQQ_MODES)} modes, but mode={mode.value} is given."
            raise nncf.ParameterNotSupportedError(msg)
        if gptq:
            msg = "Simultaneous use of HQQ and GPTQ algorithms is not supported. Select one of them."
            raise nncf.ParameterNotSupportedError(msg)
        if compression_format not in (None, CompressionFormat.DQ):
            msg = f"HQQ supports the DQ compression format only, but {compression_format.value} is given."
            raise nncf.ParameterNotSupportedError(msg)
        hqq_params = (advanced_parameters or AdvancedCompressionParameters()).hqq_params
        for name in ("num_iterations", "refinement_steps"):
            value = getattr(hqq_params, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                msg = f"The HQQ parameter {name} should be a non-negative integer, but {name}={value} is given."
                raise nncf.ValidationError(msg)
"""

HQQ_ALGO = """        self._hqq = hqq
        if self._hqq:
            hqq_params = self._advanced_parameters.hqq_params
            self._hqq_algo = HQQ(
                self._mode,
                hqq_params.num_iterations,
                hqq_params.refinement_steps,
                hqq_params.unit_gain,
                hqq_params.rtn_value_projections,
                self._advanced_parameters.scale_estimation_params.subset_size,
            )
"""

HQQ_ALGO_BACKEND = '''

class HQQAlgoBackend(WeightCompressionAlgoBackend):
    @property
    @abstractmethod
    def scaled_dot_product_attention_metatypes(self) -> list[OperatorMetatype]:
        """
        Metatypes of scaled dot-product attention (input port 2: the value).
        """

    @property
    @abstractmethod
    def softmax_metatypes(self) -> list[OperatorMetatype]: ...

    @property
    @abstractmethod
    def shapeof_metatypes(self) -> list[OperatorMetatype]: ...

    @abstractmethod
    def get_normalization_affine(
        self, model: TModel, graph: NNCFGraph, node_with_weight: NNCFNode, channels: int
    ) -> tuple[Tensor, Tensor | None] | None:
        """
        Returns gamma and beta (None without shift) of the normalization x_hat * gamma + beta that produces the
        activation of the node with weights, one value per input channel, or None when there is none.
        """
'''

OV_HQQ_ALGO_BACKEND = '''

class OVHQQAlgoBackend(HQQAlgoBackend, OVWeightCompressionAlgoBackend):
    @property
    def scaled_dot_product_attention_metatypes(self) -> list[OperatorMetatype]:
        return [om.OVScaledDotProductAttentionMetatype]

    @property
    def softmax_metatypes(self) -> list[OperatorMetatype]:
        return [om.OVSoftmaxMetatype]

    @property
    def shapeof_metatypes(self) -> list[OperatorMetatype]:
        return [om.OVShapeOfMetatype]

    def get_normalization_affine(
        self, model: ov.Model, graph: NNCFGraph, node_with_weight: NNCFNode, channels: int
    ) -> tuple[Tensor, Tensor | None] | None:
        # The model as it is now (after AWQ, whose scales then count as the normalization's gain)
        matmul = self.name_to_node_mapping[node_with_weight.node_name]
        producer = self._skip_converts(matmul.input_value(self.get_activation_port_id(node_with_weight, graph)))
        beta = None
        if producer.get_type_name() == "Add":
            shift = self._channel_constant(producer, channels)
            if shift is None:
                return None
            beta, producer = shift
        if producer.get_type_name() != "Multiply":
            return None
        gain = self._channel_constant(producer, channels)
        return None if gain is None else (gain[0], beta)

    @staticmethod
    def _skip_converts(value: ov.Output) -> ov.Node:
        while value.get_node().get_type_name() == "Convert":
            value = value.get_node().input_value(0)
        return value.get_node()

    def _channel_constant(self, node: ov.Node, channels: int) -> tuple[Tensor, ov.Node] | None:
        """A binary operation's constant input of the given size, and the producer of its other input."""
        sources = [self._skip_converts(value) for value in node.input_values()]
        for index, source in enumerate(sources):
            if source.get_type_name() == "Constant" and len(sources) == 2:
                value = get_const_value_as_numpy_tensor(source).reshape(-1)
                if value.size == channels:
                    return Tensor(value), sources[1 - index]
        return None
'''

PT_HQQ_ALGO_BACKEND = '''

class PTHQQAlgoBackend(HQQAlgoBackend, PTWeightCompressionAlgoBackend):
    # Input ports of the weight (gamma) and bias (beta) of layer_norm.
    LAYER_NORM_PORTS = (2, 3)

    @property
    def scaled_dot_product_attention_metatypes(self) -> list[OperatorMetatype]:
        return [PTScaledDotProductAttentionMetatype]

    @property
    def softmax_metatypes(self) -> list[OperatorMetatype]:
        return [PTSoftmaxMetatype]

    @property
    def shapeof_metatypes(self) -> list[OperatorMetatype]:
        return []

    def get_normalization_affine(
        self, model: GraphModelWrapper, graph: NNCFGraph, node_with_weight: NNCFNode, channels: int
    ) -> tuple[Tensor, Tensor | None] | None:
        module = model.model if isinstance(model, GraphModelWrapper) else model
        activation_port_id = self.get_activation_port_id(node_with_weight, graph)
        activation = graph.get_input_edge_by_port_id(node_with_weight, activation_port_id).from_node
        producer = self._skip_noops(graph, activation)
        if producer.metatype == PTLayerNormMetatype:
            ports = {edge.input_port_id: edge.from_node for edge in graph.get_input_edges(producer)}
            gamma, beta = (self._constant(module, ports.get(port)) for port in self.LAYER_NORM_PORTS)
            return None if gamma is None or gamma.size != channels else (gamma, beta)
        beta = None
        if producer.metatype == PTAddMetatype:
            shift = self._channel_constant(module, graph, producer, channels)
            if shift is None:
                return None
            beta, producer = shift[0], self._skip_noops(graph, shift[1])
        if producer.metatype != PTMulMetatype:
            return None
        gain = self._channel_constant(module, graph, producer, channels)
        return None if gain is None else (gain[0], beta)

    def _skip_noops(self, graph: NNCFGraph, node: NNCFNode) -> NNCFNode:
        while node.metatype in self.noop_metatypes and graph.get_input_edges(node):
            node = min(graph.get_input_edges(node), key=lambda edge: edge.input_port_id).from_node
        return node

    @staticmethod
    def _constant(model: torch.nn.Module, node: NNCFNode | None) -> Tensor | None:
        if node is None or node.metatype not in CONST_NOOP_METATYPES:
            return None
        return Tensor(get_const_data(node, model).detach().reshape(-1))

    def _channel_constant(
        self, model: torch.nn.Module, graph: NNCFGraph, node: NNCFNode, channels: int
    ) -> tuple[Tensor, NNCFNode] | None:
        """A binary operation's parameter input of the given size, and the producer of its other input."""
        sources = [edge.from_node for edge in graph.get_input_edges(node)]
        if len(sources) != 2:
            return None
        for index, source in enumerate(sources):
            value = self._constant(model, source)
            if value is not None and value.size == channels:
                return value, sources[1 - index]
        return None
'''


def _impl_edits(path: str, returns: str, tail: str) -> list[Edit]:
    """``compress_weights_impl(..., hqq=False)`` passes ``hqq`` to ``WeightCompression``."""
    return [
        Edit(
            path,
            f"    advanced_parameters: AdvancedCompressionParameters | None = None,\n) -> {returns}:\n",
            f"    advanced_parameters: AdvancedCompressionParameters | None = None,\n    hqq: bool = False,\n"
            f") -> {returns}:\n",
        ),
        Edit(
            path,
            f"        compression_format,\n        advanced_parameters,\n    )\n{tail}",
            f"        compression_format,\n        advanced_parameters,\n        hqq=hqq,\n    )\n{tail}",
        ),
    ]


EDITS: list[Edit] = [
    # nncf/__init__.py
    insert_after(
        NNCF_INIT,
        "from nncf.quantization.advanced_parameters import AdvancedGPTQParameters as AdvancedGPTQParameters\n",
        "from nncf.quantization.advanced_parameters import AdvancedHQQParameters as AdvancedHQQParameters\n",
    ),
    # advanced_parameters.py
    insert_after(
        ADVANCED_PARAMETERS,
        "    subset_size: int = 128\n    use_int8_adapters: bool = True\n\n\n",
        ADVANCED_HQQ_PARAMETERS,
    ),
    insert_after(
        ADVANCED_PARAMETERS,
        "    :type lora_correction_params: AdvancedLoraCorrectionParameters\n",
        "    :param hqq_params: Advanced parameters for HQQ.\n    :type hqq_params: AdvancedHQQParameters\n",
    ),
    insert_after(
        ADVANCED_PARAMETERS,
        "    lora_correction_params: AdvancedLoraCorrectionParameters = field("
        "default_factory=AdvancedLoraCorrectionParameters)\n",
        "    hqq_params: AdvancedHQQParameters = field(default_factory=AdvancedHQQParameters)\n",
    ),
    # quantize_model.py: compress_weights(..., hqq=None)
    insert_after(QUANTIZE_MODEL, '        "lora_correction",\n        "backup_mode",\n', '        "hqq",\n'),
    insert_after(
        QUANTIZE_MODEL,
        "    lora_correction: bool | None = None,\n    backup_mode: BackupMode | None = None,\n",
        "    hqq: bool | None = None,\n",
    ),
    insert_after(QUANTIZE_MODEL, "    :type lora_correction: bool\n", HQQ_DOC),
    Edit(
        QUANTIZE_MODEL,
        '        options = {"gptq": gptq, "lora_correction": lora_correction}\n'
        "        unsupported_options = [name for name, value in options.items() if value is not None]\n"
        "        if unsupported_options:\n"
        '            msg = f"TorchFX backend',
        '        options = {"gptq": gptq, "lora_correction": lora_correction, "hqq": hqq}\n'
        "        unsupported_options = [name for name, value in options.items() if value is not None]\n"
        "        if unsupported_options:\n"
        '            msg = f"TorchFX backend',
    ),
    Edit(
        QUANTIZE_MODEL,
        '        options = {"gptq": gptq, "lora_correction": lora_correction}\n'
        "        unsupported_options = [name for name, value in options.items() if value is not None]\n"
        "        if unsupported_options:\n"
        '            msg = f"ONNX backend',
        '        options = {"gptq": gptq, "lora_correction": lora_correction, "hqq": hqq}\n'
        "        unsupported_options = [name for name, value in options.items() if value is not None]\n"
        "        if unsupported_options:\n"
        '            msg = f"ONNX backend',
    ),
    Edit(
        QUANTIZE_MODEL,
        "        compression_format,\n        advanced_parameters,\n    )\n"
        "    weight_compression_configuration = get_weight_compression_configuration(\n",
        "        compression_format,\n        advanced_parameters,\n        hqq=hqq,\n    )\n"
        "    weight_compression_configuration = get_weight_compression_configuration(\n",
    ),
    Edit(
        QUANTIZE_MODEL,
        "        backup_mode,\n        advanced_parameters,\n    )\n\n    return compression_weights_impl(\n",
        "        backup_mode,\n        advanced_parameters,\n        hqq=hqq,\n"
        "    )\n\n    return compression_weights_impl(\n",
    ),
    # algorithm.py
    insert_after(
        ALGORITHM,
        "from nncf.quantization.algorithms.weight_compression.gptq import GPTQ\n",
        "from nncf.quantization.algorithms.weight_compression.hqq import HQQ\n"
        "from nncf.quantization.algorithms.weight_compression.hqq import HQQ_MODES\n",
    ),
    Edit(
        ALGORITHM,
        "    advanced_parameters: AdvancedCompressionParameters | None = None,\n) -> dict[str, Any]:\n",
        "    advanced_parameters: AdvancedCompressionParameters | None = None,\n    hqq: bool | None = None,\n"
        ") -> dict[str, Any]:\n",
    ),
    insert_after(ALGORITHM, '        "lora_correction": lora_correction or False,\n', '        "hqq": hqq or False,\n'),
    Edit(
        ALGORITHM,
        "    advanced_parameters: AdvancedCompressionParameters | None,\n) -> None:\n",
        "    advanced_parameters: AdvancedCompressionParameters | None,\n    hqq: bool | None = None,\n) -> None:\n",
    ),
    insert_before(ALGORITHM, "\n\n\nclass WeightCompression(Algorithm):\n", "\n" + CHECK_HQQ.rstrip("\n")),
    insert_after(
        ALGORITHM,
        "        compression_format: CompressionFormat = CompressionFormat.DQ,\n"
        "        advanced_parameters: AdvancedCompressionParameters | None = None,\n",
        "        hqq: bool = False,\n",
    ),
    insert_after(
        ALGORITHM,
        "        :param advanced_parameters: advanced parameters for algorithms in compression pipeline.\n",
        "        :param hqq: determines whether to use or not HQQ for the layers compressed in INT4_ASYM or INT8_ASYM\n"
        "            mode. With scale_estimation, HQQ takes Scale Estimation's place and refines its own scales on\n"
        "            the calibration data.\n",
    ),
    insert_before(
        ALGORITHM,
        "        if self._scale_estimation:\n            scale_estimation_params = self._advanced_parameters."
        "scale_estimation_params\n",
        HQQ_ALGO,
    ),
    Edit(
        ALGORITHM,
        "        else:\n            if self._scale_estimation:\n"
        "                precomputed_compressed_weights = self._scale_estimation_algo.apply(\n",
        "        else:\n            if self._hqq:\n"
        "                precomputed_compressed_weights = self._hqq_algo.apply(\n"
        "                    model=model,\n"
        "                    graph=graph,\n"
        "                    all_weight_params=all_weight_params,\n"
        "                    statistics=statistics if self._scale_estimation else None,\n"
        "                    backend_entity=self._backend_entity,\n"
        "                )\n"
        "            elif self._scale_estimation:\n"
        "                precomputed_compressed_weights = self._scale_estimation_algo.apply(\n",
    ),
    Edit(
        ALGORITHM,
        "        self._backend_entity.dump_parameters(\n            model,\n",
        "        advanced_parameters = convert_to_dict_recursively(self._advanced_parameters)\n"
        "        if not self._hqq:\n"
        '            del advanced_parameters["hqq_params"]\n'
        "        self._backend_entity.dump_parameters(\n            model,\n",
    ),
    Edit(
        ALGORITHM,
        '                "advanced_parameters": convert_to_dict_recursively(self._advanced_parameters),\n'
        "            },\n",
        '                "advanced_parameters": advanced_parameters,\n'
        '                **({"hqq": True} if self._hqq else {}),\n'
        "            },\n",
    ),
    # weight_lowering.py: final codes are written as they are
    insert_before(
        WEIGHT_LOWERING,
        "    precomputed_scale, precomputed_zero_point = (\n",
        "    # The integer codes of an earlier step (HQQ) are final: encoding the weight again would change them.\n"
        "    if (\n"
        "        config.is_integer\n"
        "        and precomputed_compressed_weight is not None\n"
        "        and precomputed_compressed_weight.tensor is not None\n"
        "    ):\n"
        "        return precomputed_compressed_weight\n",
    ),
    # backend.py, openvino_backend.py, torch_backend.py: HQQ's graph questions
    append(BACKEND, HQQ_ALGO_BACKEND),
    insert_after(
        OV_BACKEND,
        "from nncf.quantization.algorithms.weight_compression.backend import AWQAlgoBackend\n",
        "from nncf.quantization.algorithms.weight_compression.backend import HQQAlgoBackend\n",
    ),
    Edit(
        OV_BACKEND,
        "            if compressed_weight.zero_point is not None:\n"
        "                zero_point_const = create_ov_const_from_tensor(\n"
        '                    compressed_weight.zero_point, compression_dtype, name=f"{const_node_name}/zero_point"\n'
        "                )\n"
        "                zero_point_const = opset.convert(zero_point_const, ov.Type.f16)\n",
        "            if compressed_weight.zero_point is not None:\n"
        "                if compressed_weight.zero_point.dtype == TensorDataType.float16:  # HQQ's float zero point\n"
        "                    zero_point_const = create_ov_const_from_tensor(\n"
        '                        compressed_weight.zero_point, ov.Type.f16, name=f"{const_node_name}/zero_point"\n'
        "                    )\n"
        "                else:\n"
        "                    zero_point_const = create_ov_const_from_tensor(\n"
        "                        compressed_weight.zero_point,"
        ' compression_dtype, name=f"{const_node_name}/zero_point"\n'
        "                    )\n"
        "                    zero_point_const = opset.convert(zero_point_const, ov.Type.f16)\n",
    ),
    append(OV_BACKEND, OV_HQQ_ALGO_BACKEND),
    insert_after(
        PT_BACKEND,
        "from nncf.quantization.algorithms.weight_compression.backend import AWQAlgoBackend\n",
        "from nncf.quantization.algorithms.weight_compression.backend import HQQAlgoBackend\n",
    ),
    insert_after(
        PT_BACKEND,
        "from nncf.torch.graph.operator_metatypes import MATMUL_METATYPES\n",
        "from nncf.torch.graph.operator_metatypes import PTAddMetatype\n",
    ),
    insert_after(
        PT_BACKEND,
        "from nncf.torch.graph.operator_metatypes import PTDropoutMetatype\n",
        "from nncf.torch.graph.operator_metatypes import PTLayerNormMetatype\n",
    ),
    insert_after(
        PT_BACKEND,
        "from nncf.torch.graph.operator_metatypes import PTNoopMetatype\n",
        "from nncf.torch.graph.operator_metatypes import PTScaledDotProductAttentionMetatype\n"
        "from nncf.torch.graph.operator_metatypes import PTSoftmaxMetatype\n",
    ),
    append(PT_BACKEND, PT_HQQ_ALGO_BACKEND),
    # torch layers.py: the asymmetric decompressors take a float zero point
    Edit(
        PT_LAYERS,
        '        self.register_buffer("_scale", scale.type(dtype=torch.float16))\n'
        '        self.register_buffer("_zero_point", self.pack_weight(zero_point))\n'
        "        self.result_dtype = result_dtype\n",
        '        self.register_buffer("_scale", scale.type(dtype=torch.float16))\n'
        '        self.register_buffer("_zero_point", self._zero_point_buffer(zero_point))\n'
        "        self.result_dtype = result_dtype\n",
    ),
    Edit(
        PT_LAYERS,
        "        self.zero_point_shape = zero_point.shape\n"
        '        self.register_buffer("_zero_point", self.pack_weight(zero_point))\n',
        "        self.zero_point_shape = zero_point.shape\n"
        '        self.register_buffer("_zero_point", self._zero_point_buffer(zero_point))\n',
    ),
    Edit(
        PT_LAYERS,
        "        zero_point = unpack_uint4(self._zero_point)\n"
        "        zero_point = zero_point.reshape(self.zero_point_shape)\n",
        "        zero_point = self._zero_point\n"
        "        if zero_point.dtype != torch.float16:\n"
        "            zero_point = unpack_uint4(zero_point).reshape(self.zero_point_shape)\n",
    ),
    insert_before(
        PT_LAYERS,
        "    @abstractmethod\n    def pack_weight(self, weight: torch.Tensor) -> torch.Tensor:\n",
        "    def _zero_point_buffer(self, zero_point: torch.Tensor) -> torch.Tensor:\n"
        '        """The stored zero point: packed like the weight, or as it is when float16 (HQQ)."""\n'
        "        if zero_point.dtype == torch.float16:\n"
        "            return zero_point\n"
        "        return self.pack_weight(zero_point)\n\n",
    ),
    # compress_weights_impl of every backend
    *_impl_edits(OV_IMPL, "ov.Model", "\n    statistics_points = None\n"),
    *_impl_edits(PT_IMPL, "torch.nn.Module", "    graph = build_graph(model)\n\n"),
    *_impl_edits(FX_IMPL, "torch.fx.GraphModule", "    graph = build_graph(model)\n    compressed_model = "),
    *_impl_edits(ONNX_IMPL, "onnx.ModelProto", "    graph = build_graph(model)\n"),
]
