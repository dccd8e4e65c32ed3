"""Per-weight HQQ compression, the convention conversion and the round-to-nearest guard."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from nncf import CompressWeightsMode
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
from nncf.quantization.algorithms.weight_compression.weight_lowering import calculate_integer_quantization_params
from nncf.tensor import Tensor

from nncf_hqq.hqq import HQQ
from nncf_hqq.maths.conversion import hqq_to_nncf
from nncf_hqq.maths.conversion import nncf_to_hqq
from nncf_hqq.maths.conversion import to_compressed_weight
from nncf_hqq.maths.conversion import to_symmetric_compressed_weight
from nncf_hqq.maths.core import decompress
from nncf_hqq.maths.core import dequantize
from nncf_hqq.maths.core import quantize
from nncf_hqq.maths.core import rtn_scale_zero_point
from nncf_hqq.maths.core import split_into_groups
from nncf_hqq.maths.grids import symmetric_init
from nncf_hqq.maths.solver import hqq_solve
from nncf_hqq.parameters import HQQ_CORE
from nncf_hqq.parameters import HQQ_DEFAULT
from nncf_hqq.parameters import HQQ_REFERENCE

INT4 = WeightCompressionConfig(CompressWeightsMode.INT4_ASYM, group_size=32)
#: The published solver returning its best iterate, without the default's refinements.
PLAIN = HQQ_REFERENCE
GUARDED = dataclasses.replace(PLAIN, rtn_guard=True)
#: The default's weight-error optimisation: its last step (``unit_gain``) trades a little weight error for unit
#: gain by design (tests/test_unit_gain.py), so the weight-error properties are stated before it.
WEIGHT_ERROR_DEFAULT = dataclasses.replace(HQQ_DEFAULT, unit_gain=False)


def heavy_tailed(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_t(3, size=shape) * 0.02).astype(np.float32)


def nncf_rtn_group_sse(weight: np.ndarray, group_size: int, num_bits: int) -> np.ndarray:
    """Per-group squared error of NNCF's own RTN parameters, with the scale rounded to f16 as stored in the model."""
    grouped, axis = split_into_groups(Tensor(weight), 1, group_size)
    config = WeightCompressionConfig(
        CompressWeightsMode.INT4_ASYM if num_bits == 4 else CompressWeightsMode.INT8_ASYM, group_size
    )
    scale, zero_point = calculate_integer_quantization_params(grouped, axis, config)
    rtn = to_compressed_weight(grouped, scale, zero_point, num_bits, integer_zero_point=True)
    diff = decompress(rtn).data - grouped.data
    return (diff * diff).sum(axis=axis)


def group_sse(weight: np.ndarray, hqq: HQQ, config: WeightCompressionConfig) -> np.ndarray:
    compressed = hqq.compress(Tensor(weight), 1, config)
    grouped, axis = split_into_groups(Tensor(weight), 1, config.group_size)
    diff = decompress(compressed).data - grouped.data
    return (diff * diff).sum(axis=axis)


def test_conversion_round_trip_and_meaning() -> None:
    inverse_scale = Tensor(np.array([[4.0], [0.5]], dtype=np.float32))
    zero = Tensor(np.array([[7.25], [3.0]], dtype=np.float32))
    scale, zero_point = hqq_to_nncf(inverse_scale, zero)
    np.testing.assert_array_equal(scale.data, [[0.25], [2.0]])
    np.testing.assert_array_equal(zero_point.data, zero.data)
    back_s, back_z = nncf_to_hqq(scale, zero_point)
    np.testing.assert_array_equal(back_s.data, inverse_scale.data)
    np.testing.assert_array_equal(back_z.data, zero.data)
    # Both conventions reconstruct the same weights from the same codes.
    w = Tensor(np.array([[-1.0, 0.0, 1.5], [-4.0, 2.0, 20.0]], dtype=np.float32))
    codes = quantize(w, inverse_scale, zero, 4)
    np.testing.assert_allclose(dequantize(codes, inverse_scale, zero).data, (codes.data - zero_point.data) * scale.data)


def test_compressed_weight_matches_solver_up_to_f16_rounding() -> None:
    weight = heavy_tailed((64, 128))
    grouped, axis = split_into_groups(Tensor(weight), 1, 32)
    s, z = hqq_solve(grouped, axis, 4, PLAIN)
    compressed = HQQ(PLAIN).compress(Tensor(weight), 1, INT4)
    assert compressed.tensor.data.dtype == np.uint8 and compressed.tensor.shape == (64, 4, 32)
    assert compressed.tensor.data.max() <= 15
    assert compressed.zero_point.data.dtype == np.float32
    np.testing.assert_array_equal(compressed.scale.data, compressed.scale.data.astype(np.float16))
    np.testing.assert_array_equal(compressed.zero_point.data, compressed.zero_point.data.astype(np.float16))
    np.testing.assert_allclose(compressed.zero_point.data, z.data, atol=5e-3)
    solver_mae = np.abs(dequantize(quantize(grouped, s, z, 4), s, z).data - grouped.data).mean()
    stored_mae = np.abs(decompress(compressed).data - grouped.data).mean()
    assert stored_mae == pytest.approx(solver_mae, rel=2e-3)


