"""NNCF's OpenVINO writer with the one change HQQ needs of it: precomputed integer codes are written as they are.

NNCF 3.4.0's writer encodes every weight itself; of a precomputed ``CompressedWeight`` (Scale Estimation's, GPTQ's)
it reads the scale and zero point only. HQQ's codes must be written as they are: they are the nearest codes of the
parameters HQQ stores, except after ``unit_gain``, where the stored scale is not the one the codes were chosen for,
and encoding again would change the weight (tests/test_api.py::test_model_computes_hqq_unit_gain_weights).
Skipping the encoder also saves a compiled model per weight.

- ``has_final_codes``, ``final_codes`` and ``packed_4bit_codes`` are that change. The NNCF pull request makes it in
  NNCF's own ``compress_weight`` instead (a precomputed weight with integer codes is returned as it is:
  upstream/edits_0001.py), which every backend's writer calls.
- ``OVWeightCompressionAlgoBackend`` is NNCF 3.4.0's backend with that change made from outside NNCF: while its
  writer writes a weight with final codes, the module's ``compress_weight`` is ``final_codes``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import openvino as ov
from nncf.tensor import Tensor
from nncf.tensor import TensorBackend

from nncf_hqq._nncf import OV_DTYPE_MAP
from nncf_hqq._nncf import CompressedWeight
from nncf_hqq._nncf import OVWeightCompressionAlgoBackend as NNCFOVWeightCompressionAlgoBackend
from nncf_hqq._nncf import WeightCompressionConfig
from nncf_hqq._nncf import compress_weight_replaced
from nncf_hqq._nncf import original_compress_weight


def has_final_codes(precomputed_compressed_weight: CompressedWeight | None, config: WeightCompressionConfig) -> bool:
    """
    Whether a precomputed compressed weight carries final integer codes, to be written as they are.

    :param precomputed_compressed_weight: What an earlier step computed for the weight, if anything.
    :param config: The weight's compression configuration.
    :return: True for integer codes (`tensor`) with an integer mode; scales and zero points alone (Scale
        Estimation, GPTQ) and codebook indexes are not final codes.
    """
    return (
        precomputed_compressed_weight is not None
        and precomputed_compressed_weight.tensor is not None
        and config.is_integer
    )


def final_codes(compressed_weight: CompressedWeight, element_type: ov.Type) -> CompressedWeight:
    """
    The compressed weight to write for final codes: the codes as they are (4-bit ones packed), its scale and zero
    point.

    :param compressed_weight: Precomputed compressed weight with final codes (`has_final_codes`).
    :param element_type: The element type the codes are written with.
    :return: The compressed weight to write.
    """
    codes = compressed_weight.tensor
    packed = None if codes is None else packed_4bit_codes(codes, element_type)
    return CompressedWeight(packed, compressed_weight.scale, compressed_weight.zero_point)


def packed_4bit_codes(codes: Tensor, element_type: ov.Type) -> Tensor:
    """
    Integer codes of an i4/u4 element type as an OpenVINO tensor of that type, packed two per byte (low nibble
    first) in numpy: creating the constant from int8/uint8 data instead packs element by element, much slower.

    :param codes: int8/uint8 codes.
    :param element_type: The element type the codes are written with.
    :return: The packed codes; the codes as they are for other element types and for an odd number of codes.
    """
    if element_type not in (ov.Type.i4, ov.Type.u4):
        return codes
    data = np.ascontiguousarray(codes.as_numpy_tensor().data if codes.backend == TensorBackend.ov else codes.data)
    if data.size % 2 or data.dtype not in (np.int8, np.uint8):
        return codes
    flat = data.reshape(-1).view(np.uint8)
    packed = ov.Tensor(element_type, list(data.shape))
    np.bitwise_or(flat[0::2] & 0x0F, flat[1::2] << 4, out=packed.data.reshape(-1).view(np.uint8))
    return Tensor(packed)


class OVWeightCompressionAlgoBackend(NNCFOVWeightCompressionAlgoBackend):
    """NNCF's OpenVINO weight-compression backend whose writer writes final codes as they are (``has_final_codes``)."""

    def _create_compression_subgraph(
        self,
        weight: Tensor,
        compression_config: WeightCompressionConfig,
        reduction_axes: tuple[int, ...],
        const_node_name: str,
        weight_port_id: int,
        const_dtype: ov.Type,
        should_add_convert_node: bool,
        precomputed_compressed_weight: CompressedWeight | None = None,
    ) -> tuple[ov.Node, CompressedWeight]:
        precomputed = precomputed_compressed_weight
        arguments = (weight, compression_config, reduction_axes, const_node_name, weight_port_id, const_dtype)
        create = super()._create_compression_subgraph
        if not has_final_codes(precomputed, compression_config):
            return create(*arguments, should_add_convert_node, precomputed)
        element_type = OV_DTYPE_MAP[compression_config.compression_dtype]

        def write_as_is(
            weight: Tensor, axes: Any, config: WeightCompressionConfig, compressed: CompressedWeight | None = None
        ) -> CompressedWeight:
            if compressed is None or compressed is not precomputed:
                return original_compress_weight(weight, axes, config, compressed)
            return final_codes(compressed, element_type)

        with compress_weight_replaced(write_as_is):
            return create(*arguments, should_add_convert_node, precomputed)
