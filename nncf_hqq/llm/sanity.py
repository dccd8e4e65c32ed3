"""Checks that catch a wrong tokenizer or text before numbers are reported as if nothing were wrong.

``nncf-hqq evaluate`` and ``nncf-hqq compress --dataset`` run them: a text that tokenizes to about one token per
character (a character- or byte-level tokenizer, or the wrong model's), a tokenizer that leaves out the BOS token of
the model's ``config.json`` where the model predicts much better with it, and a reference perplexity no language
model reaches on natural text. Each finding is one line that says what to check; the numbers are still computed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from nncf_hqq.llm.evaluation import LogitRows
from nncf_hqq.llm.evaluation import StatefulLLM
from nncf_hqq.llm.layout import HF_CONFIG
from nncf_hqq.llm.texts import load_tokenizer
from nncf_hqq.llm.texts import read_text
from nncf_hqq.llm.texts import tokenize_text

#: Perplexity above which a reference model on natural text is taken as misconfigured (trained LLMs on
#: WikiText-2 are in the tens; a model that guesses uniformly over a 256k vocabulary is at 256k).
ABSURD_PERPLEXITY = 1000.0
#: Tokens per character above which the text counts as split into characters (subword tokenizers give about
#: 0.2-0.3 on English prose).
CHARACTER_LEVEL_TOKENS = 0.6
#: Tokens of the text the reference model is run on for the BOS check.
PROBE_TOKENS = 128
#: How much better (perplexity ratio) the model must predict the probe with the BOS token for the warning.
BOS_GAIN = 1.5
_TOKENIZER_HINT = "the model's own tokenizer (--tokenizer DIR)"


def config_bos_token_id(model_dir: Path | None, files: tuple[str, ...] = (HF_CONFIG,)) -> int | None:
    """``bos_token_id`` of the first of ``files`` in ``model_dir`` that gives one (None when none does)."""
    if model_dir is None:
        return None
    for name in files:
        try:
            value = json.loads((model_dir / name).read_text()).get("bos_token_id")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def generation_bos_token_id(model_dir: Path | None) -> int | None:
    """The token generation starts from: ``bos_token_id`` of ``generation_config.json``, else of ``config.json``."""
    return config_bos_token_id(model_dir, ("generation_config.json", HF_CONFIG))


def tokens_per_character_warning(n_tokens: int, n_characters: int, what: str) -> str | None:
    """A warning when ``what`` tokenizes to about one token per character."""
    ratio = n_tokens / max(n_characters, 1)
    if ratio <= CHARACTER_LEVEL_TOKENS:
        return None
    return (
        f"{what} tokenizes to {ratio:.2f} tokens per character ({n_tokens} tokens for {n_characters} characters), "
        f"as if split into characters; subword tokenizers give about 0.2-0.3 on English: check that the tokenizer "
        f"is {_TOKENIZER_HINT}"
    )


def perplexity_warning(perplexity: float, what: str) -> str | None:
    """A warning when the reference model's perplexity is beyond what a language model reaches on natural text."""
    if math.isfinite(perplexity) and perplexity <= ABSURD_PERPLEXITY:
        return None
    return (
        f"{what} is {perplexity:.4g}, above {ABSURD_PERPLEXITY:.0f}: no trained language model is that bad on "
        f"natural text; check the tokenizer ({_TOKENIZER_HINT}, its BOS token) and that the text is plain text"
    )


def _probe_perplexity(llm: StatefulLLM, ids: np.ndarray, scored_from: int) -> float:
    """Perplexity of ``llm`` on the tokens ``ids[scored_from + 1:]``, in one prefill request."""
    logits = llm.logits(ids)
    targets = np.append(ids[1:], -1)
    targets[:scored_from] = -1
    rows = LogitRows.of(logits)
    return float(np.exp(rows.nll(logits, targets) / max(int((targets >= 0).sum()), 1)))


def reference_warnings(llm: StatefulLLM, ids: np.ndarray, bos_token_id: int | None, what: str) -> list[str]:
    """Run the reference model on the first ``PROBE_TOKENS`` tokens of the text: a warning when its perplexity
    there is absurd, and when the tokenizer left out the model's BOS token (``ids`` does not start with
    ``bos_token_id``) and the model predicts the same tokens ``BOS_GAIN`` times better with it."""
    probe = np.asarray(ids[:PROBE_TOKENS], dtype=np.int64)
    warnings = []
    without = _probe_perplexity(llm, probe, 0)
    if bos_token_id is not None and probe.size > 1 and probe[0] != bos_token_id:
        with_bos = _probe_perplexity(llm, np.concatenate([[bos_token_id], probe]), 1)
        if without > BOS_GAIN * with_bos:
            warnings.append(
                f"the tokenizer does not add the BOS token of the model's config.json (id {bos_token_id}), and the "
                f"reference predicts the first {probe.size} tokens of {what} much better with it (perplexity "
                f"{with_bos:.4g} with, {without:.4g} without): use {_TOKENIZER_HINT} or one that adds the BOS token"
            )
    if (text_warning := perplexity_warning(without, f"the reference's perplexity on the start of {what}")) is not None:
        warnings.append(text_warning)
    return warnings


def check_tokenized_text(
    text: str, ids: np.ndarray, llm: StatefulLLM | None, model_dir: Path | None, what: str
) -> list[str]:
    """All text and tokenizer checks for a text and its token ids; ``llm`` (the reference) runs the model-based
    ones, ``model_dir`` holds the model's ``config.json``."""
    warnings = [w for w in [tokens_per_character_warning(ids.size, len(text), what)] if w is not None]
    if llm is not None:
        warnings += reference_warnings(llm, ids, config_bos_token_id(model_dir), what)
    return warnings


def check_calibration_text(model_xml: Path, files_dir: Path | None, tokenizer_dir: Path, text_path: Path) -> list[str]:
    """The checks of a calibration text, with the model to compress as the reference."""
    tokenizer = load_tokenizer(tokenizer_dir)
    ids = tokenize_text(tokenizer, text_path)
    llm = StatefulLLM(model_xml)
    return check_tokenized_text(read_text(text_path), ids, llm, files_dir, str(text_path))
