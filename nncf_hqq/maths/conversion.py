"""The one place where HQQ's convention meets NNCF's (the stored values themselves: ``nncf_hqq.maths.core``).

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
from nncf_hqq.maths import core
from nncf_hqq.maths import grids
from nncf_hqq.maths.core import levels_max


def hqq_to_nncf(inverse_scale: Tensor, zero: Tensor) -> tuple[Tensor, Tensor]:
    """``(s, z)`` in HQQ's convention to ``(scale, zero_point)`` in NNCF's."""
    return 1.0 / inverse_scale, zero


def nncf_to_hqq(scale: Tensor, zero_point: Tensor) -> tuple[Tensor, Tensor]:
    """``(scale, zero_point)`` in NNCF's convention to ``(s, z)`` in HQQ's."""
    return 1.0 / scale, zero_point.astype(TensorDataType.float32)


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
    """``nncf_hqq.maths.core.to_compressed_weight`` (the values as stored, the codes encoded against them) with
    C-contiguous tensors, so that OpenVINO constants built from them are not scrambled (``contiguous``)."""
    result = core.to_compressed_weight(grouped_weight, scale, zero_point, num_bits, integer_zero_point)
    return CompressedWeight(contiguous(result.tensor), contiguous(result.scale), contiguous(result.zero_point))


def to_symmetric_compressed_weight(grouped_weight: Tensor, scale: Tensor, num_bits: int) -> CompressedWeight:
    """``nncf_hqq.maths.grids.to_symmetric_compressed_weight`` (signed int8 codes, the signed scale in f16) with
    C-contiguous tensors (``contiguous``)."""
    result = grids.to_symmetric_compressed_weight(grouped_weight, scale, num_bits)
    return CompressedWeight(contiguous(result.tensor), contiguous(result.scale), None)


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
