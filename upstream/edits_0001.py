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

    :param num_iterations: Maximal number of HQQ's zero-point iterations of a group (each group iterates until its
        zero point converges). Defaults to 20.
    :type num_iterations: int
    :param rtn_value_projections: Whether the layers that produce attention values keep round-to-nearest.
        Defaults to True.
    :type rtn_value_projections: bool
    """

    num_iterations: int = 20
    rtn_value_projections: bool = True


'''

HQQ_DOC = (
    "    :param hqq: Indicates whether to use HQQ (Half-Quadratic Quantization) for the layers compressed in the\n"
    "        INT4_ASYM or INT8_ASYM mode: per group, a float zero point found data-free by HQQ's iterations, the zero\n"
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
        num_iterations = (advanced_parameters or AdvancedCompressionParameters()).hqq_params.num_iterations
        if isinstance(num_iterations, bool) or not isinstance(num_iterations, int) or num_iterations < 0:
            msg = f"The HQQ parameter num_iterations should be a non-negative integer, but {num_iterations} is given."
            raise nncf.ValidationError(msg)
"""

HQQ_ALGO = """        self._hqq = hqq
        if self._hqq:
            hqq_params = self._advanced_parameters.hqq_params
            self._hqq_algo = HQQ(self._mode, hqq_params.num_iterations, hqq_params.rtn_value_projections)
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

    @property
    @abstractmethod
    def convert_metatypes(self) -> list[OperatorMetatype]:
        """
        Property for the backend-specific metatypes of element-type conversions (a softmax exported in float16
        reaches the MatMul with the values through them).
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

    @property
    def convert_metatypes(self) -> list[OperatorMetatype]:
        return [om.OVConvertMetatype]
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
        "        zero_point = precomputed_zero_point.astype(TensorDataType.float32)  # a float zero point (HQQ's)\n"
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

# NNCF's tests (not in the wheel: applied by `build.py --nncf-tests NNCF_REPO`, skipped otherwise)
TEMPLATE = "tests/cross_fw/test_templates/template_test_weights_compression.py"
OV_TESTS = "tests/openvino/native/quantization/test_weights_compression.py"
PT_TESTS = "tests/torch/function_hook/quantization/test_weights_compression.py"
FX_TESTS = "tests/torch/fx/test_weights_compression.py"
ONNX_TESTS = "tests/onnx/quantization/test_weights_compression.py"

