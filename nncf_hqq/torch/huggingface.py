"""transformers integration: a compressed model saves with ``save_pretrained`` and loads with ``from_pretrained``.

Importing this module (``import nncf_hqq.torch`` does, when transformers is installed) registers the
``nncf_hqq`` quantization method with transformers. A checkpoint whose ``config.json`` has a ``quantization_config``
with ``quant_method: nncf_hqq`` (``nncf_hqq.torch.checkpoint.checkpoint_config``) is then loaded by building the
model on the meta device, giving it the compressed structure (``restore_compressed``) and loading the saved tensors
into it as they are, from any number of shards, with ``device_map`` as usual. The codes are not computed again.
Before anything is loaded, the checkpoint files' headers are checked against the config: a missing tensor, or one
of another dtype or shape, is an ``nncf.ValidationError`` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nncf
import torch
from transformers import PreTrainedModel
from transformers.quantizers import HfQuantizer
from transformers.quantizers.auto import AUTO_QUANTIZATION_CONFIG_MAPPING
from transformers.quantizers.auto import AUTO_QUANTIZER_MAPPING
from transformers.utils.quantization_config import QuantizationConfigMixin

from nncf_hqq.torch.checkpoint import FORMAT_VERSION
from nncf_hqq.torch.checkpoint import QUANT_METHOD
from nncf_hqq.torch.checkpoint import check_loaded
from nncf_hqq.torch.checkpoint import checkpoint_config
from nncf_hqq.torch.checkpoint import expected_tensors
from nncf_hqq.torch.checkpoint import parse_checkpoint_config
from nncf_hqq.torch.checkpoint import restore_compressed

#: safetensors' names of the dtypes a compressed checkpoint stores.
_SAFETENSORS_DTYPES = {torch.uint8: "U8", torch.int8: "I8", torch.float16: "F16"}


class NNCFHQQConfig(QuantizationConfigMixin):
    """transformers' ``quantization_config`` of a model compressed with nncf_hqq (or NNCF) on PyTorch: the
    checkpoint config (``nncf_hqq.torch.checkpoint.checkpoint_config``)."""

    def __init__(
        self,
        weights: Mapping[str, Any] | None = None,
        activation_scales: Mapping[str, Any] | None = None,
        format_version: int = FORMAT_VERSION,
        **kwargs: Any,
    ) -> None:
        self.quant_method = QUANT_METHOD  # type: ignore[assignment]  # a method transformers' enum does not list
        self.format_version = format_version
        self.weights = dict(weights or {})
        self.activation_scales = dict(activation_scales or {})
        parse_checkpoint_config(self.to_dict())  # raises nncf.ValidationError on a malformed config

    def to_dict(self) -> dict[str, Any]:
        return {
            "quant_method": QUANT_METHOD,
            "format_version": self.format_version,
            "weights": dict(self.weights),
            "activation_scales": dict(self.activation_scales),
        }


class NNCFHQQQuantizer(HfQuantizer):
    """Loads an nncf_hqq checkpoint as it was saved (it cannot quantize a float model: compress it with
    ``nncf.compress_weights(..., hqq=True)``)."""

    requires_calibration = True
    quantization_config: NNCFHQQConfig

    def _process_model_before_weight_loading(self, model: torch.nn.Module, **kwargs: Any) -> None:
        config = self.quantization_config.to_dict()
        check_checkpoint_files(kwargs.get("checkpoint_files") or (), config)
        restore_compressed(model, config)

    def _process_model_after_weight_loading(self, model: torch.nn.Module, **kwargs: Any) -> torch.nn.Module:
        check_loaded(model, self.quantization_config.to_dict())
        save_under_own_names(model)
        return model

    def is_serializable(self, *args: Any, **kwargs: Any) -> bool:
        return True

    @property
    def is_trainable(self) -> bool:
        return False


def check_checkpoint_files(files: Sequence[str | Path], config: Mapping[str, Any]) -> None:
    """Reads the safetensors headers of a checkpoint's files (no tensor data) and raises ``nncf.ValidationError``
    naming every compressed tensor the config prescribes that is missing or has another dtype or shape."""
    from safetensors import safe_open

    found: dict[str, tuple[str, tuple[int, ...]]] = {}
    for file in files:
        if not str(file).endswith(".safetensors"):
            continue
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                tensor = handle.get_slice(key)
                found[key] = (tensor.get_dtype(), tuple(tensor.get_shape()))
    if not found:
        return
    problems = []
    for key, (dtype, shape) in expected_tensors(config).items():
        if key not in found:
            problems.append(f"'{key}' is missing")
            continue
        expected_dtype = _SAFETENSORS_DTYPES.get(dtype) if dtype is not None else None
        if found[key][1] != shape or (expected_dtype is not None and found[key][0] != expected_dtype):
            problems.append(
                f"'{key}' is {found[key][0]} {list(found[key][1])}, expected {expected_dtype} {list(shape)}"
            )
    if problems:
        msg = f"The checkpoint's tensors do not match its nncf_hqq quantization_config: {'; '.join(problems[:8])}"
        msg += f" (and {len(problems) - 8} more)." if len(problems) > 8 else "."
        raise nncf.ValidationError(msg)


def describe_for_transformers(model: torch.nn.Module) -> None:
    """Makes a compressed transformers model save as a checkpoint that ``from_pretrained`` loads compressed: its
    config gets the checkpoint config as ``quantization_config``, and it saves its tensors under their own names
    (transformers' conversion of fused MoE expert tensors back to per-expert ones on saving would cut packed codes
    apart, and its patterns would rename the hooks' tensors). Other models are left as they are."""
    if not isinstance(model, PreTrainedModel):
        return
    model.config.quantization_config = NNCFHQQConfig.from_dict(checkpoint_config(model))
    save_under_own_names(model)


def save_under_own_names(model: torch.nn.Module) -> None:
    """``save_pretrained`` then writes every tensor under its own name: no weight conversions to revert (an empty
    list of them, where transformers would otherwise use the model type's, or those it loaded the model with)."""
    model._weight_conversions = []  # type: ignore[assignment]


def register() -> None:
    """Registers the ``nncf_hqq`` quantization method with transformers (once)."""
    AUTO_QUANTIZATION_CONFIG_MAPPING.setdefault(QUANT_METHOD, NNCFHQQConfig)
    AUTO_QUANTIZER_MAPPING.setdefault(QUANT_METHOD, NNCFHQQQuantizer)


register()
