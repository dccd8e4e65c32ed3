import numpy as np
import pytest

from nncf import CompressWeightsMode
from nncf.quantization.algorithms.weight_compression import hqq_solver as solver
from nncf.quantization.algorithms.weight_compression import hqq_steps as steps
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
from nncf.quantization.algorithms.weight_compression.hqq_guard import choose_per_row
from nncf.quantization.algorithms.weight_compression.hqq_guard import row_output_errors
from nncf.quantization.algorithms.weight_compression.weight_lowering import calculate_integer_quantization_params
from nncf.quantization.algorithms.weight_compression.weight_lowering import do_integer_dequantization
from nncf.quantization.algorithms.weight_compression.weight_lowering import reshape_weight_for_grouped_quantization
from nncf.tensor import Tensor

INT4_G16 = WeightCompressionConfig(CompressWeightsMode.INT4_ASYM, group_size=16)


def candidates(weight: np.ndarray) -> list:
    grouped, axis = reshape_weight_for_grouped_quantization(Tensor(weight), 1, 16)
    rtn_params = calculate_integer_quantization_params(grouped, axis, INT4_G16)
    rtn = steps.quantize_as_stored(grouped, INT4_G16, *rtn_params, True)
    inverse_scale, zero = solver.solve_zero_point(grouped, axis, 4, 20)
    hqq = steps.quantize_as_stored(grouped, INT4_G16, 1.0 / inverse_scale, zero, False)
    return [hqq, rtn]


def test_exact_candidate_wins_every_row():
    weight = np.tile((np.arange(16, dtype=np.float32) - 7.0) * 0.125, (3, 2))
    inputs = Tensor(np.random.default_rng(0).normal(size=(32, 5)).astype(np.float32))
    grouped, _ = reshape_weight_for_grouped_quantization(Tensor(weight), 1, 16)
    scale, zero_point = Tensor(np.full((3, 2, 1), 0.125, np.float32)), Tensor(np.full((3, 2, 1), 7, np.int32))
    exact = steps.quantize_as_stored(grouped, INT4_G16, scale, zero_point, True)
    noisy = steps.quantize_as_stored(grouped, INT4_G16, scale * 1.6, zero_point - 2, True)
    result, counts = choose_per_row(Tensor(weight), [noisy, exact], inputs, 1, True)
    assert counts == [0, 3]
    assert result is exact


@pytest.mark.parametrize("seed", range(3))
def test_mixed_rows_are_never_worse_than_any_candidate(seed):
    rng = np.random.default_rng(seed)
    weight = (rng.standard_t(4, (12, 64)) * 0.02).astype(np.float32)
    inputs = Tensor(rng.normal(size=(64, 20)).astype(np.float32))
    options = candidates(weight)
    result, counts = choose_per_row(Tensor(weight), options, inputs, 1, True)
    assert sum(counts) == 12
    errors = [
        row_output_errors(Tensor(weight), do_integer_dequantization(c).reshape((12, 64)), inputs, 1).data
        for c in (result, *options)
    ]
    assert np.all(errors[0] <= np.minimum(errors[1], errors[2]) * (1 + 1e-6))
