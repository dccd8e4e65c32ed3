"""Data-free facts about a weight, read from the ``NNCFGraph`` that NNCF traces from a PyTorch model.

The same facts as ``nncf_hqq.openvino.graph`` finds in an OpenVINO graph, so that a model compressed through either
backend gets the same HQQ parameters:
- input importance: ``gamma`` (and ``beta``) of the normalisation that feeds a weight's MatMul (a ``mul`` by a
  per-channel parameter, optionally followed by an ``add``, as transformers writes RMSNorm; or ``layer_norm``),
  turned into input energy by ``hqq.norm_input_energy``;
- attention roles: whether a projection's output reaches ``scaled_dot_product_attention`` as query, key or value
  (or, for eager attention, is the second operand of a MatMul whose first comes from a softmax: the value).

The graph's tensors are read from the model the graph was traced from (``get_const_data``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from nncf_hqq._nncf import MATMUL_METATYPES
from nncf_hqq._nncf import NNCFGraph
from nncf_hqq._nncf import NNCFNode
from nncf_hqq._nncf import PTAddMetatype
from nncf_hqq._nncf import PTConstNoopMetatype
from nncf_hqq._nncf import PTDropoutMetatype
from nncf_hqq._nncf import PTGatherMetatype
from nncf_hqq._nncf import PTLayerNormMetatype
from nncf_hqq._nncf import PTMulMetatype
from nncf_hqq._nncf import PTNoopMetatype
from nncf_hqq._nncf import PTReshapeMetatype
from nncf_hqq._nncf import PTScaledDotProductAttentionMetatype
from nncf_hqq._nncf import PTSoftmaxMetatype
from nncf_hqq._nncf import get_const_data
from nncf_hqq.hqq import norm_input_energy
from nncf_hqq.parameters import AttentionRole
from nncf_hqq.parameters import role_of_outputs

#: How far (in nodes) the role search follows a projection's output towards the attention op.
MAX_DEPTH = 12
#: Input port of ``scaled_dot_product_attention`` by role.
_SDPA_ROLES = {0: AttentionRole.QUERY, 1: AttentionRole.KEY, 2: AttentionRole.VALUE}
#: Ops that pass a tensor on unchanged in value (``to``, ``contiguous``, dropout in eval mode).
_IDENTITIES = (PTNoopMetatype, PTDropoutMetatype)
#: Ops between a normalisation and a MatMul that keep the channels last and unmixed: identities, reshapes, and row
#: gathers (the token slice before an LM head; a MoE layer gathers the tokens routed to each expert). OpenVINO's
#: converter folds the ones that select every token.
_CHANNEL_KEEPING = (*_IDENTITIES, PTReshapeMetatype, PTGatherMetatype)
#: ``layer_norm``'s input ports of its weight (``gamma``) and bias (``beta``).
_LAYER_NORM_GAMMA_PORT, _LAYER_NORM_BETA_PORT = 2, 3


def _is(node: NNCFNode, metatypes: Any) -> bool:
    return node.metatype in metatypes if isinstance(metatypes, (tuple, list)) else node.metatype is metatypes


def _constant(graph: NNCFGraph, model: torch.nn.Module, node: NNCFNode) -> np.ndarray | None:
    """The values of a parameter or buffer node, flattened to float32, or None for any other node."""
    if not _is(node, PTConstNoopMetatype):
        return None
    data = get_const_data(node, model)
    return data.detach().to(device="cpu", dtype=torch.float32).numpy().reshape(-1)


def _channel_constant(
    graph: NNCFGraph, model: torch.nn.Module, node: NNCFNode, channels: int
) -> tuple[np.ndarray, NNCFNode] | None:
    """For a binary op with one per-channel parameter input: that parameter and the other input's producer."""
    inputs = [edge.from_node for edge in graph.get_input_edges(node)]
    if len(inputs) != 2:
        return None
    for i, source in enumerate(inputs):
        values = _constant(graph, model, source)
        if values is not None and values.size == channels:
            return values, inputs[1 - i]
    return None


def _skip_identities(graph: NNCFGraph, node: NNCFNode) -> NNCFNode:
    while _is(node, _IDENTITIES):
        edges = graph.get_input_edges(node)
        if not edges:
            break
        node = min(edges, key=lambda edge: edge.input_port_id).from_node
    return node


def _layer_norm_affine(
    graph: NNCFGraph, model: torch.nn.Module, node: NNCFNode, channels: int
) -> tuple[np.ndarray, np.ndarray | None] | None:
    ports = {edge.input_port_id: edge.from_node for edge in graph.get_input_edges(node)}
    gamma_node = ports.get(_LAYER_NORM_GAMMA_PORT)
    gamma = None if gamma_node is None else _constant(graph, model, gamma_node)
    if gamma is None or gamma.size != channels:
        return None
    beta_node = ports.get(_LAYER_NORM_BETA_PORT)
    return gamma, None if beta_node is None else _constant(graph, model, beta_node)


