import numpy as np

from tests.openvino.native.quantization.test_hqq import attention_model
from tests.openvino.native.quantization.test_hqq import compress
from tests.openvino.native.quantization.test_hqq import constants


def test_unit_gain_codes_are_written_as_computed():
    found = constants(compress(attention_model(), True))
    codes = np.array(found["q"].get_vector(), np.float32).reshape(found["q"].get_output_shape(0))
    scale = found["q/scale"].get_data().astype(np.float32)
    zero_point = found["q/zero_point"].get_data().astype(np.float32)
    weight = constants(attention_model())["q"].get_data().reshape(codes.shape)
    assert np.any(np.clip(np.round(weight / scale + zero_point), 0, 15) != codes)
