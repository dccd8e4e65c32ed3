"""Exporting a HF model (a local dir or a hub id) to an OpenVINO IR with optimum-intel: the task it is exported for
(inferred as optimum infers it), whether the installed transformers / optimum-intel can export its family, and the
export itself, with the weights uncompressed.

The heavy dependencies (transformers, optimum-intel, torch) are imported where they are needed: they come with the
``llm`` extra (``pip install -e .[llm]``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nncf_hqq.llm.layout import DETOKENIZER_XML
from nncf_hqq.llm.layout import HF_CONFIG
from nncf_hqq.llm.layout import TOKENIZER_XML
from nncf_hqq.llm.staging import build_dir_once
from nncf_hqq.openvino.pages import releasing_file_pages

LLM_TASK = "text-generation-with-past"
#: The weights files of a checkpoint that PyTorch maps into memory while optimum-intel exports it.
CHECKPOINT_WEIGHTS_SUFFIXES = (".safetensors",)
#: ``export_to_openvino``'s dtype that keeps the checkpoint's own precision (optimum-intel's ``OVConfig`` dtype).
CHECKPOINT_PRECISION = "auto"
ENCODER_TASK = "feature-extraction"
#: Vision-language models: optimum-intel exports them as a language model, a text-embeddings model and vision
#: models (``nncf_hqq.llm.vlm``). Some classes map to ``image-to-text`` in optimum's tables (Gemma 3's) while
#: optimum-intel exports their family as ``image-text-to-text``: both are taken as a VLM.
VLM_TASK = "image-text-to-text"
VLM_TASKS = (VLM_TASK, "image-to-text")

LLM_EXTRA_HINT = "install the llm extra: pip install -e '.[llm]'"


def require(module: str) -> None:
    """Raise a RuntimeError naming the ``llm`` extra when ``module`` cannot be imported."""
    try:
        __import__(module)
    except ImportError as err:
        msg = f"{module} is required here: {LLM_EXTRA_HINT}"
        raise RuntimeError(msg) from err


class UnsupportedFamilyError(RuntimeError):
    """A model family that the installed transformers / optimum-intel cannot export to OpenVINO."""


class UnsupportedTaskError(RuntimeError):
    """A HF model whose task ``nncf-hqq compress`` does not handle, or whose task cannot be inferred."""


#: optimum's library names: a transformers model, or a sentence-transformers one (optimum-intel then exports the
#: encoder with its pooling and its Dense / Normalize modules, as ``OVSentenceTransformer`` loads it).
TRANSFORMERS = "transformers"
SENTENCE_TRANSFORMERS = "sentence_transformers"
#: Files that make a HF dir a sentence-transformers model: the module list ``SentenceTransformer`` loads, and the
#: config optimum looks for (it also takes any ``sentence_*`` file, e.g. ``sentence_bert_config.json``).
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "config_sentence_transformers.json")
#: optimum task names ``compress`` handles: causal LMs (exported with their KV cache) and encoders (exported as
#: feature extractors; ``sentence-similarity`` is the sentence-transformers name of the same export).
GENERATION_TASKS = ("text-generation", LLM_TASK)
ENCODER_TASKS = (ENCODER_TASK, "sentence-similarity")


@dataclass(frozen=True)
class ExportTask:
    """What a HF model is exported as: optimum's ``task`` and ``library``, and where that came from (``found``)."""

    task: str
    library: str
    found: str

    @property
    def encoder(self) -> bool:
        return self.task in ENCODER_TASKS

    @property
    def vlm(self) -> bool:
        return self.task in VLM_TASKS

    @property
    def export_task(self) -> str:
        """The task given to optimum-intel's export: an LLM with its KV cache, an encoder's feature extraction, or a
        vision-language model's parts."""
        if self.vlm:
            return VLM_TASK
        return ENCODER_TASK if self.encoder else LLM_TASK

    def describe(self) -> str:
        library = "sentence-transformers, with its pooling" if self.library == SENTENCE_TRANSFORMERS else self.library
        return f"{self.task} ({library}; {self.found})"


def hf_library(hf_dir: Path) -> str:
    """optimum's library of a HF model dir (``TasksManager.infer_library_from_model``), and sentence-transformers
    for a dir with a ``modules.json`` too."""
    require("optimum.exporters")
    from optimum.exporters.tasks import TasksManager

    if any((hf_dir / name).is_file() for name in SENTENCE_TRANSFORMERS_FILES):
        return SENTENCE_TRANSFORMERS
    return str(TasksManager.infer_library_from_model(str(hf_dir)))


