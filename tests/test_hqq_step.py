"""``HQQ.apply``, the NNCF-style step: what it plans, what it returns, and where NNCF's pipeline calls it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import nncf
import numpy as np
import pytest
from nncf import CompressWeightsMode

import nncf_hqq
from nncf_hqq.hqq import HQQ
from nncf_hqq.maths.core import decompress
from tests.ov_models import VOCAB
from tests.ov_models import transformer_like

INT4 = {"mode": CompressWeightsMode.INT4_ASYM, "group_size": 32}


@pytest.fixture
def applied(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Mapping[str, Any], Any]]:
    """Records every ``HQQ.apply`` result and the statistics it was given."""
    calls: list[tuple[Mapping[str, Any], Any]] = []
    original = HQQ.apply

    def spy(
        self: HQQ, model: Any, graph: Any, all_weight_params: Any, statistics: Any, backend_entity: Any
    ) -> Mapping[str, Any]:
        result = original(self, model, graph, all_weight_params, statistics, backend_entity)
        calls.append((result, statistics))
        return result

    monkeypatch.setattr(HQQ, "apply", spy)
    return calls


def test_apply_plans_the_primary_mode_weights_once(applied: list) -> None:
    nncf.compress_weights(transformer_like(), **INT4, hqq=True)
    assert len(applied) == 1
    weights, statistics = applied[0]
    assert statistics is None
    # The INT8 backup layers (embedding, lm_head) stay NNCF's; the INT4 ones are HQQ's.
    assert sorted(weights) == ["down_proj", "moe_experts", "up_proj"]


def test_apply_entries_are_computed_when_read_and_reproducible(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[Any] = []
    original = HQQ.apply

    def read_twice(self: HQQ, *args: Any, **kwargs: Any) -> Mapping[str, Any]:
        weights = original(self, *args, **kwargs)
        reads.extend([weights["up_proj"], weights.get("up_proj"), weights.get("lm_head")])
        return weights

    monkeypatch.setattr(HQQ, "apply", read_twice)
    nncf.compress_weights(transformer_like(), **INT4, hqq=True)
    first, second, absent = reads
    assert first is not second  # computed on each read, nothing held
    np.testing.assert_array_equal(decompress(first).data, decompress(second).data)
    assert absent is None


def test_value_projections_are_left_to_nncf(applied: list) -> None:
    from tests.test_graph_roles import attention_model

    nncf.compress_weights(attention_model(decomposed=False), **INT4, ratio=1.0, hqq=True)
    weights, _ = applied[0]
    assert "v_proj" not in weights and {"q_proj", "k_proj"} <= set(weights)
    nncf.compress_weights(attention_model(decomposed=False), **INT4, ratio=1.0, hqq=True, hqq_params={"rtn_roles": ()})
    assert "v_proj" in applied[1][0]


def test_scale_estimation_slot_hands_hqq_the_statistics(applied: list) -> None:
    rng = np.random.default_rng(0)
    dataset = nncf.Dataset([rng.integers(0, VOCAB, size=(1, 16)) for _ in range(4)])
    model = transformer_like(moe=False)
    nncf.compress_weights(model, **INT4, dataset=dataset, scale_estimation=True, hqq=True)
    assert len(applied) == 1
    weights, statistics = applied[0]
    assert statistics is not None and sorted(weights) == ["down_proj", "up_proj"]
    # With statistics, a value projection gets RTN refined on them (Scale Estimation of the RTN result).


def test_hqq_is_not_called_without_hqq(applied: list) -> None:
    nncf.compress_weights(transformer_like(), **INT4)
    nncf_hqq.compress_weights(transformer_like(), **INT4, hqq=False)
    assert applied == []


def test_value_projection_with_statistics_is_rtn_refined_on_them(applied: list) -> None:
    from tests.test_graph_roles import HIDDEN
    from tests.test_graph_roles import attention_model

    rng = np.random.default_rng(0)
    dataset = nncf.Dataset([rng.standard_normal((1, 8, HIDDEN)).astype(np.float32) for _ in range(4)])
    model = attention_model(decomposed=False)
    nncf.compress_weights(model, **INT4, ratio=1.0, dataset=dataset, scale_estimation=True, hqq=True)
    weights, statistics = applied[0]
    assert statistics is not None and "v_proj" in weights  # RTN as the start, refined on the statistics
