"""Rounding with error feedback on a fixed grid: GPTQ's column-by-column rounding (Frantar et al., 2022) with the
scales and zero points of another compression (HQQ's) kept as they are.

A layer's output error on calibration inputs ``X`` (``[in, samples]``) is ``||(W - W_hat) X||^2``; with the inputs'
second moment ``H = X X^T`` it is ``tr(D H D^T)`` for ``D = W - W_hat``. Rounding every weight to its nearest level
ignores ``H``. Rounding the input columns in order, and after each column moving the not-yet-rounded columns by its
rounding error times ``-H^{-1}[i, j] / H^{-1}[i, i]`` (the least-squares correction of the remaining columns), lowers
that error: the updated weights are then rounded to the same grid. With the upper Cholesky factor ``U`` of ``H^{-1}``
(``H^{-1} = U^T U``), the correction of column ``j > i`` is ``U[i, j] / U[i, i]`` times the error.

Layout: the weight ``[out, in]`` (the input axis last), grid parameters in HQQ's convention ``W ~ (q - z) / s``
(``core.quantize``), ``[out, groups, 1]`` with ``groups * group_size == in``.
"""

from __future__ import annotations

from nncf.tensor import Tensor
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns

from nncf_hqq.maths.core import levels_max

#: GPTQ's lazy-update block: columns rounded together before the columns after them are updated at once.
ERROR_FEEDBACK_BLOCK = 128


def damped_second_moment(activations: Tensor, damp: float) -> Tensor:
    """``H = X X^T / samples`` of calibration inputs ``[in, samples]``, plus ``damp`` times its mean diagonal on the
    diagonal; an input that is always zero gets 1 there (its column's error then moves nothing)."""
    inputs = activations.astype(TensorDataType.float32)
    hessian = fns.matmul(inputs, fns.moveaxis(inputs, -1, -2)) / float(inputs.shape[-1])
    diagonal = fns.diag(hessian)
    dead = diagonal == 0.0
    mean = fns.mean(diagonal).item()
    added = fns.where(dead, 1.0, damp * mean if mean > 0.0 else 1.0)
    return hessian + fns.diag(added)


def inverse_cholesky_upper(hessian: Tensor) -> Tensor:
    """The upper-triangular ``U`` with ``H^{-1} = U^T U`` of a symmetric positive definite ``H``."""
    lower = fns.linalg.cholesky(hessian)
    return fns.linalg.cholesky(fns.linalg.cholesky_inverse(lower), upper=True)


def columns_of_groups(values: Tensor, group_size: int) -> Tensor:
    """Per-group parameters ``[out, groups, 1]`` repeated over each group's columns: ``[out, groups * group_size]``."""
    return fns.repeat(values[..., 0], group_size, axis=1)


def round_with_error_feedback(
    weight: Tensor, inverse_scale: Tensor, zero: Tensor, upper: Tensor, num_bits: int
) -> Tensor:
    """Codes ``[out, in]`` of ``weight`` ``[out, in]`` on the grid ``(inverse_scale, zero)`` (``[out, groups, 1]``),
    rounded column by column with GPTQ's error feedback through ``upper`` (``inverse_cholesky_upper(H)``)."""
    group_size = weight.shape[1] // inverse_scale.shape[1]
    s = columns_of_groups(inverse_scale.astype(TensorDataType.float32), group_size)
    z = columns_of_groups(zero.astype(TensorDataType.float32), group_size)
    remaining = weight.astype(TensorDataType.float32).clone()
    codes = fns.zeros_like(remaining)
    q_max = levels_max(num_bits)
    columns = weight.shape[1]
    for begin in range(0, columns, ERROR_FEEDBACK_BLOCK):
        end = min(begin + ERROR_FEEDBACK_BLOCK, columns)
        block = remaining[:, begin:end].clone()
        errors = fns.zeros_like(block)
        for i in range(end - begin):
            column = begin + i
            code = fns.clip(fns.round(block[:, i] * s[:, column] + z[:, column]), 0.0, q_max)
            codes[:, column] = code
            error = (block[:, i] - (code - z[:, column]) / s[:, column]) / upper[column, column].item()
            block[:, i:] -= fns.unsqueeze(error, 1) * fns.unsqueeze(upper[column, column:end], 0)
            errors[:, i] = error
        remaining[:, end:] -= fns.matmul(errors, upper[begin:end, end:])
    return codes


def error_feedback_codes(
    weight: Tensor, inverse_scale: Tensor, zero: Tensor, activations: Tensor, num_bits: int, damp: float
) -> Tensor:
    """Codes of ``weight`` ``[out, in]`` on a fixed grid that lower its output error on ``activations``
    (``[in, samples]``) below nearest rounding's: ``round_with_error_feedback`` with the damped second moment."""
    upper = inverse_cholesky_upper(damped_second_moment(activations, damp))
    return round_with_error_feedback(weight, inverse_scale, zero, upper, num_bits)
