"""Self-calibration with the float model in bf16 (``SelfCalibration.inference_precision``, ``compress
--inference-precision bf16``): the generation's CPU properties, NNCF's statistics engine replaced only for the
duration of one call, the output check's precision, the memory estimates and the refusal that names the option."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from typing import ClassVar

import nncf
import nncf.openvino.engine as nncf_engine
import openvino as ov
import pytest

from nncf_hqq import api
from nncf_hqq import self_calibration as sc
from nncf_hqq.llm import cli
from nncf_hqq.llm import memory
from nncf_hqq.llm import models
from nncf_hqq.llm import workflows
from nncf_hqq.llm.timing import StepTimer
from tests.ov_models import transformer_like
from tests.test_evaluation import tiny_llm  # noqa: F401  (fixture)
from tests.test_memory import SEVEN_B
from tests.test_memory import _args
from tests.test_memory import seven_b_hf  # noqa: F401  (fixture)

GIB = memory.GIB
TINY = sc.SelfCalibration(num_samples=4, seq_len=12, batch_size=2, seed=3)
TINY_BF16 = TINY.replace(inference_precision="bf16")
#: The function itself, before any test replaces it with a spy.
generation_config = sc.generation_config


@pytest.mark.parametrize("value", ["fp16", "BF16", None], ids=["fp16", "upper-case", "none"])
def test_a_bad_precision_is_refused_naming_it(value: object) -> None:
    with pytest.raises(nncf.ValidationError, match=rf"inference_precision must be one of .*got {value!r}"):
        sc.SELF_CALIBRATION_DEFAULT.replace(inference_precision=value)


def test_the_generation_config_follows_the_precision() -> None:
    assert sc.SELF_CALIBRATION_DEFAULT.inference_precision == "f32"
    assert sc.generation_config(TINY) == {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
    assert sc.generation_config(TINY_BF16) == {"INFERENCE_PRECISION_HINT": "bf16", "KV_CACHE_PRECISION": "bf16"}


@pytest.mark.parametrize(
    ("params", "replaced"),
    [
        pytest.param(None, False, id="no-self-calibration"),
        pytest.param(TINY, False, id="f32"),
        pytest.param(TINY_BF16, True, id="bf16"),
    ],
)
def test_nncfs_engine_is_replaced_for_bf16_only_and_only_within_the_call(
    params: sc.SelfCalibration | None, replaced: bool
) -> None:
    original = nncf_engine.OVNativeEngine
    with api.statistics_precision(params):
        inside = nncf_engine.OVNativeEngine
    assert (inside is api.PluginPrecisionEngine) is replaced
    assert nncf_engine.OVNativeEngine is original


class _RecordingCore:
    """``ov.Core`` that records the config of every compilation and compiles with the real one."""

    configs: ClassVar[list[Any]] = []

    def compile_model(self, model: ov.Model, device_name: str, config: Any = None) -> ov.CompiledModel:
        self.configs.append(config)
        return ov.Core().compile_model(model, device_name, config or {})


def test_the_plugin_precision_engine_does_not_force_f32(monkeypatch: pytest.MonkeyPatch) -> None:
    """NNCF's engine compiles with ``INFERENCE_PRECISION_HINT=f32``; ours with no config (the plugin's own)."""
    fake = type("FakeOV", (), {"Core": _RecordingCore})
    monkeypatch.setattr(nncf_engine, "ov", fake)
    monkeypatch.setattr(_RecordingCore, "configs", [])
    model = transformer_like()
    nncf_engine.OVNativeEngine(model)
    api.PluginPrecisionEngine(model)
    forced, plugin = _RecordingCore.configs
    assert list(forced.values()) == [ov.Type.f32]
    assert plugin is None


def _spy_engines(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    made: list[str] = []
    init: Callable[..., None] = api.PluginPrecisionEngine.__init__

    def recorded(self: Any, model: ov.Model, use_fp32_precision: bool = True) -> None:
        made.append(type(self).__name__)
        init(self, model, use_fp32_precision)

    monkeypatch.setattr(api.PluginPrecisionEngine, "__init__", recorded)
    return made


def _spy_generation(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, str]]:
    configs: list[dict[str, str]] = []
    generation_config = sc.generation_config

    def recorded(params: sc.SelfCalibration) -> dict[str, str]:
        configs.append(generation_config(params))
        return configs[-1]

    monkeypatch.setattr(sc, "generation_config", recorded)
    return configs


def _compress(path: str, params: sc.SelfCalibration, xml: Path) -> ov.Model:
    model = ov.Core().read_model(xml)
    if path == "api":
        kwargs = {"mode": nncf.CompressWeightsMode.INT4_ASYM, "group_size": 32, "ratio": 1.0}
        return nncf.compress_weights(model, **kwargs, dataset=params, awq=True, scale_estimation=True, hqq=True)
    options = workflows.CompressionOptions(group_size=32, awq=True, scale_estimation=True, self_calibration=params)
    return workflows.compress_timed(model, options, timer=StepTimer(lambda _: None))


@pytest.mark.parametrize("path", ["api", "command-line"])
@pytest.mark.parametrize("params", [TINY, TINY_BF16], ids=["f32", "bf16"])
def test_generation_and_statistics_run_in_the_requested_precision(
    monkeypatch: pytest.MonkeyPatch,
    tiny_llm: tuple[Path, Any],  # noqa: F811
    path: str,
    params: sc.SelfCalibration,
) -> None:
    engines = _spy_engines(monkeypatch)
    generations = _spy_generation(monkeypatch)
    compressed = _compress(path, params, models.ir_xml(tiny_llm[0]))
    assert any(op.get_element_type() == ov.Type.u4 for op in compressed.get_ops() if op.get_type_name() == "Constant")
    assert generations == [generation_config(params)]
    assert bool(engines) is (params.inference_precision == "bf16")  # NNCF's statistics pass used our engine
    assert nncf_engine.OVNativeEngine.__name__ == "OVNativeEngine"


def test_the_command_line_runs_the_float_model_in_bf16_and_records_it(
    monkeypatch: pytest.MonkeyPatch,
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Generation, NNCF's statistics and every evaluation of the output check run in bf16."""
    engines = _spy_engines(monkeypatch)
    generations = _spy_generation(monkeypatch)
    configs: ClassVar[list[Any]] = []
    evaluate_llms = workflows.evaluation.evaluate_llms

    def recorded(*args: Any, config: Any = None, **kwargs: Any) -> Any:
        configs.append(config)
        return evaluate_llms(*args, config=config, **kwargs)

    monkeypatch.setattr(workflows.evaluation, "evaluate_llms", recorded)
    out = tmp_path / "out"
    argv = ["compress", str(tiny_llm[0]), str(out), "--group-size", "32", "--self-calibration-samples", "4"]
    assert cli.main([*argv, "--inference-precision", "bf16"]) == 0
    err = capsys.readouterr().err
    assert "float model in bf16" in err
    record = json.loads((out / workflows.RECORD_NAME).read_text())
    assert record["output_check"]["inference_precision"] == "bf16"
    kept = record["self_calibration"]  # None when the check keeps a data-free candidate
    assert kept is None or kept["inference_precision"] == "bf16"
    bf16 = {"INFERENCE_PRECISION_HINT": "bf16", "KV_CACHE_PRECISION": "bf16"}
    assert generations and all(config == bf16 for config in generations)  # calibration text and held-out text
    assert engines
    assert len(configs) == 3 and all(config["INFERENCE_PRECISION_HINT"] == "bf16" for config in configs)


