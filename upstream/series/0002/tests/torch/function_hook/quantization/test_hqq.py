import pytest
import torch

import nncf
from nncf import CompressWeightsMode
from nncf.parameters import CompressionFormat
from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
from nncf.quantization.algorithms.weight_compression.hqq import HQQ
from nncf.tensor import Tensor
from nncf.tensor import TensorBackend
from nncf.torch.function_hook import get_hook_storage
from nncf.torch.quantization.layers import BaseWeightsDecompressor


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(64, 128)
        self.down = torch.nn.Linear(128, 64)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def model_and_input() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return MLP().eval(), torch.randn(1, 8, 64)


@pytest.mark.parametrize(
    ("mode", "group_size"), [(CompressWeightsMode.INT4_ASYM, 32), (CompressWeightsMode.INT8_ASYM, None)]
)
def test_float_zero_points_and_outputs(mode, group_size):
    model, x = model_and_input()
    reference = model(x)
    errors = []
    for hqq in (False, True):
        compressed = nncf.compress_weights(
            model_and_input()[0], mode=mode, group_size=group_size, dataset=nncf.Dataset([x]), hqq=hqq or None
        )
        errors.append(torch.linalg.norm(compressed(x) - reference).item())
        modules = get_hook_storage(compressed).modules()
        dtypes = [m._zero_point.dtype for m in modules if isinstance(m, BaseWeightsDecompressor)]
        assert (torch.float16 in dtypes) == hqq  # the last layer takes the backup mode (INT8_ASYM, rounding)
    assert errors[1] < errors[0]


def test_float_zero_points_survive_a_dtype_cast():
    model, x = model_and_input()
    compressed = nncf.compress_weights(
        model, mode=CompressWeightsMode.INT4_ASYM, group_size=32, dataset=nncf.Dataset([x]), hqq=True
    )
    expected = compressed(x)
    torch.testing.assert_close(compressed.float()(x), expected, rtol=1e-3, atol=1e-3)


def test_solver_runs_on_torch_tensors():
    weight = torch.randn(16, 64)
    config = WeightCompressionConfig(CompressWeightsMode.INT4_ASYM, group_size=32)
    params = HQQ(CompressWeightsMode.INT4_ASYM).calculate_quantization_params(Tensor(weight), 1, config)
    assert params.scale.backend == params.zero_point.backend == TensorBackend.torch
    assert params.zero_point.data.dtype == torch.float16 and params.zero_point.data.device == weight.device
    assert tuple(params.scale.shape) == (16, 2, 1)


def test_fq_format_is_refused():
    model, x = model_and_input()
    with pytest.raises(nncf.ParameterNotSupportedError):
        nncf.compress_weights(
            model,
            mode=CompressWeightsMode.INT4_ASYM,
            group_size=-1,
            dataset=nncf.Dataset([x]),
            hqq=True,
            compression_format=CompressionFormat.FQ,
        )
