"""The ``nncf-hqq`` command line.

    nncf-hqq compress MODEL OUT [--mode MODE] [--group-size N] [--ratio R] [--awq]
                      [--scale-estimation --dataset TEXT_FILE] [--zero-point float|int|split] [--no-hqq]
                      [--backend auto|openvino|torch]
    nncf-hqq evaluate MODEL... --reference FP_MODEL [--text FILE] [--windows N] [--json OUT.json] [--png OUT.png]
    nncf-hqq demo [--windows N] [--cache DIR] [--out DIR]

Results go to stdout, progress and step times to stderr. Bad arguments exit with code 2 and a one-line message,
other failures with code 1 and a one-line message (``--traceback`` shows the Python traceback instead).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from collections.abc import Iterator
from collections.abc import Sequence
from contextlib import contextmanager
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any
from typing import TextIO

from nncf.common.logging import nncf_logger

from nncf_hqq.llm import cpu
from nncf_hqq.llm import encoders
from nncf_hqq.llm import evaluation
from nncf_hqq.llm import memory
from nncf_hqq.llm import models
from nncf_hqq.llm import workflows
from nncf_hqq.llm.timing import StepTimer
from nncf_hqq.llm.workflows import MODES
from nncf_hqq.llm.workflows import CompressionOptions
from nncf_hqq.openvino.pages import releasing_file_pages
from nncf_hqq.openvino.pages import return_free_heap
from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT

PROG = "nncf-hqq"
#: ``compress --dataset``: reading, tokenizing and checking the calibration text (a ``StepTimer`` phase).
CALIBRATION_DATA_PHASE = "calibration data"
#: ``compress --task`` choices: optimum's task names for what ``compress`` handles, or ``auto`` (inferred).
TASKS = ("auto", "text-generation", models.ENCODER_TASK)


class UsageError(Exception):
    """A bad command-line argument: reported with the command's usage line and exit code 2."""


class NotEnoughMemoryError(RuntimeError):
    """A phase's estimated memory exceeds what the machine has available: refused before anything starts."""


class _Output:
    """Where results go: the stdout of the command, while NNCF's logs and progress bars go to stderr."""

    stream: TextIO | None = None


def _out(text: str) -> None:
    stream = _Output.stream or sys.stdout
    stream.write(text + "\n")
    stream.flush()


def _timer() -> StepTimer:
    """The phases' timer: each phase logged with its time, and the heap freed at every phase's start and end
    returned to the system (``return_free_heap``), so that a phase does not carry the previous one's peak."""
    return StepTimer(_info, at_boundary=return_free_heap)


def _info(text: str) -> None:
    sys.stderr.write(f"[{PROG}] {text}\n")
    sys.stderr.flush()


# --------------------------------------------------------------------------------------------------------------------
# Parser
# --------------------------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--traceback", action="store_true", help="show the Python traceback of a failure")
    parser = argparse.ArgumentParser(prog=PROG, description="HQQ weight compression for OpenVINO LLMs with NNCF.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    help_texts = {
        "compress": "compress a HF model or an OpenVINO IR into a dir that optimum-intel (or, --backend torch, "
        "transformers) loads",
        "evaluate": "perplexity, KL and top-1 agreement of OpenVINO LLMs against a reference",
        "demo": "RTN vs HQQ vs data-free AWQ (+HQQ) vs self-calibrated AWQ + SE + HQQ on SmolLM2-135M-Instruct, "
        "INT4_ASYM g64",
    }
    for name, add_arguments, handler in (
        ("compress", _add_compress_arguments, run_compress),
        ("evaluate", _add_evaluate_arguments, run_evaluate),
        ("demo", _add_demo_arguments, run_demo),
    ):
        sub = commands.add_parser(name, parents=[common], help=help_texts[name], description=help_texts[name])
        add_arguments(sub)
        sub.set_defaults(handler=handler, subparser=sub)
    return parser


