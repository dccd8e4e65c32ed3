"""Tests of the ``nncf-hqq`` command line (compress, evaluate, demo) and of examples/optimum_intel.py.

The model tests use the tiny random Llama that tests/test_evaluation.py builds and exports with optimum-intel (its
fixtures are imported here); they need the ``llm`` extra and skip without it. The argument-error tests need nothing
but the package. The demo test runs the real SmolLM2 path (slow; skips when the model or shared/ is unavailable).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

from nncf_hqq.llm import cli
from nncf_hqq.llm import models
from nncf_hqq.llm import workflows
from tests.test_evaluation import text_path  # noqa: F401  (fixture)
from tests.test_evaluation import tiny_llm  # noqa: F401  (fixture)

REPO = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_cli(args: Sequence[object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def zero_point_types(model_dir: Path) -> set[ov.Type]:
    """Element types of the decompression zero-point constants of a saved model."""
    model = ov.Core().read_model(model_dir / workflows.MODEL_XML)
    return {
        op.get_element_type()
        for op in model.get_ops()
        if op.get_type_name() == "Constant" and op.get_friendly_name().endswith("/zero_point")
    }


def generate(model_dir: Path, tokenizer: Any, n_tokens: int = 4) -> Any:
    """Load ``model_dir`` with optimum-intel and greedily generate ``n_tokens`` after a short prompt."""
    optimum_intel = pytest.importorskip("optimum.intel")
    model = optimum_intel.OVModelForCausalLM.from_pretrained(model_dir)
    inputs = tokenizer("w1 w2 w3", return_tensors="pt")
    output = model.generate(**inputs, max_new_tokens=n_tokens, min_new_tokens=n_tokens, do_sample=False)
    assert output.shape[1] == inputs["input_ids"].shape[1] + n_tokens
    return output


@pytest.fixture(scope="module")
def hf_dir(tiny_llm: tuple[Path, Any]) -> Path:  # noqa: F811
    """The HF checkpoint the tiny IR was exported from (tests/test_evaluation.py saves it beside the IR)."""
    path = tiny_llm[0].parent / "hf"
    assert workflows.is_hf_dir(path)
    return path


@pytest.fixture(scope="module")
def compressed_dir(tiny_llm: tuple[Path, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("cli") / "int4_hqq"
    assert cli.main(["compress", str(tiny_llm[0]), str(out), "--group-size", "64", "--no-output-check"]) == 0
    return out


# --------------------------------------------------------------------------------------------------------------------
# Usage errors: a one-line message on stderr, exit code 2, no traceback (no model needed)
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compress", "m.xml", "out", "--mode", "nf4"], "invalid choice: 'nf4'"),
        (["compress", "m", "out", "--mode", "int4_sym", "--zero-point", "int"], "int4_sym has no zero point"),
        (["compress", "missing/model.xml", "out"], "does not exist"),
        (
            ["compress", "m", "out", "--scale-estimation", "--no-self-calibration"],
            "--scale-estimation needs calibration data",
        ),
        (["compress", "m", "out", "--self-calibration-samples", "0"], "--self-calibration-samples must be positive"),
        (["compress", "m", "out", "--ratio", "1.5"], "--ratio must be in (0, 1]"),
        (["compress", "m", "out", "--group-size", "0"], "--group-size must be"),
        (["compress", "m", "out", "--zero-point", "int", "--no-hqq"], "cannot be combined with --no-hqq"),
        (["compress", "m", "out", "--zero-point", "half"], "invalid choice: 'half'"),
        (["compress", "m", "out", "--token-rows", "-1"], "--token-rows must be >= 0, got -1"),
        (["compress", "m", "out", "--token-rows", "8", "--no-hqq"], "--token-rows sets what HQQ fits"),
        (["compress", "m", "out", "--token-rows", "8", "--no-self-calibration"], "--token-rows needs calibration data"),
        (["compress", "m", "out", "--self-prompt-text", "missing.txt"], "--self-prompt-text missing.txt is not a file"),
        (
            ["compress", "m", "out", "--self-prompt-text", "p.txt", "--no-self-calibration"],
            "--self-prompt-text steers self-calibration; it cannot be combined",
        ),
        (
            ["compress", "m", "out", "--self-prompt-text", "p.txt", "--dataset", "d.txt"],
            "cannot be combined with --dataset",
        ),
        (["compress", "m", "out", "--mode", "int8_asym", "--group-size", "64"], "drop --group-size"),
        (["compress", "m", "out", "--mode", "int2_asym", "--no-hqq"], "float-zero-point; drop --no-hqq"),
        (["compress", "m", "out", "--mode", "int3_asym", "--zero-point", "int"], "drop --zero-point int"),
        (["compress", "m", "out", "--awq", "--dataset", "missing.txt"], "--dataset missing.txt is not a file"),
        (["compress", "m", "out", "--backend", "torch", "--mode", "int3_sym"], "int3_sym needs openvino"),
        (["compress", "m", "out", "--backend", "pytorch"], "invalid choice: 'pytorch'"),
        (["compress", "m", "out", "--backend", "torch", "--zero-point", "split"], "takes float or int"),
        (["compress", "m", "out", "--mode", "int2_asym", "--zero-point", "split"], "drop --zero-point split"),
        (["compress", "m"], "the following arguments are required: OUT"),
        (["evaluate", "--reference", "ref"], "the following arguments are required: MODEL"),
        (["evaluate", "a", "--reference", "missing"], "--reference 'missing' is not an OpenVINO IR"),
        (["demo", "--windows", "0"], "--windows must be positive"),
        (["demo", "--windows", "many"], "invalid int value: 'many'"),
        (["squash"], "invalid choice: 'squash'"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(args, capsys)
    assert code == 2
    assert message in err
    assert "Traceback" not in err and out == ""


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli([], capsys)
    assert code == 2
    assert all(command in err for command in ("compress", "evaluate", "demo"))


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["compress", "--help"], capsys)
    assert code == 0
    assert all(flag in out for flag in ("--mode", "--group-size", "--awq", "--dataset", "--zero-point", "--no-hqq"))


def test_command_line_process_reports_errors_without_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nncf_hqq.llm.cli", "compress", str(tmp_path / "nothing.xml"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert proc.returncode == 2
    assert "does not exist" in proc.stderr and "Traceback" not in proc.stderr


def test_failure_inside_nncf_exits_1_with_its_message(
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run_cli(["compress", tiny_llm[0], tmp_path / "out", "--group-size", "48"], capsys)
    assert code == 1
    assert "group size" in err and "Traceback" not in err


def test_evaluate_without_text_says_where_to_get_one(
    compressed_dir: Path,
    tiny_llm: tuple[Path, Any],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(workflows, "default_text", lambda: None)
    code, _, err = run_cli(["evaluate", compressed_dir, "--reference", tiny_llm[0]], capsys)
    assert code == 2
    assert "no --text given" in err


def test_missing_optional_dependency_names_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_transformers(*args: object) -> None:
        raise ModuleNotFoundError("No module named 'transformers'")

    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "openvino_model.xml").write_text("<net/>")
    (tmp_path / "text.txt").write_text("w1 w2")
    monkeypatch.setattr(workflows.evaluation, "load_tokenizer", no_transformers)
    args = ["evaluate", tmp_path / "ref", "--reference", tmp_path / "ref", "--reference-name", "r"]
    code, _, err = run_cli([*args, "--text", tmp_path / "text.txt"], capsys)
    assert code == 1
    assert "No module named 'transformers': install the llm extra" in err and "Traceback" not in err


def test_demo_cache_option_points_the_model_cache_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nncf_hqq.llm.demo import model_cache

    monkeypatch.setenv(models.CACHE_ENV, "/somewhere")
    with model_cache(tmp_path / "cache"):
        assert models.cache_dir() == tmp_path / "cache"
    assert os.environ[models.CACHE_ENV] == "/somewhere"


# --------------------------------------------------------------------------------------------------------------------
# compress
# --------------------------------------------------------------------------------------------------------------------
def test_compressed_ir_dir_loads_with_optimum_intel_and_generates(
    compressed_dir: Path,
    tiny_llm: tuple[Path, Any],  # noqa: F811
) -> None:
    names = {p.name for p in compressed_dir.iterdir()}
    assert {"openvino_model.xml", "openvino_model.bin", "config.json", "tokenizer.json"} <= names
    assert {"generation_config.json", workflows.RECORD_NAME} <= names
    record = json.loads((compressed_dir / workflows.RECORD_NAME).read_text())
    assert record["options"]["mode"] == "int4_asym" and record["options"]["hqq"] is True
    # self-calibrated (no --dataset): 32 generated sequences from the BOS token of the model's config
    assert record["self_calibration"]["num_samples"] == 32 and record["self_calibration"]["start_token_ids"] == [1]
    assert record["options"]["awq"] is True and record["options"]["scale_estimation"] is True
    # decoder layers: HQQ's f16 zero points (the output guard may give whole layers to NNCF's u4 ones);
    # embeddings and lm_head: the INT8_ASYM backup (RTN, u8 zero points)
    assert {ov.Type.f16, ov.Type.u8} <= zero_point_types(compressed_dir) <= {ov.Type.f16, ov.Type.u4, ov.Type.u8}
    generate(compressed_dir, tiny_llm[1])


def test_compress_with_token_rows_records_them_and_changes_the_model(
    compressed_dir: Path,
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["compress", tiny_llm[0], tmp_path / "out", "--group-size", "64", "--no-output-check", "--token-rows", "8"]
    code, out, _ = run_cli(args, capsys)
    assert code == 0, out
    record = json.loads((tmp_path / "out" / workflows.RECORD_NAME).read_text())
    assert record["options"]["token_rows"] == 8 and record["self_calibration"] is not None
    weights = [(d / "openvino_model.bin").read_bytes() for d in (compressed_dir, tmp_path / "out")]
    assert weights[0] != weights[1]  # the same options and calibration text, HQQ fitted to token rows


def test_compress_with_a_prompt_text_starts_every_sequence_from_it(
    compressed_dir: Path,
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = tmp_path / "user.txt"
    text.write_text(" ".join(f"w{i}" for i in range(40)))
    args = ["compress", tiny_llm[0], tmp_path / "out", "--group-size", "64", "--no-output-check"]
    code, out, err = run_cli([*args, "--self-prompt-text", text], capsys)
    assert code == 0, out
    assert f"16 tokens of {text} (40 tokens)" in err
    record = json.loads((tmp_path / "out" / workflows.RECORD_NAME).read_text())
    params = record["self_calibration"]
    assert params["start_token_ids"] == [1] and params["prompt_len"] == 16
    assert params["prompt_token_ids"] == tiny_llm[1](text.read_text(), add_special_tokens=False)["input_ids"]
    weights = [(d / "openvino_model.bin").read_bytes() for d in (compressed_dir, tmp_path / "out")]
    assert weights[0] != weights[1]  # the same options, calibrated on text that continues the user's


def test_compress_refuses_a_prompt_text_shorter_than_a_prompt(
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = tmp_path / "short.txt"
    text.write_text("w1 w2 w3")
    args = ["compress", tiny_llm[0], tmp_path / "out", "--group-size", "64", "--self-prompt-text", text]
    code, _, err = run_cli(args, capsys)
    assert code == 2
    assert "has 3 tokens" in err and "give a longer text" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_compress_keeps_the_candidate_closest_to_the_float_model(
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_cli(["compress", tiny_llm[0], tmp_path / "out", "--group-size", "64"], capsys)
    assert code == 0, out
    record = json.loads((tmp_path / "out" / workflows.RECORD_NAME).read_text())
    check = record["output_check"]
    names = ["self-calibrated", "data-free", "rtn"]
    assert list(check["metrics"]) == ["fp", *names] and check["held_out_sequences"] == workflows.OUTPUT_CHECK_SEQUENCES
    kl = {name: check["metrics"][name]["kl"] for name in names}
    assert check["chosen"] == min(names, key=kl.__getitem__) and kl[check["chosen"]] > 0.0
    assert f"keeping {check['chosen']}" in err
    # the record describes the model written: its options are the chosen candidate's
    assert record["options"]["hqq"] is (check["chosen"] != "rtn")
    assert (record["self_calibration"] is not None) is (check["chosen"] == "self-calibrated")
    phases = ["output check reference", "self-calibration text", "compression", "statistics", "output check"]
    phases += ["saving", "tokenizer conversion"]
    assert_phases_timed(err, record["phase_seconds"], phases)
    assert record["phase_seconds"]["statistics"] <= record["phase_seconds"]["compression"]


def test_output_check_writes_the_least_kl_candidate(
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the measured KL made to favour NNCF's RTN, RTN's model (u4 zero points, no HQQ) is what is written."""
    original = workflows.evaluation.evaluate_llms

    def rtn_closest(reference: Any, candidates: Any, windows: Any) -> dict[str, dict[str, float]]:
        assert len(windows) == workflows.OUTPUT_CHECK_SEQUENCES
        metrics = original(reference, candidates, windows)
        if "rtn" in candidates:  # the candidates are evaluated one at a time
            metrics["rtn"]["kl"] = 0.0
        return metrics

    monkeypatch.setattr(workflows.evaluation, "evaluate_llms", rtn_closest)
    code, out, err = run_cli(["compress", tiny_llm[0], tmp_path / "out", "--group-size", "64"], capsys)
    assert code == 0, out
    record = json.loads((tmp_path / "out" / workflows.RECORD_NAME).read_text())
    assert record["output_check"]["chosen"] == "rtn" and "keeping rtn" in err
    assert record["options"]["hqq"] is False and record["self_calibration"] is None
    assert "RTN (no HQQ)" in out
    assert ov.Type.f16 not in zero_point_types(tmp_path / "out")
    genai_generate(tmp_path / "out", tiny_llm[1])


