"""Tests of nncf_hqq.llm.timing: the phases' timer (seconds, nesting, peak memory, what it logs)."""

from __future__ import annotations

import re

from nncf_hqq.llm.timing import StepTimer
from nncf_hqq.llm.timing import peak_rss_bytes


def test_step_timer_nests_accumulates_and_summarises() -> None:
    lines: list[str] = []
    timer = StepTimer(lines.append)
    with timer.step("export"):
        pass
    for _ in range(2):
        with timer.step("compression"), timer.step("statistics"):
            pass
    assert list(timer.seconds) == ["export", "compression", "statistics"]
    assert timer.parents == {"export": None, "compression": None, "statistics": "compression"}
    assert lines[:2] == ["export ...", lines[1]] and re.fullmatch(r"export: \d+\.\d s", lines[1])
    assert re.fullmatch(r"export \d+\.\d s, compression \d+\.\d s \(statistics \d+\.\d s\)", timer.summary())
    assert len(lines) == 2 + 2 * 4


def test_step_timer_calls_at_boundary_when_every_step_starts_and_ends() -> None:
    events: list[str] = []
    timer = StepTimer(events.append, at_boundary=lambda: events.append("|"))
    with timer.step("compression"), timer.step("statistics"):
        events.append("work")
    assert [e if e in ("|", "work") or e.endswith("...") else e.split(":")[0] for e in events] == [
        "|", "compression ...", "|", "statistics ...", "work", "|", "statistics", "|", "compression",
    ]  # fmt: skip


def test_off_a_terminal_a_step_logs_one_line_with_its_time() -> None:
    lines: list[str] = []
    timer = StepTimer(lines.append, announce=False)
    with timer.step("export"):
        pass
    assert len(lines) == 1 and re.fullmatch(r"export: \d+\.\d s", lines[0])


def test_each_step_records_the_peak_memory_so_far() -> None:
    timer = StepTimer(lambda _: None)
    with timer.step("small"):
        pass
    with timer.step("large"):
        block = bytearray(64 << 20)  # 64 MiB, touched
        block[::4096] = b"x" * len(block[::4096])
    del block
    if peak_rss_bytes() is None:
        assert timer.peak_bytes == {}
        return
    assert timer.peak_bytes["large"] >= timer.peak_bytes["small"] > 0
    assert timer.peak_bytes["large"] >= 64 << 20
