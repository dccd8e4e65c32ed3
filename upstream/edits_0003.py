"""The edits of the third pull request (0003): HQQ with integer parameters only, for the fastest kernels and the
symmetric modes: ``integer_zero_point`` (the scale optimised under an integer zero point) and INT4_SYM, INT8_SYM,
INT3_SYM, INT2_SYM (HQQ's scale-only solver)."""

from __future__ import annotations

from edit import Edit
from edit import insert_after
from edits_0001 import ADVANCED_PARAMETERS
from edits_0002 import HQQ_PY

INTEGER_ZERO_POINT_DOC = """\
    :param integer_zero_point: Whether asymmetric zero points are integer codes, as round-to-nearest writes them
        (the scale is then optimised under them), instead of float16 values. Defaults to False.
    :type integer_zero_point: bool
"""

COMPRESS_0002 = """\
        grouped, axis = split_into_groups(weight, reduction_axis, config.group_size)
        num_bits = config.num_bits
        rtn = to_compressed_weight(grouped, *rtn_scale_zero_point(grouped, axis, num_bits), num_bits, True)
        if keep_rtn:
            return rtn
        weights = None
        if importance is not None:
            shape = [1] * weight.ndim
            shape[reduction_axis] = importance.size
            weights, _ = split_into_groups(importance.reshape(tuple(shape)), reduction_axis, config.group_size)
        inverse_scale, zero = solve_zero_point(grouped, axis, num_bits, self._num_iterations)
        if self._refinement_steps:
            steps = self._refinement_steps
            inverse_scale, zero = refine_least_squares(
                grouped, inverse_scale, zero, axis, num_bits, steps, weights, True
            )
        result = to_compressed_weight(grouped, 1.0 / inverse_scale, zero, num_bits, False)
        errors = (stored_group_error(grouped, compressed, axis, weights) for compressed in (result, rtn))
        result = choose_per_group(next(errors) <= next(errors), result, rtn)
        return with_unit_gain(grouped, result, axis) if self._unit_gain else result
"""

COMPRESS_0003 = '''\
        grouped, axis = split_into_groups(weight, reduction_axis, config.group_size)
        weights = None
        if importance is not None:
            shape = [1] * weight.ndim
            shape[reduction_axis] = importance.size
            weights, _ = split_into_groups(importance.reshape(tuple(shape)), reduction_axis, config.group_size)
        if config.is_asym_mode:
            result = self._compress_asymmetric(grouped, axis, config.num_bits, weights, keep_rtn)
        else:
            result = self._compress_symmetric(grouped, axis, config.num_bits, weights, keep_rtn)
        if not self._unit_gain or keep_rtn or config.num_bits < UNIT_GAIN_MIN_BITS:
            return result
        return with_unit_gain(grouped, result, axis)

    def _compress_asymmetric(
        self, grouped: Tensor, axis: int, num_bits: int, weights: Tensor | None, keep_rtn: bool
    ) -> CompressedWeight:
        rtn = to_compressed_weight(grouped, *rtn_scale_zero_point(grouped, axis, num_bits), num_bits, True)
        if keep_rtn:
            return rtn
        inverse_scale, zero = solve_zero_point(grouped, axis, num_bits, self._num_iterations)
        steps = self._refinement_steps
        refine = refine_with_integer_zero if self._integer_zero_point else refine_least_squares
        if self._integer_zero_point or steps:
            inverse_scale, zero = refine(grouped, inverse_scale, zero, axis, num_bits, steps, weights, True)
        result = to_compressed_weight(grouped, 1.0 / inverse_scale, zero, num_bits, self._integer_zero_point)
        errors = (stored_group_error(grouped, compressed, axis, weights) for compressed in (result, rtn))
        return choose_per_group(next(errors) <= next(errors), result, rtn)

    def _compress_symmetric(
        self, grouped: Tensor, axis: int, num_bits: int, weights: Tensor | None, keep_rtn: bool
    ) -> CompressedWeight:
        """
        HQQ's scale-only solver from NNCF's symmetric scale (floored to clip no extreme weight), its least-squares
        refinement, and round-to-nearest where it reconstructs the group better.
        """
        rtn_scale = symmetric_init(grouped, axis, num_bits)
        rtn = to_symmetric_compressed_weight(grouped, rtn_scale, num_bits)
        if keep_rtn:
            return rtn
        scale = optimize_scale(grouped, rtn_scale, axis, num_bits, self._num_iterations, weights, True)
        if self._refinement_steps:
            scale = refine_symmetric_scale(grouped, scale, axis, num_bits, self._refinement_steps, weights, True)
        result = to_symmetric_compressed_weight(grouped, scale, num_bits)
        errors = (stored_group_error(grouped, compressed, axis, weights) for compressed in (result, rtn))
        better = next(errors) <= next(errors)
        tensor, scale = (fns.where(better, a, b) for a, b in ((result.tensor, rtn.tensor), (result.scale, rtn.scale)))
        return CompressedWeight(tensor, scale, None)
'''

GUARD_0002 = """\
        rtn = to_compressed_weight(grouped, *rtn_scale_zero_point(grouped, axis, num_bits), num_bits, True)
        candidates = [candidate, rtn]
        if reference is not None and reference.scale is not None:
            scale, zero_point = (_as_float32_numpy(t) for t in (reference.scale, reference.zero_point))
            candidates.insert(1, to_compressed_weight(grouped, scale, zero_point, num_bits, True))
"""

