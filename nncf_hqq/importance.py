"""Data-free importance of a MatMul's input channels, read from an OpenVINO graph.

A MatMul fed by a normalisation layer sees ``x_hat * gamma (+ beta)`` with ``x_hat`` of zero mean and unit
mean square per token (RMSNorm: ``gamma`` only; LayerNorm: ``gamma`` and ``beta``), so its input channel j
carries an expected energy ``gamma_j^2 + beta_j^2``. The output error of that MatMul is then
``sum_j energy_j * ||dW[:, j]||^2`` (for uncorrelated channels): the weight error weighted by that energy.
"""

from __future__ import annotations

import numpy as np
import openvino as ov

#: Added to every importance, relative to their mean, so that no group has a total weight of zero.
IMPORTANCE_FLOOR = 1e-4


def _skip_converts(node: ov.Node) -> ov.Node:
    while node.get_type_name() == "Convert":
        node = node.input_value(0).get_node()
    return node


def consuming_matmul(weight: ov.Node) -> tuple[ov.Node, int] | None:
    """The MatMul that consumes ``weight`` (through Convert nodes) and the input index it uses."""
    frontier = [weight]
    while frontier:
        node = frontier.pop()
        for target in node.output(0).get_target_inputs():
            consumer = target.get_node()
            if consumer.get_type_name() == "MatMul":
                return consumer, target.get_index()
            if consumer.get_type_name() == "Convert":
                frontier.append(consumer)
    return None


def _channel_constant(node: ov.Node, channels: int) -> tuple[np.ndarray, ov.Node] | None:
    """For a binary op with one per-channel Constant input: that constant and the other input's producer."""
    inputs = [_skip_converts(value.get_node()) for value in node.input_values()]
    for i, source in enumerate(inputs):
        if source.get_type_name() == "Constant" and len(inputs) == 2:
            values = np.asarray(source.get_data(), dtype=np.float32).reshape(-1)
            if values.size == channels:
                return values, inputs[1 - i]
    return None


def norm_affine(weight: ov.Node, channels: int) -> tuple[np.ndarray, np.ndarray | None] | None:
    """``(gamma, beta)`` of the ``x * gamma (+ beta)`` that produces the MatMul's activation, if there is one."""
    found = consuming_matmul(weight)
    if found is None:
        return None
    matmul, weight_index = found
    producer = _skip_converts(matmul.input_value(1 - weight_index).get_node())
    beta = None
    if producer.get_type_name() == "Add":
        shifted = _channel_constant(producer, channels)
        if shifted is None:
            return None
        beta, producer = shifted
    if producer.get_type_name() != "Multiply":
        return None
    scaled = _channel_constant(producer, channels)
    return None if scaled is None else (scaled[0], beta)


def norm_gain(weight: ov.Node, channels: int) -> np.ndarray | None:
    """``gamma`` of the normalisation feeding the MatMul that consumes ``weight``, if there is one."""
    affine = norm_affine(weight, channels)
    return None if affine is None else affine[0]


def norm_gain_importance(weight: ov.Node, channels: int) -> np.ndarray | None:
    """Expected input energy ``gamma^2 + beta^2`` (floored, see ``IMPORTANCE_FLOOR``) per input channel, or None."""
    affine = norm_affine(weight, channels)
    if affine is None:
        return None
    gamma, beta = affine
    energy = gamma.astype(np.float64) ** 2 + (0.0 if beta is None else beta.astype(np.float64) ** 2)
    if not np.isfinite(energy).all():
        return None
    return (energy + IMPORTANCE_FLOOR * energy.mean()).astype(np.float32)
