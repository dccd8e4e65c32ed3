"""The compress job as one Python call: ``compress(model, out, **options)`` turns a HF checkpoint (a dir or a hub id)
or an OpenVINO IR into a compressed model dir, and returns what it did (``CompressionResult``). LLMs, encoders and
vision-language models (``nncf_hqq.llm.vlm``) each take their path.

The options are ``nncf-hqq compress``'s as keyword arguments (``JobOptions``: ``group_size=64``,
``self_calibration=False``...). Bad options raise ``OptionError`` (a ``ValueError``) before anything is read; a
failure later raises NNCF's or the stack's error. OUT is written beside its place and moved in only when complete
(``nncf_hqq.llm.staging``): a run that fails or is killed leaves OUT as it was.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nncf
import openvino as ov
from nncf.common.logging import nncf_logger

from nncf_hqq.llm.compression import compress_hf_model
from nncf_hqq.llm.compression import compress_timed
from nncf_hqq.llm.compression import self_calibrated
from nncf_hqq.llm.compression import self_calibration_obstacle
from nncf_hqq.llm.cpu import TARGET_CPUS
from nncf_hqq.llm.cpu import this_cpu
from nncf_hqq.llm.cpu import zero_point_advice
from nncf_hqq.llm.cpu import zero_point_for
from nncf_hqq.llm.disk import check_compress_disk
from nncf_hqq.llm.disk import compress_disk_uses
from nncf_hqq.llm.encoders import calibration_dataset as encoder_calibration_dataset
from nncf_hqq.llm.encoders import is_encoder
from nncf_hqq.llm.encoders import loader_hint
from nncf_hqq.llm.encoders import recipe_for
from nncf_hqq.llm.encoders import with_recipe
from nncf_hqq.llm.layout import LANGUAGE_MODEL_XML
from nncf_hqq.llm.layout import read_model
from nncf_hqq.llm.logs import announces_phases
from nncf_hqq.llm.logs import progress_bars_only_on_a_terminal
from nncf_hqq.llm.memory import GIB
from nncf_hqq.llm.memory import PhaseEstimate
from nncf_hqq.llm.memory import check_compress_memory
from nncf_hqq.llm.memory import first_line
from nncf_hqq.llm.memory import ir_size
from nncf_hqq.llm.options import GROUP_SIZE_DEFAULT_TEXT
from nncf_hqq.llm.options import GROUP_SIZE_FALLBACK
from nncf_hqq.llm.options import SELF_CALIBRATION_MODES
from nncf_hqq.llm.options import ZERO_POINT_MODES
from nncf_hqq.llm.options import CompressionOptions
from nncf_hqq.llm.options import JobOptions
from nncf_hqq.llm.options import OptionError
from nncf_hqq.llm.options import render
from nncf_hqq.llm.output_check import OUTPUT_CHECK_SEQUENCES
from nncf_hqq.llm.output_check import OutputCheck
from nncf_hqq.llm.output_check import compress_checked_on_outputs
from nncf_hqq.llm.records import versions
from nncf_hqq.llm.sanity import check_calibration_text
from nncf_hqq.llm.source import HF_DIR
from nncf_hqq.llm.source import VLM_IR_DIR
from nncf_hqq.llm.source import ModelSource
from nncf_hqq.llm.source import SourceIR
from nncf_hqq.llm.source import opened
from nncf_hqq.llm.source import resolve_source
from nncf_hqq.llm.staging import staged_dir
from nncf_hqq.llm.stand_in import stand_in_for
from nncf_hqq.llm.texts import calibration_dataset
from nncf_hqq.llm.texts import prompt_text_token_ids
from nncf_hqq.llm.texts import torch_calibration_dataset
from nncf_hqq.llm.timing import CALIBRATION_DATA_PHASE
from nncf_hqq.llm.timing import StepTimer
from nncf_hqq.llm.vlm import NO_SELF_CALIBRATION
from nncf_hqq.llm.vlm import VLM_LOADER
from nncf_hqq.llm.vlm import check_vlm_options
from nncf_hqq.llm.vlm import opened_vlm
from nncf_hqq.llm.vlm import vlm_ir_size
from nncf_hqq.llm.vlm import write_vlm_dir
from nncf_hqq.llm.writing import save_checkpoint_dir
from nncf_hqq.llm.writing import save_model_dir
from nncf_hqq.llm.writing import write_record
from nncf_hqq.openvino.graph import moe_gate_matmuls
from nncf_hqq.openvino.pages import releasing_file_pages
from nncf_hqq.openvino.pages import return_free_heap
from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT

#: What the job wrote: an OpenVINO LLM dir, an OpenVINO encoder dir, a transformers checkpoint, an OpenVINO
#: vision-language model dir (``nncf_hqq.llm.vlm``).
LLM, ENCODER, CHECKPOINT, VLM = "llm", "encoder", "checkpoint", "vlm"
#: How to load a transformers checkpoint the torch backend wrote.
CHECKPOINT_LOADER = "import nncf_hqq.torch; transformers.AutoModelForCausalLM.from_pretrained(OUT)"


@dataclass(frozen=True)
class CompressionResult:
    """What a compress run did.

    :param out: OUT, as given.
    :param kind: ``"llm"``, ``"encoder"``, ``"vlm"`` (OpenVINO dirs) or ``"checkpoint"`` (a transformers checkpoint).
    :param options: the recipe of the model written (the output check's choice, an encoder's recipe; a
        vision-language model's language model).
    :param description: ``options`` in one line.
    :param written: the files the run wrote into OUT; ``copied``: those copied from the source dir;
        ``tokenizer_irs``: the OpenVINO tokenizer IRs converted.
    :param loader: how to load OUT.
    :param output_check: what the output check measured (None: no check).
    :param encoder_recipe: the recipe an encoder got (None: not an encoder, or the options decided alone).
    :param phase_seconds: every phase's seconds; ``phase_peak_bytes``: the process's peak memory when it ended.
    :param memory_estimates: the estimated peak of every phase (empty when not estimated).
    :param compress_seconds: from the model read to the model compressed (torch: loading, compression, saving).
    :param record: what ``nncf_hqq_compression.json`` in OUT holds.
    """

    out: Path
    kind: str
    options: CompressionOptions
    description: str
    written: tuple[str, ...]
    copied: tuple[str, ...]
    tokenizer_irs: tuple[str, ...]
    loader: str | None
    output_check: OutputCheck | None
    encoder_recipe: str | None
    phase_seconds: dict[str, float]
    phase_peak_bytes: dict[str, int]
    memory_estimates: tuple[PhaseEstimate, ...]
    compress_seconds: float
    total_seconds: float
    record: dict[str, Any]


def zero_point_note(compression: CompressionOptions) -> str | None:
    """Which zero-point format suits the CPU this runs on (``cpu.zero_point_advice``), where HQQ writes zero points."""
    if compression.hqq and compression.mode in ZERO_POINT_MODES:
        return zero_point_advice(compression.zero_point, this_cpu())
    return None


def compress(
    model: str | Path, out: str | Path, *, log: Callable[[str], None] | None = None, **options: Any
) -> CompressionResult:
    """Compress ``model`` (an OpenVINO IR ``.xml`` or dir, a HF model dir, or a hub id) into the directory ``out``,
    as ``nncf-hqq compress MODEL OUT`` does, with its options as keyword arguments (``JobOptions``; e.g.
    ``group_size=64, self_calibration=False``). ``log`` receives the progress lines (default ``nncf_logger.info``).

    Raises ``OptionError`` (a ``ValueError``) for bad options, before anything is read; ``NotEnoughMemoryError``
    when a phase would not fit in memory (``memory_check=False`` runs it anyway), ``NotEnoughDiskError`` when it
    would write more than a disk has free (``disk_check=False``); NNCF's and the stack's errors
    later. OUT is replaced only when the new one is complete.
    """
    return CompressJob(JobOptions(**options), log or nncf_logger.info).run(model, Path(out))


class CompressJob:
    """One compress run: the options, where it logs (``command_line``: options named as flags), its phases' timer."""

    def __init__(self, options: JobOptions, log: Callable[[str], None], command_line: bool = False) -> None:
        self.options = options
        self.log = log
        self.command_line = command_line
        self.timer = StepTimer(log, at_boundary=return_free_heap, announce=announces_phases())
        self.start = time.perf_counter()
        self.estimates: tuple[PhaseEstimate, ...] = ()
        #: Whether the INT8 stand-in runs the float model's phases: as asked, or chosen for the memory.
        self.stand_in = bool(options.int8_stand_in)
        self.stand_in_reason: str | None = None
        #: The zero-point format chosen for ``target_cpu`` (recorded in OUT), when the job chose it.
        self.zero_point_choice: dict[str, Any] | None = None

    def say(self, template: str, **values: Any) -> None:
        """Log a line whose ``{option}`` placeholders name options as this run's caller spells them."""
        self.log(render(template, self.command_line, **values))

    def run(self, model: str | Path, out: Path) -> CompressionResult:
        self.options.validate()
        out = out.expanduser()
        if out.exists() and not out.is_dir():
            raise OptionError("{out} {path} exists and is not a directory", path=out)
        source = resolve_source(model, self.options.task_given, self.options.backend)
        same = "{out} must differ from the directory of the source model (its weights are read from there)"
        if source.is_ir and out.resolve() == source.ir_xml.parent.resolve():
            raise OptionError(same)
        with progress_bars_only_on_a_terminal():
            if source.vlm:
                if source.kind == VLM_IR_DIR and out.resolve() == source.path.resolve():
                    raise OptionError(same)
                check_vlm_options(self.options)
                self._check_resources(source, out)
                return self._compress_vlm(source, out)
            if self.options.backend == "torch":
                if source.kind == HF_DIR and out.resolve() == source.path.resolve():
                    raise OptionError(same)
                return self._compress_in_torch(source, out)
            self._check_resources(source, out)
            return self._compress_in_openvino(source, out)

    # ----------------------------------------------------------------------------------------------------------------
    # OpenVINO
    # ----------------------------------------------------------------------------------------------------------------
    def _check_resources(self, source: ModelSource, out: Path) -> None:
        """The memory and disk estimates of the phases to run, and the refusal of a run that would not fit in the
        memory available or on the disks it writes to (``nncf_hqq.llm.disk``)."""
        options = self.options
        try:
            size = vlm_ir_size(source.path) if source.kind == VLM_IR_DIR else source.size()
        except RuntimeError as err:  # not an IR OpenVINO reads: compressing it says why, in its own words
            self.log(f"memory: not estimated ({source.name} could not be read: {first_line(err)})")
            return
        if size is None:
            self.log("memory: not estimated (no safetensors files to read the model's size from)")
            return
        self_calibrates = (
            options.dataset is None
            and options.self_calibration
            and options.hqq
            and options.mode in SELF_CALIBRATION_MODES
            and not source.encoder
            and not source.vlm
        )
        generation = SELF_CALIBRATION_DEFAULT.replace(num_samples=options.self_calibration_samples)
        held_out = OUTPUT_CHECK_SEQUENCES if self_calibrates and options.output_check else 0
        plan = check_compress_memory(
            source.name,
            size,
            source.export is not None,  # a HF model: exported first
            generation if self_calibrates else None,
            held_out,
            self.log,
            refuse=options.memory_check,
            stand_in=options.int8_stand_in,
            available=None if options.memory_budget is None else int(options.memory_budget * GIB),
            vision_language=source.vlm,
        )
        self.estimates = plan.estimates
        self.stand_in, self.stand_in_reason = plan.stand_in, plan.why
        uses = compress_disk_uses(
            size,
            source.export is not None,
            generation if self_calibrates else None,
            held_out,
            plan.stand_in,
            Path(tempfile.gettempdir()),
            out.resolve(),
        )
        check_compress_disk(source.name, uses, self.log, refuse=options.disk_check)

    def _compress_in_openvino(self, source: ModelSource, out: Path) -> CompressionResult:
        options, timer = self.options, self.timer
        with (
            opened(source, timer, self.log) as ir,
            releasing_file_pages(ir.xml.with_suffix(".bin")),
        ):  # nncf_hqq.openvino.pages
            if is_encoder(read_model(ir.xml)):
                return self._compress_encoder(source, ir, out)
            dataset = None
            if options.dataset is not None:
                with timer.step(CALIBRATION_DATA_PHASE):
                    dataset = self._dataset(ir)
            compress_start = time.perf_counter()
            model = read_model(ir.xml)
            data_free = compression = self._zero_point_for_target(options.compression_options(), model)
            if dataset is None and options.self_calibration:
                compression = self._self_calibration(compression, model, ir.files_dir)
            self.log(f"Compressing {ir.xml} ({compression.describe(dataset is not None)})")
            self._say_group_size(compression)
            if not compression.quantize_routers and (gates := moe_gate_matmuls(model)):
                self.say(
                    "MoE: {count} routers / gates kept in float ({quantize_routers} compresses them)", count=len(gates)
                )
            check = None
            scratch = out.resolve().parent  # the stand-in and the float model's recorded logits, removed after
            with stand_in_for(ir.xml, compression, self.stand_in, scratch, self.log, timer) as stand_in:
                if compression.self_calibration is not None and options.output_check:
                    del model  # the check holds the candidate it keeps; this reference would keep the first one too
                    model, compression, check = compress_checked_on_outputs(
                        ir.xml,
                        data_free,
                        compression,
                        log=self.log,
                        timer=timer,
                        scratch_dir=scratch,
                        stand_in=stand_in,
                    )
                else:
                    model = compress_timed(model, compression, dataset, timer, stand_in)
            compress_seconds = time.perf_counter() - compress_start
            record = self._record(source, compression, compress_seconds)
            record["output_check"] = check.record() if check is not None else None
            return self._save(model, LLM, ir, out, compression, dataset is not None, record, check)

    def _zero_point_for_target(self, compression: CompressionOptions, model: ov.Model) -> CompressionOptions:
        """Without ``zero_point``, HQQ's zero points in the format that suits ``target_cpu`` and the model's size
        (``cpu.zero_point_for``), said in one line and recorded; float stays the default format (None)."""
        if not compression.hqq or compression.mode not in ZERO_POINT_MODES or compression.zero_point is not None:
            return compression
        target = self.options.target_cpu
        cpu = this_cpu()
        kind = TARGET_CPUS[target] or cpu.kind
        parameters = ir_size(model).parameters
        chosen, why = zero_point_for(kind, parameters)
        described = f"this CPU, {cpu.describe()}" if target == "this" else f"a CPU with {kind}"
        template = "Zero points: {chosen}, for {described}: {why} ({target_cpu}, {zero_point} choose)"
        self.say(template, chosen=chosen, described=described, why=why)
        self.zero_point_choice = {"format": chosen, "target_cpu": target, "cpu_kind": kind, "parameters": parameters}
        return compression if chosen == "float" else dataclasses.replace(compression, zero_point=chosen)

    def _say_group_size(self, compression: CompressionOptions) -> None:
        if compression.adjusts_group_size():
            self.say("Group size: {default}; {group_size} sets one for every layer", default=GROUP_SIZE_DEFAULT_TEXT)

    def _tokenizer_dir(self, files_dir: Path | None, needed_by: str) -> Path:
        """The HF tokenizer dir: ``tokenizer``, else the source's; an ``OptionError`` naming ``needed_by`` (the
        option that needs it) when there is neither."""
        found = self.options.tokenizer or files_dir
        if found is None:
            raise OptionError("{" + needed_by + "} needs the model's tokenizer: pass {tokenizer=DIR}")
        return found

    def _dataset(self, ir: SourceIR) -> nncf.Dataset:
        """The calibration windows of ``dataset`` for an LLM, after the checks of the text and the tokenizer."""
        options = self.options
        text = options.dataset
        if text is None:
            raise ValueError("no dataset was given")
        tokenizer_dir = self._tokenizer_dir(ir.files_dir, "dataset")
        if not (options.awq or options.scale_estimation or (options.ratio is not None and options.ratio < 1.0)):
            self.say("note: {dataset} is used only by {awq}, {scale_estimation} or {ratio} < 1; it has no effect here")
        self.log(f"Calibration data: {options.subset_size} random 256-token windows of {text}")
        for finding in check_calibration_text(ir.xml, ir.files_dir, tokenizer_dir, text):
            self.log(f"warning: {finding}")
        return calibration_dataset(tokenizer_dir, text, options.subset_size)

    def _self_calibration(
        self, compression: CompressionOptions, model: ov.Model, files_dir: Path | None
    ) -> CompressionOptions:
        """``compression`` with self-calibration (AWQ and HQQ on text the model generates, with NNCF's Scale
        Estimation where HQQ's guard weighs it), or as it is, with the reason said, when it does not apply."""
        obstacle = self_calibration_obstacle(compression, model)
        if obstacle is not None:
            if self.options.scale_estimation:
                raise OptionError(
                    "{scale_estimation} needs calibration data; self-calibration does not apply: " + obstacle
                )
            self.say("Self-calibration not used: " + obstacle)
            return compression
        prompt = self._prompt_token_ids(files_dir)
        compression = self_calibrated(compression, files_dir, self.options.self_calibration_samples, prompt)
        params = compression.self_calibration or SELF_CALIBRATION_DEFAULT
        start = (
            f"BOS token {params.start_token_ids[0]}" if params.start_token_ids else "random tokens (no BOS in config)"
        )
        if prompt is not None:
            start += f" and {params.prompt_len} tokens of {self.options.self_prompt_text} ({len(prompt)} tokens)"
        steps = (
            "AWQ + Scale Estimation + HQQ"
            if compression.runs_nncf_scale_estimation()
            else "AWQ + HQQ's scales and output guard (HQQ's or RTN's rows; {guard_reference} adds NNCF's Scale "
            "Estimation to the guard)"
        )
        self.say(
            "Self-calibration: the model generates {count} sequences of {length} tokens from {start} (temperature "
            "{temperature}, top-p {top_p}, seed {seed}) for " + steps + "; {no_self_calibration} compresses data-free",
            count=params.num_samples,
            length=params.seq_len,
            start=start,
            temperature=params.temperature,
            top_p=params.top_p,
            seed=params.seed,
        )
        if self.options.output_check:
            self.say(
                "Output check: the data-free HQQ and RTN compressions are made too, and the one closest to the float "
                "model on {count} held-out generated sequences is written ({no_output_check}: the self-calibrated "
                "one, without the check)",
                count=OUTPUT_CHECK_SEQUENCES,
            )
        return compression

    def _prompt_token_ids(self, files_dir: Path | None) -> tuple[int, ...] | None:
        """``self_prompt_text`` tokenized with the model's tokenizer (None without it)."""
        text = self.options.self_prompt_text
        if text is None:
            return None
        ids = prompt_text_token_ids(self._tokenizer_dir(files_dir, "self_prompt_text"), text)
        if len(ids) < SELF_CALIBRATION_DEFAULT.prompt_len:
            raise OptionError(
                "{self_prompt_text} {path} has {count} tokens; self-calibration starts every sequence from {needed} "
                "of them: give a longer text",
                path=text,
                count=len(ids),
                needed=SELF_CALIBRATION_DEFAULT.prompt_len,
            )
        return ids

    def _compress_encoder(self, source: ModelSource, ir: SourceIR, out: Path) -> CompressionResult:
        """An encoder: the encoder recipe, data-free or calibrated on lines of ``dataset``; written as a dir that
        optimum-intel loads (``OVSentenceTransformer`` or ``OVModelForFeatureExtraction``)."""
        options, timer = self.options, self.timer
        if options.dataset is None and options.scale_estimation:
            raise OptionError("{scale_estimation} needs calibration data; an encoder cannot generate it: add {dataset}")
        if options.dataset is None and options.token_rows:
            raise OptionError("{token_rows} needs calibration data; an encoder cannot generate it: add {dataset}")
        if options.dataset is None and options.guard_reference is not None:
            msg = "{guard_reference} needs calibration data; an encoder cannot generate it: add {dataset}"
            raise OptionError(msg)
        if options.self_prompt_text is not None:
            raise OptionError(
                "{self_prompt_text} steers self-calibration, which an encoder cannot do (it cannot generate)"
            )
        model = read_model(ir.xml)
        dataset = None
        if options.dataset is not None:
            tokenizer_dir = self._tokenizer_dir(ir.files_dir, "dataset")
            self.log(
                f"Calibration data: {options.subset_size} random lines of {options.dataset}, each one encoder input"
            )
            with timer.step(CALIBRATION_DATA_PHASE):
                dataset = encoder_calibration_dataset(
                    tokenizer_dir, options.dataset, options.subset_size, model, ir.files_dir
                )
        recipe = recipe_for(options.compression_options(), calibrated=dataset is not None)
        compression = with_recipe(options.compression_options(), recipe)
        if recipe is not None:
            how = "" if dataset is not None else " ({dataset=TEXT_FILE} calibrates it on lines of a text)"
            self.say(
                "Encoder: an encoder cannot generate its calibration text; the encoder recipe is {recipe}" + how,
                recipe=recipe.name,
            )
        self.log(f"Compressing {ir.xml} ({compression.describe(dataset is not None)})")
        self._say_group_size(compression)
        compress_start = time.perf_counter()
        model = compress_timed(model, compression, dataset, timer)
        compress_seconds = time.perf_counter() - compress_start
        record = self._record(source, compression, compress_seconds)
        record["encoder"] = {
            "recipe": recipe.name if recipe is not None else None,
            "task": ir.export.task if ir.export is not None else None,
            "library": ir.export.library if ir.export is not None else None,
            "calibration_lines": sum(1 for _ in dataset.get_data()) if dataset is not None else 0,
        }
        recipe_name = recipe.name if recipe is not None else None
        return self._save(model, ENCODER, ir, out, compression, dataset is not None, record, None, recipe_name)

    def _save(
        self,
        model: ov.Model,
        kind: str,
        ir: SourceIR,
        out: Path,
        compression: CompressionOptions,
        data_aware: bool,
        record: dict[str, Any],
        check: OutputCheck | None,
        encoder_recipe: str | None = None,
    ) -> CompressionResult:
        """Writes OUT (model, side files, tokenizer IRs, record) beside it and moves it in, then logs the phases and
        the zero-point note."""
        timer = self.timer
        with staged_dir(out, self.log) as staging:
            copied, tokenizer_irs = save_model_dir(
                model,
                staging,
                ir.files_dir,
                tokenizer_dir=self.options.tokenizer or ir.files_dir,
                log=self.log,
                timer=timer,
            )
            full_record = write_record(staging, record, timer)
            written = tuple(sorted(p.name for p in staging.iterdir()))
        self.log(f"phases: {timer.summary()}")
        if self.zero_point_choice is None and (note := zero_point_note(compression)) is not None:
            self.log(note)
        return self._result(
            out,
            kind,
            compression,
            compression.describe(data_aware),
            written,
            copied,
            tokenizer_irs,
            loader_hint(model) if kind == ENCODER else None,
            check,
            encoder_recipe,
            full_record,
        )

    def _compress_vlm(self, source: ModelSource, out: Path) -> CompressionResult:
        """A vision-language model (``nncf_hqq.llm.vlm``): its language model with the job's recipe, data-free, its
        other parts as optimum-cli compresses them; written as a dir that ``openvino_genai.VLMPipeline`` loads."""
        options, timer = self.options, self.timer
        with opened_vlm(source, timer, self.log) as ir_dir:
            compression = self._zero_point_for_target(
                options.compression_options(), read_model(ir_dir / LANGUAGE_MODEL_XML)
            )
            if options.self_calibration and compression.hqq and compression.mode in SELF_CALIBRATION_MODES:
                self.say("Self-calibration not used: " + NO_SELF_CALIBRATION)
            self.log(f"Compressing the vision-language model {ir_dir} ({compression.describe(False)})")
            self._say_group_size(compression)
            compress_start = time.perf_counter()
            with staged_dir(out, self.log) as staging:
                written = write_vlm_dir(
                    ir_dir, staging, compression, tokenizer_dir=options.tokenizer or ir_dir, log=self.log, timer=timer
                )
                compress_seconds = time.perf_counter() - compress_start
                record = self._record(source, compression, compress_seconds)
                record["vlm"] = written.record()
                full_record = write_record(staging, record, timer)
                names = tuple(sorted(p.name for p in staging.iterdir()))
        self.log(f"phases: {timer.summary()}")
        if self.zero_point_choice is None and (note := zero_point_note(compression)) is not None:
            self.log(note)
        description = compression.describe(False)
        return self._result(
            out,
            VLM,
            compression,
            description,
            names,
            list(written.copied),
            written.tokenizer_irs,
            VLM_LOADER,
            None,
            None,
            full_record,
        )

    # ----------------------------------------------------------------------------------------------------------------
    # PyTorch
    # ----------------------------------------------------------------------------------------------------------------
    def _compress_in_torch(self, source: ModelSource, out: Path) -> CompressionResult:
        """A HF model compressed in PyTorch, written as a transformers checkpoint."""
        options, timer = self.options, self.timer
        compression = options.compression_options()
        files_dir = source.path if source.kind == HF_DIR else None
        dataset = None
        if options.dataset is None and options.self_calibration and compression.hqq:
            self.say(
                "Self-calibration not used: it generates with OpenVINO; {backend=torch} is data-free without {dataset}"
            )
        if options.dataset is not None:
            tokenizer_dir = self._tokenizer_dir(files_dir, "dataset")
            self.log(f"Calibration data: {options.subset_size} random 256-token windows of {options.dataset}")
            with timer.step(CALIBRATION_DATA_PHASE):
                dataset = torch_calibration_dataset(tokenizer_dir, options.dataset, options.subset_size)
        description = compression.describe(dataset is not None)
        self.log(f"Compressing {source.name} in PyTorch ({description})")
        self._say_group_size(compression)
        compress_start = time.perf_counter()
        compressed = compress_hf_model(files_dir or source.name, compression, dataset, timer)
        with staged_dir(out, self.log) as staging:
            copied = save_checkpoint_dir(compressed, staging, files_dir, timer)
            compress_seconds = time.perf_counter() - compress_start
            full_record = write_record(staging, self._record(source, compression, compress_seconds), timer)
            written = tuple(sorted(p.name for p in staging.iterdir()))
        self.log(f"phases: {timer.summary()}")
        return self._result(
            out, CHECKPOINT, compression, description, written, copied, (), CHECKPOINT_LOADER, None, None, full_record
        )

    # ----------------------------------------------------------------------------------------------------------------
    # What the run did
    # ----------------------------------------------------------------------------------------------------------------
    def _record(self, source: ModelSource, compression: CompressionOptions, seconds: float) -> dict[str, Any]:
        params = compression.hqq_params()
        dataset = self.options.dataset
        return {
            "source": source.name,
            "options": dataclasses.asdict(compression),
            "group_size_fallback": GROUP_SIZE_FALLBACK.value if compression.adjusts_group_size() else None,
            "zero_point_choice": self.zero_point_choice,
            "hqq_params": dataclasses.asdict(params) if params is not None else None,
            "dataset": str(dataset) if dataset is not None else None,
            "self_calibration": dataclasses.asdict(compression.self_calibration)
            if compression.self_calibration
            else None,
            "int8_stand_in": self.stand_in if compression.self_calibration else None,
            "int8_stand_in_reason": self.stand_in_reason if compression.self_calibration else None,
            "compress_seconds": seconds,
            "versions": versions(),
        }

    def _result(
        self,
        out: Path,
        kind: str,
        compression: CompressionOptions,
        description: str,
        written: tuple[str, ...],
        copied: list[str],
        tokenizer_irs: list[str] | tuple[str, ...],
        loader: str | None,
        check: OutputCheck | None,
        encoder_recipe: str | None,
        record: dict[str, Any],
    ) -> CompressionResult:
        return CompressionResult(
            out=out,
            kind=kind,
            options=compression,
            description=description,
            written=written,
            copied=tuple(copied),
            tokenizer_irs=tuple(tokenizer_irs),
            loader=loader,
            output_check=check,
            encoder_recipe=encoder_recipe,
            phase_seconds=dict(self.timer.seconds),
            phase_peak_bytes=dict(self.timer.peak_bytes),
            memory_estimates=self.estimates,
            compress_seconds=record["compress_seconds"],
            total_seconds=time.perf_counter() - self.start,
            record=record,
        )
