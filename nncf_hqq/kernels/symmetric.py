"""Symmetric HQQ (INT4_SYM, INT8_SYM, INT3_SYM, INT2_SYM): the numpy reference and a compiled OpenVINO path.

``compress`` returns NNCF's ``CompressedWeight`` (signed codes, signed f16 scale, no zero point):
NNCF's symmetric RTN scale, HQQ's proximal loop over the scale (``solver.optimize_scale_proximal``), the
least-squares refinement (``integer.refine_symmetric_scale``), the scale as stored and the per-group RTN guard.
``compress_reference`` does all of it with ``nncf.tensor`` functions; ``compress_compiled`` runs the weight-sized
work as OpenVINO models over groups laid out as rows ``[N, R]`` (as ``nncf_hqq.fast_path`` and
``nncf_hqq.kernels.refine`` do; same switch ``NNCF_DISABLE_OPTIMIZED_COMPRESSION``).

The proximal loop. Each iteration takes the nearest codes ``q`` of the current scale, shrinks the error
``W - q * scale`` with the lp operator and takes ``<q, W - shrunk> / <q, q>``. Where no element of a group can
exceed the shrinkage-free bound, the shrinkage returns exact zeros and the update is the fixed map
``scale -> <q(scale), W> / <q(scale), q(scale)>`` (inner products weighted by the importance when there is one;
floored to the extremes with ``preserve_extremes``), so
``proximal.ProximalReplay`` runs it in chunks that drop the groups whose scale repeats, and replays the
reference's early stop and best iterate on the per-iteration errors. An element's error is at most half a step
``|scale| / 2`` unless it is clipped, when it is its distance to the end code; a group where that bound may
exceed the shrinkage-free bound in some iteration is recomputed with the reference's own operations.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import openvino as ov
from nncf.tensor import Tensor
from nncf.tensor import functions as fns
from openvino import opset13 as opset

from nncf_hqq._nncf import CompressedWeight
from nncf_hqq.kernels import proximal
from nncf_hqq.kernels import refine
from nncf_hqq.kernels import runtime
from nncf_hqq.kernels.runtime import CACHE_SIZE
from nncf_hqq.maths.conversion import contiguous
from nncf_hqq.maths.conversion import to_symmetric_compressed_weight
from nncf_hqq.maths.core import F16_MAX
from nncf_hqq.maths.core import F16_TINY
from nncf_hqq.maths.core import round_to_f16
from nncf_hqq.maths.core import signed_magnitude
from nncf_hqq.maths.core import stored_group_error
from nncf_hqq.maths.grids import symmetric_init
from nncf_hqq.maths.grids import symmetric_init_for_range
from nncf_hqq.maths.integer import refine_symmetric_scale
from nncf_hqq.maths.integer import signed_levels
from nncf_hqq.maths.integer import symmetric_scale_floor
from nncf_hqq.maths.solver import SHRINK_MARGIN
from nncf_hqq.maths.solver import optimize_scale_proximal
from nncf_hqq.maths.solver import scale_proximal_step
from nncf_hqq.parameters import HQQParameters


def compress(
    grouped: Tensor, axis: int, num_bits: int, params: HQQParameters, importance: Tensor | None = None
) -> CompressedWeight:
    """Symmetric HQQ of a grouped weight (see the module doc), compiled where possible.

    :param importance: per-element weights broadcastable to ``grouped``; they weight the refinement and the guard
        and the proximal loop alike (whatever ``params.weighted_proximal`` says: the weighted loop measured better
        in symmetric modes, docs/research-log.md).
    """
    return runtime.guarded(
        fallback_reason(grouped, num_bits, importance, params),
        lambda: compress_compiled(grouped, axis, num_bits, params, importance),
        lambda: compress_reference(grouped, axis, num_bits, params, importance),
        "symmetric path",
    )


def fallback_reason(weight: Tensor, num_bits: int, importance: Tensor | None, params: HQQParameters) -> str | None:
    """Why the compiled symmetric path cannot be used for this call, or None when it can."""
    unsupported = proximal.unsupported_parameters(params)
    if unsupported:
        return f"unsupported HQQ parameters {unsupported}"
    return refine.fallback_reason(weight, num_bits, importance, params)


def compress_reference(
    grouped: Tensor, axis: int, num_bits: int, params: HQQParameters, importance: Tensor | None = None
) -> CompressedWeight:
    """The ``nncf.tensor`` reference of ``compress``."""
    rtn_scale = symmetric_init(grouped, axis, num_bits)
    scale = optimize_scale_proximal(grouped, rtn_scale, axis, num_bits, params, importance)
    if params.refine_rounds:
        scale = refine_symmetric_scale(
            grouped, scale, axis, num_bits, params.refine_rounds, importance, params.preserve_extremes
        )
    result = to_symmetric_compressed_weight(grouped, scale, num_bits)
    if params.rtn_guard:
        rtn = to_symmetric_compressed_weight(grouped, rtn_scale, num_bits)
        errors = (stored_group_error(grouped, c, axis, importance) for c in (result, rtn))
        better = next(errors) <= next(errors)
        result = CompressedWeight(
            fns.where(better, result.tensor, rtn.tensor), fns.where(better, result.scale, rtn.scale), None
        )
    return result


def compress_compiled(
    grouped: Tensor, axis: int, num_bits: int, params: HQQParameters, importance: Tensor | None = None
) -> CompressedWeight:
    """The compiled ``compress`` itself (no dispatch); same contract as ``compress_reference``."""
    weight = refine.numpy_f32(grouped)
    axis = axis % weight.ndim
    shape = (*weight.shape[:axis], 1, *weight.shape[axis + 1 :])
    rows = runtime.as_rows(weight, axis)
    row_importance = None if importance is None else refine.RowImportance.of(refine.numpy_f32(importance), shape, axis)
    extremes = row_extremes(rows)
    if not np.isfinite(extremes[2]).all():  # NaN/Inf weights: whatever the reference makes of them
        return compress_reference(grouped, axis, num_bits, params, importance)
    w_min, w_max = Tensor(extremes[0]), Tensor(extremes[1])
    rtn_scale = symmetric_init_for_range(w_min, w_max, num_bits)
    floor = symmetric_scale_floor(w_min, w_max, rtn_scale, num_bits) * float(params.preserve_extremes)
    scale = signed_magnitude(rtn_scale, fns.maximum(fns.abs(rtn_scale), floor)).data
    if params.iterations:
        scale = _ScaleRun(rows, extremes[:2], floor.data, num_bits, params, row_importance).solve(scale)
    block = runtime.rows_per_block(rows.shape[1])
    if row_importance is not None:
        block = row_importance.block_rows(block)
    weighted = row_importance is not None
    if params.refine_rounds:
        refinement = compiled_refinement(block, rows.shape[1], params.refine_rounds, num_bits, weighted)
        scale = refinement.run(rows, np.stack([scale, floor.data], axis=1), row_importance)[0]
    stored = stored_symmetric_scale(scale)
    rtn_stored = stored_symmetric_scale(rtn_scale.data) if params.rtn_guard else stored
    guard = compiled_guard(block, rows.shape[1], num_bits, weighted)
    (hqq_error, rtn_error), code_rows = guard.run_with_codes(rows, np.stack([stored, rtn_stored], 1), row_importance)
    stored = np.where(hqq_error <= rtn_error, stored, rtn_stored)
    codes = Tensor(runtime.from_rows(code_rows, weight.shape, axis))
    return CompressedWeight(contiguous(codes), contiguous(Tensor(runtime.from_rows(stored, shape, axis))), None)


def stored_symmetric_scale(scale: np.ndarray) -> np.ndarray:
    """A signed scale as written: its magnitude rounded to f16 (``conversion.to_symmetric_compressed_weight``)."""
    magnitude = round_to_f16(fns.abs(Tensor(scale)), F16_TINY, F16_MAX)
    return signed_magnitude(Tensor(scale), magnitude).data


def row_extremes(rows: np.ndarray) -> np.ndarray:
    """Per row the minimum, maximum and sum (non-finite when a weight is), ``[3, N]``, compiled."""
    extremes = np.empty((3, rows.shape[0]), dtype=np.float32)
    block = runtime.rows_per_block(rows.shape[1])
    runner = runtime.compiled_extremes(rows.shape[1])
    runner.run(rows.shape[0], lambda begin, scratch: [runtime.block_rows(rows, begin, block, 0.0, scratch)], [extremes])
    return extremes


class _ScaleRun(proximal.ProximalReplay):
    """The proximal scale loop of one weight: settling chunks of compiled iterations, the groups where the lp
    shrinkage may act redone with the reference's operations, then the reference's early-stop bookkeeping.
    With ``importance`` the errors and updates are importance-weighted."""

    def __init__(
        self,
        rows: np.ndarray,
        extremes: np.ndarray,
        floor: np.ndarray,
        num_bits: int,
        params: HQQParameters,
        importance: refine.RowImportance | None = None,
    ) -> None:
        if importance is None:
            super().__init__(params, np.full(rows.shape[0], 1.0 / rows.shape[1]))
            block = runtime.rows_per_block(rows.shape[1])
        else:  # a group's error is its weighted sum over its importance total; the tensor's, over all totals
            totals = importance.table.astype(np.float64).sum(axis=1)[importance.group_of_row]
            super().__init__(params, 1.0 / totals, np.full(rows.shape[0], 1.0 / totals.sum()))
            block = importance.block_rows(runtime.rows_per_block(rows.shape[1]))
        self.rows = rows
        self.extremes = extremes
        self.floor = np.ascontiguousarray(floor, dtype=np.float32)
        self.num_bits = num_bits
        self.importance = importance
        self.sweep = compiled_scale_sweep(block, rows.shape[1], proximal.SETTLE_CHUNK, num_bits, importance is not None)

    def trajectories(self, start: np.ndarray, betas: list[float]) -> tuple[np.ndarray, np.ndarray]:
        """Scales ``[K + 1, N]`` and summed (weighted) |W - q * scale| ``[K, N]`` of ``K = len(betas)`` iterations."""

        def run_chunk(picked: slice | np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, None]:
            if isinstance(picked, slice):
                return (*self.sweep.run(self.rows, values, self.floor, self.importance), None)
            importance = None if self.importance is None else self.importance.subset(picked)
            rows = runtime.PickedRows(self.rows, picked)  # gathered a block at a time, into scratch buffers
            return (*self.sweep.run(rows, values, self.floor[picked], importance), None)

        scales, l1, _ = self.settling_trajectories(start, len(betas), run_chunk)
        redo = self.shrinkage_may_act(scales[:-1], start, betas)
        if redo.any():
            scales[:, redo], l1[:, redo] = self.reference_trajectories(np.flatnonzero(redo), start[redo], betas)
        return scales, l1

    def shrinkage_may_act(self, scales: np.ndarray, start: np.ndarray, betas: list[float]) -> np.ndarray:
        """Groups where, in some iteration, an element's error might exceed the shrinkage-free bound: at most
        half a step, or a clipped end's distance to its end code (the sign of the scale, which the loop keeps,
        says which end takes the negative codes)."""
        low, high = signed_levels(self.num_bits)
        magnitude = np.abs(scales)
        smallest, largest = magnitude.min(axis=0), magnitude.max(axis=0)
        w_min, w_max = np.abs(self.extremes[0]), np.abs(self.extremes[1])
        negative_end = np.where(start > 0.0, w_min, w_max)
        positive_end = np.where(start > 0.0, w_max, w_min)
        clipped = np.maximum(negative_end + low * smallest, positive_end - high * smallest)
        residual = np.maximum(0.5 * largest, clipped)
        return residual * (1.0 + SHRINK_MARGIN) > self.shrink_free_limit(betas)

    def reference_trajectories(
        self, groups: np.ndarray, start: np.ndarray, betas: list[float]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Scales ``[K + 1, G]`` and summed |error| ``[K, G]`` of the given groups, with the reference's operations
        (``solver.scale_proximal_step``), no early stop."""
        weight = Tensor(self.rows[groups])
        scale = Tensor(start[:, None].astype(np.float32))
        importance = None if self.importance is None else Tensor(self.importance.subset(groups).rows())
        scales, errors = [scale.data[:, 0]], []
        for beta in betas:
            error, scale = scale_proximal_step(weight, scale, 1, 1, self.num_bits, beta, self.params, importance)
            scales.append(scale.data[:, 0])
            errors.append(error.data[:, 0])
        return np.stack(scales), (np.stack(errors) / self.error_factor[groups]).astype(np.float32)


