import numpy as np
import pytest

from nncf.quantization.algorithms.weight_compression import hqq_solver as solver
from nncf.quantization.algorithms.weight_compression import hqq_steps as steps
from nncf.quantization.algorithms.weight_compression.hqq_guard import choose_per_row
from nncf.quantization.algorithms.weight_compression.hqq_guard import row_output_errors
from nncf.tensor import Tensor


def candidates(weight: np.ndarray) -> list:
    grouped, axis = steps.split_into_groups(Tensor(weight), 1, 16)
    rtn = steps.to_compressed_weight(grouped, *steps.rtn_scale_zero_point(grouped, axis, 4), 4, True)
    inverse_scale, zero = solver.solve_zero_point(grouped, axis, 4, 20)
    hqq = steps.to_compressed_weight(grouped, 1.0 / inverse_scale, zero, 4, False)
    return [hqq, rtn]


def test_exact_candidate_wins_every_row():
    weight = np.tile((np.arange(16, dtype=np.float32) - 7.0) * 0.125, (3, 2))
    inputs = Tensor(np.random.default_rng(0).normal(size=(32, 5)).astype(np.float32))
    grouped, _ = steps.split_into_groups(Tensor(weight), 1, 16)
    exact = steps.to_compressed_weight(grouped, Tensor(np.full((3, 2, 1), 0.125, np.float32)), grouped * 0 + 7, 4, True)
    noisy = steps.to_compressed_weight(grouped, Tensor(np.full((3, 2, 1), 0.2, np.float32)), grouped * 0 + 5, 4, True)
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
        row_output_errors(Tensor(weight), steps.decompress(c).reshape((12, 64)), inputs, 1).data
        for c in (result, *options)
    ]
    assert np.all(errors[0] <= np.minimum(errors[1], errors[2]) * (1 + 1e-6))
