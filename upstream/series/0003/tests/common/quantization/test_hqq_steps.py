import numpy as np
import pytest

import nncf.tensor.functions as fns
from nncf import CompressWeightsMode
from nncf.quantization.algorithms.weight_compression import hqq_solver as solver
from nncf.quantization.algorithms.weight_compression import hqq_steps as steps
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
from nncf.quantization.algorithms.weight_compression.hqq import HQQ
from nncf.quantization.algorithms.weight_compression.weight_lowering import calculate_integer_quantization_params
from nncf.quantization.algorithms.weight_compression.weight_lowering import reshape_weight_for_grouped_quantization
from nncf.tensor import Tensor


def random_weight(seed: int, shape: tuple[int, int] = (32, 128)) -> np.ndarray:
    return (np.random.default_rng(seed).standard_t(4, shape) * 0.02).astype(np.float32)


def test_least_squares_recovers_affine_codes():
    codes = Tensor(np.tile(np.arange(16, dtype=np.float32), (2, 1)))
    weight = (codes - 6.5) / 40.0
    mean = fns.mean(weight, axis=1, keepdims=True)
    inverse_scale, zero = steps.least_squares_scale_zero(mean, weight - mean, codes, (mean, mean))
    np.testing.assert_allclose(inverse_scale.data, 40.0, rtol=1e-5)
    np.testing.assert_allclose(zero.data, 6.5, rtol=1e-5)


@pytest.mark.parametrize("seed", range(2))
def test_refinement_clips_no_extreme_and_lowers_the_error(seed):
    weight = Tensor(random_weight(seed).reshape(32, 2, 64))
    iterated = solver.solve_zero_point(weight, 2, 4, 20)
    refined = steps.refine_least_squares(weight, *iterated, 2, 4, 5, True)
    position = weight * refined[0] + refined[1]  # the code position of every weight: within [-0.5, 15.5]
    assert fns.min(position).item() >= -0.5 - 1e-4 and fns.max(position).item() <= 15.5 + 1e-4
    errors = [
        fns.mean((steps.dequantize(steps.quantize(weight, s, z, 4), s, z) - weight) ** 2).item()
        for s, z in (iterated, refined)
    ]
    assert errors[1] < errors[0]


@pytest.mark.parametrize(("gain", "expected"), [(0.8, 1.25), (1.0, 1.0), (0.1, 2.0)])
def test_unit_gain_factor(gain, expected):
    weight = Tensor(np.array([[1.0, -2.0, 3.0, 0.5]], np.float32))
    codes, scale = Tensor(np.array([[1.0, -2.0, 3.0, 0.5]], np.float32)), Tensor(np.array([[gain]], np.float32))
    factor = steps.unit_gain_factor_for_codes(weight, codes, scale, None, 1)
    np.testing.assert_allclose(factor.data, expected, rtol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_error_is_not_above_rtn_in_any_group(seed):
    weight = Tensor(random_weight(seed))
    config = WeightCompressionConfig(CompressWeightsMode.INT4_ASYM, group_size=32)
    grouped, axis = reshape_weight_for_grouped_quantization(weight, 1, 32)
    rtn = steps.quantize_as_stored(grouped, config, *calculate_integer_quantization_params(grouped, axis, config), True)
    hqq = HQQ(CompressWeightsMode.INT4_ASYM, unit_gain=False).compress(weight, 1, config)
    hqq_error, rtn_error = (steps.stored_group_error(grouped, c, axis, None).data for c in (hqq, rtn))
    assert np.all(hqq_error <= rtn_error)
    assert hqq_error.mean() < 0.9 * rtn_error.mean()


def test_codes_outlive_the_next_quantization_of_that_shape(monkeypatch):
    """NNCF's compiled quantization (10000 elements and more) returns its output buffer, reused by its next call."""
    monkeypatch.delenv("NNCF_DISABLE_OPTIMIZED_COMPRESSION", raising=False)
    config = WeightCompressionConfig(CompressWeightsMode.INT4_ASYM, group_size=32)
    results = []
    for seed in (0, 1):
        grouped, axis = reshape_weight_for_grouped_quantization(Tensor(random_weight(seed, (128, 128))), 1, 32)
        scale, zero_point = calculate_integer_quantization_params(grouped, axis, config)
        results.append((steps.quantize_as_stored(grouped, config, scale, zero_point, True), grouped))
    first, grouped = results[0]
    expected = np.clip(np.round(grouped.data / first.scale.data + first.zero_point.data.astype(np.float32)), 0, 15)
    np.testing.assert_array_equal(first.tensor.data, expected)
