"""Saving and loading compressed PyTorch models: plain tensors through safetensors bit for bit, sharded
``save_pretrained`` / ``from_pretrained`` without compressing again, fresh (meta-device) models, clear errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import nncf
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from nncf_hqq.torch import checkpoint_config  # noqa: E402
from nncf_hqq.torch import load_compressed_state_dict  # noqa: E402
from nncf_hqq.torch import restore_compressed  # noqa: E402
from tests.torch_models import dataset  # noqa: E402
from tests.torch_models import input_ids  # noqa: E402
from tests.torch_models import logits  # noqa: E402
from tests.torch_models import tiny_llama  # noqa: E402
from tests.torch_models import tiny_qwen3_moe  # noqa: E402

MODE = nncf.CompressWeightsMode
Q_PROJ = "model.layers.0.self_attn.q_proj.weight"
Q_PROJ_HOOK = "__nncf_hooks.post_hooks.model:layers:0:self_attn:q_proj:weight__0.0"


def compressed_llama(**options: object) -> tuple[torch.nn.Module, torch.Tensor]:
    ids = input_ids()
    options = {"mode": MODE.INT4_ASYM, "group_size": 32, **options}
    return nncf.compress_weights(tiny_llama(), hqq=True, dataset=dataset(ids), **options), ids


def assert_same_state(first: torch.nn.Module, second: torch.nn.Module) -> None:
    mine, theirs = first.state_dict(), second.state_dict()
    assert mine.keys() == theirs.keys()
    for key in mine:
        assert mine[key].dtype == theirs[key].dtype and torch.equal(mine[key], theirs[key]), key


def _meta_model(factory: object, **options: object) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    config = factory(**options).config  # type: ignore[operator]
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"mode": MODE.INT4_SYM},
        {"hqq_params": {"zero_point_format": "integer"}},
        {"mode": MODE.INT8_ASYM, "group_size": -1},
    ],
    ids=["int4_asym", "int4_sym", "integer_zero_point", "int8_asym"],
)
def test_state_dict_round_trips_through_safetensors_into_a_fresh_meta_model(options: dict, tmp_path: Path) -> None:
    model, ids = compressed_llama(**options)
    config = checkpoint_config(model)
    json.dumps(config)  # JSON-able
    safetensors_torch.save_file(model.state_dict(), tmp_path / "model.safetensors")
    loaded = safetensors_torch.load_file(tmp_path / "model.safetensors")
    fresh = restore_compressed(tiny_llama(seed=5), json.loads(json.dumps(config)))  # other random weights
    load_compressed_state_dict(fresh, loaded, config)
    assert_same_state(fresh, model)
    np.testing.assert_array_equal(logits(fresh, ids), logits(model, ids))


def test_a_meta_model_loads_its_compressed_tensors_and_names_the_buffers_no_state_dict_holds() -> None:
    model, _ = compressed_llama()
    config = checkpoint_config(model)
    fresh = restore_compressed(_meta_model(tiny_llama), config)
    assert fresh.get_parameter(Q_PROJ).device.type == "meta" and fresh.get_parameter(Q_PROJ).dtype == torch.uint8
    with pytest.raises(nncf.ValidationError, match=r"rotary_emb\.inv_freq"):
        load_compressed_state_dict(fresh, model.state_dict(), config)
    assert torch.equal(fresh.get_parameter(Q_PROJ), model.get_parameter(Q_PROJ))  # assigned, not copied


def test_save_pretrained_shards_split_a_layer_and_from_pretrained_loads_it_as_saved(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    ids = input_ids()
    model = nncf.compress_weights(
        tiny_llama(tie_word_embeddings=True), mode=MODE.INT4_ASYM, group_size=32, hqq=True, dataset=dataset(ids)
    )
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    weight_map = json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"]
    assert weight_map[Q_PROJ] != weight_map[f"{Q_PROJ_HOOK}._scale"]  # one layer's tensors in different shards
    assert json.loads((tmp_path / "config.json").read_text())["quantization_config"]["quant_method"] == "nncf_hqq"
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, device_map="cpu")
    assert_same_state(loaded, model)
    assert loaded.get_parameter("lm_head.weight") is loaded.get_parameter("model.embed_tokens.weight")
    np.testing.assert_array_equal(logits(loaded, ids), logits(model, ids))
    same = loaded.generate(ids, max_new_tokens=4, do_sample=False)
    assert torch.equal(same, model.generate(ids, max_new_tokens=4, do_sample=False))
    loaded.save_pretrained(tmp_path / "again", max_shard_size="20KB")
    assert_same_state(AutoModelForCausalLM.from_pretrained(tmp_path / "again"), model)


def test_moe_experts_round_trip_through_save_pretrained(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    ids = input_ids()
    model = nncf.compress_weights(tiny_qwen3_moe(), mode=MODE.INT4_ASYM, group_size=16, hqq=True, dataset=dataset(ids))
    model.save_pretrained(tmp_path, max_shard_size="30KB")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert loaded.get_parameter("model.layers.0.mlp.experts.gate_up_proj").dtype == torch.uint8
    assert_same_state(loaded, model)
    np.testing.assert_array_equal(logits(loaded, ids), logits(model, ids))


def _rewrite_shard_without(directory: Path, key: str, replacement: torch.Tensor | None) -> None:
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    shard = directory / index["weight_map"][key]
    tensors = safetensors_torch.load_file(shard)
    if replacement is None:
        del tensors[key]
    else:
        tensors[key] = replacement
    safetensors_torch.save_file(tensors, shard, metadata={"format": "pt"})


@pytest.mark.parametrize(
    "key, replacement, match",
    [
        (f"{Q_PROJ_HOOK}._zero_point", None, "_zero_point' is missing"),
        (f"{Q_PROJ_HOOK}._scale", torch.zeros(128, 4, 1, dtype=torch.float32), "_scale' is F32"),
        (Q_PROJ, torch.zeros(4096, 2, dtype=torch.uint8), r"q_proj.weight' is U8 \[4096, 2\]"),
    ],
    ids=["missing", "wrong_dtype", "wrong_shape"],
)
def test_from_pretrained_names_a_missing_or_mismatched_tensor(
    key: str, replacement: torch.Tensor | None, match: str, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    model, _ = compressed_llama()
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    _rewrite_shard_without(tmp_path, key, replacement)
    with pytest.raises(nncf.ValidationError, match=match):
        AutoModelForCausalLM.from_pretrained(tmp_path)


def test_load_compressed_state_dict_names_missing_unexpected_and_mismatched_tensors() -> None:
    model, _ = compressed_llama()
    config = checkpoint_config(model)
    state = dict(model.state_dict())
    del state[f"{Q_PROJ_HOOK}._zero_point"]
    state["model.extra"] = torch.zeros(1)
    state[Q_PROJ] = state[Q_PROJ].to(torch.int8)
    fresh = restore_compressed(_meta_model(tiny_llama), config)
    with pytest.raises(nncf.ValidationError) as raised:
        load_compressed_state_dict(fresh, state, config)
    message = str(raised.value)
    assert "_zero_point' is missing" in message and "'model.extra' is unexpected" in message
    assert "q_proj.weight' is torch.int8" in message


def test_restore_names_a_parameter_the_model_lacks_and_leaves_the_model_alone() -> None:
    model, _ = compressed_llama()
    config = copy.deepcopy(checkpoint_config(model))
    fresh = _meta_model(tiny_llama, layers=1)
    with pytest.raises(nncf.ValidationError, match=r"model\.layers\.1\..*no such parameter"):
        restore_compressed(fresh, config)
    assert not hasattr(fresh, "__nncf_hooks")
    assert fresh.get_parameter(Q_PROJ).dtype == torch.float32


def test_checkpoint_config_describes_every_decompressor() -> None:
    model, _ = compressed_llama()
    config = checkpoint_config(model)
    weights = config["weights"]
    assert len(weights) == 16
    q_proj = weights["post_hooks.model:layers:0:self_attn:q_proj:weight__0.0"]
    assert q_proj == {
        "codes": "u4",
        "zero_point": "f16",
        "compressed_shape": [128, 4, 32],
        "scale_shape": [128, 4, 1],
        "stored_shape": [8192, 1],
    }
    embeddings = weights["post_hooks.model:embed_tokens:weight__0.0"]
    assert embeddings["codes"] == "u8" and embeddings["zero_point"] == "u8"
