"""HQQ's maths under its earlier module name: the kernels, ``nncf_hqq.hqq`` and the tests import the solver's
functions from here. Each function lives in the module named after its step (the pull-request series places each
one into NNCF's tree with the patch that adds the step, ``upstream/series.py``):

- ``zero_point_solver``: HQQ's float zero point (patch 0001);
- ``data_free_steps``: the codes and reconstruction of HQQ's convention, the least-squares refinement (plain and
  input-weighted), the codes against the stored values (NNCF's quantization), the per-group RTN fallback and unit
  gain (patch 0003);
- ``grids``: grouping, RTN parameters and encoding at any bit width (INT3/INT2_ASYM have no NNCF mode; the
  series calls NNCF's helpers instead);
- ``scale_on_data``: the scale refinement on calibration inputs.
"""

from nncf_hqq.maths.data_free_steps import UNIT_GAIN_LIMITS
from nncf_hqq.maths.data_free_steps import cap_inverse_scale_to_extremes
from nncf_hqq.maths.data_free_steps import choose_per_group
from nncf_hqq.maths.data_free_steps import dequantize
from nncf_hqq.maths.data_free_steps import group_inner_product
from nncf_hqq.maths.data_free_steps import least_squares_scale_zero
from nncf_hqq.maths.data_free_steps import levels_max
from nncf_hqq.maths.data_free_steps import quantize
from nncf_hqq.maths.data_free_steps import quantize_as_stored
from nncf_hqq.maths.data_free_steps import refine_least_squares
from nncf_hqq.maths.data_free_steps import refine_weighted_least_squares
from nncf_hqq.maths.data_free_steps import rescaled
from nncf_hqq.maths.data_free_steps import round_to_f16
from nncf_hqq.maths.data_free_steps import signed_magnitude
from nncf_hqq.maths.data_free_steps import stored_group_error
from nncf_hqq.maths.data_free_steps import stored_parameters
from nncf_hqq.maths.data_free_steps import unit_gain
from nncf_hqq.maths.data_free_steps import unit_gain_factor_for_codes
from nncf_hqq.maths.data_free_steps import weighted_mean
from nncf_hqq.maths.data_free_steps import with_unit_gain
from nncf_hqq.maths.grids import decompress
from nncf_hqq.maths.grids import rtn_scale_zero_point
from nncf_hqq.maths.grids import rtn_scale_zero_point_for_range
from nncf_hqq.maths.grids import split_into_groups
from nncf_hqq.maths.grids import to_compressed_weight
from nncf_hqq.maths.integer import keep_best
from nncf_hqq.maths.integer import mean_absolute_error
from nncf_hqq.maths.scale_on_data import activation_error
from nncf_hqq.maths.scale_on_data import equivalent_inputs
from nncf_hqq.maths.scale_on_data import output_projections
from nncf_hqq.maths.scale_on_data import refine_scale_on_activations
from nncf_hqq.maths.zero_point_solver import F16_MAX
from nncf_hqq.maths.zero_point_solver import F16_TINY
from nncf_hqq.maths.zero_point_solver import MAX_ABS_ZERO
from nncf_hqq.maths.zero_point_solver import MIN_GROUP_RANGE
from nncf_hqq.maths.zero_point_solver import min_max_init_for_range
from nncf_hqq.maths.zero_point_solver import solve_zero_point
from nncf_hqq.maths.zero_point_solver import stored_scale_zero_point

__all__ = [
    "F16_MAX",
    "F16_TINY",
    "MAX_ABS_ZERO",
    "MIN_GROUP_RANGE",
    "UNIT_GAIN_LIMITS",
    "activation_error",
    "cap_inverse_scale_to_extremes",
    "choose_per_group",
    "decompress",
    "dequantize",
    "equivalent_inputs",
    "group_inner_product",
    "keep_best",
    "least_squares_scale_zero",
    "levels_max",
    "mean_absolute_error",
    "min_max_init_for_range",
    "output_projections",
    "quantize",
    "quantize_as_stored",
    "refine_least_squares",
    "refine_scale_on_activations",
    "refine_weighted_least_squares",
    "rescaled",
    "round_to_f16",
    "rtn_scale_zero_point",
    "rtn_scale_zero_point_for_range",
    "signed_magnitude",
    "solve_zero_point",
    "split_into_groups",
    "stored_group_error",
    "stored_parameters",
    "stored_scale_zero_point",
    "to_compressed_weight",
    "unit_gain",
    "unit_gain_factor_for_codes",
    "weighted_mean",
    "with_unit_gain",
]
