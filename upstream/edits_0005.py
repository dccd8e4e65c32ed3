"""The edits of the fifth pull request (0005): HQQ with integer parameters only, for the fastest kernels and the
symmetric modes: ``integer_zero_point`` (the scale optimised under an integer zero point) and INT4_SYM, INT8_SYM,
INT3_SYM, INT2_SYM (HQQ's scale-only solver). ``hqq.py`` takes its new version from ``upstream/series/0005``."""

from __future__ import annotations

from edit import Edit
from edit import insert_after
from edits_0001 import ADVANCED_PARAMETERS
from edits_0001 import ALGORITHM

INTEGER_ZERO_POINT_DOC = """\
    :param integer_zero_point: Whether asymmetric zero points are integer codes, as round-to-nearest writes them
        (the scale is then optimised under them), instead of float16 values. Defaults to False.
    :type integer_zero_point: bool
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
        ALGORITHM,
        "                scale_estimation_params=self._advanced_parameters.scale_estimation_params,\n            )\n",
        "                scale_estimation_params=self._advanced_parameters.scale_estimation_params,\n"
        "                integer_zero_point=hqq_params.integer_zero_point,\n"
        "            )\n",
    ),
]
