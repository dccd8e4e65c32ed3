"""The edits of the fourth pull request (0004): HQQ with Scale Estimation. 0001 refuses the combination; here HQQ's
scales are refined on the calibration data (its zero points kept), then the output guard gives every output row
whichever of HQQ's refined result, NNCF's own Scale Estimation (its code, the user's ``scale_estimation_params``) and
round-to-nearest reproduces the layer's outputs on the calibration data best; ``calibration_token_rows`` fits token
rows collected with NNCF's statistics instead of the per-sample means."""

from __future__ import annotations

from edit import Edit
from edit import insert_after
from edit import insert_before
from edits_0001 import ADVANCED_PARAMETERS
from edits_0001 import ALGORITHM
from edits_0001 import CHECK_HQQ
from edits_0001 import QUANTIZE_MODEL
from edits_0001 import TEMPLATE

GUARD_PARAMETERS_DOC = """\
    :param output_guard: With Scale Estimation, whether every output channel of a layer takes whichever of HQQ's
        refined result, NNCF's Scale Estimation result and round-to-nearest reproduces the layer's outputs on the
        calibration data best. With False, NNCF's Scale Estimation does not run: HQQ's refinement of the scales on
        the data stands in for it. Defaults to True.
    :type output_guard: bool
    :param calibration_token_rows: With Scale Estimation, how many token rows of each calibration sample's input to a
        layer HQQ's refinement and output guard fit (drawn at random); 0 fits the per-sample means. Defaults to 0.
    :type calibration_token_rows: int
"""

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
    # compress_weights: hqq with scale_estimation is no longer refused
    Edit(
        ALGORITHM,
        CHECK_HQQ[CHECK_HQQ.index("        if scale_estimation:\n") : CHECK_HQQ.index("        if compression_format")],
        "",
    ),
    Edit(
        QUANTIZE_MODEL,
        "        point stored in float16. Combines with AWQ (HQQ compresses AWQ's scaled weights); not with\n"
        "        scale_estimation, GPTQ or lora_correction. OpenVINO and PyTorch models, DQ compression format.\n",
        "        point stored in float16. Combines with AWQ (HQQ compresses AWQ's scaled weights) and with\n"
        "        scale_estimation (HQQ's scales refined on the data, then every output row from the result of\n"
        "        HQQ, Scale Estimation or rounding that fits the data best); not with GPTQ or lora_correction.\n"
        "        OpenVINO and PyTorch models, DQ compression format.\n",
    ),
    # AdvancedHQQParameters: output_guard, calibration_token_rows
    insert_after(ADVANCED_PARAMETERS, "    :type unit_gain: bool\n", GUARD_PARAMETERS_DOC),
    insert_after(
        ADVANCED_PARAMETERS,
        "    unit_gain: bool = True\n",
        "    output_guard: bool = True\n    calibration_token_rows: int = 0\n",
    ),
    # algorithm.py: HQQ in Scale Estimation's slot, with the statistics
    Edit(
        ALGORITHM,
        "                unit_gain=hqq_params.unit_gain,\n            )\n",
        "                unit_gain=hqq_params.unit_gain,\n"
        "                subset_size=self._advanced_parameters.scale_estimation_params.subset_size,\n"
        "                output_guard=hqq_params.output_guard,\n"
        "                scale_estimation_params=self._advanced_parameters.scale_estimation_params,\n"
        "            )\n"
        "        self._hqq_token_row_inputs = {}\n",
    ),
    Edit(
        ALGORITHM,
        "            elif self._hqq:\n"
        "                precomputed_compressed_weights = self._hqq_algo.apply(\n"
        "                    model=model,\n"
        "                    graph=graph,\n"
        "                    all_weight_params=all_weight_params,\n"
        "                    backend_entity=self._backend_entity,\n"
        "                )\n",
        "",
    ),
    Edit(
        ALGORITHM,
        "        else:\n            if self._scale_estimation:\n"
        "                precomputed_compressed_weights = self._scale_estimation_algo.apply(\n",
        "        else:\n            if self._hqq:\n"
        "                precomputed_compressed_weights = self._hqq_algo.apply(\n"
        "                    model=model,\n"
        "                    graph=graph,\n"
        "                    all_weight_params=all_weight_params,\n"
        "                    statistics=statistics if self._scale_estimation else None,\n"
        "                    backend_entity=self._backend_entity,\n"
        "                )\n"
        "            elif self._scale_estimation:\n"
        "                precomputed_compressed_weights = self._scale_estimation_algo.apply(\n",
    ),
    # algorithm.py: the token rows collected with NNCF's statistics and scaled by AWQ
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
    # NNCF's test template (applied by `build.py --nncf-tests NNCF_REPO`): hqq with Scale Estimation is no refusal
    Edit(TEMPLATE, '            ({"scale_estimation": True, "awq": True}, nncf.ValidationError),\n', ""),
    Edit(TEMPLATE, '"lora_correction", "scale_estimation", "iterations"', '"lora_correction", "iterations"'),
]
