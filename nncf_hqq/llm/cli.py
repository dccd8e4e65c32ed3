"""The ``nncf-hqq`` command line: it parses the arguments, runs the job (``compress_job``, ``evaluate_job``, ``demo``)
and prints what it did.

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
import errno
import inspect
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from collections.abc import Sequence
from contextlib import contextmanager
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any
from typing import TextIO

from nncf.common.logging import nncf_logger

from nncf_hqq.llm.compress_job import CHECKPOINT
from nncf_hqq.llm.compress_job import ENCODER
from nncf_hqq.llm.compress_job import VLM
from nncf_hqq.llm.compress_job import CompressionResult
from nncf_hqq.llm.compress_job import CompressJob
from nncf_hqq.llm.cpu import TARGET_CPUS
from nncf_hqq.llm.demo import DEFAULT_OUT
from nncf_hqq.llm.demo import DEFAULT_WINDOWS as DEMO_WINDOWS
from nncf_hqq.llm.demo import run_demo as demo
from nncf_hqq.llm.encoders import DEFAULT_LINES
from nncf_hqq.llm.evaluate_job import DEFAULT_WINDOWS
from nncf_hqq.llm.evaluate_job import evaluate
from nncf_hqq.llm.evaluation import INFERENCE_PRECISIONS
from nncf_hqq.llm.layout import MODEL_XML
from nncf_hqq.llm.layout import is_genai_dir
from nncf_hqq.llm.layout import is_vlm_genai_dir
from nncf_hqq.llm.options import AUTO_TASK
from nncf_hqq.llm.options import BACKENDS
from nncf_hqq.llm.options import BACKUP_MODES
from nncf_hqq.llm.options import MODES
from nncf_hqq.llm.options import TASKS
from nncf_hqq.llm.options import ZERO_POINT_FORMATS
from nncf_hqq.llm.options import JobError
from nncf_hqq.llm.options import JobOptions
from nncf_hqq.llm.options import OptionError
from nncf_hqq.llm.output_check import OUTPUT_CHECK_SEQUENCES
from nncf_hqq.llm.reports import format_table
from nncf_hqq.llm.texts import WINDOW
from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT

PROG = "nncf-hqq"
#: The compress job's defaults, which the flags show.
DEFAULTS = JobOptions()


class _Output:
    """Where results go: the stdout of the command, while NNCF's logs and progress bars go to stderr."""

    stream: TextIO | None = None


def _out(text: str) -> None:
    stream = _Output.stream or sys.stdout
    stream.write(text + "\n")
    stream.flush()


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
    p.add_argument(
        "--mode", type=str.lower, choices=sorted(MODES), default=DEFAULTS.mode, help=f"default: {DEFAULTS.mode}"
    )
    p.add_argument("--group-size", type=int, help="weights per group; -1: per channel (NNCF default: 128 for int4)")
    p.add_argument("--ratio", type=float, help="share of layers in --mode, the rest in the backup mode (default 1)")
    p.add_argument("--backup-mode", type=str.lower, choices=sorted(BACKUP_MODES), help="default: int8_asym")
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
        f"compressions on {OUTPUT_CHECK_SEQUENCES} held-out generated sequences (KL vs float; the closest is "
        "written)",
    )
    p.add_argument(
        "--self-calibration-samples",
        metavar="N",
        type=int,
        default=DEFAULTS.self_calibration_samples,
        help=f"sequences of {SELF_CALIBRATION_DEFAULT.seq_len} tokens the model generates for self-calibration "
        f"(default {DEFAULTS.self_calibration_samples})",
    )
    p.add_argument(
        "--self-prompt-text",
        metavar="TEXT_FILE",
        type=Path,
        help="self-calibration: a short text in the language and domain the model will serve; every generated "
        f"sequence continues {SELF_CALIBRATION_DEFAULT.prompt_len} tokens of it (default: generate from BOS alone)",
    )
    p.add_argument(
        "--subset-size",
        type=int,
        default=DEFAULTS.subset_size,
        help=f"calibration samples (default {DEFAULTS.subset_size})",
    )
    p.add_argument(
        "--tokenizer",
        metavar="DIR",
        type=Path,
        help="HF tokenizer dir for --dataset and for OUT's OpenVINO tokenizer IRs (default: MODEL's)",
    )
    p.add_argument(
        "--zero-point",
        choices=sorted(ZERO_POINT_FORMATS),
        help="HQQ's zero points (default: the format that suits --target-cpu: split from 1B parameters on CPUs with "
        "VNNI and without AMX, float otherwise)",
    )
    p.add_argument(
        "--target-cpu",
        choices=tuple(TARGET_CPUS),
        default="this",
        help="the kind of CPU the model will run on, which picks the zero-point format (default: this one; avx2: "
        "without VNNI, avx2-vnni: with it, as Intel's client CPUs since Alder Lake)",
    )
    p.add_argument("--no-hqq", action="store_true", help="plain NNCF (round to nearest) instead of HQQ")
    p.add_argument(
        "--token-rows",
        metavar="K",
        type=int,
        default=0,
        help="with calibration data: HQQ's refinement and guard fit K random token rows of each sample (32: "
        "nncf_hqq.HQQ_TOKEN_ROWS) instead of NNCF's per-sample means (default 0: the means)",
    )
    reference = p.add_mutually_exclusive_group()
    reference.add_argument(
        "--guard-reference",
        action="store_const",
        const=True,
        default=None,
        help="with calibration data: HQQ's output guard also weighs NNCF's Scale Estimation result, which NNCF "
        "computes for it (default: with --dataset; self-calibrated, the guard chooses between HQQ's and RTN's rows, "
        "measured as accurate or more on self-generated text and about twice as fast to compress)",
    )
    reference.add_argument(
        "--no-guard-reference",
        dest="guard_reference",
        action="store_const",
        const=False,
        help="with calibration data: the output guard chooses between HQQ's and RTN's rows; NNCF's Scale "
        "Estimation does not run (the self-calibrated default)",
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
        default=AUTO_TASK,
        help="what a HF model is exported as: text-generation (a causal LM, with its KV cache), feature-extraction "
        "(an encoder; a sentence-transformers model with its pooling and Dense layers) or image-text-to-text (a "
        "vision-language model, for openvino_genai.VLMPipeline); auto (default): inferred as optimum infers it",
    )
    p.add_argument(
        "--no-memory-check",
        action="store_true",
        help="run even when a phase's estimated memory exceeds the memory available (default: refused up front)",
    )
    p.add_argument(
        "--no-disk-check",
        action="store_true",
        help="run even when a phase would write more to a disk than is free on it (the export to TMPDIR, the "
        "scratch files and OUT beside OUT; default: refused up front)",
    )
    stand_in = p.add_mutually_exclusive_group()
    stand_in.add_argument(
        "--int8-stand-in",
        action="store_const",
        const=True,
        default=None,
        help="self-calibrated: run an INT8 copy of the float model, in half the memory of bf16 weights, for the "
        "self-calibration text, the statistics and the output check's reference (default: only where a phase of "
        "the float model would not fit in the memory available and every phase with the copy does)",
    )
    stand_in.add_argument(
        "--no-int8-stand-in",
        dest="int8_stand_in",
        action="store_const",
        const=False,
        help="self-calibrated: always run the float model itself (a run that does not fit is refused)",
    )
    p.add_argument(
        "--memory-budget",
        type=float,
        metavar="GIB",
        help="plan and check the phases for this much memory instead of what the system has available",
    )
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="openvino: write an OpenVINO IR (a HF model is exported first); torch: compress a HF model in PyTorch "
        "and write a transformers checkpoint; auto (default): openvino",
    )


