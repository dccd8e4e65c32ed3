"""The edits of the second pull request (0002): with Scale Estimation, HQQ's output guard (every output row from HQQ's
refined result, NNCF's Scale Estimation or round-to-nearest, whichever reproduces the layer's outputs on the
calibration data best) and token-row statistics (``calibration_token_rows``), collected with NNCF's."""

from __future__ import annotations

from edit import Edit
from edit import insert_after
from edit import insert_before
from edits_0001 import ADVANCED_PARAMETERS
from edits_0001 import ALGORITHM
from edits_0001 import WC

HQQ_PY = f"{WC}/hqq.py"

GUARD_PARAMETERS_DOC = """\
    :param output_guard: With Scale Estimation, whether every output channel of a layer takes whichever of HQQ's
        refined result, NNCF's Scale Estimation result and round-to-nearest reproduces the layer's outputs on the
        calibration data best. Defaults to True.
    :type output_guard: bool
    :param calibration_token_rows: With Scale Estimation, how many token rows of each calibration sample's input to a
        layer HQQ's refinement and output guard fit (drawn at random); 0 fits the per-sample means. Defaults to 0.
    :type calibration_token_rows: int
"""

GUARD_METHOD = '''
    def _calibration_inputs(
        self, graph: NNCFGraph, wp: WeightCompressionParameters, statistics: WCTensorStatistic
    ) -> Tensor:
        """
        The calibration inputs [in, samples] of a weight: its token rows when collected, else subset_size means.
        """
        token_rows = self.token_statistics.get(wp.node_with_weight.node_name)
        if token_rows is not None:
            return _as_float32_numpy(process_stats(token_rows, -1)[1])
        activation_axis, _ = self._backend_entity.get_activation_channel_axis_and_shape(graph, wp.node_with_weight)
        return _as_float32_numpy(process_stats(statistics, self._subset_size, act_ch_axis=activation_axis)[1])

    def _guard_on_outputs(
        self,
        weight: Tensor,
        reduction_axis: int,
        config: WeightCompressionConfig,
        activations: Tensor,
        candidate: CompressedWeight,
        reference: CompressedWeight | None,
    ) -> CompressedWeight:
        """
        Every output row from HQQ's candidate, NNCF's Scale Estimation (reference) or round-to-nearest, whichever
        has the least output error on the activations.
        """
        grouped, axis = split_into_groups(weight, reduction_axis, config.group_size)
        num_bits = config.num_bits
        rtn = to_compressed_weight(grouped, *rtn_scale_zero_point(grouped, axis, num_bits), num_bits, True)
        candidates = [candidate, rtn]
        if reference is not None and reference.scale is not None:
            scale, zero_point = (_as_float32_numpy(t) for t in (reference.scale, reference.zero_point))
            candidates.insert(1, to_compressed_weight(grouped, scale, zero_point, num_bits, True))
        if activations.shape[-1] > activations.shape[-2]:
            activations = equivalent_inputs(activations)
        return choose_per_row(weight, candidates, activations, reduction_axis, config.group_size != -1)[0]
'''

TOKEN_ROWS_METHODS = '''
    def _add_hqq_token_row_points(
        self,
        statistic_container: StatisticPointsContainer,
        graph: NNCFGraph,
        matmul_input_to_output_nodes_map: dict[tuple[NNCFNode, int], list[NNCFNode]],
    ) -> None:
        """
        With HQQ's calibration_token_rows, adds a collector of that many token rows of each calibration sample on
        every MatMul input, under its own algorithm key, so that NNCF's steps see their own statistics.
        """
        rows = self._advanced_parameters.hqq_params.calibration_token_rows
        if not (self._hqq and self._scale_estimation and self._data_aware_compression and rows > 0):
            return
        if self._statistics_path:
            nncf_logger.info("HQQ fits the per-sample means: the statistics cache holds no token rows")
            return
        self._hqq_token_row_inputs = dict(matmul_input_to_output_nodes_map)
        add_token_row_points(
            statistic_container, graph, self._backend_entity, self._hqq_token_row_inputs, rows, self._subset_size
        )

'''

