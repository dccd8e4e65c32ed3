"""The HQQ solver: pure functions over NNCF's backend-agnostic tensors.

Everything here is written in HQQ's convention: a group of weights ``W`` is quantized as
``Wq = clip(round(W * s + z), 0, 2^b - 1)`` and reconstructed as ``(Wq - z) / s``, where ``s`` is the
*inverse* scale and ``z`` the (float) zero point. ``nncf_hqq.maths.conversion`` turns that into NNCF's
``(q - zero_point) * scale`` convention. No model, graph or backend code is imported here, so the same
functions run on numpy and torch tensors.
"""

from __future__ import annotations

from functools import lru_cache

from nncf.tensor import Tensor
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns

from nncf_hqq.parameters import EarlyStopScope
from nncf_hqq.parameters import HQQParameters

#: Upper bound on the inverse scale, as in the reference library (keeps constant groups finite).
MAX_INVERSE_SCALE = 2.0e4
#: Largest |zero point| the initialisation allows (f16 still holds integers exactly up to 2^11). Only groups
#: that lie far from zero on one side, e.g. constant groups, reach it; groups that straddle zero never do.
MAX_ABS_ZERO = 2048.0
#: Added to |x| before raising it to the negative power p - 1 in the lp shrinkage operator.
SHRINK_EPS = 1.0e-8
#: Relative safety margin of the test that the lp shrinkage is inactive (f32 rounding is ~1e-7).
SHRINK_MARGIN = 1.0e-4


