"""MoE experts kept as 3D parameters outside ``nn.Linear`` (transformers 5): NNCF leaves them float, HQQ compresses
the ones ``target_parameters`` names (by default transformers' expert tensors) and the model still runs."""

from __future__ import annotations

import copy

import nncf
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import nncf_hqq  # noqa: E402, F401
from nncf_hqq.torch.decompression import FloatZeroPointDecompressor  # noqa: E402
from nncf_hqq.torch.targets import ParameterTarget  # noqa: E402
from nncf_hqq.torch.targets import check_target  # noqa: E402
from nncf_hqq.torch.targets import reduction_axis  # noqa: E402
from tests.torch_models import dataset  # noqa: E402
from tests.torch_models import input_ids  # noqa: E402
from tests.torch_models import logits  # noqa: E402
from tests.torch_models import tiny_qwen3_moe  # noqa: E402
from tests.torch_models import torch_compressed_tensors  # noqa: E402

MODE = nncf.CompressWeightsMode
EXPERTS = [f"model.layers.{i}.mlp.experts.{name}" for i in (0, 1) for name in ("gate_up_proj", "down_proj")]


def test_nncf_alone_leaves_the_experts_float_and_hqq_compresses_them() -> None:
    ids = input_ids()
    model = tiny_qwen3_moe()
    reference = logits(model, ids)
    nncf_only = nncf.compress_weights(copy.deepcopy(model), mode=MODE.INT4_ASYM, group_size=16, dataset=dataset(ids))
    assert all(nncf_only.get_parameter(name).dtype == torch.float32 for name in EXPERTS)
    compressed = nncf.compress_weights(model, mode=MODE.INT4_ASYM, group_size=16, hqq=True, dataset=dataset(ids))
    stored = torch_compressed_tensors(compressed)
    for name in EXPERTS:
        assert compressed.get_parameter(name).dtype == torch.uint8
        assert compressed.get_parameter(name).shape[0] == 4  # packed codes keep the experts axis
        assert stored[name]["zero_point_format"] == "f16"
    assert stored[EXPERTS[0]]["codes"].shape == (4, 64, 4, 16)  # [experts, 2 * inter, groups, group size]
    error = np.linalg.norm(logits(compressed, ids) - reference) / np.linalg.norm(reference)
    assert error < 0.3
    generated = compressed.generate(ids, max_new_tokens=4, do_sample=False)
    assert tuple(generated.shape) == (1, ids.shape[1] + 4)


