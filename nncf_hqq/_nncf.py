"""The one module that imports NNCF internals, so that an NNCF upgrade changes one place.

It imports nothing from ``nncf_hqq``: every other module takes NNCF's internal names from here, and the patches
that put HQQ into NNCF's pipeline (``nncf_hqq.integration``) are built from the context managers below, which take
what they install as arguments.

The internal names used:
- the weight-compression data types (``CompressedWeight``, ``WeightCompressionConfig``,
  ``WeightCompressionParameters``), NNCF's ``WeightCompression`` algorithm and its backends
  (``WeightCompressionAlgoBackend``, ``OVWeightCompressionAlgoBackend``), the graph (``NNCFGraph``),
  ``process_stats``, ``ScaleEstimation`` (the output-error guard's reference) and ``track``;
- NNCF's statistic collection (``TensorCollector``, ``RawReducer``, ``AggregatorBase``, ``StatisticPoint``,
  ``StatisticPointsContainer``, ``WCTensorStatistic``): HQQ's token-row statistics are collected beside NNCF's;
- three call sites that are replaced for the duration of one ``compress_weights`` call: the ``WeightCompression``
  class that NNCF's OpenVINO (or Torch) ``compress_weights`` instantiates, the ``track`` that names the progress bar
  of the weight-compression step, and the OpenVINO backend's ``compress_weight`` (so that precomputed codes are
  written as they are instead of being encoded again);
- AWQ's OpenVINO backend (``OVAWQAlgoAlgoBackend``, replaced while AWQ runs so that its rescaled weights are
  recorded, not written: ``nncf_hqq.openvino.rescaling``), the scale each step of ``AWQ`` returns
  (``awq_scales_observed``) and ``create_ov_const_from_tensor`` (how AWQ writes a rescaled weight);
- ``clear_ov_model_cache``: NNCF's cache of compiled weight-lowering models, dropped once Scale Estimation's
  reference pass is over (``HQQOVBackend.release_working_memory``);
- NNCF's Torch backend (its weight-compression backend and encoder, the function hooks that hold decompressors, its
  decompressor modules and packing, graph metatypes, model-graph helpers). These import torch, which the library
  does not need otherwise, so they are imported on first use (``__getattr__`` below).
"""

from __future__ import annotations

import contextlib
import importlib
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
from nncf.common.graph import NNCFGraph
from nncf.common.graph import NNCFNode
from nncf.common.graph.transformations.commands import TargetType
from nncf.common.graph.transformations.layout import TransformationLayout
from nncf.common.logging.track_progress import track
from nncf.common.quantization.structs import QuantizationScheme
from nncf.common.tensor_statistics.collectors import AggregatorBase
from nncf.common.tensor_statistics.collectors import RawReducer
from nncf.common.tensor_statistics.collectors import TensorCollector
from nncf.common.tensor_statistics.statistic_point import StatisticPoint
from nncf.common.tensor_statistics.statistic_point import StatisticPointsContainer
from nncf.common.tensor_statistics.statistics import WCTensorStatistic
from nncf.openvino.graph.node_utils import create_ov_const_from_tensor
from nncf.openvino.optimized_functions import clear_ov_model_cache
from nncf.quantization.algorithms.weight_compression.activation_stats import process_stats
from nncf.quantization.algorithms.weight_compression.algorithm import WeightCompression
from nncf.quantization.algorithms.weight_compression.algorithm import check_user_compression_configuration
from nncf.quantization.algorithms.weight_compression.awq import AWQ
from nncf.quantization.algorithms.weight_compression.backend import WeightCompressionAlgoBackend
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionParameters
from nncf.quantization.algorithms.weight_compression.openvino_backend import OVAWQAlgoAlgoBackend
from nncf.quantization.algorithms.weight_compression.openvino_backend import OVWeightCompressionAlgoBackend
from nncf.quantization.algorithms.weight_compression.parameters import CompressedWeight
from nncf.quantization.algorithms.weight_compression.scale_estimation import ScaleEstimation
from nncf.quantization.algorithms.weight_compression.weight_lowering import reshape_weight_for_grouped_quantization
from nncf.quantization.fake_quantize import calculate_scale_zero_point
from nncf.tensor.functions.openvino_numeric import DTYPE_MAP as OV_DTYPE_MAP

