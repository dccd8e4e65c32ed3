"""The role of a projection MatMul in attention (query, key or value), read from an OpenVINO graph.

Measured on all-MiniLM-L6-v2 (genuine float weights, docs/quality.md): float-zero-point HQQ on the value (and,
less, the key) projections made the model worse than round-to-nearest, while it helped every other MatMul.
The value outputs are averaged over tokens by attention, which lets an error component shared by the tokens
survive. So HQQ can leave chosen roles to NNCF's round-to-nearest.
"""

from __future__ import annotations

import openvino as ov

from nncf_hqq.importance import consuming_matmul
from nncf_hqq.parameters import AttentionRole

#: How far (in nodes) the search follows a projection's output towards the attention op.
MAX_DEPTH = 12
#: Ops the search does not follow: they only read shapes or write state.
_DEAD_ENDS = {"ShapeOf", "Assign", "Result"}
#: Input index of ScaledDotProductAttention by role.
_SDPA_INPUTS = {0: "query", 1: "key", 2: "value"}


def attention_role(weight: ov.Node) -> AttentionRole | None:
    """The attention input fed by the MatMul that consumes ``weight``, or None when it feeds no attention.

    Follows the MatMul's output through reshapes, transposes, RoPE, KV-cache concatenation and the like until a
    ``ScaledDotProductAttention`` (the input index gives the role) or, for decomposed attention, a MatMul
    (second operand of a MatMul whose first comes from Softmax: value; otherwise: query or key, not told apart).
    """
    found = consuming_matmul(weight)
    if found is None:
        return None
    frontier, seen = [(found[0], 0)], set()
    while frontier:
        node, depth = frontier.pop(0)
        for target in node.output(0).get_target_inputs():
            consumer, index = target.get_node(), target.get_index()
            kind = consumer.get_type_name()
            if kind == "ScaledDotProductAttention" and index in _SDPA_INPUTS:
                return AttentionRole(_SDPA_INPUTS[index])
            if kind == "MatMul":
                other = consumer.input_value(1 - index).get_node().get_type_name()
                if other == "Softmax" and index == 1:
                    return AttentionRole.VALUE
                continue
            key = consumer.get_friendly_name()
            if kind in _DEAD_ENDS or key in seen or depth >= MAX_DEPTH:
                continue
            seen.add(key)
            frontier.append((consumer, depth + 1))
    return None
