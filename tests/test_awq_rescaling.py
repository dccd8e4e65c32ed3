"""Tests of nncf_hqq.openvino.rescaling: AWQ's rescaled weights are kept as factors and built one at a time, and the
model compressed is the one NNCF's eager rescaling gives, constant for constant."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import nncf
import numpy as np
import openvino as ov
import pytest
from nncf.tensor import Tensor
from openvino import opset13 as opset

from nncf_hqq.hqq import HQQ
from nncf_hqq.openvino import backend as ov_backend
from nncf_hqq.openvino.rescaling import RescaledConstants
from nncf_hqq.openvino.rescaling import factor_candidates
from nncf_hqq.openvino.rescaling import rescaled_constant

HIDDEN, INTER, VOCAB, LAYERS, TOKENS, SAMPLES = 64, 128, 48, 2, 16, 6
INT4 = {"mode": nncf.CompressWeightsMode.INT4_ASYM, "group_size": 32, "ratio": 1.0}


def _weight(rng: np.random.Generator, shape: tuple[int, ...], dtype: ov.Type, name: str) -> ov.Node:
    values = (rng.standard_t(4, size=shape) * 0.05).astype(np.float32)
    const = opset.constant(values, dtype=dtype, name=name)
    return const if dtype == ov.Type.f32 else opset.convert(const, ov.Type.f32)


def gated_mlp_model(dtype: ov.Type, seed: int = 0) -> ov.Model:
    """Embedding, then ``LAYERS`` blocks of norm scale -> gate and up projections -> SiLU(gate) * up -> down
    projection (NNCF's MatMul -> Multiply -> MatMul AWQ pattern: AWQ rescales the down projection's input channels
    and the up projection's output channels), then an output head; weights stored in ``dtype``."""
    rng = np.random.default_rng(seed)
    ids = opset.parameter([1, -1], ov.Type.i64, name="input_ids")
    x = opset.gather(_weight(rng, (VOCAB, HIDDEN), dtype, "embed_tokens"), ids, axis=0)
    for layer in range(LAYERS):
        gamma = opset.constant((1.0 + 0.5 * rng.random(HIDDEN)).astype(np.float32), name=f"norm{layer}")
        h = opset.multiply(x, gamma)
        gate = opset.matmul(h, _weight(rng, (INTER, HIDDEN), dtype, f"gate_proj{layer}"), False, True)
        up = opset.matmul(h, _weight(rng, (INTER, HIDDEN), dtype, f"up_proj{layer}"), False, True)
        act = opset.multiply(opset.swish(gate), up)
        down = opset.matmul(act, _weight(rng, (HIDDEN, INTER), dtype, f"down_proj{layer}"), False, True)
        x = opset.add(x, down)
    logits = opset.matmul(x, _weight(rng, (VOCAB, HIDDEN), dtype, "lm_head"), False, True)
    return ov.Model([opset.result(logits)], [ids], "gated_mlp")


@pytest.fixture(scope="module")
def dataset() -> nncf.Dataset:
    rng = np.random.default_rng(1)
    return nncf.Dataset([rng.integers(0, VOCAB, (1, TOKENS)) for _ in range(SAMPLES)])


def constants(model: ov.Model) -> list[tuple[str, str, tuple[int, ...], bytes]]:
    """Every constant of ``model`` in topological order: name (empty for OpenVINO's generated ``Constant_N``),
    element type, shape and bytes."""
    return [
        (
            "" if op.get_friendly_name().startswith("Constant_") else op.get_friendly_name(),
            str(op.get_element_type()),
            tuple(op.get_output_shape(0)),
            op.get_data().tobytes(),
        )
        for op in model.get_ordered_ops()
        if op.get_type_name() == "Constant"
    ]


@contextlib.contextmanager
def eager_awq() -> Iterator[None]:
    """NNCF's own AWQ rescaling (every rescaled weight written at once), for comparison."""

    def unchanged(self: Any, awq: Any) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ov_backend.HQQOVBackend, "awq_rescaling_deferred", unchanged)
        yield


