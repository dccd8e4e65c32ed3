"""Data-free facts about a weight, read from the OpenVINO graph around the MatMul that consumes it.

Input importance: a MatMul fed by a normalisation layer sees ``x_hat * gamma (+ beta)`` with ``x_hat`` of zero
mean and unit mean square per token (RMSNorm: ``gamma`` only; LayerNorm: ``gamma`` and ``beta``), so its input
channel j carries an expected energy ``gamma_j^2 + beta_j^2``. The output error of that MatMul is then
``sum_j energy_j * ||dW[:, j]||^2`` (for uncorrelated channels): the weight error weighted by that energy.

Attention roles: whether the MatMul produces the query, key or value input of attention. Value outputs are averaged
over tokens by attention, which lets an error component shared by the tokens survive, so HQQ can leave chosen roles
to NNCF's round-to-nearest (``HQQParameters.rtn_roles``; the measurements behind the default are in
docs/quality.md).
"""

from __future__ import annotations

import numpy as np
import openvino as ov

from nncf_hqq.hqq import norm_input_energy
from nncf_hqq.parameters import AttentionRole
from nncf_hqq.parameters import role_of_outputs


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
    """Expected input energy ``gamma^2 + beta^2`` per input channel (``hqq.norm_input_energy``), or None."""
    affine = norm_affine(weight, channels)
    return None if affine is None else norm_input_energy(*affine)


# --------------------------------------------------------------------------------------------------------------------
# Attention roles
# --------------------------------------------------------------------------------------------------------------------

#: How far (in nodes) the search follows a projection's output towards the attention op.
MAX_DEPTH = 12
#: Ops the search does not follow: they only read shapes or write state.
_DEAD_ENDS = {"ShapeOf", "Assign", "Result"}
#: Input index of ScaledDotProductAttention by role.
_SDPA_INPUTS = {0: "query", 1: "key", 2: "value"}


def _skip_conversions(node: ov.Node) -> ov.Node:
    """The first producer up from ``node`` that is not an element-type conversion (a softmax exported in f16 reaches
    the MatMul with the values through a Convert)."""
    while node.get_type_name() == "Convert":
        node = node.input_value(0).get_node()
    return node


def attention_role(weight: ov.Node) -> AttentionRole | None:
    """The attention input fed by the MatMul that consumes ``weight``, or None when it feeds no attention.

    Follows the MatMul's output through reshapes, transposes, RoPE, KV-cache concatenation and the like until a
    ``ScaledDotProductAttention`` (the input index gives the role) or, for decomposed attention, a MatMul
    (second operand of a MatMul whose first comes from Softmax, through conversions: value; otherwise: query or key,
    not told apart).
    """
    found = consuming_matmul(weight)
    if found is None:
        return None
    frontier, seen, reached = [(found[0], 0)], set(), []
    while frontier:
        node, depth = frontier.pop(0)
        for target in (t for output in node.outputs() for t in output.get_target_inputs()):
            consumer, index = target.get_node(), target.get_index()
            kind = consumer.get_type_name()
            if kind == "ScaledDotProductAttention" and index in _SDPA_INPUTS:
                reached.append(AttentionRole(_SDPA_INPUTS[index]))
                continue
            if kind == "MatMul":
                if index == 1 and _skip_conversions(consumer.input_value(0).get_node()).get_type_name() == "Softmax":
                    reached.append(AttentionRole.VALUE)
                continue
            key = consumer.get_friendly_name()
            if kind in _DEAD_ENDS or key in seen or depth >= MAX_DEPTH:
                continue
            seen.add(key)
            frontier.append((consumer, depth + 1))
    return role_of_outputs(reached)


#: How many operations after a MatMul a router's TopK (or a scalar gate's Sigmoid) may come.
GATE_SEARCH_DEPTH = 4


def _reaches(node: ov.Node, kinds: tuple[str, ...], depth: int) -> bool:
    """Whether an operation of one of ``kinds`` follows ``node`` within ``depth`` steps, not through a MatMul."""
    frontier = [node]
    for _ in range(depth):
        following = []
        for current in frontier:
            for output in current.outputs():
                for target in output.get_target_inputs():
                    consumer = target.get_node()
                    if consumer.get_type_name() in kinds:
                        return True
                    if consumer.get_type_name() != "MatMul":
                        following.append(consumer)
        frontier = following
    return False


def moe_gate_matmuls(model: ov.Model) -> list[str]:
    """Names of the MatMuls of a mixture-of-experts model that decide routing rather than compute: routers (a
    MatMul with a constant weight whose output reaches a TopK before any other MatMul, e.g. ``mlp.gate``,
    ``block_sparse_moe.gate``, ``router``) and per-token scalar gates (one output channel into a Sigmoid, e.g.
    Qwen2-MoE's ``shared_expert_gate``). Usable as ``nncf.IgnoredScope(names=...)``; empty for a dense model."""
    names = []
    for op in model.get_ordered_ops():
        if op.get_type_name() != "MatMul" or _skip_converts(op.input_value(1).get_node()).get_type_name() != "Constant":
            continue
        scalar = op.get_output_partial_shape(0)[-1].is_static and op.get_output_partial_shape(0)[-1].get_length() == 1
        if _reaches(op, ("TopK",), GATE_SEARCH_DEPTH) or (scalar and _reaches(op, ("Sigmoid",), 1)):
            names.append(op.get_friendly_name())
    return names
