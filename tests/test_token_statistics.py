"""HQQ's token-row calibration statistics (``nncf_hqq.statistics``, ``HQQParameters.calibration_token_rows``).

Exact cases: the rows drawn are rows of the activation; with as many rows per sample as the sample has tokens,
each sample's rows average to NNCF's per-sample mean (also after AWQ has rescaled both); a statistics cache made
without token rows leaves HQQ on NNCF's means; the refinement on token rows differs from the one on means.
"""

from __future__ import annotations

from typing import Any

import nncf
import numpy as np
import pytest
from nncf import CompressWeightsMode
from nncf.tensor import Tensor

import nncf_hqq  # noqa: F401
from nncf_hqq.hqq import HQQ
from nncf_hqq.statistics import TokenRowsAggregator
from nncf_hqq.statistics import sample_token_rows
from tests.ov_models import VOCAB
from tests.ov_models import transformer_like

INT4 = {"mode": CompressWeightsMode.INT4_ASYM, "group_size": 32}
TOKENS = 24
SAMPLES = 6


@pytest.fixture(scope="module")
def dataset() -> nncf.Dataset:
    rng = np.random.default_rng(0)
    return nncf.Dataset([rng.integers(0, VOCAB, (1, TOKENS)) for _ in range(SAMPLES)])


@pytest.mark.parametrize(
    ("shape", "axis"),
    [((1, 7, 3), 2), ((1, 3, 7), 1), ((2, 7, 3), -1), ((7, 3), 1)],
    ids=["btc", "bct", "batch2", "tc"],
)
def test_sampled_rows_are_distinct_rows_of_the_activation(shape: tuple[int, ...], axis: int) -> None:
    values = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    expected = np.moveaxis(values, axis, -1).reshape(-1, values.shape[axis])
    rows = sample_token_rows(Tensor(values), axis, 4, np.random.default_rng(0))
    assert len(rows) == 4
    indices = [int(np.flatnonzero((expected == r.data).all(axis=1))[0]) for r in rows]
    assert indices == sorted(set(indices))  # distinct, in token order


def test_asking_for_more_rows_than_tokens_gives_every_token_once() -> None:
    values = np.arange(15, dtype=np.float32).reshape(1, 5, 3)
    rows = sample_token_rows(Tensor(values), -1, 9, np.random.default_rng(0))
    np.testing.assert_array_equal(np.stack([r.data for r in rows]), values[0])


def test_rows_are_copies_in_the_activations_backend() -> None:
    torch = pytest.importorskip("torch")
    activation = torch.arange(12.0).reshape(1, 4, 3)
    rows = sample_token_rows(Tensor(activation), -1, 2, np.random.default_rng(0))
    assert all(isinstance(r.data, torch.Tensor) for r in rows)
    rows[0].data.add_(100.0)
    assert float(activation.max()) == 11.0


def test_aggregator_draws_again_the_same_rows_after_a_reset() -> None:
    aggregator = TokenRowsAggregator(2, -1, seed=3, num_samples=None)
    values = Tensor(np.arange(30, dtype=np.float32).reshape(1, 10, 3))
    aggregator.register_reduced_input(values)
    first = [r.data.copy() for r in aggregator.aggregate()]
    aggregator.reset()
    aggregator.register_reduced_input(values)
    np.testing.assert_array_equal(np.stack(first), np.stack([r.data for r in aggregator.aggregate()]))


