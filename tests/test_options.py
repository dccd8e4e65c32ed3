"""Tests of nncf_hqq.llm.options: the summary line of the compress job (``Compressing ... (...)``, ``Wrote ... (...)``)
names every option that changes the written model; the options reach NNCF (the group size adjusted per layer when
none is given); bad options are refused naming them as Python keywords or as command-line flags."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from nncf_hqq import HQQ_DEFAULT
from nncf_hqq import HQQ_REFERENCE
from nncf_hqq.llm.options import CompressionOptions
from nncf_hqq.llm.options import JobOptions
from nncf_hqq.llm.options import OptionError
from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT

GENERATED = SELF_CALIBRATION_DEFAULT.replace(start_token_ids=(1,))
#: The group size said when none is given.
ADJUSTED = "group size 128 or the largest power of two a layer takes"

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
THROUGH_OTHERS = {"subset_size", "guard_reference"}  # guard_reference: through scale_estimation


def test_every_option_is_known_to_the_summary() -> None:
    """A new field of CompressionOptions must be added to CHANGED (and described) or to THROUGH_OTHERS."""
    assert {field.name for field in dataclasses.fields(CompressionOptions)} == set(CHANGED) | THROUGH_OTHERS


@pytest.mark.parametrize("name", list(CHANGED))
def test_each_option_given_is_named(name: str) -> None:
    value, said = CHANGED[name]
    default = CompressionOptions().describe(data_aware=False)
    summary = CompressionOptions(**{name: value}).describe(data_aware=False)
    assert summary != default and said in summary


@pytest.mark.parametrize(
    ("options", "data_aware", "expected"),
    [
        pytest.param(
            {},
            False,
            f"int4_asym, {ADJUSTED}, HQQ (default zero point)",
            id="defaults-data-free",
        ),
        pytest.param(
            {"group_size": 64, "awq": True, "scale_estimation": True, "subset_size": 64},
            True,
            "int4_asym, group size 64, calibrated on 64 samples of the dataset, AWQ, Scale Estimation, HQQ (default "
            "zero point)",
            id="dataset-names-its-subset-size",
        ),
        pytest.param(
            {"group_size": 64, "awq": True, "scale_estimation": True, "self_calibration": GENERATED},
            False,
            "int4_asym, group size 64, self-calibrated on 32 generated sequences, AWQ, HQQ's scales and output guard "
            "on the data (no NNCF Scale Estimation), HQQ (default zero point)",
            id="self-calibrated-default-subset-size-unsaid",
        ),
        pytest.param(
            {"awq": True, "scale_estimation": True, "self_calibration": GENERATED, "guard_reference": True},
            False,
            f"int4_asym, {ADJUSTED}, self-calibrated on 32 generated sequences, AWQ, Scale Estimation, HQQ (default "
            "zero point)",
            id="self-calibrated-with-the-guard-reference",
        ),
        pytest.param(
            {"scale_estimation": True, "guard_reference": False},
            True,
            f"int4_asym, {ADJUSTED}, calibrated on 128 samples of the dataset, HQQ's scales and output guard on the "
            "data (no NNCF Scale Estimation), HQQ (default zero point)",
            id="dataset-without-the-guard-reference",
        ),
        pytest.param(
            {"awq": True, "subset_size": 8, "self_calibration": GENERATED.replace(prompt_token_ids=tuple(range(20)))},
            False,
            f"int4_asym, {ADJUSTED}, self-calibrated on 32 generated sequences continuing "
            "the prompt text, subset size 8, AWQ, HQQ (default zero point)",
            id="self-calibrated-smaller-subset-and-prompt-text",
        ),
        pytest.param(
            {"subset_size": 256, "self_calibration": GENERATED, "token_rows": 32, "zero_point": "int"},
            False,
            f"int4_asym, {ADJUSTED}, self-calibrated on 32 generated sequences, HQQ (int zero point, 32 "
            "token rows per sample)",
            id="subset-larger-than-the-sequences-unsaid",
        ),
        pytest.param(
            {"mode": "int4_sym", "ratio": 0.8, "backup_mode": "int8_sym", "hqq": False, "ignore": ("gate",)},
            True,
            f"int4_sym, {ADJUSTED}, ratio 0.8, backup mode int8_sym, calibrated on 128 samples of the "
            "dataset, RTN (no HQQ), kept in float: 'gate'",
            id="rtn-mixed-precision",
        ),
    ],
)
def test_summary_line(options: dict[str, Any], data_aware: bool, expected: str) -> None:
    assert CompressionOptions(**options).describe(data_aware) == expected


@pytest.mark.parametrize(
    ("options", "reference", "params"),
    [
        pytest.param({}, True, None, id="data-free-hqq-default"),
        pytest.param({"scale_estimation": True}, True, None, id="dataset-hqq-default"),
        pytest.param({"self_calibration": GENERATED}, False, {"guard_reference": False}, id="self-calibrated-off"),
        pytest.param({"self_calibration": GENERATED, "guard_reference": True}, True, None, id="asked-for"),
        pytest.param({"guard_reference": False, "zero_point": "int"}, False, {"guard_reference": False,
                     "zero_point_format": "integer"}, id="with-other-changes"),
    ],
)  # fmt: skip
def test_the_guard_reference_is_off_when_self_calibrated(
    options: dict[str, Any], reference: bool, params: dict[str, Any] | None
) -> None:
    compression = CompressionOptions(**options)
    assert compression.uses_guard_reference() is reference
    expected = None if params is None else HQQ_DEFAULT.replace(**params)
    assert compression.hqq_params() == expected
    assert CompressionOptions(hqq=False, **options).hqq_params() is None


def test_the_per_channel_modes_say_so() -> None:
    assert (
        CompressionOptions(mode="int8_asym").describe(data_aware=False)
        == "int8_asym, per channel, HQQ (default zero point)"
    )


def test_without_a_group_size_nncf_adjusts_it_per_layer() -> None:
    import nncf

    adjusted = CompressionOptions().nncf_kwargs()["advanced_parameters"]
    assert adjusted.group_size_fallback_mode == nncf.GroupSizeFallbackMode.ADJUST
    assert "advanced_parameters" not in CompressionOptions(group_size=128).nncf_kwargs()
    assert "advanced_parameters" not in CompressionOptions(mode="int8_asym").nncf_kwargs()


@pytest.mark.parametrize(
    ("options", "python", "command_line"),
    [
        ({"ratio": 2.0}, "ratio must be in (0, 1], got 2.0", "--ratio must be in (0, 1], got 2.0"),
        (
            {"token_rows": 8, "self_calibration": False},
            "token_rows needs calibration data: add dataset=TEXT_FILE or drop self_calibration=False",
            "--token-rows needs calibration data: add --dataset TEXT_FILE or drop --no-self-calibration",
        ),
        (
            {"mode": "int2_asym", "awq": True, "zero_point": "int"},
            "int2_asym is HQQ-only, data-free and float-zero-point; drop awq=True, zero_point='int'",
            "int2_asym is HQQ-only, data-free and float-zero-point; drop --awq, --zero-point int",
        ),
        (
            {"zero_point": "float", "hqq": False},
            "zero_point sets HQQ's zero point; it cannot be combined with hqq=False",
            "--zero-point sets HQQ's zero point; it cannot be combined with --no-hqq",
        ),
        (
            {"task": "fill-mask"},
            "task must be one of 'auto', 'text-generation', 'feature-extraction', 'image-text-to-text', got fill-mask",
            None,
        ),
        (
            {"memory_budget": 0.0},
            "memory_budget must be a positive number of GiB, got 0.0",
            "--memory-budget must be a positive number of GiB, got 0.0",
        ),
    ],
    ids=["value", "missing-data", "low-bit-conflicts", "without-hqq", "choice", "memory-budget"],
)
def test_bad_options_name_themselves_in_each_callers_words(
    options: dict[str, Any], python: str, command_line: str | None
) -> None:
    with pytest.raises(OptionError) as info:
        JobOptions(**options).validate()
    assert str(info.value) == python and isinstance(info.value, ValueError)
    if command_line is not None:
        assert info.value.for_command_line() == command_line


def test_paths_and_patterns_are_normalised() -> None:
    options = JobOptions(dataset="~/text.txt", ignore="lm_head", mode="INT4_SYM")
    assert options.dataset is not None and "~" not in str(options.dataset)
    assert options.ignore == ("lm_head",) and options.mode == "int4_sym"
    assert options.task_given is None and JobOptions(task="feature-extraction").task_given == "feature-extraction"
