"""The zero-point loop under three stopping rules: the whole tensor's early stop (HQQ's, 0001 until 2026-12-07),
each group's own early stop with its best iterate, and no early stop, each group until it converges (0001 now).

For R4 (0001's compression time, docs/upstreaming.md): how many passes over the weight each rule makes (a group is
computed until it stops), the mean absolute error each leaves, the mean |mean error| of a group (its bias), and the
share of groups whose zero point is the tensor rule's bit for bit, on the seven weights of one Qwen2.5-1.5B-shaped
layer (the timing model), the Qwen2.5-Coder-1.5B model's first 14 weights (g128) and SmolLM2's first 30 (g64).
A transcription of the loops in numpy, with the update of HQQ (and 0001), mean(Wq - W s).

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
    """HQQ's rule: stop when the whole tensor's mean error stops decreasing; groups at a fixed point drop out."""
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


def until_converged(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """No early stop: each group until its zero point no longer changes (at most ITERATIONS), its last zero point."""
    s, z = initial(rows)
    last, moving, passes = z.copy(), np.arange(len(rows)), 0
    r, ss, zz = rows, s, z
    for _ in range(ITERATIONS):
        _, updated = step(r, ss, zz)
        passes += len(r)
        last[moving] = updated
        still = (updated != zz)[:, 0]
        moving, r, ss, zz = moving[still], r[still], ss[still], updated[still]
        if moving.size == 0:
            break
    return s, last, passes / len(rows)


def errors(rows: np.ndarray, s: np.ndarray, z: np.ndarray) -> tuple[float, float]:
    """The mean absolute error and the mean over groups of |the group's mean error|."""
    codes = np.clip(np.round(rows * s + z), 0.0, Q_MAX)
    difference = rows - (codes - z) / s
    return float(np.mean(np.abs(difference))), float(np.mean(np.abs(difference.mean(axis=1))))


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
    rules = {"tensor's stop": tensor_stop, "group's stop": group_stop, "until converged": until_converged}
    print(f"{'weights':<26}{'rule':<17}{'passes':>8}{'MAE':>12}{'|bias|':>12}{'as tensor':>11}")
    for name, build, group_size, limit in models:
        totals = {rule: np.zeros(4) for rule in rules}
        size = 0
        for weight in weights(build(), limit):
            rows = weight.reshape(-1, group_size)
            size += rows.size
            _, tensor_zero, _ = tensor_stop(rows)
            for rule, solve in rules.items():
                s, z, passes = solve(rows)
                same = float(np.mean(z == tensor_zero))
                totals[rule] += np.array([passes, *errors(rows, s, z), same]) * rows.size
        for rule, total in totals.items():
            passes, error, bias, same = total / size
            print(f"{name:<26}{rule:<17}{passes:>8.2f}{error:>12.7f}{bias:>12.7f}{same:>11.4f}")


if __name__ == "__main__":
    main()
