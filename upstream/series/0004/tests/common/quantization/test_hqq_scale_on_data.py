import numpy as np
import pytest

from nncf.quantization.algorithms.weight_compression import hqq_scale_on_data as on_data
from nncf.quantization.algorithms.weight_compression import hqq_solver as solver
from nncf.tensor import Tensor


@pytest.mark.parametrize("samples", [24, 50])
def test_refinement_on_activations_lowers_output_error(samples):
    weight = Tensor((np.random.default_rng(1).standard_t(4, (16, 64)) * 0.02).astype(np.float32).reshape(16, 2, 32))
    inputs = Tensor(np.random.default_rng(2).normal(size=(2, 32, samples)).astype(np.float32))
    if samples > 32:  # as many columns as inputs, the same second moment: the same output errors
        inputs = on_data.equivalent_inputs(inputs)
    inverse_scale, zero = solver.solve_zero_point(weight, 2, 4, 20)
    refined = on_data.refine_scale_on_activations(weight, inverse_scale, zero, inputs, 4, 4, (1.0, 0.9))
    outputs = on_data.output_projections(weight, inputs)
    before, _ = on_data.activation_error(outputs, weight, inverse_scale, zero, inputs, 4)
    after, _ = on_data.activation_error(outputs, weight, refined, zero, inputs, 4)
    assert np.all(after.data <= before.data)
    assert after.data.sum() < before.data.sum()
