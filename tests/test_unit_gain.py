"""Unit gain: every group's scale rescaled so that its reconstruction has unit gain along the weight."""

from __future__ import annotations

import dataclasses

import nncf
import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from nncf import CompressWeightsMode
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
from nncf.tensor import Tensor
from nncf.tensor import TensorDataType

from nncf_hqq._nncf import CompressedWeight
from nncf_hqq.hqq import HQQ
from nncf_hqq.kernels import proximal
from nncf_hqq.kernels import refine
from nncf_hqq.kernels import runtime
from nncf_hqq.maths.core import UNIT_GAIN_LIMITS
from nncf_hqq.maths.core import decompress
from nncf_hqq.maths.core import split_into_groups
from nncf_hqq.maths.core import with_unit_gain
from nncf_hqq.maths.solver import unit_gain_factor
from nncf_hqq.parameters import HQQ_DEFAULT
from nncf_hqq.parameters import AttentionRole
from nncf_hqq.parameters import HQQParameters

WITHOUT = dataclasses.replace(HQQ_DEFAULT, unit_gain=False)
WITH = dataclasses.replace(HQQ_DEFAULT, unit_gain=True)


def heavy_tailed(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_t(3, size=shape) * 0.02).astype(np.float32)


@pytest.mark.parametrize(
    ("reconstruction", "expected"),
    [
        ([0.5, -1.0, 1.5, 2.0], 2.0),  # half the weight: gain 1/2, factor 2
        ([1.25, -2.5, 3.75, 5.0], 0.8),  # 1.25 times the weight
        ([1.0, -2.0, 3.0, 4.0], 1.0),  # exact
        ([0.0, 0.0, 0.0, 0.0], 1.0),  # nothing to match
        ([-1.0, 2.0, -3.0, -4.0], 1.0),  # anti-aligned: <W_hat, W> < 0
        ([0.01, -0.02, 0.03, 0.04], UNIT_GAIN_LIMITS[1]),  # 100x: clipped
    ],
    ids=["half", "too-large", "exact", "zero", "anti-aligned", "clipped"],
)
def test_unit_gain_factor_analytical(reconstruction: list[float], expected: float) -> None:
    weight = Tensor(np.array([[1.0, -2.0, 3.0, 4.0]], dtype=np.float32))
    factor = unit_gain_factor(weight, Tensor(np.array([reconstruction], dtype=np.float32)), 1)
    np.testing.assert_allclose(factor.data, [[expected]], rtol=1e-6)


def test_least_squares_fit_is_attenuated_by_its_relative_error() -> None:
    """For a least-squares fit ``W_hat = a q`` the error is orthogonal to ``W_hat``, so the factor is
    ``||W||^2 / ||W_hat||^2 = 1 + ||r||^2 / ||W_hat||^2``."""
    rng = np.random.default_rng(1)
    weight = rng.normal(size=(3, 16)).astype(np.float64)
    codes = np.round(weight * 2.0)
    a = (codes * weight).sum(axis=1, keepdims=True) / (codes * codes).sum(axis=1, keepdims=True)
    fit = a * codes
    residual = weight - fit
    expected = 1.0 + (residual**2).sum(axis=1, keepdims=True) / (fit**2).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(unit_gain_factor(Tensor(weight), Tensor(fit), 1).data, expected, rtol=1e-12)
    assert np.all(expected > 1.0)


@pytest.mark.parametrize(
    ("mode", "attenuation"),
    [(CompressWeightsMode.INT4_ASYM, 1e-4), (CompressWeightsMode.INT8_ASYM, 0.0), (CompressWeightsMode.INT4_SYM, 1e-4)],
    ids=lambda v: v.name if isinstance(v, CompressWeightsMode) else "",
)
def test_unit_gain_keeps_codes_and_zero_points_and_matches_the_gain(
    mode: CompressWeightsMode, attenuation: float
) -> None:
    weight = heavy_tailed((32, 128))
    config = WeightCompressionConfig(mode, group_size=32)
    plain = HQQ(WITHOUT, mode).compress(Tensor(weight), 1, config)
    gained = HQQ(WITH, mode).compress(Tensor(weight), 1, config)
    np.testing.assert_array_equal(gained.tensor.data, plain.tensor.data)
    if plain.zero_point is not None:
        np.testing.assert_array_equal(gained.zero_point.data, plain.zero_point.data)
    assert np.all(np.sign(gained.scale.data) == np.sign(plain.scale.data))
    grouped, axis = split_into_groups(Tensor(weight), 1, 32)
    w = grouped.data.astype(np.float64)
    before = (decompress(plain).data * w).sum(axis=axis) / (w * w).sum(axis=axis)
    after = (decompress(gained).data * w).sum(axis=axis) / (w * w).sum(axis=axis)
    assert np.median(before) < 1.0 - attenuation  # the refined 4-bit reconstruction is attenuated...
    np.testing.assert_allclose(after, 1.0, atol=1e-3)  # ...and has unit gain up to the f16 scale
    assert np.abs(after - 1.0).max() < np.abs(before - 1.0).max()


