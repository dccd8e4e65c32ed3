"""
Half-Quadratic Quantization (HQQ) of grouped weights: the solver as pure functions over nncf.tensor.

A group of weights W is quantized as Wq = clip(round(W * s + z), 0, 2^b - 1) and reconstructed as (Wq - z) / s,
where s is the inverse scale and z the float zero point (HQQ's convention); NNCF stores it as
(q - zero_point) * scale with scale = 1 / s and zero_point = z. Reference: H. Badri, A. Shaji, "Half-Quadratic
Quantization of Large Machine Learning Models", 2023.

Data-free, every group goes through:
1. min/max initialisation, then HQQ's zero-point iterations: nearest codes, then the zero point that fits them
   best, keeping the best iterate by mean absolute error (`solve_zero_point`);
2. least-squares refinement of scale and zero point for the nearest codes, never clipping a group's minimum or
   maximum weight (`refine_least_squares`);
3. the stored values: scale and zero point rounded to f16, the codes encoded against them (`to_compressed_weight`);
4. a per-group guard that keeps round-to-nearest where it reconstructs the group better (`choose_per_group`);
5. unit gain: every group's scale multiplied by <W, W> / <W_hat, W>, the codes kept (`with_unit_gain`).
Steps 2 and 4 can weight the error of each input channel by its expected energy (`importance`). With calibration
inputs, `refine_scale_on_activations` then fits the scales to the layer's outputs, keeping the zero points.
"""

from nncf.quantization.algorithms.weight_compression.parameters import CompressedWeight
from nncf.tensor import Tensor
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns

# Upper bound of the inverse scale (keeps constant groups finite).
MAX_INVERSE_SCALE = 2.0e4
# Largest |zero point| the initialisation allows: f16 holds integers exactly up to 2^11. Only groups far from zero
# on one side (e.g. constant groups) reach it.
MAX_ABS_ZERO = 2048.0
# Largest finite and smallest positive float16 values: stored scales and zero points stay within them.
F16_MAX = 65504.0
F16_TINY = 2.0**-24
# Bounds of the unit-gain factor: a group whose reconstruction is nearly orthogonal to it is not rescaled further.
UNIT_GAIN_LIMITS = (0.5, 2.0)


