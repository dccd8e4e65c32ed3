"""Self-calibration: a calibration dataset made of text the model generates itself.

Data-aware compression (AWQ, Scale Estimation, HQQ's output-error guard) needs inputs of every layer, and what
decides a layer's output error is the distribution of those inputs. A generative LLM can produce that distribution
without any user data: ``self_calibration_dataset`` samples sequences from the float model (temperature, nucleus
sampling, a seed) and returns them as the stateful-LLM inputs optimum-intel feeds, ready for
``nncf.compress_weights(..., dataset=...)``. ``compress_weights(..., dataset="self")`` (or
``dataset=SelfCalibration(...)``) does both in one call. The choices behind the defaults are measured in
docs/self_calibration.md.

Models that cannot generate (encoders, models without a ``logits`` output) raise ``nncf.ValidationError``: give them
an ``nncf.Dataset`` of real inputs, or compress them data-free.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import fields
from dataclasses import replace
from typing import Any

import nncf
import numpy as np
import openvino as ov
from nncf.common.logging import nncf_logger
from nncf.common.logging.track_progress import track

from nncf_hqq.openvino.pages import release_model_pages

#: The inputs of a stateful OpenVINO LLM as optimum-intel exports it (``beam_idx`` reorders the KV cache).
LLM_INPUTS = ("input_ids", "attention_mask", "position_ids", "beam_idx")
#: Inputs a stateful LLM must have to be sampled from.
REQUIRED_INPUTS = ("input_ids",)
LOGITS = "logits"
#: OpenVINO CPU properties of the generation: f32 inference, so that the sequences depend on the seed only.
#: Tokens ``nucleus_indices`` sorts when they hold the nucleus (a partial sort instead of the vocabulary's).
NUCLEUS_CANDIDATES = 1024
GENERATION_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}


@dataclass(frozen=True)
class SelfCalibration:
    """How ``self_calibration_dataset`` samples calibration sequences from the model.

    :param num_samples: sequences generated (each one calibration sample).
    :param seq_len: tokens per sequence, the start tokens included.
    :param temperature: softmax temperature of the sampling (> 0; 0 takes the most likely token, greedy).
    :param top_p: nucleus sampling: the smallest set of most likely tokens whose probability reaches ``top_p``
        (in (0, 1]; 1 samples the whole distribution).
    :param seed: seed of ``numpy.random.default_rng`` for the start tokens and the sampling.
    :param batch_size: sequences generated together (one stateful request per step).
    :param start_token_ids: the tokens every sequence starts from (e.g. the BOS token, or BOS and a short user
        text); None (default): each sequence starts from its own token drawn uniformly from the vocabulary. The
        command line passes the model's BOS token from its ``generation_config.json``/``config.json``.
    :param prompt_token_ids: the token ids of a short user text to mix in (None: none). Every sequence continues
        ``prompt_len`` consecutive tokens of it, taken at a random offset (after ``start_token_ids``), so the
        generated text follows the user's language and domain rather than whatever the model writes from BOS.
    :param prompt_len: tokens of ``prompt_token_ids`` each sequence starts from (at most its length).
    """

    num_samples: int = 32
    seq_len: int = 128
    temperature: float = 1.0
    top_p: float = 0.95
    seed: int = 0
    batch_size: int = 32
    start_token_ids: tuple[int, ...] | None = None
    prompt_token_ids: tuple[int, ...] | None = None
    prompt_len: int = 16

    def __post_init__(self) -> None:
        for name in ("num_samples", "seq_len", "batch_size", "prompt_len"):
            _check_int(name, getattr(self, name), 1)
        _check_int("seed", self.seed, 0)
        _check_float("temperature", self.temperature, lambda v: v >= 0.0, ">= 0")
        _check_float("top_p", self.top_p, lambda v: 0.0 < v <= 1.0, "in (0, 1]")
        for name in ("start_token_ids", "prompt_token_ids"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _token_ids(name, getattr(self, name)))
        prefix = len(self.start_token_ids or ())
        if self.prompt_token_ids is not None:
            if len(self.prompt_token_ids) < self.prompt_len:
                msg = (
                    f"SelfCalibration.prompt_token_ids has {len(self.prompt_token_ids)} tokens, fewer than "
                    f"prompt_len={self.prompt_len}: give a longer text or a smaller prompt_len."
                )
                raise nncf.ValidationError(msg)
            prefix += self.prompt_len
        if prefix >= self.seq_len:
            msg = (
                f"SelfCalibration: every sequence starts with {prefix} given tokens (start_token_ids and "
                f"prompt_len), not fewer than seq_len={self.seq_len}: nothing would be generated."
            )
            raise nncf.ValidationError(msg)

    def replace(self, **changes: Any) -> SelfCalibration:
        """A copy with the given fields changed, validated like a new instance."""
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            msg = f"Unknown SelfCalibration parameter(s) {unknown}."
            raise nncf.ValidationError(msg)
        return replace(self, **changes)


def _token_ids(name: str, value: object) -> tuple[int, ...]:
    ids = tuple(value) if isinstance(value, (tuple, list, np.ndarray)) else ()
    if not ids or any(isinstance(i, bool) or not isinstance(i, (int, np.integer)) or i < 0 for i in ids):
        msg = f"SelfCalibration.{name} must be a non-empty sequence of non-negative token ids, got {value!r}."
        raise nncf.ValidationError(msg)
    return tuple(int(i) for i in ids)


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        msg = f"SelfCalibration.{name} must be an integer >= {minimum}, got {value!r}."
        raise nncf.ValidationError(msg)


def _check_float(name: str, value: object, ok: Callable[[float], bool], expected: str) -> None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)
    if not number or not ok(float(value)):  # type: ignore[arg-type]
        msg = f"SelfCalibration.{name} must be a finite number {expected}, got {value!r}."
        raise nncf.ValidationError(msg)


#: What ``compress_weights(..., dataset="self")`` and ``nncf-hqq compress`` use (docs/self_calibration.md).
SELF_CALIBRATION_DEFAULT = SelfCalibration()

#: ``nncf.compress_weights``'s default ``subset_size``.
NNCF_DEFAULT_SUBSET_SIZE = 128


def self_calibration_subset_size(subset_size: int, params: SelfCalibration) -> int:
    """The ``subset_size`` NNCF gets with a self-generated dataset: the number of generated sequences when
    ``subset_size`` is NNCF's default (so that all of them are used, and NNCF does not warn that the dataset is
    smaller than its default subset), else ``subset_size`` as given."""
    return params.num_samples if subset_size == NNCF_DEFAULT_SUBSET_SIZE else subset_size


# --------------------------------------------------------------------------------------------------------------------
# Sampling maths
# --------------------------------------------------------------------------------------------------------------------
def nucleus_probabilities(logits: np.ndarray, temperature: float, top_p: float) -> np.ndarray:
    """Next-token probabilities ``[batch, vocab]`` of ``softmax(logits / temperature)`` restricted to its nucleus:
    the most likely tokens, in order, up to and including the first whose cumulative probability reaches ``top_p``,
    renormalised. ``temperature == 0`` puts all the mass on the most likely token."""
    logits = np.asarray(logits, dtype=np.float64)
    if temperature == 0.0:
        one_hot = np.zeros_like(logits)
        one_hot[np.arange(logits.shape[0]), logits.argmax(-1)] = 1.0
        return one_hot
    scaled = logits / temperature
    probs = np.exp(scaled - scaled.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    if top_p >= 1.0:
        return probs
    kept = np.zeros(probs.shape, dtype=bool)
    for row in range(probs.shape[0]):
        kept[row, nucleus_indices(probs[row], top_p)] = True
    nucleus = np.where(kept, probs, 0.0)
    return nucleus / nucleus.sum(-1, keepdims=True)


def nucleus_indices(probs: np.ndarray, top_p: float, candidates: int = NUCLEUS_CANDIDATES) -> np.ndarray:
    """Indices of the nucleus of one distribution (see ``nucleus_probabilities``). Only the ``candidates`` most
    likely tokens are sorted when they hold the nucleus (the usual case); otherwise the whole vocabulary is."""
    if candidates < probs.size:
        top = np.argpartition(-probs, candidates - 1)[:candidates]
        if probs[top].sum() < top_p:
            top = np.arange(probs.size)
    else:
        top = np.arange(probs.size)
    ordered = top[np.argsort(-probs[top], kind="stable")]
    sorted_probs = probs[ordered]
    before = np.cumsum(sorted_probs) - sorted_probs  # mass of the more likely tokens
    return ordered[before < top_p]


def sample_tokens(probabilities: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token per row of ``probabilities`` by inverse-CDF sampling with ``rng.random``."""
    cumulative = np.cumsum(probabilities, -1)
    draws = rng.random(probabilities.shape[0]) * cumulative[:, -1]
    tokens = (cumulative <= draws[:, None]).sum(-1)
    return np.minimum(tokens, probabilities.shape[1] - 1).astype(np.int64)


