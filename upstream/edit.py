"""Anchored textual edits of NNCF's files: each anchor is quoted exactly and must be found exactly once, so that
another NNCF release fails loudly instead of being patched in the wrong place."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: The anchor of ``append``: the end of the file.
END_OF_FILE = ""


class EditError(Exception):
    """An anchor not found exactly once: the source is not the release the edits were written for."""


@dataclass(frozen=True)
class Edit:
    """Replace ``anchor`` (found exactly once in ``file``) with ``new``; an empty anchor appends ``new``."""

    file: str
    anchor: str
    new: str


def insert_after(file: str, anchor: str, text: str) -> Edit:
    return Edit(file, anchor, anchor + text)


def insert_before(file: str, anchor: str, text: str) -> Edit:
    return Edit(file, anchor, text + anchor)


def append(file: str, text: str) -> Edit:
    return Edit(file, END_OF_FILE, text)


def apply_edits(root: Path, edits: list[Edit]) -> list[str]:
    """Applies the edits to the tree at ``root``; returns the files changed, in order of their first edit."""
    changed: list[str] = []
    for edit in edits:
        path = root / edit.file
        if not path.exists():
            msg = f"{edit.file}: no such file in the tree"
            raise EditError(msg)
        text = path.read_text()
        if edit.anchor == END_OF_FILE:
            text = text + edit.new
        else:
            count = text.count(edit.anchor)
            if count != 1:
                first_line = edit.anchor.strip().splitlines()[0]
                msg = f"{edit.file}: anchor found {count} times (expected once): {first_line!r}"
                raise EditError(msg)
            text = text.replace(edit.anchor, edit.new)
        path.write_text(text)
        if edit.file not in changed:
            changed.append(edit.file)
    return changed