def infer_export_task(model: str | Path, task: str | None = None) -> ExportTask:
    """The task a HF model dir (or hub id) is exported for, inferred as optimum infers it: sentence-transformers
    models are feature extractors; otherwise the class the config's ``architectures`` names gives the task
    (``TasksManager.infer_task_from_model``; a hub id: the hub's metadata). ``task`` (``--task``) overrides it.
    A config naming no architecture is taken as a causal LM. Raises UnsupportedTaskError when it cannot be inferred.
    """
    path = Path(model).expanduser()
    local = path.is_dir()
    try:
        library = hf_library(path) if local else _hub_library(str(model))
    except Exception as err:  # the hub, or an unreadable dir
        msg = f"cannot infer the task of {model} ({type(err).__name__}: {err}); pass --task"
        raise UnsupportedTaskError(msg) from err
    if task is not None:
        return ExportTask(task, library if task in ENCODER_TASKS else TRANSFORMERS, "--task")
    if library == SENTENCE_TRANSFORMERS:
        return ExportTask(ENCODER_TASK, library, "a sentence-transformers model")
    if library != TRANSFORMERS:
        msg = f"{model} is a {library} model; nncf-hqq compress exports transformers and sentence-transformers models"
        raise UnsupportedTaskError(msg)
    return _task_from_architectures(path) if local else _hub_task(str(model))


def _task_from_architectures(hf_dir: Path) -> ExportTask:
    """The task of the class the first of the config's ``architectures`` names (optimum's class-to-task maps)."""
    import transformers
    from optimum.exporters.tasks import TasksManager

    config = json.loads((hf_dir / HF_CONFIG).read_text())
    architectures = config.get("architectures") or []
    if not architectures:
        return ExportTask("text-generation", TRANSFORMERS, "config.json names no architecture: taken as a causal LM")
    name = str(architectures[0])
    model_class = getattr(transformers, name, None)
    if model_class is None and config.get("auto_map"):
        msg = (
            f"{hf_dir} comes with its own model code ({name}, its config's auto_map), which nncf-hqq compress does "
            "not run: export it with `optimum-cli export openvino --trust-remote-code --model MODEL --weight-format "
            f"fp16 DIR` (with --task {VLM_TASK} for a vision-language model) and compress DIR"
        )
        raise UnsupportedTaskError(msg)
    if model_class is None:
        msg = f"cannot infer the task of {hf_dir}: transformers has no class {name!r} (its config's architecture)"
        raise UnsupportedTaskError(f"{msg}; pass --task text-generation, --task {ENCODER_TASK} or --task {VLM_TASK}")
    try:
        task = TasksManager.infer_task_from_model(model_class)
    except ValueError as err:
        msg = f"optimum infers no task from the architecture {name!r} of {hf_dir}; pass --task"
        raise UnsupportedTaskError(msg) from err
    return ExportTask(str(task), TRANSFORMERS, f"architecture {name}")


def _hub_library(hub_id: str) -> str:
    from optimum.exporters.tasks import TasksManager

    return str(TasksManager.infer_library_from_model(hub_id))


def _hub_task(hub_id: str) -> ExportTask:
    from optimum.exporters.tasks import TasksManager

    try:
        task = TasksManager.infer_task_from_model(hub_id, library_name=TRANSFORMERS)
    except Exception as err:
        msg = f"cannot infer the task of {hub_id} from the Hugging Face hub ({type(err).__name__}); pass --task"
        raise UnsupportedTaskError(msg) from err
    return ExportTask(str(task), TRANSFORMERS, "the hub's metadata")


def check_task(export: ExportTask, model: str | Path) -> None:
    """Raise UnsupportedTaskError, in one line naming the task, unless ``compress`` handles it (a causal LM, an
    encoder or a vision-language model)."""
    if export.task in GENERATION_TASKS or export.encoder or export.vlm:
        return
    msg = (
        f"{model} is a {export.task} model ({export.found}): nncf-hqq compress handles text-generation (causal LMs), "
        f"{ENCODER_TASK} (encoders, sentence embeddings) and {VLM_TASK} (vision-language) models; --task overrides "
        "the inferred task"
    )
    raise UnsupportedTaskError(msg)


