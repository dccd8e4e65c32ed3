"""Self-calibration (``nncf_hqq.self_calibration``) and ``compress_weights(..., dataset="self")``.

The sampling maths is checked against exact distributions; the generation on the tiny exported Llama of
tests/conftest.py (needs the ``llm`` extra) against its own full-sequence logits: greedy generation (temperature
0) must pick, at every position, the argmax of the logits the model gives the finished sequence.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nncf
import numpy as np
import openvino as ov
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from nncf.common.logging import nncf_logger

import nncf_hqq
from nncf_hqq import self_calibration as sc
from nncf_hqq.llm import compression
from nncf_hqq.llm import evaluation as ev
from nncf_hqq.llm.layout import ir_xml
from nncf_hqq.llm.options import CompressionOptions
from nncf_hqq.llm.options import render
from tests.ov_models import transformer_like

TINY = sc.SelfCalibration(num_samples=4, seq_len=12, batch_size=3, seed=7)


# --------------------------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "named"),
    [
        pytest.param({"num_samples": 0}, "num_samples", id="no-samples"),
        pytest.param({"seq_len": 1.5}, "seq_len", id="float-length"),
        pytest.param({"batch_size": True}, "batch_size", id="bool-batch"),
        pytest.param({"seed": -1}, "seed", id="negative-seed"),
        pytest.param({"temperature": -0.1}, "temperature", id="negative-temperature"),
        pytest.param({"temperature": float("nan")}, "temperature", id="nan-temperature"),
        pytest.param({"top_p": 0.0}, "top_p", id="empty-nucleus"),
        pytest.param({"top_p": 1.5}, "top_p", id="top-p-above-one"),
        pytest.param({"start_token_ids": ()}, "start_token_ids", id="no-start-tokens"),
        pytest.param({"start_token_ids": (-1,)}, "start_token_ids", id="negative-token"),
        pytest.param({"start_token_ids": tuple(range(256))}, "seq_len", id="start-fills-sequence"),
        pytest.param({"prompt_token_ids": ()}, "prompt_token_ids", id="empty-prompt-text"),
        pytest.param({"prompt_token_ids": (3, -2)}, "prompt_token_ids", id="negative-prompt-token"),
        pytest.param({"prompt_token_ids": "abc"}, "prompt_token_ids", id="prompt-text-not-token-ids"),
        pytest.param({"prompt_token_ids": (1, 2, 3), "prompt_len": 4}, "prompt_len=4", id="prompt-text-too-short"),
        pytest.param({"prompt_len": 0}, "prompt_len", id="no-prompt-tokens"),
        pytest.param(
            {"start_token_ids": (1,), "prompt_token_ids": tuple(range(200)), "prompt_len": 127},
            "seq_len",
            id="start-and-prompt-fill-sequence",
        ),
        pytest.param({"temprature": 1.0}, "temprature", id="unknown-field"),
    ],
)
def test_bad_parameters_name_the_field(changes: dict[str, Any], named: str) -> None:
    with pytest.raises(nncf.ValidationError, match=named):
        sc.SELF_CALIBRATION_DEFAULT.replace(**changes)


def test_start_tokens_become_a_tuple_of_ints() -> None:
    params = sc.SelfCalibration(start_token_ids=[np.int64(1), 5])  # type: ignore[arg-type]
    assert params.start_token_ids == (1, 5)
    assert all(type(i) is int for i in params.start_token_ids)


@pytest.mark.parametrize("start", [pytest.param(None, id="no-start"), pytest.param((1, 2), id="bos-like-start")])
def test_prompt_windows_follow_the_start_tokens(start: tuple[int, ...] | None) -> None:
    text = tuple(range(100, 140))
    params = sc.SelfCalibration(num_samples=64, start_token_ids=start, prompt_token_ids=text, prompt_len=5)
    starts = sc.start_tokens(params, 1000, np.random.default_rng(0))
    fixed = len(start or ())
    assert starts.shape == (64, fixed + 5)
    if start:
        assert (starts[:, :fixed] == start).all()
    windows = starts[:, fixed:]
    # consecutive tokens of the text (its ids count up by one), each window inside it, the offsets spread out
    assert (np.diff(windows, axis=1) == 1).all()
    assert windows.min() >= 100 and windows.max() <= 139
    assert len(set(windows[:, 0].tolist())) > 10


# --------------------------------------------------------------------------------------------------------------------
# Sampling maths
# --------------------------------------------------------------------------------------------------------------------
PROBS = np.array([[0.5, 0.3, 0.15, 0.05]])


@pytest.mark.parametrize(
    ("temperature", "top_p", "expected"),
    [
        pytest.param(1.0, 1.0, PROBS[0], id="plain-softmax"),
        pytest.param(1.0, 0.8, [0.625, 0.375, 0.0, 0.0], id="nucleus-stops-where-mass-reaches-p"),
        pytest.param(1.0, 0.81, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0], id="nucleus-includes-crossing-token"),
        pytest.param(1.0, 0.4, [1.0, 0.0, 0.0, 0.0], id="top-token-alone"),
        pytest.param(0.0, 1.0, [1.0, 0.0, 0.0, 0.0], id="greedy"),
        pytest.param(2.0, 1.0, np.sqrt(PROBS[0]) / np.sqrt(PROBS[0]).sum(), id="temperature-two-is-square-root"),
    ],
)
def test_nucleus_probabilities_exact(temperature: float, top_p: float, expected: Any) -> None:
    got = sc.nucleus_probabilities(np.log(PROBS) + 3.0, temperature, top_p)
    np.testing.assert_allclose(got[0], expected, rtol=1e-12, atol=1e-15)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), top_p=st.floats(0.05, 0.999), spread=st.floats(0.1, 8.0))
def test_partial_sort_nucleus_equals_the_full_sort(seed: int, top_p: float, spread: float) -> None:
    logits = np.random.default_rng(seed).standard_normal(3000) * spread
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    partial = sc.nucleus_indices(probs, top_p, candidates=64)
    full = sc.nucleus_indices(probs, top_p, candidates=10**9)
    assert set(partial.tolist()) == set(full.tolist())


def test_sampled_frequencies_follow_the_probabilities() -> None:
    rng = np.random.default_rng(0)
    probs = np.tile(PROBS, (20000, 1))
    counts = np.bincount(sc.sample_tokens(probs, rng), minlength=4) / 20000
    np.testing.assert_allclose(counts, PROBS[0], atol=0.012)  # > 4 standard deviations for every token


def test_one_hot_rows_always_give_their_token() -> None:
    probs = np.eye(5)[[3, 0, 4]]
    assert sc.sample_tokens(probs, np.random.default_rng(1)).tolist() == [3, 0, 4]


# --------------------------------------------------------------------------------------------------------------------
# Generation on the tiny exported Llama
# --------------------------------------------------------------------------------------------------------------------
def _tiny_model(tiny: tuple[Path, Any]) -> ov.Model:
    return ov.Core().read_model(ir_xml(tiny[0]))


def test_greedy_generation_continues_with_the_argmax_of_the_models_own_logits(tiny_llm: tuple[Path, Any]) -> None:
    params = TINY.replace(temperature=0.0, start_token_ids=(1, 9))
    sequences = sc.generate_sequences(_tiny_model(tiny_llm), params)
    assert sequences.shape == (4, 12)
    assert (sequences[:, :2] == [1, 9]).all()
    llm = ev.StatefulLLM(tiny_llm[0])
    for row in sequences:
        np.testing.assert_array_equal(row[2:], llm.logits(row)[1:-1].argmax(-1))


def test_generation_continues_the_prompt_windows(tiny_llm: tuple[Path, Any]) -> None:
    text = tuple(range(20, 60))
    params = TINY.replace(temperature=0.0, start_token_ids=(1,), prompt_token_ids=text, prompt_len=4)
    sequences = sc.generate_sequences(_tiny_model(tiny_llm), params)
    assert sequences.shape == (4, 12) and (sequences[:, 0] == 1).all()
    assert (np.diff(sequences[:, 1:5], axis=1) == 1).all() and sequences[:, 1:5].min() >= 20
    assert len(set(sequences[:, 1].tolist())) > 1, "each sequence takes its own window of the text"
    llm = ev.StatefulLLM(tiny_llm[0])
    for row in sequences:  # greedy: after the prompt, the argmax of the model's own logits
        np.testing.assert_array_equal(row[5:], llm.logits(row)[4:-1].argmax(-1))


def test_generation_is_reproducible_and_depends_on_the_seed(tiny_llm: tuple[Path, Any]) -> None:
    model = _tiny_model(tiny_llm)
    first = sc.generate_sequences(model, TINY)
    np.testing.assert_array_equal(first, sc.generate_sequences(model, TINY))
    assert (first != sc.generate_sequences(model, TINY.replace(seed=8))).any()
    assert first.min() >= 0 and first.max() < len(tiny_llm[1])
    assert len(set(first[:, 0].tolist())) > 1, "random start tokens: the sequences should start differently"


def test_dataset_holds_one_stateful_prefill_per_sequence(tiny_llm: tuple[Path, Any]) -> None:
    dataset = nncf_hqq.self_calibration_dataset(_tiny_model(tiny_llm), TINY)
    samples = list(dataset.get_inference_data())
    assert len(samples) == TINY.num_samples
    for sample in samples:
        assert set(sample) == {"input_ids", "attention_mask", "position_ids", "beam_idx"}
        assert sample["input_ids"].shape == (1, TINY.seq_len)
        np.testing.assert_array_equal(sample["position_ids"], np.arange(TINY.seq_len)[None])
        assert sample["attention_mask"].sum() == TINY.seq_len and sample["beam_idx"].tolist() == [0]


def test_a_model_that_cannot_generate_is_refused_before_anything_runs() -> None:
    model = transformer_like()
    with pytest.raises(nncf.ValidationError, match=r"generative, stateful OpenVINO LLM.*no KV cache"):
        sc.generate_sequences(model, TINY)
    with pytest.raises(nncf.ValidationError, match="Encoders"):
        nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT4_ASYM, dataset="self", awq=True, hqq=True)


# --------------------------------------------------------------------------------------------------------------------
# compress_weights(..., dataset="self")
# --------------------------------------------------------------------------------------------------------------------
def _compressed_types(model: ov.Model) -> set[str]:
    return {op.get_element_type().get_type_name() for op in model.get_ops() if op.get_type_name() == "Constant"}


@contextlib.contextmanager
def nncf_warnings() -> Iterator[list[str]]:
    """The warnings NNCF's logger (``nncf_logger``, which does not propagate to the root logger) emits within."""
    messages: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    nncf_logger.addHandler(handler)
    try:
        yield messages
    finally:
        nncf_logger.removeHandler(handler)


