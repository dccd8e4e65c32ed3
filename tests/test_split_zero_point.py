"""ZeroPointFormat.SPLIT: HQQ's float zero points as integer ones plus an output correction (OpenVINO)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import nncf
import numpy as np
import openvino as ov
import pytest
from nncf.common.logging import nncf_logger
from nncf.tensor import Tensor
from openvino import opset13 as opset

import nncf_hqq
from nncf_hqq._nncf import CompressedWeight
from nncf_hqq.maths.conversion import split_zero_point
from nncf_hqq.openvino.decompression import float_zero_point_decompression
from nncf_hqq.openvino.split import CORRECTION_SUFFIX
from nncf_hqq.openvino.split import float_zero_point_weight
from nncf_hqq.openvino.split import int8_rows
from nncf_hqq.openvino.split import split_float_zero_points
from tests.ov_models import heavy_tailed
from tests.ov_models import input_ids
from tests.ov_models import run
from tests.ov_models import transformer_like

MODE = nncf.CompressWeightsMode
SPLIT = {"zero_point_format": "split"}
#: The split model with f16 corrections (``correction="f16"``, and every per-channel correction) against the
#: f16-zero-point model, relative to the largest output: one f16 rounding step (2^-11); measured 4e-5 to 9e-5.
TOLERANCE = 2.0**-11
#: With int8 corrections (the default for grouped 2-D weights) the split model's remaining difference to the
#: f16-zero-point model, as a fraction of the difference that dropping the corrections would leave (the integer
#: zero points alone): measured 0.003 (data-free) to 0.013 (Scale Estimation, whose row scales spread most), i.e.
#: 7e-4 to 2.7e-3 of the largest output, while the compression itself moves the outputs by 0.14 to 0.65.
INT8_LEFT = 0.03


@pytest.mark.parametrize("bits", [4, 8], ids=["u4", "u8"])
def test_split_zero_point_is_exact_and_in_range(bits: int) -> None:
    rng = np.random.default_rng(0)
    top = 2**bits - 1
    zero_point = rng.uniform(-2.0, top + 2.0, size=(64, 8, 1)).astype(np.float32)  # some outside the code range
    scale = rng.uniform(0.01, 0.1, size=(64, 8, 1)).astype(np.float32)
    codes = rng.integers(0, top + 1, size=(64, 8, 16)).astype(np.float32)
    integer, correction = split_zero_point(Tensor(zero_point), Tensor(scale), bits)
    integer, correction = integer.data, correction.data
    assert integer.dtype == np.uint8 and integer.min() >= 0 and integer.max() <= top
    np.testing.assert_allclose((codes - integer) * scale + correction, (codes - zero_point) * scale, atol=1e-6)
    inside = (zero_point >= 0) & (zero_point <= top)
    assert np.all(np.abs(correction[inside]) <= scale[inside] / 2 + 1e-7)
    np.testing.assert_array_equal(integer[inside], np.round(zero_point[inside]))


def siblings_model(seed: int = 0, hidden: int = 128) -> ov.Model:
    """A norm feeding q (with a bias), k and v MatMuls, their concatenation feeding o: siblings share one input."""
    rng = np.random.default_rng(seed)
    x = opset.parameter([1, -1, hidden], ov.Type.f32, name="x")
    normed = opset.multiply(x, opset.constant((1.0 + rng.random(hidden)).astype(np.float32)), name="norm")

    def linear(source: ov.Node, out: int, name: str) -> ov.Node:
        weight = opset.constant(
            heavy_tailed(rng, (out, source.get_output_partial_shape(0)[-1].get_length())), name=name
        )
        return opset.matmul(source, weight, False, True, name=f"{name}/matmul")

    q = opset.add(linear(normed, hidden, "q"), opset.constant(heavy_tailed(rng, (hidden,))), name="q/bias")
    k, v = linear(normed, hidden // 2, "k"), linear(normed, hidden // 2, "v")
    mixed = opset.concat([q, k, v], axis=-1)
    return ov.Model([opset.result(linear(mixed, hidden, "o"), name="y")], [x], "siblings")


def _inputs(hidden: int = 128, tokens: int = 8) -> np.ndarray:
    return np.random.default_rng(3).standard_normal((1, tokens, hidden)).astype(np.float32)


def _f16_zero_point_names(model: ov.Model) -> list[str]:
    return sorted(
        op.get_friendly_name().removesuffix("/zero_point")
        for op in model.get_ops()
        if op.get_type_name() == "Constant"
        and op.get_friendly_name().endswith("/zero_point")
        and op.get_output_element_type(0) == ov.Type.f16
    )


def _f16_zero_points(model: ov.Model) -> int:
    return len(_f16_zero_point_names(model))


def _count(model: ov.Model, type_name: str) -> int:
    return sum(op.get_type_name() == type_name for op in model.get_ops())


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def _without_corrections(split: ov.Model) -> ov.Model:
    """A copy of a split model whose correction Adds are bypassed: its integer zero points alone."""
    model = split.clone()
    for op in model.get_ops():
        if op.get_type_name() == "Add" and op.get_friendly_name().endswith(f"/{CORRECTION_SUFFIX}"):
            for target in list(op.output(0).get_target_inputs()):
                target.replace_source_output(op.input_value(0))
    model.validate_nodes_and_infer_types()
    return model


def assert_split_matches(split: ov.Model, float_zp: ov.Model, inputs: np.ndarray) -> None:
    """The split model computes the f16-zero-point model: its difference is at most ``INT8_LEFT`` of what its
    integer zero points alone would leave, and within one f16 step where every correction is f16."""
    expected = run(float_zp, inputs)
    difference = _relative(run(split, inputs), expected)
    left = _relative(run(_without_corrections(split), inputs), expected)
    assert difference < INT8_LEFT * left
    if not any(op.get_output_element_type(0) == ov.Type.i8 for op in split.get_ops()):
        assert difference < TOLERANCE


@pytest.mark.parametrize(
    "mode, group_size",
    [(MODE.INT4_ASYM, 32), (MODE.INT4_ASYM, -1), (MODE.INT8_ASYM, -1)],
    ids=["int4_g32", "int4_per_channel", "int8"],
)
def test_split_model_computes_the_float_zero_point_model(mode: nncf.CompressWeightsMode, group_size: int) -> None:
    kwargs = {"mode": mode, "group_size": group_size, "all_layers": True, "hqq": True}
    if mode == MODE.INT8_ASYM:
        kwargs.pop("group_size"), kwargs.pop("all_layers")
    model = siblings_model()
    float_zp = nncf.compress_weights(model.clone(), **kwargs)
    split = nncf.compress_weights(model.clone(), hqq_params=SPLIT, **kwargs)
    assert _f16_zero_points(float_zp) == 4 and _f16_zero_points(split) == 0
    assert _count(split, "ReduceSum") == 4 and _count(split, "Add") == 1 + 4  # the bias, one correction each
    ops = {op.get_friendly_name(): op for op in split.get_ops()}
    q_correction = ops["q/matmul/hqq_split_correction"]
    assert q_correction.input_value(0).get_node().get_friendly_name() == "q/bias"  # the bias stays on the MatMul
    x = _inputs()
    assert_split_matches(split, float_zp, x)
    assert _relative(run(split, x), run(model, x)) > 10 * _relative(run(split, x), run(float_zp, x))


def test_split_takes_both_weight_layouts_moe_experts_and_the_lm_head() -> None:
    """transformer_like: a ``[out, in]`` and an ``[in, out]`` weight, 3D experts ``[E, out, in]``, the LM head. The
    embedding table (a Gather, no MatMul to correct) keeps its f16 zero point."""
    model = transformer_like()
    kwargs = {"mode": MODE.INT4_ASYM, "group_size": 32, "all_layers": True, "hqq": True}
    float_zp = nncf.compress_weights(model.clone(), **kwargs)
    split = nncf.compress_weights(model.clone(), hqq_params=SPLIT, **kwargs)
    assert _f16_zero_point_names(float_zp) == ["down_proj", "embed_tokens", "lm_head", "moe_experts", "up_proj"]
    assert _f16_zero_point_names(split) == ["embed_tokens"]
    assert_split_matches(split, float_zp, input_ids())


def tied_model(seed: int = 0, vocab: int = 64, hidden: int = 128) -> ov.Model:
    """An embedding table read by a Gather and, tied, by the LM head MatMul."""
    rng = np.random.default_rng(seed)
    ids = opset.parameter([1, -1], ov.Type.i64, name="input_ids")
    table = opset.constant(heavy_tailed(rng, (vocab, hidden)), name="embed_tokens")
    x = opset.gather(table, ids, axis=0)
    x = opset.matmul(x, opset.constant(heavy_tailed(rng, (hidden, hidden)), name="proj"), False, True)
    logits = opset.matmul(x, table, False, True, name="lm_head")
    return ov.Model([opset.result(logits, name="logits")], [ids], "tied")


@pytest.mark.parametrize(
    "mode, group_size", [(MODE.INT8_ASYM, None), (MODE.INT4_ASYM, 16)], ids=["int8_per_channel", "int4_g16"]
)
def test_a_table_tied_to_the_lm_head_gets_the_correction_on_its_lookup(
    mode: nncf.CompressWeightsMode, group_size: int | None
) -> None:
    """NNCF decompresses a tied table once for the Gather and the LM head MatMul: the split corrects both readers."""
    model = tied_model()
    kwargs = {"mode": mode, "hqq": True}
    if group_size is not None:
        kwargs.update(group_size=group_size, all_layers=True, ratio=1.0, backup_mode=nncf.BackupMode.NONE)
    float_zp = nncf.compress_weights(model.clone(), **kwargs)
    split = nncf.compress_weights(model.clone(), hqq_params=SPLIT, **kwargs)
    assert _f16_zero_point_names(float_zp) == ["embed_tokens", "proj"]
    assert _f16_zero_point_names(split) == []
    assert "embed_tokens/lookup_correction" in {op.get_friendly_name() for op in split.get_ops()}
    assert_split_matches(split, float_zp, input_ids())


def _hand_written_matmul(activation_shape: ov.PartialShape, bits: int = 4) -> ov.Node:
    """One MatMul whose ``[16, 32]`` weight is the f16-zero-point subgraph HQQ writes (groups of 8)."""
    rng = np.random.default_rng(0)
    compressed = CompressedWeight(
        Tensor(rng.integers(0, 2**bits, size=(16, 4, 8)).astype(np.uint8)),
        Tensor(rng.uniform(0.01, 0.1, size=(16, 4, 1)).astype(np.float32)),
        Tensor(rng.uniform(0, 2**bits - 1, size=(16, 4, 1)).astype(np.float32)),
    )
    weight = float_zero_point_decompression(compressed, bits, (16, 32), "w", 1, ov.Type.f32)
    x = opset.parameter(activation_shape, ov.Type.f32, name="x")
    return opset.matmul(x, weight, False, True)


@pytest.mark.parametrize(
    "shape, bits, found",
    [
        (ov.PartialShape([1, -1, 32]), 4, True),
        (ov.PartialShape([1, -1, 32]), 8, True),
        (ov.PartialShape([1, -1, 32]), 3, False),
        (ov.PartialShape.dynamic(), 4, False),
    ],
    ids=["u4", "u8", "u3_codes", "dynamic_rank_input"],
)
def test_which_matmuls_the_split_takes(shape: ov.PartialShape, bits: int, found: bool) -> None:
    weight = float_zero_point_weight(_hand_written_matmul(shape, bits))
    assert (weight is not None) == found
    if found:
        assert weight.name == "w" and weight.group_shape == (4, 8) and weight.bits == bits


def test_saved_split_model_loads_bit_exactly(tmp_path: Path) -> None:
    split = nncf.compress_weights(
        siblings_model(), mode=MODE.INT4_ASYM, group_size=32, all_layers=True, hqq=True, hqq_params=SPLIT
    )
    ov.save_model(split, tmp_path / "model.xml")
    loaded = ov.Core().read_model(tmp_path / "model.xml")
    x = _inputs()
    np.testing.assert_array_equal(run(loaded, x), run(split, x))


def test_split_leaves_integer_zero_points_and_rtn_layers_alone() -> None:
    """Only HQQ's f16 zero points are split: RTN-role and backup layers keep what NNCF wrote."""
    model = siblings_model()
    rtn = nncf.compress_weights(model.clone(), mode=MODE.INT4_ASYM, group_size=32, all_layers=True)
    before = {op.get_friendly_name() for op in rtn.get_ops()}
    assert split_float_zero_points(rtn) == []
    assert {op.get_friendly_name() for op in rtn.get_ops()} == before


