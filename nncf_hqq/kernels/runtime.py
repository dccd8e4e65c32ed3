"""What every compiled kernel shares: the guard that dispatches to a compiled OpenVINO model or to the numpy
reference beside it, and the runner that streams a weight's groups through a compiled model in blocks of rows.

Groups are laid out as rows ``[N, R]`` (``as_rows``/``from_rows``); a compiled model processes a fixed block of
``rows_per_block`` rows per inference, and blocks run on all cores through an ``AsyncInferQueue``
(``BlockRunner``). Set NNCF's ``NNCF_DISABLE_OPTIMIZED_COMPRESSION`` (to any value, as NNCF reads it) to always
take the references.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from functools import cache
from functools import lru_cache
from typing import TypeVar

import numpy as np
import openvino as ov
from nncf.common.logging import nncf_logger
from nncf.tensor import Tensor
from nncf.tensor import TensorBackend
from nncf.tensor import TensorDataType
from openvino import opset13 as opset

#: NNCF's switch of its own compiled compression functions: set (to any value) it sends HQQ to the references too.
DISABLE_ENV = "NNCF_DISABLE_OPTIMIZED_COMPRESSION"


#: Bit widths handled (codes up to 255 are exact in f32).
SUPPORTED_BITS = range(1, 9)


#: Weight element types handled (the solver works in f32 either way).
SUPPORTED_DTYPES = (TensorDataType.float16, TensorDataType.bfloat16, TensorDataType.float32, TensorDataType.float64)


#: Elements per block of rows that one inference processes (1 MiB of f32): large enough that the per-inference
#: overhead does not dominate, small enough to stay in the CPU cache (block sizes measured: docs/research-log.md).
BLOCK_ELEMENTS = 256 * 1024


#: Compiled models each builder of a kernel keeps (an LRU cache per builder: one model per shape, bit width and
#: variant of the maths it compiles).
CACHE_SIZE = 16


_T = TypeVar("_T")


_LOGGED: set[str] = set()


_LOG_LOCK = threading.Lock()


def guarded(reason: str | None, compiled: Callable[[], _T], reference: Callable[[], _T], what: str) -> _T:
    """The guard in front of every compiled path: ``compiled()`` when ``reason`` (why it cannot be used) is None,
    ``reference()`` otherwise or when OpenVINO fails to compile or run it; the path taken is logged once."""
    if reason is None:
        try:
            result = compiled()
        except RuntimeError as error:  # OpenVINO compile/infer failures: the reference still works
            log_once(f"HQQ compiled {what} failed ({error}); using the reference.", warning=True)
        else:
            log_once(f"HQQ: using the compiled OpenVINO {what} (fast path).")
            return result
    else:
        log_once(f"HQQ: using the reference {what} ({reason}).")
    return reference()


def tensor_fallback_reason(weight: Tensor, num_bits: int) -> str | None:
    """Why no compiled path can handle this weight (or the environment switch is set), or None."""
    if os.environ.get(DISABLE_ENV) is not None:
        return f"{DISABLE_ENV} is set"
    if weight.backend not in (TensorBackend.numpy, TensorBackend.ov):
        return f"{weight.backend.value} tensors are not handled"
    if weight.dtype not in SUPPORTED_DTYPES:
        return f"weight dtype {weight.dtype.value} is not handled"
    if weight.size == 0:
        return "empty weight"
    if num_bits not in SUPPORTED_BITS:
        return f"num_bits={num_bits} is not handled"
    return None


def log_once(message: str, warning: bool = False) -> None:
    with _LOG_LOCK:
        if message in _LOGGED:
            return
        _LOGGED.add(message)
    if warning:
        nncf_logger.warning(message)
    else:
        nncf_logger.debug(message)


def as_rows(array: np.ndarray, axis: int) -> np.ndarray:
    """``[..., R, ...]`` with ``R`` on ``axis`` as a C-contiguous ``[N, R]`` (a view when ``axis`` is last)."""
    moved = np.moveaxis(array, axis, -1)
    return np.ascontiguousarray(moved).reshape(-1, array.shape[axis])


def from_rows(values: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray:
    """Inverse of ``as_rows``: per-group values ``[N]`` into the keepdims ``shape`` (size 1 on ``axis``), or
    whole rows ``[N, R]`` into ``shape``. Keeps the dtype; a view where the layout allows."""
    moved_shape = (*shape[:axis], *shape[axis + 1 :], shape[axis])
    return np.moveaxis(values.reshape(moved_shape), -1, axis)


class BlockRunner:
    """A compiled model run over blocks of ``rows_per_block`` rows on all cores (an ``AsyncInferQueue``).

    Output ``i`` is per row, ``[m, B]`` per block and ``[m, N]`` in all, or, where ``per_element[i]``, per
    element, ``[B, R]`` per block and ``[N, R]`` in all.
    """

    def __init__(self, model: ov.Model, rows_per_block: int, per_element: tuple[bool, ...] = ()) -> None:
        config = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "THROUGHPUT"}
        self.compiled = ov.Core().compile_model(model, "CPU", config)
        jobs = max(1, int(self.compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))
        self.queue = ov.AsyncInferQueue(self.compiled, jobs)
        self.rows_per_block = rows_per_block
        count = len(self.compiled.outputs)
        self.per_element = (tuple(per_element) + (False,) * count)[:count]
        self.lock = threading.Lock()

    def output_rows(self, index: int) -> int:
        """``m`` of a per-row output."""
        return int(self.compiled.output(index).get_partial_shape()[0].get_length())

    def run(self, n: int, inputs_at: Callable[[int, Scratch], list[np.ndarray]], outputs: list[np.ndarray]) -> None:
        """Fills ``outputs`` for ``n`` rows; ``inputs_at(begin, scratch)`` gives the inputs of the block at row
        ``begin`` (padded to a whole block; they must stay valid until the run ends, as they are shared, not
        copied, except those written into ``scratch``, the buffers of the request that will compute the block)."""
        block = self.rows_per_block
        scratch = [Scratch() for _ in range(len(self.queue))]

        def collect(request: ov.InferRequest, span: tuple[int, int]) -> None:
            begin, count = span
            for index, (output, per_element) in enumerate(zip(outputs, self.per_element, strict=True)):
                data = request.get_output_tensor(index).data
                if per_element:
                    output[begin : begin + count] = data[:count]
                else:
                    output[:, begin : begin + count] = data[:, :count]

        in_flight = []  # the shared input buffers must outlive their inference
        with self.lock:
            self.queue.set_callback(collect)
            for begin in range(0, n, block):
                # ``start_async`` starts the queue's first idle request (the one ``get_idle_request_id`` names; the
                # lock keeps any other caller out), so its inputs are set on it beforehand, as shared tensors:
                # without the per-call Python input dispatch of ``start_async(inputs)`` (its cost measured:
                # docs/research-log.md). An idle request's last inference has ended, so its scratch is free.
                request_id = self.queue.get_idle_request_id()
                inputs = [np.ascontiguousarray(array) for array in inputs_at(begin, scratch[request_id].reset())]
                in_flight.append(inputs)
                request = self.queue[request_id]
                for index, array in enumerate(inputs):
                    request.set_input_tensor(index, shared_tensor(array))
                self.queue.start_async(userdata=(begin, min(block, n - begin)))
            self.queue.wait_all()


def shared_tensor(array: np.ndarray) -> ov.Tensor:
    """An OpenVINO tensor over a C-contiguous ``array``'s own memory, also a read-only one (e.g. a view of a model
    constant, as NNCF hands weights over): ``ov.Tensor(array, shape, type)`` shares it where ``ov.Tensor(array,
    shared_memory=True)`` would refuse it, and an inference does not write into its inputs."""
    return ov.Tensor(array, array.shape, element_type(array.dtype))


@cache
def element_type(dtype: np.dtype) -> ov.Type:
    """OpenVINO's element type of a numpy dtype (cached: building an ``ov.Type`` from a dtype takes longer than
    the tensor itself, and a weight's kernels set thousands of input tensors)."""
    return ov.Type(dtype)


