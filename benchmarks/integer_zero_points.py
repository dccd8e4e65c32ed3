"""Integer (u4) zero points optimised harder: do they get closer to the float zero point? (issue 5, SmolLM2)

The shipped integer-zero-point HQQ rounds the solver's zero point and re-fits the scale under that constraint
(``zero_point_format="integer"``). This script tries more: per group, the zero points ``round(z) - 1``,
``round(z)`` and ``round(z) + 1`` (each with the scale re-fitted by the same least-squares rounds), with or
without keeping the group's extremes unclipped, and keeps per group whichever of them and RTN has the lowest
norm-gain weighted error. Value projections keep RTN, as in ``hqq=True``.

Every variant is stored dequantized per weight (f16 ``.npy``, the layout of ``benchmarks/layer_ablation.py``) and
the FP IR is evaluated with those weights substituted (shared/PROTOCOL.md metrics, same windows as
``benchmarks/quality.py``).

    python benchmarks/integer_zero_points.py --windows 40      # -> results/integer_zero_points_smollm2_w40.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import openvino as ov
from nncf.tensor import Tensor
from nncf.tensor import functions as fns

sys.path.insert(0, str(Path(__file__).parent))
from layer_ablation import decoder_weights
from layer_ablation import evaluate_variants

from nncf_hqq import fast_path
from nncf_hqq._nncf_glue import CompressedWeight
from nncf_hqq._nncf_glue import layer_context
from nncf_hqq.algorithm import HQQ
from nncf_hqq.algorithm import importance_along_groups
from nncf_hqq.conversion import choose_per_group
from nncf_hqq.conversion import decompress
from nncf_hqq.conversion import hqq_to_nncf
from nncf_hqq.conversion import stored_group_error
from nncf_hqq.conversion import to_compressed_weight
from nncf_hqq.evaluation import load_tokenizer
from nncf_hqq.evaluation import wikitext_windows
from nncf_hqq.models import cache_dir
from nncf_hqq.models import ir_xml
from nncf_hqq.models import shared_path
from nncf_hqq.models import smollm2_ov_dir
from nncf_hqq.parameters import HQQ_DEFAULT
from nncf_hqq.solver import levels_max
from nncf_hqq.solver import refine_least_squares
from nncf_hqq.solver import rtn_scale_zero_point
from nncf_hqq.solver import split_into_groups

WIKITEXT = "data/wikitext-2-raw/wiki.test.raw"
GROUP_SIZE = 64
BITS = 4
#: variant -> (zero-point shifts tried around round(z), keep the extremes unclipped)
VARIANTS: dict[str, tuple[tuple[int, ...], bool]] = {
    "int_search": ((-1, 0, 1), True),
    "int_search_clip": ((-1, 0, 1), False),
    "int_round_clip": ((0,), False),
}


def integer_search(weight: np.ndarray, constant: ov.Node, shifts: tuple[int, ...], extremes: bool) -> CompressedWeight:
    """Per group, the lowest-error integer zero point among the shifted candidates (scale re-fitted) and RTN."""
    grouped, axis = split_into_groups(Tensor(weight), 1, GROUP_SIZE)
    rtn = to_compressed_weight(grouped, *rtn_scale_zero_point(grouped, axis, BITS), BITS, True)
    hqq = HQQ(HQQ_DEFAULT)
    importance, role = layer_context(hqq, constant, weight.shape[1])
    if hqq.keeps_rtn(role):
        return rtn
    weights = None
    if importance is not None:
        weights = importance_along_groups(importance, weight.shape, 1, GROUP_SIZE)
    inverse_scale, zero = fast_path.solve(grouped, axis, BITS, HQQ_DEFAULT)
    best, best_error = rtn, stored_group_error(grouped, rtn, axis, weights)
    for shift in shifts:
        start = fns.clip(fns.round(zero) + float(shift), 0.0, levels_max(BITS))
        refined = refine_least_squares(
            grouped, inverse_scale, start, axis, BITS, HQQ_DEFAULT.refine_rounds, weights, True, extremes
        )
        candidate = to_compressed_weight(grouped, *hqq_to_nncf(*refined), BITS, True)
        error = stored_group_error(grouped, candidate, axis, weights)
        better = error < best_error
        best = choose_per_group(better, candidate, best)
        best_error = fns.where(better, error, best_error)
    return best


def compute_candidates(ir_dir: Path, root: Path) -> None:
    model = ov.Core().read_model(ir_xml(ir_dir))
    for index, (constant, _) in enumerate(decoder_weights(model)):
        weight = np.array(constant.get_data(), dtype=np.float32)
        for name, (shifts, extremes) in VARIANTS.items():
            path = root / name / f"{index}.npy"
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                compressed = integer_search(weight, constant, shifts, extremes)
                np.save(path, decompress(compressed).data.reshape(weight.shape).astype(np.float16))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=40)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    ir_dir = smollm2_ov_dir()
    root = cache_dir() / "integer_zero_points" / f"smollm2_g{GROUP_SIZE}"
    compute_candidates(ir_dir, root)
    windows = wikitext_windows(load_tokenizer(ir_dir), shared_path(WIKITEXT), args.windows)
    results = evaluate_variants(ir_dir, root, list(VARIANTS), windows)
    out = args.out or Path(f"results/integer_zero_points_smollm2_w{args.windows}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"windows": args.windows, "group_size": GROUP_SIZE, "results": results}, indent=2))
    print(f"-> {out}")


if __name__ == "__main__":
    main()
