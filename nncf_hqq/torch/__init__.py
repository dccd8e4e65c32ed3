"""HQQ for PyTorch models, through NNCF's Torch backend (this package imports torch; ``nncf_hqq`` does not).

``nncf.compress_weights(torch_model, ..., hqq=True, dataset=...)`` uses it by itself. Import it to load a saved
compressed transformers checkpoint (``AutoModelForCausalLM.from_pretrained``), or to use the checkpoint functions
with any model:

- ``checkpoint_config(model)``: what a freshly built model needs, besides the saved tensors, to become the
  compressed model again (JSON-able);
- ``restore_compressed(model, config)``: gives a freshly built (also meta-device) model that structure;
- ``load_compressed_state_dict(model, state_dict, config)``: loads the saved tensors, every one checked.
"""

from __future__ import annotations

import importlib.util
import sys

import torch

from nncf_hqq.torch.checkpoint import checkpoint_config
from nncf_hqq.torch.checkpoint import load_compressed_state_dict
from nncf_hqq.torch.checkpoint import restore_compressed
from nncf_hqq.torch.decompression import FloatZeroPointDecompressor
from nncf_hqq.torch.targets import DEFAULT_TARGET_PARAMETERS

__all__ = [
    "DEFAULT_TARGET_PARAMETERS",
    "FloatZeroPointDecompressor",
    "checkpoint_config",
    "describe_compressed_model",
    "load_compressed_state_dict",
    "restore_compressed",
]

if importlib.util.find_spec("transformers") is not None:
    from nncf_hqq.torch import huggingface  # noqa: F401 (registers the nncf_hqq quantization method)


def describe_compressed_model(model: torch.nn.Module) -> None:
    """Called on a model just compressed with ``hqq=True``: a transformers model gets the checkpoint config as its
    ``quantization_config``, so that ``save_pretrained`` writes a checkpoint ``from_pretrained`` loads compressed
    (``nncf_hqq.torch.huggingface.describe_for_transformers``). Other models are left as they are."""
    if "transformers" in sys.modules:
        from nncf_hqq.torch.huggingface import describe_for_transformers

        describe_for_transformers(model)
