import pytest
import torch

import nncf
from nncf import CompressWeightsMode
from nncf.common.factory import build_graph
from nncf.parameters import CompressionFormat
from nncf.quantization.algorithms.weight_compression.torch_backend import PTHQQAlgoBackend
from nncf.torch.function_hook import get_hook_storage
from nncf.torch.model_creation import wrap_model
from nncf.torch.quantization.layers import BaseWeightsDecompressor


class NormMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(64)
        self.up = torch.nn.Linear(64, 128)
        self.down = torch.nn.Linear(128, 64)

    def forward(self, x):
        return self.down(torch.relu(self.up(self.norm(x))))


def model_and_input() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = NormMLP().eval()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 2.0)
        model.norm.bias.uniform_(-0.5, 0.5)
    return model, torch.randn(1, 8, 64)


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


def test_layer_norm_affine_is_found():
    model, x = model_and_input()
    wrapped = wrap_model(model, example_input=x, trace_parameters=True)
    graph = build_graph(wrapped)
    up = next(node for node in graph.get_all_nodes() if node.node_name.startswith("up/linear"))
    gamma, beta = PTHQQAlgoBackend().get_normalization_affine(wrapped, graph, up, 64)
    assert torch.equal(gamma.data, model.norm.weight) and torch.equal(beta.data, model.norm.bias)


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