def test_weights_the_split_cannot_take_keep_their_float_zero_point(caplog: pytest.LogCaptureFixture) -> None:
    model = nncf.compress_weights(siblings_model(), mode=MODE.INT4_ASYM, group_size=32, all_layers=True, hqq=True)
    matmuls = [op for op in model.get_ops() if op.get_type_name() == "MatMul"]
    assert all(float_zero_point_weight(op) is not None for op in matmuls)
    # NNCF's logger does not propagate to the root logger: caplog sees it only through its own handler.
    nncf_logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger=nncf_logger.name):
            done = split_float_zero_points(model, names={"q", "k", "not_a_weight"})
    finally:
        nncf_logger.removeHandler(caplog.handler)
    assert sorted(done) == ["k", "q"]
    assert "not_a_weight" in caplog.text
    assert _f16_zero_points(model) == 2  # v and o were not asked for


@pytest.mark.parametrize(
    "options",
    [{"awq": True}, {"scale_estimation": True}, {"lora_correction": True}, {"ratio": 0.75}],
    ids=["awq", "scale_estimation", "lora", "mixed_precision"],
)
def test_split_composes_with_data_aware_steps(options: dict) -> None:
    model = siblings_model()
    dataset = nncf.Dataset([_inputs(tokens=16) for _ in range(4)])
    kwargs = {"mode": MODE.INT4_ASYM, "group_size": 32, "all_layers": True, "hqq": True, "dataset": dataset}
    float_zp = nncf.compress_weights(model.clone(), **kwargs, **options)
    split = nncf.compress_weights(model.clone(), hqq_params=SPLIT, **kwargs, **options)
    assert _f16_zero_points(float_zp) > 0 and _f16_zero_points(split) == 0
    assert_split_matches(split, float_zp, _inputs())


