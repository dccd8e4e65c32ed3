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

    def config(self, dtype: str = "bfloat16") -> Any:
        from transformers import AutoConfig

        config = AutoConfig.for_model(
            self.model_type,
            hidden_size=self.hidden,
            num_hidden_layers=self.layers,
            intermediate_size=self.intermediate,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            vocab_size=self.vocab,
            tie_word_embeddings=self.tied,
            max_position_embeddings=4096,
            bos_token_id=None,
            eos_token_id=None,
            dtype=dtype,
        )
        config.architectures = [ARCHITECTURES[self.model_type]]
        return config


ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "phi3": "Phi3ForCausalLM"}


SHAPES = {
    s.name: s
    for s in (
        Shape("qwen2.5-0.5b", "qwen2", 896, 24, 4864, 14, 2, 151936, tied=True),
        Shape("qwen2-2b", "qwen2", 2048, 24, 11008, 16, 2, 151936, tied=True),
        Shape("phi3.5-mini", "phi3", 3072, 32, 8192, 32, 32, 32064, tied=False),
        Shape("qwen2.5-7b", "qwen2", 3584, 28, 18944, 28, 4, 152064, tied=False),
    )
}


def parameter_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor the checkpoint holds (tied lm_head left out, as ``save_pretrained`` does)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(shape.config())
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
    tokenizer.save_pretrained(out)

    def in_vocabulary(token_id: int | None) -> int | None:  # a smaller model vocabulary than the tokenizer's
        return token_id if token_id is not None and token_id < config.vocab_size else None

    config.bos_token_id = in_vocabulary(tokenizer.bos_token_id)
    config.eos_token_id = in_vocabulary(tokenizer.eos_token_id)


def _prod(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def parameter_count(shape: Shape) -> int:
    return sum(_prod(d) for d in parameter_shapes(shape).values())
