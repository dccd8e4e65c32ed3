"""Compress a small synthetic OpenVINO model with NNCF's RTN and with HQQ; print the error per layer.

    python examples/compare_layers.py

The model is a stack of MatMuls with heavy-tailed random weights (no download). For every layer the script
prints the weight reconstruction error of both methods, and at the end the error of the model's outputs.
"""

from __future__ import annotations

import nncf
import numpy as np
import openvino as ov
from openvino import opset13 as opset

import nncf_hqq  # noqa: F401  (teaches nncf.compress_weights the hqq= option)

HIDDEN = 256
LAYERS = 4
GROUP_SIZE = 64


def build_model(seed: int = 0) -> tuple[ov.Model, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    x = opset.parameter([-1, HIDDEN], ov.Type.f32, name="x")
    weights: dict[str, np.ndarray] = {}
    h = x
    for i in range(LAYERS):
        w = (rng.standard_t(4, size=(HIDDEN, HIDDEN)) * 0.05).astype(np.float32)
        weights[f"layer{i}"] = w
        h = opset.matmul(h, opset.constant(w, name=f"layer{i}"), False, True, name=f"matmul{i}")
        h = opset.tanh(h)
    return ov.Model([opset.result(h)], [x], "mlp"), weights


def decompressed_weights(model: ov.Model, names: list[str]) -> dict[str, np.ndarray]:
    """Evaluates each layer's decompression subgraph by constant folding a copy of it."""
    result = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() == "MatMul":
            weight_source = op.input_value(1).get_node()
            name = next((n for n in names if weight_source.get_friendly_name().startswith(n)), None)
            if name is not None:
                sub = ov.Model([opset.result(weight_source)], [], "w")
                compiled = ov.Core().compile_model(sub, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
                result[name] = np.asarray(compiled({})[0])
    return result


def main() -> None:
    config = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
    reference_model, weights = build_model()
    x = np.random.default_rng(1).standard_normal((32, HIDDEN)).astype(np.float32)
    reference = np.asarray(ov.Core().compile_model(reference_model, "CPU", config)(x)[0])
    mode = nncf.CompressWeightsMode.INT4_ASYM
    models = {
        "RTN": nncf.compress_weights(build_model()[0], mode=mode, group_size=GROUP_SIZE, all_layers=True),
        "HQQ": nncf.compress_weights(build_model()[0], mode=mode, group_size=GROUP_SIZE, all_layers=True, hqq=True),
    }
    restored = {method: decompressed_weights(m, list(weights)) for method, m in models.items()}
    print(f"{'layer':<8} {'RTN weight MSE':>15} {'HQQ weight MSE':>15} {'HQQ/RTN':>8}")
    for name, w in weights.items():
        rtn, hqq = (float(np.mean((restored[m][name] - w) ** 2)) for m in ("RTN", "HQQ"))
        print(f"{name:<8} {rtn:>15.3e} {hqq:>15.3e} {hqq / rtn:>8.3f}")
    for method, model in models.items():
        out = np.asarray(ov.Core().compile_model(model, "CPU", config)(x)[0])
        print(f"{method} output MSE vs float model: {float(np.mean((out - reference) ** 2)):.3e}")


if __name__ == "__main__":
    main()
