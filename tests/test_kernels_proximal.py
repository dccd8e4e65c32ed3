"""The compiled fast path of the HQQ solver: agreement with ``solver.hqq_solve`` and the dispatch around it.

Tolerance (see ``assert_matches_reference``):

* the inverse scale is bit-identical: both paths compute it with ``core.min_max_init_for_range`` from the
  same (exact) minima and maxima;
* zero points: at most 1% of the groups (5% with the per-group early stop; at least 2 groups are allowed)
  differ by more than 1e-4 relative (``|dz| > 1e-4 * max(1, |z|)``); the others agree to a few f32 ulps;
* the mean absolute reconstruction error of the whole weight is within 1e-5 relative of the reference's, and
  no group's own error exceeds the reference's by more than 1e-3 relative.

Why not exact: the fast path sums a group's rounding residuals in the scaled domain (``W * s + z - codes``) in
a different order than numpy's ``mean(codes - W * s)``. The zero points then differ by a few ulps, which
changes a code only for an element that sits exactly on a rounding tie, or flips an early-stop comparison
between two errors that agree to ~1e-7 relative. The affected group then follows an equally valid HQQ
trajectory (its error is the same to the 1e-5 asserted on the whole weight), but its zero point can differ
by up to ~1/group_size. Such ties are rare per element, so they show up in a small fraction of groups, more
often with the per-group early stop, whose many comparisons each can flip.

Groups where the lp shrinkage may act run through a second compiled sweep in the reference's order; its
``exp(log)`` form of the power and its means round differently from numpy's (~2e-6 apart after one iteration),
and where the shrinkage acts strongly (p = 0.5, beta = 2e4) one group in 512 left the reference's trajectory
(0.3% worse, whole-weight error 4e-6 relative; 2% / 3.4e-5 with OpenVINO's ``Power``). For that case
(``strong_shrinkage``): whole-weight error within 1e-4, at most 1% of the groups (at least one) more than 1e-3
worse, none more than 5% worse.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Any

import nncf
import numpy as np
import openvino as ov
import pytest
from nncf.tensor import Tensor

from nncf_hqq.kernels import proximal
from nncf_hqq.kernels import refine
from nncf_hqq.kernels import runtime
from nncf_hqq.maths import solver
from nncf_hqq.maths.core import dequantize
from nncf_hqq.maths.core import quantize
from nncf_hqq.maths.core import split_into_groups
from nncf_hqq.maths.solver import hqq_solve
from nncf_hqq.parameters import HQQ_DEFAULT
from nncf_hqq.parameters import HQQ_REFERENCE
from nncf_hqq.parameters import EarlyStopScope
from nncf_hqq.parameters import HQQParameters
from nncf_hqq.parameters import ZeroPointFormat
from tests import ov_models

#: The ``HQQParameters`` fields the fast path models itself (all others must not be read by the solver).
MODELLED_FIELDS = {
    "lp_norm",
    "beta",
    "kappa",
    "shrinkage",
    "iterations",
    "early_stop",
    "early_stop_scope",
    "return_best",
}


def heavy_tailed(shape: tuple[int, ...], seed: int = 0, scale: float = 0.02) -> np.ndarray:
    return (np.random.default_rng(seed).standard_t(3, size=shape) * scale).astype(np.float32)


def assert_matches_reference(
    weight: np.ndarray,
    reduction_axis: int,
    group_size: int,
    bits: int,
    params: HQQParameters,
    strong_shrinkage: bool = False,
) -> None:
    grouped, axis = split_into_groups(Tensor(weight), reduction_axis, group_size)
    s_ref, z_ref = hqq_solve(grouped, axis, bits, params)
    s_fast, z_fast = proximal.solve_compiled(grouped, axis, bits, params)
    assert s_fast.data.dtype == z_fast.data.dtype == np.float32
    assert z_fast.shape == z_ref.shape
    np.testing.assert_array_equal(s_fast.data, s_ref.data)
    relative = np.abs(z_fast.data - z_ref.data) / np.maximum(1.0, np.abs(z_ref.data))
    differing = int(np.count_nonzero(relative > 1e-4))
    share = 0.05 if params.early_stop_scope == EarlyStopScope.GROUP else 0.01
    assert differing <= max(2, share * relative.size), f"{differing} of {relative.size} zero points differ"

    def group_mae(zero: Tensor) -> np.ndarray:
        codes = quantize(grouped, s_ref, zero, bits)
        return np.mean(np.abs(dequantize(codes, s_ref, zero).data - grouped.data), axis=axis)

    mae_fast, mae_ref = group_mae(z_fast), group_mae(z_ref)
    if not strong_shrinkage:
        assert mae_fast.mean() == pytest.approx(mae_ref.mean(), rel=1e-5)
        assert np.all(mae_fast <= mae_ref * (1 + 1e-3) + 1e-12), "a group is materially worse than the reference"
        return
    # see the module doc: where the lp shrinkage acts strongly a group can leave the reference's trajectory
    assert mae_fast.mean() == pytest.approx(mae_ref.mean(), rel=1e-4)
    worse = int(np.count_nonzero(mae_fast > mae_ref * (1 + 1e-3) + 1e-12))
    assert worse <= max(1, 0.01 * mae_ref.size), f"{worse} groups materially worse than the reference"
    assert np.all(mae_fast <= mae_ref * 1.05 + 1e-12)


SHAPE_CASES = [
    pytest.param((256, 512), 1, 128, 4, id="2d-g128-int4"),
    pytest.param((256, 512), 1, 64, 4, id="2d-g64-int4"),
    pytest.param((256, 512), 1, 128, 8, id="2d-g128-int8"),
    pytest.param((192, 320), 1, 64, 8, id="2d-g64-int8"),
    pytest.param((96, 200), 1, -1, 4, id="2d-per-channel-int4"),
    pytest.param((96, 200), 1, -1, 8, id="2d-per-channel-int8"),
    pytest.param((4, 96, 256), 2, 64, 4, id="3d-experts-g64-int4"),
    pytest.param((3, 40, 96), 2, -1, 8, id="3d-experts-per-channel-int8"),
    pytest.param((37, 96), 1, 32, 4, id="odd-rows-g32"),
    pytest.param((17, 75), 1, -1, 4, id="odd-per-channel"),
    pytest.param((512, 96), 0, 128, 4, id="transposed-axis0-g128"),
    pytest.param((6, 64, 10), 1, 16, 4, id="3d-middle-axis-g16"),
]


@pytest.mark.parametrize(("shape", "reduction_axis", "group_size", "bits"), SHAPE_CASES)
def test_matches_reference_default_parameters(
    shape: tuple[int, ...], reduction_axis: int, group_size: int, bits: int
) -> None:
    assert_matches_reference(heavy_tailed(shape), reduction_axis, group_size, bits, HQQ_DEFAULT)


STRONG_SHRINKAGE = "p0.5-active-shrinkage"
#: The default with the published lp shrinkage (``HQQ_DEFAULT`` leaves it out).
SHRINKING_DEFAULT = dataclasses.replace(HQQ_DEFAULT, shrinkage=True)
PARAMETER_CASES = [
    pytest.param(HQQ_REFERENCE, id="published-last-iterate"),
    pytest.param(HQQ_REFERENCE.replace(early_stop_scope=EarlyStopScope.GROUP), id="group-early-stop"),
    pytest.param(
        HQQ_REFERENCE.replace(early_stop_scope=EarlyStopScope.GROUP, return_best=False), id="group-last-iterate"
    ),
    pytest.param(HQQ_REFERENCE.replace(early_stop=False), id="no-early-stop"),
    pytest.param(HQQ_REFERENCE.replace(early_stop=False, return_best=False, iterations=7), id="7-iterations"),
    pytest.param(HQQ_REFERENCE.replace(iterations=45, kappa=1.05), id="45-iterations-in-3-blocks"),
    pytest.param(HQQ_REFERENCE.replace(iterations=0), id="no-iterations"),
    pytest.param(HQQ_REFERENCE.replace(lp_norm=1.0), id="p1"),
    pytest.param(HQQ_REFERENCE.replace(lp_norm=1.0, beta=300.0, early_stop=False), id="p1-active-soft-threshold"),
    pytest.param(HQQ_REFERENCE.replace(lp_norm=0.5, beta=2.0e4, kappa=1.2), id=STRONG_SHRINKAGE),
    pytest.param(HQQ_REFERENCE.replace(lp_norm=0.5, beta=2.0e4, kappa=1.2, shrinkage=False), id="p0.5-shrinkage-off"),
    pytest.param(HQQ_REFERENCE.replace(lp_norm=1.0, beta=300.0, shrinkage=False), id="p1-shrinkage-off"),
    pytest.param(
        HQQ_REFERENCE.replace(zero_point_format=ZeroPointFormat.INTEGER, rtn_guard=True, refine_rounds=2),
        id="post-solver-options",
    ),
]


@pytest.mark.parametrize("params", PARAMETER_CASES)
@pytest.mark.parametrize("bits", [4, 8], ids=["int4", "int8"])
def test_matches_reference_parameters(params: HQQParameters, bits: int, request: pytest.FixtureRequest) -> None:
    strong = STRONG_SHRINKAGE in request.node.callspec.id
    assert_matches_reference(heavy_tailed((128, 256), seed=1), 1, 64, bits, params, strong_shrinkage=strong)


#: The two ways ``_ProximalRun`` recomputes groups where the lp shrinkage may act.
SWEEPS = ("shrinking", "reference")


def group_counts(monkeypatch: pytest.MonkeyPatch, cls: type, method: str) -> list[int]:
    """Spies on ``cls.method(self, groups, start, betas)``: the number of groups of every call, in order."""
    counts: list[int] = []
    original = getattr(cls, method)

    def spy(self: Any, groups: np.ndarray, start: np.ndarray, betas: list[float]) -> Any:
        counts.append(groups.size)
        return original(self, groups, start, betas)

    monkeypatch.setattr(cls, method, spy)
    return counts


@pytest.mark.parametrize(("wide_rows", "compiled"), [(8, False), (40, True)], ids=["few-groups-numpy", "compiled"])
def test_groups_where_shrinkage_acts_take_the_shrinking_sweep(
    monkeypatch: pytest.MonkeyPatch, wide_rows: int, compiled: bool
) -> None:
    """Wide groups (small inverse scale) fall outside the shrinkage-free bound and are recomputed with the lp
    shrinkage: compiled, or with the reference's operations when they are few."""
    calls = {name: group_counts(monkeypatch, proximal._ProximalRun, f"{name}_trajectories") for name in SWEEPS}
    weight = heavy_tailed((64, 128), seed=2)
    weight[:wide_rows] *= 2000.0  # rows of groups with a range of ~100
    assert_matches_reference(weight, 1, 32, 4, SHRINKING_DEFAULT)
    assert calls["shrinking"] and 0 < calls["shrinking"][0] < weight.size // 32
    assert (calls["shrinking"][0] > proximal.FEW_GROUPS) == compiled
    assert bool(calls["reference"]) != compiled