@pytest.mark.parametrize("dtype", [ov.Type.bf16, ov.Type.f16, ov.Type.f32], ids=["bf16", "f16", "f32"])
def test_deferred_rescaling_writes_the_model_eager_rescaling_writes(dtype: ov.Type, dataset: nncf.Dataset) -> None:
    kwargs = {**INT4, "dataset": dataset, "awq": True, "scale_estimation": True, "hqq": True}
    deferred = nncf.compress_weights(gated_mlp_model(dtype), **kwargs)
    with eager_awq():
        eager = nncf.compress_weights(gated_mlp_model(dtype), **kwargs)
    written, expected = constants(deferred), constants(eager)
    assert [c[:3] for c in written] == [c[:3] for c in expected]
    different = [w[0] for w, e in zip(written, expected, strict=True) if w != e]
    assert not different


def test_rescaled_weights_stay_deferred_until_the_writer_reaches_them(
    dataset: nncf.Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}
    references = HQQ.with_scale_estimation_references

    def recording(self: HQQ, planned: Any, model: Any, graph: Any, statistics: Any, backend: Any) -> Any:
        mapping = backend.name_to_node_mapping
        seen["deferred"] = mapping.deferred
        seen["in_graph"] = {name: mapping.in_graph(name) for name in mapping.deferred}
        return references(self, planned, model, graph, statistics, backend)

    monkeypatch.setattr(HQQ, "with_scale_estimation_references", recording)
    model = gated_mlp_model(ov.Type.bf16)
    stored = {op.get_friendly_name(): op for op in model.get_ops() if op.get_type_name() == "Constant"}
    nncf.compress_weights(model, **INT4, dataset=dataset, awq=True, scale_estimation=True, hqq=True)
    # every down projection and the up projection before it: rescaled by AWQ, none of them written yet
    expected = {f"{kind}_proj{layer}" for layer in range(LAYERS) for kind in ("up", "down")}
    assert seen["deferred"] == expected
    assert all(seen["in_graph"][name] is stored[name] for name in expected)  # the graph still holds the stored one


def bf16_constant(values: np.ndarray, name: str = "w") -> ov.Node:
    return opset.constant(values.astype(np.float32), dtype=ov.Type.bf16, name=name)


def test_a_product_with_the_scale_is_recorded_and_read_as_nncf_writes_it() -> None:
    rng = np.random.default_rng(0)
    stored = bf16_constant(rng.normal(size=(6, 4)))
    mapping = RescaledConstants({"w": stored}, ov_backend.float_values)
    scale = rng.uniform(0.5, 2.0, size=4).astype(np.float32)
    mapping.observe_scale(Tensor(scale))
    current = ov_backend.float_values(stored)
    rescaled = current * scale[None, :]  # AWQ's own product (input channels), and then its inverse (output channels)
    assert mapping.defer("w", rescaled)
    expected = opset.constant(rescaled, dtype=ov.Type.bf16, name="w")  # what NNCF's set_weight writes
    assert mapping.in_graph("w") is stored
    np.testing.assert_array_equal(mapping["w"].get_data(), expected.get_data())
    assert mapping["w"].get_friendly_name() == "w"
    again = ov_backend.float_values(mapping["w"]) * (1.0 / scale)[None, :]
    assert mapping.defer("w", again)
    twice = opset.constant(again, dtype=ov.Type.bf16, name="w")
    np.testing.assert_array_equal(mapping["w"].get_data(), twice.get_data())


def test_a_weight_that_is_not_such_a_product_is_not_deferred() -> None:
    rng = np.random.default_rng(1)
    stored = bf16_constant(rng.normal(size=(6, 4)))
    mapping = RescaledConstants({"w": stored}, ov_backend.float_values)
    scale = rng.uniform(0.5, 2.0, size=4).astype(np.float32)
    mapping.observe_scale(scale)
    off_by_one_element = ov_backend.float_values(stored) * scale[None, :]
    off_by_one_element[2, 3] += 1.0
    assert not mapping.defer("w", off_by_one_element)
    assert not mapping.defer("w", ov_backend.float_values(stored) * 2.0)
    assert mapping.deferred == frozenset()
    assert mapping["w"] is stored


