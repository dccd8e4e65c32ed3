"""Which layers does an HQQ variant help or hurt? Per-layer ablation on a real LLM with substituted weights.

For every decoder MatMul weight, each candidate (``rtn`` = NNCF's RTN formula, or any row of
``benchmarks/quality.py``) is computed once with ``nncf_hqq``'s own ``HQQ.compress`` (importance and attention
role read from the graph exactly as ``compress_weights`` does) and stored dequantized (f16 ``.npy`` files in a
cache dir). A row picks a candidate per weight by projection name and the FP IR is evaluated with those weights
substituted, with the PROTOCOL metrics (fp32, no activation quantization). The dequantized weights are what the
compressed model computes with, up to their f16 storage here: on the Qwen model (3 windows) the ``rtn`` hybrid
gives KL 0.0819 against 0.0823 for NNCF's compressed model, the ``default`` hybrid 0.1012 against 0.1014.

Row syntax: ``CAND`` (every weight), ``CAND@PROJ+PROJ`` (those projections, ``rtn`` elsewhere) or
``CAND@PROJ+PROJ/OTHER`` (``OTHER`` elsewhere). Projections are the names in the IR (``q_proj``, ``gate_proj``...).

    python benchmarks/layer_ablation.py --model qwen --windows 3 \\
        --rows rtn,default,default@gate_proj+up_proj,default@down_proj
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
from nncf import CompressWeightsMode
from nncf.tensor import Tensor

sys.path.insert(0, str(Path(__file__).parent))
from _sequential import evaluate_against
from _sequential import reference_log_probs
from quality import MODELS
from quality import ROW_OPTIONS
from quality import ROWS
from quality import WIKITEXT

from nncf_hqq._nncf_glue import WeightCompressionConfig
from nncf_hqq._nncf_glue import layer_context
from nncf_hqq.algorithm import HQQ
from nncf_hqq.conversion import decompress
from nncf_hqq.conversion import to_compressed_weight
from nncf_hqq.evaluation import load_tokenizer
from nncf_hqq.evaluation import wikitext_windows
from nncf_hqq.models import cache_dir
from nncf_hqq.models import ir_xml
from nncf_hqq.models import shared_path
from nncf_hqq.solver import rtn_scale_zero_point
from nncf_hqq.solver import split_into_groups

LAYER_NAME = re.compile(r"layers\.(\d+)\.\w+\.(\w+)")


def decoder_weights(model: ov.Model) -> Iterator[tuple[ov.Node, str]]:
    """The decoder MatMul weight constants (not embeddings, not the lm_head) and their projection names."""
    for op in model.get_ordered_ops():
        if op.get_type_name() != "MatMul" or "lm_head" in op.get_friendly_name():
            continue
        source = op.input_value(1).get_node()
        while source.get_type_name() == "Convert":
            source = source.input_value(0).get_node()
        match = LAYER_NAME.search(op.get_friendly_name())
        if source.get_type_name() == "Constant" and len(source.get_output_partial_shape(0)) == 2 and match:
            yield source, match.group(2)


def compute_candidates(ir_dir: Path, root: Path, names: list[str], group_size: int) -> None:
    """Stores every weight's dequantized candidate ``root/NAME/INDEX.npy`` (f16) unless already there."""
    model = ov.Core().read_model(ir_xml(ir_dir))
    config = WeightCompressionConfig(mode=CompressWeightsMode.INT4_ASYM, group_size=group_size)
    for index, (constant, _) in enumerate(decoder_weights(model)):
        weight = np.array(constant.get_data(), dtype=np.float32)
        for name in names:
            path = root / name / f"{index}.npy"
            if path.exists():
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if name == "rtn":
                grouped, axis = split_into_groups(Tensor(weight), 1, group_size)
                compressed = to_compressed_weight(grouped, *rtn_scale_zero_point(grouped, axis, 4), 4, True)
            else:
                hqq = HQQ(ROWS[name])  # type: ignore[arg-type]
                importance, role = layer_context(hqq, constant, weight.shape[1])
                compressed = hqq.compress(Tensor(weight), 1, config, importance, role)
            np.save(path, decompress(compressed).data.reshape(weight.shape).astype(np.float16))


def parse_row(row: str) -> tuple[str, set[str] | None, str]:
    """``CAND[@PROJ+PROJ[/OTHER]]`` to (candidate, projections or None for all, candidate elsewhere)."""
    candidate, _, rest = row.partition("@")
    if not rest:
        return candidate, None, candidate
    projections, _, other = rest.partition("/")
    return candidate, set(projections.split("+")), other or "rtn"


def hybrid(ir_dir: Path, root: Path, row: str) -> ov.Model:
    """The FP model with every decoder weight replaced by the candidate the row picks for it."""
    candidate, projections, other = parse_row(row)
    model = ov.Core().read_model(ir_xml(ir_dir))
    for index, (constant, projection) in enumerate(decoder_weights(model)):
        name = candidate if projections is None or projection in projections else other
        values = np.load(root / name / f"{index}.npy").astype(np.float32)
        replacement = ov.op.Constant(values)
        for target in list(constant.output(0).get_target_inputs()):
            target.replace_source_output(replacement.output(0))
    return model


def evaluate_variants(ir_dir: Path, root: Path, names: list[str], windows: list[np.ndarray]) -> dict[str, Any]:
    """Every whole-model candidate ``root/NAME`` substituted into the FP IR and evaluated against the FP model's
    cached log-probs; prints a table as it goes and returns the metrics by name."""
    reference = reference_log_probs(ir_dir, root, windows)
    results = {}
    print(f"{'variant':<20}{'ppl':>10}{'kl':>10}{'top1':>10}")
    for name in names:
        results[name] = evaluate_against(hybrid(ir_dir, root, name), windows, reference)
        print(f"{name:<20}" + "".join(f"{results[name][k]:>10.4f}" for k in ("ppl", "kl", "top1")), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["smollm2", "qwen"], default="qwen")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--rows", required=True, help="comma-separated rows (see the module doc)")
    parser.add_argument("--cache", type=Path, default=None, help="candidate cache (default: under ~/.cache)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    get_dir, group_size = MODELS[args.model]
    ir_dir = get_dir()
    root = args.cache or cache_dir() / "layer_ablation" / f"{args.model}_g{group_size}"
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    names = sorted({n for r in rows for n in (parse_row(r)[0], parse_row(r)[2])})
    unknown = [n for n in names if n != "rtn" and (ROWS.get(n) is None or n in ROW_OPTIONS)]
    if unknown:
        parser.error(f"unknown candidates {unknown} (use rtn or the HQQ-only rows of benchmarks/quality.py)")
    compute_candidates(ir_dir, root, names, group_size)
    windows = wikitext_windows(load_tokenizer(ir_dir), shared_path(WIKITEXT), args.windows)
    reference = reference_log_probs(ir_dir, root, windows)
    out = args.out or Path(f"results/layer_ablation_{args.model}_w{args.windows}.json")
    results: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    print(f"{'row':<40}{'ppl':>10}{'kl':>10}{'top1':>10}")
    for row in rows:
        start = time.perf_counter()
        results[row] = {
            **evaluate_against(hybrid(ir_dir, root, row), windows, reference),
            "seconds": time.perf_counter() - start,
        }
        print(f"{row:<40}" + "".join(f"{results[row][k]:>10.4f}" for k in ("ppl", "kl", "top1")), flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2))
    print(f"-> {out}")


if __name__ == "__main__":
    main()
