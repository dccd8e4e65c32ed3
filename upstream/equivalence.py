"""The same compressions through the patched NNCF and through ``nncf_hqq``, to compare what they write.

``python upstream/equivalence.py OUT.npz --build core|series`` (with the build's ``DEST/src`` first on
``PYTHONPATH`` and this repository after it, for ``tests/ov_models.py``) compresses the ``CASES`` of that build with
the patched ``nncf.compress_weights`` while any import of ``nncf_hqq`` fails, and saves every model's constants
(codes, scales, zero points, in graph order) and, for the cases without HQQ, the serialized model; of the PyTorch
model, its state dict (weights, scales, zero points). ``tests/test_upstream.py`` compares them with what ``nncf_hqq``
(with the case's preset, its numpy references: ``REFERENCE_ENVIRONMENT``) and plain NNCF write in its own process.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import numpy as np

#: The token rows of the data-aware case (small, to stay fast).
TOKEN_ROWS = 8
_AUTO_NAME = re.compile(r'((?:name|friendly_name)="(?:[^"]*/)?[A-Za-z]+)_\d+"')


@dataclass(frozen=True)
class Case:
    """One compression: NNCF's arguments, whether HQQ is on, its parameters on both sides (``hqq_params``: the fields
    ``AdvancedHQQParameters`` and ``HQQParameters`` share), the ``nncf_hqq`` preset compared with per build, and the
    builds the case runs on (``core``: patch 0001 alone; ``series``: every patch). ``batched``: the model of a 3-D
    batched MatMul weight followed by a 2-D one (``batched_matmul_model``) instead of ``transformer_like``;
    ``fused``: attention blocks with fused QKV projections split in different orders (``fused_qkv_attention``)."""

    name: str
    hqq: bool
    kwargs: dict[str, Any] = field(default_factory=dict)
    data_aware: bool = False
    token_rows: int = 0
    moe: bool = True
    torch: bool = False
    hqq_params: dict[str, Any] = field(default_factory=dict)
    presets: dict[str, str] = field(default_factory=lambda: dict(PRESETS))
    patched_params: dict[str, Any] | None = None
    builds: tuple[str, ...] = ("core", "series")
    batched: bool = False
    fused: bool = False

    def hqq_parameters(self, patched: bool = False) -> dict[str, Any]:
        """HQQ's parameters other than the defaults (token rows included), as ``HQQParameters`` fields or, when
        ``patched``, as ``AdvancedHQQParameters`` fields (``patched_params`` where the names differ)."""
        rows = {"calibration_token_rows": self.token_rows} if self.token_rows else {}
        params = self.patched_params if patched and self.patched_params is not None else self.hqq_params
        return {**params, **rows}


BUILDS = ("core", "series")
#: The nncf_hqq preset each build writes with its default parameters: 0001 is ``HQQ_CORE``; the whole series adds the
#: rest of ``HQQ_SERIES`` (``HQQ_DEFAULT`` with every group's iterations stopping on their own).
PRESETS = {"core": "HQQ_CORE", "series": "HQQ_SERIES"}
SYMMETRIC_MODES = ("INT4_SYM", "INT8_SYM", "INT3_SYM", "INT2_SYM")
#: The compression of issue 45's reproducer: every weight, groups of 32 (``batched_matmul_model``).
BATCHED_ARGUMENTS = {"group_size": 32, "ratio": 1.0, "all_layers": True}
#: Its shapes: E experts' weights [E, O, H] applied to T tokens, then a 2-D [1024, H] weight.
BATCHED_SHAPE = {"experts": 4, "tokens": 8, "hidden": 64, "outputs": 64, "head": 1024}
#: Both sides run NNCF's and nncf_hqq's numpy references: the patched trees have no compiled kernels of HQQ's, and
#: NNCF's own compiled compression functions are then off on both sides too.
REFERENCE_ENVIRONMENT = {"NNCF_DISABLE_OPTIMIZED_COMPRESSION": "1"}
#: NNCF's switch for its CI: no telemetry. Each ``compress_weights`` call otherwise sends an event from a worker
#: thread of openvino-telemetry, which forks a child process to send it; OpenBLAS stops its own threads before every
#: fork, and a threaded matmul the main thread has in flight at that moment then waits for them forever (the hang of
#: 2026-12-07 in the research log). The many tiny compressions here make that likely; it also costs ~8 s a run.
NO_TELEMETRY_ENVIRONMENT = {"NNCF_CI": "1"}
#: 0003's data-free steps switched off one at a time (``AdvancedHQQParameters`` and ``HQQParameters`` names), for
#: their ablation rows: each case is ``hqq_int4_asym_g64`` (or ``hqq_int4_sym``) but for one step.
SWITCHES = (
    ("hqq_no_input_energy_weighting", {}, {"importance": "none"}, {"input_energy_weighting": False}),
    ("hqq_no_rtn_group_fallback", {}, {"rtn_guard": False}, {"rtn_group_fallback": False}),
    ("hqq_int4_sym_no_rtn_group_fallback", {"mode": "INT4_SYM"}, {"rtn_guard": False}, {"rtn_group_fallback": False}),
)
CASES = (
    Case("hqq_int4_asym_g64", True),
    Case("hqq_int4_asym_g64_dense", True, moe=False),
    Case("hqq_int8_asym", True, {"mode": "INT8_ASYM", "group_size": None}),
    Case("hqq_awq", True, {"awq": True}, moe=False),
    Case("hqq_awq_data", True, {"awq": True}, True, moe=False),
    Case("hqq_batched_matmul", True, BATCHED_ARGUMENTS, batched=True),
    Case("hqq_fused_qkv", True, {"group_size": 32, "all_layers": True}, fused=True),
    Case("hqq_batched_matmul_awq_data", True, {**BATCHED_ARGUMENTS, "awq": True}, True, batched=True),
    Case(
        "hqq_batched_matmul_se",
        True,
        {**BATCHED_ARGUMENTS, "scale_estimation": True},
        True,
        batched=True,
        builds=("series",),
    ),
    Case(
        "hqq_batched_matmul_awq_se",
        True,
        {**BATCHED_ARGUMENTS, "awq": True, "scale_estimation": True},
        True,
        batched=True,
        builds=("series",),
    ),
    Case(
        "hqq_awq_se_no_guard",
        True,
        {"awq": True, "scale_estimation": True},
        True,
        moe=False,
        hqq_params={"output_guard": False},
        builds=("series",),
    ),
    Case("hqq_awq_se", True, {"awq": True, "scale_estimation": True}, True, moe=False, builds=("series",)),
    *(
        Case(name, True, kwargs, hqq_params=params, patched_params=patched, builds=("series",))
        for name, kwargs, params, patched in SWITCHES
    ),
    Case(
        "hqq_awq_se_token_rows",
        True,
        {"awq": True, "scale_estimation": True},
        True,
        TOKEN_ROWS,
        moe=False,
        builds=("series",),
    ),
    Case(
        "hqq_int4_asym_integer_zero_point",
        True,
        hqq_params={"zero_point_format": "integer"},
        patched_params={"integer_zero_point": True},
        builds=("series",),
    ),
    *(
        Case(
            f"hqq_{mode.lower()}",
            True,
            {"mode": mode, "group_size": -1 if mode == "INT8_SYM" else 64},
            builds=("series",),
        )
        for mode in SYMMETRIC_MODES
    ),
    Case(
        "torch_hqq_int4_sym_g32",
        True,
        {"mode": "INT4_SYM", "group_size": 32, "all_layers": True},
        torch=True,
        builds=("series",),
    ),
    Case("int4_asym_g64", False),
    Case("int4_asym_awq_se", False, {"awq": True, "scale_estimation": True}, True, moe=False),
    Case("torch_hqq_int4_asym_g32", True, {"group_size": 32, "all_layers": True}, torch=True, builds=("series",)),
)

#: Requests a build refuses before anything is transformed: 0001 has no Scale Estimation with HQQ (issue 45's
#: reproducer, a 3-D batched MatMul weight with data, which left the model half compressed before).
REFUSALS = (
    Case(
        "hqq_batched_matmul_se",
        True,
        {**BATCHED_ARGUMENTS, "scale_estimation": True},
        True,
        batched=True,
        builds=("core",),
    ),
)


def nncf_arguments(case: Case) -> dict[str, Any]:
    """NNCF's keyword arguments of a case (INT4_ASYM, group size 64 unless the case says otherwise)."""
    import nncf

    from tests.ov_models import input_ids

    arguments: dict[str, Any] = {"mode": "INT4_ASYM", "group_size": 64, **case.kwargs}
    arguments["mode"] = nncf.CompressWeightsMode[arguments["mode"]]
    if arguments["group_size"] is None:
        del arguments["group_size"]
    if case.torch:
        import torch

        arguments["dataset"] = nncf.Dataset([torch.randn(1, 8, 64, generator=torch.Generator().manual_seed(1))])
    elif case.batched and case.data_aware:
        arguments["dataset"] = nncf.Dataset([batched_matmul_input(seed) for seed in range(4)])
    elif case.data_aware:
        arguments["dataset"] = nncf.Dataset([input_ids(seed, 24) for seed in range(6)])
    return arguments


