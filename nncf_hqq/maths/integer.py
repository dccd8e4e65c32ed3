"""
HQQ with integer parameters only: an integer zero point (the scale refined under it), or a symmetric grid (the scale
the only parameter, W ~ q * scale with signed codes), as pure functions over nncf.tensor.
"""

from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
from nncf.quantization.algorithms.weight_compression.parameters import CompressedWeight
from nncf.quantization.algorithms.weight_compression.weight_lowering import do_integer_quantization
from nncf.tensor import Tensor
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns

from nncf_hqq.maths.data_free_steps import cap_inverse_scale_to_extremes
from nncf_hqq.maths.data_free_steps import dequantize
from nncf_hqq.maths.data_free_steps import levels_max
from nncf_hqq.maths.data_free_steps import quantize
from nncf_hqq.maths.data_free_steps import round_to_f16
from nncf_hqq.maths.data_free_steps import signed_magnitude
from nncf_hqq.maths.data_free_steps import weighted_mean
from nncf_hqq.maths.zero_point_solver import F16_MAX
from nncf_hqq.maths.zero_point_solver import F16_TINY


def mean_absolute_error(
    weight: Tensor, reconstruction: Tensor, axis: int | None, importance: Tensor | None = None
) -> Tensor:
    """
    The mean absolute error of a reconstruction.

    :param weight: The weight.
    :param reconstruction: Its reconstruction.
    :param axis: The axis of the mean (keepdims), or None for the whole tensor.
    :param importance: Optional non-negative weights of the elements.
    :return: The (weighted) mean of |weight - reconstruction|.
    """
    return weighted_mean(fns.abs(weight - reconstruction), importance, axis)


