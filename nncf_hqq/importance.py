"""Data-free importance of a MatMul's input channels, read from an OpenVINO graph.

A MatMul fed by a normalisation layer sees ``x_hat * gamma`` with ``x_hat`` of unit mean square per token, so
its input channel j carries an expected energy ``gamma_j^2``. The output error of that MatMul is then
``sum_j gamma_j^2 * ||dW[:, j]||^2`` (for uncorrelated channels): the weight error weighted by ``gamma^2``.
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


def norm_gain(weight: ov.Node, channels: int) -> np.ndarray | None:
    """``gamma`` of a ``Multiply(x, Constant gamma)`` that produces the MatMul's activation, if there is one."""
    found = consuming_matmul(weight)
    if found is None:
        return None
    matmul, weight_index = found
    producer = _skip_converts(matmul.input_value(1 - weight_index).get_node())
    if producer.get_type_name() != "Multiply":
        return None
    for value in producer.input_values():
        source = _skip_converts(value.get_node())
        if source.get_type_name() == "Constant":
            gain = np.asarray(source.get_data(), dtype=np.float32).reshape(-1)
            if gain.size == channels:
                return gain
    return None


def norm_gain_importance(weight: ov.Node, channels: int) -> np.ndarray | None:
    """``gamma^2`` (floored, see ``IMPORTANCE_FLOOR``) for the MatMul's input channels, or None."""
    gain = norm_gain(weight, channels)
    if gain is None or not np.isfinite(gain).all():
        return None
    energy = gain.astype(np.float64) ** 2
    return (energy + IMPORTANCE_FLOOR * energy.mean()).astype(np.float32)