class CompiledScaleSweep:
    """The compiled hard-rounding scale iterations (``build_scale_sweep_model``) over blocks of rows."""

    def __init__(self, model: ov.Model, rows_per_block: int, unroll: int) -> None:
        self.rows = refine.CompiledRows(model, rows_per_block, weighted=len(model.inputs) > 2)
        self.unroll = unroll

    def run(
        self,
        rows: np.ndarray | runtime.PickedRows,
        scale: np.ndarray,
        floor: np.ndarray,
        importance: refine.RowImportance | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Scales ``[unroll + 1, N]`` (row 0: ``scale``) and summed (weighted) |W - q * scale| ``[unroll, N]``."""
        values = self.rows.run(rows, np.stack([scale, floor], axis=1), importance)
        return np.concatenate([scale[None].astype(np.float32), values[: self.unroll]]), values[self.unroll :]


@lru_cache(maxsize=CACHE_SIZE)
def compiled_scale_sweep(block: int, group_size: int, unroll: int, num_bits: int, weighted: bool) -> CompiledScaleSweep:
    """The compiled scale sweep for blocks of ``block`` rows of one configuration (LRU cached)."""
    return CompiledScaleSweep(build_scale_sweep_model(block, group_size, unroll, num_bits, weighted), block, unroll)


@lru_cache(maxsize=CACHE_SIZE)
def compiled_refinement(block: int, group_size: int, rounds: int, num_bits: int, weighted: bool) -> refine.CompiledRows:
    """The compiled symmetric refinement for blocks of ``block`` rows (LRU cached)."""
    model = build_refinement_model(block, group_size, rounds, num_bits, weighted)
    return refine.CompiledRows(model, block, weighted)


@lru_cache(maxsize=CACHE_SIZE)
def compiled_guard(block: int, group_size: int, num_bits: int, weighted: bool) -> refine.CompiledRows:
    """The compiled stored-error comparison of two symmetric scales (LRU cached)."""
    return refine.CompiledRows(build_guard_model(block, group_size, num_bits, weighted), block, weighted)


class _ScaleGraph(refine.RowMeans):
    """The symmetric operations on one block ``[rows, R]`` of weights, as OpenVINO nodes."""

    def __init__(self, weight: ov.Node, importance: ov.Node | None, num_bits: int) -> None:
        super().__init__(weight, importance)
        self.low, self.high = signed_levels(num_bits)
        self.zero = opset.constant(np.float32(0.0))

    def codes(self, scale: ov.Node) -> ov.Node:
        """``integer.symmetric_codes``: ``clip(round(W / scale), -2^(b-1), 2^(b-1) - 1)``."""
        return opset.clamp(opset.round(runtime.true_divide(self.weight, scale), "half_to_even"), self.low, self.high)

    def least_squares_scale(self, codes: ov.Node, scale: ov.Node, floor: ov.Node) -> ov.Node:
        """``integer.least_squares_symmetric_scale`` against the weight (invalid updates keep ``scale``), then
        ``|scale|`` floored (a zero floor leaves it)."""
        numerator = self.mean(opset.multiply(codes, self.weight))
        denominator = self.mean(opset.multiply(codes, codes))
        valid = opset.logical_and(
            opset.greater(denominator, self.zero), opset.greater(opset.multiply(numerator, scale), self.zero)
        )
        ratio = opset.divide(numerator, opset.select(valid, denominator, opset.constant(np.float32(1.0))))
        update = opset.select(valid, ratio, scale)
        magnitude = opset.maximum(opset.abs(update), floor)
        return opset.select(opset.less(update, self.zero), opset.negative(magnitude), magnitude)

    def squared_error(self, codes: ov.Node, scale: ov.Node) -> ov.Node:
        """Per-row (weighted) mean of ``(q * scale - W)^2``."""
        diff = opset.subtract(opset.multiply(codes, scale), self.weight)
        return self.mean(opset.multiply(diff, diff))


def build_scale_sweep_model(rows: int, group_size: int, unroll: int, num_bits: int, weighted: bool) -> ov.Model:
    """``unroll`` hard-rounding iterations of the symmetric proximal loop for a ``[rows, group_size]`` block.

    Per-row input columns: the scale and the floor of its magnitude (0: none); with ``weighted``, the importance
    of every element. Output ``[2 * unroll, rows]``: the scale after every iteration, then the summed (weighted)
    |W - q * scale| of every iteration.
    """
    parameters, weight, (scale, floor), importance = refine.block_parameters(rows, group_size, 2, weighted)
    graph = _ScaleGraph(weight, importance, num_bits)
    scales, l1 = [], []
    for _ in range(unroll):
        codes = graph.codes(scale)
        error = opset.abs(opset.subtract(weight, opset.multiply(codes, scale)))
        l1.append(opset.reduce_sum(graph.weighted(error), graph.axis, keep_dims=True))
        scale = graph.least_squares_scale(codes, scale, floor)
        scales.append(scale)
    return ov.Model([refine.rows_result(scales + l1, rows)], parameters, "hqq_scale_sweep")


def build_refinement_model(rows: int, group_size: int, rounds: int, num_bits: int, weighted: bool) -> ov.Model:
    """All rounds of ``integer.refine_symmetric_scale`` for a ``[rows, group_size]`` block.

    Per-row input columns: the scale and the floor of its magnitude (0: none). Output ``[1, rows]``: the scale of
    the best round.
    """
    parameters, weight, (scale, floor), importance = refine.block_parameters(rows, group_size, 2, weighted)
    graph = _ScaleGraph(weight, importance, num_bits)
    magnitude = opset.maximum(opset.abs(scale), floor)
    scale = opset.select(opset.less(scale, graph.zero), opset.negative(magnitude), magnitude)
    codes = graph.codes(scale)
    best, best_error = scale, graph.squared_error(codes, scale)
    for _ in range(rounds):
        scale = graph.least_squares_scale(codes, scale, floor)
        codes = graph.codes(scale)
        error = graph.squared_error(codes, scale)
        better = opset.less(error, best_error)
        best, best_error = opset.select(better, scale, best), opset.select(better, error, best_error)
    return ov.Model([refine.rows_result([best], rows)], parameters, "hqq_symmetric_refinement")


def build_guard_model(rows: int, group_size: int, num_bits: int, weighted: bool) -> ov.Model:
    """The (weighted) mean squared error of two stored symmetric scales for a ``[rows, group_size]`` block, and the
    int8 codes of the scale each row keeps (the first where its error is not larger)."""
    parameters, weight, (first, second), importance = refine.block_parameters(rows, group_size, 2, weighted)
    graph = _ScaleGraph(weight, importance, num_bits)
    first_codes, second_codes = graph.codes(first), graph.codes(second)
    first_error, second_error = graph.squared_error(first_codes, first), graph.squared_error(second_codes, second)
    codes = opset.select(opset.less_equal(first_error, second_error), first_codes, second_codes)
    errors = refine.rows_result([first_error, second_error], rows)
    return ov.Model([errors, opset.result(opset.convert(codes, ov.Type.i8))], parameters, "hqq_symmetric_guard")
