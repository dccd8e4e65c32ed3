"""Dropping the resident pages of weights read from an IR file (``nncf_hqq.openvino.pages``)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import nncf
import numpy as np
import openvino as ov
import pytest

import nncf_hqq  # noqa: F401  (teaches nncf.compress_weights hqq=)
from nncf_hqq.openvino import pages
from tests.ov_models import transformer_like

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc/self/maps: Linux")

MAPS = """\
7f0000000000-7f0000100000 r--s 00000000 fe:00 123 /models/openvino_model.bin
7f0000100000-7f0000200000 rw-p 00000000 00:00 0
7f0000200000-7f0000300000 rw-s 00000000 fe:00 124 /models/writable.bin
7f0000300000-7f0000400000 r--p 00000000 fe:00 125 /tmp/gone.bin (deleted)
7f0000400000-7f0000500000 r--p 00000000 fe:00 126 /models/private.bin
"""


@pytest.mark.parametrize(
    ("begin", "end", "expected"),
    [
        pytest.param(0x7F0000000000, 0x7F0000100000, True, id="read-only-shared-file"),
        pytest.param(0x7F0000000100, 0x7F0000000200, True, id="inside-the-file"),
        pytest.param(0x7F00000FF000, 0x7F0000101000, False, id="crosses-into-anonymous"),
        pytest.param(0x7F0000100000, 0x7F0000101000, False, id="anonymous"),
        pytest.param(0x7F0000200000, 0x7F0000201000, False, id="writable-file"),
        pytest.param(0x7F0000300000, 0x7F0000301000, False, id="deleted-file"),
        pytest.param(0x7F0000400000, 0x7F0000401000, True, id="read-only-private-file"),
        pytest.param(0x100, 0x200, False, id="unmapped"),
    ],
)
def test_read_only_file_mapping(begin: int, end: int, expected: bool) -> None:
    assert pages.read_only_file_mapping(begin, end, MAPS) is expected


def test_anonymous_memory_is_never_released() -> None:
    data = np.arange(1 << 20, dtype=np.float32)
    view = data[16:]  # not owning its data, but anonymous
    assert not pages.release_file_pages(data)
    assert not pages.release_file_pages(view)
    np.testing.assert_array_equal(view, np.arange(16, 1 << 20, dtype=np.float32))


def test_read_only_memmap_is_released_and_reads_back(tmp_path: Path) -> None:
    expected = np.random.default_rng(0).standard_normal(1 << 19).astype(np.float32)
    expected.tofile(tmp_path / "w.bin")
    mapped = np.memmap(tmp_path / "w.bin", dtype=np.float32, mode="r")
    total = float(mapped.sum())
    view = np.ndarray(mapped.shape, mapped.dtype, buffer=mapped)
    assert pages.release_file_pages(view)
    np.testing.assert_array_equal(view, expected)
    assert float(mapped.sum()) == total
    writable = np.memmap(tmp_path / "w.bin", dtype=np.float32, mode="r+")
    assert not pages.release_file_pages(np.ndarray(writable.shape, writable.dtype, buffer=writable))


def test_a_snapshot_reads_the_mappings_once_for_arrays_outside_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []
    read_maps = pages._read_maps
    monkeypatch.setattr(pages, "_read_maps", lambda: reads.append(1) or read_maps())
    anonymous = [np.arange(1 << 20, dtype=np.float32)[16:] for _ in range(3)]
    np.arange(1 << 19, dtype=np.float32).tofile(tmp_path / "w.bin")
    mapped = np.memmap(tmp_path / "w.bin", dtype=np.float32, mode="r")
    in_file = np.ndarray(mapped.shape, mapped.dtype, buffer=mapped)
    snapshot = pages.FileMappingSnapshot()
    assert [snapshot.release(array) for array in anonymous] == [False] * 3
    assert len(reads) == 1
    assert snapshot.release(in_file)  # confirmed on a fresh read before the pages are dropped
    assert len(reads) == 2
    np.testing.assert_array_equal(in_file, np.arange(1 << 19, dtype=np.float32))
    trusting = pages.FileMappingSnapshot(confirm=False)  # every array predates it: no second read
    assert [trusting.release(array) for array in [*anonymous, in_file]] == [False, False, False, True]
    assert len(reads) == 3
    np.testing.assert_array_equal(in_file, np.arange(1 << 19, dtype=np.float32))


def test_a_stale_snapshot_never_drops_anonymous_memory() -> None:
    """A snapshot that places an array in a read-only file mapping (its addresses were a file's when it was taken)
    is checked against the mappings of now before anything is dropped."""
    data = np.arange(1 << 20, dtype=np.float32)
    view = data[1024:]
    begin = int(view.__array_interface__["data"][0])
    snapshot = pages.FileMappingSnapshot()
    snapshot._maps = f"{begin - 4096:x}-{begin + view.nbytes + 4096:x} r--s 00000000 fe:00 1 /models/gone.bin\n"
    assert not snapshot.release(view)
    np.testing.assert_array_equal(view, np.arange(1024, 1 << 20, dtype=np.float32))


def _file_mapping_rss_kib(bin_path: Path) -> int:
    """Resident KiB of this process's mappings of ``bin_path`` (``/proc/self/smaps``)."""
    resident, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:
            inside = fields[-1] == str(bin_path)
        elif inside and fields[0] == "Rss:":
            resident += int(fields[1])
    return resident


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc/self/smaps are Linux's")
def test_every_read_only_mapping_of_a_file_is_dropped_and_reads_back(tmp_path: Path) -> None:
    expected = np.random.default_rng(1).standard_normal(1 << 20).astype(np.float32)
    path = tmp_path / "w.bin"
    expected.tofile(path)
    first, second = (np.memmap(path, dtype=np.float32, mode="r") for _ in range(2))
    total = float(first.sum()) + float(second.sum())
    assert _file_mapping_rss_kib(path.resolve()) >= 2 * 4096 - 8  # both mappings resident: 2 x 4 MiB
    assert pages.release_file_mappings(path) >= 2 * expected.nbytes
    assert _file_mapping_rss_kib(path.resolve()) == 0
    np.testing.assert_array_equal(first, expected)
    assert float(first.sum()) + float(second.sum()) == total
    writable = np.memmap(path, dtype=np.float32, mode="r+")
    writable[:] = -expected  # dirty pages, shared with the read-only mappings of the same file
    pages.release_file_mappings(path)
    np.testing.assert_array_equal(writable, -expected)  # reclaimed pages are written back, never discarded
    np.testing.assert_array_equal(first, -expected)
    assert pages.release_file_mappings(tmp_path / "missing.bin") == 0


def test_an_unwritten_copy_on_write_mapping_is_dropped_and_a_written_one_kept(tmp_path: Path) -> None:
    # PyTorch maps a checkpoint's .safetensors files private and writable (copy-on-write).
    expected = np.random.default_rng(5).standard_normal(1 << 20).astype(np.float32)
    path = (tmp_path / "model.safetensors").resolve()
    expected.tofile(path)
    mapped = np.memmap(path, dtype=np.float32, mode="c")
    total = float(mapped.sum())
    assert _file_mapping_rss_kib(path) >= 4096 - 8
    assert pages.release_file_mappings(suffixes=(".safetensors",)) >= expected.nbytes
    assert _file_mapping_rss_kib(path) == 0
    assert float(mapped.sum()) == total  # read back from the file
    mapped[7] = 123.0  # one page is now the process's own copy
    float(mapped.sum())
    assert pages.release_file_mappings(path) == 0
    assert _file_mapping_rss_kib(path) >= 4096 - 8
    assert mapped[7] == 123.0
    np.testing.assert_array_equal(mapped[8:], expected[8:])
    assert np.fromfile(path, dtype=np.float32)[7] == expected[7]  # the file never changes


def test_releasing_file_pages_by_suffix_drops_a_checkpoint_read_in_the_body(tmp_path: Path) -> None:
    path = (tmp_path / "model-00001-of-00002.safetensors").resolve()
    np.ones(1 << 20, dtype=np.float32).tofile(path)
    other = (tmp_path / "other.bin").resolve()
    np.ones(1 << 20, dtype=np.float32).tofile(other)
    mapped, kept = np.memmap(path, dtype=np.float32, mode="c"), np.memmap(other, dtype=np.float32, mode="r")
    with pages.releasing_file_pages(suffixes=(".safetensors",), interval=0.01):
        assert float(mapped.sum()) + float(kept.sum()) == 2 * (1 << 20)
        assert _resident_within(path, 0)
    assert _file_mapping_rss_kib(other) >= 4096 - 8  # not named: left resident


SMAPS = """\
7f0000000000-7f0000100000 rw-p 00000000 fe:00 123 /ckpt/a.safetensors
Size:               1024 kB
Rss:                1024 kB
Anonymous:             0 kB
VmFlags: rd wr mr mw me ac
7f0000100000-7f0000200000 rw-p 00000000 fe:00 124 /ckpt/b.safetensors
Size:               1024 kB
Rss:                1024 kB
Anonymous:             4 kB
VmFlags: rd wr mr mw me ac
00400000-00401000 rw-p 00000000 fe:00 125 /ckpt/c.safetensors
Anonymous:             0 kB
"""


@pytest.mark.parametrize(
    ("addresses", "expected"),
    [
        pytest.param(["7f0000000000-7f0000100000"], ["7f0000000000-7f0000100000"], id="unwritten"),
        pytest.param(["7f0000100000-7f0000200000"], [], id="one-page-written"),
        pytest.param(["00400000-00401000"], ["00400000-00401000"], id="zero-padded-low-address"),
        pytest.param(["0400000-00401000"], [], id="not-a-whole-header"),
        pytest.param(["7f0000300000-7f0000400000"], [], id="unmapped-since"),
    ],
)
def test_unwritten_private_mappings(addresses: list[str], expected: list[str]) -> None:
    assert pages.unwritten_private_mappings(addresses, SMAPS) == expected


@pytest.mark.parametrize("dtype", [ov.Type.f32, ov.Type.bf16], ids=["f32", "bf16"])
def test_compression_of_a_model_on_disk_drops_its_pages_and_writes_the_same_model(
    tmp_path: Path, dtype: ov.Type, monkeypatch: pytest.MonkeyPatch
) -> None:
    ov.save_model(transformer_like(dtype=dtype, hidden=512), tmp_path / "model.xml", compress_to_fp16=False)
    bin_path = (tmp_path / "model.bin").resolve()

    def compressed(release: bool) -> tuple[bytes, int]:
        if not release:
            monkeypatch.setattr(pages.FileMappingSnapshot, "release", lambda self, array: False)
        model = ov.Core().read_model(tmp_path / "model.xml")
        result = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT4_ASYM, group_size=64, hqq=True)
        resident = _file_mapping_rss_kib(bin_path)
        out = tmp_path / f"out_{release}.xml"
        ov.save_model(result, out, compress_to_fp16=False)
        return out.with_suffix(".bin").read_bytes(), resident

    released, resident_released = compressed(release=True)
    kept, resident_kept = compressed(release=False)
    assert released == kept
    file_kib = bin_path.stat().st_size // 1024
    assert resident_kept > file_kib // 2
    assert resident_released < file_kib // 4