# --------------------------------------------------------------------------------------------------------------------
# Generation with a stateful OpenVINO LLM
# --------------------------------------------------------------------------------------------------------------------
def _input_names(model: ov.Model) -> set[str]:
    return {name for port in model.inputs for name in port.get_names()}


def check_generative(model: ov.Model) -> int:
    """Raises ``nncf.ValidationError`` unless ``model`` is a stateful OpenVINO LLM that can be sampled from (an
    ``input_ids`` input, a ``logits`` output, its KV cache in the model's state); returns the vocabulary size, or
    0 when the ``logits`` width is dynamic."""
    if not isinstance(model, ov.Model):
        msg = f"Self-calibration generates with an OpenVINO ov.Model; got {type(model).__name__}."
        raise nncf.UnsupportedBackendError(msg)
    names = _input_names(model)
    outputs = {name for port in model.outputs for name in port.get_names()}
    problems = [f"no '{name}' input" for name in REQUIRED_INPUTS if name not in names]
    if LOGITS not in outputs:
        problems.append(f"no '{LOGITS}' output")
    if not model.get_sinks():
        problems.append("no KV cache in its state (not exported with past, stateful)")
    if problems:
        msg = (
            f"Self-calibration needs a generative, stateful OpenVINO LLM (optimum-intel's text-generation-with-past "
            f"export); this model has {', '.join(problems)} (inputs: {sorted(names)}, outputs: {sorted(outputs)}). "
            "Encoders and other models that cannot generate take an nncf.Dataset of real inputs, or no dataset "
            "(data-free compression)."
        )
        raise nncf.ValidationError(msg)
    width = model.output(LOGITS).get_partial_shape()[-1]
    return width.get_length() if width.is_static else 0