def test_output_check_candidates_are_data_free_hqq_and_rtn() -> None:
    data_free = workflows.CompressionOptions(group_size=64, scale_estimation=True, zero_point="float")
    calibrated = workflows.self_calibrated(data_free, None, 4)
    candidates = workflows.output_check_candidates(data_free, calibrated)
    assert list(candidates) == ["self-calibrated", "data-free", "rtn"]
    assert candidates["self-calibrated"] is calibrated
    assert candidates["data-free"].scale_estimation is False and candidates["data-free"].self_calibration is None
    assert candidates["data-free"].hqq is True and candidates["data-free"].zero_point == "float"
    assert candidates["rtn"].hqq is False and candidates["rtn"].group_size == 64


def test_token_rows_option_is_hqqs_calibration_token_rows() -> None:
    from nncf_hqq import HQQ_TOKEN_ROWS

    assert workflows.CompressionOptions(token_rows=32).hqq_params() == HQQ_TOKEN_ROWS
    both = workflows.CompressionOptions(token_rows=8, zero_point="int").hqq_params()
    assert both is not None and both.calibration_token_rows == 8 and both.zero_point_format.value == "integer"
    assert workflows.CompressionOptions().hqq_params() is None
    calibrated = workflows.CompressionOptions(scale_estimation=True, token_rows=32)
    candidates = workflows.output_check_candidates(calibrated, calibrated)
    assert candidates["self-calibrated"].token_rows == 32 and candidates["data-free"].token_rows == 0


