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


def attention_model() -> ov.Model:
    rng = np.random.default_rng(0)
    x = opset.parameter([1, 8, HIDDEN], ov.Type.f32, name="x")

    def linear(inp, name):
        weight = opset.constant((rng.standard_t(4, (HIDDEN, HIDDEN)) * 0.05).astype(np.float32), name=name)
        return opset.matmul(inp, weight, False, True, name=f"{name}/matmul")

    attention = opset.scaled_dot_product_attention(*(linear(x, n) for n in ("q", "k", "v")), causal=True)
    return ov.Model([linear(attention, "o")], [x])


def batched_matmul_model(transpose_b: bool) -> ov.Model:
    """Experts' weights [E, O, H] (MoE layout) on the input [E, T, H], then a 2-D [1024, O] weight."""
    rng = np.random.default_rng(0)

    def weight(shape, name):
        values = (rng.standard_t(4, shape) * 0.05).astype(np.float32)
        return opset.constant(values if transpose_b else np.swapaxes(values, -1, -2).copy(), name=name)

    x = opset.parameter([4, 8, HIDDEN], ov.Type.f32, name="x")
    experts = opset.matmul(x, weight((4, HIDDEN, HIDDEN), "w"), False, transpose_b, name="experts")
    return ov.Model([opset.matmul(opset.relu(experts), weight((1024, HIDDEN), "w2"), False, transpose_b)], [x])


def constants(model: ov.Model) -> dict[str, ov.Node]:
    return {op.get_friendly_name(): op for op in model.get_ops() if op.get_type_name() == "Constant"}


def dataset(shape) -> nncf.Dataset:
    return nncf.Dataset([np.random.default_rng(i).normal(size=shape).astype(np.float32) for i in range(4)])


def hqq_params(**kwargs) -> AdvancedCompressionParameters:
    return AdvancedCompressionParameters(hqq_params=AdvancedHQQParameters(**kwargs))


def compress(model: ov.Model, hqq: bool, **kwargs) -> ov.Model:
    arguments = {"mode": CompressWeightsMode.INT4_ASYM, "group_size": 32, "ratio": 1.0, "all_layers": True}
    return nncf.compress_weights(model, hqq=hqq, **{**arguments, **kwargs})


@pytest.mark.parametrize("transpose_b", [True, False], ids=["transpose_b", "no_transpose_b"])
@pytest.mark.parametrize("data", [False, True], ids=["data_free", "awq"])
def test_every_weight_gets_float_zero_points_and_nncf_codes(transpose_b, data):
    model = batched_matmul_model(transpose_b)
    kwargs = {"awq": True, "dataset": dataset((4, 8, HIDDEN))} if data else {}
    kwargs["advanced_parameters"] = hqq_params(unit_gain=False)  # unit gain keeps codes that are not the nearest
    found = constants(compress(model, True, **kwargs))
    for name in ("w", "w2"):
        assert found[f"{name}/zero_point"].get_element_type() == ov.Type.f16
        if not data:  # the codes are NNCF's nearest codes for the stored scale and zero point
            codes = np.array(found[name].get_vector(), np.float32).reshape(found[name].get_output_shape(0))
            scale, zero_point = (
                found[f"{name}/{key}"].get_data().astype(np.float32) for key in ("scale", "zero_point")
            )
            weight = constants(batched_matmul_model(transpose_b))[name].get_data().reshape(codes.shape)
            np.testing.assert_array_equal(codes, np.clip(np.round(weight / scale + zero_point), 0, 15))


@pytest.mark.parametrize("rtn_value_projections", [True, False])
def test_attention_values_keep_rounding(rtn_value_projections):
    advanced_parameters = hqq_params(rtn_value_projections=rtn_value_projections)
    found = constants(compress(attention_model(), True, advanced_parameters=advanced_parameters))
    assert all(found[f"{name}/zero_point"].get_element_type() == ov.Type.f16 for name in ("q", "k", "o"))
    assert (found["v/zero_point"].get_element_type() == ov.Type.u4) == rtn_value_projections


def test_outputs_are_closer_to_float_than_rtn():
    x = np.random.default_rng(1).normal(size=(1, 8, HIDDEN)).astype(np.float32)
    models = (attention_model(), compress(attention_model(), False), compress(attention_model(), True))
    outputs = [ov.compile_model(m, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(x)[0] for m in models]
    errors = [np.linalg.norm(output - outputs[0]) for output in outputs[1:]]
    assert errors[1] < errors[0]


def test_backup_mode_keeps_rounding():  # the last layer takes the backup mode without all_layers
    found = constants(compress(attention_model(), True, all_layers=None))
    assert [found[f"{name}/zero_point"].get_element_type() for name in "qkvo"] == [ov.Type.f16] * 2 + [
        ov.Type.u4,
        ov.Type.u8,
    ]


def test_hqq_and_its_parameters_are_dumped_to_rt_info():
    for hqq in (False, True):
        dumped = compress(attention_model(), hqq).get_rt_info()["nncf"]["weight_compression"]
        assert dumped["hqq"].value == str(hqq)
        assert "'hqq_params': {'num_iterations': 20, 'refinement_steps': 5" in dumped["advanced_parameters"].value


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"mode": CompressWeightsMode.NF4}, nncf.ParameterNotSupportedError),
        ({"compression_format": CompressionFormat.FQ}, nncf.ParameterNotSupportedError),
        ({"gptq": True, "dataset": dataset((1, 8, HIDDEN))}, nncf.ParameterNotSupportedError),
        ({"lora_correction": True, "dataset": dataset((1, 8, HIDDEN))}, nncf.ParameterNotSupportedError),
        ({"advanced_parameters": hqq_params(calibration_token_rows=-1)}, nncf.ValidationError),
        ({"advanced_parameters": hqq_params(num_iterations=-1)}, nncf.ValidationError),
        ({"advanced_parameters": hqq_params(refinement_steps=1.5)}, nncf.ValidationError),
    ],
    ids=["nf4", "fq_format", "gptq", "lora_correction", "token_rows", "iterations", "steps"],
)
def test_refused_requests_leave_the_model_unchanged(kwargs, error):
    model = attention_model()
    with pytest.raises(error):
        compress(model, True, **kwargs)
    assert all(op.get_element_type() == ov.Type.f32 for op in constants(model).values())


@pytest.mark.parametrize("transpose_b", [True, False], ids=["transpose_b", "no_transpose_b"])
def test_scale_estimation_compresses_batched_weights(transpose_b):
    model = compress(
        batched_matmul_model(transpose_b), True, awq=True, scale_estimation=True, dataset=dataset((4, 8, HIDDEN))
    )
    found = constants(model)
    assert [found[f"{name}/zero_point"].get_element_type() for name in ("w", "w2")] == [ov.Type.f16] * 2
