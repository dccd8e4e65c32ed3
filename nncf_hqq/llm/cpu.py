"""The CPU this runs on, and which zero-point format suits a CPU (docs/inference.md, "Which zero point on which CPU").

OpenVINO's CPU plugin quantizes a MatMul's activations to int8 (its dynamic quantization) only on CPUs with VNNI, and
only for integer zero points. On such CPUs without AMX, HQQ's float zero point therefore costs time against RTN's
integer one and the split format runs on RTN's kernels; on Xeons with AMX the float zero point runs at RTN's speed and
the split format's extra nodes are the slower choice; on CPUs without VNNI no activation is quantized, for RTN either,
and the float zero point runs at RTN's speed. No IR can choose at load time, so ``nncf-hqq compress`` writes the format
that suits the CPU it is told the model will run on (``target_cpu``; by default the one it runs on).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

#: ``/proc/cpuinfo`` flags that decide which int8 / bf16 kernels OpenVINO's CPU plugin can use.
ISA_FLAGS = ("amx_tile", "amx_int8", "amx_bf16", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "avx2")
#: The kinds of CPU the advice tells apart: AMX; VNNI without AMX (AVX-512 VNNI, or AVX2 VNNI as on Intel's client
#: CPUs since Alder Lake); AVX2 without VNNI (also AVX-512 CPUs without VNNI); other (no AVX2, or not x86).
AMX, AVX512, AVX2_VNNI, AVX2, OTHER = "AMX", "AVX-512 without AMX", "AVX2 with VNNI", "AVX2 without VNNI", "other"
#: ``target_cpu`` choices: the kind of CPU a model is compressed for (``this``: the CPU the job runs on).
TARGET_CPUS = {"this": None, "amx": AMX, "avx512": AVX512, "avx2-vnni": AVX2_VNNI, "avx2": AVX2}
#: Without AMX the split zero point runs nearer RTN's speed than the float one from about this many parameters; on
#: smaller models its extra operations cost more than the float zero point does (docs/inference.md).
SPLIT_MIN_PARAMETERS = 1_000_000_000


@dataclass(frozen=True)
class CpuInfo:
    """A CPU's model name and which of ``ISA_FLAGS`` it has."""

    model: str
    flags: frozenset[str]

    @property
    def kind(self) -> str:
        """``AMX``, ``AVX512`` (AVX-512 with VNNI, no AMX), ``AVX2_VNNI``, ``AVX2`` (no VNNI) or ``OTHER``."""
        if "amx_int8" in self.flags or "amx_tile" in self.flags:
            return AMX
        if "avx512_vnni" in self.flags:
            return AVX512
        if "avx_vnni" in self.flags:
            return AVX2_VNNI
        return AVX2 if "avx2" in self.flags else OTHER

    def isa(self) -> dict[str, bool]:
        return {flag: flag in self.flags for flag in ISA_FLAGS}

    def describe(self) -> str:
        return f"{self.model} ({self.kind})"


def parse_cpuinfo(text: str) -> CpuInfo:
    """The first processor's model name and flags in the text of ``/proc/cpuinfo``."""
    model, flags = "", frozenset[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not model:
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = frozenset(value.split()) & frozenset(ISA_FLAGS)
    return CpuInfo(model or platform.processor() or "unknown CPU", flags)


def this_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> CpuInfo:
    """This machine's CPU (on systems without ``/proc/cpuinfo``: its name, no known flags)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        text = ""
    return parse_cpuinfo(text)


def zero_point_advice(zero_point: str | None, cpu: CpuInfo) -> str | None:
    """One line on how ``zero_point`` (``--zero-point``; None: the float default) suits ``cpu``, or None when there is
    nothing to say (integer zero points run RTN's kernels on every CPU)."""
    zero_point = zero_point or "float"
    if zero_point == "integer":
        return None
    cpu_text = f"this CPU, {cpu.describe()}"
    if cpu.kind == AMX and zero_point == "float":
        return f"zero points: float (the default) suits {cpu_text}: with AMX it runs at RTN's speed"
    if cpu.kind == AMX:
        return (
            f"zero points: on {cpu_text}, split zero points run slower than the float default; they pay off on CPUs "
            "with VNNI but without AMX (docs/inference.md)"
        )
    if cpu.kind == AVX2 and zero_point == "float":
        return f"zero points: float (the default) suits {cpu_text}: without VNNI it runs at RTN's speed"
    if cpu.kind == AVX2:
        return (
            f"zero points: on {cpu_text}, without VNNI, float zero points run at RTN's speed; split ones add "
            "operations that gain nothing there (docs/inference.md)"
        )
    if zero_point == "float":
        return (
            f"zero points: on {cpu_text}, float zero points cost time against RTN's; --zero-point split runs on RTN's "
            "integer kernels, the better choice there for models of 1B parameters and more (docs/inference.md)"
        )
    return f"zero points: split suits {cpu_text}: with VNNI and without AMX it runs on RTN's integer kernels"


def zero_point_for(kind: str, parameters: int) -> tuple[str, str]:
    """The zero-point format (``"float"`` or ``"split"``) that suits a model of ``parameters`` on a CPU of ``kind``,
    and why, in a few words."""
    if kind == AMX:
        return "float", "with AMX float zero points run at RTN's speed"
    if kind == AVX2:
        return "float", "without VNNI float zero points run at RTN's speed"
    if parameters >= SPLIT_MIN_PARAMETERS:
        return "split", "with VNNI and without AMX split zero points run on RTN's integer kernels"
    billions = SPLIT_MIN_PARAMETERS / 1e9
    return "float", f"below {billions:g}B parameters split zero points cost more than float ones, even without AMX"
