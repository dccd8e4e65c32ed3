"""Writing a directory beside its place and moving it in only when complete, so that a run that fails or is killed
leaves the place as it was: no half-written directory, no new file beside an old one.

The directory is built in a hidden sibling (``.NAME.PID.XXXX.partial``, on the same filesystem), then renamed into
place. When the place already holds a directory, the entries the new one does not write are carried over (hard
links), and the two are exchanged in one step (Linux's ``renameat2(RENAME_EXCHANGE)``; elsewhere two renames, the
old directory moved aside first), then the old one is removed. A sibling left by a killed run (its process gone)
is removed by the next run for the same place.
"""

from __future__ import annotations

import ctypes
import errno
import glob
import os
import secrets
import shutil
import sys
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

STAGING_SUFFIX = ".partial"
#: ``renameat2``'s arguments: relative to the working directory, and exchange the two paths.
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def staging_prefix(dest: Path) -> str:
    return f".{dest.name}."


def _owner_pid(staging: Path, dest: Path) -> int | None:
    """The process id in a staging dir's name (None when it has none)."""
    pid = staging.name[len(staging_prefix(dest)) :].partition(".")[0]
    return int(pid) if pid.isdigit() else None


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_staging(dest: Path, log: Callable[[str], None] | None = None) -> list[Path]:
    """Remove the staging dirs of ``dest`` left by runs whose process is gone; returns them."""
    removed = []
    for staging in sorted(dest.parent.glob(f"{glob.escape(staging_prefix(dest))}*{STAGING_SUFFIX}")):
        pid = _owner_pid(staging, dest)
        if staging.is_dir() and pid is not None and not _process_alive(pid):
            if log is not None:
                log(f"removing {staging}, left by an earlier run that did not finish")
            shutil.rmtree(staging, ignore_errors=True)
            removed.append(staging)
    return removed


def _link_tree(source: Path, target: Path) -> None:
    """``source`` (a file, link or directory) hard-linked at ``target``; copied where the filesystem cannot link."""
    if source.is_symlink():
        os.symlink(os.readlink(source), target)
    elif source.is_dir():
        target.mkdir()
        for entry in source.iterdir():
            _link_tree(entry, target / entry.name)
    else:
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)


def _exchange(first: Path, second: Path) -> bool:
    """Exchange two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # the filesystem or kernel cannot exchange
        return False
    raise OSError(code, os.strerror(code), str(first), None, str(second))


def _move_into_place(staging: Path, dest: Path) -> None:
    """``staging`` becomes ``dest``; the entries of an existing ``dest`` that ``staging`` lacks are carried over."""
    if not dest.exists():
        os.rename(staging, dest)
        return
    for entry in dest.iterdir():
        if not (staging / entry.name).exists() and not (staging / entry.name).is_symlink():
            _link_tree(entry, staging / entry.name)
    if not _exchange(staging, dest):
        aside = _new_sibling(dest)
        os.rename(dest, aside / dest.name)
        os.rename(staging, dest)
        staging = aside
    shutil.rmtree(staging, ignore_errors=True)  # the old directory


def _new_sibling(dest: Path) -> Path:
    """A new empty staging dir beside ``dest``, named after it and this process (permissions as ``mkdir`` gives)."""
    while True:
        staging = dest.parent / f"{staging_prefix(dest)}{os.getpid()}.{secrets.token_hex(4)}{STAGING_SUFFIX}"
        try:
            staging.mkdir()
        except FileExistsError:
            continue
        return staging


@contextmanager
def staged_dir(dest: Path, log: Callable[[str], None] | None = None) -> Iterator[Path]:
    """An empty directory beside ``dest`` to write into; when the block completes it becomes ``dest`` (an existing
    ``dest`` keeps the entries the block did not write). When the block raises, it is removed and ``dest`` is left
    as it was. ``dest`` is resolved first (a link to a directory: the directory it names is replaced)."""
    dest = Path(dest).expanduser().resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(dest, log)
    staging = _new_sibling(dest)
    try:
        yield staging
        _move_into_place(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def build_dir_once(dest: Path, build: Callable[[Path], None]) -> Path:
    """Create ``dest`` by ``build(tmp)`` into a staging dir beside it (``staged_dir``); no-op when ``dest`` exists.
    When another process completes ``dest`` first, its directory is kept and this one's dropped."""
    if dest.is_dir():
        return dest
    try:
        with staged_dir(dest) as tmp:
            build(tmp)
            if dest.is_dir():
                raise FileExistsError(dest)
    except FileExistsError:
        if not dest.is_dir():
            raise
    return dest
