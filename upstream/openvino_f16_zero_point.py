"""Reproducer for OpenVINO: a u4 weight with an f16 zero point runs without the CPU plugin's int8 activations.

One MatMul whose weight is the grouped decompression subgraph NNCF writes for INT4_ASYM:

    Constant u4 codes [N, K/g, g] -> Convert f16 -> Subtract zero point -> Multiply f16 scale [N, K/g, 1]
    -> Reshape [N, K] -> Convert f32 -> MatMul(x, W, transpose_b=True)

built twice with the same codes and scales: the zero point a u4 Constant -> Convert f16 (what NNCF's RTN writes),
and the zero point an f16 Constant (what HQQ's float zero point needs). The CPU plugin fuses both into one
compressed FullyConnected, keeping the u4 codes, but only the first runs with dynamic int8 quantization of the
activations (``DYNAMIC_QUANTIZATION_GROUP_SIZE``): the script shows it by comparing each model's output with and
without dynamic quantization (under f32 precision, where nothing else changes), then times both, one token (decode)
and 128 tokens (prefill), in alternation, and prints the ratio f16 / u4.

Needs only numpy and openvino (pip install openvino numpy):

    python openvino_f16_zero_point.py                      # Qwen2.5-7B's up projection: K 3584, N 18944, g 128
    python openvino_f16_zero_point.py --k 1536 --n 8960    # Qwen2.5-1.5B's
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
from openvino import opset13 as opset

#: CPU flags that decide the plugin's path: int8 dynamic quantization needs a VNNI flag; AMX changes the kernels.
ISA_FLAGS = ("avx2", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8")
NO_DQ = {"DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
F32 = {"INFERENCE_PRECISION_HINT": "f32"}


def matmul(k: int, n: int, group: int, zero_point: str) -> ov.Model:
    """One MatMul ``[T, k] x [n, k]^T`` with u4 codes; ``zero_point`` is "u4" or "f16" (the same values + 0.5)."""
    rng = np.random.default_rng(0)
    groups = k // group
    codes = rng.integers(0, 16, size=(n, groups, group), dtype=np.uint8)
    zp_codes = rng.integers(0, 16, size=(n, groups, 1), dtype=np.uint8)
    scale = (0.001 + 0.01 * rng.random((n, groups, 1))).astype(np.float16)
    weight = opset.convert(opset.constant(codes, dtype=ov.Type.u4), ov.Type.f16)
    if zero_point == "u4":
        zp = opset.convert(opset.constant(zp_codes, dtype=ov.Type.u4), ov.Type.f16)
    else:
        zp = opset.constant(np.clip(zp_codes + 0.5, 0, 15).astype(np.float16), dtype=ov.Type.f16)
    weight = opset.multiply(opset.subtract(weight, zp), opset.constant(scale, dtype=ov.Type.f16))
    weight = opset.convert(opset.reshape(weight, [n, k], special_zero=False), ov.Type.f32)
    x = opset.parameter([-1, k], ov.Type.f32, name="x")
    return ov.Model([opset.result(opset.matmul(x, weight, False, True))], [x], f"u4_weight_{zero_point}_zero_point")


def cpu_description() -> dict[str, Any]:
    """The CPU's name, the ISA flags above it has (Linux /proc/cpuinfo), and the plugin's view of it."""
    flags: set[str] = set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        line = next((x for x in cpuinfo.read_text().splitlines() if x.startswith("flags")), "")
        flags = set(line.split(":", 1)[-1].split())
    core = ov.Core()
    return {
        "name": core.get_property("CPU", "FULL_DEVICE_NAME"),
        "flags": [flag for flag in ISA_FLAGS if flag in flags],
        "amx": "amx_int8" in flags or "amx_bf16" in flags,
        "optimization_capabilities": list(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")),
    }


def fully_connected(compiled: ov.CompiledModel) -> tuple[str, str]:
    """(runtimePrecision, primitiveType) of the FullyConnected node in the plugin's runtime graph."""
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if info["layerType"].astype(str) == "FullyConnected":
            return info["runtimePrecision"].astype(str), info["primitiveType"].astype(str)
    return "?", "?"


