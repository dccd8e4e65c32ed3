"""HQQ (Half-Quadratic Quantization) weight compression for NNCF with an OpenVINO backend.

Importing this package teaches ``nncf.compress_weights`` the ``hqq=`` and ``hqq_params=`` options::

    import nncf, nncf_hqq
    model = nncf.compress_weights(ov_model, mode=nncf.CompressWeightsMode.INT4_ASYM, group_size=64, hqq=True)

and, with ``hqq=True``, the asymmetric low-bit modes ``nncf_hqq.LowBitMode.INT2_ASYM`` / ``INT3_ASYM``; and
``dataset="self"``: calibration text the model generates itself (``nncf_hqq.self_calibration``).
"""

from __future__ import annotations

import nncf
import nncf.quantization

from nncf_hqq.api import AdvancedCompressionParameters
from nncf_hqq.api import compress_weights
from nncf_hqq.openvino.graph import moe_gate_matmuls
from nncf_hqq.parameters import HQQ_CORE
from nncf_hqq.parameters import HQQ_DEFAULT
from nncf_hqq.parameters import HQQ_REFERENCE
from nncf_hqq.parameters import HQQ_SERIES
from nncf_hqq.parameters import HQQ_TOKEN_ROWS
from nncf_hqq.parameters import AttentionRole
from nncf_hqq.parameters import EarlyStopScope
from nncf_hqq.parameters import HQQParameters
from nncf_hqq.parameters import LowBitMode
from nncf_hqq.parameters import ZeroPointFormat
from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT
from nncf_hqq.self_calibration import SelfCalibration
from nncf_hqq.self_calibration import self_calibration_dataset

__version__ = "0.1.0"

__all__ = [
    "HQQ_CORE",
    "HQQ_DEFAULT",
    "HQQ_REFERENCE",
    "HQQ_SERIES",
    "HQQ_TOKEN_ROWS",
    "SELF_CALIBRATION_DEFAULT",
    "AdvancedCompressionParameters",
    "AttentionRole",
    "EarlyStopScope",
    "HQQParameters",
    "LowBitMode",
    "SelfCalibration",
    "ZeroPointFormat",
    "compress_weights",
    "moe_gate_matmuls",
    "self_calibration_dataset",
]


def _install() -> None:
    """Makes ``nncf.compress_weights`` (and ``nncf.quantization.compress_weights``) accept ``hqq=``."""
    nncf.compress_weights = compress_weights
    nncf.quantization.compress_weights = compress_weights


_install()