TEMPLATE_HQQ = """
    # HQQ Tests

    @staticmethod
    def get_zero_point_dtypes(model: TModel) -> list[TensorDataType]:
        \"\"\"Returns the data types of the zero points of the compressed weights (backends that support HQQ).\"\"\"
        raise NotImplementedError

    def compress_with_hqq(self, model: TModel, hqq: bool = True, **kwargs) -> TModel:
        if "hqq" in self.get_not_supported_algorithms():
            pytest.skip("HQQ is not supported")
        return compress_weights(model, **{"mode": CompressWeightsMode.INT4_ASYM, "ratio": 1.0, "hqq": hqq, **kwargs})

    def test_hqq_refused_where_not_supported(self):
        if "hqq" not in self.get_not_supported_algorithms():
            pytest.skip("HQQ is supported")
        model = self.wrap_model(self.get_awq_model(False, False), np.ones([2, 8, 8], dtype=np.float32))
        with pytest.raises(nncf.ParameterNotSupportedError, match="hqq"):
            compress_weights(model, mode=CompressWeightsMode.INT4_ASYM, hqq=True)

    @pytest.mark.parametrize("is_3d_weights", [False, True], ids=["2d", "3d"])
    @pytest.mark.parametrize("transpose_b", [False, True], ids=["no_tr_b", "tr_b"])
    def test_hqq_float_zero_points(self, transpose_b, is_3d_weights):
        model = self.get_transposable_awq_model(False, transpose_b, is_3d_weights=is_3d_weights)
        model = self.compress_with_hqq(model, group_size=8, all_layers=True)
        assert self.get_zero_point_dtypes(model) == [TensorDataType.float16]

    @pytest.mark.parametrize("is_3d_weights", [False, True], ids=["2d", "3d"])
    @pytest.mark.parametrize("all_layers", [False, True])
    def test_hqq_compresses_awq_scaled_weights(self, all_layers, is_3d_weights):
        model = self.get_awq_model(True, is_3d_weights)  # not mergeable: AWQ's scales stay as Multiply nodes
        dataset = Dataset([self.to_tensor(np.ones([2, 8, 8], dtype=np.float32))] * 2, self.get_transform_func())
        model = self.compress_with_hqq(model, group_size=-1, dataset=dataset, awq=True, all_layers=all_layers)
        assert self.get_num_multiply_from_awq(model) > 0
        backup = [] if all_layers else [TensorDataType.uint8]  # the last layer takes the backup mode, INT8_ASYM
        dtypes = self.get_zero_point_dtypes(model)
        assert sorted(dtypes) == [TensorDataType.float16] * (len(dtypes) - len(backup)) + backup

    @pytest.mark.parametrize("transpose_a", [False, True], ids=["no_tr_a", "tr_a"])
    def test_hqq_weight_error_below_round_to_nearest(self, transpose_a):
        input = self.to_tensor(np.ones([1, 4, 8], dtype=np.float32))
        dataset = Dataset([input], self.get_transform_func())  # Torch traces the model on it
        errors = []
        for hqq in (False, True):
            model = self.get_model_for_test_scale_estimation(transpose_a=transpose_a)
            weight = self.get_orig_weight(model)
            model = self.compress_with_hqq(model, hqq, group_size=8, all_layers=True, dataset=dataset)
            errors.append(fns.mean((self.get_decompressed_weight(model, input) - weight) ** 2).item())
        assert errors[1] < errors[0]

    @pytest.mark.parametrize(
        ("kwargs", "error"),
        [
            ({"mode": CompressWeightsMode.NF4}, nncf.ParameterNotSupportedError),
            ({"compression_format": CompressionFormat.FQ}, nncf.ParameterNotSupportedError),
            ({"gptq": True}, nncf.ParameterNotSupportedError),
            ({"lora_correction": True}, nncf.ParameterNotSupportedError),
            ({"scale_estimation": True, "awq": True}, nncf.ValidationError),
            ({"advanced_parameters": CompressionParams(hqq_params=HQQParams(num_iterations=-1))}, nncf.ValidationError),
        ],
        ids=["nf4", "fq_format", "gptq", "lora_correction", "scale_estimation", "iterations"],
    )
    def test_hqq_refusals_leave_the_model_unchanged(self, kwargs, error):
        model = self.get_awq_model(False, True)
        dataset = Dataset([self.to_tensor(np.ones([2, 8, 8], dtype=np.float32))], self.get_transform_func())
        with pytest.raises(error):
            self.compress_with_hqq(model, group_size=-1, dataset=dataset, **kwargs)
        assert self.get_num_int4_nodes(model) == self.get_num_int8_nodes(model) == 0
        assert self.get_num_multiply_from_awq(model) == 0
"""

OV_ZERO_POINT_DTYPES = """
    @staticmethod
    def get_zero_point_dtypes(model: ov.Model) -> list[TensorDataType]:
        zero_points = [op for op in model.get_ops() if op.get_friendly_name().endswith("/zero_point")]
        return [DTYPE_MAP_REV[op.get_element_type()] for op in zero_points]
"""

OV_HQQ_TESTS = """

def get_hqq_attention_model(decomposed: bool = False) -> ov.Model:
    rng = np.random.default_rng(0)
    x = opset.parameter([1, 8, 64], ov.Type.f32, name="x")

    def linear(input, name):
        weight = opset.constant((rng.standard_t(4, (64, 64)) * 0.05).astype(np.float32), name=name)
        return opset.matmul(input, weight, False, True, name=f"{name}/matmul")

    q, k, v = (linear(x, name) for name in ("q", "k", "v"))
    if decomposed:  # as an eager attention exported in float16: the softmax reaches the values through Converts
        scores = opset.convert(opset.convert(opset.softmax(opset.matmul(q, k, False, True), -1), "f16"), "f32")
        return ov.Model([linear(opset.matmul(scores, v, False, False), "o")], [x])
    return ov.Model([linear(opset.scaled_dot_product_attention(q, k, v, causal=True), "o")], [x])


HQQ_INT4 = {"mode": CompressWeightsMode.INT4_ASYM, "ratio": 1.0, "group_size": 32, "all_layers": True}


@pytest.mark.parametrize("decomposed", [False, True])
@pytest.mark.parametrize("rtn_value_projections", [True, False])
def test_hqq_attention_values_keep_rounding(rtn_value_projections, decomposed):
    params = CompressionParams(hqq_params=HQQParams(rtn_value_projections=rtn_value_projections))
    model = compress_weights(get_hqq_attention_model(decomposed), hqq=True, advanced_parameters=params, **HQQ_INT4)
    found = {op.get_friendly_name(): op.get_element_type() for op in model.get_ops()}
    assert [found[f"{name}/zero_point"] for name in ("q", "k", "o")] == [ov.Type.f16] * 3
    assert (found["v/zero_point"] == ov.Type.u4) == rtn_value_projections


@pytest.mark.parametrize("hqq", [False, True])
def test_hqq_and_its_parameters_are_dumped_to_rt_info(hqq):
    model = compress_weights(get_hqq_attention_model(), hqq=hqq, **HQQ_INT4)
    dumped = model.get_rt_info()["nncf"]["weight_compression"]
    assert dumped["hqq"].value == str(hqq)
    assert "'hqq_params': {'num_iterations': 20, 'rtn_value_projections': True" in dumped["advanced_parameters"].value


def test_hqq_codes_of_compiled_and_reference_quantization_are_equal():
    weight = Tensor((np.random.default_rng(0).standard_t(4, (64, 256)) * 0.05).astype(np.float32))
    config = WeightCompressionConfig(CompressWeightsMode.INT4_ASYM, group_size=32)
    params, codes = HQQ(config.mode).calculate_quantization_params(weight, 1, config), []
    for optimized in (True, False):  # NNCF's compiled quantization and its numpy reference, the float zero point's
        with patch(f"{compress_weight.__module__}._can_run_optimized", return_value=optimized):
            codes.append(compress_weight(weight, 1, config, params).tensor.data)
    np.testing.assert_array_equal(*codes)
"""