def captured_statistics(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What ``HQQ.apply`` is called with: NNCF's statistics and HQQ's token rows."""
    captured: dict[str, Any] = {}
    original = HQQ.apply

    def apply(self: HQQ, *args: Any, **kwargs: Any) -> Any:
        captured["means"] = kwargs["statistics"] if "statistics" in kwargs else args[3]
        captured["tokens"] = self.token_statistics
        return original(self, *args, **kwargs)

    monkeypatch.setattr(HQQ, "apply", apply)
    return captured


def per_sample_means(rows: list[Tensor]) -> np.ndarray:
    return np.stack([r.data for r in rows]).reshape(SAMPLES, TOKENS, -1).mean(axis=1)


@pytest.mark.parametrize("awq", [False, True], ids=["se", "awq-se"])
def test_all_token_rows_average_to_nncfs_per_sample_means(
    awq: bool, dataset: nncf.Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    captured = captured_statistics(monkeypatch)
    params = {"calibration_token_rows": TOKENS}
    nncf.compress_weights(
        transformer_like(moe=False),
        **INT4,
        dataset=dataset,
        scale_estimation=True,
        awq=awq,
        hqq=True,
        hqq_params=params,
    )
    means, tokens = captured["means"], captured["tokens"]
    assert tokens and set(tokens) <= set(means)
    for name, stats in tokens.items():
        assert len(stats.mean_values) == SAMPLES * TOKENS
        nncf_means = np.stack([np.asarray(m.data).reshape(-1) for m in means[name].mean_values])
        np.testing.assert_allclose(per_sample_means(stats.mean_values), nncf_means, rtol=1e-4, atol=1e-5)


def test_token_rows_change_the_refined_scales(dataset: nncf.Dataset) -> None:
    def scales(rows: int) -> np.ndarray:
        model = nncf.compress_weights(
            transformer_like(moe=False),
            **INT4,
            dataset=dataset,
            scale_estimation=True,
            hqq=True,
            hqq_params={"calibration_token_rows": rows},
        )
        return next(op.get_data() for op in model.get_ordered_ops() if op.get_friendly_name() == "up_proj/scale")

    assert not np.array_equal(scales(0), scales(4))


def test_a_statistics_cache_without_token_rows_leaves_hqq_on_nncfs_means(
    dataset: nncf.Dataset, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    captured = captured_statistics(monkeypatch)
    advanced = nncf.AdvancedCompressionParameters(statistics_path=str(tmp_path / "statistics"))
    nncf.compress_weights(
        transformer_like(moe=False),
        **INT4,
        dataset=dataset,
        scale_estimation=True,
        hqq=True,
        hqq_params={"calibration_token_rows": 4},
        advanced_parameters=advanced,
    )
    assert captured["means"] and not captured["tokens"]


def test_token_rows_on_a_pytorch_model(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.torch_models import dataset as torch_dataset
    from tests.torch_models import input_ids as torch_input_ids
    from tests.torch_models import tiny_llama

    captured = captured_statistics(monkeypatch)
    ids = torch_input_ids(length=32)
    nncf.compress_weights(
        tiny_llama(),
        **INT4,
        dataset=torch_dataset(ids),
        awq=True,
        scale_estimation=True,
        hqq=True,
        hqq_params={"calibration_token_rows": 5},
    )
    tokens = captured["tokens"]
    assert tokens and set(tokens) <= set(captured["means"])
    samples = len(next(iter(captured["means"].values())).mean_values)
    assert all(len(stats.mean_values) == 5 * samples for stats in tokens.values())


@pytest.mark.parametrize("rows", [0, 4], ids=["means", "token-rows"])
def test_held_out_guard_changes_the_result_and_keeps_the_model_close(rows: int, dataset: nncf.Dataset) -> None:
    def compressed(held_out: bool) -> Any:
        return nncf.compress_weights(
            transformer_like(moe=False),
            **INT4,
            dataset=dataset,
            scale_estimation=True,
            hqq=True,
            hqq_params={"calibration_token_rows": rows, "guard_held_out": held_out},
        )

    def scale(model: Any) -> np.ndarray:
        return next(op.get_data() for op in model.get_ordered_ops() if op.get_friendly_name() == "up_proj/scale")

    held_out = compressed(True)
    assert not np.array_equal(scale(compressed(False)), scale(held_out))
    from tests.test_composition import relative_error

    assert relative_error(held_out) < 0.15
