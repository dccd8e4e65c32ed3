"""Time and peak memory of compressing a Hugging Face checkpoint: ``nncf-hqq compress`` against ``optimum-cli export
openvino --weight-format int4``, side by side on the same checkpoint, with the peak of every phase.

The checkpoints are random bf16 models of released shapes (``_checkpoints.SHAPES``: Qwen2.5-0.5B, a 2B Qwen2, Phi-3.5-
mini, Qwen2.5-7B), written shard by shard with the real Qwen2.5 tokenizer (from the Qwen GGUF of
``../shared``), or ``smollm2``: SmolLM2-135M's fp32 checkpoint (``nncf_hqq.llm.zoo``). Every command runs as a
child process; its memory is sampled every 0.2 s (the resident memory of the process and its children, summed; also
without the pages of mapped files, "anon", which the kernel can drop and read again), overall and per phase, and
the phase it is in is read from the lines ``nncf-hqq`` logs ("export ...", "export: 42.5 s"). The kernel's own peak
(``ru_maxrss`` of the largest process) is reported too. ``--genai`` then loads every written dir with
``openvino_genai.LLMPipeline`` and generates 8 tokens (peak memory of that, too).

    python benchmarks/checkpoint_memory.py --models qwen2-2b,smollm2 --runs optimum,data-free
    python benchmarks/checkpoint_memory.py --models qwen2.5-7b --runs optimum,data-free --genai
    python benchmarks/checkpoint_memory.py --models qwen2-2b --runs self-calibrated

Runs: ``optimum`` (optimum-cli, INT4 data-free, its defaults), ``data-free`` (``nncf-hqq compress
--no-self-calibration``), ``self-calibrated`` (the default: self-generated text, AWQ + Scale Estimation + HQQ, the
output check), ``no-check`` (the default with ``--no-output-check``), ``torch`` (``--backend torch
--no-self-calibration``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _checkpoints

GIB = 1024**3
RUNS = {
    "optimum": "optimum-cli export openvino --weight-format int4",
    "data-free": "nncf-hqq compress --no-self-calibration",
    "self-calibrated": "nncf-hqq compress (self-calibrated, output check)",
    "no-check": "nncf-hqq compress --no-output-check",
    "torch": "nncf-hqq compress --backend torch --no-self-calibration",
}


#: Group sizes other than the default 128 (SmolLM2's hidden size, 576, is not a multiple of 128).
GROUP_SIZE = {"smollm2": 64}


def command(
    run: str, checkpoint: Path, out: Path, group_size: int | None = None, extra: tuple[str, ...] = ()
) -> list[str]:
    bin_dir = Path(sys.executable).parent
    groups = ["--group-size", str(group_size)] if group_size is not None else []
    if run == "optimum":
        task = "text-generation-with-past"
        head = [str(bin_dir / "optimum-cli"), "export", "openvino", "--model", str(checkpoint)]
        return [*head, "--weight-format", "int4", *groups, "--task", task, str(out)]
    options = {
        "data-free": ["--no-self-calibration"],
        "self-calibrated": [],
        "no-check": ["--no-output-check"],
        "torch": ["--backend", "torch", "--no-self-calibration"],
    }[run]
    return [str(bin_dir / "nncf-hqq"), "compress", str(checkpoint), str(out), *options, *groups, *extra]


def tree_memory(pid: int) -> tuple[int, int]:
    """Resident bytes of the process ``pid`` and its children, summed: all, and anonymous (resident minus the pages
    of mapped files, which the kernel can drop and read again, such as a memory-mapped checkpoint). A child still
    running the parent's command line is a fork before its exec, sharing the parent's pages: not counted."""
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    total = anonymous = 0
    with contextlib.suppress(psutil.NoSuchProcess):
        command = root.cmdline()
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process is not root and process.cmdline() == command:
                continue  # forked, not yet exec'd: the parent's pages, shared, not more memory
            info = process.memory_info()
            total += info.rss
            anonymous += info.rss - getattr(info, "shared", 0)
    return total, anonymous


def measured(argv: list[str], log: Path) -> dict[str, Any]:
    """Runs ``argv``; its wall time, peak memory overall and per phase (from its ``[nncf-hqq] PHASE ...`` lines)."""
    start = time.perf_counter()
    env = {**os.environ, "NNCF_HQQ_ANNOUNCE_PHASES": "1"}  # nncf_hqq.llm.logs: phase starts logged off a terminal
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env)
    phases: list[str] = []
    peaks: dict[str, int] = {}
    anonymous_peaks: dict[str, int] = {}
    peak = [0, 0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            rss, anonymous = tree_memory(proc.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], anonymous)
            name = phases[-1] if phases else "(start-up)"
            peaks[name] = max(peaks.get(name, 0), rss)
            anonymous_peaks[name] = max(anonymous_peaks.get(name, 0), anonymous)
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    partial = log.with_suffix(".phases.json")  # the phases' peaks so far, for a run that does not finish
    with log.open("w") as out:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            text = line.strip().removeprefix("[nncf-hqq] ")
            if text.endswith(" ..."):
                phases.append(text[:-4])
            elif phases and text.startswith(f"{phases[-1]}: ") and text.endswith(" s"):
                phases.pop()
                progress = {"peak_gib": dict(peaks), "anonymous_peak_gib": dict(anonymous_peaks)}
                partial.write_text(
                    json.dumps({k: {n: round(v / GIB, 2) for n, v in d.items()} for k, d in progress.items()})
                )
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    sampler.join()
    return {
        "returncode": os.waitstatus_to_exitcode(status),
        "wall_s": round(time.perf_counter() - start, 1),
        "peak_gib": round(peak[0] / GIB, 2),
        "peak_anonymous_gib": round(peak[1] / GIB, 2),
        "maxrss_gib": round(usage.ru_maxrss * 1024 / GIB, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),  # user + system, of it and the children it waited for
        "phase_peak_gib": {name: round(value / GIB, 2) for name, value in peaks.items()},
        "phase_anonymous_peak_gib": {name: round(value / GIB, 2) for name, value in anonymous_peaks.items()},
    }


GENAI_CHILD = """
import sys, resource, time, openvino_genai
start = time.perf_counter()
pipe = openvino_genai.LLMPipeline(sys.argv[1], "CPU")
text = pipe.generate("The capital of France is", max_new_tokens=8)
print(repr(text[:80]), round(time.perf_counter() - start, 1), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def genai_check(out: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", GENAI_CHILD, str(out)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return {"loads": False, "error": proc.stderr.strip().splitlines()[-1:]}
    text, seconds, maxrss = proc.stdout.strip().rsplit(" ", 2)
    return {"loads": True, "text": text, "seconds": float(seconds), "maxrss_gib": round(int(maxrss) * 1024 / GIB, 2)}


def checkpoint(name: str, work: Path) -> Path:
    """The checkpoint's dir, made in a child process: Linux keeps a process's peak RSS across ``exec``, so a command
    forked from this process after it had loaded torch would report this process's peak as its own ``ru_maxrss``."""
    args = [sys.executable, __file__, "--make-checkpoint", name, "--work", str(work)]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"could not make the checkpoint {name}: {proc.stderr.strip()}")
    return Path(proc.stdout.strip().splitlines()[-1])


def make_checkpoint(name: str, work: Path) -> Path:
    if name == "smollm2":
        from nncf_hqq.llm import zoo

        return zoo.smollm2_hf_dir()
    tokenizer = work / "qwen2.5-tokenizer"
    if not tokenizer.is_dir():
        from transformers import AutoTokenizer

        from nncf_hqq.llm import zoo

        gguf = zoo.qwen_gguf()
        AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(tokenizer)
    return _checkpoints.write_checkpoint(_checkpoints.SHAPES[name], work / name, tokenizer)


def size_gib(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.glob("*.safetensors")) / GIB, 2)


