"""Without ``hqq``, ``nncf.compress_weights`` after ``import nncf_hqq`` is NNCF's own call, error paths included.

Each case below is a call that NNCF 3.4 refuses (``ParameterNotSupportedError``, ``ValidationError`` and the rest of
the checks in ``nncf/quantization/quantize_model.py``, ``check_user_compression_configuration`` and the OpenVINO
backend), or one that it accepts with odd values. The cases run once in a Python process that never imports
``nncf_hqq`` (NNCF alone) and once here, through the installed wrapper; every case must end the same way: the same
exception type and message, or the same compressed model.

This module imports ``nncf_hqq`` only inside the tests, so that the subprocess can take its cases from it.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nncf
import numpy as np
import openvino as ov
import pytest
from nncf import BackupMode
from nncf import CompressionFormat
from nncf import SensitivityMetric
from nncf.quantization.advanced_parameters import AdvancedAdaptiveCodebookParameters
from nncf.quantization.advanced_parameters import AdvancedAWQParameters
from nncf.quantization.advanced_parameters import AdvancedCompressionParameters
from nncf.quantization.advanced_parameters import GroupSizeFallbackMode

from tests.ov_models import input_ids
from tests.ov_models import transformer_like

MODE = nncf.CompressWeightsMode
INT4 = MODE.INT4_ASYM
INT8 = MODE.INT8_ASYM
REPOSITORY = Path(__file__).resolve().parent.parent


def _dataset() -> nncf.Dataset:
    return nncf.Dataset([input_ids(seed) for seed in range(2)])


def _advanced(**changes: Any) -> AdvancedCompressionParameters:
    return AdvancedCompressionParameters(**changes)


def _codebook(values: list[Any]) -> AdvancedCompressionParameters:
    return _advanced(codebook=np.array(values, dtype=np.float32))


#: ``{case id: keyword arguments of compress_weights}``, built fresh on every call (datasets, advanced parameters).
def cases() -> dict[str, dict[str, Any]]:
    data = _dataset
    return {
        # nncf/quantization/quantize_model.py, OpenVINO branch
        "scale-estimation-without-dataset": {"mode": INT4, "scale_estimation": True},
        "gptq-without-dataset": {"mode": INT4, "gptq": True},
        "lora-without-dataset": {"mode": INT4, "lora_correction": True},
        "awq-with-mxfp4": {"mode": MODE.MXFP4, "awq": True, "dataset": data()},
        "scale-estimation-with-fp8": {"mode": MODE.FP8_E4M3, "scale_estimation": True, "dataset": data()},
        "gptq-with-nvfp4": {"mode": MODE.NVFP4, "gptq": True, "dataset": data()},
        "gptq-and-lora": {"mode": INT4, "gptq": True, "lora_correction": True, "dataset": data()},
        "format-fq": {"mode": INT4, "compression_format": CompressionFormat.FQ},
        "format-fq-lora": {"mode": INT4, "compression_format": CompressionFormat.FQ_LORA},
        "format-fq-lora-nls": {"mode": INT4, "compression_format": CompressionFormat.FQ_LORA_NLS},
        # check_user_compression_configuration: INT8 modes
        "int8-ratio": {"mode": INT8, "ratio": 0.5},
        "int8-group-size": {"mode": MODE.INT8_SYM, "group_size": 64},
        "int8-statistics-path": {"mode": INT8, "advanced_parameters": _advanced(statistics_path="stats")},
        "int8-dataset-string": {"mode": INT8, "dataset": "anything"},
        "int8-sym-dataset-string": {"mode": MODE.INT8_SYM, "dataset": "anything"},
        "int8-dataset": {"mode": INT8, "dataset": data()},
        "int8-all-layers": {"mode": INT8, "all_layers": True},
        "int8-sensitivity-metric": {"mode": INT8, "sensitivity_metric": SensitivityMetric.MAX_ACTIVATION_VARIANCE},
        "int8-awq-and-scale-estimation": {"mode": INT8, "awq": True, "scale_estimation": True, "dataset": data()},
        "int8-backup-mode": {"mode": INT8, "backup_mode": BackupMode.NONE},
        "default-mode-dataset-string": {"dataset": "anything"},
        # check_user_compression_configuration: other checks
        "ratio-above-one": {"mode": INT4, "ratio": 1.5},
        "negative-ratio": {"mode": INT4, "ratio": -0.1},
        "subset-size-zero": {"mode": INT4, "subset_size": 0},
        "awq-subset-size-zero": {
            "mode": INT4,
            "advanced_parameters": _advanced(awq_params=AdvancedAWQParameters(subset_size=0)),
        },
        "lora-rank-zero": {"mode": INT4, "advanced_parameters": _advanced(lora_adapter_rank=0)},
        "codebook-2d": {"mode": MODE.CODEBOOK, "advanced_parameters": _codebook([[0.0, 1.0]])},
        "codebook-one-element": {"mode": MODE.CODEBOOK, "advanced_parameters": _codebook([1.0])},
        "codebook-unsorted": {"mode": MODE.CODEBOOK, "advanced_parameters": _codebook([1.0, 0.0, 2.0])},
        "codebook-mode-without-codebook": {"mode": MODE.CODEBOOK},
        "adaptive-codebook-size-mismatch": {
            "mode": MODE.ADAPTIVE_CODEBOOK,
            "advanced_parameters": _advanced(
                codebook=np.array([0.0, 1.0, 2.0], dtype=np.float32),
                adaptive_codebook_params=AdvancedAdaptiveCodebookParameters(num_elements=4),
            ),
        },
        "sensitivity-metric-without-dataset": {
            "mode": INT4,
            "ratio": 0.5,
            "sensitivity_metric": SensitivityMetric.HESSIAN_INPUT_ACTIVATION,
        },
        "fallback-mode-not-an-enum": {"mode": INT4, "advanced_parameters": _advanced(group_size_fallback_mode="x")},
        "mxfp4-group-size": {"mode": MODE.MXFP4, "group_size": 64},
        "nvfp4-group-size": {"mode": MODE.NVFP4, "group_size": 32},
        "mxfp4-adjust-fallback": {
            "mode": MODE.MXFP4,
            "advanced_parameters": _advanced(group_size_fallback_mode=GroupSizeFallbackMode.ADJUST),
        },
        # the algorithm and values NNCF takes as they are
        "group-size-not-dividing": {"mode": INT4, "group_size": 48},
        "missing-ignored-layer": {"mode": INT4, "group_size": 32, "ignored_scope": nncf.IgnoredScope(names=["x"])},
        "int4-dataset-string": {"mode": INT4, "group_size": 32, "dataset": "anything"},
        "int4-awq-dataset-string": {"mode": INT4, "group_size": 32, "awq": True, "dataset": "shakespeare.txt"},
        "low-bit-name-as-string": {"mode": "int2_asym", "group_size": 32},
        "empty-dataset-string": {"mode": MODE.INT4_SYM, "group_size": 32, "awq": True, "dataset": ""},
        "unknown-keyword": {"mode": INT4, "bits": 4},
    }


def _model_digest(model: ov.Model) -> str:
    """The saved IR and weights, less OpenVINO's automatic node numbers, which differ between processes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.xml"
        ov.save_model(model, path, compress_to_fp16=False)
        xml = re.sub(r'(name="[^"]*?)_\d+"', r'\1"', path.read_text())
        xml = re.sub(r"\s*<nncf>\s*<friendly_names_were_updated[^>]*/>\s*</nncf>", "", xml)
        return hashlib.sha256(xml.encode() + path.with_suffix(".bin").read_bytes()).hexdigest()


