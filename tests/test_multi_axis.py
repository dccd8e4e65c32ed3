"""Weights NNCF reduces over several axes (a Convolution's ``[out, in, kh, kw]``, a Gather of a 3-D table): HQQ
compresses them per channel over all those axes as one group, in every mode NNCF puts them in; what it refuses is an
``nncf.ValidationError`` naming the weight, before the model is touched."""

from __future__ import annotations

from typing import Any

import nncf
import numpy as np
import openvino as ov
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from nncf import CompressWeightsMode
from nncf.tensor import Tensor

import nncf_hqq
from nncf_hqq import integration
from nncf_hqq._nncf import WeightCompressionConfig
from nncf_hqq.hqq import HQQ
from nncf_hqq.hqq import merge_reduction_axes
from nncf_hqq.maths.core import decompress
from nncf_hqq.parameters import HQQParameters
from tests.ov_models import conv_and_gather
from tests.ov_models import run

MULTI_AXIS_WEIGHTS = ("conv_weight", "table")
IDS = np.random.default_rng(1).integers(0, 32, size=(1, 8))


def constants(model: ov.Model) -> dict[str, tuple[ov.Type, tuple[int, ...]]]:
    return {
        op.get_friendly_name(): (op.get_element_type(), tuple(op.get_output_shape(0)))
        for op in model.get_ops()
        if op.get_type_name() == "Constant" and op.get_friendly_name().startswith((*MULTI_AXIS_WEIGHTS, "head"))
    }


@pytest.mark.parametrize("mode", [CompressWeightsMode.INT8_ASYM, CompressWeightsMode.INT8_SYM], ids=lambda m: m.value)
def test_int8_hqq_compresses_every_weight_nncf_compresses(mode: CompressWeightsMode) -> None:
    fp = run(conv_and_gather(), IDS)
    rtn = nncf.compress_weights(conv_and_gather(), mode=mode)
    hqq = nncf.compress_weights(conv_and_gather(), mode=mode, hqq=True)
    rtn_constants, hqq_constants = constants(rtn), constants(hqq)
    # the same weights, codes of the same type and shape; asymmetric: HQQ's float zero points
    assert set(rtn_constants) == set(hqq_constants)
    for name in (*MULTI_AXIS_WEIGHTS, "head"):
        assert hqq_constants[name] == rtn_constants[name]
        assert hqq_constants[f"{name}/scale"] == rtn_constants[f"{name}/scale"]
        if mode == CompressWeightsMode.INT8_ASYM:
            assert hqq_constants[f"{name}/zero_point"] == (ov.Type.f16, rtn_constants[f"{name}/zero_point"][1])
    rtn_error = np.linalg.norm(run(rtn, IDS) - fp)
    hqq_error = np.linalg.norm(run(hqq, IDS) - fp)
    assert 0 < hqq_error < 1.1 * rtn_error, (hqq_error, rtn_error)


@pytest.mark.parametrize("mode", [CompressWeightsMode.INT4_ASYM, CompressWeightsMode.INT4_SYM], ids=lambda m: m.value)
def test_int4_hqq_leaves_multi_axis_backup_weights_to_nncf(mode: CompressWeightsMode) -> None:
    kwargs = {"mode": mode, "group_size": 16, "all_layers": True}
    rtn = constants(nncf.compress_weights(conv_and_gather(), **kwargs))
    hqq = constants(nncf.compress_weights(conv_and_gather(), **kwargs, hqq=True))
    for name in MULTI_AXIS_WEIGHTS:  # NNCF keeps them in its INT8 backup precision, round to nearest
        assert hqq[name] == rtn[name] and hqq[name][0] in (ov.Type.u8, ov.Type.i8)


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=2, max_size=4),
    data=st.data(),
)
def test_merged_reduction_axes_round_trip(shape: list[int], data: st.DataObject) -> None:
    ndim = len(shape)
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, ndim - 1), min_size=1, max_size=ndim - 1))))
    weight = Tensor(np.arange(np.prod(shape), dtype=np.float32).reshape(shape))
    merged, restore = merge_reduction_axes(weight, axes)
    kept = [shape[a] for a in range(ndim) if a not in axes]
    assert tuple(merged.shape) == (*kept, int(np.prod([shape[a] for a in axes])))
    np.testing.assert_array_equal(restore(merged).data, weight.data)
    per_channel = restore(Tensor(merged.data.sum(axis=-1, keepdims=True)))
    np.testing.assert_array_equal(per_channel.data, weight.data.sum(axis=axes, keepdims=True))


@pytest.mark.parametrize("mode", [CompressWeightsMode.INT8_ASYM, CompressWeightsMode.INT8_SYM], ids=lambda m: m.value)
def test_multi_axis_weight_is_per_channel_hqq_of_the_merged_axes(mode: CompressWeightsMode) -> None:
    """Compressing over axes (1, 2, 3) is compressing the ``[out, in * kh * kw]`` matrix per row."""
    weight = np.random.default_rng(0).standard_t(4, size=(8, 4, 3, 3)).astype(np.float32)
    config = WeightCompressionConfig(mode=mode, group_size=-1)
    hqq = HQQ(HQQParameters(), mode)
    direct = hqq.compress(Tensor(weight), (1, 2, 3), config)
    flat = hqq.compress(Tensor(weight.reshape(8, -1)), 1, config)
    np.testing.assert_array_equal(direct.tensor.data.reshape(8, -1), flat.tensor.data)
    np.testing.assert_array_equal(direct.scale.data.reshape(8, 1), flat.scale.data)
    assert direct.scale.shape == (8, 1, 1, 1)
    if flat.zero_point is not None:
        assert direct.zero_point.shape == (8, 1, 1, 1)
    restored = decompress(direct)
    assert restored.shape == weight.shape


def test_groups_over_several_axes_are_refused_naming_the_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    """NNCF 3.4 compresses multi-axis weights per channel; should a plan ask for groups over them, HQQ refuses
    before any weight is written."""
    original = integration.HQQWeightCompression.apply_with_parameters

    def grouped_conv(self: Any, model: Any, graph: Any, dataset: Any, statistics: Any, params: list) -> Any:
        for wp in params:
            if wp.weight_name == "conv_weight":
                wp.compression_config = WeightCompressionConfig(mode=CompressWeightsMode.INT8_ASYM, group_size=4)
        return original(self, model, graph, dataset, statistics, params)

    monkeypatch.setattr(integration.HQQWeightCompression, "apply_with_parameters", grouped_conv)
    model = conv_and_gather()
    before = constants(model)
    with pytest.raises(nncf.ValidationError, match=r"Weight 'conv_weight' .* axes \(1, 2, 3\).*groups of 4"):
        nncf_hqq.compress_weights(model, mode=CompressWeightsMode.INT8_ASYM, hqq=True)
    assert constants(model) == before
