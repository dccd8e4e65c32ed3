"""The NNCF call sites that run HQQ: what an NNCF pull request would change, done from outside NNCF.

NNCF has no plug-in point for a new weight-compression step, so for one ``compress_weights`` call
``weight_compression_with_hqq`` makes NNCF's OpenVINO (or Torch) ``compress_weights`` build
``HQQWeightCompression``, which differs from NNCF's ``WeightCompression`` only where NNCF would call HQQ
(docs/upstreaming.md):
- in ``__init__``: with Scale Estimation, HQQ takes its place (HQQ refines its own result on the calibration inputs,
  keeping its zero points; ``HQQ.apply`` has ``ScaleEstimation.apply``'s signature);
- in ``set_backend_entity``: the backend that writes HQQ's results (``HQQOVBackend``, or ``HQQPTBackend`` for a
  PyTorch model, imported then: it needs torch);
- in ``apply_with_parameters``: the weights are checked before the model is touched, and without Scale Estimation
  ``HQQ.apply``'s compressed weights are what the backend writes;
- the weight-compression progress bar says "(HQQ)".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import nncf
import openvino as ov

from nncf_hqq._nncf import NNCFGraph
from nncf_hqq._nncf import WeightCompression
from nncf_hqq._nncf import WeightCompressionConfig
from nncf_hqq._nncf import WeightCompressionParameters
from nncf_hqq._nncf import torch_weight_compression_replaced
from nncf_hqq._nncf import track
from nncf_hqq._nncf import track_replaced
from nncf_hqq._nncf import weight_compression_replaced
from nncf_hqq.hqq import HQQ
from nncf_hqq.hqq import HQQAlgoBackend
from nncf_hqq.openvino.backend import HQQOVBackend

#: The description of NNCF's weight-compression progress bar, and what it reads with HQQ.
PROGRESS_DESCRIPTION = "Applying Weight Compression"
HQQ_PROGRESS_DESCRIPTION = "Applying Weight Compression (HQQ)"


@dataclass(frozen=True)
class ParameterTargets:
    """Which parameters of a PyTorch model HQQ compresses besides the weights NNCF finds (``target_parameters``).

    :param patterns: glob patterns of parameter names.
    :param explicit: whether the user gave them (a pattern that matches nothing is then an error).
    """

    patterns: tuple[str, ...] = ()
    explicit: bool = False


class HQQWeightCompression(WeightCompression):
    """NNCF's weight-compression algorithm with HQQ deciding the parameters of the weights in its mode."""

    def __init__(self, hqq: HQQ, *args: Any, targets: ParameterTargets | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._hqq = hqq
        self._targets = targets or ParameterTargets()
        if self._scale_estimation:
            self._scale_estimation_algo = hqq

    def set_backend_entity(self, model: Any) -> None:
        self._backend_entity: HQQAlgoBackend
        if isinstance(model, ov.Model):
            self._backend_entity = HQQOVBackend(model, self._hqq)
            return
        from nncf_hqq.torch.backend import HQQPTBackend  # imports torch

        config = WeightCompressionConfig(mode=self.mode, group_size=self.group_size)
        targets = self._targets
        self._backend_entity = HQQPTBackend(self._hqq, targets.patterns, targets.explicit, config, self._ignored_scope)

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
        backend.prepare(model, graph, all_weight_params)
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
def weight_compression_with_hqq(
    hqq: HQQ, torch_model: bool = False, target_parameters: Sequence[str] | None = None
) -> Iterator[None]:
    """Within this context, NNCF's OpenVINO ``compress_weights`` (or, with ``torch_model``, its Torch one)
    compresses with ``HQQWeightCompression``.

    :param target_parameters: (PyTorch) glob patterns of the parameters to compress besides NNCF's weights; None:
        ``nncf_hqq.torch.targets.DEFAULT_TARGET_PARAMETERS`` (transformers' MoE expert tensors).
    """
    targets = ParameterTargets()
    if torch_model:
        from nncf_hqq.torch.targets import DEFAULT_TARGET_PARAMETERS  # imports torch

        explicit = target_parameters is not None
        patterns = tuple(target_parameters) if target_parameters is not None else DEFAULT_TARGET_PARAMETERS
        targets = ParameterTargets(patterns, explicit)

    def factory(*args: Any, **kwargs: Any) -> HQQWeightCompression:
        return HQQWeightCompression(hqq, *args, targets=targets, **kwargs)

    replaced = torch_weight_compression_replaced if torch_model else weight_compression_replaced
    with replaced(factory), track_replaced(track_with_hqq):
        yield
