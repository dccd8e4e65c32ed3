"""Should MoE routers be compressed? Routing and output agreement with the float model, routers compressed or kept.

A random Qwen3-MoE-like model (64 experts, top-8, hidden 512, two MoE layers; random weights, no model that has
learned its routing is available offline) is exported with optimum-intel and compressed INT4_ASYM g64 four ways:
RTN and HQQ, each with the routers compressed or kept in float (``nncf_hqq.moe_gate_matmuls`` as the ignored
scope). On random token windows every variant is compared with the float model: KL and top-1 agreement of the
next-token distribution, and routing agreement (the share of token-layer pairs whose set of top-8 experts equals the
float model's, read from each router's TopK).

What it shows: how much of the routing change comes from the router's own quantization error and how much from the
errors upstream of it, and what keeping the routers costs (their share of the weights, printed). What it cannot
show: the accuracy effect on a trained MoE, whose routers and hidden states have learned structure (margins between
the 8th and 9th expert shaped by load balancing) that random weights do not have.

    python benchmarks/moe_routers.py [--work DIR] [--windows 8] [--out results/moe_routers.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from nncf_hqq import moe_gate_matmuls
from nncf_hqq.llm import evaluation
from nncf_hqq.llm.compression import compress_model
from nncf_hqq.llm.export import export_to_openvino
from nncf_hqq.llm.layout import is_ir_dir
from nncf_hqq.llm.layout import read_model
from nncf_hqq.llm.options import CompressionOptions
from nncf_hqq.llm.texts import llm_inputs

CONFIG = {
    "vocab_size": 2048,
    "hidden_size": 512,
    "intermediate_size": 1024,
    "moe_intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_experts": 64,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "norm_topk_prob": True,
    "max_position_embeddings": 512,
}
VARIANTS = {
    "rtn_routers_int4": {"hqq": False, "quantize_routers": True},
    "rtn_routers_float": {"hqq": False},
    "hqq_routers_int4": {"quantize_routers": True},
    "hqq_routers_float": {},
}


def build(work: Path) -> Path:
    fp = work / "fp"
    if is_ir_dir(fp):
        return fp
    import torch
    from transformers import AutoConfig
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.for_model("qwen3_moe", **CONFIG)
    AutoModelForCausalLM.from_config(config).eval().save_pretrained(work / "hf")
    return export_to_openvino(work / "hf", fp)


def with_routing_outputs(model: ov.Model) -> ov.Model:
    """The model with the expert indices of every router's TopK as extra outputs."""
    for op in model.get_ordered_ops():
        if op.get_type_name() == "TopK":
            model.add_outputs(op.output(1))
    return model


def routing(model: ov.Model, windows: list[np.ndarray]) -> list[np.ndarray]:
    """Per window: the sorted top-k expert indices of every router, ``[routers, tokens, k]``."""
    compiled = evaluation.compile_model(with_routing_outputs(model))
    request = compiled.create_infer_request()
    out = []
    for ids in windows:
        request.reset_state()
        request.infer(llm_inputs(ids))
        experts = [
            np.sort(request.get_output_tensor(i).data.reshape(len(ids), -1), axis=-1)
            for i in range(1, len(compiled.outputs))
        ]
        out.append(np.stack(experts))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "nncf_hqq_moe_routers")
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("results/moe_routers.json"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    fp = build(args.work)
    rng = np.random.default_rng(0)
    windows = [rng.integers(0, CONFIG["vocab_size"], size=128) for _ in range(args.windows)]
    fp_model = read_model(fp)
    gates = moe_gate_matmuls(fp_model)
    router_params = sum(CONFIG["num_experts"] * CONFIG["hidden_size"] for _ in gates)
    all_params = sum(
        int(np.prod(op.get_output_shape(0)))
        for op in fp_model.get_ops()
        if op.get_type_name() == "Constant" and len(op.get_output_shape(0)) >= 2
    )
    fp_routing = routing(read_model(fp), windows)
    compressed: dict[str, Any] = {}
    rows: dict[str, dict[str, float]] = {}
    for name, fields in VARIANTS.items():
        model = compress_model(read_model(fp), CompressionOptions(group_size=64, **fields))
        got = routing(model.clone(), windows)
        same = np.mean([np.all(a == b, axis=-1).mean() for a, b in zip(fp_routing, got, strict=True)])
        compressed[name] = model
        rows[name] = {"routing_agreement": float(same)}
    metrics = evaluation.evaluate_llms(fp, compressed, windows)
    print(f"routers: {len(gates)} MatMuls, {router_params} of {all_params} weights ({router_params / all_params:.3%})")
    print(f"{'variant':22s}{'routing agr.':>14s}{'KL':>10s}{'top-1':>8s}")
    for name, row in rows.items():
        row.update({k: metrics[name][k] for k in ("kl", "top1")})
        print(f"{name:22s}{row['routing_agreement']:>14.4f}{row['kl']:>10.5f}{row['top1']:>8.4f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {"config": CONFIG, "windows": args.windows, "router_share": router_params / all_params, "rows": rows}
    args.out.write_text(json.dumps(record, indent=2))
    print(f"JSON: {args.out}")


if __name__ == "__main__":
    main()
