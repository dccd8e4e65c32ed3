"""The three models NNCF's maintainer named (Qwen2.5-1.5B-Instruct, Phi-3.5-mini-instruct, Qwen2.5-VL-3B-Instruct)
at their real sizes: ``nncf-hqq compress`` data-free and self-calibrated against ``optimum-cli export openvino
--weight-format int4`` on the same checkpoint (peak memory, wall time), then OpenVINO GenAI latency of what each
wrote against optimum-cli's int4 model, the RTN baseline.

The checkpoints are random bf16 weights of the released configurations (``_checkpoints.SHAPES``:
``qwen2.5-1.5b-instruct``, ``phi3.5-mini-instruct``, ``qwen2.5-vl-3b-instruct``) with the Qwen2.5 tokenizer
(``checkpoint_memory.make_checkpoint``). Every command runs as a child process, measured as
``checkpoint_memory.measured`` measures it: wall time, the kernel's peak resident memory of the largest process
(``ru_maxrss``), the sampled peak of the process tree without the pages of mapped files ("anon"), per phase, and
the CPU time (user + system) it and its children used: on a shared machine the wall time depends on the other
jobs, the CPU time much less.
optimum-cli's ``--weight-format int4`` on a checkpoint it has no preset for is NNCF's data-free INT4_ASYM, group
size 128, ratio 1, embeddings and output head in INT8_ASYM: round to nearest (RTN) with u4 zero points, which is
the baseline of every ratio here. ``nncf-hqq compress`` runs with its defaults (group size 128, ratio 1, INT8_ASYM
backup, the zero-point format for this CPU).

Latency (``--latency``): every written dir is loaded by ``openvino_genai.LLMPipeline`` (``VLMPipeline`` with a
224 x 224 image for a vision-language model), warmed up, measured with one greedy generation of ``--new-tokens``
tokens from ``genai_inference.PROMPT`` and released, the dirs in a new random order each round; medians of TTFT and
TPOT and of the per-round ratios to optimum-cli's model (``rtn``). Each step can run on its own (one memory-lock
acquisition each); the results of one model accumulate in ``--json-dir/MODEL.json``.

    python benchmarks/named_models.py --model qwen2.5-1.5b-instruct --runs optimum,data-free --latency
    python benchmarks/named_models.py --model qwen2.5-1.5b-instruct --runs self-calibrated
    python benchmarks/named_models.py --model qwen2.5-1.5b-instruct --latency --rounds 5     # every dir written
    python benchmarks/named_models.py --model qwen2.5-1.5b-instruct --report                 # the saved tables
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _checkpoints
import checkpoint_memory

MODELS = ("qwen2.5-1.5b-instruct", "phi3.5-mini-instruct", "qwen2.5-vl-3b-instruct")
RUNS = ("optimum", "data-free", "self-calibrated")
#: Latency names: optimum-cli's int4 is the RTN baseline.
LATENCY_NAME = {"optimum": "rtn", "data-free": "data-free", "self-calibrated": "self-calibrated"}
REPO = Path(__file__).resolve().parent.parent
PROBE_FLAG = "--_memory-probe"
IMAGE_SIZE = 224
TARGETS = {"peak": 1.0, "wall": 1.5, "tpot": 1.05}


def is_vision_language(model: str) -> bool:
    return _checkpoints.SHAPES[model].model_type in _checkpoints.VISION_LANGUAGE


def command(model: str, run: str, checkpoint: Path, out: Path) -> list[str]:
    if run == "optimum":
        task = "image-text-to-text" if is_vision_language(model) else "text-generation-with-past"
        optimum = str(Path(sys.executable).parent / "optimum-cli")
        head = [optimum, "export", "openvino", "--model", str(checkpoint)]
        return [*head, "--weight-format", "int4", "--task", task, str(out)]
    options = ["--no-self-calibration"] if run == "data-free" else []
    return [sys.executable, "-m", "nncf_hqq.llm.cli", "compress", str(checkpoint), str(out), *options]


def compression_record(out: Path) -> dict[str, Any]:
    """What ``nncf-hqq compress`` says it did: the zero-point format it chose and the output check's pick."""
    path = out / "nncf_hqq_compression.json"
    if not path.is_file():
        return {}
    record = json.loads(path.read_text())
    check = record.get("output_check") or {}
    return {
        "zero_point_choice": record.get("zero_point_choice"),
        "output_check": {"chosen": check.get("chosen"), "metrics": check.get("metrics")} if check else None,
    }


