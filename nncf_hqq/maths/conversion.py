"""The one place where HQQ's convention meets NNCF's.

HQQ:  ``W ~ (Wq - z) / s``          with inverse scale ``s`` and zero point ``z``.
NNCF: ``W ~ (q - zero_point) * scale``.

So ``scale = 1 / s`` and ``zero_point = z``. The OpenVINO model stores the scale and a float zero point
as f16 constants, so both are rounded to f16 *before* the integer codes are computed: the codes written
to the model are then exactly the nearest codes for the parameters the model really uses.
"""

from __future__ import annotations

import numpy as np
from nncf.tensor import Tensor
from nncf.tensor import TensorBackend
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns

from nncf_hqq._nncf import CompressedWeight
from nncf_hqq.maths.solver import levels_max
from nncf_hqq.maths.solver import signed_magnitude
from nncf_hqq.maths.solver import unit_gain_factor_for_codes
from nncf_hqq.maths.solver import weighted_mean

#: Largest finite float16 value; scales and zero points are clipped into the f16 range.
F16_MAX = 65504.0
#: Smallest positive (subnormal) float16 value; keeps every stored scale strictly positive.
F16_TINY = 2.0**-24


def hqq_to_nncf(inverse_scale: Tensor, zero: Tensor) -> tuple[Tensor, Tensor]:
    """``(s, z)`` in HQQ's convention to ``(scale, zero_point)`` in NNCF's."""
    return 1.0 / inverse_scale, zero


def nncf_to_hqq(scale: Tensor, zero_point: Tensor) -> tuple[Tensor, Tensor]:
    """``(scale, zero_point)`` in NNCF's convention to ``(s, z)`` in HQQ's."""
    return 1.0 / scale, zero_point.astype(TensorDataType.float32)


def round_to_f16(x: Tensor, low: float, high: float) -> Tensor:
    """Clips into ``[low, high]`` and rounds to the nearest float16, returned as float32."""
    clipped = fns.clip(x.astype(TensorDataType.float32), low, high)
    return clipped.astype(TensorDataType.float16).astype(TensorDataType.float32)


def encode(weight: Tensor, scale: Tensor, zero_point: Tensor, num_bits: int) -> Tensor:
    """Nearest unsigned codes ``clip(round(W / scale + zero_point), 0, 2^b - 1)`` as uint8."""
    if weight.backend == TensorBackend.numpy and scale.backend == zero_point.backend == TensorBackend.numpy:
        # The same operations in one f32 buffer: a fraction of the time and of the peak memory.
        codes = np.divide(weight.data, scale.data, dtype=np.float32)
        codes += zero_point.data
        np.round(codes, out=codes)
        np.clip(codes, 0.0, levels_max(num_bits), out=codes)
        return Tensor(codes.astype(np.uint8))
    codes = fns.round(weight.astype(TensorDataType.float32) / scale + zero_point)
    return fns.clip(codes, 0.0, levels_max(num_bits)).astype(TensorDataType.uint8)


def contiguous(tensor: Tensor) -> Tensor:
    """A C-contiguous copy of a strided numpy tensor (e.g. after ``moveaxis``). OpenVINO constants are built from
    the raw buffer, so a strided array would be written scrambled."""
    if tensor.backend == TensorBackend.numpy and not tensor.data.flags["C_CONTIGUOUS"]:
        return Tensor(np.ascontiguousarray(tensor.data))
    return tensor


def to_compressed_weight(
    grouped_weight: Tensor, scale: Tensor, zero_point: Tensor, num_bits: int, integer_zero_point: bool
) -> CompressedWeight:
    """Builds NNCF's ``CompressedWeight`` (codes, scale, zero point) from NNCF-convention parameters.

    The scale is rounded to f16 (kept positive and finite); a float zero point is rounded to f16, an
    integer one is rounded and clipped to the code range and kept as int32 (like NNCF's RTN). Codes are recomputed
    against exactly those stored values.
    """
    scale, zero_point = stored_scale_zero_point(scale, zero_point, num_bits, integer_zero_point)
    codes = encode(grouped_weight, scale, zero_point, num_bits)
    if integer_zero_point:
        zero_point = zero_point.astype(TensorDataType.int32)
    return CompressedWeight(contiguous(codes), contiguous(scale), contiguous(zero_point))


