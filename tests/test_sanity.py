"""Tests of nncf_hqq.llm.sanity: a character-level tokenizer, a tokenizer that leaves out the model's BOS token, and
an absurd reference perplexity each give one warning that says what to check, in ``nncf-hqq evaluate`` and in
``nncf-hqq compress --dataset``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nncf_hqq.llm import sanity
from nncf_hqq.llm.layout import is_ir_dir
from tests.llm_helpers import run_cli

VOCAB = 4096
BOS = 1


class SharpWithBos:
    """A stand-in reference model: given BOS first, every next token gets logit ``sharpness`` (the rest 0);
    without BOS all logits are 0 (uniform over ``VOCAB``)."""

    def __init__(self, sharpness: float) -> None:
        self.sharpness = sharpness

    def logits(self, ids: np.ndarray) -> np.ndarray:
        logits = np.zeros((len(ids), VOCAB), dtype=np.float32)
        if ids[0] == BOS:
            logits[np.arange(len(ids) - 1), ids[1:]] = self.sharpness
        return logits


def perplexity_of(sharpness: float) -> float:
    """Perplexity of the stand-in with BOS: p(next) = e^s / (e^s + VOCAB - 1)."""
    return float((np.exp(sharpness) + VOCAB - 1) / np.exp(sharpness))


def test_tokens_per_character_warning_names_the_ratio_and_the_tokenizer() -> None:
    assert sanity.tokens_per_character_warning(250, 1000, "wiki.txt") is None
    warning = sanity.tokens_per_character_warning(950, 1000, "wiki.txt")
    assert warning is not None and "wiki.txt tokenizes to 0.95 tokens per character" in warning
    assert "tokenizer" in warning and "--tokenizer" in warning


@pytest.mark.parametrize(("perplexity", "warned"), [(28.7, False), (999.0, False), (4096.0, True), (np.inf, True)])
def test_perplexity_warning_above_the_absurd_bound(perplexity: float, warned: bool) -> None:
    warning = sanity.perplexity_warning(perplexity, "the reference's perplexity")
    assert (warning is not None) == warned
    if warned:
        assert "above 1000" in warning and "tokenizer" in warning


def test_missing_bos_warns_when_the_model_predicts_much_better_with_it() -> None:
    ids = np.arange(2, 2 + 64, dtype=np.int64)  # a text tokenized without BOS
    warnings = sanity.reference_warnings(SharpWithBos(10.0), ids, BOS, "t.txt")  # type: ignore[arg-type]
    bos_warnings = [w for w in warnings if "BOS" in w and "config.json" in w]
    assert len(bos_warnings) == 1
    assert f"perplexity {perplexity_of(10.0):.4g} with, {VOCAB:.4g} without" in bos_warnings[0]
    # without BOS the stand-in is uniform over 4096 tokens: the absurd-perplexity warning as well
    assert any("above 1000" in w for w in warnings)


@pytest.mark.parametrize(
    ("ids", "bos", "sharpness"),
    [
        (np.arange(2, 66), None, 10.0),  # the config names no BOS
        (np.arange(1, 65), BOS, 10.0),  # the tokenizer added it
        (np.arange(2, 66), BOS, 0.2),  # BOS helps, but not BOS_GAIN times
    ],
    ids=["no_bos_in_config", "bos_added", "bos_barely_helps"],
)
def test_no_bos_warning_without_evidence(ids: np.ndarray, bos: int | None, sharpness: float) -> None:
    warnings = sanity.reference_warnings(SharpWithBos(sharpness), ids, bos, "t.txt")  # type: ignore[arg-type]
    assert not [w for w in warnings if "BOS token of the model's config.json" in w]


# --------------------------------------------------------------------------------------------------------------------
# Through the command line, with the tiny exported Llama of tests/conftest.py
# --------------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def character_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tokenizer that splits text into characters (ids inside the tiny model's vocabulary)."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    characters = ["[UNK]", " ", "\n", "=", ".", ",", *"abcdefghijklmnopqrstuvwxyzSw0123456789"]
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel({c: i for i, c in enumerate(characters)}, "[UNK]"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Split("", behavior="isolated")
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    out = tmp_path_factory.mktemp("char_tokenizer")
    tokenizer.save_pretrained(out)
    return out


def test_evaluate_warns_about_a_character_level_tokenizer(
    tiny_llm: tuple[Path, Any],
    text_path: Path,
    character_tokenizer_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["evaluate", f"same={tiny_llm[0]}", "--reference", tiny_llm[0], "--tokenizer", character_tokenizer_dir]
    args += ["--text", text_path, "--windows", "2", "--window-size", "32", "--json", tmp_path / "r.json"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    [line] = [line for line in out.splitlines() if "tokens per character" in line]
    assert line.startswith("warning: ") and "--tokenizer" in line
    assert "tokens per character" in err  # also as the evaluation starts
    record = json.loads((tmp_path / "r.json").read_text())
    assert any("tokens per character" in w for w in record["warnings"])


def test_evaluate_with_the_models_tokenizer_warns_nothing(
    tiny_llm: tuple[Path, Any],
    text_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["evaluate", f"same={tiny_llm[0]}", "--reference", tiny_llm[0], "--text", text_path]
    code, out, err = run_cli([*args, "--windows", "2", "--window-size", "32", "--json", tmp_path / "r.json"], capsys)
    assert code == 0, err
    assert "warning" not in out and "warning" not in err
    assert json.loads((tmp_path / "r.json").read_text())["warnings"] == []


def test_evaluate_warns_about_an_absurd_reference_perplexity(
    tiny_llm: tuple[Path, Any],
    text_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sanity, "ABSURD_PERPLEXITY", 10.0)  # the random tiny model is at about its vocabulary size
    args = ["evaluate", f"same={tiny_llm[0]}", "--reference", tiny_llm[0], "--text", text_path]
    code, out, err = run_cli([*args, "--windows", "2", "--window-size", "32"], capsys)
    assert code == 0, err
    warnings = [line for line in out.splitlines() if line.startswith("warning: ")]
    assert any("the reference's perplexity on the windows is" in w and "above 10" in w for w in warnings)


def test_compress_with_dataset_warns_about_a_character_level_tokenizer(
    tiny_llm: tuple[Path, Any],
    text_path: Path,
    character_tokenizer_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["compress", tiny_llm[0], tmp_path / "out", "--group-size", "64", "--awq", "--dataset", text_path]
    code, _, err = run_cli([*args, "--subset-size", "2", "--tokenizer", character_tokenizer_dir], capsys)
    assert code == 0, err
    assert [line for line in err.splitlines() if "warning:" in line and "tokens per character" in line]
    assert is_ir_dir(tmp_path / "out")