class Scratch:
    """The buffers of one infer request, handed out in order for each block it computes and reused from block to
    block: a gathered or padded block is written into them instead of into a new array. A new 1 MiB array per
    block costs its page faults, and freeing it an unmapping, about as much CPU as the kernel's own work on a
    block of the refinement (measured: docs/research-log.md)."""

    def __init__(self) -> None:
        self.buffers: list[np.ndarray] = []
        self.used = 0

    def reset(self) -> Scratch:
        """Every buffer free again (the request's last block has been computed)."""
        self.used = 0
        return self

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """The next buffer of this block, of that shape and dtype (its values undefined)."""
        if self.used == len(self.buffers):
            self.buffers.append(np.empty(shape, dtype=dtype))
        buffer = self.buffers[self.used]
        if buffer.shape != shape or buffer.dtype != dtype:
            buffer = self.buffers[self.used] = np.empty(shape, dtype=dtype)
        self.used += 1
        return buffer


def new_array(shape: tuple[int, ...], dtype: np.dtype, scratch: Scratch | None) -> np.ndarray:
    """A scratch buffer, or without scratch a new array (values undefined)."""
    return np.empty(shape, dtype=dtype) if scratch is None else scratch.empty(shape, dtype)


class PickedRows:
    """The rows ``picked`` (indices) of ``rows``, gathered a block at a time by ``block_rows``: while OpenVINO works
    on the blocks already started, and into a block that is still in the cache when OpenVINO reads it, instead of a
    copy of all of them first."""

    def __init__(self, rows: np.ndarray, picked: np.ndarray) -> None:
        self.rows = rows
        self.picked = picked

    @property
    def shape(self) -> tuple[int, int]:
        return (self.picked.size, self.rows.shape[1])

    def block(self, begin: int, count: int, fill: float, scratch: Scratch | None = None) -> np.ndarray:
        """Rows ``begin:begin + count`` of the picked rows (in a scratch buffer, or a new array), padded with
        ``fill``."""
        indices = self.picked[begin : begin + count]
        block = new_array((count, self.rows.shape[1]), self.rows.dtype, scratch)
        np.take(self.rows, indices, axis=0, out=block[: indices.size])
        block[indices.size :] = fill
        return block


