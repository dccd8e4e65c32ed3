"""The edits of the third pull request (0003): HQQ's data-free steps beyond its solver. The error of every input
channel weighted by the energy its normalization gives it (gamma^2 + beta^2), the per-group fallback to
round-to-nearest where it reconstructs the group better, and unit gain (every group's scale set so that its
reconstruction has unit gain along the weight; the codes are then final and are written as they are)."""

from __future__ import annotations

from edit import Edit
from edit import append
from edit import insert_after
from edit import insert_before
from edits_0001 import ADVANCED_PARAMETERS
from edits_0001 import ALGORITHM
from edits_0001 import BACKEND
from edits_0001 import OV_BACKEND
from edits_0001 import OV_TESTS
from edits_0001 import TEMPLATE
from edits_0001 import WEIGHT_LOWERING
from edits_0002 import PT_BACKEND

NORMALIZATION_AFFINE = '''
    @abstractmethod
    def get_normalization_affine(
        self, model: TModel, graph: NNCFGraph, node_with_weight: NNCFNode, channels: int
    ) -> tuple[Tensor, Tensor | None] | None:
        """
        Returns gamma and beta (None without shift) of the normalization x_hat * gamma + beta that produces the
        activation of the node with weights, one value per input channel, or None when there is none.

        :param model: Model.
        :param graph: Model graph.
        :param node_with_weight: The node with the weight.
        :param channels: The number of input channels of the node.
        """
'''

OV_NORMALIZATION_AFFINE = '''
    def get_normalization_affine(
        self, model: ov.Model, graph: NNCFGraph, node_with_weight: NNCFNode, channels: int
    ) -> tuple[Tensor, Tensor | None] | None:
        # The model as it is now (after AWQ, whose scales then count as the normalization's gain)
        matmul = self.name_to_node_mapping[node_with_weight.node_name]
        producer = self._skip_converts(matmul.input_value(self.get_activation_port_id(node_with_weight, graph)))
        beta = None
        if producer.get_type_name() == "Add":
            shift = self._channel_constant(producer, channels)
            if shift is None:
                return None
            beta, producer = shift
        if producer.get_type_name() != "Multiply":
            return None
        gain = self._channel_constant(producer, channels)
        return None if gain is None else (gain[0], beta)

    @staticmethod
    def _skip_converts(value: ov.Output) -> ov.Node:
        while value.get_node().get_type_name() == "Convert":
            value = value.get_node().input_value(0)
        return value.get_node()

    def _channel_constant(self, node: ov.Node, channels: int) -> tuple[Tensor, ov.Node] | None:
        """A binary operation's constant input of the given size, and the producer of its other input."""
        sources = [self._skip_converts(value) for value in node.input_values()]
        for index, source in enumerate(sources):
            if source.get_type_name() == "Constant" and len(sources) == 2:
                value = get_const_value_as_numpy_tensor(source).reshape(-1)
                if value.size == channels:
                    return Tensor(value), sources[1 - index]
        return None
'''

PT_NORMALIZATION_AFFINE = '''
    # layer_norm(input, normalized_shape, weight, bias, eps): its weight (gamma) and bias (beta) are inputs 2 and 3.
    LAYER_NORM_PORTS = (2, 3)

    def get_normalization_affine(
        self, model: GraphModelWrapper, graph: NNCFGraph, node_with_weight: NNCFNode, channels: int
    ) -> tuple[Tensor, Tensor | None] | None:
        module = model.model if isinstance(model, GraphModelWrapper) else model
        activation_port_id = self.get_activation_port_id(node_with_weight, graph)
        activation = graph.get_input_edge_by_port_id(node_with_weight, activation_port_id).from_node
        producer = self._skip_noops(graph, activation)
        if producer.metatype == PTLayerNormMetatype:
            ports = {edge.input_port_id: edge.from_node for edge in graph.get_input_edges(producer)}
            gamma, beta = (self._constant(module, ports.get(port)) for port in self.LAYER_NORM_PORTS)
            return None if gamma is None or gamma.size != channels else (gamma, beta)
        beta = None
        if producer.metatype == PTAddMetatype:
            shift = self._channel_constant(module, graph, producer, channels)
            if shift is None:
                return None
            beta, producer = shift[0], self._skip_noops(graph, shift[1])
        if producer.metatype != PTMulMetatype:
            return None
        gain = self._channel_constant(module, graph, producer, channels)
        return None if gain is None else (gain[0], beta)

    def _skip_noops(self, graph: NNCFGraph, node: NNCFNode) -> NNCFNode:
        while node.metatype in self.noop_metatypes and graph.get_input_edges(node):
            node = min(graph.get_input_edges(node), key=lambda edge: edge.input_port_id).from_node
        return node

    @staticmethod
    def _constant(model: torch.nn.Module, node: NNCFNode | None) -> Tensor | None:
        if node is None or node.metatype not in CONST_NOOP_METATYPES:
            return None
        return Tensor(get_const_data(node, model).detach().reshape(-1))

    def _channel_constant(
        self, model: torch.nn.Module, graph: NNCFGraph, node: NNCFNode, channels: int
    ) -> tuple[Tensor, NNCFNode] | None:
        """A binary operation's parameter input of the given size, and the producer of its other input."""
        sources = [edge.from_node for edge in graph.get_input_edges(node)]
        if len(sources) != 2:
            return None
        for index, source in enumerate(sources):
            value = self._constant(model, source)
            if value is not None and value.size == channels:
                return value, sources[1 - index]
        return None
'''