def run_compression(model: str, run: str, checkpoint: Path, work: Path, source: Path) -> dict[str, Any]:
    out = work / "out" / model / run
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = command(model, run, checkpoint, out)
    os.environ["PYTHONPATH"] = str(source)  # the nncf_hqq the child imports (this checkout unless --source)
    row: dict[str, Any] = {"run": run, "command": " ".join(argv), "source": str(source)}
    row |= checkpoint_memory.measured(argv, work / "out" / model / f"{run}.log")
    row |= compression_record(out)
    row["dir"] = str(out)
    return row


# ---------------------------------------------------------------- latency


def test_image() -> Any:
    import numpy as np
    import openvino as ov

    rng = np.random.default_rng(0)
    return ov.Tensor(rng.integers(0, 256, (1, IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8))


def pipeline(model_dir: Path, vision: bool) -> Any:
    import genai_inference
    import inference
    import openvino_genai

    if vision:
        return openvino_genai.VLMPipeline(str(model_dir), "CPU", **inference.cpu_config("default"))
    return genai_inference.pipeline(model_dir)


def generate_once(pipe: Any, vision: bool, new_tokens: int) -> tuple[float, float]:
    import genai_inference
    import openvino_genai

    if not vision:
        return genai_inference.generate_once(pipe, new_tokens)
    config = openvino_genai.GenerationConfig()
    config.max_new_tokens = new_tokens
    config.min_new_tokens = new_tokens
    config.ignore_eos = True
    result = pipe.generate(genai_inference.PROMPT, images=[test_image()], generation_config=config)
    metrics = result.perf_metrics
    return float(metrics.get_ttft().mean), float(metrics.get_tpot().mean)


def measure_latency(dirs: dict[str, Path], vision: bool, rounds: int, new_tokens: int) -> dict[str, Any]:
    """Interleaved rounds, a pipeline loaded anew for every measurement (``genai_inference.measure_latency``)."""
    import genai_inference

    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in dirs}
    rng = random.Random(0)
    for index in range(rounds):
        for name in rng.sample(list(dirs), len(dirs)):
            pipe = pipeline(dirs[name], vision)
            generate_once(pipe, vision, 4)
            samples[name].append(generate_once(pipe, vision, new_tokens))
            del pipe
            gc.collect()
        print(f"    round {index + 1}/{rounds}: " + ", ".join(f"{n} {s[-1][1]:.1f}" for n, s in samples.items()))
    return genai_inference.summarize(samples)


def measure_memory(model_dir: Path, vision: bool, new_tokens: int) -> float:
    """Peak RSS (MiB) of a fresh process that loads ``model_dir`` and generates once."""
    argv = [sys.executable, __file__, PROBE_FLAG, str(model_dir), str(int(vision)), str(new_tokens)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["peak_rss_mib"])