def split_into_groups(weight: Tensor, reduction_axis: int, group_size: int) -> tuple[Tensor, int]:
    """
    Reshapes the weight so that every quantization group lies along the returned axis.

    :param weight: Weight [a, r, b] with the reduction axis r.
    :param reduction_axis: The reduction axis.
    :param group_size: Group size; -1 makes the whole reduction axis one group (the weight is returned as it is).
    :return: The weight as [a, r // group_size, group_size, b] and the axis of the groups.
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
    """
    Largest unsigned code 2^b - 1.
    """
    return float(2**num_bits - 1)


def min_max_init(weight: Tensor, axis: int, num_bits: int) -> tuple[Tensor, Tensor]:
    """
    HQQ's initialisation: inverse scale s = (2^b - 1) / (max - min) and zero point z = -min * s, per group.

    :param weight: Grouped weight.
    :param axis: Axis of the groups.
    :param num_bits: Bits of the codes.
    :return: Inverse scale and zero point (keepdims).
    """
    w_min = fns.min(weight, axis=axis, keepdims=True)
    w_max = fns.max(weight, axis=axis, keepdims=True)
    return min_max_init_for_range(w_min, w_max, num_bits)


def min_max_init_for_range(w_min: Tensor, w_max: Tensor, num_bits: int) -> tuple[Tensor, Tensor]:
    """
    The min/max initialisation from every group's minimum and maximum weight. The inverse scale is capped at
    MAX_INVERSE_SCALE, and the range is widened where |z| would exceed MAX_ABS_ZERO, so that constant groups are
    reconstructed exactly; groups with min <= 0 <= max are never affected.
    """
    q_max = levels_max(num_bits)
    widened = fns.maximum(w_max - w_min, fns.abs(w_min) * (q_max / MAX_ABS_ZERO))
    inverse_scale = q_max / fns.maximum(widened, q_max / MAX_INVERSE_SCALE)
    zero = -w_min * inverse_scale
    return inverse_scale, zero


def quantize(weight: Tensor, inverse_scale: Tensor, zero: Tensor, num_bits: int) -> Tensor:
    """
    Integer codes clip(round(W * s + z), 0, 2^b - 1), kept in the weight's float data type.
    """
    return fns.clip(fns.round(weight * inverse_scale + zero), 0.0, levels_max(num_bits))


def dequantize(codes: Tensor, inverse_scale: Tensor, zero: Tensor) -> Tensor:
    """
    Reconstruction (Wq - z) / s.
    """
    return (codes - zero) / inverse_scale


def weighted_mean(x: Tensor, importance: Tensor | None, axis: int | None) -> Tensor:
    """
    Mean over an axis (keepdims) or over the whole tensor (axis None), weighted by importance when given.

    :param x: The values.
    :param importance: Non-negative weights broadcastable to x, or None.
    :param axis: The axis, or None for the whole tensor.
    :return: The (weighted) mean.
    """
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
    """
    The zero point that minimises ||Wq - W * s - z||^2 over a group for fixed codes: its (weighted) mean.
    """
    return weighted_mean(codes - weight * inverse_scale, importance, axis)


def mean_absolute_error(
    weight: Tensor, reconstruction: Tensor, axis: int | None, importance: Tensor | None = None
) -> Tensor:
    """
    The (weighted) mean absolute reconstruction error per group, or of the whole tensor with axis None.
    """
    return weighted_mean(fns.abs(weight - reconstruction), importance, axis)


def keep_best(
    error: Tensor, best_error: Tensor, value: Tensor, best_value: Tensor, active: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """
    Best-iterate bookkeeping: where a still active group (or tensor) improved, its error and value become the best.

    :return: Where it improved, the best errors and the best values.
    """
    improved = (error < best_error) & active
    return improved, fns.where(improved, error, best_error), fns.where(improved, value, best_value)


def optimize_zero_point(
    weight: Tensor, inverse_scale: Tensor, zero: Tensor, axis: int, num_bits: int, iterations: int
) -> Tensor:
    """
    HQQ's zero-point iterations with a fixed scale: nearest codes, then the zero point that fits them best. The
    iterations stop once the mean absolute error of the whole tensor no longer decreases; the zero point of the best
    iterate is returned. This is the half-quadratic solver wherever its lp shrinkage is inactive (no error above its
    threshold), which holds for the weights of usual magnitude, and it does not depend on the weights' scale.

    :param weight: Grouped weight in float32.
    :param inverse_scale: Inverse scale (keepdims).
    :param zero: Initial zero point (keepdims).
    :param axis: Axis of the groups.
    :param num_bits: Bits of the codes.
    :param iterations: Maximal number of iterations.
    :return: The zero point.
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
    """
    HQQ for grouped weights: the min/max initialisation, then the zero-point iterations (`optimize_zero_point`).

    :param weight: Weight with every group along the axis (see `split_into_groups`).
    :param axis: Axis of the groups.
    :param num_bits: Bits of the codes.
    :param iterations: Maximal number of iterations.
    :return: Inverse scale and float zero point, keepdims.
    """
    weight = weight.astype(TensorDataType.float32)
    inverse_scale, zero = min_max_init(weight, axis, num_bits)
    return inverse_scale, optimize_zero_point(weight, inverse_scale, zero, axis, num_bits, iterations)


