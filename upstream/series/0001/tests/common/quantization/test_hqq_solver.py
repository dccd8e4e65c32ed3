import numpy as np
import pytest

from nncf import CompressWeightsMode
from nncf.quantization.algorithms.weight_compression import hqq_solver as solver
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
from nncf.quantization.algorithms.weight_compression.hqq import HQQ
from nncf.quantization.algorithms.weight_compression.weight_lowering import do_integer_dequantization
from nncf.quantization.algorithms.weight_compression.weight_lowering import do_integer_quantization
from nncf.tensor import Tensor

INT4_G32 = WeightCompressionConfig(CompressWeightsMode.INT4_ASYM, group_size=32)


def random_weight(seed: int, shape: tuple[int, int] = (32, 128)) -> np.ndarray:
    return (np.random.default_rng(seed).standard_t(4, shape) * 0.02).astype(np.float32)


def squared_error(weight: np.ndarray, params, config: WeightCompressionConfig = INT4_G32) -> float:
    precomputed = () if params is None else (params.scale, params.zero_point)
    compressed = do_integer_quantization(Tensor(weight), config, 1, *precomputed)
    axis = -1 if config.group_size == -1 else 1
    return float(((do_integer_dequantization(compressed, axis).data - weight) ** 2).mean())


def test_least_squares_recovers_affine_codes():
    codes = Tensor(np.tile(np.arange(16, dtype=np.float32), (2, 1)))
    weight = (codes - 6.5) / 40.0
    mean = Tensor(weight.data.mean(axis=1, keepdims=True))
    inverse_scale, zero = solver.least_squares_scale_zero(mean, weight - mean, codes, (mean, mean))
    np.testing.assert_allclose(inverse_scale.data, 40.0, rtol=1e-5)
    np.testing.assert_allclose(zero.data, 6.5, rtol=1e-5)


@pytest.mark.parametrize("zero", [0.0, 7.0, 7.5, 15.0])
def test_grid_weights_are_reproduced_exactly(zero):
    weight = (np.tile(np.arange(16, dtype=np.float32), (4, 2)) - zero) * 0.125
    params = HQQ(CompressWeightsMode.INT4_ASYM).calculate_quantization_params(Tensor(weight), 1, INT4_G32)
    assert params.tensor is None
    assert squared_error(weight, params) == 0.0


@pytest.mark.parametrize("seed", range(4))
def test_refinement_clips_no_extreme(seed):
    weight = Tensor(random_weight(seed).reshape(32, 2, 64))
    inverse_scale, zero = solver.solve_zero_point(weight, 2, 4, 20)
    inverse_scale, zero = solver.refine_least_squares(weight, inverse_scale, zero, 2, 4, 5, True)
    position = weight.data * inverse_scale.data + zero.data
    assert position.min() >= -0.5 - 1e-4
    assert position.max() <= 15.5 + 1e-4


@pytest.mark.parametrize("seed", range(4))
def test_error_is_below_round_to_nearest(seed):
    weight = random_weight(seed)
    hqq = HQQ(CompressWeightsMode.INT4_ASYM).calculate_quantization_params(Tensor(weight), 1, INT4_G32)
    assert squared_error(weight, hqq) < 0.9 * squared_error(weight, None)


def test_int8_rows_of_small_range_are_not_widened():
    weight = (np.random.default_rng(0).standard_normal((16, 256)) * 1e-3).astype(np.float32)
    config = WeightCompressionConfig(CompressWeightsMode.INT8_ASYM)
    hqq = HQQ(CompressWeightsMode.INT8_ASYM).calculate_quantization_params(Tensor(weight), 1, config)
    assert squared_error(weight, hqq, config) <= squared_error(weight, None, config)


@pytest.mark.parametrize(("num_iterations", "refinement_steps"), [(20, 0), (0, 5), (20, 5)])
def test_each_step_lowers_the_error_of_the_range_initialisation(num_iterations, refinement_steps):
    weight = random_weight(5)
    errors = [
        squared_error(
            weight,
            HQQ(CompressWeightsMode.INT4_ASYM, *steps).calculate_quantization_params(Tensor(weight), 1, INT4_G32),
        )
        for steps in ((0, 0), (num_iterations, refinement_steps))
    ]
    assert errors[1] < errors[0]