def _subtract_reading(constant: ov.Node) -> ov.Input:
    """The input that reads ``constant``, past a Convert."""
    (reader,) = constant.output(0).get_target_inputs()
    if reader.get_node().get_type_name() == "Convert":
        (reader,) = reader.get_node().output(0).get_target_inputs()
    return reader


@pytest.mark.parametrize(
    ("build", "kwargs", "split_weights"),
    [
        pytest.param(
            transformer_like,
            {"mode": MODE.INT4_ASYM, "group_size": 32, "all_layers": True},
            {"up_proj", "down_proj", "moe_experts", "lm_head"},
            id="int4-g32-both-layouts-and-experts",
        ),
        pytest.param(siblings_model, {"mode": MODE.INT8_ASYM}, {"q", "k", "v", "o"}, id="int8-per-channel"),
    ],
)
def test_only_zero_points_are_named_zero_point(build: Any, kwargs: dict, split_weights: set[str]) -> None:
    """Code that finds zero points by name (constants whose name contains ``/zero_point``, as NNCF's tests do) must
    find only zero points: every op named so is a weight's zero point (its scale's shape, read by the Subtract of
    the decompression) or that Subtract; the corrections (``[1, out]`` per channel, like an INT8 zero point
    transposed) are named ``hqq_split_correction``."""
    split = nncf.compress_weights(build(), hqq=True, hqq_params=SPLIT, **kwargs)
    ops = {op.get_friendly_name(): op for op in split.get_ops()}
    named = {name: op for name, op in ops.items() if "zero_point" in name}
    constants = {name.removesuffix("/zero_point"): op for name, op in named.items() if op.get_type_name() == "Constant"}
    assert set(constants) >= split_weights
    for weight, constant in constants.items():
        assert constant.get_friendly_name() == f"{weight}/zero_point"
        assert constant.get_output_partial_shape(0) == ops[f"{weight}/scale"].get_output_partial_shape(0)
        reader = _subtract_reading(constant)
        assert reader.get_node().get_type_name() == "Subtract" and reader.get_index() == 1
    others = {name for name, op in named.items() if op.get_type_name() != "Constant"}
    assert others == {f"{weight}/zero_point/subtract" for weight in constants}
    corrections = {name for name in ops if name.endswith("/hqq_split_correction")}
    assert {name.removesuffix("/hqq_split_correction") for name in corrections} >= split_weights
    assert len(corrections) == 2 * len(split_weights)  # a constant and an Add each


