"""Tests of nncf_hqq.llm.source: what MODEL is, worked out once per run (one task inference, so one hub lookup for a
hub id), and what each kind is refused for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nncf_hqq.llm import source
from nncf_hqq.llm.export import LLM_TASK
from nncf_hqq.llm.export import TRANSFORMERS
from nncf_hqq.llm.export import ExportTask
from nncf_hqq.llm.options import OptionError


def test_model_kinds(tmp_path: Path) -> None:
    (tmp_path / "ir").mkdir()
    (tmp_path / "ir" / "openvino_model.xml").write_text("<net/>")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    (tmp_path / "other").mkdir()
    assert source.model_kind(str(tmp_path / "ir")) == source.IR_DIR
    assert source.model_kind(str(tmp_path / "ir" / "openvino_model.xml")) == source.IR_XML
    assert source.model_kind(str(tmp_path / "hf")) == source.HF_DIR
    assert source.model_kind("HuggingFaceTB/SmolLM2-135M-Instruct") == source.HUB_ID
    with pytest.raises(OptionError, match="is neither an OpenVINO IR"):
        source.model_kind(str(tmp_path / "other"))
    with pytest.raises(OptionError, match="does not exist"):
        source.model_kind(str(tmp_path / "missing.xml"))


def test_a_hub_id_is_looked_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    lookups: list[tuple[Any, ...]] = []

    def hub(*args: Any) -> ExportTask:
        lookups.append(args)
        return ExportTask("text-generation", TRANSFORMERS, "the hub's metadata")

    monkeypatch.setattr(source, "infer_export_task", hub)
    resolved = source.resolve_source("org/model", None, "auto")
    assert lookups == [("org/model", None)] and resolved.kind == source.HUB_ID
    assert resolved.export is not None and resolved.export.export_task == LLM_TASK
    assert resolved.files_dir is None and resolved.size() is None and not resolved.encoder


def test_an_ir_takes_no_task_and_no_torch_backend(tiny_llm: tuple[Path, Any]) -> None:
    with pytest.raises(OptionError, match="task applies to a HF model"):
        source.resolve_source(tiny_llm[0], "text-generation", "auto")
    with pytest.raises(OptionError, match="is an OpenVINO IR"):
        source.resolve_source(tiny_llm[0], None, "torch")
    resolved = source.resolve_source(tiny_llm[0], None, "auto")
    assert resolved.export is None and resolved.files_dir == tiny_llm[0]
    size = resolved.size()
    assert size is not None and size.decoder is not None and size.decoder.layers == 2


def test_a_hf_dir_sizes_its_safetensors(hf_dir: Path) -> None:
    resolved = source.resolve_source(hf_dir, None, "auto")
    assert resolved.export == ExportTask("text-generation", TRANSFORMERS, "architecture LlamaForCausalLM")
    size = resolved.size()
    config = json.loads((hf_dir / "config.json").read_text())
    assert size is not None and size.decoder is not None and size.decoder.vocabulary == config["vocab_size"]
