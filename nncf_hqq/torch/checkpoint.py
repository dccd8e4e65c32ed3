"""Saving and loading a compressed PyTorch model without compressing it again.

A model compressed through NNCF's Torch backend holds only tensors: each compressed parameter holds its packed codes
(``uint8``; ``int8`` for 8-bit symmetric codes) and its decompressor, a function hook in the model's
``__nncf_hooks``, holds ``_scale`` (f16) and ``_zero_point`` (packed u4, u8 or f16) buffers. The ``state_dict`` is
therefore plain tensors and goes through safetensors as it is. What it does not hold is which decompressor sits
where and the shapes it works with; ``checkpoint_config`` writes that down (a JSON-able dict, the
``quantization_config`` of a transformers checkpoint), and ``restore_compressed`` rebuilds it on a freshly built
model (also on the meta device) so that the saved tensors load into it: ``load_compressed_state_dict``, or
transformers' ``from_pretrained`` through ``nncf_hqq.torch.huggingface``. Every tensor is checked by name, dtype
and shape, and a missing or mismatched one is an error naming it.

AWQ's activation scales (NNCF's ``SQMultiply`` pre-hooks) are restored too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import nncf
import torch

from nncf_hqq._nncf import BaseWeightsDecompressor
from nncf_hqq._nncf import INT4AsymmetricWeightsDecompressor
from nncf_hqq._nncf import INT4SymmetricWeightsDecompressor
from nncf_hqq._nncf import INT8AsymmetricWeightsDecompressor
from nncf_hqq._nncf import INT8SymmetricWeightsDecompressor
from nncf_hqq._nncf import SQMultiply
from nncf_hqq._nncf import decode_hook_name
from nncf_hqq._nncf import get_hook_storage
from nncf_hqq._nncf import is_wrapped
from nncf_hqq._nncf import wrap_model
from nncf_hqq.torch.decompression import FloatZeroPointDecompressor
from nncf_hqq.torch.decompression import decompressor_for

#: ``quant_method`` of the checkpoint config (and of the transformers quantization config).
QUANT_METHOD = "nncf_hqq"
#: Version of the checkpoint config's layout.
FORMAT_VERSION = 1
#: The prefix of the hooks' tensors in the model's ``state_dict`` (NNCF's hook storage attribute).
HOOKS_PREFIX = "__nncf_hooks."

_DTYPES = {"u4": torch.uint8, "i4": torch.uint8, "u8": torch.uint8, "i8": torch.int8, "f16": torch.float16}


@dataclass(frozen=True)
class WeightFormat:
    """How one compressed parameter is stored: its codes (``u4``/``i4`` packed two per byte, ``u8``, ``i8``), its
    zero point (``u4`` packed, ``u8``, ``f16``, or None for symmetric codes), the grouped shape of the codes, the
    shape of the scale (one value per group) and the shape the codes are stored in (``packed_u4_shape`` for 4-bit
    codes)."""

    codes: str
    zero_point: str | None
    compressed_shape: tuple[int, ...]
    scale_shape: tuple[int, ...]
    stored_shape: tuple[int, ...]

    @property
    def num_bits(self) -> int:
        return 4 if self.codes in ("u4", "i4") else 8

    def expected_tensors(self) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
        """dtype and shape of the stored tensors: ``""`` (the parameter's codes), ``"_scale"``, ``"_zero_point"``."""
        tensors = {"": (_DTYPES[self.codes], self.stored_shape)}
        tensors["_scale"] = (torch.float16, self.scale_shape)
        if self.zero_point is not None:
            tensors["_zero_point"] = (_DTYPES[self.zero_point], _stored_shape(self.zero_point, self.scale_shape))
        return tensors

    def to_dict(self) -> dict[str, Any]:
        return {
            "codes": self.codes,
            "zero_point": self.zero_point,
            "compressed_shape": list(self.compressed_shape),
            "scale_shape": list(self.scale_shape),
            "stored_shape": list(self.stored_shape),
        }

    @classmethod
    def from_dict(cls, name: str, entry: Mapping[str, Any]) -> WeightFormat:
        try:
            fmt = cls(
                str(entry["codes"]),
                None if entry["zero_point"] is None else str(entry["zero_point"]),
                tuple(int(d) for d in entry["compressed_shape"]),
                tuple(int(d) for d in entry["scale_shape"]),
                tuple(int(d) for d in entry["stored_shape"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            msg = f"Checkpoint config entry of '{name}' is malformed ({error!r}): {dict(entry)}."
            raise nncf.ValidationError(msg) from None
        if fmt.codes not in ("u4", "i4", "u8", "i8") or fmt.zero_point not in (None, "u4", "u8", "f16"):
            msg = f"Checkpoint config entry of '{name}' has an unknown format: {dict(entry)}."
            raise nncf.ValidationError(msg)
        return fmt


def _stored_shape(kind: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A zero point's stored shape: 4-bit values are packed two per byte as NNCF packs them, ``[n / 2, 1]``."""
    if kind in ("u4", "i4"):
        count = 1
        for size in shape:
            count *= size
        return (count // 2, 1)
    return shape


def weight_format(decompressor: torch.nn.Module, codes: torch.Tensor) -> WeightFormat | None:
    """The storage format of a decompressor hooked on a parameter holding ``codes``, or None for another module."""
    if not isinstance(decompressor, BaseWeightsDecompressor):
        return None
    shapes = (tuple(decompressor.get_buffer("_scale").shape), tuple(codes.shape))
    if isinstance(decompressor, FloatZeroPointDecompressor):
        codes_kind = "u4" if decompressor.num_bits == 4 else "u8"
        return WeightFormat(codes_kind, "f16", decompressor.compressed_weight_shape, *shapes)
    if isinstance(decompressor, INT4AsymmetricWeightsDecompressor):
        return WeightFormat("u4", "u4", tuple(decompressor.compressed_weight_shape), *shapes)
    if isinstance(decompressor, INT4SymmetricWeightsDecompressor):
        return WeightFormat("i4", None, tuple(decompressor.compressed_weight_shape), *shapes)
    if isinstance(decompressor, INT8AsymmetricWeightsDecompressor):
        return WeightFormat("u8", "u8", tuple(codes.shape), *shapes)
    if isinstance(decompressor, INT8SymmetricWeightsDecompressor):
        return WeightFormat("i8", None, tuple(codes.shape), *shapes)
    return None


def checkpoint_config(model: torch.nn.Module) -> dict[str, Any]:
    """What a freshly built model needs, besides the saved tensors, to become this compressed model again.

    ``{"quant_method": "nncf_hqq", "format_version": 1, "weights": {hook name: WeightFormat}, "activation_scales":
    {hook name: shape}}``, hook names as NNCF's ``HookStorage.named_hooks`` gives them.

    :raises nncf.ValidationError: for a hook module it cannot describe.
    """
    weights: dict[str, Any] = {}
    activation_scales: dict[str, list[int]] = {}
    for hook_name, hook in _named_hooks(model):
        hook_type, target, _ = _decode(hook_name)
        if isinstance(hook, SQMultiply) and hook_type == "pre_hooks":
            activation_scales[hook_name] = list(hook.scale.shape)
            continue
        codes = _parameter(model, target) if hook_type == "post_hooks" else None
        fmt = None if codes is None else weight_format(hook, codes)
        if fmt is None:
            msg = f"Cannot save the hook '{hook_name}' ({type(hook).__name__}): nncf_hqq saves weight decompressors"
            msg += " and AWQ activation scales only."
            raise nncf.ValidationError(msg)
        weights[hook_name] = fmt.to_dict()
    return {
        "quant_method": QUANT_METHOD,
        "format_version": FORMAT_VERSION,
        "weights": weights,
        "activation_scales": activation_scales,
    }


def _named_hooks(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    if not is_wrapped(model):
        return []
    return list(get_hook_storage(model).named_hooks())


def _decode(hook_name: str) -> tuple[str, str, int]:
    """``(hook type, op or parameter name, port)`` of a hook name (NNCF's ``decode_hook_name``)."""
    try:
        return decode_hook_name(hook_name)
    except ValueError as error:
        msg = f"Checkpoint config names an invalid hook '{hook_name}': {error}"
        raise nncf.ValidationError(msg) from None


def _parameter(model: torch.nn.Module, name: str) -> torch.nn.Parameter | None:
    try:
        return model.get_parameter(name)
    except AttributeError:
        return None


def parse_checkpoint_config(config: Mapping[str, Any]) -> tuple[dict[str, WeightFormat], dict[str, tuple[int, ...]]]:
    """The weight formats and activation-scale shapes of a checkpoint config, checked."""
    if config.get("quant_method") != QUANT_METHOD or config.get("format_version") != FORMAT_VERSION:
        msg = (
            f"Not an nncf_hqq checkpoint config of format {FORMAT_VERSION}: quant_method="
            f"{config.get('quant_method')!r}, format_version={config.get('format_version')!r}."
        )
        raise nncf.ValidationError(msg)
    weights = {name: WeightFormat.from_dict(name, entry) for name, entry in dict(config.get("weights", {})).items()}
    scales = {name: tuple(int(d) for d in shape) for name, shape in dict(config.get("activation_scales", {})).items()}
    return weights, scales


def restore_compressed(model: torch.nn.Module, config: Mapping[str, Any]) -> torch.nn.Module:
    """Turns a freshly built (uncompressed, possibly meta-device) model into the compressed model's structure.

    Every compressed parameter becomes an empty tensor of its codes' dtype and shape (on its own device), and its
    decompressor (empty buffers, same device) is hooked on it; AWQ's activation scales are hooked as saved. The
    model then loads the saved tensors (``load_compressed_state_dict``, ``load_state_dict(..., assign=True)``, or
    transformers' loading). Nothing is modified before the whole config has been checked against the model.

    :raises nncf.ValidationError: naming a parameter the config describes that the model lacks, or whose shape
        does not fit the config.
    """
    weights, scales = parse_checkpoint_config(config)
    plan = []
    for hook_name, fmt in weights.items():
        hook_type, name, _ = _decode(hook_name)
        parameter = _parameter(model, name) if hook_type == "post_hooks" else None
        if parameter is None:
            msg = f"The checkpoint compresses '{name}' (hook '{hook_name}'), but the model has no such parameter."
            raise nncf.ValidationError(msg)
        _check_fits(name, fmt, tuple(parameter.shape))
        plan.append((hook_name, parameter, fmt))
    storage = get_hook_storage(wrap_model(model))
    for hook_name, parameter, fmt in plan:
        decompressor = empty_decompressor(fmt, tuple(parameter.shape), parameter.dtype, parameter.device)
        dtype, shape = fmt.expected_tensors()[""]
        parameter.requires_grad = False
        parameter.data = torch.empty(shape, dtype=dtype, device=parameter.device)
        storage.insert_hook_by_name(hook_name, decompressor)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    for hook_name, shape in scales.items():
        multiply = SQMultiply(shape)
        storage.insert_hook_by_name(hook_name, multiply.to(device=device))
    return model


def _check_fits(name: str, fmt: WeightFormat, shape: tuple[int, ...]) -> None:
    count = math.prod(shape)
    stored = math.prod(fmt.stored_shape) * (2 if fmt.num_bits == 4 else 1)
    if count != math.prod(fmt.compressed_shape) or count != stored or len(fmt.scale_shape) != len(fmt.compressed_shape):
        msg = (
            f"The checkpoint's codes of '{name}' have the grouped shape {list(fmt.compressed_shape)} (scale "
            f"{list(fmt.scale_shape)}, stored as {list(fmt.stored_shape)}), which does not fit the model's parameter"
            f" of shape {list(shape)}."
        )
        raise nncf.ValidationError(msg)


def empty_decompressor(
    fmt: WeightFormat, result_shape: tuple[int, ...], result_dtype: torch.dtype, device: torch.device
) -> BaseWeightsDecompressor:
    """The decompressor of ``fmt`` with uninitialised buffers of the stored dtypes and shapes on ``device`` (no
    memory on the meta device), for the saved tensors to be loaded into."""
    placeholder_zero_point = None
    if fmt.zero_point is not None:
        dtype = torch.float16 if fmt.zero_point == "f16" else torch.uint8
        placeholder_zero_point = torch.zeros(0, dtype=dtype, device="cpu")
    placeholder_scale = torch.zeros(0, dtype=torch.float16, device="cpu")
    module = decompressor_for(
        placeholder_scale, placeholder_zero_point, fmt.compressed_shape, fmt.num_bits, result_shape, result_dtype
    )
    tensors = fmt.expected_tensors()
    module._scale = torch.empty(fmt.scale_shape, dtype=torch.float16, device=device)
    if "_zero_point" in tensors:
        dtype, shape = tensors["_zero_point"]
        module._zero_point = torch.empty(shape, dtype=dtype, device=device)
    if isinstance(module, INT4AsymmetricWeightsDecompressor):
        module.zero_point_shape = torch.Size(fmt.scale_shape)
    return module


def expected_tensors(config: Mapping[str, Any]) -> dict[str, tuple[torch.dtype | None, tuple[int, ...]]]:
    """The compressed model's tensors the checkpoint config prescribes, by ``state_dict`` key: dtype and shape
    (an activation scale's dtype is the model's, hence None)."""
    weights, scales = parse_checkpoint_config(config)
    expected: dict[str, tuple[torch.dtype | None, tuple[int, ...]]] = {}
    for hook_name, fmt in weights.items():
        _, name, _ = _decode(hook_name)
        for suffix, spec in fmt.expected_tensors().items():
            expected[name if not suffix else f"{HOOKS_PREFIX}{hook_name}.{suffix}"] = spec
    for hook_name, shape in scales.items():
        expected[f"{HOOKS_PREFIX}{hook_name}._scale_value"] = (None, shape)
    return expected


def check_loaded(model: torch.nn.Module, config: Mapping[str, Any]) -> None:
    """Raises ``nncf.ValidationError`` naming every compressed tensor of ``model`` that was not loaded (still on the
    meta device) or whose dtype or shape is not the checkpoint config's."""
    state = model.state_dict(keep_vars=True)
    problems = []
    for key, (dtype, shape) in expected_tensors(config).items():
        tensor = state.get(key)
        if tensor is None or tensor.device.type == "meta":
            problems.append(f"'{key}' is missing")
        elif tuple(tensor.shape) != shape or (dtype is not None and tensor.dtype != dtype):
            found = f"{tensor.dtype} {list(tensor.shape)}"
            problems.append(f"'{key}' is {found}, expected {dtype or 'float'} {list(shape)}")
    if problems:
        msg = f"The compressed checkpoint does not match the model: {'; '.join(problems[:8])}"
        msg += f" (and {len(problems) - 8} more)." if len(problems) > 8 else "."
        raise nncf.ValidationError(msg)


def load_compressed_state_dict(
    model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any]
) -> torch.nn.Module:
    """Loads a compressed model's saved tensors into a model prepared by ``restore_compressed`` (``config`` is its
    checkpoint config). Every tensor is checked before anything is loaded: a missing, unexpected or mismatched one
    (name, dtype, shape) is an ``nncf.ValidationError`` naming it. Tensors of a meta-device model are assigned (the
    loaded tensors become the model's), others copied; parameters tied in the model (the same ``Parameter`` under
    two names, e.g. embeddings and LM head) need to be saved once and are tied again. A meta-device model's
    non-persistent buffers (not in any state dict) cannot be loaded: that is an error naming them."""
    own = model.state_dict(keep_vars=True)
    aliases = _tied_aliases(model)
    compressed = expected_tensors(config)
    problems = [f"'{key}' is missing" for key in own if key not in state_dict and key not in aliases]
    problems += [f"'{key}' is unexpected" for key in state_dict if key not in own]
    for key, tensor in state_dict.items():
        if key not in own:
            continue
        dtype, shape = compressed.get(key, (own[key].dtype, tuple(own[key].shape)))
        exact_dtype = key in compressed and dtype is not None
        if tuple(tensor.shape) != shape or (exact_dtype and tensor.dtype != dtype):
            problems.append(f"'{key}' is {tensor.dtype} {list(tensor.shape)}, expected {dtype} {list(shape)}")
    if problems:
        msg = f"Cannot load the compressed checkpoint: {'; '.join(problems[:8])}"
        msg += f" (and {len(problems) - 8} more)." if len(problems) > 8 else "."
        raise nncf.ValidationError(msg)
    assign = any(t.device.type == "meta" for t in own.values())
    model.load_state_dict(dict(state_dict), strict=False, assign=assign)
    for alias, primary in aliases.items():
        owner_name, _, attribute = alias.rpartition(".")
        setattr(model.get_submodule(owner_name), attribute, model.get_parameter(primary))
    left = [name for name, t in [*model.named_parameters(), *model.named_buffers()] if t.device.type == "meta"]
    if left:
        msg = (
            f"After loading, {', '.join(repr(n) for n in left[:4])} are still on the meta device: they are not in the "
            "state dict (non-persistent buffers are not). Build the model on a device, or load a transformers "
            "checkpoint with from_pretrained, which recomputes them."
        )
        raise nncf.ValidationError(msg)
    return model


def _tied_aliases(model: torch.nn.Module) -> dict[str, str]:
    """Parameter names that are a second name of an earlier parameter (tied weights), mapped to the first."""
    first: dict[int, str] = {}
    aliases = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if id(parameter) in first:
            aliases[name] = first[id(parameter)]
        else:
            first[id(parameter)] = name
    return aliases
