"""HQQ through optimum-intel: ``OVWeightQuantizationConfig(bits=4, sym=False, group_size=64, hqq=True)``.

    python examples/optimum_intel.py                        # SmolLM2-135M-Instruct (obtained offline, cached)
    python examples/optimum_intel.py MODEL_DIR OUT_DIR      # an optimum-intel IR dir, or a HF model dir (exported)

No patching is needed: optimum-intel 2.1.0 keeps the keyword arguments that ``OVWeightQuantizationConfig`` does not
know in ``config.kwargs`` and spreads them into ``config.to_nncf_dict()``, the keyword arguments of its
``nncf.compress_weights(model, dataset=..., **wc_kwargs)`` call; and it calls ``nncf.compress_weights`` through the
``nncf`` module at that moment, where ``import nncf_hqq`` has installed the HQQ-aware version. So ``hqq=True`` and
``hqq_params=...`` reach HQQ as long as ``nncf_hqq`` is imported (without it NNCF rejects ``hqq`` with a TypeError).

The script compresses the model with HQQ while loading it (``OVModelForCausalLM.from_pretrained(dir,
quantization_config=...)``), saves it with its tokenizer and answers a chat prompt with the compressed model.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nncf_hqq  # noqa: F401  (installs the hqq-aware nncf.compress_weights that optimum-intel calls)
from nncf_hqq.llm import zoo

PROMPT = "What is the capital of France? Answer in one sentence."


def compress_with_optimum(model_dir: Path, out_dir: Path, group_size: int = 64, **hqq_kwargs: Any) -> Any:
    """Load ``model_dir`` with optimum-intel, compressing it to INT4_ASYM with HQQ; save it (and its tokenizer)."""
    from optimum.intel import OVModelForCausalLM
    from optimum.intel import OVWeightQuantizationConfig
    from transformers import AutoTokenizer

    config = OVWeightQuantizationConfig(bits=4, sym=False, group_size=group_size, hqq=True, **hqq_kwargs)
    export = not (model_dir / "openvino_model.xml").is_file()
    model = OVModelForCausalLM.from_pretrained(model_dir, export=export, quantization_config=config)
    model.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(out_dir)
    return model


def chat(model_dir: Path, prompt: str = PROMPT, max_new_tokens: int = 32) -> str:
    """Load a compressed dir with ``OVModelForCausalLM`` and answer ``prompt`` (greedy; chat template if any)."""
    from optimum.intel import OVModelForCausalLM
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = OVModelForCausalLM.from_pretrained(model_dir)
    text = prompt
    if tokenizer.chat_template:
        messages = [{"role": "user", "content": prompt}]
        text = str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    inputs = tokenizer(text, return_tensors="pt", add_special_tokens=not tokenizer.chat_template)
    output = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return str(tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", type=Path, help="optimum-intel IR dir or HF dir (default: SmolLM2)")
    parser.add_argument("out", nargs="?", type=Path, default=Path("results/optimum_intel_hqq"))
    parser.add_argument("--group-size", type=int, default=64)
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    model_dir = args.model or zoo.smollm2_ov_dir()
    compress_with_optimum(model_dir, args.out, args.group_size)
    print(f"Compressed {model_dir} with HQQ through optimum-intel -> {args.out}")
    print(f"User: {args.prompt}")
    print(f"Assistant: {chat(args.out, args.prompt, args.max_new_tokens)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
