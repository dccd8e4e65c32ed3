"""
HQQ's solver for asymmetric groups as pure functions over nncf.tensor: the scale of the group's range and the float
zero point of HQQ's iterations.

A group of weights W is quantized as Wq = clip(round(W * s + z), 0, 2^b - 1) and reconstructed as (Wq - z) / s with the
inverse scale s and the float zero point z (HQQ's convention, the solver's); NNCF's scale is 1 / s and its zero point z.
A model stores NNCF's codes of the weight for the scale and zero point of ``stored_scale_zero_point``. Reference: H.
Badri, A. Shaji, "Half-Quadratic Quantization of Large Machine Learning Models", 2023.
"""

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

from nncf.tensor import Tensor
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns

# Span (max - min) below which a group is narrow: where HQQ's published clamp of the inverse scale (2e4, "to avoid
# half-precision problems") acts at 4 bits (15 / 2e4). A narrow group's range is extended to zero, as NNCF's
# round-to-nearest does: a group far from zero would otherwise need a tiny scale and a large zero point, which
# float16 stores coarsely. It is not widened to this span: a grid wider than the weights' is worse than rounding.
MIN_GROUP_RANGE = 7.5e-4
# Largest |zero point| of the initialisation: float16 holds every integer up to 2^11 exactly (a code's precision).
MAX_ABS_ZERO = 2048.0
# Largest finite and smallest positive float16 values: the range of a stored scale and zero point.
F16_MAX = 65504.0
F16_TINY = 2.0**-24
# Elements of a block of groups (1 MiB in float32): its arrays stay in a core's cache, Python's cost per block is low.
BLOCK_ELEMENTS = 2**18
# Threads running blocks (numpy frees the GIL): the cores we may use, at most 8, which saturate the memory bandwidth.
BLOCK_THREADS = min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def as_float32(x: Tensor) -> Tensor:
    """
    The tensor in float32, not copied when it already is (a copy of a weight is a pass over it).

    :param x: A tensor.
    :return: The tensor itself or its float32 copy.
    """
    return x if x.dtype == TensorDataType.float32 else x.astype(TensorDataType.float32)


def min_max_init_for_range(w_min: Tensor, w_max: Tensor, num_bits: int) -> tuple[Tensor, Tensor]:
    """
    HQQ's initialisation s = (2^b - 1) / (max - min), z = -min * s; the range of a group narrower than
    MIN_GROUP_RANGE includes zero, the range is widened where |z| would exceed MAX_ABS_ZERO, and it is at least
    (2^b - 1) * F16_TINY, whose scale is float16's smallest positive value (a constant group would divide by zero).

    :param w_min: The minimum of every group.
    :param w_max: The maximum of every group.
    :param num_bits: The number of bits of a code.
    :return: The inverse scale and the zero point of every group.
    """
    q_max = 2.0**num_bits - 1
    narrow = w_max - w_min < MIN_GROUP_RANGE
    w_min, w_max = fns.where(narrow, fns.minimum(w_min, 0.0), w_min), fns.where(narrow, fns.maximum(w_max, 0.0), w_max)
    widened = fns.maximum(w_max - w_min, fns.abs(w_min) * (q_max / MAX_ABS_ZERO))
    inverse_scale = q_max / fns.maximum(widened, q_max * F16_TINY)
    return inverse_scale, -w_min * inverse_scale


