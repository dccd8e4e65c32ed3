"""Tests of the ``nncf-hqq`` command line (nncf_hqq.llm.cli): its arguments and their errors, its exit codes, what it
prints, and its log when stderr is a file.

The jobs behind the commands have their own tests (test_compress_job.py, test_output_check.py, test_evaluate_job.py,
test_demo.py). The argument-error tests need nothing but the package; the others use the tiny Llama of
tests/conftest.py (the ``llm`` extra) and skip without it.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from nncf_hqq.llm import cli
from nncf_hqq.llm import evaluate_job
from nncf_hqq.llm.layout import MODEL_XML
from nncf_hqq.llm.layout import RECORD_NAME
from nncf_hqq.llm.layout import is_genai_dir
from tests.llm_helpers import PNG_MAGIC
from tests.llm_helpers import assert_phases_timed
from tests.llm_helpers import run_cli

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def compressed_dir(tiny_llm: tuple[Path, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "int4_hqq"
    assert cli.main(["compress", str(tiny_llm[0]), str(out), "--group-size", "64", "--no-self-calibration"]) == 0
    return out


# --------------------------------------------------------------------------------------------------------------------
# Usage errors: a one-line message on stderr, exit code 2, no traceback (no model needed)
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compress", "m.xml", "out", "--mode", "nf4"], "invalid choice: 'nf4'"),
        (["compress", "m", "out", "--mode", "int4_sym", "--zero-point", "int"], "int4_sym has no zero point"),
        (["compress", "missing/model.xml", "out"], "MODEL 'missing/model.xml' does not exist"),
        (
            ["compress", "m", "out", "--scale-estimation", "--no-self-calibration"],
            "--scale-estimation needs calibration data: add --dataset TEXT_FILE",
        ),
        (["compress", "m", "out", "--self-calibration-samples", "0"], "--self-calibration-samples must be positive"),
        (["compress", "m", "out", "--ratio", "1.5"], "--ratio must be in (0, 1], got 1.5"),
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
        (["compress", "m", "out", "--backend", "torch", "--zero-point", "split"], "--backend torch takes float or int"),
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


def test_flags_are_the_compress_jobs_options(capsys: pytest.CaptureFixture[str]) -> None:
    """Every flag of ``compress`` sets one of the job's options (``JobOptions``), with the job's default."""
    args = cli.build_parser().parse_args(["compress", "m", "out"])
    assert cli.job_options(args) == cli.DEFAULTS
    changed = cli.build_parser().parse_args(["compress", "m", "out", "--no-output-check", "--ignore", "a", "--awq"])
    options = cli.job_options(changed)
    assert not options.output_check and options.ignore == ("a",) and options.awq

    def stand_in(*flags: str) -> bool | None:
        return cli.job_options(cli.build_parser().parse_args(["compress", "m", "out", *flags])).int8_stand_in

    assert (stand_in(), stand_in("--int8-stand-in"), stand_in("--no-int8-stand-in")) == (None, True, False)

    def reference(*flags: str) -> bool | None:
        return cli.job_options(cli.build_parser().parse_args(["compress", "m", "out", *flags])).guard_reference

    assert (reference(), reference("--guard-reference"), reference("--no-guard-reference")) == (None, True, False)
    budget = cli.build_parser().parse_args(["compress", "m", "out", "--memory-budget", "14"])
    assert cli.job_options(budget).memory_budget == 14.0 and options.memory_budget is None


def test_the_stand_in_flags_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["compress", "m", "out", "--int8-stand-in", "--no-int8-stand-in"], capsys)
    assert code == 2 and "not allowed with argument" in err


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


@pytest.mark.parametrize(
    "error",
    [RuntimeError("basic_ios::clear: iostream error"), OSError(errno.ENOSPC, "No space left on device")],
    ids=["openvino-writer", "no-space-left"],
)
def test_a_failed_write_says_to_check_the_disk(
    error: Exception, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """OpenVINO's writer says only "basic_ios::clear: iostream error" when the disk is full."""

    def failing(*args: Any, **kwargs: Any) -> None:
        raise error

    monkeypatch.setattr(cli.CompressJob, "run", failing)
    code, _, err = run_cli(["compress", "model", tmp_path / "out"], capsys)
    [line] = [line for line in err.splitlines() if "error:" in line]
    assert code == 1 and str(error.args[-1]) in line
    assert "check the free disk space" in line and "TMPDIR" in line and "Traceback" not in err


