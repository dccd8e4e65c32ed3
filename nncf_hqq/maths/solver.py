"""The HQQ solver's configurable variants: pure functions over NNCF's backend-agnostic tensors.

The published solver (its lp shrinkage, early stop per group, the zero point after the last improvement, a weighted
proximal loop) and the symmetric solver, on top of the core solver of ``nncf_hqq.maths.core`` (the maths the NNCF
pull request adds as it is). HQQ's convention: a group of weights ``W`` is quantized as
``Wq = clip(round(W * s + z), 0, 2^b - 1)`` and reconstructed as ``(Wq - z) / s``, where ``s`` is the *inverse*
scale and ``z`` the (float) zero point. No model, graph or backend code is imported here, so the same functions run
on numpy and torch tensors.
"""

from __future__ import annotations

from functools import lru_cache

from nncf.tensor import Tensor
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns

from nncf_hqq.maths.core import dequantize
from nncf_hqq.maths.core import group_inner_product
from nncf_hqq.maths.core import keep_best
from nncf_hqq.maths.core import mean_absolute_error
from nncf_hqq.maths.core import min_max_init_for_range
from nncf_hqq.maths.core import quantize
from nncf_hqq.maths.core import refine_weighted_least_squares
from nncf_hqq.maths.core import unit_gain
from nncf_hqq.maths.core import weighted_mean
from nncf_hqq.maths.data_free_steps import map_row_blocks
from nncf_hqq.maths.integer import floor_symmetric_scale_to_extremes
from nncf_hqq.maths.integer import least_squares_symmetric_scale
from nncf_hqq.maths.integer import optimize_scale
from nncf_hqq.maths.integer import refine_with_integer_zero
from nncf_hqq.maths.integer import symmetric_codes
from nncf_hqq.maths.zero_point_solver import iterate_zero_point
from nncf_hqq.maths.zero_point_solver import on_threads
from nncf_hqq.maths.zero_point_solver import row_blocks
from nncf_hqq.parameters import EarlyStopScope
from nncf_hqq.parameters import HQQParameters

#: Added to |x| before raising it to the negative power p - 1 in the lp shrinkage operator.
SHRINK_EPS = 1.0e-8
#: Relative safety margin of the test that the lp shrinkage is inactive (f32 rounding is ~1e-7).
SHRINK_MARGIN = 1.0e-4


def zero_point_update(
    weight: Tensor, codes: Tensor, inverse_scale: Tensor, axis: int, importance: Tensor | None = None
) -> Tensor:
    """
    The zero point minimising ||Wq - W * s - z||^2 for fixed codes: the mean of Wq - W * s over every group.

    :param weight: The grouped weight.
    :param codes: The codes Wq.
    :param inverse_scale: The inverse scale s of every group.
    :param axis: The axis of the groups' elements.
    :param importance: Optional weights of the elements.
    :return: The zero point of every group.
    """
    return weighted_mean(codes - weight * inverse_scale, importance, axis)


def shrink_lp(x: Tensor, beta: float, p: float) -> Tensor:
    """Proximal operator of the lp quasi-norm (generalised soft thresholding) used by HQQ.

    ``sign(x) * max(|x| - |x|^(p-1) / beta, 0)``; for p == 1 this is ordinary soft thresholding. When no element
    exceeds the shrinkage-free bound (the usual case for LLM weights) the result is all zeros, returned without
    evaluating the power.
    """
    magnitude = fns.abs(x)
    if x.size and fns.max(magnitude).item() <= shrink_free_bound(beta, p) * (1.0 - SHRINK_MARGIN):
        return fns.zeros_like(x)
    if p == 1.0:
        threshold = fns.zeros_like(magnitude) + 1.0 / beta
    else:
        threshold = fns.power(magnitude + SHRINK_EPS, p - 1.0) / beta
    return fns.sign(x) * fns.maximum(magnitude - threshold, 0.0)


