"""Parameters HQQ compresses besides the weights NNCF finds: the ones used outside ``nn.Linear``.

NNCF's Torch backend compresses the weights of the ops it recognises (``linear``, ``matmul``, embeddings,
convolutions). A transformers 5 MoE layer keeps its experts as 3D parameters (``mlp.experts.gate_up_proj``
``[experts, 2 * inter, hidden]``, ``mlp.experts.down_proj``) used by the layer's own grouped matmuls, which NNCF
leaves in float although they hold most of the model's memory. With ``hqq=True`` the parameters whose names match
``target_parameters`` (glob patterns, like transformers' ``target_parameters``) are compressed in the primary mode
too: groups along the input axis (the last one, or the one before it when the owning module says
``is_transposed``, as transformers' expert modules do), decompressed by a function hook on the parameter, so the
module's own code keeps working.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass

import nncf
import torch
from nncf.tensor import Tensor

from nncf_hqq._nncf import WeightCompressionConfig
from nncf_hqq.hqq import all_finite
from nncf_hqq.hqq import as_numpy

#: The parameters compressed by default: the 3D expert weights of transformers' MoE layers.
DEFAULT_TARGET_PARAMETERS = ("*.experts.gate_up_proj", "*.experts.up_proj", "*.experts.down_proj")


@dataclass(frozen=True)
class ParameterTarget:
    """A parameter to compress: its name in the model, the axis its groups are formed along, and its config."""

    name: str
    axis: int
    config: WeightCompressionConfig


def owner_and_attribute(model: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
    """The module holding the parameter ``name`` and the parameter's attribute name in it."""
    module_name, _, attribute = name.rpartition(".")
    return model.get_submodule(module_name), attribute


def reduction_axis(model: torch.nn.Module, name: str) -> int:
    """The input axis of a targeted parameter: the last one, or the one before for ``is_transposed`` owners."""
    owner, attribute = owner_and_attribute(model, name)
    ndim = getattr(owner, attribute).ndim
    return ndim - 2 if getattr(owner, "is_transposed", False) else ndim - 1


def is_ignored(name: str, ignored_scope: nncf.IgnoredScope | None) -> bool:
    """Whether NNCF's ignored scope names the parameter (by name or by a regular-expression pattern)."""
    if ignored_scope is None:
        return False
    return name in ignored_scope.names or any(re.fullmatch(pattern, name) for pattern in ignored_scope.patterns)


def select_targets(
    model: torch.nn.Module,
    patterns: Sequence[str],
    explicit: bool,
    compressed_by_nncf: set[str],
    config: WeightCompressionConfig,
    ignored_scope: nncf.IgnoredScope | None = None,
) -> list[ParameterTarget]:
    """The parameters matching ``patterns`` that NNCF does not compress itself, checked before anything changes.

    :param explicit: whether the user gave the patterns; then a pattern that matches no parameter is an error
        (the default patterns match nothing in a model without MoE layers, which is fine).
    :raises nncf.ValidationError: naming the pattern or parameter that cannot be compressed.
    """
    named = dict(model.named_parameters())
    if explicit:
        for pattern in patterns:
            if not any(fnmatch.fnmatchcase(name, pattern) for name in named):
                msg = f"target_parameters pattern {pattern!r} matches no parameter of the model."
                raise nncf.ValidationError(msg)
    targets = []
    for name, parameter in named.items():
        if name in compressed_by_nncf or is_ignored(name, ignored_scope):
            continue
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
            target = ParameterTarget(name, reduction_axis(model, name), config)
            check_target(target, parameter)
            targets.append(target)
    return targets


def check_target(target: ParameterTarget, parameter: torch.Tensor) -> None:
    """Raises ``nncf.ValidationError`` naming a targeted parameter HQQ cannot compress in ``target.config``."""
    name, shape = target.name, tuple(parameter.shape)
    problem = None
    if not torch.is_floating_point(parameter):
        problem = f"it holds {parameter.dtype} values, not floats"
    elif parameter.ndim < 2:
        problem = f"it has shape {shape}; only matrices and stacks of them (2D, 3D) are compressed"
    elif target.config.group_size not in (-1, 0) and shape[target.axis] % target.config.group_size:
        problem = (
            f"its input axis {target.axis} of size {shape[target.axis]} is not a multiple of "
            f"group_size={target.config.group_size}"
        )
    elif target.config.num_bits == 4 and parameter.numel() % 2:
        problem = f"it has an odd number of values ({parameter.numel()}); 4-bit codes are stored two per byte"
    elif not all_finite(as_numpy(Tensor(parameter.detach()))):
        problem = "it contains NaN or Inf values"
    if problem is not None:
        msg = f"Parameter '{name}' matches target_parameters but cannot be compressed: {problem}. "
        msg += "The model was not modified."
        raise nncf.ValidationError(msg)
