"""HQQParameters validation and presets."""

from __future__ import annotations

import dataclasses

import nncf
import pytest

from nncf_hqq.parameters import HQQ_DEFAULT
from nncf_hqq.parameters import HQQ_REFERENCE
from nncf_hqq.parameters import EarlyStopScope
from nncf_hqq.parameters import HQQParameters
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
