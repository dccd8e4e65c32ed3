"""Dropping the resident pages of weights read from a memory-mapped IR file, once they have been read.

OpenVINO maps an IR's ``.bin`` file into memory (read-only, shared) and its constants are views of that mapping.
Every page a compression reads stays resident, and counted in the process's memory, until the model is freed: at
the end, the whole checkpoint. ``release_file_pages`` tells the kernel the process no longer needs the pages of an
array that lies in such a mapping (``madvise(MADV_DONTNEED)``). Nothing changes for the program: the mapping
stays, and a later read of the array faults the same bytes in again from the file. Anything else (an array in
anonymous or writable memory, another operating system) is left as it is: there, dropping pages could lose data.

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
    madvise = _madvise()
    if madvise is None or array.nbytes < MIN_BYTES or array.flags.owndata or not array.flags.c_contiguous:
        return False
    address = int(array.__array_interface__["data"][0])
    with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
        if not read_only_file_mapping(address, address + array.nbytes, maps.read()):
            return False
    page = mmap.PAGESIZE
    begin = -(-address // page) * page
    end = (address + array.nbytes) // page * page
    return end > begin and madvise(ctypes.c_void_p(begin), ctypes.c_size_t(end - begin), MADV_DONTNEED) == 0


def release_model_pages(model: Any) -> int:
    """Drops the resident pages of every constant of an OpenVINO model that lies in a read-only file mapping (its
    IR file): after compiling it in another precision, the compiled model holds its own copy. Returns how many
    constants were released."""
    released = 0
    for op in model.get_ops():
        if op.get_type_name() == "Constant" and release_file_pages(op.get_tensor_view().data):
            released += 1
    return released


def release_file_mappings(*paths: str | os.PathLike[str]) -> int:
    """Drops the resident pages of every read-only mapping of the files ``paths`` in this process (e.g. an IR's
    ``.bin``, which every model read from it maps), whoever holds them: a model compressed by code that does not
    release its weights' pages as it goes (NNCF's own writer) keeps the pages it read resident until it is freed.
    As with ``release_file_pages``, a later read faults the same bytes in again. Returns the size of the
    mappings dropped, in bytes."""
    madvise = _madvise()
    targets = {os.path.realpath(path) for path in paths}
    targets = {target for target in targets if os.path.isfile(target)}
    if madvise is None or not targets:
        return 0
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        lines = maps.read().splitlines()
    released = 0
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].strip() in targets and fields[1][:2] == "r-":
            low, high = (int(x, 16) for x in fields[0].split("-"))
            if madvise(ctypes.c_void_p(low), ctypes.c_size_t(high - low), MADV_DONTNEED) == 0:
                released += high - low
    return released


#: Seconds between two drops of ``releasing_file_pages``.
RELEASE_INTERVAL = 0.25


@contextmanager
def releasing_file_pages(*paths: str | os.PathLike[str], interval: float = RELEASE_INTERVAL) -> Iterator[None]:
    """While the body runs, a background thread drops the resident pages of this process's read-only mappings of
    ``paths`` every ``interval`` seconds (``release_file_mappings``), and once more when it ends.

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
            release_file_mappings(*paths)

    thread = threading.Thread(target=loop, name="nncf-hqq-release-pages", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        release_file_mappings(*paths)
