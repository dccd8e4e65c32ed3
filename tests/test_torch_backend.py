"""HQQ on PyTorch models through NNCF's Torch backend: modes, options, decompressors, graph facts, bad input."""

from __future__ import annotations

import copy

import nncf
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import nncf_hqq  # noqa: E402
from nncf_hqq._nncf import INT4AsymmetricWeightsDecompressor  # noqa: E402
from nncf_hqq._nncf import INT4SymmetricWeightsDecompressor  # noqa: E402
from nncf_hqq._nncf import INT8AsymmetricWeightsDecompressor  # noqa: E402
from nncf_hqq._nncf import INT8SymmetricWeightsDecompressor  # noqa: E402
from nncf_hqq._nncf import NNCFGraph  # noqa: E402
from nncf_hqq._nncf import original_compress_weights  # noqa: E402
from nncf_hqq.parameters import HQQ_REFERENCE  # noqa: E402
from nncf_hqq.parameters import AttentionRole  # noqa: E402
from nncf_hqq.torch.decompression import FloatZeroPointDecompressor  # noqa: E402
from nncf_hqq.torch.graph import attention_role  # noqa: E402
from nncf_hqq.torch.graph import norm_gain_importance  # noqa: E402
from tests.torch_models import dataset  # noqa: E402
from tests.torch_models import input_ids  # noqa: E402
from tests.torch_models import logits  # noqa: E402
from tests.torch_models import tiny_llama  # noqa: E402
from tests.torch_models import torch_compressed_tensors  # noqa: E402

MODE = nncf.CompressWeightsMode
Q_PROJ = "model.layers.0.self_attn.q_proj.weight"


