"""Accuracy evaluation exactly as ``shared/PROTOCOL.md`` fixes it.

* Perplexity on WikiText-2 test: the whole text (``\\r\\n`` -> ``\\n``) tokenized at once with default special tokens,
  the first N non-overlapping 512-token windows, the state reset between windows,
  PPL = exp(mean NLL over all predicted tokens).
* Agreement with the FP model on the same windows: mean KL(P_fp || P_candidate) of the next-token distributions over
  all positions, and top-1 agreement (fraction of positions where the argmaxes agree).
* OpenVINO CPU settings: f32 inference and KV cache, no dynamic (activation) quantization.
* Calibration for data-aware methods: random 256-token windows (seed 0) of Tiny Shakespeare, as stateful LLM inputs.
* For the MiniLM encoder: mean cosine similarity of mask-mean-pooled embeddings vs the FP encoder.

Models are stateful OpenVINO LLM IRs as optimum-intel exports them (inputs ``input_ids``, ``attention_mask``,
``position_ids``, ``beam_idx``; output ``logits``). They run as plain ``ov.Core`` compiled models. A window runs as
consecutive prefill requests of ``PREFILL_CHUNK`` tokens on one state (the computation of a single request, to float
rounding), every model in lockstep: each request's logits (``PREFILL_CHUNK x vocab``) are reduced to the metrics
before the next one, read in place in OpenVINO's output tensor and ``VOCAB_CHUNK`` columns at a time, so memory
does not grow with the number of windows, and per model only by its compiled weights and its request's output; the
reductions' scratch is a few ``PREFILL_CHUNK x VOCAB_CHUNK`` arrays whatever the vocabulary. They run in float32
over the vocabulary with float64 sums and per-token values; they agree with a float64 log-softmax to the printed
digits (tests/test_evaluation.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import TypeAlias

import numpy as np
import openvino as ov
from nncf.common.logging import nncf_logger
from nncf.common.logging.track_progress import track

from nncf_hqq.llm.models import ir_xml
from nncf_hqq.openvino.pages import release_file_pages
from nncf_hqq.openvino.pages import release_model_pages

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

ModelLike: TypeAlias = "ov.Model | ov.CompiledModel | str | Path"
Metrics: TypeAlias = dict[str, float]

ACCURACY_CONFIG: dict[str, str] = {
    "INFERENCE_PRECISION_HINT": "f32",
    "KV_CACHE_PRECISION": "f32",
    "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
}
"""OpenVINO CPU properties for accuracy runs (PROTOCOL.md): only weight compression differs between rows."""

ENCODER_CONFIG: dict[str, str] = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}

#: ``inference_config``'s precisions: f32 (the protocol's) or bf16 (half the memory of a float model).
INFERENCE_PRECISIONS = ("f32", "bf16")


def inference_config(precision: str = "f32") -> dict[str, str]:
    """:data:`ACCURACY_CONFIG`, or the same with activations and KV cache in bf16 (``"bf16"``): the CPU plugin then
    keeps a bf16 model's weights in bf16, half of what f32 inference holds, on CPUs with bf16 arithmetic (others
    run f32 anyway). Every model of an evaluation runs in the same precision."""
    if precision not in INFERENCE_PRECISIONS:
        msg = f"inference precision must be one of {INFERENCE_PRECISIONS}, got {precision!r}"
        raise ValueError(msg)
    if precision == "f32":
        return dict(ACCURACY_CONFIG)
    return {**ACCURACY_CONFIG, "INFERENCE_PRECISION_HINT": "bf16", "KV_CACHE_PRECISION": "bf16"}


WINDOW = 512
CALIBRATION_SEQ_LEN = 256
PREFILL_CHUNK = 128
"""Tokens per prefill request in ``evaluate_llms``: each model's logits block is ``PREFILL_CHUNK x vocab`` float32."""
VOCAB_CHUNK = 16_384
"""Vocabulary columns per step of the metric reductions: their scratch arrays are ``rows x VOCAB_CHUNK`` float32
(8 MiB each for a 128-token block), whatever the vocabulary."""


