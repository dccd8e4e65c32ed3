import numpy as np
import pytest

from nncf import CompressWeightsMode
from nncf.quantization.algorithms.weight_compression import hqq_integer as integer
from nncf.quantization.algorithms.weight_compression import hqq_steps as steps
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
from nncf.quantization.algorithms.weight_compression.hqq import HQQ
from nncf.quantization.algorithms.weight_compression.weight_lowering import calculate_integer_quantization_params
from nncf.quantization.algorithms.weight_compression.weight_lowering import do_integer_dequantization
from nncf.quantization.algorithms.weight_compression.weight_lowering import reshape_weight_for_grouped_quantization
from nncf.tensor import Tensor


@pytest.mark.parametrize("scale", [0.125, -0.25])
def test_symmetric_grid_is_reproduced_exactly(scale):
    weight = np.tile(np.arange(-8, 8, dtype=np.float32), (3, 1)) * scale
    config = WeightCompressionConfig(CompressWeightsMode.INT4_SYM, group_size=16)
    compressed = HQQ(CompressWeightsMode.INT4_SYM).compress(Tensor(weight), 1, config)
    assert compressed.zero_point is None
    np.testing.assert_array_equal(do_integer_dequantization(compressed).data.reshape(weight.shape), weight)


def test_scale_for_an_integer_zero_point_is_least_squares():
    codes = Tensor(np.tile(np.arange(16, dtype=np.float32), (2, 1)))
    weight = (codes - 7.0) * 0.05
    inverse_scale = integer.least_squares_scale_for_zero(weight, codes, codes[:, :1] * 0 + 7.0, 1, None, codes[:, :1])
    np.testing.assert_allclose(inverse_scale.data, 20.0, rtol=1e-5)


@pytest.mark.parametrize(
    ("mode", "integer_zero_point"),
    [
        (CompressWeightsMode.INT4_ASYM, True),
        (CompressWeightsMode.INT4_SYM, False),
        (CompressWeightsMode.INT3_SYM, False),
    ],
)
def test_integer_parameters_beat_rounding_in_every_group(mode, integer_zero_point):
    weight = Tensor((np.random.default_rng(0).standard_t(4, (32, 128)) * 0.02).astype(np.float32))
    config = WeightCompressionConfig(mode, group_size=32)
    grouped, axis = reshape_weight_for_grouped_quantization(weight, 1, 32)
    rtn_scale, rtn_zero_point = calculate_integer_quantization_params(grouped, axis, config)
    if config.is_asym_mode:
        rtn = steps.quantize_as_stored(grouped, config, rtn_scale, rtn_zero_point, True)
    else:
        rtn = integer.quantize_symmetric_as_stored(grouped, config, rtn_scale)
    hqq = HQQ(mode, unit_gain=False, integer_zero_point=integer_zero_point).compress(weight, 1, config)
    assert integer_zero_point == (hqq.zero_point is not None and not hqq.zero_point.dtype.is_float())
    errors = [steps.stored_group_error(grouped, c, axis, None).data for c in (hqq, rtn)]
    assert np.all(errors[0] <= errors[1])
    assert errors[0].mean() < errors[1].mean()
