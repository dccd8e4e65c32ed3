"""Compiled OpenVINO implementations of what follows HQQ's proximal solver, and the dispatch to them.

``finish`` takes the solver's inverse scale and zero point and returns NNCF's ``CompressedWeight``:
the least-squares refinement (``nncf_hqq.maths.core.refine_least_squares``), the values as stored (f16 scale, f16
or integer zero point) and the per-group RTN guard. ``finish_reference`` is the numpy reference of all three;
``finish_compiled`` runs the weight-sized work as OpenVINO models (same switch as the proximal fast path:
``NNCF_DISABLE_OPTIMIZED_COMPRESSION``).

Every step only ever needs one group's elements, so groups are laid out as rows ``[N, R]``:
- one model unrolls the refinement rounds for a block of rows (the block stays in the CPU caches for all of them)
  and also returns every row's minimum and maximum (NNCF's RTN parameters follow from them); each round reads the
  rounding residual ``r = codes - (W * s + z)`` once and keeps three per-row means (of ``r``, ``r^2`` and ``r``
  times the weight), from which both the error and the least-squares refit follow. With an integer zero point the
  rounds run in chunks, and the groups that have reached their least-squares fixed point leave after each chunk
  (``SettlingRefinement``);
- the f16 rounding of the stored values is done in numpy on the per-row parameters only (OpenVINO folds a
  f32 -> f16 -> f32 Convert pair away), and a second model returns the stored HQQ and RTN errors of every row
  and the codes of the parameters each row keeps (so the weight is never encoded again in numpy).
Blocks run on all cores through an ``AsyncInferQueue``. The importance of a row's elements is the importance of
its group of input channels, gathered per block, so no weight-sized importance array is ever built.
"""

from __future__ import annotations

import dataclasses
import functools
from functools import lru_cache

import numpy as np
import openvino as ov
from nncf.tensor import Tensor
from nncf.tensor import TensorBackend
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns
from openvino import opset13 as opset

from nncf_hqq._nncf import CompressedWeight
from nncf_hqq.kernels import runtime
from nncf_hqq.kernels.runtime import CACHE_SIZE
from nncf_hqq.maths.conversion import contiguous
from nncf_hqq.maths.conversion import encode
from nncf_hqq.maths.conversion import hqq_to_nncf
from nncf_hqq.maths.conversion import to_compressed_weight
from nncf_hqq.maths.core import F16_TINY
from nncf_hqq.maths.core import choose_per_group
from nncf_hqq.maths.core import levels_max
from nncf_hqq.maths.core import rescaled
from nncf_hqq.maths.core import rtn_scale_zero_point
from nncf_hqq.maths.core import rtn_scale_zero_point_for_range
from nncf_hqq.maths.core import stored_group_error
from nncf_hqq.maths.core import stored_parameters
from nncf_hqq.maths.core import unit_gain as solver_unit_gain
from nncf_hqq.maths.core import with_unit_gain as with_unit_gain_reference
from nncf_hqq.maths.solver import refine_scale_and_zero
from nncf_hqq.parameters import HQQParameters
from nncf_hqq.parameters import ZeroPointFormat

#: Evaluations of the refinement's chunks with an integer zero point, the last repeated (``refine_chunks``); after
#: each chunk the groups whose next candidate repeats their last one leave it (``SettlingRefinement``).
INTEGER_ZERO_CHUNKS = (4, 2)


#: Relative change below which a candidate of the refinement repeats the last one (``repeats``): 8 units in the
#: last place at 1.0, above the f32 rounding of the compiled rounds' candidates.
SETTLE_TOLERANCE = 2.0**-20


def finish(
    grouped: Tensor,
    inverse_scale: Tensor,
    zero: Tensor,
    axis: int,
    num_bits: int,
    params: HQQParameters,
    importance: Tensor | None = None,
    unit_gain: bool = False,
) -> CompressedWeight:
    """Refinement, storage and RTN guard after the proximal solver (see the module doc), compiled where possible.

    :param grouped: the grouped weight; ``inverse_scale`` and ``zero`` are the solver's (HQQ convention).
    :param importance: per-element weights broadcastable to ``grouped`` (size 1 on the dims they do not vary on).
    :param unit_gain: finally rescale every group to unit gain (``core.with_unit_gain``); the compiled path
        takes the sums it needs from the RTN guard's pass over the weight.
    """
    return runtime.guarded(
        fallback_reason(grouped, num_bits, importance, params),
        lambda: finish_compiled(grouped, inverse_scale, zero, axis, num_bits, params, importance, unit_gain),
        lambda: finish_reference(grouped, inverse_scale, zero, axis, num_bits, params, importance, unit_gain),
        "refinement and RTN guard",
    )


def is_integer_zero_point(params: HQQParameters) -> bool:
    return params.zero_point_format == ZeroPointFormat.INTEGER


