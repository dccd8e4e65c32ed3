import numpy as np
import pytest

import nncf.tensor.functions as fns
from nncf import CompressWeightsMode
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
from nncf.quantization.algorithms.weight_compression.hqq import HQQ
from nncf.quantization.algorithms.weight_compression.weight_lowering import do_integer_dequantization
from nncf.quantization.algorithms.weight_compression.weight_lowering import do_integer_quantization
from nncf.tensor import Tensor

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


def test_iterations_lower_the_error_of_the_range_initialisation(to_tensor):
    weight = to_tensor(random_weight(5))
    assert squared_error(weight, hqq_params(weight, 20)) < squared_error(weight, hqq_params(weight, 0))
