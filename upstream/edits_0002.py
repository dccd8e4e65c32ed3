"""The edits of the second pull request (0002): HQQ on PyTorch models. The Torch decompressors store a float zero
point in float16, the Torch backend answers HQQ's graph questions, and ``compress_weights`` no longer refuses ``hqq``
for Torch models."""

from __future__ import annotations

from edit import Edit
from edit import append
from edit import insert_after
from edit import insert_before
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
        "            self._backend_entity = OVHQQAlgoBackend(model)\n",
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
        "        if zero_point.dtype != torch.float16:\n"
        "            zero_point = unpack_uint4(zero_point).reshape(self.zero_point_shape)\n",
    ),
    insert_before(
        PT_LAYERS,
        "    @abstractmethod\n    def pack_weight(self, weight: torch.Tensor) -> torch.Tensor:\n",
        "    def _zero_point_buffer(self, zero_point: torch.Tensor) -> torch.Tensor:\n"
        '        """The stored zero point: packed like the weight, or as it is when float16 (HQQ\'s)."""\n'
        "        if zero_point.dtype == torch.float16:\n"
        "            return zero_point\n"
        "        return self.pack_weight(zero_point)\n\n",
    ),
]