def sparse_error(error: Tensor, beta: float, params: HQQParameters) -> Tensor:
    """HQQ's sparse error term ``We``: the lp shrinkage of the reconstruction error (the published solver), or
    zeros without ``params.shrinkage`` (every update is then the least-squares one for the current codes)."""
    return shrink_lp(error, beta, params.lp_norm) if params.shrinkage else fns.zeros_like(error)


@lru_cache(maxsize=256)
def shrink_free_bound(beta: float, p: float) -> float:
    """Largest |error| ``x`` with ``x <= (x + eps)^(p - 1) / beta``: up to it the lp shrinkage returns 0.

    The left side grows and the right side falls with ``x``, so a bisection finds the crossing.
    """
    if p == 1.0:
        return 1.0 / beta
    low, high = 0.0, 1.0
    while high <= (high + SHRINK_EPS) ** (p - 1.0) / beta:
        high *= 2.0
    for _ in range(200):
        middle = 0.5 * (low + high)
        if middle <= (middle + SHRINK_EPS) ** (p - 1.0) / beta:
            low = middle
        else:
            high = middle
    return low


def min_max_init(weight: Tensor, axis: int, num_bits: int) -> tuple[Tensor, Tensor]:
    """HQQ's min/max initialisation of grouped ``weight`` (``core.min_max_init_for_range``): ``(s, z)``, keepdims."""
    w_min = fns.min(weight, axis=axis, keepdims=True)
    return min_max_init_for_range(w_min, fns.max(weight, axis=axis, keepdims=True), num_bits)


def refine_scale_and_zero(
    weight: Tensor,
    inverse_scale: Tensor,
    zero: Tensor,
    axis: int,
    num_bits: int,
    rounds: int,
    importance: Tensor | None = None,
    integer_zero: bool = False,
    preserve_extremes: bool = False,
) -> tuple[Tensor, Tensor]:
    """``core.refine_weighted_least_squares``, or with ``integer_zero`` its variant for an integer zero point: the zero
    point rounded to the nearest code first and only the scale refined under it (``integer.refine_with_integer_zero``).
    """
    if not integer_zero:
        return refine_weighted_least_squares(
            weight, inverse_scale, zero, axis, num_bits, rounds, importance, preserve_extremes
        )
    return refine_with_integer_zero(weight, inverse_scale, zero, axis, num_bits, rounds, importance, preserve_extremes)


def unit_gain_factor(weight: Tensor, reconstruction: Tensor, axis: int) -> Tensor:
    """Per group ``c = <W, W> / <W_hat, W>``: ``c * W_hat`` reproduces the weight with unit gain along itself
    (``core.unit_gain_factor_for_codes`` without the codes)."""
    return unit_gain(group_inner_product(weight, weight, axis), group_inner_product(reconstruction, weight, axis))


def is_core_loop(params: HQQParameters) -> bool:
    """Whether the proximal loop of ``params`` is the core solver's (``optimize_zero_point``, NNCF's
    ``hqq_solver``): no lp shrinkage, no early stop (each group iterates until it converges), the last iterate."""
    return not params.shrinkage and not params.early_stop and not params.return_best


def is_tensor_stop_loop(params: HQQParameters) -> bool:
    """Whether the proximal loop of ``params`` is ``optimize_zero_point_tensor_stop``'s: no lp shrinkage, early stop
    on the whole tensor, the best iterate returned."""
    tensor = params.early_stop_scope == EarlyStopScope.TENSOR
    return not params.shrinkage and params.early_stop and tensor and params.return_best


def optimize_zero_point(
    weight: Tensor, inverse_scale: Tensor, zero: Tensor, axis: int, num_bits: int, iterations: int
) -> Tensor:
    """The core solver's zero-point iterations (``zero_point_solver.iterate_zero_point``: each group until it
    converges, at most ``iterations`` times) from a given scale and zero point; the last zero point of every group."""
    rows, s, z = (fns.reshape(fns.moveaxis(x, axis, -1), (-1, x.shape[axis])) for x in (weight, inverse_scale, zero))
    zero_out = z.clone()

    def solve_block(block: slice) -> None:
        index = fns.arange(block.start, block.start + s[block].shape[0], backend=z.backend, device=z.device)
        iterate_zero_point(index, rows[block] * s[block], z[block], zero_out, num_bits, iterations)

    on_threads(solve_block, row_blocks(*rows.shape))
    return fns.moveaxis(fns.reshape(zero_out, fns.moveaxis(zero, axis, -1).shape), -1, axis)