def _add_compress_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="OpenVINO IR (.xml or dir), HF model dir, or HF hub id")
    p.add_argument("out", metavar="OUT", type=Path, help="output dir (openvino_model.xml/.bin + config/tokenizer)")
    p.add_argument("--mode", type=str.lower, choices=sorted(MODES), default="int4_asym", help="default: int4_asym")
    p.add_argument("--group-size", type=int, help="weights per group; -1: per channel (NNCF default: 128 for int4)")
    p.add_argument("--ratio", type=float, help="share of layers in --mode, the rest in the backup mode (default 1)")
    p.add_argument("--backup-mode", type=str.lower, choices=sorted(workflows.BACKUP_MODES), help="default: int8_asym")
    p.add_argument("--awq", action="store_true", help="AWQ (data-aware with --dataset, otherwise data-free)")
    p.add_argument("--scale-estimation", action="store_true", help="Scale Estimation (needs --dataset)")
    p.add_argument(
        "--dataset",
        metavar="TEXT_FILE",
        type=Path,
        help="calibration text (random 256-token windows); default for int4 LLMs: text the model generates itself",
    )
    p.add_argument(
        "--no-self-calibration",
        action="store_true",
        help="without --dataset, compress data-free instead of calibrating on text the model generates (AWQ + Scale "
        "Estimation + HQQ)",
    )
    p.add_argument(
        "--no-output-check",
        action="store_true",
        help="self-calibrated: write that model without first comparing it with the data-free HQQ and the RTN "
        f"compressions on {workflows.OUTPUT_CHECK_SEQUENCES} held-out generated sequences (KL vs float; the closest is "
        "written)",
    )
    p.add_argument(
        "--self-calibration-samples",
        metavar="N",
        type=int,
        default=SELF_CALIBRATION_DEFAULT.num_samples,
        help=f"sequences of {SELF_CALIBRATION_DEFAULT.seq_len} tokens the model generates for self-calibration "
        f"(default {SELF_CALIBRATION_DEFAULT.num_samples})",
    )
    p.add_argument(
        "--self-prompt-text",
        metavar="TEXT_FILE",
        type=Path,
        help="self-calibration: a short text in the language and domain the model will serve; every generated "
        f"sequence continues {SELF_CALIBRATION_DEFAULT.prompt_len} tokens of it (default: generate from BOS alone)",
    )
    p.add_argument("--subset-size", type=int, default=128, help="calibration samples (default 128)")
    p.add_argument(
        "--tokenizer",
        metavar="DIR",
        type=Path,
        help="HF tokenizer dir for --dataset and for OUT's OpenVINO tokenizer IRs (default: MODEL's)",
    )
    p.add_argument("--zero-point", choices=sorted(workflows.ZERO_POINT_FORMATS), help="HQQ zero point (default float)")
    p.add_argument("--no-hqq", action="store_true", help="plain NNCF (round to nearest) instead of HQQ")
    p.add_argument(
        "--token-rows",
        metavar="K",
        type=int,
        default=0,
        help="with calibration data: HQQ's refinement and guard fit K random token rows of each sample (32: "
        "nncf_hqq.HQQ_TOKEN_ROWS) instead of NNCF's per-sample means (default 0: the means)",
    )
    p.add_argument(
        "--ignore",
        metavar="REGEX",
        action="append",
        default=[],
        help="keep the layers whose name matches in float (repeatable; NNCF's IgnoredScope patterns)",
    )
    p.add_argument(
        "--quantize-routers",
        action="store_true",
        help="compress MoE routers and scalar gates too (default: kept in float, docs/moe.md)",
    )
    p.add_argument(
        "--task",
        choices=TASKS,
        default="auto",
        help="what a HF model is exported as: text-generation (a causal LM, with its KV cache) or feature-extraction "
        "(an encoder; a sentence-transformers model with its pooling and Dense layers); auto (default): inferred "
        "as optimum infers it",
    )
    p.add_argument(
        "--no-memory-check",
        action="store_true",
        help="run even when a phase's estimated memory exceeds the memory available (default: refused up front)",
    )
    p.add_argument(
        "--backend",
        choices=workflows.BACKENDS,
        default="auto",
        help="openvino: write an OpenVINO IR (a HF model is exported first); torch: compress a HF model in PyTorch "
        "and write a transformers checkpoint; auto (default): openvino",
    )


def _add_evaluate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("models", metavar="MODEL", nargs="+", help="OpenVINO IR (.xml or dir); NAME=PATH names a row")
    p.add_argument("--reference", metavar="FP_MODEL", required=True, help="the float OpenVINO IR (.xml or dir)")
    p.add_argument("--reference-name", default="fp", help="row name of the reference (default: fp)")
    p.add_argument("--text", type=Path, help="evaluation text (default: the shared WikiText-2 test text)")
    p.add_argument("--windows", type=int, default=40, help="first N non-overlapping windows (default 40)")
    p.add_argument("--window-size", type=int, default=evaluation.WINDOW, help="tokens per window (default 512)")
    p.add_argument(
        "--lines",
        type=int,
        help=f"encoders: embed the first N non-empty, non-heading lines (default {encoders.DEFAULT_LINES})",
    )
    p.add_argument("--tokenizer", metavar="DIR", type=Path, help="tokenizer dir (default: the reference's dir)")
    p.add_argument(
        "--all-at-once",
        action="store_true",
        help="LLMs: compile every model at once and run the reference once (faster; memory grows with every "
        "candidate); default: one candidate compiled at a time",
    )
    p.add_argument(
        "--inference-precision",
        choices=evaluation.INFERENCE_PRECISIONS,
        default="f32",
        help="LLMs: precision every model runs in (default f32, as PROTOCOL.md; bf16 halves a bf16 float model's "
        "memory, for models whose f32 copy does not fit)",
    )
    p.add_argument(
        "--no-memory-check",
        action="store_true",
        help="run even when the estimated memory exceeds the memory available (default: refused up front)",
    )
    p.add_argument("--json", type=Path, help="write the results as JSON")
    p.add_argument("--png", type=Path, help="draw the results as a PNG bar chart")


def _add_demo_arguments(p: argparse.ArgumentParser) -> None:
    from nncf_hqq.llm.demo import DEFAULT_OUT
    from nncf_hqq.llm.demo import DEFAULT_WINDOWS

    p.add_argument(
        "--windows", type=int, default=DEFAULT_WINDOWS, help=f"WikiText-2 windows (default {DEFAULT_WINDOWS})"
    )
    p.add_argument("--cache", type=Path, help="model cache dir (default: $NNCF_HQQ_CACHE or ~/.cache/nncf_hqq)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output dir for JSON and PNG (default {DEFAULT_OUT})")
    p.add_argument("--text", type=Path, help="evaluation text (default: the shared WikiText-2 test text)")


