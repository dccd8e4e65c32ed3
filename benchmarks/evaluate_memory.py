"""Time and peak memory of ``evaluate_llms`` (what ``nncf-hqq evaluate`` runs) on a model with a 262k-token vocabulary:
this checkout against another git revision, side by side.

The model is a small random ``gemma3_text`` (vocabulary 262144, hidden 256, 4 layers; the lm_head is the bulk of its
compute, as in the small Gemma 3 models), exported to an fp32 IR, with five compressed candidates (RTN and HQQ,
INT4_ASYM g64/g128, INT8_ASYM). Windows are random tokens (seed 0): only time and memory are measured here, and the
metrics of the two revisions are printed side by side as a check. Each run is a fresh child process; peak memory is
its maximum resident set size.

    python benchmarks/evaluate_memory.py --against a967f75
    python benchmarks/evaluate_memory.py --against a967f75 --runs old:1:4,new:1:4,old:2:4,new:2:4,new:5:40
    python benchmarks/evaluate_memory.py --against a967f75 --runs new:1:2,seq:1:2,new:5:2,seq:5:2

A run is ``IMPL:CANDIDATES:WINDOWS`` with IMPL ``new`` (this checkout, every candidate compiled at once, in lockstep),
``seq`` (this checkout, ``one_at_a_time=True``: one candidate compiled at a time, as ``nncf-hqq evaluate`` runs) or
``old`` (``--against``). The old code holds
every model's full-window logits at once (about 14-17 GB for five candidates and 40 windows): run it with few
candidates and windows on a shared machine; the table extrapolates it linearly (time per model-window, memory per
model) and says so.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 262_144
WINDOW = 512

#: Candidate name -> CompressionOptions fields.
CANDIDATES: dict[str, dict[str, Any]] = {
    "rtn_g64": {"group_size": 64, "hqq": False},
    "hqq_g64": {"group_size": 64},
    "rtn_g128": {"group_size": 128, "hqq": False},
    "hqq_g128": {"group_size": 128},
    "hqq_int8": {"mode": "int8_asym"},
}

CHILD = """
import importlib.util, json, resource, sys, time
import numpy as np
VOCAB, WINDOW = {vocab}, {window}
module_path, reference, windows, impl, *candidates = sys.argv[1:]
spec = importlib.util.spec_from_file_location("evaluation_under_test", module_path)
ev = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = ev
spec.loader.exec_module(ev)
rng = np.random.default_rng(0)
token_windows = [rng.integers(0, VOCAB, size=WINDOW) for _ in range(int(windows))]
start = time.perf_counter()
options = {"one_at_a_time": True} if impl == "seq" else {}
results = ev.evaluate_llms(reference, {c.rsplit("/", 1)[-1]: c for c in candidates}, token_windows, **options)
seconds = time.perf_counter() - start
peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
print("RESULT " + json.dumps({"seconds": seconds, "peak_gb": peak_gb, "results": results}))
"""


def build(work: Path) -> tuple[Path, list[Path]]:
    """The fp32 IR of the random 262k-vocabulary model and its compressed candidates (cached in ``work``)."""
    from nncf_hqq.llm import models
    from nncf_hqq.llm import workflows

    fp = work / "fp"
    if not workflows.is_ir_dir(fp):
        import torch
        from transformers import AutoConfig
        from transformers import AutoModelForCausalLM

        config = AutoConfig.for_model(
            "gemma3_text",
            vocab_size=VOCAB,
            hidden_size=256,
            intermediate_size=1024,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=64,
            query_pre_attn_scalar=64,
            sliding_window=512,
            max_position_embeddings=1024,
        )
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(config).eval().save_pretrained(work / "hf")
        models.export_to_openvino(work / "hf", fp)
    outs = []
    for name, fields in CANDIDATES.items():
        out = work / name
        if not workflows.is_ir_dir(out):
            options = workflows.CompressionOptions(**fields)
            workflows.save_model_dir(workflows.compress_model(workflows.read_model(fp), options), out, fp)
        outs.append(out)
    return fp, outs


def module_at(revision: str, tmp: Path) -> Path:
    """``nncf_hqq/llm/evaluation.py`` as it is at a git revision, written under ``tmp``."""
    source = subprocess.run(
        ["git", "show", f"{revision}:nncf_hqq/llm/evaluation.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    path = tmp / f"evaluation_{revision}.py"
    path.write_text(source)
    return path


def run_child(module: Path, fp: Path, candidates: list[Path], windows: int, impl: str) -> dict[str, Any]:
    child = CHILD.replace("{vocab}", str(VOCAB)).replace("{window}", str(WINDOW))
    args = [sys.executable, "-c", child, str(module), str(fp), str(windows), impl, *map(str, candidates)]
    proc = subprocess.run(args, capture_output=True, text=True, check=False, env={"TQDM_DISABLE": "1", **_env()})
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="git revision of the old evaluation code")
    parser.add_argument("--runs", default="old:1:4,new:1:4,old:2:4,new:2:4,new:5:40")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "nncf_hqq_evaluate_bench")
    parser.add_argument("--json", type=Path, default=Path("results/evaluate_memory.json"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    fp, candidates = build(args.work)
    with tempfile.TemporaryDirectory() as tmp:
        new = ROOT / "nncf_hqq" / "llm" / "evaluation.py"
        modules = {"old": module_at(args.against, Path(tmp)), "new": new, "seq": new}
        rows = []
        for run in args.runs.split(","):
            impl, n_candidates, windows = run.split(":")
            result = run_child(modules[impl], fp, candidates[: int(n_candidates)], int(windows), impl)
            row = {"impl": impl, "candidates": int(n_candidates), "windows": int(windows), **result}
            rows.append(row)
            print(
                f"{impl:4s} {n_candidates} candidates {windows:>3s} windows: {row['seconds']:8.1f} s "
                f"{row['peak_gb']:6.2f} GB",
                flush=True,
            )
    print_table(rows)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"against": args.against, "vocab": VOCAB, "window": WINDOW, "runs": rows}, indent=2)
    )
    print(f"JSON: {args.json}")


def per_model_window(row: dict[str, Any]) -> float:
    return row["seconds"] / (row["windows"] * (row["candidates"] + 1))


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'impl':5s}{'cand':>5s}{'windows':>8s}{'time s':>9s}{'s/model-window':>16s}{'peak GB':>9s}")
    for row in rows:
        print(
            f"{row['impl']:5s}{row['candidates']:>5d}{row['windows']:>8d}{row['seconds']:>9.1f}"
            f"{per_model_window(row):>16.2f}{row['peak_gb']:>9.2f}"
        )
    old = sorted((r for r in rows if r["impl"] == "old"), key=lambda r: r["candidates"])
    if len(old) >= 2 and old[0]["candidates"] != old[-1]["candidates"]:
        slope = (old[-1]["peak_gb"] - old[0]["peak_gb"]) / (old[-1]["candidates"] - old[0]["candidates"])
        seconds = sum(per_model_window(r) for r in old) / len(old) * 40 * 6
        peak = old[-1]["peak_gb"] + slope * (5 - old[-1]["candidates"])
        print(
            f"old, extrapolated to 5 candidates x 40 windows: {seconds / 60:.1f} min, {peak:.1f} GB "
            f"(+{slope:.2f} GB per candidate)"
        )
    pairs = [
        (o, n)
        for first, second in (("old", "new"), ("new", "seq"))
        for o in rows
        if o["impl"] == first
        for n in rows
        if n["impl"] == second and (n["candidates"], n["windows"]) == (o["candidates"], o["windows"])
    ]
    for old_row, new_row in pairs:
        print(
            f"{old_row['candidates']} candidates, {old_row['windows']} windows: {new_row['impl']}/{old_row['impl']} "
            f"time {new_row['seconds'] / old_row['seconds']:.2f}, "
            f"peak {new_row['peak_gb']:.2f} vs {old_row['peak_gb']:.2f} GB"
        )
        for name, metrics in old_row["results"].items():
            other = new_row["results"][name]
            print(
                "   " + name + ": " + ", ".join(f"{k} {metrics[k]:.5f} / {other[k]:.5f}" for k in ("ppl", "kl", "top1"))
            )


if __name__ == "__main__":
    main()