def finish_reference(
    grouped: Tensor,
    inverse_scale: Tensor,
    zero: Tensor,
    axis: int,
    num_bits: int,
    params: HQQParameters,
    importance: Tensor | None = None,
    unit_gain: bool = False,
) -> CompressedWeight:
    """The numpy (any ``nncf.tensor`` backend) reference of ``finish``."""
    integer_zero_point = is_integer_zero_point(params)
    if params.refine_rounds or integer_zero_point:
        inverse_scale, zero = refine_scale_and_zero(
            grouped,
            inverse_scale,
            zero,
            axis,
            num_bits,
            params.refine_rounds,
            importance,
            integer_zero_point,
            params.preserve_extremes,
        )
    result = to_compressed_weight(grouped, *hqq_to_nncf(inverse_scale, zero), num_bits, integer_zero_point)
    if params.rtn_guard:
        rtn = to_compressed_weight(grouped, *rtn_scale_zero_point(grouped, axis, num_bits), num_bits, True)
        errors = (stored_group_error(grouped, c, axis, importance) for c in (result, rtn))
        result = choose_per_group(next(errors) <= next(errors), result, rtn)
    return with_unit_gain_reference(grouped, result, axis) if unit_gain else result


def fallback_reason(weight: Tensor, num_bits: int, importance: Tensor | None, params: HQQParameters) -> str | None:
    """Why the compiled path cannot be used for this call, or None when it can."""
    if importance is not None and importance.backend not in (TensorBackend.numpy, TensorBackend.ov):
        return f"{importance.backend.value} importance tensors are not handled"
    return runtime.tensor_fallback_reason(weight, num_bits)


def finish_compiled(
    grouped: Tensor,
    inverse_scale: Tensor,
    zero: Tensor,
    axis: int,
    num_bits: int,
    params: HQQParameters,
    importance: Tensor | None = None,
    unit_gain: bool = False,
) -> CompressedWeight:
    """The compiled ``finish`` itself (no dispatch); same contract as ``finish_reference``."""
    weight = Tensor(numpy_f32(grouped))
    axis = axis % weight.ndim
    shape = numpy_f32(inverse_scale).shape
    rows = runtime.as_rows(weight.data, axis)
    row_importance = None if importance is None else RowImportance.of(numpy_f32(importance), shape, axis)
    block = runtime.rows_per_block(rows.shape[1])
    if row_importance is not None:
        block = row_importance.block_rows(block)
    columns = np.stack([runtime.as_rows(numpy_f32(t), axis)[:, 0] for t in (inverse_scale, zero)], axis=1)
    integer_zero_point = is_integer_zero_point(params)
    weighted = row_importance is not None
    refinement = SettlingRefinement(
        block, rows.shape[1], params.refine_rounds, num_bits, integer_zero_point, weighted, params.preserve_extremes
    )
    s, z, w_min, w_max = refinement.run(rows, columns, row_importance)
    # NaN/Inf weights (NaN makes the solver's parameters NaN; OpenVINO's min/max skip it): the reference's result
    if not (np.isfinite(columns).all() and np.isfinite(w_min).all() and np.isfinite(w_max).all()):
        return finish_reference(grouped, inverse_scale, zero, axis, num_bits, params, importance, unit_gain)
    scale, zero_point = stored_parameters(Tensor(1.0 / s), Tensor(z), num_bits, integer_zero_point)
    code_rows, gain = None, None
    if params.rtn_guard:
        rtn_range = rtn_scale_zero_point_for_range(Tensor(w_min), Tensor(w_max), num_bits)
        rtn_scale, rtn_zero_point = stored_parameters(*rtn_range, num_bits, True)
        stacked = np.stack([scale.data, zero_point.data, rtn_scale.data, rtn_zero_point.data], axis=1)
        guard = compiled_guard(block, rows.shape[1], num_bits, weighted)
        (hqq_error, rtn_error, energy, cross), code_rows = guard.run_with_codes(rows, stacked, row_importance)
        use_hqq = Tensor(hqq_error <= rtn_error)
        scale = fns.where(use_hqq, scale, rtn_scale)
        zero_point = fns.where(use_hqq, zero_point, rtn_zero_point)
        if unit_gain:  # from the guard's sums over the kept codes, as ``with_unit_gain_compiled`` computes them
            projection = scale.data.astype(np.float32) * cross
            gain = solver_unit_gain(Tensor(energy.astype(np.float64)), Tensor(projection.astype(np.float64)))
    scale = Tensor(runtime.from_rows(scale.data, shape, axis))
    zero_point = Tensor(runtime.from_rows(zero_point.data, shape, axis))
    if code_rows is not None:  # the guard's codes of the kept parameters
        codes = Tensor(runtime.from_rows(code_rows, weight.shape, axis))
    else:
        codes = encode(weight, scale, zero_point, num_bits)
    if integer_zero_point:
        zero_point = zero_point.astype(TensorDataType.int32)
    result = CompressedWeight(contiguous(codes), contiguous(scale), contiguous(zero_point))
    if gain is not None:
        return rescaled(result, Tensor(runtime.from_rows(gain.data.astype(np.float32), shape, axis)))
    return with_unit_gain(grouped, result, axis) if unit_gain else result