TEST_EDITS: list[Edit] = [
    insert_after(
        TEMPLATE,
        "from nncf.errors import InvalidGroupSizeError\n",
        "from nncf.parameters import CompressionFormat\n",
    ),
    insert_after(
        TEMPLATE,
        "from nncf.quantization.advanced_parameters import AdvancedGPTQParameters as GPTQParams\n",
        "from nncf.quantization.advanced_parameters import AdvancedHQQParameters as HQQParams\n",
    ),
    append(TEMPLATE, TEMPLATE_HQQ),
    insert_after(
        OV_TESTS,
        "from nncf.quantization.advanced_parameters import AdvancedGPTQParameters as GPTQParams\n",
        "from nncf.quantization.advanced_parameters import AdvancedHQQParameters as HQQParams\n",
    ),
    insert_before(OV_TESTS, "\n\nclass TestOVTemplateWeightCompression(TemplateWeightCompression):\n", OV_HQQ_TESTS),
    insert_after(
        OV_TESTS,
        "from nncf.quantization.algorithms.weight_compression.config import WeightCompressionParameters\n",
        "from nncf.quantization.algorithms.weight_compression.hqq import HQQ\n",
    ),
    insert_after(
        OV_TESTS,
        "from nncf.quantization.algorithms.weight_compression.weight_lowering import _calculate_normalized_weight\n",
        "from nncf.quantization.algorithms.weight_compression.weight_lowering import compress_weight\n",
    ),
    insert_after(
        OV_TESTS,
        "from nncf.tensor import TensorDataType\n",
        "from nncf.tensor.functions.openvino_numeric import DTYPE_MAP_REV\n",
    ),
    insert_after(
        OV_TESTS,
        "    def get_not_supported_algorithms() -> list[str]:\n        return []\n",
        OV_ZERO_POINT_DTYPES,
    ),
    Edit(
        OV_TESTS,
        '            "gptq",\n        ),\n    )\n    def test_raise_error_with_unsupported_algo',
        '            "gptq",\n            "hqq",\n        ),\n    )\n    def test_raise_error_with_unsupported_algo',
    ),
    insert_after(OV_TESTS, '        ({"awq": True}, 6),\n', '        ({"hqq": True}, 6),\n'),
    insert_after(
        OV_TESTS,
        '            elif "_lora_" in op.get_friendly_name():\n'
        "                assert op.get_element_type() == ov.Type.u8\n",
        '            elif "hqq" in params and op.get_element_type() == ov.Type.f16:  # HQQ\'s float zero points\n'
        "                act_num += 1\n",
    ),
    *(
        Edit(
            path,
            f"        return {names}\n",
            f'        return {names[:-1]}, "hqq"]\n',
        )
        for path, names in (
            (PT_TESTS, '["lora_correction", "gptq"]'),
            (FX_TESTS, '["lora_correction", "gptq"]'),
            (ONNX_TESTS, '["gptq", "lora_correction"]'),
        )
    ),
    *(
        Edit(
            path,
            '        {"lora_correction": True},\n        {"compression_format": CompressionFormat.FQ',
            '        {"lora_correction": True},\n        {"hqq": True},\n'
            '        {"compression_format": CompressionFormat.FQ',
        )
        for path in (PT_TESTS, FX_TESTS)
    ),
]

EDITS += TEST_EDITS
