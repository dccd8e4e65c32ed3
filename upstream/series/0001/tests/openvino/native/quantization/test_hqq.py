import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as opset

import nncf
from nncf import CompressWeightsMode
from nncf.parameters import CompressionFormat
from nncf.quantization.advanced_parameters import AdvancedCompressionParameters
from nncf.quantization.advanced_parameters import AdvancedHQQParameters

HIDDEN = 64


def attention_model(seed: int = 0) -> ov.Model:
    rng = np.random.default_rng(seed)
    x = opset.parameter([1, 8, HIDDEN], ov.Type.f32, name="x")
    gamma = opset.constant(rng.uniform(0.5, 2.0, HIDDEN).astype(np.float32), name="gamma")
    normed = opset.multiply(x, gamma, name="norm")

    def linear(inp, name):
        weight = opset.constant((rng.standard_t(4, (HIDDEN, HIDDEN)) * 0.05).astype(np.float32), name=name)
        return opset.matmul(inp, weight, False, True, name=f"{name}/matmul")

    attention = opset.scaled_dot_product_attention(*(linear(normed, n) for n in ("q", "k", "v")), causal=True)
    return ov.Model([linear(attention, "o")], [x])


def constants(model: ov.Model) -> dict[str, ov.Node]:
    return {op.get_friendly_name(): op for op in model.get_ops() if op.get_type_name() == "Constant"}


def compress(hqq: bool, **kwargs) -> ov.Model:
    arguments = {"mode": CompressWeightsMode.INT4_ASYM, "group_size": 32, "ratio": 1.0, "all_layers": True}
    return nncf.compress_weights(attention_model(), hqq=hqq, **{**arguments, **kwargs})


@pytest.mark.parametrize("rtn_value_projections", [True, False])
def test_float_zero_points_and_rtn_for_values(rtn_value_projections):
    hqq_params = AdvancedHQQParameters(rtn_value_projections=rtn_value_projections)
    found = constants(compress(True, advanced_parameters=AdvancedCompressionParameters(hqq_params=hqq_params)))
    assert all(found[f"{name}/zero_point"].get_element_type() == ov.Type.f16 for name in ("q", "k", "o"))
    assert (found["v/zero_point"].get_element_type() == ov.Type.u4) == rtn_value_projections


def test_hqq_outputs_are_closer_to_float_than_rtn():
    x = np.random.default_rng(1).normal(size=(1, 8, HIDDEN)).astype(np.float32)
    models = (attention_model(), compress(False), compress(True))
    outputs = [ov.compile_model(m, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(x)[0] for m in models]
    errors = [np.linalg.norm(output - outputs[0]) for output in outputs[1:]]
    assert errors[1] < errors[0]


def test_codes_are_written_as_computed():
    found = constants(compress(True))
    codes = np.array(found["q"].get_vector(), np.float32).reshape(found["q"].get_output_shape(0))
    scale = found["q/scale"].get_data().astype(np.float32)
    zero_point = found["q/zero_point"].get_data().astype(np.float32)
    weight = constants(attention_model())["q"].get_data().reshape(codes.shape)
    nearest = np.clip(np.round(weight / scale + zero_point), 0, 15)
    assert np.any(nearest != codes)  # unit gain moved the scales away from the codes' own


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"mode": CompressWeightsMode.NF4}, nncf.ParameterNotSupportedError),
        ({"compression_format": CompressionFormat.FQ}, nncf.ParameterNotSupportedError),
        (
            {"advanced_parameters": AdvancedCompressionParameters(hqq_params=AdvancedHQQParameters(num_iterations=-1))},
            nncf.ValidationError,
        ),
    ],
    ids=["nf4", "fq_format", "negative_iterations"],
)
def test_refused_requests_leave_the_model_unchanged(kwargs, error):
    model = attention_model()
    with pytest.raises(error):
        nncf.compress_weights(model, mode=kwargs.pop("mode", CompressWeightsMode.INT4_ASYM), hqq=True, **kwargs)
    assert all(op.get_element_type() == ov.Type.f32 for op in constants(model).values())


def test_with_awq_and_scale_estimation():
    dataset = nncf.Dataset([np.random.default_rng(i).normal(size=(1, 8, HIDDEN)).astype(np.float32) for i in range(4)])
    model = compress(True, awq=True, scale_estimation=True, dataset=dataset, all_layers=None)
    assert constants(model)["q/zero_point"].get_element_type() == ov.Type.f16
    assert "hqq" in model.get_rt_info()["nncf"]["weight_compression"]


@pytest.mark.parametrize("hqq", [False, True])
def test_hqq_parameters_are_dumped_with_hqq_only(hqq):
    dumped = compress(hqq).get_rt_info()["nncf"]["weight_compression"]
    assert ("hqq" in dumped) == ("hqq_params" in dumped["advanced_parameters"].value) == hqq
