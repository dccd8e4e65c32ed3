import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as opset

import nncf
from nncf import CompressWeightsMode
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


def normalized_linear_model(gain: np.ndarray | None) -> ov.Model:
    """A layer fed by a normalization's per-channel gain (a Multiply by a constant), or by the input itself."""
    weight = (np.random.default_rng(0).standard_t(4, (HIDDEN, HIDDEN)) * 0.05).astype(np.float32)
    x = opset.parameter([1, 8, HIDDEN], ov.Type.f32, name="x")
    normed = x if gain is None else opset.multiply(x, opset.constant(gain.astype(np.float32)), name="norm")
    return ov.Model([opset.matmul(normed, opset.constant(weight, name="w"), False, True)], [x])


def constants(model: ov.Model) -> dict[str, ov.Node]:
    return {op.get_friendly_name(): op for op in model.get_ops() if op.get_type_name() == "Constant"}


def hqq_params(**kwargs) -> AdvancedCompressionParameters:
    return AdvancedCompressionParameters(hqq_params=AdvancedHQQParameters(**kwargs))


def compress(model: ov.Model, hqq: bool, **kwargs) -> ov.Model:
    arguments = {"mode": CompressWeightsMode.INT4_ASYM, "group_size": 32, "ratio": 1.0, "all_layers": True}
    return nncf.compress_weights(model, hqq=hqq, **{**arguments, **kwargs})


def stored(found: dict[str, ov.Node], name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The codes, scale and zero point of a compressed weight, grouped as [rows, groups, group size]."""
    codes = np.array(found[name].get_vector(), np.float32).reshape(found[name].get_output_shape(0))
    return codes, *(found[f"{name}/{key}"].get_data().astype(np.float32) for key in ("scale", "zero_point"))


@pytest.mark.parametrize("unit_gain", [False, True], ids=["nearest_codes", "unit_gain"])
def test_unit_gain_keeps_the_codes_it_computed(unit_gain):
    found = constants(compress(attention_model(), True, advanced_parameters=hqq_params(unit_gain=unit_gain)))
    codes, scale, zero_point = stored(found, "q")
    weight = constants(attention_model())["q"].get_data().reshape(codes.shape)
    nearest = np.clip(np.round(weight / scale + zero_point), 0, 15)
    assert np.any(nearest != codes) == unit_gain  # a rescaled group keeps its codes, which NNCF would round anew


@pytest.mark.parametrize("weighting", [True, False])
def test_input_energy_weighting_lowers_the_error_the_layer_sees(weighting):
    gain = np.exp(np.random.default_rng(1).normal(0.0, 1.5, HIDDEN))
    params = hqq_params(input_energy_weighting=weighting)
    errors = []
    for model_gain in (None, gain):
        found = constants(compress(normalized_linear_model(model_gain), True, advanced_parameters=params))
        codes, scale, zero_point = stored(found, "w")
        weight = constants(normalized_linear_model(model_gain))["w"].get_data().reshape(codes.shape)
        seen = ((codes - zero_point) * scale - weight) * gain.reshape(1, *codes.shape[1:])
        errors.append(np.sum(seen**2))
    # the weighted solve spends its error on the channels the gain shrinks; unweighted, the two solves are the same
    assert (errors[1] < 0.9 * errors[0]) == weighting