def test_a_compiled_model_runs_the_same_after_its_source_pages_are_dropped(tmp_path: Path) -> None:
    from tests.ov_models import input_ids

    ov.save_model(transformer_like(dtype=ov.Type.bf16, hidden=512), tmp_path / "model.xml", compress_to_fp16=False)
    model = ov.Core().read_model(tmp_path / "model.xml")
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    ids = input_ids()
    before = compiled(ids)[0].copy()
    reads: list[int] = []
    read_maps = pages._read_maps
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pages, "_read_maps", lambda: reads.append(1) or read_maps())
        assert pages.release_model_pages(model) == 3  # up, down, the experts: the weights of 1 MiB and more
    assert len(reads) == 1  # one read of the process's mappings for the whole model
    np.testing.assert_array_equal(compiled(ids)[0], before)
    assert pages.release_model_pages(ov.Core().read_model(tmp_path / "model.xml")) == 3
    assert pages.release_model_pages(transformer_like(hidden=512)) == 0  # in memory: nothing to drop


def _resident_within(path: Path, kib: int, seconds: float = 5.0) -> bool:
    """Whether the resident KiB of ``path``'s mappings fall to ``kib`` or fewer within ``seconds``."""
    deadline = time.monotonic() + seconds
    while _file_mapping_rss_kib(path) > kib:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_releasing_file_pages_drops_them_while_the_body_runs(tmp_path: Path) -> None:
    expected = np.random.default_rng(2).standard_normal(1 << 20).astype(np.float32)
    path = (tmp_path / "w.bin").resolve()
    expected.tofile(path)
    mapped = np.memmap(path, dtype=np.float32, mode="r")
    with pages.releasing_file_pages(path, interval=0.01):
        total = float(mapped.sum())  # every page faulted in
        assert _resident_within(path, 0)  # dropped by the thread, the body calling nothing
        assert float(mapped.sum()) == total
        np.testing.assert_array_equal(mapped, expected)
    assert not any(t.name == "nncf-hqq-release-pages" for t in threading.enumerate())
    float(mapped.sum())
    assert _file_mapping_rss_kib(path) >= 4096 - 8  # after the body, the pages read stay