if TYPE_CHECKING:
    from nncf.quantization.algorithms.weight_compression.torch_backend import PTWeightCompressionAlgoBackend
    from nncf.quantization.algorithms.weight_compression.weight_lowering import compress_weight
    from nncf.torch.function_hook.commands import PT2InsertionCommand
    from nncf.torch.function_hook.hook_storage import HookStorage
    from nncf.torch.function_hook.hook_storage import decode_hook_name
    from nncf.torch.function_hook.model_transformer import PT2ModelTransformer
    from nncf.torch.function_hook.nncf_graph.nncf_graph_builder import GraphModelWrapper
    from nncf.torch.function_hook.wrapper import get_hook_storage
    from nncf.torch.function_hook.wrapper import is_wrapped
    from nncf.torch.function_hook.wrapper import wrap_model
    from nncf.torch.graph.graph import PTTargetPoint
    from nncf.torch.graph.operator_metatypes import MATMUL_METATYPES
    from nncf.torch.graph.operator_metatypes import PTAddMetatype
    from nncf.torch.graph.operator_metatypes import PTConstNoopMetatype
    from nncf.torch.graph.operator_metatypes import PTDropoutMetatype
    from nncf.torch.graph.operator_metatypes import PTGatherMetatype
    from nncf.torch.graph.operator_metatypes import PTLayerNormMetatype
    from nncf.torch.graph.operator_metatypes import PTMulMetatype
    from nncf.torch.graph.operator_metatypes import PTNoopMetatype
    from nncf.torch.graph.operator_metatypes import PTReshapeMetatype
    from nncf.torch.graph.operator_metatypes import PTScaledDotProductAttentionMetatype
    from nncf.torch.graph.operator_metatypes import PTSoftmaxMetatype
    from nncf.torch.model_graph_manager import get_const_data
    from nncf.torch.model_graph_manager import get_const_node
    from nncf.torch.model_graph_manager import get_module_by_name
    from nncf.torch.model_graph_manager import split_const_name
    from nncf.torch.quantization.layers import BaseWeightsDecompressor
    from nncf.torch.quantization.layers import INT4AsymmetricWeightsDecompressor
    from nncf.torch.quantization.layers import INT4SymmetricWeightsDecompressor
    from nncf.torch.quantization.layers import INT8AsymmetricWeightsDecompressor
    from nncf.torch.quantization.layers import INT8SymmetricWeightsDecompressor
    from nncf.torch.quantization.layers import SQMultiply
    from nncf.torch.quantization.quantize_functions import pack_int4
    from nncf.torch.quantization.quantize_functions import pack_uint4
    from nncf.torch.quantization.quantize_functions import unpack_uint4

__all__ = [
    "AWQ",
    "MATMUL_METATYPES",
    "OV_DTYPE_MAP",
    "AggregatorBase",
    "BaseWeightsDecompressor",
    "CompressedWeight",
    "GraphModelWrapper",
    "HookStorage",
    "INT4AsymmetricWeightsDecompressor",
    "INT4SymmetricWeightsDecompressor",
    "INT8AsymmetricWeightsDecompressor",
    "INT8SymmetricWeightsDecompressor",
    "NNCFGraph",
    "NNCFNode",
    "OVAWQAlgoAlgoBackend",
    "OVWeightCompressionAlgoBackend",
    "PT2InsertionCommand",
    "PT2ModelTransformer",
    "PTAddMetatype",
    "PTConstNoopMetatype",
    "PTDropoutMetatype",
    "PTGatherMetatype",
    "PTLayerNormMetatype",
    "PTMulMetatype",
    "PTNoopMetatype",
    "PTReshapeMetatype",
    "PTScaledDotProductAttentionMetatype",
    "PTSoftmaxMetatype",
    "PTTargetPoint",
    "PTWeightCompressionAlgoBackend",
    "QuantizationScheme",
    "RawReducer",
    "SQMultiply",
    "ScaleEstimation",
    "StatisticPoint",
    "StatisticPointsContainer",
    "TargetType",
    "TensorCollector",
    "TransformationLayout",
    "WCTensorStatistic",
    "WeightCompression",
    "WeightCompressionAlgoBackend",
    "WeightCompressionConfig",
    "WeightCompressionParameters",
    "awq_backend_replaced",
    "awq_scales_observed",
    "calculate_scale_zero_point",
    "check_user_compression_configuration",
    "check_versions",
    "clear_ov_model_cache",
    "compress_weight",
    "compress_weight_replaced",
    "create_ov_const_from_tensor",
    "decode_hook_name",
    "get_const_data",
    "get_const_node",
    "get_hook_storage",
    "get_module_by_name",
    "is_wrapped",
    "original_compress_weights",
    "pack_int4",
    "pack_uint4",
    "process_stats",
    "reshape_weight_for_grouped_quantization",
    "split_const_name",
    "torch_weight_compression_replaced",
    "track",
    "track_replaced",
    "unpack_uint4",
    "weight_compression_replaced",
    "wrap_model",
]

