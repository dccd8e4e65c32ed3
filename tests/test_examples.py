"""Tests of examples/optimum_intel.py: ``OVWeightQuantizationConfig(..., hqq=True)`` through optimum-intel, on the
tiny Llama of tests/conftest.py (skipped without the ``llm`` extra)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import openvino as ov
import pytest

from tests.llm_helpers import generate
from tests.llm_helpers import zero_point_types

REPO = Path(__file__).resolve().parents[1]


def _optimum_example() -> Any:
    pytest.importorskip("optimum.intel")
    spec = importlib.util.spec_from_file_location("optimum_intel_example", REPO / "examples" / "optimum_intel.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_optimum_intel_config_passes_hqq_through(
    tiny_llm: tuple[Path, Any],
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
