"""Tests of the evaluate job as a Python call (nncf_hqq.llm.evaluate_job): LLM candidates one at a time give the
metrics of all at once, the models named, the options checked, the weights files' pages dropped.

The models are the tiny Llama of tests/conftest.py (the ``llm`` extra; skipped without it). Encoders: test_encoders.py;
the command line: test_cli.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nncf_hqq.llm import OptionError
from nncf_hqq.llm import compress
from nncf_hqq.llm import evaluate
from nncf_hqq.llm import evaluate_job
from nncf_hqq.llm.evaluation import METRICS
from nncf_hqq.llm.layout import MODEL_XML
from tests.llm_helpers import PNG_MAGIC
from tests.llm_helpers import recording_released_files


@pytest.fixture(scope="module")
def compressed_dir(tiny_llm: tuple[Path, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("evaluate") / "int4_hqq"
    compress(tiny_llm[0], out, group_size=64, self_calibration=False, log=lambda _: None)
    return out


def test_evaluate_returns_the_metrics_and_writes_json_and_png(
    compressed_dir: Path, tiny_llm: tuple[Path, Any], text_path: Path, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    lines: list[str] = []
    result = evaluate(
        {"int4": compressed_dir, "xml": compressed_dir / MODEL_XML},
        tiny_llm[0],
        text=text_path,
        windows=3,
        window_size=32,
        json=tmp_path / "r" / "eval.json",
        png=tmp_path / "r" / "eval.png",
        log=lines.append,
    )
    assert result.kind == "llm" and list(result.results) == ["fp", "int4", "xml"]
    assert result.record["windows"] == 3 and result.record["window_size"] == 32 and result.record["reference"] == "fp"
    for metrics in result.results.values():
        assert set(METRICS) <= set(metrics)
    assert result.results["fp"]["kl"] == 0.0 and result.results["fp"]["top1"] == 1.0
    assert result.results["int4"]["kl"] > 0.0
    for key in METRICS:  # the same model, given as a dir and as an .xml
        assert result.results["xml"][key] == pytest.approx(result.results["int4"][key], rel=1e-9)
    assert result.json_path == tmp_path / "r" / "eval.json" and result.json_path.is_file()
    assert result.png_path is not None and result.png_path.read_bytes()[:8] == PNG_MAGIC
    assert result.table.splitlines()[0].split() == ["model", "PPL", "KL", "top-1"]
    assert list(result.phase_seconds) == ["tokenization", "reference check", "evaluation"]
    assert result.memory_estimate is not None and any(line.startswith("phases: ") for line in lines)


def test_evaluate_checks_its_options_before_compiling_anything(
    compressed_dir: Path, tiny_llm: tuple[Path, Any], text_path: Path, tmp_path: Path
) -> None:
    cases: dict[str, dict[str, Any]] = {
        "windows must be positive and window_size at least 2": {"windows": 0},
        "a model of models is named 'fp' like the reference": {"models": [f"fp={compressed_dir}"]},
        "two models are named 'int4_hqq'": {"models": [str(compressed_dir), str(compressed_dir / MODEL_XML)]},
        "models 'nothing' is not an OpenVINO IR": {"models": ["nothing"]},
        "lines applies to encoders": {"lines": 10},
        "inference_precision must be one of f32, bf16, got 'f16'": {"inference_precision": "f16"},
        "text .* is not a file": {"text": tmp_path / "missing.txt"},
    }
    for message, options in cases.items():
        arguments = {"models": [str(compressed_dir)], "text": text_path, **options}
        with pytest.raises(OptionError, match=message):
            evaluate(arguments.pop("models"), tiny_llm[0], log=lambda _: None, **arguments)


def test_evaluate_all_at_once_gives_the_default_one_at_a_time_results(
    compressed_dir: Path, tiny_llm: tuple[Path, Any], text_path: Path
) -> None:
    results = {}
    for all_at_once in (False, True):
        result = evaluate(
            [str(compressed_dir), f"same={tiny_llm[0]}"],
            tiny_llm[0],
            text=text_path,
            windows=2,
            window_size=32,
            all_at_once=all_at_once,
            log=lambda _: None,
        )
        results[all_at_once] = {name: {k: m[k] for k in METRICS} for name, m in result.results.items()}
    assert results[False] == results[True] and list(results[False]) == ["fp", "int4_hqq", "same"]


def test_evaluate_drops_the_weights_files_pages(
    compressed_dir: Path, tiny_llm: tuple[Path, Any], text_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    released: list[list[Path]] = []
    monkeypatch.setattr(evaluate_job, "releasing_file_pages", recording_released_files(released))
    evaluate([str(compressed_dir)], tiny_llm[0], text=text_path, windows=2, window_size=32, log=lambda _: None)
    expected = [(tiny_llm[0] / "openvino_model.bin").resolve(), (compressed_dir / "openvino_model.bin").resolve()]
    assert released == [expected]
