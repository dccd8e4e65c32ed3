"""Memory estimates of ``compress``'s phases, and the refusal of a phase that cannot fit, before anything starts."""

from __future__ import annotations

import argparse
import dataclasses
import json
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


#: Qwen2.5-7B's shapes, a bf16 checkpoint.
QWEN_7B = memory.DecoderShape(layers=28, kv_heads=4, head_dim=128, vocabulary=152064)
SEVEN_B = memory.ModelSize(7_615_616_512, 15_231_233_024, 545_001_472, 1_090_002_944, QWEN_7B)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        pytest.param(
            {"num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "hidden_size": 3584,
             "vocab_size": 152064},
            QWEN_7B,
            id="grouped-query",
        ),
        pytest.param(
            {"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 3072, "vocab_size": 32064},
            memory.DecoderShape(32, 32, 96, 32064),
            id="no-kv-heads-is-multi-head",
        ),
        pytest.param(
            {"num_hidden_layers": 18, "num_attention_heads": 8, "num_key_value_heads": 1, "hidden_size": 640,
             "head_dim": 256, "vocab_size": 262144},
            memory.DecoderShape(18, 1, 256, 262144),
            id="head-dim-given",
        ),
        pytest.param(
            {"text_config": {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, "vocab_size": 10}},
            memory.DecoderShape(2, 4, 16, 10),
            id="text-config",
        ),
        pytest.param({"hidden_size": 384, "num_attention_heads": 12}, None, id="not-a-decoder"),
        pytest.param([1, 2], None, id="not-an-object"),
    ],
)  # fmt: skip
def test_decoder_shape_from_config_json(tmp_path: Path, config: object, expected: memory.DecoderShape | None) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert memory.decoder_shape(tmp_path) == expected
    assert memory.decoder_shape(tmp_path / "missing") is None


def test_kv_cache_and_logits_of_a_decoder() -> None:
    phi = memory.DecoderShape(layers=32, kv_heads=32, head_dim=96, vocabulary=32064)
    assert phi.kv_bytes_per_token() == 2 * 32 * 32 * 96 * 4
    # 32 sequences of 128 tokens: 3 GiB of f32 keys and values, and the logits of a 17-token first request each
    assert phi.working_bytes(32, 17) == 32 * 128 * 786_432 + 32 * 17 * 32064 * 4


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
    """A bf16 7B checkpoint: the float model compiled is its packed bf16 weights (the weights file's pages dropped
    meanwhile) and its KV cache; every phase fits 24 GB."""
    by_phase = {e.phase: e.total / GIB for e in memory.compress_estimates(SEVEN_B, True, True, True)}
    generation = SEVEN_B.stored_bytes + QWEN_7B.working_bytes(32, 17)
    assert by_phase["self-calibration text"] == pytest.approx(generation / GIB + 0.8, rel=1e-9)
    assert by_phase["statistics"] == pytest.approx((SEVEN_B.stored_bytes + QWEN_7B.working_bytes(1, 128)) / GIB + 0.8)
    assert by_phase["export"] == pytest.approx(15_231_233_024 / GIB + 0.8, rel=1e-9)
    assert by_phase["compression"] == pytest.approx(1.1 * SEVEN_B.stored_bytes / GIB + 0.8, rel=1e-6)  # measured
    data_free = {e.phase: e.total / GIB for e in memory.compress_estimates(SEVEN_B, True, False, False)}
    assert data_free["compression"] < 12
    # the output check never holds the float model beside a candidate: it needs no more than self-calibration
    assert by_phase["output check reference"] <= by_phase["self-calibration text"]
    assert by_phase["output check"] <= by_phase["self-calibration text"]
    assert max(by_phase.values()) < 17


def test_without_a_config_the_float_model_is_its_weights() -> None:
    size = dataclasses.replace(SEVEN_B, decoder=None)
    by_phase = {e.phase: e.total for e in memory.compress_estimates(size, False, True, True)}
    assert by_phase["self-calibration text"] == size.stored_bytes + memory.BASELINE_BYTES


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
        pytest.param(23, {}, False, None, id="7b-on-24gb"),
        pytest.param(15.5, {}, True, "--no-self-calibration (data-free) fits", id="7b-on-16gb"),
        pytest.param(15.5, {"no_self_calibration": True}, False, None, id="7b-data-free-on-16gb"),
        pytest.param(15.5, {"no_memory_check": True}, False, None, id="check-off"),
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


def test_evaluate_estimate_compiles_the_float_model_at_most_in_bf16_in_bf16() -> None:
    f32 = memory.evaluate_estimate(SEVEN_B, [4 * GIB, 5 * GIB], "f32")
    bf16 = memory.evaluate_estimate(SEVEN_B, [4 * GIB, 5 * GIB], "bf16")
    assert f32.total == bf16.total == SEVEN_B.stored_bytes + 5 * GIB + memory.BASELINE_BYTES  # stored in bf16
    assert dict(bf16.parts)["candidate"] == 5 * GIB
    stored_f32 = dataclasses.replace(SEVEN_B, stored_bytes=4 * SEVEN_B.parameters)
    f32 = memory.evaluate_estimate(stored_f32, [4 * GIB], "f32")
    bf16 = memory.evaluate_estimate(stored_f32, [4 * GIB], "bf16")
    assert f32.total - bf16.total == 2 * SEVEN_B.parameters


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
    stored_f32 = dataclasses.replace(SEVEN_B, stored_bytes=4 * SEVEN_B.parameters)  # bf16 inference halves it
    monkeypatch.setattr(memory, "ir_size", lambda model: stored_f32)
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