def keep_best(
    error: Tensor, best_error: Tensor, value: Tensor, best_value: Tensor, active: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """
    The best value so far: takes the error and the value where an active entry improved.

    :param error: The error of the current value.
    :param best_error: The least error so far.
    :param value: The current value.
    :param best_value: The value of the least error so far.
    :param active: Where the search goes on.
    :return: Where an entry improved, the least error and the best value.
    """
    improved = (error < best_error) & active
    return improved, fns.where(improved, error, best_error), fns.where(improved, value, best_value)


def least_squares_scale_for_zero(
    weight: Tensor, codes: Tensor, zero: Tensor, axis: int, importance: Tensor | None, previous: Tensor
) -> Tensor:
    """The best inverse scale for fixed codes and zero point, s = <Wq - z, Wq - z> / <W, Wq - z>."""
    shifted = codes - zero
    numerator = weighted_mean(weight * shifted, importance, axis)
    denominator = weighted_mean(shifted * shifted, importance, axis)
    valid = (denominator > 0.0) & (numerator > 0.0)
    return fns.where(valid, fns.where(valid, denominator, 1.0) / fns.where(valid, numerator, 1.0), previous)


def refine_with_integer_zero(
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
    The zero point rounded to the nearest code, then nearest codes and the least-squares scale for them alternate
    (with preserve_extremes capped to clip no extreme weight); every group keeps its best iterate.
    """
    weight = weight.astype(TensorDataType.float32)
    zero = fns.clip(fns.round(zero), 0.0, levels_max(num_bits))
    extremes = (fns.min(weight, axis=axis, keepdims=True), fns.max(weight, axis=axis, keepdims=True))

    def project(s: Tensor) -> Tensor:
        return cap_inverse_scale_to_extremes(extremes, s, zero, num_bits) if preserve_extremes else s

    def codes_and_error(s: Tensor) -> tuple[Tensor, Tensor]:
        codes = quantize(weight, s, zero, num_bits)
        diff = dequantize(codes, s, zero) - weight
        return codes, weighted_mean(diff * diff, importance, axis)

    inverse_scale = project(inverse_scale)
    best = inverse_scale
    codes, best_error = codes_and_error(inverse_scale)
    for _ in range(rounds):
        inverse_scale = project(least_squares_scale_for_zero(weight, codes, zero, axis, importance, inverse_scale))
        codes, error = codes_and_error(inverse_scale)
        better = error < best_error
        best, best_error = fns.where(better, inverse_scale, best), fns.where(better, error, best_error)
    return best, zero


def signed_levels(num_bits: int) -> tuple[float, float]:
    half = float(2 ** (num_bits - 1))
    return -half, half - 1.0


def symmetric_codes(weight: Tensor, scale: Tensor, num_bits: int) -> Tensor:
    low, high = signed_levels(num_bits)
    return fns.clip(fns.round(weight / scale), low, high)


def symmetric_scale_floor(w_min: Tensor, w_max: Tensor, scale: Tensor, num_bits: int) -> Tensor:
    """The smallest |scale| of this sign that clips neither end of a group with this minimum and maximum."""
    low, high = signed_levels(num_bits)
    w_min, w_max = fns.abs(w_min), fns.abs(w_max)
    negative_end = fns.where(scale > 0.0, w_min, w_max)
    positive_end = fns.where(scale > 0.0, w_max, w_min)
    return fns.maximum(negative_end / (-low + 0.5), positive_end / (high + 0.5))


def floor_symmetric_scale_to_extremes(weight: Tensor, scale: Tensor, axis: int, num_bits: int) -> Tensor:
    """Raises |scale| where needed so that no group's minimum or maximum is clipped."""
    w_min = fns.min(weight, axis=axis, keepdims=True)
    w_max = fns.max(weight, axis=axis, keepdims=True)
    return signed_magnitude(scale, fns.maximum(fns.abs(scale), symmetric_scale_floor(w_min, w_max, scale, num_bits)))


def least_squares_symmetric_scale(
    codes: Tensor, target: Tensor, scale: Tensor, axis: int, importance: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """
    The scale <q, T> / <q, q> minimising ||T - q * scale||^2 for fixed codes, and where it is usable (<q, q> > 0 and
    the sign of the current scale).
    """
    numerator = weighted_mean(codes * target, importance, axis)
    denominator = weighted_mean(codes * codes, importance, axis)
    valid = (denominator > 0.0) & (numerator * scale > 0.0)
    return numerator / fns.where(valid, denominator, 1.0), valid


def optimize_scale(
    weight: Tensor,
    scale: Tensor,
    axis: int,
    num_bits: int,
    iterations: int,
    importance: Tensor | None = None,
    preserve_extremes: bool = False,
) -> Tensor:
    """
    HQQ's iterations for a symmetric grid: nearest codes, then the scale that fits them (with preserve_extremes
    floored to clip no extreme weight), until every group converges (its scale no longer changes), at most
    ``iterations`` times, without an early stop on the error (as HQQ's zero-point iterations); the last scale.
    """
    weight = weight.astype(TensorDataType.float32)
    if preserve_extremes:  # NNCF's symmetric scale itself clips the other end of a group beyond 7.5 steps
        scale = floor_symmetric_scale_to_extremes(weight, scale, axis, num_bits)
    for _ in range(iterations):
        codes = symmetric_codes(weight, scale, num_bits)
        update, valid = least_squares_symmetric_scale(codes, weight, scale, axis, importance)
        update = fns.where(valid, update, scale)
        if preserve_extremes:
            update = floor_symmetric_scale_to_extremes(weight, update, axis, num_bits)
        if fns.all(update == scale):
            break
        scale = update
    return scale


def refine_symmetric_scale(
    weight: Tensor,
    scale: Tensor,
    axis: int,
    num_bits: int,
    rounds: int,
    importance: Tensor | None = None,
    preserve_extremes: bool = False,
) -> Tensor:
    """
    Alternates nearest codes and the least-squares scale (with preserve_extremes floored to clip no extreme weight);
    every group keeps its best iterate.
    """
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


def quantize_symmetric_as_stored(
    grouped_weight: Tensor, config: WeightCompressionConfig, scale: Tensor
) -> CompressedWeight:
    """
    NNCF's ``do_integer_quantization`` of the grouped weight against the signed scale as a model stores it (its
    magnitude in float16), so that the signed codes are the nearest ones for the scale it computes with.

    :param grouped_weight: The weight, grouped along its reduction axis as NNCF groups it.
    :param config: The compression config (a symmetric mode).
    :param scale: The signed scale of every group.
    :return: The int8 codes and the stored scale, without zero point.
    """
    scale = signed_magnitude(scale, round_to_f16(fns.abs(scale), F16_TINY, F16_MAX))
    codes = do_integer_quantization(grouped_weight, config, None, scale).tensor
    return CompressedWeight(codes.clone(), scale, None)  # a copy, as ``quantize_as_stored`` makes
