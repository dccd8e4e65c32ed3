"""Everything that touches NNCF internals lives here, so that an NNCF upgrade changes one module.

NNCF has no plug-in point for a new weight-compression step. HQQ enters the OpenVINO pipeline in two places:
- ``HQQWeightCompression`` (a ``WeightCompression``) checks the weights before the model is touched and gives
  the pipeline an ``HQQOVBackend``;
- ``HQQOVBackend._create_compression_subgraph`` computes HQQ's compressed weight for each applicable layer
  (one layer at a time, inside NNCF's progress bar) and writes a float zero point where HQQ produced one.
``weight_compression_with_hqq`` makes ``nncf.compress_weights`` build that algorithm for one call.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from collections.abc import Iterator
from typing import TYPE_CHECKING
from typing import Any

import nncf
import nncf.openvino.quantization.quantize_model as _ov_quantize_model
import nncf.quantization.algorithms.weight_compression.algorithm as _wc_algorithm
import nncf.quantization.algorithms.weight_compression.openvino_backend as _ov_backend
import nncf.quantization.quantize_model as _quantize_model
import nncf.tensor.functions.openvino_numeric as _ov_dtypes
import numpy as np
import openvino as ov
from nncf.common.graph import NNCFGraph
from nncf.common.logging.track_progress import track
from nncf.quantization.algorithms.weight_compression.activation_stats import process_stats
from nncf.quantization.algorithms.weight_compression.algorithm import WeightCompression
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionParameters
from nncf.quantization.algorithms.weight_compression.openvino_backend import OVWeightCompressionAlgoBackend
from nncf.quantization.algorithms.weight_compression.parameters import CompressedWeight
from nncf.tensor import Tensor
from nncf.tensor import TensorBackend

if TYPE_CHECKING:
    from nncf_hqq.algorithm import HQQ
    from nncf_hqq.parameters import AttentionRole

__all__ = [
    "CompressedWeight",
    "WeightCompressionConfig",
    "WeightCompressionParameters",
    "check_versions",
    "original_compress_weights",
    "weight_compression_with_hqq",
]

#: NNCF and OpenVINO releases this package is tested against (OpenVINO by release prefix).
TESTED_NNCF_VERSIONS = ("3.4.0",)
TESTED_OPENVINO_VERSIONS = ("2026.4",)
#: Set to 1 to run on an untested NNCF release anyway.
ALLOW_UNTESTED_ENV = "NNCF_HQQ_ALLOW_UNTESTED_NNCF"

#: NNCF's own ``compress_weights``, captured before ``nncf_hqq`` installs its wrapper.
original_compress_weights: Callable[..., Any] = _quantize_model.compress_weights

_PATCH_LOCK = threading.Lock()


def check_versions() -> None:
    """Raises ``nncf.UnsupportedVersionError`` on an NNCF release this glue was not tested with."""
    if os.environ.get(ALLOW_UNTESTED_ENV) == "1" or nncf.__version__ in TESTED_NNCF_VERSIONS:
        return
    msg = (
        f"nncf_hqq is tested with nncf {', '.join(TESTED_NNCF_VERSIONS)} (and openvino "
        f"{', '.join(TESTED_OPENVINO_VERSIONS)}.x), but nncf {nncf.__version__} is installed. "
        f"Install a tested version (pip install 'nncf=={TESTED_NNCF_VERSIONS[-1]}') or set "
        f"{ALLOW_UNTESTED_ENV}=1 to try anyway."
    )
    raise nncf.UnsupportedVersionError(msg)


def layer_context(hqq: HQQ, weight: ov.Node, channels: int) -> tuple[np.ndarray | None, AttentionRole | None]:
    """What HQQ's parameters ask to know about a weight's place in the graph: input importance, attention role."""
    from nncf_hqq.importance import norm_gain_importance
    from nncf_hqq.roles import attention_role

    importance = norm_gain_importance(weight, channels) if hqq.uses_norm_gain else None
    role = attention_role(weight) if hqq.uses_roles else None
    return importance, role


class HQQOVBackend(OVWeightCompressionAlgoBackend):
    """NNCF's OpenVINO backend that lets HQQ decide the compressed weights it writes."""

    def __init__(self, model: ov.Model, hqq: HQQ) -> None:
        super().__init__(model)
        self.hqq = hqq

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
        from nncf_hqq.algorithm import single_reduction_axis
        from nncf_hqq.openvino_subgraph import float_zero_point_decompression
        from nncf_hqq.openvino_subgraph import is_float_zero_point

        compressed = precomputed_compressed_weight
        computed_here = False
        if compressed is None and self.hqq.is_applicable(compression_config):
            axis = single_reduction_axis(reduction_axes, const_node_name)
            importance, role = layer_context(self.hqq, self.name_to_node_mapping[const_node_name], weight.shape[axis])
            if self.hqq.writes_all_layers or not self.hqq.keeps_rtn(role):  # else NNCF's own RTN, bit for bit
                compressed = self.hqq.compress(weight, axis, compression_config, importance, role)
                computed_here = True
        if compressed is None or not is_float_zero_point(compressed):
            with _codes_kept(compressed if computed_here else None):
                return super()._create_compression_subgraph(
                    weight,
                    compression_config,
                    reduction_axes,
                    const_node_name,
                    weight_port_id,
                    const_dtype,
                    should_add_convert_node,
                    compressed,
                )
        output_type = const_dtype if should_add_convert_node else None
        bits = self.hqq.bits(compression_config)
        node = float_zero_point_decompression(
            compressed, bits, tuple(weight.shape), const_node_name, weight_port_id, output_type
        )
        return node, compressed