SMALL_DATASET_WARNING = "Dataset contains only"


@pytest.mark.parametrize("hqq", [True, False], ids=["hqq", "nncf"])
def test_compress_weights_with_self_calibration_runs_awq_and_scale_estimation(
    tiny_llm: tuple[Path, Any],
    hqq: bool,
) -> None:
    kwargs = {"mode": nncf.CompressWeightsMode.INT4_ASYM, "group_size": 32, "ratio": 1.0}
    with nncf_warnings() as warnings:
        compressed = nncf.compress_weights(
            _tiny_model(tiny_llm), **kwargs, dataset=TINY, awq=True, scale_estimation=True, hqq=hqq
        )
    assert "u4" in _compressed_types(compressed)
    assert not [w for w in warnings if SMALL_DATASET_WARNING in w]  # subset_size follows the 4 generated sequences
    # the same as passing the generated dataset explicitly (with subset_size 128, about which NNCF warns)
    with nncf_warnings() as warnings:
        explicit = nncf.compress_weights(
            _tiny_model(tiny_llm),
            **kwargs,
            dataset=nncf_hqq.self_calibration_dataset(_tiny_model(tiny_llm), TINY),
            awq=True,
            scale_estimation=True,
            hqq=hqq,
        )
    assert f"{SMALL_DATASET_WARNING} 4 samples, smaller than the requested subset size 128." in warnings
    ids = np.arange(1, 20)
    np.testing.assert_array_equal(ev.StatefulLLM(compressed).logits(ids), ev.StatefulLLM(explicit).logits(ids))