def test_unit_gain_leaves_rtn_role_weights_alone() -> None:
    weight = heavy_tailed((16, 64))
    config = WeightCompressionConfig(CompressWeightsMode.INT4_ASYM, group_size=32)
    plain = HQQ(WITHOUT).compress(Tensor(weight), 1, config, role=AttentionRole.VALUE)
    gained = HQQ(WITH).compress(Tensor(weight), 1, config, role=AttentionRole.VALUE)
    np.testing.assert_array_equal(gained.tensor.data, plain.tensor.data)
    np.testing.assert_array_equal(gained.scale.data, plain.scale.data)
    np.testing.assert_array_equal(gained.zero_point.data, plain.zero_point.data)


@settings(max_examples=40, deadline=None)
@given(
    hnp.arrays(
        np.float32,
        st.tuples(st.integers(1, 4), st.sampled_from([8, 16])),
        elements=st.floats(-10, 10, width=32) | st.sampled_from([0.0, 1.0, -1.0]),
    )
)
def test_unit_gain_is_finite_and_bounded(weight: np.ndarray) -> None:
    grouped, axis = split_into_groups(Tensor(weight), 1, 8)
    config = WeightCompressionConfig(CompressWeightsMode.INT4_ASYM, group_size=8)
    plain = HQQ(WITHOUT).compress(Tensor(weight), 1, config)
    gained = with_unit_gain(grouped, plain, axis)
    assert np.all(np.isfinite(gained.scale.data)) and np.all(gained.scale.data > 0.0)
    ratio = gained.scale.data / plain.scale.data
    assert np.all(ratio >= UNIT_GAIN_LIMITS[0] * 0.999) and np.all(ratio <= UNIT_GAIN_LIMITS[1] * 1.001)


def test_unit_gain_must_be_a_bool() -> None:
    with pytest.raises(nncf.ValidationError, match="unit_gain"):
        HQQParameters(unit_gain="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("shape", "axis", "group_size", "mode"),
    [
        ((96, 256), 1, 64, CompressWeightsMode.INT4_ASYM),
        ((256, 72), 0, 32, CompressWeightsMode.INT4_ASYM),
        ((3, 40, 128), 2, 32, CompressWeightsMode.INT4_ASYM),
        ((77, 128), 1, -1, CompressWeightsMode.INT8_ASYM),
        ((50, 192), 1, 64, CompressWeightsMode.INT4_SYM),
    ],
    ids=["2d-axis1", "2d-axis0", "3d-moe", "int8-per-channel-odd-rows", "int4-sym"],
)
def test_compiled_unit_gain_matches_the_reference(
    shape: tuple[int, ...], axis: int, group_size: int, mode: CompressWeightsMode
) -> None:
    """Stated tolerance: the per-group sums are f32 in both (summed in a different order), so a scale may differ
    by one f16 step (relative 2^-10) where the product lands next to a rounding boundary: at most 1% of groups."""
    weight = heavy_tailed(shape, seed=3)
    config = WeightCompressionConfig(mode, group_size=group_size)
    plain = HQQ(WITHOUT, mode).compress(Tensor(weight), axis, config)
    grouped, grouped_axis = split_into_groups(Tensor(weight), axis, group_size)
    compiled = refine.with_unit_gain_compiled(grouped, plain, grouped_axis)
    reference = with_unit_gain(grouped, plain, grouped_axis)
    assert compiled.scale.shape == reference.scale.shape
    ratio = compiled.scale.data / reference.scale.data
    assert np.abs(ratio - 1.0).max() <= 2.0**-10 + 1e-7
    assert np.mean(ratio != 1.0) <= 0.01
    assert not np.array_equal(reference.scale.data, plain.scale.data)  # the gain did act


