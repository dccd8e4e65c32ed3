"""The random checkpoints' tokenizer (benchmarks/_checkpoints.py): Qwen2.5-VL's vision tokens are special tokens."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmarks import each other as scripts

import _checkpoints  # noqa: E402


def gguf_like_tokenizer() -> Any:
    """A byte-level BPE tokenizer whose vocabulary holds Qwen's vision tokens as plain entries, not as added tokens,
    as the Qwen2.5 tokenizer rebuilt from a GGUF file does."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    alphabet = tokenizers.pre_tokenizers.ByteLevel.alphabet()
    vocab = {char: i for i, char in enumerate(sorted(alphabet))}
    for token in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", *_checkpoints.QWEN_VISION_TOKENS):
        vocab[token] = len(vocab)
    backend = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>")


def vision_config(tokenizer: Any, **changes: int) -> SimpleNamespace:
    vocab = tokenizer.get_vocab()
    ids = {
        "vision_start_token_id": vocab["<|vision_start|>"],
        "vision_end_token_id": vocab["<|vision_end|>"],
        "image_token_id": vocab["<|image_pad|>"],
        "video_token_id": vocab["<|video_pad|>"],
    }
    return SimpleNamespace(**(ids | changes))


def test_the_image_pad_token_becomes_one_special_token_at_its_config_id() -> None:
    tokenizer = gguf_like_tokenizer()
    config = vision_config(tokenizer)
    prompt = "<|vision_start|><|image_pad|><|image_pad|><|vision_end|>"
    assert len(tokenizer(prompt)["input_ids"]) > 4  # split into plain pieces before
    _checkpoints._add_qwen_vision_tokens(tokenizer, config)
    expected = [config.vision_start_token_id, config.image_token_id, config.image_token_id, config.vision_end_token_id]
    assert tokenizer(prompt)["input_ids"] == expected
    assert len(tokenizer) == len(tokenizer.get_vocab())  # no new ids: the vocabulary's own entries are marked


def test_a_config_naming_other_ids_is_refused() -> None:
    tokenizer = gguf_like_tokenizer()
    config = vision_config(tokenizer, image_token_id=3)
    with pytest.raises(ValueError, match=r"<\|image_pad\|> the id \d+, not 3"):
        _checkpoints._add_qwen_vision_tokens(tokenizer, config)
