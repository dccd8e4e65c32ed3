"""Vision-language models through ``nncf-hqq compress`` (nncf_hqq.llm.vlm): tiny random ``qwen2_5_vl`` and
``qwen2_vl`` checkpoints (tests/tiny_vlms.py, built offline) are exported as optimum-intel exports them, the language
model compressed with HQQ and the other parts INT8_SYM as optimum-cli compresses them, and the dir written answers a
prompt with an image in ``openvino_genai.VLMPipeline`` and in optimum-intel's ``OVModelForVisualCausalLM``.

Three exports (one per family; the Qwen2.5-VL one shared by two tests): the file takes about 60 s of CPU time (4 min
of wall time on the shared 2 cores at a load average of 25). The refusals need only a ``config.json``.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

from nncf_hqq.llm import OptionError
from nncf_hqq.llm import cli
from nncf_hqq.llm import compress
from nncf_hqq.llm import vlm
from nncf_hqq.llm.compression import compress_model
from nncf_hqq.llm.export import VLM_TASK
from nncf_hqq.llm.export import export_obstacle
from nncf_hqq.llm.export import export_to_openvino
from nncf_hqq.llm.layout import DETOKENIZER_XML
from nncf_hqq.llm.layout import LANGUAGE_MODEL_XML
from nncf_hqq.llm.layout import RECORD_NAME
from nncf_hqq.llm.layout import TOKENIZER_XML
from nncf_hqq.llm.layout import is_vlm_genai_dir
from nncf_hqq.llm.vlm import OTHER_PARTS_RECIPE
from tests.llm_helpers import run_cli
from tests.tiny_vlms import TINY_VLM_FAMILIES
from tests.tiny_vlms import save_tiny_vlm

pytest.importorskip("optimum.intel")

#: The IRs optimum-intel 2.1.0 writes for a Qwen2-VL / Qwen2.5-VL model (``optimum-cli export openvino --task
#: image-text-to-text``), besides the tokenizer IRs.
QWEN_VL_PARTS = {
    "openvino_language_model.xml",
    "openvino_text_embeddings_model.xml",
    "openvino_vision_embeddings_model.xml",
    "openvino_vision_embeddings_merger_model.xml",
}
#: The other files optimum-cli writes beside them for the tiny checkpoints (it adds ``openvino_config.json``).
QWEN_VL_FILES = {
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    TOKENIZER_XML,
    DETOKENIZER_XML,
}


def weight_types(xml: Path) -> tuple[set[ov.Type], set[ov.Type]]:
    """The element types of the weight constants NNCF compressed in an IR (those with a ``/scale`` beside them) and of
    their zero points."""
    constants = {
        op.get_friendly_name(): op for op in ov.Core().read_model(xml).get_ops() if op.get_type_name() == "Constant"
    }
    codes = {name[: -len("/scale")] for name in constants if name.endswith("/scale")}
    weights = {constants[name].get_element_type() for name in codes if name in constants}
    zero_points = {op.get_element_type() for name, op in constants.items() if name.endswith("/zero_point")}
    return weights, zero_points


def vlm_pipeline_generates(model_dir: Path, n_tokens: int = 4) -> None:
    """``openvino_genai.VLMPipeline`` loads ``model_dir`` and greedily generates ``n_tokens`` from a prompt with a
    64 x 64 random image, and from the prompt alone."""
    openvino_genai = pytest.importorskip("openvino_genai")
    pipe = openvino_genai.VLMPipeline(str(model_dir), "CPU")
    image = ov.Tensor(np.random.default_rng(0).integers(0, 256, size=(1, 64, 64, 3), dtype=np.uint8))
    config = openvino_genai.GenerationConfig(max_new_tokens=n_tokens, min_new_tokens=n_tokens, do_sample=False)
    with_image = pipe.generate("w1 w2 w3", images=[image], generation_config=config)
    assert with_image.perf_metrics.get_num_generated_tokens() == n_tokens
    text_only = pipe.generate("w1 w2 w3", generation_config=config)
    assert text_only.perf_metrics.get_num_generated_tokens() == n_tokens


def optimum_generates(model_dir: Path, n_tokens: int = 4) -> Any:
    """optimum-intel's ``OVModelForVisualCausalLM`` loads ``model_dir`` and greedily generates ``n_tokens`` from a
    prompt with a 64 x 64 random image (inputs made by the Qwen2-VL image processor and the tokenizer)."""
    transformers = pytest.importorskip("transformers")
    optimum_intel = pytest.importorskip("optimum.intel")
    model = optimum_intel.OVModelForVisualCausalLM.from_pretrained(model_dir)
    image = np.random.default_rng(0).integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
    pixels = transformers.Qwen2VLImageProcessor.from_pretrained(model_dir)(images=[image], return_tensors="pt")
    merged = int(pixels["image_grid_thw"].prod()) // 4  # 2 x 2 patches per image token
    text = "<|vision_start|>" + "<|image_pad|>" * merged + "<|vision_end|>w1 w2 w3"
    inputs = transformers.AutoTokenizer.from_pretrained(model_dir)(text, return_tensors="pt")
    output = model.generate(
        **inputs,
        pixel_values=pixels["pixel_values"],
        image_grid_thw=pixels["image_grid_thw"],
        max_new_tokens=n_tokens,
        min_new_tokens=n_tokens,
        do_sample=False,
    )
    assert output.shape[1] == inputs["input_ids"].shape[1] + n_tokens
    return output


@pytest.fixture(scope="module")
def qwen2_5_vl_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str, str]:
    """``nncf-hqq compress`` of a tiny Qwen2.5-VL HF dir: (OUT, exit code, stdout, stderr; a module fixture cannot
    take ``capsys``, so they are captured here)."""
    root = tmp_path_factory.mktemp("qwen2_5_vl")
    hf_dir = save_tiny_vlm("qwen2_5_vl", root / "hf")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["compress", str(hf_dir), str(root / "out"), "--group-size", "64"])
    return root / "out", code, out.getvalue(), err.getvalue()


def test_a_vlm_checkpoint_is_exported_and_compressed_as_optimum_cli_does(
    qwen2_5_vl_run: tuple[Path, int, str, str],
) -> None:
    out_dir, code, out, err = qwen2_5_vl_run
    assert code == 0, err
    assert {p.name for p in out_dir.glob("*.xml")} == QWEN_VL_PARTS | {TOKENIZER_XML, DETOKENIZER_XML}
    assert QWEN_VL_FILES | {RECORD_NAME} <= {p.name for p in out_dir.iterdir()}
    assert is_vlm_genai_dir(out_dir)
    # the language model: HQQ's f16 zero points in the decoder layers (attention roles HQQ leaves to RTN: u4), NNCF's
    # INT8_ASYM backup for the output head
    weights, zero_points = weight_types(out_dir / LANGUAGE_MODEL_XML)
    assert weights == {ov.Type.u4, ov.Type.u8}
    assert {ov.Type.f16, ov.Type.u8} <= zero_points <= {ov.Type.f16, ov.Type.u4, ov.Type.u8}
    # the other parts: INT8_SYM per channel (no zero point), as optimum-cli --weight-format int4
    for part in QWEN_VL_PARTS - {LANGUAGE_MODEL_XML}:
        assert weight_types(out_dir / part) == ({ov.Type.i8}, set()), part
    record = json.loads((out_dir / RECORD_NAME).read_text())
    parts = record["vlm"]["parts"]
    assert list(parts) == [
        "language_model",
        "text_embeddings_model",
        "vision_embeddings_merger_model",
        "vision_embeddings_model",
    ]
    assert parts["language_model"]["options"]["hqq"] is True and parts["language_model"]["options"]["group_size"] == 64
    assert all(parts[name]["recipe"] == OTHER_PARTS_RECIPE for name in list(parts)[1:])
    assert record["self_calibration"] is None and record["options"]["awq"] is False
    assert record["vlm"]["language_model_data_free"].startswith("the language model of a vision-language model")
    assert "Self-calibration not used: the language model of a vision-language model takes input embeddings" in err
    assert "Exporting " in err and f"as {VLM_TASK}" in err and "memory: " in err
    lines = out.splitlines()
    assert lines[0] == f"Wrote a vision-language model to {out_dir}:"
    assert f"  {LANGUAGE_MODEL_XML}: int4_asym, group size 64, HQQ (default zero point)" in lines
    assert (
        f"OpenVINO GenAI: openvino_genai.VLMPipeline({str(out_dir)!r}, 'CPU') loads it (tokenizer IRs in OUT)" in lines
    )


def test_the_compressed_vlm_answers_a_prompt_with_an_image(qwen2_5_vl_run: tuple[Path, int, str, str]) -> None:
    out_dir, code, _, err = qwen2_5_vl_run
    assert code == 0, err
    vlm_pipeline_generates(out_dir)
    optimum_generates(out_dir)


def test_a_vlm_export_dir_is_compressed_from_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Qwen2-VL model exported by optimum-intel (an IR dir, as ``optimum-cli --weight-format fp32`` writes it) is
    compressed by ``nncf_hqq.llm.compress`` with integer zero points, and answers with an image; a run that fails
    after the language model was written leaves OUT as it was."""
    hf_dir = save_tiny_vlm("qwen2_vl", tmp_path / "hf")
    ir_dir = export_to_openvino(hf_dir, tmp_path / "ir", VLM_TASK, convert_tokenizer=True)
    lines: list[str] = []
    result = compress(ir_dir, tmp_path / "out", group_size=64, zero_point="int", log=lines.append)
    assert result.kind == "vlm" and result.loader is not None and "VLMPipeline" in result.loader
    assert result.options.zero_point == "int" and "export" not in result.phase_seconds
    assert list(result.phase_seconds) == ["compression", "saving"]
    assert weight_types(tmp_path / "out" / LANGUAGE_MODEL_XML)[1] == {ov.Type.u4, ov.Type.u8}
    assert any(line.startswith("language_model: int4_asym, group size 64, HQQ (int zero point)") for line in lines)
    assert any(line.startswith("memory: compression: about ") for line in lines)
    vlm_pipeline_generates(tmp_path / "out")
    with pytest.raises(ValueError, match="out must differ from the directory of the source model"):
        compress(ir_dir, ir_dir, log=lines.append)

    def fails_on_the_vision_parts(model: ov.Model, options: Any) -> ov.Model:
        if options is vlm.OTHER_PARTS:
            raise RuntimeError("a vision part failed")
        return compress_model(model, options)

    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    monkeypatch.setattr(vlm, "compress_model", fails_on_the_vision_parts)
    with pytest.raises(RuntimeError, match="a vision part failed"):
        compress(ir_dir, tmp_path / "out", group_size=64, log=lines.append)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")] == []


