"""Tests of nncf_hqq.llm.export: a HF checkpoint is exported stateful, uncompressed and in its own precision (bf16
stays bf16), and compresses from there to what the fp32 export gives."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

from nncf_hqq.llm import compress
from nncf_hqq.llm import export
from nncf_hqq.llm.layout import ir_xml

pytest.importorskip("optimum.intel")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def bf16_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama saved in bf16 (as released checkpoints are), without a tokenizer."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    path = tmp_path_factory.mktemp("bf16") / "hf"
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def exports(bf16_checkpoint: Path) -> dict[str, Path]:
    root = bf16_checkpoint.parent
    return {
        dtype: export.export_to_openvino(bf16_checkpoint, root / f"ov_{dtype}", dtype=dtype)
        for dtype in (export.CHECKPOINT_PRECISION, "fp32")
    }


def _constants(ir_xml: Path, types: tuple[ov.Type, ...], two_d: bool = False) -> list[tuple[tuple[int, ...], bytes]]:
    """Shape and f32 bytes of every constant of ``types``, sorted: the bf16 export names its weights differently
    (``*._openvino_orig_weight``), so the weights are compared as a multiset of values."""
    model = ov.Core().read_model(ir_xml)
    out = []
    for op in model.get_ops():
        if op.get_type_name() != "Constant" or op.get_element_type() not in types:
            continue
        if two_d and len(op.get_output_shape(0)) != 2:
            continue
        data = op.get_data(dtype=np.float32) if op.get_element_type() == ov.Type.bf16 else op.data
        out.append((tuple(op.get_output_shape(0)), np.ascontiguousarray(data).tobytes()))
    return sorted(out)


def test_the_checkpoint_precision_is_kept_and_values_match_the_fp32_export(exports: dict[str, Path]) -> None:
    kept_xml, fp32_xml = (exports[d] / "openvino_model.xml" for d in (export.CHECKPOINT_PRECISION, "fp32"))
    assert export.weight_precision(ov.Core().read_model(kept_xml)) == "bf16"
    assert export.weight_precision(ov.Core().read_model(fp32_xml)) == "f32"
    kept = _constants(kept_xml, (ov.Type.bf16,), two_d=True)
    assert len(kept) >= 14  # 7 MatMuls a layer, embeddings, lm_head
    kept_as_f32 = [(shape, np.frombuffer(data, np.float32).tobytes()) for shape, data in kept]
    assert kept_as_f32 == _constants(fp32_xml, (ov.Type.f32,), two_d=True)


def test_the_checkpoint_pages_are_dropped_during_the_export_and_the_export_is_the_same(
    bf16_checkpoint: Path, exports: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The background drops race the export (a tiny model's mapping lives for about a second), so what a drop finds
    is checked at one fixed point: when optimum-intel starts converting the loaded model, PyTorch's copy-on-write
    mapping of model.safetensors is there, unwritten, and droppable by the suffixes the export uses."""
    from optimum.exporters.openvino import convert

    from nncf_hqq.openvino import pages

    droppable: list[int] = []
    original = convert.export_from_model

    def converting(*args: Any, **kwargs: Any) -> Any:
        droppable.append(pages.release_file_mappings(suffixes=export.CHECKPOINT_WEIGHTS_SUFFIXES))
        return original(*args, **kwargs)

    monkeypatch.setattr(convert, "export_from_model", converting)
    dropped = export.export_to_openvino(bf16_checkpoint, tmp_path / "dropped") / "openvino_model.bin"
    assert len(droppable) == 1
    assert droppable[0] > 0  # PyTorch's mapping of model.safetensors, dropped while optimum-intel ran
    assert dropped.read_bytes() == (exports[export.CHECKPOINT_PRECISION] / "openvino_model.bin").read_bytes()
    monkeypatch.setattr(export, "releasing_file_pages", lambda **_: contextlib.nullcontext())
    kept = export.export_to_openvino(bf16_checkpoint, tmp_path / "kept") / "openvino_model.bin"
    assert kept.read_bytes() == dropped.read_bytes()


def test_an_unknown_precision_is_refused(bf16_checkpoint: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'fp16'"):
        export.export_to_openvino(bf16_checkpoint, tmp_path / "ov", dtype="fp16")


def _compress_both(
    bf16_checkpoint: Path, fp32_ir: Path, tmp_path: Path, options: dict[str, Any]
) -> tuple[list[tuple[tuple[int, ...], bytes]], list[tuple[tuple[int, ...], bytes]]]:
    lines: list[str] = []
    compress(bf16_checkpoint, tmp_path / "from_hf", group_size=32, log=lines.append, **options)
    assert any("checkpoint's precision" in line for line in lines)
    compress(fp32_ir, tmp_path / "from_fp32", group_size=32, log=lines.append, **options)
    types = (ov.Type.u4, ov.Type.u8, ov.Type.f16)
    return tuple(_constants(tmp_path / d / "openvino_model.xml", types) for d in ("from_hf", "from_fp32"))  # type: ignore[return-value]


def test_compress_of_a_bf16_checkpoint_equals_compress_of_its_fp32_export(
    bf16_checkpoint: Path, exports: dict[str, Path], tmp_path: Path
) -> None:
    """Data-free, the CLI exports in bf16 (half the memory) and writes the codes, scales and zero points the fp32 IR
    gives."""
    from_hf, from_fp32 = _compress_both(bf16_checkpoint, exports["fp32"], tmp_path, {"self_calibration": False})
    assert len(from_hf) > 14
    assert from_hf == from_fp32


def test_self_calibrated_compress_of_a_bf16_checkpoint(
    bf16_checkpoint: Path, exports: dict[str, Path], tmp_path: Path
) -> None:
    """Self-calibrated (AWQ + Scale Estimation + HQQ, the output check) from the bf16 export: the same constants in
    kind and shape as from the fp32 export. Not the same values: NNCF's AWQ writes its rescaled weights back in the
    IR's precision, bf16 (research/bf16_export.py measures what that does to accuracy)."""
    from_hf, from_fp32 = _compress_both(bf16_checkpoint, exports["fp32"], tmp_path, {"self_calibration_samples": 4})
    assert len(from_hf) > 14
    assert [shape for shape, _ in from_hf] == [shape for shape, _ in from_fp32]
    record = (tmp_path / "from_hf" / "nncf_hqq_compression.json").read_text()
    assert '"output_check"' in record


def test_export_is_stateful_and_fp32(tiny_llm: tuple[Path, Any]) -> None:
    model = ov.Core().read_model(ir_xml(tiny_llm[0]))
    names = {port.any_name for port in model.inputs}
    assert {"input_ids", "attention_mask", "position_ids", "beam_idx"} <= names
    assert model.get_sinks(), "expected a stateful model (KV cache in ReadValue/Assign)"
    assert not list(tiny_llm[0].glob("*_compressed.xml"))