def test_compress_says_why_it_does_not_self_calibrate(
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_cli(["compress", tiny_llm[0], tmp_path / "out", "--mode", "int8_asym"], capsys)
    assert code == 0, out
    assert "Self-calibration not used: int8_asym is compressed without data" in err
    record = json.loads((tmp_path / "out" / workflows.RECORD_NAME).read_text())
    assert record["self_calibration"] is None and record["options"]["awq"] is False


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--zero-point", "int"], {ov.Type.u4}),
        # data-free: the value projections keep RTN (rtn_roles)
        (["--zero-point", "float", "--no-self-calibration"], {ov.Type.f16, ov.Type.u4}),
        (["--zero-point", "split"], {ov.Type.u4}),
        (["--no-hqq"], {ov.Type.u4}),
        (["--mode", "INT8_ASYM"], {ov.Type.f16, ov.Type.u8}),
        (["--awq", "--no-self-calibration"], {ov.Type.f16, ov.Type.u4}),
        (["--mode", "int4_sym"], set()),
    ],
    ids=["int_zero_point", "float_zero_point", "split_zero_point", "rtn", "int8", "data_free_awq", "int4_sym"],
)
def test_compress_options_reach_nncf(
    extra: list[str],
    expected: set[ov.Type],
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    int4 = [] if "INT8_ASYM" in extra else ["--group-size", "64", "--backup-mode", "none"]
    code, out, _ = run_cli(["compress", tiny_llm[0], tmp_path / "out", *int4, *extra], capsys)
    assert code == 0, out
    assert zero_point_types(tmp_path / "out") == expected


def test_split_zero_point_model_generates_what_the_float_zero_point_model_generates(
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The stateful IR through optimum-intel: it generates with default CPU settings, and in f32 without activation
    quantization (PROTOCOL.md) it gives the float-zero-point model's logits (to the rounding of the int8
    corrections, well under 2^-11 of the largest) and, on the float model's greedy continuation, its greedy tokens
    wherever the float model's top two logits are further apart than that rounding (this random model has exact
    near-ties, 1.6e-5 apart, that any rounding may flip)."""
    optimum_intel = pytest.importorskip("optimum.intel")
    accuracy = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
    inputs = tiny_llm[1]("w1 w2 w3 w4 w5", return_tensors="pt")
    models = {}
    for zero_point in ("float", "split"):
        out = tmp_path / zero_point
        code, _, err = run_cli(["compress", tiny_llm[0], out, "--group-size", "64", "--zero-point", zero_point], capsys)
        assert code == 0, err
        generate(out, tiny_llm[1])
        genai_generate(out, tiny_llm[1])
        models[zero_point] = optimum_intel.OVModelForCausalLM.from_pretrained(out, ov_config=accuracy)
    tokens = models["float"].generate(**inputs, max_new_tokens=8, min_new_tokens=8, do_sample=False)
    logits = {name: model(input_ids=tokens).logits.numpy()[0] for name, model in models.items()}
    difference = np.abs(logits["split"] - logits["float"]).max()
    assert difference / np.abs(logits["float"]).max() < 2.0**-11
    top_two = np.sort(logits["float"], axis=-1)[:, -2:]
    clear = top_two[:, 1] - top_two[:, 0] > 2 * difference
    assert clear.sum() >= len(clear) // 2
    np.testing.assert_array_equal(logits["split"].argmax(-1)[clear], logits["float"].argmax(-1)[clear])


def test_compress_hf_dir_with_calibration_data(
    hf_dir: Path,
    text_path: Path,  # noqa: F811
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out_dir = tmp_path / "awq_se"
    args = ["compress", hf_dir, out_dir, "--group-size", "64", "--awq", "--scale-estimation"]
    code, out, err = run_cli([*args, "--dataset", text_path, "--subset-size", "4"], capsys)
    assert code == 0, err
    assert "AWQ, Scale Estimation, HQQ" in out
    assert "4 random 256-token windows" in err
    assert ov.Type.f16 in zero_point_types(out_dir)
    assert (out_dir / "tokenizer.json").is_file() and (out_dir / "config.json").is_file()
    generate(out_dir, tiny_llm[1])
    genai_generate(out_dir, tiny_llm[1])  # a HF dir's output is an OpenVINO GenAI dir too
    phases = ["export", "calibration data", "compression", "statistics", "saving", "tokenizer conversion"]
    assert_phases_timed(err, json.loads((out_dir / workflows.RECORD_NAME).read_text())["phase_seconds"], phases)


def test_compress_backend_torch_writes_a_transformers_checkpoint_that_loads_compressed(
    hf_dir: Path,
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    import nncf_hqq.torch  # noqa: F401 (registers the nncf_hqq checkpoint format)

    out_dir = tmp_path / "torch"
    code, out, err = run_cli(["compress", hf_dir, out_dir, "--group-size", "64", "--backend", "torch"], capsys)
    assert code == 0, err
    assert "transformers checkpoint" in out and "HQQ (default zero point)" in out
    config = json.loads((out_dir / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "nncf_hqq"
    assert (out_dir / "tokenizer.json").is_file() and (out_dir / workflows.RECORD_NAME).is_file()
    record = json.loads((out_dir / workflows.RECORD_NAME).read_text())
    assert_phases_timed(err, record["phase_seconds"], ["loading", "compression", "saving"])
    model = AutoModelForCausalLM.from_pretrained(out_dir)
    codes = [p for n, p in model.named_parameters() if n.endswith("q_proj.weight")]
    assert codes and all(p.dtype == torch.uint8 for p in codes)
    generated = model.generate(input_ids=torch.tensor([[1, 5, 9, 13]]), max_new_tokens=3, do_sample=False)
    assert generated.shape[1] == 4 + 3


def test_compress_backend_torch_refuses_an_openvino_ir(
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run_cli(["compress", tiny_llm[0], tmp_path / "out", "--backend", "torch"], capsys)
    assert code == 2 and "is an OpenVINO IR" in err


# --------------------------------------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------------------------------------
def test_evaluate_prints_a_table_and_writes_json_and_png(
    compressed_dir: Path,
    tiny_llm: tuple[Path, Any],  # noqa: F811
    text_path: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("matplotlib")
    json_path, png_path = tmp_path / "r" / "eval.json", tmp_path / "r" / "eval.png"
    args = ["evaluate", compressed_dir, f"xml={compressed_dir / 'openvino_model.xml'}", "--reference", tiny_llm[0]]
    args += ["--text", text_path, "--windows", "3", "--window-size", "32", "--json", json_path, "--png", png_path]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    record = json.loads(json_path.read_text())
    assert record["windows"] == 3 and record["window_size"] == 32 and record["reference"] == "fp"
    results = record["results"]
    assert list(results) == ["fp", "int4_hqq", "xml"]
    for metrics in results.values():
        assert {"ppl", "kl", "top1"} <= set(metrics)
        assert all(math.isfinite(metrics[k]) for k in ("ppl", "kl", "top1"))
    assert results["fp"]["kl"] == 0.0 and results["fp"]["top1"] == 1.0
    assert results["int4_hqq"]["kl"] > 0.0
    for key in ("ppl", "kl", "top1"):  # the same model, given as a dir and as an .xml
        assert results["xml"][key] == pytest.approx(results["int4_hqq"][key], rel=1e-9)
    assert png_path.read_bytes()[:8] == PNG_MAGIC
    assert_phases_timed(err, record["phase_seconds"], ["tokenization", "reference check", "evaluation"])
    for name in results:
        assert name in out
    assert "PPL" in out and "top-1" in out


def test_format_table_lists_every_model_with_extra_columns() -> None:
    results = {"fp": {"ppl": 10.0, "kl": 0.0, "top1": 1.0}, "hqq": {"ppl": 11.5, "kl": 0.01, "top1": 0.9}}
    table = workflows.format_table(results, {"hqq": {"compress s": 3.25}})
    lines = table.splitlines()
    assert lines[0].split() == ["model", "PPL", "KL", "top-1", "compress", "s"]
    assert lines[2].split()[:4] == ["fp", "10.000", "0.00000", "1.0000"]
    assert lines[3].split() == ["hqq", "11.500", "0.01000", "0.9000", "3.2"]


# --------------------------------------------------------------------------------------------------------------------
# examples/optimum_intel.py: OVWeightQuantizationConfig(..., hqq=True) through optimum-intel
# --------------------------------------------------------------------------------------------------------------------
def _optimum_example() -> Any:
    pytest.importorskip("optimum.intel")
    spec = importlib.util.spec_from_file_location("optimum_intel_example", REPO / "examples" / "optimum_intel.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_optimum_intel_config_passes_hqq_through(
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    example = _optimum_example()
    out_dir = tmp_path / "optimum_hqq"
    example.compress_with_optimum(tiny_llm[0], out_dir, group_size=64)
    # HQQ's float zero points in the decoder layers (u4 RTN ones in the value projections, HQQ_DEFAULT's rtn_roles),
    # NNCF's u8 ones in the INT8_ASYM backup (embeddings, lm_head)
    assert zero_point_types(out_dir) == {ov.Type.f16, ov.Type.u4, ov.Type.u8}
    answer = example.chat(out_dir, "w1 w2 w3", max_new_tokens=4)
    assert isinstance(answer, str)
    generate(out_dir, tiny_llm[1])
    # hqq_params travels the same way
    int_dir = tmp_path / "optimum_hqq_int"
    example.compress_with_optimum(tiny_llm[0], int_dir, group_size=64, hqq_params={"zero_point_format": "integer"})
    assert ov.Type.f16 not in zero_point_types(int_dir)
    split_dir = tmp_path / "optimum_hqq_split"
    example.compress_with_optimum(tiny_llm[0], split_dir, group_size=64, hqq_params={"zero_point_format": "split"})
    assert zero_point_types(split_dir) == {ov.Type.u4, ov.Type.u8}
    generate(split_dir, tiny_llm[1])


# --------------------------------------------------------------------------------------------------------------------
# demo on the real SmolLM2 (slow)
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_demo_on_smollm2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("optimum.intel")
    pytest.importorskip("gguf")
    pytest.importorskip("matplotlib")
    if workflows.default_text() is None:
        pytest.skip("shared/ WikiText-2 is unavailable")
    try:
        models.smollm2_ov_dir()
    except (RuntimeError, FileNotFoundError) as unavailable:
        pytest.skip(f"SmolLM2 unavailable: {unavailable}")
    code, out, err = run_cli(["demo", "--windows", "1", "--out", tmp_path / "demo"], capsys)
    assert code == 0, err
    record = json.loads((tmp_path / "demo" / "demo.json").read_text())
    results = record["results"]
    assert list(results) == ["fp", "rtn", "hqq", "awq", "awq_hqq", "self_awq_se_hqq"]
    assert record["methods"]["self_awq_se_hqq"]["self_calibration"]["start_token_ids"] == [1]
    fp = results["fp"]["ppl"]
    assert 5.0 < fp < 80.0
    for name in ("rtn", "hqq", "awq", "awq_hqq", "self_awq_se_hqq"):
        assert fp < results[name]["ppl"] < 3 * fp
        assert 0.0 < results[name]["kl"] < 1.0 and 0.5 < results[name]["top1"] < 1.0
        assert record["compress_seconds"][name] > 0
    assert (tmp_path / "demo" / "demo.png").read_bytes()[:8] == PNG_MAGIC
    assert "total wall time" in out and "awq_hqq" in out
    assert np.isfinite(record["wall_seconds"])


# --------------------------------------------------------------------------------------------------------------------
# The output dir is an OpenVINO GenAI dir (tokenizer IRs); every long phase is timed
# --------------------------------------------------------------------------------------------------------------------
def genai_generate(model_dir: Path, tokenizer: Any, n_tokens: int = 4) -> list[int]:
    """Load ``model_dir`` with ``openvino_genai.LLMPipeline`` and greedily generate ``n_tokens``; its tokenizer and
    detokenizer IRs must agree with the HF tokenizer. Returns the generated token ids."""
    openvino_genai = pytest.importorskip("openvino_genai")
    pipe = openvino_genai.LLMPipeline(str(model_dir), "CPU")
    prompt = "w1 w2 w3"
    encoded = pipe.get_tokenizer().encode(prompt)
    assert encoded.input_ids.data.tolist() == [tokenizer(prompt)["input_ids"]]
    config = openvino_genai.GenerationConfig(max_new_tokens=n_tokens, min_new_tokens=n_tokens, do_sample=False)
    tokens = pipe.generate(encoded, config).tokens[0]
    assert len(tokens) == n_tokens
    text = pipe.generate([prompt], config).texts[0]
    assert text == pipe.get_tokenizer().decode(tokens) == tokenizer.decode(tokens, skip_special_tokens=True)
    return list(tokens)


def assert_phases_timed(err: str, phase_seconds: dict[str, float], expected: Sequence[str]) -> None:
    """Each expected phase logged its start and its seconds on stderr and is in the phase summary and in the
    recorded ``phase_seconds`` (in the order the phases started)."""
    assert list(phase_seconds) == list(expected)
    summaries = [line for line in err.splitlines() if line.startswith(f"[{cli.PROG}] phases: ")]
    assert len(summaries) == 1
    for name in expected:
        assert f"[{cli.PROG}] {name} ...\n" in err
        assert re.search(rf"\[{cli.PROG}\] {re.escape(name)}: \d+\.\d s\n", err)
        assert re.search(rf"(: |, |\(){re.escape(name)} \d+\.\d s", summaries[0])
        assert phase_seconds[name] >= 0.0


def test_compressed_dir_is_an_openvino_genai_dir(
    compressed_dir: Path,
    tiny_llm: tuple[Path, Any],  # noqa: F811
) -> None:
    """The IR-dir input's output: tokenizer and detokenizer IRs beside the model; openvino_genai's LLMPipeline loads
    it and generates, and optimum-intel still loads it."""
    for name in (workflows.TOKENIZER_XML, workflows.DETOKENIZER_XML):
        assert (compressed_dir / name).is_file() and (compressed_dir / name).with_suffix(".bin").is_file()
    assert workflows.is_genai_dir(compressed_dir)
    genai_generate(compressed_dir, tiny_llm[1])
    generate(compressed_dir, tiny_llm[1])


def test_compress_says_in_one_line_when_the_tokenizer_cannot_be_converted(
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    openvino_tokenizers = pytest.importorskip("openvino_tokenizers")

    def unsupported(*args: object, **kwargs: object) -> None:
        raise RuntimeError("tokenizer model 'WordLevel' is not supported\nsecond line")

    monkeypatch.setattr(openvino_tokenizers, "convert_tokenizer", unsupported)
    code, out, err = run_cli(["compress", tiny_llm[0], tmp_path / "out", "--mode", "int8_asym"], capsys)
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "was not converted to OpenVINO" in line]
    assert len(warnings) == 1 and "second line" not in err
    assert "'WordLevel' is not supported" in warnings[0] and "openvino_genai will not load" in warnings[0]
    assert (tmp_path / "out" / workflows.MODEL_XML).is_file() and not workflows.is_genai_dir(tmp_path / "out")
    assert "OpenVINO GenAI" not in out and "Wrote" in out
    generate(tmp_path / "out", tiny_llm[1])


def test_tokenizer_irs_of_the_source_are_copied_not_converted(
    compressed_dir: Path,
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for path in compressed_dir.iterdir():
        if path.name.startswith("openvino_tokenizer") or path.name.startswith("openvino_detokenizer"):
            (source / path.name).write_bytes(path.read_bytes())
    (source / "config.json").write_bytes((compressed_dir / "config.json").read_bytes())

    def fail(*args: object, **kwargs: object) -> list[str]:
        raise AssertionError("the source's tokenizer IRs must be copied")

    monkeypatch.setattr(workflows, "write_openvino_tokenizers", fail)
    logs: list[str] = []
    model = workflows.read_model(tiny_llm[0])
    copied = workflows.save_model_dir(model, tmp_path / "out", source, {"source": "test"}, log=logs.append)
    assert {"openvino_tokenizer.xml", "openvino_detokenizer.bin", "config.json"} <= set(copied)
    assert workflows.is_genai_dir(tmp_path / "out") and logs == []
    recorded = json.loads((tmp_path / "out" / workflows.RECORD_NAME).read_text())
    assert list(recorded["phase_seconds"]) == ["saving"]


def test_an_encoder_gets_a_tokenizer_ir_without_a_detokenizer(
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    pytest.importorskip("openvino_tokenizers")
    from openvino import opset13 as ops

    assert workflows.generates_text(workflows.read_model(tiny_llm[0]))
    inputs = ops.parameter([1, -1, 8], ov.Type.f32, name="inputs_embeds")
    hidden = ops.relu(inputs)
    hidden.output(0).set_names({"last_hidden_state"})
    assert not workflows.generates_text(ov.Model([hidden], [inputs], "encoder"))
    written = workflows.write_openvino_tokenizers(tiny_llm[0], tmp_path / "enc", with_detokenizer=False)
    assert written == [workflows.TOKENIZER_XML]
    assert sorted(p.name for p in (tmp_path / "enc").iterdir()) == ["openvino_tokenizer.bin", "openvino_tokenizer.xml"]
    ids = ov.Core().compile_model(tmp_path / "enc" / workflows.TOKENIZER_XML, "CPU")(["w1 w2 w3"])["input_ids"]
    assert ids.tolist() == [tiny_llm[1]("w1 w2 w3")["input_ids"]]


def test_step_timer_nests_accumulates_and_summarises() -> None:
    from nncf_hqq.llm.timing import StepTimer

    lines: list[str] = []
    timer = StepTimer(lines.append)
    with timer.step("export"):
        pass
    for _ in range(2):
        with timer.step("compression"), timer.step("statistics"):
            pass
    assert list(timer.seconds) == ["export", "compression", "statistics"]
    assert timer.parents == {"export": None, "compression": None, "statistics": "compression"}
    assert lines[:2] == ["export ...", lines[1]] and re.fullmatch(r"export: \d+\.\d s", lines[1])
    assert re.fullmatch(r"export \d+\.\d s, compression \d+\.\d s \(statistics \d+\.\d s\)", timer.summary())
    assert len(lines) == 2 + 2 * 4


def test_step_timer_calls_at_boundary_when_every_step_starts_and_ends() -> None:
    from nncf_hqq.llm.timing import StepTimer

    events: list[str] = []
    timer = StepTimer(events.append, at_boundary=lambda: events.append("|"))
    with timer.step("compression"), timer.step("statistics"):
        events.append("work")
    assert [e if e in ("|", "work") or e.endswith("...") else e.split(":")[0] for e in events] == [
        "|", "compression ...", "|", "statistics ...", "work", "|", "statistics", "|", "compression",
    ]  # fmt: skip


# --------------------------------------------------------------------------------------------------------------------
# Bounded evaluation: candidates compiled and evaluated one at a time, with the metrics of the lockstep evaluation
# --------------------------------------------------------------------------------------------------------------------
def test_evaluating_one_candidate_at_a_time_gives_the_metrics_of_all_at_once(
    compressed_dir: Path,
    tiny_llm: tuple[Path, Any],  # noqa: F811
    text_path: Path,  # noqa: F811
) -> None:
    from nncf_hqq.llm import evaluation

    windows = evaluation.token_windows(evaluation.tokenize_text(tiny_llm[1], text_path), 3, 32)
    rtn_options = workflows.CompressionOptions(group_size=64, hqq=False)
    rtn = workflows.compress_model(workflows.read_model(tiny_llm[0]), rtn_options)
    candidates = {"hqq": compressed_dir, "rtn": rtn, "same": tiny_llm[0]}
    together = evaluation.evaluate_llms(tiny_llm[0], candidates, windows, chunk=16)
    apart = evaluation.evaluate_llms(tiny_llm[0], candidates, windows, chunk=16, one_at_a_time=True)
    assert list(apart) == list(together) == ["fp", "hqq", "rtn", "same"]
    for name in together:
        assert {k: apart[name][k] for k in workflows.METRICS} == {k: together[name][k] for k in workflows.METRICS}
    assert apart["same"]["kl"] == 0.0 and apart["hqq"]["kl"] > 0.0


def test_output_check_measures_what_evaluating_all_candidates_at_once_measures(
    tiny_llm: tuple[Path, Any],  # noqa: F811
) -> None:
    """The output check compresses and evaluates its candidates one at a time; its metrics and choice are those of
    the three candidates compressed first and evaluated together."""
    from nncf_hqq.llm import evaluation

    xml = models.ir_xml(tiny_llm[0])
    data_free = workflows.CompressionOptions(group_size=64)
    calibrated = workflows.self_calibrated(data_free, tiny_llm[0], 4)
    model, options, check = workflows.compress_checked_on_outputs(xml, data_free, calibrated, log=lambda _: None)
    assert calibrated.self_calibration is not None
    held_out = workflows.held_out_sequences(workflows.read_model(xml), calibrated.self_calibration)
    candidates = workflows.output_check_candidates(data_free, calibrated)
    compressed = {name: workflows.compress_model(workflows.read_model(xml), o) for name, o in candidates.items()}
    together = evaluation.evaluate_llms(xml, compressed, held_out)
    assert check.record()["metrics"] == {name: {k: m[k] for k in workflows.METRICS} for name, m in together.items()}
    assert check.chosen == min(candidates, key=lambda name: together[name]["kl"])
    assert options == candidates[check.chosen]
    assert isinstance(model, ov.Model)


def test_output_check_runs_the_float_model_once_before_any_candidate_and_removes_its_recording(
    tiny_llm: tuple[Path, Any],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The float model is compiled for evaluation once, to record its logits into ``scratch_dir``, before the first
    candidate is compressed; the candidates are evaluated against that recording, which is removed afterwards."""
    from nncf_hqq.llm import evaluation

    events: list[str] = []
    recordings: list[Path] = []
    compile_llm, compress = evaluation.StatefulLLM.__init__, workflows.compress_model
    make_recording = evaluation.RecordedLogits.__init__

    def compiled(self: Any, model: Any, *args: Any) -> None:
        events.append("compile float" if isinstance(model, str | Path) else "compile candidate")
        compile_llm(self, model, *args)

    def recorded(self: Any, path: Path, *args: Any) -> None:
        recordings.append(path)
        make_recording(self, path, *args)

    def compressed(*args: Any, **kwargs: Any) -> Any:
        events.append("compress")
        return compress(*args, **kwargs)

    monkeypatch.setattr(evaluation.StatefulLLM, "__init__", compiled)
    monkeypatch.setattr(evaluation.RecordedLogits, "__init__", recorded)
    monkeypatch.setattr(workflows, "compress_model", compressed)
    xml = models.ir_xml(tiny_llm[0])
    data_free = workflows.CompressionOptions(group_size=64)
    calibrated = workflows.self_calibrated(data_free, tiny_llm[0], 4)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    workflows.compress_checked_on_outputs(xml, data_free, calibrated, log=lambda _: None, scratch_dir=scratch)
    assert events == ["compile float"] + ["compress", "compile candidate"] * 3
    assert len(recordings) == 1 and recordings[0].parent.parent == scratch
    assert list(scratch.iterdir()) == []


