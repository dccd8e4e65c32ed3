"""
The integer grids of ``nncf_hqq`` by bit width, as pure functions over nncf.tensor: grouping, round-to-nearest
parameters from a weight or from its groups' minima and maxima, the codes against the stored values and their
reconstruction.

NNCF's own helpers compute these for the modes of a ``WeightCompressionConfig``
(``reshape_weight_for_grouped_quantization``, ``calculate_integer_quantization_params``, ``do_integer_quantization``,
``do_integer_dequantization``): the pull-request series calls them directly. ``nncf_hqq`` also writes INT3_ASYM and
INT2_ASYM, for which NNCF has no mode, and its compiled kernels reduce the minima and maxima themselves, so the
functions here take a bit width (and a range); grouping and the asymmetric range's parameters are NNCF's.
"""

from nncf.tensor import Tensor
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns

from nncf_hqq._nncf import CompressedWeight
from nncf_hqq._nncf import calculate_scale_zero_point
from nncf_hqq._nncf import reshape_weight_for_grouped_quantization
from nncf_hqq.maths.data_free_steps import levels_max
from nncf_hqq.maths.data_free_steps import round_to_f16
from nncf_hqq.maths.data_free_steps import signed_magnitude
from nncf_hqq.maths.data_free_steps import stored_parameters
from nncf_hqq.maths.integer import signed_levels
from nncf_hqq.maths.integer import symmetric_codes
from nncf_hqq.maths.zero_point_solver import F16_MAX
from nncf_hqq.maths.zero_point_solver import F16_TINY


def split_into_groups(weight: Tensor, reduction_axis: int, group_size: int) -> tuple[Tensor, int]:
    """
    NNCF's grouping [a, r, b] -> [a, r // group_size, group_size, b] and the axis of the groups; the weight as it is
    for group_size -1 (per channel). A negative axis counts from the end.

    :raises ValueError: The channels along the axis are not a multiple of group_size.
    """
    reduction_axis = reduction_axis % weight.ndim
    if group_size == -1:
        return weight, reduction_axis
    channels = weight.shape[reduction_axis]
    if channels % group_size != 0:
        msg = f"Channel size {channels} is not divisible by group_size={group_size}."
        raise ValueError(msg)
    return reshape_weight_for_grouped_quantization(weight, reduction_axis, group_size)


def rtn_scale_zero_point_for_range(w_min: Tensor, w_max: Tensor, num_bits: int) -> tuple[Tensor, Tensor]:
    """
    NNCF's round-to-nearest scale and integer zero point (as float32) from every group's minimum and maximum: the
    range widened to include 0, NNCF's ``calculate_scale_zero_point`` on the unsigned grid of num_bits.
    """
    w_min, w_max = fns.minimum(w_min, 0.0), fns.maximum(w_max, 0.0)
    scale, zero_point = calculate_scale_zero_point(w_min, w_max, 0, 2**num_bits - 1, narrow_range=False)
    return scale, zero_point.astype(TensorDataType.float32)


def rtn_scale_zero_point(weight: Tensor, axis: int, num_bits: int) -> tuple[Tensor, Tensor]:
    """``rtn_scale_zero_point_for_range`` of every group along the axis."""
    weight = weight.astype(TensorDataType.float32)
    w_min = fns.min(weight, axis=axis, keepdims=True)
    return rtn_scale_zero_point_for_range(w_min, fns.max(weight, axis=axis, keepdims=True), num_bits)


def to_compressed_weight(
    grouped_weight: Tensor, scale: Tensor, zero_point: Tensor, num_bits: int, integer_zero_point: bool
) -> CompressedWeight:
    """
    uint8 codes encoded against the scale and zero point as written; an integer zero point as int32. NNCF's
    ``do_integer_quantization`` computes the same for its modes; this one takes any bit width (INT3/INT2_ASYM).
    """
    scale, zero_point = stored_parameters(scale, zero_point, num_bits, integer_zero_point)
    codes = grouped_weight.astype(TensorDataType.float32) / scale
    codes += zero_point
    codes = fns.clip(fns.round(codes), 0.0, levels_max(num_bits)).astype(TensorDataType.uint8)
    if integer_zero_point:
        zero_point = zero_point.astype(TensorDataType.int32)
    return CompressedWeight(codes, scale, zero_point)


def decompress(compressed: CompressedWeight) -> Tensor:
    """
    The reconstruction (codes - zero point) * scale in float32, whatever the stored dtypes (NNCF's
    ``do_integer_dequantization`` computes in the scale's dtype, float16 for a stored one).
    """
    codes = compressed.tensor.astype(TensorDataType.float32)
    if compressed.zero_point is not None:
        codes = codes - compressed.zero_point.astype(TensorDataType.float32)
    return codes * compressed.scale.astype(TensorDataType.float32)


def symmetric_init_for_range(w_min: Tensor, w_max: Tensor, num_bits: int) -> Tensor:
    """
    NNCF's signed scale from every group's minimum and maximum: the end of larger magnitude maps to code -2^(b-1),
    so the scale is negative when the maximum outweighs the minimum's magnitude.
    """
    low, _ = signed_levels(num_bits)
    w_abs_min = fns.abs(w_min)
    scale = fns.where(w_abs_min >= w_max, w_abs_min, -w_max) / -low
    eps = float(fns.finfo(scale).eps)
    return fns.where(fns.abs(scale) < eps, eps, scale)


def symmetric_init(weight: Tensor, axis: int, num_bits: int) -> Tensor:
    w_min = fns.min(weight, axis=axis, keepdims=True)
    return symmetric_init_for_range(w_min, fns.max(weight, axis=axis, keepdims=True), num_bits)


def to_symmetric_compressed_weight(grouped_weight: Tensor, scale: Tensor, num_bits: int) -> CompressedWeight:
    """Signed int8 codes encoded against the signed scale as written (f16), without zero point."""
    scale = signed_magnitude(scale, round_to_f16(fns.abs(scale), F16_TINY, F16_MAX))
    codes = symmetric_codes(grouped_weight.astype(TensorDataType.float32), scale, num_bits)
    return CompressedWeight(codes.astype(TensorDataType.int8), scale, None)
