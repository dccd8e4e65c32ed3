"""The output-error guard (``nncf_hqq.maths.guard`` and ``HQQ.guard_on_outputs``).

Exact cases where the best row is known, the property that the mixed result's output error is, row by row, the
least of the candidates', and the comparison with NNCF's own Scale Estimation on the same statistics: with the
guard, no row's output error on the calibration inputs is above NNCF's.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from nncf import CompressWeightsMode
from nncf.common.tensor_statistics.statistics import WCTensorStatistic
from nncf.quantization.algorithms.weight_compression.weight_lowering import do_integer_dequantization
from nncf.tensor import Tensor

from nncf_hqq import HQQ_DEFAULT
from nncf_hqq._nncf import CompressedWeight
from nncf_hqq._nncf import ScaleEstimation
from nncf_hqq._nncf import WeightCompressionConfig
from nncf_hqq._nncf import process_stats
from nncf_hqq.hqq import HQQ
from nncf_hqq.maths.core import decompress
from nncf_hqq.maths.core import split_into_groups
from nncf_hqq.maths.guard import candidate_row_errors
from nncf_hqq.maths.guard import choose_per_row
from nncf_hqq.maths.guard import row_output_errors
from tests.ov_models import heavy_tailed


def _candidate(codes: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None) -> CompressedWeight:
    return CompressedWeight(Tensor(codes), Tensor(scale), None if zero_point is None else Tensor(zero_point))


def test_each_row_comes_from_the_candidate_that_reproduces_it() -> None:
    # weight [2 rows, 1 group of 2]: candidate a is exact on row 0, candidate b on row 1
    weight = Tensor(np.array([[1.0, 2.0], [3.0, 5.0]], dtype=np.float32))
    codes = np.array([[[1, 2]], [[3, 5]]], dtype=np.uint8)
    exact_rows = np.ones((2, 1, 1), dtype=np.float32)
    a = _candidate(codes, exact_rows * [[[1.0]], [[0.5]]], np.zeros((2, 1, 1), dtype=np.float32))
    b = _candidate(codes, exact_rows * [[[2.0]], [[1.0]]], np.zeros((2, 1, 1), dtype=np.int32))
    activations = Tensor(np.eye(2, dtype=np.float32))
    mixed, counts = choose_per_row(weight, [a, b], activations, axis=1, grouped=True)
    assert counts == [1, 1]
    np.testing.assert_array_equal(decompress(mixed).data.reshape(2, 2), weight.data)
    assert mixed.zero_point.data.dtype == np.float32  # float and integer zero points mixed


def test_a_single_winner_is_returned_as_it_is_integer_zero_point_kept() -> None:
    weight = Tensor(np.array([[1.0, 2.0]], dtype=np.float32))
    good = _candidate(
        np.array([[[1, 2]]], dtype=np.uint8), np.ones((1, 1, 1), np.float32), np.zeros((1, 1, 1), np.int32)
    )
    bad = _candidate(
        np.array([[[0, 0]]], dtype=np.uint8), np.ones((1, 1, 1), np.float32), np.zeros((1, 1, 1), np.float32)
    )
    mixed, counts = choose_per_row(weight, [bad, good], Tensor(np.ones((2, 3), np.float32)), axis=1, grouped=True)
    assert counts == [0, 1] and mixed is good


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    layout=st.sampled_from(["out_in", "in_out", "experts"]),
    group_size=st.sampled_from([8, 16, -1]),
)
def test_mixed_rows_have_the_least_output_error_of_all_candidates(seed: int, layout: str, group_size: int) -> None:
    rng = np.random.default_rng(seed)
    shape, axis = {"out_in": ((6, 32), 1), "in_out": ((32, 6), 0), "experts": ((2, 6, 32), 2)}[layout]
    weight = Tensor(heavy_tailed(rng, shape))
    activations = Tensor(rng.standard_normal((32, 10)).astype(np.float32))
    grouped, grouped_axis = split_into_groups(weight, axis, group_size)
    candidates = []
    for _ in range(3):  # random scales and zero points: three different compressions of the same weight
        scale = np.abs(grouped.data).max(grouped_axis, keepdims=True) / rng.uniform(4.0, 9.0, 1)
        zero = np.round(rng.uniform(6.0, 9.0, scale.shape)).astype(np.float32)
        codes = np.clip(np.round(grouped.data / scale + zero), 0, 15).astype(np.uint8)
        candidates.append(_candidate(codes, scale.astype(np.float32), zero))
    mixed, counts = choose_per_row(weight, candidates, activations, axis, grouped=group_size != -1)
    assert sum(counts) == int(np.prod(shape)) // shape[axis]

    def errors(c: CompressedWeight) -> np.ndarray:
        return row_output_errors(weight, decompress(c).reshape(shape), activations, axis).data

    least = np.min([errors(c) for c in candidates], axis=0)
    np.testing.assert_allclose(errors(mixed), least, rtol=1e-6)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    layout=st.sampled_from(["out_in", "in_out", "experts"]),
    zero_point=st.sampled_from(["uint8", "int32", "float32", "float16", "none"]),
)
def test_in_place_row_errors_equal_nncfs_dequantization_to_the_bit(seed: int, layout: str, zero_point: str) -> None:
    # the guard's choice must not move: its errors are compared with ties going to the first candidate
    rng = np.random.default_rng(seed)
    shape, axis = {"out_in": ((6, 32), 1), "in_out": ((32, 6), 0), "experts": ((2, 6, 32), 2)}[layout]
    weight = Tensor(heavy_tailed(rng, shape))
    activations = Tensor(rng.standard_normal((32, 10)).astype(np.float32))
    grouped, grouped_axis = split_into_groups(weight, axis, 8)
    scale = (np.abs(grouped.data).max(grouped_axis, keepdims=True) / rng.uniform(4.0, 9.0, 1)).astype(np.float32)
    if zero_point == "none":
        zero = None
        codes = np.clip(np.round(grouped.data / scale), -8, 7).astype(np.int8)
    else:
        zero = rng.uniform(6.0, 9.0, scale.shape)
        zero = zero.astype(zero_point) if zero_point.startswith("float") else np.round(zero).astype(zero_point)
        codes = np.clip(np.round(grouped.data / scale + zero.astype(np.float32)), 0, 15).astype(np.uint8)
    candidate = _candidate(codes, scale, zero)
    reference = row_output_errors(weight, do_integer_dequantization(candidate).reshape(shape), activations, axis).data
    in_place = candidate_row_errors(weight, candidate, activations, axis).data
    assert in_place.dtype == reference.dtype
    np.testing.assert_array_equal(in_place, reference)


def _statistics(rng: np.random.Generator, channels: int, samples: int) -> WCTensorStatistic:
    means = [
        Tensor(rng.standard_normal(channels).astype(np.float32) * rng.uniform(0.2, 3.0, channels).astype(np.float32))
        for _ in range(samples)
    ]
    return WCTensorStatistic(mean_values=means, shape_values=[(1, 16, channels)] * samples)


@pytest.mark.parametrize("mode", [CompressWeightsMode.INT4_ASYM, CompressWeightsMode.INT4_SYM], ids=["asym", "sym"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_row_is_worse_than_nncfs_scale_estimation_on_the_same_statistics(
    mode: CompressWeightsMode, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    weight = Tensor(heavy_tailed(rng, (48, 128)))
    config = WeightCompressionConfig(mode=mode, group_size=32)
    statistics = _statistics(rng, 128, 24)
    scale, zero_point = ScaleEstimation.calculate_quantization_params(statistics, weight, (1,), config, -1, 24)
    _, activations = process_stats(statistics, 24)
    hqq = HQQ(HQQ_DEFAULT, mode)
    candidate = hqq.compress_on_activations(weight, 1, config, activations)
    guarded, counts = hqq.guard_on_outputs(
        weight, 1, config, activations, candidate, CompressedWeight(None, scale, zero_point)
    )
    assert sum(counts) == 48
    grouped, _ = split_into_groups(weight, 1, 32)
    from nncf_hqq.hqq import encoded_reference

    nncf_se = encoded_reference(grouped, CompressedWeight(None, scale, zero_point), 4, zero_point is None)

    def errors(c: CompressedWeight) -> np.ndarray:
        return row_output_errors(weight, decompress(c).reshape((48, 128)), activations, 1).data

    assert (errors(guarded) <= errors(nncf_se) * (1 + 1e-6)).all()
    assert (errors(guarded) <= errors(candidate) * (1 + 1e-6)).all()
    assert errors(guarded).sum() < errors(nncf_se).sum(), "HQQ should win some rows on heavy-tailed weights"


def test_samples_are_cut_in_halves_along_the_last_axis() -> None:
    from nncf_hqq.hqq import split_samples_in_halves

    values = Tensor(np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5))
    fit, check = split_samples_in_halves(values)
    np.testing.assert_array_equal(fit.data, values.data[..., :2])
    np.testing.assert_array_equal(check.data, values.data[..., 2:])


@pytest.mark.parametrize("seed", [0, 1])
def test_held_out_guard_judges_on_samples_the_refinement_did_not_fit(seed: int) -> None:
    """The held-out guard's rows: each from HQQ refined on the first half, HQQ data-free, NNCF's SE or RTN, the one
    of least output error on the second half."""
    from nncf_hqq.hqq import split_samples_in_halves

    rng = np.random.default_rng(seed)
    weight = Tensor(heavy_tailed(rng, (48, 128)))
    config = WeightCompressionConfig(mode=CompressWeightsMode.INT4_ASYM, group_size=32)
    _, activations = process_stats(_statistics(rng, 128, 24), 24)
    fit, check = split_samples_in_halves(activations)
    hqq = HQQ(HQQ_DEFAULT.replace(guard_held_out=True))
    base = hqq.compress(weight, 1, config)
    refined = hqq.refine_on_activations(weight, 1, config, fit, base)
    guarded, counts = hqq.guard_on_outputs(weight, 1, config, check, refined, None, (base,))
    assert len(counts) == 4 and counts[1] == 0 and sum(counts) == 48

    def errors(c: CompressedWeight, inputs: Tensor) -> np.ndarray:
        return row_output_errors(weight, decompress(c).reshape((48, 128)), inputs, 1).data

    least = np.minimum(errors(refined, check), errors(base, check))
    assert (errors(guarded, check) <= least * (1 + 1e-6)).all()
    # on the half it fitted, the refinement is never worse than where it started
    assert errors(refined, fit).sum() <= errors(base, fit).sum()
