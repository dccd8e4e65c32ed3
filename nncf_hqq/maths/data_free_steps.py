"""
HQQ's data-free steps beyond its solver, as pure functions over nncf.tensor: the least-squares refinement of the scale
and zero point (plain and input-weighted), the codes against the values a model stores, the per-group choice between
two compressions (the RTN fallback) and unit gain.

Grouping, round-to-nearest parameters and the stored codes are NNCF's (``weight_lowering.py``); what is here computes
what NNCF has no function for. ``quantize``/``dequantize`` are HQQ's convention inside the steps' rounds (the inverse
scale s, codes as floats): Wq = clip(round(W * s + z), 0, 2^b - 1), reconstructed as (Wq - z) / s.
"""

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
from nncf.quantization.algorithms.weight_compression.parameters import CompressedWeight
from nncf.quantization.algorithms.weight_compression.weight_lowering import do_integer_dequantization
from nncf.quantization.algorithms.weight_compression.weight_lowering import do_integer_quantization
from nncf.tensor import Tensor
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns

from nncf_hqq.maths.zero_point_solver import BLOCK_THREADS
from nncf_hqq.maths.zero_point_solver import F16_MAX
from nncf_hqq.maths.zero_point_solver import F16_TINY
from nncf_hqq.maths.zero_point_solver import as_float32
from nncf_hqq.maths.zero_point_solver import stored_scale_zero_point

# Bounds of the unit-gain factor of a group: a group whose reconstruction is (nearly) orthogonal to it would
# otherwise get an unbounded factor; a factor outside [1/2, 2] means the codes no longer describe the group.
UNIT_GAIN_LIMITS = (0.5, 2.0)
# Elements of a block of groups in the refinement's rounds (1 MiB in float32): its arrays stay in a core's cache,
# Python's cost per block is low.
ROUNDS_BLOCK_ELEMENTS = 2**18


