"""Encoders (sentence-embedding models, BERT-like feature extractors) in ``nncf-hqq compress`` and ``evaluate``.

An encoder cannot generate text, so it cannot calibrate on its own output as an LLM does: ``compress`` gives it one
data-free recipe (``ENCODER_DATA_FREE``), or, with ``--dataset``, calibrates it on lines of that text
(``ENCODER_CALIBRATED``). ``evaluate`` compares the pooled embeddings of text lines with the float encoder's.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import nncf
import numpy as np
import openvino as ov
from nncf.common.logging import nncf_logger

from nncf_hqq.llm.evaluation import Metrics
from nncf_hqq.llm.evaluation import ModelLike
from nncf_hqq.llm.evaluation import compile_model
from nncf_hqq.llm.layout import HF_CONFIG
from nncf_hqq.llm.layout import read_model
from nncf_hqq.llm.options import SELF_CALIBRATION_MODES
from nncf_hqq.llm.options import CompressionOptions
from nncf_hqq.llm.options import JobError
from nncf_hqq.llm.reports import Column
from nncf_hqq.llm.texts import CALIBRATION_SEQ_LEN
from nncf_hqq.llm.texts import load_tokenizer
from nncf_hqq.llm.texts import wikitext_lines
from nncf_hqq.parameters import HQQParameters

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class EncoderRecipe:
    """How ``compress`` compresses an encoder where the command line leaves it open (int4 modes with HQQ on).

    :param name: what ``compress`` says on stderr and records.
    :param awq: NNCF's AWQ (data-free without a dataset).
    :param scale_estimation: NNCF's Scale Estimation (only with a dataset).
    :param hqq: HQQ after them; False: NNCF's round to nearest.
    :param hqq_params: HQQ's parameters (None: ``HQQ_DEFAULT``, or what ``--zero-point`` asks).
    """

    name: str
    awq: bool = False
    scale_estimation: bool = False
    hqq: bool = True
    hqq_params: HQQParameters | None = None


#: The recipe of an encoder compressed without data. Alternatives: ``EncoderRecipe("HQQ")`` (``hqq=True``),
#: ``EncoderRecipe("HQQ_REFERENCE", hqq_params=nncf_hqq.HQQ_REFERENCE)``, ``EncoderRecipe("RTN", hqq=False)``.
ENCODER_DATA_FREE = EncoderRecipe("data-free AWQ + HQQ", awq=True)
#: The recipe of an encoder calibrated on the lines of ``--dataset`` (when neither --awq nor --scale-estimation is
#: given).
ENCODER_CALIBRATED = EncoderRecipe("AWQ + Scale Estimation + HQQ", awq=True, scale_estimation=True)

#: The output of a sentence-transformers export that holds its own pooled (and Dense / Normalize) embedding.
SENTENCE_EMBEDDING = "sentence_embedding"
#: The inputs an encoder IR takes and the outputs it may give (optimum-intel's feature-extraction exports:
#: ``last_hidden_state``; sentence-transformers exports: ``token_embeddings`` and ``sentence_embedding``).
ENCODER_INPUT = "input_ids"
ENCODER_OUTPUTS = ("last_hidden_state", "token_embeddings", SENTENCE_EMBEDDING)


def is_encoder(model: ov.Model) -> bool:
    """Whether ``model`` is a text encoder: an ``input_ids`` input, a hidden-state or sentence-embedding output and
    no next-token ``logits``."""
    inputs = {name for port in model.inputs for name in port.get_names()}
    outputs = {name for port in model.outputs for name in port.get_names()}
    return ENCODER_INPUT in inputs and "logits" not in outputs and bool(outputs & set(ENCODER_OUTPUTS))


def is_encoder_ir(path: str | Path) -> bool:
    """``is_encoder`` of the IR at ``path``; False when OpenVINO cannot read it (the LLM path then says why)."""
    try:
        return is_encoder(read_model(path))
    except RuntimeError:
        return False


def recipe_for(options: CompressionOptions, calibrated: bool) -> EncoderRecipe | None:
    """The recipe that applies to an encoder compressed with ``options`` (None where the options decide alone: no
    HQQ, or a mode without 4-bit groups), calibrated on text lines or not."""
    if not options.hqq or options.mode not in SELF_CALIBRATION_MODES:
        return None
    if calibrated and not (options.awq or options.scale_estimation):
        return ENCODER_CALIBRATED
    return None if calibrated else ENCODER_DATA_FREE


def with_recipe(options: CompressionOptions, recipe: EncoderRecipe | None) -> CompressionOptions:
    """``options`` with the recipe's methods added (what the command line asked for stays on)."""
    if recipe is None:
        return options
    return dataclasses.replace(
        options,
        awq=options.awq or recipe.awq,
        scale_estimation=options.scale_estimation or recipe.scale_estimation,
        hqq=recipe.hqq,
        hqq_base=recipe.hqq_params,
    )


