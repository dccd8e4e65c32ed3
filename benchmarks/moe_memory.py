"""Memory of a MoE model with realistic layer shapes: float, NNCF's compression alone, and ``hqq=True``.

transformers 5 keeps a MoE layer's experts as 3D parameters (``mlp.experts.gate_up_proj``, ``down_proj``) that NNCF's
Torch backend leaves in float; ``hqq=True`` compresses them too (``target_parameters``). The model is a
transformers Qwen3-MoE with Qwen3-30B-A3B's layer shapes (hidden 2048, 32 query / 4 key-value heads of 128, expert
intermediate 768, top-8 routing) and random weights; ``--experts``, ``--layers`` and ``--vocab`` set how much of it
is built (the released model: 128 experts, 48 layers, a 151936-token vocabulary).

Every variant runs in two fresh child processes: one builds the model (same seed), compresses it, measures the
bytes of its tensors by kind and the relative error of its logits against the float model's, and saves it with
``save_pretrained``; the other loads that checkpoint with ``from_pretrained`` (as it is deployed) and measures its
resident memory, then the peak resident memory of a short greedy generation (the peak is reset after loading,
``/proc/self/clear_refs``). NNCF's checkpoint gets the same ``nncf_hqq`` quantization config, so it loads as saved.

    python benchmarks/moe_memory.py                                   # 2 layers, 32 experts, bf16 (~10 min)
    python benchmarks/moe_memory.py --experts 128 --layers 1 --out results/moe_memory_128.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

VARIANTS = {
    "fp": "float (no compression)",
    "nncf": "NNCF INT4_ASYM g128 (Linear layers)",
    "hqq": "hqq=True INT4_ASYM g128 (+ experts)",
}
MIB = 1024 * 1024


def build_model(args: argparse.Namespace) -> Any:
    import torch
    from transformers import Qwen3MoeConfig
    from transformers import Qwen3MoeForCausalLM

    torch.manual_seed(0)
    config = Qwen3MoeConfig(
        vocab_size=args.vocab,
        hidden_size=2048,
        intermediate_size=6144,
        moe_intermediate_size=768,
        num_experts=args.experts,
        num_experts_per_tok=min(8, args.experts),
        num_hidden_layers=args.layers,
        num_attention_heads=32,
        num_key_value_heads=4,
        head_dim=128,
        max_position_embeddings=4096,
        dtype=args.dtype,
    )
    with torch.device("cpu"):
        model = Qwen3MoeForCausalLM(config).to(getattr(torch, args.dtype)).eval()
    return model


def tensor_bytes(model: Any) -> dict[str, float]:
    """MiB of the model's tensors (parameters and buffers, compressed codes and decompressor buffers included) by
    kind: expert tensors, embeddings and LM head, the other weights (attention, router, norms)."""
    sizes = {"experts": 0, "embeddings": 0, "other": 0}
    for name, tensor in model.state_dict().items():
        if ".experts." in name or ":experts:" in name:
            kind = "experts"
        elif "embed_tokens" in name or "lm_head" in name:
            kind = "embeddings"
        else:
            kind = "other"
        sizes[kind] += tensor.numel() * tensor.element_size()
    sizes["total"] = sum(sizes.values())
    return {kind: size / MIB for kind, size in sizes.items()}


def rss_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_compress_child(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    """Builds the float model, compresses it (``variant``), and saves it with ``save_pretrained`` for the loading
    child; returns the tensor sizes, the compression time and the logits' error against the float model."""
    import nncf
    import numpy as np
    import torch

    import nncf_hqq  # noqa: F401  (teaches nncf.compress_weights hqq=)
    from nncf_hqq.torch.huggingface import describe_for_transformers

    model = build_model(args)
    ids = prompt(args)
    with torch.no_grad():
        reference = model(input_ids=ids).logits.float().numpy()
    compress_s = 0.0
    if variant != "fp":
        options = {"mode": nncf.CompressWeightsMode.INT4_ASYM, "group_size": 128, "dataset": nncf.Dataset([ids])}
        if variant == "hqq":
            options["hqq"] = True
        start = time.perf_counter()
        model = nncf.compress_weights(model, **options)
        compress_s = time.perf_counter() - start
        describe_for_transformers(model)  # NNCF alone: make its checkpoint loadable as saved too
    with torch.no_grad():
        outputs = model(input_ids=ids).logits.float().numpy()
    model.save_pretrained(args.workdir / variant)
    return {
        "variant": variant,
        "tensors_mib": tensor_bytes(model),
        "compress_s": compress_s,
        "compress_peak_mib": rss_mib("VmHWM"),
        "logits_rel_error": float(np.linalg.norm(outputs - reference) / np.linalg.norm(reference)),
        "float_experts": sum(1 for n, p in model.named_parameters() if ".experts." in n and p.is_floating_point()),
    }


