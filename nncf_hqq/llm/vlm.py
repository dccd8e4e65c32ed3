"""Vision-language models (``image-text-to-text``) in the compress job: optimum-intel's export of one (a language
model, a text-embeddings model, vision models, the tokenizer IRs), each part compressed as ``optimum-cli export
openvino --weight-format int4`` compresses it, and OUT written as a dir that ``openvino_genai.VLMPipeline`` and
optimum-intel's ``OVModelForVisualCausalLM`` load.

What each part gets (optimum-intel 2.1.0, ``OVQuantizer._construct_pipeline_quantization_config``: a weight-only
config goes to the ``lm_model`` and every other part gets ``OVWeightQuantizationConfig(bits=8, sym=True)``):

- the language model (``openvino_language_model.xml``): the job's recipe, as for an LLM: HQQ, the group-size
  fallback, the zero-point format for the target CPU, NNCF's INT8_ASYM backup for the output head. It is
  compressed data-free: it takes input embeddings (made by the text-embeddings model) and position ids of the image
  grid rather than token ids, so it cannot generate its own calibration text (``NO_SELF_CALIBRATION``);
- every other part (text embeddings, vision embeddings, the vision merger...): ``OTHER_PARTS``, INT8_SYM per
  channel with NNCF's round to nearest, as optimum-cli. They are a small share of the weights (Qwen2.5-VL-3B:
  the 0.67B-parameter vision tower and the 0.31B embedding table beside the 2.8B language model) and run once per
  image or token; int8 per channel is close to float there, so HQQ has little to gain.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openvino as ov

from nncf_hqq.llm.compression import compress_model
from nncf_hqq.llm.export import VLM_TASK
from nncf_hqq.llm.export import export_to_openvino
from nncf_hqq.llm.export import hf_model_type
from nncf_hqq.llm.layout import DETOKENIZER_XML
from nncf_hqq.llm.layout import LANGUAGE_MODEL_XML
from nncf_hqq.llm.layout import RECORD_NAME
from nncf_hqq.llm.layout import TOKENIZER_XML
from nncf_hqq.llm.layout import read_model
from nncf_hqq.llm.memory import ModelSize
from nncf_hqq.llm.memory import ir_size
from nncf_hqq.llm.options import CompressionOptions
from nncf_hqq.llm.options import JobOptions
from nncf_hqq.llm.options import OptionError
from nncf_hqq.llm.source import HF_DIR
from nncf_hqq.llm.source import HUB_ID
from nncf_hqq.llm.source import ModelSource
from nncf_hqq.llm.timing import COMPRESSION_PHASE
from nncf_hqq.llm.timing import EXPORT_PHASE
from nncf_hqq.llm.timing import SAVING_PHASE
from nncf_hqq.llm.timing import StepTimer
from nncf_hqq.llm.writing import ensure_openvino_tokenizers
from nncf_hqq.openvino.pages import releasing_file_pages
from nncf_hqq.openvino.pages import return_free_heap

#: The part names: an IR ``openvino_{name}.xml`` of the export.
LANGUAGE_MODEL = "language_model"
#: The IRs of an optimum-intel VLM export that are model parts (not the tokenizer IRs).
PART_GLOB = "openvino_*_model.xml"
#: What optimum-cli gives every part other than the language model: INT8_SYM per channel, NNCF's RTN.
OTHER_PARTS = CompressionOptions(mode="int8_sym", hqq=False)
OTHER_PARTS_RECIPE = "int8_sym per channel, NNCF's round to nearest (as optimum-cli --weight-format int4)"
#: Why the language model is compressed data-free (a message that names options).
NO_SELF_CALIBRATION = (
    "the language model of a vision-language model takes input embeddings (made by its text-embeddings model) and "
    "position ids of the image grid, not token ids, so it cannot generate its own calibration text; HQQ compresses "
    "it data-free"
)
#: How to load OUT.
VLM_LOADER = "openvino_genai.VLMPipeline(OUT, 'CPU'), or optimum.intel.OVModelForVisualCausalLM.from_pretrained(OUT)"


def part_files(ir_dir: Path) -> dict[str, Path]:
    """``{part name: IR .xml}`` of a VLM export, the language model first."""
    xmls = sorted(ir_dir.glob(PART_GLOB), key=lambda xml: (xml.name != LANGUAGE_MODEL_XML, xml.name))
    return {xml.stem.removeprefix("openvino_"): xml for xml in xmls}


def vlm_ir_size(ir_dir: Path) -> ModelSize:
    """The float weights of every part of a VLM export, from their IRs' constants (the language model's decoder
    shape is left out: the job compresses it data-free)."""
    sizes = [ir_size(read_model(xml)) for xml in part_files(ir_dir).values()]
    return ModelSize(
        parameters=sum(s.parameters for s in sizes),
        stored_bytes=sum(s.stored_bytes for s in sizes),
        largest=max((s.largest for s in sizes), default=0),
        vocabulary_parameters=sum(s.vocabulary_parameters for s in sizes),
    )


def check_vlm_options(options: JobOptions) -> None:
    """Raise ``OptionError`` for the options that need calibration data: a vision-language model's language model is
    compressed data-free (``NO_SELF_CALIBRATION``)."""
    needs_data = {
        "dataset": options.dataset is not None,
        "self_prompt_text": options.self_prompt_text is not None,
        "scale_estimation": options.scale_estimation,
        "token_rows": options.token_rows > 0,
    }
    if given := [name for name, used in needs_data.items() if used]:
        names = ", ".join(f"{{{name}}}" for name in given)
        raise OptionError(
            "{model} is a vision-language model, compressed data-free (its language model cannot generate its own "
            "text, and calibration on a text is not supported for it); drop " + names
        )


@contextmanager
def opened_vlm(source: ModelSource, timer: StepTimer, log: Callable[[str], None]) -> Iterator[Path]:
    """The VLM export dir of ``source``: a VLM IR dir as it is, or a HF model exported by optimum-intel as
    ``image-text-to-text`` (weights in the checkpoint's precision, the tokenizer IRs converted as optimum-cli
    converts them) into a temporary dir, removed on return (timed as ``EXPORT_PHASE``)."""
    if source.export is None:
        yield source.path
        return
    with tempfile.TemporaryDirectory(prefix="nncf-hqq-export-") as tmp:
        log(
            f"Exporting {source.name} to OpenVINO IRs (in the checkpoint's precision) with optimum-intel as "
            f"{VLM_TASK} ({source.export.found})"
        )
        try:
            with timer.step(EXPORT_PHASE):
                origin = source.path if source.kind == HF_DIR else source.name
                ir_dir = export_to_openvino(origin, Path(tmp) / "ov", VLM_TASK, convert_tokenizer=True)
        except Exception as err:
            where = "the Hugging Face hub (is it reachable?)" if source.kind == HUB_ID else str(source.path)
            model_type = hf_model_type(source.path) if source.kind == HF_DIR else None
            family = f" (model family {model_type!r}, {VLM_TASK})" if model_type else ""
            msg = f"could not export {source.name}{family} from {where}: {type(err).__name__}: {err}"
            raise RuntimeError(msg) from err
        yield ir_dir


@dataclass(frozen=True)
class PartDone:
    """One part compressed and written: its IR, how it was compressed, its float parameters, its seconds."""

    name: str
    file: str
    recipe: str
    options: dict[str, Any]
    parameters: int
    seconds: float


@dataclass(frozen=True)
class VLMWritten:
    """What ``write_vlm_dir`` wrote: the parts, the files copied from the export, the tokenizer IRs converted."""

    parts: tuple[PartDone, ...]
    copied: tuple[str, ...]
    tokenizer_irs: tuple[str, ...]

    def record(self) -> dict[str, Any]:
        """The ``vlm`` entry of ``nncf_hqq_compression.json``: each part's file, recipe, options, parameters and
        seconds, and why the language model is compressed data-free."""
        return {
            "task": VLM_TASK,
            "parts": {part.name: dataclasses.asdict(part) for part in self.parts},
            "language_model_data_free": NO_SELF_CALIBRATION,
        }


def write_vlm_dir(
    ir_dir: Path,
    out_dir: Path,
    language: CompressionOptions,
    *,
    tokenizer_dir: Path | None,
    log: Callable[[str], None],
    timer: StepTimer,
) -> VLMWritten:
    """Compress every part of the VLM export ``ir_dir`` into ``out_dir``, one at a time (each part's weights file's
    pages dropped as it is read, its compressed IR saved before the next is read): the language model with
    ``language``, the others with ``OTHER_PARTS``; then copy the export's other files
    (configs, preprocessor and tokenizer files, tokenizer IRs) and convert the tokenizer when the export has no
    tokenizer IRs. Timed as ``COMPRESSION_PHASE`` (each part compressed and saved) and ``SAVING_PHASE``."""
    files = part_files(ir_dir)
    if LANGUAGE_MODEL not in files:
        msg = f"{ir_dir} has no {LANGUAGE_MODEL_XML}: not a vision-language export"
        raise FileNotFoundError(msg)
    out_dir.mkdir(parents=True, exist_ok=True)
    done = []
    with timer.step(COMPRESSION_PHASE):
        for name, xml in files.items():
            if name == LANGUAGE_MODEL:
                options, recipe = language, language.describe(False)
            else:
                options, recipe = OTHER_PARTS, OTHER_PARTS_RECIPE
            start = time.perf_counter()
            with releasing_file_pages(xml.with_suffix(".bin")):
                model = read_model(xml)
                parameters = ir_size(model).parameters
                model = compress_model(model, options)
                ov.save_model(model, out_dir / xml.name, compress_to_fp16=False)
            del model
            return_free_heap()
            seconds = time.perf_counter() - start
            log(f"{name}: {recipe} ({parameters / 1e6:.1f}M parameters, {seconds:.1f} s)")
            options_record = dataclasses.asdict(options)
            done.append(PartDone(name, xml.name, recipe, options_record, parameters, seconds))
    parts = {xml.name for xml in files.values()} | {xml.with_suffix(".bin").name for xml in files.values()}
    copied = []
    with timer.step(SAVING_PHASE):
        for src in sorted(p for p in ir_dir.iterdir() if p.is_file() and p.name not in parts | {RECORD_NAME}):
            shutil.copy2(src, out_dir / src.name)
            copied.append(src.name)
    tokenizer_irs = ensure_openvino_tokenizers(out_dir, tokenizer_dir, True, log, timer)
    if not tokenizer_irs and TOKENIZER_XML in copied:
        copied_irs = [name for name in (TOKENIZER_XML, DETOKENIZER_XML) if name in copied]
        log(f"OpenVINO tokenizer IRs for openvino_genai (from the export): {', '.join(copied_irs)}")
    return VLMWritten(tuple(done), tuple(copied), tuple(tokenizer_irs))