FUSED_CASES = [
    pytest.param((96, 256), 1, 64, 4, WITH, id="int4-g64-default"),
    pytest.param((256, 72), 0, 32, 4, WITH, id="int4-axis0"),
    pytest.param((3, 40, 128), 2, 32, 4, WITH, id="3d-moe"),
    pytest.param((77, 128), 1, -1, 8, WITH, id="int8-per-channel-odd-rows"),
    pytest.param((96, 256), 1, 64, 4, dataclasses.replace(WITH, zero_point_format="integer"), id="integer-zp"),
    pytest.param((96, 256), 1, 64, 4, dataclasses.replace(WITH, rtn_guard=False), id="no-guard-separate-pass"),
]


@pytest.mark.parametrize(("shape", "axis", "group_size", "bits", "params"), FUSED_CASES)
def test_unit_gain_fused_into_the_guard_matches_the_reference(
    shape: tuple[int, ...], axis: int, group_size: int, bits: int, params: HQQParameters
) -> None:
    """The compiled ``finish`` takes the unit-gain sums from the RTN guard's pass: the codes and zero points of the
    compiled ``finish`` without the gain, and scales within the tolerance of
    ``test_compiled_unit_gain_matches_the_reference`` (one f16 step, in at most 1% of groups) of the numpy
    reference ``core.with_unit_gain`` applied to that result. The reference ``finish`` with ``unit_gain``
    is that reference after its own refinement and guard."""
    grouped, grouped_axis = split_into_groups(Tensor(heavy_tailed(shape, seed=4)), axis, group_size)
    inverse_scale, zero = proximal.solve(grouped, grouped_axis, bits, params)
    run = (grouped, inverse_scale, zero, grouped_axis, bits, params)
    fused = refine.finish_compiled(*run, unit_gain=True)
    without = refine.finish_compiled(*run)
    reference = with_unit_gain(grouped, without, grouped_axis)
    np.testing.assert_array_equal(fused.tensor.data, without.tensor.data)
    np.testing.assert_array_equal(fused.zero_point.data, without.zero_point.data)
    assert fused.zero_point.data.dtype == without.zero_point.data.dtype
    reference_finish = refine.finish_reference(*run, unit_gain=True)
    np.testing.assert_array_equal(
        reference_finish.scale.data,
        with_unit_gain(grouped, refine.finish_reference(*run), grouped_axis).scale.data,
    )
    ratio = fused.scale.data / reference.scale.data
    assert np.abs(ratio - 1.0).max() <= 2.0**-10 + 1e-7
    assert np.mean(ratio != 1.0) <= 0.01
    assert not np.array_equal(fused.scale.data, without.scale.data)  # the gain did act


def test_unit_gain_dispatch_and_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    weight = Tensor(heavy_tailed((8, 64)))
    grouped, axis = split_into_groups(weight, 1, 32)
    plain = HQQ(WITHOUT).compress(weight, 1, WeightCompressionConfig(CompressWeightsMode.INT4_ASYM, 32))
    taken: list[str] = []
    monkeypatch.setattr(refine, "with_unit_gain_compiled", lambda *a: taken.append("compiled") or plain)
    monkeypatch.setattr(refine, "with_unit_gain_reference", lambda *a: taken.append("reference") or plain)
    refine.with_unit_gain(grouped, plain, axis)
    monkeypatch.setenv(runtime.DISABLE_ENV, "1")
    refine.with_unit_gain(grouped, plain, axis)
    monkeypatch.delenv(runtime.DISABLE_ENV)
    float_codes = CompressedWeight(plain.tensor.astype(TensorDataType.float32), plain.scale, plain.zero_point)
    refine.with_unit_gain(grouped, float_codes, axis)
    assert taken == ["compiled", "reference", "reference"]


@pytest.mark.parametrize(
    ("mode", "acts"),
    [(CompressWeightsMode.INT3_SYM, True), (CompressWeightsMode.INT2_SYM, False)],
    ids=["int3", "int2"],
)
def test_unit_gain_acts_from_three_bits(mode: CompressWeightsMode, acts: bool) -> None:
    weight = Tensor(heavy_tailed((16, 128)))
    config = WeightCompressionConfig(mode, group_size=64)
    plain, gained = (HQQ(p, mode).compress(weight, 1, config) for p in (WITHOUT, WITH))
    np.testing.assert_array_equal(gained.tensor.data, plain.tensor.data)
    assert np.array_equal(gained.scale.data, plain.scale.data) != acts
