"""AWQ's rescaled weights kept as factors on the stored constants until each weight is compressed, so that one
rescaled weight is in memory at a time instead of all of them.

NNCF's AWQ rescales every weight it applies to (along its input channels) and, for a MatMul -> Multiply -> MatMul
pattern, the weight before it (along its output channels), before any weight is compressed, and writes each back
as a new constant (``set_weight``). Those constants are held through Scale Estimation until the writer has replaced
the last of them: on a bf16 model of Qwen2.5-7B's shapes, every up and down projection, 7.1 GiB.

``RescaledConstants`` is the backend's name-to-node mapping with that write deferred. AWQ's own code computes the
scales and the rescaled weight as always; ``RescalingAWQBackend.set_weight`` then checks that the weight it is
given is, element for element, the current one times AWQ's last scale (or its inverse) along one axis, and records
that factor instead of the constant; any other weight is written as NNCF writes it. The graph keeps the stored
constant meanwhile; every read of the weight through the mapping (Scale Estimation, HQQ) builds the rescaled
constant again, as NNCF built it (``rescaled_constant``), and ``materialise`` puts it into the graph just before the
writer compresses it.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import openvino as ov
from nncf.tensor import Tensor

from nncf_hqq._nncf import NNCFGraph
from nncf_hqq._nncf import NNCFNode
from nncf_hqq._nncf import OVAWQAlgoAlgoBackend
from nncf_hqq._nncf import create_ov_const_from_tensor

#: Reads a constant's values as NNCF's ``get_weight`` returns them (bf16 as float32, exactly).
ValuesReader = Callable[[ov.Node], np.ndarray]


@dataclass(frozen=True)
class Rescaling:
    """One rescaling AWQ applied to a weight: the values times ``factor`` (float32, broadcast along one axis), cast to
    ``dtype`` (what NNCF cast the product to), stored in the constant's element type."""

    factor: np.ndarray
    dtype: np.dtype[Any]


def rescaled_constant(node: ov.Node, rescalings: tuple[Rescaling, ...], read: ValuesReader) -> ov.Node:
    """The constant NNCF's AWQ would have written for ``node`` after ``rescalings`` (in order), built as NNCF builds
    it (``create_ov_const_from_tensor`` of the float product, in ``node``'s element type and name)."""
    element_type, name = node.get_element_type(), node.get_friendly_name()
    for rescaling in rescalings:
        product = np.multiply(read(node), rescaling.factor, dtype=np.float32)
        node = create_ov_const_from_tensor(Tensor(product.astype(rescaling.dtype, copy=False)), element_type, name)
    return node


def factor_candidates(scale: np.ndarray, shape: tuple[int, ...]) -> Iterator[np.ndarray]:
    """The factors AWQ may have multiplied a weight of ``shape`` by with its ``scale`` (one value per channel): the
    scale (the weight's own input channels) or its inverse (the output channels of the weight before it), along
    each axis of that length."""
    if scale.ndim != 1:
        return
    for values in (scale, 1.0 / scale):
        for axis, length in enumerate(shape):
            if length == values.size:
                yield values.reshape([-1 if i == axis else 1 for i in range(len(shape))])


class RescaledConstants(dict[str, ov.Node]):
    """NNCF's OpenVINO name-to-node mapping in which a weight that AWQ rescaled reads as its rescaled constant,
    built when read (see the module's docstring). ``in_graph`` gives the node the graph holds."""

    def __init__(self, mapping: Mapping[str, ov.Node], read: ValuesReader) -> None:
        super().__init__(mapping)
        self.read = read
        #: The scale AWQ computed last (one value per input channel of the weight it rescales), while it runs.
        self.scale: np.ndarray | None = None
        self._rescalings: dict[str, tuple[Rescaling, ...]] = {}

    def __getitem__(self, name: str) -> ov.Node:
        node = super().__getitem__(name)
        rescalings = self._rescalings.get(name)
        return node if rescalings is None else rescaled_constant(node, rescalings, self.read)

    def in_graph(self, name: str) -> ov.Node:
        """The node the graph holds under ``name`` (a rescaled weight's stored constant until ``materialise``)."""
        return super().__getitem__(name)

    @property
    def deferred(self) -> frozenset[str]:
        """The names of the weights whose rescaling is recorded, not yet in the graph."""
        return frozenset(self._rescalings)

    def observe_scale(self, scale: Any) -> None:
        """Records AWQ's scale (an nncf or numpy tensor) for the ``set_weight`` calls that follow."""
        data = scale.data if isinstance(scale, Tensor) else scale
        self.scale = np.asarray(data) if isinstance(data, np.ndarray) else None

    def defer(self, name: str, weight: np.ndarray) -> bool:
        """Records the rescaling that makes ``name``'s current values ``weight`` (what AWQ is about to write), when
        it is a product with a factor of the last scale (``factor_candidates``), exactly; returns whether it did."""
        if self.scale is None or name not in self:
            return False
        current = self.read(self[name])
        if current.shape != weight.shape:
            return False
        for factor in factor_candidates(self.scale.astype(np.float32, copy=False), current.shape):
            product = np.multiply(current, factor, dtype=np.float32).astype(weight.dtype, copy=False)
            if np.array_equal(product, weight):
                self._rescalings[name] = (*self._rescalings.get(name, ()), Rescaling(factor, weight.dtype))
                return True
        return False

    def materialise(self, name: str) -> None:
        """Puts ``name``'s rescaled constant into the graph in place of the stored one (nothing when its rescaling
        is not deferred)."""
        rescalings = self._rescalings.pop(name, None)
        if rescalings is None:
            return
        stored = super().__getitem__(name)
        rescaled = rescaled_constant(stored, rescalings, self.read)
        for target in stored.output(0).get_target_inputs():
            target.replace_source_output(rescaled.output(0))
        super().__setitem__(name, rescaled)

    def materialise_all(self) -> None:
        """Puts every deferred rescaled constant into the graph."""
        for name in list(self._rescalings):
            self.materialise(name)


class RescalingAWQBackend(OVAWQAlgoAlgoBackend):
    """NNCF's OpenVINO AWQ backend whose ``set_weight`` records a rescaling in a ``RescaledConstants`` mapping
    instead of writing the constant, where it can (``RescaledConstants.defer``)."""

    def set_weight(
        self, node_with_weight: NNCFNode, weight_port_id: int, model: ov.Model, graph: NNCFGraph, weight: Tensor
    ) -> None:
        constants = self.name_to_node_mapping
        name = node_with_weight.layer_attributes.constant_attributes[weight_port_id]["name"]
        if isinstance(constants, RescaledConstants):
            data = weight.data
            if isinstance(data, np.ndarray) and constants.defer(name, data):
                return
            constants.materialise(name)  # NNCF's write below replaces the node the graph holds
        super().set_weight(node_with_weight, weight_port_id, model, graph, weight)
