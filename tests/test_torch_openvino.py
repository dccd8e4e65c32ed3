"""The Torch path and the OpenVINO path give the same model: same codes, scales and zero points from the same
weights, the same outputs, and ``openvino.convert_model`` of the Torch result keeps HQQ's constants."""

from __future__ import annotations

import copy
from collections import Counter

import nncf
import numpy as np
import openvino as ov
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import nncf_hqq  # noqa: E402, F401
from nncf_hqq.llm import zoo  # noqa: E402
from tests.torch_models import dataset  # noqa: E402
from tests.torch_models import input_ids  # noqa: E402
from tests.torch_models import logits  # noqa: E402
from tests.torch_models import openvino_compressed_tensors  # noqa: E402
from tests.torch_models import run_openvino  # noqa: E402
from tests.torch_models import tiny_llama  # noqa: E402
from tests.torch_models import to_openvino  # noqa: E402
from tests.torch_models import torch_compressed_tensors  # noqa: E402

MODE = nncf.CompressWeightsMode
#: The constant names of a model converted through ``CausalLogits`` start with this before the parameter name.
CONVERTED_PREFIX = "self.model."


def assert_same_compressed_tensors(torch_side: dict, ov_side: dict, hqq_names: set[str]) -> None:
    """HQQ's weights (float zero point) identical; the weights NNCF writes with RTN on each path within one code of
    each other where the two RTN implementations round a value on a half step differently."""
    assert torch_side.keys() == ov_side.keys()
    for name in sorted(torch_side):
        mine, theirs = torch_side[name], ov_side[name]
        assert mine["codes"].shape == theirs["codes"].shape, name
        if name in hqq_names:
            np.testing.assert_array_equal(mine["codes"], theirs["codes"], err_msg=name)
            np.testing.assert_array_equal(mine["scale"], theirs["scale"], err_msg=name)
            np.testing.assert_array_equal(mine["zero_point"], theirs["zero_point"], err_msg=name)
            continue
        assert np.mean(mine["codes"] != theirs["codes"]) < 1e-3, name
        assert np.abs(mine["codes"].astype(int) - theirs["codes"]).max() <= 1, name
        np.testing.assert_allclose(mine["scale"], theirs["scale"], rtol=1e-3, err_msg=name)


@pytest.fixture(scope="module")
def converted() -> tuple[torch.nn.Module, torch.Tensor, ov.Model]:
    """The small Llama, its input, and its float OpenVINO conversion (converted once: TorchScript tracing is slow)."""
    model, ids = tiny_llama(), input_ids()
    return model, ids, to_openvino(model, ids)


@pytest.mark.parametrize(
    "mode, group_size",
    [(MODE.INT4_ASYM, 32), (MODE.INT4_SYM, 32), (MODE.INT8_ASYM, -1)],
    ids=["int4_asym", "int4_sym", "int8_asym"],
)
def test_torch_and_openvino_paths_write_the_same_weights(
    converted: tuple[torch.nn.Module, torch.Tensor, ov.Model], mode: nncf.CompressWeightsMode, group_size: int
) -> None:
    model, ids, float_ov_model = converted
    ov_model = nncf.compress_weights(float_ov_model.clone(), mode=mode, group_size=group_size, hqq=True)
    torch_model = nncf.compress_weights(
        copy.deepcopy(model), mode=mode, group_size=group_size, hqq=True, dataset=dataset(ids)
    )
    torch_side = torch_compressed_tensors(torch_model)
    ov_side = openvino_compressed_tensors(ov_model, CONVERTED_PREFIX)
    # HQQ decides every weight of the primary mode except the value projections (RTN by default); under INT4 the
    # embeddings and the LM head are in the INT8 backup precision (RTN), under INT8_ASYM in the primary one.
    in_primary_mode = {n for n in torch_side if "layers" in n or mode == MODE.INT8_ASYM}
    hqq_names = {n for n in in_primary_mode if "v_proj" not in n}
    assert len(hqq_names) == (14 if mode == MODE.INT8_ASYM else 12)
    if mode != MODE.INT4_SYM:
        assert {n for n, t in torch_side.items() if t["zero_point_format"] == "f16"} == hqq_names
    assert_same_compressed_tensors(torch_side, ov_side, hqq_names)
    difference = np.abs(logits(torch_model, ids) - run_openvino(ov_model, ids))
    assert difference.max() < 2e-3 * np.abs(logits(model, ids)).max()


def test_converted_torch_model_keeps_hqq_constants_and_matches_the_openvino_path(
    converted: tuple[torch.nn.Module, torch.Tensor, ov.Model],
) -> None:
    model, ids, float_ov_model = converted
    ov_path = nncf.compress_weights(float_ov_model.clone(), mode=MODE.INT4_ASYM, group_size=32, hqq=True)
    torch_model = nncf.compress_weights(
        copy.deepcopy(model), mode=MODE.INT4_ASYM, group_size=32, hqq=True, dataset=dataset(ids)
    )
    exported = to_openvino(torch_model, ids)

    def constant_types(m: ov.Model) -> Counter:
        return Counter(
            str(op.get_element_type())
            for op in m.get_ops()
            if op.get_type_name() == "Constant" and op.shape and np.prod(list(op.shape)) >= 64
        )

    assert constant_types(exported) == constant_types(ov_path)
    assert constant_types(exported)["<Type: 'uint4_t'>"] >= 14
    ours = openvino_compressed_tensors(ov_path, CONVERTED_PREFIX)
    q_proj = ours["model.layers.0.self_attn.q_proj.weight"]
    exported_constants = {op.get_friendly_name(): op for op in exported.get_ops() if op.get_type_name() == "Constant"}
    f16_zero_points = [
        op.get_data()
        for op in exported_constants.values()
        if op.get_element_type() == ov.Type.f16 and tuple(op.shape) == q_proj["zero_point"].shape
    ]
    assert any(np.array_equal(z.astype(np.float32), q_proj["zero_point"]) for z in f16_zero_points)
    np.testing.assert_allclose(run_openvino(exported, ids), run_openvino(ov_path, ids), rtol=0, atol=1e-5)


@pytest.mark.slow
def test_smollm2_weights_give_the_same_codes_on_both_paths() -> None:
    """SmolLM2-135M (the cached float HF checkpoint and its OpenVINO IR): every weight HQQ decides gets identical
    codes, scales and zero points on the Torch and the OpenVINO path (tied embeddings included, in INT8 RTN)."""
    hf_dir = zoo.cache_dir() / "hf" / zoo.SMOLLM2
    ir = zoo.cache_dir() / "ov" / zoo.SMOLLM2 / "openvino_model.xml"
    if not hf_dir.is_dir() or not ir.is_file():
        pytest.skip("SmolLM2 is not in the model cache (nncf-hqq demo builds it)")
    from transformers import AutoModelForCausalLM

    torch_model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype="float32").eval()
    ids = input_ids(length=8)
    torch_model = nncf.compress_weights(torch_model, mode=MODE.INT4_ASYM, group_size=64, hqq=True, dataset=dataset(ids))
    ov_model = nncf.compress_weights(ov.Core().read_model(ir), mode=MODE.INT4_ASYM, group_size=64, hqq=True)
    torch_side, ov_side = torch_compressed_tensors(torch_model), openvino_compressed_tensors(ov_model)
    hqq_names = {n for n, t in torch_side.items() if t["zero_point_format"] == "f16"}
    assert len(hqq_names) == 30 * 6  # every layer's q, k, o, gate, up, down; v keeps RTN
    assert_same_compressed_tensors(torch_side, ov_side, hqq_names)
