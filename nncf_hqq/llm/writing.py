"""Writing the compress job's output dir: the model, the source's side files (config, tokenizer...), the OpenVINO
tokenizer IRs that make it an OpenVINO GenAI dir, and the record; or, from PyTorch, a transformers checkpoint.

The functions write into the directory they are given; the job gives them a staging dir beside OUT that becomes
OUT only when complete (``nncf_hqq.llm.staging``).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import openvino as ov
from nncf.common.logging import nncf_logger

from nncf_hqq.llm.layout import DETOKENIZER_XML
from nncf_hqq.llm.layout import MODEL_BIN
from nncf_hqq.llm.layout import MODEL_XML
from nncf_hqq.llm.layout import RECORD_NAME
from nncf_hqq.llm.layout import TOKENIZER_XML
from nncf_hqq.llm.records import write_json
from nncf_hqq.llm.texts import load_tokenizer
from nncf_hqq.llm.timing import SAVING_PHASE
from nncf_hqq.llm.timing import TOKENIZER_PHASE
from nncf_hqq.llm.timing import StepTimer
from nncf_hqq.llm.timing import silent_timer

#: Files of a HF model dir that ``save_pretrained`` writes itself (the rest, e.g. the tokenizer, is copied).
CHECKPOINT_FILE = re.compile(r"(config\.json|generation_config\.json|.*\.safetensors|.*\.bin|.*\.index\.json)")


def side_files(files_dir: Path) -> list[Path]:
    """The files of an optimum-intel model dir other than the model IR: config, generation config, tokenizer..."""
    return sorted(p for p in files_dir.iterdir() if p.is_file() and p.name not in (MODEL_XML, MODEL_BIN, RECORD_NAME))


def generates_text(model: ov.Model) -> bool:
    """Whether ``model`` outputs next-token ``logits`` (an LLM, whose GenAI dir needs a detokenizer too; an encoder's
    needs only the tokenizer)."""
    return any("logits" in port.get_names() for port in model.outputs)


def write_openvino_tokenizers(tokenizer_dir: str | Path, out_dir: Path, with_detokenizer: bool = True) -> list[str]:
    """Convert the Hugging Face tokenizer of ``tokenizer_dir`` with ``openvino_tokenizers.convert_tokenizer`` into
    ``out_dir/openvino_tokenizer.xml/.bin`` and, with ``with_detokenizer``, ``openvino_detokenizer.xml/.bin``: what
    ``openvino_genai`` loads beside the model (an LLM needs both, an encoder only the tokenizer).

    Returns the names of the ``.xml`` files written. Raises what loading or converting the tokenizer raises
    (``ImportError`` without the openvino-tokenizers package).
    """
    import openvino_tokenizers

    hf_tokenizer = load_tokenizer(tokenizer_dir)
    converted = openvino_tokenizers.convert_tokenizer(hf_tokenizer, with_detokenizer=with_detokenizer)
    irs = converted if with_detokenizer else (converted,)
    names = [TOKENIZER_XML, DETOKENIZER_XML][: len(irs)]
    out_dir.mkdir(parents=True, exist_ok=True)
    for ir, name in zip(irs, names, strict=True):
        ov.save_model(ir, out_dir / name)
    return names


def ensure_openvino_tokenizers(
    out_dir: Path,
    tokenizer_dir: Path | None,
    with_detokenizer: bool,
    log: Callable[[str], None],
    timer: StepTimer | None = None,
) -> list[str]:
    """The OpenVINO tokenizer IRs of ``out_dir``: kept when already there (copied from the source), otherwise
    written by ``write_openvino_tokenizers`` (timed as ``TOKENIZER_PHASE``). Returns the names written; when they
    cannot be, says why in one ``warning:`` line through ``log`` and returns none (the model dir stays usable with
    optimum-intel, not with openvino_genai)."""
    needed = [TOKENIZER_XML, DETOKENIZER_XML] if with_detokenizer else [TOKENIZER_XML]
    if all((out_dir / name).is_file() for name in needed):
        return []
    consequence = "openvino_genai will not load OUT (the model itself is written)"
    if tokenizer_dir is None:
        log(f"warning: no tokenizer beside the source model to convert to {TOKENIZER_XML}: {consequence}")
        return []
    try:
        with (timer or silent_timer()).step(TOKENIZER_PHASE):
            written = write_openvino_tokenizers(tokenizer_dir, out_dir, with_detokenizer)
    except Exception as err:
        reason = (str(err).strip().splitlines() or [""])[0][:200]
        if isinstance(err, ImportError):
            reason += " (pip install -e '.[llm]' installs openvino-tokenizers)"
        log(f"warning: the tokenizer of {tokenizer_dir} was not converted to OpenVINO ({reason}): {consequence}")
        return []
    log(f"OpenVINO tokenizer IRs for openvino_genai: {', '.join(written)}")
    return written


def write_record(out_dir: Path, record: Mapping[str, Any], timer: StepTimer) -> dict[str, Any]:
    """``record`` (what was done) with ``phase_seconds`` and ``phase_peak_bytes`` (what ``timer`` measured so far),
    written to ``out_dir/nncf_hqq_compression.json``; returns it."""
    full = {**record, "phase_seconds": dict(timer.seconds), "phase_peak_bytes": dict(timer.peak_bytes)}
    write_json(out_dir / RECORD_NAME, full)
    return full


def save_model_dir(
    model: ov.Model,
    out_dir: Path,
    files_dir: Path | None,
    *,
    tokenizer_dir: Path | None = None,
    log: Callable[[str], None] | None = None,
    timer: StepTimer | None = None,
) -> tuple[list[str], list[str]]:
    """Write ``openvino_model.xml/.bin`` into ``out_dir``, copy the side files of ``files_dir`` and make it an OpenVINO
    GenAI dir: the tokenizer IRs (``ensure_openvino_tokenizers``, from ``tokenizer_dir``, by default ``files_dir``;
    with a detokenizer when the model ``generates_text``). Timed as ``SAVING_PHASE`` and ``TOKENIZER_PHASE``.

    Returns the names of the files copied and of the tokenizer IRs written.
    """
    timer = timer or silent_timer()
    with timer.step(SAVING_PHASE):
        out_dir.mkdir(parents=True, exist_ok=True)
        ov.save_model(model, out_dir / MODEL_XML, compress_to_fp16=False)
        copied = []
        for src in side_files(files_dir) if files_dir is not None else []:
            shutil.copy2(src, out_dir / src.name)
            copied.append(src.name)
    tokenizer_dir = tokenizer_dir or files_dir
    written = ensure_openvino_tokenizers(out_dir, tokenizer_dir, generates_text(model), log or nncf_logger.info, timer)
    return copied, written


def save_checkpoint_dir(model: Any, out_dir: Path, source_dir: Path | None, timer: StepTimer) -> list[str]:
    """A compressed transformers model's ``save_pretrained`` into ``out_dir`` with the files of ``source_dir`` that it
    does not write itself (tokenizer, chat template...), timed as ``SAVING_PHASE``; returns the names copied."""
    with timer.step(SAVING_PHASE):
        out_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out_dir)
        copied = []
        if source_dir is not None:
            for src in sorted(p for p in source_dir.iterdir() if p.is_file() and not CHECKPOINT_FILE.fullmatch(p.name)):
                shutil.copy2(src, out_dir / src.name)
                copied.append(src.name)
    return copied