def test_bf16_halves_self_calibrations_float_model() -> None:
    f32 = {e.phase: e for e in memory.compress_estimates(SEVEN_B, True, True, True, "f32")}
    bf16 = {e.phase: e for e in memory.compress_estimates(SEVEN_B, True, True, True, "bf16")}
    for phase in ("self-calibration text", "statistics", "output check"):
        assert f32[phase].total - bf16[phase].total == SEVEN_B.parameters * 2
        assert "float model compiled in bf16" in bf16[phase].describe()
    assert f32["compression"] == bf16["compression"] and f32["export"] == bf16["export"]


@pytest.mark.usefixtures("seven_b_hf")
@pytest.mark.parametrize(
    ("precision", "suggested"),
    [
        pytest.param("f32", "--inference-precision bf16 or --no-self-calibration (data-free) fits", id="f32"),
        pytest.param("bf16", "--no-self-calibration (data-free) fits", id="bf16-already"),
    ],
)
def test_the_refusal_names_bf16_when_it_fits(monkeypatch: pytest.MonkeyPatch, precision: str, suggested: str) -> None:
    """Memory for everything in bf16 but not in f32: the refusal of the f32 run names ``--inference-precision
    bf16``; with bf16 given, too little memory for its output check names the other options only."""
    bf16 = memory.compress_estimates(SEVEN_B, True, True, True, "bf16")
    available = max(e.total for e in bf16) - (GIB if precision == "bf16" else -GIB // 4)
    monkeypatch.setattr(memory, "available_bytes", lambda: available)
    with pytest.raises(cli.NotEnoughMemoryError) as info:
        cli.check_compress_memory(_args(inference_precision=precision), workflows.CompressionOptions(), None)
    assert suggested in str(info.value)
    assert ("--inference-precision bf16" in str(info.value)) is (precision == "f32")
