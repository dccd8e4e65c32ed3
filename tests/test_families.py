"""The family matrix: a tiny random model of each common LLM family (tests/tiny_families.py, no downloads) goes
through ``nncf-hqq compress`` from its HF checkpoint dir (export with the pinned transformers / optimum-intel,
INT4_ASYM g64 with HQQ), then loads with optimum-intel's ``OVModelForCausalLM`` and generates.

Each family takes 15-25 s on 2 cores (most of it the export), so the matrix is marked slow but for one dense and
one MoE family. A family that the installed stack cannot export is refused in one line before anything is loaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openvino as ov
import pytest

from nncf_hqq.llm import export
from nncf_hqq.llm import layout
from tests.llm_helpers import generate
from tests.llm_helpers import run_cli
from tests.llm_helpers import word_level_tokenizer
from tests.tiny_families import FAMILIES
from tests.tiny_families import save_tiny_family

pytest.importorskip("optimum.intel")

#: Families whose expert weights transformers 5 keeps as 3D ``[experts, out, in]`` parameters.
MOE_FAMILIES = ("qwen3_moe", "mixtral")
#: The families run by default; the rest of the matrix is marked slow.
FAST_FAMILIES = ("llama", "qwen3_moe")


def _family_params() -> list[Any]:
    return [
        pytest.param(family, id=family, marks=() if family in FAST_FAMILIES else pytest.mark.slow)
        for family in FAMILIES
    ]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return word_level_tokenizer()


def compressed_weights(model: ov.Model) -> dict[str, tuple[int, ov.Type]]:
    """``{weight name: (rank of its grouped codes, element type of its zero point)}`` of an NNCF-compressed IR
    (asymmetric modes: every code constant has a ``{name}/zero_point`` constant beside it)."""
    constants = {op.get_friendly_name(): op for op in model.get_ops() if op.get_type_name() == "Constant"}
    return {
        name: (len(constants[name].get_output_shape(0)), zero_point.get_element_type())
        for name, zero_point in ((n[: -len("/zero_point")], c) for n, c in constants.items())
        if name in constants and zero_point.get_friendly_name().endswith("/zero_point")
    }


@pytest.mark.parametrize("family", _family_params())
def test_family_exports_compresses_with_hqq_and_generates(
    family: str, tokenizer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hf_dir = save_tiny_family(family, tmp_path / "hf", tokenizer)
    out_dir = tmp_path / "int4_hqq"
    code, _, err = run_cli(["compress", hf_dir, out_dir, "--group-size", "64"], capsys)
    assert code == 0, err
    record = json.loads((out_dir / layout.RECORD_NAME).read_text())
    assert record["options"]["hqq"] is True
    weights = compressed_weights(ov.Core().read_model(out_dir / layout.MODEL_XML))
    float_zero_points = {name for name, (_, zero_point) in weights.items() if zero_point == ov.Type.f16}
    assert float_zero_points, "HQQ wrote no float zero point"
    experts = {name for name, (rank, _) in weights.items() if rank == 4}  # 3D weights, grouped: [E, out, groups, g]
    if family in MOE_FAMILIES:
        assert len(experts) == 3 * 2, sorted(experts)  # gate, up and down projections of two layers
        assert experts <= float_zero_points, "expert weights without HQQ's float zero point"
        assert not [name for name in weights if "mlp.gate." in name]  # the routers are kept in float
        assert "MoE: 2 routers / gates kept in float" in err
    else:
        assert not experts
    generate(out_dir, tokenizer)


@pytest.mark.parametrize(
    ("model_type", "expected"),
    [
        ("deepseek_v3", "its OpenVINO export needs transformers>=4.51.0,<=4.53.3"),
        ("no_such_family", "transformers does not know it"),
        ("bert", "optimum-intel has no OpenVINO export of it for text-generation-with-past"),
    ],
    ids=["version_bound", "unknown_to_transformers", "no_export_config"],
)
def test_family_that_cannot_be_exported_is_refused_in_one_line(
    model_type: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text(json.dumps({"model_type": model_type}))  # no weights: refused before
    code, out, err = run_cli(["compress", hf_dir, tmp_path / "out", "--group-size", "64"], capsys)
    assert code == 1 and out == ""
    [line] = [line for line in err.splitlines() if "error:" in line]
    assert f"cannot export model family {model_type!r} with transformers " in line and "optimum-intel " in line
    assert expected in line and "pip install" in line
    assert not (tmp_path / "out").exists()


def test_every_matrix_family_is_exportable_with_the_installed_stack() -> None:
    assert {family: export.export_obstacle(family) for family in FAMILIES} == dict.fromkeys(FAMILIES)


def test_routers_are_compressed_on_request_and_ignore_patterns_keep_layers_float(
    tokenizer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hf_dir = save_tiny_family("qwen3_moe", tmp_path / "hf", tokenizer)
    ir_dir = export.export_to_openvino(hf_dir, tmp_path / "ir")
    code, _, err = run_cli(["compress", ir_dir, tmp_path / "all", "--group-size", "64", "--quantize-routers"], capsys)
    assert code == 0, err
    assert (
        len(
            [
                n
                for n in compressed_weights(ov.Core().read_model(tmp_path / "all" / layout.MODEL_XML))
                if "mlp.gate." in n
            ]
        )
        == 2
    )
    args = ["compress", ir_dir, tmp_path / "ignored", "--group-size", "64", "--ignore", r".*layers\.1\.self_attn\..*"]
    code, _, err = run_cli(args, capsys)
    assert code == 0, err
    names = compressed_weights(ov.Core().read_model(tmp_path / "ignored" / layout.MODEL_XML))
    assert not [n for n in names if "layers.1.self_attn." in n or "mlp.gate." in n]
    assert [n for n in names if "layers.0.self_attn." in n]
    code, _, err = run_cli(["compress", ir_dir, tmp_path / "typo", "--ignore", "no_such_layer_.*"], capsys)
    assert code == 1 and "no_such_layer_" in err


def test_moe_family_with_split_zero_points_keeps_no_float_zero_point_and_generates(
    tokenizer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--zero-point split`` on a MoE export: the 3D expert weights, like every other HQQ weight, get u4 zero points
    and an output correction."""
    hf_dir = save_tiny_family("qwen3_moe", tmp_path / "hf", tokenizer)
    out_dir = tmp_path / "int4_split"
    code, _, err = run_cli(["compress", hf_dir, out_dir, "--group-size", "64", "--zero-point", "split"], capsys)
    assert code == 0, err
    model = ov.Core().read_model(out_dir / layout.MODEL_XML)
    weights = compressed_weights(model)
    experts = {name for name, (rank, _) in weights.items() if rank == 4}
    assert len(experts) == 3 * 2
    assert all(weights[name][1] == ov.Type.u4 for name in experts)
    assert ov.Type.f16 not in {zero_point for _, zero_point in weights.values()}
    corrections = [op for op in model.get_ops() if op.get_friendly_name().endswith("/hqq_split_correction")]
    assert len(corrections) > len(experts)  # the experts and the attention projections HQQ compressed
    generate(out_dir, tokenizer)