#: NNCF's Torch internals by name and the module they come from, imported on first use (``__getattr__``).
_TORCH_INTERNALS = {
    "PTWeightCompressionAlgoBackend": "nncf.quantization.algorithms.weight_compression.torch_backend",
    "compress_weight": "nncf.quantization.algorithms.weight_compression.weight_lowering",
    "PT2InsertionCommand": "nncf.torch.function_hook.commands",
    "HookStorage": "nncf.torch.function_hook.hook_storage",
    "decode_hook_name": "nncf.torch.function_hook.hook_storage",
    "PT2ModelTransformer": "nncf.torch.function_hook.model_transformer",
    "GraphModelWrapper": "nncf.torch.function_hook.nncf_graph.nncf_graph_builder",
    "get_hook_storage": "nncf.torch.function_hook.wrapper",
    "wrap_model": "nncf.torch.function_hook.wrapper",
    "is_wrapped": "nncf.torch.function_hook.wrapper",
    "PTTargetPoint": "nncf.torch.graph.graph",
    **{
        name: "nncf.torch.graph.operator_metatypes"
        for name in (
            "MATMUL_METATYPES",
            "PTAddMetatype",
            "PTConstNoopMetatype",
            "PTDropoutMetatype",
            "PTGatherMetatype",
            "PTLayerNormMetatype",
            "PTMulMetatype",
            "PTNoopMetatype",
            "PTReshapeMetatype",
            "PTScaledDotProductAttentionMetatype",
            "PTSoftmaxMetatype",
        )
    },
    **{
        name: "nncf.torch.model_graph_manager"
        for name in ("get_const_data", "get_const_node", "get_module_by_name", "split_const_name")
    },
    **{
        name: "nncf.torch.quantization.layers"
        for name in (
            "BaseWeightsDecompressor",
            "INT4AsymmetricWeightsDecompressor",
            "INT4SymmetricWeightsDecompressor",
            "INT8AsymmetricWeightsDecompressor",
            "INT8SymmetricWeightsDecompressor",
            "SQMultiply",
            "ScaleEstimation",
        )
    },
    **{name: "nncf.torch.quantization.quantize_functions" for name in ("pack_int4", "pack_uint4", "unpack_uint4")},
}
#: The module whose ``WeightCompression`` NNCF's Torch ``compress_weights`` instantiates.
_TORCH_QUANTIZE_MODEL = "nncf.torch.function_hook.quantization.quantize_model"


def __getattr__(name: str) -> Any:
    """NNCF's Torch internals (``_TORCH_INTERNALS``), imported when first asked for: they import torch."""
    module = _TORCH_INTERNALS.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


#: NNCF and OpenVINO releases this package is tested against (OpenVINO by release prefix).
TESTED_NNCF_VERSIONS = ("3.4.0",)
TESTED_OPENVINO_VERSIONS = ("2026.4",)
#: Set to 1 to run on an untested NNCF release anyway.
ALLOW_UNTESTED_ENV = "NNCF_HQQ_ALLOW_UNTESTED_NNCF"

#: NNCF's own ``compress_weights``, captured before ``nncf_hqq`` installs its wrapper.
original_compress_weights: Callable[..., Any] = _quantize_model.compress_weights

#: The OpenVINO backend's encoder of one weight, as NNCF ships it.
original_compress_weight: Callable[..., CompressedWeight] = _ov_backend.compress_weight

_PATCH_LOCK = threading.RLock()