def map_row_blocks(function: Callable[..., tuple[Tensor, ...]], *rows: Tensor) -> list[Tensor]:
    """
    The function on every block of ROUNDS_BLOCK_ELEMENTS of consecutive rows, on min(BLOCK_THREADS, blocks) threads
    (a single block on the calling thread).

    :param function: The function of a block of each of the rows [groups, group size], returning a row per group.
    :param rows: Tensors with a group per row.
    :return: The function's values of all rows, in their order (whatever the number of threads).
    """
    step = max(1, ROUNDS_BLOCK_ELEMENTS // rows[0].shape[1])
    blocks = [[x[i : i + step] for x in rows] for i in range(0, max(rows[0].shape[0], 1), step)]  # one if empty
    if len(blocks) == 1:
        return list(function(*blocks[0]))
    with ThreadPoolExecutor(min(BLOCK_THREADS, len(blocks))) as pool:
        results = list(pool.map(lambda block: function(*block), blocks))
    return [fns.concatenate(list(values)) for values in zip(*results, strict=True)]


def quantize(weight: Tensor, inverse_scale: Tensor, zero: Tensor, num_bits: int) -> Tensor:
    """
    The nearest codes clip(round(W * s + z), 0, 2^b - 1) of the weight W, as floats.

    :param weight: The weight W.
    :param inverse_scale: The inverse scale s of every group.
    :param zero: The zero point z of every group.
    :param num_bits: The number of bits b of a code.
    :return: The codes.
    """
    return fns.clip(fns.round(weight * inverse_scale + zero), 0.0, 2.0**num_bits - 1)


def dequantize(codes: Tensor, inverse_scale: Tensor, zero: Tensor) -> Tensor:
    """
    The reconstruction (Wq - z) / s of the codes Wq.

    :param codes: The codes Wq.
    :param inverse_scale: The inverse scale s of every group.
    :param zero: The zero point z of every group.
    :return: The reconstructed weight.
    """
    return (codes - zero) / inverse_scale


def levels_max(num_bits: int) -> float:
    """
    The largest code of an unsigned grid.

    :param num_bits: The number of bits of a code.
    :return: 2^num_bits - 1.
    """
    return float(2**num_bits - 1)


def round_to_f16(x: Tensor, low: float, high: float) -> Tensor:
    """
    The values clipped and rounded to float16, as float32.

    :param x: The values.
    :param low: The lower bound of the clip.
    :param high: The upper bound of the clip.
    :return: The values clipped to [low, high] and rounded to float16, as float32.
    """
    clipped = fns.clip(x.astype(TensorDataType.float32), low, high)
    return clipped.astype(TensorDataType.float16).astype(TensorDataType.float32)


def weighted_mean(x: Tensor, importance: Tensor | None, axis: int | None) -> Tensor:
    """
    The mean over the axis (keepdims) or of the whole tensor, weighted by the importance if given.

    :param x: The values.
    :param importance: Non-negative weights broadcastable to x, or None for equal weights.
    :param axis: The axis of the mean, or None for the mean of the whole tensor.
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


def least_squares_scale_zero(
    mean_weight: Tensor, centred_weight: Tensor, codes: Tensor, previous: tuple[Tensor, Tensor]
) -> tuple[Tensor, Tensor]:
    """
    The best (s, z) of every row for fixed codes, from the regression W ~ a * Wq + b (s = 1 / a, z = -b / a); a group
    whose codes are constant or anti-correlated with the weight keeps its previous (s, z).

    :param mean_weight: The mean of every group of the weight.
    :param centred_weight: The weight minus its mean.
    :param codes: The codes Wq, a group per row.
    :param previous: The inverse scale and zero point kept by degenerate groups.
    :return: The inverse scale and the zero point of every group.
    """
    mean_codes = fns.mean(codes, axis=1, keepdims=True)
    centred = codes - mean_codes
    variance, covariance = (fns.mean(centred * x, axis=1, keepdims=True) for x in (centred, centred_weight))
    valid = (variance > 0.0) & (covariance > 0.0)
    slope = fns.where(valid, covariance, 1.0) / fns.where(valid, variance, 1.0)
    return fns.where(valid, 1.0 / slope, previous[0]), fns.where(valid, mean_codes - mean_weight / slope, previous[1])


def cap_inverse_scale_to_extremes(
    extremes: tuple[Tensor, Tensor], inverse_scale: Tensor, zero: Tensor, num_bits: int
) -> Tensor:
    """
    The largest s up to the given one that clips neither the minimum nor the maximum of a group: both land within
    half a step of the code range.

    :param extremes: The minimum and the maximum of every group.
    :param inverse_scale: The inverse scale s of every group.
    :param zero: The zero point z of every group.
    :param num_bits: The number of bits of a code.
    :return: The capped inverse scale.
    """
    q_max = 2.0**num_bits - 1
    w_min, w_max = extremes
    no_cap = 1.0 / F16_TINY  # above every initial s: q_max / (q_max * F16_TINY)
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
    preserve_extremes: bool = False,
) -> tuple[Tensor, Tensor]:
    """
    Alternates nearest codes and the least-squares (s, z) for them; every group keeps its best iterate by squared
    error, the incoming one included, and stops at its fixed point (a round leaving its (s, z) as they are).

    :param weight: The grouped weight.
    :param inverse_scale: The initial inverse scale s of every group.
    :param zero: The initial zero point z of every group.
    :param axis: The axis of the groups' elements.
    :param num_bits: The number of bits of a code.
    :param rounds: The number of rounds.
    :param preserve_extremes: Whether s is capped so that no group's minimum or maximum is clipped.
    :return: The refined inverse scale and zero point.
    """

    def refine(rows: Tensor, s: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        mean_weight, w_min, w_max = (reduce(rows, axis=1, keepdims=True) for reduce in (fns.mean, fns.min, fns.max))
        centred = rows - mean_weight

        def project(s: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
            return cap_inverse_scale_to_extremes((w_min, w_max), s, z, num_bits) if preserve_extremes else s, z

        def codes_and_error(s: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
            codes = quantize(rows, s, z, num_bits)
            diff = dequantize(codes, s, z) - rows
            return codes, fns.mean(diff * diff, axis=1, keepdims=True)

        s, z = project(s, z)
        best = (s.clone(), z.clone())
        codes, best_error = codes_and_error(s, z)
        moving = fns.arange(z.shape[0], backend=z.backend, device=z.device)
        for _ in range(rounds):
            updated_s, updated_z = project(*least_squares_scale_zero(mean_weight, centred, codes, (s, z)))
            still = ((updated_s != s) | (updated_z != z))[:, 0]
            moving, s, z, best_error = moving[still], updated_s[still], updated_z[still], best_error[still]
            rows, centred, mean_weight, w_min, w_max = (x[still] for x in (rows, centred, mean_weight, w_min, w_max))
            codes, error = codes_and_error(s, z)
            better = (error < best_error)[:, 0]
            best[0][moving[better]], best[1][moving[better]] = s[better], z[better]
            best_error = fns.where(error < best_error, error, best_error)
        return best

    weight = as_float32(weight)
    rows = (fns.reshape(fns.moveaxis(x, axis, -1), (-1, x.shape[axis])) for x in (weight, inverse_scale, zero))
    shape = fns.moveaxis(zero, axis, -1).shape
    return tuple(fns.moveaxis(fns.reshape(x, shape), -1, axis) for x in map_row_blocks(refine, *rows))


def refine_weighted_least_squares(
    weight: Tensor,
    inverse_scale: Tensor,
    zero: Tensor,
    axis: int,
    num_bits: int,
    rounds: int,
    importance: Tensor | None,
    preserve_extremes: bool = False,
) -> tuple[Tensor, Tensor]:
    """
    The solver's refine_least_squares with the squared error of every element weighted by its importance (that very
    function without one): nearest codes and the weighted least-squares (s, z) for them alternate, every group keeps
    its best iterate by weighted squared error, the incoming one included.
    """
    if importance is None:
        return refine_least_squares(weight, inverse_scale, zero, axis, num_bits, rounds, preserve_extremes)
    weight = as_float32(weight)
    extremes = (fns.min(weight, axis=axis, keepdims=True), fns.max(weight, axis=axis, keepdims=True))

    def mean(x: Tensor) -> Tensor:
        return weighted_mean(x, importance, axis)

    def project(s: Tensor, z: Tensor) -> Tensor:
        return cap_inverse_scale_to_extremes(extremes, s, z, num_bits) if preserve_extremes else s

    def codes_and_error(s: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        codes = quantize(weight, s, z, num_bits)
        diff = dequantize(codes, s, z) - weight
        return codes, mean(diff * diff)

    mean_weight = mean(weight)
    centred_weight = weight - mean_weight
    inverse_scale = project(inverse_scale, zero)
    best = (inverse_scale, zero)
    codes, best_error = codes_and_error(inverse_scale, zero)
    for _ in range(rounds):
        mean_codes = mean(codes)
        centred = codes - mean_codes
        variance, covariance = mean(centred * centred), mean(centred * centred_weight)
        valid = (variance > 0.0) & (covariance > 0.0)
        slope = fns.where(valid, covariance, 1.0) / fns.where(valid, variance, 1.0)
        zero = fns.where(valid, mean_codes - mean_weight / slope, zero)
        inverse_scale = project(fns.where(valid, 1.0 / slope, inverse_scale), zero)
        codes, error = codes_and_error(inverse_scale, zero)
        better = error < best_error
        best = (fns.where(better, inverse_scale, best[0]), fns.where(better, zero, best[1]))
        best_error = fns.where(better, error, best_error)
    return best


def stored_parameters(
    scale: Tensor, zero_point: Tensor, num_bits: int, integer_zero_point: bool
) -> tuple[Tensor, Tensor]:
    """
    ``stored_scale_zero_point``, or for an integer zero point the stored scale and the nearest code. NNCF has no such
    function: it encodes with the float32 scale and converts it to float16 only when it writes the model.
    """
    stored_scale, stored_zero_point = stored_scale_zero_point(scale, zero_point)
    if integer_zero_point:
        return stored_scale, fns.clip(fns.round(zero_point), 0.0, levels_max(num_bits))
    return stored_scale, stored_zero_point


def quantize_as_stored(
    grouped_weight: Tensor,
    config: WeightCompressionConfig,
    scale: Tensor,
    zero_point: Tensor,
    integer_zero_point: bool,
) -> CompressedWeight:
    """
    NNCF's ``do_integer_quantization`` of the grouped weight against the scale and zero point as a model stores them
    (``stored_parameters``), so that the codes are the nearest ones for the values it computes with.

    :param grouped_weight: The weight, grouped along its reduction axis as NNCF groups it.
    :param config: The compression config (an asymmetric mode).
    :param scale: NNCF's scale of every group.
    :param zero_point: The zero point of every group.
    :param integer_zero_point: Whether the zero point is stored as the nearest code (int32) rather than in float16.
    :return: The uint8 codes, the stored scale and the stored zero point.
    """
    scale, zero_point = stored_parameters(scale, zero_point, config.num_bits, integer_zero_point)
    if integer_zero_point:
        zero_point = zero_point.astype(TensorDataType.int32)
    codes = do_integer_quantization(grouped_weight, config, None, scale, zero_point).tensor
    # A copy: NNCF's compiled quantization returns its output buffer, which its next call of that shape overwrites.
    return CompressedWeight(codes.clone(), scale, zero_point)


def stored_group_error(
    grouped_weight: Tensor, compressed: CompressedWeight, axis: int, importance: Tensor | None
) -> Tensor:
    """
    The (importance-weighted) mean squared error of every group of NNCF's dequantization: NNCF's
    ``get_integer_quantization_error`` reduces it to one number per tensor, the per-group choices need each group's.
    """
    diff = do_integer_dequantization(compressed) - grouped_weight
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