def _add_evaluate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("models", metavar="MODEL", nargs="+", help="OpenVINO IR (.xml or dir); NAME=PATH names a row")
    p.add_argument("--reference", metavar="FP_MODEL", required=True, help="the float OpenVINO IR (.xml or dir)")
    p.add_argument("--reference-name", default="fp", help="row name of the reference (default: fp)")
    p.add_argument("--text", type=Path, help="evaluation text (default: the shared WikiText-2 test text)")
    p.add_argument(
        "--windows",
        type=int,
        default=DEFAULT_WINDOWS,
        help=f"first N non-overlapping windows (default {DEFAULT_WINDOWS})",
    )
    p.add_argument("--window-size", type=int, default=WINDOW, help="tokens per window (default 512)")
    p.add_argument(
        "--lines",
        type=int,
        help=f"encoders: embed the first N non-empty, non-heading lines (default {DEFAULT_LINES})",
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
        choices=INFERENCE_PRECISIONS,
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
    p.add_argument("--windows", type=int, default=DEMO_WINDOWS, help=f"WikiText-2 windows (default {DEMO_WINDOWS})")
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
        with _termination_unwinds(), _results_on_stdout_logs_on_stderr():
            return int(args.handler(args))
    except OptionError as err:
        args.subparser.print_usage(sys.stderr)
        sys.stderr.write(f"{PROG} {args.command}: error: {err.for_command_line()}\n")
        return 2
    except _Terminated:
        sys.stderr.write(f"{PROG}: terminated\n")
        return TERMINATED_EXIT_CODE
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except Exception as err:
        if args.traceback:
            raise
        sys.stderr.write(f"{PROG} {args.command}: error: {_describe(err)}\n")
        return 1


#: The exit code after SIGTERM (128 + the signal's number, as a shell reports a process it terminated).
TERMINATED_EXIT_CODE = 128 + signal.SIGTERM


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a job scheduler's stop, ``kill``), raised where the program is, so that every ``with`` block unwinds
    as for Ctrl-C: the export's temporary IR and the scratch dirs beside OUT (gigabytes for a 7B model) are removed."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise _Terminated


@contextmanager
def _termination_unwinds() -> Iterator[None]:
    """While the command runs, SIGTERM raises ``_Terminated`` instead of ending the process on the spot (the
    default, which skips every clean-up); the previous handler is put back after. Only the main thread can."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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


#: What OpenVINO's writer says when a file cannot be written (C++ ``std::ios`` failure), e.g. on a full disk.
IOSTREAM_FAILURE = "iostream error"
#: Said after a failed write: what usually causes it and where ``compress`` writes its large files.
WRITE_FAILURE_HINT = (
    "a file could not be written: check the free disk space; compress writes the exported IR of a HF model to the "
    "temporary dir (TMPDIR; as large as the checkpoint) and, self-calibrated, the INT8 stand-in and the recorded "
    "logits beside OUT (docs/memory.md: about 34 GB in all for a bf16 7B model with the stand-in)"
)


def _describe(err: BaseException) -> str:
    """A one-line description: the message, prefixed by the exception type when that says something."""
    if isinstance(err, JobError):
        return err.for_command_line()
    message = str(err).strip() or repr(err)
    if IOSTREAM_FAILURE in message or (isinstance(err, OSError) and err.errno == errno.ENOSPC):
        return f"{message} ({WRITE_FAILURE_HINT})"
    if isinstance(err, ImportError):
        return f"{message}: install the llm extra (pip install -e '.[llm]')"
    if isinstance(err, (FileNotFoundError, ValueError, RuntimeError)) or type(err).__module__.startswith("nncf"):
        return message
    return f"{type(err).__name__}: {message} (rerun with --traceback for details)"


# --------------------------------------------------------------------------------------------------------------------
# The commands
# --------------------------------------------------------------------------------------------------------------------
def _from_flags(names: Sequence[str], args: argparse.Namespace) -> dict[str, Any]:
    """The values of the options ``names`` in the parsed flags: each option's flag, or ``--no-OPTION`` for a switch
    that is on by default (``self_calibration`` and ``--no-self-calibration``)."""
    flags = vars(args)
    return {name: flags[name] if name in flags else not flags[f"no_{name}"] for name in names}


def job_options(args: argparse.Namespace) -> JobOptions:
    """The compress job's options of the parsed flags."""
    return JobOptions(**_from_flags([field.name for field in dataclasses.fields(JobOptions)], args))


def run_compress(args: argparse.Namespace) -> int:
    result = CompressJob(job_options(args), _info, command_line=True).run(args.model, args.out)
    _print_compressed(result)
    return 0


def _print_compressed(result: CompressionResult) -> None:
    copied = f"Copied from the source: {', '.join(result.copied)}"
    if result.kind == CHECKPOINT:
        _out(f"Wrote a transformers checkpoint to {result.out} ({result.description})")
        _out(f"Load it with: {result.loader}")
        if result.copied:
            _out(copied)
        _out(f"Total: {result.total_seconds:.1f} s (load, compression and saving {result.compress_seconds:.1f} s)")
        return
    if result.kind == VLM:
        _print_vlm(result)
        return
    what = "encoder: " if result.kind == ENCODER else ""
    _out(f"Wrote {result.out / MODEL_XML} ({what}{result.description})")
    if result.copied:
        _out(copied)
    elif result.kind != ENCODER:
        _out("No config/tokenizer files beside the source IR: add them to OUT before loading it with optimum-intel")
    if result.kind == ENCODER:
        _out(f"Load it with: {result.loader}")
    elif is_genai_dir(result.out):
        _out(f"OpenVINO GenAI: openvino_genai.LLMPipeline({str(result.out)!r}, 'CPU') loads it (tokenizer IRs in OUT)")
    _out(f"Total: {result.total_seconds:.1f} s (compression {result.compress_seconds:.1f} s)")


def _print_vlm(result: CompressionResult) -> None:
    """A vision-language model: each part written and how, and the pipeline that loads OUT."""
    _out(f"Wrote a vision-language model to {result.out}:")
    for part in result.record["vlm"]["parts"].values():
        _out(f"  {part['file']}: {part['recipe']}")
    if result.copied:
        _out(f"Copied from the export: {', '.join(result.copied)}")
    if is_vlm_genai_dir(result.out):
        _out(f"OpenVINO GenAI: openvino_genai.VLMPipeline({str(result.out)!r}, 'CPU') loads it (tokenizer IRs in OUT)")
    _out(f"Total: {result.total_seconds:.1f} s (compression {result.compress_seconds:.1f} s)")


def run_evaluate(args: argparse.Namespace) -> int:
    parameters = inspect.signature(evaluate).parameters.values()
    names = [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "log"]
    result = evaluate(args.models, args.reference, **_from_flags(names, args), log=_info)
    _out(result.table)
    for line in result.notes:
        _out(line)
    for finding in result.warnings:
        _out(f"warning: {finding}")
    if result.json_path is not None:
        _out(f"JSON: {result.json_path}")
    if result.png_path is not None:
        _out(f"PNG: {result.png_path}")
    return 0


def run_demo(args: argparse.Namespace) -> int:
    result = demo(windows=args.windows, cache=args.cache, out_dir=args.out, text=args.text, log=_info)
    extra = {name: {"compress s": seconds} for name, seconds in result.compress_seconds.items()}
    _out(format_table(result.results, extra))
    _out("")
    for step, seconds in result.steps.items():
        _out(f"{seconds:8.1f} s  {step}")
    _out(f"{result.wall_seconds:8.1f} s  total wall time")
    _out(f"JSON: {result.json_path}")
    _out(f"PNG: {result.png_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