@pytest.mark.parametrize(
    ("subset_size", "num_samples", "expected"),
    [
        pytest.param(128, 32, 32, id="default-fewer-samples"),
        pytest.param(128, 200, 200, id="default-more-samples"),
        pytest.param(16, 32, 16, id="given-smaller"),
        pytest.param(256, 32, 256, id="given-larger"),
    ],
)
def test_a_default_subset_size_follows_the_generated_sequences(
    subset_size: int, num_samples: int, expected: int
) -> None:
    params = sc.SELF_CALIBRATION_DEFAULT.replace(num_samples=num_samples)
    assert sc.self_calibration_subset_size(subset_size, params) == expected


@pytest.mark.parametrize(
    ("dataset", "error", "message"),
    [
        pytest.param("shakespeare.txt", nncf.ValidationError, "is not a dataset", id="other-string"),
        pytest.param("self", nncf.ValidationError, "no step of this call uses data", id="data-unused"),
    ],
)
def test_bad_dataset_requests_name_the_value(
    tiny_llm: tuple[Path, Any],
    dataset: str,
    error: type[Exception],
    message: str,
) -> None:
    model = _tiny_model(tiny_llm)
    with pytest.raises(error, match=message):
        nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT4_ASYM, group_size=32, dataset=dataset, hqq=True)
    assert "u4" not in _compressed_types(model) and "u3" not in _compressed_types(model)


