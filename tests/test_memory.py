"""Memory estimates of ``compress``'s phases, and the refusal of a phase that cannot fit, before anything starts."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from nncf_hqq.llm import cli
from nncf_hqq.llm import memory
from nncf_hqq.llm.workflows import CompressionOptions
from tests.ov_models import HIDDEN
from tests.ov_models import VOCAB
from tests.ov_models import transformer_like

GIB = memory.GIB


def test_safetensors_size_reads_the_headers_only(tmp_path: Path) -> None:
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    safetensors_numpy.save_file(
        {
            "model.embed_tokens.weight": np.zeros((100, 8), np.float16),
            "model.layers.0.mlp.up_proj.weight": np.zeros((32, 8), np.float32),
            "model.norm.weight": np.zeros(8, np.float16),
        },
        str(tmp_path / "model-00001-of-00002.safetensors"),
    )
    safetensors_numpy.save_file({"lm_head.weight": np.zeros((100, 8), np.float16)}, str(tmp_path / "b.safetensors"))
    size = memory.safetensors_size(tmp_path)
    assert size == memory.ModelSize(
        parameters=800 + 256 + 8 + 800, stored_bytes=2 * 1608 + 4 * 256, largest=800, vocabulary_parameters=1600
    )
    assert memory.safetensors_size(tmp_path / "empty") is None


def test_ir_size_counts_the_float_weights() -> None:
    size = memory.ir_size(transformer_like(hidden=HIDDEN))
    expected = 2 * VOCAB * HIDDEN + 2 * (2 * HIDDEN * HIDDEN) + 4 * HIDDEN * HIDDEN
    assert size.parameters == expected
    assert size.stored_bytes == 4 * expected
    assert size.largest == 4 * HIDDEN * HIDDEN


SEVEN_B = memory.ModelSize(7_615_616_512, 15_231_233_024, 545_001_472, 1_090_002_944)


@pytest.mark.parametrize(
    ("export", "self_calibration", "output_check", "phases"),
    [
        pytest.param(True, False, False, ["export", "compression"], id="hf-data-free"),
        pytest.param(False, False, False, ["compression"], id="ir-data-free"),
        pytest.param(
            True,
            True,
            True,
            [
                "export",
                "self-calibration text",
                "statistics",
                "output check reference",
                "compression",
                "output check",
            ],
            id="hf-self-calibrated",
        ),
        pytest.param(False, True, False, ["self-calibration text", "statistics", "compression"], id="no-output-check"),
    ],
)
def test_phases(export: bool, self_calibration: bool, output_check: bool, phases: list[str]) -> None:
    estimates = memory.compress_estimates(SEVEN_B, export, self_calibration, output_check)
    assert [e.phase for e in estimates] == phases


def test_seven_b_estimates() -> None:
    """A bf16 7B checkpoint: the float model compiled in f32 is 4 bytes a parameter (28 GiB); data-free fits 24 GB."""
    by_phase = {e.phase: e.total / GIB for e in memory.compress_estimates(SEVEN_B, True, True, True)}
    assert by_phase["self-calibration text"] == pytest.approx(7_615_616_512 * 4 / GIB + 0.8, rel=1e-9)
    assert by_phase["export"] == pytest.approx(15_231_233_024 / GIB + 0.8, rel=1e-9)
    assert by_phase["compression"] < 16
    # the output check never holds the float model beside a candidate: it needs no more than self-calibration
    assert by_phase["output check reference"] == by_phase["self-calibration text"]
    assert by_phase["output check"] < by_phase["compression"] + 3 * SEVEN_B.compressed_bytes() / GIB


def _args(**overrides: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "model": "/models/qwen",
        "dataset": None,
        "no_self_calibration": False,
        "no_output_check": False,
        "no_memory_check": False,
    }
    values.update(overrides)
    return argparse.Namespace(**values)


@pytest.fixture
def seven_b_hf(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "model_size", lambda model: (SEVEN_B, True))
    monkeypatch.setattr(
        cli.workflows,
        "export_task",
        lambda model, task: cli.models.ExportTask(cli.models.LLM_TASK, "transformers", "test"),
    )


@pytest.mark.usefixtures("seven_b_hf")
@pytest.mark.parametrize(
    ("available_gib", "overrides", "refused", "suggested"),
    [
        pytest.param(64, {}, False, None, id="fits"),
        pytest.param(23, {}, True, "--no-self-calibration (data-free) fits", id="7b-on-24gb"),
        pytest.param(23, {"no_self_calibration": True}, False, None, id="7b-data-free-on-24gb"),
        pytest.param(23, {"no_memory_check": True}, False, None, id="check-off"),
        pytest.param(30.5, {}, False, None, id="the-check-fits-where-self-calibration-does"),
        pytest.param(13, {"no_self_calibration": True}, True, "export the model on a larger machine", id="export"),
    ],
)
def test_refusal(
    monkeypatch: pytest.MonkeyPatch, available_gib: float, overrides: dict[str, object], refused: bool, suggested: str
) -> None:
    monkeypatch.setattr(memory, "available_bytes", lambda: int(available_gib * GIB))
    options = CompressionOptions()
    if not refused:
        cli.check_compress_memory(_args(**overrides), options, None)
        return
    with pytest.raises(cli.NotEnoughMemoryError, match="not enough memory for /models/qwen") as info:
        cli.check_compress_memory(_args(**overrides), options, None)
    assert suggested in str(info.value)
    assert "--no-memory-check" in str(info.value)


def test_refused_before_anything_is_written(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the command line: exit code 1, one line naming the phase, and no OUT."""
    import openvino as ov

    ov.save_model(transformer_like(), tmp_path / "model.xml")
    monkeypatch.setattr(memory, "available_bytes", lambda: 1)
    code = cli.main(["compress", str(tmp_path / "model.xml"), str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1
    assert "not enough memory" in err
    assert "compression: about" in err
    assert not (tmp_path / "out").exists()


def test_evaluate_estimate_halves_the_float_model_in_bf16() -> None:
    f32 = memory.evaluate_estimate(SEVEN_B, [4 * GIB, 5 * GIB], "f32")
    bf16 = memory.evaluate_estimate(SEVEN_B, [4 * GIB, 5 * GIB], "bf16")
    assert f32.total - bf16.total == 2 * SEVEN_B.parameters
    assert dict(bf16.parts)["candidate"] == 5 * GIB


def test_inference_config() -> None:
    from nncf_hqq.llm import evaluation

    assert evaluation.inference_config("f32") == evaluation.ACCURACY_CONFIG
    bf16 = evaluation.inference_config("bf16")
    assert bf16["INFERENCE_PRECISION_HINT"] == bf16["KV_CACHE_PRECISION"] == "bf16"
    assert bf16["DYNAMIC_QUANTIZATION_GROUP_SIZE"] == "0"
    with pytest.raises(ValueError, match="'f16'"):
        evaluation.inference_config("f16")


@pytest.mark.parametrize(
    ("available_gib", "precision", "expected"),
    [
        pytest.param(64, "f32", None, id="fits"),
        pytest.param(20, "f32", "--inference-precision bf16 fits", id="bf16-fits"),
        pytest.param(20, "bf16", None, id="bf16-asked"),
        pytest.param(5, "f32", "GiB is available (--no-memory-check", id="nothing-fits"),
    ],
)
def test_evaluate_refusal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, available_gib: float, precision: str, expected: str | None
) -> None:
    import openvino as ov

    ov.save_model(transformer_like(), tmp_path / "fp.xml")
    ov.save_model(transformer_like(seed=1), tmp_path / "q.xml")
    monkeypatch.setattr(memory, "ir_size", lambda model: SEVEN_B)
    monkeypatch.setattr(memory, "available_bytes", lambda: int(available_gib * GIB))
    args = argparse.Namespace(inference_precision=precision, no_memory_check=False)
    if expected is None:
        cli.check_evaluate_memory(args, tmp_path / "fp.xml", [tmp_path / "q.xml"])
        return
    with pytest.raises(cli.NotEnoughMemoryError, match="not enough memory to evaluate") as info:
        cli.check_evaluate_memory(args, tmp_path / "fp.xml", [tmp_path / "q.xml"])
    assert expected in str(info.value)


def test_evaluate_compiles_every_model_with_the_given_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """``evaluate_llms`` hands its ``config`` to every model it compiles (reference and candidates, both ways)."""
    from nncf_hqq.llm import evaluation

    seen: list[object] = []

    class CompiledError(Exception):
        pass

    def fake_init(self: object, model: object, config: object = None, core: object = None) -> None:
        seen.append(config)
        raise CompiledError

    monkeypatch.setattr(evaluation.StatefulLLM, "__init__", fake_init)
    config = evaluation.inference_config("bf16")
    for one_at_a_time in (False, True):
        with pytest.raises(CompiledError):
            evaluation.evaluate_llms(
                "fp.xml", {"a": "a.xml", "b": "b.xml"}, [], one_at_a_time=one_at_a_time, config=config
            )
    assert seen == [config, config]


def test_an_unreadable_ir_is_left_to_the_command_to_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "openvino_model.xml").write_text("<net/>")
    monkeypatch.setattr(memory, "available_bytes", lambda: 1)
    args = argparse.Namespace(inference_precision="f32", no_memory_check=False, model=str(tmp_path))
    cli.check_evaluate_memory(args, tmp_path, [tmp_path])
    cli.check_compress_memory(_args(model=str(tmp_path)), CompressionOptions(), None)
    assert capsys.readouterr().err.count("memory: not estimated") == 2