def model_of(case: Case) -> Any:
    if case.torch:
        return torch_model()
    if case.batched:
        return batched_matmul_model()
    if case.fused:
        from tests.ov_models import fused_qkv_attention

        return fused_qkv_attention()
    from tests.ov_models import transformer_like

    return transformer_like(seed=3, moe=case.moe)


def batched_matmul_model(transpose_b: bool = True) -> Any:
    """A batched MatMul of E experts' weights [E, O, H] (MoE experts' layout) on the input [E, T, H], then a 2-D
    [1024, O] weight: the model of issue 45's reproducer (``transpose_b=False`` stores the weights [E, H, O] and
    [O, 1024])."""
    import openvino as ov
    from openvino import opset13 as opset

    e, t, h, o, head = (BATCHED_SHAPE[k] for k in ("experts", "tokens", "hidden", "outputs", "head"))
    rng = np.random.default_rng(0)

    def weight(shape: tuple[int, ...], name: str) -> Any:
        values = (rng.standard_t(4, shape) * 0.05).astype(np.float32)
        return opset.constant(values if transpose_b else np.swapaxes(values, -1, -2).copy(), name=name)

    x = opset.parameter([e, t, h], ov.Type.f32, name="x")
    experts = opset.matmul(x, weight((e, o, h), "w"), False, transpose_b, name="experts")
    head_out = opset.matmul(opset.relu(experts), weight((head, o), "w2"), False, transpose_b, name="head")
    return ov.Model([head_out], [x], "batched_matmul")