def start_tokens(params: SelfCalibration, vocab_size: int, rng: np.random.Generator) -> np.ndarray:
    """The start tokens ``[num_samples, k]``: ``params.start_token_ids`` for every sequence, followed by
    ``params.prompt_len`` tokens of ``params.prompt_token_ids`` from a random offset per sequence; without either,
    one uniform random token per sequence."""
    fixed = np.asarray(params.start_token_ids or (), dtype=np.int64)
    if params.prompt_token_ids is not None:
        text = np.asarray(params.prompt_token_ids, dtype=np.int64)
        offsets = rng.integers(0, text.size - params.prompt_len + 1, size=params.num_samples)
        windows = text[offsets[:, None] + np.arange(params.prompt_len)]
        return np.concatenate([np.tile(fixed, (params.num_samples, 1)), windows], axis=1)
    if params.start_token_ids is not None:
        return np.tile(fixed, (params.num_samples, 1))
    if vocab_size <= 0:
        msg = (
            "The model's logits have a dynamic vocabulary size, so self-calibration cannot draw random start tokens; "
            "give SelfCalibration(start_token_ids=(BOS_TOKEN_ID,))."
        )
        raise nncf.ValidationError(msg)
    return rng.integers(0, vocab_size, size=(params.num_samples, 1), dtype=np.int64)


