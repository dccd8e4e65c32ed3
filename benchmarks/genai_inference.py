"""OpenVINO GenAI inference of the zero-point formats: time to first token (TTFT), time per output token (TPOT) and
peak memory through ``openvino_genai.LLMPipeline``, with the CPU's model and instruction sets recorded.

Variants (from ``benchmarks/inference.py``, every one compressed from the same f16 IR): ``rtn`` (NNCF's INT4_ASYM,
u4 zero points), ``hqq_float`` (``hqq=True``: f16 zero points), ``hqq_split`` (``zero_point_format="split"``, int8
corrections), ``hqq_split_f16`` (the split with f16 corrections, as before 2026-12-06) and ``hqq_int``
(``zero_point_format="integer"``); the split variants are written from ``hqq_float``'s IR by
``split_float_zero_points``, the pass ``zero_point_format="split"`` runs. Models: SmolLM2-135M (g64), the
Qwen2.5-1.5B-shaped model (g128) and ``qwen7b``: a random checkpoint of Qwen2.5-7B's shapes (bf16, 14.2 GiB; the
Qwen2.5 tokenizer; ``benchmarks/_checkpoints.py``) exported by optimum-intel in its own precision (g128); ratio 1,
``backup_mode=NONE``. Each variant is written as a GenAI model dir (model IR, tokenizer and detokenizer IRs, config
files). The 7B row needs about 16 GiB of memory to export and 60 GiB of disk under ``--workdir``.

Latency: in each round every variant's ``LLMPipeline`` is loaded, warmed up with one short generation, measured
with one generation (a fixed prompt, greedy, ``--new-tokens`` tokens with ``ignore_eos``) and released, the variants
in a new random order each round (one pipeline held at a time: a 7B one fills most of 24 GB; and one compiled
instance of a model runs at its own speed, so each round measures a new one). Reported: median TTFT and TPOT over
rounds, and the median over rounds of each round's ratio to ``rtn``. Memory: each variant loaded and run once in a
fresh child process; its peak RSS.

    python benchmarks/genai_inference.py --models smollm2,qwen --out results/genai.json
    python benchmarks/genai_inference.py --models smollm2 --rounds 3 --new-tokens 16     # smoke run
    python benchmarks/genai_inference.py --models qwen7b --variants rtn,hqq_float,hqq_split,hqq_split_f16 \
        --rounds 4 --new-tokens 24 --workdir /tmp/genai_models --out results/genai_7b.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import openvino as ov

sys.path.insert(0, str(Path(__file__).resolve().parent))
import inference  # benchmarks/inference.py: the variants and how they are compressed

VARIANTS = ("rtn", "hqq_float", "hqq_split", "hqq_split_f16", "hqq_int")
MODELS = ("smollm2", "qwen", "qwen7b")
#: The random checkpoint shape of ``qwen7b`` (``_checkpoints.SHAPES``).
QWEN7B_SHAPE = "qwen2.5-7b"
PROBE_FLAG = "--_memory-probe"
PROMPT = (
    "The history of the printing press begins in the fifteenth century, when movable type made books cheaper and "
    "faster to produce than ever before. Within a few decades presses were working in most of the large cities of "
    "Europe, and the number of books in circulation grew from thousands to millions. Scholars, merchants and "
    "churches all used the new technology, and it changed how knowledge was shared, how languages were written and "
    "how news travelled. Describe in detail how"
)


def cpu_record() -> dict[str, Any]:
    """The CPU's model, kind and the instruction-set flags that matter for OpenVINO's CPU kernels, and the plugin's
    view of it."""
    from nncf_hqq.llm.cpu import this_cpu

    info, core = this_cpu(), ov.Core()
    return {
        "model": info.model,
        "kind": info.kind,
        "isa": info.isa(),
        "openvino_capabilities": list(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")),
        "openvino_cpu_name": core.get_property("CPU", "FULL_DEVICE_NAME"),
    }


def write_genai_dir(spec: inference.ModelSpec, variant: str, workdir: Path, files_dir: Path) -> Path:
    """The variant of ``spec`` as a GenAI model dir (IR, tokenizer IRs, config files); built once, then reused.
    A split variant is ``hqq_float``'s IR with its zero points split (written first when missing)."""
    from nncf_hqq.llm import layout
    from nncf_hqq.llm import writing

    out = workdir / spec.name / variant
    if (out / layout.MODEL_XML).is_file() and (out / layout.DETOKENIZER_XML).is_file():
        return out
    correction = inference.VARIANTS[variant].split_correction
    if correction is not None:
        float_dir = write_genai_dir(spec, "hqq_float", workdir, files_dir)
        model = inference.split_variant(float_dir / layout.MODEL_XML, correction)
    else:
        source = inference.f16_source(spec, workdir)
        model = inference.compress(source, spec, inference.VARIANTS[variant])
    writing.save_model_dir(model, out, files_dir)  # with the tokenizer IRs of files_dir
    del model
    gc.collect()
    return out