# --------------------------------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """Run ``nncf-hqq``; returns the exit code (0 success, 1 failure, 2 bad arguments)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse: --help (0) or a usage error (2), message already written
        return exit_.code if isinstance(exit_.code, int) else 2
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        with _results_on_stdout_logs_on_stderr():
            return int(args.handler(args))
    except UsageError as err:
        args.subparser.print_usage(sys.stderr)
        sys.stderr.write(f"{PROG} {args.command}: error: {err}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except Exception as err:
        if args.traceback:
            raise
        sys.stderr.write(f"{PROG} {args.command}: error: {_describe(err)}\n")
        return 1


@contextmanager
def _results_on_stdout_logs_on_stderr() -> Iterator[None]:
    """Keep stdout for the results (tables, paths): NNCF's log lines and rich progress bars go to stderr."""
    handlers = [h for h in nncf_logger.handlers if isinstance(h, logging.StreamHandler) and h.stream is sys.stdout]
    _Output.stream = sys.stdout
    try:
        for handler in handlers:
            handler.setStream(sys.stderr)
        with redirect_stdout(sys.stderr):
            yield
    finally:
        for handler in handlers:
            handler.setStream(_Output.stream)
        _Output.stream = None


def _describe(err: BaseException) -> str:
    """A one-line description: the message, prefixed by the exception type when that says something."""
    message = str(err).strip() or repr(err)
    if isinstance(err, ImportError):
        return f"{message}: install the llm extra (pip install -e '.[llm]')"
    if isinstance(err, (FileNotFoundError, ValueError, RuntimeError)) or type(err).__module__.startswith("nncf"):
        return message
    return f"{type(err).__name__}: {message} (rerun with --traceback for details)"


# --------------------------------------------------------------------------------------------------------------------
# compress
# --------------------------------------------------------------------------------------------------------------------
def check_compress_arguments(args: argparse.Namespace) -> None:
    """Raise UsageError for option combinations that cannot work, before any model is read."""
    if args.ratio is not None and not 0.0 < args.ratio <= 1.0:
        raise UsageError(f"--ratio must be in (0, 1], got {args.ratio}")
    if args.group_size is not None and (args.group_size == 0 or args.group_size < -1):
        raise UsageError(
            f"--group-size must be a positive number of weights or -1 (per channel), got {args.group_size}"
        )
    if args.subset_size <= 0:
        raise UsageError(f"--subset-size must be positive, got {args.subset_size}")
    if args.zero_point is not None and args.no_hqq:
        raise UsageError("--zero-point sets HQQ's zero point; it cannot be combined with --no-hqq")
    if args.token_rows < 0:
        raise UsageError(f"--token-rows must be >= 0, got {args.token_rows}")
    if args.token_rows and args.no_hqq:
        raise UsageError("--token-rows sets what HQQ fits; it cannot be combined with --no-hqq")
    if args.token_rows and args.dataset is None and args.no_self_calibration:
        raise UsageError("--token-rows needs calibration data: add --dataset TEXT_FILE or drop --no-self-calibration")
    if args.scale_estimation and args.dataset is None and (args.no_self_calibration or args.no_hqq):
        raise UsageError("--scale-estimation needs calibration data: add --dataset TEXT_FILE")
    if args.self_calibration_samples <= 0:
        raise UsageError(f"--self-calibration-samples must be positive, got {args.self_calibration_samples}")
    if args.self_prompt_text is not None:
        if args.dataset is not None or args.no_self_calibration or args.no_hqq:
            raise UsageError(
                "--self-prompt-text steers self-calibration; it cannot be combined with --dataset, "
                "--no-self-calibration or --no-hqq"
            )
        if not args.self_prompt_text.is_file():
            raise UsageError(f"--self-prompt-text {args.self_prompt_text} is not a file")
    if args.dataset is not None and not args.dataset.is_file():
        raise UsageError(f"--dataset {args.dataset} is not a file")
    if args.tokenizer is not None and not args.tokenizer.is_dir():
        raise UsageError(f"--tokenizer {args.tokenizer} is not a directory")
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"OUT {args.out} exists and is not a directory")
    if args.zero_point is not None and not args.mode.endswith("_asym"):
        raise UsageError(f"--zero-point applies to asymmetric modes; {args.mode} has no zero point")
    if args.mode in workflows.LOW_BIT_MODES:
        low_bit_conflicts = {
            "--no-hqq": args.no_hqq,
            "--awq": args.awq,
            "--scale-estimation": args.scale_estimation,
            "--zero-point int": args.zero_point == "int",
            "--zero-point split": args.zero_point == "split",
        }
        if given := [flag for flag, used in low_bit_conflicts.items() if used]:
            raise UsageError(f"{args.mode} is HQQ-only, data-free and float-zero-point; drop {', '.join(given)}")
    if args.backend == "torch" and args.mode not in workflows.TORCH_MODES:
        raise UsageError(f"--backend torch compresses {', '.join(workflows.TORCH_MODES)}; {args.mode} needs openvino")
    if args.backend == "torch" and args.zero_point == "split":
        raise UsageError("--zero-point split is an OpenVINO graph format; --backend torch takes float or int")
    if args.mode in workflows.INT8_MODES:
        per_channel_only = {
            "--group-size": args.group_size not in (None, -1),
            "--ratio": args.ratio not in (None, 1.0),
            "--awq": args.awq,
            "--scale-estimation": args.scale_estimation,
            "--dataset": args.dataset is not None,
            "--backup-mode": args.backup_mode is not None,
        }
        if given := [flag for flag, used in per_channel_only.items() if used]:
            raise UsageError(f"{args.mode} compresses every layer per channel without data; drop {', '.join(given)}")


