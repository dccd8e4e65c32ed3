"""Dropping the resident pages of weights read from a memory-mapped IR file, once they have been read.

OpenVINO maps an IR's ``.bin`` file into memory (read-only, shared) and its constants are views of that mapping.
Every page a compression reads stays resident, and counted in the process's memory, until the model is freed: at
the end, the whole checkpoint. ``release_file_pages`` tells the kernel the process no longer needs the pages of an
array that lies in such a mapping (``madvise(MADV_DONTNEED)``). Nothing changes for the program: the mapping
stays, and a later read of the array faults the same bytes in again from the file. Anything else (an array in
anonymous or writable memory, another operating system) is left as it is: there, dropping pages could lose data.
The one writable kind dropped is a copy-on-write file mapping none of whose pages has been written (how PyTorch maps
a checkpoint's ``.safetensors`` files while optimum-intel exports it), checked on every drop.

OpenVINO's CPU plugin packs a float model's weights into its own memory during the compiled model's first inference,
reading them from the mapping: without ``releasing_file_pages`` around it, the process holds the whole file's pages
and the packed copy at once, twice the weights.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import mmap
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

MADV_DONTNEED = 4
#: Reclaims pages without ever discarding data (Linux 5.4+): a clean file page leaves the process (and is read from
#: the file again when touched), an anonymous page is swapped out or, without swap, kept. Used where the range comes
#: from ``/proc/self/maps`` and its owner may unmap it, and the allocator reuse the addresses, before the call.
MADV_PAGEOUT = 21
#: Arrays smaller than this are not worth a system call.
MIN_BYTES = 1 << 20


@functools.cache
def _malloc_trim() -> Any | None:
    """glibc's ``malloc_trim`` (Linux with glibc), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # another C library (musl)
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function


def return_free_heap() -> bool:
    """Gives the memory the C allocator holds free back to the system (glibc's ``malloc_trim(0)``); returns whether
    it could. glibc keeps freed blocks below its mmap threshold (which grows to 32 MiB as large blocks are freed)
    for later allocations: after a phase that allocated and freed gigabytes of them (a compiled model's buffers,
    NNCF's statistics), they would otherwise count in the process's memory through the next phase."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@functools.cache
def _madvise() -> Any | None:
    """libc's ``madvise`` on Linux, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:  # the process's own symbols (libc is loaded): no ``find_library``, which forks to run ldconfig
        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


def read_only_file_mapping(begin: int, end: int, maps: str) -> bool:
    """Whether ``[begin, end)`` lies within one mapping of ``maps`` (``/proc/self/maps``'s text) that is a file,
    mapped without write permission. The lines are in address order, so the mapping that starts last at or before
    ``begin`` is found by bisection: a process holds thousands of mappings (a thread's stack, every library), and
    parsing all of them took 10-15 ms a call (two calls per weight)."""
    lines = maps.splitlines()
    index = bisect.bisect_right(lines, begin, key=lambda line: int(line[: line.index("-")], 16)) - 1
    if index < 0:
        return False
    fields = lines[index].split(maxsplit=5)
    low, high = (int(x, 16) for x in fields[0].split("-"))
    if not (low <= begin and end <= high):
        return False
    path = fields[5].strip() if len(fields) == 6 else ""
    return fields[1][1] == "-" and path.startswith("/") and not path.endswith("(deleted)")


def release_file_pages(array: np.ndarray) -> bool:
    """Drops the resident whole pages of ``array`` when it lies in a read-only file mapping; returns whether it did.

    Only the pages entirely inside the array are dropped (its neighbours' bytes stay resident).
    """
    address = _candidate_address(array)
    if address is None or not read_only_file_mapping(address, address + array.nbytes, _read_maps()):
        return False
    return _drop_pages(address, array.nbytes)


