"""Memory of a mixture-of-experts model with Qwen3-30B-A3B's layer shapes: IR size, compiled-model memory and peak
memory during compression, for FP16, NNCF's RTN and HQQ (INT4_ASYM g128, embeddings and lm_head INT8, routers float).

The model is built directly as an OpenVINO graph with random f16 weights (no checkpoint of that size can be had
offline, and exporting one through PyTorch needs several times its size in memory): per decoder layer RMSNorm,
grouped-query attention (32 query / 4 key-value heads of 128), RMSNorm, a router ``[128, 2048]`` into Softmax and
TopK(8), and 128 experts as 3-D weights ``[128, 768, 2048]`` (gate, up) and ``[128, 2048, 768]`` (down) applied to
every token (dense, weighted by the routing), as optimum-intel exports transformers 5's MoE blocks. Each measurement
runs in a fresh child process; memory is its maximum resident set size (compiled: after compiling and after one
128-token inference with OpenVINO CPU's default settings).

    python benchmarks/moe_ir_memory.py --layers 2 [--vocab 32768] [--work DIR] [--out results/moe_ir_memory.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

HIDDEN, EXPERTS, TOP_K, EXPERT_DIM = 2048, 128, 8, 768
HEADS, KV_HEADS, HEAD_DIM = 32, 4, 128
VARIANTS = {"fp16": None, "rtn": {"group_size": 128, "hqq": False}, "hqq": {"group_size": 128}}


def build(path: Path, layers: int, vocab: int) -> None:
    """Write the random f16 MoE IR to ``path`` (an .xml)."""
    import openvino as ov
    from openvino import opset13 as opset

    rng = np.random.default_rng(0)

    def weight(shape: tuple[int, ...], name: str) -> Any:
        values = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)
        return opset.convert(opset.constant(values, dtype=ov.Type.f16, name=name), ov.Type.f32)

    def rms_norm(x: Any, name: str) -> Any:
        gamma = opset.constant(np.ones(HIDDEN, dtype=np.float32), name=f"{name}.weight")
        variance = opset.reduce_mean(opset.multiply(x, x), np.array([-1]), keep_dims=True)
        return opset.multiply(opset.divide(x, opset.sqrt(opset.add(variance, np.float32(1e-6)))), gamma)

    ids = opset.parameter([1, -1], ov.Type.i64, name="input_ids")
    x = opset.gather(weight((vocab, HIDDEN), "model.embed_tokens.weight"), ids, np.array(0))  # [1, S, H]
    for layer in range(layers):
        prefix = f"model.layers.{layer}"
        x = opset.add(x, attention(opset, weight, rms_norm(x, f"{prefix}.input_layernorm"), prefix))
        x = opset.add(x, moe(opset, weight, rms_norm(x, f"{prefix}.post_attention_layernorm"), prefix))
    logits = opset.matmul(rms_norm(x, "model.norm"), weight((vocab, HIDDEN), "lm_head.weight"), False, True)
    ov.save_model(ov.Model([opset.result(logits, name="logits")], [ids], "moe"), path, compress_to_fp16=False)


def attention(opset: Any, weight: Any, x: Any, prefix: str) -> Any:
    def heads(t: Any, n: int) -> Any:  # [1, S, n*D] -> [1, n, S, D]
        return opset.transpose(opset.reshape(t, np.array([1, -1, n, HEAD_DIM]), False), np.array([0, 2, 1, 3]))

    def project(name: str, rows: int) -> Any:
        return opset.matmul(x, weight((rows, HIDDEN), f"{prefix}.self_attn.{name}.weight"), False, True)

    def repeat_kv(t: Any) -> Any:  # [1, KV, S, D] -> [1, HEADS, S, D]
        t = opset.unsqueeze(t, np.array([2]))
        t = opset.broadcast(t, np.array([1, 1, HEADS // KV_HEADS, 1, 1]), broadcast_spec="BIDIRECTIONAL")
        return opset.reshape(t, np.array([1, HEADS, -1, HEAD_DIM]), False)

    q = heads(project("q_proj", HEADS * HEAD_DIM), HEADS)
    k = repeat_kv(heads(project("k_proj", KV_HEADS * HEAD_DIM), KV_HEADS))
    v = repeat_kv(heads(project("v_proj", KV_HEADS * HEAD_DIM), KV_HEADS))
    attended = opset.scaled_dot_product_attention(q, k, v, causal=True)
    merged = opset.reshape(
        opset.transpose(attended, np.array([0, 2, 1, 3])), np.array([1, -1, HEADS * HEAD_DIM]), False
    )
    return opset.matmul(merged, weight((HIDDEN, HEADS * HEAD_DIM), f"{prefix}.self_attn.o_proj.weight"), False, True)


def moe(opset: Any, weight: Any, x: Any, prefix: str) -> Any:
    tokens = opset.reshape(x, np.array([-1, HIDDEN]), False)  # [S, H]
    router = opset.matmul(tokens, weight((EXPERTS, HIDDEN), f"{prefix}.mlp.gate.weight"), False, True)
    probabilities = opset.softmax(router, -1)
    top = opset.topk(probabilities, np.array(TOP_K), -1, "max", "value")
    top_weights = opset.divide(top.output(0), opset.reduce_sum(top.output(0), np.array([-1]), keep_dims=True))
    routing = opset.scatter_elements_update(opset.multiply(probabilities, np.float32(0)), top.output(1), top_weights, 1)
    experts_in = opset.broadcast(
        opset.unsqueeze(tokens, np.array([0])), np.array([EXPERTS, 1, 1]), broadcast_spec="BIDIRECTIONAL"
    )
    gate = opset.matmul(
        experts_in, weight((EXPERTS, EXPERT_DIM, HIDDEN), f"{prefix}.mlp.experts.gate_proj"), False, True
    )
    up = opset.matmul(experts_in, weight((EXPERTS, EXPERT_DIM, HIDDEN), f"{prefix}.mlp.experts.up_proj"), False, True)
    hidden = opset.multiply(opset.swish(gate), up)
    down = opset.matmul(hidden, weight((EXPERTS, HIDDEN, EXPERT_DIM), f"{prefix}.mlp.experts.down_proj"), False, True)
    weighted = opset.multiply(down, opset.unsqueeze(opset.transpose(routing, np.array([1, 0])), np.array([2])))
    mixed = opset.reduce_sum(weighted, np.array([0]), keep_dims=False)  # [S, H]
    return opset.reshape(mixed, np.array([1, -1, HIDDEN]), False)


COMPRESS = """
import json, resource, sys, time
import openvino as ov
from nncf_hqq.llm.compression import compress_model
from nncf_hqq.llm.options import CompressionOptions
src, dst, fields = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
model = ov.Core().read_model(src)
start = time.perf_counter()
model = compress_model(model, CompressionOptions(**fields))
seconds = time.perf_counter() - start
ov.save_model(model, dst, compress_to_fp16=False)
print("RESULT " + json.dumps({"seconds": seconds, "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}))
"""

COMPILE = """
import json, resource, sys
import numpy as np, openvino as ov
def rss(): return int(open("/proc/self/statm").read().split()[1]) * 4096 / 1e9
before = rss()
compiled = ov.Core().compile_model(sys.argv[1], "CPU")
after_compile = rss()
compiled({"input_ids": np.arange(128, dtype=np.int64)[None] % 1000})
after_inference = rss()
print("RESULT " + json.dumps({"compiled_gb": after_compile - before, "after_inference_gb": after_inference - before,
                              "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}))
"""


def child(code: str, *args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "nncf_hqq_moe_ir_memory")
    parser.add_argument("--out", type=Path, default=Path("results/moe_ir_memory.json"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    fp16 = args.work / f"fp16_{args.layers}l.xml"
    if not fp16.is_file():
        build(fp16, args.layers, args.vocab)
    rows: dict[str, dict[str, Any]] = {}
    for name, fields in VARIANTS.items():
        xml = fp16 if fields is None else args.work / f"{name}_{args.layers}l.xml"
        row: dict[str, Any] = {}
        if fields is not None:
            row.update(child(COMPRESS, str(fp16), str(xml), json.dumps(fields)))
        row["ir_gb"] = xml.with_suffix(".bin").stat().st_size / 1e9
        row.update({f"run_{k}": v for k, v in child(COMPILE, str(xml)).items()})
        rows[name] = row
        print(name, json.dumps(row), flush=True)
    print(f"\n{args.layers} layers, vocab {args.vocab}, {EXPERTS} experts [{EXPERT_DIM} x {HIDDEN}], INT4_ASYM g128")
    print(
        f"{'model':6s}{'IR GB':>8s}{'compiled GB':>13s}{'+1 inference':>14s}{'compress s':>12s}"
        f"{'compress peak GB':>18s}"
    )
    for name, row in rows.items():
        seconds = f"{row['seconds']:.0f}" if "seconds" in row else "-"
        peak = f"{row['peak_gb']:.2f}" if "peak_gb" in row else "-"
        print(
            f"{name:6s}{row['ir_gb']:>8.2f}{row['run_compiled_gb']:>13.2f}{row['run_after_inference_gb']:>14.2f}"
            f"{seconds:>12s}{peak:>18s}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"layers": args.layers, "vocab": args.vocab, "rows": rows}, indent=2))
    print(f"JSON: {args.out}")


if __name__ == "__main__":
    main()
