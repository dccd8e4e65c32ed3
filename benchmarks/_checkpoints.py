"""Random Hugging Face checkpoints of real model shapes, written shard by shard (helper of ``checkpoint_memory.py``).

The model is built on PyTorch's meta device (no memory), then each parameter is drawn at random (bf16, seed per
tensor) and written into safetensors shards of at most ``SHARD_BYTES``, with the index ``from_pretrained`` reads, so
a 7B checkpoint needs no more memory than one shard. Norm weights are ones, other tensors normal with std 0.02.
The tokenizer is a real one when given (a HF tokenizer dir), so that OpenVINO GenAI can load the exported model;
random weights generate random text, which is all that memory and time measurements need. With Phi-3.5-mini's
shapes (a 32,064-token vocabulary) the Qwen2.5 tokenizer's plain-English ids fit; its special tokens do not and are
left out of the config.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

SHARD_BYTES = 2 * 1024**3


@dataclass(frozen=True)
class Shape:
    """The architecture of a released model, without its weights."""

    name: str
    model_type: str
    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool
    #: More fields of the released ``config.json`` (rope, context length, ...), over the defaults above.
    settings: dict[str, Any] = field(default_factory=dict, compare=False)

    def config(self, dtype: str = "bfloat16") -> Any:
        from transformers import AutoConfig

        fields = {
            "hidden_size": self.hidden,
            "num_hidden_layers": self.layers,
            "intermediate_size": self.intermediate,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "vocab_size": self.vocab,
            "tie_word_embeddings": self.tied,
            "max_position_embeddings": 4096,
            "bos_token_id": None,
            "eos_token_id": None,
        }
        fields |= self.settings
        if self.model_type in VISION_LANGUAGE:
            config = AutoConfig.for_model(
                self.model_type,
                text_config={"model_type": f"{self.model_type}_text", **fields, "dtype": dtype},
                vision_config=dict(VISION_LANGUAGE[self.model_type]),
                tie_word_embeddings=self.tied,
                dtype=dtype,
                **{k: v for k, v in self.settings.items() if k.endswith("token_id")},
            )
        else:
            config = AutoConfig.for_model(self.model_type, **fields, dtype=dtype)
        config.architectures = [ARCHITECTURES[self.model_type]]
        return config


ARCHITECTURES = {
    "qwen2": "Qwen2ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
}

#: The vision tower of each vision-language model type (Qwen2.5-VL-3B-Instruct's ``vision_config``).
VISION_LANGUAGE = {
    "qwen2_5_vl": {
        "model_type": "qwen2_5_vl",
        "depth": 32,
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "in_chans": 3,
        "out_hidden_size": 2048,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
        "temporal_patch_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "tokens_per_second": 2,
        "hidden_act": "silu",
    }
}

# Phi-3.5-mini-instruct's LongRoPE factors (48 = head dimension / 2), as in its released config.json.
PHI35_SHORT_FACTOR = [
    1.0, 1.02, 1.03, 1.03, 1.05, 1.05, 1.05, 1.05, 1.05, 1.07, 1.1, 1.11, 1.16, 1.16, 1.17, 1.29, 1.34, 1.68, 1.79,
    1.82, 1.85, 1.88, 1.91, 1.94, 1.99, 2.02, 2.02, 2.02, 2.02, 2.02, 2.02, 2.03, 2.03, 2.03, 2.03, 2.03, 2.03, 2.03,
    2.03, 2.03, 2.08, 2.09, 2.19, 2.22, 2.59, 2.73, 2.75, 2.84,
]  # fmt: skip
PHI35_LONG_FACTOR = [
    1.08, 1.11, 1.14, 1.34, 1.59, 1.6, 1.62, 2.62, 3.23, 3.23, 4.79, 7.4, 7.7, 9.09, 12.2, 17.67, 24.46, 28.57, 30.42,
    30.84, 32.59, 32.93, 42.32, 44.96, 50.34, 50.45, 57.55, 57.93, 58.21, 60.14, 62.61, 62.62, 62.71, 63.14, 63.14,
    63.77, 63.93, 63.96, 63.97, 64.03, 64.07, 64.08, 64.12, 64.41, 64.48, 64.51, 64.53, 64.84,
]  # fmt: skip


SHAPES = {
    s.name: s
    for s in (
        Shape("qwen2.5-0.5b", "qwen2", 896, 24, 4864, 14, 2, 151936, tied=True),
        Shape("qwen2-2b", "qwen2", 2048, 24, 11008, 16, 2, 151936, tied=True),
        Shape("phi3.5-mini", "phi3", 3072, 32, 8192, 32, 32, 32064, tied=False),
        Shape("qwen2.5-7b", "qwen2", 3584, 28, 18944, 28, 4, 152064, tied=False),
        # The three models NNCF's maintainer named (issue 46), with the rest of their released config.json.
        Shape(
            "qwen2.5-1.5b-instruct", "qwen2", 1536, 28, 8960, 12, 2, 151936, tied=True,
            settings={
                "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
                "sliding_window": 32768, "max_window_layers": 21, "use_sliding_window": False,
            },
        ),
        Shape(
            "phi3.5-mini-instruct", "phi3", 3072, 32, 8192, 32, 32, 32064, tied=False,
            settings={
                "max_position_embeddings": 131072, "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
                "rope_scaling": {
                    "type": "longrope", "short_factor": PHI35_SHORT_FACTOR, "long_factor": PHI35_LONG_FACTOR,
                },
                "rms_norm_eps": 1e-5, "sliding_window": 262144, "pad_token_id": 32000,
            },
        ),
        Shape(
            "qwen2.5-vl-3b-instruct", "qwen2_5_vl", 2048, 36, 11008, 16, 2, 151936, tied=True,
            settings={
                "max_position_embeddings": 128000, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
                "sliding_window": 32768, "max_window_layers": 70, "use_sliding_window": False,
                "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
                "image_token_id": 151655, "video_token_id": 151656,
                "vision_start_token_id": 151652, "vision_end_token_id": 151653, "vision_token_id": 151654,
            },
        ),
    )
}  # fmt: skip


def parameter_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor the checkpoint holds (tied lm_head left out, as ``save_pretrained`` does)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers import AutoModelForImageTextToText

    auto = AutoModelForImageTextToText if shape.model_type in VISION_LANGUAGE else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(shape.config())
    names = {name: tuple(p.shape) for name, p in model.state_dict().items()}
    if shape.tied:
        names.pop("lm_head.weight", None)
    return names


def random_tensor(name: str, dims: tuple[int, ...], seed: int) -> Any:
    import torch

    if name.endswith("norm.weight"):
        return torch.ones(dims, dtype=torch.bfloat16)
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(dims, generator=generator, dtype=torch.float32) * 0.02).to(torch.bfloat16)


def write_checkpoint(shape: Shape, out: Path, tokenizer_dir: Path | None = None) -> Path:
    """Writes the random bf16 checkpoint of ``shape`` into ``out`` (kept when its index is already there)."""
    from safetensors.torch import save_file

    index_path = out / "model.safetensors.index.json"
    if index_path.is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    config = shape.config()
    shards: list[dict[str, Any]] = [{}]
    sizes = [0]
    for seed, (name, dims) in enumerate(sorted(parameter_shapes(shape).items())):
        nbytes = 2 * int(_prod(dims))
        if sizes[-1] and sizes[-1] + nbytes > SHARD_BYTES:
            _flush(shards, sizes, out, save_file)
        shards[-1][name] = random_tensor(name, dims, seed)
        sizes[-1] += nbytes
    _flush(shards, sizes, out, save_file)
    count = len(shards) - 1
    weight_map = {}
    for i in range(count):
        final = out / f"model-{i + 1:05d}-of-{count:05d}.safetensors"
        (out / f"shard-{i}.safetensors").rename(final)
        weight_map.update(dict.fromkeys(json.loads((out / f"shard-{i}.names").read_text()), final.name))
        (out / f"shard-{i}.names").unlink()
    if tokenizer_dir is not None:
        _copy_tokenizer(tokenizer_dir, out, config)
    if shape.model_type in VISION_LANGUAGE:
        _write_image_processor(out)
    config.save_pretrained(out)
    total = sum(sizes)
    index_path.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    return out


def _flush(shards: list[dict[str, Any]], sizes: list[int], out: Path, save_file: Any) -> None:
    i = len(shards) - 1
    save_file(shards[i], str(out / f"shard-{i}.safetensors"), metadata={"format": "pt"})
    (out / f"shard-{i}.names").write_text(json.dumps(sorted(shards[i])))
    shards[i] = {}
    shards.append({})
    sizes.append(0)


def _copy_tokenizer(tokenizer_dir: Path, out: Path, config: Any) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if hasattr(config, "vision_start_token_id"):
        _add_qwen_vision_tokens(tokenizer, config)
    tokenizer.save_pretrained(out)

    text_config = config.get_text_config()  # the config itself, or a vision-language model's language model's

    def in_vocabulary(token_id: int | None) -> int | None:  # a smaller model vocabulary than the tokenizer's
        return token_id if token_id is not None and token_id < text_config.vocab_size else None

    for target in {id(config): config, id(text_config): text_config}.values():
        target.bos_token_id = in_vocabulary(tokenizer.bos_token_id)
        target.eos_token_id = in_vocabulary(tokenizer.eos_token_id)


#: Qwen2.5's special tokens after ``<|im_end|>`` (151645), in the order of their ids (151646-151656), which
#: Qwen2.5-VL's config names by id: its vision start, end and pad, image and video tokens.
QWEN_VISION_TOKENS = (
    "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
    "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
)  # fmt: skip


def _add_qwen_vision_tokens(tokenizer: Any, config: Any) -> None:
    """Give a Qwen2.5 text tokenizer the special tokens of Qwen2.5-VL's, at the ids the model's config names.

    A tokenizer rebuilt from a GGUF file holds them in its vocabulary, but not as added tokens: ``<|image_pad|>`` is
    then split into plain pieces, and OpenVINO GenAI's VLM pipeline finds fewer image tokens in the prompt than the
    image has embeddings ("Image embeddings count (64) does not match image pad tokens in prompt (2)").
    """
    missing = [token for token in QWEN_VISION_TOKENS if token not in tokenizer.get_added_vocab()]
    tokenizer.add_special_tokens({"additional_special_tokens": missing}, replace_extra_special_tokens=False)
    named = {
        "<|vision_start|>": config.vision_start_token_id,
        "<|vision_end|>": config.vision_end_token_id,
        "<|image_pad|>": config.image_token_id,
        "<|video_pad|>": config.video_token_id,
    }
    for token, token_id in named.items():
        given = tokenizer.convert_tokens_to_ids(token)
        if given != token_id:
            raise ValueError(f"the tokenizer gives {token} the id {given}, not {token_id}")


def _write_image_processor(out: Path) -> None:
    """Qwen2.5-VL's released ``preprocessor_config.json`` (14-pixel patches merged 2 x 2, CLIP's mean and std)."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

    processor = Qwen2VLImageProcessor(
        min_pixels=3136, max_pixels=12845056, patch_size=14, temporal_patch_size=2, merge_size=2
    )
    processor.save_pretrained(out)


def _prod(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def parameter_count(shape: Shape) -> int:
    return sum(_prod(d) for d in parameter_shapes(shape).values())