def _drop_pages(address: int, size: int) -> bool:
    """``madvise(MADV_DONTNEED)`` of the whole pages in ``[address, address + size)``, which must lie in a read-only
    file mapping."""
    madvise = _madvise()
    page = mmap.PAGESIZE
    begin = -(-address // page) * page
    end = (address + size) // page * page
    return (
        madvise is not None
        and end > begin
        and madvise(ctypes.c_void_p(begin), ctypes.c_size_t(end - begin), MADV_DONTNEED) == 0
    )


def _candidate_address(array: np.ndarray) -> int | None:
    """The address of an array that may lie in a file mapping and is worth a system call, else None."""
    if _madvise() is None or array.nbytes < MIN_BYTES or array.flags.owndata or not array.flags.c_contiguous:
        return None
    return int(array.__array_interface__["data"][0])


def _read_maps() -> str:
    with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
        return maps.read()


class FileMappingSnapshot:
    """The process's mappings as they were at its first lookup, to release many arrays with one read of
    ``/proc/self/maps`` (10-20 ms with OpenVINO loaded) where most lie outside any file mapping, as every weight of
    a model built or converted in memory does.

    ``release`` skips an array that lay outside every read-only file mapping then. The snapshot is exact for an
    array that existed when it was taken: an array's memory keeps its mapping while the array lives. A newer array
    may lie where a file was mapped then and anonymous memory is now, so with ``confirm`` (for callers that cannot
    tell) an array the snapshot places in a file goes to ``release_file_pages``, which reads the mappings again
    before it drops anything; without it (every array predates the snapshot) its pages are dropped at once.
    """

    def __init__(self, confirm: bool = True) -> None:
        self._maps: str | None = None
        self.confirm = confirm

    def release(self, array: np.ndarray) -> bool:
        """``release_file_pages`` of ``array``, skipped without a system call when the snapshot places it outside
        every read-only file mapping."""
        address = _candidate_address(array)
        if address is None:
            return False
        if self._maps is None:
            self._maps = _read_maps()
        if not read_only_file_mapping(address, address + array.nbytes, self._maps):
            return False
        return release_file_pages(array) if self.confirm else _drop_pages(address, array.nbytes)


def release_model_pages(model: Any) -> int:
    """Drops the resident pages of every constant of an OpenVINO model that lies in a read-only file mapping (its
    IR file): after compiling it in another precision, the compiled model holds its own copy. Returns how many
    constants were released."""
    released = 0
    snapshot = FileMappingSnapshot(confirm=False)  # the model's constants all predate it
    for op in model.get_ops():
        if op.get_type_name() == "Constant" and snapshot.release(op.get_tensor_view().data):
            released += 1
    return released


def release_file_mappings(*paths: str | os.PathLike[str], suffixes: tuple[str, ...] = ()) -> int:
    """Drops the resident pages of this process's mappings of the files ``paths``, and of any file whose name ends
    with one of ``suffixes``, whoever holds them: a model compressed by code that does not release its weights'
    pages as it goes (NNCF's own writer) keeps the pages it read resident until it is freed; PyTorch keeps a
    checkpoint's ``.safetensors`` files mapped while optimum-intel exports it.

    Read-only mappings (an IR's ``.bin``, which OpenVINO maps shared) are dropped whole. A copy-on-write mapping
    (private and writable, as PyTorch maps a checkpoint) is dropped only while none of its pages has been written
    (``unwritten_private_mappings``): its resident pages are then the file's own bytes. A written page is the
    process's data, so such a mapping is left as it is. As with ``release_file_pages``, a later read faults the same
    bytes in again. Returns the size of the mappings dropped, in bytes.

    The process does not hold these mappings: their owner may unmap one between the read of ``/proc/self/maps`` and
    the call, and the allocator map other memory at its addresses. So the call is ``MADV_PAGEOUT``
    (``drop_range``), which never discards data, not ``MADV_DONTNEED``, which would zero that memory (a test's
    export crashed in PyTorch so)."""
    madvise = _madvise()
    targets = {os.path.realpath(path) for path in paths}
    targets = {target for target in targets if os.path.isfile(target)}
    if madvise is None or not (targets or suffixes):
        return 0
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        lines = maps.read().splitlines()
    read_only: list[str] = []
    private: list[str] = []
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) != 6:
            continue
        path = fields[5].strip()
        if path not in targets and not (suffixes and path.startswith("/") and path.endswith(suffixes)):
            continue
        if fields[1][:2] == "r-":
            read_only.append(fields[0])
        elif fields[1][:2] == "rw" and fields[1][3] == "p":
            private.append(fields[0])
    if private:
        with open("/proc/self/smaps", encoding="utf-8", errors="replace") as smaps:
            read_only.extend(unwritten_private_mappings(private, smaps.read()))
    released = 0
    for addresses in read_only:
        low, high = (int(x, 16) for x in addresses.split("-"))
        if drop_range(low, high):
            released += high - low
    return released


def drop_range(low: int, high: int) -> bool:
    """Reclaims the resident pages of the address range ``[low, high)`` (page-aligned) with ``MADV_PAGEOUT``, which
    keeps every byte the process can read: clean file pages are read from their file again, anonymous ones stay (or
    are swapped). Returns whether the kernel took it (False on systems without ``madvise`` or without
    ``MADV_PAGEOUT``, Linux before 5.4, and for a range no longer mapped)."""
    madvise = _madvise()
    return madvise is not None and madvise(ctypes.c_void_p(low), ctypes.c_size_t(high - low), MADV_PAGEOUT) == 0


def unwritten_private_mappings(addresses: list[str], smaps: str) -> list[str]:
    """The copy-on-write mappings among ``addresses`` (each as ``/proc/self/maps`` writes its range, ``low-high``)
    none of whose pages has been written, by ``smaps`` (``/proc/self/smaps``'s text): a written page of a private
    file mapping becomes an anonymous copy, so the mapping's ``Anonymous:`` field is 0 kB exactly while every
    resident page is the file's. A mapping missing from ``smaps`` (unmapped since) is left out."""
    text = "\n" + smaps
    unwritten = []
    for range_text in addresses:
        header = text.find(f"\n{range_text} ")
        field = text.find("\nAnonymous:", header + 1)  # every mapping's block has one: the first is this one's
        if header < 0 or field < 0:
            continue
        value = text[field + len("\nAnonymous:") : text.find("\n", field + 1)].split()
        if value and value[0] == "0":
            unwritten.append(range_text)
    return unwritten


#: Seconds between two drops of ``releasing_file_pages``.
RELEASE_INTERVAL = 0.25


@contextmanager
def releasing_file_pages(
    *paths: str | os.PathLike[str], suffixes: tuple[str, ...] = (), interval: float = RELEASE_INTERVAL
) -> Iterator[None]:
    """While the body runs, a background thread drops the resident pages of this process's mappings of ``paths``
    and of the files whose names end with ``suffixes`` every ``interval`` seconds (``release_file_mappings``: the
    read-only ones, and the copy-on-write ones not written), and once more when it ends.

    For work that reads a weights file once and keeps what it needs elsewhere (a compiled model packing its weights,
    a compression): the pages it has read stop counting in the process's memory within ``interval``, instead of
    staying until the model is freed. A page read again is faulted in from the file (from the page cache when the
    system kept it there). Raises ``ValueError`` for an ``interval`` that is not positive."""
    if not interval > 0:
        msg = f"interval must be positive, got {interval!r}"
        raise ValueError(msg)
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            release_file_mappings(*paths, suffixes=suffixes)

    thread = threading.Thread(target=loop, name="nncf-hqq-release-pages", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        release_file_mappings(*paths, suffixes=suffixes)
