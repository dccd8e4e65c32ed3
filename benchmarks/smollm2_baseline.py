"""SmolLM2-135M baseline under shared/PROTOCOL.md: FP and NNCF RTN (INT4_ASYM, g64) on the first 40 WikiText-2 windows.

Usage: python benchmarks/smollm2_baseline.py [--windows 40] [--out results/smollm2_baseline.json]
Needs the llm extra (pip install -e '.[llm]') and shared/ beside the repository (or $NNCF_HQQ_SHARED).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import nncf
import openvino as ov

from nncf_hqq.evaluation import evaluate_llms
from nncf_hqq.evaluation import load_tokenizer
from nncf_hqq.evaluation import wikitext_windows
from nncf_hqq.models import ir_xml
from nncf_hqq.models import shared_path
from nncf_hqq.models import smollm2_ov_dir

WIKITEXT = "data/wikitext-2-raw/wiki.test.raw"


def rtn(ir_dir: Path, group_size: int = 64) -> ov.Model:
    """NNCF data-free RTN: all decoder Linear weights INT4_ASYM, embeddings and lm_head kept float."""
    model = ov.Core().read_model(ir_xml(ir_dir))
    return nncf.compress_weights(
        model,
        mode=nncf.CompressWeightsMode.INT4_ASYM,
        group_size=group_size,
        ratio=1.0,
        backup_mode=nncf.BackupMode.NONE,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=40)
    parser.add_argument("--out", type=Path, default=Path("results/smollm2_baseline.json"))
    args = parser.parse_args()

    timings: dict[str, float] = {}
    start = time.perf_counter()
    ir_dir = smollm2_ov_dir()
    timings["obtain_and_export_s"] = time.perf_counter() - start

    tokenizer = load_tokenizer(ir_dir)
    windows = wikitext_windows(tokenizer, shared_path(WIKITEXT), args.windows)

    start = time.perf_counter()
    rtn_model = rtn(ir_dir)
    timings["rtn_compress_s"] = time.perf_counter() - start

    start = time.perf_counter()
    results = evaluate_llms(ir_dir, {"nncf_rtn_int4_asym_g64": rtn_model}, windows)
    timings["evaluate_s"] = time.perf_counter() - start

    record = {
        "model": "SmolLM2-135M-Instruct (Q4_1 GGUF dequantized, fp32 IR)",
        "ir_dir": str(ir_dir),
        "windows": args.windows,
        "window_tokens": 512,
        "results": results,
        "timings": timings,
        "versions": {"nncf": nncf.__version__, "openvino": ov.get_version(), "python": platform.python_version()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2))

    print(f"{'row':<26}{'ppl':>10}{'KL':>10}{'top1':>9}{'infer s':>10}")
    for name, m in results.items():
        print(f"{name:<26}{m['ppl']:>10.3f}{m['kl']:>10.4f}{m['top1']:>9.4f}{m['seconds']:>10.1f}")
    print(", ".join(f"{k}={v:.1f}" for k, v in timings.items()), f"-> {args.out}")


if __name__ == "__main__":
    main()
