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
``position_ids``, ``beam_idx``; output ``logits``). They run as plain ``ov.Core`` compiled models, one window per
prefill request; the FP logits are never stored beyond the current window.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import TypeAlias

import numpy as np
import openvino as ov
from nncf.common.logging import nncf_logger
from nncf.common.logging.track_progress import track

from nncf_hqq.llm.models import ir_xml

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

WINDOW = 512
CALIBRATION_SEQ_LEN = 256
_ROW_CHUNK = 128  # rows of a [T, V] logits block turned into float64 at a time


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
    ids = tokenize_text(tokenizer, text_path)
    if n_windows * window > ids.size:
        msg = f"{text_path} has {ids.size} tokens, fewer than {n_windows} windows of {window}"
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


def llm_inputs(input_ids: np.ndarray) -> dict[str, np.ndarray]:
    """Stateful-LLM prefill inputs for one sequence, as optimum-intel feeds them (batch 1, no padding)."""
    ids = np.asarray(input_ids, dtype=np.int64).reshape(1, -1)
    return {
        "input_ids": ids,
        "attention_mask": np.ones_like(ids),
        "position_ids": np.arange(ids.shape[1], dtype=np.int64).reshape(1, -1),
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
    ids = tokenize_text(tokenizer, text_path)
    if ids.size < seq_len:
        msg = f"{text_path} has {ids.size} tokens, fewer than seq_len={seq_len}"
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
    return core.compile_model(model, "CPU", dict(ACCURACY_CONFIG if config is None else config))


class StatefulLLM:
    """A compiled stateful OpenVINO LLM that returns the logits of a whole window in one prefill request."""

    def __init__(self, model: ModelLike, config: Mapping[str, str] | None = None, core: ov.Core | None = None) -> None:
        self.compiled = compile_model(model, config, core)
        self.request = self.compiled.create_infer_request()
        self._input_names = {name for port in self.compiled.inputs for name in port.get_names()}

    def logits(self, input_ids: np.ndarray) -> np.ndarray:
        """Reset the state, run ``input_ids`` (1-D) and return float32 logits of shape ``[len(input_ids), vocab]``."""
        self.request.reset_state()
        inputs = {k: v for k, v in llm_inputs(input_ids).items() if k in self._input_names}
        self.request.infer(inputs)
        return np.array(self.request.get_tensor("logits").data[0], dtype=np.float32, copy=True)


def window_logits(model: ModelLike | StatefulLLM, input_ids: np.ndarray) -> np.ndarray:
    """Logits ``[T, vocab]`` of one window (state reset first). Compiles ``model`` unless it is a StatefulLLM."""
    llm = model if isinstance(model, StatefulLLM) else StatefulLLM(model)
    return llm.logits(input_ids)


# --------------------------------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------------------------------
def log_softmax64(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


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


@dataclass
class _Reference:
    """The FP model's float64 log-probs and argmaxes for the current window."""

    logp: np.ndarray
    prob: np.ndarray = field(init=False)
    argmax: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.prob = np.exp(self.logp)
        self.argmax = self.logp.argmax(axis=-1)


def nll_sum(logp: np.ndarray, input_ids: np.ndarray) -> float:
    """Sum of -log p(token[t+1] | tokens[:t+1]) over the T-1 predicted tokens of a window; ``logp`` is ``[T, V]``."""
    targets = np.asarray(input_ids[1:], dtype=np.int64)
    return float(-logp[np.arange(targets.size), targets].sum())


def _accumulate(sums: _Sums, ref: _Reference, logits: np.ndarray, input_ids: np.ndarray) -> None:
    """Add one window of a candidate's logits (all T positions for KL / top-1, T-1 predicted tokens for NLL)."""
    n_rows = logits.shape[0]
    targets = np.append(np.asarray(input_ids[1:], dtype=np.int64), -1)
    for lo in range(0, n_rows, _ROW_CHUNK):
        hi = min(lo + _ROW_CHUNK, n_rows)
        logp = log_softmax64(logits[lo:hi])
        sums.kl += float((ref.prob[lo:hi] * (ref.logp[lo:hi] - logp)).sum())
        sums.top1 += int((logp.argmax(axis=-1) == ref.argmax[lo:hi]).sum())
        rows = np.flatnonzero(targets[lo:hi] >= 0)
        sums.nll -= float(logp[rows, targets[lo:hi][rows]].sum())
        sums.n_predicted += rows.size
    sums.n_positions += n_rows


def evaluate_llms(
    reference: ModelLike | StatefulLLM,
    candidates: Mapping[str, ModelLike | StatefulLLM],
    windows: Sequence[np.ndarray],
    reference_name: str = "fp",
) -> dict[str, Metrics]:
    """Perplexity, KL(P_fp || P_candidate) and top-1 agreement of every candidate, plus the FP model's own numbers.

    Runs the FP model and every candidate window by window; only one window's FP log-probs are kept at a time.
    Returns ``{name: {"ppl", "kl", "top1", "seconds"}}`` with the reference under ``reference_name``
    (its ``kl`` is 0 and ``top1`` is 1 by construction); ``seconds`` is that model's inference wall time.
    """
    if reference_name in candidates:
        msg = f"candidate name {reference_name!r} is reserved for the reference"
        raise ValueError(msg)
    models = {reference_name: reference, **candidates}
    llms = {name: m if isinstance(m, StatefulLLM) else StatefulLLM(m) for name, m in models.items()}
    sums = {name: _Sums() for name in llms}
    for input_ids in track(windows, description="Evaluating windows"):
        ref = _run_reference(llms[reference_name], sums[reference_name], input_ids)
        for name in candidates:
            start = time.perf_counter()
            logits = llms[name].logits(input_ids)
            sums[name].seconds += time.perf_counter() - start
            _accumulate(sums[name], ref, logits, input_ids)
    results = {name: s.metrics() for name, s in sums.items()}
    for name, m in results.items():
        nncf_logger.info(f"{name}: ppl={m['ppl']:.4f} kl={m['kl']:.5f} top1={m['top1']:.4f}")
    return results


def _run_reference(llm: StatefulLLM, sums: _Sums, input_ids: np.ndarray) -> _Reference:
    start = time.perf_counter()
    logits = llm.logits(input_ids)
    sums.seconds += time.perf_counter() - start
    ref = _Reference(
        np.concatenate([log_softmax64(logits[i : i + _ROW_CHUNK]) for i in range(0, len(logits), _ROW_CHUNK)])
    )
    sums.nll += nll_sum(ref.logp, input_ids)
    sums.n_predicted += len(input_ids) - 1
    sums.top1 += len(input_ids)
    sums.n_positions += len(input_ids)
    return ref


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
        inputs = _encoder_inputs(batch, names)
        hidden = np.asarray(encoder(inputs)[encoder.output(0)], dtype=np.float64)
        mask = inputs["attention_mask"][..., None].astype(np.float64)
        out.append((hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9))
    return np.concatenate(out)


def _encoder_inputs(batch: Mapping[str, Any], names: set[str]) -> dict[str, np.ndarray]:
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


def load_tokenizer(model_dir: str | Path) -> PreTrainedTokenizerBase:
    """``AutoTokenizer.from_pretrained(model_dir)`` (the exported IR dirs carry their tokenizer files)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))