def test_default_keeps_scaled_weights_on_the_hard_rounding_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    """Weights scaled far up (as AWQ scales channels) need the shrinking sweep in the published loop; without
    the shrinkage every group takes the settling hard-rounding sweep, and the result still equals the reference."""
    calls = group_counts(monkeypatch, proximal._ProximalRun, "shrinking_trajectories")
    weight = heavy_tailed((64, 128), seed=2)
    weight[:40] *= 2000.0
    assert_matches_reference(weight, 1, 32, 4, HQQ_DEFAULT)
    assert calls == []
    assert_matches_reference(weight, 1, 32, 4, SHRINKING_DEFAULT)
    assert calls


def test_constant_and_zero_groups() -> None:
    weight = heavy_tailed((16, 64), seed=3)
    weight[0] = 0.0
    weight[1] = 0.25
    weight[2, :32] = -3.0
    weight[3] = 0.02 + heavy_tailed((64,), seed=5) * np.float32(1e-3)  # narrower than MIN_GROUP_RANGE, off zero
    weight[4] = heavy_tailed((64,), seed=6) * np.float32(1e-3)  # narrow around zero
    assert_matches_reference(weight, 1, 32, 4, HQQ_DEFAULT)


@pytest.mark.parametrize("dtype", [np.float16, np.float64], ids=["f16", "f64"])
def test_other_float_dtypes(dtype: type[np.floating]) -> None:
    weight = heavy_tailed((64, 256), seed=4).astype(dtype)
    assert_matches_reference(weight, 1, 64, 4, HQQ_DEFAULT)