def step_inputs(tokens: np.ndarray, past: int, names: set[str]) -> dict[str, np.ndarray]:
    """Stateful-LLM inputs that append ``tokens`` ``[batch, n]`` to ``past`` tokens already in the state."""
    batch, n = tokens.shape
    inputs = {
        "input_ids": tokens.astype(np.int64),
        "attention_mask": np.ones((batch, past + n), dtype=np.int64),
        "position_ids": np.tile(np.arange(past, past + n, dtype=np.int64), (batch, 1)),
        "beam_idx": np.arange(batch, dtype=np.int32),
    }
    return {name: value for name, value in inputs.items() if name in names}


def generate_sequences(model: ov.Model, params: SelfCalibration = SELF_CALIBRATION_DEFAULT) -> np.ndarray:
    """``params.num_samples`` token sequences of ``params.seq_len`` sampled from ``model`` (a stateful OpenVINO
    LLM, compiled on CPU in f32; the model itself is not changed), ``[num_samples, seq_len]`` int64. Progress
    through NNCF's ``track``."""
    vocab_size = check_generative(model)
    rng = np.random.default_rng(params.seed)
    sequences = np.zeros((params.num_samples, params.seq_len), dtype=np.int64)
    starts = start_tokens(params, vocab_size, rng)
    sequences[:, : starts.shape[1]] = starts
    request = ov.Core().compile_model(model, "CPU", GENERATION_CONFIG).create_infer_request()
    release_model_pages(model)  # a model read from disk: the compiled one holds the weights it needs
    names = _input_names(model)
    batches = range(0, params.num_samples, params.batch_size)
    prefix = starts.shape[1]
    steps = (
        step
        for lo in batches
        for step in _generate_batch(request, names, sequences[lo : lo + params.batch_size], prefix, params, rng)
    )
    total = len(batches) * (params.seq_len - prefix)
    for _ in track(steps, total=total, description="Generating self-calibration text"):
        pass
    return sequences


def _generate_batch(
    request: ov.InferRequest,
    names: set[str],
    out: np.ndarray,
    prefix: int,
    params: SelfCalibration,
    rng: np.random.Generator,
) -> Iterator[int]:
    """Fills ``out[:, prefix:]`` by sampling, one token per step, from the state started with ``out[:, :prefix]``;
    yields each position once its tokens are drawn."""
    request.reset_state()
    request.infer(step_inputs(out[:, :prefix], 0, names))
    for position in range(prefix, out.shape[1]):
        logits = request.get_tensor(LOGITS).data[:, -1, :]
        out[:, position] = sample_tokens(nucleus_probabilities(logits, params.temperature, params.top_p), rng)
        if position + 1 < out.shape[1]:
            request.infer(step_inputs(out[:, position : position + 1], position, names))
        yield position


def calibration_inputs(sequences: np.ndarray, names: Sequence[str] = LLM_INPUTS) -> list[dict[str, np.ndarray]]:
    """One stateful-LLM prefill sample (batch 1, state empty) per sequence, with the inputs in ``names``."""
    return [step_inputs(row.reshape(1, -1), 0, set(names)) for row in sequences]


def self_calibration_dataset(model: ov.Model, params: SelfCalibration = SELF_CALIBRATION_DEFAULT) -> nncf.Dataset:
    """An ``nncf.Dataset`` of ``params.num_samples`` sequences the float ``model`` generates itself (see
    ``generate_sequences``), as the stateful-LLM inputs NNCF's data-aware methods feed to it."""
    start = time.perf_counter()
    sequences = generate_sequences(model, params)
    nncf_logger.info(
        f"Self-calibration: {params.num_samples} sequences of {params.seq_len} tokens generated in "
        f"{time.perf_counter() - start:.1f} s (temperature {params.temperature}, top_p {params.top_p}, seed "
        f"{params.seed})"
    )
    return nncf.Dataset(calibration_inputs(sequences, sorted(_input_names(model))))