def test_materialising_puts_the_rescaled_constant_into_the_graph() -> None:
    rng = np.random.default_rng(2)
    stored = bf16_constant(rng.normal(size=(6, 4)))
    x = opset.parameter([1, 4], ov.Type.f32)
    result = opset.result(opset.matmul(x, opset.convert(stored, ov.Type.f32), False, True))
    model = ov.Model([result], [x])
    mapping = RescaledConstants({"w": stored}, ov_backend.float_values)
    scale = rng.uniform(0.5, 2.0, size=4).astype(np.float32)
    mapping.observe_scale(scale)
    assert mapping.defer("w", ov_backend.float_values(stored) * scale[None, :])
    expected = mapping["w"].get_data()
    mapping.materialise("w")
    assert mapping.deferred == frozenset()
    in_graph = [op for op in model.get_ops() if op.get_type_name() == "Constant"]
    assert len(in_graph) == 1
    assert in_graph[0] is not stored
    np.testing.assert_array_equal(in_graph[0].get_data(), expected)


@pytest.mark.parametrize(
    ("shape", "axes"),
    [((6, 4), [(1, 4), (1, 4)]), ((4, 6), [(4, 1), (4, 1)]), ((4, 4), [(4, 1), (1, 4), (4, 1), (1, 4)])],
    ids=["input-channels", "output-channels", "square-both-axes"],
)
def test_factor_candidates_are_the_scale_and_its_inverse_along_each_axis_of_its_length(
    shape: tuple[int, ...], axes: list[tuple[int, ...]]
) -> None:
    scale = np.array([1.0, 2.0, 4.0, 8.0], dtype=np.float32)
    candidates = list(factor_candidates(scale, shape))
    assert [c.shape for c in candidates] == axes
    half = len(candidates) // 2
    assert all(np.array_equal(c.ravel(), scale) for c in candidates[:half])
    assert all(np.array_equal(c.ravel(), 1.0 / scale) for c in candidates[half:])
    assert list(factor_candidates(scale.reshape(2, 2), shape)) == []


def test_a_rescaled_constant_keeps_the_name_and_element_type() -> None:
    stored = bf16_constant(np.ones((2, 3)), name="kept")
    factor = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    from nncf_hqq.openvino.rescaling import Rescaling

    node = rescaled_constant(stored, (Rescaling(factor, np.dtype(np.float32)),), ov_backend.float_values)
    assert node.get_friendly_name() == "kept"
    assert node.get_element_type() == ov.Type.bf16
    np.testing.assert_array_equal(node.get_data(dtype=np.float32), np.ones((2, 3)) * factor)


def test_the_writer_gets_each_rescaled_constant_in_the_graph_and_lets_go_of_it_after() -> None:
    rng = np.random.default_rng(3)
    stored = {name: bf16_constant(rng.normal(size=(6, 4)), name) for name in ("a", "b")}
    x = opset.parameter([1, 4], ov.Type.f32)
    outputs = [opset.result(opset.matmul(x, opset.convert(c, ov.Type.f32), False, True)) for c in stored.values()]
    model = ov.Model(outputs, [x])
    mapping = RescaledConstants(stored, ov_backend.float_values)
    mapping.observe_scale(rng.uniform(0.5, 2.0, size=4).astype(np.float32))
    assert mapping.defer("a", ov_backend.float_values(stored["a"]) * mapping.scale[None, :])

    class Params:
        def __init__(self, name: str) -> None:
            self.weight_name = name

    seen = []
    for wp in ov_backend.constants_in_turn([Params("a"), Params("b")], mapping):
        in_graph = {op.get_friendly_name(): op for op in model.get_ops() if op.get_type_name() == "Constant"}
        seen.append((wp.weight_name, sorted(mapping), wp.weight_name in mapping.deferred))
        assert in_graph[wp.weight_name] is mapping.in_graph(wp.weight_name)
    assert seen == [("a", ["a", "b"], False), ("b", ["b"], False)]
    assert len(mapping) == 0  # every written constant let go of
