"""Small transformers models built in the tests (random weights, no downloads), and readers of compressed tensors.

Import after ``pytest.importorskip("torch")`` / ``("transformers")``: this module needs both.
"""

from __future__ import annotations

from typing import Any

import nncf
import numpy as np
import openvino as ov
import torch
from transformers import LlamaConfig
from transformers import LlamaForCausalLM
from transformers import Qwen3MoeConfig
from transformers import Qwen3MoeForCausalLM

from nncf_hqq.torch.checkpoint import weight_format

VOCAB = 256
HIDDEN = 128


def _randomise_norms(model: torch.nn.Module, seed: int) -> None:
    """Norm gains of a trained model are not all ones; random ones make the norm-gain importance matter."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.copy_(1.0 + 0.3 * torch.randn(parameter.shape, generator=generator))


def tiny_llama(seed: int = 0, tie_word_embeddings: bool = False, layers: int = 2) -> LlamaForCausalLM:
    """A 2-layer Llama (hidden 128, GQA 4/2 heads) with random weights and norm gains."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=tie_word_embeddings,
    )
    model = LlamaForCausalLM(config).eval()
    _randomise_norms(model, seed)
    return model


def tiny_qwen3_moe(seed: int = 0, experts: int = 4) -> Qwen3MoeForCausalLM:
    """A 2-layer Qwen3-MoE: every MLP is a MoE layer whose experts are the 3D ``mlp.experts.gate_up_proj``
    ``[experts, 64, 64]`` and ``mlp.experts.down_proj`` ``[experts, 64, 32]``."""
    torch.manual_seed(seed)
    config = Qwen3MoeConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_experts=experts,
        num_experts_per_tok=2,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=128,
    )
    model = Qwen3MoeForCausalLM(config).eval()
    _randomise_norms(model, seed)
    return model


def input_ids(seed: int = 1, length: int = 16) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(seed))


def dataset(ids: torch.Tensor) -> nncf.Dataset:
    return nncf.Dataset([{"input_ids": ids}])


def logits(model: torch.nn.Module, ids: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return model(input_ids=ids).logits.float().numpy()


class CausalLogits(torch.nn.Module):
    """A causal LM as ``input_ids -> logits`` with an explicit 4D causal mask, which TorchScript (what
    ``openvino.convert_model`` traces) gets through transformers' mask creation with."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        length = input_ids.shape[1]
        mask = torch.ones(length, length, dtype=torch.bool).tril()[None, None]
        return self.model(input_ids=input_ids, attention_mask=mask, use_cache=False).logits


def to_openvino(model: torch.nn.Module, ids: torch.Tensor) -> ov.Model:
    """``openvino.convert_model`` of a causal LM (compressed or not) as ``input_ids -> logits``."""
    with torch.no_grad():
        return ov.convert_model(CausalLogits(model), example_input=(ids,))


def run_openvino(model: ov.Model, ids: torch.Tensor) -> np.ndarray:
    """f32 inference without activation quantization, so only the weights differ between models."""
    config = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
    return np.asarray(ov.Core().compile_model(model, "CPU", config)(ids.numpy())[0])


def _unpack_nibbles(packed: np.ndarray, signed: bool) -> np.ndarray:
    flat = packed.reshape(-1).astype(np.uint8)
    values = np.stack([flat & 0x0F, flat >> 4], axis=-1).reshape(-1).astype(np.int16)
    return values - 16 * (values >= 8) if signed else values


def torch_compressed_tensors(model: torch.nn.Module) -> dict[str, dict[str, Any]]:
    """Codes (grouped shape), scale and zero point (float32) of every compressed parameter of a Torch model, by
    parameter name, read back from what the model stores."""
    result: dict[str, dict[str, Any]] = {}
    for hook_name, hook in model.get_submodule("__nncf_hooks").named_hooks():
        name = hook_name.split(".")[-2].rsplit("__", 1)[0].replace(":", ".")
        stored = model.get_parameter(name).detach().numpy()
        fmt = weight_format(hook, model.get_parameter(name))
        if fmt is None:
            continue
        codes = _unpack_nibbles(stored, False) if fmt.num_bits == 4 else stored.astype(np.int16)
        if fmt.codes == "i4":
            codes = codes - 8  # NNCF's Torch backend stores i4 codes offset by 8 (OpenVINO: two's complement)
        zero_point = None
        if fmt.zero_point == "u4":
            zero_point = _unpack_nibbles(hook._zero_point.numpy(), False).reshape(fmt.scale_shape)
        elif fmt.zero_point is not None:
            zero_point = hook._zero_point.numpy()
        result[name] = {
            "codes": codes.reshape(fmt.compressed_shape),
            "scale": hook._scale.float().numpy(),
            "zero_point": None if zero_point is None else zero_point.astype(np.float32),
            "zero_point_format": fmt.zero_point,
        }
    return result


def openvino_compressed_tensors(model: ov.Model, prefix: str = "self.") -> dict[str, dict[str, Any]]:
    """The same for an OpenVINO model compressed by NNCF / nncf_hqq (constants ``NAME``, ``NAME/scale``,
    ``NAME/zero_point``), by the name without ``prefix``."""
    constants = {op.get_friendly_name(): op for op in model.get_ops() if op.get_type_name() == "Constant"}
    result: dict[str, dict[str, Any]] = {}
    for name, op in constants.items():
        scale = constants.get(f"{name}/scale")
        if scale is None or not name.startswith(prefix):
            continue
        element = op.get_element_type()
        shape = tuple(op.shape)
        if element in (ov.Type.u4, ov.Type.i4):
            codes = _unpack_nibbles(op.get_data(), element == ov.Type.i4)[: int(np.prod(shape))].reshape(shape)
        else:
            codes = op.get_data().astype(np.int16)
        zero_point_op = constants.get(f"{name}/zero_point")
        zero_point = None
        if zero_point_op is not None:
            zp_shape = tuple(zero_point_op.shape)
            data = zero_point_op.get_data()
            if zero_point_op.get_element_type() == ov.Type.u4:
                data = _unpack_nibbles(data, False)[: int(np.prod(zp_shape))].reshape(zp_shape)
            zero_point = np.asarray(data, dtype=np.float32)
        result[name[len(prefix) :]] = {
            "codes": codes,
            "scale": np.asarray(scale.get_data(), dtype=np.float32),
            "zero_point": zero_point,
        }
    return result
