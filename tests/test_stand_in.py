"""Tests of the float model's INT8 stand-in (nncf_hqq.llm.stand_in): an INT8 per-channel copy with the float model's
activations, whose outputs are nearly the float model's; NNCF's statistics collected on it; the compress job running
it in place of the float model and removing it after.

The model is the tiny Llama of tests/conftest.py (the ``llm`` extra; skipped without it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

from nncf_hqq._nncf import WeightCompression
from nncf_hqq.llm import compress
from nncf_hqq.llm import stand_in
from nncf_hqq.llm.evaluation import StatefulLLM
from nncf_hqq.llm.layout import read_model
from nncf_hqq.llm.timing import OUTPUT_REFERENCE_PHASE
from nncf_hqq.llm.timing import STAND_IN_PHASE


def _matmul_weights(model: ov.Model) -> dict[str, ov.Type]:
    """Every MatMul with a constant weight (behind its decompression, if any): the weight constant's element type."""
    found = {}
    for op in model.get_ops():
        if op.get_type_name() != "MatMul":
            continue
        node = op.input_value(1).get_node()
        while node.get_type_name() in ("Convert", "Subtract", "Multiply", "Reshape"):
            node = node.input_value(0).get_node()
        if node.get_type_name() == "Constant":
            found[op.get_friendly_name()] = node.get_element_type()
    return found


def test_the_stand_in_is_int8_and_nearly_the_float_model(tiny_llm: tuple[Path, Any], tmp_path: Path) -> None:
    xml = tiny_llm[0] / "openvino_model.xml"
    written = stand_in.write_stand_in(xml, tmp_path)
    assert written == tmp_path / stand_in.STAND_IN_XML and written.with_suffix(".bin").is_file()
    float_weights, int8_weights = _matmul_weights(read_model(xml)), _matmul_weights(read_model(written))
    # the same layers, under the same names (NNCF's statistic points name them), with 8-bit codes instead of floats
    assert set(int8_weights) == set(float_weights) and len(float_weights) >= 14
    assert all(t.is_real() for t in float_weights.values())
    assert set(int8_weights.values()) == {ov.Type.u8}
    # a byte a parameter (and one scale and zero point per output channel) against 4 for this fp32 model
    assert written.with_suffix(".bin").stat().st_size < 0.3 * xml.with_suffix(".bin").stat().st_size
    window = np.random.default_rng(0).integers(3, 40, size=48)
    (fp,) = (np.array(block) for block in StatefulLLM(xml).logit_blocks(window))
    (q8,) = (np.array(block) for block in StatefulLLM(written).logit_blocks(window))
    assert np.abs(q8 - fp).max() < 0.05 * np.abs(fp).max()
    assert (q8.argmax(-1) == fp.argmax(-1)).mean() >= 0.9


def test_the_phases_it_takes_and_the_ir_each_phase_runs(tmp_path: Path) -> None:
    float_xml, int8_xml = tmp_path / "float.xml", tmp_path / "int8.xml"
    assert stand_in.model_for(OUTPUT_REFERENCE_PHASE, float_xml, int8_xml) == int8_xml
    assert stand_in.model_for(OUTPUT_REFERENCE_PHASE, float_xml, None) == float_xml
    assert stand_in.model_for("compression", float_xml, int8_xml) == float_xml  # the compression reads the float
    assert stand_in.runs_in_place_of_float(int8_xml, "statistics")
    assert not stand_in.runs_in_place_of_float(None, "statistics")


def test_nncf_collects_its_statistics_on_the_stand_in(
    tiny_llm: tuple[Path, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    xml = tiny_llm[0] / "openvino_model.xml"
    written = stand_in.write_stand_in(xml, tmp_path)
    seen: list[set[ov.Type]] = []
    original = WeightCompression._collect_statistics

    def spy(self: Any, dataset: Any, graph: Any, model: Any, statistic_points: Any) -> Any:
        seen.append(set(_matmul_weights(model).values()))
        return original(self, dataset, graph, model, statistic_points)

    monkeypatch.setattr(WeightCompression, "_collect_statistics", spy)
    with stand_in.statistics_collected_on(written):
        assert WeightCompression._collect_statistics is not spy
        result = compress(xml, tmp_path / "out", group_size=32, output_check=False, int8_stand_in=False)
    assert WeightCompression._collect_statistics is spy  # restored
    assert seen == [{ov.Type.u8}]  # NNCF's pass ran the stand-in, not the model it compressed
    assert result.record["self_calibration"] is not None


def test_the_job_runs_the_stand_in_and_removes_it(tiny_llm: tuple[Path, Any], tmp_path: Path) -> None:
    lines: list[str] = []
    result = compress(tiny_llm[0], tmp_path / "out", group_size=64, int8_stand_in=True, log=lines.append)
    assert list(result.phase_seconds)[:2] == [STAND_IN_PHASE, OUTPUT_REFERENCE_PHASE]
    assert any(line.startswith("INT8 stand-in: an INT8 copy") for line in lines)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # the stand-in's scratch dir is gone
    without = compress(tiny_llm[0], tmp_path / "float", group_size=64, log=lines.append)  # the default: off
    assert STAND_IN_PHASE not in without.phase_seconds
    data_free = compress(tiny_llm[0], tmp_path / "data-free", group_size=64, self_calibration=False)
    assert STAND_IN_PHASE not in data_free.phase_seconds


def _constants(model: ov.Model) -> list[tuple[str, tuple[int, ...], bytes]]:
    """Every constant in topological order: element type, shape, bytes."""
    return [
        (str(op.get_element_type()), tuple(op.get_output_shape(0)), op.get_data().tobytes())
        for op in model.get_ordered_ops()
        if op.get_type_name() == "Constant"
    ]


def test_written_in_two_parts_it_is_the_model_compressed_at_once(tiny_llm: tuple[Path, Any], tmp_path: Path) -> None:
    import nncf

    xml = tiny_llm[0] / "openvino_model.xml"
    written = stand_in.write_stand_in(xml, tmp_path)
    at_once = nncf.compress_weights(read_model(xml), mode=stand_in.STAND_IN_MODE)
    assert _constants(read_model(written)) == _constants(at_once)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["int8_stand_in.bin", "int8_stand_in.xml"]  # part removed


def test_the_parts_split_the_weights_by_size(tiny_llm: tuple[Path, Any]) -> None:
    model = read_model(tiny_llm[0] / "openvino_model.xml")
    first, second = stand_in.weight_parts(model)
    sizes = {}
    for op in model.get_ops():
        if op.get_type_name() in ("MatMul", "Gather"):
            node = op.input_value(0 if op.get_type_name() == "Gather" else 1).get_node()
            node = node.input_value(0).get_node() if node.get_type_name() == "Convert" else node
            if node.get_type_name() == "Constant" and len(node.get_output_shape(0)) >= 2:
                sizes[op.get_friendly_name()] = int(np.prod(node.get_output_shape(0)))
    assert not set(first) & set(second)
    assert set(sizes) <= set(first) | set(second)  # every MatMul weight and the embedding table
    totals = [sum(sizes.get(name, 0) for name in part) for part in (first, second)]
    assert abs(totals[0] - totals[1]) <= max(sizes.values())  # about half each
    embedding, head = sorted(sizes, key=lambda name: sizes[name])[-2:]
    assert (embedding in first) != (head in first)  # the two largest in different parts
