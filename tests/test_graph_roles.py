"""Attention roles of projection MatMuls, and HQQ leaving chosen roles to round-to-nearest."""

from __future__ import annotations

import nncf
import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as opset

import nncf_hqq
from nncf_hqq.openvino.graph import attention_role
from nncf_hqq.parameters import AttentionRole
from nncf_hqq.parameters import role_of_outputs
from tests.ov_models import fused_qkv_attention
from tests.test_api import zero_point_types

HIDDEN, HEADS = 64, 4


def attention_model(decomposed: bool, softmax_in_f16: bool = False) -> ov.Model:
    """x -> q/k/v projections -> [1, heads, seq, dim] -> attention (SDPA or MatMul-Softmax-MatMul) -> out proj."""
    rng = np.random.default_rng(0)
    x = opset.parameter([1, -1, HIDDEN], ov.Type.f32, name="x")

    def project(name: str) -> ov.Node:
        weight = opset.constant((rng.standard_normal((HIDDEN, HIDDEN)) * 0.05).astype(np.float32), name=name)
        y = opset.matmul(x, weight, False, True, name=f"{name}/matmul")
        y = opset.reshape(y, opset.constant(np.array([1, -1, HEADS, HIDDEN // HEADS])), special_zero=False)
        return opset.transpose(y, opset.constant(np.array([0, 2, 1, 3])))

    q, k, v = project("q_proj"), project("k_proj"), project("v_proj")
    if decomposed:
        scores = opset.softmax(opset.matmul(q, k, False, True), -1)
        if softmax_in_f16:  # as an eager attention exported in f16: the scores pass through conversions
            scores = opset.convert(opset.convert(scores, ov.Type.f16), ov.Type.f32)
        attended = opset.matmul(scores, v, False, False)
    else:
        attended = opset.scaled_dot_product_attention(q, k, v, causal=True)
    merged = opset.reshape(opset.transpose(attended, opset.constant(np.array([0, 2, 1, 3]))), [1, -1, HIDDEN], False)
    out_weight = opset.constant((rng.standard_normal((HIDDEN, HIDDEN)) * 0.05).astype(np.float32), name="o_proj")
    return ov.Model([opset.result(opset.matmul(merged, out_weight, False, True))], [x], "attention")


def constants(model: ov.Model) -> dict[str, ov.Node]:
    return {op.get_friendly_name(): op for op in model.get_ordered_ops() if op.get_type_name() == "Constant"}


def test_roles_through_scaled_dot_product_attention() -> None:
    model = attention_model(decomposed=False)
    nodes = constants(model)
    assert attention_role(nodes["q_proj"]) is AttentionRole.QUERY
    assert attention_role(nodes["k_proj"]) is AttentionRole.KEY
    assert attention_role(nodes["v_proj"]) is AttentionRole.VALUE
    assert attention_role(nodes["o_proj"]) is None


@pytest.mark.parametrize("softmax_in_f16", [False, True], ids=["softmax", "softmax-converted"])
def test_value_role_in_decomposed_attention(softmax_in_f16: bool) -> None:
    model = attention_model(decomposed=True, softmax_in_f16=softmax_in_f16)
    nodes = constants(model)
    assert attention_role(nodes["v_proj"]) is AttentionRole.VALUE
    assert attention_role(nodes["q_proj"]) is None  # query and key are not told apart without SDPA
    assert attention_role(nodes["o_proj"]) is None


@pytest.mark.parametrize("decomposed", [False, True], ids=["sdpa", "decomposed"])
def test_rtn_roles_keep_integer_zero_points_for_those_projections(decomposed: bool) -> None:
    params = nncf_hqq.HQQ_REFERENCE.replace(rtn_roles=("value",))
    model = nncf.compress_weights(
        attention_model(decomposed),
        mode=nncf.CompressWeightsMode.INT4_ASYM,
        group_size=32,
        all_layers=True,
        hqq=True,
        hqq_params=params,
    )
    zps = zero_point_types(model)
    assert zps["v_proj"] == ov.Type.u4
    assert {zps["q_proj"], zps["k_proj"], zps["o_proj"]} == {ov.Type.f16}


def test_rtn_roles_layer_equals_nncf_rtn(tmp_path: object) -> None:
    kwargs = {"mode": nncf.CompressWeightsMode.INT4_ASYM, "group_size": 32, "all_layers": True}
    params = nncf_hqq.HQQ_REFERENCE.replace(rtn_roles=("value",))
    ours = constants(nncf.compress_weights(attention_model(False), **kwargs, hqq=True, hqq_params=params))
    rtn = constants(nncf.compress_weights(attention_model(False), **kwargs))
    for suffix in ("", "/scale", "/zero_point"):
        np.testing.assert_array_equal(ours[f"v_proj{suffix}"].get_data(), rtn[f"v_proj{suffix}"].get_data())


@pytest.mark.parametrize("roles", ["value", ("values",), 3], ids=["bare-string", "unknown", "int"])
def test_invalid_roles_are_named(roles: object) -> None:
    with pytest.raises(nncf.ValidationError, match="rtn_roles"):
        nncf_hqq.HQQParameters(rtn_roles=roles)  # type: ignore[arg-type]


@pytest.mark.parametrize("order", ["qkv", "vqk", "kqv"])
def test_fused_qkv_projection_is_a_value_projection_whatever_its_split_order(order: str) -> None:
    model = fused_qkv_attention((order,))  # held: a node's consumers go with its model
    nodes = constants(model)
    assert attention_role(nodes[f"qkv_proj_{order}"]) is AttentionRole.VALUE
    assert attention_role(nodes[f"o_proj_{order}"]) is None


@pytest.mark.parametrize(
    ("reached", "role"),
    [
        ([], None),
        ([AttentionRole.KEY], AttentionRole.KEY),
        ([AttentionRole.QUERY, AttentionRole.KEY], AttentionRole.QUERY),
        ([AttentionRole.QUERY, AttentionRole.KEY, AttentionRole.VALUE], AttentionRole.VALUE),
    ],
    ids=["none", "key", "nearest", "value_wins"],
)
def test_role_of_outputs(reached: list[AttentionRole], role: AttentionRole | None) -> None:
    assert role_of_outputs(reached) is role


def test_fused_qkv_projections_keep_rounding_by_default() -> None:
    model = nncf.compress_weights(
        fused_qkv_attention(),
        mode=nncf.CompressWeightsMode.INT4_ASYM,
        group_size=32,
        all_layers=True,
        hqq=True,
    )
    zps = zero_point_types(model)
    assert zps["qkv_proj_qkv"] == zps["qkv_proj_vqk"] == ov.Type.u4
    assert zps["o_proj_qkv"] == zps["o_proj_vqk"] == ov.Type.f16