def test_a_group_size_the_model_cannot_take_is_one_line_naming_the_fix(
    tiny_llm: tuple[Path, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """NNCF lists every layer the group size does not divide; the command says it in one line with a group size
    that divides them all (here 16: the tiny Llama's inputs have 64 and 128 channels) and the default."""
    code, out, err = run_cli(["compress", tiny_llm[0], tmp_path / "out", "--group-size", "48"], capsys)
    assert code == 1 and out == ""
    [line] = [line for line in err.splitlines() if "error:" in line]
    assert "group size 48 does not divide the input channels of" in line
    assert "pass --group-size 16, which divides every layer, or leave --group-size out" in line
    assert "Traceback" not in err and "Failed nodes" not in err
    assert not (tmp_path / "out").exists()


def test_evaluate_without_text_says_where_to_get_one(
    compressed_dir: Path,
    tiny_llm: tuple[Path, Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(evaluate_job, "default_text", lambda: None)
    code, _, err = run_cli(["evaluate", compressed_dir, "--reference", tiny_llm[0]], capsys)
    assert code == 2
    assert "no --text given" in err


def test_missing_optional_dependency_names_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_transformers(*args: object) -> None:
        raise ModuleNotFoundError("No module named 'transformers'")

    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / MODEL_XML).write_text("<net/>")
    (tmp_path / "text.txt").write_text("w1 w2")
    monkeypatch.setattr(evaluate_job, "load_tokenizer", no_transformers)
    args = ["evaluate", tmp_path / "ref", "--reference", tmp_path / "ref", "--reference-name", "r"]
    code, _, err = run_cli([*args, "--text", tmp_path / "text.txt"], capsys)
    assert code == 1
    assert "No module named 'transformers': install the llm extra" in err and "Traceback" not in err


# --------------------------------------------------------------------------------------------------------------------
# What compress prints
# --------------------------------------------------------------------------------------------------------------------
def test_compress_prints_what_it_wrote_and_logs_one_line_per_phase(
    tiny_llm: tuple[Path, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "out"
    code, out, err = run_cli(["compress", tiny_llm[0], out_dir, "--group-size", "64", "--no-self-calibration"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"Wrote {out_dir / MODEL_XML} (int4_asym, group size 64, HQQ (default zero point))"
    assert lines[1].startswith("Copied from the source: ") and "config.json" in lines[1]
    assert (
        lines[2]
        == f"OpenVINO GenAI: openvino_genai.LLMPipeline({str(out_dir)!r}, 'CPU') loads it (tokenizer IRs in OUT)"
    )
    assert re.fullmatch(r"Total: \d+\.\d s \(compression \d+\.\d s\)", lines[3]) and len(lines) == 4
    assert is_genai_dir(out_dir)
    record = json.loads((out_dir / RECORD_NAME).read_text())
    assert_phases_timed(err, record["phase_seconds"], ["compression", "saving", "tokenizer conversion"])


def test_compress_of_an_ir_without_its_files_says_what_to_add(
    compressed_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alone = tmp_path / "alone"
    alone.mkdir()
    for suffix in (".xml", ".bin"):
        (alone / f"model{suffix}").write_bytes((compressed_dir / MODEL_XML).with_suffix(suffix).read_bytes())
    code, out, err = run_cli(["compress", alone / "model.xml", tmp_path / "out", "--mode", "int8_asym"], capsys)
    assert code == 0, err
    assert "No config/tokenizer files beside the source IR" in out and "OpenVINO GenAI" not in out
    assert "warning: no tokenizer beside the source model" in err


def test_compress_says_in_one_line_when_the_tokenizer_cannot_be_converted(
    tiny_llm: tuple[Path, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
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
    assert (tmp_path / "out" / MODEL_XML).is_file() and not is_genai_dir(tmp_path / "out")
    assert "OpenVINO GenAI" not in out and "Wrote" in out


FLAGS = ("--group-size", "64", "--no-self-calibration")


def test_a_log_piped_to_a_file_holds_lines_not_progress_bars(hf_dir: Path, tmp_path: Path) -> None:
    """``compress`` of a HF dir (the export included) with stderr in a file: no progress-bar redraws
    (transformers' weight loading, NNCF's bars), one line per phase with its time, NNCF's table once."""
    log = tmp_path / "compress.log"
    with log.open("w") as stream:
        proc = subprocess.run(
            [sys.executable, "-m", "nncf_hqq.llm.cli", "compress", str(hf_dir), str(tmp_path / "out"), *FLAGS],
            stdout=stream,
            stderr=subprocess.STDOUT,
            check=False,
            cwd=REPO,
        )
    text = log.read_text()
    assert proc.returncode == 0, text
    assert "\r" not in text and "Loading weights" not in text
    assert not re.search(r"━ +\d+%", text)  # NNCF's (rich) bars: not even their last state
    assert "TracerWarning" not in text
    for phase in ("export", "compression", "saving", "tokenizer conversion"):
        assert len(re.findall(rf"^\[nncf-hqq\] {phase}: \d+\.\d s$", text, re.MULTILINE)) == 1
        assert f"[nncf-hqq] {phase} ...\n" not in text
    assert text.count("Statistics of the bitwidth distribution") == 1
    assert len(text.splitlines()) <= 40


# --------------------------------------------------------------------------------------------------------------------
# What evaluate prints
# --------------------------------------------------------------------------------------------------------------------
def test_evaluate_prints_a_table_and_writes_json_and_png(
    compressed_dir: Path,
    tiny_llm: tuple[Path, Any],
    text_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("matplotlib")
    json_path, png_path = tmp_path / "r" / "eval.json", tmp_path / "r" / "eval.png"
    args = ["evaluate", compressed_dir, f"xml={compressed_dir / MODEL_XML}", "--reference", tiny_llm[0]]
    args += ["--text", text_path, "--windows", "3", "--window-size", "32", "--json", json_path, "--png", png_path]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    record = json.loads(json_path.read_text())
    assert list(record["results"]) == ["fp", "int4_hqq", "xml"]
    assert png_path.read_bytes()[:8] == PNG_MAGIC
    assert_phases_timed(err, record["phase_seconds"], ["tokenization", "reference check", "evaluation"])
    lines = out.splitlines()
    assert lines[0].split() == ["model", "PPL", "KL", "top-1"]
    assert [line.split()[0] for line in lines[2:5]] == ["fp", "int4_hqq", "xml"]
    assert lines[-2:] == [f"JSON: {json_path}", f"PNG: {png_path}"]


def test_sigterm_unwinds_the_command_and_removes_its_scratch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    made: list[Path] = []
    before = signal.getsignal(signal.SIGTERM)

    def terminated_while_compressing(args: object) -> int:
        with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
            made.append(Path(scratch))
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # the handler raises here, at once
        return 0

    monkeypatch.setattr(cli, "run_compress", terminated_while_compressing)
    assert cli.main(["compress", "MODEL", str(tmp_path / "out")]) == cli.TERMINATED_EXIT_CODE == 143
    assert made and not made[0].exists()
    assert signal.getsignal(signal.SIGTERM) is before
