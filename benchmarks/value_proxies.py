"""Can a layer-wise proxy tell when HQQ on an attention value projection hurts? (issue 3, all-MiniLM-L6-v2)

On MiniLM, ``hqq=True`` with HQQ also on the value projections gives an embedding cosine of 0.9593 against
0.9680 with RTN there (docs/quality.md), although HQQ's weight error is lower. For every value projection this
prints HQQ's error divided by RTN's under several output-error proxies (below 1: the proxy prefers HQQ):

- ``weight``: norm-gain weighted squared weight error (what the default's refinement minimises);
- ``through_o``: the value error carried through the output projection, head by head
  (``sum_h ||W_o[:, h] dV_h diag(sqrt(gain))||^2``);
- ``norm_bias``: the error on the mean input that the LayerNorm's bias predicts (``||dV beta||^2``), data-free;
- ``act_mean`` / ``act_centred``: with real inputs (WikiText-2 lines through the FP encoder): the error on the
  mean input (``n ||dV mu||^2``) and on the centred inputs (``||(X - mu) dV^T||^2``).

    python benchmarks/value_proxies.py --lines 64        # -> results/value_proxies_minilm.json
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import openvino as ov
from nncf import CompressWeightsMode
from nncf.tensor import Tensor
from openvino import opset13 as opset

from nncf_hqq._nncf_glue import WeightCompressionConfig
from nncf_hqq._nncf_glue import layer_context
from nncf_hqq.algorithm import HQQ
from nncf_hqq.conversion import decompress
from nncf_hqq.conversion import to_compressed_weight
from nncf_hqq.evaluation import _encoder_inputs
from nncf_hqq.evaluation import load_tokenizer
from nncf_hqq.evaluation import wikitext_lines
from nncf_hqq.importance import norm_affine
from nncf_hqq.models import ir_xml
from nncf_hqq.models import minilm_ov_dir
from nncf_hqq.models import shared_path
from nncf_hqq.parameters import HQQ_DEFAULT
from nncf_hqq.solver import rtn_scale_zero_point
from nncf_hqq.solver import split_into_groups

WIKITEXT = "data/wikitext-2-raw/wiki.test.raw"
GROUP_SIZE = 64
PROJECTIONS = {"value": r"attention\.self\.value", "output": r"attention\.output\.dense"}


def projection_matmuls(model: ov.Model) -> dict[str, dict[int, ov.Node]]:
    """The value and attention-output MatMuls by layer index."""
    found: dict[str, dict[int, ov.Node]] = {name: {} for name in PROJECTIONS}
    for op in model.get_ordered_ops():
        layer = re.search(r"layer\.(\d+)\.", op.get_friendly_name())
        if op.get_type_name() != "MatMul" or layer is None:
            continue
        for name, pattern in PROJECTIONS.items():
            if re.search(pattern, op.get_friendly_name()):
                found[name][int(layer.group(1))] = op
    return found


def weight_constant(matmul: ov.Node) -> ov.Node:
    source = matmul.input_value(1).get_node()
    while source.get_type_name() == "Convert":
        source = source.input_value(0).get_node()
    return source


def candidates(constant: ov.Node) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The weight and its dequantized RTN and HQQ (the default's solver, no RTN role) versions."""
    weight = np.array(constant.get_data(), dtype=np.float32)
    config = WeightCompressionConfig(mode=CompressWeightsMode.INT4_ASYM, group_size=GROUP_SIZE)
    grouped, axis = split_into_groups(Tensor(weight), 1, GROUP_SIZE)
    rtn = to_compressed_weight(grouped, *rtn_scale_zero_point(grouped, axis, 4), 4, True)
    hqq = HQQ(HQQ_DEFAULT)
    importance, _ = layer_context(hqq, constant, weight.shape[1])
    compressed = hqq.compress(Tensor(weight), 1, config, importance, None)
    return weight, {name: decompress(c).data.reshape(weight.shape) for name, c in (("rtn", rtn), ("hqq", compressed))}


def value_inputs(ir_dir: Path, model: ov.Model, values: dict[int, ov.Node], lines: int) -> dict[int, np.ndarray]:
    """The value projections' inputs ``[tokens, in]`` (padding dropped) for the first WikiText-2 lines."""
    order = sorted(values)
    probe = ov.Model([opset.result(values[i].input_value(0)) for i in order], model.get_parameters())
    compiled = ov.Core().compile_model(probe, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    names = {p.any_name for p in compiled.inputs}
    tokenizer = load_tokenizer(ir_dir)
    texts = wikitext_lines(shared_path(WIKITEXT), lines)
    collected: dict[int, list[np.ndarray]] = {i: [] for i in order}
    for begin in range(0, len(texts), 16):
        batch = tokenizer(texts[begin : begin + 16], padding=True, truncation=True, return_tensors="np")
        inputs = _encoder_inputs(batch, names)
        outputs = compiled(inputs)
        mask = inputs["attention_mask"].astype(bool)
        for k, i in enumerate(order):
            collected[i].append(np.asarray(outputs[k])[mask])
    return {i: np.concatenate(chunks) for i, chunks in collected.items()}


def proxies(
    weight: np.ndarray,
    dequantized: np.ndarray,
    output: np.ndarray,
    heads: int,
    gain: np.ndarray,
    beta: np.ndarray,
    inputs: np.ndarray,
) -> dict[str, float]:
    delta = dequantized - weight
    scaled = delta * gain[None, :]
    width = delta.shape[0] // heads
    mean = inputs.mean(axis=0)
    return {
        "weight": float((scaled**2).sum()),
        "through_o": sum(
            float(((output[:, h * width : (h + 1) * width] @ scaled[h * width : (h + 1) * width]) ** 2).sum())
            for h in range(heads)
        ),
        "norm_bias": float(((delta @ beta) ** 2).sum()),
        "act_mean": float(inputs.shape[0] * ((delta @ mean) ** 2).sum()),
        "act_centred": float((((inputs - mean) @ delta.T) ** 2).sum()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=64, help="WikiText-2 lines for the activation proxies")
    parser.add_argument("--out", type=Path, default=Path("results/value_proxies_minilm.json"))
    args = parser.parse_args()
    ir_dir = minilm_ov_dir()
    model = ov.Core().read_model(ir_xml(ir_dir))
    heads = int(json.loads((ir_dir / "config.json").read_text())["num_attention_heads"])
    matmuls = projection_matmuls(model)
    inputs = value_inputs(ir_dir, model, matmuls["value"], args.lines)
    names = ["weight", "through_o", "norm_bias", "act_mean", "act_centred"]
    print(f"{'layer':<8}" + "".join(f"{n:>13}" for n in names) + "   (HQQ / RTN)")
    results = {}
    for layer in sorted(matmuls["value"]):
        constant = weight_constant(matmuls["value"][layer])
        weight, versions = candidates(constant)
        affine = norm_affine(constant, weight.shape[1])
        gain, beta = (np.ones(weight.shape[1]), np.zeros(weight.shape[1])) if affine is None else affine
        beta = np.zeros_like(gain) if beta is None else beta
        output = np.array(weight_constant(matmuls["output"][layer]).get_data(), dtype=np.float32)
        values = {k: proxies(weight, v, output, heads, gain, beta, inputs[layer]) for k, v in versions.items()}
        ratios = {n: values["hqq"][n] / values["rtn"][n] for n in names}
        results[layer] = {"ratios": ratios, "values": values}
        print(f"{layer:<8}" + "".join(f"{ratios[n]:>13.3f}" for n in names))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"lines": args.lines, "layers": results}, indent=2))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
