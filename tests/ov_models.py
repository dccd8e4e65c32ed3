"""Small OpenVINO models built in the tests (no downloads)."""

from __future__ import annotations

import numpy as np
import openvino as ov
from openvino import opset13 as opset

HIDDEN = 128
VOCAB = 64
EXPERTS = 4


def heavy_tailed(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 0.05) -> np.ndarray:
    """Student-t weights: LLM-like heavy tails."""
    return (rng.standard_t(4, size=shape) * scale).astype(np.float32)


def _weight(values: np.ndarray, dtype: ov.Type, name: str) -> ov.Node:
    """A weight constant in ``dtype``, converted to f32 when stored in a lower precision (as exporters do)."""
    if dtype == ov.Type.f32:
        return opset.constant(values, dtype=ov.Type.f32, name=name)
    const = opset.constant(values, dtype=dtype, name=name)
    return opset.convert(const, ov.Type.f32)


def transformer_like(seed: int = 0, dtype: ov.Type = ov.Type.f32, hidden: int = HIDDEN, moe: bool = True) -> ov.Model:
    """Embedding -> RMS-norm-like scale -> two MatMul blocks (one transposed) -> 3D MoE MatMul -> lm head.

    ``moe=False`` leaves out the MoE MatMul (NNCF's own Scale Estimation and LoRA correction do not handle its
    broadcast expert input)."""
    rng = np.random.default_rng(seed)
    ids = opset.parameter([1, -1], ov.Type.i64, name="input_ids")
    table = _weight(heavy_tailed(rng, (VOCAB, hidden)), dtype, "embed_tokens")
    x = opset.gather(table, ids, axis=0, name="embedding")
    gamma = opset.constant((1.0 + 0.5 * rng.random(hidden)).astype(np.float32), name="norm_gamma")
    x = opset.multiply(x, gamma, name="norm")
    up = opset.matmul(x, _weight(heavy_tailed(rng, (2 * hidden, hidden)), dtype, "up_proj"), False, True, name="up")
    act = opset.relu(up, name="act")
    down = opset.matmul(act, _weight(heavy_tailed(rng, (2 * hidden, hidden)), dtype, "down_proj"), False, False)
    x = opset.add(x, down, name="residual")
    if moe:
        x = _moe_block(x, rng, dtype, hidden)
    logits = opset.matmul(x, _weight(heavy_tailed(rng, (VOCAB, hidden)), dtype, "lm_head"), False, True)
    result = opset.result(logits, name="logits")
    return ov.Model([result], [ids], "transformer_like")


def _moe_block(x: ov.Node, rng: np.random.Generator, dtype: ov.Type, hidden: int) -> ov.Node:
    experts = opset.unsqueeze(x, opset.constant(np.array([0], dtype=np.int64)))  # [1, 1, S, H]
    target = opset.constant(np.array([EXPERTS, 1, 1, hidden], dtype=np.int64))
    experts = opset.broadcast(experts, target, broadcast_spec="BIDIRECTIONAL")
    experts = opset.squeeze(experts, opset.constant(np.array([1], dtype=np.int64)))  # [E, S, H]
    moe_weight = _weight(heavy_tailed(rng, (EXPERTS, hidden, hidden)), dtype, "moe_experts")
    moe = opset.matmul(experts, moe_weight, False, True, name="moe")  # [E, S, H]
    return opset.add(x, opset.reduce_mean(moe, opset.constant(np.array([0], dtype=np.int64)), True), name="moe_sum")


def input_ids(seed: int = 1, length: int = 16) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, size=(1, length), dtype=np.int64)


def run(model: ov.Model, ids: np.ndarray) -> np.ndarray:
    """Runs on OpenVINO CPU in f32 without activation quantization, so only weights differ between models."""
    config = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
    compiled = ov.Core().compile_model(model, "CPU", config)
    return np.asarray(compiled(ids)[0])


def conv_and_gather(seed: int = 0, vocab: int = 32) -> ov.Model:
    """A Gather of a 3-D table ``[vocab, 4, 16]`` (NNCF reduces it over axes 1 and 2), a Convolution ``[8, 4, 3, 3]``
    (reduced over axes 1, 2, 3) and a MatMul head: the weights that NNCF reduces over several axes."""
    rng = np.random.default_rng(seed)
    ids = opset.parameter([1, 8], ov.Type.i64, name="input_ids")
    table = opset.constant(heavy_tailed(rng, (vocab, 4, 16), scale=1.0), name="table")
    x = opset.gather(table, ids, axis=0, name="lookup")  # [1, 8, 4, 16]
    x = opset.transpose(x, opset.constant(np.array([0, 2, 1, 3], dtype=np.int64)))  # [1, 4, 8, 16]
    kernel = opset.constant(heavy_tailed(rng, (8, 4, 3, 3), scale=0.3), name="conv_weight")
    x = opset.convolution(x, kernel, [1, 1], [1, 1], [1, 1], [1, 1], name="conv")  # [1, 8, 8, 16]
    x = opset.reshape(x, opset.constant(np.array([1, 8, 128], dtype=np.int64)), special_zero=False)
    head = opset.matmul(x, opset.constant(heavy_tailed(rng, (16, 128)), name="head"), False, True, name="head_mm")
    return ov.Model([opset.result(head, name="logits")], [ids], "conv_and_gather")


#: Heads of ``fused_qkv_attention``, and its per-head width.
FUSED_HEADS, FUSED_HEAD_DIM = 4, 16


def fused_qkv_attention(orders: tuple[str, ...] = ("qkv", "vqk"), seed: int = 0) -> ov.Model:
    """Attention blocks with one fused projection each (``qkv_proj``, as Phi-3's): a MatMul whose output rows are
    split (VariadicSplit on the last axis) into the query, key and value of a ScaledDotProductAttention, in the order
    each entry of ``orders`` names; then an output projection. Weights: ``qkv_proj_<order>``, ``o_proj_<order>``."""
    rng = np.random.default_rng(seed)
    hidden = FUSED_HEADS * FUSED_HEAD_DIM
    x = opset.parameter([1, 8, hidden], ov.Type.f32, name="x")
    y: ov.Node = x
    for order in orders:
        weight = opset.constant(heavy_tailed(rng, (3 * hidden, hidden)), name=f"qkv_proj_{order}")
        fused = opset.matmul(y, weight, False, True, name=f"qkv_proj_{order}/matmul")
        parts = opset.variadic_split(fused, opset.constant(np.int64(-1)), opset.constant(np.array([hidden] * 3)))
        heads = {}
        for index, role in enumerate(order):
            shaped = opset.reshape(parts.output(index), [1, 8, FUSED_HEADS, FUSED_HEAD_DIM], False)
            heads[role] = opset.transpose(shaped, opset.constant(np.array([0, 2, 1, 3])))
        attended = opset.scaled_dot_product_attention(heads["q"], heads["k"], heads["v"], causal=True)
        merged = opset.reshape(opset.transpose(attended, opset.constant(np.array([0, 2, 1, 3]))), [1, 8, hidden], False)
        out_weight = opset.constant(heavy_tailed(rng, (hidden, hidden)), name=f"o_proj_{order}")
        y = opset.matmul(merged, out_weight, False, True, name=f"o_proj_{order}/matmul")
    return ov.Model([opset.result(y)], [x], "fused_qkv_attention")
