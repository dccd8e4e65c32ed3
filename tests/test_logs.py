"""Tests of nncf_hqq.llm.logs: no progress bars when stderr is not a terminal (and all of them on one), NNCF's
bitwidth tables held back and shown later."""

from __future__ import annotations

import logging

import pytest
from nncf.common.logging import nncf_logger
from nncf.common.logging.track_progress import track

from nncf_hqq.llm import logs


def _tracked(capsys: pytest.CaptureFixture[str]) -> str:
    for _ in track(range(3), description="Working"):
        pass
    captured = capsys.readouterr()
    return captured.out + captured.err


def test_off_a_terminal_no_progress_bar_is_drawn(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    transformers_logging = pytest.importorskip("transformers.utils.logging")
    monkeypatch.setattr(logs, "on_a_terminal", lambda: False)
    assert "Working" in _tracked(capsys)  # rich prints a bar's last state to a file
    assert transformers_logging.is_progress_bar_enabled()
    with logs.progress_bars_only_on_a_terminal():
        assert _tracked(capsys) == ""
        assert not transformers_logging.is_progress_bar_enabled()
    assert transformers_logging.is_progress_bar_enabled()
    assert "Working" in _tracked(capsys)


def test_on_a_terminal_the_progress_bars_stay(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    transformers_logging = pytest.importorskip("transformers.utils.logging")
    monkeypatch.setattr(logs, "on_a_terminal", lambda: True)
    with logs.progress_bars_only_on_a_terminal():
        assert "Working" in _tracked(capsys)
        assert transformers_logging.is_progress_bar_enabled()


def test_bitwidth_tables_are_held_back_and_shown_later() -> None:
    shown: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            shown.append(record.getMessage())

    handler = Collect()
    nncf_logger.addHandler(handler)
    try:
        with logs.bitwidth_tables_held_back() as held:
            nncf_logger.info(f"{logs.BITWIDTH_TABLE}:\n| int4 |")
            nncf_logger.info("Applying HQQ")
        assert shown == ["Applying HQQ"] and len(held) == 1
        nncf_logger.info(f"{logs.BITWIDTH_TABLE}:\n| int8 |")  # not held outside the block
        logs.show(held)
    finally:
        nncf_logger.removeHandler(handler)
    assert shown == ["Applying HQQ", f"{logs.BITWIDTH_TABLE}:\n| int8 |", f"{logs.BITWIDTH_TABLE}:\n| int4 |"]


@pytest.mark.parametrize(
    ("terminal", "env", "expected"),
    [(True, "", True), (False, "", False), (False, "1", True)],
    ids=["terminal", "off-a-terminal", "off-a-terminal-asked"],
)
def test_phase_starts_are_logged_on_a_terminal_or_when_asked(
    monkeypatch: pytest.MonkeyPatch, terminal: bool, env: str, expected: bool
) -> None:
    monkeypatch.setattr(logs, "on_a_terminal", lambda: terminal)
    monkeypatch.setenv(logs.ANNOUNCE_PHASES_ENV, env)
    assert logs.announces_phases() is expected