def compression_options(args: argparse.Namespace) -> CompressionOptions:
    return CompressionOptions(
        mode=args.mode,
        group_size=args.group_size,
        ratio=args.ratio,
        backup_mode=args.backup_mode,
        awq=args.awq,
        scale_estimation=args.scale_estimation,
        hqq=not args.no_hqq,
        zero_point=args.zero_point,
        token_rows=args.token_rows,
        subset_size=args.subset_size,
        ignore=tuple(args.ignore),
        quantize_routers=args.quantize_routers,
    )


def run_compress(args: argparse.Namespace) -> int:
    check_compress_arguments(args)
    try:
        backend = workflows.backend_for(args.model, args.backend)
    except ValueError as err:
        raise UsageError(str(err)) from None
    options = compression_options(args)
    task = _task(args)
    if backend == "torch":
        return run_compress_torch(args, options)
    check_compress_memory(args, options, task)
    start = time.perf_counter()
    timer = _timer()
    with (
        workflows.source_model(args.model, log=_info, timer=timer, task=task) as source,
        releasing_file_pages(source.xml.with_suffix(".bin")),  # see ``nncf_hqq.openvino.pages``
    ):
        if args.out.resolve() == source.xml.parent.resolve():
            raise UsageError("OUT must differ from the directory of the source model (its weights are read from there)")
        if encoders.is_encoder(workflows.read_model(source.xml)):
            return _compress_encoder(args, options, source, timer, start)
        dataset = None
        if args.dataset is not None:
            with timer.step(CALIBRATION_DATA_PHASE):
                dataset = _dataset(args, source)
        compress_start = time.perf_counter()
        model = workflows.read_model(source.xml)
        data_free = options
        if dataset is None and not args.no_self_calibration:
            options = _self_calibration(args, options, model, source.files_dir)
        _info(f"Compressing {source.xml} ({_describe_options(options, dataset is not None)})")
        if not options.quantize_routers and (gates := workflows.moe_gate_matmuls(model)):
            _info(f"MoE: {len(gates)} routers / gates kept in float (--quantize-routers compresses them)")
        check = None
        if options.self_calibration is not None and not args.no_output_check:
            del model  # the check holds the candidate it keeps; this reference would keep the first one as well
            scratch = args.out.resolve().parent  # the float model's recorded logits, beside OUT, removed after
            scratch.mkdir(parents=True, exist_ok=True)
            model, options, check = workflows.compress_checked_on_outputs(
                source.xml,
                data_free,
                options,
                log=_info,
                timer=timer,
                scratch_dir=scratch,
            )
        else:
            model = workflows.compress_timed(model, options, dataset, timer)
        compress_seconds = time.perf_counter() - compress_start
        record = _compress_record(args, options, compress_seconds)
        record["output_check"] = check.record() if check is not None else None
        copied = _save(args, model, source, record, options, timer)
    _out(f"Wrote {args.out / workflows.MODEL_XML} ({_describe_options(options, dataset is not None)})")
    if copied:
        _out(f"Copied from the source: {', '.join(copied)}")
    else:
        _out("No config/tokenizer files beside the source IR: add them to OUT before loading it with optimum-intel")
    if workflows.is_genai_dir(args.out):
        _out(f"OpenVINO GenAI: openvino_genai.LLMPipeline({str(args.out)!r}, 'CPU') loads it (tokenizer IRs in OUT)")
    _out(f"Total: {time.perf_counter() - start:.1f} s (compression {compress_seconds:.1f} s)")
    return 0


def model_size(model: str) -> tuple[memory.ModelSize | None, bool]:
    """The size of ``model``'s weights, with its decoder shape when its dir has a ``config.json`` (None for a hub id,
    or a HF dir without safetensors), and whether ``compress`` exports it first (a HF model)."""
    kind = workflows.model_kind(model)
    path = Path(model).expanduser()
    if kind in ("ir_xml", "ir_dir"):
        size = memory.ir_size(workflows.read_model(path if kind == "ir_xml" else path / workflows.MODEL_XML))
        decoder = memory.decoder_shape(path.parent if kind == "ir_xml" else path)
        return dataclasses.replace(size, decoder=decoder), False
    checkpoint = memory.safetensors_size(path) if kind == "hf_dir" else None
    if checkpoint is None:
        return None, True
    return dataclasses.replace(checkpoint, decoder=memory.decoder_shape(path)), True


def check_compress_memory(args: argparse.Namespace, options: CompressionOptions, task: str | None) -> None:
    """Estimates the peak memory of every phase ``compress`` will run (``nncf_hqq.llm.memory``) and raises
    ``NotEnoughMemoryError`` naming the phases that exceed the memory available and the options that fit, unless
    ``--no-memory-check``."""
    try:
        size, export = model_size(args.model)
    except RuntimeError as err:  # not an IR OpenVINO reads: compressing it says why, in its own words
        _info(f"memory: not estimated ({args.model} could not be read: {str(err).splitlines()[0][:200]})")
        return
    if size is None:
        _info("memory: not estimated (no safetensors files to read the model's size from)")
        return
    self_calibration = (
        args.dataset is None
        and not args.no_self_calibration
        and options.hqq
        and options.mode in workflows.SELF_CALIBRATION_MODES
        and not (export and workflows.export_task(args.model, task).encoder)
    )
    output_check = self_calibration and not args.no_output_check
    estimates = memory.compress_estimates(size, export, self_calibration, output_check)
    available = memory.available_bytes()
    peak = max(estimates, key=lambda e: e.total)
    _info(f"memory: {peak.describe()} at most; {available / memory.GIB:.1f} GiB available")
    over = memory.too_large(estimates, available)
    if not over or args.no_memory_check:
        return
    fits = []
    if output_check and not memory.too_large(memory.compress_estimates(size, export, True, False), available):
        fits.append("--no-output-check")
    if self_calibration and not memory.too_large(memory.compress_estimates(size, export, False, False), available):
        fits.append("--no-self-calibration (data-free)")
    instead = f"; {' or '.join(fits)} fits" if fits else ""
    if any(e.phase == "export" for e in over):
        instead += (
            "; export the model on a larger machine (optimum-cli export openvino --model MODEL --weight-format fp16 "
            "DIR) and compress DIR"
        )
    needs = "; ".join(e.describe() for e in over)
    msg = (
        f"not enough memory for {args.model}: {needs}, but {available / memory.GIB:.1f} GiB is available"
        f"{instead} (--no-memory-check runs it anyway)"
    )
    raise NotEnoughMemoryError(msg)