@pytest.mark.parametrize(
    "mode", [MODE.INT4_ASYM, MODE.INT4_SYM, MODE.INT8_ASYM], ids=["int4_asym", "int4_sym", "int8_asym"]
)
def test_every_experts_implementation_runs_the_compressed_experts(mode: nncf.CompressWeightsMode) -> None:
    """transformers' grouped and batched expert forwards read the number of experts from the parameter's shape and
    index it by expert; the eager one loops over experts. All three give the same logits on the compressed model."""
    ids = input_ids()
    group_size = -1 if mode == MODE.INT8_ASYM else 16
    compressed = nncf.compress_weights(
        tiny_qwen3_moe(), mode=mode, group_size=group_size, hqq=True, dataset=dataset(ids)
    )
    results = {}
    for implementation in ("grouped_mm", "batched_mm", "eager"):
        compressed.set_experts_implementation(implementation)
        results[implementation] = logits(compressed, ids)
    np.testing.assert_allclose(results["grouped_mm"], results["eager"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(results["batched_mm"], results["eager"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "target_parameters, compressed_experts",
    [((), []), (["*.layers.1.mlp.experts.down_proj"], ["model.layers.1.mlp.experts.down_proj"])],
    ids=["none", "one_pattern"],
)
def test_target_parameters_choose_the_parameters(target_parameters: list[str], compressed_experts: list[str]) -> None:
    ids = input_ids()
    compressed = nncf.compress_weights(
        tiny_qwen3_moe(),
        mode=MODE.INT4_SYM,
        group_size=16,
        hqq=True,
        target_parameters=target_parameters,
        dataset=dataset(ids),
    )
    assert [n for n in EXPERTS if compressed.get_parameter(n).dtype == torch.uint8] == compressed_experts
    assert np.isfinite(logits(compressed, ids)).all()


def test_expert_importance_comes_from_the_post_attention_norm() -> None:
    """gate_up_proj reads the post-attention RMSNorm's output (gathered per expert): its groups are weighted by
    gamma^2; down_proj reads the gated activation: no importance. Checked through what HQQ is given."""
    from nncf_hqq.hqq import HQQ

    seen: list[tuple[tuple[int, ...], np.ndarray | None]] = []
    original = HQQ.compress

    def spy(self, weight, axis, config, importance=None, role=None):  # type: ignore[no-untyped-def]
        if len(weight.shape) == 3:
            seen.append((tuple(weight.shape), importance))
        return original(self, weight, axis, config, importance, role)

    model, ids = tiny_qwen3_moe(), input_ids()
    gammas = [layer.post_attention_layernorm.weight.detach().numpy().astype(np.float64) for layer in model.model.layers]
    HQQ.compress = spy  # type: ignore[method-assign]
    try:
        nncf.compress_weights(model, mode=MODE.INT4_ASYM, group_size=16, hqq=True, dataset=dataset(ids))
    finally:
        HQQ.compress = original  # type: ignore[method-assign]
    assert sorted(shape for shape, _ in seen) == [(4, 64, 32), (4, 64, 32), (4, 64, 64), (4, 64, 64)]
    assert all(importance is None for shape, importance in seen if shape == (4, 64, 32))
    gate_up = [importance for shape, importance in seen if shape == (4, 64, 64)]
    for gamma, importance in zip(gammas, gate_up, strict=True):
        np.testing.assert_allclose(importance, gamma**2 + 1e-4 * np.mean(gamma**2), rtol=1e-6)


def test_transposed_experts_group_along_their_input_axis() -> None:
    experts = torch.nn.Module()
    experts.gate_up_proj = torch.nn.Parameter(torch.randn(2, 8, 6))
    experts.is_transposed = True
    owner = torch.nn.Module()
    owner.experts = experts
    assert reduction_axis(owner, "experts.gate_up_proj") == 1
    experts.is_transposed = False
    assert reduction_axis(owner, "experts.gate_up_proj") == 2


@pytest.mark.parametrize(
    "values, group_size, match",
    [
        (torch.randn(2, 8, 6), 4, "not a multiple of group_size=4"),
        (torch.randn(3, 3, 3), -1, "odd number"),
        (torch.randn(8), -1, "only matrices"),
        (torch.full((2, 4, 8), float("inf")), 8, "NaN or Inf"),
        (torch.ones(2, 8, dtype=torch.int32), 8, "not floats"),
    ],
    ids=["group_size", "odd_count", "vector", "infinite", "integer"],
)
def test_target_checks_name_the_parameter(values: torch.Tensor, group_size: int, match: str) -> None:
    from nncf_hqq._nncf import WeightCompressionConfig

    config = WeightCompressionConfig(mode=MODE.INT4_ASYM, group_size=group_size)
    target = ParameterTarget("block.experts.weight", values.ndim - 1, config)
    with pytest.raises(nncf.ValidationError, match=match) as raised:
        check_target(target, values)
    assert "block.experts.weight" in str(raised.value)


def test_expert_decompressor_is_hooked_on_the_parameter() -> None:
    ids = input_ids()
    compressed = nncf.compress_weights(
        tiny_qwen3_moe(), mode=MODE.INT4_ASYM, group_size=16, hqq=True, dataset=dataset(ids)
    )
    hooks = dict(compressed.get_submodule("__nncf_hooks").named_hooks())
    hook = hooks["post_hooks.model:layers:0:mlp:experts:gate_up_proj__0.0"]
    assert isinstance(hook, FloatZeroPointDecompressor)
    decompressed = hook(compressed.get_parameter("model.layers.0.mlp.experts.gate_up_proj"))
    assert tuple(decompressed.shape) == (4, 64, 64) and decompressed.dtype == torch.float32
