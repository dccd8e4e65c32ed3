"""Total compression time of self-calibration (the model's text generation included) against NNCF's AWQ + Scale
Estimation on a 128-sample text dataset, side by side in one run.

    python benchmarks/self_calibration_speed.py --model smollm2
    python benchmarks/self_calibration_speed.py --model qwen --group-size 128

Rows (INT4_ASYM, ratio 1, backup_mode NONE as in shared/PROTOCOL.md; nothing cached between rows: every row
collects its own activation statistics, the self-calibrated rows generate their own text):
- ``nncf_awq_se_text128``: NNCF's AWQ + Scale Estimation on 128 random 256-token windows of Tiny Shakespeare
  (the reference of the target: self-calibration should take no longer);
- ``self_awq_se``: NNCF's AWQ + Scale Estimation on ``dataset="self"`` (generation included);
- ``self_se_hqq``: Scale Estimation + HQQ on ``dataset="self"``;
- ``self_awq_se_hqq``: AWQ + Scale Estimation + HQQ on ``dataset="self"``;
- ``self_awq_se_hqq_tok32``: the same with ``hqq_params=nncf_hqq.HQQ_TOKEN_ROWS`` (HQQ fits 32 token rows per sample);
- ``self_awq_se_hqq_checked``: what ``nncf-hqq compress`` does by default: that, plus the output check (held-out
  generation, the data-free HQQ and RTN compressions, and the comparison of the three on the held-out text).
Prints a table and writes JSON with the generation time measured apart and the ratios to the reference.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nncf
import openvino as ov

import nncf_hqq
from nncf_hqq.llm import compress
from nncf_hqq.llm.layout import ir_xml
from nncf_hqq.llm.records import versions
from nncf_hqq.llm.sanity import generation_bos_token_id
from nncf_hqq.llm.texts import calibration_samples
from nncf_hqq.llm.texts import load_tokenizer
from nncf_hqq.llm.zoo import qwen_ov_dir
from nncf_hqq.llm.zoo import shared_path
from nncf_hqq.llm.zoo import smollm2_ov_dir
from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT
from nncf_hqq.self_calibration import generate_sequences

SHAKESPEARE = "data/tinyshakespeare/input.txt"
MODELS: dict[str, tuple[Callable[[], Path], int]] = {"smollm2": (smollm2_ov_dir, 64), "qwen": (qwen_ov_dir, 128)}
ROWS = (
    "nncf_awq_se_text128",
    "self_awq_se",
    "self_se_hqq",
    "self_awq_se_hqq",
    "self_awq_se_hqq_tok32",
    "self_awq_se_hqq_checked",
)


def compress_seconds(ir_dir: Path, group_size: int, row: str) -> float:
    """Seconds of one ``compress_weights`` call of ``row`` on a freshly read model (text dataset built first)."""
    model = ov.Core().read_model(ir_xml(ir_dir))
    bos = generation_bos_token_id(ir_dir)
    if row == "nncf_awq_se_text128":
        dataset: Any = nncf.Dataset(calibration_samples(load_tokenizer(ir_dir), shared_path(SHAKESPEARE), 128))
    else:
        dataset = SELF_CALIBRATION_DEFAULT.replace(start_token_ids=(bos,) if bos is not None else None)
    if row == "self_awq_se_hqq_checked":
        return checked_seconds(ir_dir, group_size)
    start = time.perf_counter()
    nncf.compress_weights(
        model,
        mode=nncf.CompressWeightsMode.INT4_ASYM,
        group_size=group_size,
        ratio=1.0,
        backup_mode=nncf.BackupMode.NONE,
        awq="_awq" in row,
        scale_estimation=True,
        dataset=dataset,
        hqq="_hqq" in row,
        hqq_params=nncf_hqq.HQQ_TOKEN_ROWS if row.endswith("_tok32") else None,
    )
    return time.perf_counter() - start


def checked_seconds(ir_dir: Path, group_size: int) -> float:
    """Seconds of the compress job's self-calibrated compression with its output check (after reading the model,
    before saving it: ``CompressionResult.compress_seconds``)."""
    with tempfile.TemporaryDirectory() as tmp:
        result = compress(ir_dir, Path(tmp) / "out", group_size=group_size, ratio=1.0, backup_mode="none", log=print)
    return result.compress_seconds


def generation_seconds(ir_dir: Path) -> float:
    bos = generation_bos_token_id(ir_dir)
    params = SELF_CALIBRATION_DEFAULT.replace(start_token_ids=(bos,) if bos is not None else None)
    start = time.perf_counter()
    generate_sequences(ov.Core().read_model(ir_xml(ir_dir)), params)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    parser.add_argument("--group-size", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated rows: " + ",".join(ROWS))
    args = parser.parse_args()
    get_dir, default_group = MODELS[args.model]
    group_size = args.group_size or default_group
    ir_dir = get_dir()
    rows = args.rows.split(",")
    unknown = sorted(set(rows) - set(ROWS))
    if unknown or ROWS[0] not in rows:
        parser.error(f"--rows must name the reference {ROWS[0]} and rows among {', '.join(ROWS)}; got {args.rows}")
    seconds = {row: compress_seconds(ir_dir, group_size, row) for row in rows}
    seconds["generation_alone"] = generation_seconds(ir_dir)
    reference = seconds["nncf_awq_se_text128"]
    print(f"{'row':<24}{'seconds':>10}{'vs NNCF AWQ+SE (128 text samples)':>36}")
    for row, value in seconds.items():
        print(f"{row:<24}{value:>10.1f}{value / reference:>35.2f}x")
    out = args.out or Path(f"results/self_calibration_speed_{args.model}_g{group_size}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "model": args.model,
        "group_size": group_size,
        "self_calibration": {k: str(v) for k, v in vars(SELF_CALIBRATION_DEFAULT).items()},
        "seconds": seconds,
        "ratio_to_nncf_awq_se_text128": {row: value / reference for row, value in seconds.items()},
        "versions": versions(),
    }
    out.write_text(json.dumps(record, indent=2))
    print(f"-> {out}")


if __name__ == "__main__":
    main()
