"""How unevenly a model's tokens weigh in each weight's calibration inputs (attention sinks).

For every MatMul with a constant weight, on a few sequences the float model generates from its BOS token (the
self-calibration settings): the largest token's share of ``sum_t ||x_t||^2`` (what that token weighs in ``X X^T``,
which HQQ's data-aware steps fit), its ratio to the median token's squared norm, and its position. Prints the
inputs where one token's share is above ``--min-share``, writes all as JSON.

    python research/input_norms.py --model qwen --out input_norms_qwen.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from nncf_hqq.llm.layout import ir_xml
from nncf_hqq.llm.sanity import generation_bos_token_id
from nncf_hqq.llm.texts import llm_inputs
from nncf_hqq.llm.zoo import qwen_ov_dir
from nncf_hqq.llm.zoo import smollm2_ov_dir
from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT
from nncf_hqq.self_calibration import generate_sequences

MODELS = {"smollm2": smollm2_ov_dir, "qwen": qwen_ov_dir}


def with_weight_inputs(model: ov.Model) -> dict[str, list[str]]:
    """Adds every constant-weight MatMul's activation input as a model output; the MatMuls each one feeds, by the
    outputs' order (after the model's own outputs)."""
    feeds: dict[tuple[str, int], list[str]] = {}
    outputs = []
    for op in model.get_ordered_ops():
        if op.get_type_name() != "MatMul" or op.input_value(1).get_node().get_type_name() != "Constant":
            continue
        source = op.input_value(0)
        key = (source.get_node().get_friendly_name(), source.get_index())
        if key not in feeds:
            feeds[key] = []
            outputs.append(source)
        feeds[key].append(op.get_friendly_name().split("/")[0].replace("__module.model.", ""))
    model.add_outputs(outputs)
    return {",".join(names): names for names in feeds.values()}


def token_weights(compiled: Any, sequences: np.ndarray, first_output: int, count: int) -> list[list[float]]:
    """Per added output and sequence: (largest token's share, its ratio to the median, its position)."""
    request = compiled.create_infer_request()
    names = {name for port in compiled.inputs for name in port.get_names()}
    stats: list[list[float]] = [[] for _ in range(count)]
    for sequence in sequences:
        request.reset_state()
        request.infer({k: v for k, v in llm_inputs(sequence).items() if k in names})
        for i in range(count):
            x = np.array(request.get_tensor(compiled.outputs[first_output + i]).data, dtype=np.float64)
            squared = (x.reshape(-1, x.shape[-1]) ** 2).sum(-1)
            stats[i].append([squared.max() / squared.sum(), squared.max() / np.median(squared), squared.argmax()])
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    parser.add_argument("--sequences", type=int, default=4)
    parser.add_argument("--min-share", type=float, default=0.05)
    parser.add_argument("--out", type=Path, default=Path("input_norms.json"))
    args = parser.parse_args()
    ir_dir = MODELS[args.model]()
    core = ov.Core()
    params = SELF_CALIBRATION_DEFAULT.replace(num_samples=args.sequences, batch_size=args.sequences)
    bos = generation_bos_token_id(ir_dir)
    if bos is not None:
        params = params.replace(start_token_ids=(bos,))
    sequences = generate_sequences(core.read_model(ir_xml(ir_dir)), params)
    model = core.read_model(ir_xml(ir_dir))
    first_output = len(model.outputs)
    inputs = with_weight_inputs(model)
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    stats = token_weights(compiled, sequences, first_output, len(inputs))
    rows = {}
    print("| input of | largest token's share of sum ||x||^2 | its / median token's | positions |\n|---|---|---|---|")
    for name, values in zip(inputs, stats, strict=True):
        a = np.array(values)
        rows[name] = {"share": a[:, 0].mean(), "to_median": a[:, 1].mean(), "positions": a[:, 2].astype(int).tolist()}
        if rows[name]["share"] >= args.min_share:
            r = rows[name]
            print(f"| {name} | {r['share']:.3f} | {r['to_median']:.0f} | {r['positions']} |")
    args.out.write_text(json.dumps({"model": args.model, "sequences": args.sequences, "inputs": rows}, indent=1))


if __name__ == "__main__":
    main()
