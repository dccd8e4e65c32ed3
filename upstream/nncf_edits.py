"""The changes to NNCF 3.4.0's own files: anchored textual edits, each anchor found exactly once.

Each ``Edit`` replaces one anchor (a few lines of NNCF 3.4.0, quoted exactly) in one file with new text, usually
the anchor plus what HQQ adds. ``apply_edits`` stops at the first anchor that is not found exactly once, naming the
file and the anchor, so that another NNCF release fails loudly instead of being patched in the wrong place.

What changes:
- ``nncf/quantization/quantize_model.py``: ``compress_weights(..., hqq=None)``, its docstring and telemetry, the
  hqq request checked before anything is transformed, ``hqq`` passed to the OpenVINO and Torch implementations;
- ``nncf/quantization/advanced_parameters.py``: ``AdvancedCompressionParameters.hqq_params``
  (``AdvancedHQQParameters``, the ``HQQParameters`` of ``hqq_parameters.py``);
- ``nncf/quantization/algorithms/weight_compression/algorithm.py``: ``check_hqq_configuration``;
  ``WeightCompression(..., hqq=False)``: HQQ in Scale Estimation's slot, HQQ's backends, its token-row statistics
  collected with NNCF's and scaled by AWQ like NNCF's, its weights checked and planned before anything is written,
  "(HQQ)" in the progress bar, ``hqq`` in the dumped parameters (only when on);
- ``nncf/openvino/quantization/quantize_model.py`` and ``nncf/torch/function_hook/quantization/quantize_model.py``:
  ``compress_weights_impl(..., hqq=False)`` builds ``WeightCompression(..., hqq=hqq)``;
- ``nncf/quantization/algorithms/weight_compression/openvino_backend.py`` (``writer_edits``): the OpenVINO writer
  writes a precomputed weight's final integer codes as they are instead of encoding the weight again, through
  functions the build copies from ``nncf_hqq/openvino/writer.py`` (``WRITER_FUNCTIONS``).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

QUANTIZE_MODEL = "nncf/quantization/quantize_model.py"
ADVANCED_PARAMETERS = "nncf/quantization/advanced_parameters.py"
ALGORITHM = "nncf/quantization/algorithms/weight_compression/algorithm.py"
OV_QUANTIZE_MODEL = "nncf/openvino/quantization/quantize_model.py"
PT_QUANTIZE_MODEL = "nncf/torch/function_hook/quantization/quantize_model.py"
OV_BACKEND = "nncf/quantization/algorithms/weight_compression/openvino_backend.py"
WC = "nncf.quantization.algorithms.weight_compression"


class EditError(Exception):
    """An anchor not found exactly once: the NNCF source is not the release the edits were written for."""


@dataclass(frozen=True)
class Edit:
    """Replace ``anchor`` (found exactly once in ``file``) with ``new``."""

    file: str
    anchor: str
    new: str


def insert_after(file: str, anchor: str, text: str) -> Edit:
    return Edit(file, anchor, anchor + text)


def insert_before(file: str, anchor: str, text: str) -> Edit:
    return Edit(file, anchor, text + anchor)


def apply_edits(root: Path, edits: list[Edit]) -> list[str]:
    """Applies ``edits`` to the tree at ``root`` (holding ``nncf/``); returns the files changed."""
    changed: list[str] = []
    for edit in edits:
        path = root / edit.file
        text = path.read_text()
        count = text.count(edit.anchor)
        if count != 1:
            first_line = edit.anchor.strip().splitlines()[0]
            msg = f"{edit.file}: anchor found {count} times (expected once): {first_line!r} ... (NNCF 3.4.0 expected)"
            raise EditError(msg)
        path.write_text(text.replace(edit.anchor, edit.new))
        if edit.file not in changed:
            changed.append(edit.file)
    return changed


# --- nncf/quantization/quantize_model.py ----------------------------------------------------------------------

COMPRESS_WEIGHTS_EDITS = [
    insert_after(QUANTIZE_MODEL, '        "lora_correction",\n        "backup_mode",\n', '        "hqq",\n'),
    insert_after(
        QUANTIZE_MODEL,
        "    lora_correction: bool | None = None,\n    backup_mode: BackupMode | None = None,\n"
        "    compression_format: CompressionFormat = CompressionFormat.DQ,\n"
        "    advanced_parameters: AdvancedCompressionParameters | None = None,\n",
        "    hqq: bool | None = None,\n",
    ),
    insert_after(
        QUANTIZE_MODEL,
        "    :type lora_correction: bool\n",
        "    :param hqq: Indicates whether to use Half-Quadratic Quantization (HQQ): the scales and zero points\n"
        "        of the layers compressed in the primary mode are optimised by HQQ's proximal solver (data-free;\n"
        "        with scale_estimation and a dataset, also refined on the calibration inputs). OpenVINO and\n"
        "        PyTorch models, modes INT4_ASYM, INT8_ASYM, INT4_SYM, INT8_SYM (and INT3_SYM, INT2_SYM for\n"
        "        OpenVINO), DQ format, not with GPTQ. Its hyper-parameters: `advanced_parameters.hqq_params`.\n"
        "    :type hqq: bool\n",
    ),
    insert_after(
        QUANTIZE_MODEL,
        "    backend = get_backend(model)\n    compression_weights_impl: Callable[..., Any] | None = None\n",
        "    if hqq:\n        check_hqq_configuration(backend, mode, gptq, compression_format, advanced_parameters)\n",
    ),
    insert_before(
        QUANTIZE_MODEL,
        "    return compression_weights_impl(\n        model=model,  # type: ignore\n",
        '    if hqq:\n        weight_compression_configuration["hqq"] = True\n',
    ),
    insert_before(
        QUANTIZE_MODEL,
        "from nncf.quantization.algorithms.weight_compression.algorithm import check_user_compression_configuration\n",
        "from nncf.quantization.algorithms.weight_compression.algorithm import check_hqq_configuration\n",
    ),
]

# --- nncf/quantization/advanced_parameters.py -----------------------------------------------------------------

ADVANCED_PARAMETERS_EDITS = [
    insert_after(
        ADVANCED_PARAMETERS,
        "from nncf.quantization.range_estimator import RangeEstimatorParameters\n",
        f"from {WC}.hqq_parameters import HQQParameters as AdvancedHQQParameters\n",
    ),
    insert_after(
        ADVANCED_PARAMETERS,
        "    :type adaptive_codebook_params: AdvancedAdaptiveCodebookParameters\n",
        "    :param hqq_params: Advanced parameters for HQQ (used with `hqq=True`); the defaults are the recommended\n"
        "        configuration.\n"
        "    :type hqq_params: AdvancedHQQParameters\n",
    ),
    insert_after(
        ADVANCED_PARAMETERS,
        "    adaptive_codebook_params: AdvancedAdaptiveCodebookParameters = field(\n"
        "        default_factory=AdvancedAdaptiveCodebookParameters\n    )\n",
        "    hqq_params: AdvancedHQQParameters = field(default_factory=AdvancedHQQParameters)\n",
    ),
]

# --- nncf/quantization/algorithms/weight_compression/algorithm.py ---------------------------------------------

CHECK_HQQ_CONFIGURATION = f'''

#: The modes HQQ writes on PyTorch models: NNCF's Torch backend has decompressors for 4- and 8-bit codes.
HQQ_TORCH_MODES = [
    CompressWeightsMode.INT4_ASYM,
    CompressWeightsMode.INT4_SYM,
    CompressWeightsMode.INT8_ASYM,
    CompressWeightsMode.INT8_SYM,
]


def check_hqq_configuration(
    backend: BackendType,
    mode: CompressWeightsMode,
    gptq: bool | None,
    compression_format: CompressionFormat,
    advanced_parameters: AdvancedCompressionParameters | None,
) -> None:
    """
    Validates a weight compression request with `hqq=True`, before anything is transformed.
    """
    from {WC}.hqq import SUPPORTED_MODES
    from {WC}.hqq_parameters import HQQParameters
    from {WC}.hqq_parameters import ZeroPointFormat

    if backend not in (BackendType.OPENVINO, BackendType.TORCH):
        msg = f"HQQ supports OpenVINO and PyTorch models; {{backend.value}} backend does not support the hqq option."
        raise nncf.ParameterNotSupportedError(msg)
    supported = HQQ_TORCH_MODES if backend == BackendType.TORCH else SUPPORTED_MODES
    if mode not in supported:
        names = ", ".join(m.name for m in supported)
        msg = f"HQQ supports the modes {{names}} on {{backend.value}} models; got {{mode}}."
        raise nncf.ValidationError(msg)
    if gptq:
        msg = "HQQ cannot be combined with GPTQ (gptq=True); use hqq=True with AWQ/Scale Estimation, or GPTQ alone."
        raise nncf.ValidationError(msg)
    if compression_format != CompressionFormat.DQ:
        msg = f"HQQ writes the DQ compression format only; got compression_format={{compression_format}}."
        raise nncf.ValidationError(msg)
    hqq_params = (advanced_parameters or AdvancedCompressionParameters()).hqq_params
    if not isinstance(hqq_params, HQQParameters):
        msg = f"advanced_parameters.hqq_params must be an AdvancedHQQParameters, got {{type(hqq_params).__name__}}."
        raise nncf.ValidationError(msg)
    if backend == BackendType.TORCH and hqq_params.zero_point_format == ZeroPointFormat.SPLIT:
        msg = (
            "zero_point_format='split' is an OpenVINO graph format (integer zero points plus output corrections); "
            "PyTorch models take 'float' or 'integer'."
        )
        raise nncf.ValidationError(msg)
'''

HQQ_METHODS = f'''
    def _create_hqq_algo(self) -> Any:
        """
        Creates HQQ for the primary mode, with the settings of Scale Estimation that its output guard compares with.
        """
        from {WC}.hqq import HQQ

        scale_estimation_params = self._advanced_parameters.scale_estimation_params
        return HQQ(
            self._advanced_parameters.hqq_params,
            self._mode,
            None,
            scale_estimation_params.subset_size,
            scale_estimation_params,
        )

    def _create_hqq_backend_entity(self, model: TModel) -> None:
        """
        Creates the backend that answers HQQ's questions about the graph and writes HQQ's results.
        """
        model_backend = get_backend(model)
        if model_backend == BackendType.OPENVINO:
            from {WC}.hqq_openvino.backend import HQQOVBackend

            self._backend_entity = HQQOVBackend(model, self._hqq_algo)
        else:
            from {WC}.hqq_torch.backend import HQQPTBackend
            from {WC}.hqq_torch.targets import DEFAULT_TARGET_PARAMETERS

            config = WeightCompressionConfig(mode=self._mode, group_size=self._group_size)
            self._backend_entity = HQQPTBackend(
                self._hqq_algo, DEFAULT_TARGET_PARAMETERS, False, config, self._ignored_scope
            )

    def _add_hqq_token_row_points(
        self,
        statistic_container: StatisticPointsContainer,
        graph: NNCFGraph,
        matmul_input_to_output_nodes_map: dict[tuple[NNCFNode, int], list[NNCFNode]],
    ) -> None:
        """
        With `hqq_params.calibration_token_rows`, adds a collector of that many token rows of each calibration
        sample on every MatMul input, under its own algorithm key, so that NNCF's steps see their own statistics.
        """
        rows = self._hqq_algo.params.calibration_token_rows
        if not (self._data_aware_compression and self._scale_estimation and rows > 0):
            return
        if self._statistics_path:
            nncf_logger.info(
                "HQQ fits NNCF's per-sample means, not calibration_token_rows: the statistics cache "
                "(statistics_path) holds no token rows"
            )
            return
        from {WC}.hqq_statistics import add_token_row_points

        self._hqq_token_row_inputs = dict(matmul_input_to_output_nodes_map)
        add_token_row_points(
            statistic_container, graph, self._backend_entity, self._hqq_token_row_inputs, rows, self._subset_size
        )

    def _collect_hqq_token_rows(self, statistic_points: StatisticPointsContainer) -> None:
        """
        Gives HQQ the token rows collected for its data-aware steps.
        """
        from {WC}.hqq_statistics import token_row_statistics

        self._hqq_algo.token_statistics = token_row_statistics(
            statistic_points, self._backend_entity, self._hqq_token_row_inputs
        )

    def _prepare_hqq(self, model: TModel, graph: NNCFGraph, all_weight_params: list[WeightCompressionParameters]):
        """
        Rejects what HQQ cannot compress before anything is transformed and prepares HQQ's backend; without Scale
        Estimation, HQQ's compressed weights (computed when the writer reads them) are what the backend writes.
        """
        backend = self._backend_entity
        self._hqq_algo.check_weights(model, graph, all_weight_params, backend)
        backend.prepare(model, graph, all_weight_params)
        if not self._scale_estimation:
            backend.hqq_weights = self._hqq_algo.apply(model, graph, all_weight_params, None, backend)

    def _dumped_advanced_parameters(self) -> dict[str, Any]:
        """
        The advanced parameters as dumped into the model; `hqq_params` only when HQQ is used.
        """
        dumped = convert_to_dict_recursively(self._advanced_parameters)
        if not self._hqq:
            dumped.pop("hqq_params", None)
        return dumped

'''

WEIGHT_COMPRESSION_EDITS = [
    insert_before(ALGORITHM, "\n\ndef get_weight_compression_configuration(\n", CHECK_HQQ_CONFIGURATION),
    insert_after(
        ALGORITHM,
        "        compression_format: CompressionFormat = CompressionFormat.DQ,\n"
        "        advanced_parameters: AdvancedCompressionParameters | None = None,\n",
        "        hqq: bool = False,\n",
    ),
    insert_after(
        ALGORITHM,
        "        :param advanced_parameters: advanced parameters for algorithms in compression pipeline.\n",
        "        :param hqq: determines whether to use or not Half-Quadratic Quantization (HQQ) for the layers\n"
        "            compressed in the primary mode. With scale_estimation, HQQ takes Scale Estimation's place:\n"
        "            it refines its own result on calibration inputs (parameters: advanced_parameters.hqq_params).\n",
    ),
    insert_before(
        ALGORITHM,
        "        if self._codebook_estimation:\n"
        "            codebook_estimation_params = self._advanced_parameters.adaptive_codebook_params\n",
        "        self._hqq = hqq\n"
        "        self._hqq_token_row_inputs = {}\n"
        "        if self._hqq:\n"
        "            self._hqq_algo = self._create_hqq_algo()\n"
        "            if self._scale_estimation:\n"
        "                self._scale_estimation_algo = self._hqq_algo\n\n",
    ),
    insert_after(
        ALGORITHM,
        '            msg = f"Cannot return backend-specific entity because {model_backend.value} is not supported!"\n'
        "            raise nncf.UnsupportedBackendError(msg)\n",
        "        if self._hqq:\n            self._create_hqq_backend_entity(model)\n",
    ),
    insert_before(
        ALGORITHM,
        "\n        return statistic_container\n\n    def _get_statistics_for_weights_compression(\n",
        "        if self._hqq:\n"
        "            self._add_hqq_token_row_points(statistic_container, graph, matmul_input_to_output_nodes_map)\n",
    ),
    insert_after(
        ALGORITHM,
        "        statistics = self._get_statistics_for_weights_compression(matmul_input_to_output_nodes_map, "
        "statistic_points)\n",
        "        if self._hqq_token_row_inputs:\n            self._collect_hqq_token_rows(statistic_points)\n",
    ),
    Edit(
        ALGORITHM,
        "        :return: Transformed model with compressed weights and inserted backend-specific decompressor.\n"
        '        """\n'
        "        if self._awq:\n",
        "        :return: Transformed model with compressed weights and inserted backend-specific decompressor.\n"
        '        """\n'
        "        if self._hqq:\n"
        "            self._prepare_hqq(model, graph, all_weight_params)\n"
        "        if self._awq:\n",
    ),
    insert_after(
        ALGORITHM,
        "            statistics = self.awq_algo.update_statistics(statistics)\n",
        "            if self._hqq and self._hqq_algo.token_statistics:\n"
        "                # AWQ scales HQQ's token rows like NNCF's means; a MatMul without rows reads as empty\n"
        "                token_rows = self._hqq_algo.token_statistics\n"
        "                empty = lambda: WCTensorStatistic(mean_values=[], shape_values=[])  # noqa: E731\n"
        "                self.awq_algo.update_statistics(defaultdict(empty, token_rows))\n",
    ),
    Edit(
        ALGORITHM,
        '        description = "Applying Weight Compression"\n',
        '        description = "Applying Weight Compression (HQQ)" if self._hqq else "Applying Weight Compression"\n',
    ),
    Edit(
        ALGORITHM,
        '                "compression_format": self._compression_format.value,\n'
        '                "advanced_parameters": convert_to_dict_recursively(self._advanced_parameters),\n'
        "            },\n",
        '                "compression_format": self._compression_format.value,\n'
        '                "advanced_parameters": self._dumped_advanced_parameters(),\n'
        '                **({"hqq": True} if self._hqq else {}),\n'
        "            },\n",
    ),
    insert_before(
        ALGORITHM,
        "    def _get_activation_node_port_and_channel(self, node: NNCFNode, nncf_graph: NNCFGraph)",
        HQQ_METHODS.lstrip("\n"),
    ),
]

