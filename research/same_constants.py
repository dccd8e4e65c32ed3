"""Does this checkout compress a real model to the same constants as another git revision? (no evaluation)

Each case is compressed twice: by the code of ``--against`` (a temporary git worktree, in a child process) and by
this checkout (another child process). Every named constant of the two IRs is compared: codes, scales, zero points.
Prints, per case, the constants that differ and how many elements; writes JSON. Use it when a change must leave the
results as they were (a refactoring, a faster kernel).

    python research/same_constants.py --against 5f6e27d --model smollm2
    python research/same_constants.py --against main --model qwen --cases default,awq_se

The cases are spelled with names both revisions know (``HQQ_DEFAULT``, ``HQQ_REFERENCE``, ``dataclasses.replace``),
so that parameter-resolution changes between the revisions do not matter. Data-aware cases use random token
windows (seed 0) as calibration data: only the equality of the two results matters here.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

ROOT = Path(__file__).resolve().parents[1]

#: Case name -> (mode, parameters expression, extra compress_weights keywords as source, data-aware).
CASES: dict[str, tuple[str, str, str, bool]] = {
    "default": ("INT4_ASYM", "HQQ_DEFAULT", "", False),
    "reference": ("INT4_ASYM", "HQQ_REFERENCE", "", False),
    "integer_zp": ("INT4_ASYM", "dataclasses.replace(HQQ_DEFAULT, zero_point_format='integer')", "", False),
    "int4_sym": ("INT4_SYM", "HQQ_DEFAULT", "", False),
    "int8_asym": ("INT8_ASYM", "HQQ_DEFAULT", "", False),
    "awq_data_free": ("INT4_ASYM", "HQQ_DEFAULT", "awq=True,", False),
    "awq_se": ("INT4_ASYM", "HQQ_DEFAULT", "awq=True, scale_estimation=True, subset_size=8,", True),
}

#: The child: compresses one case with whatever ``nncf_hqq`` is first on its path and saves the IR.
CHILD = """
import dataclasses, sys
import numpy as np, openvino as ov, nncf
import nncf_hqq
from nncf_hqq import HQQ_DEFAULT, HQQ_REFERENCE
xml, out, mode, group_size, params, extra, data_aware = sys.argv[1:8]
model = ov.Core().read_model(xml)
dataset = None
if data_aware == "1":
    rng = np.random.default_rng(0)
    vocab = model.output("logits").get_partial_shape()[-1].get_length()
    def sample(ids):
        n = ids.shape[1]
        return {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(n)[None],
                "beam_idx": np.zeros(1, dtype=np.int32)}
    dataset = nncf.Dataset([sample(rng.integers(0, vocab, size=(1, 64))) for _ in range(8)])
mode = getattr(nncf.CompressWeightsMode, mode)
int8 = mode in (nncf.CompressWeightsMode.INT8_ASYM, nncf.CompressWeightsMode.INT8_SYM)
plan = "" if int8 else "group_size=" + group_size + ", ratio=1.0, backup_mode=nncf.BackupMode.NONE, "
compressed = eval(
    "nncf.compress_weights(model, mode=mode, " + plan + "dataset=dataset, hqq=True, hqq_params=" + params + ", "
    + extra + ")"
)
print("compressed by", nncf_hqq.__file__, file=sys.stderr)
ov.save_model(compressed, out, compress_to_fp16=False)
"""


def constants(model: ov.Model) -> dict[str, np.ndarray]:
    """Every named constant of a model (codes, scales, zero points, ...) by friendly name; OpenVINO's automatic
    ``Constant_<n>`` names (shapes, axes) differ between two compressions and are left out."""
    return {
        op.get_friendly_name(): op.get_data().copy()
        for op in model.get_ops()
        if op.get_type_name() == "Constant" and not re.fullmatch(r"Constant_\d+", op.get_friendly_name())
    }


def compare(first: dict[str, np.ndarray], second: dict[str, np.ndarray]) -> dict[str, dict[str, int]]:
    """Per differing constant: its element count and the number of elements that differ (names only in one
    model count as wholly different)."""
    differing = {}
    for name in sorted(first.keys() | second.keys()):
        a, b = first.get(name), second.get(name)
        if a is None or b is None or a.shape != b.shape:
            size = int((a if a is not None else b).size)  # type: ignore[union-attr]
            differing[name] = {"elements": size, "differing": size}
        elif not np.array_equal(a, b, equal_nan=True):
            differing[name] = {"elements": int(a.size), "differing": int(np.count_nonzero(a != b))}
    return differing


def compress_in_child(code_root: Path, xml: Path, out: Path, group_size: int, case: str) -> ov.Model:
    mode, params, extra, data_aware = CASES[case]
    env = {**os.environ, "PYTHONPATH": str(code_root)}
    arguments = [str(xml), str(out), mode, str(group_size), params, extra, "1" if data_aware else "0"]
    subprocess.run([sys.executable, "-c", CHILD, *arguments], check=True, env=env, cwd=code_root)
    return ov.Core().read_model(out)


def model_xml(name: str) -> tuple[Path, int]:
    sys.path.insert(0, str(ROOT))
    from nncf_hqq.llm.layout import ir_xml
    from nncf_hqq.llm.zoo import qwen_ov_dir
    from nncf_hqq.llm.zoo import smollm2_ov_dir

    return (ir_xml(smollm2_ov_dir()), 64) if name == "smollm2" else (ir_xml(qwen_ov_dir()), 128)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", required=True, help="the git revision to compare with")
    parser.add_argument("--model", choices=("smollm2", "qwen"), default="smollm2")
    parser.add_argument("--group-size", type=int, default=None, help="default: the model's protocol group size")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    cases = args.cases.split(",")
    if unknown := [c for c in cases if c not in CASES]:
        parser.error(f"unknown cases {unknown}")
    xml, protocol_group_size = model_xml(args.model)
    group_size = args.group_size or protocol_group_size
    result: dict[str, Any] = {"model": args.model, "group_size": group_size, "against": args.against, "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "other"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(other), args.against], check=True)
        try:
            for case in cases:
                theirs = constants(compress_in_child(other, xml, Path(tmp) / f"{case}_theirs.xml", group_size, case))
                ours = constants(compress_in_child(ROOT, xml, Path(tmp) / f"{case}_ours.xml", group_size, case))
                differing = compare(theirs, ours)
                for name, d in differing.items():
                    print(f"  {case}: {name:70s} {d['differing']:>10d} of {d['elements']}")
                print(f"{case}: {len(differing)} of {len(ours)} constants differ", flush=True)
                result["cases"][case] = {"constants": len(ours), "differing": differing}
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)], check=True)
    out = args.out or ROOT / "results" / f"same_constants_{args.model}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"-> {out}")


if __name__ == "__main__":
    main()
