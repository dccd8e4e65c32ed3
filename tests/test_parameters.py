"""HQQParameters validation and presets."""

from __future__ import annotations

import dataclasses

import nncf
import pytest

from nncf_hqq.api import resolve_hqq_parameters
from nncf_hqq.parameters import HQQ_DEFAULT
from nncf_hqq.parameters import HQQ_REFERENCE
from nncf_hqq.parameters import AttentionRole
from nncf_hqq.parameters import EarlyStopScope
from nncf_hqq.parameters import HQQParameters
from nncf_hqq.parameters import Importance
from nncf_hqq.parameters import ZeroPointFormat


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("lp_norm", 0.0, id="lp-zero"),
        pytest.param("lp_norm", 1.5, id="lp-above-one"),
        pytest.param("lp_norm", float("nan"), id="lp-nan"),
        pytest.param("beta", -1.0, id="beta-negative"),
        pytest.param("beta", float("inf"), id="beta-inf"),
        pytest.param("kappa", 0.9, id="kappa-below-one"),
        pytest.param("kappa", "1.01", id="kappa-string"),
        pytest.param("iterations", -1, id="iterations-negative"),
        pytest.param("iterations", 2.5, id="iterations-float"),
        pytest.param("iterations", True, id="iterations-bool"),
        pytest.param("calibration_token_rows", -2, id="token-rows-negative"),
        pytest.param("calibration_token_rows", 1.5, id="token-rows-float"),
        pytest.param("error_feedback_damp", 0.0, id="damp-zero"),
        pytest.param("error_feedback", "on", id="error-feedback-string"),
        pytest.param("early_stop", 1, id="early-stop-int"),
        pytest.param("shrinkage", "off", id="shrinkage-string"),
        pytest.param("rtn_guard", "yes", id="guard-string"),
        pytest.param("early_stop_scope", "layer", id="scope-unknown"),
        pytest.param("zero_point_format", "u4", id="zp-format-unknown"),
    ],
)
def test_invalid_value_is_named_in_the_error(field: str, value: object) -> None:
    with pytest.raises(nncf.ValidationError, match=rf"HQQParameters\.{field} must .*{value!r}"[:60]):
        HQQParameters(**{field: value})


def test_enums_accept_their_string_values() -> None:
    params = HQQParameters(early_stop_scope="group", zero_point_format="integer")
    assert params.early_stop_scope is EarlyStopScope.GROUP
    assert params.zero_point_format is ZeroPointFormat.INTEGER


def test_parameters_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        HQQ_DEFAULT.beta = 1.0  # type: ignore[misc]


def test_reference_preset_is_the_published_solver() -> None:
    assert (HQQ_REFERENCE.lp_norm, HQQ_REFERENCE.beta, HQQ_REFERENCE.kappa, HQQ_REFERENCE.iterations) == (
        0.7,
        10.0,
        1.01,
        20,
    )
    assert HQQ_REFERENCE.early_stop and not HQQ_REFERENCE.return_best and HQQ_REFERENCE.shrinkage
    assert HQQ_REFERENCE.early_stop_scope is EarlyStopScope.TENSOR
    assert HQQ_REFERENCE.zero_point_format is ZeroPointFormat.FLOAT
    assert not HQQ_REFERENCE.rtn_guard
    assert HQQ_REFERENCE.refine_rounds == 0 and not HQQ_REFERENCE.preserve_extremes and not HQQ_REFERENCE.unit_gain
    assert HQQ_REFERENCE.importance is Importance.NONE and HQQ_REFERENCE.rtn_roles == ()


#: The recommended configuration, field by field: a change to any default must change this test too.
RECOMMENDED = {
    "lp_norm": 0.7,
    "beta": 10.0,
    "kappa": 1.01,
    "shrinkage": False,
    "iterations": 20,
    "early_stop": True,
    "early_stop_scope": EarlyStopScope.TENSOR,
    "return_best": True,
    "zero_point_format": ZeroPointFormat.FLOAT,
    "rtn_guard": True,
    "refine_rounds": 5,
    "preserve_extremes": True,
    "importance": Importance.NORM_GAIN,
    "weighted_proximal": False,
    "scale_estimation_rounds": 4,
    "unit_gain": True,
    "rtn_roles": (AttentionRole.VALUE,),
    "output_guard": True,
    "guard_reference": True,
    "calibration_token_rows": 0,
    "guard_held_out": False,
    "error_feedback": False,
    "error_feedback_damp": 0.1,
}


def test_default_constructor_is_the_recommended_configuration() -> None:
    assert dataclasses.asdict(HQQParameters()) == RECOMMENDED
    assert HQQParameters() == HQQ_DEFAULT


def test_replace_changes_only_the_named_fields_and_validates() -> None:
    changed = HQQ_REFERENCE.replace(iterations=40, rtn_guard=True)
    assert (changed.iterations, changed.rtn_guard) == (40, True)
    assert dataclasses.replace(changed, iterations=20, rtn_guard=False) == HQQ_REFERENCE
    with pytest.raises(nncf.ValidationError, match=r"HQQParameters\.iterations must .* -3"):
        HQQ_DEFAULT.replace(iterations=-3)
    with pytest.raises(nncf.ValidationError, match=r"Unknown HQQ parameter\(s\) \['iteration'\]"):
        HQQ_DEFAULT.replace(iteration=3)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param(None, HQQ_DEFAULT, id="nothing-is-the-default"),
        pytest.param({}, HQQ_DEFAULT, id="empty-dict-is-the-default"),
        pytest.param({"zero_point_format": "integer"}, HQQ_DEFAULT.replace(zero_point_format="integer"), id="dict"),
        pytest.param(HQQ_REFERENCE, HQQ_REFERENCE, id="instance-as-given"),
    ],
)
def test_hqq_params_dict_changes_the_default(given: object, expected: HQQParameters) -> None:
    assert resolve_hqq_parameters(given, None) == expected  # type: ignore[arg-type]


def test_token_rows_preset_is_the_default_fitting_token_rows() -> None:
    from nncf_hqq import HQQ_TOKEN_ROWS

    changed = {k for k, v in dataclasses.asdict(HQQ_TOKEN_ROWS).items() if v != RECOMMENDED[k]}
    assert changed == {"calibration_token_rows"} and HQQ_TOKEN_ROWS.calibration_token_rows == 32


def test_error_feedback_needs_token_rows() -> None:
    with pytest.raises(nncf.ValidationError, match=r"error_feedback=True needs calibration_token_rows > 0"):
        HQQ_DEFAULT.replace(error_feedback=True)
    assert HQQ_DEFAULT.replace(error_feedback=True, calibration_token_rows=4).error_feedback