def least_squares_scale_zero(
    weight: Tensor, codes: Tensor, axis: int, importance: Tensor | None, previous: tuple[Tensor, Tensor]
) -> tuple[Tensor, Tensor]:
    """
    The best (s, z) for fixed codes: the (weighted) linear regression W ~ a * Wq + b, s = 1 / a, z = -b / a. Groups
    where the regression is degenerate (all codes equal) or not increasing keep the previous values.
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
    """
    The best inverse scale for fixed codes and zero point: a = <W, Wq - z> / <Wq - z, Wq - z>, s = 1 / a.
    """
    shifted = codes - zero
    numerator = weighted_mean(weight * shifted, importance, axis)
    denominator = weighted_mean(shifted * shifted, importance, axis)
    valid = (denominator > 0.0) & (numerator > 0.0)
    return fns.where(valid, fns.where(valid, denominator, 1.0) / fns.where(valid, numerator, 1.0), previous)


def cap_inverse_scale_to_extremes(
    weight: Tensor, inverse_scale: Tensor, zero: Tensor, axis: int, num_bits: int
) -> Tensor:
    """
    Lowers the inverse scale where needed so that each group's minimum and maximum land within half a step of the
    code range, i.e. are not clipped. Groups where no positive s achieves that (z outside the range) keep s.
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
    """
    Alternates nearest codes and the least-squares scale and zero point for them, keeping every group's best
    iterate by (weighted) squared error.

    :param weight: Grouped weight.
    :param inverse_scale: Initial inverse scale (keepdims).
    :param zero: Initial zero point (keepdims).
    :param axis: Axis of the groups.
    :param num_bits: Bits of the codes.
    :param rounds: Rounds of refinement.
    :param importance: Weights of the squared error broadcastable to the weight, or None.
    :param integer_zero: Round the zero point to a code first and refit only the scale.
    :param preserve_extremes: Never let a candidate clip a group's minimum or maximum.
    :return: The best inverse scale and zero point.
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
    """
    NNCF's round-to-nearest parameters of a grouped weight, in NNCF's convention W ~ (q - zero_point) * scale.

    :return: Scale and integer zero point (float data type), keepdims.
    """
    weight = weight.astype(TensorDataType.float32)
    w_min = fns.min(weight, axis=axis, keepdims=True)
    w_max = fns.max(weight, axis=axis, keepdims=True)
    return rtn_scale_zero_point_for_range(w_min, w_max, num_bits)


def rtn_scale_zero_point_for_range(w_min: Tensor, w_max: Tensor, num_bits: int) -> tuple[Tensor, Tensor]:
    """
    The round-to-nearest parameters from every group's minimum and maximum: the range always contains 0 and the
    zero point is an integer code.
    """
    w_min = fns.minimum(w_min, 0.0)
    w_max = fns.maximum(w_max, 0.0)
    q_max = levels_max(num_bits)
    scale = (w_max - w_min) / q_max
    eps = float(fns.finfo(scale).eps)
    scale = fns.where(fns.abs(scale) < eps, eps, scale)
    zero_point = fns.clip(-fns.round(w_min / scale), 0.0, q_max)
    return scale, zero_point


def round_to_f16(x: Tensor, low: float, high: float) -> Tensor:
    """
    Clips into [low, high] and rounds to the nearest float16, returned as float32.
    """
    clipped = fns.clip(x.astype(TensorDataType.float32), low, high)
    return clipped.astype(TensorDataType.float16).astype(TensorDataType.float32)


def stored_scale_zero_point(
    scale: Tensor, zero_point: Tensor, num_bits: int, integer_zero_point: bool
) -> tuple[Tensor, Tensor]:
    """
    The values a scale and zero point take when written: the scale rounded to f16 (positive and finite), a float
    zero point rounded to f16, an integer one rounded and clipped to the code range (float32 tensors).
    """
    scale = round_to_f16(fns.abs(scale), F16_TINY, F16_MAX)
    if integer_zero_point:
        return scale, fns.clip(fns.round(zero_point), 0.0, levels_max(num_bits))
    return scale, round_to_f16(zero_point, -F16_MAX, F16_MAX)


def encode(weight: Tensor, scale: Tensor, zero_point: Tensor, num_bits: int) -> Tensor:
    """
    The nearest unsigned codes clip(round(W / scale + zero_point), 0, 2^b - 1) as uint8.
    """
    codes = weight.astype(TensorDataType.float32) / scale
    codes += zero_point
    return fns.clip(fns.round(codes), 0.0, levels_max(num_bits)).astype(TensorDataType.uint8)


def to_compressed_weight(
    grouped_weight: Tensor, scale: Tensor, zero_point: Tensor, num_bits: int, integer_zero_point: bool
) -> CompressedWeight:
    """
    The compressed weight of NNCF-convention parameters: the values as stored (`stored_scale_zero_point`) and the
    codes encoded against exactly those values.

    :param grouped_weight: Grouped weight.
    :param scale: Scale (keepdims).
    :param zero_point: Zero point (keepdims).
    :param num_bits: Bits of the codes.
    :param integer_zero_point: Whether the zero point is stored as an integer code (int32) or as f16 (float32).
    :return: Codes (uint8), scale and zero point.
    """
    scale, zero_point = stored_scale_zero_point(scale, zero_point, num_bits, integer_zero_point)
    codes = encode(grouped_weight, scale, zero_point, num_bits)
    if integer_zero_point:
        zero_point = zero_point.astype(TensorDataType.int32)
    return CompressedWeight(codes, scale, zero_point)


def decompress(compressed: CompressedWeight) -> Tensor:
    """
    The float32 reconstruction (q - zero_point) * scale (q * scale without zero point), in the grouped shape.
    """
    codes = compressed.tensor.astype(TensorDataType.float32)
    if compressed.zero_point is not None:
        codes = codes - compressed.zero_point.astype(TensorDataType.float32)
    return codes * compressed.scale.astype(TensorDataType.float32)


def stored_group_error(
    grouped_weight: Tensor, compressed: CompressedWeight, axis: int, importance: Tensor | None
) -> Tensor:
    """
    The per-group (weighted) mean squared error of the weights as stored (keepdims).
    """
    diff = decompress(compressed) - grouped_weight
    return weighted_mean(diff * diff, importance, axis)


def choose_per_group(use_first: Tensor, first: CompressedWeight, second: CompressedWeight) -> CompressedWeight:
    """
    Takes every group's codes, scale and zero point from the first compressed weight where use_first holds, else
    from the second; zero points of different data types are merged as float32.
    """
    zero_dtype = first.zero_point.dtype if first.zero_point.dtype == second.zero_point.dtype else TensorDataType.float32
    return CompressedWeight(
        fns.where(use_first, first.tensor, second.tensor),
        fns.where(use_first, first.scale, second.scale),
        fns.where(use_first, first.zero_point.astype(zero_dtype), second.zero_point.astype(zero_dtype)),
    )


def group_inner_product(a: Tensor, b: Tensor, axis: int) -> Tensor:
    """
    Per group sum(a * b) along the axis (kept), as one batched matrix product.
    """
    rows, columns = fns.moveaxis(a, axis, -1), fns.moveaxis(b, axis, -1)
    product = fns.matmul(rows[..., None, :], columns[..., :, None])[..., 0]
    return fns.moveaxis(product, -1, axis)


def unit_gain(energy: Tensor, projection: Tensor) -> Tensor:
    """
    The factor energy / projection; 1 where the projection is not positive, clipped to UNIT_GAIN_LIMITS.
    """
    usable = projection > 0.0
    return fns.clip(fns.where(usable, energy / fns.where(usable, projection, 1.0), 1.0), *UNIT_GAIN_LIMITS)


def unit_gain_factor(weight: Tensor, reconstruction: Tensor, axis: int) -> Tensor:
    """
    Per group c = <W, W> / <W_hat, W>: c * W_hat reproduces the weight with unit gain along itself. A least-squares
    fit leaves its error orthogonal to the reconstruction instead, which attenuates every group by
    ||W_hat||^2 / ||W||^2; over a deep model that attenuation adds up.
    """
    return unit_gain(group_inner_product(weight, weight, axis), group_inner_product(reconstruction, weight, axis))


def unit_gain_factor_for_codes(
    weight: Tensor, codes: Tensor, scale: Tensor, zero_point: Tensor | None, axis: int
) -> Tensor:
    """
    `unit_gain_factor` of the reconstruction (q - zero_point) * scale, computed as
    <W_hat, W> = scale * (<q, W> - zero_point * sum(W)) without forming it.
    """
    cross = group_inner_product(codes.astype(TensorDataType.float32), weight, axis)
    if zero_point is not None:
        cross = cross - zero_point.astype(TensorDataType.float32) * fns.sum(weight, axis=axis, keepdims=True)
    return unit_gain(group_inner_product(weight, weight, axis), scale.astype(TensorDataType.float32) * cross)


def signed_magnitude(sign_of: Tensor, magnitude: Tensor) -> Tensor:
    """
    The magnitude with the sign of sign_of (positive where it is 0).
    """
    return fns.where(sign_of < 0.0, -magnitude, magnitude)


def rescaled(compressed: CompressedWeight, factor: Tensor) -> CompressedWeight:
    """
    The compressed weight with its scale multiplied by the factor and rounded to f16 again (sign kept).
    """
    scale = compressed.scale.astype(TensorDataType.float32)
    magnitude = round_to_f16(fns.abs(scale * factor), F16_TINY, F16_MAX)
    return CompressedWeight(compressed.tensor, signed_magnitude(scale, magnitude), compressed.zero_point)


def with_unit_gain(grouped_weight: Tensor, compressed: CompressedWeight, axis: int) -> CompressedWeight:
    """
    The same codes and zero points with every group's scale multiplied by its unit-gain factor. The codes are kept:
    they are no longer the nearest codes of the new scale, so they must be written as they are.
    """
    scale = compressed.scale.astype(TensorDataType.float32)
    factor = unit_gain_factor_for_codes(grouped_weight, compressed.tensor, scale, compressed.zero_point, axis)
    return rescaled(compressed, factor)


def output_projections(values: Tensor, activations: Tensor) -> Tensor:
    """
    Per group the outputs sum_k values[..., o, g, k] * activations[..., g, k, t] as [..., g, o, t].

    :param values: Grouped weights (or shifted codes) [..., out, groups, group_size].
    :param activations: Grouped calibration inputs [..., groups, group_size, samples].
    """
    return fns.matmul(fns.moveaxis(values, -3, -2), activations)


def equivalent_inputs(activations: Tensor) -> Tensor:
    """
    Inputs R [..., n, n] with R R^T = X X^T for calibration inputs X [..., n, samples], from the eigendecomposition
    of X X^T in float64. Output errors and the sums of `refine_scale_on_activations` depend on X only through
    X X^T, so they are the same on R, which has fewer columns than X whenever there are more samples than n.
    """
    inputs = activations.astype(TensorDataType.float64)
    second_moment = fns.matmul(inputs, fns.moveaxis(inputs, -1, -2))
    vectors, values, _ = fns.linalg.svd(second_moment, full_matrices=False)
    return (vectors * fns.expand_dims(fns.maximum(values, 0.0) ** 0.5, -2)).astype(TensorDataType.float32)


def activation_error(
    weight_outputs: Tensor, weight: Tensor, inverse_scale: Tensor, zero: Tensor, activations: Tensor, num_bits: int
) -> tuple[Tensor, Tensor]:
    """
    The squared output error per (out, group) on the calibration inputs, and the outputs of the shifted codes.
    """
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
    Data-aware refinement of the scales that keeps the zero points: minimises the output error of every group on
    calibration inputs, ||X^T ((Wq - z) / s - W)||^2, over s by alternating nearest codes and the least-squares
    1 / s = <P, Q> / <P, P> (P: outputs of the shifted codes, Q: outputs of the float weights). Every start s / f for
    f in scale_factors is refined, and each (out, group) keeps its best candidate, the incoming s included.

    :param weight: Weight [..., out, groups, group_size].
    :param inverse_scale: Inverse scale [..., out, groups, 1].
    :param zero: Zero point [..., out, groups, 1].
    :param activations: Calibration inputs [..., groups, group_size, samples].
    :param num_bits: Bits of the codes.
    :param rounds: Rounds of refinement per start.
    :param scale_factors: The starts.
    :return: The refined inverse scale [..., out, groups, 1].
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
