"""The evaluate job as one Python call: ``evaluate(models, reference, **options)`` measures OpenVINO models against a
float reference as ``nncf-hqq evaluate`` does (LLMs: perplexity, KL and top-1 agreement on token windows; encoders:
embedding cosine and nearest-neighbour agreement on text lines), and returns the results with their table; the
record goes to a JSON file and the results to a PNG chart on request."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from nncf.common.logging import nncf_logger

from nncf_hqq.llm.encoders import DEFAULT_LINES
from nncf_hqq.llm.encoders import ENCODER_CHARTS
from nncf_hqq.llm.encoders import ENCODER_COLUMNS
from nncf_hqq.llm.encoders import encoder_max_length
from nncf_hqq.llm.encoders import encoder_pooling
from nncf_hqq.llm.encoders import evaluate_encoders
from nncf_hqq.llm.encoders import evaluation_lines
from nncf_hqq.llm.encoders import is_encoder_ir
from nncf_hqq.llm.evaluation import INFERENCE_PRECISIONS
from nncf_hqq.llm.evaluation import Metrics
from nncf_hqq.llm.evaluation import ModelLike
from nncf_hqq.llm.evaluation import StatefulLLM
from nncf_hqq.llm.evaluation import evaluate_llms
from nncf_hqq.llm.evaluation import inference_config
from nncf_hqq.llm.layout import MODEL_XML
from nncf_hqq.llm.layout import ir_xml
from nncf_hqq.llm.layout import is_ir_dir
from nncf_hqq.llm.layout import model_files_dir
from nncf_hqq.llm.layout import read_model
from nncf_hqq.llm.logs import on_a_terminal
from nncf_hqq.llm.logs import progress_bars_only_on_a_terminal
from nncf_hqq.llm.memory import PhaseEstimate
from nncf_hqq.llm.memory import check_evaluate_memory
from nncf_hqq.llm.options import OptionError
from nncf_hqq.llm.records import versions
from nncf_hqq.llm.records import write_json
from nncf_hqq.llm.reports import LLM_CHARTS
from nncf_hqq.llm.reports import LLM_COLUMNS
from nncf_hqq.llm.reports import Column
from nncf_hqq.llm.reports import format_table
from nncf_hqq.llm.reports import require_matplotlib
from nncf_hqq.llm.reports import write_png
from nncf_hqq.llm.sanity import check_tokenized_text
from nncf_hqq.llm.sanity import perplexity_warning
from nncf_hqq.llm.texts import WINDOW
from nncf_hqq.llm.texts import load_tokenizer
from nncf_hqq.llm.texts import read_text
from nncf_hqq.llm.texts import token_windows
from nncf_hqq.llm.texts import tokenize_text
from nncf_hqq.llm.timing import EVALUATION_PHASE
from nncf_hqq.llm.timing import REFERENCE_CHECK_PHASE
from nncf_hqq.llm.timing import TOKENIZATION_PHASE
from nncf_hqq.llm.timing import StepTimer
from nncf_hqq.llm.timing import silent_timer
from nncf_hqq.llm.zoo import default_text
from nncf_hqq.openvino.pages import releasing_file_pages
from nncf_hqq.openvino.pages import return_free_heap

#: Windows the job evaluates LLMs on by default (shared/PROTOCOL.md's 40 first windows).
DEFAULT_WINDOWS = 40


def model_label(path: str | Path) -> str:
    """A short name for a model path: its directory name (for ``.../openvino_model.xml`` too) or the file stem."""
    p = Path(path)
    if p.suffix == ".xml":
        return p.parent.name if p.name == MODEL_XML and p.parent.name else p.stem
    return p.name or str(p)


def unique_labels(paths: Sequence[str]) -> dict[str, str]:
    """``{label: path}`` for ``NAME=PATH`` or plain paths (labels from ``model_label``); raises on duplicates."""
    labelled: dict[str, str] = {}
    for item in paths:
        name, sep, path = item.partition("=")
        if not sep or not name or Path(item).exists():
            name, path = model_label(item), item
        if name in labelled:
            raise OptionError("two {models} are named {name!r}; name them with NAME=PATH", name=name)
        labelled[name] = path
    return labelled


def evaluate_against(
    reference: ModelLike,
    candidates: Mapping[str, ModelLike],
    tokenizer_dir: str | Path,
    text_path: str | Path,
    n_windows: int,
    window: int = WINDOW,
    reference_name: str = "fp",
    warn: Callable[[str], None] | None = None,
    timer: StepTimer | None = None,
    one_at_a_time: bool = True,
    config: Mapping[str, str] | None = None,
) -> dict[str, Metrics]:
    """PPL, KL vs the reference and top-1 agreement of LLMs (IRs or in-memory models) on the first ``n_windows``
    windows of the text.

    ``warn`` receives the findings of ``nncf_hqq.llm.sanity`` (text and tokenizer, then the reference perplexity).
    ``timer`` times the phases: ``tokenization``, ``reference check`` (compiling the reference, the sanity checks)
    and ``evaluation``. ``one_at_a_time``: the candidates are compiled and evaluated one after another
    (``evaluation.evaluate_llms``), so memory holds one compiled candidate at a time. ``config``: the OpenVINO CPU
    properties of every model (``evaluation.inference_config``; default f32).
    """
    timer = timer or silent_timer()
    with timer.step(TOKENIZATION_PHASE):
        tokenizer = load_tokenizer(tokenizer_dir)
        text = read_text(text_path)
        ids = tokenize_text(tokenizer, text_path)
        windows = token_windows(ids, n_windows, window, str(text_path))
    with timer.step(REFERENCE_CHECK_PHASE):
        reference_llm = StatefulLLM(reference, config)
        findings = check_tokenized_text(text, ids, reference_llm, model_files_dir(reference), f"{text_path}")
    with timer.step(EVALUATION_PHASE):
        results = evaluate_llms(
            reference_llm,
            candidates,
            windows,
            reference_name=reference_name,
            one_at_a_time=one_at_a_time,
            config=config,
        )
    final = perplexity_warning(results[reference_name]["ppl"], "the reference's perplexity on the windows")
    for finding in [*findings, *([final] if final else [])]:
        if warn is not None:
            warn(finding)
    return results


@dataclass(frozen=True)
class EvaluationResult:
    """What an evaluate run measured.

    :param kind: ``"llm"`` or ``"encoder"``.
    :param results: ``{name: metrics}``, the reference first.
    :param table: the results as a text table.
    :param notes: lines that go with the table (how encoders were embedded).
    :param warnings: what the checks of the text and the tokenizer found.
    :param record: what the JSON file holds.
    :param json_path: the JSON file written (None: none asked for); ``png_path``: the chart.
    :param memory_estimate: the estimated peak (None: not estimated).
    """

    kind: str
    results: dict[str, Metrics]
    table: str
    notes: tuple[str, ...]
    warnings: tuple[str, ...]
    record: dict[str, Any]
    json_path: Path | None
    png_path: Path | None
    memory_estimate: PhaseEstimate | None = None
    phase_seconds: dict[str, float] = field(default_factory=dict)


def evaluate(
    models: Sequence[str | Path] | Mapping[str, str | Path],
    reference: str | Path,
    *,
    text: str | Path | None = None,
    windows: int = DEFAULT_WINDOWS,
    window_size: int = WINDOW,
    lines: int | None = None,
    tokenizer: str | Path | None = None,
    reference_name: str = "fp",
    all_at_once: bool = False,
    inference_precision: str = "f32",
    memory_check: bool = True,
    json: str | Path | None = None,
    png: str | Path | None = None,
    log: Callable[[str], None] | None = None,
) -> EvaluationResult:
    """Evaluate OpenVINO IRs (``.xml`` files or dirs) against the float ``reference``, as ``nncf-hqq evaluate`` does.

    ``models``: paths (named after their dir), ``NAME=PATH`` strings, or ``{name: path}``. ``text``: default the
    shared WikiText-2 test text. LLMs: the first ``windows`` windows of ``window_size`` tokens, candidates compiled
    one at a time unless ``all_at_once``, every model in ``inference_precision`` (``"f32"``, ``"bf16"``). Encoders
    (recognised from the reference): the first ``lines`` lines (default ``encoders.DEFAULT_LINES``). ``json`` and
    ``png``: files to write the record and the chart to. ``log`` receives the progress lines.

    Raises ``OptionError`` for bad options before any model is compiled, ``NotEnoughMemoryError`` when the
    estimated peak exceeds the memory available (``memory_check=False`` runs it anyway).
    """
    log = log or nncf_logger.info
    if windows <= 0 or window_size < 2:
        raise OptionError("{windows} must be positive and {window_size} at least 2")
    reference_path = _ir_or_error(str(reference), "reference")
    items = [f"{name}={path}" for name, path in models.items()] if isinstance(models, Mapping) else models
    labelled = unique_labels([str(item) for item in items])
    if reference_name in labelled:
        raise OptionError(
            "a model of {models} is named {name!r} like the reference; name it with NAME=PATH or change "
            "{reference_name}",
            name=reference_name,
        )
    if inference_precision not in INFERENCE_PRECISIONS:
        msg = "{inference_precision} must be one of {allowed}, got {value!r}"
        raise OptionError(msg, allowed=", ".join(INFERENCE_PRECISIONS), value=inference_precision)
    candidates = {name: _ir_or_error(path, "models") for name, path in labelled.items()}
    text_path = _text(text)
    tokenizer_dir = Path(tokenizer) if tokenizer is not None else model_files_dir(reference_path) or reference_path
    if png is not None:
        require_matplotlib()
    timer = StepTimer(log, at_boundary=return_free_heap, announce=on_a_terminal())
    run = _Run(reference_path, candidates, text_path, tokenizer_dir, reference_name, timer, log)
    with progress_bars_only_on_a_terminal():
        if is_encoder_ir(reference_path):
            outcome = run.encoders(DEFAULT_LINES if lines is None else lines)
        else:
            if lines is not None:
                raise OptionError("{lines} applies to encoders; the reference is an LLM, evaluated on token windows")
            estimate = check_evaluate_memory(
                reference_path, list(candidates.values()), inference_precision, log, refuse=memory_check
            )
            outcome = run.llms(windows, window_size, not all_at_once, inference_precision, estimate)
    log(f"phases: {timer.summary()}")
    json_path = write_json(Path(json), outcome.record) if json is not None else None
    png_path = None
    if png is not None:
        png_path = write_png(Path(png), outcome.results, outcome.title, reference_name, outcome.charts)
    return EvaluationResult(
        outcome.kind,
        outcome.results,
        outcome.table,
        outcome.notes,
        outcome.warnings,
        outcome.record,
        json_path,
        png_path,
        outcome.estimate,
        dict(timer.seconds),
    )


def _ir_or_error(path: str, option: str) -> Path:
    p = Path(path).expanduser()
    if (p.is_file() and p.suffix == ".xml") or is_ir_dir(p):
        return p
    msg = "{" + option + "} {path!r} is not an OpenVINO IR (an .xml file, or a dir with {xml})"
    raise OptionError(msg, path=path, xml=MODEL_XML)


def _text(text: str | Path | None) -> Path:
    if text is not None:
        if not Path(text).is_file():
            raise OptionError("{text} {path} is not a file", path=text)
        return Path(text)
    found = default_text()
    if found is None:
        raise OptionError("no {text} given and the shared WikiText-2 text was not found ($NNCF_HQQ_SHARED)")
    return found


@dataclass(frozen=True)
class _Outcome:
    kind: str
    results: dict[str, Metrics]
    table: str
    record: dict[str, Any]
    title: str
    charts: Mapping[str, str]
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    estimate: PhaseEstimate | None = None


@dataclass(frozen=True)
class _Run:
    """The models and text of one evaluate run, checked."""

    reference: Path
    candidates: dict[str, Path]
    text: Path
    tokenizer_dir: Path
    reference_name: str
    timer: StepTimer
    log: Callable[[str], None]

    def _outcome(
        self,
        kind: str,
        results: dict[str, Metrics],
        entries: dict[str, Any],
        title: str,
        columns: Sequence[Column],
        charts: Mapping[str, str],
        **notes: Any,
    ) -> _Outcome:
        """The run's outcome: its record (the reference, the models and the text, ``entries``, the results, the
        phases' seconds, the versions), its table, the title of its chart."""
        models = {self.reference_name: str(self.reference), **{n: str(p) for n, p in self.candidates.items()}}
        record = {
            "reference": self.reference_name,
            **({"kind": kind} if kind != "llm" else {}),
            "models": models,
            "text": str(self.text),
            **entries,
            "results": results,
            **({"warnings": list(notes["warnings"])} if "warnings" in notes else {}),
            "phase_seconds": dict(self.timer.seconds),
            "versions": versions(),
        }
        title = f"{title}, reference {self.reference_name}"
        table = format_table(results, columns=columns)
        return _Outcome(kind, results, table, record, title, charts, **notes)

    def llms(
        self, windows: int, window_size: int, one_at_a_time: bool, precision: str, estimate: PhaseEstimate | None
    ) -> _Outcome:
        warnings: list[str] = []

        def warn(finding: str) -> None:
            warnings.append(finding)
            self.log(f"warning: {finding}")

        weights_files = [ir_xml(path).with_suffix(".bin") for path in (self.reference, *self.candidates.values())]
        with releasing_file_pages(*weights_files):  # the compiled models pack their weights: nncf_hqq.openvino.pages
            results = evaluate_against(
                self.reference,
                self.candidates,
                self.tokenizer_dir,
                self.text,
                windows,
                window_size,
                self.reference_name,
                warn,
                self.timer,
                one_at_a_time=one_at_a_time,
                config=inference_config(precision),
            )
        entries = {"windows": windows, "window_size": window_size}
        title = f"{windows} x {window_size}-token windows of {self.text.name}"
        return self._outcome(
            "llm", results, entries, title, LLM_COLUMNS, LLM_CHARTS, warnings=tuple(warnings), estimate=estimate
        )

    def encoders(self, n_lines: int) -> _Outcome:
        """The cosine of each line's embedding with the reference's (mean, minimum) and the nearest-neighbour
        agreement, on the first ``n_lines`` lines of the text, each embedded as the model pools it."""
        if n_lines < 2:
            raise OptionError(
                "{lines} must be at least 2 (a line's nearest neighbour is among the others), got {value}",
                value=n_lines,
            )
        tokenizer = load_tokenizer(self.tokenizer_dir)
        lines = evaluation_lines(self.text, n_lines)
        pooling = encoder_pooling(read_model(self.reference))
        max_length = encoder_max_length(tokenizer, self.tokenizer_dir)
        with self.timer.step(EVALUATION_PHASE):
            results = evaluate_encoders(
                self.reference, self.candidates, tokenizer, lines, self.reference_name, max_length
            )
        note = (
            f"Encoders: embeddings of the first {n_lines} lines of {self.text.name} ({pooling}); NN agree: the share "
            "of lines whose nearest other line (cosine) is the reference's"
        )
        title = f"embeddings of {n_lines} lines of {self.text.name}"
        entries = {"lines": n_lines, "pooling": pooling}
        return self._outcome("encoder", results, entries, title, ENCODER_COLUMNS, ENCODER_CHARTS, notes=(note,))