def test_low_bit_modes_refuse_the_split_format() -> None:
    with pytest.raises(nncf.ValidationError, match="float zero points"):
        nncf_hqq.compress_weights(
            siblings_model(), mode=nncf_hqq.LowBitMode.INT3_ASYM, group_size=32, hqq=True, hqq_params=SPLIT
        )


def test_int8_rows_round_each_value_within_half_a_step() -> None:
    rng = np.random.default_rng(0)
    values = rng.uniform(-0.5, 0.5, size=(32, 12)) * rng.uniform(1e-5, 1e-1, size=(32, 1))  # rows of any size
    values[3] = 0.0
    codes, scale = int8_rows(values)
    assert codes.dtype == np.int8 and scale.dtype == np.float32 and scale.shape == (32, 1)
    assert np.abs(codes.astype(np.int32)).max() <= 127 and np.all(np.abs(codes).max(axis=1)[np.arange(32) != 3] == 127)
    assert np.all(np.abs(codes * scale - values) <= scale / 2 * (1 + 1e-6))
    assert np.all(codes[3] == 0)


def _one_group_matmul(out: int = 48, groups: int = 12, group_size: int = 16, seed: int = 0) -> ov.Model:
    """One MatMul with HQQ's f16-zero-point weight subgraph and scales spread over two decades within each row."""
    rng = np.random.default_rng(seed)
    compressed = CompressedWeight(
        Tensor(rng.integers(0, 16, size=(out, groups, group_size)).astype(np.uint8)),
        Tensor((10.0 ** rng.uniform(-3, -1, size=(out, groups, 1))).astype(np.float32)),
        Tensor(rng.uniform(0, 15, size=(out, groups, 1)).astype(np.float32)),
    )
    weight = float_zero_point_decompression(compressed, 4, (out, groups * group_size), "w", 1, ov.Type.f32)
    x = opset.parameter([1, -1, groups * group_size], ov.Type.f32, name="x")
    return ov.Model([opset.result(opset.matmul(x, weight, False, True))], [x], "one_matmul")


