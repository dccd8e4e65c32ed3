"""HQQ composed with NNCF's data-aware pipeline: AWQ, Scale Estimation, mixed precision, LoRA correction."""

from __future__ import annotations

from typing import Any

import nncf
import numpy as np
import openvino as ov
import pytest
from nncf import CompressWeightsMode
from nncf import SensitivityMetric
from nncf.openvino.optimized_functions.models import OV_MODEL_CACHE
from nncf.tensor import Tensor

import nncf_hqq  # noqa: F401
from nncf_hqq._nncf import ScaleEstimation
from nncf_hqq.hqq import HQQ
from nncf_hqq.maths.core import activation_error
from nncf_hqq.maths.core import output_projections
from nncf_hqq.maths.core import refine_scale_on_activations
from nncf_hqq.maths.solver import hqq_solve
from nncf_hqq.parameters import HQQ_DEFAULT
from tests.ov_models import VOCAB
from tests.ov_models import input_ids
from tests.ov_models import run
from tests.ov_models import transformer_like
from tests.test_api import zero_point_types

INT4 = {"mode": CompressWeightsMode.INT4_ASYM, "group_size": 32}
HQQ_LAYERS = {"up_proj", "down_proj"}


@pytest.fixture(scope="module")
def dataset() -> nncf.Dataset:
    rng = np.random.default_rng(0)
    return nncf.Dataset([rng.integers(0, VOCAB, (1, 24)) for _ in range(16)])


def relative_error(model: ov.Model) -> float:
    reference = run(transformer_like(moe=False), input_ids())
    return float(np.abs(run(model, input_ids()) - reference).mean() / np.abs(reference).mean())


COMBINATIONS = [
    pytest.param({"awq": True}, False, id="data-free-awq"),
    pytest.param({"awq": True}, True, id="awq"),
    pytest.param({"scale_estimation": True}, True, id="se"),
    pytest.param({"awq": True, "scale_estimation": True}, True, id="awq-se"),
    pytest.param({"lora_correction": True}, True, id="lora"),
    pytest.param({"awq": True, "scale_estimation": True, "lora_correction": True}, True, id="awq-se-lora"),
    pytest.param({"scale_estimation": True, "subset_size": 4}, True, id="se-subset4"),
    pytest.param({"scale_estimation": True, "backup_mode": nncf.BackupMode.NONE}, True, id="se-backup-none"),
]


@pytest.mark.parametrize(("options", "with_data"), COMBINATIONS)
def test_combination_runs_and_keeps_float_zero_points(options: dict, with_data: bool, dataset: nncf.Dataset) -> None:
    data = {"dataset": dataset} if with_data else {}
    model = nncf.compress_weights(transformer_like(moe=False), **INT4, **data, **options, hqq=True)
    zps = zero_point_types(model)
    assert {name for name, t in zps.items() if t == ov.Type.f16} == HQQ_LAYERS
    assert relative_error(model) < 0.15


@pytest.mark.parametrize(
    "metric",
    [
        SensitivityMetric.HESSIAN_INPUT_ACTIVATION,
        SensitivityMetric.MEAN_ACTIVATION_VARIANCE,
        SensitivityMetric.MAX_ACTIVATION_VARIANCE,
        SensitivityMetric.MEAN_ACTIVATION_MAGNITUDE,
    ],
    ids=lambda m: m.value,
)
def test_data_aware_mixed_precision(metric: SensitivityMetric, dataset: nncf.Dataset) -> None:
    model = nncf.compress_weights(
        transformer_like(moe=False), **INT4, ratio=0.75, sensitivity_metric=metric, dataset=dataset, hqq=True
    )
    zps = zero_point_types(model)
    assert sum(t == ov.Type.f16 for t in zps.values()) == 1  # one int4 (HQQ) layer, the other in the int8 backup
    assert relative_error(model) < 0.15


def test_lora_correction_on_hqq_beats_lora_on_rtn(dataset: nncf.Dataset) -> None:
    """Seeded case: LoRA adapters computed against HQQ's dequantized weights (float zero points included)."""
    lora = nncf.compress_weights(transformer_like(moe=False), **INT4, dataset=dataset, lora_correction=True)
    lora_hqq = nncf.compress_weights(
        transformer_like(moe=False), **INT4, dataset=dataset, lora_correction=True, hqq=True
    )
    assert relative_error(lora_hqq) <= relative_error(lora)


@pytest.mark.parametrize("output_guard", [False, True], ids=["hqq-refined", "output-guard"])
def test_scale_estimation_with_hqq_differs_from_hqq_alone(dataset: nncf.Dataset, output_guard: bool) -> None:
    params = {"output_guard": output_guard}
    alone = nncf.compress_weights(transformer_like(moe=False), **INT4, hqq=True, hqq_params=params)
    with_se = nncf.compress_weights(
        transformer_like(moe=False), **INT4, dataset=dataset, scale_estimation=True, hqq=True, hqq_params=params
    )
    scales = {}
    for name, model in (("alone", alone), ("se", with_se)):
        ops = {op.get_friendly_name(): op for op in model.get_ordered_ops() if op.get_type_name() == "Constant"}
        scales[name] = (ops["up_proj/scale"].get_data(), ops["up_proj/zero_point"].get_data())
    assert not np.array_equal(scales["alone"][0], scales["se"][0])
    if not output_guard:
        np.testing.assert_array_equal(scales["alone"][1], scales["se"][1])  # HQQ's zero points are kept
        return
    # every output row is HQQ's (its zero points kept) or NNCF's (Scale Estimation or RTN: integer zero points)
    hqq_rows = (scales["alone"][1] == scales["se"][1]).all(axis=(1, 2))
    nncf_rows = (scales["se"][1] == np.round(scales["se"][1])).all(axis=(1, 2))
    assert (hqq_rows | nncf_rows).all()
    assert hqq_rows.any() and (nncf_rows & ~hqq_rows).any(), "expected both kinds of rows on this model"