def affine_of_producer(
    graph: NNCFGraph, model: torch.nn.Module, producer: NNCFNode, channels: int
) -> tuple[np.ndarray, np.ndarray | None] | None:
    """``(gamma, beta)`` of the normalisation ``x * gamma (+ beta)`` whose output ``producer`` is, if it is one."""
    producer = _skip_identities(graph, producer)
    if _is(producer, PTLayerNormMetatype):
        return _layer_norm_affine(graph, model, producer, channels)
    beta = None
    if _is(producer, PTAddMetatype):
        shifted = _channel_constant(graph, model, producer, channels)
        if shifted is None:
            return None
        beta, producer = shifted[0], _skip_identities(graph, shifted[1])
    if not _is(producer, PTMulMetatype):
        return None
    scaled = _channel_constant(graph, model, producer, channels)
    return None if scaled is None else (scaled[0], beta)


def norm_gain_importance(
    graph: NNCFGraph, model: torch.nn.Module, node_with_weight: NNCFNode, activation_port: int, channels: int
) -> np.ndarray | None:
    """Input energy of the ``channels`` input channels of a MatMul fed by a normalisation, or None.

    :param activation_port: the MatMul's input port of the activation (NNCF's ``get_activation_port_id``).
    """
    edge = graph.get_input_edge_by_port_id(node_with_weight, activation_port)
    affine = affine_of_producer(graph, model, channel_keeping_source(graph, edge, channels), channels)
    return None if affine is None else norm_input_energy(*affine)


def channel_keeping_source(graph: NNCFGraph, edge: Any, channels: int) -> NNCFNode:
    """The producer of the activation on ``edge``, followed back through ops that keep the ``channels`` last and
    unmixed (``_CHANNEL_KEEPING``: e.g. the token slice before an LM head, the token gather before MoE experts)."""
    producer = edge.from_node
    while _is(producer, _CHANNEL_KEEPING):
        data = [e for e in graph.get_input_edges(producer) if e.input_port_id == 0]
        if not data or not data[0].tensor_shape or data[0].tensor_shape[-1] != channels:
            break
        producer = data[0].from_node
    return producer


def _consumer_of_parameter(graph: NNCFGraph, const_node: NNCFNode) -> tuple[NNCFNode, int] | None:
    """The first op after a parameter that takes another input (through single-input ops such as a transpose or
    an expert index), and the port the parameter's path enters it on."""
    node = const_node
    for _ in range(MAX_DEPTH):
        edges = graph.get_output_edges(node)
        if len(edges) != 1:
            return None
        consumer, port = edges[0].to_node, edges[0].input_port_id
        if len(graph.get_input_edges(consumer)) > 1:
            return consumer, port
        node = consumer
    return None


def parameter_importance(graph: NNCFGraph, model: torch.nn.Module, name: str, channels: int) -> np.ndarray | None:
    """Input energy of the parameter ``name`` used outside ``nn.Linear`` (e.g. a MoE layer's 3D expert weights),
    when its op's activation comes from a normalisation through ops that keep the ``channels`` last
    (``_CHANNEL_KEEPING``); None when the graph shows no such path (or does not hold the parameter)."""
    const_nodes = [n for n in graph.get_nodes_by_metatypes([PTConstNoopMetatype]) if n.node_name == name]
    if len(const_nodes) != 1:
        return None
    found = _consumer_of_parameter(graph, const_nodes[0])
    if found is None:
        return None
    consumer, weight_port = found
    for edge in sorted(graph.get_input_edges(consumer), key=lambda e: e.input_port_id):
        if edge.input_port_id == weight_port or not edge.tensor_shape or edge.tensor_shape[-1] != channels:
            continue
        affine = affine_of_producer(graph, model, channel_keeping_source(graph, edge, channels), channels)
        if affine is not None:
            return norm_input_energy(*affine)
    return None


def attention_role(graph: NNCFGraph, node_with_weight: NNCFNode) -> AttentionRole | None:
    """The attention input produced by a projection MatMul, or None when it feeds no attention.

    Follows the output through reshapes, transposes, RoPE, KV-cache concatenation and the like (not through
    another MatMul) until ``scaled_dot_product_attention`` (the input port gives the role) or, for eager attention,
    a MatMul whose other operand comes from a softmax (through dropout): the value when this is its second operand.
    """
    frontier, seen, reached = [(node_with_weight, 0)], set(), []
    while frontier:
        node, depth = frontier.pop(0)
        for edge in graph.get_output_edges(node):
            consumer, port = edge.to_node, edge.input_port_id
            if _is(consumer, PTScaledDotProductAttentionMetatype) and port in _SDPA_ROLES:
                reached.append(_SDPA_ROLES[port])
                continue
            if _is(consumer, MATMUL_METATYPES):
                others = [e.from_node for e in graph.get_input_edges(consumer) if e.input_port_id != port]
                if port == 1 and any(_is(_skip_identities(graph, o), PTSoftmaxMetatype) for o in others):
                    reached.append(AttentionRole.VALUE)
                continue
            if consumer.node_key in seen or depth >= MAX_DEPTH:
                continue
            seen.add(consumer.node_key)
            frontier.append((consumer, depth + 1))
    return role_of_outputs(reached)
