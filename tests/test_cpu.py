"""Tests of nncf_hqq.llm.cpu, which zero-point format suits which CPU: /proc/cpuinfo parsing, the CPU kinds and the
compress job's note."""

from __future__ import annotations

import pytest

from nncf_hqq.llm import compress_job
from nncf_hqq.llm import cpu
from nncf_hqq.llm.options import CompressionOptions

SAPPHIRE_RAPIDS = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8
processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8
"""
EPYC = """processor\t: 0
model name\t: AMD EPYC 9654 96-Core Processor
flags\t\t: fpu sse avx2 avx512f avx512_vnni avx512_bf16
"""
LAPTOP = """processor\t: 0
model name\t: 12th Gen Intel(R) Core(TM) i7-1260P
flags\t\t: fpu sse avx2 avx_vnni
"""
ZEN2 = """processor\t: 0
model name\t: AMD EPYC 7B12
flags\t\t: fpu sse avx2 fma
"""


@pytest.mark.parametrize(
    ("text", "model", "kind"),
    [
        pytest.param(SAPPHIRE_RAPIDS, "Intel(R) Xeon(R) Platinum 8480+", cpu.AMX, id="xeon-amx"),
        pytest.param(EPYC, "AMD EPYC 9654 96-Core Processor", cpu.AVX512, id="epyc-avx512"),
        pytest.param(LAPTOP, "12th Gen Intel(R) Core(TM) i7-1260P", cpu.AVX2_VNNI, id="core-avx2-vnni"),
        pytest.param(ZEN2, "AMD EPYC 7B12", cpu.AVX2, id="epyc-avx2-no-vnni"),
        pytest.param("processor\t: 0\n", None, cpu.OTHER, id="no-flags"),
    ],
)
def test_cpu_kind_from_cpuinfo(text: str, model: str | None, kind: str) -> None:
    info = cpu.parse_cpuinfo(text)
    assert info.kind == kind
    if model is not None:
        assert info.model == model
    assert info.flags <= frozenset(cpu.ISA_FLAGS)


def test_isa_record_names_every_flag() -> None:
    isa = cpu.parse_cpuinfo(EPYC).isa()
    assert set(isa) == set(cpu.ISA_FLAGS)
    assert isa["avx512_vnni"] and not isa["amx_int8"]


@pytest.mark.parametrize(
    ("text", "zero_point", "expected"),
    [
        pytest.param(SAPPHIRE_RAPIDS, None, "float (the default) suits", id="amx-float"),
        pytest.param(SAPPHIRE_RAPIDS, "split", "split zero points run slower than the float default", id="amx-split"),
        pytest.param(EPYC, None, "--zero-point split", id="avx512-float"),
        pytest.param(EPYC, "float", "--zero-point split", id="avx512-float-explicit"),
        pytest.param(EPYC, "split", "split suits", id="avx512-split"),
        pytest.param(LAPTOP, None, "--zero-point split", id="avx2-vnni-float"),
        pytest.param(ZEN2, None, "float (the default) suits", id="no-vnni-float"),
        pytest.param(ZEN2, "split", "split ones add operations", id="no-vnni-split"),
    ],
)
def test_zero_point_advice(text: str, zero_point: str | None, expected: str) -> None:
    info = cpu.parse_cpuinfo(text)
    advice = cpu.zero_point_advice(zero_point, info)
    assert advice is not None
    assert expected in advice
    assert info.model in advice


@pytest.mark.parametrize("text", [SAPPHIRE_RAPIDS, EPYC], ids=["amx", "avx512"])
def test_integer_zero_points_need_no_advice(text: str) -> None:
    assert cpu.zero_point_advice("integer", cpu.parse_cpuinfo(text)) is None


@pytest.mark.parametrize(
    ("options", "noted"),
    [
        pytest.param(CompressionOptions(mode="int4_asym"), True, id="int4-asym-hqq"),
        pytest.param(CompressionOptions(mode="int8_asym"), True, id="int8-asym-hqq"),
        pytest.param(CompressionOptions(mode="int4_asym", hqq=False), False, id="rtn"),
        pytest.param(CompressionOptions(mode="int4_sym"), False, id="symmetric"),
        pytest.param(CompressionOptions(mode="int2_asym"), False, id="low-bit-float-only"),
    ],
)
def test_compress_notes_the_zero_point_for_this_cpu(
    options: CompressionOptions, noted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compress_job, "this_cpu", lambda: cpu.parse_cpuinfo(EPYC))
    note = compress_job.zero_point_note(options)
    assert (note is not None and "AMD EPYC 9654" in note) == noted


@pytest.mark.parametrize(
    ("kind", "parameters", "chosen"),
    [
        pytest.param(cpu.AMX, 7_000_000_000, "float", id="amx-7b"),
        pytest.param(cpu.AMX, 135_000_000, "float", id="amx-135m"),
        pytest.param(cpu.AVX512, 7_000_000_000, "split", id="avx512-7b"),
        pytest.param(cpu.AVX512, cpu.SPLIT_MIN_PARAMETERS, "split", id="avx512-at-threshold"),
        pytest.param(cpu.AVX512, cpu.SPLIT_MIN_PARAMETERS - 1, "float", id="avx512-below-threshold"),
        pytest.param(cpu.AVX2_VNNI, 1_500_000_000, "split", id="avx2-vnni-1.5b"),
        pytest.param(cpu.AVX2, 7_000_000_000, "float", id="avx2-no-vnni-7b"),
        pytest.param(cpu.OTHER, 1_500_000_000, "split", id="other-1.5b"),
    ],
)
def test_zero_point_for_a_cpu_kind_and_size(kind: str, parameters: int, chosen: str) -> None:
    format_, why = cpu.zero_point_for(kind, parameters)
    assert format_ == chosen
    small = kind not in (cpu.AMX, cpu.AVX2) and parameters < cpu.SPLIT_MIN_PARAMETERS
    assert ("below 1B parameters" in why) == small


def test_every_target_cpu_but_this_names_a_kind() -> None:
    assert cpu.TARGET_CPUS["this"] is None
    assert {kind for name, kind in cpu.TARGET_CPUS.items() if name != "this"} == {
        cpu.AMX,
        cpu.AVX512,
        cpu.AVX2_VNNI,
        cpu.AVX2,
    }
