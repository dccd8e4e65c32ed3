"""HQQ composed with NNCF's AWQ, Scale Estimation and LoRA correction on SmolLM2-135M (shared/PROTOCOL.md).

    python benchmarks/composition.py                    # every row, 40 WikiText-2 windows
    python benchmarks/composition.py --windows 10 --rows rtn,hqq,awq_se,awq_se_hqq

INT4_ASYM g64, ratio 1, backup_mode NONE. Data-aware rows calibrate on 128 random 256-token windows of Tiny
Shakespeare (seed 0), fed as the stateful OpenVINO LLM inputs. Prints a table (perplexity, KL, top-1 vs FP,
and the relative weight error) and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import nncf
import numpy as np
import openvino as ov

import nncf_hqq  # noqa: F401
from nncf_hqq.llm.evaluation import evaluate_llms
from nncf_hqq.llm.layout import ir_xml
from nncf_hqq.llm.records import versions
from nncf_hqq.llm.texts import calibration_samples
from nncf_hqq.llm.texts import load_tokenizer
from nncf_hqq.llm.texts import wikitext_windows
from nncf_hqq.llm.zoo import shared_path
from nncf_hqq.llm.zoo import smollm2_ov_dir

WIKITEXT = "data/wikitext-2-raw/wiki.test.raw"
SHAKESPEARE = "data/tinyshakespeare/input.txt"

#: Row name -> options of nncf.compress_weights; "data" marks rows that need the calibration dataset.
ROWS: dict[str, dict[str, Any]] = {
    "rtn": {},
    "hqq": {"hqq": True},
    "awq_data_free": {"awq": True},
    "awq_data_free_hqq": {"awq": True, "hqq": True},
    "awq_se": {"data": True, "awq": True, "scale_estimation": True},
    "awq_se_hqq": {"data": True, "awq": True, "scale_estimation": True, "hqq": True},
    "se": {"data": True, "scale_estimation": True},
    "se_hqq": {"data": True, "scale_estimation": True, "hqq": True},
    "lora": {"data": True, "lora_correction": True},
    "lora_hqq": {"data": True, "lora_correction": True, "hqq": True},
    "gptq": {"data": True, "gptq": True},
    "gptq_se": {"data": True, "gptq": True, "scale_estimation": True},
}


def weight_relative_error(reference: ov.Model, compressed: ov.Model) -> float:
    """||W_hat - W||^2 / ||W||^2 over all decoder MatMul weights (decompression subgraphs constant-folded)."""
    originals = {
        op.get_friendly_name(): op.get_data()
        for op in reference.get_ordered_ops()
        if op.get_type_name() == "Constant" and ".layers." in op.get_friendly_name()
    }
    error = total = 0.0
    core = ov.Core()
    for op in compressed.get_ordered_ops():
        if op.get_type_name() != "MatMul" or op.input_value(1).get_node().get_type_name() == "Constant":
            continue
        source = op.input_value(1)
        name = next((n for n in originals if source.get_node().get_friendly_name().startswith(n)), None)
        if name is None:
            continue
        folded = ov.Model([ov.opset13.result(source)], [], "w")
        values = np.asarray(core.compile_model(folded, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})({})[0])
        w = originals[name].astype(np.float64)
        error += float(((values.reshape(w.shape) - w) ** 2).sum())
        total += float((w**2).sum())
    return error / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=40)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--out", type=Path, default=Path("results/composition_smollm2_g64.json"))
    args = parser.parse_args()
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    if unknown := [r for r in rows if r not in ROWS]:
        parser.error(f"unknown rows {unknown}; known: {', '.join(ROWS)}")

    ir_dir = smollm2_ov_dir()
    tokenizer = load_tokenizer(ir_dir)
    dataset = nncf.Dataset(calibration_samples(tokenizer, shared_path(SHAKESPEARE)))
    reference = ov.Core().read_model(ir_xml(ir_dir))
    models, seconds, errors, failures = {}, {}, {}, {}
    for row in rows:
        options = dict(ROWS[row])
        data = {"dataset": dataset} if options.pop("data", False) else {}
        start = time.perf_counter()
        try:
            models[row] = nncf.compress_weights(
                ov.Core().read_model(ir_xml(ir_dir)),
                mode=nncf.CompressWeightsMode.INT4_ASYM,
                group_size=64,
                ratio=1.0,
                backup_mode=nncf.BackupMode.NONE,
                **data,
                **options,
            )
        except (nncf.ValidationError, nncf.ParameterNotSupportedError) as error:
            failures[row] = f"{type(error).__name__}: {error}"
            continue
        seconds[row] = time.perf_counter() - start
        errors[row] = weight_relative_error(reference, models[row])
    results = evaluate_llms(ir_dir, models, wikitext_windows(tokenizer, shared_path(WIKITEXT), args.windows))
    print(f"{'row':<22}{'ppl':>9}{'KL':>9}{'top1':>9}{'weight err':>12}{'compress s':>12}")
    for name, m in results.items():
        print(
            f"{name:<22}{m['ppl']:>9.3f}{m['kl']:>9.4f}{m['top1']:>9.4f}{errors.get(name, 0.0):>12.5f}"
            f"{seconds.get(name, 0.0):>12.1f}"
        )
    for name, reason in failures.items():
        print(f"{name:<22} not run: {reason}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "windows": args.windows,
        "results": results,
        "weight_relative_error": errors,
        "compress_seconds": seconds,
        "not_run": failures,
        "versions": versions(),
    }
    args.out.write_text(json.dumps(record, indent=2))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
