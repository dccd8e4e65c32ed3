"""The one module that imports NNCF internals, so that an NNCF upgrade changes one place.

It imports nothing from ``nncf_hqq``: every other module takes NNCF's internal names from here, and the patches
that put HQQ into NNCF's pipeline (``nncf_hqq.integration``) are built from the context managers below, which take
what they install as arguments.

The internal names used:
- the weight-compression data types (``CompressedWeight``, ``WeightCompressionConfig``,
  ``WeightCompressionParameters``), NNCF's ``WeightCompression`` algorithm and its backends
  (``WeightCompressionAlgoBackend``, ``OVWeightCompressionAlgoBackend``), the graph (``NNCFGraph``),
  ``process_stats`` and ``track``;
- three call sites that are replaced for the duration of one ``compress_weights`` call: the ``WeightCompression``
  class that NNCF's OpenVINO ``compress_weights`` instantiates, the ``track`` that names the progress bar of the
  weight-compression step, and the OpenVINO backend's ``compress_weight`` (so that precomputed codes are written as
  they are instead of being encoded again).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import nncf
import nncf.openvino.quantization.quantize_model as _ov_quantize_model
import nncf.quantization.algorithms.weight_compression.algorithm as _wc_algorithm
import nncf.quantization.algorithms.weight_compression.openvino_backend as _ov_backend
import nncf.quantization.quantize_model as _quantize_model
from nncf.common.graph import NNCFGraph
from nncf.common.logging.track_progress import track
from nncf.quantization.algorithms.weight_compression.activation_stats import process_stats
from nncf.quantization.algorithms.weight_compression.algorithm import WeightCompression
from nncf.quantization.algorithms.weight_compression.backend import WeightCompressionAlgoBackend
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionParameters
from nncf.quantization.algorithms.weight_compression.openvino_backend import OVWeightCompressionAlgoBackend
from nncf.quantization.algorithms.weight_compression.parameters import CompressedWeight
from nncf.tensor.functions.openvino_numeric import DTYPE_MAP as OV_DTYPE_MAP

__all__ = [
    "OV_DTYPE_MAP",
    "CompressedWeight",
    "NNCFGraph",
    "OVWeightCompressionAlgoBackend",
    "WeightCompression",
    "WeightCompressionAlgoBackend",
    "WeightCompressionConfig",
    "WeightCompressionParameters",
    "check_versions",
    "compress_weight_replaced",
    "original_compress_weights",
    "process_stats",
    "track",
    "track_replaced",
    "weight_compression_replaced",
]

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
