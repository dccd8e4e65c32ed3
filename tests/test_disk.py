"""The compress job's disk estimates per phase and filesystem, and its refusal before anything is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nncf_hqq.llm import compress
from nncf_hqq.llm import compress_job
from nncf_hqq.llm import disk
from nncf_hqq.llm import memory
from nncf_hqq.llm import source
from nncf_hqq.llm.timing import EXPORT_PHASE
from nncf_hqq.llm.timing import OUTPUT_CHECK_PHASE
from nncf_hqq.llm.timing import STAND_IN_PHASE
from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT

GIB = memory.GIB
#: A bf16 model of 1 G parameters, 2 GiB stored, 100 000 tokens of vocabulary.
DECODER = memory.DecoderShape(layers=24, kv_heads=2, head_dim=64, vocabulary=100_000)
SIZE = memory.ModelSize(GIB, 2 * GIB, GIB // 8, GIB // 4, DECODER, GIB // 16)
GENERATION = SELF_CALIBRATION_DEFAULT
HELD_OUT = 8


def totals(use: disk.DiskUse) -> int:
    return sum(size for _, _, size in use.files)


def test_data_free_from_a_checkpoint_writes_the_export_then_out_beside_it(tmp_path: Path) -> None:
    uses = disk.compress_disk_uses(SIZE, True, None, 0, False, tmp_path / "tmp", tmp_path / "out")
    assert [use.phase for use in uses] == [EXPORT_PHASE, disk.SAVING_PHASE]
    assert uses[0].files == ((tmp_path / "tmp", "exported IR", 2 * GIB),)
    assert uses[1].files == (
        (tmp_path / "tmp", "exported IR", 2 * GIB),
        (tmp_path, "compressed model", SIZE.compressed_bytes()),
    )


def test_an_ir_writes_only_out(tmp_path: Path) -> None:
    uses = disk.compress_disk_uses(SIZE, False, None, 0, False, tmp_path / "tmp", tmp_path / "out")
    assert [(use.phase, totals(use)) for use in uses] == [(disk.SAVING_PHASE, SIZE.compressed_bytes())]


def test_self_calibrated_with_the_stand_in_and_the_check(tmp_path: Path) -> None:
    """The stand-in's first part (half the weights in INT8, half as stored) beside the whole stand-in; then the
    stand-in kept through the check, beside the float logits and two candidates; OUT after the scratch is gone."""
    temp, out = tmp_path / "tmp", tmp_path / "out"
    uses = {use.phase: use for use in disk.compress_disk_uses(SIZE, True, GENERATION, HELD_OUT, True, temp, out)}
    assert list(uses) == [EXPORT_PHASE, STAND_IN_PHASE, OUTPUT_CHECK_PHASE, disk.SAVING_PHASE]
    stand_in = SIZE.stand_in_bytes()
    assert totals(uses[STAND_IN_PHASE]) == 2 * GIB + (2 * GIB + stand_in) // 2 + stand_in
    logits = HELD_OUT * GENERATION.seq_len * 100_000 * 4
    assert (tmp_path, "the float model's recorded logits", logits) in uses[OUTPUT_CHECK_PHASE].files
    assert totals(uses[OUTPUT_CHECK_PHASE]) == 2 * GIB + stand_in + logits + 2 * SIZE.compressed_bytes()
    assert totals(uses[disk.SAVING_PHASE]) == 2 * GIB + SIZE.compressed_bytes()


def test_without_the_stand_in_the_check_holds_no_copy(tmp_path: Path) -> None:
    uses = disk.compress_disk_uses(SIZE, False, GENERATION, HELD_OUT, False, tmp_path, tmp_path / "out")
    assert [use.phase for use in uses] == [OUTPUT_CHECK_PHASE, disk.SAVING_PHASE]
    assert all(what != "INT8 stand-in" for _, what, _ in uses[0].files)


def test_existing_ancestor(tmp_path: Path) -> None:
    assert disk.existing_ancestor(tmp_path / "a" / "b" / "c") == tmp_path
    assert disk.existing_ancestor(tmp_path) == tmp_path


@pytest.mark.parametrize(
    ("free_gib", "short_phase"),
    [
        pytest.param(100, None, id="fits"),
        pytest.param(2.1, EXPORT_PHASE, id="the-export-does-not-fit"),
        pytest.param(4.0, STAND_IN_PHASE, id="the-stand-in-does-not-fit-beside-the-export"),
    ],
)
def test_files_on_one_filesystem_add_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, free_gib: float, short_phase: str | None
) -> None:
    """The export in one directory and the scratch files in another of the same filesystem: the largest phase
    counts both; one shortfall for the filesystem, the largest phase's."""
    monkeypatch.setattr(disk, "free_bytes", lambda directory: int(free_gib * GIB))
    uses = disk.compress_disk_uses(SIZE, True, GENERATION, HELD_OUT, True, tmp_path / "tmp", tmp_path / "o" / "out")
    short = disk.shortfalls(uses)
    if short_phase is None:
        assert short == []
        return
    largest = max(uses, key=totals)
    assert len(short) == 1 and short[0].phase == (largest.phase if free_gib < totals(largest) / GIB else short_phase)
    assert short[0].needed == totals(largest) and short[0].free == int(free_gib * GIB)