def test_integer_zero_point_output_is_int32_codes() -> None:
    hqq = HQQ(HQQ_REFERENCE.replace(zero_point_format="integer"))
    compressed = hqq.compress(Tensor(heavy_tailed((16, 64))), 1, INT4)
    assert compressed.zero_point.data.dtype == np.int32
    assert compressed.zero_point.data.min() >= 0 and compressed.zero_point.data.max() <= 15


def test_rtn_parameters_equal_nncf() -> None:
    grouped, axis = split_into_groups(Tensor(heavy_tailed((32, 128), seed=2)), 1, 64)
    ours = rtn_scale_zero_point(grouped, axis, 4)
    theirs = calculate_integer_quantization_params(grouped, axis, INT4)
    np.testing.assert_array_equal(ours[0].data, theirs[0].data)
    np.testing.assert_array_equal(ours[1].data, theirs[1].data)


@pytest.mark.parametrize(
    ("num_bits", "group_size", "max_ratio"),
    [(4, 32, 0.95), (4, 128, 0.95), (8, -1, 0.99)],
    ids=["int4-g32", "int4-g128", "int8-per-channel"],
)
def test_hqq_beats_rtn_on_heavy_tailed_weights(num_bits: int, group_size: int, max_ratio: float) -> None:
    weight = heavy_tailed((256, 256), seed=num_bits)
    mode = CompressWeightsMode.INT4_ASYM if num_bits == 4 else CompressWeightsMode.INT8_ASYM
    config = WeightCompressionConfig(mode, group_size)
    hqq = group_sse(weight, HQQ(HQQ_REFERENCE, mode), config).sum()
    rtn = nncf_rtn_group_sse(weight, group_size, num_bits).sum()
    assert hqq < max_ratio * rtn


weights_strategy = hnp.arrays(
    np.float32,
    st.tuples(st.integers(1, 6), st.sampled_from([8, 32])),
    elements=st.floats(-10, 10, width=32) | st.sampled_from([0.0, 1.0, -1.0]),
)


@settings(max_examples=80, deadline=None)
@given(weights_strategy, st.sampled_from([4, 8]))
def test_guarded_hqq_error_never_above_rtn(weight: np.ndarray, num_bits: int) -> None:
    group_size = weight.shape[1] if num_bits == 8 else 8
    mode = CompressWeightsMode.INT4_ASYM if num_bits == 4 else CompressWeightsMode.INT8_ASYM
    config = WeightCompressionConfig(mode, group_size)
    ours = group_sse(weight, HQQ(GUARDED, mode), config)
    rtn = nncf_rtn_group_sse(weight, group_size, num_bits)
    assert np.all(ours <= rtn + 1e-12)


def test_unguarded_hqq_can_lose_to_rtn_on_a_group_that_rtn_represents_exactly() -> None:
    """Guards the property above against passing trivially: without the guard, a group already on RTN's grid
    (which contains 0) but whose minimum is above 0 is represented worse by HQQ's min/max range."""
    weight = np.array([[1, 3, 7, 15, 15, 2, 9, 4]], dtype=np.float32) * 0.125
    config = WeightCompressionConfig(CompressWeightsMode.INT4_ASYM, 8)
    assert nncf_rtn_group_sse(weight, 8, 4)[0] < 1e-12
    assert group_sse(weight, HQQ(PLAIN), config)[0] > 1e-6
    assert group_sse(weight, HQQ(GUARDED), config)[0] < 1e-12


def narrow_weight(kind: str) -> np.ndarray:
    """Weights whose groups are narrower than HQQ's clamp (``MIN_GROUP_RANGE``, 7.5e-4): small weights, a small
    spread far from zero, constant rows."""
    noise = np.random.default_rng(9).standard_normal((32, 256)).astype(np.float32)
    return {
        "t3-std-1e-4": heavy_tailed((32, 256), seed=9) * np.float32(1e-4 / 0.02),
        "t3-std-1e-5": heavy_tailed((32, 256), seed=9) * np.float32(1e-5 / 0.02),
        "offset-0.02-spread-1e-5": np.float32(0.02) + noise * np.float32(1e-5),
        "offset-minus-0.5-spread-1e-4": np.float32(-0.5) + noise * np.float32(1e-4),
        "constant-0.01": np.full((32, 256), 0.01, dtype=np.float32),
    }[kind]