def check_evaluate_memory(args: argparse.Namespace, reference: Path, candidates: Sequence[Path]) -> None:
    """Estimates ``evaluate``'s peak memory (the float model compiled, the largest candidate) and raises
    ``NotEnoughMemoryError`` when it exceeds the memory available, unless ``--no-memory-check``; names
    ``--inference-precision bf16`` when that fits."""
    try:
        size = memory.ir_size(workflows.read_model(models.ir_xml(reference)))
    except RuntimeError as err:  # not an IR OpenVINO reads: the evaluation itself says why, in its own words
        _info(f"memory: not estimated ({reference} could not be read: {str(err).splitlines()[0][:200]})")
        return
    weights = [models.ir_xml(c).with_suffix(".bin") for c in candidates]
    candidate_bytes = [w.stat().st_size for w in weights if w.is_file()]
    estimate = memory.evaluate_estimate(size, candidate_bytes, args.inference_precision)
    available = memory.available_bytes()
    _info(f"memory: {estimate.describe()}; {available / memory.GIB:.1f} GiB available")
    if estimate.total <= available or args.no_memory_check:
        return
    instead = ""
    if args.inference_precision == "f32" and memory.evaluate_estimate(size, candidate_bytes, "bf16").total <= available:
        instead = "; --inference-precision bf16 fits"
    msg = (
        f"not enough memory to evaluate against {reference}: {estimate.describe()}, but "
        f"{available / memory.GIB:.1f} GiB is available{instead} (--no-memory-check runs it anyway)"
    )
    raise NotEnoughMemoryError(msg)


#: The modes whose HQQ zero points can be stored as float, split or integer (``--zero-point``).
ZERO_POINT_MODES = ("int4_asym", "int8_asym")


def _save(
    args: argparse.Namespace,
    model: Any,
    source: workflows.SourceModel,
    record: dict[str, Any],
    options: CompressionOptions,
    timer: StepTimer,
) -> list[str]:
    """Writes OUT (model, side files, tokenizer IRs, record), then the phase summary and the zero-point note on
    stderr. Returns the names of the files copied from the source."""
    tokenizer_dir = args.tokenizer or source.files_dir
    copied = workflows.save_model_dir(
        model, args.out, source.files_dir, record, tokenizer_dir=tokenizer_dir, log=_info, timer=timer
    )
    _info(f"phases: {timer.summary()}")
    _zero_point_note(options)
    return copied


def _zero_point_note(options: CompressionOptions) -> None:
    """Says on stderr which zero-point format suits the CPU this runs on (``cpu.zero_point_advice``)."""
    if options.hqq and options.mode in ZERO_POINT_MODES:
        note = cpu.zero_point_advice(options.zero_point, cpu.this_cpu())
        if note is not None:
            _info(note)


def _task(args: argparse.Namespace) -> str | None:
    """``--task`` as ``source_model`` takes it (None: inferred). Refused with an IR (compressed as it was exported)
    and, for an encoder, with ``--backend torch`` (which compresses causal LMs)."""
    task = None if args.task == "auto" else args.task
    if task is not None and workflows.model_kind(args.model) in ("ir_xml", "ir_dir"):
        raise UsageError(f"--task applies to a HF model; {args.model} is an OpenVINO IR, compressed as it was exported")
    if args.backend == "torch":
        export = models.infer_export_task(args.model, task)
        models.check_task(export, args.model)
        if export.encoder:
            raise UsageError(f"--backend torch compresses causal LMs; {args.model} is a {export.task} model")
    return task


