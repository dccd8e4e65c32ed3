"""HQQ as a step of NNCF's weight-compression pipeline (like NNCF's Scale Estimation)."""

from __future__ import annotations

from collections.abc import Iterable

from nncf import CompressWeightsMode
from nncf.common.logging.track_progress import track
from nncf.tensor import Tensor
from nncf.tensor import TensorBackend
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns

from nncf_hqq import fast_path
from nncf_hqq._nncf_glue import CompressedWeight
from nncf_hqq._nncf_glue import WeightCompressionConfig
from nncf_hqq._nncf_glue import WeightCompressionParameters
from nncf_hqq.conversion import decompress
from nncf_hqq.conversion import hqq_to_nncf
from nncf_hqq.conversion import to_compressed_weight
from nncf_hqq.parameters import HQQParameters
from nncf_hqq.parameters import ZeroPointFormat
from nncf_hqq.solver import rtn_scale_zero_point
from nncf_hqq.solver import split_into_groups

#: The compression modes HQQ handles.
SUPPORTED_MODES = (CompressWeightsMode.INT4_ASYM, CompressWeightsMode.INT8_ASYM)


def single_reduction_axis(reduction_axes: int | tuple[int, ...], weight_name: str) -> int:
    """The one axis along which groups are formed; HQQ, like NNCF's grouped RTN, needs exactly one."""
    axes = (reduction_axes,) if isinstance(reduction_axes, int) else tuple(reduction_axes)
    if len(axes) != 1:
        msg = f"HQQ expects a single reduction axis for weight '{weight_name}', got {axes}."
        raise ValueError(msg)
    return axes[0]


def as_float32_numpy(weight: Tensor) -> Tensor:
    """OpenVINO tensors (also bf16/f16 ones) become float32 numpy tensors; others are only cast."""
    if weight.backend == TensorBackend.ov:
        weight = weight.as_numpy_tensor()
    return weight.astype(TensorDataType.float32)


def group_squared_error(grouped_weight: Tensor, compressed: CompressedWeight, axis: int) -> Tensor:
    """Per-group sum of squared reconstruction errors (keepdims)."""
    diff = decompress(compressed) - grouped_weight
    return fns.sum(diff * diff, axis=axis, keepdims=True)


def choose_per_group(use_first: Tensor, first: CompressedWeight, second: CompressedWeight) -> CompressedWeight:
    """Takes every group's codes, scale and zero point from ``first`` where ``use_first`` holds, else ``second``."""
    zero_dtype = first.zero_point.dtype if first.zero_point.dtype == second.zero_point.dtype else TensorDataType.float32
    return CompressedWeight(
        fns.where(use_first, first.tensor, second.tensor),
        fns.where(use_first, first.scale, second.scale),
        fns.where(use_first, first.zero_point.astype(zero_dtype), second.zero_point.astype(zero_dtype)),
    )


class HQQ:
    """Computes HQQ's compressed weights for the layers of a weight-compression pipeline."""

    def __init__(self, params: HQQParameters, mode: CompressWeightsMode = CompressWeightsMode.INT4_ASYM) -> None:
        """
        :param params: HQQ's hyper-parameters.
        :param mode: the primary compression mode; HQQ decides the layers compressed in it. Layers in the backup
            precision (e.g. INT8_ASYM embeddings and lm_head under INT4_ASYM) keep NNCF's round-to-nearest, so
            the largest layers keep OpenVINO's fastest integer-zero-point kernels.
        """
        if mode not in SUPPORTED_MODES:
            msg = f"HQQ supports the modes {', '.join(m.name for m in SUPPORTED_MODES)}; got {mode}."
            raise ValueError(msg)
        self.params = params
        self.mode = mode

    def is_applicable(self, config: WeightCompressionConfig | None) -> bool:
        """Whether HQQ decides the quantization parameters of a weight compressed with ``config``."""
        return config is not None and config.mode == self.mode

    def compress(self, weight: Tensor, reduction_axis: int, config: WeightCompressionConfig) -> CompressedWeight:
        """Compresses one weight; the result's tensors are in the grouped shape NNCF uses."""
        grouped, axis = split_into_groups(as_float32_numpy(weight), reduction_axis, config.group_size)
        integer_zero_point = self.params.zero_point_format == ZeroPointFormat.INTEGER
        inverse_scale, zero = fast_path.solve(grouped, axis, config.num_bits, self.params)
        scale, zero_point = hqq_to_nncf(inverse_scale, zero)
        result = to_compressed_weight(grouped, scale, zero_point, config.num_bits, integer_zero_point)
        if self.params.rtn_guard:
            rtn_scale, rtn_zero_point = rtn_scale_zero_point(grouped, axis, config.num_bits)
            rtn = to_compressed_weight(grouped, rtn_scale, rtn_zero_point, config.num_bits, True)
            hqq_better = group_squared_error(grouped, result, axis) <= group_squared_error(grouped, rtn, axis)
            result = choose_per_group(hqq_better, result, rtn)
        return result

    def apply(
        self,
        weights: Iterable[tuple[WeightCompressionParameters, Tensor]],
    ) -> dict[str, CompressedWeight]:
        """Compresses every applicable weight, like NNCF's Scale Estimation ``apply``.

        :param weights: pairs of NNCF's per-weight compression parameters and the weight itself.
        :return: precomputed compressed weights by weight name, for the backend to write.
        """
        result: dict[str, CompressedWeight] = {}
        for wp, weight in track(list(weights), description="Applying HQQ"):
            if self.is_applicable(wp.compression_config):
                axis = single_reduction_axis(wp.reduction_axes, wp.weight_name)
                result[wp.weight_name] = self.compress(weight, axis, wp.compression_config)
        return result
