"""Encoders (sentence-embedding models, BERT-like feature extractors) in ``nncf-hqq compress`` and ``evaluate``.

An encoder cannot generate text, so it cannot calibrate on its own output as an LLM does: ``compress`` gives it one
data-free recipe (``ENCODER_DATA_FREE``), or, with ``--dataset``, calibrates it on lines of that text
(``ENCODER_CALIBRATED``). ``evaluate`` compares the pooled embeddings of text lines with the float encoder's.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import nncf
import openvino as ov

from nncf_hqq.llm import evaluation
from nncf_hqq.llm.timing import StepTimer
from nncf_hqq.llm.workflows import EVALUATION_PHASE
from nncf_hqq.llm.workflows import SELF_CALIBRATION_MODES
from nncf_hqq.llm.workflows import Column
from nncf_hqq.llm.workflows import CompressionOptions
from nncf_hqq.llm.workflows import read_model
from nncf_hqq.parameters import HQQParameters


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

#: The inputs an encoder IR takes and the outputs it may give (optimum-intel's feature-extraction exports:
#: ``last_hidden_state``; sentence-transformers exports: ``token_embeddings`` and ``sentence_embedding``).
ENCODER_INPUT = "input_ids"
ENCODER_OUTPUTS = ("last_hidden_state", "token_embeddings", evaluation.SENTENCE_EMBEDDING)


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
    return evaluation.wikitext_lines(text_path, n=-1)


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
    ``evaluation.CALIBRATION_SEQ_LEN`` tokens and what the model takes) as one input of the encoder ``model``."""
    tokenizer = evaluation.load_tokenizer(tokenizer_dir)
    max_length = min(evaluation.CALIBRATION_SEQ_LEN, evaluation.encoder_max_length(tokenizer, files_dir))
    names = {port.any_name for port in model.inputs}
    lines = calibration_lines(text_path, count)
    return nncf.Dataset(evaluation.encoder_calibration_samples(tokenizer, lines, names, max_length))


def loader_hint(model: ov.Model) -> str:
    """The optimum-intel class that loads a compressed encoder dir (a sentence-transformers export or a plain
    feature extractor)."""
    outputs = {name for port in model.outputs for name in port.get_names()}
    if evaluation.SENTENCE_EMBEDDING in outputs:
        return "optimum.intel.OVSentenceTransformer.from_pretrained(OUT).encode(texts)"
    return "optimum.intel.OVModelForFeatureExtraction.from_pretrained(OUT)"


# --------------------------------------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------------------------------------
#: Lines ``evaluate`` embeds by default (docs/results.md's encoder rows: the first 200 of WikiText-2's test text).
DEFAULT_LINES = 200
#: The table columns and charts of the encoder metrics (``evaluation.evaluate_encoders``).
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


def evaluation_lines(text_path: str | Path, count: int) -> list[str]:
    """The first ``count`` lines of the text that are not empty nor headings; ValueError when it has fewer."""
    lines = evaluation.wikitext_lines(text_path, count)
    if len(lines) < count:
        msg = f"{text_path} has {len(lines)} non-empty, non-heading lines, fewer than {count} (--lines)"
        raise ValueError(msg)
    return lines


def evaluate_against(
    reference: evaluation.ModelLike,
    candidates: Mapping[str, evaluation.ModelLike],
    tokenizer_dir: str | Path,
    text_path: str | Path,
    n_lines: int,
    reference_name: str = "fp",
    timer: StepTimer | None = None,
) -> tuple[dict[str, evaluation.Metrics], str]:
    """``evaluation.evaluate_encoders`` on the first ``n_lines`` lines of the text (timed as ``EVALUATION_PHASE``),
    and how the embeddings were pooled."""
    tokenizer = evaluation.load_tokenizer(tokenizer_dir)
    lines = evaluation_lines(text_path, n_lines)
    max_length = evaluation.encoder_max_length(tokenizer, tokenizer_dir)
    pooling = evaluation.encoder_pooling(read_model(reference) if isinstance(reference, str | Path) else reference)
    with (timer or StepTimer(lambda _: None)).step(EVALUATION_PHASE):
        results = evaluation.evaluate_encoders(reference, candidates, tokenizer, lines, reference_name, max_length)
    return results, pooling
