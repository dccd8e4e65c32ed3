"""Inference cost of HQQ's f16 zero point through OpenVINO's own ``benchmark_app``: u4 against f16 zero points.

    python upstream/build.py /tmp/core --upto 0001
    python benchmarks/upstream_benchmark_app.py --tree /tmp/core --out results/upstream_benchmark_app.json

Models: the MatMuls of Qwen2.5-1.5B's decoder layers (4 layers: q/k/v with biases, o, gate, up, down; hidden 1536,
KV width 256, intermediate 8960) and of Qwen2.5-7B's (2 layers: 3584, 512, 18944), attention replaced by a cheap mix
(``benchmarks/inference.py``'s ``qwen_layers``), random weights. Each is compressed twice, INT4_ASYM g128, every layer
(``all_layers=True``), ratio 1: by the installed nncf 3.4.0 (RTN: u4 codes, u4 zero points) and by the patched tree
with ``hqq=True`` (u4 codes, f16 zero points), each in a child process of its own with only that NNCF importable
(``benchmarks/upstream_evidence.py``). Then ``benchmark_app -d CPU -hint latency -api sync`` times each IR at
one token (decode, input ``[1, 1, hidden]``) and at ``--prefill`` tokens (``[1, T, hidden]``), each run a fresh
process that compiles the IR anew; the two formats take turns, ``--rounds`` times. Reported: ``benchmark_app``'s
median latency (median over rounds) and the median of per-round ratios f16 / u4. The CPU (model, ISA flags, AMX or
not) and the plugin's settings as ``benchmark_app`` prints them are recorded.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: name -> (hidden, intermediate, KV width, layers), the decoder-layer MatMul shapes.
SHAPES = {"qwen2.5-1.5b": (1536, 8960, 256, 4), "qwen2.5-7b": (3584, 18944, 512, 2)}
GROUP_SIZE = 128
FORMATS = ("u4", "f16")
#: benchmark_app's latency lines and their units.
MEDIAN = re.compile(r"Median:\s+([0-9.]+)\s+(us|ms|s)\b")
UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}
#: The plugin's settings worth recording, as benchmark_app prints the compiled model's properties.
SETTINGS = (
    "INFERENCE_PRECISION_HINT",
    "DYNAMIC_QUANTIZATION_GROUP_SIZE",
    "INFERENCE_NUM_THREADS",
    "RUNTIME_REQUIREMENTS",
)


def median_ms(output: str) -> float:
    """benchmark_app's median latency in milliseconds."""
    match = MEDIAN.search(output)
    if match is None:
        msg = f"no median latency in benchmark_app's output:\n{output[-2000:]}"
        raise ValueError(msg)
    return float(match.group(1)) * UNITS[match.group(2)]


def plugin_settings(output: str) -> dict[str, str]:
    """The ``SETTINGS`` lines of benchmark_app's report of the compiled model."""
    found = {}
    for key in SETTINGS:
        match = re.search(rf"\b{key}:\s*(.+)", output)
        if match:
            found[key] = match.group(1).strip()
    return found


def benchmark_command(ir: Path, hidden: int, tokens: int, seconds: int) -> list[str]:
    return [
        "benchmark_app",
        "-m",
        str(ir),
        "-d",
        "CPU",
        "-hint",
        "latency",
        "-api",
        "sync",
        "-shape",
        f"x[1,{tokens},{hidden}]",
        "-t",
        str(seconds),
    ]


def run_benchmark_app(ir: Path, hidden: int, tokens: int, seconds: int) -> tuple[float, str]:
    done = subprocess.run(benchmark_command(ir, hidden, tokens, seconds), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"benchmark_app failed on {ir}:\n{(done.stdout + done.stderr)[-3000:]}")
    return median_ms(done.stdout), done.stdout


