"""The NNCF call sites that run HQQ: what an NNCF pull request would change, done from outside NNCF.

NNCF has no plug-in point for a new weight-compression step, so for one ``compress_weights`` call
``weight_compression_with_hqq`` makes NNCF's OpenVINO ``compress_weights`` build ``HQQWeightCompression``, which
differs from NNCF's ``WeightCompression`` only where NNCF would call HQQ (docs/upstreaming.md):
- in ``__init__``: with Scale Estimation, HQQ takes its place (HQQ refines its own result on the calibration inputs,
  keeping its zero points; ``HQQ.apply`` has ``ScaleEstimation.apply``'s signature);
- in ``set_backend_entity``: the OpenVINO backend that writes HQQ's results (``HQQOVBackend``);
- in ``apply_with_parameters``: the weights are checked before the model is touched, and without Scale Estimation
  ``HQQ.apply``'s compressed weights are what the backend writes;
- the weight-compression progress bar says "(HQQ)".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import nncf
import openvino as ov

from nncf_hqq._nncf import NNCFGraph
from nncf_hqq._nncf import WeightCompression
from nncf_hqq._nncf import WeightCompressionParameters
from nncf_hqq._nncf import track
from nncf_hqq._nncf import track_replaced
from nncf_hqq._nncf import weight_compression_replaced
from nncf_hqq.hqq import HQQ
from nncf_hqq.openvino.backend import HQQOVBackend

#: The description of NNCF's weight-compression progress bar, and what it reads with HQQ.
PROGRESS_DESCRIPTION = "Applying Weight Compression"
HQQ_PROGRESS_DESCRIPTION = "Applying Weight Compression (HQQ)"


class HQQWeightCompression(WeightCompression):
    """NNCF's weight-compression algorithm with HQQ deciding the parameters of the weights in its mode."""

    def __init__(self, hqq: HQQ, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._hqq = hqq
        if self._scale_estimation:
            self._scale_estimation_algo = hqq

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
        backend = self._backend_entity
        self._hqq.check_weights(model, graph, all_weight_params, backend)
        if not self._scale_estimation:
            backend.hqq_weights = self._hqq.apply(model, graph, all_weight_params, None, backend)
        return super().apply_with_parameters(model, graph, dataset, statistics, all_weight_params)


def track_with_hqq(*args: Any, **kwargs: Any) -> Any:
    """NNCF's ``track`` with "(HQQ)" added to the description of the weight-compression bar."""
    description = kwargs.get("description")
    if isinstance(description, str) and description.startswith(PROGRESS_DESCRIPTION):
        kwargs["description"] = description.replace(PROGRESS_DESCRIPTION, HQQ_PROGRESS_DESCRIPTION, 1)
    return track(*args, **kwargs)


@contextlib.contextmanager
def weight_compression_with_hqq(hqq: HQQ) -> Iterator[None]:
    """Within this context, NNCF's OpenVINO ``compress_weights`` compresses with ``HQQWeightCompression``."""

    def factory(*args: Any, **kwargs: Any) -> HQQWeightCompression:
        return HQQWeightCompression(hqq, *args, **kwargs)

    with weight_compression_replaced(factory), track_replaced(track_with_hqq):
        yield