def test_output_check_frees_every_candidate_it_does_not_keep(
    tiny_llm: tuple[Path, Any],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each candidate is better than the one before, so each replaces the kept one: when a candidate is compressed,
    only the kept one is still alive (its predecessor was freed)."""
    import gc
    import weakref

    from nncf_hqq.llm import evaluation

    alive_at_compress: list[int] = []
    outputs: list[weakref.ref[Any]] = []
    compress, evaluate = workflows.compress_model, evaluation.evaluate_llms
    kl = {"self-calibrated": 3.0, "data-free": 2.0, "rtn": 1.0}

    def compressed(*args: Any, **kwargs: Any) -> Any:
        gc.collect()
        alive_at_compress.append(sum(ref() is not None for ref in outputs))
        result = compress(*args, **kwargs)
        outputs.append(weakref.ref(result))
        return result

    def evaluated(reference: Any, candidates: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        metrics = evaluate(reference, candidates, *args, **kwargs)
        return {name: {**m, "kl": kl.get(name, 0.0)} for name, m in metrics.items()}

    monkeypatch.setattr(workflows, "compress_model", compressed)
    monkeypatch.setattr(evaluation, "evaluate_llms", evaluated)
    data_free = workflows.CompressionOptions(group_size=64)
    calibrated = workflows.self_calibrated(data_free, tiny_llm[0], 4)
    kept, _, check = workflows.compress_checked_on_outputs(
        models.ir_xml(tiny_llm[0]), data_free, calibrated, log=lambda _: None
    )
    assert check.chosen == "rtn" and kept is outputs[-1]()
    assert alive_at_compress == [0, 1, 1]


def test_evaluate_all_at_once_gives_the_default_one_at_a_time_results(
    compressed_dir: Path,
    tiny_llm: tuple[Path, Any],  # noqa: F811
    text_path: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["evaluate", compressed_dir, f"same={tiny_llm[0]}", "--reference", tiny_llm[0], "--text", text_path]
    args += ["--windows", "2", "--window-size", "32"]
    results = {}
    for flags in ([], ["--all-at-once"]):
        json_path = tmp_path / f"eval{len(flags)}.json"
        code, _, err = run_cli([*args, *flags, "--json", json_path], capsys)
        assert code == 0, err
        rows = json.loads(json_path.read_text())["results"]
        results[len(flags)] = {name: {k: m[k] for k in workflows.METRICS} for name, m in rows.items()}
    assert results[0] == results[1] and list(results[0]) == ["fp", "int4_hqq", "same"]


def test_compress_and_evaluate_drop_the_weights_files_pages_and_return_free_heap_at_every_phase(
    compressed_dir: Path,
    tiny_llm: tuple[Path, Any],  # noqa: F811
    text_path: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from contextlib import contextmanager

    from nncf_hqq.openvino import pages

    released: list[list[Path]] = []
    boundaries: list[bool] = []

    @contextmanager
    def recorded(*paths: Path, **kwargs: float) -> Iterator[None]:
        with pages.releasing_file_pages(*paths, **kwargs):
            released.append([Path(p).resolve() for p in paths])
            yield

    monkeypatch.setattr(cli, "releasing_file_pages", recorded)
    monkeypatch.setattr(cli, "return_free_heap", lambda: boundaries.append(pages.return_free_heap()) or True)
    args = ["compress", tiny_llm[0], tmp_path / "out", "--group-size", "64", "--no-self-calibration"]
    code, _, err = run_cli(args, capsys)
    assert code == 0, err
    phases = json.loads((tmp_path / "out" / workflows.RECORD_NAME).read_text())["phase_seconds"]
    assert released == [[(tiny_llm[0] / "openvino_model.bin").resolve()]]
    assert len(boundaries) == 2 * len(phases) and all(boundaries)  # glibc: every call returned the free heap
    args = ["evaluate", compressed_dir, "--reference", tiny_llm[0], "--text", text_path, "--windows", "2"]
    code, _, err = run_cli([*args, "--window-size", "32"], capsys)
    assert code == 0, err
    expected = [(tiny_llm[0] / "openvino_model.bin").resolve(), (compressed_dir / "openvino_model.bin").resolve()]
    assert released[1:] == [expected]
