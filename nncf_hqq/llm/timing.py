"""Elapsed time of the long phases of the ``nncf-hqq`` commands: each phase says when it starts and how long it took,
and a summary lists them all at the end."""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field


@dataclass
class StepTimer:
    """Times named steps and reports each one through ``log`` when it starts and when it ends.

    ``seconds`` holds every step's elapsed time in the order the steps started; a step run again adds to its time.
    A step that starts inside another one is nested in it (``parents``): the summary shows it in parentheses after
    its parent, whose time includes it. ``at_boundary`` (if given) is called when every step starts and ends, before
    its log line, and is not timed (e.g. ``nncf_hqq.openvino.pages.return_free_heap``).
    """

    log: Callable[[str], None]
    at_boundary: Callable[[], object] | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    parents: dict[str, str | None] = field(default_factory=dict)
    _open: list[str] = field(default_factory=list)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        self._boundary()
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
