"""
Token-row calibration statistics: a few token positions of every calibration sample's input to a layer.

NNCF's data-aware steps (AWQ, Scale Estimation) fit one vector per calibration sample, the mean of the layer's input
over the sample's tokens; a mean over a sequence cancels what varies from token to token. With
calibration_token_rows = k, HQQ's scale refinement and output guard fit k token rows of each sample instead (drawn
at random, a fixed seed per layer), collected in the same pass over the dataset as NNCF's statistics under their own
algorithm key (TOKEN_ROWS_KEY), so that NNCF's steps see exactly what they would.
"""

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
from nncf.common.graph import NNCFGraph
from nncf.common.graph import NNCFNode
from nncf.common.graph.transformations.commands import TargetType
from nncf.common.tensor_statistics.collectors import AggregatorBase
from nncf.common.tensor_statistics.collectors import RawReducer
from nncf.common.tensor_statistics.collectors import TensorCollector
from nncf.common.tensor_statistics.statistic_point import StatisticPoint
from nncf.common.tensor_statistics.statistic_point import StatisticPointsContainer
from nncf.common.tensor_statistics.statistics import WCTensorStatistic
from nncf.quantization.algorithms.weight_compression.backend import WeightCompressionAlgoBackend
from nncf.tensor import Tensor
from nncf.tensor import functions as fns

# The algorithm key HQQ's token-row statistic points are registered under, and the branch holding the rows.
TOKEN_ROWS_KEY = "HQQ_token_rows"
ROWS_BRANCH = "rows"

# (activation node, output port, input channel axis) -> the MatMuls it feeds, as NNCF's weight compression maps them.
ActivationMap = Mapping[tuple[NNCFNode, int, int], list[NNCFNode]]


def sample_token_rows(activation: Tensor, channel_axis: int, count: int, rng: np.random.Generator) -> list[Tensor]:
    """
    Count rows (all when fewer) of the activation with its channel axis last and every other axis flattened into one
    (batch and tokens), drawn without replacement; copies in the activation's backend, each [channels], in order.
    """
    rows = fns.moveaxis(activation, channel_axis % activation.ndim, -1)
    rows = rows.reshape((-1, rows.shape[-1]))
    total = rows.shape[0]
    chosen = np.sort(rng.choice(total, size=min(count, total), replace=False))
    picked = rows[chosen]
    return [picked[i] for i in range(picked.shape[0])]


class TokenRowsAggregator(AggregatorBase):
    """
    Keeps rows_per_sample random token rows of every registered activation (see `sample_token_rows`).
    """

    def __init__(self, rows_per_sample: int, channel_axis: int, seed: int, num_samples: int | None) -> None:
        super().__init__(None, num_samples=num_samples)
        self._rows_per_sample = rows_per_sample
        self._channel_axis = channel_axis
        self._seed = seed
        self._rng = np.random.default_rng(seed)

    def _register_reduced_input_impl(self, x: Tensor) -> None:
        self._container.append(sample_token_rows(x, self._channel_axis, self._rows_per_sample, self._rng))

    def _aggregate_impl(self) -> list[Tensor]:
        return [row for rows in self._container for row in rows]

    def reset(self) -> None:
        super().reset()
        self._rng = np.random.default_rng(self._seed)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenRowsAggregator) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[Any, ...]:
        return (type(self).__name__, self._num_samples, self._rows_per_sample, self._channel_axis, self._seed)


def token_rows_collector(
    rows_per_sample: int, channel_axis: int, seed: int, num_samples: int | None
) -> TensorCollector:
    """
    A collector of rows_per_sample token rows per sample of a layer's input (the whole input is read out: RawReducer).
    """
    collector = TensorCollector()
    collector.register_statistic_branch(
        ROWS_BRANCH, RawReducer(), TokenRowsAggregator(rows_per_sample, channel_axis, seed, num_samples)
    )
    return collector


def feeds_expert_weights(matmuls: list[NNCFNode], graph: NNCFGraph, backend: WeightCompressionAlgoBackend) -> bool:
    """
    Whether any of the MatMuls has a 3-D (per-expert) weight: their inputs keep NNCF's per-expert means.
    """
    for node in matmuls:
        for _, port_id in backend.get_weight_names_and_port_ids(node, graph):
            if len(backend.get_weight_shape(node, port_id, graph)) == 3:
                return True
    return False


def add_token_row_points(
    container: StatisticPointsContainer,
    graph: NNCFGraph,
    backend: WeightCompressionAlgoBackend,
    activations: ActivationMap,
    rows_per_sample: int,
    num_samples: int | None,
) -> None:
    """
    Registers a token-row collector (TOKEN_ROWS_KEY) on every activation that feeds no expert weights; the seed of
    each is its position among the activations, so that a run is reproducible.
    """
    for seed, ((node, port_id, channel_axis), matmuls) in enumerate(activations.items()):
        if feeds_expert_weights(matmuls, graph, backend):
            continue
        point = backend.target_point(TargetType.POST_LAYER_OPERATION, node.node_name, port_id=port_id)
        collector = token_rows_collector(rows_per_sample, channel_axis, seed, num_samples)
        container.add_statistic_point(
            StatisticPoint(target_point=point, tensor_collector=collector, algorithm=TOKEN_ROWS_KEY)
        )


def token_row_statistics(
    container: StatisticPointsContainer, backend: WeightCompressionAlgoBackend, activations: ActivationMap
) -> dict[str, WCTensorStatistic]:
    """
    The collected token rows by MatMul name as WCTensorStatistic, one row per entry (so that process_stats and AWQ's
    statistics update apply), each MatMul its own copy (AWQ scales them in place). A MatMul whose input has no
    token-row collector (expert weights, statistics loaded from a cache made without them) has no entry.
    """
    statistics: dict[str, WCTensorStatistic] = {}
    for (node, port_id, _), matmuls in activations.items():
        collectors = list(
            container.get_algo_statistics_for_node(
                node.node_name, backend.get_filter_fn_for_statistics(port_id, TOKEN_ROWS_KEY), TOKEN_ROWS_KEY
            )
        )
        if not collectors:
            continue
        rows = collectors[0].get_statistics()[ROWS_BRANCH]
        if not rows:
            continue
        shape = (1, int(rows[0].shape[0]))
        stats = WCTensorStatistic(mean_values=list(rows), shape_values=[shape] * len(rows))
        for matmul in matmuls:
            statistics[matmul.node_name] = copy.deepcopy(stats)
    return statistics