def check_versions() -> None:
    """Raises ``nncf.UnsupportedVersionError`` on an NNCF release this package was not tested with."""
    if os.environ.get(ALLOW_UNTESTED_ENV) == "1" or nncf.__version__ in TESTED_NNCF_VERSIONS:
        return
    msg = (
        f"nncf_hqq is tested with nncf {', '.join(TESTED_NNCF_VERSIONS)} (and openvino "
        f"{', '.join(TESTED_OPENVINO_VERSIONS)}.x), but nncf {nncf.__version__} is installed. "
        f"Install a tested version (pip install 'nncf=={TESTED_NNCF_VERSIONS[-1]}') or set "
        f"{ALLOW_UNTESTED_ENV}=1 to try anyway."
    )
    raise nncf.UnsupportedVersionError(msg)


@contextlib.contextmanager
def _replaced(module: Any, name: str, replacement: Any) -> Iterator[None]:
    """``module.name`` is ``replacement`` within the context (serialised: one replacement of a name at a time)."""
    with _PATCH_LOCK:
        original = getattr(module, name)
        setattr(module, name, replacement)
        try:
            yield
        finally:
            setattr(module, name, original)


def weight_compression_replaced(factory: Callable[..., WeightCompression]) -> contextlib.AbstractContextManager[None]:
    """Within the context, NNCF's OpenVINO ``compress_weights`` builds its algorithm with ``factory`` (called with
    the arguments it would pass to ``WeightCompression``)."""
    return _replaced(_ov_quantize_model, "WeightCompression", factory)


def torch_weight_compression_replaced(
    factory: Callable[..., WeightCompression],
) -> contextlib.AbstractContextManager[None]:
    """Within the context, NNCF's Torch ``compress_weights`` builds its algorithm with ``factory`` (called with the
    arguments it would pass to ``WeightCompression``). Imports NNCF's Torch backend, hence torch."""
    return _replaced(importlib.import_module(_TORCH_QUANTIZE_MODEL), "WeightCompression", factory)


def track_replaced(replacement: Callable[..., Any]) -> contextlib.AbstractContextManager[None]:
    """Within the context, the weight-compression step reports progress through ``replacement`` (``track``'s
    signature)."""
    return _replaced(_wc_algorithm, "track", replacement)


def compress_weight_replaced(
    replacement: Callable[..., CompressedWeight],
) -> contextlib.AbstractContextManager[None]:
    """Within the context, NNCF's OpenVINO writer encodes a weight with ``replacement`` (``compress_weight``'s
    signature: weight, reduction axes, config, precomputed compressed weight)."""
    return _replaced(_ov_backend, "compress_weight", replacement)


def awq_backend_replaced(factory: Callable[..., OVAWQAlgoAlgoBackend]) -> contextlib.AbstractContextManager[None]:
    """Within the context, NNCF's ``AWQ`` builds its OpenVINO backend with ``factory`` (called with the model and
    the weight-compression backend's name-to-node mapping, as ``OVAWQAlgoAlgoBackend`` is)."""
    return _replaced(_ov_backend, "OVAWQAlgoAlgoBackend", factory)


#: The methods of NNCF's ``AWQ`` that compute one weight's scale (data-aware, data-free) and return it.
_AWQ_SCALE_STEPS = ("_data_aware_step", "_data_free_step")


@contextlib.contextmanager
def awq_scales_observed(awq: AWQ, observe: Callable[[Any], None]) -> Iterator[None]:
    """Within the context, every scale ``awq`` computes for a weight is passed to ``observe`` before AWQ rescales
    the weight with it."""
    originals = {name: getattr(awq, name) for name in _AWQ_SCALE_STEPS}
    own = {name: vars(awq)[name] for name in _AWQ_SCALE_STEPS if name in vars(awq)}

    def observed(step: Callable[..., Any]) -> Callable[..., Any]:
        def step_observed(*args: Any, **kwargs: Any) -> Any:
            scale = step(*args, **kwargs)
            observe(scale)
            return scale

        return step_observed

    for name, step in originals.items():
        setattr(awq, name, observed(step))
    try:
        yield
    finally:
        for name in originals:
            if name in own:
                setattr(awq, name, own[name])
            else:
                delattr(awq, name)  # the class's method again