def test_low_bit_modes_stay_data_free(tiny_llm: tuple[Path, Any]) -> None:
    with pytest.raises(nncf.ValidationError, match="cannot be combined with awq"):
        nncf.compress_weights(
            _tiny_model(tiny_llm), mode=nncf_hqq.LowBitMode.INT3_ASYM, group_size=32, dataset="self", awq=True, hqq=True
        )


def test_torch_models_are_refused_with_self_calibration() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(nncf.UnsupportedBackendError, match="PyTorch model"):
        nncf.compress_weights(torch.nn.Linear(64, 8), mode=nncf.CompressWeightsMode.INT4_ASYM, dataset="self", hqq=True)


def test_the_command_line_says_an_encoder_is_compressed_data_free() -> None:
    obstacle = compression.self_calibration_obstacle(CompressionOptions(), transformer_like())
    assert obstacle is not None and "cannot generate" in obstacle
    assert "--dataset TEXT_FILE" in render(obstacle, command_line=True)
    assert "dataset=TEXT_FILE" in render(obstacle, command_line=False)


def test_the_command_lines_self_calibrated_compression_logs_no_small_dataset_warning(
    tiny_llm: tuple[Path, Any],
) -> None:
    """``nncf-hqq compress`` generates the text itself (``compress_timed``) and passes it as an ``nncf.Dataset``:
    its default ``subset_size`` follows the generated sequences there too."""
    from nncf_hqq.llm.timing import StepTimer

    options = CompressionOptions(group_size=32, awq=True, scale_estimation=True, self_calibration=TINY)
    assert options.nncf_kwargs()["subset_size"] == TINY.num_samples
    assert CompressionOptions(subset_size=2, self_calibration=TINY).nncf_kwargs()["subset_size"] == 2
    with nncf_warnings() as warnings:
        compressed = compression.compress_timed(_tiny_model(tiny_llm), options, timer=StepTimer(lambda _: None))
    assert "u4" in _compressed_types(compressed)
    assert not [w for w in warnings if SMALL_DATASET_WARNING in w]


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param({"generation_config.json": 7, "config.json": 3}, (7,), id="generation-config-first"),
        pytest.param({"config.json": 3}, (3,), id="config-alone"),
        pytest.param({"config.json": None}, None, id="no-bos-random-start"),
        pytest.param({}, None, id="no-files"),
    ],
)
def test_the_command_line_starts_generation_from_the_models_bos(
    files: dict[str, int | None], expected: tuple[int, ...] | None, tmp_path: Path
) -> None:
    import json

    for name, bos in files.items():
        (tmp_path / name).write_text(json.dumps({"bos_token_id": bos}))
    options = compression.self_calibrated(CompressionOptions(), tmp_path, 16)
    assert options.self_calibration is not None
    assert options.self_calibration.start_token_ids == expected and options.self_calibration.num_samples == 16
    assert options.awq and options.scale_estimation


@pytest.mark.parametrize("hqq", [False, True], ids=["without-hqq", "with-hqq"])
@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        pytest.param({"ratio": 1.5}, nncf.ValidationError, "ratio should be between 0 and 1", id="bad-ratio"),
        pytest.param(
            {"mode": nncf.CompressWeightsMode.INT8_ASYM, "group_size": None},
            nncf.ParameterNotSupportedError,
            "INT8 modes do not support",
            id="int8-with-awq",
        ),
    ],
)
def test_nncf_refuses_the_call_before_any_text_is_generated(
    tiny_llm: tuple[Path, Any],
    hqq: bool,
    changes: dict[str, Any],
    error: type[Exception],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def generation(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("text was generated before NNCF checked the call")

    monkeypatch.setattr(nncf_hqq.api, "self_calibration_dataset", generation)
    arguments = {"mode": nncf.CompressWeightsMode.INT4_ASYM, "group_size": 32, **changes}
    with pytest.raises(error, match=message):
        nncf.compress_weights(_tiny_model(tiny_llm), dataset="self", awq=True, hqq=hqq, **arguments)
