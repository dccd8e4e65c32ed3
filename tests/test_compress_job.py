"""Tests of the compress job as a Python call (nncf_hqq.llm.compress_job): what it writes and returns, its options,
the group-size default, the backends, and OUT left as it was when a run fails or is killed.

The models are the tiny Llama of tests/conftest.py (the ``llm`` extra; skipped without it). The output check has its
own tests (test_output_check.py), the command line its own (test_cli.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

from nncf_hqq.llm import OptionError
from nncf_hqq.llm import compress
from nncf_hqq.llm import compress_job
from nncf_hqq.llm import cpu
from nncf_hqq.llm import source
from nncf_hqq.llm import writing
from nncf_hqq.llm import zoo
from nncf_hqq.llm.layout import DETOKENIZER_XML
from nncf_hqq.llm.layout import MODEL_XML
from nncf_hqq.llm.layout import RECORD_NAME
from nncf_hqq.llm.layout import TOKENIZER_XML
from nncf_hqq.llm.layout import is_genai_dir
from nncf_hqq.llm.layout import read_model
from tests.llm_helpers import genai_generate
from tests.llm_helpers import generate
from tests.llm_helpers import recording_released_files
from tests.llm_helpers import zero_point_types

REPO = Path(__file__).resolve().parents[1]
AVX512_CPUINFO = "model name\t: AMD EPYC 9654 96-Core Processor\nflags\t\t: avx2 avx512f avx512_vnni avx512_bf16\n"


def quiet(_: str) -> None:
    """A ``log`` that drops the lines."""


@pytest.fixture(scope="module")
def self_calibrated_dir(tiny_llm: tuple[Path, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default recipe (self-calibrated), without the output check."""
    out = tmp_path_factory.mktemp("job") / "int4_hqq"
    compress(tiny_llm[0], out, group_size=64, output_check=False, log=quiet)
    return out


# --------------------------------------------------------------------------------------------------------------------
# What the call returns and writes
# --------------------------------------------------------------------------------------------------------------------
def test_compress_returns_what_it_wrote(tiny_llm: tuple[Path, Any], tmp_path: Path) -> None:
    lines: list[str] = []
    result = compress(tiny_llm[0], tmp_path / "out", group_size=64, self_calibration=False, log=lines.append)
    assert result.out == tmp_path / "out" and result.kind == "llm"
    assert result.written == tuple(sorted(p.name for p in (tmp_path / "out").iterdir()))
    assert {MODEL_XML, "openvino_model.bin", RECORD_NAME, TOKENIZER_XML, DETOKENIZER_XML} <= set(result.written)
    assert set(result.copied) == {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}
    assert result.tokenizer_irs == (TOKENIZER_XML, DETOKENIZER_XML)
    assert result.options.group_size == 64 and result.options.self_calibration is None
    assert result.description == "int4_asym, group size 64, HQQ (default zero point)"
    assert list(result.phase_seconds) == ["compression", "saving", "tokenizer conversion"]
    assert set(result.phase_peak_bytes) == set(result.phase_seconds)
    assert all(peak > 0 for peak in result.phase_peak_bytes.values())
    assert [e.phase for e in result.memory_estimates] == ["compression"]
    assert result.output_check is None and result.loader is None
    assert 0 < result.compress_seconds < result.total_seconds
    assert json.loads((tmp_path / "out" / RECORD_NAME).read_text()) == json.loads(json.dumps(result.record))
    assert result.record["phase_seconds"] == result.phase_seconds
    assert any(line.startswith("phases: compression ") for line in lines)