# --- the OpenVINO and Torch compress_weights_impl ---------------------------------------------------------------

IMPL_EDITS = [
    Edit(
        OV_QUANTIZE_MODEL,
        "    advanced_parameters: AdvancedCompressionParameters | None = None,\n) -> ov.Model:\n"
        '    """\n    Implementation of the `compress_weights()` method for the OpenVINO backend.\n',
        "    advanced_parameters: AdvancedCompressionParameters | None = None,\n    hqq: bool = False,\n"
        ") -> ov.Model:\n"
        '    """\n    Implementation of the `compress_weights()` method for the OpenVINO backend.\n',
    ),
    insert_after(
        OV_QUANTIZE_MODEL,
        "        compression_format,\n        advanced_parameters,\n",
        "        hqq=hqq,\n",
    ),
    Edit(
        PT_QUANTIZE_MODEL,
        "    advanced_parameters: AdvancedCompressionParameters | None = None,\n) -> torch.nn.Module:\n"
        '    """\n    Implementation of the `compress_weights()` method for the PyTorch backend.\n',
        "    advanced_parameters: AdvancedCompressionParameters | None = None,\n    hqq: bool = False,\n"
        ") -> torch.nn.Module:\n"
        '    """\n    Implementation of the `compress_weights()` method for the PyTorch backend.\n',
    ),
    Edit(
        PT_QUANTIZE_MODEL,
        "        compression_format,\n        advanced_parameters,\n    )\n    graph = build_graph(model)\n",
        "        compression_format,\n        advanced_parameters,\n        hqq=hqq,\n"
        "    )\n    graph = build_graph(model)\n",
    ),
]

