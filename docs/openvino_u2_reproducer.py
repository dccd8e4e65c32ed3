"""Minimal reproducer: OpenVINO CPU cannot run u2 weights with a u2 zero point under its default settings.

A single MatMul whose weight is a grouped decompression subgraph, as NNCF writes it:

    Constant u2 codes [N, K/g, g] -> Convert f16 -> Subtract zero point -> Multiply f16 scale -> Reshape [N, K]
    -> Convert f32 -> MatMul(x, W^T)

* zero point = Constant u2 -> Convert f16: ``infer`` raises "FullyConnectedCompressed ... could not create a
  primitive descriptor for the inner product forward propagation primitive" (also without a zero point at all).
* zero point = Constant f16: runs, with the u2 codes kept compressed (the runtime graph's FullyConnected is u2).
* Workarounds for the u2 zero point: ``DYNAMIC_QUANTIZATION_GROUP_SIZE=0`` or ``INFERENCE_PRECISION_HINT=f32``.

Seen with openvino 2026.4.1 on an AVX512-BF16 CPU, where the default inference precision is bf16 and dynamic
(activation) quantization is on (group size 32). On a CPU whose default precision is f32 it may not reproduce, and
on some bf16 CPUs with dynamic quantization on it runs correctly (the project's CI machine): the script prints the
precision it got. Needs only numpy and openvino:

    python docs/openvino_u2_reproducer.py
"""

from __future__ import annotations

import numpy as np
import openvino as ov
from openvino import opset13 as opset

N, K, GROUP = 256, 512, 64


def build(zero_point: str) -> tuple[ov.Model, np.ndarray]:
    """The model and its dequantized f32 weight [N, K]; ``zero_point`` is "u2", "f16" or "none"."""
    rng = np.random.default_rng(0)
    groups = K // GROUP
    codes = rng.integers(0, 4, size=(N, groups, GROUP), dtype=np.uint8)
    scale = (0.001 + 0.01 * rng.random((N, groups, 1))).astype(np.float16)
    weight = opset.convert(opset.constant(codes, dtype=ov.Type.u2), ov.Type.f16)
    zp = np.zeros((N, groups, 1), dtype=np.float32)
    if zero_point == "u2":
        zp_codes = rng.integers(0, 4, size=(N, groups, 1), dtype=np.uint8)
        zp = zp_codes.astype(np.float32)
        weight = opset.subtract(weight, opset.convert(opset.constant(zp_codes, dtype=ov.Type.u2), ov.Type.f16))
    elif zero_point == "f16":
        zp_f16 = (3.0 * rng.random((N, groups, 1))).astype(np.float16)
        zp = zp_f16.astype(np.float32)
        weight = opset.subtract(weight, opset.constant(zp_f16, dtype=ov.Type.f16))
    weight = opset.multiply(weight, opset.constant(scale, dtype=ov.Type.f16))
    weight = opset.convert(opset.reshape(weight, [N, K], special_zero=False), ov.Type.f32)
    x = opset.parameter([-1, K], ov.Type.f32, name="x")
    model = ov.Model([opset.result(opset.matmul(x, weight, False, True))], [x], f"u2_zp_{zero_point}")
    reference = ((codes.astype(np.float32) - zp) * scale.astype(np.float32)).reshape(N, K)
    return model, reference


def weight_precision(compiled: ov.CompiledModel) -> str:
    """runtimePrecision of the FullyConnected node in the CPU plugin's runtime graph (u2: codes kept compressed)."""
    for op in compiled.get_runtime_model().get_ordered_ops():
        if op.get_rt_info()["layerType"].astype(str) == "FullyConnected":
            return str(op.get_rt_info()["runtimePrecision"].astype(str))
    return "?"


def run(zero_point: str, config: dict[str, str]) -> None:
    model, reference = build(zero_point)
    compiled = ov.Core().compile_model(model, "CPU", config)
    precision = compiled.get_property("INFERENCE_PRECISION_HINT")
    dq = compiled.get_property("DYNAMIC_QUANTIZATION_GROUP_SIZE")
    label = f"zero point {zero_point:>4}, config {config or 'default'} (precision {precision}, DQ group {dq})"
    x = np.random.default_rng(1).standard_normal((1, K)).astype(np.float32)
    try:
        y = compiled(x)[0]
    except RuntimeError as error:
        message = " ".join(line for line in str(error).splitlines() if "[CPU]" in line) or str(error)
        print(f"FAILS: {label}\n       {message}")
        return
    expected = x @ reference.T
    relative = float(np.abs(y - expected).max() / np.abs(expected).max())
    print(f"runs:  {label}; weights {weight_precision(compiled)}, max error / max |y| = {relative:.1e}")


def main() -> None:
    print(f"openvino {ov.get_version()}, CPU: {ov.Core().get_property('CPU', 'FULL_DEVICE_NAME')}")
    for zero_point in ("u2", "none", "f16"):
        run(zero_point, {})
    print("workarounds for the u2 zero point:")
    run("u2", {"DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"})
    run("u2", {"INFERENCE_PRECISION_HINT": "f32"})


if __name__ == "__main__":
    main()