@pytest.mark.slow
def test_a_llava_checkpoint_is_compressed_and_answers_with_an_image(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """LLaVA: a CLIP vision tower and a projector in one vision-embeddings IR, no merger, a Llama language model."""
    hf_dir = save_tiny_vlm("llava", tmp_path / "hf")
    args = ["compress", hf_dir, tmp_path / "out", "--group-size", "64", "--no-self-calibration"]
    code, _, err = run_cli(args, capsys)
    assert code == 0, err
    parts = json.loads((tmp_path / "out" / RECORD_NAME).read_text())["vlm"]["parts"]
    assert list(parts) == ["language_model", "text_embeddings_model", "vision_embeddings_model"]
    assert "Self-calibration not used" not in err  # not asked for
    vlm_pipeline_generates(tmp_path / "out")


def test_options_that_need_calibration_data_are_refused_for_a_vlm(tmp_path: Path) -> None:
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    config = {"model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"]}
    (hf_dir / "config.json").write_text(json.dumps(config))  # no weights: refused before anything is read
    text = tmp_path / "text.txt"
    text.write_text("w1 w2 w3")
    message = "model is a vision-language model, compressed data-free"
    with pytest.raises(OptionError, match=re.escape(message) + ".*drop dataset, scale_estimation=True"):
        compress(hf_dir, tmp_path / "out", dataset=text, scale_estimation=True, awq=True)
    with pytest.raises(OptionError, match=r"backend='torch' compresses causal LMs; .* is a image-text-to-text model"):
        compress(hf_dir, tmp_path / "out", backend="torch")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("model_type", "architecture", "expected"),
    [
        ("smolvlm", "SmolVLMForConditionalGeneration", "its OpenVINO export needs transformers>=4.57,<=4.57.6"),
        ("mistral3", "Mistral3ForConditionalGeneration", "optimum-intel has no OpenVINO export of it for " + VLM_TASK),
    ],
    ids=["version_bound", "no_export_config"],
)
def test_a_vlm_family_that_cannot_be_exported_is_refused_in_one_line(
    model_type: str, architecture: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text(json.dumps({"model_type": model_type, "architectures": [architecture]}))
    code, out, err = run_cli(["compress", hf_dir, tmp_path / "out"], capsys)
    assert code == 1 and out == ""
    [line] = [line for line in err.splitlines() if "error:" in line]
    assert f"cannot export model family {model_type!r} with transformers " in line and expected in line
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_with_its_own_code_is_refused_in_one_line_with_the_way_around(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    config = {
        "model_type": "phi3_v",
        "architectures": ["Phi3VForCausalLM"],
        "auto_map": {"AutoModelForCausalLM": "modeling_phi3_v.Phi3VForCausalLM"},
    }
    (hf_dir / "config.json").write_text(json.dumps(config))
    code, out, err = run_cli(["compress", hf_dir, tmp_path / "out"], capsys)
    assert code == 1 and out == ""
    [line] = [line for line in err.splitlines() if "error:" in line]
    assert "comes with its own model code (Phi3VForCausalLM" in line and "--trust-remote-code" in line
    assert f"--task {VLM_TASK}" in line and "compress DIR" in line


def test_the_tested_vlm_families_export_with_the_installed_stack() -> None:
    assert {family: export_obstacle(family, VLM_TASK) for family in TINY_VLM_FAMILIES} == dict.fromkeys(
        TINY_VLM_FAMILIES
    )