def test_read_only_weights_are_handled() -> None:
    """NNCF can hand over a read-only view of a model constant: the kernels share it with OpenVINO as it is."""
    weight = heavy_tailed((512, 1024), seed=6)  # several blocks
    weight.setflags(write=False)
    assert_matches_reference(weight, 1, 128, 4, HQQ_DEFAULT)
    grouped, axis = split_into_groups(Tensor(weight), 1, 128)
    inverse_scale, zero = proximal.solve_compiled(grouped, axis, 4, HQQ_DEFAULT)
    finished = refine.finish_compiled(grouped, inverse_scale, zero, axis, 4, HQQ_DEFAULT, None, True)
    assert np.isfinite(finished.scale.data).all()


def test_openvino_tensor_input_gives_the_numpy_result() -> None:
    weight = heavy_tailed((64, 256), seed=5)
    grouped, axis = split_into_groups(Tensor(weight), 1, 128)
    ov_grouped = Tensor(ov.Tensor(np.ascontiguousarray(grouped.data)))
    s_np, z_np = proximal.solve(grouped, axis, 4, HQQ_DEFAULT)
    s_ov, z_ov = proximal.solve(ov_grouped, axis, 4, HQQ_DEFAULT)
    np.testing.assert_array_equal(s_ov.data, s_np.data)
    np.testing.assert_array_equal(z_ov.data, z_np.data)


