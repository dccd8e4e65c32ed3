import numpy as np
import openvino as ov
import pytest

from nncf import CompressWeightsMode
from nncf.quantization.advanced_parameters import AdvancedCompressionParameters
from nncf.quantization.advanced_parameters import AdvancedHQQParameters
from tests.openvino.native.quantization.test_weights_compression_hqq import attention_model
from tests.openvino.native.quantization.test_weights_compression_hqq import compress
from tests.openvino.native.quantization.test_weights_compression_hqq import constants


def test_integer_zero_points_are_written_as_codes():
    params = AdvancedCompressionParameters(hqq_params=AdvancedHQQParameters(integer_zero_point=True))
    found = constants(compress(attention_model(), True, advanced_parameters=params))
    assert {found[f"{name}/zero_point"].get_element_type() for name in "qkvo"} == {ov.Type.u4}


@pytest.mark.parametrize(
    ("mode", "code_type"),
    [(CompressWeightsMode.INT4_SYM, ov.Type.i4), (CompressWeightsMode.INT3_SYM, ov.Type.u3)],
)
def test_symmetric_modes(mode, code_type):
    rtn, hqq = (constants(compress(attention_model(), hqq, mode=mode)) for hqq in (False, True))
    assert hqq["q"].get_element_type() == code_type
    assert not np.array_equal(hqq["q/scale"].get_data(), rtn["q/scale"].get_data())