def block_rows(
    array: np.ndarray | PickedRows, begin: int, count: int, fill: float, scratch: Scratch | None = None
) -> np.ndarray:
    """Rows ``begin:begin + count`` of ``array`` (a view of an array), padded with ``fill`` for the last, shorter
    block (of the array's dtype); a gathered or padded block is written into a scratch buffer when given."""
    if isinstance(array, PickedRows):
        return array.block(begin, count, fill, scratch)
    if begin + count <= array.shape[0]:
        return array[begin : begin + count]
    block = new_array((count, array.shape[1]), array.dtype, scratch)
    block[: array.shape[0] - begin] = array[begin:]
    block[array.shape[0] - begin :] = fill
    return block


def rows_per_block(group_size: int) -> int:
    """Rows per inference for groups of ``group_size`` elements (about ``BLOCK_ELEMENTS`` elements)."""
    return max(1, BLOCK_ELEMENTS // group_size)


@lru_cache(maxsize=CACHE_SIZE)
def compiled_extremes(group_size: int) -> BlockRunner:
    """The compiled per-row minimum, maximum and sum (non-finite when a weight is) of blocks of rows."""
    rows = rows_per_block(group_size)
    weight = opset.parameter([rows, group_size], ov.Type.f32, name="weight")
    axis = opset.constant(np.array([1], dtype=np.int64))
    reductions = (opset.reduce_min, opset.reduce_max, opset.reduce_sum)
    extremes = stack_columns([reduce(weight, axis, keep_dims=True) for reduce in reductions], rows)
    return BlockRunner(ov.Model([extremes], [weight], "row_extremes"), rows)


def true_divide(numerator: ov.Node, denominator: ov.Node) -> ov.Node:
    """``numerator / denominator`` that OpenVINO's CPU plugin keeps a division (it may otherwise multiply by the
    reciprocal, which rounds differently: codes would differ from numpy's and NNCF's at rounding ties)."""
    node = opset.divide(numerator, denominator)
    node.get_rt_info()["nonconvertable_divide_0"] = True
    return node


def stack_columns(columns: list[ov.Node], rows: int) -> ov.Node:
    """``[rows, 1]`` columns to one ``[len(columns), rows]`` result."""
    shape = opset.constant(np.array([1, rows], dtype=np.int64))
    return opset.result(opset.concat([opset.reshape(column, shape, special_zero=False) for column in columns], 0))
