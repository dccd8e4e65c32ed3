"""
HQQ's solver for asymmetric groups as pure functions over nncf.tensor: the scale of the group's range and the float
zero point of HQQ's iterations.

A group of weights W is quantized as Wq = clip(round(W * s + z), 0, 2^b - 1) and reconstructed as (Wq - z) / s with the
inverse scale s and the float zero point z (HQQ's convention, the solver's); NNCF's scale is 1 / s and its zero point z.
A model stores NNCF's codes of the weight for the scale and zero point of ``stored_scale_zero_point``. Reference: H.
Badri, A. Shaji, "Half-Quadratic Quantization of Large Machine Learning Models", 2023.
"""

import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

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
# Largest block of groups, in elements (4 MiB in float32): a thread runs all iterations of a block, so larger
# blocks leave the caches and smaller ones pay more of Python's cost per operation (and of the threads' hand-overs).
BLOCK_ELEMENTS = 2**20
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


def zero_point_iteration(groups: tuple[Tensor, Tensor, Tensor], zero_out: Tensor, num_bits: int) -> tuple[Tensor, ...]:
    """
    One of HQQ's zero-point iterations on the groups still moving: the nearest codes Wq of the scaled weights u = W s,
    then the zero point that fits them, mean(Wq - u), written into ``zero_out``. A group whose zero point no longer
    changes has converged (its codes, and so its zero point, stay as they are) and leaves.

    :param groups: Indices of the groups (into ``zero_out``), their scaled weights u (a group per row) and zero points.
    :param zero_out: The zero point of every group of the weight, written in place.
    :param num_bits: The number of bits of a code.
    :return: The groups still moving, as ``groups``.
    """
    index, scaled, zero = groups
    codes = fns.clip(fns.round(scaled + zero), 0.0, 2.0**num_bits - 1)
    codes -= scaled
    updated = fns.mean(codes, axis=1, keepdims=True)
    zero_out[index] = updated
    moving = ((updated != zero) & (updated == updated))[:, 0]  # a NaN zero point (from NaN weights) does not move
    return index[moving], scaled[moving], updated[moving]


def row_blocks(groups: int, group_size: int) -> list[slice]:
    """
    Blocks of consecutive groups: one per thread where each gets at least a sixteenth of BLOCK_ELEMENTS, and none
    larger than BLOCK_ELEMENTS (a weight below that is one block, solved on the calling thread).

    :param groups: The number of groups.
    :param group_size: The number of elements of a group.
    :return: The blocks' slices of the groups.
    """
    if group_size == 0:  # groups without elements: nothing to solve, their parameters stay zero
        return []
    per_thread = max(-(-groups * group_size // BLOCK_THREADS), BLOCK_ELEMENTS // 16)
    step = max(1, min(BLOCK_ELEMENTS, per_thread) // group_size)
    return [slice(start, start + step) for start in range(0, groups, step)]


def on_threads(function: Callable[[slice], None], blocks: list[slice]) -> None:
    """
    The function of every block, on min(BLOCK_THREADS, blocks) threads (a single block on the calling thread).

    :param function: The function of a block.
    :param blocks: The blocks.
    """
    if len(blocks) == 1:
        function(blocks[0])
    elif blocks:
        with ThreadPoolExecutor(min(BLOCK_THREADS, len(blocks))) as pool:
            list(pool.map(function, blocks))


def iterate_zero_point(
    index: Tensor, scaled: Tensor, zero: Tensor, zero_out: Tensor, num_bits: int, iterations: int
) -> None:
    """
    HQQ's zero-point iterations with a fixed scale on a block of groups: nearest codes, then the zero point that fits
    them. This is HQQ's half-quadratic solver where its lp shrinkage is inactive: with HQQ's defaults (p = 0.7,
    beta = 10 growing 1.01x an iteration) it zeroes every error below beta^(-1 / (2 - p)), at least 0.147 over 20
    iterations, and an error is about half a step, (max - min) / (2 (2^b - 1)), at most: so on groups of range up to
    4.4 at 4 bits (75 at 8). The update is the least-squares zero point of the current codes, and the nearest codes
    are the least-squares codes of the zero point, so a group's squared error never increases: each group iterates
    until it converges (its zero point no longer changes; a group still alternating between two states of equal
    error after ``iterations``, the cap, keeps the last), without HQQ's early stop on the tensor's mean absolute
    error. A converged group's codes have the mean of its scaled weights: its reconstruction error has zero mean.

    :param index: The groups' indices into ``zero_out``.
    :param scaled: Their scaled weights u = W s, a group per row.
    :param zero: Their initial zero points.
    :param zero_out: The zero point of every group of the weight, written in place.
    :param num_bits: The number of bits of a code.
    :param iterations: The maximal number of iterations.
    """
    groups = (index, scaled, zero)
    for _ in range(iterations):
        groups = zero_point_iteration(groups, zero_out, num_bits)
        if groups[0].size == 0:
            break


def solve_zero_point(weight: Tensor, axis: int, num_bits: int, iterations: int) -> tuple[Tensor, Tensor]:
    """
    HQQ's inverse scale (from the range, ``min_max_init_for_range``) and float zero point (from its iterations,
    ``iterate_zero_point``) of a grouped weight. A thread runs a block of groups from its range to its last
    iteration, so the block stays in the core's caches.

    :param weight: The grouped weight.
    :param axis: The axis of the groups' elements.
    :param num_bits: The number of bits of a code.
    :param iterations: The maximal number of zero-point iterations.
    :return: The inverse scale and the zero point of every group (keepdims).
    """
    axis %= weight.ndim
    shape = (*weight.shape[:axis], *weight.shape[axis + 1 :], 1)
    rows = fns.reshape(fns.moveaxis(as_float32(weight), axis, -1), (math.prod(shape), weight.shape[axis]))
    f32, backend, device = TensorDataType.float32, rows.backend, rows.device
    inverse_scale = fns.zeros((rows.shape[0], 1), backend=backend, dtype=f32, device=device)
    zero = fns.zeros((rows.shape[0], 1), backend=backend, dtype=f32, device=device)

    def solve_block(block: slice) -> None:  # writes the block's own rows of inverse_scale and zero only
        w = rows[block]
        s, z = min_max_init_for_range(fns.min(w, axis=1, keepdims=True), fns.max(w, axis=1, keepdims=True), num_bits)
        inverse_scale[block], zero[block] = s, z
        index = fns.arange(block.start, block.start + w.shape[0], backend=backend, device=device)
        iterate_zero_point(index, w * s, z, zero, num_bits, iterations)

    on_threads(solve_block, row_blocks(*rows.shape))
    inverse_scale, zero = (fns.moveaxis(fns.reshape(x, shape), -1, axis) for x in (inverse_scale, zero))
    return inverse_scale, zero


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