def outcome(compress: Callable[..., Any], kwargs: dict[str, Any]) -> list[str]:
    """How a call ends: ``["raised", type, message]`` or ``["returned", digest of the model]``. OpenVINO's
    automatic node names in a message (``MatMul_103``) are numbered per process, so their numbers are left out."""
    try:
        compressed = compress(transformer_like(moe=False), **kwargs)
    except Exception as err:  # any exception is an outcome to compare
        message = re.sub(r"\b([A-Z][A-Za-z]*)_\d+\b", r"\1_#", str(err))
        return ["raised", f"{type(err).__module__}.{type(err).__qualname__}", message]
    return ["returned", _model_digest(compressed)]


def nncf_alone_outcomes() -> dict[str, list[str]]:
    """Every case through ``nncf.compress_weights`` in this process, which must not have imported ``nncf_hqq``."""
    if "nncf_hqq" in sys.modules:
        msg = "nncf_alone_outcomes must run in a process without nncf_hqq"
        raise RuntimeError(msg)
    return {case: outcome(nncf.compress_weights, kwargs) for case, kwargs in cases().items()}


@pytest.fixture(scope="module")
def nncf_alone() -> dict[str, list[str]]:
    code = (
        "import json, sys; from tests.test_nncf_passthrough import nncf_alone_outcomes; "
        "assert 'nncf_hqq' not in sys.modules; print(json.dumps(nncf_alone_outcomes()))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPOSITORY, capture_output=True, text=True, check=False, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_cases_cover_both_error_kinds_and_accepted_calls(nncf_alone: dict[str, list[str]]) -> None:
    kinds = {result[1] if result[0] == "raised" else "returned" for result in nncf_alone.values()}
    assert {"nncf.errors.ParameterNotSupportedError", "nncf.errors.ValidationError", "returned"} <= kinds
    int8_dataset = nncf_alone["int8-dataset-string"]
    assert int8_dataset[1:] == [
        "nncf.errors.ParameterNotSupportedError",
        "INT8 modes do not support dataset option(s). Set them to None.",
    ]


@pytest.mark.parametrize("case", list(cases()))
def test_without_hqq_every_case_ends_as_in_nncf_alone(nncf_alone: dict[str, list[str]], case: str) -> None:
    import nncf_hqq

    assert nncf.compress_weights is nncf_hqq.compress_weights
    assert outcome(nncf.compress_weights, cases()[case]) == nncf_alone[case]


@pytest.mark.parametrize("hqq", [False, 0], ids=["hqq-false", "hqq-zero"])
@pytest.mark.parametrize(
    "case", ["int8-dataset-string", "low-bit-name-as-string", "int4-dataset-string", "gptq-without-dataset"]
)
def test_a_falsy_hqq_is_no_hqq(nncf_alone: dict[str, list[str]], case: str, hqq: object) -> None:
    assert outcome(nncf.compress_weights, {**cases()[case], "hqq": hqq}) == nncf_alone[case]


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param((INT4,), id="positional-mode"),
        pytest.param((), id="no-model"),
    ],
)
def test_wrong_arguments_raise_nncfs_type_error(arguments: tuple[Any, ...]) -> None:
    import nncf_hqq
    from nncf_hqq._nncf import original_compress_weights

    model = (transformer_like(moe=False),) if arguments else ()
    messages = []
    for compress in (original_compress_weights, nncf_hqq.compress_weights):
        with pytest.raises(TypeError) as raised:
            compress(*model, *arguments)
        messages.append(str(raised.value))
    assert messages[0] == messages[1]


