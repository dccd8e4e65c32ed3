"""What MODEL is (an OpenVINO IR, a HF model dir or a hub id), worked out once per run, and the IR the compress job
reads from it: an IR as it is, a HF model exported first (in the checkpoint's precision, into a temporary dir)."""

from __future__ import annotations

import dataclasses
import re
import tempfile
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from nncf_hqq.llm.export import ExportTask
from nncf_hqq.llm.export import UnsupportedFamilyError
from nncf_hqq.llm.export import check_task
from nncf_hqq.llm.export import export_obstacle
from nncf_hqq.llm.export import export_to_openvino
from nncf_hqq.llm.export import hf_model_type
from nncf_hqq.llm.export import infer_export_task
from nncf_hqq.llm.layout import HF_CONFIG
from nncf_hqq.llm.layout import MODEL_XML
from nncf_hqq.llm.layout import is_hf_dir
from nncf_hqq.llm.layout import is_ir_dir
from nncf_hqq.llm.layout import is_vlm_ir_dir
from nncf_hqq.llm.layout import read_model
from nncf_hqq.llm.memory import ModelSize
from nncf_hqq.llm.memory import decoder_shape
from nncf_hqq.llm.memory import ir_size
from nncf_hqq.llm.memory import safetensors_size
from nncf_hqq.llm.options import OptionError
from nncf_hqq.llm.timing import EXPORT_PHASE
from nncf_hqq.llm.timing import StepTimer

#: What MODEL can be (``VLM_IR_DIR``: an optimum-intel vision-language export, ``nncf_hqq.llm.vlm``).
IR_XML, IR_DIR, HF_DIR, HUB_ID, VLM_IR_DIR = "ir_xml", "ir_dir", "hf_dir", "hub_id", "vlm_ir_dir"
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def looks_like_hub_id(name: str) -> bool:
    """Whether a string that is not an existing path reads as a Hugging Face hub id (``org/name`` or ``name``)."""
    return bool(_HUB_ID.fullmatch(name)) and not name.endswith(".xml")


def model_kind(model: str) -> str:
    """``IR_XML``, ``IR_DIR``, ``VLM_IR_DIR``, ``HF_DIR`` or ``HUB_ID``; an ``OptionError`` that says why for anything
    else."""
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".xml":
        return IR_XML
    if is_ir_dir(path):
        return IR_DIR
    if is_vlm_ir_dir(path):
        return VLM_IR_DIR
    if is_hf_dir(path):
        return HF_DIR
    if path.exists():
        msg = "{model} {name!r} is neither an OpenVINO IR (.xml, or a dir with {xml}) nor a HF model dir"
        raise OptionError(msg, name=model, xml=MODEL_XML)
    if not looks_like_hub_id(model):
        msg = "{model} {name!r} does not exist (expected an OpenVINO IR .xml or dir, a HF model dir or a hub id)"
        raise OptionError(msg, name=model)
    return HUB_ID


@dataclass(frozen=True)
class ModelSource:
    """MODEL, worked out once: what it is, where it is, and for a HF model what it is exported as (inferred once:
    one lookup on the hub for a hub id)."""

    name: str
    kind: str
    path: Path
    export: ExportTask | None = None

    @property
    def is_ir(self) -> bool:
        return self.kind in (IR_XML, IR_DIR)

    @property
    def ir_xml(self) -> Path:
        """The IR's ``.xml`` (an IR only)."""
        return self.path if self.kind == IR_XML else self.path / MODEL_XML

    @property
    def files_dir(self) -> Path | None:
        """The dir of its config and tokenizer files: an IR's dir (an ``.xml`` beside a ``config.json``), a HF dir;
        None for a hub id (its export's dir has them) or an ``.xml`` alone."""
        if self.kind == IR_XML:
            return self.path.parent if (self.path.parent / HF_CONFIG).is_file() else None
        return None if self.kind == HUB_ID else self.path

    @property
    def vlm(self) -> bool:
        """A vision-language model: an optimum-intel VLM export, or a HF model exported as one."""
        return self.kind == VLM_IR_DIR or (self.export is not None and self.export.vlm)

    @property
    def encoder(self) -> bool:
        """A HF model exported as an encoder (an IR says so only once read: ``encoders.is_encoder``)."""
        return self.export is not None and self.export.encoder

    def size(self) -> ModelSize | None:
        """The size of its weights with its decoder shape when its dir has a ``config.json``; None for a hub id or a
        HF dir without safetensors. Raises what OpenVINO raises for an IR it cannot read."""
        if self.is_ir:
            config_dir = self.path.parent if self.kind == IR_XML else self.path
            return dataclasses.replace(ir_size(read_model(self.ir_xml)), decoder=decoder_shape(config_dir))
        checkpoint = safetensors_size(self.path) if self.kind == HF_DIR else None
        return None if checkpoint is None else dataclasses.replace(checkpoint, decoder=decoder_shape(self.path))


