"""The summary line of ``nncf-hqq compress`` (``Compressing ... (...)`` and ``Wrote ... (...)``) names every option
that changes the written model."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from nncf_hqq import HQQ_REFERENCE
from nncf_hqq.llm import cli
from nncf_hqq.llm.workflows import CompressionOptions
from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT

GENERATED = SELF_CALIBRATION_DEFAULT.replace(start_token_ids=(1,))

#: A value of each field of ``CompressionOptions`` that changes the written model, and what the summary says of it.
CHANGED = {
    "mode": ("int8_sym", "int8_sym"),
    "group_size": (64, "group size 64"),
    "ratio": (0.8, "ratio 0.8"),
    "backup_mode": ("none", "backup mode none"),
    "awq": (True, "data-free AWQ"),
    "scale_estimation": (True, "Scale Estimation"),
    "hqq": (False, "RTN (no HQQ)"),
    "zero_point": ("split", "HQQ (split zero point)"),
    "ignore": (("lm_head", r"\.mlp\."), r"kept in float: 'lm_head' '\.mlp\.'"),
    "quantize_routers": (True, "MoE routers compressed"),
    "self_calibration": (GENERATED, "self-calibrated on 32 generated sequences"),
    "token_rows": (32, "HQQ (default zero point, 32 token rows per sample)"),
    "hqq_base": (HQQ_REFERENCE, "HQQ (default zero point, the recipe's parameters)"),
}
#: Fields that change the model only through another one (``subset_size``: the calibration data, below).
THROUGH_OTHERS = {"subset_size"}


def test_every_option_is_known_to_the_summary() -> None:
    """A new field of CompressionOptions must be added to CHANGED (and described) or to THROUGH_OTHERS."""
    assert {field.name for field in dataclasses.fields(CompressionOptions)} == set(CHANGED) | THROUGH_OTHERS


@pytest.mark.parametrize("name", list(CHANGED))
def test_each_option_given_is_named(name: str) -> None:
    value, said = CHANGED[name]
    default = cli._describe_options(CompressionOptions(), data_aware=False)
    summary = cli._describe_options(CompressionOptions(**{name: value}), data_aware=False)
    assert summary != default and said in summary


@pytest.mark.parametrize(
    ("options", "data_aware", "expected"),
    [
        pytest.param(
            {}, False, "int4_asym, NNCF's default group size, HQQ (default zero point)", id="defaults-data-free"
        ),
        pytest.param(
            {"group_size": 64, "awq": True, "scale_estimation": True, "subset_size": 64},
            True,
            "int4_asym, group size 64, calibrated on 64 samples of --dataset, AWQ, Scale Estimation, HQQ (default "
            "zero point)",
            id="dataset-names-its-subset-size",
        ),
        pytest.param(
            {"group_size": 64, "awq": True, "scale_estimation": True, "self_calibration": GENERATED},
            False,
            "int4_asym, group size 64, self-calibrated on 32 generated sequences, AWQ, Scale Estimation, HQQ (default "
            "zero point)",
            id="self-calibrated-default-subset-size-unsaid",
        ),
        pytest.param(
            {"awq": True, "subset_size": 8, "self_calibration": GENERATED.replace(prompt_token_ids=tuple(range(20)))},
            False,
            "int4_asym, NNCF's default group size, self-calibrated on 32 generated sequences continuing "
            "--self-prompt-text, subset size 8, AWQ, HQQ (default zero point)",
            id="self-calibrated-smaller-subset-and-prompt-text",
        ),
        pytest.param(
            {"subset_size": 256, "self_calibration": GENERATED, "token_rows": 32, "zero_point": "int"},
            False,
            "int4_asym, NNCF's default group size, self-calibrated on 32 generated sequences, HQQ (int zero point, 32 "
            "token rows per sample)",
            id="subset-larger-than-the-sequences-unsaid",
        ),
        pytest.param(
            {"mode": "int4_sym", "ratio": 0.8, "backup_mode": "int8_sym", "hqq": False, "ignore": ("gate",)},
            True,
            "int4_sym, NNCF's default group size, ratio 0.8, backup mode int8_sym, calibrated on 128 samples of "
            "--dataset, RTN (no HQQ), kept in float: 'gate'",
            id="rtn-mixed-precision",
        ),
    ],
)
def test_summary_line(options: dict[str, Any], data_aware: bool, expected: str) -> None:
    assert cli._describe_options(CompressionOptions(**options), data_aware) == expected
