"""OpenVINO decompression subgraph with a float (f16) zero point."""

from __future__ import annotations

import numpy as np
import openvino as ov
from openvino import opset13 as opset

from nncf_hqq._nncf import CompressedWeight

#: Storage type of the integer codes by bit width.
CODE_TYPES = {2: ov.Type.u2, 3: ov.Type.u3, 4: ov.Type.u4, 8: ov.Type.u8}


def is_float_zero_point(compressed: CompressedWeight) -> bool:
    """Whether the zero point is a float tensor (HQQ) rather than integer codes (NNCF's RTN)."""
    zero_point = compressed.zero_point
    return zero_point is not None and np.issubdtype(zero_point.as_numpy_tensor().data.dtype, np.floating)


def float_zero_point_decompression(
    compressed: CompressedWeight,
    num_bits: int,
    original_shape: tuple[int, ...],
    name: str,
    port_id: int,
    output_type: ov.Type | None,
) -> ov.Node:
    """``((convert(codes) - zero_point_f16) * scale_f16)`` reshaped to the weight's shape.

    Codes are stored as u2/u3/u4/u8, scale and zero point as f16 constants. The node names follow NNCF's
    (``{name}/zero_point``, ``{name}/scale``) so tools that look for them still find them.

    :param output_type: element type the original constant had, when a Convert back to it is needed.
    """
    codes = codes_constant(compressed.tensor.as_numpy_tensor().data, CODE_TYPES[num_bits], name)
    zero_point = _f16_constant(compressed.zero_point.as_numpy_tensor().data, f"{name}/zero_point")
    scale = _f16_constant(compressed.scale.as_numpy_tensor().data, f"{name}/scale")
    weight = opset.convert(codes, ov.Type.f16)
    weight = opset.subtract(weight, zero_point, name=f"{name}/zero_point/subtract")
    weight = opset.multiply(weight, scale, name=f"{name}/fq_weights_{port_id}")
    if tuple(weight.get_output_partial_shape(0).to_shape()) != tuple(original_shape):
        weight = opset.reshape(weight, output_shape=list(original_shape), special_zero=False)
    if output_type is not None:
        weight = opset.convert(weight, output_type, name=f"{name}/fq_weights_{port_id}/convert")
    return weight


def codes_constant(codes: np.ndarray, code_type: ov.Type, name: str) -> ov.Node:
    """The codes as a ``code_type`` constant; u4 codes are packed with numpy (two per byte, first one in the low
    nibble, as OpenVINO stores them) straight into the constant's tensor, instead of going through a Python list,
    which is slow and memory hungry."""
    if code_type != ov.Type.u4:
        return opset.constant(codes, dtype=code_type, name=name)
    flat = np.ascontiguousarray(codes, dtype=np.uint8).reshape(-1)
    if flat.size % 2:
        flat = np.append(flat, np.uint8(0))
    tensor = ov.Tensor(code_type, ov.Shape(list(codes.shape)))
    packed = tensor.data.reshape(-1).view(np.uint8)
    np.left_shift(flat[1::2], 4, out=packed)
    np.bitwise_or(packed, flat[0::2] & 0x0F, out=packed)
    return opset.constant(tensor, shared_memory=True, name=name)


def _f16_constant(values: np.ndarray, name: str) -> ov.Node:
    # Contiguous: OpenVINO misreads the element type of some strided float16 views (seen as i16).
    return opset.constant(np.ascontiguousarray(values, dtype=np.float16), dtype=ov.Type.f16, name=name)