def test_bad_options_raise_value_errors_naming_the_keywords(tiny_llm: tuple[Path, Any], tmp_path: Path) -> None:
    """A Python caller gets a ValueError (never SystemExit) that names the keyword argument, before anything is
    read or written."""
    cases = {
        "group_size must be a positive number of weights or -1 (per channel), got 0": {"group_size": 0},
        "scale_estimation=True needs calibration data: add dataset=TEXT_FILE": {
            "scale_estimation": True,
            "self_calibration": False,
        },
        "int8_asym compresses every layer per channel without data; drop group_size, awq=True": {
            "mode": "int8_asym",
            "group_size": 64,
            "awq": True,
        },
        "mode must be one of": {"mode": "nf4"},
        "guard_reference sets what HQQ's output guard weighs on calibration data: add dataset=TEXT_FILE or drop "
        "self_calibration=False": {"guard_reference": True, "self_calibration": False},
        "guard_reference sets what HQQ's output guard weighs; drop hqq=False": {"guard_reference": False, "hqq": False},
        "zero_point='split' is an OpenVINO graph format; backend='torch' takes float or int": {
            "backend": "torch",
            "zero_point": "split",
        },
    }
    for message, options in cases.items():
        with pytest.raises(OptionError, match=re.escape(message)):
            compress(tiny_llm[0], tmp_path / "out", log=quiet, **options)
    with pytest.raises(ValueError, match=re.escape("model 'missing/model.xml' does not exist")):
        compress("missing/model.xml", tmp_path / "out", log=quiet)
    with pytest.raises(ValueError, match="out must differ from the directory of the source model"):
        compress(tiny_llm[0], tiny_llm[0], log=quiet)
    with pytest.raises(TypeError, match="group_sise"):
        compress(tiny_llm[0], tmp_path / "out", group_sise=64)
    assert not (tmp_path / "out").exists()


def test_the_default_recipe_is_self_calibrated_and_loads(self_calibrated_dir: Path, tiny_llm: tuple[Path, Any]) -> None:
    """No dataset: AWQ + HQQ's scales and output guard (without NNCF's Scale Estimation in it) on 32 sequences the
    model generates from the BOS token of its config; the dir loads with optimum-intel and openvino_genai."""
    record = json.loads((self_calibrated_dir / RECORD_NAME).read_text())
    assert record["options"]["mode"] == "int4_asym" and record["options"]["hqq"] is True
    assert record["self_calibration"]["num_samples"] == 32 and record["self_calibration"]["start_token_ids"] == [1]
    assert record["options"]["awq"] is True and record["options"]["scale_estimation"] is True
    assert record["options"]["guard_reference"] is None and record["hqq_params"]["guard_reference"] is False
    # decoder layers: HQQ's f16 zero points (the output guard may give whole layers to NNCF's u4 ones);
    # embeddings and lm_head: the INT8_ASYM backup (RTN, u8 zero points)
    assert {ov.Type.f16, ov.Type.u8} <= zero_point_types(self_calibrated_dir) <= {ov.Type.f16, ov.Type.u4, ov.Type.u8}
    assert is_genai_dir(self_calibrated_dir)
    generate(self_calibrated_dir, tiny_llm[1])
    genai_generate(self_calibrated_dir, tiny_llm[1])


def test_token_rows_are_recorded_and_change_the_model(
    self_calibrated_dir: Path, tiny_llm: tuple[Path, Any], tmp_path: Path
) -> None:
    result = compress(tiny_llm[0], tmp_path / "out", group_size=64, output_check=False, token_rows=8, log=quiet)
    assert result.record["options"]["token_rows"] == 8 and result.record["self_calibration"] is not None
    weights = [(d / "openvino_model.bin").read_bytes() for d in (self_calibrated_dir, tmp_path / "out")]
    assert weights[0] != weights[1]  # the same options and calibration text, HQQ fitted to token rows


def test_a_prompt_text_starts_every_sequence(
    self_calibrated_dir: Path, tiny_llm: tuple[Path, Any], tmp_path: Path
) -> None:
    text = tmp_path / "user.txt"
    text.write_text(" ".join(f"w{i}" for i in range(40)))
    lines: list[str] = []
    result = compress(
        tiny_llm[0], tmp_path / "out", group_size=64, output_check=False, self_prompt_text=text, log=lines.append
    )
    assert any(f"16 tokens of {text} (40 tokens)" in line for line in lines)
    params = json.loads((tmp_path / "out" / RECORD_NAME).read_text())["self_calibration"]
    assert result.record["self_calibration"]["start_token_ids"] == (1,)
    assert params["start_token_ids"] == [1] and params["prompt_len"] == 16
    assert params["prompt_token_ids"] == tiny_llm[1](text.read_text(), add_special_tokens=False)["input_ids"]
    weights = [(d / "openvino_model.bin").read_bytes() for d in (self_calibrated_dir, tmp_path / "out")]
    assert weights[0] != weights[1]  # the same options, calibrated on text that continues the user's
    short = tmp_path / "short.txt"
    short.write_text("w1 w2 w3")
    with pytest.raises(OptionError, match=r"self_prompt_text .* has 3 tokens; .* give a longer text"):
        compress(tiny_llm[0], tmp_path / "short", group_size=64, self_prompt_text=short, log=quiet)
    assert not (tmp_path / "short").exists()


