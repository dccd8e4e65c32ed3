import numpy as np
import pytest

from nncf import CompressWeightsMode
from nncf.quantization.algorithms.weight_compression import hqq_solver as solver
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
from nncf.quantization.algorithms.weight_compression.hqq import HQQ
from nncf.tensor import Tensor


def random_weight(seed: int, shape: tuple[int, int] = (32, 128)) -> np.ndarray:
    return (np.random.default_rng(seed).standard_t(4, shape) * 0.02).astype(np.float32)


def test_least_squares_recovers_affine_codes():
    codes = Tensor(np.tile(np.arange(16, dtype=np.float32), (2, 1)))
    weight = (codes - 6.5) / 40.0
    inverse_scale, zero = solver.least_squares_scale_zero(weight, codes, 1, None, (codes[:, :1], codes[:, :1]))
    np.testing.assert_allclose(inverse_scale.data, 40.0, rtol=1e-5)
    np.testing.assert_allclose(zero.data, 6.5, rtol=1e-5)


@pytest.mark.parametrize("zero", [0.0, 7.0, 7.5, 15.0])
def test_grid_weights_are_reproduced_exactly(zero):
    weight = (np.tile(np.arange(16, dtype=np.float32), (4, 1)) - zero) * 0.125
    config = WeightCompressionConfig(CompressWeightsMode.INT4_ASYM, group_size=16)
    compressed = HQQ(CompressWeightsMode.INT4_ASYM).compress(Tensor(weight), 1, config)
    np.testing.assert_array_equal(solver.decompress(compressed).data.reshape(weight.shape), weight)


@pytest.mark.parametrize("seed", range(4))
def test_refinement_clips_no_extreme(seed):
    weight = Tensor(random_weight(seed).reshape(32, 2, 64))
    inverse_scale, zero = solver.solve_zero_point(weight, 2, 4, 20)
    inverse_scale, zero = solver.refine_least_squares(weight, inverse_scale, zero, 2, 4, 5, None, True)
    position = weight.data * inverse_scale.data + zero.data
    assert position.min() >= -0.5 - 1e-4
    assert position.max() <= 15.5 + 1e-4


@pytest.mark.parametrize(("gain", "expected"), [(0.8, 1.25), (1.0, 1.0), (0.1, 2.0)])
def test_unit_gain_factor(gain, expected):
    weight = Tensor(np.array([[1.0, -2.0, 3.0, 0.5]], np.float32))
    codes, scale = Tensor(np.array([[1.0, -2.0, 3.0, 0.5]], np.float32)), Tensor(np.array([[gain]], np.float32))
    factor = solver.unit_gain_factor_for_codes(weight, codes, scale, None, 1)
    np.testing.assert_allclose(factor.data, expected, rtol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_hqq_error_is_below_rtn_in_every_group(seed):
    weight = Tensor(random_weight(seed))
    config = WeightCompressionConfig(CompressWeightsMode.INT4_ASYM, group_size=32)
    grouped, axis = solver.split_into_groups(weight, 1, 32)
    rtn = solver.to_compressed_weight(grouped, *solver.rtn_scale_zero_point(grouped, axis, 4), 4, True)
    hqq = HQQ(CompressWeightsMode.INT4_ASYM, unit_gain=False).compress(weight, 1, config)
    hqq_error, rtn_error = (solver.stored_group_error(grouped, c, axis, None).data for c in (hqq, rtn))
    assert np.all(hqq_error <= rtn_error)
    assert hqq_error.mean() < 0.9 * rtn_error.mean()


@pytest.mark.parametrize("samples", [24, 50])
def test_refinement_on_activations_lowers_output_error(samples):
    weight = Tensor(random_weight(1, (16, 64)).reshape(16, 2, 32))
    inputs = Tensor(np.random.default_rng(2).normal(size=(2, 32, samples)).astype(np.float32))
    if samples > 32:  # as many columns as inputs, the same second moment: the same output errors
        inputs = solver.equivalent_inputs(inputs)
    inverse_scale, zero = solver.solve_zero_point(weight, 2, 4, 20)
    refined = solver.refine_scale_on_activations(weight, inverse_scale, zero, inputs, 4, 4, (1.0, 0.9))
    outputs = solver.output_projections(weight, inputs)
    before, _ = solver.activation_error(outputs, weight, inverse_scale, zero, inputs, 4)
    after, _ = solver.activation_error(outputs, weight, refined, zero, inputs, 4)
    assert np.all(after.data <= before.data)
    assert after.data.sum() < before.data.sum()