def _compress_encoder(
    args: argparse.Namespace, options: CompressionOptions, source: workflows.SourceModel, timer: StepTimer, start: float
) -> int:
    """``compress`` of an encoder: the encoder recipe, data-free or calibrated on lines of ``--dataset``; written
    as a dir that optimum-intel loads (``OVSentenceTransformer`` or ``OVModelForFeatureExtraction``)."""
    _check_encoder_arguments(args)
    model = workflows.read_model(source.xml)
    dataset = _encoder_dataset(args, source, model, timer) if args.dataset is not None else None
    recipe = encoders.recipe_for(options, calibrated=dataset is not None)
    options = encoders.with_recipe(options, recipe)
    described = _describe_options(options, dataset is not None)
    if recipe is not None:
        how = "" if dataset is not None else " (--dataset TEXT_FILE calibrates it on lines of a text)"
        _info(f"Encoder: an encoder cannot generate its calibration text; the encoder recipe is {recipe.name}{how}")
    _info(f"Compressing {source.xml} ({described})")
    compress_start = time.perf_counter()
    model = workflows.compress_timed(model, options, dataset, timer)
    compress_seconds = time.perf_counter() - compress_start
    record = _compress_record(args, options, compress_seconds)
    record["encoder"] = {
        "recipe": recipe.name if recipe is not None else None,
        "task": source.export.task if source.export is not None else None,
        "library": source.export.library if source.export is not None else None,
        "calibration_lines": sum(1 for _ in dataset.get_data()) if dataset is not None else 0,
    }
    copied = _save(args, model, source, record, options, timer)
    _out(f"Wrote {args.out / workflows.MODEL_XML} (encoder: {described})")
    if copied:
        _out(f"Copied from the source: {', '.join(copied)}")
    _out(f"Load it with: {encoders.loader_hint(model)}")
    _out(f"Total: {time.perf_counter() - start:.1f} s (compression {compress_seconds:.1f} s)")
    return 0


def _encoder_dataset(args: argparse.Namespace, source: workflows.SourceModel, model: Any, timer: StepTimer) -> Any:
    """``--dataset`` for an encoder: random lines of the text, each tokenized alone as one input."""
    tokenizer_dir = args.tokenizer or source.files_dir
    if tokenizer_dir is None:
        raise UsageError("--dataset needs the model's tokenizer: pass --tokenizer DIR")
    _info(f"Calibration data: {args.subset_size} random lines of {args.dataset}, each one encoder input")
    with timer.step(CALIBRATION_DATA_PHASE):
        return encoders.calibration_dataset(tokenizer_dir, args.dataset, args.subset_size, model, source.files_dir)


def _check_encoder_arguments(args: argparse.Namespace) -> None:
    """The options that need generated text, refused for an encoder (it cannot generate)."""
    if args.dataset is None and args.scale_estimation:
        raise UsageError("--scale-estimation needs calibration data; an encoder cannot generate it: add --dataset")
    if args.dataset is None and args.token_rows:
        raise UsageError("--token-rows needs calibration data; an encoder cannot generate it: add --dataset")
    if args.self_prompt_text is not None:
        raise UsageError("--self-prompt-text steers self-calibration, which an encoder cannot do (it cannot generate)")


def run_compress_torch(args: argparse.Namespace, options: CompressionOptions) -> int:
    """``compress --backend torch``: a HF model compressed in PyTorch, written as a transformers checkpoint."""
    start = time.perf_counter()
    timer = _timer()
    source = Path(args.model).expanduser()
    if source.is_dir() and args.out.resolve() == source.resolve():
        raise UsageError("OUT must differ from the directory of the source model (its weights are read from there)")
    dataset = None
    if args.dataset is None and not args.no_self_calibration and options.hqq:
        _info("Self-calibration not used: it generates with OpenVINO; --backend torch is data-free without --dataset")
    if args.dataset is not None:
        tokenizer_dir = args.tokenizer or (source if source.is_dir() else None)
        if tokenizer_dir is None:
            raise UsageError("--dataset needs the model's tokenizer: pass --tokenizer DIR")
        _info(f"Calibration data: {args.subset_size} random 256-token windows of {args.dataset}")
        with timer.step(CALIBRATION_DATA_PHASE):
            dataset = workflows.torch_calibration_dataset(tokenizer_dir, args.dataset, args.subset_size)
    _info(f"Compressing {args.model} in PyTorch ({_describe_options(options, dataset is not None)})")
    compress_start = time.perf_counter()
    copied = workflows.compress_hf_checkpoint(args.model, args.out, options, dataset, timer)
    compress_seconds = time.perf_counter() - compress_start
    record = {**_compress_record(args, options, compress_seconds), "phase_seconds": dict(timer.seconds)}
    (args.out / workflows.RECORD_NAME).write_text(json.dumps(record, indent=2, default=str) + "\n")
    _info(f"phases: {timer.summary()}")
    _out(f"Wrote a transformers checkpoint to {args.out} ({_describe_options(options, dataset is not None)})")
    _out("Load it with: import nncf_hqq.torch; transformers.AutoModelForCausalLM.from_pretrained(OUT)")
    if copied:
        _out(f"Copied from the source: {', '.join(copied)}")
    _out(f"Total: {time.perf_counter() - start:.1f} s (load, compression and saving {compress_seconds:.1f} s)")
    return 0


def _self_calibration(
    args: argparse.Namespace, options: CompressionOptions, model: Any, files_dir: Path | None
) -> CompressionOptions:
    """The options with self-calibration (AWQ + Scale Estimation + HQQ on text the model generates), or the options
    as they are, with the reason said, when it does not apply."""
    obstacle = workflows.self_calibration_obstacle(options, model)
    if obstacle is not None:
        if args.scale_estimation:
            raise UsageError(f"--scale-estimation needs calibration data; self-calibration does not apply: {obstacle}")
        _info(f"Self-calibration not used: {obstacle}")
        return options
    prompt = _prompt_token_ids(args, files_dir)
    options = workflows.self_calibrated(options, files_dir, args.self_calibration_samples, prompt)
    params = options.self_calibration or SELF_CALIBRATION_DEFAULT
    start = f"BOS token {params.start_token_ids[0]}" if params.start_token_ids else "random tokens (no BOS in config)"
    if prompt is not None:
        start += f" and {params.prompt_len} tokens of {args.self_prompt_text} ({len(prompt)} tokens)"
    _info(
        f"Self-calibration: the model generates {params.num_samples} sequences of {params.seq_len} tokens from {start} "
        f"(temperature {params.temperature}, top-p {params.top_p}, seed {params.seed}) for AWQ + Scale Estimation + "
        "HQQ; --no-self-calibration compresses data-free"
    )
    if not args.no_output_check:
        _info(
            "Output check: the data-free HQQ and RTN compressions are made too, and the one closest to the float "
            f"model on {workflows.OUTPUT_CHECK_SEQUENCES} held-out generated sequences is written (--no-output-check: "
            "the self-calibrated one, without the check)"
        )
    return options