def test_the_wrappers_defaults_are_nncfs() -> None:
    import inspect

    import nncf_hqq
    from nncf_hqq import self_calibration
    from nncf_hqq._nncf import original_compress_weights

    theirs = inspect.signature(original_compress_weights).parameters
    ours = inspect.signature(nncf_hqq.compress_weights).parameters
    assert list(ours)[: len(theirs)] == list(theirs)
    assert {name: ours[name].default for name in theirs} == {name: p.default for name, p in theirs.items()}
    assert theirs["subset_size"].default == self_calibration.NNCF_DEFAULT_SUBSET_SIZE


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"mode": INT4, "dataset": "anything", "hqq": True}, "is not a dataset", id="hqq-dataset-string"),
        pytest.param({"mode": INT4, "dataset": "", "hqq": True}, "is not a dataset", id="hqq-empty-dataset-string"),
        pytest.param({"mode": "int2_asym", "awq": True, "hqq": True}, "INT2_ASYM cannot be combined", id="hqq-low-bit"),
        pytest.param({"mode": INT4, "gptq": True, "hqq": True}, "HQQ cannot be combined with GPTQ", id="hqq-gptq"),
        pytest.param({"mode": INT4, "dataset": "self"}, "no step of this call uses data", id="self-unused"),
        pytest.param({"mode": INT4, "hqq_params": {"beta": 2.0}}, "hqq is not enabled", id="hqq-params-alone"),
        pytest.param({"mode": INT4, "target_parameters": ["*"]}, "hqq is not enabled", id="target-parameters-alone"),
    ],
)
def test_nncf_hqqs_own_requests_keep_nncf_hqqs_errors(kwargs: dict[str, Any], message: str) -> None:
    import nncf_hqq

    with pytest.raises(nncf.ValidationError, match=message):
        nncf_hqq.compress_weights(transformer_like(moe=False), **kwargs)


def test_hqq_options_without_hqq_are_refused() -> None:
    import nncf_hqq

    advanced = nncf_hqq.AdvancedCompressionParameters(hqq_params=nncf_hqq.HQQ_DEFAULT)
    with pytest.raises(nncf.ValidationError, match=r"advanced_parameters\.hqq_params was given but hqq is not"):
        nncf.compress_weights(transformer_like(moe=False), mode=INT4, advanced_parameters=advanced)
    with pytest.raises(nncf.ValidationError, match=r"INT3_ASYM is written by HQQ only"):
        nncf.compress_weights(transformer_like(moe=False), mode=nncf_hqq.LowBitMode.INT3_ASYM, hqq=False)