def per_round_ratio(u4: list[float], f16: list[float]) -> float:
    """Median over rounds of f16's latency over u4's of the same round."""
    return statistics.median(f / u for u, f in zip(u4, f16, strict=True))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, required=True, help="the patched tree (upstream/build.py's DEST)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"any of {','.join(SHAPES)}")
    parser.add_argument("--prefill", type=int, default=128, help="tokens of the prefill shape")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=8, help="benchmark_app -t per run")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the IRs here (default: a temporary dir)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    if unknown := sorted(set(shapes) - set(SHAPES)):
        parser.error(f"--shapes: unknown {unknown}")
    if not (args.tree / "src" / "nncf" / "__init__.py").is_file():
        parser.error(f"--tree: {args.tree} holds no src/nncf")

    import inference
    import openvino as ov
    from upstream_evidence import Row
    from upstream_evidence import compress
    from upstream_evidence import tree_identity

    from nncf_hqq.llm.cpu import this_cpu

    cpu = this_cpu()
    record: dict[str, Any] = {
        "command": " ".join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])]),
        "tree": tree_identity(args.tree),
        "openvino": ov.get_version(),
        "cpu": {"model": cpu.model, "kind": cpu.kind, "amx": cpu.kind == "AMX", "isa": cpu.isa()},
        "benchmark_app": benchmark_command(Path("MODEL.xml"), 0, 0, args.seconds),
        "rounds": args.rounds,
        "results": {},
    }
    print(f"CPU: {cpu.describe()}; openvino {ov.get_version()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="upstream_benchmark_app_") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for shape in shapes:
            hidden, intermediate, kv, layers = SHAPES[shape]
            float_ir = workdir / f"{shape}_float.xml"
            ov.save_model(inference.qwen_layers(hidden, intermediate, kv, layers), float_ir, compress_to_fp16=False)
            irs = {"u4": workdir / f"{shape}_u4.xml", "f16": workdir / f"{shape}_f16.xml"}
            seconds = {
                "u4": compress(float_ir, irs["u4"], GROUP_SIZE, Row(None), all_layers=True),
                "f16": compress(float_ir, irs["f16"], GROUP_SIZE, Row(args.tree), all_layers=True),
            }
            float_ir.unlink()
            float_ir.with_suffix(".bin").unlink()
            sizes = {name: ir.with_suffix(".bin").stat().st_size for name, ir in irs.items()}
            print(f"{shape}: compressed (RTN {seconds['u4']:.1f} s, hqq=True {seconds['f16']:.1f} s)", flush=True)
            for phase, tokens in (("decode", 1), ("prefill", args.prefill)):
                latencies: dict[str, list[float]] = {name: [] for name in FORMATS}
                settings: dict[str, dict[str, str]] = {}
                for _ in range(args.rounds):
                    for name in FORMATS:
                        latency, output = run_benchmark_app(irs[name], hidden, tokens, args.seconds)
                        latencies[name].append(latency)
                        settings[name] = plugin_settings(output)
                ratio = per_round_ratio(latencies["u4"], latencies["f16"])
                record["results"][f"{shape}/{phase}"] = {
                    "tokens": tokens,
                    "median_ms": {name: statistics.median(values) for name, values in latencies.items()},
                    "runs_ms": latencies,
                    "f16_over_u4": ratio,
                    "plugin": settings,
                    "weights_bytes": sizes,
                    "compress_seconds": seconds,
                }
                shown = ", ".join(f"{n} {statistics.median(v):.2f} ms" for n, v in latencies.items())
                print(f"  {phase} ({tokens} tokens): {shown}, f16 / u4 {ratio:.2f}", flush=True)
            for ir in irs.values():
                if args.workdir is None:
                    ir.unlink()
                    ir.with_suffix(".bin").unlink()
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\nbenchmark_app, CPU {cpu.describe()}, {args.rounds} alternated rounds of {args.seconds} s each")
    print(f"{'shapes / phase':<24}{'u4 zp ms':>10}{'f16 zp ms':>11}{'f16 / u4':>10}  plugin (u4 run)")
    for key, row in record["results"].items():
        plugin = row["plugin"].get("u4", {})
        precision, group = (plugin.get(key, "?") for key in SETTINGS[:2])
        shown = f"{precision}, DQ {group}"
        print(
            f"{key:<24}{row['median_ms']['u4']:>10.2f}{row['median_ms']['f16']:>11.2f}{row['f16_over_u4']:>10.2f}"
            f"  {shown}"
        )
    record["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if args.out:
        args.out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