def uses_int8_activations(model: ov.Model, k: int, threads: int) -> bool:
    """Whether the plugin quantizes this layer's activations: its f32 output changes when dynamic quantization is
    switched off (nothing else differs between the two compilations)."""
    core, x = ov.Core(), np.random.default_rng(1).standard_normal((4, k)).astype(np.float32)
    base = {"INFERENCE_NUM_THREADS": str(threads), **F32}
    with_dq = core.compile_model(model, "CPU", base)(x)[0]
    without_dq = core.compile_model(model, "CPU", {**base, **NO_DQ})(x)[0]
    return not np.array_equal(with_dq, without_dq)


def time_alternating(
    requests: dict[str, ov.InferRequest], x: np.ndarray, rounds: int, calls: int
) -> dict[str, list[float]]:
    """Per round and model, the median seconds of ``calls`` inferences; the models take turns call by call."""
    times: dict[str, list[float]] = {name: [] for name in requests}
    for request in requests.values():
        request.infer({0: x})  # warm-up
    for _ in range(rounds):
        samples: dict[str, list[float]] = {name: [] for name in requests}
        for _ in range(calls):
            for name, request in requests.items():
                start = time.perf_counter()
                request.infer({0: x})
                samples[name].append(time.perf_counter() - start)
        for name in requests:
            times[name].append(statistics.median(samples[name]))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=3584, help="input channels")
    parser.add_argument("--n", type=int, default=18944, help="output channels")
    parser.add_argument("--group", type=int, default=128)
    parser.add_argument("--prefill", type=int, default=128, help="tokens of the prefill shape")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()

    cpu = cpu_description()
    print(f"openvino {ov.get_version()}; CPU: {cpu['name']}; flags: {' '.join(cpu['flags'])}; AMX: {cpu['amx']}")
    models = {zp: matmul(args.k, args.n, args.group, zp) for zp in ("u4", "f16")}
    config = {"INFERENCE_NUM_THREADS": str(args.threads), "PERFORMANCE_HINT": "LATENCY"}
    core = ov.Core()
    compiled = {zp: core.compile_model(model, "CPU", config) for zp, model in models.items()}
    first = next(iter(compiled.values()))
    precision = first.get_property("INFERENCE_PRECISION_HINT")
    settings = {
        "INFERENCE_PRECISION_HINT": precision.get_type_name() if isinstance(precision, ov.Type) else str(precision),
        "DYNAMIC_QUANTIZATION_GROUP_SIZE": str(first.get_property("DYNAMIC_QUANTIZATION_GROUP_SIZE")),
    }
    print(f"MatMul [T, {args.k}] x [{args.n}, {args.k}]^T, u4 codes, group {args.group}; CPU plugin: {settings}")
    record: dict[str, object] = {
        "openvino": ov.get_version(),
        "cpu": cpu,
        "plugin": settings,
        "shape": {k: v for k, v in vars(args).items() if k != "json"},
    }
    layers = {}
    for zp, model in models.items():
        precision, primitive = fully_connected(compiled[zp])
        int8 = uses_int8_activations(model, args.k, args.threads)
        layers[zp] = {"weights": precision, "primitive": primitive, "int8_activations": int8}
        print(f"  zero point {zp:>3}: FullyConnected weights {precision}, {primitive}, int8 activations: {int8}")
    record["layers"] = layers

    rows = {}
    for label, tokens, calls in (("decode", 1, 40), ("prefill", args.prefill, 4)):
        x = np.random.default_rng(2).standard_normal((tokens, args.k)).astype(np.float32)
        requests = {zp: c.create_infer_request() for zp, c in compiled.items()}
        times = time_alternating(requests, x, args.rounds, calls)
        ratio = statistics.median(f / u for f, u in zip(times["f16"], times["u4"], strict=True))
        u4_ms, f16_ms = (1000 * statistics.median(times[zp]) for zp in ("u4", "f16"))
        rows[label] = {"tokens": tokens, "u4_ms": u4_ms, "f16_ms": f16_ms, "f16_over_u4": ratio}
        print(
            f"  {label:<8}({tokens:>3} tokens): u4 zero point {u4_ms:8.2f} ms, f16 zero point {f16_ms:8.2f} ms, "
            f"ratio {ratio:.2f}"
        )
    record["latency"] = rows
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