def run_load_child(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    """Loads the saved checkpoint in a fresh process (as it is deployed): resident memory after loading, then the
    peak resident memory of a short greedy generation (peak reset after loading)."""
    import torch
    from transformers import AutoModelForCausalLM

    import nncf_hqq.torch  # noqa: F401  (registers the nncf_hqq checkpoint format)

    model = AutoModelForCausalLM.from_pretrained(args.workdir / variant, device_map="cpu", dtype=args.dtype)
    gc.collect()
    loaded = rss_mib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM, the peak resident memory
    with torch.no_grad():
        generated = model.generate(prompt(args), max_new_tokens=args.new_tokens, do_sample=False)
    return {
        "loaded_rss_mib": loaded,
        "generate_peak_mib": rss_mib("VmHWM"),
        "generated_tokens": int(generated.shape[1] - args.prompt),
    }


def prompt(args: argparse.Namespace) -> Any:
    import torch

    return torch.randint(0, args.vocab, (1, args.prompt), generator=torch.Generator().manual_seed(1))


def format_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    title = (
        f"Qwen3-30B-A3B layer shapes, {args.layers} layer(s), {args.experts} experts, vocab {args.vocab}, "
        f"{args.dtype} (MiB)"
    )
    header = f"{'variant':38s} {'experts':>8s} {'embed':>7s} {'other':>7s} {'total':>8s}"
    header += f" {'loaded':>7s} {'gen peak':>9s} {'compress s':>10s} {'rel err':>8s}"
    lines = [title, header]
    for row in rows:
        if "error" in row:
            lines.append(f"{VARIANTS[row['variant']]:38s} FAILED: {row['error']}")
            continue
        t = row["tensors_mib"]
        lines.append(
            f"{VARIANTS[row['variant']]:38s} {t['experts']:8.0f} {t['embeddings']:7.0f} {t['other']:7.0f} "
            f"{t['total']:8.0f} {row['loaded_rss_mib']:7.0f} {row['generate_peak_mib']:9.0f} "
            f"{row['compress_s']:10.1f} {row['logits_rel_error']:8.4f}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experts", type=int, default=32, help="experts per layer (Qwen3-30B-A3B: 128)")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers (Qwen3-30B-A3B: 48)")
    parser.add_argument("--vocab", type=int, default=8192, help="vocabulary size (Qwen3-30B-A3B: 151936)")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"), help="weights' dtype")
    parser.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    parser.add_argument("--new-tokens", type=int, default=8, help="generated tokens")
    parser.add_argument("--variants", default="fp,nncf,hqq", help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--out", type=Path, default=Path("results/moe_memory.json"))
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        stage, variant = args.child.split(":")
        print(json.dumps((run_compress_child if stage == "compress" else run_load_child)(variant, args)))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="moe-memory-") as workdir:
        for variant in args.variants.split(","):
            row: dict[str, Any] = {"variant": variant}
            for stage in ("compress", "load"):
                row.update(run_stage(stage, variant, Path(workdir), argv))
                if "error" in row:
                    break
            rows.append(row)
            shutil.rmtree(Path(workdir) / variant, ignore_errors=True)
            print(f"{variant}: {row}", flush=True)
    print(format_table(rows, args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {"command": " ".join([sys.executable, *sys.argv]), "arguments": vars(args), "rows": rows}
    args.out.write_text(json.dumps(record, indent=2, default=str))
    print(f"wrote {args.out}")


def run_stage(stage: str, variant: str, workdir: Path, argv: list[str] | None) -> dict[str, Any]:
    """One child process: ``compress`` (build, compress, save) or ``load`` (load the saved model, generate)."""
    arguments = [*(argv if argv is not None else sys.argv[1:]), "--workdir", str(workdir)]
    command = [sys.executable, __file__, *arguments, "--child", f"{stage}:{variant}"]
    done = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ), check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode == 0 and lines:
        return dict(json.loads(lines[-1]))
    return {"error": (done.stderr or done.stdout).strip().splitlines()[-1:]}


if __name__ == "__main__":
    main()