EDITS: list[Edit] = [
    # AdvancedHQQParameters: output_guard, calibration_token_rows
    insert_after(
        ADVANCED_PARAMETERS,
        "        Defaults to True.\n    :type rtn_value_projections: bool\n",
        GUARD_PARAMETERS_DOC,
    ),
    insert_after(
        ADVANCED_PARAMETERS,
        "    rtn_value_projections: bool = True\n",
        "    output_guard: bool = True\n    calibration_token_rows: int = 0\n",
    ),
    # hqq.py: the output guard and the token rows
    insert_after(
        HQQ_PY,
        "from nncf.parameters import CompressWeightsMode\n",
        "from nncf.quantization.advanced_parameters import AdvancedScaleEstimationParameters\n",
    ),
    insert_after(
        HQQ_PY,
        "from nncf.quantization.algorithms.weight_compression.config import WeightCompressionParameters\n",
        "from nncf.quantization.algorithms.weight_compression.hqq_guard import choose_per_row\n",
    ),
    insert_after(
        HQQ_PY,
        "from nncf.quantization.algorithms.weight_compression.parameters import CompressedWeight\n",
        "from nncf.quantization.algorithms.weight_compression.scale_estimation import ScaleEstimation\n",
    ),
    Edit(
        HQQ_PY,
        "        subset_size: int = 32,\n    ):\n",
        "        subset_size: int = 32,\n"
        "        output_guard: bool = True,\n"
        "        scale_estimation_params: AdvancedScaleEstimationParameters | None = None,\n"
        "    ):\n",
    ),
    insert_after(
        HQQ_PY,
        "        :param subset_size: The number of calibration samples the scales are refined on.\n",
        "        :param output_guard: Whether every output row then takes whichever of HQQ's result, NNCF's Scale\n"
        "            Estimation result and round-to-nearest has the least output error on the calibration data.\n"
        "        :param scale_estimation_params: The parameters of that Scale Estimation.\n",
    ),
    Edit(
        HQQ_PY,
        "        self._subset_size = subset_size\n        self._backend_entity = None\n",
        "        self._subset_size = subset_size\n"
        "        self._output_guard = output_guard\n"
        "        self._scale_estimation_params = scale_estimation_params or AdvancedScaleEstimationParameters()\n"
        "        self._references = {}\n"
        "        self._backend_entity = None\n"
        "        # Token rows of the calibration inputs by node name, when collected\n"
        "        self.token_statistics: dict[str, WCTensorStatistic] = {}\n",
    ),
    Edit(
        HQQ_PY,
        "            keep_rtn = self._rtn_value_projections and self._is_attention_value(graph, wp.node_with_weight)\n",
        "            keep_rtn = self._rtn_value_projections and self._is_attention_value(graph, wp.node_with_weight)\n"
        "            keep_rtn = keep_rtn and not (self._output_guard and node_statistics is not None)\n",
    ),
    insert_before(
        HQQ_PY,
        "        return HQQCompressedWeights(planned, lambda item: self._compress_planned(model, graph, item))\n",
        "        with_statistics = [item[0] for item in planned.values() if item[3] is not None]\n"
        "        if self._output_guard and with_statistics:\n"
        "            se = self._scale_estimation_params\n"
        "            algorithm = ScaleEstimation(se.subset_size, se.initial_steps, se.scale_steps, se.weight_penalty)\n"
        "            references = algorithm.apply(model, graph, with_statistics, statistics, self._backend_entity)\n"
        "            self._references = references\n",
    ),
    Edit(
        HQQ_PY,
        "        if statistics is not None:\n"
        "            activation_axis, _ = self._backend_entity.get_activation_channel_axis_and_shape(graph, "
        "wp.node_with_weight)\n"
        "            _, activations = process_stats(statistics, self._subset_size, act_ch_axis=activation_axis)\n"
        "            activations = _as_float32_numpy(activations)\n"
        "            result = self.refine_on_activations(float_weight, axis, wp.compression_config, activations, "
        "result)\n",
        "        if statistics is not None:\n"
        "            activations = self._calibration_inputs(graph, wp, statistics)\n"
        "            result = self.refine_on_activations(float_weight, axis, wp.compression_config, activations, "
        "result)\n"
        "            if self._output_guard:\n"
        "                reference = self._references.get(wp.weight_name)\n"
        "                config = wp.compression_config\n"
        "                result = self._guard_on_outputs(float_weight, axis, config, activations, result, reference)\n",
    ),
    insert_before(
        HQQ_PY,
        "    def _input_importance(self, model: TModel, graph: NNCFGraph, node: NNCFNode, channels: int)",
        GUARD_METHOD.lstrip("\n") + "\n",
    ),
    # algorithm.py: HQQ's new parameters, the token rows collected with NNCF's statistics and scaled by AWQ
    Edit(
        ALGORITHM,
        "                self._advanced_parameters.scale_estimation_params.subset_size,\n            )\n",
        "                self._advanced_parameters.scale_estimation_params.subset_size,\n"
        "                hqq_params.output_guard,\n"
        "                self._advanced_parameters.scale_estimation_params,\n"
        "            )\n"
        "        self._hqq_token_row_inputs = {}\n",
    ),
    insert_after(
        ALGORITHM,
        "from nncf.quantization.algorithms.weight_compression.hqq import HQQ_MODES\n",
        "from nncf.quantization.algorithms.weight_compression.hqq_statistics import add_token_row_points\n"
        "from nncf.quantization.algorithms.weight_compression.hqq_statistics import token_row_statistics\n",
    ),
    insert_after(
        ALGORITHM,
        '        for name in ("num_iterations", "refinement_steps"',
        ', "calibration_token_rows"',
    ),
    insert_before(
        ALGORITHM,
        "\n        return statistic_container\n\n    def _get_statistics_for_weights_compression(\n",
        "        self._add_hqq_token_row_points(statistic_container, graph, matmul_input_to_output_nodes_map)\n",
    ),
    insert_after(
        ALGORITHM,
        "        statistics = self._get_statistics_for_weights_compression(matmul_input_to_output_nodes_map, "
        "statistic_points)\n",
        "        if self._hqq_token_row_inputs:\n"
        "            self._hqq_algo.token_statistics = token_row_statistics(\n"
        "                statistic_points, self._backend_entity, self._hqq_token_row_inputs\n"
        "            )\n",
    ),
    insert_after(
        ALGORITHM,
        "            statistics = self.awq_algo.update_statistics(statistics)\n",
        "            if self._hqq and self._hqq_algo.token_statistics:\n"
        "                # AWQ scales HQQ's token rows like the means; a MatMul without rows reads as empty\n"
        "                empty = lambda: WCTensorStatistic(mean_values=[], shape_values=[])\n"
        "                self.awq_algo.update_statistics(defaultdict(empty, self._hqq_algo.token_statistics))\n",
    ),
    insert_before(
        ALGORITHM,
        "    def _get_activation_node_port_and_channel(self, node: NNCFNode, nncf_graph: NNCFGraph)",
        TOKEN_ROWS_METHODS.lstrip("\n"),
    ),
]