ALL_EDITS = COMPRESS_WEIGHTS_EDITS + ADVANCED_PARAMETERS_EDITS + WEIGHT_COMPRESSION_EDITS + IMPL_EDITS


# --- nncf/quantization/algorithms/weight_compression/openvino_backend.py -----------------------------------------

#: The functions of ``nncf_hqq/openvino/writer.py`` that the build copies into ``OV_BACKEND``, in this order.
WRITER_SOURCE = "nncf_hqq/openvino/writer.py"
WRITER_FUNCTIONS = ("has_final_codes", "final_codes", "packed_4bit_codes")

#: Where NNCF's OpenVINO writer encodes a weight (with a precomputed scale and zero point, if given).
WRITER_ENCODING = (
    "        with disable_results_caching(OV_MODEL_CACHE):\n"
    "            compressed_weight = compress_weight(\n"
    "                weight,\n"
    "                reduction_axes,\n"
    "                compression_config,\n"
    "                precomputed_compressed_weight,\n"
    "            )\n"
)


def writer_edits(functions: str) -> list[Edit]:
    """
    The OpenVINO writer's change: ``functions`` (the source of ``WRITER_FUNCTIONS``) go before the backend class
    with the imports they need, and ``_create_compression_subgraph`` writes final codes (``has_final_codes``) as
    they are instead of encoding the weight. Without final codes (every NNCF step: Scale Estimation and GPTQ give
    scales and zero points only) the writer does what it did.
    """
    return [
        insert_before(OV_BACKEND, "import openvino as ov\n", "import numpy as np\n"),
        insert_after(OV_BACKEND, "from nncf.tensor import Tensor\n", "from nncf.tensor import TensorBackend\n"),
        insert_before(
            OV_BACKEND, "class OVWeightCompressionAlgoBackend(WeightCompressionAlgoBackend):\n", functions + "\n\n"
        ),
        Edit(
            OV_BACKEND,
            WRITER_ENCODING,
            "        if has_final_codes(precomputed_compressed_weight, compression_config):\n"
            "            # codes computed by an earlier step (HQQ) are final: written as they are, not encoded again\n"
            "            element_type = DTYPE_MAP[compression_config.compression_dtype]\n"
            "            compressed_weight = final_codes(precomputed_compressed_weight, element_type)\n"
            "        else:\n" + textwrap.indent(WRITER_ENCODING, "    "),
        ),
    ]