@pytest.mark.parametrize(
    "kind",
    ["t3-std-1e-4", "t3-std-1e-5", "offset-0.02-spread-1e-5", "offset-minus-0.5-spread-1e-4", "constant-0.01"],
)
@pytest.mark.parametrize(("num_bits", "group_size"), [(4, 32), (8, -1)], ids=["int4-g32", "int8-per-channel"])
def test_core_hqq_not_above_rtn_on_narrow_groups(kind: str, num_bits: int, group_size: int) -> None:
    """Without the RTN guard (0001's HQQ), a narrow group is not put on a grid wider than its weights (HQQ's clamp
    made std-1e-5 weights 69x RTN's error) nor on a tiny scale with a large zero point (constant rows 5x)."""
    weight = narrow_weight(kind)
    mode = CompressWeightsMode.INT4_ASYM if num_bits == 4 else CompressWeightsMode.INT8_ASYM
    config = WeightCompressionConfig(mode, group_size)
    ours = group_sse(weight, HQQ(HQQ_CORE, mode), config).sum()
    rtn = nncf_rtn_group_sse(weight, group_size, num_bits).sum()
    assert ours <= rtn * (1 + 1e-6)


@pytest.mark.parametrize("value", [0.0, 1e-30, 1e-8, 3.7, -5.0, 1e4, -6e4], ids=lambda v: f"constant={v:g}")
def test_constant_groups_reconstruct_finitely_and_closely(value: float) -> None:
    weight = np.full((4, 64), value, dtype=np.float32)
    compressed = HQQ(HQQ_DEFAULT).compress(Tensor(weight), 1, INT4)
    restored = decompress(compressed).data
    assert np.isfinite(restored).all()
    np.testing.assert_allclose(restored, value, rtol=2e-3, atol=1e-7)


@pytest.mark.parametrize("magnitude", [1e-12, 1e-4, 1e3, 1e8], ids=lambda m: f"scale={m:g}")
def test_tiny_and_huge_magnitudes_give_finite_results(magnitude: float) -> None:
    weight = heavy_tailed((16, 64), seed=4) * np.float32(magnitude / 0.02)
    compressed = HQQ(HQQ_DEFAULT).compress(Tensor(weight), 1, INT4)
    for part in (compressed.scale, compressed.zero_point, decompress(compressed)):
        assert np.isfinite(part.data).all()


@pytest.mark.parametrize(
    ("mode", "max_ratio"),
    [
        (CompressWeightsMode.INT4_SYM, 0.97),
        (CompressWeightsMode.INT8_SYM, 0.995),
        (CompressWeightsMode.INT3_SYM, 0.97),
        (CompressWeightsMode.INT2_SYM, 0.97),
    ],
    ids=["int4-g64", "int8-per-channel", "int3-g64", "int2-g64"],
)
def test_symmetric_hqq_beats_symmetric_rtn(mode: CompressWeightsMode, max_ratio: float) -> None:
    weight = heavy_tailed((256, 256), seed=7)
    group_size = -1 if mode == CompressWeightsMode.INT8_SYM else 64
    config = WeightCompressionConfig(mode, group_size)
    grouped, axis = split_into_groups(Tensor(weight), 1, group_size)
    rtn = to_symmetric_compressed_weight(grouped, symmetric_init(grouped, axis, config.num_bits), config.num_bits)
    ours = HQQ(WEIGHT_ERROR_DEFAULT, mode).compress(Tensor(weight), 1, config)
    assert ours.zero_point is None and ours.tensor.data.dtype == np.int8
    rtn_error = float(((decompress(rtn).data - grouped.data) ** 2).sum())
    assert float(((decompress(ours).data - grouped.data) ** 2).sum()) < max_ratio * rtn_error


@pytest.mark.parametrize(
    "mode",
    [CompressWeightsMode.INT4_SYM, CompressWeightsMode.INT3_SYM, CompressWeightsMode.INT2_SYM],
    ids=["int4", "int3", "int2"],
)
def test_symmetric_rtn_scale_equals_nncf(mode: CompressWeightsMode) -> None:
    grouped, axis = split_into_groups(Tensor(heavy_tailed((32, 128), seed=8)), 1, 64)
    config = WeightCompressionConfig(mode, 64)
    theirs, _ = calculate_integer_quantization_params(grouped, axis, config)
    np.testing.assert_array_equal(symmetric_init(grouped, axis, config.num_bits).data, theirs.data)


@settings(max_examples=60, deadline=None)
@given(weights_strategy)
def test_guarded_symmetric_hqq_never_above_symmetric_rtn(weight: np.ndarray) -> None:
    config = WeightCompressionConfig(CompressWeightsMode.INT4_SYM, 8)
    grouped, axis = split_into_groups(Tensor(weight), 1, 8)
    rtn = to_symmetric_compressed_weight(grouped, symmetric_init(grouped, axis, 4), 4)
    ours = HQQ(GUARDED, CompressWeightsMode.INT4_SYM).compress(Tensor(weight), 1, config)
    rtn_error = ((decompress(rtn).data - grouped.data) ** 2).sum(axis=axis)
    assert np.all(((decompress(ours).data - grouped.data) ** 2).sum(axis=axis) <= rtn_error + 1e-12)
