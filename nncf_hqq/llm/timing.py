"""Elapsed time and peak memory of the long phases of the ``nncf-hqq`` jobs, and the phases' names: each phase
says how long it took (on a terminal also when it starts), and a summary lists them all at the end."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field

#: The phases of the compress job, in the order they can run (each only when it happens).
EXPORT_PHASE = "export"
#: ``dataset=``: reading, tokenizing and checking the calibration text.
CALIBRATION_DATA_PHASE = "calibration data"
#: ``backend="torch"``: loading the HF model in PyTorch.
LOADING_PHASE = "loading"
#: Self-calibrated: the float model's INT8 copy written, that runs the phases that need its outputs (``stand_in``).
STAND_IN_PHASE = "INT8 stand-in"
#: The output check's first step, before any compression: the held-out sequences and the float model's logits on them.
OUTPUT_REFERENCE_PHASE = "output check reference"
SELF_CALIBRATION_PHASE = "self-calibration text"
COMPRESSION_PHASE = "compression"
#: Nested in ``COMPRESSION_PHASE``: NNCF's pass of the model over the calibration data.
STATISTICS_PHASE = "statistics"
OUTPUT_CHECK_PHASE = "output check"
SAVING_PHASE = "saving"
TOKENIZER_PHASE = "tokenizer conversion"

#: The phases of the evaluate job.
TOKENIZATION_PHASE = "tokenization"
REFERENCE_CHECK_PHASE = "reference check"
EVALUATION_PHASE = "evaluation"


def peak_rss_bytes() -> int | None:
    """The process's peak resident memory so far (``getrusage``'s ``ru_maxrss``); None where it cannot be read."""
    try:
        import resource
    except ImportError:  # not a Unix system
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # macOS counts bytes, Linux KiB


@dataclass
class StepTimer:
    """Times named steps and reports each one through ``log`` when it ends (and, with ``announce``, when it starts).

    ``seconds`` holds every step's elapsed time in the order the steps started; a step run again adds to its time.
    ``peak_bytes`` holds the process's peak resident memory when each step ended (``peak_rss_bytes``: a running
    maximum, so a step that raises it is a step that needed it). A step that starts inside another one is nested in
    it (``parents``): the summary shows it in parentheses after its parent, whose time includes it. ``at_boundary``
    (if given) is called when every step starts and ends, before its log line, and is not timed (e.g.
    ``nncf_hqq.openvino.pages.return_free_heap``).
    """

    log: Callable[[str], None]
    at_boundary: Callable[[], object] | None = None
    announce: bool = True
    seconds: dict[str, float] = field(default_factory=dict)
    peak_bytes: dict[str, int] = field(default_factory=dict)
    parents: dict[str, str | None] = field(default_factory=dict)
    _open: list[str] = field(default_factory=list)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        self._boundary()
        if self.announce:
            self.log(f"{name} ...")
        self.seconds.setdefault(name, 0.0)
        self.parents.setdefault(name, self._open[-1] if self._open else None)
        self._open.append(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self._open.pop()
        elapsed = time.perf_counter() - start
        self.seconds[name] += elapsed
        peak = peak_rss_bytes()
        if peak is not None:
            self.peak_bytes[name] = max(peak, self.peak_bytes.get(name, 0))
        self._boundary()
        self.log(f"{name}: {elapsed:.1f} s")

    def _boundary(self) -> None:
        if self.at_boundary is not None:
            self.at_boundary()

    def summary(self) -> str:
        """One line: every top-level step and its seconds, nested steps in parentheses after their parent."""

        def describe(name: str) -> str:
            children = [describe(child) for child, parent in self.parents.items() if parent == name]
            inner = f" ({', '.join(children)})" if children else ""
            return f"{name} {self.seconds[name]:.1f} s{inner}"

        return ", ".join(describe(name) for name, parent in self.parents.items() if parent is None)


def silent_timer() -> StepTimer:
    """A timer that logs nothing (for a caller that gives none)."""
    return StepTimer(lambda _: None)
