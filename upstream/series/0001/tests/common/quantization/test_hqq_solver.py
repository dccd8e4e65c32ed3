from unittest.mock import patch

import numpy as np
import pytest

import nncf.tensor.functions as fns
from nncf import CompressWeightsMode
from nncf.quantization.algorithms.weight_compression import hqq_solver
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
from nncf.quantization.algorithms.weight_compression.hqq import HQQ
from nncf.quantization.algorithms.weight_compression.hqq_solver import solve_zero_point
from nncf.quantization.algorithms.weight_compression.weight_lowering import do_integer_dequantization
from nncf.quantization.algorithms.weight_compression.weight_lowering import do_integer_quantization
from nncf.tensor import Tensor
from nncf.tensor import TensorDataType

INT4_G32 = WeightCompressionConfig(CompressWeightsMode.INT4_ASYM, group_size=32)


@pytest.fixture(params=["numpy", "torch"])
def to_tensor(request):
    """The solver runs on the backend's own tensors: every case on numpy, and on torch where it is installed."""
    torch = pytest.importorskip("torch") if request.param == "torch" else None
    return lambda array: Tensor(array if torch is None else torch.from_numpy(array))


def random_weight(seed: int, shape: tuple[int, int] = (32, 128)) -> np.ndarray:
    return (np.random.default_rng(seed).standard_t(4, shape) * 0.02).astype(np.float32)


def squared_error(weight: Tensor, params, config: WeightCompressionConfig = INT4_G32) -> float:
    precomputed = () if params is None else (params.scale, params.zero_point)
    compressed = do_integer_quantization(weight, config, 1, *precomputed)
    axis = -1 if config.group_size == -1 else 1
    return fns.mean((do_integer_dequantization(compressed, axis) - weight) ** 2).item()


def hqq_params(weight: Tensor, *iterations: int, config: WeightCompressionConfig = INT4_G32):
    params = HQQ(config.mode, *iterations).calculate_quantization_params(weight, 1, config)
    assert params.scale.backend == params.zero_point.backend == weight.backend
    return params


@pytest.mark.parametrize("zero", [0.0, 7.0, 7.5, 15.0])
def test_grid_weights_are_reproduced_exactly(zero, to_tensor):
    weight = to_tensor((np.tile(np.arange(16, dtype=np.float32), (4, 2)) - zero) * 0.125)
    params = hqq_params(weight)
    assert params.tensor is None
    assert squared_error(weight, params) == 0.0


@pytest.mark.parametrize("seed", range(2))
def test_error_is_below_round_to_nearest(seed, to_tensor):
    weight = to_tensor(random_weight(seed))
    assert squared_error(weight, hqq_params(weight)) < 0.9 * squared_error(weight, None)


def test_int8_rows_of_small_range_are_not_widened(to_tensor):
    weight = to_tensor((np.random.default_rng(0).standard_normal((16, 256)) * 1e-3).astype(np.float32))
    config = WeightCompressionConfig(CompressWeightsMode.INT8_ASYM)
    assert squared_error(weight, hqq_params(weight, config=config), config) <= squared_error(weight, None, config)


@pytest.mark.parametrize("mode", [CompressWeightsMode.INT4_ASYM, CompressWeightsMode.INT8_ASYM])
@pytest.mark.parametrize("kind", ["std-1e-4", "std-1e-5", "offset-0.02-spread-1e-5", "constant-0.01"])
def test_narrow_groups_are_not_above_round_to_nearest(kind, mode, to_tensor):
    """A group narrower than HQQ's clamp (hqq_solver.MIN_GROUP_RANGE) is quantized on its range extended to zero."""
    noise = np.random.default_rng(9).standard_normal((32, 128)).astype(np.float32)
    weight = {
        "std-1e-4": random_weight(9) * np.float32(1e-4 / 0.02),
        "std-1e-5": random_weight(9) * np.float32(1e-5 / 0.02),
        "offset-0.02-spread-1e-5": np.float32(0.02) + noise * np.float32(1e-5),
        "constant-0.01": np.full((32, 128), 0.01, dtype=np.float32),
    }[kind]
    config = INT4_G32 if mode == CompressWeightsMode.INT4_ASYM else WeightCompressionConfig(mode)
    weight = to_tensor(weight)
    rtn = do_integer_quantization(weight, config, 1)  # its scale as the model stores it, in float16
    rtn.scale = rtn.scale.astype(TensorDataType.float16).astype(TensorDataType.float32)
    axis = -1 if config.group_size == -1 else 1
    rtn_error = fns.mean((do_integer_dequantization(rtn, axis) - weight) ** 2).item()
    assert squared_error(weight, hqq_params(weight, config=config), config) <= rtn_error * (1 + 1e-6)


def test_iterations_lower_the_error_of_the_range_initialisation(to_tensor):
    weight = to_tensor(random_weight(5))
    assert squared_error(weight, hqq_params(weight, 20)) < squared_error(weight, hqq_params(weight, 0))


def test_each_group_is_solved_as_if_it_were_alone(to_tensor):
    """The groups are independent problems: each one's iterations stop on their own."""
    weight = random_weight(6, (8, 128))
    grouped = to_tensor(weight.reshape(8, 4, 32))
    inverse_scale, zero = solve_zero_point(grouped, 2, 4, 20)
    for row in range(8):
        alone = solve_zero_point(to_tensor(weight[row : row + 1].reshape(1, 4, 32)), 2, 4, 20)
        assert fns.all(alone[0] == inverse_scale[row : row + 1]) and fns.all(alone[1] == zero[row : row + 1])


@pytest.mark.parametrize("threads", [1, 3])
def test_blocks_threads_and_axis_sign_do_not_change_the_result(threads, to_tensor):
    weight = to_tensor(random_weight(7, (64, 256)).reshape(64, 8, 32))
    expected = solve_zero_point(weight, 2, 4, 20)
    with patch.multiple(hqq_solver, BLOCK_ELEMENTS=256, BLOCK_THREADS=threads):  # 64 blocks of 8 groups
        solved = solve_zero_point(weight, -1, 4, 20)
    for got, want in zip(solved, expected):
        assert fns.all(got == want)