GUARD_0003 = """\
        if candidate.zero_point is None:
            rtn = to_symmetric_compressed_weight(grouped, symmetric_init(grouped, axis, num_bits), num_bits)
        else:
            rtn = to_compressed_weight(grouped, *rtn_scale_zero_point(grouped, axis, num_bits), num_bits, True)
        candidates = [candidate, rtn]
        if reference is not None and reference.scale is not None:
            scale = _as_float32_numpy(reference.scale)
            if candidate.zero_point is None:
                candidates.insert(1, to_symmetric_compressed_weight(grouped, scale, num_bits))
            else:
                zero_point = _as_float32_numpy(reference.zero_point)
                candidates.insert(1, to_compressed_weight(grouped, scale, zero_point, num_bits, True))
"""

EDITS: list[Edit] = [
    insert_after(
        ADVANCED_PARAMETERS,
        "        layer HQQ's refinement and output guard fit (drawn at random); 0 fits the per-sample means."
        " Defaults to 0.\n"
        "    :type calibration_token_rows: int\n",
        INTEGER_ZERO_POINT_DOC,
    ),
    insert_after(
        ADVANCED_PARAMETERS, "    calibration_token_rows: int = 0\n", "    integer_zero_point: bool = False\n"
    ),
    Edit(
        HQQ_PY,
        "HQQ_MODES = (CompressWeightsMode.INT4_ASYM, CompressWeightsMode.INT8_ASYM)\n",
        "HQQ_MODES = (\n"
        "    CompressWeightsMode.INT4_ASYM,\n"
        "    CompressWeightsMode.INT8_ASYM,\n"
        "    CompressWeightsMode.INT4_SYM,\n"
        "    CompressWeightsMode.INT8_SYM,\n"
        "    CompressWeightsMode.INT3_SYM,\n"
        "    CompressWeightsMode.INT2_SYM,\n"
        ")\n"
        "# Codes of fewer bits keep the refined scale: their noise is as large as the signal unit gain would"
        " scale up.\n"
        "UNIT_GAIN_MIN_BITS = 3\n",
    ),
    insert_after(
        HQQ_PY,
        "from nncf.quantization.algorithms.weight_compression.hqq_guard import choose_per_row\n",
        "from nncf.quantization.algorithms.weight_compression.hqq_integer import optimize_scale\n"
        "from nncf.quantization.algorithms.weight_compression.hqq_integer import refine_symmetric_scale\n"
        "from nncf.quantization.algorithms.weight_compression.hqq_integer import refine_with_integer_zero\n"
        "from nncf.quantization.algorithms.weight_compression.hqq_integer import symmetric_init\n"
        "from nncf.quantization.algorithms.weight_compression.hqq_integer import to_symmetric_compressed_weight\n",
    ),
    Edit(
        HQQ_PY,
        "        :param mode: The primary compression mode, INT4_ASYM or INT8_ASYM (the backup mode keeps rounding).\n",
        "        :param mode: The primary compression mode, one of HQQ_MODES (the backup mode keeps rounding).\n",
    ),
    Edit(
        HQQ_PY,
        "        scale_estimation_params: AdvancedScaleEstimationParameters | None = None,\n    ):\n",
        "        scale_estimation_params: AdvancedScaleEstimationParameters | None = None,\n"
        "        integer_zero_point: bool = False,\n"
        "    ):\n",
    ),
    insert_after(
        HQQ_PY,
        "        :param scale_estimation_params: The parameters of that Scale Estimation.\n",
        "        :param integer_zero_point: Whether asymmetric zero points are integer codes.\n",
    ),
    insert_after(
        HQQ_PY,
        "        self._output_guard = output_guard\n",
        "        self._integer_zero_point = integer_zero_point\n",
    ),
    Edit(HQQ_PY, COMPRESS_0002, COMPRESS_0003),
    Edit(
        HQQ_PY,
        "        integer_zero_point = compressed.zero_point.dtype == TensorDataType.int32\n",
        "        if compressed.zero_point is None:  # a symmetric grid has its own refinement\n"
        "            return compressed\n"
        "        integer_zero_point = compressed.zero_point.dtype == TensorDataType.int32\n",
    ),
    Edit(HQQ_PY, GUARD_0002, GUARD_0003),
    Edit(
        HQQ_PY,
        "        if zero_point.dtype.is_float():  # the writers store a float16 zero point as it is\n",
        "        if zero_point is not None and zero_point.dtype.is_float():"
        "  # the writers store a float16 one as it is\n",
    ),
    Edit(
        HQQ_PY,
        "            tensors = tuple(fns.as_tensor_like(weight, t.data) for t in tensors)\n",
        "            tensors = tuple(None if t is None else fns.as_tensor_like(weight, t.data) for t in tensors)\n",
    ),
    Edit(
        "src/nncf/quantization/algorithms/weight_compression/algorithm.py",
        "                self._advanced_parameters.scale_estimation_params,\n            )\n",
        "                self._advanced_parameters.scale_estimation_params,\n"
        "                hqq_params.integer_zero_point,\n"
        "            )\n",
    ),
]