def stored_scale_zero_point(
    scale: Tensor, zero_point: Tensor, num_bits: int, integer_zero_point: bool
) -> tuple[Tensor, Tensor]:
    """The values a scale and zero point take when written: the scale rounded to f16 (kept positive and finite),
    a float zero point rounded to f16, an integer one rounded and clipped to the code range (float32 tensors)."""
    scale = round_to_f16(fns.abs(scale), F16_TINY, F16_MAX)
    if integer_zero_point:
        return scale, fns.clip(fns.round(zero_point), 0.0, levels_max(num_bits))
    return scale, round_to_f16(zero_point, -F16_MAX, F16_MAX)


def to_symmetric_compressed_weight(grouped_weight: Tensor, scale: Tensor, num_bits: int) -> CompressedWeight:
    """NNCF's ``CompressedWeight`` without zero point: signed codes (int8) and a signed scale rounded to f16."""
    magnitude = round_to_f16(fns.abs(scale), F16_TINY, F16_MAX)
    scale = fns.where(scale < 0.0, -magnitude, magnitude)
    half = float(2 ** (num_bits - 1))
    codes = fns.clip(fns.round(grouped_weight.astype(TensorDataType.float32) / scale), -half, half - 1.0)
    return CompressedWeight(contiguous(codes.astype(TensorDataType.int8)), contiguous(scale), None)


def decompress(compressed: CompressedWeight) -> Tensor:
    """Float32 reconstruction ``(q - zero_point) * scale`` (``q * scale`` without zero point), grouped shape."""
    codes = compressed.tensor.astype(TensorDataType.float32)
    if compressed.zero_point is not None:
        codes = codes - compressed.zero_point.astype(TensorDataType.float32)
    return codes * compressed.scale.astype(TensorDataType.float32)


def with_unit_gain(grouped_weight: Tensor, compressed: CompressedWeight, axis: int) -> CompressedWeight:
    """The same codes and zero points with every group's scale multiplied by ``solver.unit_gain_factor`` of its
    reconstruction (numpy reference of ``nncf_hqq.kernels.refine.with_unit_gain``). The codes stay as they are:
    the model computes ``(q - zero_point) * scale`` with the new scale, which is no longer the scale whose nearest
    codes they are."""
    scale = compressed.scale.astype(TensorDataType.float32)
    factor = unit_gain_factor_for_codes(grouped_weight, compressed.tensor, scale, compressed.zero_point, axis)
    return rescaled(compressed, factor)


def rescaled(compressed: CompressedWeight, factor: Tensor) -> CompressedWeight:
    """``compressed`` with its scale multiplied by ``factor`` and rounded to f16 again (sign kept)."""
    scale = compressed.scale.astype(TensorDataType.float32)
    magnitude = round_to_f16(fns.abs(scale * factor), F16_TINY, F16_MAX)
    return CompressedWeight(compressed.tensor, contiguous(signed_magnitude(scale, magnitude)), compressed.zero_point)


def stored_group_error(
    grouped_weight: Tensor, compressed: CompressedWeight, axis: int, importance: Tensor | None
) -> Tensor:
    """Per-group (importance-weighted) mean squared error of the weights as stored (keepdims)."""
    diff = decompress(compressed) - grouped_weight
    return weighted_mean(diff * diff, importance, axis)


def choose_per_group(use_first: Tensor, first: CompressedWeight, second: CompressedWeight) -> CompressedWeight:
    """Takes every group's codes, scale and zero point from ``first`` where ``use_first`` holds, else ``second``."""
    zero_dtype = first.zero_point.dtype if first.zero_point.dtype == second.zero_point.dtype else TensorDataType.float32
    return CompressedWeight(
        fns.where(use_first, first.tensor, second.tensor),
        fns.where(use_first, first.scale, second.scale),
        fns.where(use_first, first.zero_point.astype(zero_dtype), second.zero_point.astype(zero_dtype)),
    )


def split_zero_point(zero_point: Tensor, scale: Tensor, num_bits: int) -> tuple[Tensor, Tensor]:
    """A float zero point as an integer one plus an additive correction of the decompressed weight:
    ``(q - z) * s = (q - z_int) * s + c`` with ``z_int = clip(round(z), 0, 2^b - 1)`` and ``c = (z_int - z) * s``.

    The identity holds for any integer ``z_int``; the nearest one in the code range keeps the correction small
    (``|c| <= s / 2`` unless ``z`` lies outside the range). Returns ``(z_int as uint8, c as float32)``, both in the
    zero point's shape.
    """
    zero = zero_point.astype(TensorDataType.float32)
    integer = fns.clip(fns.round(zero), 0.0, levels_max(num_bits))
    correction = (integer - zero) * scale.astype(TensorDataType.float32)
    return integer.astype(TensorDataType.uint8), correction