def with_unit_gain(grouped: Tensor, compressed: CompressedWeight, axis: int) -> CompressedWeight:
    """``core.with_unit_gain`` (its numpy reference), with the per-group sums computed by a compiled model."""
    return runtime.guarded(
        unit_gain_fallback_reason(grouped, compressed),
        lambda: with_unit_gain_compiled(grouped, compressed, axis),
        lambda: with_unit_gain_reference(grouped, compressed, axis),
        "unit gain",
    )


def unit_gain_fallback_reason(grouped: Tensor, compressed: CompressedWeight) -> str | None:
    """Why the compiled unit gain cannot be used for this weight, or None when it can."""
    codes = compressed.tensor
    if codes.backend != TensorBackend.numpy or codes.data.dtype not in (np.uint8, np.int8):
        return f"{codes.backend.value} {codes.dtype.value} codes are not handled"
    return runtime.tensor_fallback_reason(grouped, 8)


def with_unit_gain_compiled(grouped: Tensor, compressed: CompressedWeight, axis: int) -> CompressedWeight:
    """The compiled ``with_unit_gain`` itself (no dispatch)."""
    weight = numpy_f32(grouped)
    axis = axis % weight.ndim
    rows, codes = runtime.as_rows(weight, axis), runtime.as_rows(compressed.tensor.data, axis)
    shape = compressed.scale.shape
    scale = runtime.as_rows(numpy_f32(compressed.scale), axis)[:, 0]
    zero = np.zeros_like(scale)
    if compressed.zero_point is not None:
        zero = runtime.as_rows(numpy_f32(compressed.zero_point), axis)[:, 0]
    per_row = np.stack([scale, zero], axis=1)
    block = runtime.rows_per_block(rows.shape[1])
    runner = compiled_gain_sums(block, rows.shape[1], codes.dtype.name)
    sums = np.empty((2, rows.shape[0]), dtype=np.float32)

    def inputs_at(begin: int, scratch: runtime.Scratch) -> list[np.ndarray]:
        arrays = ((rows, 0.0), (codes, 0), (per_row, 1.0))
        return [runtime.block_rows(a, begin, block, fill, scratch) for a, fill in arrays]

    runner.run(rows.shape[0], inputs_at, [sums])
    factor = solver_unit_gain(Tensor(sums[0].astype(np.float64)), Tensor(sums[1].astype(np.float64)))
    return rescaled(compressed, Tensor(runtime.from_rows(factor.data.astype(np.float32), shape, axis)))


@lru_cache(maxsize=CACHE_SIZE)
def compiled_gain_sums(block: int, group_size: int, codes_dtype: str) -> runtime.BlockRunner:
    """A compiled model of every row's ``<W, W>`` and ``<W_hat, W> = scale * <q - zero_point, W>`` ``[2, rows]``
    for blocks of ``[block, group_size]`` weights, codes (``codes_dtype``) and per-row scale and zero point."""
    weight = opset.parameter([block, group_size], ov.Type.f32, name="weight")
    codes = opset.parameter([block, group_size], ov.Type(np.dtype(codes_dtype)), name="codes")
    per_row = opset.parameter([block, 2], ov.Type.f32, name="per_row")
    scale, zero = opset.split(per_row, opset.constant(np.int64(1)), 2).outputs()
    axis = opset.constant(np.array([1], dtype=np.int64))
    centred = opset.subtract(opset.convert(codes, ov.Type.f32), zero)
    energy = opset.reduce_sum(opset.multiply(weight, weight), axis, keep_dims=True)
    projection = opset.multiply(scale, opset.reduce_sum(opset.multiply(centred, weight), axis, keep_dims=True))
    model = ov.Model([rows_result([energy, projection], block)], [weight, codes, per_row], "unit_gain_sums")
    return runtime.BlockRunner(model, block)


def numpy_f32(tensor: Tensor) -> np.ndarray:
    """The data of a numpy or OpenVINO tensor as a float32 numpy array."""
    data = tensor.as_numpy_tensor().data if tensor.backend == TensorBackend.ov else tensor.data
    return np.asarray(data, dtype=np.float32)


