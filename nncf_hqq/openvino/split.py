"""Float zero points written as integer zero points plus a correction of the layer's output (``ZeroPointFormat.SPLIT``).

A group's float zero point ``z`` splits exactly into an integer one and a remainder:
``(q - z) * s = (q - z_int) * s + c`` with ``z_int = clip(round(z))`` and ``c = (z_int - z) * s``. Summed against
the input ``x`` of a MatMul the remainder only needs the sum of ``x`` over each group's input channels:

    y = W_int x + C groupsum(x),   C[n, g] = (z_int[n, g] - z[n, g]) * s[n, g]

``W_int`` is an ordinary u4/u8-zero-point weight, which OpenVINO's CPU plugin runs on its int8 dynamic-quantization
kernels (an f16 zero point takes a layer off them); the correction is a MatMul ``1 / group_size`` the size of the
layer: per MatMul, Reshape -> ReduceSum -> MatMul (weight ``C``) -> Add after the MatMul (after its bias), named
``{weight}/hqq_split_correction`` (the constant) and ``{matmul}/hqq_split_correction`` (the Add).

``C`` of a 2-D grouped weight is stored as symmetric int8 codes with one f32 scale per row
(``{weight}/hqq_split_correction_scale``): the CPU plugin runs that MatMul as a compressed FullyConnected on its
int8 kernels too, and reads 1 byte per group instead of the 4 it holds for an f16 constant (it keeps f16 constants
as f32), which is most of the split's cost at decode on large models (docs/inference.md). Its rounding,
``max_g |C[n, g]| / 254`` per row, is at most ``s_max / 508`` for a row whose largest scale is ``s_max``: the size of
the f16 rounding of the zero point it replaces (``z * s`` to ``s / 256`` for zero points in [8, 16)). Per-channel
corrections (a broadcast product), 3-D expert weights and row lookups keep f16 constants
(``correction="f16"`` keeps them for every weight).

Each MatMul gets its own chain; the CPU plugin merges the identical group sums of MatMuls that read the same input
(Q/K/V, gate/up) itself (4 ReduceSum nodes per Qwen2 layer in its runtime graph, not 7). Merging their corrections
into one MatMul and splitting its output measured slower on OpenVINO 2026.4 CPU (docs/research-log.md,
2026-12-01): the plugin pays per node at decode, and a split costs more than the MatMuls it saves.

``split_float_zero_points`` rewrites the f16-zero-point decompression subgraphs of a model (as
``nncf_hqq.openvino.decompression`` writes them) into that form; the maths of the split is
``nncf_hqq.maths.conversion.split_zero_point``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

import numpy as np
import openvino as ov
from nncf.common.logging import nncf_logger
from nncf.tensor import Tensor
from openvino import opset13 as opset

from nncf_hqq.maths.conversion import split_zero_point
from nncf_hqq.openvino.decompression import CODE_TYPES
from nncf_hqq.openvino.decompression import codes_constant

#: Code types whose integer zero points the CPU plugin runs on its fast kernels (u2 fails there, u3 is decompressed).
SPLIT_CODE_TYPES = {ov.Type.u4: 4, ov.Type.u8: 8}
#: Names of the split's output correction: ``{weight}/hqq_split_correction`` for the f16 constant ``C``,
#: ``{matmul}/hqq_split_correction`` for the Add after the MatMul. They must not contain ``zero_point``: tools that
#: find zero points by name (``.../zero_point``) would take the ``[out, groups]`` correction for one.
CORRECTION_SUFFIX = "hqq_split_correction"
#: How the correction weight ``C`` of a 2-D grouped weight is stored: "int8" (codes and a per-row f32 scale) or "f16".
CORRECTION_TYPES = ("int8", "f16")
INT8_LEVELS = 127


@dataclasses.dataclass(frozen=True)
class FloatZeroPointWeight:
    """One MatMul weight decompressed as ``(convert(codes) - zero_point_f16) * scale_f16`` (then reshaped)."""

    name: str  # the codes constant's friendly name (the weight's name)
    matmul: ov.Node
    zero_point: ov.Node  # the f16 zero-point Constant
    scale: ov.Node
    bits: int
    #: Gathers that read the same decompressed weight as a table (an embedding tied to this LM head).
    lookups: tuple[ov.Node, ...] = ()

    @property
    def transposed(self) -> bool:
        """Whether the weight is ``[..., out, in]`` (``transpose_b``) rather than ``[..., in, out]``."""
        return bool(self.matmul.get_attributes()["transpose_b"])

    @property
    def weight_shape(self) -> tuple[int, ...]:
        return tuple(self.matmul.input_value(1).get_partial_shape().to_shape())

    @property
    def zero_point_shape(self) -> tuple[int, ...]:
        return tuple(self.zero_point.get_output_partial_shape(0).to_shape())

    @property
    def grouped(self) -> bool:
        """Whether the zero point has one value per group (one more axis than the weight), not per channel."""
        return len(self.zero_point_shape) > len(self.weight_shape)

    @property
    def group_shape(self) -> tuple[int, int]:
        """(groups, group size) along the input axis: 1 group per channel for a per-channel zero point."""
        in_features = self.weight_shape[-1 if self.transposed else -2]
        groups = self.zero_point_shape[-2 if self.transposed else -3] if self.grouped else 1
        return groups, in_features // groups

    def correction_rows(self, correction: np.ndarray) -> np.ndarray:
        """The correction (in the zero point's shape) as ``[..., out, groups]``."""
        if self.grouped:
            correction = correction[..., 0] if self.transposed else correction[..., 0, :]
        return correction if self.transposed else np.swapaxes(correction, -1, -2)


def _constant(output: ov.Output, element_type: ov.Type | None = None) -> ov.Node | None:
    node = output.get_node()
    if node.get_type_name() != "Constant":
        return None
    if element_type is not None and node.get_output_element_type(0) != element_type:
        return None
    return node


def _through(output: ov.Output, *type_names: str) -> ov.Output:
    """The input of the nodes of ``type_names`` that ``output`` comes from, followed upwards."""
    while output.get_node().get_type_name() in type_names:
        output = output.get_node().input_value(0)
    return output


def _row_lookup(target: ov.Input) -> bool:
    """Whether ``target`` is the table input of a Gather of whole rows (axis 0, no batch dims, static rank)."""
    node = target.get_node()
    if node.get_type_name() != "Gather" or target.get_index() != 0 or node.get_attributes().get("batch_dims"):
        return False
    axis = _constant(node.input_value(2))
    return axis is not None and int(axis.get_data()) == 0 and node.get_output_partial_shape(0).rank.is_static


def _weight_chain(matmul: ov.Node) -> tuple[ov.Output, tuple[ov.Node, ...]] | None:
    """The output the MatMul's weight input comes from through Convert/Reshape, and the row lookups (Gathers) that
    read the decompressed weight too; None if anything else reads it on the way, which must then keep its
    decompression as it is."""
    weight = matmul.input_value(1)
    others = [t for t in weight.get_target_inputs() if t.get_node() != matmul]
    if not all(_row_lookup(target) for target in others):
        return None
    lookups = tuple(target.get_node() for target in others)
    output = weight
    while output.get_node().get_type_name() in ("Convert", "Reshape"):
        output = output.get_node().input_value(0)
        if len(output.get_target_inputs()) != 1:
            return None
    return output, lookups


def float_zero_point_weight(matmul: ov.Node) -> FloatZeroPointWeight | None:
    """The f16-zero-point weight of a MatMul (its input 1, u4/u8 codes), or None for any other MatMul."""
    if matmul.get_attributes().get("transpose_a") or matmul.input_value(0).get_partial_shape().rank.is_dynamic:
        return None
    chain = _weight_chain(matmul)
    if chain is None or chain[0].get_node().get_type_name() != "Multiply":
        return None
    multiply, lookups = chain[0].get_node(), chain[1]
    if lookups and not matmul.get_attributes().get("transpose_b"):
        return None  # a table's rows are the MatMul's output channels only for a [out, in] weight
    subtract, scale = multiply.input_value(0).get_node(), _constant(multiply.input_value(1), ov.Type.f16)
    if subtract.get_type_name() != "Subtract" or scale is None:
        return None
    zero_point = _constant(subtract.input_value(1), ov.Type.f16)
    codes_convert = subtract.input_value(0).get_node()
    if zero_point is None or codes_convert.get_type_name() != "Convert":
        return None
    codes = _constant(codes_convert.input_value(0))
    if codes is None or codes.get_output_element_type(0) not in SPLIT_CODE_TYPES:
        return None
    if any(len(node.output(0).get_target_inputs()) != 1 for node in (zero_point, subtract)):
        return None
    bits = SPLIT_CODE_TYPES[codes.get_output_element_type(0)]
    return FloatZeroPointWeight(codes.get_friendly_name(), matmul, zero_point, scale, bits, lookups)


def _group_sums(activation: ov.Output, groups: int, group_size: int) -> ov.Output:
    """``x`` summed over each group's channels: ``[..., in] -> [..., groups]`` (``[..., 1]`` per channel)."""
    if groups == 1:
        return opset.reduce_sum(activation, np.array([-1], dtype=np.int64), keep_dims=True).output(0)
    grouped = _reshape_tail(activation, 1, [groups, group_size])
    return opset.reduce_sum(grouped, np.array([-1], dtype=np.int64), keep_dims=False).output(0)


def _reshape_tail(output: ov.Output, replaced: int, tail: list[int]) -> ov.Output:
    """``output`` with its last ``replaced`` axes reshaped to ``tail``, the leading axes kept as they are."""
    kept = output.get_partial_shape().rank.get_length() - replaced
    return opset.reshape(output, np.array([0] * kept + tail), special_zero=True).output(0)


def _replace_zero_point(weight: FloatZeroPointWeight, integer: np.ndarray) -> None:
    """The f16 zero-point Constant becomes an integer one (the codes' type) converted to f16, as NNCF writes it."""
    code_type = CODE_TYPES[weight.bits]
    constant = codes_constant(integer.astype(np.uint8), code_type, weight.zero_point.get_friendly_name())
    converted = opset.convert(constant, ov.Type.f16)
    for target in list(weight.zero_point.output(0).get_target_inputs()):
        target.replace_source_output(converted.output(0))


def _f16_constant(values: np.ndarray, element_type: ov.Type, name: str) -> ov.Output:
    """``values`` as an f16 Constant, converted to ``element_type``. f16 rounds a correction ``|c| <= s / 2`` to
    within ``s / 4096``, finer than the f16 rounding of the zero point it replaces (``z * s`` to ``s / 256`` for
    zero points in [8, 16))."""
    constant = opset.constant(np.ascontiguousarray(values, dtype=np.float16), dtype=ov.Type.f16, name=name)
    return opset.convert(constant, element_type).output(0) if element_type != ov.Type.f16 else constant.output(0)


def int8_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``values`` (``[out, groups]``) as symmetric int8 codes in [-127, 127] and one f32 scale per row, so that
    ``codes * scale`` is within ``scale / 2`` of ``values``. A row of zeros gets scale 1 and zero codes."""
    peak = np.abs(values.astype(np.float32)).max(axis=-1, keepdims=True)
    scale = np.where(peak > 0, peak / INT8_LEVELS, 1.0).astype(np.float32)
    codes = np.clip(np.rint(values / scale), -INT8_LEVELS, INT8_LEVELS).astype(np.int8)
    return codes, scale


def _int8_constant(values: np.ndarray, element_type: ov.Type, name: str) -> ov.Output:
    """``values`` as int8 codes -> Convert f32 -> Multiply by the per-row f32 scale (the decompression pattern the CPU
    plugin fuses into a compressed FullyConnected), converted to ``element_type``. The scale stays f32: a row's
    scale is ``~s / 254``, below f16's normal range for typical weight scales ``s``."""
    codes, scale = int8_rows(values)
    weight = opset.convert(opset.constant(codes, dtype=ov.Type.i8, name=name), ov.Type.f32)
    rows = opset.multiply(weight, opset.constant(scale, dtype=ov.Type.f32, name=f"{name}_scale"))
    return opset.convert(rows, element_type).output(0) if element_type != ov.Type.f32 else rows.output(0)


def _after_bias(output: ov.Output) -> ov.Output:
    """The output of the bias Add that is a MatMul's only consumer (a constant, possibly converted), else the
    MatMul's own: the correction goes after the bias, which the CPU plugin fuses into the MatMul."""
    consumers = list(output.get_target_inputs())
    if len(consumers) != 1 or consumers[0].get_node().get_type_name() != "Add":
        return output
    add = consumers[0].get_node()
    other = add.input_value(1 - consumers[0].get_index())
    return add.output(0) if _constant(_through(other, "Convert")) is not None else output


def _add_correction(weight: FloatZeroPointWeight, correction: np.ndarray, correction_type: str) -> None:
    """``y += C groupsum(x)`` after the MatMul (and its bias): a MatMul with the ``[..., out, groups]`` correction
    (int8 rows for a 2-D weight unless ``correction_type`` is "f16"), or a broadcast product for one group per
    channel."""
    groups, group_size = weight.group_shape
    activation = weight.matmul.input_value(0)  # read now: an earlier correction may have replaced its source
    sums = _group_sums(activation, groups, group_size)
    name = f"{weight.name}/{CORRECTION_SUFFIX}"
    if groups == 1:  # [..., 1] * [..., 1, out] instead of a MatMul with one inner channel
        rows = _f16_constant(np.swapaxes(correction, -1, -2), activation.get_element_type(), name)
        product = opset.multiply(sums, rows)
    else:
        as_int8 = correction_type == "int8" and correction.ndim == 2
        rows = (_int8_constant if as_int8 else _f16_constant)(correction, activation.get_element_type(), name)
        product = opset.matmul(sums, rows, transpose_a=False, transpose_b=True)
    output = _after_bias(weight.matmul.output(0))
    consumers = list(output.get_target_inputs())
    corrected = opset.add(output, product, name=f"{weight.matmul.get_friendly_name()}/{CORRECTION_SUFFIX}")
    for target in consumers:
        target.replace_source_output(corrected.output(0))


def _add_lookup_correction(weight: FloatZeroPointWeight, lookup: ov.Node, correction: np.ndarray) -> None:
    """A Gather of the weight's rows gets the same correction: the correction's rows, gathered by the same indices,
    added to every channel of their group."""
    groups, group_size = weight.group_shape
    gathered = lookup.output(0)
    consumers = list(gathered.get_target_inputs())
    table = _f16_constant(correction, gathered.get_element_type(), f"{weight.name}/lookup_correction")
    picked = opset.gather(table, lookup.input_value(1), np.array(0, dtype=np.int64))  # [..., groups]
    if groups == 1:
        corrected = opset.add(gathered, picked).output(0)
    else:
        grouped = _reshape_tail(gathered, 1, [groups, group_size])
        summed = opset.add(grouped, opset.unsqueeze(picked, np.array(-1, dtype=np.int64)))
        corrected = _reshape_tail(summed.output(0), 2, [groups * group_size])
    for target in consumers:
        target.replace_source_output(corrected)


def split_float_zero_points(
    model: ov.Model, names: Collection[str] | None = None, correction: str = "int8"
) -> list[str]:
    """Rewrites the f16-zero-point weights of ``model`` (all, or those whose codes constant is in ``names``) as
    integer zero points plus an output correction, in place; returns the names of the rewritten weights.

    ``correction`` ("int8" or "f16", ``CORRECTION_TYPES``) is how the correction weights of 2-D grouped weights are
    stored. The model computes the same function to the rounding of the stored corrections (int8: ``scale / 2``
    per group and row, see ``int8_rows``; f16: one f16 step). Weights the split cannot take
    (u2/u3 codes, a MatMul with ``transpose_a`` or an input of unknown rank, a decompressed weight that also feeds
    a node other than a row lookup) keep their f16 zero point, logged. A table tied to an LM head (a Gather of its
    rows) gets the same correction on the lookup's side.
    """
    if correction not in CORRECTION_TYPES:
        msg = f"correction must be one of {', '.join(CORRECTION_TYPES)}, got {correction!r}"
        raise ValueError(msg)
    found = []
    for node in model.get_ordered_ops():
        weight = float_zero_point_weight(node) if node.get_type_name() == "MatMul" else None
        if weight is not None and (names is None or weight.name in names):
            found.append(weight)
    done = [weight.name for weight in found]
    if names is not None and (left := sorted(set(names) - set(done))):
        nncf_logger.info(f"Float zero points kept (the split format cannot take these weights): {', '.join(left)}")
    for weight in found:
        integer, remainder = split_zero_point(
            Tensor(weight.zero_point.get_data().astype(np.float32)),
            Tensor(weight.scale.get_data().astype(np.float32)),
            weight.bits,
        )
        _replace_zero_point(weight, integer.data)
        rows = weight.correction_rows(remainder.data)
        _add_correction(weight, rows, correction)
        for lookup in weight.lookups:
            _add_lookup_correction(weight, lookup, rows)
    model.validate_nodes_and_infer_types()
    return done