def qwen7b_export(workdir: Path) -> Path:
    """The dir of the random Qwen2.5-7B-shaped checkpoint exported by optimum-intel (its own bf16 precision,
    stateful, with the tokenizer and config files); its IR is also linked as the source that ``inference.f16_source``
    reads for ``qwen7b`` (``qwen7b/source_f16/model.xml``, outside the export dir, whose side files every variant
    dir copies). The checkpoint is deleted once exported. Made in a child process, so that this process's peak
    memory stays its own."""
    if not (workdir / "qwen7b" / "source_f16" / "model.xml").is_file():
        command = [sys.executable, __file__, "--_export-qwen7b", str(workdir)]
        subprocess.run(command, check=True)
    return workdir / "qwen7b" / "export"


def export_qwen7b(workdir: Path) -> None:
    """Child process of ``qwen7b_export``: checkpoint (with the Qwen2.5 tokenizer), export, links, cleanup."""
    import shutil

    import _checkpoints
    from transformers import AutoTokenizer

    from nncf_hqq.llm import export
    from nncf_hqq.llm import layout
    from nncf_hqq.llm import zoo

    tokenizer = workdir / "qwen2.5-tokenizer"
    if not tokenizer.is_dir():
        gguf = zoo.qwen_gguf()
        AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(tokenizer)
    checkpoint = _checkpoints.write_checkpoint(_checkpoints.SHAPES[QWEN7B_SHAPE], workdir / QWEN7B_SHAPE, tokenizer)
    export_dir, source_dir = workdir / "qwen7b" / "export", workdir / "qwen7b" / "source_f16"
    export.export_to_openvino(checkpoint, export_dir)
    source_dir.mkdir(parents=True, exist_ok=True)
    for suffix, name in ((".xml", layout.MODEL_XML), (".bin", layout.MODEL_BIN)):
        os.link(export_dir / name, source_dir / f"model{suffix}")
    shutil.rmtree(checkpoint)


def model_spec(name: str, workdir: Path) -> inference.ModelSpec:
    if name != "qwen7b":
        return inference.model_specs(quick=False)[name]
    source_xml = qwen7b_export(workdir) / "openvino_model.xml"
    return inference.ModelSpec(
        "qwen7b",
        lambda: ov.Core().read_model(source_xml),
        128,
        stateful_llm=True,
        all_layers=False,
    )


def source_files_dir(name: str, workdir: Path) -> Path:
    from nncf_hqq.llm import zoo

    if name == "qwen7b":
        return qwen7b_export(workdir)
    return zoo.smollm2_ov_dir() if name == "smollm2" else zoo.qwen_ov_dir()


def pipeline(model_dir: Path) -> Any:
    import openvino_genai

    return openvino_genai.LLMPipeline(str(model_dir), "CPU", **inference.cpu_config("default"))


def generate_once(pipe: Any, new_tokens: int) -> tuple[float, float]:
    """TTFT and TPOT (ms) of one greedy generation of ``new_tokens`` tokens from ``PROMPT``."""
    import openvino_genai

    config = openvino_genai.GenerationConfig()
    config.max_new_tokens = new_tokens
    config.min_new_tokens = new_tokens
    config.ignore_eos = True
    result = pipe.generate([PROMPT], config)
    metrics = result.perf_metrics
    return float(metrics.get_ttft().mean), float(metrics.get_tpot().mean)