def hooks_by_parameter(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    return {
        name.split(".")[-2].rsplit("__", 1)[0].replace(":", "."): hook
        for name, hook in model.get_submodule("__nncf_hooks").named_hooks()
    }


def relative_error(model: torch.nn.Module, reference: np.ndarray, ids: torch.Tensor) -> float:
    return float(np.linalg.norm(logits(model, ids) - reference) / np.linalg.norm(reference))


@pytest.mark.parametrize(
    "mode, group_size, hqq_params, decompressor",
    [
        (MODE.INT4_ASYM, 32, None, FloatZeroPointDecompressor),
        (MODE.INT4_ASYM, 32, {"zero_point_format": "integer"}, INT4AsymmetricWeightsDecompressor),
        (MODE.INT4_SYM, 32, None, INT4SymmetricWeightsDecompressor),
        (MODE.INT8_ASYM, -1, None, FloatZeroPointDecompressor),
        (MODE.INT8_SYM, -1, None, INT8SymmetricWeightsDecompressor),
    ],
    ids=["int4_asym", "int4_asym_integer_zero_point", "int4_sym", "int8_asym", "int8_sym"],
)
def test_modes_write_their_decompressors_and_keep_the_model_close(
    mode: nncf.CompressWeightsMode, group_size: int, hqq_params: dict | None, decompressor: type
) -> None:
    model, ids = tiny_llama(), input_ids()
    reference = logits(model, ids)
    compressed = nncf.compress_weights(
        model, mode=mode, group_size=group_size, hqq=True, hqq_params=hqq_params, dataset=dataset(ids)
    )
    hooks = hooks_by_parameter(compressed)
    assert isinstance(hooks[Q_PROJ], decompressor)
    assert len(hooks) == 16  # 14 projections, embeddings, LM head
    # The value projections keep NNCF's RTN: an integer zero point (NNCF's module) in the asymmetric modes.
    value_projection = hooks["model.layers.0.self_attn.v_proj.weight"]
    if mode == MODE.INT4_ASYM:
        assert isinstance(value_projection, INT4AsymmetricWeightsDecompressor)
    if mode == MODE.INT8_ASYM:
        assert isinstance(value_projection, INT8AsymmetricWeightsDecompressor)
    assert relative_error(compressed, reference, ids) < (0.05 if mode in (MODE.INT8_ASYM, MODE.INT8_SYM) else 0.3)


def test_bf16_weights_get_the_codes_of_their_float32_values() -> None:
    """HQQ sees a bf16 weight as the float32 values it holds; the decompressor returns bf16."""
    ids = input_ids()
    model = tiny_llama().to(torch.bfloat16)
    widened = copy.deepcopy(model).to(torch.float32)
    options = {"mode": MODE.INT4_ASYM, "group_size": 32, "hqq": True, "dataset": dataset(ids)}
    narrow, wide = nncf.compress_weights(model, **options), nncf.compress_weights(widened, **options)
    ours, theirs = torch_compressed_tensors(narrow)[Q_PROJ], torch_compressed_tensors(wide)[Q_PROJ]
    np.testing.assert_array_equal(ours["codes"], theirs["codes"])
    np.testing.assert_array_equal(ours["scale"], theirs["scale"])
    weight = hooks_by_parameter(narrow)[Q_PROJ](narrow.get_parameter(Q_PROJ))
    assert weight.dtype == torch.bfloat16 and np.isfinite(logits(narrow, ids)).all()


def test_state_dict_holds_packed_codes_and_f16_parameters() -> None:
    model, ids = tiny_llama(), input_ids()
    compressed = nncf.compress_weights(model, mode=MODE.INT4_ASYM, group_size=32, hqq=True, dataset=dataset(ids))
    state = compressed.state_dict()
    assert all(type(t) is torch.Tensor for t in state.values())
    assert state[Q_PROJ].dtype == torch.uint8 and tuple(state[Q_PROJ].shape) == (128 * 128 // 2, 1)
    hook = "__nncf_hooks.post_hooks.model:layers:0:self_attn:q_proj:weight__0.0"
    assert state[f"{hook}._scale"].dtype == torch.float16 and tuple(state[f"{hook}._scale"].shape) == (128, 4, 1)
    assert state[f"{hook}._zero_point"].dtype == torch.float16


def test_float_zero_point_decompressor_computes_codes_minus_zero_point_times_scale_in_f16() -> None:
    codes = torch.tensor([[[0, 15, 7, 8]], [[1, 2, 3, 4]]], dtype=torch.uint8)  # [out=2, groups=1, 4]
    scale = torch.tensor([[[0.1]], [[2.5]]])
    zero_point = torch.tensor([[[7.3]], [[0.5]]])
    module = FloatZeroPointDecompressor(scale, zero_point, (2, 1, 4), 4, (2, 4), torch.float32)
    packed = module.pack_weight(codes)
    assert packed.dtype == torch.uint8 and packed.numel() == 4
    expected = (codes.numpy().astype(np.float16) - np.float16(zero_point.numpy())) * np.float16(scale.numpy())
    result = module(packed)
    assert result.dtype == torch.float32 and tuple(result.shape) == (2, 4)
    np.testing.assert_array_equal(result.numpy(), expected.reshape(2, 4).astype(np.float32))
    with pytest.raises(ValueError, match="not in"):
        module.pack_weight(torch.tensor([16], dtype=torch.uint8))


def test_u4_packing_gives_nncf_s_bytes() -> None:
    from nncf_hqq._nncf import pack_uint4
    from nncf_hqq.torch.decompression import pack_u4

    codes = torch.randint(0, 16, (6, 3, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    expected = pack_uint4(codes)
    packed = torch.from_numpy(pack_u4(codes.numpy()))
    module = FloatZeroPointDecompressor(torch.ones(6, 3, 1), torch.zeros(6, 3, 1), (6, 3, 8))
    assert torch.equal(packed, expected) and torch.equal(module.pack_weight(codes), expected)
    assert tuple(expected.shape) == (72, 1)


def test_hqq_params_reach_the_solver() -> None:
    ids = input_ids()
    default = nncf.compress_weights(tiny_llama(), mode=MODE.INT4_ASYM, group_size=32, hqq=True, dataset=dataset(ids))
    reference = nncf.compress_weights(
        tiny_llama(), mode=MODE.INT4_ASYM, group_size=32, hqq=True, hqq_params=HQQ_REFERENCE, dataset=dataset(ids)
    )
    ours, theirs = torch_compressed_tensors(default), torch_compressed_tensors(reference)
    assert not np.array_equal(ours[Q_PROJ]["scale"], theirs[Q_PROJ]["scale"])
    # HQQ_REFERENCE has no attention roles: its value projections get HQQ's float zero point too.
    assert theirs["model.layers.0.self_attn.v_proj.weight"]["zero_point_format"] == "f16"


def test_ratio_backup_mode_and_ignored_scope_are_nncf_s() -> None:
    ids = input_ids()
    compressed = nncf.compress_weights(
        tiny_llama(),
        mode=MODE.INT4_ASYM,
        group_size=32,
        ratio=0.5,
        backup_mode=nncf.BackupMode.NONE,
        ignored_scope=nncf.IgnoredScope(names=["model.layers.1.mlp.down_proj.weight"]),
        hqq=True,
        dataset=dataset(ids),
    )
    hooks = hooks_by_parameter(compressed)
    assert "model.layers.1.mlp.down_proj.weight" not in hooks
    assert compressed.get_parameter("model.layers.1.mlp.down_proj.weight").dtype == torch.float32
    assert all(isinstance(h, FloatZeroPointDecompressor | INT4AsymmetricWeightsDecompressor) for h in hooks.values())
    assert 4 <= len(hooks) <= 10  # half the ratio-defining weights (by size) in INT4, the rest float


@pytest.mark.parametrize(
    "options",
    [{"awq": True}, {"awq": True, "scale_estimation": True, "subset_size": 16}],
    ids=["data_free_awq", "awq_scale_estimation"],
)
def test_hqq_composes_with_nncf_s_data_steps(options: dict) -> None:
    ids = input_ids(length=32)
    model = tiny_llama()
    reference = logits(model, ids)
    plain = nncf.compress_weights(
        copy.deepcopy(model), mode=MODE.INT4_ASYM, group_size=32, hqq=True, dataset=dataset(ids)
    )
    composed = nncf.compress_weights(
        model, mode=MODE.INT4_ASYM, group_size=32, hqq=True, dataset=dataset(ids), **options
    )
    assert isinstance(hooks_by_parameter(composed)[Q_PROJ], FloatZeroPointDecompressor)
    # AWQ scales the down projections' input channels (folded into the up projections) before HQQ compresses them.
    down = "model.layers.0.mlp.down_proj.weight"
    ours, theirs = torch_compressed_tensors(plain), torch_compressed_tensors(composed)
    assert not np.array_equal(ours[down]["scale"], theirs[down]["scale"])
    assert relative_error(composed, reference, ids) < 0.3


def test_hqq_false_is_nncf_s_own_call() -> None:
    ids = input_ids()
    ours = nncf.compress_weights(tiny_llama(), mode=MODE.INT4_ASYM, group_size=32, dataset=dataset(ids))
    theirs = original_compress_weights(tiny_llama(), mode=MODE.INT4_ASYM, group_size=32, dataset=dataset(ids))
    mine, other = ours.state_dict(), theirs.state_dict()
    assert mine.keys() == other.keys()
    assert all(torch.equal(mine[key], other[key]) for key in mine)
    assert not hasattr(ours.config, "quantization_config")


def test_graph_facts_of_a_llama_layer() -> None:
    model, ids = tiny_llama(), input_ids()
    graph = wrap_model_graph(model, ids)
    nodes = {n.node_name: n for n in graph.get_all_nodes()}
    roles = {name: attention_role(graph, nodes[f"model/self_attn/{name}/linear/0"]) for name in ("q_proj", "v_proj")}
    assert roles == {"q_proj": AttentionRole.QUERY, "v_proj": AttentionRole.VALUE}
    assert attention_role(graph, nodes["model/self_attn/o_proj/linear/0"]) is None  # stops at the next MatMuls
    gamma = model.model.layers[0].input_layernorm.weight.detach().numpy().astype(np.float64)
    importance = norm_gain_importance(graph, model, nodes["model/self_attn/q_proj/linear/0"], 0, 128)
    np.testing.assert_allclose(importance, gamma**2 + 1e-4 * np.mean(gamma**2), rtol=1e-6)
    assert norm_gain_importance(graph, model, nodes["model/mlp/down_proj/linear/0"], 0, 256) is None


def wrap_model_graph(model: torch.nn.Module, ids: torch.Tensor) -> NNCFGraph:
    from nncf.torch.model_creation import wrap_model as trace

    return trace(copy.deepcopy(model), example_input={"input_ids": ids}, trace_parameters=True).get_graph()


@pytest.mark.parametrize(
    "mode, options, match",
    [
        (nncf_hqq.LowBitMode.INT2_ASYM, {}, "OpenVINO models only"),
        (MODE.INT3_SYM, {}, "PyTorch models"),
        (MODE.INT4_ASYM, {"gptq": True}, "GPTQ"),
        (MODE.INT4_ASYM, {"target_parameters": "*.experts.*"}, "sequence of glob patterns"),
        (MODE.INT4_ASYM, {"target_parameters": ["*.no_such_parameter"]}, "no_such_parameter"),
        (MODE.INT4_ASYM, {"hqq_params": {"zero_point_format": "split"}}, "OpenVINO graph format"),
    ],
    ids=["low_bit_mode", "int3_sym", "gptq", "target_parameters_string", "pattern_matching_nothing", "split"],
)
def test_bad_requests_are_refused_before_the_model_changes(mode: object, options: dict, match: str) -> None:
    model, ids = tiny_llama(), input_ids()
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(nncf.ValidationError, match=match):
        nncf.compress_weights(model, mode=mode, group_size=32, hqq=True, dataset=dataset(ids), **options)
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)


def test_a_nan_weight_is_named_and_the_model_is_not_modified() -> None:
    model, ids = tiny_llama(), input_ids()
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight[3, 5] = float("nan")
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(nncf.ValidationError, match="up_proj"):
        nncf.compress_weights(model, mode=MODE.INT4_ASYM, group_size=32, hqq=True, dataset=dataset(ids))
    after = model.state_dict()
    assert all(torch.equal(after[k], before[k]) or k.endswith("up_proj.weight") for k in before)
    assert after["model.layers.0.self_attn.q_proj.weight"].dtype == torch.float32


def test_target_parameters_need_hqq_and_a_torch_model() -> None:
    with pytest.raises(nncf.ValidationError, match="hqq is not enabled"):
        nncf.compress_weights(tiny_llama(), mode=MODE.INT4_ASYM, target_parameters=["*"], dataset=dataset(input_ids()))
    from tests.ov_models import transformer_like

    with pytest.raises(nncf.ValidationError, match="PyTorch models only"):
        nncf.compress_weights(transformer_like(), mode=MODE.INT4_ASYM, hqq=True, target_parameters=["*"])