def memory_probe(model_dir: str, vision: str, new_tokens: str) -> None:
    generate_once(pipeline(Path(model_dir), bool(int(vision))), bool(int(vision)), int(new_tokens))
    hwm = [line.split()[1] for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:")]
    print(json.dumps({"peak_rss_mib": float(hwm[0]) / 1024}))


# ---------------------------------------------------------------- record and tables


def load_record(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {"runs": {}, "latency": None}


def cpu() -> dict[str, Any]:
    import genai_inference

    record = genai_inference.cpu_record()
    record["nproc"] = os.cpu_count()
    return record


def ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}x" if value is not None and base else "-"


def format_tables(model: str, record: dict[str, Any]) -> str:
    runs = record["runs"]
    base = runs.get("optimum", {})
    lines = [
        f"{model}: checkpoint {record.get('checkpoint_gib')} GiB bf16, "
        f"{record.get('parameters', 0) / 1e9:.2f}B parameters",
        f"CPU: {record.get('cpu', {}).get('model')} ({record.get('cpu', {}).get('kind')})",
        f"{'run':16}{'rc':>3}{'wall s':>9}{'/optimum':>9}{'CPU s':>8}{'/optimum':>9}{'peak GiB':>10}{'/optimum':>9}"
        f"{'anon GiB':>10}{'/optimum':>9}  written",
    ]
    for run in RUNS:
        if run not in runs:
            continue
        r = runs[run]
        written = ""
        if r.get("zero_point_choice"):
            written = f"zero points {r['zero_point_choice'].get('format')}"
        if r.get("output_check"):
            written += f", output check kept {r['output_check'].get('chosen')}"
        lines.append(
            f"{run:16}{r['returncode']:>3}{r['wall_s']:>9}{ratio(r['wall_s'], base.get('wall_s')):>9}"
            f"{r.get('cpu_s', '-'):>8}{ratio(r.get('cpu_s'), base.get('cpu_s')):>9}"
            f"{r['maxrss_gib']:>10}{ratio(r['maxrss_gib'], base.get('maxrss_gib')):>9}"
            f"{r['peak_anonymous_gib']:>10}{ratio(r['peak_anonymous_gib'], base.get('peak_anonymous_gib')):>9}"
            f"  {written}"
        )
    latency = record.get("latency")
    if latency:
        lines.append(
            f"GenAI ({latency['rounds']} rounds, {latency['new_tokens']} new tokens): "
            f"{'TTFT ms':>9}{'TPOT ms':>9}{'TTFT/RTN':>10}{'TPOT/RTN':>10}{'RSS MiB':>9}"
        )
        for name, row in latency["results"].items():
            lines.append(
                f"  {name:<41}{row['ttft_ms']:>9.1f}{row['tpot_ms']:>9.2f}{row['ttft_ratio']:>10.2f}"
                f"{row['tpot_ratio']:>10.2f}{row.get('peak_rss_mib', 0):>9.0f}"
            )
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == PROBE_FLAG:
        memory_probe(*sys.argv[2:])
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, choices=MODELS)
    p.add_argument("--runs", default="", help=f"comma-separated compressions to run: {', '.join(RUNS)}")
    p.add_argument("--latency", action="store_true", help="GenAI latency of every dir written so far")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--work", type=Path, default=Path.home() / ".cache" / "nncf_hqq" / "checkpoints")
    p.add_argument("--source", type=Path, default=REPO, help="the nncf_hqq checkout `compress` runs from")
    p.add_argument("--json-dir", type=Path, default=Path("results/named_models"))
    p.add_argument("--report", action="store_true", help="print the saved tables and exit")
    p.add_argument("--clean", action="store_true", help="remove the written dirs and the checkpoint at the end")
    args = p.parse_args()
    path = args.json_dir / f"{args.model}.json"
    record = load_record(path)
    if args.report:
        print(format_tables(args.model, record))
        return 0
    runs = [r for r in args.runs.split(",") if r]
    if any(r not in RUNS for r in runs):
        p.error(f"--runs must be among {', '.join(RUNS)}")
    record["cpu"] = cpu()
    args.json_dir.mkdir(parents=True, exist_ok=True)
    if runs:
        ckpt = checkpoint_memory.checkpoint(args.model, args.work)
        record["checkpoint_gib"] = checkpoint_memory.size_gib(ckpt)
        record["config"] = json.loads((ckpt / "config.json").read_text())
        record["parameters"] = _checkpoints.parameter_count(_checkpoints.SHAPES[args.model])
        for run in runs:
            print(f"  {args.model}: {run} ...", flush=True)
            record["runs"][run] = run_compression(args.model, run, ckpt, args.work, args.source.resolve())
            path.write_text(json.dumps(record, indent=1) + "\n")
            print(format_tables(args.model, record), flush=True)
    if args.latency:
        written = {
            LATENCY_NAME[run]: Path(row["dir"])
            for run, row in record["runs"].items()
            if row["returncode"] == 0 and Path(row["dir"]).is_dir()
        }
        if "rtn" not in written:
            p.error("--latency needs optimum-cli's model (--runs optimum) as its baseline")
        vision = is_vision_language(args.model)
        start = time.perf_counter()
        results = measure_latency(written, vision, args.rounds, args.new_tokens)
        for name, model_dir in written.items():
            results[name]["peak_rss_mib"] = measure_memory(model_dir, vision, args.new_tokens)
        record["latency"] = {
            "rounds": args.rounds,
            "new_tokens": args.new_tokens,
            "pipeline": "VLMPipeline" if vision else "LLMPipeline",
            "seconds": round(time.perf_counter() - start, 1),
            "results": results,
        }
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(format_tables(args.model, record))
    print(f"wrote {path}")
    if args.clean:
        shutil.rmtree(args.work / "out" / args.model, ignore_errors=True)
        shutil.rmtree(args.work / args.model, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