def test_int8_correction_stays_within_its_rounding_bound() -> None:
    """Output ``n`` of the split differs from the f16 zero point's by at most ``scale_n / 2 * sum_g |groupsum_g(x)|``
    (each stored correction is within half its row's int8 step), plus one f16 step of the output."""
    float_zp = _one_group_matmul()
    split = float_zp.clone()
    assert split_float_zero_points(split) == ["w"]
    ops = {op.get_friendly_name(): op for op in split.get_ops()}
    codes, scale = ops[f"w/{CORRECTION_SUFFIX}"], ops[f"w/{CORRECTION_SUFFIX}_scale"]
    assert codes.get_output_element_type(0) == ov.Type.i8 and codes.get_output_shape(0) == ov.Shape([48, 12])
    assert scale.get_output_element_type(0) == ov.Type.f32 and scale.get_output_shape(0) == ov.Shape([48, 1])
    x = np.random.default_rng(1).standard_normal((1, 8, 192)).astype(np.float32) + 0.5  # group sums far from 0
    group_sums = np.abs(x.reshape(1, 8, 12, 16).sum(axis=-1)).sum(axis=-1, keepdims=True)  # [1, 8, 1]
    expected = run(float_zp, x)
    bound = scale.get_data()[:, 0] / 2 * group_sums + TOLERANCE * np.abs(expected).max()
    difference = np.abs(run(split, x) - expected)
    assert np.all(difference <= bound)
    assert difference.max() > 0.01 * bound.max()  # the bound is not vacuous


