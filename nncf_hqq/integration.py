"""The NNCF call sites that run HQQ: what an NNCF pull request would change, done from outside NNCF.

NNCF has no plug-in point for a new weight-compression step, so for one ``compress_weights`` call
``weight_compression_with_hqq`` makes NNCF's OpenVINO (or Torch) ``compress_weights`` build
``HQQWeightCompression``, which differs from NNCF's ``WeightCompression`` only where NNCF would call HQQ
(docs/upstreaming.md):
- in ``__init__``: with Scale Estimation, HQQ takes its place (HQQ refines its own result on the calibration inputs,
  keeping its zero points; ``HQQ.apply`` has ``ScaleEstimation.apply``'s signature);
- in ``set_backend_entity``: the backend that writes HQQ's results (``HQQOVBackend``, or ``HQQPTBackend`` for a
  PyTorch model, imported then: it needs torch);
- in ``apply_with_parameters``: the weights are checked before the model is touched, without Scale Estimation
  ``HQQ.apply``'s compressed weights are what the backend writes, and with AWQ on an OpenVINO model its rescaled
  weights are held one at a time (``HQQOVBackend.awq_rescaling_deferred``);
- in ``get_statistic_points`` and ``collect_statistics_and_statistic_points``: with
  ``HQQParameters.calibration_token_rows``, HQQ's token-row statistics are collected in the same pass as NNCF's
  (``nncf_hqq.statistics``) and scaled by AWQ like NNCF's;
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
from nncf.common.logging import nncf_logger

from nncf_hqq._nncf import NNCFGraph
from nncf_hqq._nncf import StatisticPointsContainer
from nncf_hqq._nncf import WCTensorStatistic
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
from nncf_hqq.statistics import ActivationMap
from nncf_hqq.statistics import add_token_row_points
from nncf_hqq.statistics import token_row_statistics

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
        self._token_row_inputs: ActivationMap = {}
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

    def get_statistic_points(
        self, model: Any, graph: NNCFGraph, matmul_input_to_output_nodes_map: ActivationMap
    ) -> StatisticPointsContainer:
        container = super().get_statistic_points(model, graph, matmul_input_to_output_nodes_map)
        rows = self._hqq.params.calibration_token_rows
        if not (self._data_aware_compression and self._scale_estimation and rows > 0):
            return container
        if self._statistics_path:
            nncf_logger.info(
                "HQQ fits NNCF's per-sample means, not calibration_token_rows: the statistics cache "
                "(statistics_path) holds no token rows"
            )
        else:
            self._token_row_inputs = dict(matmul_input_to_output_nodes_map)
            add_token_row_points(
                container, graph, self._backend_entity, self._token_row_inputs, rows, self._subset_size
            )
        return container

    def collect_statistics_and_statistic_points(
        self,
        model: Any,
        graph: NNCFGraph,
        statistic_points: StatisticPointsContainer | None,
        dataset: nncf.Dataset,
        ratio_defining_params: list[WeightCompressionParameters],
        all_weight_params: list[WeightCompressionParameters],
    ) -> tuple[Any, StatisticPointsContainer]:
        statistics, statistic_points = super().collect_statistics_and_statistic_points(
            model, graph, statistic_points, dataset, ratio_defining_params, all_weight_params
        )
        if statistics is not None and self._token_row_inputs:
            self._hqq.token_statistics = token_row_statistics(
                statistic_points, self._backend_entity, self._token_row_inputs
            )
        return statistics, statistic_points

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
        if self._awq and self._hqq.token_statistics:
            self.scale_token_statistics_with_awq()
        deferred: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if self._awq and isinstance(backend, HQQOVBackend):
            deferred = backend.awq_rescaling_deferred(self.awq_algo)
        with deferred:
            return super().apply_with_parameters(model, graph, dataset, statistics, all_weight_params)

    def scale_token_statistics_with_awq(self) -> None:
        """Makes AWQ's statistics update (after it rescales the weights) apply to HQQ's token rows as well."""
        update = self.awq_algo.update_statistics
        token_statistics = _EmptyWhereMissing(self._hqq.token_statistics)

        def update_both(statistics: Any) -> Any:
            update(token_statistics)  # scales the rows in place, like NNCF's means
            return update(statistics)

        self.awq_algo.update_statistics = update_both


class _EmptyWhereMissing(dict[str, WCTensorStatistic]):
    """Token-row statistics where a MatMul without them (expert weights) reads as no rows."""

    def __missing__(self, key: str) -> WCTensorStatistic:
        return WCTensorStatistic(mean_values=[], shape_values=[])


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