@pytest.mark.parametrize("p", [0.3, 0.7, 0.99, 1.0])
@pytest.mark.parametrize("beta", [0.5, 10.0, 1.0e4])
def test_shrink_free_bound(p: float, beta: float) -> None:
    bound = solver.shrink_free_bound(beta, p)
    x = np.array([bound * 0.999, bound * 1.001])
    shrunk = solver.shrink_lp(Tensor(x), beta, p).data
    assert shrunk[0] == 0.0
    assert shrunk[1] != 0.0


# ---------------------------------------------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def fast_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    """Records the calls of the compiled path (and still runs it); clears the environment switch."""
    monkeypatch.delenv(runtime.DISABLE_ENV, raising=False)
    calls: list[tuple[object, ...]] = []
    original = proximal.solve_compiled

    def spy(*args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(proximal, "solve_compiled", spy)
    return calls


def grouped_weight() -> tuple[Tensor, int]:
    return split_into_groups(Tensor(heavy_tailed((32, 128), seed=6)), 1, 64)


def test_default_parameters_take_the_fast_path(fast_calls: list) -> None:
    """Also a tripwire: a new ``HQQParameters`` field disables the fast path until it is reviewed."""
    assert proximal.unsupported_parameters(HQQ_DEFAULT) == []
    assert proximal.unsupported_parameters(HQQ_REFERENCE) == []
    assert proximal.unsupported_parameters(HQQ_DEFAULT.replace(guard_reference=False)) == []  # compress's recipe
    weight, axis = grouped_weight()
    proximal.solve(weight, axis, 4, HQQ_DEFAULT)
    assert len(fast_calls) == 1


@pytest.mark.parametrize("value", ["1", "0", ""])
def test_environment_switch_disables_the_fast_path(
    fast_calls: list, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(runtime.DISABLE_ENV, value)
    weight, axis = grouped_weight()
    s, z = proximal.solve(weight, axis, 4, HQQ_DEFAULT)
    assert fast_calls == []
    s_ref, z_ref = hqq_solve(weight, axis, 4, HQQ_DEFAULT)
    np.testing.assert_array_equal(s.data, s_ref.data)
    np.testing.assert_array_equal(z.data, z_ref.data)


def test_environment_switch_unset_keeps_the_fast_path(fast_calls: list, monkeypatch: pytest.MonkeyPatch) -> None:
    """NNCF's own reading of NNCF_DISABLE_OPTIMIZED_COMPRESSION: any value disables, only an unset variable does not."""
    monkeypatch.delenv(runtime.DISABLE_ENV, raising=False)
    weight, axis = grouped_weight()
    proximal.solve(weight, axis, 4, HQQ_DEFAULT)
    assert len(fast_calls) == 1


def test_unknown_parameter_field_falls_back(fast_calls: list) -> None:
    @dataclasses.dataclass(frozen=True)
    class FutureParameters(HQQParameters):
        scale_update: bool = False

    params = FutureParameters()
    assert proximal.unsupported_parameters(params) == ["scale_update"]
    weight, axis = grouped_weight()
    proximal.solve(weight, axis, 4, params)
    assert fast_calls == []


def test_unsupported_bit_width_and_torch_tensors_fall_back(fast_calls: list) -> None:
    weight, axis = grouped_weight()
    reason = proximal.fallback_reason(weight, 9, HQQ_DEFAULT)
    assert reason is not None and "num_bits" in reason
    torch = pytest.importorskip("torch")
    torch_weight = Tensor(torch.from_numpy(weight.data))
    assert proximal.fallback_reason(torch_weight, 4, HQQ_DEFAULT) is not None
    s, _ = proximal.solve(torch_weight, axis, 4, HQQ_DEFAULT)
    assert fast_calls == []
    assert isinstance(s.data, torch.Tensor)


def test_solver_reads_only_the_modelled_fields() -> None:
    """If the reference starts reading another field, the fast path must learn it (and list it)."""
    source = inspect.getsource(solver.hqq_solve) + inspect.getsource(solver.optimize_zero_point_proximal)
    assert set(re.findall(r"params\.(\w+)", source)) <= MODELLED_FIELDS


def test_logs_the_chosen_path_once(fast_calls: list, monkeypatch: pytest.MonkeyPatch) -> None:
    messages: list[str] = []
    monkeypatch.setattr(runtime, "_LOGGED", set())
    monkeypatch.setattr(runtime.nncf_logger, "debug", lambda message, *args: messages.append(str(message)))
    weight, axis = grouped_weight()
    for _ in range(3):
        proximal.solve(weight, axis, 4, HQQ_DEFAULT)
    monkeypatch.setenv(runtime.DISABLE_ENV, "1")
    proximal.solve(weight, axis, 4, HQQ_DEFAULT)
    proximal.solve(weight, axis, 4, HQQ_DEFAULT)
    assert len(messages) == 2
    assert "fast path" in messages[0]
    assert "reference" in messages[1]


def test_compiled_models_are_cached_per_group_size(fast_calls: list) -> None:
    proximal.compiled_sweep.cache_clear()
    for rows in (16, 48, 80):  # different layer shapes, same group size
        weight, axis = split_into_groups(Tensor(heavy_tailed((rows, 128))), 1, 64)
        proximal.solve(weight, axis, 4, HQQ_DEFAULT)
    info = proximal.compiled_sweep.cache_info()  # one model (the later chunks'), asked for by every chunk
    assert (info.misses, info.maxsize) == (1, runtime.CACHE_SIZE) and info.hits >= 2


def test_compress_weights_matches_with_and_without_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end on a small transformer (transposed, 3D MoE and lm-head weights): the outputs of the two
    compressed models differ by a small fraction of their common compression error."""
    ids = ov_models.input_ids()
    original = ov_models.run(ov_models.transformer_like(), ids)
    outputs: dict[bool, np.ndarray] = {}
    for disabled in (False, True):
        if disabled:
            monkeypatch.setenv(runtime.DISABLE_ENV, "1")
        model = nncf.compress_weights(
            ov_models.transformer_like(), mode=nncf.CompressWeightsMode.INT4_ASYM, group_size=32, hqq=True
        )
        outputs[disabled] = ov_models.run(model, ids)
    fast, reference = outputs[False], outputs[True]
    compression_error = np.linalg.norm(reference - original)
    assert np.linalg.norm(fast - reference) <= 0.05 * compression_error
    assert np.linalg.norm(fast - original) <= 1.01 * compression_error


def test_non_finite_weights_get_the_reference_result() -> None:
    weight = heavy_tailed((8, 64), seed=7)
    weight[1, 3], weight[2, 5] = np.nan, np.inf
    grouped, axis = split_into_groups(Tensor(weight), 1, 32)
    with np.errstate(invalid="ignore"):
        _, z_fast = proximal.solve_compiled(grouped, axis, 4, HQQ_DEFAULT)
        _, z_ref = hqq_solve(grouped, axis, 4, HQQ_DEFAULT)
    np.testing.assert_array_equal(z_fast.data, z_ref.data)


@pytest.mark.parametrize("whole", [True, False], ids=["all-groups-active", "some-groups-active"])
def test_settle_continues_fixed_points_and_two_cycles(whole: bool) -> None:
    # after 4 of 7 iterations: a fixed point, a 2-cycle, one still moving (and, unless whole, a group that left
    # earlier, whose trajectory must stay untouched)
    zeros = np.full((8, 4), np.nan, dtype=np.float32)
    l1 = np.full((7, 4), np.nan, dtype=np.float32)
    zeros[:5, :3] = [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [3.0, 5.0, 3.0], [3.0, 2.0, 4.0]]
    l1[:4, :3] = [[9.0, 9.0, 9.0], [8.0, 8.0, 8.0], [7.0, 7.0, 7.0], [6.0, 5.0, 6.0]]
    if whole:
        zeros, l1 = zeros[:, :3].copy(), l1[:, :3].copy()
    settled = proximal._ProximalRun.settle(zeros, l1, np.arange(3), 4)
    np.testing.assert_array_equal(settled, [True, True, False])
    np.testing.assert_array_equal(zeros[4:, 0], [3.0] * 4)  # z_4 == z_3: constant from then on
    np.testing.assert_array_equal(l1[4:, 0], [6.0] * 3)  # the error of z_3, repeated
    np.testing.assert_array_equal(zeros[4:, 1], [2.0, 5.0, 2.0, 5.0])  # z_4 == z_2: period 2
    np.testing.assert_array_equal(l1[4:, 1], [7.0, 5.0, 7.0])
    if not whole:
        assert np.isnan(zeros[5:, 2]).all() and np.isnan(l1[4:, 2]).all()  # left to the next chunk
        assert np.isnan(zeros[:, 3]).all() and np.isnan(l1[:, 3]).all()


@pytest.mark.parametrize(
    ("shape", "group_size"),
    [((256, 512), 128), ((96, 320), 64), ((40, 200), 40), ((3, 48, 256), 64)],
    ids=["g128", "g64", "odd-g40", "moe-g64"],
)
def test_settling_sweep_equals_the_full_sweep(shape: tuple[int, ...], group_size: int) -> None:
    """Dropping settled groups changes nothing: the trajectories are bit-identical to all 20 iterations on all
    groups (one compiled model unrolling them)."""
    grouped, axis = split_into_groups(Tensor(heavy_tailed(shape)), len(shape) - 1, group_size)
    inverse_scale, zero = solver.min_max_init(grouped, axis, 4)
    rows = runtime.as_rows(grouped.data, axis)
    s, z = inverse_scale.data.reshape(-1), zero.data.reshape(-1)
    run = proximal._ProximalRun(rows, s, 4, HQQ_DEFAULT)
    assert run.settling
    full = proximal.compiled_sweep(rows.shape[1], 20, 4, None).run(rows, s, z, np.zeros(20, dtype=np.float32))
    repeats = full[0][4] == full[0][3]
    assert repeats.any() and not repeats.all()  # some groups leave after the first chunk, some stay
    settled = run.hard_rounding_trajectories(z, 20)
    for got, expected in zip(settled, full, strict=True):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    ("group_size", "bits"), [(128, 4), (64, 4), (32, 8), (40, 2)], ids=["g128", "g64", "int8", "int2"]
)
def test_initial_sweep_equals_extremes_then_first_chunk(group_size: int, bits: int) -> None:
    """The first chunk with the initialisation computed in the same model gives the initialisation of
    ``core.min_max_init_for_range`` and the chunk ``CompiledSweep`` computes from it, bit for bit (also for constant,
    zero, one-sided and far-off-zero groups, and a last block padded with zeros)."""
    weight = heavy_tailed((3000, 2 * group_size), seed=8)
    weight[0] = 0.0
    weight[1] = 0.25
    weight[2] = -3.0
    weight[3] = np.abs(weight[3]) + 1.0  # all positive, far from zero: the widened range
    weight[4] = -np.abs(weight[4]) - 40.0
    weight[5, :7] = 1e-30
    rows = runtime.as_rows(split_into_groups(Tensor(weight), 1, group_size)[0].data, 2)
    s, z, total, (zeros, l1, scaled_range) = proximal.compiled_initial_sweep(rows.shape[1], bits).run(rows)
    expected_s, expected_z = solver.min_max_init(Tensor(rows), 1, bits)
    np.testing.assert_array_equal(s, expected_s.data[:, 0])
    np.testing.assert_array_equal(z, expected_z.data[:, 0])
    np.testing.assert_allclose(total, rows.sum(axis=1), rtol=1e-5, atol=1e-5)
    no_betas = np.zeros(proximal.SETTLE_CHUNK, dtype=np.float32)
    expected = proximal.compiled_sweep(rows.shape[1], proximal.SETTLE_CHUNK, bits, None).run(rows, s, z, no_betas)
    for got, wanted in zip((zeros, l1, scaled_range), expected, strict=True):
        np.testing.assert_array_equal(got, wanted)


def test_initial_sweep_sum_flags_non_finite_rows() -> None:
    weight = heavy_tailed((8, 128), seed=9)
    weight[2, 3], weight[5, 0] = np.nan, -np.inf
    with np.errstate(invalid="ignore"):
        *_, total, _ = proximal.compiled_initial_sweep(128, 4).run(weight)
    np.testing.assert_array_equal(np.isfinite(total), [True, True, False, True, True, False, True, True])


def test_picked_rows_are_gathered_block_by_block() -> None:
    rows = heavy_tailed((50, 8), seed=10)
    picked = np.array([3, 7, 8, 20, 49, 0, 31])
    subset = runtime.PickedRows(rows, picked)
    assert subset.shape == (7, 8)
    np.testing.assert_array_equal(runtime.block_rows(subset, 0, 4, 0.0), rows[[3, 7, 8, 20]])
    last = runtime.block_rows(subset, 4, 4, 1.5)  # padded
    np.testing.assert_array_equal(last[:3], rows[[49, 0, 31]])
    np.testing.assert_array_equal(last[3], np.full(8, 1.5, dtype=np.float32))
    assert last.flags.c_contiguous and last.flags.writeable


def test_scratch_buffers_are_reused_and_refilled() -> None:
    rows = heavy_tailed((50, 8), seed=11)
    subset = runtime.PickedRows(rows, np.array([3, 7, 8, 20, 49, 0, 31]))
    scratch = runtime.Scratch()
    first = runtime.block_rows(subset, 0, 4, 0.0, scratch)
    padded = runtime.block_rows(rows, 48, 4, 2.5, scratch)  # the second buffer of this block
    assert first is not padded
    np.testing.assert_array_equal(padded[2:], 2.5)
    again = runtime.block_rows(subset, 4, 4, 1.5, scratch.reset())  # the next block: the same buffer, refilled
    assert again is first
    np.testing.assert_array_equal(again[:3], rows[[49, 0, 31]])
    np.testing.assert_array_equal(again[3], 1.5)
    assert runtime.block_rows(rows, 8, 4, 0.0, scratch) is not padded  # a view: no buffer used
    assert runtime.block_rows(rows, 48, 4, 0.0, scratch) is padded
    np.testing.assert_array_equal(padded[:2], rows[48:])
    np.testing.assert_array_equal(padded[2:], 0.0)


def test_picked_rows_through_a_runner_equal_the_gathered_rows() -> None:
    """Many more blocks than infer requests: a request's scratch buffers are refilled while other requests run, so
    a buffer reused before its inference ended would change the results."""
    rows = heavy_tailed((24 * runtime.rows_per_block(16) + 5, 16), seed=12)
    picked = np.random.default_rng(12).permutation(rows.shape[0])[: rows.shape[0] - 1000]
    runner = runtime.compiled_extremes(16)
    block = runner.rows_per_block
    assert len(runner.queue) < picked.size // block
    got = np.empty((3, picked.size), dtype=np.float32)
    subset = runtime.PickedRows(rows, picked)
    runner.run(picked.size, lambda begin, scratch: [runtime.block_rows(subset, begin, block, 0.0, scratch)], [got])
    wanted = np.empty_like(got)
    gathered = rows[picked]
    runner.run(picked.size, lambda begin, scratch: [runtime.block_rows(gathered, begin, block, 0.0)], [wanted])
    np.testing.assert_array_equal(got, wanted)
    np.testing.assert_array_equal(got[:2], np.stack([gathered.min(axis=1), gathered.max(axis=1)]))


def test_read_only_arrays_are_shared_not_copied() -> None:
    values = heavy_tailed((16, 8), seed=13)
    values.setflags(write=False)
    tensor = runtime.shared_tensor(values)
    assert np.shares_memory(tensor.data, values)
    assert tensor.get_element_type() == ov.Type.f32 and tuple(tensor.shape) == values.shape


def test_sweep_without_extremes_computes_the_same_iterations() -> None:
    """The settling sweep's later chunks leave out ``min``/``max`` of ``W * s`` (not used); the rest is the same."""
    rows = heavy_tailed((300, 64), seed=14)
    s = (15.0 / (rows.max(axis=1) - rows.min(axis=1))).astype(np.float32)
    z = np.full(rows.shape[0], 7.5, dtype=np.float32)
    betas = np.zeros(proximal.SETTLE_CHUNK, dtype=np.float32)
    subset = runtime.PickedRows(rows, np.arange(0, rows.shape[0], 3))
    full = proximal.compiled_sweep(64, proximal.SETTLE_CHUNK, 4, None).run(subset, s[::3], z[::3], betas)
    bare = proximal.compiled_sweep(64, proximal.SETTLE_CHUNK, 4, None, extremes=False).run(
        subset, s[::3], z[::3], betas
    )
    assert bare[2] is None and full[2] is not None
    np.testing.assert_array_equal(bare[0], full[0])
    np.testing.assert_array_equal(bare[1], full[1])