# --------------------------------------------------------------------------------------------------------------------
# Texts and token windows
# --------------------------------------------------------------------------------------------------------------------
def read_text(text_path: str | Path) -> str:
    """The text of a file as PROTOCOL.md reads it: UTF-8, ``\\r\\n`` replaced by ``\\n`` (nothing else touched)."""
    with open(text_path, encoding="utf-8", newline="") as f:
        return f.read().replace("\r\n", "\n")


def tokenize_text(tokenizer: PreTrainedTokenizerBase, text_path: str | Path) -> np.ndarray:
    """The whole text tokenized at once with the tokenizer's default special tokens, as int64 ids."""
    ids = tokenizer(read_text(text_path), verbose=False)["input_ids"]
    return np.asarray(ids, dtype=np.int64)


def wikitext_windows(
    tokenizer: PreTrainedTokenizerBase, text_path: str | Path, n_windows: int, window: int = WINDOW
) -> list[np.ndarray]:
    """The first ``n_windows`` non-overlapping ``window``-token windows of the tokenized text (int64 arrays)."""
    return token_windows(tokenize_text(tokenizer, text_path), n_windows, window, str(text_path))


def token_windows(ids: np.ndarray, n_windows: int, window: int = WINDOW, source: str = "the text") -> list[np.ndarray]:
    """The first ``n_windows`` non-overlapping ``window``-token windows of ``ids`` (copies)."""
    if n_windows * window > ids.size:
        msg = f"{source} has {ids.size} tokens, fewer than {n_windows} windows of {window}"
        raise ValueError(msg)
    return [ids[i * window : (i + 1) * window].copy() for i in range(n_windows)]


def wikitext_lines(text_path: str | Path, n: int) -> list[str]:
    """The first ``n`` non-empty lines that are not ``= Heading =`` lines, stripped."""
    lines: list[str] = []
    for raw in read_text(text_path).split("\n"):
        line = raw.strip()
        if line and not (line.startswith("=") and line.endswith("=")):
            lines.append(line)
            if len(lines) == n:
                break
    return lines


def llm_inputs(input_ids: np.ndarray, start: int = 0) -> dict[str, np.ndarray]:
    """Stateful-LLM prefill inputs for one sequence, as optimum-intel feeds them (batch 1, no padding).

    :param start: tokens already in the state (a later piece of a sequence prefilled in several requests).
    """
    ids = np.asarray(input_ids, dtype=np.int64).reshape(1, -1)
    return {
        "input_ids": ids,
        "attention_mask": np.ones((1, start + ids.shape[1]), dtype=np.int64),
        "position_ids": np.arange(start, start + ids.shape[1], dtype=np.int64).reshape(1, -1),
        "beam_idx": np.zeros(1, dtype=np.int32),
    }


def calibration_samples(
    tokenizer: PreTrainedTokenizerBase,
    text_path: str | Path,
    n: int = 128,
    seq_len: int = CALIBRATION_SEQ_LEN,
    seed: int = 0,
) -> list[dict[str, np.ndarray]]:
    """``n`` windows of ``seq_len`` tokens at random starts (``np.random.default_rng(seed)``) of the tokenized text.

    Each sample is a dict of stateful-LLM inputs (``input_ids``, ``attention_mask``, ``position_ids``, ``beam_idx``)
    ready for ``nncf.Dataset(samples)`` on an optimum-intel OpenVINO LLM.
    """
    return token_calibration_samples(tokenize_text(tokenizer, text_path), n, seq_len, seed, str(text_path))


def token_calibration_samples(
    ids: np.ndarray, n: int = 128, seq_len: int = CALIBRATION_SEQ_LEN, seed: int = 0, source: str = "the text"
) -> list[dict[str, np.ndarray]]:
    """:func:`calibration_samples` of already tokenized text ``ids``."""
    if ids.size < seq_len:
        msg = f"{source} has {ids.size} tokens, fewer than seq_len={seq_len}"
        raise ValueError(msg)
    starts = np.random.default_rng(seed).integers(0, ids.size - seq_len + 1, size=n)
    return [llm_inputs(ids[s : s + seq_len]) for s in starts]


