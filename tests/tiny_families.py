"""Tiny random decoder LLMs of the common Hugging Face families, built from configs (no downloads).

``FAMILIES`` maps a ``model_type`` to the config fields that make it tiny: two layers, hidden size 64, four
attention heads of 16, a 256-token vocabulary, four experts for the MoE families. Every reduction dimension is a
multiple of 64, so ``--group-size 64`` applies to every weight. ``save_tiny_family`` writes a HF checkpoint dir
(random weights, seed 0) with the word-level tokenizer of tests/test_evaluation.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

HIDDEN = 64
HEADS = 4
HEAD_DIM = 16
EXPERTS = 4

_COMMON: dict[str, Any] = {
    "hidden_size": HIDDEN,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": HEADS,
    "num_key_value_heads": 2,
    "head_dim": HEAD_DIM,
    "max_position_embeddings": 256,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
    "tie_word_embeddings": False,
}
_GEMMA: dict[str, Any] = {"query_pre_attn_scalar": HEAD_DIM, "sliding_window": 32}
_EXPERTS: dict[str, Any] = {"num_experts": EXPERTS, "num_experts_per_tok": 2, "moe_intermediate_size": 64}
_LOCAL_EXPERTS: dict[str, Any] = {"num_local_experts": EXPERTS, "num_experts_per_tok": 2}

#: The families the matrix covers: ``model_type`` -> config fields on top of the common tiny ones.
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {},
    "mistral": {"sliding_window": None},
    "qwen2": {},
    "qwen3": {},
    "qwen3_moe": {**_EXPERTS, "decoder_sparse_step": 1, "norm_topk_prob": True},
    "mixtral": _LOCAL_EXPERTS,
    "phi3": {},
    "gemma2": _GEMMA,
    "gemma3_text": _GEMMA,
    "granite": {},
    "olmo2": {},
}
#: Families looked at for the table of docs/usage.md (Model families) but not part of the test matrix.
OTHER_FAMILIES: dict[str, dict[str, Any]] = {
    "gemma": {},
    "glm": {"partial_rotary_factor": 0.5},
    "glm4": {"partial_rotary_factor": 0.5},
    "qwen2_moe": {**_EXPERTS, "shared_expert_intermediate_size": 64},
    "phimoe": _LOCAL_EXPERTS,
    "granitemoe": _LOCAL_EXPERTS,
    "olmo": {},
    "phi": {},
    "starcoder2": {},
    "cohere": {},
    "smollm3": {},
    "gpt_oss": {**_LOCAL_EXPERTS, "sliding_window": 32},
    "deepseek_v3": {
        "n_routed_experts": EXPERTS,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 64,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
        "kv_lora_rank": 32,
        "q_lora_rank": 32,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 8,
        "v_head_dim": 16,
        "n_group": 1,
        "topk_group": 1,
    },
    "llama4_text": {**_LOCAL_EXPERTS, "intermediate_size_mlp": 128, "num_experts_per_tok": 1},
    "qwen3_next": {**_EXPERTS, "linear_num_value_heads": 4, "linear_num_key_heads": 2},
    "gemma3n_text": {
        **_GEMMA,
        "intermediate_size": [128, 128],
        "layer_types": ["sliding_attention", "full_attention"],
        "activation_sparsity_pattern": [0.0, 0.0],
        "vocab_size_per_layer_input": 256,
        "hidden_size_per_layer_input": 16,
        "altup_num_inputs": 2,
        "num_kv_shared_layers": 0,
        "laurel_rank": 8,
    },
    "gemma4_text": {
        **_GEMMA,
        "layer_types": ["sliding_attention", "full_attention"],
        "vocab_size_per_layer_input": 256,
        "hidden_size_per_layer_input": 16,
        "global_head_dim": 32,
    },
}


def tiny_config(model_type: str) -> Any:
    """The transformers config of a tiny ``model_type`` model (random weights, no download)."""
    from transformers import AutoConfig

    fields = {**FAMILIES, **OTHER_FAMILIES}[model_type]
    return AutoConfig.for_model(model_type, **{**_COMMON, "vocab_size": 256, **fields})


def save_tiny_family(model_type: str, out_dir: Path, tokenizer: Any) -> Path:
    """A HF checkpoint dir of a tiny random ``model_type`` model and ``tokenizer`` (seed 0); returns ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM

    config = tiny_config(model_type)
    config.vocab_size = max(config.vocab_size, len(tokenizer))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