def resolve_source(model: str | Path, task: str | None, backend: str) -> ModelSource:
    """MODEL for a compress run on ``backend`` (``"torch"`` or not), ``task`` given or None (inferred). Refused with an
    ``OptionError``: a path that is no model, ``task`` with an IR (compressed as it was exported), an IR or an encoder
    for the torch backend; with optimum's errors: a task the job does not handle, a family the installed stack
    cannot export."""
    name = str(model)
    kind = model_kind(name)
    path = Path(name).expanduser()
    if kind in (IR_XML, IR_DIR, VLM_IR_DIR):
        if backend == "torch":
            msg = (
                "{model} {name!r} is an OpenVINO IR: it is compressed with {backend=openvino} (torch needs a HF model)"
            )
            raise OptionError(msg, name=name)
        if task is not None:
            msg = "{task} applies to a HF model; {name} is an OpenVINO IR, compressed as it was exported"
            raise OptionError(msg, name=name)
        return ModelSource(name, kind, path)
    export = infer_export_task(name, task)
    check_task(export, name)
    if backend == "torch":
        if export.encoder or export.vlm:
            raise OptionError(
                "{backend=torch} compresses causal LMs; {name} is a {kind} model", name=name, kind=export.task
            )
    elif kind == HF_DIR and (model_type := hf_model_type(path)) is not None:
        obstacle = export_obstacle(model_type, export.export_task, export.library)
        if obstacle is not None:
            raise UnsupportedFamilyError(obstacle)
    return ModelSource(name, kind, path, export)


@dataclass(frozen=True)
class SourceIR:
    """The IR the job compresses and the dir of its config/tokenizer files (if any); ``export``: what a HF model was
    exported as (None for an IR given as it is)."""

    xml: Path
    files_dir: Path | None
    export: ExportTask | None = None


@contextmanager
def opened(source: ModelSource, timer: StepTimer, log: Callable[[str], None]) -> Iterator[SourceIR]:
    """The IR of ``source``: an IR as it is, or a HF model exported (weights in the checkpoint's precision) into a
    temporary dir, removed on return (timed as ``EXPORT_PHASE``, announced through ``log``); a failed export raises a
    RuntimeError naming the model, its family and where it was read from."""
    if source.is_ir:
        yield SourceIR(source.ir_xml, source.files_dir)
        return
    export = source.export
    if export is None:
        msg = f"{source.name} is a HF model without its export task: resolve it with resolve_source"
        raise ValueError(msg)
    with tempfile.TemporaryDirectory(prefix="nncf-hqq-export-") as tmp:
        log(
            f"Exporting {source.name} to OpenVINO IR (in the checkpoint's precision) with optimum-intel as "
            f"{export.describe()}"
        )
        try:
            with timer.step(EXPORT_PHASE):
                origin = source.path if source.kind == HF_DIR else source.name
                ir_dir = export_to_openvino(origin, Path(tmp) / "ov", export.export_task, export.library)
        except Exception as err:
            where = "the Hugging Face hub (is it reachable?)" if source.kind == HUB_ID else str(source.path)
            model_type = hf_model_type(source.path) if source.kind == HF_DIR else None
            family = f" (model family {model_type!r}, {export.export_task})" if model_type else ""
            msg = f"could not export {source.name}{family} from {where}: {type(err).__name__}: {err}"
            raise RuntimeError(msg) from err
        yield SourceIR(ir_dir / MODEL_XML, ir_dir, export)
