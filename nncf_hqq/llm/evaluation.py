"""The evaluation protocol's metrics for LLMs, exactly as ``shared/PROTOCOL.md`` fixes them.

* Perplexity on the first N non-overlapping windows of the text (``nncf_hqq.llm.texts``), the state reset between
  windows, PPL = exp(mean NLL over all predicted tokens).
* Agreement with the FP model on the same windows: mean KL(P_fp || P_candidate) of the next-token distributions over
  all positions, and top-1 agreement (fraction of positions where the argmaxes agree).
* OpenVINO CPU settings: f32 inference and KV cache, no dynamic (activation) quantization.

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
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from typing import TypeAlias

import numpy as np
import openvino as ov
from nncf.common.logging import nncf_logger
from nncf.common.logging.track_progress import track

from nncf_hqq.llm.layout import ir_xml
from nncf_hqq.llm.texts import llm_inputs
from nncf_hqq.openvino.pages import release_file_pages
from nncf_hqq.openvino.pages import release_model_pages

ModelLike: TypeAlias = "ov.Model | ov.CompiledModel | str | Path"
Metrics: TypeAlias = dict[str, float]
#: The metrics of an LLM against the reference (``evaluate_llms``; each row also has its ``seconds``).
METRICS = ("ppl", "kl", "top1")

ACCURACY_CONFIG: dict[str, str] = {
    "INFERENCE_PRECISION_HINT": "f32",
    "KV_CACHE_PRECISION": "f32",
    "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
}
"""OpenVINO CPU properties for accuracy runs (PROTOCOL.md): only weight compression differs between rows."""

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


PREFILL_CHUNK = 128
"""Tokens per prefill request in ``evaluate_llms``: each model's logits block is ``PREFILL_CHUNK x vocab`` float32."""
VOCAB_CHUNK = 16_384
"""Vocabulary columns per step of the metric reductions: their scratch arrays are ``rows x VOCAB_CHUNK`` float32
(8 MiB each for a 128-token block), whatever the vocabulary."""


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
