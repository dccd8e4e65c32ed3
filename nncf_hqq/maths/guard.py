"""
The output-error guard: per output channel, the candidate compression of a weight that reproduces the layer's
outputs on calibration inputs best.

A layer's output y = W x splits over its output channels: row o of the output depends on row o of the weight only.
So among compressions of the same weight with the same layout (groups, bits), taking every row from the candidate of
least error ||(W - W_hat)[o] X||^2 gives the least output error the candidates allow, row by row and for the layer.
"""

from collections.abc import Sequence

from nncf.quantization.algorithms.weight_compression.parameters import CompressedWeight
from nncf.quantization.algorithms.weight_compression.weight_lowering import do_integer_dequantization
from nncf.tensor import Tensor
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns


def row_output_errors(weight: Tensor, reconstruction: Tensor, activations: Tensor, axis: int) -> Tensor:
    """
    The squared output error of every output row, sum_t ((W - W_hat)[..., o, :] X[..., :, t])^2, as [..., out].

    :param weight: The float weight with its reduction (input) axis; [out, in], [in, out] or, for experts,
        [experts, out, in] / [experts, in, out].
    :param reconstruction: The compressed weight decompressed to the weight's shape.
    :param activations: Calibration inputs [..., in, samples].
    :param axis: The reduction axis.
    """
    difference = fns.moveaxis(weight.astype(TensorDataType.float32) - reconstruction, axis % weight.ndim, -1)
    errors = fns.matmul(difference, activations.astype(TensorDataType.float32))
    return fns.sum(errors * errors, axis=-1)


def dequantized(candidate: CompressedWeight) -> Tensor:
    """
    The candidate's values (q - z) * s in its grouped layout, as NNCF's ``do_integer_dequantization`` gives them for a
    float32 scale, built in one float32 buffer (NNCF's holds up to three weight-sized arrays at once). The values are
    the same: integer codes and zero points are exact in float32, and a float32 subtraction rounds the exact
    difference as NNCF's float64 one, converted to float32, does.
    """
    if candidate.scale.dtype != TensorDataType.float32:
        return do_integer_dequantization(candidate)
    values = candidate.tensor.astype(TensorDataType.float32)
    if candidate.zero_point is not None:
        values -= candidate.zero_point.astype(TensorDataType.float32)
    values *= candidate.scale
    return values


def candidate_row_errors(weight: Tensor, candidate: CompressedWeight, activations: Tensor, axis: int) -> Tensor:
    """
    ``row_output_errors`` of the candidate's reconstruction, computed in the reconstruction's own buffer: the error
    (W_hat - W) X has W's sign flipped, which squaring undoes exactly, so the result is the same to the bit.
    """
    difference = dequantized(candidate).reshape(tuple(weight.shape))
    difference -= weight if weight.dtype == TensorDataType.float32 else weight.astype(TensorDataType.float32)
    errors = fns.matmul(fns.moveaxis(difference, axis % weight.ndim, -1), activations.astype(TensorDataType.float32))
    return fns.sum(errors * errors, axis=-1)


def row_mask(best: Tensor, index: int, weight_ndim: int, axis: int, grouped: bool) -> Tensor:
    """
    Where the row-wise choice is the index, shaped to broadcast against the grouped layout of a compressed weight.
    """
    mask = fns.expand_dims(best == index, axis % weight_ndim)
    return fns.expand_dims(mask, axis % weight_ndim + 1) if grouped else mask


def choose_per_row(
    weight: Tensor, candidates: Sequence[CompressedWeight], activations: Tensor, axis: int, grouped: bool
) -> tuple[CompressedWeight, list[int]]:
    """
    The candidates mixed row by row, every output row from the candidate of least output error on the activations
    (the first on ties), and how many rows each candidate gave. The candidates share the weight's grouped layout
    (grouped: groups along the axis, else per channel). A result taken from one candidate is that candidate; a mix of
    float and integer zero points has float32 ones.
    """
    errors = [candidate_row_errors(weight, c, activations, axis) for c in candidates]
    best = fns.argmin(fns.stack(errors), axis=0)
    counts = [int(fns.count_nonzero(best == i).item()) for i in range(len(candidates))]
    if max(counts) == sum(counts):
        return candidates[counts.index(max(counts))], counts
    result = candidates[0]
    zero_dtype = _common_zero_point_dtype(candidates)
    for index in range(1, len(candidates)):
        if counts[index] == 0:
            continue
        mask = row_mask(best, index, weight.ndim, axis, grouped)
        other = candidates[index]
        zero_point = None
        if result.zero_point is not None and other.zero_point is not None:
            zero_point = fns.where(mask, other.zero_point.astype(zero_dtype), result.zero_point.astype(zero_dtype))
        result = CompressedWeight(
            fns.where(mask, other.tensor, result.tensor), fns.where(mask, other.scale, result.scale), zero_point
        )
    return result, counts


def _common_zero_point_dtype(candidates: Sequence[CompressedWeight]) -> TensorDataType | None:
    dtypes = {c.zero_point.dtype for c in candidates if c.zero_point is not None}
    if not dtypes:
        return None
    return dtypes.pop() if len(dtypes) == 1 else TensorDataType.float32
