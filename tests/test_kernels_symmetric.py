"""The compiled symmetric HQQ path: agreement with its numpy reference and the dispatch around it.

Tolerance (``assert_matches_reference``): the stored (f16) scales of at most 1% of the groups (at least 2 groups
are allowed) differ from the reference's; the stored mean squared error of the whole weight is within 1e-5
relative of the reference's and no group's error exceeds the reference's by more than 1e-3 relative; the codes are
exactly the nearest codes of the returned scales. Why not exact: the compiled means of ``q * W`` and ``q * q`` sum
in another order than numpy's, so a scale can differ in its last f32 bits, which changes a code only for an
element on a rounding tie (or flips an early-stop comparison of two errors equal to ~1e-7); such a group follows
an equally good trajectory. Measured on 4096x4096 Student-t weights: 1e-4 of the groups differ, whole error
ratio 1.0000000.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from nncf.tensor import Tensor

from nncf_hqq.kernels import refine
from nncf_hqq.kernels import runtime
from nncf_hqq.kernels import symmetric
from nncf_hqq.maths.conversion import to_symmetric_compressed_weight
from nncf_hqq.maths.core import decompress
from nncf_hqq.maths.core import split_into_groups
from nncf_hqq.maths.grids import symmetric_init
from nncf_hqq.maths.integer import symmetric_codes
from nncf_hqq.parameters import HQQ_DEFAULT
from nncf_hqq.parameters import HQQ_REFERENCE
from nncf_hqq.parameters import HQQParameters
from tests.test_kernels_proximal import group_counts
from tests.test_kernels_proximal import heavy_tailed

PARAMS = {
    "default": HQQ_DEFAULT,
    "default-with-shrinkage": dataclasses.replace(HQQ_DEFAULT, shrinkage=True),
    "published": HQQ_REFERENCE,
    "group-stop-p1-guard": HQQ_REFERENCE.replace(
        early_stop_scope="group", lp_norm=1.0, refine_rounds=3, rtn_guard=True
    ),
    "no-early-stop-40-iterations": HQQ_REFERENCE.replace(early_stop=False, iterations=40, preserve_extremes=True),
    "norm-gain-2-rounds": HQQ_REFERENCE.replace(importance="norm_gain", refine_rounds=2, preserve_extremes=True),
}


def grouped_importance(grouped: Tensor, axis: int, seed: int) -> Tensor:
    """Per-input-channel importance in the grouped layout (varies along the group axes, 1 elsewhere)."""
    shape = [1] * grouped.ndim
    shape[axis] = grouped.shape[axis]
    if grouped.ndim > 2 and axis >= 1:
        shape[axis - 1] = grouped.shape[axis - 1]
    rng = np.random.default_rng(seed)
    return Tensor((np.abs(rng.normal(size=shape)) + 0.3).astype(np.float32))


def stored_group_mse(grouped: Tensor, compressed: Any, axis: int) -> np.ndarray:
    diff = decompress(compressed).data - grouped.data
    return (diff * diff).mean(axis=axis)


def assert_matches_reference(
    weight: np.ndarray, group_size: int, bits: int, params: HQQParameters, weighted: bool
) -> None:
    grouped, axis = split_into_groups(Tensor(weight), weight.ndim - 1, group_size)
    importance = grouped_importance(grouped, axis, seed=5) if weighted else None
    reference = symmetric.compress_reference(grouped, axis, bits, params, importance)
    compiled = symmetric.compress_compiled(grouped, axis, bits, params, importance)
    assert compiled.zero_point is None
    assert compiled.tensor.data.dtype == np.int8 and compiled.tensor.shape == reference.tensor.shape
    assert compiled.scale.shape == reference.scale.shape
    differing = int(np.count_nonzero(compiled.scale.data != reference.scale.data))
    assert differing <= max(2, 0.01 * compiled.scale.size), f"{differing} of {compiled.scale.size} scales differ"
    np.testing.assert_array_equal(compiled.tensor.data, symmetric_codes(grouped, compiled.scale, bits).data)
    ours, theirs = stored_group_mse(grouped, compiled, axis), stored_group_mse(grouped, reference, axis)
    assert ours.mean() <= theirs.mean() * (1.0 + 1e-5)
    assert (ours <= theirs * (1.0 + 1e-3) + 1e-12).all()


@pytest.mark.parametrize("params", PARAMS.values(), ids=PARAMS.keys())
@pytest.mark.parametrize(
    ("shape", "group_size", "bits"),
    [
        ((256, 512), 128, 4),
        ((96, 320), 64, 4),
        ((40, 200), 40, 3),
        ((3, 48, 256), 64, 4),
        ((64, 256), 64, 8),
        ((64, 192), -1, 4),
        ((64, 128), 32, 2),
    ],
    ids=["g128-int4", "g64-int4", "odd-g40-int3", "moe-g64-int4", "g64-int8", "per-channel-int4", "g32-int2"],
)
def test_compiled_matches_reference(shape: tuple[int, ...], group_size: int, bits: int, params: HQQParameters) -> None:
    assert_matches_reference(heavy_tailed(shape, seed=3), group_size, bits, params, weighted=True)


@pytest.mark.parametrize("params", [HQQ_DEFAULT, HQQ_REFERENCE], ids=["default", "published"])
def test_compiled_matches_reference_without_importance(params: HQQParameters) -> None:
    assert_matches_reference(heavy_tailed((128, 512), seed=4), 64, 4, params, weighted=False)


def test_compiled_differs_from_rtn() -> None:
    """The loop really runs: most scales move away from NNCF's RTN scale, and the weight error drops."""
    grouped, axis = split_into_groups(Tensor(heavy_tailed((128, 512), seed=6)), 1, 64)
    compiled = symmetric.compress_compiled(grouped, axis, 4, HQQ_REFERENCE)
    rtn = to_symmetric_compressed_weight(grouped, symmetric_init(grouped, axis, 4), 4)
    assert np.mean(compiled.scale.data != rtn.scale.data) > 0.5
    assert stored_group_mse(grouped, compiled, axis).mean() < 0.95 * stored_group_mse(grouped, rtn, axis).mean()


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "importance-weighted"])
@pytest.mark.parametrize(
    ("shape", "group_size"), [((256, 512), 128), ((40, 200), 40), ((3, 48, 256), 64)], ids=["g128", "odd-g40", "moe"]
)
def test_settling_sweep_equals_the_full_sweep(shape: tuple[int, ...], group_size: int, weighted: bool) -> None:
    """Dropping groups whose scale repeats changes nothing: bit-identical to 20 unrolled iterations on all groups."""
    grouped, axis = split_into_groups(Tensor(heavy_tailed(shape)), len(shape) - 1, group_size)
    rows = runtime.as_rows(grouped.data, axis)
    keepdims = (*grouped.shape[:axis], 1, *grouped.shape[axis + 1 :])
    importance = None
    if weighted:
        importance = refine.RowImportance.of(grouped_importance(grouped, axis, 1).data, keepdims, axis)
    extremes = symmetric.row_extremes(rows)
    scale = symmetric_init(Tensor(rows), 1, 4).data[:, 0]
    floor = np.zeros_like(scale)
    run = symmetric._ScaleRun(rows, extremes[:2], floor, 4, HQQ_REFERENCE, importance)
    block = runtime.rows_per_block(rows.shape[1])
    if importance is not None:
        block = importance.block_rows(block)
    sweep = symmetric.compiled_scale_sweep(block, rows.shape[1], 20, 4, weighted)
    full = sweep.run(rows, scale, floor, importance)
    repeats = full[0][4] == full[0][3]
    assert repeats.any() and not repeats.all()  # some groups leave after the first chunk, some stay
    settled = run.trajectories(scale, run.betas)
    for got, expected in zip(settled, full, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_groups_where_shrinkage_may_act_take_the_reference_operations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows scaled far up have half-steps beyond the shrinkage-free bound: exactly those are recomputed."""
    redone = group_counts(monkeypatch, symmetric._ScaleRun, "reference_trajectories")
    weight = heavy_tailed((64, 128), seed=2)
    weight[:5] *= 500.0  # 5 rows of 4 groups of 32 with steps of ~1
    assert_matches_reference(weight, 32, 4, dataclasses.replace(HQQ_DEFAULT, shrinkage=True), weighted=True)
    assert redone and redone[0] == 20
    redone.clear()
    assert_matches_reference(weight, 32, 4, HQQ_DEFAULT, weighted=True)  # the default leaves the shrinkage out
    assert redone == []


def test_dispatch_and_environment_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    for name in ("compress_compiled", "compress_reference"):
        original = getattr(symmetric, name)

        def spy(*args: Any, _f: Any = original, _n: str = name) -> Any:
            calls.append(_n)
            return _f(*args)

        monkeypatch.setattr(symmetric, name, spy)
    grouped, axis = split_into_groups(Tensor(heavy_tailed((32, 128))), 1, 32)
    monkeypatch.delenv(runtime.DISABLE_ENV, raising=False)
    symmetric.compress(grouped, axis, 4, HQQ_DEFAULT)
    assert calls == ["compress_compiled"]
    calls.clear()
    monkeypatch.setenv(runtime.DISABLE_ENV, "1")
    symmetric.compress(grouped, axis, 4, HQQ_DEFAULT)
    assert calls == ["compress_reference"]


def test_non_finite_weights_take_the_reference() -> None:
    weight = heavy_tailed((16, 64))
    weight[3, 5] = np.nan
    grouped, axis = split_into_groups(Tensor(weight), 1, 32)
    compiled = symmetric.compress_compiled(grouped, axis, 4, HQQ_DEFAULT)
    reference = symmetric.compress_reference(grouped, axis, 4, HQQ_DEFAULT)
    np.testing.assert_array_equal(compiled.scale.data, reference.scale.data)


def test_constant_and_zero_groups_stay_finite() -> None:
    weight = heavy_tailed((8, 128))
    weight[0] = 0.0
    weight[1] = 0.3
    weight[2, :64] = -0.01
    grouped, axis = split_into_groups(Tensor(weight), 1, 64)
    compiled = symmetric.compress_compiled(grouped, axis, 4, HQQ_DEFAULT)
    assert np.isfinite(compiled.scale.data).all()
    np.testing.assert_allclose(decompress(compiled).data[1], 0.3, rtol=1e-3)
    assert_matches_reference(weight, 64, 4, HQQ_DEFAULT, weighted=False)