def _prompt_token_ids(args: argparse.Namespace, files_dir: Path | None) -> tuple[int, ...] | None:
    """``--self-prompt-text`` tokenized with the model's tokenizer (None without the option)."""
    if args.self_prompt_text is None:
        return None
    tokenizer_dir = args.tokenizer or files_dir
    if tokenizer_dir is None:
        raise UsageError("--self-prompt-text needs the model's tokenizer: pass --tokenizer DIR")
    ids = workflows.prompt_text_token_ids(tokenizer_dir, args.self_prompt_text)
    if len(ids) < SELF_CALIBRATION_DEFAULT.prompt_len:
        raise UsageError(
            f"--self-prompt-text {args.self_prompt_text} has {len(ids)} tokens; self-calibration starts every "
            f"sequence from {SELF_CALIBRATION_DEFAULT.prompt_len} of them: give a longer text"
        )
    return ids


def _dataset(args: argparse.Namespace, source: workflows.SourceModel) -> Any:
    tokenizer_dir = args.tokenizer or source.files_dir
    if tokenizer_dir is None:
        raise UsageError("--dataset needs the model's tokenizer: pass --tokenizer DIR")
    if not (args.awq or args.scale_estimation or (args.ratio is not None and args.ratio < 1.0)):
        _info("note: --dataset is used only by --awq, --scale-estimation or --ratio < 1; it has no effect here")
    _info(f"Calibration data: {args.subset_size} random 256-token windows of {args.dataset}")
    for finding in workflows.check_calibration_text(source.xml, source.files_dir, Path(tokenizer_dir), args.dataset):
        _info(f"warning: {finding}")
    return workflows.calibration_dataset(tokenizer_dir, args.dataset, args.subset_size)


def _describe_options(options: CompressionOptions, data_aware: bool) -> str:
    """The options that shape the written model, in one line (``Compressing ... (...)``, ``Wrote ... (...)``):
    every option given that changes the result, and the calibration data (``data_aware``: a ``--dataset``)."""
    parts = [options.mode, f"group size {options.group_size}" if options.group_size else "NNCF's default group size"]
    if options.ratio is not None:
        parts.append(f"ratio {options.ratio}")
    if options.backup_mode is not None:
        parts.append(f"backup mode {options.backup_mode}")
    generated = options.self_calibration if not data_aware else None
    subset_size = options.nncf_kwargs()["subset_size"]  # what NNCF gets: self-calibrated, the sequences' number
    if data_aware:
        parts.append(f"calibrated on {subset_size} samples of --dataset")
    elif generated is not None:
        steered = " continuing --self-prompt-text" if generated.prompt_token_ids is not None else ""
        parts.append(f"self-calibrated on {generated.num_samples} generated sequences{steered}")
        if subset_size < generated.num_samples:
            parts.append(f"subset size {subset_size}")
    if options.awq:
        parts.append("AWQ" if data_aware or generated is not None else "data-free AWQ")
    if options.scale_estimation:
        parts.append("Scale Estimation")
    if options.hqq:
        hqq = [f"{options.zero_point or 'default'} zero point"]
        if options.token_rows:
            hqq.append(f"{options.token_rows} token rows per sample")
        if options.hqq_base is not None:
            hqq.append("the recipe's parameters")
        parts.append(f"HQQ ({', '.join(hqq)})")
    else:
        parts.append("RTN (no HQQ)")
    if options.ignore:
        parts.append("kept in float: " + " ".join(f"'{pattern}'" for pattern in options.ignore))
    if options.quantize_routers:
        parts.append("MoE routers compressed")
    return ", ".join(parts)


def _compress_record(args: argparse.Namespace, options: CompressionOptions, seconds: float) -> dict[str, Any]:
    params = options.hqq_params()
    return {
        "source": str(args.model),
        "options": dataclasses.asdict(options),
        "hqq_params": dataclasses.asdict(params) if params is not None else None,
        "dataset": str(args.dataset) if args.dataset is not None else None,
        "self_calibration": dataclasses.asdict(options.self_calibration) if options.self_calibration else None,
        "compress_seconds": seconds,
        "versions": workflows.versions(),
    }


# --------------------------------------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------------------------------------
def _ir_or_usage_error(path: str, what: str) -> Path:
    p = Path(path).expanduser()
    if (p.is_file() and p.suffix == ".xml") or workflows.is_ir_dir(p):
        return p
    raise UsageError(f"{what} {path!r} is not an OpenVINO IR (an .xml file, or a dir with {workflows.MODEL_XML})")


def _text_or_usage_error(text: Path | None) -> Path:
    if text is not None:
        if not text.is_file():
            raise UsageError(f"--text {text} is not a file")
        return text
    found = workflows.default_text()
    if found is None:
        raise UsageError("no --text given and the shared WikiText-2 text was not found ($NNCF_HQQ_SHARED)")
    return found


