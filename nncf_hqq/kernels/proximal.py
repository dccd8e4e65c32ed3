"""A compiled OpenVINO implementation of ``nncf_hqq.maths.solver.hqq_solve`` and the dispatch to it.

``solve`` runs the fast path when it can reproduce the reference and ``hqq_solve`` otherwise.

How the fast path works. Groups are laid out as rows ``[N, R]``. In the scaled domain ``u = W * s`` one
proximal iteration only needs the rounding residual ``r = u + z - clip(round(u + z), 0, 2^b - 1)`` of every
element: the group's mean absolute error is ``mean|r| / s`` and, as long as the lp shrinkage leaves the
whole group untouched, the closed-form update is ``z - mean(r)``. For p == 1 the shrinkage is a soft
threshold, ``z - mean(clamp(r, -s / beta, s / beta))``. An OpenVINO model unrolls ``K`` such iterations for a
fixed block of rows and returns the zero point and the summed |r| of every iteration, so each block of
weights stays in the CPU cache for all its iterations. Blocks run on all cores through an
``AsyncInferQueue``; one compiled model serves every layer with the same group size (bounded LRU cache).

With p < 1 (the default) and the shrinkage inactive, an iteration is a fixed map of the zero point; the
iterations then run in chunks of ``SETTLE_CHUNK``, and a group whose zero point has started to repeat (a fixed
point or a 2-cycle) leaves the sweep: its remaining trajectory is written by repetition, bit-identical to
computing it. Most groups settle within a few iterations, so most of the 20 iterations run on few groups.

The early-stop and best-iterate logic of the reference (tensor or group scope) is then replayed in numpy
on those per-iteration statistics, which are all it depends on: until a group stops, its trajectory does
not depend on any other group. For p < 1 a group whose residual bound shows that the lp shrinkage could
become active in some iteration (very wide groups, strongly clipped codes, or weights scaled up by AWQ) is
recomputed by a second compiled sweep that applies the shrinkage (``solver.shrink_lp``'s formula) in every
iteration.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from functools import lru_cache
from typing import cast

import numpy as np
import openvino as ov
from nncf.tensor import Tensor
from nncf.tensor import TensorBackend
from nncf.tensor import TensorDataType
from openvino import opset13 as opset

from nncf_hqq.kernels.runtime import CACHE_SIZE
from nncf_hqq.kernels.runtime import BlockRunner
from nncf_hqq.kernels.runtime import PickedRows
from nncf_hqq.kernels.runtime import Scratch
from nncf_hqq.kernels.runtime import as_rows
from nncf_hqq.kernels.runtime import block_rows
from nncf_hqq.kernels.runtime import compiled_extremes
from nncf_hqq.kernels.runtime import from_rows
from nncf_hqq.kernels.runtime import guarded
from nncf_hqq.kernels.runtime import rows_per_block
from nncf_hqq.kernels.runtime import stack_columns
from nncf_hqq.kernels.runtime import tensor_fallback_reason
from nncf_hqq.kernels.runtime import true_divide
from nncf_hqq.maths.core import F16_TINY
from nncf_hqq.maths.core import MAX_ABS_ZERO
from nncf_hqq.maths.core import MIN_GROUP_RANGE
from nncf_hqq.maths.core import dequantize
from nncf_hqq.maths.core import levels_max
from nncf_hqq.maths.core import mean_absolute_error
from nncf_hqq.maths.core import min_max_init_for_range
from nncf_hqq.maths.core import quantize
from nncf_hqq.maths.solver import SHRINK_EPS
from nncf_hqq.maths.solver import SHRINK_MARGIN
from nncf_hqq.maths.solver import hqq_solve
from nncf_hqq.maths.solver import shrink_free_bound
from nncf_hqq.maths.solver import shrink_lp
from nncf_hqq.maths.solver import zero_point_update
from nncf_hqq.parameters import EarlyStopScope
from nncf_hqq.parameters import HQQParameters

#: Every ``HQQParameters`` field and the values of it the fast path reproduces. A field missing here (one added
#: to the dataclass later) makes ``solve`` fall back to the reference until it is reviewed and listed.
#: ``hqq_solve`` never reads the fields after ``return_best``: ``nncf_hqq.hqq`` applies them around the
#: solver (the RTN guard, the least-squares refinement and its options, the integer zero point, the data-aware
#: scale refinement after it; the choice of layers that keep RTN before it; with ``weighted_proximal`` the
#: importance weights go to ``hqq_solve`` directly, without this dispatcher).
SUPPORTED_PARAMETERS: dict[str, Callable[[object], bool]] = {
    "lp_norm": lambda value: True,
    "beta": lambda value: True,
    "kappa": lambda value: True,
    "shrinkage": lambda value: True,
    "iterations": lambda value: True,
    "early_stop": lambda value: True,
    "early_stop_scope": lambda value: value in (EarlyStopScope.TENSOR, EarlyStopScope.GROUP),
    "return_best": lambda value: True,
    "zero_point_format": lambda value: True,
    "rtn_guard": lambda value: True,
    "refine_rounds": lambda value: True,
    "preserve_extremes": lambda value: True,
    "importance": lambda value: True,
    "scale_estimation_rounds": lambda value: True,
    "rtn_roles": lambda value: True,
    "weighted_proximal": lambda value: True,
    "unit_gain": lambda value: True,
    "output_guard": lambda value: True,  # a choice among finished results (nncf_hqq.maths.guard), not the solver's
    "guard_reference": lambda value: True,  # which finished results the guard chooses among
    "calibration_token_rows": lambda value: True,  # which calibration inputs the data-aware steps fit
    "guard_held_out": lambda value: True,
    "error_feedback": lambda value: True,  # another candidate for the guard, after the solver
    "error_feedback_damp": lambda value: True,
}


#: Most iterations unrolled in one compiled model; longer runs are split into blocks of iterations.
MAX_UNROLLED_ITERATIONS = 20


#: Iterations per chunk of the hard-rounding sweep; after each chunk the groups whose zero point repeats leave it
#: (see ``_ProximalRun.settling_trajectories``). On real LLM weights most groups settle within the first chunk or
#: two (the shares measured on two models: docs/research-log.md).
SETTLE_CHUNK = 4


#: Groups needing the lp shrinkage up to which the numpy reference runs instead of a compiled block.
FEW_GROUPS = 64


def solve(weight: Tensor, axis: int, num_bits: int, params: HQQParameters) -> tuple[Tensor, Tensor]:
    """HQQ's inverse scale and zero point for grouped ``weight`` (see ``nncf_hqq.maths.solver.hqq_solve``).


    Uses the compiled fast path when ``fallback_reason`` finds nothing against it, otherwise the reference.
    The fast path returns float32 numpy tensors.
    """
    return guarded(
        fallback_reason(weight, num_bits, params),
        lambda: solve_compiled(weight, axis, num_bits, params),
        lambda: hqq_solve(weight, axis, num_bits, params),
        "solver",
    )


def fallback_reason(weight: Tensor, num_bits: int, params: HQQParameters) -> str | None:
    """Why the fast path cannot be used for this call, or None when it can."""
    unsupported = unsupported_parameters(params)
    if unsupported:
        return f"unsupported HQQ parameters {unsupported}"
    return tensor_fallback_reason(weight, num_bits)


def unsupported_parameters(params: HQQParameters) -> list[str]:
    """Names of the fields of ``params`` that the fast path does not reproduce (unknown fields included)."""
    names = []
    for field in dataclasses.fields(params):
        accepts = SUPPORTED_PARAMETERS.get(field.name)
        if accepts is None or not accepts(getattr(params, field.name)):
            names.append(field.name)
    return names


def solve_compiled(weight: Tensor, axis: int, num_bits: int, params: HQQParameters) -> tuple[Tensor, Tensor]:
    """The fast path itself (no dispatch): same contract as ``hqq_solve``, float32 numpy results."""
    if weight.backend == TensorBackend.ov:
        weight = weight.as_numpy_tensor()
    if weight.dtype != TensorDataType.float32:
        weight = weight.astype(TensorDataType.float32)
    axis = axis % weight.ndim
    rows = as_rows(weight.data, axis)
    keepdims_shape = (*weight.shape[:axis], 1, *weight.shape[axis + 1 :])
    first_chunk = None
    if params.iterations > 0 and settles(params):  # one pass: the initialisation and the sweep's first chunk
        s_rows, z_rows, total, first_chunk = compiled_initial_sweep(rows.shape[1], num_bits).run(rows)
    else:
        extremes = np.empty((3, rows.shape[0]), dtype=np.float32)
        block = rows_per_block(rows.shape[1])
        inputs_at = lambda begin, scratch: [block_rows(rows, begin, block, 0.0, scratch)]  # noqa: E731
        compiled_extremes(rows.shape[1]).run(rows.shape[0], inputs_at, [extremes])
        s_rows, z_rows = (t.data for t in min_max_init_for_range(Tensor(extremes[0]), Tensor(extremes[1]), num_bits))
        total = extremes[2]
    if not np.isfinite(total).all():  # NaN/Inf weights: whatever the reference makes of them
        return hqq_solve(weight, axis, num_bits, params)
    inverse_scale = Tensor(from_rows(s_rows, keepdims_shape, axis))
    if params.iterations == 0:
        return inverse_scale, Tensor(from_rows(z_rows, keepdims_shape, axis))
    best = _ProximalRun(rows, s_rows, num_bits, params, first_chunk).solve(z_rows)
    return inverse_scale, Tensor(from_rows(best, keepdims_shape, axis))


def unroll_depth(params: HQQParameters) -> int:
    """Iterations per compiled block of iterations (at most ``MAX_UNROLLED_ITERATIONS``, blocks of equal length)."""
    blocks = math.ceil(params.iterations / MAX_UNROLLED_ITERATIONS)
    return math.ceil(params.iterations / blocks)


def settles(params: HQQParameters) -> bool:
    """Whether the zero-point loop runs in chunks of ``SETTLE_CHUNK`` iterations that drop the settled groups: hard
    rounding (the lp shrinkage, when on, is redone where it may act), more iterations per block than a chunk."""
    soft_threshold = params.shrinkage and params.lp_norm == 1.0
    return not soft_threshold and params.iterations > 0 and unroll_depth(params) > SETTLE_CHUNK


def beta_schedule(params: HQQParameters) -> list[float]:
    """``beta`` of every iteration, multiplied by ``kappa`` exactly as the reference loop does."""
    betas = []
    beta = params.beta
    for _ in range(params.iterations):
        betas.append(beta)
        beta *= params.kappa
    return betas


@dataclasses.dataclass
class _EarlyStopState:
    """The reference loop's state between blocks of iterations, per early-stop unit (tensor or group)."""

    best_error: np.ndarray
    best_value: np.ndarray
    value: np.ndarray
    active: np.ndarray


