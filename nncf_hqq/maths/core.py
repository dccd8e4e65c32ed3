"""
Half-Quadratic Quantization (HQQ) of grouped weights as pure functions over nncf.tensor.

A group of weights W is quantized as Wq = clip(round(W * s + z), 0, 2^b - 1) and reconstructed as (Wq - z) / s with
the inverse scale s and the float zero point z (HQQ's convention); NNCF's scale is 1 / s. Reference: H. Badri,
A. Shaji, "Half-Quadratic Quantization of Large Machine Learning Models", 2023.
"""

from nncf.quantization.algorithms.weight_compression.parameters import CompressedWeight
from nncf.tensor import Tensor
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns

# Upper bound of the inverse scale (keeps constant groups finite).
MAX_INVERSE_SCALE = 2.0e4
# Largest |zero point| of the initialisation: f16 holds integers exactly up to 2^11.
MAX_ABS_ZERO = 2048.0
# Largest finite and smallest positive float16 values.
F16_MAX = 65504.0
F16_TINY = 2.0**-24
# Bounds of the unit-gain factor of a group.
UNIT_GAIN_LIMITS = (0.5, 2.0)


def split_into_groups(weight: Tensor, reduction_axis: int, group_size: int) -> tuple[Tensor, int]:
    """[a, r, b] as [a, r // group_size, group_size, b], and the axis of the groups."""
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
    return float(2**num_bits - 1)


def min_max_init_for_range(w_min: Tensor, w_max: Tensor, num_bits: int) -> tuple[Tensor, Tensor]:
    """HQQ's s = (2^b - 1) / (max - min) and z = -min * s, s capped, the range widened for a large |z|."""
    q_max = levels_max(num_bits)
    widened = fns.maximum(w_max - w_min, fns.abs(w_min) * (q_max / MAX_ABS_ZERO))
    inverse_scale = q_max / fns.maximum(widened, q_max / MAX_INVERSE_SCALE)
    return inverse_scale, -w_min * inverse_scale


def quantize(weight: Tensor, inverse_scale: Tensor, zero: Tensor, num_bits: int) -> Tensor:
    return fns.clip(fns.round(weight * inverse_scale + zero), 0.0, levels_max(num_bits))


def dequantize(codes: Tensor, inverse_scale: Tensor, zero: Tensor) -> Tensor:
    return (codes - zero) / inverse_scale


def weighted_mean(x: Tensor, importance: Tensor | None, axis: int | None) -> Tensor:
    """The mean over the axis (keepdims) or of the tensor (axis None), weighted by the importance if given."""
    if importance is None:
        return fns.mean(x) if axis is None else fns.mean(x, axis=axis, keepdims=True)
    if axis is None:
        return fns.sum(x * importance) / (fns.sum(importance) * (x.size / importance.size))
    total = fns.sum(importance, axis=axis, keepdims=True)
    if importance.shape[axis] == 1:
        total = total * x.shape[axis]
    return fns.sum(x * importance, axis=axis, keepdims=True) / total


def zero_point_update(
    weight: Tensor, codes: Tensor, inverse_scale: Tensor, axis: int, importance: Tensor | None = None
) -> Tensor:
    """The zero point minimising ||Wq - W * s - z||^2 for fixed codes."""
    return weighted_mean(codes - weight * inverse_scale, importance, axis)


def mean_absolute_error(
    weight: Tensor, reconstruction: Tensor, axis: int | None, importance: Tensor | None = None
) -> Tensor:
    return weighted_mean(fns.abs(weight - reconstruction), importance, axis)