def measure_latency(dirs: dict[str, Path], rounds: int, new_tokens: int) -> dict[str, Any]:
    """Interleaved rounds: in each round every variant's pipeline is loaded, warmed up (one 4-token generation),
    measured once and released, in a new random order; medians and per-round ratios to ``rtn``. A pipeline is
    loaded anew each round because one compiled instance of a model runs at its own speed (up to 10% apart for one
    IR, ``benchmarks/inference.py``), and because only one 7B pipeline fits in memory."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in dirs}
    rng = random.Random(0)
    for index in range(rounds):
        for name in rng.sample(list(dirs), len(dirs)):
            pipe = pipeline(dirs[name])
            generate_once(pipe, 4)
            samples[name].append(generate_once(pipe, new_tokens))
            del pipe
            gc.collect()
        print(f"    round {index + 1}/{rounds}: " + ", ".join(f"{n} {s[-1][1]:.1f}" for n, s in samples.items()))
    return summarize(samples)


def summarize(samples: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    """Median TTFT and TPOT of each variant, and the medians of the per-round ratios to ``rtn``."""
    result: dict[str, Any] = {}
    for name, values in samples.items():
        ratios = [(v[0] / r[0], v[1] / r[1]) for v, r in zip(values, samples["rtn"], strict=True)]
        result[name] = {
            "ttft_ms": statistics.median(v[0] for v in values),
            "tpot_ms": statistics.median(v[1] for v in values),
            "ttft_ratio": statistics.median(r[0] for r in ratios),
            "tpot_ratio": statistics.median(r[1] for r in ratios),
        }
    return result


def measure_memory(model_dir: Path, new_tokens: int) -> float:
    """Peak RSS (MiB) of a fresh process that loads ``model_dir`` and generates once."""
    command = [sys.executable, __file__, PROBE_FLAG, str(model_dir), str(new_tokens)]
    proc = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["peak_rss_mib"])


def memory_probe(model_dir: str, new_tokens: str) -> None:
    """Prints this process's peak RSS after loading and generating. ``VmHWM`` (``/proc/self/status``) belongs to
    the process's own address space; ``ru_maxrss`` would also count the parent's RSS at the fork."""
    generate_once(pipeline(Path(model_dir)), int(new_tokens))
    status = Path("/proc/self/status")
    hwm = [line.split()[1] for line in status.read_text().splitlines() if line.startswith("VmHWM:")]
    peak_kib = float(hwm[0]) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_rss_mib": peak_kib / 1024}))


def run_model(name: str, args: argparse.Namespace) -> dict[str, Any]:
    spec = model_spec(name, args.workdir)
    files_dir = source_files_dir(name, args.workdir)
    start = time.perf_counter()
    dirs = {variant: write_genai_dir(spec, variant, args.workdir, files_dir) for variant in args.variants}
    print(f"  {name}: {len(dirs)} GenAI dirs ready in {time.perf_counter() - start:.0f} s")
    latency = measure_latency(dirs, args.rounds, args.new_tokens)
    for variant, path in dirs.items():
        latency[variant]["peak_rss_mib"] = measure_memory(path, args.new_tokens)
        rtn_rss = latency["rtn"].get("peak_rss_mib")
        latency[variant]["rss_ratio"] = latency[variant]["peak_rss_mib"] / rtn_rss if rtn_rss else None
    return latency


def format_table(results: dict[str, dict[str, Any]], cpu: dict[str, Any]) -> str:
    lines = [
        f"CPU: {cpu['model']} ({cpu['kind']})",
        f"{'model':<9}{'variant':<15}{'TTFT ms':>9}{'TPOT ms':>9}{'TTFT/RTN':>10}{'TPOT/RTN':>10}{'RSS MiB':>9}",
    ]
    for model, rows in results.items():
        for variant, row in rows.items():
            lines.append(
                f"{model:<9}{variant:<15}{row['ttft_ms']:>9.1f}{row['tpot_ms']:>9.2f}{row['ttft_ratio']:>10.2f}"
                f"{row['tpot_ratio']:>10.2f}{row['peak_rss_mib']:>9.0f}"
            )
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == PROBE_FLAG:
        memory_probe(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--_export-qwen7b":
        export_qwen7b(Path(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated: {','.join(MODELS)}")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated: {','.join(VARIANTS)}")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved generations per variant (default 7)")
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens generated per run (default 64)")
    parser.add_argument("--workdir", type=Path, default=Path("results/genai_models"), help="GenAI model dirs")
    parser.add_argument("--out", type=Path, default=Path("results/genai.json"), help="JSON output")
    args = parser.parse_args()
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if "rtn" not in args.variants or any(v not in VARIANTS for v in args.variants):
        parser.error(f"--variants must include rtn and be among {', '.join(VARIANTS)}")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if any(m not in MODELS for m in models):
        parser.error(f"--models must be among {', '.join(MODELS)}")
    cpu = cpu_record()
    results = {model: run_model(model, args) for model in models}
    print(format_table(results, cpu))
    record = {
        "cpu": cpu,
        "threads": inference.THREADS,
        "rounds": args.rounds,
        "new_tokens": args.new_tokens,
        "prompt_characters": len(PROMPT),
        "versions": {"openvino": ov.get_version()},
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