def batched_matmul_input(seed: int) -> np.ndarray:
    e, t, h = (BATCHED_SHAPE[k] for k in ("experts", "tokens", "hidden"))
    return np.random.default_rng(seed).normal(size=(e, t, h)).astype(np.float32)


def torch_model() -> Any:
    """LayerNorm -> Linear -> ReLU -> Linear, seeded (a module of its own: NNCF's hooks do not run in a
    ``Sequential``, which would call the hook storage NNCF adds as a child)."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = torch.nn.LayerNorm(64)
            self.up = torch.nn.Linear(64, 128)
            self.down = torch.nn.Linear(128, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.down(torch.relu(self.up(self.norm(x))))

    torch.manual_seed(0)
    return Block().eval()


def compress_patched(case: Case, model: Any = None) -> Any:
    """The case through the patched ``nncf.compress_weights`` (``hqq`` and ``advanced_parameters.hqq_params``), on
    ``model`` when given."""
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedCompressionParameters
    from nncf.quantization.advanced_parameters import AdvancedHQQParameters

    arguments = nncf_arguments(case)
    if case.hqq_parameters(patched=True):
        hqq_params = AdvancedHQQParameters(**case.hqq_parameters(patched=True))
        arguments["advanced_parameters"] = AdvancedCompressionParameters(hqq_params=hqq_params)
    if case.hqq:
        arguments["hqq"] = True
    return nncf.compress_weights(model_of(case) if model is None else model, **arguments)


def compress_reference(case: Case, build: str) -> Any:
    """The case through ``nncf_hqq`` with the build's preset (HQQ) or through NNCF's own ``compress_weights`` (no
    HQQ)."""
    from nncf.quantization.quantize_model import compress_weights as nncf_compress_weights

    import nncf_hqq

    arguments = nncf_arguments(case)
    if not case.hqq:  # NNCF's own function (nncf_hqq replaces nncf.compress_weights, not this one)
        return nncf_compress_weights(model_of(case), **arguments)
    arguments["hqq_params"] = getattr(nncf_hqq, case.presets[build]).replace(**case.hqq_parameters())
    return nncf_hqq.compress_weights(model_of(case), hqq=True, **arguments)


def constants(model: Any) -> dict[str, np.ndarray]:
    """Every constant of the model in graph order, as its bytes, keyed ``index:element type:shape``."""
    found: dict[str, np.ndarray] = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Constant":
            continue
        key = f"{len(found)}:{op.get_element_type().get_type_name()}:{tuple(op.get_output_shape(0))}"
        found[key] = np.frombuffer(op.get_data().tobytes(), dtype=np.uint8).copy()
    return found


def serialized(model: Any) -> str:
    """The model's XML (auto-generated names made neutral) and its weights' bytes as one comparable text."""
    import openvino as ov

    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "model.xml"
        ov.save_model(model, xml, compress_to_fp16=False)
        text = _AUTO_NAME.sub(r'\1_N"', xml.read_text())
        return text + xml.with_suffix(".bin").read_bytes().hex()


def results(model: Any, case: Case) -> dict[str, np.ndarray]:
    """What the comparison reads of one compressed model, keyed ``case/...``."""
    if case.torch:
        state = model.state_dict()
        return {f"{case.name}/{key}": value.detach().cpu().numpy() for key, value in state.items()}
    found = {f"{case.name}/{key}": value for key, value in constants(model).items()}
    if not case.hqq:
        found[f"{case.name}/serialized"] = np.array(serialized(model))
    return found


HQQ_RT_INFO = re.compile(r"""\n\s*<hqq value="False" />|, 'hqq_params': \{[^{}]*\}""")


def without_hqq_rt_info(text: str) -> tuple[str, list[str]]:
    """A serialized model without what the patched NNCF adds to rt_info when hqq is off (``hqq`` and
    ``advanced_parameters.hqq_params``, dumped as ``gptq``'s are), and what was removed."""
    return HQQ_RT_INFO.sub("", text), [match.strip() for match in HQQ_RT_INFO.findall(text)]


def refusal(case: Case) -> dict[str, np.ndarray]:
    """Compresses a case that must be refused; records the error's type and whether the model is as it was
    (every constant equal), keyed ``case/refusal/...``."""
    import nncf

    model = model_of(case)
    before = constants(model)
    error = ""
    try:
        compress_patched(case, model)
    except nncf.ValidationError as caught:
        error = f"{type(caught).__name__}: {caught}"
    after = constants(model)
    unchanged = sorted(before) == sorted(after) and all(np.array_equal(before[k], after[k]) for k in before)
    return {f"{case.name}/refusal/error": np.array(error), f"{case.name}/refusal/unchanged": np.array(unchanged)}


class _ForbidNNCFHQQ(importlib.abc.MetaPathFinder):
    """Makes any import of ``nncf_hqq`` fail, so that the patched NNCF is shown to work on its own."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> None:
        if fullname.split(".")[0] == "nncf_hqq":
            msg = f"{fullname} must not be imported with the patched NNCF"
            raise ImportError(msg)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Compress the CASES with the patched NNCF; save what it wrote.")
    parser.add_argument("out", type=Path, help="the .npz file to write")
    parser.add_argument("--build", choices=BUILDS, default="series", help="which build's cases to run")
    args = parser.parse_args(argv)
    sys.meta_path.insert(0, _ForbidNNCFHQQ())
    os.environ.update(REFERENCE_ENVIRONMENT | NO_TELEMETRY_ENVIRONMENT)
    import nncf

    saved: dict[str, np.ndarray] = {"nncf_file": np.array(str(Path(nncf.__file__).resolve()))}
    for case in CASES:
        if args.build not in case.builds:
            continue
        if case.torch and importlib.util.find_spec("torch") is None:
            continue  # the test skips this case too
        saved.update(results(compress_patched(case), case))
    for case in REFUSALS:
        if args.build in case.builds:
            saved.update(refusal(case))
    loaded = sorted(name for name in sys.modules if name.split(".")[0] == "nncf_hqq")
    saved["nncf_hqq_modules"] = np.array(loaded, dtype=str)
    np.savez(args.out, **saved)
    return 0


if __name__ == "__main__":
    sys.exit(main())