def run_evaluate(args: argparse.Namespace) -> int:
    if args.windows <= 0 or args.window_size < 2:
        raise UsageError("--windows must be positive and --window-size at least 2")
    reference = _ir_or_usage_error(args.reference, "--reference")
    try:
        labelled = workflows.unique_labels(args.models)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if args.reference_name in labelled:
        raise UsageError(
            f"a MODEL is named {args.reference_name!r} like the reference; use NAME=PATH or --reference-name"
        )
    candidates = {name: _ir_or_usage_error(path, "MODEL") for name, path in labelled.items()}
    text = _text_or_usage_error(args.text)
    tokenizer_dir = args.tokenizer or (reference if reference.is_dir() else reference.parent)
    if args.png is not None:
        workflows.require_matplotlib()
    if encoders.is_encoder_ir(reference):
        return _evaluate_encoders(args, reference, candidates, text, tokenizer_dir)
    if args.lines is not None:
        raise UsageError("--lines applies to encoders; the reference is an LLM, evaluated on token windows (--windows)")
    check_evaluate_memory(args, reference, list(candidates.values()))
    timer = _timer()
    warnings: list[str] = []

    def warn(finding: str) -> None:
        warnings.append(finding)
        _info(f"warning: {finding}")

    weights_files = [models.ir_xml(path).with_suffix(".bin") for path in (reference, *candidates.values())]
    with releasing_file_pages(*weights_files):  # the compiled models pack their weights: see nncf_hqq.openvino.pages
        results = workflows.evaluate_against(
            reference,
            candidates,
            tokenizer_dir,
            text,
            args.windows,
            args.window_size,
            args.reference_name,
            warn,
            timer,
            one_at_a_time=not args.all_at_once,
            config=evaluation.inference_config(args.inference_precision),
        )
    _info(f"phases: {timer.summary()}")
    _out(workflows.format_table(results))
    for finding in warnings:
        _out(f"warning: {finding}")
    record = {
        "reference": args.reference_name,
        "models": {args.reference_name: str(reference), **{n: str(p) for n, p in candidates.items()}},
        "text": str(text),
        "windows": args.windows,
        "window_size": args.window_size,
        "results": results,
        "warnings": warnings,
        "phase_seconds": timer.seconds,
        "versions": workflows.versions(),
    }
    title = f"{args.windows} x {args.window_size}-token windows of {text.name}, reference {args.reference_name}"
    _write_reports(args, record, title)
    return 0


def _write_reports(args: argparse.Namespace, record: dict[str, Any], title: str, charts: Any = None) -> None:
    """``evaluate``'s ``--json`` (the whole record) and ``--png`` (its results, titled ``title``)."""
    if args.json is not None:
        _out(f"JSON: {workflows.write_json(args.json, record)}")
    if args.png is not None:
        extra = () if charts is None else (charts,)
        _out(f"PNG: {workflows.write_png(args.png, record['results'], title, args.reference_name, *extra)}")


def _evaluate_encoders(
    args: argparse.Namespace, reference: Path, candidates: dict[str, Path], text: Path, tokenizer_dir: Path
) -> int:
    """``evaluate`` of encoders: the cosine of each line's embedding with the reference's (mean, minimum) and the
    nearest-neighbour agreement; table, JSON and PNG."""
    n_lines = encoders.DEFAULT_LINES if args.lines is None else args.lines
    if n_lines < 2:
        raise UsageError(f"--lines must be at least 2 (a line's nearest neighbour is among the others), got {n_lines}")
    timer = _timer()
    results, pooling = encoders.evaluate_against(
        reference, candidates, tokenizer_dir, text, n_lines, args.reference_name, timer
    )
    _info(f"phases: {timer.summary()}")
    _out(workflows.format_table(results, columns=encoders.ENCODER_COLUMNS))
    _out(
        f"Encoders: embeddings of the first {n_lines} lines of {text.name} ({pooling}); NN agree: the share of lines "
        "whose nearest other line (cosine) is the reference's"
    )
    record = {
        "reference": args.reference_name,
        "kind": "encoder",
        "models": {args.reference_name: str(reference), **{n: str(p) for n, p in candidates.items()}},
        "text": str(text),
        "lines": n_lines,
        "pooling": pooling,
        "results": results,
        "phase_seconds": timer.seconds,
        "versions": workflows.versions(),
    }
    title = f"embeddings of {n_lines} lines of {text.name}, reference {args.reference_name}"
    _write_reports(args, record, title, encoders.ENCODER_CHARTS)
    return 0


# --------------------------------------------------------------------------------------------------------------------
# demo
# --------------------------------------------------------------------------------------------------------------------
def run_demo(args: argparse.Namespace) -> int:
    from nncf_hqq.llm.demo import run_demo as demo

    if args.windows <= 0:
        raise UsageError(f"--windows must be positive, got {args.windows}")
    if args.text is not None and not args.text.is_file():
        raise UsageError(f"--text {args.text} is not a file")
    result = demo(windows=args.windows, cache=args.cache, out_dir=args.out, text=args.text, log=_info)
    extra = {name: {"compress s": seconds} for name, seconds in result.compress_seconds.items()}
    _out(workflows.format_table(result.results, extra))
    _out("")
    for step, seconds in result.steps.items():
        _out(f"{seconds:8.1f} s  {step}")
    _out(f"{result.wall_seconds:8.1f} s  total wall time")
    _out(f"JSON: {result.json_path}")
    _out(f"PNG: {result.png_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
