"""Readable logs of the jobs: progress bars only on a terminal, and NNCF's bitwidth table held back where a job
compresses a model several ways and keeps one.

When stderr is not a terminal (a log piped to a file, CI), transformers', huggingface_hub's and NNCF's (rich)
progress bars are off: a file gets lines, not hundreds of redraws. On a terminal they stay.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from contextlib import contextmanager

from nncf.common.logging import nncf_logger

#: The first line of NNCF's per-compression table of the bitwidth distribution (``WeightCompression.apply``).
BITWIDTH_TABLE = "Statistics of the bitwidth distribution"


def on_a_terminal() -> bool:
    """Whether stderr, where the jobs log, is an interactive terminal."""
    return sys.stderr.isatty()


#: Set to a non-empty value, the jobs log when each phase starts also off a terminal
#: (``benchmarks/checkpoint_memory.py`` sets it to attribute its memory samples to phases).
ANNOUNCE_PHASES_ENV = "NNCF_HQQ_ANNOUNCE_PHASES"


def announces_phases() -> bool:
    """Whether the jobs log each phase's start (``PHASE ...``): on a terminal, or with ``ANNOUNCE_PHASES_ENV`` set."""
    return on_a_terminal() or bool(os.environ.get(ANNOUNCE_PHASES_ENV))


@contextmanager
def _rich_quiet() -> Iterator[None]:
    """rich's global console (NNCF's ``track`` draws on it) prints nothing for the duration."""
    import rich

    console = rich.get_console()
    quiet = console.quiet
    console.quiet = True
    try:
        yield
    finally:
        console.quiet = quiet


@contextmanager
def _transformers_bars_off() -> Iterator[None]:
    """transformers' tqdm bars (which also switches huggingface_hub's) off for the duration."""
    from transformers.utils import logging as transformers_logging

    enabled = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            transformers_logging.enable_progress_bar()


@contextmanager
def progress_bars_only_on_a_terminal() -> Iterator[None]:
    """For the duration, no progress bars unless stderr is a terminal (``on_a_terminal``)."""
    if on_a_terminal():
        yield
        return
    with ExitStack() as stack:
        stack.enter_context(_rich_quiet())
        if importlib.util.find_spec("transformers") is not None:
            stack.enter_context(_transformers_bars_off())
        yield


class _HeldBack(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith(BITWIDTH_TABLE):
            self.records.append(record)
            return False
        return True


@contextmanager
def bitwidth_tables_held_back() -> Iterator[list[logging.LogRecord]]:
    """NNCF's bitwidth tables logged during the block are not shown but collected in the list it yields, to be
    shown later with ``show``."""
    held = _HeldBack()
    nncf_logger.addFilter(held)
    try:
        yield held.records
    finally:
        nncf_logger.removeFilter(held)


def show(records: list[logging.LogRecord]) -> None:
    """Log records held back, as they would have been logged."""
    for record in records:
        nncf_logger.handle(record)
