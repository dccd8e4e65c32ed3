"""The decompression module of HQQ's weights with a float (f16) zero point, in the style of NNCF's Torch modules.

NNCF's Torch backend keeps a compressed weight as its packed integer codes, stored in place of the parameter, and a
decompressor module (a function hook on that parameter, in the model's ``__nncf_hooks``) that rebuilds the float
weight whenever the parameter is used. NNCF's decompressors take integer zero points only; HQQ's float zero points
are decompressed by ``FloatZeroPointDecompressor``: ``(codes - zero_point) * scale`` with the codes packed as NNCF
packs them (u4 two per byte, low nibble first) and the scale and zero point as f16 buffers, the same arithmetic
as the f16 subgraph of the OpenVINO backend. ``openvino.convert_model`` recognises the unpacking, so the exported
model keeps u4 codes and f16 constants.
"""

from __future__ import annotations

import numpy as np
import torch

from nncf_hqq._nncf import BaseWeightsDecompressor
from nncf_hqq._nncf import INT4AsymmetricWeightsDecompressor
from nncf_hqq._nncf import INT4SymmetricWeightsDecompressor
from nncf_hqq._nncf import INT8AsymmetricWeightsDecompressor
from nncf_hqq._nncf import INT8SymmetricWeightsDecompressor
from nncf_hqq._nncf import QuantizationScheme
from nncf_hqq._nncf import pack_uint4
from nncf_hqq._nncf import unpack_uint4

#: Code widths the module stores: u4 (packed two per byte) and u8.
SUPPORTED_BITS = (4, 8)


class FloatZeroPointDecompressor(BaseWeightsDecompressor):
    """Decompresses unsigned codes with an f16 zero point: ``(codes - zero_point) * scale``, computed in f16.

    The codes are the parameter the module is hooked on (``pack_weight`` gives their stored form); ``_scale`` and
    ``_zero_point`` are f16 buffers in the grouped shape of the codes (one value per group).
    """

    def __init__(
        self,
        scale: torch.Tensor,
        zero_point: torch.Tensor,
        compressed_weight_shape: tuple[int, ...],
        num_bits: int = 4,
        result_shape: tuple[int, ...] | None = None,
        result_dtype: torch.dtype | None = None,
    ) -> None:
        """
        :param scale: the scale of every group (any float dtype; stored as f16).
        :param zero_point: the float zero point of every group (stored as f16).
        :param compressed_weight_shape: the grouped shape of the codes (NNCF's, e.g. ``[out, groups, group_size]``).
        :param num_bits: 4 (codes packed two per byte) or 8.
        :param result_shape: the shape of the original weight, when it differs from the grouped shape.
        :param result_dtype: the dtype of the original weight (the result is computed in f16 and cast to it).
        """
        super().__init__()
        if num_bits not in SUPPORTED_BITS:
            msg = f"FloatZeroPointDecompressor stores {SUPPORTED_BITS}-bit codes, got num_bits={num_bits}."
            raise ValueError(msg)
        self.register_buffer("_scale", scale.type(dtype=torch.float16))
        self.register_buffer("_zero_point", zero_point.type(dtype=torch.float16))
        self.num_bits = num_bits
        self.compressed_weight_shape = tuple(compressed_weight_shape)
        self.result_shape = None if result_shape is None else tuple(result_shape)
        self.result_dtype = result_dtype

    @property
    def quantization_mode(self) -> QuantizationScheme:
        return QuantizationScheme.ASYMMETRIC

    def pack_weight(self, weight: torch.Tensor) -> torch.Tensor:
        """The stored form of unsigned integer codes: u4 packed two per byte (``[n / 2, 1]``, the bytes of NNCF's
        ``pack_uint4``), or u8 as they are. CPU codes are checked and packed in numpy (``pack_u4``), an order of
        magnitude faster than the same torch operations on CPU."""
        if torch.is_floating_point(weight):
            msg = f"Codes must be integers, got dtype {weight.dtype}."
            raise ValueError(msg)
        low, high = code_range(weight)
        if low < 0 or high > 2**self.num_bits - 1:
            msg = f"Codes are not in [0, {2**self.num_bits - 1}]."
            raise ValueError(msg)
        codes = weight.type(dtype=torch.uint8)
        if self.num_bits != 4:
            return codes
        return torch.from_numpy(pack_u4(codes.numpy())) if codes.device.type == "cpu" else pack_uint4(codes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        codes = unpack_uint4(x) if self.num_bits == 4 else x
        result = codes.reshape(self.compressed_weight_shape).type(dtype=torch.float16)
        del codes  # the unpacked codes go before the arithmetic, which works in place on the f16 copy
        result.sub_(self._zero_point).mul_(self._scale)
        if self.result_shape is not None:
            result = result.reshape(self.result_shape)
        return result.type(dtype=self.result_dtype) if self.result_dtype is not None else result


def code_range(codes: torch.Tensor) -> tuple[int, int]:
    """The smallest and largest code (0, 0 for none), read in numpy for CPU tensors."""
    if codes.numel() == 0:
        return 0, 0
    if codes.device.type == "cpu":
        values = codes.detach().numpy()
        return int(values.min()), int(values.max())
    low, high = torch.aminmax(codes)
    return int(low), int(high)


def pack_u4(codes: np.ndarray) -> np.ndarray:
    """uint8 codes in [0, 15] packed two per byte, the first in the low nibble, as ``[n / 2, 1]`` uint8: the bytes and
    shape of NNCF's ``pack_uint4`` (``n`` must be even)."""
    flat = np.ascontiguousarray(codes, dtype=np.uint8).reshape(-1)
    packed = (flat[0::2] & 0x0F) | (flat[1::2] << 4)
    return packed.reshape(-1, 1)


def packed_u4_shape(weight_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape 4-bit codes of a weight are stored in, packed two per byte: ``[n / 2, 1]`` for a matrix (NNCF's
    ``pack_uint4``), ``[experts, n / (2 * experts)]`` for a 3D expert tensor, whose leading axis code that reads the
    parameter's shape relies on (transformers' grouped MoE forward takes the number of experts from ``size(0)``).
    The bytes are the same either way."""
    count = int(np.prod(weight_shape))
    if len(weight_shape) < 3:
        return (count // 2, 1)
    return (weight_shape[0], count // (2 * weight_shape[0]))


def decompressor_for(
    scale: torch.Tensor,
    zero_point: torch.Tensor | None,
    compressed_weight_shape: tuple[int, ...],
    num_bits: int,
    result_shape: tuple[int, ...],
    result_dtype: torch.dtype,
) -> BaseWeightsDecompressor:
    """The module that decompresses codes with this scale and zero point: ``FloatZeroPointDecompressor`` for a
    float zero point, NNCF's own decompressor of the mode otherwise (integer zero point: asymmetric; none:
    symmetric). NNCF's 8-bit modules do not reshape: their codes are stored in the weight's own shape."""
    shape = tuple(compressed_weight_shape)
    if zero_point is not None and torch.is_floating_point(zero_point):
        return FloatZeroPointDecompressor(scale, zero_point, shape, num_bits, result_shape, result_dtype)
    if num_bits == 8:
        if zero_point is None:
            return INT8SymmetricWeightsDecompressor(scale, result_dtype=result_dtype)
        return INT8AsymmetricWeightsDecompressor(scale, zero_point, result_dtype=result_dtype)
    if zero_point is None:
        return INT4SymmetricWeightsDecompressor(scale, shape, result_shape, result_dtype)
    return INT4AsymmetricWeightsDecompressor(scale, zero_point, shape, result_shape, result_dtype)
