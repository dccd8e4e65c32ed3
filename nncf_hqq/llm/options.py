"""The compress job's options: the mode tables, ``CompressionOptions`` (what NNCF gets), ``JobOptions`` (everything
``nncf_hqq.llm.compress`` and ``nncf-hqq compress`` take) and their validation before any model is read.

A bad option raises ``OptionError`` (a ``ValueError``) whose message names options as Python keywords
(``group_size``); the command line shows the same message with its flags (``--group-size``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from typing import ClassVar

import nncf
import openvino as ov
from nncf import BackupMode
from nncf import CompressWeightsMode
from nncf.quantization.advanced_parameters import GroupSizeFallbackMode

from nncf_hqq.hqq import SUPPORTED_MODES
from nncf_hqq.llm.cpu import TARGET_CPUS
from nncf_hqq.llm.export import ENCODER_TASK
from nncf_hqq.llm.export import VLM_TASK
from nncf_hqq.openvino.graph import moe_gate_matmuls
from nncf_hqq.parameters import HQQ_DEFAULT
from nncf_hqq.parameters import HQQParameters
from nncf_hqq.parameters import LowBitMode
from nncf_hqq.parameters import ZeroPointFormat
from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT
from nncf_hqq.self_calibration import SelfCalibration
from nncf_hqq.self_calibration import self_calibration_subset_size

#: The modes: those HQQ handles (``nncf_hqq.hqq.SUPPORTED_MODES``) by NNCF's names, and the asymmetric low-bit
#: modes only HQQ writes (``nncf_hqq.LowBitMode``).
MODES: dict[str, CompressWeightsMode | LowBitMode] = {
    **{mode.value: mode for mode in SUPPORTED_MODES},
    **{mode.value: mode for mode in LowBitMode},
}
INT8_MODES = ("int8_asym", "int8_sym")
#: The modes ``backend="torch"`` compresses (``nncf_hqq.api.TORCH_MODES``).
TORCH_MODES = ("int4_asym", "int4_sym", "int8_asym", "int8_sym")
LOW_BIT_MODES = tuple(mode.value for mode in LowBitMode)
#: The modes the job self-calibrates in (4-bit groups: AWQ and Scale Estimation apply).
SELF_CALIBRATION_MODES = ("int4_asym", "int4_sym")
#: Whether HQQ's output guard weighs NNCF's Scale Estimation result when the model calibrates on text it generates
#: itself (``guard_reference``). Off: on that text the guard without it was as good or better on every measure
#: (Qwen2.5-1.5B g128 22.24 / 0.0662 / 0.854 against 22.80 / 0.0699 / 0.851; SmolLM2 g64, two generation seeds,
#: 32.29 / 0.1283 / 0.797 against 32.32 / 0.1309 / 0.796), and NNCF's Scale Estimation pass took half the
#: compression's time (docs/research-log.md, 2026-12-08). With real text it stays on: calibrated on Tiny Shakespeare
#: MiniLM lost 0.0037 of cosine without it (MPNet gained 0.0002).
SELF_CALIBRATION_GUARD_REFERENCE = False
#: The modes whose HQQ zero points can be stored as float, split or integer (``zero_point``).
ZERO_POINT_MODES = ("int4_asym", "int8_asym")
BACKUP_MODES: dict[str, BackupMode] = {
    "int8_asym": BackupMode.INT8_ASYM,
    "int8_sym": BackupMode.INT8_SYM,
    "none": BackupMode.NONE,
}
ZERO_POINT_FORMATS: dict[str, ZeroPointFormat] = {
    "float": ZeroPointFormat.FLOAT,
    "int": ZeroPointFormat.INTEGER,
    "split": ZeroPointFormat.SPLIT,
}
#: ``backend`` choices. ``auto`` and ``openvino``: an OpenVINO IR is compressed as it is, a HF model is exported to
#: an IR first; ``torch``: a HF model is compressed in PyTorch and written as a transformers checkpoint.
BACKENDS = ("auto", "openvino", "torch")
#: The ``task`` that lets the job infer what a HF model is exported as (optimum's inference).
AUTO_TASK = "auto"
#: ``task`` choices: ``AUTO_TASK``, or optimum's task names for what the job handles.
TASKS = (AUTO_TASK, "text-generation", ENCODER_TASK, VLM_TASK)
#: NNCF's group size for the modes below 8 bits when none is given (``get_weight_compression_configuration``).
NNCF_DEFAULT_GROUP_SIZE = 128
#: Without a group size, a layer whose input channels NNCF's default does not divide takes the largest power of two
#: that does (at least NNCF's ``min_adjusted_group_size``, 32; otherwise the backup mode), as optimum-intel's
#: default configurations ask of NNCF for such models.
GROUP_SIZE_FALLBACK = GroupSizeFallbackMode.ADJUST
GROUP_SIZE_DEFAULT_TEXT = (
    f"group size {NNCF_DEFAULT_GROUP_SIZE} (NNCF's default), for a layer it does not divide the largest power of two "
    "that does (NNCF's group size fallback 'adjust', as optimum-intel's defaults)"
)


# --------------------------------------------------------------------------------------------------------------------
# Errors that name options
# --------------------------------------------------------------------------------------------------------------------
class _OptionNames(dict[str, str]):
    """``{name}`` placeholders of an ``OptionError`` message: ``name`` as a Python keyword or a command-line flag.

    ``no_hqq`` is ``hqq=False`` / ``--no-hqq``; ``awq`` (a switch) ``awq=True`` / ``--awq``; ``zero_point=int`` is
    ``zero_point='int'`` / ``--zero-point int`` (``dataset=TEXT_FILE``, a placeholder value: ``dataset=TEXT_FILE`` /
    ``--dataset TEXT_FILE``); ``model``, ``out`` and ``models`` are ``MODEL``, ``OUT`` and ``MODEL`` on the command
    line."""

    SWITCHES: ClassVar[frozenset[str]] = frozenset(
        {"awq", "scale_estimation", "quantize_routers", "all_at_once", "int8_stand_in"}
    )
    #: Positional arguments: their command-line names.
    POSITIONAL: ClassVar[dict[str, str]] = {"model": "MODEL", "out": "OUT", "models": "MODEL"}

    def __init__(self, values: dict[str, Any], command_line: bool) -> None:
        super().__init__({key: str(value) for key, value in values.items()})
        self.command_line = command_line

    def __missing__(self, key: str) -> str:
        name, _, value = key.partition("=")
        if name in self.POSITIONAL:
            return self.POSITIONAL[name] if self.command_line else name
        if name.startswith("no_"):
            return f"--{name.replace('_', '-')}" if self.command_line else f"{name[3:]}=False"
        if self.command_line:
            return f"--{name.replace('_', '-')}" + (f" {value}" if value else "")
        if value:
            literal = value.isupper() or value.lstrip("-").isdigit()  # a placeholder such as TEXT_FILE, or a number
            return f"{name}={value}" if literal else f"{name}={value!r}"
        return f"{name}=True" if name in self.SWITCHES else name


def render(template: str, command_line: bool, **values: Any) -> str:
    """``template`` with its options named as Python keywords or command-line flags (``_OptionNames``) and
    ``values`` inserted."""
    return template.format_map(_OptionNames(values, command_line))


class JobError(Exception):
    """An error of a job whose message names the job's options: ``str()`` names them as Python keywords,
    ``for_command_line()`` as ``nncf-hqq`` flags.

    :param template: the message; ``{group_size}`` (see ``_OptionNames``) names an option.
    :param values: other placeholders of ``template`` (values: inserted as they are).
    """

    def __init__(self, template: str, **values: Any) -> None:
        self.template = template
        self.values = values
        super().__init__(self.render(command_line=False))

    def render(self, command_line: bool) -> str:
        return render(self.template, command_line, **self.values)

    def for_command_line(self) -> str:
        return self.render(command_line=True)


class OptionError(JobError, ValueError):
    """A bad option of a job, or options that cannot go together: raised before the job reads or writes anything."""


def _placeholders(names: list[str]) -> str:
    return ", ".join(f"{{{name}}}" for name in names)


# --------------------------------------------------------------------------------------------------------------------
# What NNCF gets
# --------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecipeOptions:
    """The options the job and NNCF share: how the model is compressed; ``None`` means NNCF's default.

    :param zero_point: ``"float"``, ``"int"`` or ``"split"`` (HQQ's zero-point format); ``None`` keeps
        ``HQQ_DEFAULT``'s, or, in a compress job, takes the format that suits ``JobOptions.target_cpu``.
    :param token_rows: HQQ's ``calibration_token_rows`` (0: ``HQQ_DEFAULT``'s, NNCF's per-sample means).
    :param guard_reference: HQQ's ``guard_reference`` (with calibration data: NNCF's Scale Estimation result is one
        of the output guard's choices); None: off when the model calibrates on text it generates itself
        (``SELF_CALIBRATION_GUARD_REFERENCE``), ``HQQ_DEFAULT``'s (on) with a dataset.
    """

    mode: str = "int4_asym"
    group_size: int | None = None
    ratio: float | None = None
    backup_mode: str | None = None
    awq: bool = False
    scale_estimation: bool = False
    hqq: bool = True
    zero_point: str | None = None
    subset_size: int = 128
    ignore: tuple[str, ...] = ()
    quantize_routers: bool = False
    token_rows: int = 0
    guard_reference: bool | None = None


@dataclass(frozen=True)
class CompressionOptions(RecipeOptions):
    """What the job asks of ``nncf.compress_weights``: the ``RecipeOptions`` and the data the job decided on.

    :param self_calibration: calibrate on text the model generates (used when no dataset is given).
    :param hqq_base: HQQ's parameters before ``zero_point`` and ``token_rows`` apply (None: ``HQQ_DEFAULT``).
    """

    self_calibration: SelfCalibration | None = None
    hqq_base: HQQParameters | None = None

    def hqq_params(self) -> HQQParameters | None:
        """``hqq_base`` (``HQQ_DEFAULT``) with the requested zero-point format, token rows and guard reference, or
        None (HQQ_DEFAULT itself / no HQQ)."""
        if not self.hqq:
            return None
        params = self.hqq_base
        if self.zero_point is not None or self.token_rows:
            changes: dict[str, Any] = {"calibration_token_rows": self.token_rows}
            if self.zero_point is not None:
                changes["zero_point_format"] = ZERO_POINT_FORMATS[self.zero_point]
            params = (params or HQQ_DEFAULT).replace(**changes)
        reference = self.uses_guard_reference()
        if reference != (params or HQQ_DEFAULT).guard_reference:
            params = (params or HQQ_DEFAULT).replace(guard_reference=reference)
        return params

    def uses_guard_reference(self) -> bool:
        """Whether HQQ's output guard weighs NNCF's Scale Estimation result (``guard_reference``; by default not
        when self-calibrated)."""
        if self.guard_reference is not None:
            return self.guard_reference
        if self.self_calibration is not None:
            return SELF_CALIBRATION_GUARD_REFERENCE
        return (self.hqq_base or HQQ_DEFAULT).guard_reference

    def runs_nncf_scale_estimation(self) -> bool:
        """Whether NNCF's Scale Estimation runs: asked for, and, with HQQ, as the output guard's reference (HQQ's
        scale refinement on the data takes its place otherwise)."""
        if not self.scale_estimation or not self.hqq:
            return self.scale_estimation
        params = self.hqq_params() or HQQ_DEFAULT
        return params.output_guard and params.guard_reference

    def adjusts_group_size(self) -> bool:
        """Whether NNCF adjusts the group size per layer (``GROUP_SIZE_FALLBACK``): no group size given, in a mode
        with groups."""
        return self.group_size is None and self.mode not in INT8_MODES

    def ignored_scope(self, model: ov.Model) -> nncf.IgnoredScope | None:
        """The layers kept in float: ``ignore`` (regular expressions over layer names) and, unless
        ``quantize_routers``, the MoE routers and scalar gates (``nncf_hqq.moe_gate_matmuls``)."""
        names = [] if self.quantize_routers else moe_gate_matmuls(model)
        if not names and not self.ignore:
            return None
        return nncf.IgnoredScope(names=names, patterns=list(self.ignore))

    def nncf_kwargs(
        self, dataset: nncf.Dataset | None = None, ignored_scope: nncf.IgnoredScope | None = None
    ) -> dict[str, Any]:
        """Keyword arguments of ``nncf.compress_weights`` (with ``hqq``/``hqq_params``) for these options."""
        kwargs = {
            "ignored_scope": ignored_scope,
            "mode": MODES[self.mode],
            "group_size": self.group_size,
            "ratio": self.ratio,
            "backup_mode": BACKUP_MODES[self.backup_mode] if self.backup_mode else None,
            "awq": True if self.awq else None,
            "scale_estimation": True if self.scale_estimation else None,
            "dataset": dataset if dataset is not None else self.self_calibration,
            "subset_size": (
                self_calibration_subset_size(self.subset_size, self.self_calibration)
                if self.self_calibration is not None
                else self.subset_size
            ),
            "hqq": self.hqq,
            "hqq_params": self.hqq_params(),
        }
        if self.adjusts_group_size():
            kwargs["advanced_parameters"] = nncf.AdvancedCompressionParameters(
                group_size_fallback_mode=GROUP_SIZE_FALLBACK
            )
        return kwargs

    def describe(self, data_aware: bool) -> str:
        """The options that shape the written model, in one line (``Compressing ... (...)``, ``Wrote ... (...)``):
        every option given that changes the result, and the calibration data (``data_aware``: a text file)."""
        parts = [self.mode, self._group_size_text()]
        if self.ratio is not None:
            parts.append(f"ratio {self.ratio}")
        if self.backup_mode is not None:
            parts.append(f"backup mode {self.backup_mode}")
        generated = self.self_calibration if not data_aware else None
        subset_size = self.nncf_kwargs()["subset_size"]  # what NNCF gets: self-calibrated, the sequences' number
        if data_aware:
            parts.append(f"calibrated on {subset_size} samples of the dataset")
        elif generated is not None:
            steered = " continuing the prompt text" if generated.prompt_token_ids is not None else ""
            parts.append(f"self-calibrated on {generated.num_samples} generated sequences{steered}")
            if subset_size < generated.num_samples:
                parts.append(f"subset size {subset_size}")
        if self.awq:
            parts.append("AWQ" if data_aware or generated is not None else "data-free AWQ")
        if self.runs_nncf_scale_estimation():
            parts.append("Scale Estimation")
        elif self.scale_estimation:
            parts.append("HQQ's scales and output guard on the data (no NNCF Scale Estimation)")
        parts.append(self._hqq_text())
        if self.ignore:
            parts.append("kept in float: " + " ".join(f"'{pattern}'" for pattern in self.ignore))
        if self.quantize_routers:
            parts.append("MoE routers compressed")
        return ", ".join(parts)

    def _group_size_text(self) -> str:
        if self.group_size is not None:
            return f"group size {self.group_size}"
        if self.adjusts_group_size():
            return f"group size {NNCF_DEFAULT_GROUP_SIZE} or the largest power of two a layer takes"
        return "per channel"

    def _hqq_text(self) -> str:
        if not self.hqq:
            return "RTN (no HQQ)"
        hqq = [f"{self.zero_point or 'default'} zero point"]
        if self.token_rows:
            hqq.append(f"{self.token_rows} token rows per sample")
        if self.hqq_base is not None:
            hqq.append("the recipe's parameters")
        return f"HQQ ({', '.join(hqq)})"


# --------------------------------------------------------------------------------------------------------------------
# What the job takes
# --------------------------------------------------------------------------------------------------------------------
def _path_or_none(value: str | Path | None) -> Path | None:
    return None if value is None else Path(value).expanduser()


@dataclass(frozen=True)
class JobOptions(RecipeOptions):
    """The options of ``nncf_hqq.llm.compress`` (keyword arguments) and of ``nncf-hqq compress`` (flags: ``group_size``
    is ``--group-size``, ``self_calibration=False`` is ``--no-self-calibration``): the ``RecipeOptions`` and how the
    job runs; docs/cli.md says what each does.

    :param dataset: a text file to calibrate on (random 256-token windows; an encoder: random lines).
    :param self_calibration: without ``dataset``, calibrate an int4 LLM on text it generates itself.
    :param output_check: self-calibrated: compare the result with the data-free HQQ and RTN ones and keep the closest.
    :param tokenizer: the HF tokenizer dir (default: MODEL's) for ``dataset``, ``self_prompt_text`` and OUT's
        tokenizer IRs.
    :param task: ``"auto"`` (inferred as optimum infers it), ``"text-generation"``, ``"feature-extraction"`` or
        ``"image-text-to-text"``.
    :param memory_check: refuse, before anything starts, a run whose phases need more memory than is available.
    :param disk_check: refuse, before anything starts, a run whose phases write more to a disk than is free on it
        (the export to the system's temporary directory, ``TMPDIR``; the scratch files and OUT beside OUT).
    :param int8_stand_in: self-calibrated: an INT8 copy of the float model runs the phases that only need its outputs
        (the output check's reference, the self-calibration text, the statistics; ``nncf_hqq.llm.stand_in``), in
        about half the memory of bf16 weights. None (default): only where a phase of the float model would not fit
        in the memory available and every phase with the copy does (logged); True: always; False: never (a run
        that does not fit is refused). Its results are within the calibration's seed spread on SmolLM2, slightly
        behind the float model's (docs/memory.md).
    :param memory_budget: GiB the job may use, planned and checked as the memory available (default: what the
        system has available when the job starts), e.g. to leave room for other work.
    :param target_cpu: the kind of CPU the model will run on (``cpu.TARGET_CPUS``; ``"this"``: the one the job
        runs on); without ``zero_point``, HQQ's zero points take the format that suits it (``cpu.zero_point_for``).
    """

    dataset: Path | None = None
    self_calibration: bool = True
    output_check: bool = True
    self_calibration_samples: int = SELF_CALIBRATION_DEFAULT.num_samples
    self_prompt_text: Path | None = None
    tokenizer: Path | None = None
    task: str = AUTO_TASK
    memory_check: bool = True
    disk_check: bool = True
    int8_stand_in: bool | None = None
    memory_budget: float | None = None
    backend: str = "auto"
    target_cpu: str = "this"

    def __post_init__(self) -> None:
        for name in ("dataset", "self_prompt_text", "tokenizer"):
            object.__setattr__(self, name, _path_or_none(getattr(self, name)))
        ignore = (self.ignore,) if isinstance(self.ignore, str) else tuple(self.ignore)
        object.__setattr__(self, "ignore", ignore)
        if isinstance(self.mode, str):
            object.__setattr__(self, "mode", self.mode.lower())

    @property
    def task_given(self) -> str | None:
        """The task asked for (None: inferred)."""
        return None if self.task == AUTO_TASK else self.task

    def compression_options(self) -> CompressionOptions:
        """What NNCF gets before the job decides on data (self-calibration, an encoder's recipe)."""
        return CompressionOptions(
            **{field.name: getattr(self, field.name) for field in dataclasses.fields(RecipeOptions)}
        )

    def validate(self) -> None:
        """Raise ``OptionError`` for a value out of its choices or options that cannot work together, before any
        model is read."""
        self._check_choices()
        self._check_values_and_data()
        self._check_mode()

    def _check_choices(self) -> None:
        choices: dict[str, tuple[object, tuple[Any, ...]]] = {
            "mode": (self.mode, tuple(MODES)),
            "backup_mode": (self.backup_mode, (None, *BACKUP_MODES)),
            "zero_point": (self.zero_point, (None, *ZERO_POINT_FORMATS)),
            "task": (self.task, TASKS),
            "backend": (self.backend, BACKENDS),
            "target_cpu": (self.target_cpu, tuple(TARGET_CPUS)),
        }
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                shown = ", ".join(repr(a) for a in allowed)
                raise OptionError(f"{{{name}}} must be one of {{allowed}}, got {{value}}", allowed=shown, value=value)

    def _check_values_and_data(self) -> None:
        if self.ratio is not None and not 0.0 < self.ratio <= 1.0:
            raise OptionError("{ratio} must be in (0, 1], got {value}", value=self.ratio)
        if self.group_size is not None and (self.group_size == 0 or self.group_size < -1):
            msg = "{group_size} must be a positive number of weights or -1 (per channel), got {value}"
            raise OptionError(msg, value=self.group_size)
        if self.subset_size <= 0:
            raise OptionError("{subset_size} must be positive, got {value}", value=self.subset_size)
        if self.zero_point is not None and not self.hqq:
            raise OptionError("{zero_point} sets HQQ's zero point; it cannot be combined with {no_hqq}")
        if self.token_rows < 0:
            raise OptionError("{token_rows} must be >= 0, got {value}", value=self.token_rows)
        if self.token_rows and not self.hqq:
            raise OptionError("{token_rows} sets what HQQ fits; it cannot be combined with {no_hqq}")
        if self.guard_reference is not None and not self.hqq:
            raise OptionError("{guard_reference} sets what HQQ's output guard weighs; drop {no_hqq}")
        if self.guard_reference is not None and self.dataset is None and not self.self_calibration:
            raise OptionError(
                "{guard_reference} sets what HQQ's output guard weighs on calibration data: add {dataset=TEXT_FILE} "
                "or drop {no_self_calibration}"
            )
        if self.token_rows and self.dataset is None and not self.self_calibration:
            raise OptionError(
                "{token_rows} needs calibration data: add {dataset=TEXT_FILE} or drop {no_self_calibration}"
            )
        if self.scale_estimation and self.dataset is None and not (self.self_calibration and self.hqq):
            raise OptionError("{scale_estimation} needs calibration data: add {dataset=TEXT_FILE}")
        if self.self_calibration_samples <= 0:
            msg = "{self_calibration_samples} must be positive, got {value}"
            raise OptionError(msg, value=self.self_calibration_samples)
        if self.self_prompt_text is not None:
            if self.dataset is not None or not self.self_calibration or not self.hqq:
                raise OptionError(
                    "{self_prompt_text} steers self-calibration; it cannot be combined with {dataset}, "
                    "{no_self_calibration} or {no_hqq}"
                )
            if not self.self_prompt_text.is_file():
                raise OptionError("{self_prompt_text} {path} is not a file", path=self.self_prompt_text)
        if self.memory_budget is not None and not self.memory_budget > 0:
            raise OptionError("{memory_budget} must be a positive number of GiB, got {value}", value=self.memory_budget)
        if self.dataset is not None and not self.dataset.is_file():
            raise OptionError("{dataset} {path} is not a file", path=self.dataset)
        if self.tokenizer is not None and not self.tokenizer.is_dir():
            raise OptionError("{tokenizer} {path} is not a directory", path=self.tokenizer)

    def _check_mode(self) -> None:
        if self.zero_point is not None and not self.mode.endswith("_asym"):
            raise OptionError("{zero_point} applies to asymmetric modes; {chosen} has no zero point", chosen=self.mode)
        if self.mode in LOW_BIT_MODES:
            conflicts = {
                "no_hqq": not self.hqq,
                "awq": self.awq,
                "scale_estimation": self.scale_estimation,
                "zero_point=int": self.zero_point == "int",
                "zero_point=split": self.zero_point == "split",
            }
            if given := [name for name, used in conflicts.items() if used]:
                msg = "{chosen} is HQQ-only, data-free and float-zero-point; drop " + _placeholders(given)
                raise OptionError(msg, chosen=self.mode)
        if self.backend == "torch" and self.mode not in TORCH_MODES:
            msg = "{backend=torch} compresses {modes}; {chosen} needs openvino"
            raise OptionError(msg, modes=", ".join(TORCH_MODES), chosen=self.mode)
        if self.backend == "torch" and self.zero_point == "split":
            raise OptionError("{zero_point=split} is an OpenVINO graph format; {backend=torch} takes float or int")
        if self.mode in INT8_MODES:
            per_channel_only = {
                "group_size": self.group_size not in (None, -1),
                "ratio": self.ratio not in (None, 1.0),
                "awq": self.awq,
                "scale_estimation": self.scale_estimation,
                "dataset": self.dataset is not None,
                "backup_mode": self.backup_mode is not None,
            }
            if given := [name for name, used in per_channel_only.items() if used]:
                msg = "{chosen} compresses every layer per channel without data; drop " + _placeholders(given)
                raise OptionError(msg, chosen=self.mode)