def test_scale_estimations_compiled_models_are_dropped_before_the_writer(
    dataset: nncf.Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    # NNCF caches a compiled model (with its buffers) per weight-lowering function and weight shape; the output
    # guard's Scale Estimation pass fills that cache, which would otherwise be held until NNCF's writer ends
    cached = {}
    original_se, original_compress = ScaleEstimation.apply, HQQ.compress_planned

    def scale_estimation(*args: Any, **kwargs: Any) -> Any:
        result = original_se(*args, **kwargs)
        cached.setdefault("after scale estimation", len(OV_MODEL_CACHE.access_count()))
        return result

    def compress_planned(*args: Any, **kwargs: Any) -> Any:
        cached.setdefault("first weight written", len(OV_MODEL_CACHE.access_count()))
        return original_compress(*args, **kwargs)

    monkeypatch.setattr(ScaleEstimation, "apply", scale_estimation)
    monkeypatch.setattr(HQQ, "compress_planned", compress_planned)
    nncf.compress_weights(transformer_like(moe=False), **INT4, dataset=dataset, scale_estimation=True, hqq=True)
    assert cached["after scale estimation"] > 0, "Scale Estimation compiled nothing: the test checks nothing"
    assert cached["first weight written"] == 0, cached


def test_without_the_guard_reference_scale_estimation_does_not_run(
    dataset: nncf.Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``guard_reference=False``: NNCF's Scale Estimation pass is skipped, and every row the guard keeps is HQQ's or
    round-to-nearest's (none is NNCF's Scale Estimation's)."""
    calls: list[str] = []
    counts: list[list[int]] = []
    original_se, original_guard = ScaleEstimation.apply, HQQ.guard_on_outputs

    def scale_estimation(*args: Any, **kwargs: Any) -> Any:
        calls.append("scale estimation")
        return original_se(*args, **kwargs)

    def guard(*args: Any, **kwargs: Any) -> Any:
        result, rows = original_guard(*args, **kwargs)
        counts.append(rows)
        return result, rows

    monkeypatch.setattr(ScaleEstimation, "apply", scale_estimation)
    monkeypatch.setattr(HQQ, "guard_on_outputs", guard)
    for reference in (True, False):
        calls.clear()
        counts.clear()
        params = HQQ_DEFAULT.replace(guard_reference=reference)
        options = {**INT4, "dataset": dataset, "scale_estimation": True, "hqq": True, "hqq_params": params}
        nncf.compress_weights(transformer_like(moe=False), **options)
        assert counts, "the guard did not run: the test checks nothing"
        assert calls == (["scale estimation"] if reference else [])
        references = sum(rows[1] for rows in counts)
        assert references > 0 if reference else references == 0


@pytest.mark.parametrize("layout", ["canonical-3d"], ids=str)
def test_activation_refinement_never_increases_calibration_error(layout: str) -> None:
    rng = np.random.default_rng(1)
    weight = Tensor((rng.standard_t(3, size=(2, 48, 3, 32)) * 0.02).astype(np.float32))
    inputs = Tensor((rng.standard_normal((2, 3, 32, 20)) * rng.lognormal(0, 1, (2, 3, 32, 1)) + 0.4).astype(np.float32))
    s, z = hqq_solve(weight, 3, 4, HQQ_DEFAULT)
    refined = refine_scale_on_activations(weight, s, z, inputs, 4, 3, (1.0, 0.9))
    outputs = output_projections(weight, inputs)
    before, _ = activation_error(outputs, weight, s, z, inputs, 4)
    after, _ = activation_error(outputs, weight, refined, z, inputs, 4)
    assert np.all(after.data <= before.data)
    assert after.data.sum() < 0.8 * before.data.sum()


def test_gptq_with_hqq_is_refused_and_model_untouched(dataset: nncf.Dataset) -> None:
    model = transformer_like(moe=False)
    before = [op.get_friendly_name() for op in model.get_ordered_ops()]
    with pytest.raises(nncf.ValidationError, match="GPTQ"):
        nncf.compress_weights(model, **INT4, dataset=dataset, gptq=True, hqq=True)
    assert [op.get_friendly_name() for op in model.get_ordered_ops()] == before


@pytest.mark.parametrize("zero_point_format", ["float", "integer"])
def test_scale_estimation_with_hqq_stays_close_to_hqq(zero_point_format: str, dataset: nncf.Dataset) -> None:
    """Regression: strided (transposed-layout) parameters were once written scrambled into integer-zp models."""
    params = {"zero_point_format": zero_point_format, "refine_rounds": 5}
    alone = nncf.compress_weights(transformer_like(moe=False), **INT4, hqq=True, hqq_params=params)
    with_se = nncf.compress_weights(
        transformer_like(moe=False), **INT4, dataset=dataset, scale_estimation=True, hqq=True, hqq_params=params
    )
    assert relative_error(with_se) < 1.2 * relative_error(alone)
