"""Tiny random vision-language checkpoints (image-text-to-text) built from their configs, offline, in seconds.

``save_tiny_vlm(family, dir)`` writes a HF checkpoint dir of a tiny random ``qwen2_5_vl`` or ``qwen2_vl`` model
(language model: two layers, hidden size 64; vision tower: two blocks of width 64, 14-pixel patches merged 2 x 2),
a small byte-level BPE tokenizer with the Qwen vision tokens as special tokens (openvino-tokenizers converts such a
tokenizer with its special tokens, as it does Qwen's own), a chat template, and the image processor's
``preprocessor_config.json`` (the slow ``Qwen2VLImageProcessor``: no torchvision needed). Every reduction dimension
of the language model is a multiple of 64, so ``group_size=64`` applies to every layer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The vision tokens of the Qwen2-VL / Qwen2.5-VL processors and of OpenVINO GenAI's Qwen2-VL pipeline.
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", *VISION_TOKENS)
VOCAB_SIZE = 320
HIDDEN = 64
#: A chat template that puts the image's tokens before the text, as Qwen's does (GenAI adds them itself).
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
#: The families ``save_tiny_vlm`` builds.
TINY_VLM_FAMILIES = ("qwen2_5_vl", "qwen2_vl")


def bpe_tokenizer() -> Any:
    """A byte-level BPE tokenizer trained on the words ``w0`` ... ``w249`` (``VOCAB_SIZE`` entries) with
    ``SPECIAL_TOKENS``; BOS ``<s>`` (1, not added to the text), EOS ``</s>`` (2)."""
    import tokenizers
    import transformers

    backend = tokenizers.Tokenizer(tokenizers.models.BPE())
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator([" ".join(f"w{i}" for i in range(250))] * 3, trainer)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="</s>",
        unk_token="<unk>",
        additional_special_tokens=list(VISION_TOKENS),
    )


def tiny_vlm_config(family: str, tokenizer: Any) -> Any:
    """The transformers config of a tiny ``family`` model whose vision token ids are ``tokenizer``'s."""
    import transformers

    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in VISION_TOKENS}
    text = {
        "vocab_size": len(tokenizer),
        "hidden_size": HIDDEN,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 1024,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},  # halves of the 16-wide heads
        "tie_word_embeddings": False,
    }
    patches = {"patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "num_heads": 4}
    if family == "qwen2_5_vl":
        config_class = transformers.Qwen2_5_VLConfig
        vision = {"depth": 2, "hidden_size": HIDDEN, "intermediate_size": 128, "out_hidden_size": HIDDEN, **patches}
        vision |= {"fullatt_block_indexes": [1], "window_size": 56}
    elif family == "qwen2_vl":
        config_class = transformers.Qwen2VLConfig
        vision = {"depth": 2, "embed_dim": HIDDEN, "hidden_size": HIDDEN, "mlp_ratio": 2, **patches}
    else:
        msg = f"no tiny {family} model: choose one of {TINY_VLM_FAMILIES}"
        raise ValueError(msg)
    return config_class(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )


def save_tiny_vlm(family: str, out_dir: Path) -> Path:
    """A HF checkpoint dir of a tiny random ``family`` VLM (seed 0) with its tokenizer, chat template and image
    processor config (images of 56 x 56 to 112 x 112 pixels); returns ``out_dir``."""
    import torch
    import transformers

    tokenizer = bpe_tokenizer()
    config = tiny_vlm_config(family, tokenizer)
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(config).eval()
    model.save_pretrained(out_dir)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out_dir)
    processor = transformers.Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112)
    processor.save_pretrained(out_dir)
    return out_dir
