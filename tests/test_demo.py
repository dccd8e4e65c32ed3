"""The ``nncf-hqq demo`` on the real SmolLM2 (nncf_hqq.llm.demo; slow, skipped when the model or shared/ is
unavailable)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nncf_hqq.llm import zoo
from tests.llm_helpers import PNG_MAGIC
from tests.llm_helpers import run_cli


@pytest.mark.slow
def test_demo_on_smollm2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("optimum.intel")
    pytest.importorskip("gguf")
    pytest.importorskip("matplotlib")
    if zoo.default_text() is None:
        pytest.skip("shared/ WikiText-2 is unavailable")
    try:
        zoo.smollm2_ov_dir()
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