def test_the_job_says_why_it_does_not_self_calibrate(tiny_llm: tuple[Path, Any], tmp_path: Path) -> None:
    lines: list[str] = []
    result = compress(tiny_llm[0], tmp_path / "out", mode="int8_asym", log=lines.append)
    assert any(line.startswith("Self-calibration not used: int8_asym is compressed without data") for line in lines)
    assert result.record["self_calibration"] is None and result.record["options"]["awq"] is False
    lines.clear()
    compress(tiny_llm[0], tmp_path / "rtn", hqq=False, group_size=64, log=lines.append)
    said = "Self-calibration not used: hqq=False compresses with NNCF's plain round to nearest, without data"
    assert said in lines


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"zero_point": "int"}, {ov.Type.u4}),
        # data-free: the value projections keep RTN (rtn_roles)
        ({"zero_point": "float", "self_calibration": False}, {ov.Type.f16, ov.Type.u4}),
        ({"zero_point": "split"}, {ov.Type.u4}),
        ({"hqq": False}, {ov.Type.u4}),
        ({"mode": "INT8_ASYM"}, {ov.Type.f16, ov.Type.u8}),
        ({"awq": True, "self_calibration": False}, {ov.Type.f16, ov.Type.u4}),
        ({"mode": "int4_sym"}, set()),
    ],
    ids=["int_zero_point", "float_zero_point", "split_zero_point", "rtn", "int8", "data_free_awq", "int4_sym"],
)
def test_options_reach_nncf(
    options: dict[str, Any], expected: set[ov.Type], tiny_llm: tuple[Path, Any], tmp_path: Path
) -> None:
    int4 = {} if options.get("mode") == "INT8_ASYM" else {"group_size": 64, "backup_mode": "none"}
    compress(tiny_llm[0], tmp_path / "out", log=quiet, **int4, **options)
    assert zero_point_types(tmp_path / "out") == expected