@contextlib.contextmanager
def _codes_kept(compressed: CompressedWeight | None) -> Iterator[None]:
    """While NNCF's OpenVINO backend writes ``compressed``, its ``compress_weight`` returns it as it is.

    Given precomputed parameters, NNCF's writer encodes the weight again (a compiled model per weight, as long as
    its RTN). Without ``unit_gain`` HQQ's codes are exactly the nearest codes of the parameters it stores (the
    same true division, rounding and clipping; tested against NNCF's encoding), so that encoding is only wasted
    time; with ``unit_gain`` the stored scale is not the one the codes were chosen for, and encoding again would
    change the weight (tests/test_api.py::test_model_computes_hqq_unit_gain_weights).
    """
    if compressed is None:
        yield
        return
    original, kept = _ov_backend.compress_weight, compressed

    def keep(
        weight: Tensor, axes: Any, config: WeightCompressionConfig, precomputed: CompressedWeight | None = None
    ) -> CompressedWeight:
        if precomputed is None or precomputed is not kept:
            return original(weight, axes, config, precomputed)
        return CompressedWeight(as_4bit_tensor(precomputed.tensor, config), precomputed.scale, precomputed.zero_point)

    _ov_backend.compress_weight = keep
    try:
        yield
    finally:
        _ov_backend.compress_weight = original


def as_4bit_tensor(codes: Tensor, config: WeightCompressionConfig) -> Tensor:
    """int8/uint8 codes of a 4-bit mode as an OpenVINO i4/u4 tensor, packed two per byte (low nibble first) in
    numpy, which NNCF writes as it is; building the constant from int8 data instead packs element by element
    (0.48 s against 0.014 s for 14 M codes). Other modes, and odd sizes, keep their codes as they are."""
    element_type = _ov_dtypes.DTYPE_MAP[config.compression_dtype]
    if element_type not in (ov.Type.i4, ov.Type.u4) or config.is_symmetric_represented_by_unsigned:
        return codes
    data = np.ascontiguousarray(codes.as_numpy_tensor().data if codes.backend == TensorBackend.ov else codes.data)
    if data.size % 2 or data.dtype not in (np.int8, np.uint8):
        return codes
    flat = data.reshape(-1).view(np.uint8)
    packed = ov.Tensor(element_type, list(data.shape))
    np.bitwise_or(flat[0::2] & 0x0F, flat[1::2] << 4, out=packed.data.reshape(-1).view(np.uint8))
    return Tensor(packed)


