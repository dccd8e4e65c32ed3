"""The compiled scale refinement on activations (``nncf_hqq.kernels.activations``) against the numpy reference
(``nncf_hqq.maths.core.refine_scale_on_activations``).

Tolerance: at least 99.5% of the ``(row, group)`` inverse scales agree with the reference's to 1e-5 relative, and
the layer's total output error on the calibration inputs is within 1e-4 relative of the reference's. Why not
exact: OpenVINO sums a group's products over the samples in another order than numpy, so a comparison between two
iterates whose errors agree to ~1e-7 can flip; that group then keeps an equally good scale (measured on a
1536 x 8960 weight with 32 samples, g128: 0.04% of the groups differ, total error ratio 1 + 2e-6).
"""

from __future__ import annotations

import numpy as np
import pytest
from nncf.tensor import Tensor

from nncf_hqq.kernels import activations as kernel
from nncf_hqq.kernels import runtime
from nncf_hqq.maths import core

FACTORS = (1.0, 0.95, 0.9, 0.85)


def layer_case(
    out: int, groups: int, group_size: int, samples: int, seed: int = 0, experts: int = 0
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """A heavy-tailed weight in the canonical layout, NNCF's RTN start (inverse scale, zero) and positive inputs
    with a few large channels."""
    rng = np.random.default_rng(seed)
    lead = (experts,) if experts else ()
    weight = (rng.standard_t(3, size=(*lead, out, groups, group_size)) * 0.02).astype(np.float32)
    low, high = weight.min(-1, keepdims=True), weight.max(-1, keepdims=True)
    inverse_scale = (15.0 / (high - low)).astype(np.float32)
    zero = np.round(-low * inverse_scale).astype(np.float32)
    inputs = np.abs(rng.standard_normal((*lead, groups, group_size, samples))).astype(np.float32)
    inputs[..., rng.integers(0, group_size, 3), :] *= 20.0
    return Tensor(weight), Tensor(inverse_scale), Tensor(zero), Tensor(inputs)


def total_output_error(case: tuple[Tensor, Tensor, Tensor, Tensor], inverse_scale: Tensor) -> float:
    weight, _, zero, inputs = case
    outputs = core.output_projections(weight, inputs)
    error, _ = core.activation_error(outputs, weight, inverse_scale, zero, inputs, 4)
    return float(error.data.sum())


@pytest.mark.parametrize(
    ("out", "groups", "group_size", "samples"),
    [(96, 6, 64, 32), (37, 3, 128, 5), (1, 1, 32, 1), (300, 2, 16, 9)],
    ids=["g64-32-samples", "g128-odd-rows", "one-group", "blocks-with-padding"],
)
@pytest.mark.parametrize("rounds", [0, 1, 4], ids=["no-rounds", "one-round", "four-rounds"])
def test_compiled_matches_reference(out: int, groups: int, group_size: int, samples: int, rounds: int) -> None:
    case = layer_case(out, groups, group_size, samples)
    expected = core.refine_scale_on_activations(*case, 4, rounds, FACTORS)
    got = kernel.refine_compiled(*case, 4, rounds, FACTORS)
    assert got.shape == expected.shape
    relative = np.abs(got.data - expected.data) / np.abs(expected.data)
    assert np.mean(relative <= 1e-5) >= 0.995
    assert total_output_error(case, got) <= total_output_error(case, expected) * (1 + 1e-4)


def test_compiled_never_worse_than_its_start() -> None:
    """The incoming scale is a candidate: the refined error is at most the start's (up to summation order)."""
    case = layer_case(64, 4, 64, 16, seed=3)
    got = kernel.refine_compiled(*case, 4, 4, FACTORS)
    weight, start, zero, inputs = case
    outputs = core.output_projections(weight, inputs)
    refined, _ = core.activation_error(outputs, weight, got, zero, inputs, 4)
    initial, _ = core.activation_error(outputs, weight, start, zero, inputs, 4)
    assert np.all(refined.data <= initial.data * (1 + 1e-5))
    assert float(refined.data.sum()) < float(initial.data.sum())


def test_exact_scale_is_kept() -> None:
    """A weight that lies exactly on a grid (codes 0..15 with the given scale and zero) has zero output error at
    that scale: the refinement keeps it."""
    codes = np.tile(np.arange(16, dtype=np.float32), (8, 2, 2))  # [8, 2, 32]
    inverse_scale = np.full((8, 2, 1), 4.0, dtype=np.float32)
    zero = np.full((8, 2, 1), 7.0, dtype=np.float32)
    weight = (codes - zero) / inverse_scale
    inputs = np.random.default_rng(0).uniform(0.1, 1.0, (2, 32, 6)).astype(np.float32)
    got = kernel.refine_compiled(Tensor(weight), Tensor(inverse_scale), Tensor(zero), Tensor(inputs), 4, 4, FACTORS)
    np.testing.assert_array_equal(got.data, inverse_scale)


def test_experts_take_the_reference() -> None:
    case = layer_case(8, 2, 32, 4, experts=3)
    assert kernel.fallback_reason(*case, 4) is not None
    expected = core.refine_scale_on_activations(*case, 4, 2, FACTORS)
    np.testing.assert_array_equal(kernel.refine_scale_on_activations(*case, 4, 2, FACTORS).data, expected.data)


def test_switch_takes_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runtime.DISABLE_ENV, "1")
    case = layer_case(40, 3, 32, 7, seed=1)
    assert kernel.fallback_reason(*case, 4) is not None
    expected = core.refine_scale_on_activations(*case, 4, 4, FACTORS)
    np.testing.assert_array_equal(kernel.refine_scale_on_activations(*case, 4, 4, FACTORS).data, expected.data)