def keep_best(
    error: Tensor, best_error: Tensor, value: Tensor, best_value: Tensor, active: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Where an active group (or tensor) improved, its error and value become the best."""
    improved = (error < best_error) & active
    return improved, fns.where(improved, error, best_error), fns.where(improved, value, best_value)


def optimize_zero_point(
    weight: Tensor, inverse_scale: Tensor, zero: Tensor, axis: int, num_bits: int, iterations: int
) -> Tensor:
    """
    HQQ's zero-point iterations with a fixed scale, nearest codes then the zero point that fits them, until the mean
    absolute error of the tensor stops decreasing; returns the best iterate's zero point. This is the half-quadratic
    solver where its lp shrinkage is inactive (no error above its threshold, as on weights of usual magnitude).
    """
    best_error = mean_absolute_error(weight, weight, None) + float("inf")
    best_zero = zero
    active = fns.zeros_like(best_error) == 0.0
    for _ in range(iterations):
        codes = quantize(weight, inverse_scale, zero, num_bits)
        error = mean_absolute_error(weight, dequantize(codes, inverse_scale, zero), None)
        improved, best_error, best_zero = keep_best(error, best_error, zero, best_zero, active)
        zero = fns.where(active, zero_point_update(weight, codes, inverse_scale, axis), zero)
        active = improved
        if not fns.any(active):
            break
    return best_zero


def solve_zero_point(weight: Tensor, axis: int, num_bits: int, iterations: int) -> tuple[Tensor, Tensor]:
    """HQQ's inverse scale and float zero point (keepdims) of a weight grouped along the axis."""
    weight = weight.astype(TensorDataType.float32)
    w_min = fns.min(weight, axis=axis, keepdims=True)
    inverse_scale, zero = min_max_init_for_range(w_min, fns.max(weight, axis=axis, keepdims=True), num_bits)
    return inverse_scale, optimize_zero_point(weight, inverse_scale, zero, axis, num_bits, iterations)


def least_squares_scale_zero(
    weight: Tensor, codes: Tensor, axis: int, importance: Tensor | None, previous: tuple[Tensor, Tensor]
) -> tuple[Tensor, Tensor]:
    """The best (s, z) for fixed codes from the regression W ~ a * Wq + b; degenerate groups keep theirs."""
    mean_codes = weighted_mean(codes, importance, axis)
    mean_weight = weighted_mean(weight, importance, axis)
    centred = codes - mean_codes
    variance = weighted_mean(centred * centred, importance, axis)
    covariance = weighted_mean(centred * (weight - mean_weight), importance, axis)
    valid = (variance > 0.0) & (covariance > 0.0)
    slope = fns.where(valid, covariance, 1.0) / fns.where(valid, variance, 1.0)
    return fns.where(valid, 1.0 / slope, previous[0]), fns.where(valid, mean_codes - mean_weight / slope, previous[1])


def cap_inverse_scale_to_extremes(
    weight: Tensor, inverse_scale: Tensor, zero: Tensor, axis: int, num_bits: int
) -> Tensor:
    """The largest s up to the given one that clips neither the minimum nor the maximum of a group."""
    q_max = levels_max(num_bits)
    w_min = fns.min(weight, axis=axis, keepdims=True)
    w_max = fns.max(weight, axis=axis, keepdims=True)
    upper = fns.where(w_max > 0.0, (q_max + 0.5 - zero) / fns.where(w_max > 0.0, w_max, 1.0), MAX_INVERSE_SCALE)
    lower = fns.where(w_min < 0.0, (zero + 0.5) / fns.where(w_min < 0.0, -w_min, 1.0), MAX_INVERSE_SCALE)
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
    preserve_extremes: bool = False,
) -> tuple[Tensor, Tensor]:
    """
    Alternates nearest codes and least-squares (s, z), with preserve_extremes capped to clip no extreme weight;
    every group keeps its best iterate by (weighted) squared error.
    """
    weight = weight.astype(TensorDataType.float32)

    def project(s: Tensor, z: Tensor) -> Tensor:
        return cap_inverse_scale_to_extremes(weight, s, z, axis, num_bits) if preserve_extremes else s

    def codes_and_error(s: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        codes = quantize(weight, s, z, num_bits)
        diff = dequantize(codes, s, z) - weight
        return codes, weighted_mean(diff * diff, importance, axis)

    inverse_scale = project(inverse_scale, zero)
    best = (inverse_scale, zero)
    codes, best_error = codes_and_error(inverse_scale, zero)
    for _ in range(rounds):
        inverse_scale, zero = least_squares_scale_zero(weight, codes, axis, importance, (inverse_scale, zero))
        inverse_scale = project(inverse_scale, zero)
        codes, error = codes_and_error(inverse_scale, zero)
        better = error < best_error
        best = (fns.where(better, inverse_scale, best[0]), fns.where(better, zero, best[1]))
        best_error = fns.where(better, error, best_error)
    return best


def rtn_scale_zero_point_for_range(w_min: Tensor, w_max: Tensor, num_bits: int) -> tuple[Tensor, Tensor]:
    """NNCF's round-to-nearest scale and integer zero point from every group's minimum and maximum."""
    w_min = fns.minimum(w_min, 0.0)
    w_max = fns.maximum(w_max, 0.0)
    q_max = levels_max(num_bits)
    scale = (w_max - w_min) / q_max
    eps = float(fns.finfo(scale).eps)
    scale = fns.where(fns.abs(scale) < eps, eps, scale)
    return scale, fns.clip(-fns.round(w_min / scale), 0.0, q_max)


def rtn_scale_zero_point(weight: Tensor, axis: int, num_bits: int) -> tuple[Tensor, Tensor]:
    weight = weight.astype(TensorDataType.float32)
    w_min = fns.min(weight, axis=axis, keepdims=True)
    return rtn_scale_zero_point_for_range(w_min, fns.max(weight, axis=axis, keepdims=True), num_bits)


def round_to_f16(x: Tensor, low: float, high: float) -> Tensor:
    clipped = fns.clip(x.astype(TensorDataType.float32), low, high)
    return clipped.astype(TensorDataType.float16).astype(TensorDataType.float32)


def stored_scale_zero_point(
    scale: Tensor, zero_point: Tensor, num_bits: int, integer_zero_point: bool
) -> tuple[Tensor, Tensor]:
    """The scale and the zero point as written (f16, or an integer zero point), as float32."""
    scale = round_to_f16(fns.abs(scale), F16_TINY, F16_MAX)
    if integer_zero_point:
        return scale, fns.clip(fns.round(zero_point), 0.0, levels_max(num_bits))
    return scale, round_to_f16(zero_point, -F16_MAX, F16_MAX)


def to_compressed_weight(
    grouped_weight: Tensor, scale: Tensor, zero_point: Tensor, num_bits: int, integer_zero_point: bool
) -> CompressedWeight:
    """uint8 codes encoded against the scale and zero point as written; an integer zero point as int32."""
    scale, zero_point = stored_scale_zero_point(scale, zero_point, num_bits, integer_zero_point)
    codes = grouped_weight.astype(TensorDataType.float32) / scale
    codes += zero_point
    codes = fns.clip(fns.round(codes), 0.0, levels_max(num_bits)).astype(TensorDataType.uint8)
    if integer_zero_point:
        zero_point = zero_point.astype(TensorDataType.int32)
    return CompressedWeight(codes, scale, zero_point)


def decompress(compressed: CompressedWeight) -> Tensor:
    codes = compressed.tensor.astype(TensorDataType.float32)
    if compressed.zero_point is not None:
        codes = codes - compressed.zero_point.astype(TensorDataType.float32)
    return codes * compressed.scale.astype(TensorDataType.float32)


def stored_group_error(
    grouped_weight: Tensor, compressed: CompressedWeight, axis: int, importance: Tensor | None
) -> Tensor:
    diff = decompress(compressed) - grouped_weight
    return weighted_mean(diff * diff, importance, axis)


def choose_per_group(use_first: Tensor, first: CompressedWeight, second: CompressedWeight) -> CompressedWeight:
    """Every group's codes, scale and zero point from the first where use_first holds, else from the second."""
    zero_dtype = first.zero_point.dtype if first.zero_point.dtype == second.zero_point.dtype else TensorDataType.float32
    return CompressedWeight(
        fns.where(use_first, first.tensor, second.tensor),
        fns.where(use_first, first.scale, second.scale),
        fns.where(use_first, first.zero_point.astype(zero_dtype), second.zero_point.astype(zero_dtype)),
    )


def group_inner_product(a: Tensor, b: Tensor, axis: int) -> Tensor:
    rows, columns = fns.moveaxis(a, axis, -1), fns.moveaxis(b, axis, -1)
    return fns.moveaxis(fns.matmul(rows[..., None, :], columns[..., :, None])[..., 0], -1, axis)


def unit_gain(energy: Tensor, projection: Tensor) -> Tensor:
    usable = projection > 0.0
    return fns.clip(fns.where(usable, energy / fns.where(usable, projection, 1.0), 1.0), *UNIT_GAIN_LIMITS)


def unit_gain_factor_for_codes(
    weight: Tensor, codes: Tensor, scale: Tensor, zero_point: Tensor | None, axis: int
) -> Tensor:
    """
    Per group c = <W, W> / <W_hat, W> for W_hat = (q - zero_point) * scale, so that c * W_hat has unit gain along W
    (a least-squares fit leaves its error orthogonal to W_hat instead, which attenuates every group).
    """
    cross = group_inner_product(codes.astype(TensorDataType.float32), weight, axis)
    if zero_point is not None:
        cross = cross - zero_point.astype(TensorDataType.float32) * fns.sum(weight, axis=axis, keepdims=True)
    return unit_gain(group_inner_product(weight, weight, axis), scale.astype(TensorDataType.float32) * cross)


def signed_magnitude(sign_of: Tensor, magnitude: Tensor) -> Tensor:
    return fns.where(sign_of < 0.0, -magnitude, magnitude)


def rescaled(compressed: CompressedWeight, factor: Tensor) -> CompressedWeight:
    scale = compressed.scale.astype(TensorDataType.float32)
    magnitude = round_to_f16(fns.abs(scale * factor), F16_TINY, F16_MAX)
    return CompressedWeight(compressed.tensor, signed_magnitude(scale, magnitude), compressed.zero_point)


def with_unit_gain(grouped_weight: Tensor, compressed: CompressedWeight, axis: int) -> CompressedWeight:
    """Every group's scale times its unit-gain factor; the codes are kept, so they must be written as they are."""
    scale = compressed.scale.astype(TensorDataType.float32)
    factor = unit_gain_factor_for_codes(grouped_weight, compressed.tensor, scale, compressed.zero_point, axis)
    return rescaled(compressed, factor)


def output_projections(values: Tensor, activations: Tensor) -> Tensor:
    """Per group the outputs [..., groups, out, samples] of [..., out, groups, group_size] values."""
    return fns.matmul(fns.moveaxis(values, -3, -2), activations)


def equivalent_inputs(activations: Tensor) -> Tensor:
    """Inputs R [..., n, n] with R R^T = X X^T, which is all output errors depend on, for X [..., n, samples]."""
    inputs = activations.astype(TensorDataType.float64)
    vectors, values, _ = fns.linalg.svd(fns.matmul(inputs, fns.moveaxis(inputs, -1, -2)), full_matrices=False)
    return (vectors * fns.expand_dims(fns.maximum(values, 0.0) ** 0.5, -2)).astype(TensorDataType.float32)


def activation_error(
    weight_outputs: Tensor, weight: Tensor, inverse_scale: Tensor, zero: Tensor, activations: Tensor, num_bits: int
) -> tuple[Tensor, Tensor]:
    """The squared output error per (out, group) on the activations, and the outputs of the shifted codes."""
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
    """
    Refines the inverse scales [..., out, groups, 1] of a weight [..., out, groups, group_size] on calibration inputs
    [..., groups, group_size, samples], keeping the zero points: from every start s / f (f in scale_factors), nearest
    codes and the least-squares 1 / s = <P, Q> / <P, P> alternate (P, Q: the outputs of the shifted codes and of the
    weight); each (out, group) keeps the candidate of least output error, the incoming s included.
    """
    weight = weight.astype(TensorDataType.float32)
    weight_outputs = output_projections(weight, activations)
    best_error, _ = activation_error(weight_outputs, weight, inverse_scale, zero, activations, num_bits)
    best = fns.moveaxis(inverse_scale, -3, -2)[..., 0]
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