def optimize_zero_point_tensor_stop(
    weight: Tensor, inverse_scale: Tensor, zero: Tensor, axis: int, num_bits: int, iterations: int
) -> Tensor:
    """HQQ's zero-point iterations as published, until the mean absolute error of the whole tensor stops decreasing
    (the core solver's ``optimize_zero_point`` stops each group on its own). A group whose zero point no longer
    changes has reached its fixed point (its codes and error stay as they are), so each iteration only computes the
    groups still moving. The zero point of the best iterate is returned."""
    rows, s, z = (fns.reshape(fns.moveaxis(x, axis, -1), (-1, x.shape[axis])) for x in (weight, inverse_scale, zero))
    best_zero, group_error, best_error = z.clone(), fns.zeros_like(z), float("inf")
    moving = fns.arange(z.shape[0], backend=z.backend, device=z.device)

    def step(rows: Tensor, s: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        scaled = rows * s
        codes = fns.clip(fns.round(scaled + z), 0.0, 2.0**num_bits - 1)
        error = fns.mean(fns.abs(rows - (codes - z) / s), axis=1, keepdims=True)  # W - (Wq - z) / s
        return error, fns.mean(codes - scaled, axis=1, keepdims=True)

    for _ in range(iterations):
        group_error[moving], updated = map_row_blocks(step, rows, s, z)
        error = fns.mean(group_error).item()
        if not error < best_error:
            break
        best_error, best_zero[moving] = error, z
        still = (updated != z)[:, 0]
        moving, rows, s, z = moving[still], rows[still], s[still], updated[still]
        if moving.size == 0:
            break
    return fns.moveaxis(fns.reshape(best_zero, fns.moveaxis(zero, axis, -1).shape), -1, axis)


def optimize_zero_point_proximal(
    weight: Tensor,
    inverse_scale: Tensor,
    zero: Tensor,
    axis: int,
    num_bits: int,
    params: HQQParameters,
    importance: Tensor | None = None,
) -> Tensor:
    """HQQ's half-quadratic proximal loop over the zero point (the scale stays fixed).

    Each iteration quantizes with the current zero point, shrinks the reconstruction error with the lp
    proximal operator and takes the closed-form zero-point update. With ``early_stop`` a group (or the
    whole tensor) stops once its mean absolute error no longer decreases; with ``return_best`` the zero
    point of its best evaluated iterate is returned, otherwise the published behaviour (the zero point of
    the step after the last improvement) is reproduced. ``importance`` (broadcastable to ``weight``) turns the
    zero-point update and the error into weighted means.
    """
    weight = weight.astype(TensorDataType.float32)
    if (is_core_loop(params) or is_tensor_stop_loop(params)) and importance is None:
        loop = optimize_zero_point if is_core_loop(params) else optimize_zero_point_tensor_stop
        return loop(weight, inverse_scale, zero, axis, num_bits, params.iterations)
    error_axis = axis if params.early_stop_scope == EarlyStopScope.GROUP else None
    beta = params.beta
    best_error = mean_absolute_error(weight, weight, error_axis) + float("inf")
    best_zero = zero
    active = fns.zeros_like(best_error) == 0.0
    for _ in range(params.iterations):
        codes = quantize(weight, inverse_scale, zero, num_bits)
        reconstruction = dequantize(codes, inverse_scale, zero)
        error = mean_absolute_error(weight, reconstruction, error_axis, importance)
        improved, best_error, best_zero = keep_best(error, best_error, zero, best_zero, active)
        shrunk = sparse_error(weight - reconstruction, beta, params)
        update = zero_point_update(weight - shrunk, codes, inverse_scale, axis, importance)
        zero = fns.where(active, update, zero)
        beta *= params.kappa
        if params.early_stop:
            active = improved
            if not fns.any(active):
                break
    return best_zero if params.return_best else zero


def hqq_solve(
    weight: Tensor, axis: int, num_bits: int, params: HQQParameters, importance: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Published HQQ for grouped weights: min/max initialisation, then the proximal zero-point loop.

    :param weight: weights with every group along ``axis`` (see ``split_into_groups``).
    :param importance: optional per-element weights of the objective, broadcastable to ``weight``.
    :return: inverse scale and float zero point, both with ``axis`` kept as size 1.
    """
    weight = weight.astype(TensorDataType.float32)
    inverse_scale, zero = min_max_init(weight, axis, num_bits)
    zero = optimize_zero_point_proximal(weight, inverse_scale, zero, axis, num_bits, params, importance)
    return inverse_scale, zero


def group_squared_error(
    weight: Tensor, inverse_scale: Tensor, zero: Tensor, axis: int, num_bits: int, importance: Tensor | None
) -> Tensor:
    """Per-group (importance-weighted) mean squared reconstruction error, keepdims."""
    diff = dequantize(quantize(weight, inverse_scale, zero, num_bits), inverse_scale, zero) - weight
    return weighted_mean(diff * diff, importance, axis)


def scale_proximal_step(
    weight: Tensor,
    scale: Tensor,
    axis: int,
    error_axis: int | None,
    num_bits: int,
    beta: float,
    params: HQQParameters,
    importance: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """One iteration of ``optimize_scale_proximal`` without its bookkeeping: the mean absolute error of ``scale``
    (per group, or of the tensor with ``error_axis=None``) and the next scale (invalid updates keep the current
    scale; floored to the extremes with ``params.preserve_extremes``)."""
    codes = symmetric_codes(weight, scale, num_bits)
    error = mean_absolute_error(weight, codes * scale, error_axis, importance)
    target = weight - sparse_error(weight - codes * scale, beta, params)
    update, valid = least_squares_symmetric_scale(codes, target, scale, axis, importance)
    update = fns.where(valid, update, scale)
    if params.preserve_extremes:
        update = floor_symmetric_scale_to_extremes(weight, update, axis, num_bits)
    return error, update


def optimize_scale_proximal(
    weight: Tensor, scale: Tensor, axis: int, num_bits: int, params: HQQParameters, importance: Tensor | None = None
) -> Tensor:
    """HQQ's proximal loop for symmetric quantization, where the scale is the only parameter: shrink the error
    with the lp operator, then take the closed-form scale ``<q, W - We> / <q, q>`` for the current codes. Early
    stop and best iterate as in ``optimize_zero_point_proximal``; groups whose update is degenerate keep theirs."""
    if is_core_loop(params):
        return optimize_scale(weight, scale, axis, num_bits, params.iterations, importance, params.preserve_extremes)
    weight = weight.astype(TensorDataType.float32)
    if params.preserve_extremes:  # NNCF's symmetric init itself clips the other end when it lies beyond 7.5 steps
        scale = floor_symmetric_scale_to_extremes(weight, scale, axis, num_bits)
    error_axis = axis if params.early_stop_scope == EarlyStopScope.GROUP else None
    beta = params.beta
    best_error = mean_absolute_error(weight, weight, error_axis) + float("inf")
    best_scale, active = scale, fns.zeros_like(best_error) == 0.0
    for _ in range(params.iterations):
        error, update = scale_proximal_step(weight, scale, axis, error_axis, num_bits, beta, params, importance)
        improved, best_error, best_scale = keep_best(error, best_error, scale, best_scale, active)
        scale = fns.where(active, update, scale)
        beta *= params.kappa
        if params.early_stop:
            active = improved
            if not fns.any(active):
                break
    return best_scale if params.return_best else scale