@dataclasses.dataclass(eq=False)  # hashed by identity (``_tiled`` caches per instance)
class RowImportance:
    """The importance of the weight's ``[N, R]`` rows without a weight-sized array: the distinct importance rows
    ``table`` ``[M, R]`` and the index of every weight row's importance row ``group_of_row`` ``[N]``."""

    table: np.ndarray
    group_of_row: np.ndarray

    @classmethod
    def of(cls, importance: np.ndarray, keepdims_shape: tuple[int, ...], axis: int) -> RowImportance:
        """:param importance: broadcastable to the grouped weight (size 1 on the dims it does not vary on).
        :param keepdims_shape: the grouped weight's shape with ``axis`` reduced to 1."""
        table = runtime.as_rows(importance, axis)
        ids = np.arange(table.shape[0]).reshape((*importance.shape[:axis], 1, *importance.shape[axis + 1 :]))
        return cls(table, runtime.as_rows(np.broadcast_to(ids, keepdims_shape), axis)[:, 0])

    @functools.cached_property
    def periodic(self) -> bool:
        """Whether row ``n`` has importance row ``n % M`` (a weight grouped along its last axis)."""
        period = self.table.shape[0]
        return bool(np.array_equal(self.group_of_row, np.arange(self.group_of_row.size) % period))

    def block_rows(self, rows: int) -> int:
        """A block size near ``rows`` for which every block of a periodic layout has the same importance."""
        period = self.table.shape[0]
        return max(period, rows // period * period) if self.periodic else rows

    def block(self, begin: int, count: int, scratch: runtime.Scratch | None = None) -> np.ndarray:
        """The importance rows ``[count, R]`` of the block starting at row ``begin`` (ones past the last row), in a
        scratch buffer when given."""
        if self.periodic and begin % self.table.shape[0] == 0 and count % self.table.shape[0] == 0:
            return self._tiled(count)
        ids = self.group_of_row[begin : begin + count]
        block = runtime.new_array((count, self.table.shape[1]), np.dtype(np.float32), scratch)
        np.take(self.table, ids, axis=0, out=block[: ids.size])
        block[ids.size :] = 1.0
        return block

    def subset(self, rows: np.ndarray) -> RowImportance:
        """The importance of the given weight rows only (in that order)."""
        return RowImportance(self.table, self.group_of_row[rows])

    def rows(self) -> np.ndarray:
        """The importance of every row ``[N, R]`` (weight-sized: for a few rows only)."""
        return np.ascontiguousarray(self.table[self.group_of_row], dtype=np.float32)

    @functools.lru_cache(maxsize=1)  # noqa: B019 (one small array per instance, freed with it)
    def _tiled(self, count: int) -> np.ndarray:
        return np.ascontiguousarray(np.tile(self.table, (count // self.table.shape[0], 1)), dtype=np.float32)


class CompiledRows:
    """A compiled model over blocks of ``rows_per_block`` rows, run on all cores.

    Its inputs are the weight rows ``[B, R]``, per-row parameters ``[B, k]`` and, when ``weighted``, the
    importance rows ``[B, R]``; its first output is ``[m, B]`` (``m`` values per row), an optional second one codes
    ``[B, R]`` (uint8 or int8).
    """

    def __init__(self, model: ov.Model, rows_per_block: int, weighted: bool) -> None:
        self.runner = runtime.BlockRunner(model, rows_per_block, per_element=(False, True))
        self.rows_per_block = rows_per_block
        self.weighted = weighted
        self.outputs = self.runner.output_rows(0)
        self.emits_codes = len(self.runner.compiled.outputs) > 1
        #: Element type of the codes output (uint8 or int8).
        self.codes_dtype = self.runner.compiled.output(1).get_element_type().to_dtype() if self.emits_codes else None

    def run(
        self, rows: np.ndarray | runtime.PickedRows, columns: np.ndarray, importance: RowImportance | None
    ) -> np.ndarray:
        """The model's per-row values ``[m, N]`` for weight rows ``[N, R]`` and per-row parameters ``[N, k]``."""
        return self._run(rows, columns, importance)[0]

    def run_with_codes(
        self, rows: np.ndarray, columns: np.ndarray, importance: RowImportance | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``run``, plus the model's second output, the codes ``[N, R]`` (for a model that has one)."""
        result, codes = self._run(rows, columns, importance)
        if codes is None:
            msg = "This compiled model has no codes output."
            raise ValueError(msg)
        return result, codes

    def _run(
        self, rows: np.ndarray | runtime.PickedRows, columns: np.ndarray, importance: RowImportance | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        n, c = rows.shape[0], self.rows_per_block
        result = np.empty((self.outputs, n), dtype=np.float32)
        codes = np.empty(rows.shape, dtype=self.codes_dtype) if self.emits_codes else None
        columns = np.ascontiguousarray(columns, dtype=np.float32)

        def inputs_at(begin: int, scratch: runtime.Scratch) -> list[np.ndarray]:
            inputs = [runtime.block_rows(a, begin, c, fill, scratch) for a, fill in ((rows, 0.0), (columns, 1.0))]
            if self.weighted and importance is not None:
                inputs.append(importance.block(begin, c, scratch))
            return inputs

        self.runner.run(n, inputs_at, [result] if codes is None else [result, codes])
        return result, codes


@lru_cache(maxsize=CACHE_SIZE)
def compiled_refinement(
    block: int,
    group_size: int,
    evaluations: int,
    num_bits: int,
    integer_zero: bool,
    weighted: bool,
    preserve_extremes: bool,
    first: bool = True,
) -> CompiledRows:
    """A compiled chunk of the refinement (``build_refinement_model``) for blocks of ``block`` rows (LRU cached)."""
    q_max = levels_max(num_bits)
    model = build_refinement_model(
        block, group_size, evaluations, q_max, integer_zero, weighted, preserve_extremes, first
    )
    return CompiledRows(model, block, weighted)


class SettlingRefinement:
    """The refinement's ``rounds + 1`` evaluations (the incoming candidate and one per round) in chunks
    (``refine_chunks``); after each chunk the groups whose next candidate repeats their last one (``repeats``)
    leave it.

    Why a group can leave: the next candidate is the least-squares ``(s, z)`` of the last candidate's codes. When it
    repeats the last candidate, it has the same codes (but for an element on a rounding tie), so every later round
    computes the same candidate again and the group's best iterate (by error) stays what it is. The compiled rounds
    compute the candidates from moments of the rounding residual, so a repeated candidate agrees with the last one
    up to f32 rounding, not bit for bit: ``SETTLE_TOLERANCE`` is well above that rounding (measured: 4.5e-7 of
    ``s``, 2e-6 of ``z``) and well below a typical move of the codes (one code of a 128-element group moves ``z``
    by about ``1 / 128``). A group that leaves keeps
    its best iterate; the unchunked refinement would have evaluated its repeats and kept one of them only where
    their errors differ in the last f32 bits. A group that stays computes what the unchunked refinement computes, up
    to f32 rounding (OpenVINO may fuse the per-row operations of the two graphs differently).

    The first chunk also returns every row's statistics (extremes, weight mean and spread, importance total);
    later chunks take them as inputs and read only the rows still moving (``runtime.PickedRows``).
    """

    def __init__(
        self,
        block: int,
        group_size: int,
        rounds: int,
        num_bits: int,
        integer_zero: bool,
        weighted: bool,
        preserve_extremes: bool,
        chunks: tuple[int, ...] | None = None,
    ) -> None:
        """:param chunks: evaluations of the first chunks, the last one repeated (default ``refine_chunks``);
        ``(rounds + 1,)`` or more: one chunk, no settling (the unchunked refinement)."""
        self.evaluations = rounds + 1
        self.chunks = refine_chunks(integer_zero, rounds) if chunks is None else chunks
        self.q_max = levels_max(num_bits)
        self.config = (block, group_size, num_bits, integer_zero, weighted, preserve_extremes)
        #: Rows computed by each chunk, and the evaluations each row got (``run`` fills them; for tests).
        self.chunk_rows: list[int] = []
        self.evaluated = np.zeros(0, dtype=np.int64)

    def model(self, evaluations: int, first: bool) -> CompiledRows:
        return compiled_refinement(*self.config[:2], evaluations, *self.config[2:], first)

    def run(
        self, rows: np.ndarray, columns: np.ndarray, importance: RowImportance | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every row's best inverse scale and zero point and its minimum and maximum ``[N]``, for weight rows
        ``[N, R]`` and the solver's inverse scale and zero point ``[N, 2]``."""
        count = min(self.chunks[0], self.evaluations)
        out = self.model(count, first=True).run(rows, columns, importance)
        self.chunk_rows = [rows.shape[0]]
        self.evaluated = np.full(rows.shape[0], count)
        best, candidates, statistics = out[:3], out[3:7], out[7:]
        active = np.arange(rows.shape[0])
        while count < self.evaluations:
            active = active[~repeats(candidates[:, active], self.q_max)]
            if active.size == 0:
                break
            chunk = min(self.chunks[min(len(self.chunk_rows), len(self.chunks) - 1)], self.evaluations - count)
            state = np.concatenate([candidates[:2, active], best[:, active], statistics[:, active]]).T
            picked = None if importance is None else importance.subset(active)
            out = self.model(chunk, first=False).run(runtime.PickedRows(rows, active), state, picked)
            best[:, active], candidates[:, active] = out[:3], out[3:7]
            self.chunk_rows.append(active.size)
            self.evaluated[active] += chunk
            count += chunk
        return best[0], best[1], statistics[0], statistics[1]


def refine_chunks(integer_zero: bool, rounds: int) -> tuple[int, ...]:
    """The chunks of the refinement's evaluations (``SettlingRefinement``): with an integer zero point (only the
    scale moves) ``INTEGER_ZERO_CHUNKS``; with a float one, all in one chunk. Measured on a 4096x4096 Student-t
    weight (g128): after 1, 2, 3 and 4 rounds 19%, 38%, 55% and 68% of the float zero point's groups have settled,
    too few for the evaluations saved to pay for reading the other rows again (no gain in CPU time at any
    schedule tried); with an integer zero point 67% after 2 rounds and 84% after 3 (docs/research-log.md)."""
    return INTEGER_ZERO_CHUNKS if integer_zero else (rounds + 1,)


def repeats(candidates: np.ndarray, q_max: float) -> np.ndarray:
    """Whether each row's next candidate ``(s, z)`` repeats its last one (``candidates``: next ``s``, next ``z``,
    last ``s``, last ``z``, ``[4, N]``) up to ``SETTLE_TOLERANCE``: of ``|s|``, and of ``|z| + q_max`` for the zero
    point (in code units). A non-finite candidate never repeats."""
    next_s, next_z, last_s, last_z = candidates
    with np.errstate(invalid="ignore"):
        same_s = np.abs(next_s - last_s) <= SETTLE_TOLERANCE * np.abs(last_s)
        same_z = np.abs(next_z - last_z) <= SETTLE_TOLERANCE * (np.abs(last_z) + q_max)
    return same_s & same_z


@lru_cache(maxsize=CACHE_SIZE)
def compiled_guard(block: int, group_size: int, num_bits: int, weighted: bool) -> CompiledRows:
    """The compiled stored-error comparison for blocks of ``block`` rows (LRU cached)."""
    return CompiledRows(build_guard_model(block, group_size, levels_max(num_bits), weighted), block, weighted)


def block_parameters(
    rows: int, group_size: int, columns: int, weighted: bool
) -> tuple[list[ov.Node], ov.Node, list[ov.Node], ov.Node | None]:
    """The inputs of a ``CompiledRows`` model: the parameters, the weight, the per-row columns (split, each
    ``[rows, 1]``) and the importance (or None)."""
    weight = opset.parameter([rows, group_size], ov.Type.f32, name="weight")
    per_row = opset.parameter([rows, columns], ov.Type.f32, name="per_row")
    parameters = [weight, per_row]
    importance = None
    if weighted:
        importance = opset.parameter([rows, group_size], ov.Type.f32, name="importance")
        parameters.append(importance)
    split = opset.split(per_row, opset.constant(np.int64(1)), columns)
    return parameters, weight, [split.output(i) for i in range(columns)], importance


def rows_result(values: list[ov.Node], rows: int) -> ov.Node:
    """``[rows, 1]`` values to one ``[len(values), rows]`` result."""
    shape = opset.constant(np.array([1, rows], dtype=np.int64))
    return opset.result(opset.concat([opset.reshape(v, shape, special_zero=False) for v in values], 0))


def build_refinement_model(
    rows: int,
    group_size: int,
    evaluations: int,
    q_max: float,
    integer_zero: bool,
    weighted: bool,
    preserve_extremes: bool = False,
    first: bool = True,
) -> ov.Model:
    """A chunk of ``evaluations`` evaluations of the refinement for a ``[rows, group_size]`` block, mirroring
    ``refine_least_squares``: each evaluates a candidate ``(s, z)`` (its error; the best so far kept) and computes
    the next one, the least-squares ``(s, z)`` of its codes.

    ``first``: per-row input columns the solver's inverse scale and zero point; the zero point is rounded (integer
    zero point) and the scale projected (``preserve_extremes``) before the first evaluation, and the row
    statistics are computed. Otherwise the columns are the next candidate ``(s, z)``, the best ``(s, z)`` and its
    error, then the row statistics (``ROW_STATISTICS``, as the first chunk returned them).
    Output ``[m, rows]``: the best ``(s, z)`` and its error, the next candidate ``(s, z)``, the last evaluated
    ``(s, z)``, then, from the first chunk only, the row statistics.
    """
    statistics = len(ROW_STATISTICS) - (0 if weighted else 1)
    columns = 2 if first else 5 + statistics
    parameters, weight, inputs, importance = block_parameters(rows, group_size, columns, weighted)
    s, z = inputs[:2]
    given = None if first else RowStatistics(*inputs[5:])
    graph = RefinementGraph(weight, importance, q_max, given)

    def project(s: ov.Node, z: ov.Node) -> ov.Node:
        return graph.cap_to_extremes(s, z) if preserve_extremes else s

    if first:
        if integer_zero:
            z = opset.clamp(opset.round(z, "half_to_even"), 0.0, q_max)
        s = project(s, z)
        best_s, best_z, best_error = s, z, None
    else:
        best_s, best_z, best_error = inputs[2:5]
    last_s, last_z = s, z
    for _ in range(evaluations):
        moments = graph.residual_moments(s, z, uncentred=integer_zero)
        if best_error is None:
            best_error = moments.error
        else:
            better = opset.less(moments.error, best_error)
            best_s, best_z = opset.select(better, s, best_s), opset.select(better, z, best_z)
            best_error = opset.select(better, moments.error, best_error)
        last_s, last_z = s, z
        s, z = graph.scale_for_zero(moments) if integer_zero else graph.scale_and_zero(moments)
        s = project(s, z)
    outputs = [best_s, best_z, best_error, s, z, last_s, last_z]
    if first:
        outputs += graph.statistics(uncentred=integer_zero).columns()
    return ov.Model([rows_result(outputs, rows)], parameters, "hqq_refinement")


def build_guard_model(rows: int, group_size: int, q_max: float, weighted: bool) -> ov.Model:
    """The (weighted) mean squared error of two stored parameter sets for a ``[rows, group_size]`` block, the
    codes of the set each row keeps, and the sums ``unit_gain`` needs for them.

    Per-row input columns: scale and zero point of the first set, then of the second (NNCF's convention, as
    stored). Outputs: ``[4, rows]``, the error of each set, like ``core.stored_group_error``, then the
    (unweighted) ``<W, W>`` and ``<q - zero_point, W>`` of the kept set; uint8 codes ``[rows, group_size]``
    (``conversion.encode``) of the first set where its error is not larger, else of the second.
    """
    parameters, weight, columns, importance = block_parameters(rows, group_size, 4, weighted)
    graph = RefinementGraph(weight, importance, q_max)
    (first, first_error), (second, second_error) = (graph.stored_codes_and_error(*columns[i : i + 2]) for i in (0, 2))
    keep_first = opset.less_equal(first_error, second_error)
    codes = opset.select(keep_first, first, second)
    centred = opset.subtract(codes, opset.select(keep_first, columns[1], columns[3]))
    axis = opset.constant(np.array([1], dtype=np.int64))
    energy = opset.reduce_sum(opset.multiply(weight, weight), axis, keep_dims=True)
    cross = opset.reduce_sum(opset.multiply(centred, weight), axis, keep_dims=True)
    per_row = rows_result([first_error, second_error, energy, cross], rows)
    return ov.Model([per_row, opset.result(opset.convert(codes, ov.Type.u8))], parameters, "hqq_guard")


@dataclasses.dataclass(frozen=True)
class _Moments:
    """Per-row statistics of one candidate ``(s, z)``: means of the rounding residual ``r`` (code units), of
    ``r^2`` and of ``r`` times the (centred, or plain) weight, and the weight-domain squared error ``E[r^2] / s^2``."""

    s: ov.Node
    z: ov.Node
    mean_r: ov.Node
    mean_rr: ov.Node
    mean_rw: ov.Node
    error: ov.Node


#: The per-row statistics the refinement's first chunk returns and later chunks take (``RowStatistics``).
ROW_STATISTICS = ("w_min", "w_max", "mean_weight", "spread", "total")


@dataclasses.dataclass(frozen=True)
class RowStatistics:
    """Per-row ``[rows, 1]`` statistics of a block that every refinement round uses: the extremes, the (weighted)
    mean of the weight, its spread (the variance about that mean, or with an integer zero point the mean square)
    and the importance's sum (None when unweighted)."""

    w_min: ov.Node | ov.Output
    w_max: ov.Node | ov.Output
    mean_weight: ov.Node | ov.Output
    spread: ov.Node | ov.Output
    total: ov.Node | ov.Output | None = None

    def columns(self) -> list[ov.Node | ov.Output]:
        """The statistics in ``ROW_STATISTICS``'s order (without ``total`` when unweighted)."""
        values = [getattr(self, name) for name in ROW_STATISTICS]
        return [value for value in values if value is not None]


class RowMeans:
    """Per-row (importance-weighted) means over one block ``[rows, R]``, as OpenVINO nodes.

    :param total: the importance's per-row sum when already known (else computed)."""

    def __init__(self, weight: ov.Node, importance: ov.Node | None, total: ov.Node | ov.Output | None = None) -> None:
        self.weight = weight
        self.importance = importance
        self.axis = opset.constant(np.array([1], dtype=np.int64))
        if importance is not None and total is None:
            total = opset.reduce_sum(importance, self.axis, keep_dims=True)
        self.total = None if importance is None else total

    def mean(self, x: ov.Node) -> ov.Node:
        """Per-row (weighted) mean, like ``core.weighted_mean``."""
        return self.normalised_sum(self.weighted(x))

    def normalised_sum(self, x: ov.Node) -> ov.Node:
        """Per-row mean of ``x``, or, when weighted, the sum of ``x`` (already times the importance) over the
        importance's sum."""
        if self.importance is None:
            return opset.reduce_mean(x, self.axis, keep_dims=True)
        return opset.divide(opset.reduce_sum(x, self.axis, keep_dims=True), self.total)

    def weighted(self, x: ov.Node) -> ov.Node:
        return x if self.importance is None else opset.multiply(x, self.importance)


class RefinementGraph(RowMeans):
    """The operations of ``refine_least_squares`` on one block, as OpenVINO nodes.

    :param given: the block's row statistics when already known (a later chunk of the refinement), else computed.
    """

    def __init__(
        self, weight: ov.Node, importance: ov.Node | None, q_max: float, given: RowStatistics | None = None
    ) -> None:
        super().__init__(weight, importance, None if given is None else given.total)
        self.q_max = q_max
        self.given = given
        if given is None:
            self.w_min = opset.reduce_min(weight, self.axis, keep_dims=True)
            self.w_max = opset.reduce_max(weight, self.axis, keep_dims=True)
        else:
            self.w_min, self.w_max = given.w_min, given.w_max

    def statistics(self, uncentred: bool) -> RowStatistics:
        """The row statistics, with the spread of the centred rounds (the variance) or of the ``uncentred`` ones
        (the mean square)."""
        spread = self.weight_power if uncentred else self.weight_variance
        return RowStatistics(self.w_min, self.w_max, self.mean_weight, spread, self.total)

    def cap_to_extremes(self, s: ov.Node, z: ov.Node) -> ov.Node:
        """``core.cap_inverse_scale_to_extremes``: the largest ``s`` (up to the given one) that keeps the row's
        minimum and maximum within half a step of the code range."""
        zero, no_cap = opset.constant(np.float32(0.0)), opset.constant(np.float32(1.0 / F16_TINY))
        one = opset.constant(np.float32(1.0))
        positive, negative = opset.greater(self.w_max, zero), opset.less(self.w_min, zero)
        top = opset.subtract(opset.constant(np.float32(self.q_max + 0.5)), z)
        upper = opset.select(positive, opset.divide(top, opset.select(positive, self.w_max, one)), no_cap)
        bottom = opset.add(z, opset.constant(np.float32(0.5)))
        lower = opset.select(
            negative, opset.divide(bottom, opset.select(negative, opset.negative(self.w_min), one)), no_cap
        )
        cap = opset.minimum(upper, lower)
        return opset.select(opset.greater(cap, zero), opset.minimum(s, cap), s)

    @functools.cached_property
    def mean_weight(self) -> ov.Node:
        return self.mean(self.weight) if self.given is None else self.given.mean_weight

    @functools.cached_property
    def centred_weight(self) -> ov.Node:
        return opset.subtract(self.weight, self.mean_weight)

    @functools.cached_property
    def weighted_centred_weight(self) -> ov.Node:
        return self.weighted(self.centred_weight)

    @functools.cached_property
    def weighted_weight(self) -> ov.Node:
        return self.weighted(self.weight)

    @functools.cached_property
    def weight_variance(self) -> ov.Node:
        if self.given is not None:
            return self.given.spread
        return self.normalised_sum(opset.multiply(self.weighted_centred_weight, self.centred_weight))

    @functools.cached_property
    def weight_power(self) -> ov.Node:
        if self.given is not None:
            return self.given.spread
        return self.normalised_sum(opset.multiply(self.weighted_weight, self.weight))

    def residual_moments(self, s: ov.Node, z: ov.Node, uncentred: bool) -> _Moments:
        """The rounding residual ``r = codes - (W * s + z)`` of the nearest codes, summarised per row (all the
        least-squares refit and the error need, so the codes themselves are never revisited)."""
        shifted = opset.add(opset.multiply(self.weight, s), z)
        residual = opset.subtract(opset.clamp(opset.round(shifted, "half_to_even"), 0.0, self.q_max), shifted)
        weighted = self.weighted(residual)
        mean_rr = self.normalised_sum(opset.multiply(weighted, residual))
        other = self.weighted_weight if uncentred else self.weighted_centred_weight
        return _Moments(
            s=s,
            z=z,
            mean_r=self.normalised_sum(weighted),
            mean_rr=mean_rr,
            mean_rw=self.normalised_sum(opset.multiply(residual, other)),
            error=opset.divide(mean_rr, opset.multiply(s, s)),
        )

    def stored_codes_and_error(self, scale: ov.Node, zero_point: ov.Node) -> tuple[ov.Node, ov.Node]:
        """Codes of NNCF-convention parameters, ``clip(round(W / scale + zp))`` (as ``conversion.encode``), and the
        error of the reconstruction ``(codes - zp) * scale``."""
        shifted = opset.add(runtime.true_divide(self.weight, scale), zero_point)
        codes = opset.clamp(opset.round(shifted, "half_to_even"), 0.0, self.q_max)
        diff = opset.subtract(opset.multiply(opset.subtract(codes, zero_point), scale), self.weight)
        return codes, self.mean(opset.multiply(diff, diff))

    def scale_and_zero(self, m: _Moments) -> tuple[ov.Node, ov.Node]:
        """``core.least_squares_scale_zero`` from the residual's moments: with ``codes = W * s + z + r``,
        ``cov(codes, W) = s var(W) + cov(r, W)`` and ``var(codes) = s^2 var(W) + 2 s cov(r, W) + var(r)``."""
        s_var = opset.multiply(m.s, self.weight_variance)
        covariance = opset.add(s_var, m.mean_rw)
        residual_variance = opset.subtract(m.mean_rr, opset.multiply(m.mean_r, m.mean_r))
        two_cov = opset.add(m.mean_rw, m.mean_rw)
        variance = opset.add(opset.multiply(m.s, opset.add(s_var, two_cov)), residual_variance)
        valid, slope = self.positive_ratio(covariance, variance)
        mean_codes = opset.add(opset.add(opset.multiply(m.s, self.mean_weight), m.z), m.mean_r)
        new_s = opset.select(valid, opset.divide(opset.constant(np.float32(1.0)), slope), m.s)
        new_z = opset.select(valid, opset.subtract(mean_codes, opset.divide(self.mean_weight, slope)), m.z)
        return new_s, new_z

    def scale_for_zero(self, m: _Moments) -> tuple[ov.Node, ov.Node]:
        """``integer.least_squares_scale_for_zero`` from the moments (``uncentred``): with ``codes - z = W * s + r``,
        ``<W, codes - z> = s <W, W> + <W, r>`` and ``<codes - z, codes - z> = s^2 <W, W> + 2 s <W, r> + <r, r>``."""
        s_power = opset.multiply(m.s, self.weight_power)
        numerator = opset.add(s_power, m.mean_rw)
        two_rw = opset.add(m.mean_rw, m.mean_rw)
        denominator = opset.add(opset.multiply(m.s, opset.add(s_power, two_rw)), m.mean_rr)
        valid, ratio = self.positive_ratio(denominator, numerator)
        return opset.select(valid, ratio, m.s), m.z

    @staticmethod
    def positive_ratio(numerator: ov.Node, denominator: ov.Node) -> tuple[ov.Node, ov.Node]:
        """``numerator / denominator`` where both are positive (and that mask); 1 elsewhere."""
        zero, one = opset.constant(np.float32(0.0)), opset.constant(np.float32(1.0))
        valid = opset.logical_and(opset.greater(numerator, zero), opset.greater(denominator, zero))
        return valid, opset.divide(opset.select(valid, numerator, one), opset.select(valid, denominator, one))