def test_releasing_file_pages_drops_them_once_more_at_the_end(tmp_path: Path) -> None:
    path = (tmp_path / "w.bin").resolve()
    np.ones(1 << 20, dtype=np.float32).tofile(path)
    mapped = np.memmap(path, dtype=np.float32, mode="r")
    with pages.releasing_file_pages(path, interval=3600.0):
        float(mapped.sum())
        assert _file_mapping_rss_kib(path) >= 4096 - 8
    assert _file_mapping_rss_kib(path) == 0


@pytest.mark.parametrize("interval", [0.0, -1.0, float("nan")], ids=["zero", "negative", "nan"])
def test_releasing_file_pages_refuses_an_interval_that_is_not_positive(interval: float) -> None:
    with (
        pytest.raises(ValueError, match="interval must be positive"),
        pages.releasing_file_pages("x.bin", interval=interval),
    ):
        pass


def _chained_matmuls(path: Path, hidden: int = 1024, layers: int = 4) -> Path:
    """An f32 IR of ``layers`` chained ``hidden x hidden`` MatMuls (weights transposed, as optimum exports them)."""
    from openvino import opset13 as opset

    rng = np.random.default_rng(3)
    x = opset.parameter([-1, -1, hidden], ov.Type.f32, name="x")
    y = x
    for _ in range(layers):
        weight = (0.03 * rng.standard_normal((hidden, hidden))).astype(np.float32)
        y = opset.matmul(y, opset.constant(weight), False, True)
    ov.save_model(ov.Model([y], [x]), path, compress_to_fp16=False)
    return path.with_suffix(".bin").resolve()