def split_into_groups(weight: Tensor, reduction_axis: int, group_size: int) -> tuple[Tensor, int]:
    """Reshapes ``weight`` so that every quantization group lies along the returned axis.

    ``[a, r, b]`` with ``r`` on ``reduction_axis`` becomes ``[a, r // group_size, group_size, b]``; with
    ``group_size == -1`` the whole reduction axis is one group and the weight is returned unchanged.
    """
    reduction_axis = reduction_axis % weight.ndim
    if group_size == -1:
        return weight, reduction_axis
    channels = weight.shape[reduction_axis]
    if channels % group_size != 0:
        msg = f"Channel size {channels} is not divisible by group_size={group_size}."
        raise ValueError(msg)
    shape = list(weight.shape)
    shape[reduction_axis : reduction_axis + 1] = [channels // group_size, group_size]
    return weight.reshape(tuple(shape)), reduction_axis + 1


def levels_max(num_bits: int) -> float:
    """Largest unsigned code ``2^b - 1``."""
    return float(2**num_bits - 1)


def min_max_init(weight: Tensor, axis: int, num_bits: int) -> tuple[Tensor, Tensor]:
    """HQQ's initialisation: inverse scale ``s = (2^b - 1) / (max - min)`` and ``z = -min * s``.

    As in the reference, ``s`` is capped at ``MAX_INVERSE_SCALE``. Beyond the reference, the range is widened
    where ``|z|`` would exceed ``MAX_ABS_ZERO``, so that constant groups (max == min) reconstruct exactly and
    zero points stay representable in f16. Groups with ``min <= 0 <= max`` are never affected.
    """
    return min_max_init_for_range(
        fns.min(weight, axis=axis, keepdims=True), fns.max(weight, axis=axis, keepdims=True), num_bits
    )


def min_max_init_for_range(w_min: Tensor, w_max: Tensor, num_bits: int) -> tuple[Tensor, Tensor]:
    """``min_max_init`` from every group's minimum and maximum weight."""
    q_max = levels_max(num_bits)
    # min(q_max / range, q_max / (|min| * q_max / MAX_ABS_ZERO), MAX_INVERSE_SCALE) without a division by zero.
    widened = fns.maximum(w_max - w_min, fns.abs(w_min) * (q_max / MAX_ABS_ZERO))
    inverse_scale = q_max / fns.maximum(widened, q_max / MAX_INVERSE_SCALE)
    zero = -w_min * inverse_scale
    return inverse_scale, zero


def quantize(weight: Tensor, inverse_scale: Tensor, zero: Tensor, num_bits: int) -> Tensor:
    """Integer codes ``clip(round(W * s + z), 0, 2^b - 1)`` (kept in the weight's float dtype)."""
    return fns.clip(fns.round(weight * inverse_scale + zero), 0.0, levels_max(num_bits))


def dequantize(codes: Tensor, inverse_scale: Tensor, zero: Tensor) -> Tensor:
    """Reconstruction ``(Wq - z) / s``."""
    return (codes - zero) / inverse_scale


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


def weighted_mean(x: Tensor, importance: Tensor | None, axis: int | None) -> Tensor:
    """Mean over ``axis`` (keepdims; ``None``: the whole tensor), weighted by ``importance`` when given."""
    if importance is None:
        return fns.mean(x) if axis is None else fns.mean(x, axis=axis, keepdims=True)
    # The importance broadcasts against x: its own sums give the normalisers without a full-size temporary.
    if axis is None:
        return fns.sum(x * importance) / (fns.sum(importance) * (x.size / importance.size))
    total = fns.sum(importance, axis=axis, keepdims=True)
    if importance.shape[axis] == 1:
        total = total * x.shape[axis]
    return fns.sum(x * importance, axis=axis, keepdims=True) / total


def zero_point_update(
    weight: Tensor, codes: Tensor, error: Tensor, inverse_scale: Tensor, axis: int, importance: Tensor | None = None
) -> Tensor:
    """Closed-form zero point minimising ``||Wq - (W - We) * s - z||^2`` over a group: its (weighted) mean."""
    return weighted_mean(codes - (weight - error) * inverse_scale, importance, axis)


def mean_absolute_error(
    weight: Tensor, reconstruction: Tensor, axis: int | None, importance: Tensor | None = None
) -> Tensor:
    """(Importance-weighted) mean absolute error over the whole tensor (``axis=None``) or per group."""
    return weighted_mean(fns.abs(weight - reconstruction), importance, axis)


def keep_best(
    error: Tensor, best_error: Tensor, value: Tensor, best_value: Tensor, active: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Best-iterate bookkeeping of the proximal loops: where a still-active group (or tensor) improved, its error
    and parameter become the best ones. Returns ``(improved, best_error, best_value)``."""
    improved = (error < best_error) & active
    return improved, fns.where(improved, error, best_error), fns.where(improved, value, best_value)


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
        update = zero_point_update(weight, codes, shrunk, inverse_scale, axis, importance)
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


def least_squares_scale_zero(
    weight: Tensor, codes: Tensor, axis: int, importance: Tensor | None, previous: tuple[Tensor, Tensor]
) -> tuple[Tensor, Tensor]:
    """Best ``(s, z)`` for fixed codes: the weighted linear regression ``W ~ a * Wq + b``, ``s = 1/a``, ``z = -b/a``.

    Groups where the regression is degenerate (all codes equal) or not increasing keep ``previous``.
    """
    mean_codes = weighted_mean(codes, importance, axis)
    mean_weight = weighted_mean(weight, importance, axis)
    centred = codes - mean_codes
    variance = weighted_mean(centred * centred, importance, axis)
    covariance = weighted_mean(centred * (weight - mean_weight), importance, axis)
    valid = (variance > 0.0) & (covariance > 0.0)
    slope = fns.where(valid, covariance, 1.0) / fns.where(valid, variance, 1.0)
    inverse_scale = fns.where(valid, 1.0 / slope, previous[0])
    zero = fns.where(valid, mean_codes - mean_weight / slope, previous[1])
    return inverse_scale, zero


def least_squares_scale_for_zero(
    weight: Tensor, codes: Tensor, zero: Tensor, axis: int, importance: Tensor | None, previous: Tensor
) -> Tensor:
    """Best inverse scale for fixed codes and zero point: ``a = <W, Wq - z> / <Wq - z, Wq - z>``, ``s = 1/a``."""
    shifted = codes - zero
    numerator = weighted_mean(weight * shifted, importance, axis)
    denominator = weighted_mean(shifted * shifted, importance, axis)
    valid = (denominator > 0.0) & (numerator > 0.0)
    return fns.where(valid, fns.where(valid, denominator, 1.0) / fns.where(valid, numerator, 1.0), previous)


def cap_inverse_scale_to_extremes(
    weight: Tensor, inverse_scale: Tensor, zero: Tensor, axis: int, num_bits: int
) -> Tensor:
    """Lowers ``s`` where needed so that each group's min and max land within half a step of the code range,
    i.e. are never clipped. Groups where no positive ``s`` achieves that (``z`` outside the range) keep ``s``.
    """
    q_max = levels_max(num_bits)
    w_min = fns.min(weight, axis=axis, keepdims=True)
    w_max = fns.max(weight, axis=axis, keepdims=True)
    no_cap = float(MAX_INVERSE_SCALE)
    upper = fns.where(w_max > 0.0, (q_max + 0.5 - zero) / fns.where(w_max > 0.0, w_max, 1.0), no_cap)
    lower = fns.where(w_min < 0.0, (zero + 0.5) / fns.where(w_min < 0.0, -w_min, 1.0), no_cap)
    cap = fns.minimum(upper, lower)
    return fns.where(cap > 0.0, fns.minimum(inverse_scale, cap), inverse_scale)


def refine_least_squares(
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
    """Alternates nearest codes and a least-squares refit of the scale (and of the zero point, unless it must
    stay an integer code), keeping every group's best iterate by (weighted) squared error.

    With ``integer_zero`` the zero point is first rounded to the nearest code and then only the scale is refit,
    so the optimisation happens under the integer constraint instead of rounding at the end. With
    ``preserve_extremes`` every candidate is first projected so that the group's min and max are not clipped.
    """
    weight = weight.astype(TensorDataType.float32)

    def project(s: Tensor, z: Tensor) -> Tensor:
        return cap_inverse_scale_to_extremes(weight, s, z, axis, num_bits) if preserve_extremes else s

    if integer_zero:
        zero = fns.clip(fns.round(zero), 0.0, levels_max(num_bits))
    inverse_scale = project(inverse_scale, zero)

    def codes_and_error(s: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        codes = quantize(weight, s, z, num_bits)
        diff = dequantize(codes, s, z) - weight
        return codes, weighted_mean(diff * diff, importance, axis)

    best = (inverse_scale, zero)
    codes, best_error = codes_and_error(inverse_scale, zero)
    for _ in range(rounds):
        if integer_zero:
            inverse_scale = least_squares_scale_for_zero(weight, codes, zero, axis, importance, inverse_scale)
        else:
            inverse_scale, zero = least_squares_scale_zero(weight, codes, axis, importance, (inverse_scale, zero))
        inverse_scale = project(inverse_scale, zero)
        codes, error = codes_and_error(inverse_scale, zero)
        better = error < best_error
        best = (fns.where(better, inverse_scale, best[0]), fns.where(better, zero, best[1]))
        best_error = fns.where(better, error, best_error)
    return best


def rtn_scale_zero_point(weight: Tensor, axis: int, num_bits: int) -> tuple[Tensor, Tensor]:
    """NNCF's round-to-nearest parameters, in NNCF's convention ``W ~ (q - zero_point) * scale``.

    The range always contains 0 (``[min(0, min), max(0, max)]``) and the zero point is an integer code.
    """
    weight = weight.astype(TensorDataType.float32)
    return rtn_scale_zero_point_for_range(
        fns.min(weight, axis=axis, keepdims=True), fns.max(weight, axis=axis, keepdims=True), num_bits
    )


def rtn_scale_zero_point_for_range(w_min: Tensor, w_max: Tensor, num_bits: int) -> tuple[Tensor, Tensor]:
    """``rtn_scale_zero_point`` from every group's minimum and maximum weight."""
    w_min = fns.minimum(w_min, 0.0)
    w_max = fns.maximum(w_max, 0.0)
    q_max = levels_max(num_bits)
    scale = (w_max - w_min) / q_max
    eps = float(fns.finfo(scale).eps)
    scale = fns.where(fns.abs(scale) < eps, eps, scale)
    zero_point = fns.clip(-fns.round(w_min / scale), 0.0, q_max)
    return scale, zero_point


def output_projections(values: Tensor, activations: Tensor) -> Tensor:
    """Per group, the outputs ``sum_k values[..., o, g, k] * activations[..., g, k, t]`` as ``[..., g, o, t]``.

    :param values: grouped weights (or shifted codes) in the layout ``[..., out, groups, group_size]``.
    :param activations: calibration inputs grouped as ``[..., groups, group_size, samples]``.
    """
    return fns.matmul(fns.moveaxis(values, -3, -2), activations)


def equivalent_inputs(activations: Tensor) -> Tensor:
    """Inputs ``R`` ``[..., n, n]`` with ``R R^T = X X^T`` for calibration inputs ``X`` ``[..., n, samples]``
    (from the eigendecomposition of ``X X^T``, in float64). The output error ``||d X||^2 = d X X^T d^T`` and the
    least-squares sums of ``refine_scale_on_activations`` depend on ``X`` only through ``X X^T``, so they are the
    same on ``R``, which has ``n`` columns instead of ``samples``: fewer whenever ``samples > n``."""
    inputs = activations.astype(TensorDataType.float64)
    second_moment = fns.matmul(inputs, fns.moveaxis(inputs, -1, -2))
    vectors, values, _ = fns.linalg.svd(second_moment, full_matrices=False)  # symmetric PSD: U S U^T
    return (vectors * fns.expand_dims(fns.maximum(values, 0.0) ** 0.5, -2)).astype(TensorDataType.float32)


def activation_error(
    weight_outputs: Tensor, weight: Tensor, inverse_scale: Tensor, zero: Tensor, activations: Tensor, num_bits: int
) -> tuple[Tensor, Tensor]:
    """Per ``(out, group)`` squared output error on the calibration inputs, and the shifted-code projections."""
    shifted = quantize(weight, inverse_scale, zero, num_bits) - zero
    projections = output_projections(shifted, activations)
    residual = projections / fns.moveaxis(inverse_scale, -3, -2) - weight_outputs
    return fns.sum(residual * residual, axis=-1), projections


def refine_scale_on_activations(
    weight: Tensor,
    inverse_scale: Tensor,
    zero: Tensor,
    activations: Tensor,
    num_bits: int,
    rounds: int,
    scale_factors: tuple[float, ...] = (1.0,),
) -> Tensor:
    """Data-aware scale refinement that keeps the zero points: minimises the group's output error on
    calibration inputs ``||X^T ((Wq - z)/s - W)||^2`` over ``s`` by alternating nearest codes and the closed-form
    least-squares ``1/s = <P, Q> / <P, P>`` (P: outputs of the shifted codes, Q: outputs of the float weights).

    Every start ``s / f`` for ``f`` in ``scale_factors`` is refined; each ``(out, group)`` keeps its best
    candidate, the incoming ``s`` included. Layout: ``weight`` ``[..., out, groups, group_size]``,
    ``inverse_scale``/``zero`` ``[..., out, groups, 1]``, ``activations`` ``[..., groups, group_size, samples]``.
    """
    weight = weight.astype(TensorDataType.float32)
    weight_outputs = output_projections(weight, activations)
    best_error, _ = activation_error(weight_outputs, weight, inverse_scale, zero, activations, num_bits)
    best = fns.moveaxis(inverse_scale, -3, -2)[..., 0]  # [..., groups, out]
    for factor in scale_factors:
        candidate = inverse_scale / factor
        _, projections = activation_error(weight_outputs, weight, candidate, zero, activations, num_bits)
        for _ in range(rounds):
            numerator = fns.sum(projections * weight_outputs, axis=-1)
            denominator = fns.sum(projections * projections, axis=-1)
            valid = (numerator > 0.0) & (denominator > 0.0)
            refit = fns.where(valid, denominator, 1.0) / fns.where(valid, numerator, 1.0)
            previous = fns.moveaxis(candidate, -3, -2)[..., 0]
            candidate = fns.moveaxis(fns.where(valid, refit, previous)[..., None], -3, -2)
            error, projections = activation_error(weight_outputs, weight, candidate, zero, activations, num_bits)
            better = error < best_error
            best = fns.where(better, fns.moveaxis(candidate, -3, -2)[..., 0], best)
            best_error = fns.where(better, error, best_error)
    return fns.moveaxis(best[..., None], -3, -2)


def signed_levels(num_bits: int) -> tuple[float, float]:
    """Code range ``[-2^(b-1), 2^(b-1) - 1]`` of symmetric quantization."""
    half = float(2 ** (num_bits - 1))
    return -half, half - 1.0


def symmetric_init(weight: Tensor, axis: int, num_bits: int) -> Tensor:
    """NNCF's signed scale (convention ``W ~ q * scale``): the larger-magnitude end of the group maps to code
    ``-2^(b-1)``, so the scale is negative when the maximum outweighs the minimum's magnitude."""
    return symmetric_init_for_range(
        fns.min(weight, axis=axis, keepdims=True), fns.max(weight, axis=axis, keepdims=True), num_bits
    )


def symmetric_init_for_range(w_min: Tensor, w_max: Tensor, num_bits: int) -> Tensor:
    """``symmetric_init`` from every group's minimum and maximum weight."""
    low, _ = signed_levels(num_bits)
    w_abs_min = fns.abs(w_min)
    scale = fns.where(w_abs_min >= w_max, w_abs_min, -w_max) / -low
    eps = float(fns.finfo(scale).eps)
    return fns.where(fns.abs(scale) < eps, eps, scale)


def symmetric_codes(weight: Tensor, scale: Tensor, num_bits: int) -> Tensor:
    """``clip(round(W / scale), -2^(b-1), 2^(b-1) - 1)`` (float dtype)."""
    low, high = signed_levels(num_bits)
    return fns.clip(fns.round(weight / scale), low, high)


def floor_symmetric_scale_to_extremes(weight: Tensor, scale: Tensor, axis: int, num_bits: int) -> Tensor:
    """Raises ``|scale|`` where needed so that each group's min and max land within half a step of the code
    range ``[-2^(b-1), 2^(b-1) - 1]``, i.e. are never clipped (the sign of the scale says which end of the group
    takes the negative codes). The symmetric counterpart of ``cap_inverse_scale_to_extremes``."""
    w_min = fns.min(weight, axis=axis, keepdims=True)
    w_max = fns.max(weight, axis=axis, keepdims=True)
    return signed_magnitude(scale, fns.maximum(fns.abs(scale), symmetric_scale_floor(w_min, w_max, scale, num_bits)))


def symmetric_scale_floor(w_min: Tensor, w_max: Tensor, scale: Tensor, num_bits: int) -> Tensor:
    """The smallest ``|scale|`` that clips neither end of a group with this minimum and maximum, for a scale of
    this sign (which says the end that maps to negative codes)."""
    low, high = signed_levels(num_bits)
    w_min, w_max = fns.abs(w_min), fns.abs(w_max)
    negative_end = fns.where(scale > 0.0, w_min, w_max)
    positive_end = fns.where(scale > 0.0, w_max, w_min)
    return fns.maximum(negative_end / (-low + 0.5), positive_end / (high + 0.5))


#: Bounds of the unit-gain factor (``unit_gain_factor``): a group whose reconstruction is nearly orthogonal to its
#: weight (a degenerate fit) is not rescaled by more than this.
UNIT_GAIN_LIMITS = (0.5, 2.0)


def unit_gain_factor(weight: Tensor, reconstruction: Tensor, axis: int) -> Tensor:
    """Per group ``c = <W, W> / <W_hat, W>``: ``c * W_hat`` reproduces the weight with unit gain along itself
    (``<c W_hat, W> = <W, W>``), so the error of the scaled reconstruction is orthogonal to the weight.

    A least-squares fit leaves its error orthogonal to the reconstruction instead, which attenuates every group by
    ``||W_hat||^2 / ||W||^2 = 1 - ||r||^2 / ||W||^2``.
    """
    return unit_gain(group_inner_product(weight, weight, axis), group_inner_product(reconstruction, weight, axis))


def unit_gain_factor_for_codes(
    weight: Tensor, codes: Tensor, scale: Tensor, zero_point: Tensor | None, axis: int
) -> Tensor:
    """``unit_gain_factor`` of the reconstruction ``(q - zero_point) * scale`` without forming it:
    ``<W_hat, W> = scale * (<q, W> - zero_point * sum(W))``."""
    cross = group_inner_product(codes.astype(TensorDataType.float32), weight, axis)
    if zero_point is not None:
        cross = cross - zero_point.astype(TensorDataType.float32) * fns.sum(weight, axis=axis, keepdims=True)
    return unit_gain(group_inner_product(weight, weight, axis), scale.astype(TensorDataType.float32) * cross)


def unit_gain(energy: Tensor, projection: Tensor) -> Tensor:
    """``energy / projection``; 1 where ``projection <= 0`` (nothing to match), clipped to ``UNIT_GAIN_LIMITS``."""
    usable = projection > 0.0
    return fns.clip(fns.where(usable, energy / fns.where(usable, projection, 1.0), 1.0), *UNIT_GAIN_LIMITS)


def group_inner_product(a: Tensor, b: Tensor, axis: int) -> Tensor:
    """Per group ``sum(a * b)`` along ``axis`` (kept), as one batched matrix product (no elementwise product)."""
    rows, columns = fns.moveaxis(a, axis, -1), fns.moveaxis(b, axis, -1)
    product = fns.matmul(rows[..., None, :], columns[..., :, None])[..., 0]
    return fns.moveaxis(product, -1, axis)


def signed_magnitude(sign_of: Tensor, magnitude: Tensor) -> Tensor:
    """``magnitude`` with the sign of ``sign_of`` (positive where it is 0)."""
    return fns.where(sign_of < 0.0, -magnitude, magnitude)


def least_squares_symmetric_scale(
    codes: Tensor, target: Tensor, scale: Tensor, axis: int, importance: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Per group the scale ``<q, T> / <q, q>`` minimising ``||T - q * scale||^2`` for fixed codes, and the mask of
    the groups where it is usable: ``<q, q> > 0`` and the sign of the current ``scale``."""
    numerator = weighted_mean(codes * target, importance, axis)
    denominator = weighted_mean(codes * codes, importance, axis)
    valid = (denominator > 0.0) & (numerator * scale > 0.0)
    return numerator / fns.where(valid, denominator, 1.0), valid


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


def refine_symmetric_scale(
    weight: Tensor,
    scale: Tensor,
    axis: int,
    num_bits: int,
    rounds: int,
    importance: Tensor | None = None,
    preserve_extremes: bool = False,
) -> Tensor:
    """Alternating nearest codes and the least-squares scale ``<q, W> / <q, q>``, best iterate per group. With
    ``preserve_extremes`` no update may clip a group's min or max (``floor_symmetric_scale_to_extremes``)."""
    weight = weight.astype(TensorDataType.float32)
    if preserve_extremes:
        scale = floor_symmetric_scale_to_extremes(weight, scale, axis, num_bits)

    def group_error(s: Tensor) -> Tensor:
        diff = symmetric_codes(weight, s, num_bits) * s - weight
        return weighted_mean(diff * diff, importance, axis)

    best, best_error = scale, group_error(scale)
    for _ in range(rounds):
        codes = symmetric_codes(weight, scale, num_bits)
        update, valid = least_squares_symmetric_scale(codes, weight, scale, axis, importance)
        scale = fns.where(valid, update, scale)
        if preserve_extremes:
            scale = floor_symmetric_scale_to_extremes(weight, scale, axis, num_bits)
        error = group_error(scale)
        better = error < best_error
        best, best_error = fns.where(better, scale, best), fns.where(better, error, best_error)
    return best
