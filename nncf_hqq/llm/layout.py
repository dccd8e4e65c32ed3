"""What the model directories hold: the file names of an OpenVINO IR dir and an OpenVINO GenAI dir, telling an IR,
a HF checkpoint and a GenAI dir apart, and reading an IR."""

from __future__ import annotations

from pathlib import Path

import openvino as ov

MODEL_XML = "openvino_model.xml"
MODEL_BIN = "openvino_model.bin"
#: What the compress job did, written beside the model it wrote.
RECORD_NAME = "nncf_hqq_compression.json"
#: The OpenVINO tokenizer and detokenizer IRs that ``openvino_genai.LLMPipeline`` loads beside the model.
TOKENIZER_XML = "openvino_tokenizer.xml"
DETOKENIZER_XML = "openvino_detokenizer.xml"
#: The file that makes a directory a HF checkpoint.
HF_CONFIG = "config.json"


def is_ir_dir(path: Path) -> bool:
    return path.is_dir() and (path / MODEL_XML).is_file()


def is_genai_dir(path: Path) -> bool:
    """Whether ``path`` holds what ``openvino_genai.LLMPipeline`` loads: the model, tokenizer and detokenizer IRs."""
    return all((path / name).is_file() for name in (MODEL_XML, TOKENIZER_XML, DETOKENIZER_XML))


def is_hf_dir(path: Path) -> bool:
    return (
        path.is_dir() and (path / HF_CONFIG).is_file() and not (path / MODEL_XML).is_file() and not is_vlm_ir_dir(path)
    )


def ir_xml(ir_dir_or_xml: str | Path) -> Path:
    """The IR ``.xml`` of an exported dir (``openvino_model.xml``), or the path itself when it is an ``.xml``."""
    path = Path(ir_dir_or_xml)
    if path.suffix == ".xml":
        return path
    xml = path / MODEL_XML
    if not xml.is_file():
        msg = f"no {MODEL_XML} in {path}"
        raise FileNotFoundError(msg)
    return xml


def read_model(model_xml: str | Path) -> ov.Model:
    """``ov.Core().read_model`` of an IR ``.xml`` (or of the ``openvino_model.xml`` in a directory)."""
    return ov.Core().read_model(ir_xml(model_xml))


def remove_ir(xml: Path) -> None:
    """Removes an IR's ``.xml`` and its ``.bin``, where they exist."""
    for path in (xml, xml.with_suffix(".bin")):
        path.unlink(missing_ok=True)


def model_files_dir(model: object) -> Path | None:
    """The directory of an IR given as a path (where its config.json is); None for in-memory models."""
    if not isinstance(model, str | Path):
        return None
    path = Path(model)
    return path.parent if path.suffix == ".xml" else path


#: The language model of an optimum-intel vision-language export (``image-text-to-text``) and its text-embeddings
#: model: what makes a dir a VLM IR dir (its other IRs: ``openvino_vision_embeddings*_model.xml``, ...).
LANGUAGE_MODEL_XML = "openvino_language_model.xml"
TEXT_EMBEDDINGS_XML = "openvino_text_embeddings_model.xml"


def is_vlm_ir_dir(path: Path) -> bool:
    """Whether ``path`` holds an optimum-intel vision-language export (what ``openvino_genai.VLMPipeline`` loads,
    with the tokenizer IRs)."""
    return path.is_dir() and all((path / name).is_file() for name in (LANGUAGE_MODEL_XML, TEXT_EMBEDDINGS_XML))


def is_vlm_genai_dir(path: Path) -> bool:
    """Whether ``path`` holds what ``openvino_genai.VLMPipeline`` loads: a VLM export with the tokenizer IRs."""
    return is_vlm_ir_dir(path) and all((path / name).is_file() for name in (TOKENIZER_XML, DETOKENIZER_XML))
