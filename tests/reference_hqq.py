"""An independent numpy transcription of the published HQQ solver, used as a test oracle.

It follows the paper (Badri & Shaji, 2023) and the reference library's legacy proximal solver step by step,
on a 2D array of groups ``[n_groups, group_size]``, without sharing any code with ``nncf_hqq``:

    s = (2^b - 1) / (max - min), capped at 2e4;  z = -min * s
    repeat (at most 20 times):
        Wq = clip(round(W * s + z), 0, 2^b - 1);   Wr = (Wq - z) / s
        We = shrink_lp(W - Wr, beta);              z  = mean(Wq - (W - We) * s)     (per group)
        beta *= kappa;   stop when mean|W - Wr| (whole tensor) stops decreasing

The published code returns the zero point after the final update; ``track_best=True`` returns the zero point
whose error was the lowest measured instead.
"""

from __future__ import annotations

import numpy as np


def published_hqq(
    groups: np.ndarray,
    num_bits: int,
    lp_norm: float = 0.7,
    beta: float = 10.0,
    kappa: float = 1.01,
    iterations: int = 20,
    track_best: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Returns ``(inverse_scale, zero)`` of shape ``[n_groups, 1]``."""
    w = groups.astype(np.float32)
    q_max = np.float32(2**num_bits - 1)
    w_min = w.min(axis=1, keepdims=True)
    w_max = w.max(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        s = np.minimum(q_max / (w_max - w_min), np.float32(2e4)).astype(np.float32)
    z = -w_min * s
    best_error, best_z = np.inf, z
    for _ in range(iterations):
        wq = np.clip(np.round(w * s + z), 0, q_max)
        wr = (wq - z) / s
        x = w - wr
        if lp_norm == 1.0:
            we = np.sign(x) * np.maximum(np.abs(x) - 1.0 / beta, 0)
        else:
            we = np.sign(x) * np.maximum(np.abs(x) - (1.0 / beta) * np.power(np.abs(x) + 1e-8, lp_norm - 1), 0)
        new_z = np.mean(wq - (w - we) * s, axis=1, keepdims=True).astype(np.float32)
        beta *= kappa
        error = float(np.mean(np.abs(w - wr)))
        if error < best_error:
            best_error, best_z = error, z
            z = new_z
        else:
            z = new_z
            break
    return s, (best_z if track_best else z)


def reconstruct(groups: np.ndarray, s: np.ndarray, z: np.ndarray, num_bits: int) -> np.ndarray:
    wq = np.clip(np.round(groups.astype(np.float32) * s + z), 0, 2**num_bits - 1)
    return (wq - z) / s