def test_a_compiled_model_reads_its_weights_while_pages_are_dropped_and_computes_the_same(tmp_path: Path) -> None:
    bin_path = _chained_matmuls(tmp_path / "model.xml")
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    x = np.random.default_rng(4).standard_normal((1, 3, 1024)).astype(np.float32)

    def compiled_and_run(release: bool) -> tuple[np.ndarray, int]:
        model = ov.Core().read_model(tmp_path / "model.xml")
        if release:
            with pages.releasing_file_pages(bin_path, interval=0.01):
                compiled = ov.Core().compile_model(model, "CPU", config)
                out = compiled(x)[0].copy()
        else:
            compiled = ov.Core().compile_model(model, "CPU", config)
            out = compiled(x)[0].copy()
        resident = _file_mapping_rss_kib(bin_path)
        np.testing.assert_array_equal(compiled(x)[0], out)
        return out, resident

    kept, resident_kept = compiled_and_run(release=False)
    released, resident_released = compiled_and_run(release=True)
    np.testing.assert_array_equal(released, kept)
    file_kib = bin_path.stat().st_size // 1024
    assert resident_kept > file_kib // 2  # the compiled model read its weights from the mapping
    assert resident_released < file_kib // 8


def _anonymous_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")


@pytest.mark.skipif(pages._malloc_trim() is None, reason="malloc_trim: glibc")
def test_return_free_heap_gives_freed_blocks_back_to_the_system() -> None:
    blocks = [np.ones(16384, dtype=np.float32) for _ in range(4096)]  # 256 MiB of 64 KiB blocks, in the heap
    pinned = np.ones(16384, dtype=np.float32)  # above them: the heap cannot shrink from its top
    before = _anonymous_kib()
    del blocks
    freed = _anonymous_kib()
    assert pages.return_free_heap()
    trimmed = _anonymous_kib()
    assert freed > before - 64 * 1024  # glibc kept most of the freed blocks
    assert trimmed < freed - 128 * 1024  # and gave them back
    assert float(pinned.sum()) == 16384.0


def test_read_only_file_mapping_finds_a_mapping_among_thousands() -> None:
    """The lookup bisects the address-ordered lines: a mapping at either end, or in the middle, of many."""
    lines = [f"{0x10000 * i:x}-{0x10000 * i + 0x8000:x} rw-p 00000000 00:00 0" for i in range(1, 3000)]
    lines[0] = lines[0].replace("rw-p 00000000 00:00 0", "r--s 00000000 fe:00 1 /models/first.bin")
    lines[1500] = lines[1500].replace("rw-p 00000000 00:00 0", "r--s 00000000 fe:00 2 /models/middle.bin")
    lines[-1] = lines[-1].replace("rw-p 00000000 00:00 0", "r--s 00000000 fe:00 3 /models/last.bin")
    maps = "\n".join(lines) + "\n"
    for index, expected in ((0, True), (1500, True), (2998, True), (1, False), (1499, False), (2997, False)):
        begin = 0x10000 * (index + 1)
        assert pages.read_only_file_mapping(begin + 0x100, begin + 0x200, maps) is expected
        assert not pages.read_only_file_mapping(begin + 0x7000, begin + 0x9000, maps)  # runs past its end
        assert not pages.read_only_file_mapping(begin + 0x9000, begin + 0xA000, maps)  # between two mappings


def test_a_range_reused_by_other_memory_keeps_its_data() -> None:
    """What ``release_file_mappings`` meets when a mapping it read from /proc/self/maps is unmapped and its addresses
    reused before the call: anonymous memory in the range. ``drop_range`` keeps every byte (MADV_DONTNEED would
    have zeroed them)."""
    data = np.arange(4 * 2**20 // 8, dtype=np.float64)
    expected = data.copy()
    page = 4096
    low = -(-data.ctypes.data // page) * page
    high = (data.ctypes.data + data.nbytes) // page * page
    if not pages.drop_range(low, high):
        pytest.skip("no MADV_PAGEOUT on this kernel")
    np.testing.assert_array_equal(data, expected)