# --------------------------------------------------------------------------------------------------------------------
# Running OpenVINO models
# --------------------------------------------------------------------------------------------------------------------
def compile_model(model: ModelLike, config: Mapping[str, str] | None = None, core: ov.Core | None = None) -> Any:
    """Compile an ``ov.Model``, an IR dir (``openvino_model.xml`` inside) or ``.xml`` path on CPU.

    An ``ov.CompiledModel`` passes through unchanged. ``config`` defaults to :data:`ACCURACY_CONFIG`.
    """
    if isinstance(model, ov.CompiledModel):
        return model
    core = core or ov.Core()
    if isinstance(model, str | Path):
        model = core.read_model(ir_xml(model))
    compiled = core.compile_model(model, "CPU", dict(ACCURACY_CONFIG if config is None else config))
    release_model_pages(model)  # read from disk: the compiled model holds what it needs
    return compiled


class StatefulLLM:
    """A compiled stateful OpenVINO LLM that returns the logits of a window (state reset first)."""

    def __init__(self, model: ModelLike, config: Mapping[str, str] | None = None, core: ov.Core | None = None) -> None:
        self.compiled = compile_model(model, config, core)
        self.request = self.compiled.create_infer_request()
        self._input_names = {name for port in self.compiled.inputs for name in port.get_names()}

    def logit_blocks(self, input_ids: np.ndarray, chunk: int | None = None) -> Iterator[np.ndarray]:
        """Reset the state and run ``input_ids`` (1-D) as consecutive prefill requests of ``chunk`` tokens (one
        request when None); yields each request's float32 logits ``[tokens, vocab]``, a view of the request's
        output that the next request overwrites."""
        self.request.reset_state()
        step = len(input_ids) if chunk is None else chunk
        for lo in range(0, len(input_ids), step):
            inputs = llm_inputs(input_ids[lo : lo + step], start=lo)
            self.request.infer({k: v for k, v in inputs.items() if k in self._input_names})
            yield self.request.get_tensor("logits").data[0]

    def logits(self, input_ids: np.ndarray, chunk: int | None = None) -> np.ndarray:
        """Float32 logits ``[len(input_ids), vocab]`` of a window (a copy), in one prefill request by default."""
        blocks = [np.array(b, dtype=np.float32) for b in self.logit_blocks(input_ids, chunk)]
        return blocks[0] if len(blocks) == 1 else np.concatenate(blocks)


class RecordedLogits:
    """A model's logits on fixed windows, recorded once into a file (``record``) and read back block by block in its
    place: a reference that costs disk space (``tokens x vocab`` float32) instead of a compiled model's memory. The
    blocks are the bytes the model returned, so metrics against it equal those against the model itself.

    Each block is read from a read-only mapping of the file, and the pages of the blocks already read are dropped
    (``release_file_pages``), so memory holds about one block whatever the file's size."""

    def __init__(self, path: Path, vocab: int, offsets: Mapping[bytes, int]) -> None:
        self.path = path
        self._offsets = dict(offsets)
        rows = max(self._offsets.values(), default=0)
        self._logits = np.memmap(path, dtype=np.float32, mode="r", shape=(rows, vocab)) if rows else None

    @classmethod
    def record(
        cls,
        model: ModelLike | StatefulLLM,
        windows: Sequence[np.ndarray],
        path: str | Path,
        chunk: int | None = PREFILL_CHUNK,
        config: Mapping[str, str] | None = None,
    ) -> RecordedLogits:
        """Runs ``model`` (compiled here with ``config`` unless it is a ``StatefulLLM``, and released on return) over
        ``windows`` as ``StatefulLLM.logit_blocks`` with ``chunk`` does, writing every block to ``path``."""
        llm = model if isinstance(model, StatefulLLM) else StatefulLLM(model, config)
        offsets: dict[bytes, int] = {}
        rows, vocab = 0, 0
        with Path(path).open("wb") as out:
            for input_ids in track(windows, description="Recording the reference logits"):
                for block in llm.logit_blocks(input_ids, chunk):
                    np.ascontiguousarray(block, dtype=np.float32).tofile(out)
                    rows, vocab = rows + len(block), block.shape[-1]
                offsets[_window_key(input_ids)] = rows
        return cls(Path(path), vocab, offsets)

    def logit_blocks(self, input_ids: np.ndarray, chunk: int | None = None) -> Iterator[np.ndarray]:
        """The recorded logits of ``input_ids`` (a recorded window) in blocks of ``chunk`` rows (all in one when
        None), each a read-only view of the file whose pages are dropped once the next block is asked for."""
        end = self._offsets.get(_window_key(input_ids))
        if end is None or self._logits is None:
            msg = f"no recorded logits for a window of {len(input_ids)} tokens in {self.path}"
            raise KeyError(msg)
        begin = end - len(input_ids)
        step = len(input_ids) if chunk is None else chunk
        for lo in range(begin, end, step):
            block = self._logits[lo : min(lo + step, end)]
            yield block
            release_file_pages(block)

    def close(self) -> None:
        """Unmaps the file (it can then be deleted)."""
        self._logits = None


