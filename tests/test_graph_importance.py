"""Data-free importance read from the OpenVINO graph, and the variants that use it end to end."""

from __future__ import annotations

import nncf
import numpy as np
import openvino as ov
import pytest

import nncf_hqq  # noqa: F401
from nncf_hqq.hqq import IMPORTANCE_FLOOR
from nncf_hqq.openvino.graph import norm_gain
from nncf_hqq.openvino.graph import norm_gain_importance
from nncf_hqq.parameters import HQQ_REFERENCE
from nncf_hqq.parameters import HQQParameters
from tests.ov_models import HIDDEN
from tests.ov_models import input_ids
from tests.ov_models import run
from tests.ov_models import transformer_like


def constants(model: ov.Model) -> dict[str, ov.Node]:
    return {op.get_friendly_name(): op for op in model.get_ordered_ops() if op.get_type_name() == "Constant"}


@pytest.mark.parametrize("dtype", [ov.Type.f32, ov.Type.f16], ids=["f32", "f16-with-convert"])
def test_norm_gain_is_found_for_a_matmul_fed_by_a_gain(dtype: ov.Type) -> None:
    model = transformer_like(dtype=dtype)
    nodes = constants(model)
    gain = norm_gain(nodes["up_proj"], HIDDEN)
    np.testing.assert_array_equal(gain, nodes["norm_gamma"].get_data())
    importance = norm_gain_importance(nodes["up_proj"], HIDDEN)
    energy = gain.astype(np.float64) ** 2
    np.testing.assert_allclose(importance, energy + IMPORTANCE_FLOOR * energy.mean(), rtol=1e-6)


@pytest.mark.parametrize("name", ["down_proj", "moe_experts", "lm_head"])
def test_no_gain_where_the_activation_is_not_a_gain_multiply(name: str) -> None:
    node = constants(transformer_like())[name]
    channels = 2 * HIDDEN if name == "down_proj" else HIDDEN
    assert norm_gain(node, channels) is None


def test_layer_norm_bias_adds_its_energy() -> None:
    rng = np.random.default_rng(0)
    gamma, beta = rng.random(8).astype(np.float32) + 0.5, rng.standard_normal(8).astype(np.float32)
    x = ov.opset13.parameter([1, 8], ov.Type.f32)
    y = ov.opset13.add(ov.opset13.multiply(x, ov.opset13.constant(gamma)), ov.opset13.constant(beta))
    weight = ov.opset13.constant(rng.standard_normal((4, 8)).astype(np.float32), name="w")
    model = ov.Model([ov.opset13.matmul(y, weight, False, True)], [x])  # keeps the MatMul alive
    energy = gamma.astype(np.float64) ** 2 + beta.astype(np.float64) ** 2
    expected = energy + IMPORTANCE_FLOOR * energy.mean()
    np.testing.assert_allclose(norm_gain_importance(weight, 8), expected, rtol=1e-6)
    assert model.get_parameters()


def test_wrong_channel_count_finds_no_gain() -> None:
    assert norm_gain(constants(transformer_like())["up_proj"], HIDDEN + 1) is None


@pytest.mark.parametrize(
    "params",
    [
        pytest.param(HQQ_REFERENCE.replace(importance="norm_gain"), id="norm-gain"),
        pytest.param(HQQ_REFERENCE.replace(refine_rounds=3, importance="norm_gain", rtn_guard=True), id="refine-guard"),
        pytest.param(HQQ_REFERENCE.replace(refine_rounds=3, zero_point_format="integer"), id="integer-zp"),
    ],
)
def test_variants_compress_and_run(params: HQQParameters) -> None:
    reference = run(transformer_like(), input_ids())
    model = nncf.compress_weights(
        transformer_like(), mode=nncf.CompressWeightsMode.INT4_ASYM, group_size=32, hqq=True, hqq_params=params
    )
    out = run(model, input_ids())
    assert np.abs(out - reference).mean() / np.abs(reference).mean() < 0.15
