"""Tiny random vision-language checkpoints (image-text-to-text) built from their configs, offline, in seconds.

``save_tiny_vlm(family, dir)`` writes a HF checkpoint dir of a tiny random ``qwen2_5_vl``, ``qwen2_vl`` or ``llava``
model (language model: two layers, hidden size 64; vision tower: two blocks of width 64 over 14-pixel patches, merged
2 x 2 for the Qwen families, a CLIP tower of 28-pixel images for LLaVA), a small byte-level BPE tokenizer with the
image tokens as special tokens (openvino-tokenizers converts such a tokenizer with its special tokens, as it does
Qwen's own), a chat template, and the image processor's ``preprocessor_config.json`` (slow processors: no
torchvision needed). Every reduction dimension of the language model is a multiple of 64, so ``group_size=64``
applies to every layer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The vision tokens of the Qwen2-VL / Qwen2.5-VL processors and of OpenVINO GenAI's Qwen2-VL pipeline.
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
#: LLaVA's image token.
IMAGE_TOKEN = "<image>"
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", *VISION_TOKENS, IMAGE_TOKEN)
VOCAB_SIZE = 320
HIDDEN = 64
#: A chat template that puts the image's tokens before the text, as Qwen's does (GenAI adds them itself).
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
#: The families ``save_tiny_vlm`` builds.
TINY_VLM_FAMILIES = ("qwen2_5_vl", "qwen2_vl", "llava")


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
        additional_special_tokens=[*VISION_TOKENS, IMAGE_TOKEN],
    )


def tiny_vlm_config(family: str, tokenizer: Any) -> Any:
    """The transformers config of a tiny ``family`` model whose vision token ids are ``tokenizer``'s."""
    import transformers

    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in (*VISION_TOKENS, IMAGE_TOKEN)}
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
    if family == "llava":
        text.pop("rope_scaling")
        vision = {"hidden_size": HIDDEN, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
        vision |= {"image_size": 28, "patch_size": 14, "projection_dim": HIDDEN, "model_type": "clip_vision_model"}
        return transformers.LlavaConfig(
            text_config={**text, "model_type": "llama"},
            vision_config=vision,
            image_token_index=ids[IMAGE_TOKEN],
            vision_feature_layer=-1,
            image_seq_length=4,
        )
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
    processor config (Qwen: images resized to 56 x 56 to 112 x 112 pixels; LLaVA: 28 x 28); returns ``out_dir``."""
    import torch
    import transformers

    tokenizer = bpe_tokenizer()
    config = tiny_vlm_config(family, tokenizer)
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(config).eval()
    model.save_pretrained(out_dir)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out_dir)
    if family == "llava":
        processor = transformers.CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
    else:
        processor = transformers.Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112)
    processor.save_pretrained(out_dir)
    return out_dir
