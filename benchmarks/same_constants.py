"""Do two rows of ``benchmarks/quality.py`` compress a model to the same constants? (no evaluation)

Compresses the model once per row (each row's own parameters and options) and compares every constant of the two
compressed IRs: codes, scales, zero points. Prints, per differing weight, how many of its groups differ, and a
summary line; writes JSON. Used to check that a parameter change leaves the models' own results as they were.

    python benchmarks/same_constants.py --model smollm2 --rows default,default_shrink
    python benchmarks/same_constants.py --model qwen --rows default,default_shrink
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
from quality import MODELS
from quality import ROW_OPTIONS
from quality import ROWS
from quality import compress


def constants(model: ov.Model) -> dict[str, np.ndarray]:
    """Every named constant of a model (codes, scales, zero points, ...) by friendly name; OpenVINO's automatic
    ``Constant_<n>`` names (shapes, axes) differ between two compressions and are left out."""
    return {
        op.get_friendly_name(): op.get_data().copy()
        for op in model.get_ops()
        if op.get_type_name() == "Constant" and not re.fullmatch(r"Constant_\d+", op.get_friendly_name())
    }


def compare(first: dict[str, np.ndarray], second: dict[str, np.ndarray]) -> dict[str, dict[str, int]]:
    """Per differing constant: its element count and the number of elements that differ."""
    if first.keys() != second.keys():
        msg = f"the two models have different constants: {sorted(first.keys() ^ second.keys())[:5]}"
        raise ValueError(msg)
    differing = {}
    for name, a in first.items():
        b = second[name]
        if a.shape != b.shape:
            differing[name] = {"elements": int(a.size), "differing": int(a.size)}
        elif not np.array_equal(a, b, equal_nan=True):
            differing[name] = {"elements": int(a.size), "differing": int(np.count_nonzero(a != b))}
    return differing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    parser.add_argument("--group-size", type=int, default=None, help="default: the model's protocol group size")
    parser.add_argument("--rows", default="default,default_shrink", help="two rows of benchmarks/quality.py")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = args.rows.split(",")
    if len(rows) != 2 or any(r not in ROWS for r in rows):
        parser.error(f"--rows needs two rows of benchmarks/quality.py, got {args.rows!r}")
    ir_dir_of, protocol_group_size = MODELS[args.model]
    group_size = args.group_size or protocol_group_size
    compressed = [constants(compress(ir_dir_of(), group_size, ROWS[r], ROW_OPTIONS.get(r))[0]) for r in rows]
    differing = compare(*compressed)
    scales = {name: d for name, d in differing.items() if name.endswith("/scale")}
    groups = sum(c.size for name, c in compressed[0].items() if name.endswith("/scale"))
    for name, d in sorted(differing.items()):
        print(f"{name:70s} {d['differing']:>10d} of {d['elements']}")
    changed_groups = sum(d["differing"] for d in scales.values())
    print(
        f"{args.model} g{group_size} {rows[0]} vs {rows[1]}: {len(differing)} of {len(compressed[0])} constants "
        f"differ; scales of {changed_groups} of {groups} groups"
    )
    result: dict[str, Any] = {
        "model": args.model,
        "group_size": group_size,
        "rows": rows,
        "constants": len(compressed[0]),
        "groups": int(groups),
        "differing_scale_groups": int(changed_groups),
        "differing": differing,
    }
    out = args.out or Path("results") / f"same_constants_{args.model}_{rows[0]}_{rows[1]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"-> {out}")


if __name__ == "__main__":
    main()