def cpu() -> str:
    try:
        from nncf_hqq.llm.cpu import this_cpu

        return str(this_cpu())
    except Exception:  # a description only
        return platform.processor()


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'model':14} {'GiB':>5} {'run':16} {'rc':>3} {'wall s':>7} {'peak GiB':>9} {'anon':>6} {'maxrss':>7}"
        "  phases (peak / anon GiB)"
    )
    for r in rows:
        anonymous = r.get("phase_anonymous_peak_gib", {})
        phases = ", ".join(f"{k} {v}/{anonymous.get(k, '-')}" for k, v in r["phase_peak_gib"].items())
        print(
            f"{r['model']:14} {r['checkpoint_gib']:5} {r['run']:16} {r['returncode']:3} {r['wall_s']:7} "
            f"{r['peak_gib']:9} {r['peak_anonymous_gib']:6} {r['maxrss_gib']:7}  {phases}"
        )
        if "genai" in r:
            print(f"{'':14} GenAI: {r['genai']}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="qwen2-2b,smollm2", help=f"comma-separated: {', '.join(_checkpoints.SHAPES)}")
    p.add_argument("--runs", default="optimum,data-free", help=f"comma-separated: {', '.join(RUNS)}")
    p.add_argument("--work", type=Path, default=Path.home() / ".cache" / "nncf_hqq" / "checkpoints")
    p.add_argument("--genai", action="store_true", help="load every output with openvino_genai and generate")
    p.add_argument("--keep", action="store_true", help="keep the outputs (default: removed after the run)")
    p.add_argument("--json", type=Path, default=Path("results/checkpoint_memory.json"))
    p.add_argument(
        "--nncf-hqq-args", default="", help="more options for the nncf-hqq runs, e.g. '--no-memory-check' (recorded)"
    )
    p.add_argument("--make-checkpoint", metavar="MODEL", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.make_checkpoint:
        print(make_checkpoint(args.make_checkpoint, args.work))
        return 0
    rows = []
    for name in args.models.split(","):
        ckpt = checkpoint(name, args.work)
        for run in args.runs.split(","):
            out = args.work / "out" / f"{name}-{run}"
            shutil.rmtree(out, ignore_errors=True)
            log = args.work / "out" / f"{name}-{run}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            extra = tuple(args.nncf_hqq_args.split()) if run != "optimum" else ()
            row = {
                "model": name,
                "checkpoint_gib": size_gib(ckpt),
                "run": run,
                "command": " ".join([RUNS[run], *extra]),
            }
            row |= measured(command(run, ckpt, out, GROUP_SIZE.get(name), extra), log)
            if args.genai and row["returncode"] == 0:
                row["genai"] = genai_check(out)
            rows.append(row)
            print_table([row])
            if not args.keep:
                shutil.rmtree(out, ignore_errors=True)
    print()
    print_table(rows)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"cpu": cpu(), "nproc": os.cpu_count(), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