def test_filesystems_are_counted_apart(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The export on one filesystem and OUT on another: each is compared with its own free space."""
    temp, out = tmp_path / "tmp", tmp_path / "data" / "out"
    temp.mkdir()
    (tmp_path / "data").mkdir()
    monkeypatch.setattr(disk, "device_of", lambda directory: 2 if directory == tmp_path / "data" else 1)
    free = {temp: 3 * GIB, tmp_path / "data": int(0.5 * GIB)}
    monkeypatch.setattr(disk, "free_bytes", lambda directory: free[directory])
    short = disk.shortfalls(disk.compress_disk_uses(SIZE, True, None, 0, False, temp, out))
    assert [(s.phase, s.where, s.needed) for s in short] == [
        (disk.SAVING_PHASE, tmp_path / "data", SIZE.compressed_bytes())
    ]


@pytest.mark.parametrize(
    ("temp_apart", "hints"),
    [
        pytest.param(True, ["an OUT on a larger disk"], id="the-export-on-its-own-disk-fits"),
        pytest.param(False, ["TMPDIR=DIR moves the export", "an OUT on a larger disk"], id="one-disk"),
    ],
)
def test_the_refusal_names_the_disk_and_what_moves_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, temp_apart: bool, hints: list[str]
) -> None:
    """2 GiB free on every filesystem: the export fits on its own (2 GiB), not beside the scratch files."""
    temp = tmp_path / "tmp"
    monkeypatch.setattr(disk, "device_of", lambda directory: 2 if temp_apart and directory == temp else 1)
    monkeypatch.setattr(disk, "free_bytes", lambda directory: 2 * GIB)
    temp.mkdir()
    uses = disk.compress_disk_uses(SIZE, True, GENERATION, HELD_OUT, True, temp, tmp_path / "out")
    lines: list[str] = []
    with pytest.raises(disk.NotEnoughDiskError, match="not enough disk space for /models/m") as info:
        disk.check_compress_disk("/models/m", uses, lines.append)
    message = info.value.for_command_line()
    assert all(hint in message for hint in hints) and ("TMPDIR" in message) == (not temp_apart)
    assert f"GiB to the disk of {tmp_path}" in message and "2.0 GiB is free there" in message
    assert "--no-disk-check" in message and "disk_check=False" in str(info.value)
    largest = max(uses, key=totals)
    assert largest.phase == OUTPUT_CHECK_PHASE
    assert lines == [f"disk: about {totals(largest) / GIB:.1f} GiB at most ({OUTPUT_CHECK_PHASE})"]
    assert disk.check_compress_disk("/models/m", uses, lines.append, refuse=False)


class ReachedError(Exception):
    """The compress job got past its checks."""


@pytest.fixture
def two_gib_hf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HF dir of ``SIZE`` (no weights: the job stops after its checks, at ``ReachedError``), with memory to
    spare."""
    pytest.importorskip("optimum.intel")
    hf = tmp_path / "model"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}))
    monkeypatch.setattr(source.ModelSource, "size", lambda self: SIZE)
    monkeypatch.setattr(memory, "available_bytes", lambda: 64 * GIB)

    def reached(*args: Any) -> None:
        raise ReachedError

    monkeypatch.setattr(compress_job, "opened", reached)
    return hf


@pytest.mark.parametrize(
    ("free_gib", "options", "refused"),
    [
        pytest.param(100, {}, False, id="fits"),
        pytest.param(1, {}, True, id="refused"),
        pytest.param(1, {"disk_check": False}, False, id="check-off"),
        pytest.param(4, {"int8_stand_in": True}, True, id="the-stand-in-does-not-fit"),
        pytest.param(4, {}, False, id="the-float-model-fits"),
    ],
)
def test_the_job_checks_the_disk_before_it_writes(
    monkeypatch: pytest.MonkeyPatch,
    two_gib_hf: Path,
    tmp_path: Path,
    free_gib: float,
    options: dict[str, Any],
    refused: bool,
) -> None:
    monkeypatch.setattr(disk, "free_bytes", lambda directory: int(free_gib * GIB))
    lines: list[str] = []
    expected = disk.NotEnoughDiskError if refused else ReachedError
    with pytest.raises(expected):
        compress(two_gib_hf, tmp_path / "out", log=lines.append, **options)
    assert not (tmp_path / "out").exists()
    assert any(line.startswith("disk: about ") for line in lines)


def test_the_command_line_refuses_in_one_line(
    monkeypatch: pytest.MonkeyPatch, two_gib_hf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from nncf_hqq.llm import cli

    monkeypatch.setattr(disk, "free_bytes", lambda directory: GIB // 2)
    assert cli.main(["compress", str(two_gib_hf), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("nncf-hqq compress: error: not enough disk space for") and "--no-disk-check" in err[-1]
