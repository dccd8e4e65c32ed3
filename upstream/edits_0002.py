"""The edits of the second pull request (0002): HQQ on PyTorch models. The Torch decompressors store a float zero
point in float16, the Torch backend answers HQQ's graph questions, and ``compress_weights`` no longer refuses ``hqq``
for Torch models."""

from __future__ import annotations

from edit import Edit
from edit import append
from edit import insert_after
from edit import insert_before
from edits_0001 import PT_TESTS
from edits_0001 import QUANTIZE_MODEL
from edits_0001 import WC

HQQ_PY = f"{WC}/hqq.py"
PT_BACKEND = f"{WC}/torch_backend.py"
PT_LAYERS = "src/nncf/torch/quantization/layers.py"

PT_HQQ_ALGO_BACKEND = """

class PTHQQAlgoBackend(HQQAlgoBackend, PTWeightCompressionAlgoBackend):
    @property
    def scaled_dot_product_attention_metatypes(self) -> list[OperatorMetatype]:
        return [PTScaledDotProductAttentionMetatype]

    @property
    def softmax_metatypes(self) -> list[OperatorMetatype]:
        return [PTSoftmaxMetatype]

    @property
    def shapeof_metatypes(self) -> list[OperatorMetatype]:
        return []

    @property
    def convert_metatypes(self) -> list[OperatorMetatype]:
        return []
"""

PT_ZERO_POINT_DTYPES = """
    @staticmethod
    def get_zero_point_dtypes(model) -> list[TensorDataType]:
        modules = [m for m in get_hook_storage(model).modules() if hasattr(m, "_zero_point")]
        int4 = {m: isinstance(m, INT4AsymmetricWeightsDecompressor) for m in modules}
        return [
            TensorDataType.float16
            if m._zero_point.dtype == torch.float16
            else (TensorDataType.uint4 if int4[m] else TensorDataType.uint8)
            for m in modules
        ]
"""

EDITS: list[Edit] = [
    # compress_weights: hqq for Torch models
    Edit(
        QUANTIZE_MODEL,
        '        options = {"gptq": gptq, "lora_correction": lora_correction, "hqq": hqq}\n'
        "        unsupported_options = [name for name, value in options.items() if value is not None]\n"
        "        if unsupported_options:\n"
        '            msg = f"Torch backend',
        '        options = {"gptq": gptq, "lora_correction": lora_correction}\n'
        "        unsupported_options = [name for name, value in options.items() if value is not None]\n"
        "        if unsupported_options:\n"
        '            msg = f"Torch backend',
    ),
    Edit(
        QUANTIZE_MODEL,
        "        scale_estimation, GPTQ or lora_correction. OpenVINO models, DQ compression format.\n",
        "        scale_estimation, GPTQ or lora_correction. OpenVINO and PyTorch models, DQ compression format.\n",
    ),
    # hqq.py: the Torch backend entity
    Edit(
        HQQ_PY,
        "        return [BackendType.OPENVINO]\n",
        "        return [BackendType.OPENVINO, BackendType.TORCH]\n",
    ),
    insert_after(
        HQQ_PY,
        "            self._backend_entity = OVHQQAlgoBackend(model, mapping)\n",
        "        elif model_backend == BackendType.TORCH:\n"
        "            from nncf.quantization.algorithms.weight_compression.torch_backend import PTHQQAlgoBackend\n\n"
        "            self._backend_entity = PTHQQAlgoBackend()\n",
    ),
    # torch_backend.py: HQQ's graph questions
    insert_after(
        PT_BACKEND,
        "from nncf.quantization.algorithms.weight_compression.backend import AWQAlgoBackend\n",
        "from nncf.quantization.algorithms.weight_compression.backend import HQQAlgoBackend\n",
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
        "        if not zero_point.is_floating_point():\n"
        "            zero_point = unpack_uint4(zero_point).reshape(self.zero_point_shape)\n",
    ),
    insert_before(
        PT_LAYERS,
        "    @abstractmethod\n    def pack_weight(self, weight: torch.Tensor) -> torch.Tensor:\n",
        "    def _zero_point_buffer(self, zero_point: torch.Tensor) -> torch.Tensor:\n"
        '        """The stored zero point: packed like the weight, or as it is when float (HQQ\'s)."""\n'
        "        if zero_point.is_floating_point():\n"
        "            return zero_point\n"
        "        return self.pack_weight(zero_point)\n\n",
    ),
    # NNCF's Torch tests (applied by `build.py --nncf-tests NNCF_REPO`): hqq is supported now
    Edit(
        PT_TESTS,
        '        return ["lora_correction", "gptq", "hqq"]\n',
        f'        return ["lora_correction", "gptq"]\n{PT_ZERO_POINT_DTYPES}',
    ),
    insert_after(
        PT_TESTS,
        "    def _get_num_typed_nodes(model: torch.nn.Module, types: tuple[BaseWeightsDecompressor, ...]) -> int:\n",
        '        if not hasattr(model, "__nncf_hooks"):  # refused before it was wrapped: nothing is compressed\n'
        "            return 0\n",
    ),
    Edit(
        PT_TESTS, '        {"lora_correction": True},\n        {"hqq": True},\n', '        {"lora_correction": True},\n'
    ),
]