def test_dispatch_uses_the_compiled_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(runtime.DISABLE_ENV, raising=False)
    case = layer_case(40, 3, 32, 7, seed=2)
    assert kernel.fallback_reason(*case, 4) is None
    calls: list[int] = []
    original = kernel.refine_compiled

    def counted(*args: object) -> Tensor:
        calls.append(1)
        return original(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(kernel, "refine_compiled", counted)
    kernel.refine_scale_on_activations(*case, 4, 4, FACTORS)
    assert calls == [1]


@pytest.mark.parametrize(("group_size", "samples"), [(16, 200), (64, 65)], ids=["many-rows", "one-more-row"])
def test_equivalent_inputs_have_the_same_second_moment(group_size: int, samples: int) -> None:
    *_, inputs = layer_case(4, 3, group_size, samples, seed=2)
    factor = core.equivalent_inputs(inputs).data
    x = inputs.data.astype(np.float64)
    assert factor.shape == (3, group_size, group_size)
    second_moment = x @ np.swapaxes(x, -1, -2)
    np.testing.assert_allclose(factor @ np.swapaxes(factor, -1, -2), second_moment, atol=1e-5 * second_moment.max())


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "compiled"])
def test_refinement_on_equivalent_inputs_is_the_refinement_on_the_rows(compiled: bool) -> None:
    """Same tolerance as the compiled/reference alignment: the sums are the same in another order."""
    weight, inverse_scale, zero, inputs = layer_case(48, 4, 32, 300, seed=3)
    refine = kernel.refine_compiled if compiled else core.refine_scale_on_activations
    on_rows = refine(weight, inverse_scale, zero, inputs, 4, 4, FACTORS)
    on_factor = refine(weight, inverse_scale, zero, core.equivalent_inputs(inputs), 4, 4, FACTORS)
    relative = np.abs(on_factor.data - on_rows.data) / np.abs(on_rows.data)
    assert np.mean(relative <= 1e-5) >= 0.995
    case = (weight, inverse_scale, zero, inputs)
    assert total_output_error(case, on_factor) <= total_output_error(case, on_rows) * (1 + 1e-4)