def export_obstacle(model_type: str, task: str = LLM_TASK, library: str = TRANSFORMERS) -> str | None:
    """Why the installed transformers and optimum-intel cannot export a ``model_type`` model for ``task`` (as a
    ``library`` model), in one line with what to install instead; None when neither says anything against it.

    optimum-intel's export config of a family may bound the transformers version (``MIN_TRANSFORMERS_VERSION`` /
    ``MAX_TRANSFORMERS_VERSION``); the export itself would stop there, after the model was loaded. A
    sentence-transformers model is exported through one config for every family (its first module, traced), which
    needs the sentence-transformers package.
    """
    require("optimum.intel")
    import optimum.exporters.openvino  # noqa: F401  (registers the OpenVINO export configs)
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    optimum_intel = importlib.metadata.version("optimum-intel")
    installed = f"transformers {transformers.__version__} / optimum-intel {optimum_intel}"
    head = f"cannot export model family {model_type!r} with {installed}"
    export = "export with `optimum-cli export openvino --model MODEL --weight-format fp32 IR`, run nncf-hqq on IR"
    newer = f"a newer optimum-intel may: in a separate environment pip install -U optimum-intel transformers, {export}"
    if model_type not in CONFIG_MAPPING_NAMES:
        return f"{head}: transformers does not know it; {newer}"
    if library == SENTENCE_TRANSFORMERS:
        if importlib.util.find_spec("sentence_transformers") is None:
            return f"{head}: its sentence-transformers export needs sentence-transformers; {LLM_EXTRA_HINT}"
        return None
    return _export_config_obstacle(model_type, task, head, newer, optimum_intel)


def _export_config_obstacle(model_type: str, task: str, head: str, newer: str, optimum_intel: str) -> str | None:
    """``export_obstacle`` of a transformers model: optimum-intel's export config for the family and task, and the
    transformers versions it accepts."""
    import transformers
    from optimum.exporters.tasks import TasksManager
    from packaging.version import Version

    try:
        constructor = TasksManager.get_exporter_config_constructor(
            exporter="openvino", model_type=model_type, task=task, library_name=TRANSFORMERS
        )
    except (KeyError, ValueError):
        return f"{head}: optimum-intel has no OpenVINO export of it for {task}; {newer}"
    config_class = getattr(constructor, "func", constructor)
    low, high = (_version_text(getattr(config_class, f"{b}_TRANSFORMERS_VERSION", None)) for b in ("MIN", "MAX"))
    if low is not None and high is not None and Version(low) > Version(high):
        return f"{head}: its export config asks for transformers >= {low} and <= {high} at once; {newer}"
    current = Version(transformers.__version__)
    if (low is None or current >= Version(low)) and (high is None or current <= Version(high)):
        return None
    wanted = "transformers" + ",".join([*([f">={low}"] if low else []), *([f"<={high}"] if high else [])])
    export = "export with `optimum-cli export openvino --model MODEL --weight-format fp32 IR`, run nncf-hqq on IR"
    return (
        f"{head}: its OpenVINO export needs {wanted}; in a separate environment pip install '{wanted}' "
        f"optimum-intel=={optimum_intel}, {export}"
    )


def _version_text(version: Any) -> str | None:
    """A version bound as text (optimum-intel stores str or ``packaging.version.Version``)."""
    if version is None:
        return None
    return str(getattr(version, "base_version", version))


