"""Tests of nncf_hqq.llm.staging: a directory written beside its place becomes it only when complete; an existing
one keeps what the new one does not write; a failure leaves the place as it was; what a killed run left is removed
by the next one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nncf_hqq.llm import staging


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_new_directory_appears_complete(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    with staging.staged_dir(dest) as tmp:
        (tmp / "model.bin").write_bytes(b"new")
        assert not dest.exists() and tmp.parent == tmp_path and tmp.name.startswith(".out.")
    assert _tree(dest) == {"model.bin": b"new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_an_existing_directory_is_replaced_and_keeps_what_was_not_written(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    (dest / "sub").mkdir(parents=True)
    for name, data in {"model.bin": b"old", "notes.txt": b"mine", "sub/x": b"x"}.items():
        (dest / name).write_bytes(data)
    with staging.staged_dir(dest) as tmp:
        (tmp / "model.bin").write_bytes(b"new")
    assert _tree(dest) == {"model.bin": b"new", "notes.txt": b"mine", "sub/x": b"x"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("exchange", [True, False], ids=["exchanged", "renamed-twice"])
def test_a_failure_leaves_the_place_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool) -> None:
    if not exchange:
        monkeypatch.setattr(staging, "_exchange", lambda first, second: False)
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "model.bin").write_bytes(b"old")
    with pytest.raises(OSError, match="disk full"), staging.staged_dir(dest) as tmp:
        (tmp / "model.bin").write_bytes(b"half")
        raise OSError("disk full")
    assert _tree(dest) == {"model.bin": b"old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with staging.staged_dir(dest) as tmp:
        (tmp / "model.bin").write_bytes(b"new")
    assert _tree(dest) == {"model.bin": b"new"} and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_link_to_a_directory_replaces_the_directory_it_names(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "model.bin").write_bytes(b"old")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with staging.staged_dir(tmp_path / "link") as tmp:
        (tmp / "model.bin").write_bytes(b"new")
    assert (tmp_path / "link").is_symlink() and _tree(tmp_path / "real") == {"model.bin": b"new"}


@pytest.mark.parametrize("name", ["out", "out[1]"])
def test_what_a_killed_run_left_is_removed_and_a_living_ones_kept(tmp_path: Path, name: str) -> None:
    dest = tmp_path / name
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f".{name}.{dead.stdout.strip()}.0000.partial"
    alive = tmp_path / f".{name}.{os.getppid()}.0000.partial"
    other = tmp_path / f".other.{dead.stdout.strip()}.0000.partial"
    for path in (left, alive, other):
        path.mkdir()
    logs: list[str] = []
    assert staging.remove_stale_staging(dest, logs.append) == [left]
    assert not left.exists() and alive.exists() and other.exists() and len(logs) == 1


def test_a_directory_built_once_leaves_nothing_when_the_build_fails(tmp_path: Path) -> None:
    def broken(tmp: Path) -> None:
        (tmp / "half").write_text("x")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        staging.build_dir_once(tmp_path / "target", broken)
    assert list(tmp_path.iterdir()) == []
    built = staging.build_dir_once(tmp_path / "target", lambda tmp: (tmp / "done").write_text("y"))
    assert _tree(built) == {"done": b"y"}
    assert staging.build_dir_once(built, lambda tmp: pytest.fail("built already")) == built


def test_a_directory_another_process_built_first_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "target"

    def racing(tmp: Path) -> None:
        (tmp / "mine").write_text("x")
        target.mkdir()
        (target / "theirs").write_text("y")

    assert staging.build_dir_once(target, racing) == target
    assert _tree(target) == {"theirs": b"y"} and sorted(p.name for p in tmp_path.iterdir()) == ["target"]
