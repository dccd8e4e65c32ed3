"""
HQQ's scale refinement on calibration inputs, as pure functions over nncf.tensor: the inverse scales refitted by
least squares on the layer's outputs, the zero points kept.
"""

from nncf.tensor import Tensor
from nncf.tensor import TensorDataType
from nncf.tensor import functions as fns

from nncf_hqq.maths.data_free_steps import quantize


def output_projections(values: Tensor, activations: Tensor) -> Tensor:
    """Per group the outputs [..., groups, out, samples] of [..., out, groups, group_size] values."""
    return fns.matmul(fns.moveaxis(values, -3, -2), activations)


def equivalent_inputs(activations: Tensor) -> Tensor:
    """Inputs R [..., n, n] with R R^T = X X^T, which is all output errors depend on, for X [..., n, samples]."""
    inputs = activations.astype(TensorDataType.float64)
    vectors, values, _ = fns.linalg.svd(fns.matmul(inputs, fns.moveaxis(inputs, -1, -2)), full_matrices=False)
    return (vectors * fns.expand_dims(fns.maximum(values, 0.0) ** 0.5, -2)).astype(TensorDataType.float32)


def activation_error(
    weight_outputs: Tensor, weight: Tensor, inverse_scale: Tensor, zero: Tensor, activations: Tensor, num_bits: int
) -> tuple[Tensor, Tensor]:
    """The squared output error per (out, group) on the activations, and the outputs of the shifted codes."""
    shifted = quantize(weight, inverse_scale, zero, num_bits) - zero
    projections = output_projections(shifted, activations)
    residual = projections / fns.moveaxis(inverse_scale, -3, -2) - weight_outputs
    return fns.sum(residual * residual, axis=-1), projections


def refine_scale_on_activations(
    weight: Tensor,
    inverse_scale: Tensor,
    zero: Tensor,
    activations: Tensor,
    num_bits: int,
    rounds: int,
    scale_factors: tuple[float, ...] = (1.0,),
) -> Tensor:
    """
    Refines the inverse scales [..., out, groups, 1] of a weight [..., out, groups, group_size] on calibration inputs
    [..., groups, group_size, samples], keeping the zero points: from every start s / f (f in scale_factors), nearest
    codes and the least-squares 1 / s = <P, Q> / <P, P> alternate (P, Q: the outputs of the shifted codes and of the
    weight); each (out, group) keeps the candidate of least output error, the incoming s included.
    """
    weight = weight.astype(TensorDataType.float32)
    weight_outputs = output_projections(weight, activations)
    best_error, _ = activation_error(weight_outputs, weight, inverse_scale, zero, activations, num_bits)
    best = fns.moveaxis(inverse_scale, -3, -2)[..., 0]
    for factor in scale_factors:
        candidate = inverse_scale / factor
        _, projections = activation_error(weight_outputs, weight, candidate, zero, activations, num_bits)
        for _ in range(rounds):
            numerator = fns.sum(projections * weight_outputs, axis=-1)
            denominator = fns.sum(projections * projections, axis=-1)
            valid = (numerator > 0.0) & (denominator > 0.0)
            refit = fns.where(valid, denominator, 1.0) / fns.where(valid, numerator, 1.0)
            previous = fns.moveaxis(candidate, -3, -2)[..., 0]
            candidate = fns.moveaxis(fns.where(valid, refit, previous)[..., None], -3, -2)
            error, projections = activation_error(weight_outputs, weight, candidate, zero, activations, num_bits)
            better = error < best_error
            best = fns.where(better, fns.moveaxis(candidate, -3, -2)[..., 0], best)
            best_error = fns.where(better, error, best_error)
    return fns.moveaxis(best[..., None], -3, -2)