def test_corrections_that_stay_f16() -> None:
    """int8 rows only where the correction is a 2-D MatMul weight: per-channel corrections (a broadcast product)
    and 3-D expert corrections keep f16, and ``correction="f16"`` keeps f16 everywhere."""

    def correction_types(model: ov.Model) -> dict[str, str]:
        ops = {op.get_friendly_name(): op for op in model.get_ops()}
        found = (name.removesuffix(f"/{CORRECTION_SUFFIX}") for name in ops if name.endswith(f"/{CORRECTION_SUFFIX}"))
        return {
            name: ops[f"{name}/{CORRECTION_SUFFIX}"].get_output_element_type(0).get_type_name()
            for name in found
            if ops[f"{name}/{CORRECTION_SUFFIX}"].get_type_name() == "Constant"
        }

    kwargs = {"mode": MODE.INT4_ASYM, "group_size": 32, "all_layers": True, "hqq": True}
    float_zp = nncf.compress_weights(transformer_like(), **kwargs)
    split = float_zp.clone()
    split_float_zero_points(split)
    assert correction_types(split) == {"down_proj": "i8", "up_proj": "i8", "lm_head": "i8", "moe_experts": "f16"}
    per_channel = nncf.compress_weights(siblings_model(), mode=MODE.INT8_ASYM, hqq=True, hqq_params=SPLIT)
    assert set(correction_types(per_channel).values()) == {"f16"}
    split_f16 = float_zp.clone()
    split_float_zero_points(split_f16, correction="f16")
    assert set(correction_types(split_f16).values()) == {"f16"}
    ids = input_ids()
    assert _relative(run(split_f16, ids), run(float_zp, ids)) < TOLERANCE


def test_an_unknown_correction_type_is_refused() -> None:
    with pytest.raises(ValueError, match="correction must be one of int8, f16"):
        split_float_zero_points(siblings_model(), correction="bf16")


def test_the_cpu_plugin_runs_the_int8_correction_as_a_compressed_fully_connected() -> None:
    """With default CPU settings the int8 correction becomes a FullyConnected on int8 weights (the kernels with
    dynamic activation quantization), not a float MatMul on a decompressed constant (docs/inference.md). 1024
    outputs: on AMX with bf16 the plugin decompresses FullyConnected weights of at most 512 x 512 whose input width
    is not a multiple of 32. When an OpenVINO upgrade changes this, this test fails on purpose."""
    split = _one_group_matmul(out=1024, groups=12, group_size=128)
    split_float_zero_points(split)
    compiled = ov.Core().compile_model(split, "CPU", {"INFERENCE_NUM_THREADS": "1"})
    compiled(np.ones((1, 2, 12 * 128), dtype=np.float32))
    weights = sorted(
        op.get_rt_info()["runtimePrecision"].astype(str)
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "FullyConnected"
    )
    assert weights == ["i8", "u4"]  # the correction and the main weight, both kept compressed