#: Runs a chunk of ``SETTLE_CHUNK`` iterations on the picked rows (all: ``slice(None)``) from the given parameter
#: values: the values ``[K + 1, n]`` (row 0: the start), the summed |error| ``[K, n]`` and an optional extra
#: per-row output of the first chunk.
ChunkRunner = Callable[[slice | np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray | None]]


class ProximalReplay:
    """What the compiled proximal loops share: every group's trajectory of its one free parameter (the zero point,
    or the scale of symmetric modes) is computed in blocks of iterations, then the reference's early-stop and
    best-iterate bookkeeping is replayed on the per-iteration errors."""

    def __init__(
        self, params: HQQParameters, error_factor: np.ndarray, tensor_factor: np.ndarray | None = None
    ) -> None:
        """:param error_factor: per group, what turns its summed |error| into its mean absolute error in the weight
            domain.
        :param tensor_factor: per group, the share of its summed |error| in the tensor's mean absolute error
            (default ``error_factor / N``: every group counts alike; importance-weighted errors count by the
            group's importance)."""
        self.params = params
        self.betas = beta_schedule(params)
        self.unroll = unroll_depth(params)
        self.error_factor = error_factor
        self.tensor_factor = tensor_factor

    def trajectories(self, start: np.ndarray, betas: list[float]) -> tuple[np.ndarray, np.ndarray]:
        """Parameter values ``[K + 1, N]`` and summed |error| ``[K, N]`` of ``K = len(betas)`` iterations."""
        raise NotImplementedError

    def solve(self, start: np.ndarray) -> np.ndarray:
        """Runs all iterations from ``start`` and returns the values the reference would return."""
        units = 1 if self.params.early_stop_scope == EarlyStopScope.TENSOR else start.shape[0]
        state = _EarlyStopState(np.full(units, np.inf), start.copy(), start.copy(), np.ones(units, dtype=bool))
        for begin in range(0, self.params.iterations, self.unroll):
            betas = self.betas[begin : begin + self.unroll]
            values, l1 = self.trajectories(state.value, betas)
            if self.advance(state, values, l1, len(betas)):
                break
        return state.best_value if self.params.return_best else state.value

    def settling_trajectories(
        self, start: np.ndarray, steps: int, run_chunk: ChunkRunner
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``steps`` iterations of a fixed map of the parameter (hard rounding, shrinkage inactive),
        ``SETTLE_CHUNK`` at a time, each chunk only on the groups not yet settled; also the extra output of the
        first chunk.


        Once a group's value repeats (``v_t == v_(t-1)``: a fixed point, or ``v_t == v_(t-2)``: a 2-cycle), its
        remaining trajectory and errors repeat with it and are written without computing them.
        """
        n = start.shape[0]
        values = np.empty((steps + 1, n), dtype=np.float32)
        l1 = np.empty((steps, n), dtype=np.float32)
        values[0] = start
        extra = None
        active = np.arange(n)
        done = 0
        while done < steps and active.size:
            picked = slice(None) if active.size == n else active
            chunk_values, chunk_l1, chunk_extra = run_chunk(picked, values[done, picked])
            count = min(SETTLE_CHUNK, steps - done)
            values[done + 1 : done + count + 1, picked] = chunk_values[1 : count + 1]
            l1[done : done + count, picked] = chunk_l1[:count]
            if done == 0:
                extra = chunk_extra
            done += count
            if done < steps:  # done >= SETTLE_CHUNK >= 2 here
                active = active[~self.settle(values, l1, active, done)]
        return values, l1, extra

    @staticmethod
    def settle(values: np.ndarray, l1: np.ndarray, active: np.ndarray, done: int) -> np.ndarray:
        """Marks (and completes the trajectories of) the ``active`` groups whose value repeats after ``done``
        iterations: constant from a fixed point on, alternating from a 2-cycle on.


        When every group is active, whole steps are written at once (also for the groups that have not settled:
        the next chunk overwrites theirs); otherwise only the settled groups' entries."""
        whole = active.size == values.shape[1]
        picked = slice(None) if whole else active
        last, previous = values[done, picked], values[done - 1, picked]
        fixed = last == previous
        cycle = ~fixed & (last == values[done - 2, picked])
        if whole:  # every tail constant, then the 2-cycles' every other step
            values[done + 1 :] = last
            l1[done:] = l1[done - 1]
            rows = np.flatnonzero(cycle)
            values[done + 1 :: 2, rows] = previous[rows]
            l1[done::2, rows] = l1[done - 2, rows]
            return fixed | cycle
        rows = active[fixed]  # v_t = v_done for t > done, e_t = e_(done - 1) for t >= done
        values[done + 1 :, rows] = values[done, rows]
        l1[done:, rows] = l1[done - 1, rows]
        rows = active[cycle]  # v_t = v_(t - 2), e_t = e_(t - 2): the last two steps alternate
        values[done + 1 :: 2, rows] = values[done - 1, rows]
        values[done + 2 :: 2, rows] = values[done, rows]
        l1[done::2, rows] = l1[done - 2, rows]
        l1[done + 1 :: 2, rows] = l1[done - 1, rows]
        return fixed | cycle

    def advance(self, state: _EarlyStopState, values: np.ndarray, l1: np.ndarray, steps: int) -> bool:
        """Replays the reference's early-stop/best-iterate updates for ``steps`` iterations.


        Only the indices of the best and of the current iterate are tracked per unit; the values are gathered
        once at the end.


        :return: True when the reference would have stopped (every unit inactive).
        """
        units = state.active.shape[0]
        best_step, current_step = np.full(units, -1), np.full(units, -1)
        stopped = False
        for t in range(steps):
            error = self.mean_absolute_errors(l1[t], units)
            improved = (error < state.best_error) & state.active
            state.best_error = np.where(improved, error, state.best_error)
            best_step = np.where(improved, t, best_step)
            current_step = np.where(state.active, t + 1, current_step)
            if self.params.early_stop:
                state.active = improved
                if not state.active.any():
                    stopped = True
                    break
        state.best_value = _pick(values, best_step, state.best_value)
        state.value = _pick(values, current_step, state.value)
        return stopped

    def shrink_free_limit(self, betas: list[float]) -> float:
        """The largest |error| the lp shrinkage leaves at zero in every one of these iterations (with a safety
        margin); unbounded without ``params.shrinkage``."""
        if not self.params.shrinkage:
            return math.inf
        return min(shrink_free_bound(beta, self.params.lp_norm) for beta in betas) * (1.0 - SHRINK_MARGIN)

    def mean_absolute_errors(self, l1: np.ndarray, units: int) -> np.ndarray:
        """One iteration's mean absolute error in the weight domain: of the whole tensor (``units == 1``) or
        of every group, from the groups' summed |error| (in float64, one iteration at a time)."""
        if units == 1 and self.tensor_factor is not None:
            return np.array([(l1 * self.tensor_factor).sum()])
        errors = l1 * self.error_factor  # no BLAS call: its threads would compete with OpenVINO's
        return np.array([errors.mean()]) if units == 1 else errors


class _ProximalRun(ProximalReplay):
    """The zero-point loop of one weight: blocks of compiled iterations, then the reference's bookkeeping."""

    def __init__(
        self,
        rows: np.ndarray,
        inverse_scale: np.ndarray,
        num_bits: int,
        params: HQQParameters,
        first_chunk: SweepChunk | None = None,
    ) -> None:
        """:param first_chunk: the first chunk of the settling sweep from the initial zero points, when it was
        computed already (``InitialSweep``)."""
        # 1 / (s * R): turns a group's summed |r| (scaled domain) into its mean absolute error in the weight domain.
        super().__init__(params, 1.0 / (inverse_scale.astype(np.float64) * rows.shape[1]))
        self.rows = rows
        self.inverse_scale = inverse_scale
        self.num_bits = num_bits
        self.soft_threshold = params.shrinkage and params.lp_norm == 1.0
        #: Whether iterations run in chunks that drop the settled groups (hard rounding only, see
        #: ``ProximalReplay.settling_trajectories``).
        self.settling = settles(params)
        self.first_chunk = first_chunk if self.settling else None
        unroll = SETTLE_CHUNK if self.settling else self.unroll
        self.sweep_config = (rows.shape[1], unroll, num_bits, 1.0 if self.soft_threshold else None)

    def sweep(self, extremes: bool = True) -> CompiledSweep:
        """The compiled sweep of this run (compiled when first needed; with or without the extremes output)."""
        return compiled_sweep(*self.sweep_config, extremes)

    def trajectories(self, start: np.ndarray, betas: list[float]) -> tuple[np.ndarray, np.ndarray]:
        """Zero points ``[K + 1, N]`` and summed |r| ``[K, N]`` (of the scaled residual) of ``K`` iterations."""
        if not self.settling:
            inverse_betas = np.zeros(self.unroll, dtype=np.float32)
            inverse_betas[: len(betas)] = [1.0 / beta for beta in betas]
            zeros, l1, extremes = self.sweep().run(self.rows, self.inverse_scale, start, inverse_betas)
            zeros, l1, scaled_range = zeros[: len(betas) + 1], l1[: len(betas)], cast(np.ndarray, extremes)
        else:
            zeros, l1, scaled_range = self.hard_rounding_trajectories(start, len(betas))
        if not self.soft_threshold:
            redo = self.shrinkage_may_act(zeros[:-1], scaled_range, betas)
            if redo.any():
                zeros[:, redo], l1[:, redo] = self.shrinking_trajectories(np.flatnonzero(redo), start[redo], betas)
        return zeros, l1

    def hard_rounding_trajectories(self, zero: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The hard-rounding update ``z -> mean(codes(W * s + z) - W * s)`` for ``steps`` iterations, settled
        groups leaving (see ``ProximalReplay.settling_trajectories``); also ``min``/``max`` of ``W * s``."""
        no_betas = np.zeros(SETTLE_CHUNK, dtype=np.float32)

        def run_chunk(
            picked: slice | np.ndarray, start: np.ndarray
        ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
            if isinstance(picked, slice) and self.first_chunk is not None:  # computed from these very ``start``
                chunk, self.first_chunk = self.first_chunk, None
                return chunk
            if isinstance(picked, slice):  # a first chunk: its extremes are the trajectories' (after 20 iterations)
                return self.sweep().run(self.rows, self.inverse_scale, start, no_betas)
            rows = PickedRows(self.rows, picked)  # a later chunk: its extremes are not used
            return self.sweep(extremes=False).run(rows, self.inverse_scale[picked], start, no_betas)

        zeros, l1, scaled_range = super().settling_trajectories(zero, steps, run_chunk)
        return zeros, l1, cast(np.ndarray, scaled_range)  # the first chunk always runs

    def shrinkage_may_act(self, zeros: np.ndarray, scaled_range: np.ndarray, betas: list[float]) -> np.ndarray:
        """Groups where, in some iteration, an element's error might exceed the shrinkage-free bound.


        ``|r| <= max(0.5, -(min(u) + z), max(u) + z - q_max)`` (only clipped codes exceed 0.5), checked with the
        extreme zero points of the block against the smallest bound of its iterations.
        """
        q_max = levels_max(self.num_bits)
        below = -(scaled_range[0] + zeros.min(axis=0))
        above = scaled_range[1] + zeros.max(axis=0) - q_max
        residual = np.maximum(np.maximum(below, above), 0.5)
        return residual * ((1.0 + SHRINK_MARGIN) / self.inverse_scale) > self.shrink_free_limit(betas)

    def shrinking_trajectories(
        self, groups: np.ndarray, zero: np.ndarray, betas: list[float]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Zero points ``[K + 1, G]`` and summed |r| ``[K, G]`` of the given groups with the lp shrinkage applied
        in every iteration (``solver.shrink_lp``'s formula, compiled), no early stop.


        A compiled block always computes a whole block of rows, so a few groups (up to ``FEW_GROUPS``) take the
        reference's own operations in numpy instead."""
        if groups.size <= FEW_GROUPS:
            return self.reference_trajectories(groups, zero, betas)
        sweep = compiled_sweep(self.rows.shape[1], self.unroll, self.num_bits, self.params.lp_norm)
        inverse_betas = np.zeros(self.unroll, dtype=np.float32)
        inverse_betas[: len(betas)] = [1.0 / beta for beta in betas]
        zeros, l1, _ = sweep.run(self.rows[groups], self.inverse_scale[groups], zero, inverse_betas)
        return zeros[: len(betas) + 1], l1[: len(betas)]

    def reference_trajectories(
        self, groups: np.ndarray, zero: np.ndarray, betas: list[float]
    ) -> tuple[np.ndarray, np.ndarray]:
        """``shrinking_trajectories`` with the reference's own operations (numpy), for a few groups."""
        weight = Tensor(self.rows[groups])
        inverse_scale = Tensor(self.inverse_scale[groups, None])
        z = Tensor(zero[:, None].astype(np.float32))
        zeros, errors = [z.data[:, 0]], []
        for beta in betas:
            codes = quantize(weight, inverse_scale, z, self.num_bits)
            reconstruction = dequantize(codes, inverse_scale, z)
            errors.append(mean_absolute_error(weight, reconstruction, 1).data[:, 0])
            shrunk = shrink_lp(weight - reconstruction, beta, self.params.lp_norm)
            z = zero_point_update(weight - shrunk, codes, inverse_scale, 1)
            zeros.append(z.data[:, 0])
        return np.stack(zeros), (np.stack(errors) / self.error_factor[groups]).astype(np.float32)


def _pick(zeros: np.ndarray, step: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """Per group ``zeros[step]``, or ``previous`` where ``step`` is -1 (one step for all groups or one each)."""
    if step.shape[0] == 1:
        return previous if step[0] < 0 else zeros[step[0]].copy()
    picked = np.take_along_axis(zeros, np.maximum(step, 0)[None, :], axis=0)[0]
    return np.where(step >= 0, picked, previous)


class CompiledSweep:
    """A compiled model running ``unroll`` iterations on blocks of ``rows_per_block`` rows, on all cores."""

    def __init__(self, model: ov.Model, rows_per_block: int, unroll: int) -> None:
        self.runner = BlockRunner(model, rows_per_block)
        self.rows_per_block = rows_per_block
        self.unroll = unroll

    def run(
        self, rows: np.ndarray | PickedRows, inverse_scale: np.ndarray, zero: np.ndarray, inverse_betas: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Zero points ``[unroll + 1, N]`` (row 0: ``zero``), summed |r| ``[unroll, N]`` and the minimum and
        maximum of ``W * s`` ``[2, N]`` of every row (None from a model built without them)."""
        n, c = rows.shape[0], self.rows_per_block
        zeros = np.empty((self.unroll + 1, n), dtype=np.float32)
        zeros[0] = zero
        l1 = np.empty((self.unroll, n), dtype=np.float32)
        scaled_range = np.empty((2, n), dtype=np.float32) if len(self.runner.compiled.outputs) > 2 else None
        s_col = np.ascontiguousarray(inverse_scale, dtype=np.float32)[:, None]
        z_col = np.ascontiguousarray(zero, dtype=np.float32)[:, None]
        betas = inverse_betas.reshape(1, -1)
        outputs = [zeros[1:], l1] if scaled_range is None else [zeros[1:], l1, scaled_range]

        def inputs_at(begin: int, scratch: Scratch) -> list[np.ndarray]:
            return [*block_inputs(rows, s_col, z_col, begin, c, scratch), betas]

        self.runner.run(n, inputs_at, outputs)
        return zeros, l1, scaled_range


#: A chunk of the sweep: zero points ``[K + 1, N]``, summed |r| ``[K, N]``, min/max of ``W * s`` ``[2, N]``.
SweepChunk = tuple[np.ndarray, np.ndarray, np.ndarray]


class InitialSweep:
    """The first ``SETTLE_CHUNK`` iterations of the hard-rounding sweep from HQQ's min/max initialisation, computed
    in the same model (``build_sweep_model(..., initialise=True)``): one pass over the weight instead of a pass for
    the extremes and one for the first chunk."""

    def __init__(self, model: ov.Model, rows_per_block: int, unroll: int) -> None:
        self.runner = BlockRunner(model, rows_per_block)
        self.rows_per_block = rows_per_block
        self.unroll = unroll

    def run(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, SweepChunk]:
        """Every row's inverse scale and zero point (``core.min_max_init_for_range``, bit for bit) and sum (not
        finite where a weight is not), and the first chunk from them (``CompiledSweep.run``'s outputs)."""
        n, c = rows.shape[0], self.rows_per_block
        zeros = np.empty((self.unroll + 1, n), dtype=np.float32)
        l1 = np.empty((self.unroll, n), dtype=np.float32)
        scaled_range = np.empty((2, n), dtype=np.float32)
        initial = np.empty((3, n), dtype=np.float32)
        betas = np.zeros((1, self.unroll), dtype=np.float32)
        outputs = [zeros[1:], l1, scaled_range, initial]
        self.runner.run(n, lambda begin, scratch: [block_rows(rows, begin, c, 0.0, scratch), betas], outputs)
        zeros[0] = initial[1]
        return initial[0], initial[1], initial[2], (zeros, l1, scaled_range)


def block_inputs(
    rows: np.ndarray | PickedRows,
    s_col: np.ndarray,
    z_col: np.ndarray,
    begin: int,
    count: int,
    scratch: Scratch | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows ``begin:begin + count`` (views), padded to ``count`` rows for the last, shorter block (weights and
    zero points with 0, inverse scales with 1); gathered or padded blocks in ``scratch`` when given."""
    return (
        block_rows(rows, begin, count, 0.0, scratch),
        block_rows(s_col, begin, count, 1.0, scratch),
        block_rows(z_col, begin, count, 0.0, scratch),
    )


@lru_cache(maxsize=CACHE_SIZE)
def compiled_sweep(
    group_size: int, unroll: int, num_bits: int, shrink_p: float | None, extremes: bool = True
) -> CompiledSweep:
    """The compiled sweep for one group size, unroll depth, bit width and shrinkage (LRU cached)."""
    block = rows_per_block(group_size)
    model = build_sweep_model(block, group_size, unroll, levels_max(num_bits), shrink_p, extremes=extremes)
    return CompiledSweep(model, block, unroll)


@lru_cache(maxsize=CACHE_SIZE)
def compiled_initial_sweep(group_size: int, num_bits: int) -> InitialSweep:
    """The compiled first chunk with the initialisation (``InitialSweep``) for one group size and bit width."""
    block = rows_per_block(group_size)
    model = build_sweep_model(block, group_size, SETTLE_CHUNK, levels_max(num_bits), None, initialise=True)
    return InitialSweep(model, block, SETTLE_CHUNK)


def min_max_init_nodes(w_min: ov.Node, w_max: ov.Node, q_max: float) -> tuple[ov.Node, ov.Node]:
    """``core.min_max_init_for_range`` as OpenVINO nodes, in its order of f32 operations (its constants rounded to
    f32 as numpy rounds them, the division kept a division), so the same values bit for bit."""
    zero = opset.constant(np.float32(0.0))
    narrow = opset.less(opset.subtract(w_max, w_min), opset.constant(np.float32(MIN_GROUP_RANGE)))
    w_min = opset.select(narrow, opset.minimum(w_min, zero), w_min)
    w_max = opset.select(narrow, opset.maximum(w_max, zero), w_max)
    zero_range = opset.multiply(opset.abs(w_min), opset.constant(np.float32(q_max / MAX_ABS_ZERO)))
    widened = opset.maximum(opset.subtract(w_max, w_min), zero_range)
    floor = opset.constant(np.float32(q_max * F16_TINY))
    inverse_scale = true_divide(opset.constant(np.float32(q_max)), opset.maximum(widened, floor))
    return inverse_scale, opset.multiply(opset.negative(w_min), inverse_scale)


def build_sweep_model(
    rows: int,
    group_size: int,
    unroll: int,
    q_max: float,
    shrink_p: float | None,
    initialise: bool = False,
    extremes: bool = True,
) -> ov.Model:
    """``unroll`` HQQ iterations in the scaled domain for a ``[rows, group_size]`` block.


    ``shrink_p``: None for no shrinkage (the hard-rounding update ``z - mean(r)``), else the p of the lp shrinkage
    applied to the weight-domain error ``r / s`` (1: soft thresholding).
    Inputs: weight ``[rows, R]``, inverse scale and starting zero point ``[rows, 1]``, ``1 / beta`` per
    iteration ``[1, unroll]`` (used by the shrinkage only). Outputs: the zero point after every iteration and
    the summed |r| of every iteration, both ``[unroll, rows]``, and ``min``/``max`` of ``W * s`` ``[2, rows]``.
    With ``initialise``, the inverse scale and starting zero point are HQQ's min/max initialisation computed in the
    model (``min_max_init_nodes``; inputs: the weight and ``1 / beta``), and a fourth output ``[3, rows]`` holds
    them and every row's sum; ``min``/``max`` of ``W * s`` are then ``min(W) * s`` and ``max(W) * s`` (the same
    values: rounding a product by a positive ``s`` keeps the order). Without ``extremes`` (and without
    ``initialise``) the third output is left out: the settling sweep's later chunks do not use it, and its two
    reductions cost a fifth of a chunk.
    """
    weight = opset.parameter([rows, group_size], ov.Type.f32, name="weight")
    inverse_betas = opset.parameter([1, unroll], ov.Type.f32, name="inverse_betas")
    axis = opset.constant(np.array([1], dtype=np.int64))
    initial = []
    if initialise:
        w_min, w_max = opset.reduce_min(weight, axis, keep_dims=True), opset.reduce_max(weight, axis, keep_dims=True)
        inverse_scale, zero = min_max_init_nodes(w_min, w_max, q_max)
        initial = [stack_columns([inverse_scale, zero, opset.reduce_sum(weight, axis, keep_dims=True)], rows)]
        parameters = [weight, inverse_betas]
    else:
        inverse_scale = opset.parameter([rows, 1], ov.Type.f32, name="inverse_scale")
        zero = opset.parameter([rows, 1], ov.Type.f32, name="zero")
        parameters = [weight, inverse_scale, zero, inverse_betas]
    count = opset.constant(np.float32(group_size))
    scaled = opset.multiply(weight, inverse_scale)
    thresholds = None if shrink_p is None else opset.split(inverse_betas, opset.constant(np.int64(1)), unroll)
    zeros, l1 = [], []
    z: ov.Node = zero
    for t in range(unroll):
        shifted = opset.add(scaled, z)
        codes = opset.clamp(opset.round(shifted, "half_to_even"), 0.0, q_max)
        residual = opset.subtract(shifted, codes)
        l1.append(opset.reduce_l1(residual, axis, keep_dims=True))
        if thresholds is not None and shrink_p == 1.0:
            limit = opset.multiply(inverse_scale, thresholds.output(t))
            residual = opset.minimum(opset.maximum(residual, opset.negative(limit)), limit)
        elif thresholds is not None and shrink_p is not None:
            z = _shrunk_zero_update(weight, inverse_scale, z, codes, thresholds.output(t), shrink_p)
            zeros.append(z)
            continue
        z = opset.subtract(z, opset.divide(opset.reduce_sum(residual, axis, keep_dims=True), count))
        zeros.append(z)
    outputs = [stack_columns(zeros, rows), stack_columns(l1, rows)]
    if initialise:
        scaled_range = [opset.multiply(w_min, inverse_scale), opset.multiply(w_max, inverse_scale)]
        outputs += [stack_columns(scaled_range, rows), *initial]
    elif extremes:
        scaled_range = [opset.reduce_min(scaled, axis, keep_dims=True), opset.reduce_max(scaled, axis, keep_dims=True)]
        outputs.append(stack_columns(scaled_range, rows))
    return ov.Model(outputs, parameters, "hqq_sweep")


def _shrunk_zero_update(
    weight: ov.Node, inverse_scale: ov.Node, z: ov.Node, codes: ov.Node, inverse_beta: ov.Output, p: float
) -> ov.Node:
    """One reference iteration with the lp shrinkage, in the reference's order (``quantize``, ``dequantize``,
    ``shrink_lp`` on ``W - reconstruction``, ``zero_point_update``).


    Two rewrites: ``(|e| + eps)^(p - 1)`` is evaluated as ``exp((p - 1) * log(|e| + eps))`` (half the time of
    OpenVINO's ``Power`` on CPU; the zero points move by ~1e-6 against it), and ``sign(e) * max(|e| - b, 0)`` as
    ``e - clamp(e, -b, b)`` (the same value bit for bit: both are ``e - b``, ``e + b`` or exactly 0). ``codes`` are
    the iteration's ``clip(round(W * s + z))``, which the sweep has computed already.
    """
    error = opset.subtract(weight, opset.divide(opset.subtract(codes, z), inverse_scale))
    logarithm = opset.log(opset.add(opset.abs(error), opset.constant(np.float32(SHRINK_EPS))))
    bound = opset.multiply(opset.exp(opset.multiply(logarithm, opset.constant(np.float32(p - 1.0)))), inverse_beta)
    shrunk = opset.subtract(error, opset.minimum(opset.maximum(error, opset.negative(bound)), bound))
    update = opset.subtract(codes, opset.multiply(opset.subtract(weight, shrunk), inverse_scale))
    return opset.reduce_mean(update, opset.constant(np.array([1], dtype=np.int64)), keep_dims=True)
