"""PROTOCOL accuracy of HQQ with float zero points on some projections and HQQ's integer zero points on the others.

The question behind it (issue 46): on a VNNI CPU without AMX the split zero point costs per node, so a format that
splits only the MLP (gate, up, down) and gives the attention projections integer zero points is faster; how much of
HQQ's gain does it keep? The model is compressed twice with ``nncf.compress_weights(..., hqq=True)``: with
``HQQ_DEFAULT`` (float zero points) and with ``zero_point_format="integer"``. The mixed model is the float one whose
attention projections (q, k, o; the value projections keep RTN in both) take the integer one's codes, scales and
zero points, wired into its decompression subgraphs. RTN, both compressions and the mixed model are evaluated on the
same windows against the float model's cached log-probabilities (``benchmarks/quality.py --sequential``).

    python research/mixed_zero_points.py --model qwen --windows 20      # the Qwen2.5-1.5B-shaped model, g128
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import openvino as ov

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import quality  # noqa: E402
from _sequential import evaluate_against  # noqa: E402
from _sequential import reference_log_probs  # noqa: E402
from _sequential import reference_metrics  # noqa: E402

from nncf_hqq import HQQ_DEFAULT  # noqa: E402
from nncf_hqq.parameters import ZeroPointFormat  # noqa: E402

INTEGER = dataclasses.replace(HQQ_DEFAULT, zero_point_format=ZeroPointFormat.INTEGER)
ATTENTION = ("q_proj", "k_proj", "o_proj")


def decompression_inputs(matmul: ov.Node) -> dict[str, ov.Input]:
    """The inputs of a weight's decompression subgraph where codes, zero point and scale enter."""
    found: dict[str, ov.Input] = {}
    stack = [matmul.input_value(1).get_node()]
    while stack:
        node = stack.pop()
        kind, source = node.get_type_name(), node.input_value(0)
        from_constant = source.get_node().get_type_name() == "Constant"
        if kind == "Subtract":
            found["zero_point"] = node.input(1)
        elif kind == "Multiply":
            found["scale"] = node.input(1)
        elif kind == "Convert" and from_constant and source.get_element_type() in (ov.Type.u4, ov.Type.u8):
            found.setdefault("codes", node.input(0))
        if kind in ("Subtract", "Multiply", "Convert", "Reshape") and not from_constant:
            stack.append(source.get_node())
    return found


def mix(float_model: ov.Model, integer_model: ov.Model, names: tuple[str, ...]) -> int:
    """Wires the integer model's codes, scales and zero points of the MatMuls named with ``names`` into
    ``float_model``'s decompression subgraphs; returns how many MatMuls took them."""
    integer_matmuls = {op.get_friendly_name(): op for op in integer_model.get_ops() if op.get_type_name() == "MatMul"}
    mixed = 0
    for op in float_model.get_ops():
        name = op.get_friendly_name()
        if op.get_type_name() != "MatMul" or not any(part in name for part in names):
            continue
        target, source = decompression_inputs(op), decompression_inputs(integer_matmuls[name])
        if set(target) != {"codes", "scale", "zero_point"} or set(source) != set(target):
            continue
        for key, entry in target.items():
            entry.replace_source_output(source[key].get_source_output())
        mixed += 1
    float_model.validate_nodes_and_infer_types()
    return mixed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("smollm2", "qwen"), default="qwen")
    parser.add_argument("--windows", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("results/mixed_zero_points.json"))
    args = parser.parse_args()
    ir_dir_of, group_size = quality.MODELS[args.model]
    ir_dir = ir_dir_of()
    text = quality.shared_path(quality.WIKITEXT)
    windows = quality.wikitext_windows(quality.load_tokenizer(ir_dir), text, args.windows)
    reference = reference_log_probs(ir_dir, quality.cache_dir() / "fp_logp" / args.model, windows)
    results = {"fp": reference_metrics(windows, reference)}
    rtn, _ = quality.compress(ir_dir, group_size, None)
    results["rtn"] = evaluate_against(rtn, windows, reference)
    del rtn
    float_model, _ = quality.compress(ir_dir, group_size, HQQ_DEFAULT)
    results["hqq_float"] = evaluate_against(float_model, windows, reference)
    integer_model, _ = quality.compress(ir_dir, group_size, INTEGER)
    results["hqq_integer"] = evaluate_against(integer_model, windows, reference)
    mixed = mix(float_model, integer_model, ATTENTION)
    results["float_mlp_integer_attention"] = {**evaluate_against(float_model, windows, reference), "mixed": mixed}
    for row, values in results.items():
        print(row, values, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {"model": args.model, "group_size": group_size, "windows": args.windows, "results": results}
    args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
