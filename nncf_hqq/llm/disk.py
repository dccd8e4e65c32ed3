"""The disk space each phase of the compress job writes, per filesystem, checked before anything starts.

A HF model is exported into the system's temporary directory (``tempfile.gettempdir()``; ``TMPDIR`` moves it) and
its IR stays there for the whole job. The INT8 stand-in, the output check's recorded logits and its candidates go
to a scratch directory beside OUT, and OUT is built beside its place before it is moved in
(``nncf_hqq.llm.staging``). Where two of these share a filesystem their bytes add up. A job that would fill a disk
otherwise fails after minutes or hours with no more than OpenVINO's ``basic_ios::clear: iostream error``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nncf_hqq.llm.memory import GIB
from nncf_hqq.llm.memory import ModelSize
from nncf_hqq.llm.options import JobError
from nncf_hqq.llm.timing import EXPORT_PHASE
from nncf_hqq.llm.timing import OUTPUT_CHECK_PHASE
from nncf_hqq.llm.timing import STAND_IN_PHASE
from nncf_hqq.self_calibration import SelfCalibration

#: The phase that writes OUT.
SAVING_PHASE = "saving"
#: Bytes of one recorded logit (float32).
LOGIT_BYTES = 4
#: Candidates of the output check on disk at once: the one kept so far and the one being evaluated.
CANDIDATES_ON_DISK = 2
#: What the export writes, in ``TMPDIR`` (the refusal's hint tells it from the files beside OUT by this name).
EXPORTED_IR = "exported IR"


@dataclass(frozen=True)
class DiskUse:
    """What one phase of the job holds on disk at once: ``(directory, what, bytes)`` per file or set of files."""

    phase: str
    files: tuple[tuple[Path, str, int], ...]


def compress_disk_uses(
    size: ModelSize,
    export: bool,
    generation: SelfCalibration | None,
    held_out: int,
    stand_in: bool,
    temp_dir: Path,
    out: Path,
) -> list[DiskUse]:
    """The phases of the compress job that write to disk and what each holds there: the export (``export``: a HF
    model, into ``temp_dir``), the INT8 stand-in (``stand_in`` and self-calibrated with ``generation``), the output
    check (``held_out`` sequences of ``generation.seq_len`` tokens; 0: no check) and the saving of ``out``."""
    scratch = out.parent  # the stand-in and the output check's files (compress_job)
    exported = [(temp_dir, EXPORTED_IR, size.stored_bytes)] if export else []
    held = list(exported)  # what stays on disk from one phase to the next
    uses = [DiskUse(EXPORT_PHASE, tuple(exported))] if export else []
    if generation is not None and stand_in:
        first_part = (size.stored_bytes + size.stand_in_bytes()) // 2  # half the weights still as stored
        stand_in_file = (scratch, "INT8 stand-in", size.stand_in_bytes())
        uses.append(DiskUse(STAND_IN_PHASE, (*held, (scratch, "the stand-in's first part", first_part), stand_in_file)))
        held.append(stand_in_file)
    if generation is not None and held_out:
        vocabulary = size.decoder.vocabulary if size.decoder is not None else 0
        logits = held_out * generation.seq_len * vocabulary * LOGIT_BYTES
        checking = (
            (scratch, "the float model's recorded logits", logits),
            (scratch, f"{CANDIDATES_ON_DISK} compressed candidates", CANDIDATES_ON_DISK * size.compressed_bytes()),
        )
        uses.append(DiskUse(OUTPUT_CHECK_PHASE, (*held, *checking)))
    # the stand-in and the check's files are removed before OUT is saved
    uses.append(DiskUse(SAVING_PHASE, (*exported, (scratch, "compressed model", size.compressed_bytes()))))
    return uses


def existing_ancestor(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (a directory the job will create is on its filesystem)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


@dataclass(frozen=True)
class Shortfall:
    """A phase that writes more to one filesystem (``where``: a directory on it) than is free there."""

    phase: str
    where: Path
    needed: int
    free: int
    files: tuple[tuple[str, int], ...]

    def describe(self) -> str:
        parts = ", ".join(f"{what} {size / GIB:.1f}" for what, size in self.files)
        return (
            f"{self.phase} writes about {self.needed / GIB:.1f} GiB to the disk of {self.where} ({parts}), "
            f"{self.free / GIB:.1f} GiB is free there"
        )


def device_of(directory: Path) -> int:
    """The filesystem (device number) that holds ``directory``."""
    return os.stat(directory).st_dev


def free_bytes(directory: Path) -> int:
    """Bytes free to an unprivileged writer on the filesystem of ``directory`` (``shutil.disk_usage``)."""
    return int(shutil.disk_usage(directory).free)


def shortfalls(uses: Sequence[DiskUse]) -> list[Shortfall]:
    """The phases whose files on one filesystem add up to more than is free on it (``free_bytes``); the largest per
    filesystem, each filesystem once."""
    largest: dict[int, Shortfall] = {}
    for use in uses:
        by_device: dict[int, list[tuple[Path, str, int]]] = {}
        for directory, what, size in use.files:
            place = existing_ancestor(directory)
            by_device.setdefault(device_of(place), []).append((place, what, size))
        for device, files in by_device.items():
            needed = sum(size for _, _, size in files)
            free = free_bytes(files[0][0])
            if needed > free and (device not in largest or needed > largest[device].needed):
                where = files[-1][0]
                largest[device] = Shortfall(use.phase, where, needed, free, tuple((w, s) for _, w, s in files))
    return list(largest.values())


class NotEnoughDiskError(JobError, RuntimeError):
    """A phase would write more than a filesystem has free: refused before anything starts."""


def check_compress_disk(
    model: str,
    uses: Sequence[DiskUse],
    log: Callable[[str], None],
    refuse: bool = True,
) -> list[Shortfall]:
    """Logs the disk space the largest phase writes and, with ``refuse``, raises ``NotEnoughDiskError`` naming every
    filesystem that is short and where the files could go instead; returns the shortfalls."""
    if uses:
        peak = max(uses, key=lambda use: sum(size for _, _, size in use.files))
        total = sum(size for _, _, size in peak.files)
        log(f"disk: about {total / GIB:.1f} GiB at most ({peak.phase})")
    short = shortfalls(uses)
    if not short or not refuse:
        return short
    temp = existing_ancestor(Path(tempfile.gettempdir()))
    hints = []
    if any(what == EXPORTED_IR for s in short for what, _ in s.files):
        hints.append(f"TMPDIR=DIR moves the export out of {temp}")
    if any(what != EXPORTED_IR for s in short for what, _ in s.files):
        hints.append("an {out} on a larger disk takes the rest")
    msg = "not enough disk space for {model_path}: {needs}; " + "; ".join(hints) + " ({no_disk_check} runs it anyway)"
    needs = "; ".join(s.describe() for s in short)
    raise NotEnoughDiskError(msg, model_path=model, needs=needs)