def test_split_zero_point_model_generates_what_the_float_zero_point_model_generates(
    tiny_llm: tuple[Path, Any], tmp_path: Path
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
        compress(tiny_llm[0], out, group_size=64, zero_point=zero_point, log=quiet)
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


@pytest.mark.parametrize(
    ("options", "expected", "chosen"),
    [
        pytest.param({}, {ov.Type.u4}, "split", id="this-cpu-without-amx"),
        pytest.param({"target_cpu": "amx"}, {ov.Type.f16, ov.Type.u4}, "float", id="target-amx"),
        pytest.param({"target_cpu": "avx2-vnni"}, {ov.Type.u4}, "split", id="target-avx2-vnni"),
        pytest.param({"target_cpu": "avx2"}, {ov.Type.f16, ov.Type.u4}, "float", id="target-avx2-without-vnni"),
        pytest.param({"zero_point": "float"}, {ov.Type.f16, ov.Type.u4}, None, id="zero-point-given"),
    ],
)
def test_the_zero_point_format_suits_the_target_cpu_and_is_recorded(
    options: dict[str, Any],
    expected: set[ov.Type],
    chosen: str | None,
    tiny_llm: tuple[Path, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tiny model counts as a large one here (SPLIT_MIN_PARAMETERS lowered) and the CPU as an AVX-512 one without
    AMX: without zero_point, the job writes the format that suits target_cpu, says so and records it."""
    monkeypatch.setattr(compress_job, "this_cpu", lambda: cpu.parse_cpuinfo(AVX512_CPUINFO))
    monkeypatch.setattr(cpu, "SPLIT_MIN_PARAMETERS", 1)
    lines: list[str] = []
    out = tmp_path / "out"
    compress(tiny_llm[0], out, group_size=64, backup_mode="none", self_calibration=False, log=lines.append, **options)
    assert zero_point_types(out) == expected
    record = json.loads((out / RECORD_NAME).read_text())
    said = [line for line in lines if line.startswith("Zero points:")]
    if chosen is None:
        assert record["zero_point_choice"] is None and not said
        return
    assert record["zero_point_choice"]["format"] == chosen
    assert record["zero_point_choice"]["target_cpu"] == options.get("target_cpu", "this")
    assert len(said) == 1 and said[0].startswith(f"Zero points: {chosen}, for ")
    assert ("AMD EPYC 9654" in said[0]) == ("target_cpu" not in options)


def test_a_hf_dir_is_exported_once_and_calibrated_on_a_dataset(
    hf_dir: Path, text_path: Path, tiny_llm: tuple[Path, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A HF dir: its task inferred once, exported, calibrated on windows of the text; an OpenVINO GenAI dir."""
    inferred: list[str] = []
    infer = source.infer_export_task
    monkeypatch.setattr(source, "infer_export_task", lambda *a: inferred.append(str(a[0])) or infer(*a))
    lines: list[str] = []
    out_dir = tmp_path / "awq_se"
    result = compress(
        hf_dir,
        out_dir,
        group_size=64,
        awq=True,
        scale_estimation=True,
        dataset=text_path,
        subset_size=4,
        log=lines.append,
    )
    assert inferred == [str(hf_dir)]
    assert "AWQ, Scale Estimation, HQQ" in result.description
    assert any("4 random 256-token windows" in line for line in lines)
    assert ov.Type.f16 in zero_point_types(out_dir)
    assert (out_dir / "tokenizer.json").is_file() and (out_dir / "config.json").is_file()
    phases = ["export", "calibration data", "compression", "statistics", "saving", "tokenizer conversion"]
    assert list(result.phase_seconds) == phases
    generate(out_dir, tiny_llm[1])
    genai_generate(out_dir, tiny_llm[1])  # a HF dir's output is an OpenVINO GenAI dir too


def test_backend_torch_writes_a_transformers_checkpoint_that_loads_compressed(hf_dir: Path, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    import nncf_hqq.torch  # noqa: F401 (registers the nncf_hqq checkpoint format)

    out_dir = tmp_path / "torch"
    result = compress(hf_dir, out_dir, group_size=64, backend="torch", log=quiet)
    assert result.kind == "checkpoint" and "HQQ (default zero point)" in result.description
    assert result.loader == compress_job.CHECKPOINT_LOADER and "tokenizer.json" in result.copied
    config = json.loads((out_dir / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "nncf_hqq"
    assert (out_dir / "tokenizer.json").is_file() and (out_dir / RECORD_NAME).is_file()
    assert list(result.phase_seconds) == ["loading", "compression", "saving"]
    model = AutoModelForCausalLM.from_pretrained(out_dir)
    codes = [p for n, p in model.named_parameters() if n.endswith("q_proj.weight")]
    assert codes and all(p.dtype == torch.uint8 for p in codes)
    generated = model.generate(input_ids=torch.tensor([[1, 5, 9, 13]]), max_new_tokens=3, do_sample=False)
    assert generated.shape[1] == 4 + 3


def test_backend_torch_refuses_an_openvino_ir(tiny_llm: tuple[Path, Any], tmp_path: Path) -> None:
    with pytest.raises(OptionError, match=r"is an OpenVINO IR: it is compressed with backend='openvino'"):
        compress(tiny_llm[0], tmp_path / "out", backend="torch", log=quiet)


# --------------------------------------------------------------------------------------------------------------------
# The group size: a default every model takes
# --------------------------------------------------------------------------------------------------------------------
def _group_sizes(model_dir: Path) -> dict[str, int]:
    """The group size of every 4-bit weight of a saved model, by its MatMul's name: the input channels over the
    number of groups of its scale."""
    model = read_model(model_dir)
    sizes = {}
    for op in model.get_ops():
        name = op.get_friendly_name()
        if op.get_type_name() == "Constant" and op.get_element_type() == ov.Type.u4 and "/zero_point" not in name:
            sizes[name.split("/")[0]] = int(op.get_output_shape(0)[-1])
    return sizes


def test_without_a_group_size_each_layer_takes_one_it_divides(tiny_llm: tuple[Path, Any], tmp_path: Path) -> None:
    """NNCF's 128 does not divide the tiny Llama's 64 hidden channels (SmolLM2's 576 neither): as optimum-intel's
    defaults do, such a layer takes the largest power of two that divides it (64), a layer 128 divides keeps 128
    (the MLP's down projection, 128 inputs), and one line says so."""
    lines: list[str] = []
    result = compress(tiny_llm[0], tmp_path / "default", self_calibration=False, log=lines.append)
    [said] = [line for line in lines if line.startswith("Group size: ")]
    assert "group size 128 (NNCF's default)" in said and "group_size sets one for every layer" in said
    assert result.record["group_size_fallback"] == "adjust" and result.record["options"]["group_size"] is None
    sizes = _group_sizes(tmp_path / "default")
    assert sizes and set(sizes.values()) == {64, 128}
    assert all(size == 128 for name, size in sizes.items() if "down_proj" in name)
    assert all(size == 64 for name, size in sizes.items() if "down_proj" not in name)
    explicit = compress(tiny_llm[0], tmp_path / "g64", group_size=64, self_calibration=False, log=quiet)
    assert explicit.record["group_size_fallback"] is None and set(_group_sizes(tmp_path / "g64").values()) == {64}


@pytest.mark.slow
def test_smollm2_compresses_without_a_group_size(tmp_path: Path) -> None:
    """SmolLM2's 576 hidden channels are not a multiple of NNCF's 128: its attention and MLP inputs take 64, its down
    projections (1536 inputs) keep 128."""
    pytest.importorskip("optimum.intel")
    pytest.importorskip("gguf")
    try:
        ir_dir = zoo.smollm2_ov_dir()
    except (RuntimeError, FileNotFoundError) as unavailable:
        pytest.skip(f"SmolLM2 unavailable: {unavailable}")
    compress(ir_dir, tmp_path / "out", self_calibration=False, log=quiet)
    sizes = _group_sizes(tmp_path / "out")
    assert len(sizes) == 30 * 7
    assert {size for name, size in sizes.items() if "down_proj" in name} == {128}
    assert {size for name, size in sizes.items() if "down_proj" not in name} == {64}


# --------------------------------------------------------------------------------------------------------------------
# OUT: the tokenizer IRs, the pages of the source's weights
# --------------------------------------------------------------------------------------------------------------------
def test_tokenizer_irs_of_the_source_are_copied_not_converted(
    self_calibrated_dir: Path, tiny_llm: tuple[Path, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source_dir = tmp_path / "source"
    source_dir.mkdir()
    for path in self_calibrated_dir.iterdir():
        if path.name.startswith("openvino_tokenizer") or path.name.startswith("openvino_detokenizer"):
            (source_dir / path.name).write_bytes(path.read_bytes())
    (source_dir / "config.json").write_bytes((self_calibrated_dir / "config.json").read_bytes())

    def fail(*args: object, **kwargs: object) -> list[str]:
        raise AssertionError("the source's tokenizer IRs must be copied")

    monkeypatch.setattr(writing, "write_openvino_tokenizers", fail)
    logs: list[str] = []
    copied, written = writing.save_model_dir(read_model(tiny_llm[0]), tmp_path / "out", source_dir, log=logs.append)
    assert {"openvino_tokenizer.xml", "openvino_detokenizer.bin", "config.json"} <= set(copied)
    assert written == [] and is_genai_dir(tmp_path / "out") and logs == []


def test_an_encoder_gets_a_tokenizer_ir_without_a_detokenizer(tiny_llm: tuple[Path, Any], tmp_path: Path) -> None:
    pytest.importorskip("openvino_tokenizers")
    from openvino import opset13 as ops

    assert writing.generates_text(read_model(tiny_llm[0]))
    inputs = ops.parameter([1, -1, 8], ov.Type.f32, name="inputs_embeds")
    hidden = ops.relu(inputs)
    hidden.output(0).set_names({"last_hidden_state"})
    assert not writing.generates_text(ov.Model([hidden], [inputs], "encoder"))
    written = writing.write_openvino_tokenizers(tiny_llm[0], tmp_path / "enc", with_detokenizer=False)
    assert written == [TOKENIZER_XML]
    assert sorted(p.name for p in (tmp_path / "enc").iterdir()) == ["openvino_tokenizer.bin", "openvino_tokenizer.xml"]
    ids = ov.Core().compile_model(tmp_path / "enc" / TOKENIZER_XML, "CPU")(["w1 w2 w3"])["input_ids"]
    assert ids.tolist() == [tiny_llm[1]("w1 w2 w3")["input_ids"]]


def test_the_weights_files_pages_are_dropped_and_the_heap_returned_at_every_phase(
    tiny_llm: tuple[Path, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nncf_hqq.openvino import pages

    released: list[list[Path]] = []
    boundaries: list[bool] = []
    monkeypatch.setattr(compress_job, "releasing_file_pages", recording_released_files(released))
    monkeypatch.setattr(compress_job, "return_free_heap", lambda: boundaries.append(pages.return_free_heap()) or True)
    result = compress(tiny_llm[0], tmp_path / "out", group_size=64, self_calibration=False, log=quiet)
    assert released == [[(tiny_llm[0] / "openvino_model.bin").resolve()]]
    assert len(boundaries) == 2 * len(result.phase_seconds) and all(boundaries)  # glibc: every call returned heap


# --------------------------------------------------------------------------------------------------------------------
# OUT is replaced only when the new one is complete
# --------------------------------------------------------------------------------------------------------------------
def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_a_failure_while_saving_leaves_out_as_it_was(
    tiny_llm: tuple[Path, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    compress(tiny_llm[0], out, mode="int8_asym", log=quiet)
    (out / "notes.txt").write_text("the user's")
    before = _snapshot(out)

    def disk_full(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise OSError("No space left on device")

    monkeypatch.setattr(compress_job, "write_record", disk_full)
    with pytest.raises(OSError, match="No space left"):  # the model, side files and tokenizer IRs are written by then
        compress(tiny_llm[0], out, group_size=64, self_calibration=False, hqq=False, log=quiet)
    assert _snapshot(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging dir left behind
    monkeypatch.undo()
    result = compress(tiny_llm[0], out, group_size=64, self_calibration=False, hqq=False, log=quiet)
    after = _snapshot(out)
    assert after["notes.txt"] == b"the user's" and after["openvino_model.bin"] != before["openvino_model.bin"]
    assert set(result.written) < set(after)


#: A compress run in a child process that stops while saving (after the model is written, before the tokenizer
#: IRs) and says so in the file ``argv[3]``.
STALLED_CHILD = """
import sys, time
from pathlib import Path
from nncf_hqq.llm import writing
from nncf_hqq.llm import zoo
def stall(*args, **kwargs):
    Path(sys.argv[3]).write_text("saving")
    time.sleep(600)
writing.write_openvino_tokenizers = stall
from nncf_hqq.llm.cli import main
sys.exit(main(["compress", sys.argv[1], sys.argv[2], "--group-size", "64", "--no-self-calibration", "--no-hqq"]))
"""


def test_a_run_killed_while_saving_leaves_out_as_it_was(tiny_llm: tuple[Path, Any], tmp_path: Path) -> None:
    out = tmp_path / "out"
    compress(tiny_llm[0], out, mode="int8_asym", log=quiet)
    before = _snapshot(out)
    marker = tmp_path / "saving"
    args = [sys.executable, "-c", STALLED_CHILD, str(tiny_llm[0]), str(out), str(marker)]
    child = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), child.communicate()[1].decode()[-2000:]
    [staging] = [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]
    assert (staging / MODEL_XML).is_file()  # the new model is written, beside OUT
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert _snapshot(out) == before
    compress(tiny_llm[0], out, group_size=64, self_calibration=False, hqq=False, log=quiet)
    assert not staging.exists()  # the next run for OUT removes what the killed one left
    assert _snapshot(out)["openvino_model.bin"] != before["openvino_model.bin"]
