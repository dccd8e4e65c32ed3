"""Is a zero mean error per group what makes the float zero point better? (issues 3 and 5, SmolLM2 g64)

HQQ's zero-point update, and the least-squares refinement after it, leave every group's reconstruction error
with mean zero; NNCF's RTN (integer zero point) and every scale-only variant do not. This script separates that
property from the rest of HQQ:

- ``rtn``: NNCF's RTN parameters (u4 zero point), nearest codes;
- ``rtn_float_shift``: the same codes and scale, the zero point shifted by the group's mean error (a float zero
  point that only removes the group's bias);
- ``rtn_unbiased``: RTN's integer parameters, the rounding of the elements nearest to a rounding boundary flipped
  until the group's summed error is within half a step of zero (integer zero point, changed codes only);
- ``hqq_int_unbiased``: ``hqq=True`` with ``zero_point_format="integer"``, then the same flips;
- ``sym_rtn`` / ``sym_rtn_unbiased``: NNCF's INT4_SYM scale, nearest codes / the same flips.

Value projections keep RTN in every row except the symmetric ones (symmetric RTN there), as ``hqq=True`` does.
Every variant is stored dequantized per weight and the FP IR is evaluated with those weights substituted (the
method of ``benchmarks/layer_ablation.py``; shared/PROTOCOL.md metrics, same windows as ``benchmarks/quality.py``).

    python benchmarks/zero_mean_error.py --windows 40      # -> results/zero_mean_error_smollm2_w40.json
    python benchmarks/zero_mean_error.py --model qwen --windows 20 --rows rtn,rtn_float_shift
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import openvino as ov
from nncf import CompressWeightsMode
from nncf.tensor import Tensor

sys.path.insert(0, str(Path(__file__).parent))
from layer_ablation import decoder_weights
from layer_ablation import evaluate_variants

from nncf_hqq._nncf_glue import WeightCompressionConfig
from nncf_hqq._nncf_glue import layer_context
from nncf_hqq.algorithm import HQQ
from nncf_hqq.evaluation import load_tokenizer
from nncf_hqq.evaluation import wikitext_windows
from nncf_hqq.models import cache_dir
from nncf_hqq.models import ir_xml
from nncf_hqq.models import qwen_ov_dir
from nncf_hqq.models import shared_path
from nncf_hqq.models import smollm2_ov_dir
from nncf_hqq.parameters import HQQ_DEFAULT
from nncf_hqq.solver import levels_max
from nncf_hqq.solver import rtn_scale_zero_point
from nncf_hqq.solver import signed_levels
from nncf_hqq.solver import split_into_groups
from nncf_hqq.solver import symmetric_init

WIKITEXT = "data/wikitext-2-raw/wiki.test.raw"
BITS = 4
#: model -> (exported IR dir, group size), as in ``benchmarks/quality.py``
LLMS: dict[str, tuple[Callable[[], Path], int]] = {"smollm2": (smollm2_ov_dir, 64), "qwen": (qwen_ov_dir, 128)}
#: Group size of the model being run (set by ``main``).
GROUP_SIZE = 64


def unbiased_codes(target: np.ndarray, codes: np.ndarray, low: float, high: float) -> np.ndarray:
    """Codes whose group sums of ``target - codes`` lie within half a step of zero: the rounding of the elements
    nearest to a boundary (in the direction of the group's bias) flipped, as few as needed, codes kept in range.

    :param target: the unrounded code values ``[groups, R]``; ``codes`` their nearest (clipped) codes.
    """
    residual = target - codes
    total = residual.sum(axis=-1, keepdims=True)
    step = np.sign(total)  # +1: the group is biased low, flip codes up; -1: down
    count = np.floor(np.abs(total) + 0.5)
    flipped = codes + step
    eligible = (flipped >= low) & (flipped <= high)
    score = np.where(eligible, residual * step, -np.inf)  # closest to the boundary first
    rank = np.argsort(np.argsort(-score, axis=-1, kind="stable"), axis=-1, kind="stable")
    return np.where((rank < count) & eligible, flipped, codes)


def rtn_asym(grouped: np.ndarray, unbiased: bool, float_shift: bool) -> np.ndarray:
    scale, zero_point = (t.data for t in rtn_scale_zero_point(Tensor(grouped), -1, BITS))
    target = grouped / scale + zero_point
    codes = np.clip(np.round(target), 0.0, levels_max(BITS))
    if unbiased:
        codes = unbiased_codes(target, codes, 0.0, levels_max(BITS))
    if float_shift:
        zero_point = zero_point + (codes - target).mean(axis=-1, keepdims=True)
    return (codes - zero_point) * scale


def hqq_integer_unbiased(weight: np.ndarray, constant: ov.Node) -> np.ndarray:
    params = dataclasses.replace(HQQ_DEFAULT, zero_point_format="integer")
    hqq = HQQ(params)
    importance, role = layer_context(hqq, constant, weight.shape[1])
    config = WeightCompressionConfig(mode=CompressWeightsMode.INT4_ASYM, group_size=GROUP_SIZE)
    compressed = hqq.compress(Tensor(weight), 1, config, importance, role)
    scale = compressed.scale.data.astype(np.float32)
    zero_point = compressed.zero_point.data.astype(np.float32)
    grouped = weight.reshape(scale.shape[0], scale.shape[1], GROUP_SIZE)
    target = grouped / scale + zero_point
    codes = unbiased_codes(target, compressed.tensor.data.astype(np.float32), 0.0, levels_max(BITS))
    return (codes - zero_point) * scale


def sym_rtn(grouped: np.ndarray, unbiased: bool) -> np.ndarray:
    scale = symmetric_init(Tensor(grouped), -1, BITS).data
    low, high = signed_levels(BITS)
    target = grouped / scale
    codes = np.clip(np.round(target), low, high)
    if unbiased:
        codes = unbiased_codes(target, codes, low, high)
    return codes * scale


VARIANTS: dict[str, Callable[[np.ndarray, ov.Node, bool], np.ndarray]] = {
    "rtn": lambda g, c, v: rtn_asym(g, False, False),
    "rtn_float_shift": lambda g, c, v: rtn_asym(g, False, not v),
    "rtn_unbiased": lambda g, c, v: rtn_asym(g, not v, False),
    "hqq_int_unbiased": lambda g, c, v: rtn_asym(g, False, False) if v else np.empty(0),
    "sym_rtn": lambda g, c, v: sym_rtn(g, False),
    "sym_rtn_unbiased": lambda g, c, v: sym_rtn(g, not v),
}


def compute_candidates(ir_dir: Path, root: Path, names: list[str]) -> None:
    model = ov.Core().read_model(ir_xml(ir_dir))
    hqq = HQQ(HQQ_DEFAULT)
    for index, (constant, _) in enumerate(decoder_weights(model)):
        weight = np.array(constant.get_data(), dtype=np.float32)
        grouped = split_into_groups(Tensor(weight), 1, GROUP_SIZE)[0].data
        value = hqq.keeps_rtn(layer_context(hqq, constant, weight.shape[1])[1])
        for name in names:
            make = VARIANTS[name]
            path = root / name / f"{index}.npy"
            if path.exists():
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if name == "hqq_int_unbiased" and not value:
                values = hqq_integer_unbiased(weight, constant)
            else:
                values = make(grouped, constant, value)
            np.save(path, values.reshape(weight.shape).astype(np.float16))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(LLMS), default="smollm2")
    parser.add_argument("--windows", type=int, default=40)
    parser.add_argument("--rows", default=",".join(VARIANTS), help="comma-separated: " + ",".join(VARIANTS))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    global GROUP_SIZE
    get_dir, GROUP_SIZE = LLMS[args.model]
    ir_dir = get_dir()
    rows = args.rows.split(",")
    root = cache_dir() / "zero_mean_error" / f"{args.model}_g{GROUP_SIZE}"
    compute_candidates(ir_dir, root, rows)
    windows = wikitext_windows(load_tokenizer(ir_dir), shared_path(WIKITEXT), args.windows)
    results = evaluate_variants(ir_dir, root, list(rows), windows)
    out = args.out or Path(f"results/zero_mean_error_{args.model}_w{args.windows}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {"model": args.model, "windows": args.windows, "group_size": GROUP_SIZE, "results": results}
    out.write_text(json.dumps(summary, indent=2))
    print(f"-> {out}")


if __name__ == "__main__":
    main()
