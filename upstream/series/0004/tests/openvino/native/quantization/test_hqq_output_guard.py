from unittest.mock import patch

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as opset

import nncf
from nncf import CompressWeightsMode
from nncf.quantization.advanced_parameters import AdvancedCompressionParameters
from nncf.quantization.advanced_parameters import AdvancedHQQParameters
from nncf.quantization.algorithms.weight_compression.hqq import HQQ
from tests.openvino.native.quantization.test_weights_compression_hqq import HIDDEN


def attention_model(seed: int = 0) -> ov.Model:
    """An attention block fed by a normalization's gain."""
    rng = np.random.default_rng(seed)
    x = opset.parameter([1, 8, HIDDEN], ov.Type.f32, name="x")
    normed = opset.multiply(x, opset.constant(rng.uniform(0.5, 2.0, HIDDEN).astype(np.float32)), name="norm")

    def linear(inp, name):
        weight = opset.constant((rng.standard_t(4, (HIDDEN, HIDDEN)) * 0.05).astype(np.float32), name=name)
        return opset.matmul(inp, weight, False, True, name=f"{name}/matmul")

    attention = opset.scaled_dot_product_attention(*(linear(normed, n) for n in ("q", "k", "v")), causal=True)
    return ov.Model([linear(attention, "o")], [x])


def compress(dataset: nncf.Dataset, **hqq_params) -> tuple[ov.Model, dict]:
    seen = {}
    original = HQQ.apply

    def apply(self, *args, **kwargs):
        seen["token_rows"] = {name: len(s.mean_values) for name, s in self.token_statistics.items()}
        return original(self, *args, **kwargs)

    params = AdvancedCompressionParameters(hqq_params=AdvancedHQQParameters(**hqq_params))
    with patch.object(HQQ, "apply", apply):
        model = nncf.compress_weights(
            attention_model(),
            mode=CompressWeightsMode.INT4_ASYM,
            group_size=32,
            dataset=dataset,
            scale_estimation=True,
            hqq=True,
            advanced_parameters=params,
        )
    return model, seen


@pytest.fixture
def dataset() -> nncf.Dataset:
    return nncf.Dataset([np.random.default_rng(i).normal(size=(1, 8, HIDDEN)).astype(np.float32) for i in range(4)])


@pytest.mark.parametrize("rows", [0, 3])
def test_token_rows_are_collected(dataset, rows):
    _, seen = compress(dataset, calibration_token_rows=rows)
    assert set(seen["token_rows"].values()) == ({4 * rows} if rows else set())


def test_guarded_outputs_are_closer_to_float_than_scale_estimation(dataset):
    x = np.random.default_rng(7).normal(size=(1, 8, HIDDEN)).astype(np.float32)
    scale_estimation = nncf.compress_weights(
        attention_model(), mode=CompressWeightsMode.INT4_ASYM, group_size=32, dataset=dataset, scale_estimation=True
    )
    models = (attention_model(), compress(dataset)[0], scale_estimation)
    outputs = [ov.compile_model(m, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(x)[0] for m in models]
    assert np.linalg.norm(outputs[1] - outputs[0]) < np.linalg.norm(outputs[2] - outputs[0])