def text_lines(text_path: str | Path) -> list[str]:
    """Every line of the text that is not empty nor a ``= Heading =`` line, stripped."""
    return wikitext_lines(text_path, n=-1)


def calibration_lines(text_path: str | Path, count: int, seed: int = 0) -> list[str]:
    """``count`` lines of the text drawn at random (``random.Random(seed)``, no line twice); all of them, in order,
    when it has no more. Raises ValueError for a text without lines."""
    lines = text_lines(text_path)
    if not lines:
        msg = f"{text_path} has no non-empty line to calibrate an encoder on"
        raise ValueError(msg)
    if len(lines) <= count:
        return lines
    return random.Random(seed).sample(lines, count)


def calibration_dataset(
    tokenizer_dir: str | Path, text_path: str | Path, count: int, model: ov.Model, files_dir: Path | None
) -> nncf.Dataset:
    """``nncf.Dataset`` of ``count`` random lines of the text, each tokenized alone (at most
    ``CALIBRATION_SEQ_LEN`` tokens and what the model takes) as one input of the encoder ``model``."""
    tokenizer = load_tokenizer(tokenizer_dir)
    max_length = min(CALIBRATION_SEQ_LEN, encoder_max_length(tokenizer, files_dir))
    names = {port.any_name for port in model.inputs}
    lines = calibration_lines(text_path, count)
    return nncf.Dataset(encoder_calibration_samples(tokenizer, lines, names, max_length))


def loader_hint(model: ov.Model) -> str:
    """The optimum-intel class that loads a compressed encoder dir (a sentence-transformers export or a plain
    feature extractor)."""
    outputs = {name for port in model.outputs for name in port.get_names()}
    if SENTENCE_EMBEDDING in outputs:
        return "optimum.intel.OVSentenceTransformer.from_pretrained(OUT).encode(texts)"
    return "optimum.intel.OVModelForFeatureExtraction.from_pretrained(OUT)"


# --------------------------------------------------------------------------------------------------------------------
# Metrics: embeddings against the float encoder's
# --------------------------------------------------------------------------------------------------------------------
ENCODER_CONFIG: dict[str, str] = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}


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


def encoder_max_length(tokenizer: PreTrainedTokenizerBase, files_dir: str | Path | None = None) -> int:
    """Tokens per line for an encoder: ``ENCODER_MAX_TOKENS``, the tokenizer's ``model_max_length`` and the
    ``max_position_embeddings`` of the ``config.json`` in ``files_dir``, whichever is least."""
    limits = [ENCODER_MAX_TOKENS, int(min(tokenizer.model_max_length, 1 << 30))]
    config = Path(files_dir) / HF_CONFIG if files_dir is not None else None
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


# --------------------------------------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------------------------------------
#: Lines ``evaluate`` embeds by default (docs/results.md's encoder rows: the first 200 of WikiText-2's test text).
DEFAULT_LINES = 200
#: The table columns and charts of the encoder metrics (``evaluate_encoders``).
ENCODER_COLUMNS: tuple[Column, ...] = (
    ("cosine", "cosine", 10, ".5f"),
    ("cosine_min", "min cos", 10, ".5f"),
    ("neighbour_agreement", "NN agree", 10, ".4f"),
)
ENCODER_CHARTS: dict[str, str] = {
    "cosine": "mean cosine vs reference",
    "cosine_min": "minimum cosine vs reference",
    "neighbour_agreement": "nearest neighbour as the reference's",
}


class TooFewLinesError(JobError, ValueError):
    """The text has fewer lines than the evaluation asks for."""


def evaluation_lines(text_path: str | Path, count: int) -> list[str]:
    """The first ``count`` lines of the text that are not empty nor headings; ValueError when it has fewer."""
    lines = wikitext_lines(text_path, count)
    if len(lines) < count:
        msg = "{path} has {count} non-empty, non-heading lines, fewer than {needed} ({lines})"
        raise TooFewLinesError(msg, path=text_path, count=len(lines), needed=count)
    return lines
