"""Compiled OpenVINO implementation of the data-aware scale refinement
(``nncf_hqq.maths.core.refine_scale_on_activations``), and the dispatch to it.

The refinement quantizes the whole weight and projects the shifted codes on the calibration inputs once per
round and start (21 times with the default four starts and four rounds). In numpy every quantization is several
weight-sized passes; one OpenVINO model unrolls all starts and rounds for a block of output rows, so the block's
weights stay in the CPU caches and the elementwise work is fused. Blocks of output rows run on all cores
(``runtime.BlockRunner``); the calibration inputs are shared by every block. Same switch as the other fast paths:
``NNCF_DISABLE_OPTIMIZED_COMPRESSION``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import openvino as ov
from nncf.tensor import Tensor
from nncf.tensor import TensorBackend
from openvino import opset13 as opset

from nncf_hqq.kernels import runtime
from nncf_hqq.kernels.refine import numpy_f32
from nncf_hqq.kernels.runtime import CACHE_SIZE
from nncf_hqq.maths import core
from nncf_hqq.maths.core import levels_max


def refine_scale_on_activations(
    weight: Tensor,
    inverse_scale: Tensor,
    zero: Tensor,
    activations: Tensor,
    num_bits: int,
    rounds: int,
    scale_factors: tuple[float, ...] = (1.0,),
) -> Tensor:
    """``core.refine_scale_on_activations`` (same contract and layout), compiled where possible."""
    return runtime.guarded(
        fallback_reason(weight, inverse_scale, zero, activations, num_bits),
        lambda: refine_compiled(weight, inverse_scale, zero, activations, num_bits, rounds, scale_factors),
        lambda: core.refine_scale_on_activations(
            weight, inverse_scale, zero, activations, num_bits, rounds, scale_factors
        ),
        "scale refinement on activations",
    )


def fallback_reason(
    weight: Tensor, inverse_scale: Tensor, zero: Tensor, activations: Tensor, num_bits: int
) -> str | None:
    """Why the compiled refinement cannot be used for this call, or None when it can."""
    for name, tensor in (("scale", inverse_scale), ("zero point", zero), ("activation", activations)):
        if tensor.backend not in (TensorBackend.numpy, TensorBackend.ov):
            return f"{tensor.backend.value} {name} tensors are not handled"
    if weight.ndim != 3 or activations.ndim != 3:
        return f"{weight.ndim}-d weights with {activations.ndim}-d activations are not handled (experts)"
    return runtime.tensor_fallback_reason(weight, num_bits)


def refine_compiled(
    weight: Tensor,
    inverse_scale: Tensor,
    zero: Tensor,
    activations: Tensor,
    num_bits: int,
    rounds: int,
    scale_factors: tuple[float, ...],
) -> Tensor:
    """The compiled refinement itself (no dispatch): ``weight`` ``[out, groups, group_size]``, ``inverse_scale`` and
    ``zero`` ``[out, groups, 1]``, ``activations`` ``[groups, group_size, samples]``; returns ``[out, groups, 1]``."""
    w = numpy_f32(weight)
    out, groups, group_size = w.shape
    inputs = np.ascontiguousarray(numpy_f32(activations))
    rows = w.reshape(out, groups * group_size)
    s, z = (np.ascontiguousarray(numpy_f32(t).reshape(out, groups)) for t in (inverse_scale, zero))
    block = max(1, runtime.BLOCK_ELEMENTS // (groups * group_size))
    runner = compiled_refinement(block, groups, group_size, inputs.shape[-1], num_bits, rounds, tuple(scale_factors))
    best = np.empty((out, groups), dtype=np.float32)

    def inputs_at(begin: int, scratch: runtime.Scratch) -> list[np.ndarray]:
        padded = [runtime.block_rows(a, begin, block, fill, scratch) for a, fill in ((rows, 0.0), (s, 1.0), (z, 0.0))]
        return [*padded, inputs]

    runner.run(out, inputs_at, [best])
    return Tensor(best.reshape(out, groups, 1))


@lru_cache(maxsize=CACHE_SIZE)
def compiled_refinement(
    block: int, groups: int, group_size: int, samples: int, num_bits: int, rounds: int, factors: tuple[float, ...]
) -> runtime.BlockRunner:
    """A compiled model of the refinement of ``block`` output rows: inputs the weight rows ``[block, groups *
    group_size]``, inverse scales and zero points ``[block, groups]`` and the calibration inputs ``[groups,
    group_size, samples]``; output the best inverse scale of every ``(row, group)`` ``[block, groups]``."""
    rows = opset.parameter([block, groups * group_size], ov.Type.f32, name="weight")
    s_in = opset.parameter([block, groups], ov.Type.f32, name="inverse_scale")
    z_in = opset.parameter([block, groups], ov.Type.f32, name="zero")
    x = opset.parameter([groups, group_size, samples], ov.Type.f32, name="activations")
    by_group = opset.constant(np.array([1, 0, 2], dtype=np.int64))
    weight = opset.transpose(opset.reshape(rows, const([block, groups, group_size]), False), by_group)
    s0, zero = (opset.transpose(opset.reshape(t, const([block, groups, 1]), False), by_group) for t in (s_in, z_in))
    graph = _RefinementGraph(weight, zero, x, float(levels_max(num_bits)))
    best_error, _ = graph.error(s0)
    best = s0
    for factor in factors:
        candidate = runtime.true_divide(s0, opset.constant(np.float32(factor)))
        _, projections = graph.error(candidate)
        for _ in range(rounds):
            candidate = graph.refit(candidate, projections)
            error, projections = graph.error(candidate)
            better = opset.less(error, best_error)
            best = opset.select(better, candidate, best)
            best_error = opset.select(better, error, best_error)
    result = opset.reshape(opset.transpose(best, by_group), const([block, groups]), False)
    model = ov.Model([opset.result(result)], [rows, s_in, z_in, x], "scale_refinement_on_activations")
    return runtime.BlockRunner(model, block, per_element=(True,))


def const(values: list[int]) -> ov.Node:
    return opset.constant(np.array(values, dtype=np.int64))


class _RefinementGraph:
    """The refinement's pieces as OpenVINO nodes, in the layout ``[groups, rows, ...]`` (``[.., 1]`` per group)."""

    def __init__(self, weight: ov.Node, zero: ov.Node, activations: ov.Node, q_max: float) -> None:
        self.weight, self.zero, self.activations = weight, zero, activations
        self.q_max = q_max
        self.last = opset.constant(np.array([2], dtype=np.int64))
        self.weight_outputs = opset.matmul(weight, activations, False, False)

    def error(self, inverse_scale: ov.Node) -> tuple[ov.Node, ov.Node]:
        """``core.activation_error``: the squared output error ``[groups, rows, 1]`` and the projections of the
        shifted codes ``[groups, rows, samples]``."""
        shifted = opset.add(opset.multiply(self.weight, inverse_scale), self.zero)
        codes = opset.clamp(opset.round(shifted, "half_to_even"), 0.0, self.q_max)
        projections = opset.matmul(opset.subtract(codes, self.zero), self.activations, False, False)
        residual = opset.subtract(runtime.true_divide(projections, inverse_scale), self.weight_outputs)
        return opset.reduce_sum(opset.multiply(residual, residual), self.last, keep_dims=True), projections

    def refit(self, inverse_scale: ov.Node, projections: ov.Node) -> ov.Node:
        """The closed-form least-squares inverse scale ``<P, P> / <P, Q>`` where both sums are positive, else the
        current one."""
        numerator = opset.reduce_sum(opset.multiply(projections, self.weight_outputs), self.last, keep_dims=True)
        denominator = opset.reduce_sum(opset.multiply(projections, projections), self.last, keep_dims=True)
        zero = opset.constant(np.float32(0.0))
        valid = opset.logical_and(opset.greater(numerator, zero), opset.greater(denominator, zero))
        one = opset.constant(np.float32(1.0))
        refit = runtime.true_divide(opset.select(valid, denominator, one), opset.select(valid, numerator, one))
        return opset.select(valid, refit, inverse_scale)