def hf_model_type(hf_dir: Path) -> str | None:
    """The ``model_type`` of a HF checkpoint dir's ``config.json`` (None when absent or unreadable)."""
    try:
        value = json.loads((hf_dir / HF_CONFIG).read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def export_to_openvino(
    hf_dir_or_id: str | Path,
    out_dir: str | Path,
    task: str = LLM_TASK,
    library_name: str | None = None,
    dtype: str = CHECKPOINT_PRECISION,
    convert_tokenizer: bool = False,
) -> Path:
    """Export a HF model (local dir or hub id) with optimum-intel to an OpenVINO IR dir, no weight compression.

    The LLM export is stateful (inputs ``input_ids``, ``attention_mask``, ``position_ids``, ``beam_idx``), as
    optimum-intel does by default. Its automatic int8 compression of >1B-parameter models is switched off by passing
    an explicit ``OVConfig`` without a quantization config. The tokenizer files are copied alongside.
    ``library_name``: optimum's (``SENTENCE_TRANSFORMERS`` exports the encoder with its pooling and Dense /
    Normalize modules, outputs ``token_embeddings`` and ``sentence_embedding``); None lets optimum-intel choose
    (transformers, also for a sentence-transformers dir).
    ``dtype``: ``CHECKPOINT_PRECISION`` keeps the weights in the checkpoint's own precision (a bf16 checkpoint gives
    bf16 constants, half the memory of fp32, the values unchanged), as ``optimum-cli --weight-format int4`` does;
    ``"fp32"`` writes fp32 constants (the accuracy protocol's models).
    ``convert_tokenizer``: optimum-intel also writes the OpenVINO tokenizer IRs, as ``optimum-cli`` does (for a
    vision-language model it puts the processor's chat template into them).
    While optimum-intel converts the model, the pages of the checkpoint's weights files that PyTorch maps are dropped
    as they are read (``releasing_file_pages``, as long as PyTorch has written none of them): they would otherwise
    stay resident until the export ends, and count in the process's peak beside what the export itself holds.
    """
    out = Path(out_dir)
    if dtype not in (CHECKPOINT_PRECISION, "fp32"):
        msg = f"dtype must be {CHECKPOINT_PRECISION!r} or 'fp32', got {dtype!r}"
        raise ValueError(msg)

    def build(tmp: Path) -> None:
        require("optimum.intel")
        from optimum.exporters.openvino import main_export
        from optimum.intel import OVConfig

        ov_config = OVConfig(dtype=dtype, quantization_config=None)
        with warnings.catch_warnings(), releasing_file_pages(suffixes=CHECKPOINT_WEIGHTS_SUFFIXES):
            warnings.filterwarnings("ignore", category=_tracer_warning())
            main_export(
                str(hf_dir_or_id),
                tmp,
                task=task,
                ov_config=ov_config,
                convert_tokenizer=convert_tokenizer,
                library_name=library_name,
            )
        _check_uncompressed(tmp, fp32=dtype == "fp32")

    return build_dir_once(out, build)


def _tracer_warning() -> type[Warning]:
    """PyTorch's warning about what tracing cannot record, which optimum-intel's export raises a few times over code
    of transformers and optimum that the user cannot change (the exported model is right)."""
    from torch.jit import TracerWarning

    return TracerWarning


def _check_uncompressed(ir_dir: Path, fp32: bool = True) -> None:
    """Raise if the export left integer (int8/int4) weights or a ``*_compressed.xml`` behind, or, with ``fp32``,
    f16/bf16 ones."""
    import openvino as ov

    leftovers = sorted(p.name for p in ir_dir.glob("*_compressed.xml"))
    tokenizers = {TOKENIZER_XML, DETOKENIZER_XML}
    if leftovers:
        msg = f"optimum-intel compressed the export ({leftovers}); weight compression must be off"
        raise RuntimeError(msg)
    low_precision = {ov.Type.i8, ov.Type.u8, ov.Type.i4, ov.Type.u4}
    if fp32:
        low_precision |= {ov.Type.f16, ov.Type.bf16}
    for xml in ir_dir.glob("*.xml"):
        if xml.name in tokenizers:
            continue
        model = ov.Core().read_model(xml)
        big = [op for op in model.get_ops() if op.get_type_name() == "Constant" and len(op.get_output_shape(0)) == 2]
        if any(op.get_element_type() in low_precision for op in big):
            expected = "fp32" if fp32 else "float"
            msg = f"{xml} holds low-precision weight constants; expected {expected}"
            raise RuntimeError(msg)


def weight_precision(model: Any) -> str:
    """The element type most of an OpenVINO model's 2D float constants (its weights) hold: ``"f32"``, ``"bf16"``
    or ``"f16"`` (``"f32"`` when it has none)."""
    counts: dict[str, int] = {}
    for op in model.get_ops():
        if op.get_type_name() == "Constant" and len(op.get_output_shape(0)) == 2:
            name = op.get_element_type().get_type_name()
            if name in ("f32", "bf16", "f16"):
                counts[name] = counts.get(name, 0) + math.prod(op.get_output_shape(0))
    return max(counts, key=lambda k: counts[k]) if counts else "f32"


def export_encoder_to_openvino(model_dir: str | Path, out_dir: str | Path) -> Path:
    """Export a BERT-like sentence encoder (feature-extraction task: ``last_hidden_state``) to an fp32 IR dir."""
    return export_to_openvino(model_dir, out_dir, task=ENCODER_TASK, dtype="fp32")
