"""The edits of NNCF 3.4.0's files that the core pull request (0001) makes: ``hqq=`` from ``compress_weights`` to
``WeightCompression`` (checked before anything is transformed), ``AdvancedHQQParameters``, HQQ's scales and zero
points handed to NNCF's quantization as Scale Estimation's are, and the OpenVINO and Torch writers that store a
float16 zero point.

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
    :param refinement_steps: Number of least-squares steps on the scales and zero points after HQQ's iterations.
        Defaults to 5.
    :type refinement_steps: int
    :param rtn_value_projections: Whether the layers that produce attention values keep round-to-nearest.
        Defaults to True.
    :type rtn_value_projections: bool
    """

    num_iterations: int = 20
    refinement_steps: int = 5
    rtn_value_projections: bool = True


'''

HQQ_DOC = (
    "    :param hqq: Indicates whether to use HQQ (Half-Quadratic Quantization) for the layers compressed in the\n"
    "        INT4_ASYM or INT8_ASYM mode: per group, a float zero point and a scale optimised data-free, the zero\n"
    "        point stored in float16. Combines with AWQ (HQQ compresses AWQ's scaled weights); not with\n"
    "        scale_estimation, GPTQ or lora_correction. OpenVINO models, DQ compression format.\n"
    "    :type hqq: bool\n"
)

CHECK_HQQ = """
    if hqq:
        if mode not in HQQ_MODES:
            msg = f"HQQ supports the {', '.join(m.value for m in HQQ_MODES)} modes, but mode={mode.value} is given."
            raise nncf.ParameterNotSupportedError(msg)
        for name, value in (("gptq", gptq), ("lora_correction", lora_correction)):
            if value:
                msg = f"Simultaneous use of HQQ and {name} is not supported. Select one of them."
                raise nncf.ParameterNotSupportedError(msg)
        if scale_estimation:
            msg = "HQQ and Scale Estimation both set the scales of the same weights: use one of them (with AWQ or not)."
            raise nncf.ValidationError(msg)
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
                self._mode, hqq_params.num_iterations, hqq_params.refinement_steps, hqq_params.rtn_value_projections
            )
"""


HQQ_ALGO_BACKEND = '''

class HQQAlgoBackend(WeightCompressionAlgoBackend):
    @property
    @abstractmethod
    def scaled_dot_product_attention_metatypes(self) -> list[OperatorMetatype]:
        """
        Property for the backend-specific metatypes of scaled dot-product attention (inputs: query, key, value,
        mask).
        """

    @property
    @abstractmethod
    def softmax_metatypes(self) -> list[OperatorMetatype]:
        """
        Property for the backend-specific metatypes of softmax.
        """

    @property
    @abstractmethod
    def shapeof_metatypes(self) -> list[OperatorMetatype]:
        """
        Property for the backend-specific metatypes of the operations that read a tensor's shape only.
        """
'''

OV_HQQ_ALGO_BACKEND = """

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
"""


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
        '            msg = f"Torch backend',
        '        options = {"gptq": gptq, "lora_correction": lora_correction, "hqq": hqq}\n'
        "        unsupported_options = [name for name, value in options.items() if value is not None]\n"
        "        if unsupported_options:\n"
        '            msg = f"Torch backend',
    ),
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
        "            mode.\n",
    ),
    insert_before(
        ALGORITHM,
        "        if self._scale_estimation:\n            scale_estimation_params = self._advanced_parameters."
        "scale_estimation_params\n",
        HQQ_ALGO,
    ),
    insert_before(
        ALGORITHM,
        "\n            if self._lora_correction:\n                for wc_params in all_weight_params:\n",
        "            elif self._hqq:\n"
        "                precomputed_compressed_weights = self._hqq_algo.apply(\n"
        "                    model=model,\n"
        "                    graph=graph,\n"
        "                    all_weight_params=all_weight_params,\n"
        "                    backend_entity=self._backend_entity,\n"
        "                )\n",
    ),
    insert_after(
        ALGORITHM, '                "lora_correction": self._lora_correction,\n', '                "hqq": self._hqq,\n'
    ),
    # weight_lowering.py: a float16 zero point (HQQ's) quantizes in float32 and is kept for the writers
    insert_before(
        WEIGHT_LOWERING,
        "    if not config.is_integer:\n        if (\n",
        "    if precomputed_zero_point is not None and precomputed_zero_point.dtype == TensorDataType.float16:\n"
        "        zero_point = precomputed_zero_point.astype(TensorDataType.float32)\n"
        "        compressed = do_integer_quantization(weight, config, reduction_axes, precomputed_scale, zero_point)\n"
        "        return CompressedWeight(compressed.tensor, compressed.scale, precomputed_zero_point)\n",
    ),
    # backend.py, openvino_backend.py: the graph questions of HQQ (which layers produce attention values)
    append(BACKEND, HQQ_ALGO_BACKEND),
    insert_after(
        OV_BACKEND,
        "from nncf.quantization.algorithms.weight_compression.backend import AWQAlgoBackend\n",
        "from nncf.quantization.algorithms.weight_compression.backend import HQQAlgoBackend\n",
    ),
    append(OV_BACKEND, OV_HQQ_ALGO_BACKEND),
    # openvino_backend.py: a float zero point (HQQ's) is stored in float16 as it is
    Edit(
        OV_BACKEND,
        "            if compressed_weight.zero_point is not None:\n"
        "                zero_point_const = create_ov_const_from_tensor(\n"
        '                    compressed_weight.zero_point, compression_dtype, name=f"{const_node_name}/zero_point"\n'
        "                )\n"
        "                zero_point_const = opset.convert(zero_point_const, ov.Type.f16)\n",
        "            if compressed_weight.zero_point is not None:\n"
        "                is_float = compressed_weight.zero_point.dtype == TensorDataType.float16  # HQQ's\n"
        "                zero_point_const = create_ov_const_from_tensor(\n"
        "                    compressed_weight.zero_point,\n"
        "                    ov.Type.f16 if is_float else compression_dtype,\n"
        '                    name=f"{const_node_name}/zero_point",\n'
        "                )\n"
        "                if not is_float:\n"
        "                    zero_point_const = opset.convert(zero_point_const, ov.Type.f16)\n",
    ),
    # compress_weights_impl of every backend
    *_impl_edits(OV_IMPL, "ov.Model", "\n    statistics_points = None\n"),
    *_impl_edits(PT_IMPL, "torch.nn.Module", "    graph = build_graph(model)\n\n"),
    *_impl_edits(FX_IMPL, "torch.fx.GraphModule", "    graph = build_graph(model)\n    compressed_model = "),
    *_impl_edits(ONNX_IMPL, "onnx.ModelProto", "    graph = build_graph(model)\n"),
]