def _window_key(input_ids: np.ndarray) -> bytes:
    return np.asarray(input_ids, dtype=np.int64).tobytes()


#: What ``evaluate_llms`` runs: a compiled model, or logits recorded from one.
LogitSource: TypeAlias = "StatefulLLM | RecordedLogits"


def window_logits(model: ModelLike | StatefulLLM, input_ids: np.ndarray) -> np.ndarray:
    """Logits ``[T, vocab]`` of one window (state reset first). Compiles ``model`` unless it is a StatefulLLM."""
    llm = model if isinstance(model, StatefulLLM) else StatefulLLM(model)
    return llm.logits(input_ids)


# --------------------------------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------------------------------
def log_softmax64(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64 (the reference the float32 reductions are tested against)."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def nll_sum(logp: np.ndarray, input_ids: np.ndarray) -> float:
    """Sum of -log p(token[t+1] | tokens[:t+1]) over the T-1 predicted tokens of a window; ``logp`` is ``[T, V]``."""
    targets = np.asarray(input_ids[1:], dtype=np.int64)
    return float(-logp[np.arange(targets.size), targets].sum())


@dataclass
class LogitRows:
    """One block of a model's logits reduced to what the metrics need, per row (token position).

    :param peak: the largest logit of each row, float32.
    :param argmax: the top-1 token of each row.
    :param total: sum of ``exp(logits - peak)`` over each row, float64.
    :param lse: log-sum-exp of each row, float64.
    """

    peak: np.ndarray
    argmax: np.ndarray
    total: np.ndarray
    lse: np.ndarray

    @classmethod
    def of(cls, logits: np.ndarray, vocab_chunk: int = VOCAB_CHUNK) -> LogitRows:
        """Reduce float32 ``logits [rows, vocab]`` ``vocab_chunk`` columns at a time: no array of the block's size
        is made (the logits may be a view of OpenVINO's output, read in place)."""
        argmax = logits.argmax(axis=-1)
        peak = logits[np.arange(len(logits)), argmax]
        total = np.zeros(len(logits), dtype=np.float64)
        for part in _exp_shifted_columns(logits, peak, vocab_chunk):
            total += part.sum(axis=-1, dtype=np.float64)
        return cls(peak, argmax, total, peak.astype(np.float64) + np.log(total))

    def nll(self, logits: np.ndarray, targets: np.ndarray) -> float:
        """Sum of -log p(target) over the rows with a target (``targets`` is -1 where there is none)."""
        rows = np.flatnonzero(targets >= 0)
        return float((self.lse[rows] - logits[rows, targets[rows]].astype(np.float64)).sum())


def _column_slices(vocab: int, vocab_chunk: int) -> Iterator[slice]:
    if vocab_chunk < 1:
        msg = f"vocab_chunk must be positive, got {vocab_chunk}"
        raise ValueError(msg)
    for lo in range(0, vocab, vocab_chunk):
        yield slice(lo, min(lo + vocab_chunk, vocab))


def _exp_shifted_columns(logits: np.ndarray, peak: np.ndarray, vocab_chunk: int) -> Iterator[np.ndarray]:
    """``exp(logits - peak)`` float32, ``vocab_chunk`` columns at a time, in one reused scratch array (each piece is
    overwritten by the next)."""
    scratch = np.empty((len(logits), min(vocab_chunk, logits.shape[-1])), dtype=np.float32)
    for columns in _column_slices(logits.shape[-1], vocab_chunk):
        part = scratch[:, : columns.stop - columns.start]
        np.subtract(logits[:, columns], peak[:, None], out=part)
        yield np.exp(part, out=part)


def kl_sum(
    ref_logits: np.ndarray, ref: LogitRows, logits: np.ndarray, lse: np.ndarray, vocab_chunk: int = VOCAB_CHUNK
) -> float:
    """Sum over rows of KL(P_ref || P) = sum_v p_v (z_ref,v - z_v) + lse(z) - lse(z_ref), ``vocab_chunk`` columns
    at a time: float32 over the vocabulary with float64 sums; neither logits array is written or copied whole."""
    scale = (1.0 / ref.total).astype(np.float32)[:, None]
    difference = np.empty((len(logits), min(vocab_chunk, logits.shape[-1])), dtype=np.float32)
    total = 0.0
    columns = _column_slices(logits.shape[-1], vocab_chunk)
    for part, cols in zip(_exp_shifted_columns(ref_logits, ref.peak, vocab_chunk), columns, strict=True):
        part *= scale
        d = np.subtract(ref_logits[:, cols], logits[:, cols], out=difference[:, : cols.stop - cols.start])
        d *= part
        total += float(d.sum(dtype=np.float64))
    return total + float((lse - ref.lse).sum())


@dataclass
class _Sums:
    """Running sums over windows for one model."""

    nll: float = 0.0
    n_predicted: int = 0
    kl: float = 0.0
    top1: int = 0
    n_positions: int = 0
    seconds: float = 0.0

    def metrics(self) -> Metrics:
        return {
            "ppl": float(np.exp(self.nll / max(self.n_predicted, 1))),
            "kl": self.kl / max(self.n_positions, 1),
            "top1": self.top1 / max(self.n_positions, 1),
            "seconds": self.seconds,
        }


def _timed_blocks(llm: LogitSource, sums: _Sums, input_ids: np.ndarray, chunk: int | None) -> Iterator[np.ndarray]:
    """``llm.logit_blocks`` with the inference time added to ``sums.seconds``."""
    blocks = llm.logit_blocks(input_ids, chunk)
    while True:
        start = time.perf_counter()
        block = next(blocks, None)
        sums.seconds += time.perf_counter() - start
        if block is None:
            return
        yield block


def _evaluate_window(
    llms: Mapping[str, LogitSource],
    sums: Mapping[str, _Sums],
    input_ids: np.ndarray,
    chunk: int | None,
    on_block: Callable[[str], None],
    vocab_chunk: int = VOCAB_CHUNK,
) -> None:
    """Add one window to every model's sums; the first model is the reference. Models advance block by block, each
    block reduced ``vocab_chunk`` columns at a time where it lies (the reference's stays valid while the others run:
    every model has its own request)."""
    names = list(llms)
    targets = np.append(np.asarray(input_ids[1:], dtype=np.int64), -1)
    streams = {name: _timed_blocks(llms[name], sums[name], input_ids, chunk) for name in names}
    lo = 0
    for ref_block in streams[names[0]]:
        rows = slice(lo, lo + len(ref_block))
        ref = LogitRows.of(ref_block, vocab_chunk)
        _add_rows(sums[names[0]], ref.nll(ref_block, targets[rows]), targets[rows], len(ref_block), len(ref_block))
        on_block(names[0])
        for name in names[1:]:
            block = next(streams[name])
            rows_of = LogitRows.of(block, vocab_chunk)
            kl = kl_sum(ref_block, ref, block, rows_of.lse, vocab_chunk)
            top1 = int((rows_of.argmax == ref.argmax).sum())
            _add_rows(sums[name], rows_of.nll(block, targets[rows]), targets[rows], top1, len(block), kl)
            on_block(name)
        lo += len(ref_block)


def _add_rows(sums: _Sums, nll: float, targets: np.ndarray, top1: int, n_rows: int, kl: float = 0.0) -> None:
    sums.nll += nll
    sums.n_predicted += int((targets >= 0).sum())
    sums.kl += kl
    sums.top1 += top1
    sums.n_positions += n_rows


def evaluate_llms(
    reference: ModelLike | LogitSource,
    candidates: Mapping[str, ModelLike | LogitSource],
    windows: Sequence[np.ndarray],
    reference_name: str = "fp",
    chunk: int | None = PREFILL_CHUNK,
    one_at_a_time: bool = False,
    vocab_chunk: int = VOCAB_CHUNK,
    config: Mapping[str, str] | None = None,
) -> dict[str, Metrics]:
    """Perplexity, KL(P_fp || P_candidate) and top-1 agreement of every candidate, plus the FP model's own numbers.

    Every model runs window by window in lockstep, each window as prefill requests of ``chunk`` tokens (None: one
    request per window); only the current block's logits are held, in each model's request output, and reduced
    ``vocab_chunk`` columns at a time (the metrics do not depend on it beyond float64 rounding). Returns
    ``{name: {"ppl", "kl", "top1", "seconds"}}`` with the reference under ``reference_name`` (its ``kl`` is 0 and
    ``top1`` is 1 by construction); ``seconds`` is that model's inference wall time. The progress bar names the model
    and the window.

    With ``one_at_a_time`` the candidates run one after another, each in lockstep with the reference (compiled
    once), and each is compiled just before its pass and released after it: memory holds the compiled reference,
    one compiled candidate and one block per model, whatever the number of candidates, at the cost of running the
    reference once per candidate (its ``seconds`` add up). The metrics are the same as all at once. ``config``: the
    OpenVINO CPU properties of the models compiled here (default :data:`ACCURACY_CONFIG`).
    """
    if reference_name in candidates:
        msg = f"candidate name {reference_name!r} is reserved for the reference"
        raise ValueError(msg)
    if not one_at_a_time or len(candidates) < 2:
        sums = _evaluate_in_lockstep({reference_name: reference, **candidates}, windows, chunk, vocab_chunk, config)
    else:
        reference_llm = (
            reference if isinstance(reference, StatefulLLM | RecordedLogits) else StatefulLLM(reference, config)
        )
        sums = {}
        for name, candidate in candidates.items():
            models = {reference_name: reference_llm, name: candidate}
            pass_sums = _evaluate_in_lockstep(models, windows, chunk, vocab_chunk, config)
            if reference_name in sums:
                sums[reference_name].seconds += pass_sums[reference_name].seconds
            else:
                sums[reference_name] = pass_sums[reference_name]
            sums[name] = pass_sums[name]
    results = {name: s.metrics() for name, s in sums.items()}
    for name, m in results.items():
        nncf_logger.info(f"{name}: ppl={m['ppl']:.4f} kl={m['kl']:.5f} top1={m['top1']:.4f}")
    return results


def _evaluate_in_lockstep(
    models: Mapping[str, ModelLike | LogitSource],
    windows: Sequence[np.ndarray],
    chunk: int | None,
    vocab_chunk: int = VOCAB_CHUNK,
    config: Mapping[str, str] | None = None,
) -> dict[str, _Sums]:
    """Every model's sums over the windows, the first model the reference; models that are not compiled yet are
    compiled here (with ``config``) and released on return."""
    llms = {
        name: m if isinstance(m, StatefulLLM | RecordedLogits) else StatefulLLM(m, config) for name, m in models.items()
    }
    sums = {name: _Sums() for name in llms}
    blocks = max(1, -(-len(windows[0]) // chunk)) if windows and chunk else 1
    with track[None](total=len(windows) * len(llms), description="Evaluating") as bar:
        for index, input_ids in enumerate(windows, 1):

            def advance(name: str, index: int = index) -> None:
                bar.update(advance=1 / blocks, description=f"Evaluating {name}, window {index}/{len(windows)}")

            _evaluate_window(llms, sums, input_ids, chunk, advance, vocab_chunk)
    return sums


def perplexity(model: ModelLike | StatefulLLM, windows: Sequence[np.ndarray]) -> float:
    """Perplexity of one model on the windows (exp of the mean NLL over all predicted tokens)."""
    return evaluate_llms(model, {}, windows)["fp"]["ppl"]


# --------------------------------------------------------------------------------------------------------------------
# Sentence encoder (MiniLM)
# --------------------------------------------------------------------------------------------------------------------
def mean_pooled(
    encoder: Any, tokenizer: PreTrainedTokenizerBase, lines: Sequence[str], batch_size: int = 16
) -> np.ndarray:
    """Mask-weighted mean of ``last_hidden_state`` per line, float64 ``[len(lines), hidden]``."""
    names = {port.any_name for port in encoder.inputs}
    out: list[np.ndarray] = []
    for lo in range(0, len(lines), batch_size):
        batch = tokenizer(list(lines[lo : lo + batch_size]), padding=True, truncation=True, return_tensors="np")
        inputs = encoder_inputs(batch, names)
        hidden = np.asarray(encoder(inputs)[encoder.output(0)], dtype=np.float64)
        mask = inputs["attention_mask"][..., None].astype(np.float64)
        out.append((hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9))
    return np.concatenate(out)


def encoder_inputs(batch: Mapping[str, Any], names: set[str]) -> dict[str, np.ndarray]:
    """The tokenizer's arrays the encoder takes, plus all-zero ``token_type_ids`` when it wants them but got none."""
    inputs = {k: np.asarray(v, dtype=np.int64) for k, v in batch.items() if k in names}
    if "token_type_ids" in names and "token_type_ids" not in inputs:
        inputs["token_type_ids"] = np.zeros_like(inputs["input_ids"])
    if missing := names - set(inputs):
        msg = f"encoder inputs {sorted(missing)} are not produced by the tokenizer"
        raise ValueError(msg)
    return inputs


def embedding_cosine(
    reference_encoder: ModelLike,
    candidate_encoder: ModelLike,
    tokenizer: PreTrainedTokenizerBase,
    lines: Iterable[str],
) -> float:
    """Mean cosine similarity between the candidate's and the FP encoder's mean-pooled embeddings of ``lines``."""
    texts = list(lines)
    ref = mean_pooled(compile_model(reference_encoder, ENCODER_CONFIG), tokenizer, texts)
    cand = mean_pooled(compile_model(candidate_encoder, ENCODER_CONFIG), tokenizer, texts)
    cos = (ref * cand).sum(axis=1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(cand, axis=1))
    return float(cos.mean())


#: The most tokens of a line an encoder sees (longer lines are truncated), unless its tokenizer or config allow fewer.
ENCODER_MAX_TOKENS = 512
#: The output of a sentence-transformers export that holds its own pooled (and Dense / Normalize) embedding.
SENTENCE_EMBEDDING = "sentence_embedding"


def encoder_max_length(tokenizer: PreTrainedTokenizerBase, files_dir: str | Path | None = None) -> int:
    """Tokens per line for an encoder: ``ENCODER_MAX_TOKENS``, the tokenizer's ``model_max_length`` and the
    ``max_position_embeddings`` of the ``config.json`` in ``files_dir``, whichever is least."""
    import json

    limits = [ENCODER_MAX_TOKENS, int(min(tokenizer.model_max_length, 1 << 30))]
    config = Path(files_dir) / "config.json" if files_dir is not None else None
    if config is not None and config.is_file():
        positions = json.loads(config.read_text()).get("max_position_embeddings")
        if isinstance(positions, int) and positions > 0:
            limits.append(positions)
    return min(limits)


def encoder_pooling(encoder: Any) -> str:
    """How ``pooled_embeddings`` pools ``encoder``'s outputs: its own ``sentence_embedding`` output (a
    sentence-transformers export), or the attention-mask mean of its first output."""
    names = {name for port in encoder.outputs for name in port.get_names()}
    return f"the model's {SENTENCE_EMBEDDING} output" if SENTENCE_EMBEDDING in names else "mean of the first output"


def pooled_embeddings(
    encoder: Any, tokenizer: PreTrainedTokenizerBase, lines: Sequence[str], max_length: int = ENCODER_MAX_TOKENS
) -> np.ndarray:
    """The embedding of each line, float64 ``[len(lines), dim]``, one line per request (no padding): the model's
    ``sentence_embedding`` output when it has one, else the mean of its first output over the tokens."""
    names = {port.any_name for port in encoder.inputs}
    own = SENTENCE_EMBEDDING in {name for port in encoder.outputs for name in port.get_names()}
    rows: list[np.ndarray] = []
    for line in lines:
        batch = tokenizer([line], truncation=True, max_length=max_length, return_tensors="np")
        inputs = encoder_inputs(batch, names)
        outputs = encoder(inputs)
        if own:
            rows.append(np.asarray(outputs[encoder.output(SENTENCE_EMBEDDING)], dtype=np.float64)[0])
        else:
            rows.append(np.asarray(outputs[encoder.output(0)], dtype=np.float64)[0].mean(axis=0))
    return np.stack(rows)


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The cosine similarity of each row of ``a`` with the same row of ``b``."""
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def nearest_neighbours(embeddings: np.ndarray) -> np.ndarray:
    """For each row, the index of the most cosine-similar other row (a line's nearest neighbour among the others)."""
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    return similarity.argmax(axis=1)


def evaluate_encoders(
    reference: ModelLike,
    candidates: Mapping[str, ModelLike],
    tokenizer: PreTrainedTokenizerBase,
    lines: Sequence[str],
    reference_name: str = "fp",
    max_length: int = ENCODER_MAX_TOKENS,
) -> dict[str, Metrics]:
    """Every encoder's embeddings of ``lines`` against the reference's: mean and minimum cosine, and the share of
    lines whose nearest neighbour among the other lines (cosine) is the one the reference picks (a retrieval-style
    agreement). Returns ``{name: {"cosine", "cosine_min", "neighbour_agreement", "seconds"}}`` with the reference
    under ``reference_name`` (1, 1, 1 by construction); ``seconds``: that model's inference time."""
    if reference_name in candidates:
        msg = f"candidate name {reference_name!r} is reserved for the reference"
        raise ValueError(msg)
    if len(lines) < 2:
        msg = f"the neighbour agreement needs at least 2 lines, got {len(lines)}"
        raise ValueError(msg)
    results: dict[str, Metrics] = {}
    reference_embeddings: np.ndarray | None = None
    for name, model in {reference_name: reference, **candidates}.items():
        compiled = compile_model(model, ENCODER_CONFIG)
        start = time.perf_counter()
        embeddings = pooled_embeddings(compiled, tokenizer, lines, max_length)
        seconds = time.perf_counter() - start
        if reference_embeddings is None:
            reference_embeddings = embeddings
        cosines = cosine_rows(reference_embeddings, embeddings)
        agreement = nearest_neighbours(embeddings) == nearest_neighbours(reference_embeddings)
        results[name] = {
            "cosine": float(cosines.mean()),
            "cosine_min": float(cosines.min()),
            "neighbour_agreement": float(agreement.mean()),
            "seconds": seconds,
        }
        nncf_logger.info(f"{name}: cosine={cosines.mean():.5f} min={cosines.min():.5f} nn={agreement.mean():.4f}")
    return results


def encoder_calibration_samples(
    tokenizer: PreTrainedTokenizerBase,
    lines: Sequence[str],
    input_names: set[str],
    max_length: int = CALIBRATION_SEQ_LEN,
) -> list[dict[str, np.ndarray]]:
    """One encoder input per line (batch 1, at most ``max_length`` tokens): the tokenizer's arrays the encoder
    takes (``encoder_inputs``), ready for ``nncf.Dataset``."""
    samples = []
    for line in lines:
        batch = tokenizer([line], truncation=True, max_length=max_length, return_tensors="np")
        samples.append(encoder_inputs(batch, input_names))
    return samples


def load_tokenizer(model_dir: str | Path) -> PreTrainedTokenizerBase:
    """``AutoTokenizer.from_pretrained(model_dir)`` (the exported IR dirs carry their tokenizer files)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))