EDITS: list[Edit] = [
    # AdvancedHQQParameters: refinement_steps (the least-squares refinement, beside the per-group fallback that keeps
    # round-to-nearest wherever it would reconstruct a group worse), input_energy_weighting, rtn_group_fallback,
    # unit_gain; the validation of refinement_steps and its dump into rt_info
    Edit(
        ALGORITHM,
        "        num_iterations = (advanced_parameters or AdvancedCompressionParameters()).hqq_params.num_iterations\n"
        "        if isinstance(num_iterations, bool) or not isinstance(num_iterations, int) or num_iterations < 0:\n"
        '            msg = f"The HQQ parameter num_iterations should be a non-negative integer, but {num_iterations} is'
        ' given."\n',
        "        hqq_params = (advanced_parameters or AdvancedCompressionParameters()).hqq_params\n"
        '        for name in ("num_iterations", "refinement_steps"):\n'
        "            value = getattr(hqq_params, name)\n"
        "            if isinstance(value, bool) or not isinstance(value, int) or value < 0:\n"
        '                msg = f"The HQQ parameter {name} should be a non-negative integer, but {name}={value} is'
        ' given."\n'
        "    ",
    ),
    Edit(
        OV_TESTS,
        "'hqq_params': {'num_iterations': 20, 'rtn_value_projections': True\"",
        "'rtn_value_projections': True, 'refinement_steps': 5\"",
    ),
    insert_after(
        TEMPLATE,
        '            ({"advanced_parameters": CompressionParams(hqq_params=HQQParams(num_iterations=-1))},'
        " nncf.ValidationError),\n",
        "            (\n"
        '                {"advanced_parameters": CompressionParams(hqq_params=HQQParams(refinement_steps=1.5))},\n'
        "                nncf.ValidationError,\n"
        "            ),\n",
    ),
    Edit(TEMPLATE, '"scale_estimation", "iterations"]', '"scale_estimation", "iterations", "steps"]'),
    insert_after(
        ADVANCED_PARAMETERS,
        "        Defaults to True.\n    :type rtn_value_projections: bool\n",
        "    :param refinement_steps: Number of least-squares steps on the scales and zero points after HQQ's\n"
        "        iterations. Defaults to 5.\n"
        "    :type refinement_steps: int\n"
        "    :param input_energy_weighting: Whether the refinement and the rounding fallback weight the error of\n"
        "        input channel j by gamma_j^2 + beta_j^2 when a normalization x_hat * gamma + beta feeds the layer.\n"
        "        Defaults to True.\n"
        "    :type input_energy_weighting: bool\n"
        "    :param rtn_group_fallback: Whether a group keeps round-to-nearest where it reconstructs the group\n"
        "        better. Defaults to True.\n"
        "    :type rtn_group_fallback: bool\n"
        "    :param unit_gain: Whether the scale of every group is finally set so that the group is reproduced with\n"
        "        unit gain along its weights. Defaults to True.\n"
        "    :type unit_gain: bool\n",
    ),
    insert_after(
        ADVANCED_PARAMETERS,
        "    rtn_value_projections: bool = True\n",
        "    refinement_steps: int = 5\n"
        "    input_energy_weighting: bool = True\n    rtn_group_fallback: bool = True\n    unit_gain: bool = True\n",
    ),
    # algorithm.py: HQQ built with its parameters by name
    Edit(
        ALGORITHM,
        "            self._hqq_algo = HQQ(self._mode, hqq_params.num_iterations, hqq_params.rtn_value_projections)\n",
        "            self._hqq_algo = HQQ(\n"
        "                self._mode,\n"
        "                num_iterations=hqq_params.num_iterations,\n"
        "                refinement_steps=hqq_params.refinement_steps,\n"
        "                rtn_value_projections=hqq_params.rtn_value_projections,\n"
        "                input_energy_weighting=hqq_params.input_energy_weighting,\n"
        "                rtn_group_fallback=hqq_params.rtn_group_fallback,\n"
        "                unit_gain=hqq_params.unit_gain,\n"
        "            )\n",
    ),
    # weight_lowering.py: final codes are written as they are
    insert_before(
        WEIGHT_LOWERING,
        "    precomputed_scale, precomputed_zero_point = (\n",
        "    # The integer codes of an earlier step (HQQ with unit gain) are final: encoding the weight again with\n"
        "    # the rescaled scales would change them.\n"
        "    if (\n"
        "        config.is_integer\n"
        "        and precomputed_compressed_weight is not None\n"
        "        and precomputed_compressed_weight.tensor is not None\n"
        "    ):\n"
        "        return precomputed_compressed_weight\n",
    ),
    # the backends: the normalization feeding a layer
    insert_after(
        BACKEND,
        "        Property for the backend-specific metatypes of the operations that read a tensor's shape only.\n"
        '        """\n',
        NORMALIZATION_AFFINE,
    ),
    append(OV_BACKEND, OV_NORMALIZATION_AFFINE),
    insert_after(
        PT_BACKEND,
        "from nncf.torch.graph.operator_metatypes import MATMUL_METATYPES\n",
        "from nncf.torch.graph.operator_metatypes import PTAddMetatype\n",
    ),
    insert_after(
        PT_BACKEND,
        "from nncf.torch.graph.operator_metatypes import PTDropoutMetatype\n",
        "from nncf.torch.graph.operator_metatypes import PTLayerNormMetatype\n",
    ),
    append(PT_BACKEND, PT_NORMALIZATION_AFFINE),
]