class HQQScaleEstimation:
    """Takes the place of NNCF's Scale Estimation when ``hqq=True``: for every applicable layer with calibration
    statistics, HQQ's result refined on the layer's (post-AWQ) calibration inputs, zero points kept.
    Same ``apply`` contract as NNCF's ``ScaleEstimation``: precomputed compressed weights by weight name."""

    def __init__(self, hqq: HQQ, subset_size: int) -> None:
        self._hqq = hqq
        self._subset_size = subset_size

    def apply(
        self,
        model: ov.Model,
        graph: NNCFGraph,
        all_weight_params: list[WeightCompressionParameters],
        statistics: dict[str, Any],
        backend_entity: OVWeightCompressionAlgoBackend,
    ) -> dict[str, CompressedWeight]:
        from nncf_hqq.algorithm import single_reduction_axis

        result: dict[str, CompressedWeight] = {}
        for wp in track(all_weight_params, description="Applying HQQ + Scale Estimation"):
            node = wp.node_with_weight
            if not self._hqq.is_applicable(wp.compression_config) or node.node_name not in statistics:
                continue
            weight = backend_entity.get_weight(node, wp.weight_port_id, model, graph)
            act_axis, _ = backend_entity.get_activation_channel_axis_and_shape(graph, node)
            _, activations = process_stats(statistics[node.node_name], self._subset_size, act_ch_axis=act_axis)
            axis = single_reduction_axis(wp.reduction_axes, wp.weight_name)
            const_node = backend_entity.name_to_node_mapping[wp.weight_name]
            importance, role = layer_context(self._hqq, const_node, weight.shape[axis])
            result[wp.weight_name] = self._hqq.compress_on_activations(
                weight, axis, wp.compression_config, activations, importance, role
            )
        return result


class HQQWeightCompression(WeightCompression):
    """NNCF's weight-compression algorithm with HQQ deciding the parameters of applicable layers."""

    def __init__(self, hqq: HQQ, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._hqq = hqq
        if self._scale_estimation:
            subset_size = self._advanced_parameters.scale_estimation_params.subset_size
            self._scale_estimation_algo = HQQScaleEstimation(hqq, subset_size)

    def set_backend_entity(self, model: ov.Model) -> None:
        self._backend_entity = HQQOVBackend(model, self._hqq)

    def apply_with_parameters(
        self,
        model: ov.Model,
        graph: NNCFGraph,
        dataset: nncf.Dataset | None,
        statistics: Any,
        all_weight_params: list[WeightCompressionParameters],
    ) -> ov.Model:
        self._validate_weights(model, graph, all_weight_params)
        return super().apply_with_parameters(model, graph, dataset, statistics, all_weight_params)

    def _validate_weights(
        self, model: ov.Model, graph: NNCFGraph, all_weight_params: list[WeightCompressionParameters]
    ) -> None:
        """Checks every weight HQQ will compress before the model is modified (NaN/Inf, grouping axis)."""
        from nncf_hqq.algorithm import single_reduction_axis

        for wp in all_weight_params:
            if not self._hqq.is_applicable(wp.compression_config):
                continue
            single_reduction_axis(wp.reduction_axes, wp.weight_name)
            weight = self._backend_entity.get_weight(wp.node_with_weight, wp.weight_port_id, model, graph)
            if not all_finite(weight.as_numpy_tensor().data):
                msg = (
                    f"Weight '{wp.weight_name}' of layer '{wp.node_with_weight.node_name}' contains NaN or Inf "
                    "values; HQQ cannot compress it. The model was not modified."
                )
                raise nncf.ValidationError(msg)


def all_finite(data: np.ndarray) -> bool:
    """Whether an array holds no NaN/Inf. A sum is NaN/Inf when an element is (no weight-sized temporary); only
    when it is (or overflows) are the elements checked one by one."""
    with np.errstate(over="ignore", invalid="ignore"):
        accumulator = np.float32 if data.dtype.itemsize < 4 else None  # f16 sums overflow early
        if np.isfinite(np.add.reduce(data, axis=None, dtype=accumulator)):
            return True
    return bool(np.isfinite(data).all())


def _track_with_hqq(*args: Any, **kwargs: Any) -> Any:
    """NNCF's ``track`` with "(HQQ)" added to the description of the weight-compression bar."""
    description = kwargs.get("description")
    if isinstance(description, str) and description.startswith("Applying Weight Compression"):
        kwargs["description"] = description.replace(
            "Applying Weight Compression", "Applying Weight Compression (HQQ)", 1
        )
    return track(*args, **kwargs)


@contextlib.contextmanager
def weight_compression_with_hqq(hqq: HQQ) -> Iterator[None]:
    """Within this context, NNCF's OpenVINO ``compress_weights`` builds ``HQQWeightCompression``."""

    def factory(*args: Any, **kwargs: Any) -> HQQWeightCompression:
        return HQQWeightCompression(hqq, *args, **kwargs)

    with _PATCH_LOCK:
        original = _ov_quantize_model.WeightCompression
        original_track = _wc_algorithm.track
        _ov_quantize_model.WeightCompression = factory
        _wc_algorithm.track = _track_with_hqq
        try:
            yield
        finally:
            _ov_quantize_model.WeightCompression = original
            _wc_algorithm.track = original_track