def map_row_blocks(
    function: Callable[..., tuple[Tensor, ...]], *rows: Tensor, pool: ThreadPoolExecutor | None = None
) -> list[Tensor]:
    """
    The function on every block of BLOCK_ELEMENTS of consecutive rows (a single block on the calling thread).

    :param function: The function of a block of each of the rows [groups, group size], returning a row per group.
    :param rows: Tensors with a group per row.
    :param pool: The threads to run the blocks on (a loop's, started once); None: min(BLOCK_THREADS, blocks) new ones.
    :return: The function's values of all rows, in their order (whatever the pool's size).
    """
    step = max(1, BLOCK_ELEMENTS // rows[0].shape[1])
    blocks = [[x[i : i + step] for x in rows] for i in range(0, max(rows[0].shape[0], 1), step)]  # one if empty
    if len(blocks) == 1:
        return list(function(*blocks[0]))
    with nullcontext(pool) if pool is not None else ThreadPoolExecutor(min(BLOCK_THREADS, len(blocks))) as runner:
        results = list(runner.map(lambda block: function(*block), blocks))
    return [fns.concatenate(list(values)) for values in zip(*results, strict=True)]


def optimize_zero_point(
    weight: Tensor, inverse_scale: Tensor, zero: Tensor, axis: int, num_bits: int, iterations: int
) -> Tensor:
    """
    HQQ's zero-point iterations with a fixed scale: nearest codes, then the zero point that fits them, until the mean
    absolute error of the tensor stops decreasing. This is HQQ's half-quadratic solver where its lp shrinkage is
    inactive: with HQQ's defaults (p = 0.7, beta = 10 growing 1.01x an iteration) it zeroes every error below
    beta^(-1 / (2 - p)), at least 0.147 over 20 iterations, and an error is about half a step, (max - min) /
    (2 (2^b - 1)), at most: so on groups of range up to 4.4 at 4 bits (75 at 8). A group whose zero point no longer
    changes has reached its fixed point (its codes and error stay as they are), so each iteration only computes the
    groups still moving; most settle within a few iterations.

    :param weight: The grouped weight (float32).
    :param inverse_scale: The inverse scale s of every group.
    :param zero: The initial zero point of every group.
    :param axis: The axis of the groups' elements.
    :param num_bits: The number of bits of a code.
    :param iterations: The maximal number of iterations.
    :return: The zero point of the best iterate.
    """
    rows, s, z = (fns.reshape(fns.moveaxis(x, axis, -1), (-1, x.shape[axis])) for x in (weight, inverse_scale, zero))
    best_zero, group_error, best_error = z.clone(), fns.zeros_like(z), float("inf")
    moving = fns.arange(z.shape[0], backend=z.backend, device=z.device)

    def step(rows: Tensor, s: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        scaled = rows * s
        codes = fns.clip(fns.round(scaled + z), 0.0, 2.0**num_bits - 1)
        error = fns.mean(fns.abs(rows - (codes - z) / s), axis=1, keepdims=True)  # W - (Wq - z) / s
        return error, fns.mean(codes - scaled, axis=1, keepdims=True)

    with ThreadPoolExecutor(BLOCK_THREADS) as pool:  # its threads start once, as the first blocks need them
        for _ in range(iterations):
            group_error[moving], updated = map_row_blocks(step, rows, s, z, pool=pool)
            error = fns.mean(group_error).item()
            if not error < best_error:
                break
            best_error, best_zero[moving] = error, z
            still = (updated != z)[:, 0]
            moving, rows, s, z = moving[still], rows[still], s[still], updated[still]
            if moving.size == 0:
                break
    return fns.moveaxis(fns.reshape(best_zero, fns.moveaxis(zero, axis, -1).shape), -1, axis)


def solve_zero_point(weight: Tensor, axis: int, num_bits: int, iterations: int) -> tuple[Tensor, Tensor]:
    """
    HQQ's inverse scale (from the range) and float zero point (from its iterations) of a grouped weight.

    :param weight: The grouped weight.
    :param axis: The axis of the groups' elements.
    :param num_bits: The number of bits of a code.
    :param iterations: The maximal number of zero-point iterations.
    :return: The inverse scale and the zero point of every group (keepdims).
    """
    weight = as_float32(weight)
    w_min = fns.min(weight, axis=axis, keepdims=True)
    inverse_scale, zero = min_max_init_for_range(w_min, fns.max(weight, axis=axis, keepdims=True), num_bits)
    return inverse_scale, optimize_zero_point(weight, inverse_scale, zero, axis, num_bits, iterations)


def stored_scale_zero_point(scale: Tensor, zero_point: Tensor) -> tuple[Tensor, Tensor]:
    """
    The scale's magnitude and the float zero point as a model stores them, in float16, as float32.

    :param scale: NNCF's scale (1 / s).
    :param zero_point: The zero point.
    :return: The stored scale and zero point.
    """
    f16, f32 = TensorDataType.float16, TensorDataType.float32
    scale = fns.clip(fns.abs(scale).astype(f32), F16_TINY, F16_MAX).astype(f16).astype(f32)
    return scale, fns.clip(zero_point.astype(f32), -F16_MAX, F16_MAX).astype(f16).astype(f32)
