"""The zero-point loop's work under two stopping rules: the whole tensor's (0001, HQQ's) and each group's own.

For R4 (0001's compression time, docs/upstreaming.md): how many passes over the weight each rule makes (a group is
computed until it stops), and the mean absolute error each leaves, on the seven weights of one Qwen2.5-1.5B-shaped
layer (the timing model), the Qwen2.5-Coder-1.5B model's first 14 weights (g128) and SmolLM2's first 30 (g64).
A transcription of 0001's loop in numpy, not the solver itself: this counts work, it does not compare bits.

    python research/zero_point_stop_scope.py
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import openvino as ov

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import inference

from nncf_hqq.llm.layout import ir_xml
from nncf_hqq.llm.zoo import qwen_ov_dir
from nncf_hqq.llm.zoo import smollm2_ov_dir

Q_MAX = 15.0  # 4-bit codes
ITERATIONS = 20  # HQQ's and 0001's


def initial(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """0001's initialisation: inverse scale from the range, zero point -min * s."""
    low, high = rows.min(1, keepdims=True), rows.max(1, keepdims=True)
    widened = np.maximum(high - low, np.abs(low) * (Q_MAX / 2048.0))
    inverse_scale = (Q_MAX / np.maximum(widened, 7.5e-4)).astype(np.float32)
    return inverse_scale, (-low * inverse_scale).astype(np.float32)


def step(rows: np.ndarray, s: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One iteration of 0001's loop: every group's mean absolute error and its updated zero point."""
    scaled = rows * s
    codes = np.clip(np.round(scaled + z), 0.0, Q_MAX)
    error = np.mean(np.abs(rows - (codes - z) / s), axis=1, keepdims=True)
    return error, np.mean(codes - scaled, axis=1, keepdims=True)


def tensor_stop(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """0001's rule: stop when the whole tensor's mean error stops decreasing; groups at a fixed point drop out."""
    s, z = initial(rows)
    best_zero, group_error, best, moving, passes = z.copy(), np.zeros_like(z), np.inf, np.arange(len(rows)), 0
    r, ss, zz = rows, s, z
    for _ in range(ITERATIONS):
        error, updated = step(r, ss, zz)
        passes += len(r)
        group_error[moving] = error
        if not group_error.mean() < best:
            break
        best, best_zero[moving] = group_error.mean(), zz
        still = (updated != zz)[:, 0]
        moving, r, ss, zz = moving[still], r[still], ss[still], updated[still]
        if moving.size == 0:
            break
    return s, best_zero, passes / len(rows)


def group_stop(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Each group stops at its own first non-improving iteration and keeps its best zero point."""
    s, z = initial(rows)
    best_zero, best_error, moving, passes = z.copy(), np.full_like(z, np.inf), np.arange(len(rows)), 0
    r, ss, zz = rows, s, z
    for _ in range(ITERATIONS):
        error, updated = step(r, ss, zz)
        passes += len(r)
        better = (error < best_error[moving])[:, 0]
        best_error[moving[better]], best_zero[moving[better]] = error[better], zz[better]
        still = better & (updated != zz)[:, 0]
        moving, r, ss, zz = moving[still], r[still], ss[still], updated[still]
        if moving.size == 0:
            break
    return s, best_zero, passes / len(rows)


def mean_abs_error(rows: np.ndarray, s: np.ndarray, z: np.ndarray) -> float:
    codes = np.clip(np.round(rows * s + z), 0.0, Q_MAX)
    return float(np.mean(np.abs(rows - (codes - z) / s)))


def weights(model: ov.Model, limit: int) -> list[np.ndarray]:
    """The model's first ``limit`` 2-D float constants with both sides at least 256 (its MatMul weights)."""
    found = []
    for op in model.get_ordered_ops():
        if op.get_type_name() == "Constant" and len(op.shape) == 2 and min(op.shape) >= 256:
            found.append(op.get_data().astype(np.float32))
    return found[:limit]


def main() -> None:
    models: list[tuple[str, Callable[[], ov.Model], int, int]] = [
        ("Qwen-shaped timing layer", lambda: inference.qwen_layers(1536, 8960, 256, 1), 128, 7),
        ("Qwen2.5-Coder-1.5B", lambda: ov.Core().read_model(ir_xml(qwen_ov_dir())), 128, 14),
        ("SmolLM2-135M", lambda: ov.Core().read_model(ir_xml(smollm2_ov_dir())), 64, 30),
    ]
    print(f"{'weights':<26}{'passes tensor':>15}{'passes group':>14}{'MAE tensor':>13}{'MAE group':>13}")
    for name, build, group_size, limit in models:
        totals = np.zeros(5)
        for weight in weights(build(), limit):
            rows = weight.reshape(-1, group_size)
            s, z, passes = tensor_stop(rows)
            s2, z2, passes2 = group_stop(rows)
            values = (passes, passes2, mean_abs_error(rows, s, z), mean_abs_error(rows, s2, z2), 1.0)
            totals += np.array(values) * rows.size
        passes, passes2, error, error2, _ = totals / totals[4]
        print(f"{name:<26}{passes:>15.2f}{passes2:>14.2f}{error:>13.7f}{error2:>13.7f}")


if __name__ == "__main__":
    main()
