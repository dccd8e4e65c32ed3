"""Rounding with error feedback on a fixed grid (``nncf_hqq.maths.error_feedback``, ``HQQParameters.error_feedback``).

Exact cases: uncorrelated inputs give nearest rounding; the blocked Cholesky form gives the codes of the published
one-column update (an independent float64 transcription); on correlated inputs the output error drops below
nearest rounding's on the same grid, in both weight layouts.
"""

from __future__ import annotations

import nncf
import numpy as np
import pytest
from nncf import CompressWeightsMode
from nncf.tensor import Tensor

import nncf_hqq  # noqa: F401
from nncf_hqq._nncf import WeightCompressionConfig
from nncf_hqq.hqq import HQQ
from nncf_hqq.maths.core import decompress
from nncf_hqq.maths.core import rtn_scale_zero_point
from nncf_hqq.maths.error_feedback import damped_second_moment
from nncf_hqq.maths.error_feedback import error_feedback_codes
from nncf_hqq.maths.error_feedback import inverse_cholesky_upper
from nncf_hqq.maths.error_feedback import round_with_error_feedback
from nncf_hqq.parameters import HQQ_DEFAULT


def rtn_grid(weight: np.ndarray, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """RTN's grid of ``weight`` ``[out, in]`` in HQQ's convention, ``[out, groups, 1]``."""
    grouped = weight.reshape(weight.shape[0], -1, group_size)
    scale, zero_point = rtn_scale_zero_point(Tensor(grouped), 2, 4)
    return 1.0 / scale.data, zero_point.data.astype(np.float32)


def reconstruction(codes: np.ndarray, inverse_scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    out, group_size = codes.shape[0], codes.shape[1] // inverse_scale.shape[1]
    grouped = codes.reshape(out, -1, group_size)
    return ((grouped - zero) / inverse_scale).reshape(codes.shape)


def nearest_codes(weight: np.ndarray, inverse_scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    grouped = weight.reshape(weight.shape[0], inverse_scale.shape[1], -1)
    return np.clip(np.round(grouped * inverse_scale + zero), 0, 15).reshape(weight.shape)


def output_error(weight: np.ndarray, approximation: np.ndarray, inputs: np.ndarray) -> float:
    return float(np.sum(((weight - approximation) @ inputs) ** 2))


def optimal_brain_rounding(
    weight: np.ndarray, inverse_scale: np.ndarray, zero: np.ndarray, hessian: np.ndarray
) -> np.ndarray:
    """Independent transcription of the published update in its original form (float64): round column ``i``,
    move every later column ``j`` by ``-err * Hinv[i, j] / Hinv[i, i]``, then drop ``i`` from the inverse
    (its Schur complement) before the next column."""
    remaining = weight.astype(np.float64).copy()
    inverse = np.linalg.inv(hessian.astype(np.float64))
    group_size = weight.shape[1] // inverse_scale.shape[1]
    codes = np.zeros_like(remaining)
    for i in range(weight.shape[1]):
        s, z = inverse_scale[:, i // group_size, 0], zero[:, i // group_size, 0]
        codes[:, i] = np.clip(np.round(remaining[:, i] * s + z), 0, 15)
        error = remaining[:, i] - (codes[:, i] - z) / s
        remaining[:, i + 1 :] -= np.outer(error / inverse[i, i], inverse[i, i + 1 :])
        inverse = inverse - np.outer(inverse[:, i], inverse[i, :]) / inverse[i, i]
    return codes


def correlated_inputs(rng: np.random.Generator, channels: int, samples: int) -> np.ndarray:
    inputs = rng.standard_normal((channels, samples)) * np.linspace(0.2, 3.0, channels)[:, None]
    return (inputs + 0.6 * inputs[::-1] + 0.3 * np.roll(inputs, 1, axis=0)).astype(np.float32)


def test_damped_second_moment() -> None:
    inputs = np.array([[1.0, -1.0], [0.0, 0.0], [2.0, 2.0]], dtype=np.float32)
    hessian = damped_second_moment(Tensor(inputs), 0.5).data
    # X X^T / 2 = [[1, 0, 0], [0, 0, 0], [0, 0, 4]], mean diagonal 5/3; the dead input gets 1
    expected = np.array([[1.0 + 5 / 6, 0, 0], [0, 1.0, 0], [0, 0, 4.0 + 5 / 6]], dtype=np.float32)
    np.testing.assert_allclose(hessian, expected, rtol=1e-6)


def test_inverse_cholesky_upper() -> None:
    rng = np.random.default_rng(1)
    hessian = damped_second_moment(Tensor(correlated_inputs(rng, 16, 64)), 0.01).data
    upper = inverse_cholesky_upper(Tensor(hessian)).data
    assert np.allclose(np.tril(upper, -1), 0.0)
    np.testing.assert_allclose(upper.T @ upper, np.linalg.inv(hessian.astype(np.float64)), rtol=1e-3, atol=1e-5)


def test_uncorrelated_inputs_give_nearest_rounding() -> None:
    """With a diagonal ``H`` no column's error moves another column: the codes are the nearest ones."""
    rng = np.random.default_rng(2)
    weight = rng.standard_normal((8, 64)).astype(np.float32)
    inverse_scale, zero = rtn_grid(weight, 16)
    hessian = np.diag(rng.uniform(0.5, 2.0, 64)).astype(np.float32)
    upper = inverse_cholesky_upper(Tensor(hessian))
    codes = round_with_error_feedback(Tensor(weight), Tensor(inverse_scale), Tensor(zero), upper, 4).data
    np.testing.assert_array_equal(codes, nearest_codes(weight, inverse_scale, zero))


@pytest.mark.parametrize("shape", [(8, 64), (16, 320), (4, 256)], ids=["one-block", "three-blocks", "two-blocks"])
def test_matches_the_published_update(shape: tuple[int, int]) -> None:
    """The lazy-block Cholesky form gives the codes of the original one-column-at-a-time update."""
    rng = np.random.default_rng(3)
    weight = rng.standard_normal(shape).astype(np.float32)
    inputs = correlated_inputs(rng, shape[1], 4 * shape[1])
    inverse_scale, zero = rtn_grid(weight, 32)
    hessian = damped_second_moment(Tensor(inputs), 0.01).data
    codes = round_with_error_feedback(
        Tensor(weight), Tensor(inverse_scale), Tensor(zero), inverse_cholesky_upper(Tensor(hessian)), 4
    ).data
    oracle = optimal_brain_rounding(weight, inverse_scale, zero, hessian)
    assert np.mean(codes == oracle) > 0.995  # float32 vs float64: a rare rounding tie may flip


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_lowers_the_output_error_of_nearest_rounding(seed: int) -> None:
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((32, 256)).astype(np.float32)
    inputs = correlated_inputs(rng, 256, 512)
    inverse_scale, zero = rtn_grid(weight, 32)
    codes = error_feedback_codes(Tensor(weight), Tensor(inverse_scale), Tensor(zero), Tensor(inputs), 4, 0.01).data
    nearest = reconstruction(nearest_codes(weight, inverse_scale, zero), inverse_scale, zero)
    fed = reconstruction(codes, inverse_scale, zero)
    assert codes.min() >= 0 and codes.max() <= 15
    assert output_error(weight, fed, inputs) < 0.85 * output_error(weight, nearest, inputs)


@pytest.mark.parametrize("axis", [1, 0], ids=["out-in", "in-out"])
def test_hqq_grid_with_error_feedback_keeps_the_grid_and_lowers_the_output_error(axis: int) -> None:
    rng = np.random.default_rng(7)
    weight_out_in = rng.standard_normal((24, 128)).astype(np.float32)
    weight = Tensor(weight_out_in if axis == 1 else np.ascontiguousarray(weight_out_in.T))
    inputs = correlated_inputs(rng, 128, 256)
    config = WeightCompressionConfig(mode=CompressWeightsMode.INT4_ASYM, group_size=32)
    hqq = HQQ(HQQ_DEFAULT.replace(calibration_token_rows=4, error_feedback=True, error_feedback_damp=0.01))
    grid = hqq.compress(weight, axis, config)
    (fed,) = hqq.with_error_feedback(weight, axis, config, Tensor(inputs), grid)
    assert fed.scale is grid.scale and fed.zero_point is grid.zero_point
    assert fed.tensor.shape == grid.tensor.shape and fed.tensor.dtype == grid.tensor.dtype

    def error(compressed: object) -> float:
        approximation = decompress(compressed).reshape(tuple(weight.shape)).data  # type: ignore[arg-type]
        return output_error(weight_out_in, approximation if axis == 1 else approximation.T, inputs)

    assert error(fed) < 0.9 * error(grid)


def test_error_feedback_in_compress_weights() -> None:
    from tests.ov_models import VOCAB
    from tests.ov_models import transformer_like
    from tests.test_composition import relative_error

    rng = np.random.default_rng(0)
    dataset = nncf.Dataset([rng.integers(0, VOCAB, (1, 24)) for _ in range(6)])

    def codes(error_feedback: bool) -> tuple[bytes, object]:
        model = nncf.compress_weights(
            transformer_like(moe=False),
            mode=CompressWeightsMode.INT4_ASYM,
            group_size=32,
            dataset=dataset,
            scale_estimation=True,
            hqq=True,
            hqq_params={"calibration_token_rows": 8, "error_feedback": error_feedback},
        )
        packed = [
            op.get_data().tobytes()
            for op in model.get_ordered_ops()
            if op.get_type_name() == "Constant" and op.get_element_type().get_type_name() == "u4"
        ]
        assert packed
        return b"".join(packed), model

    plain, _ = codes(False)
    fed, model = codes(True)
    assert plain != fed
    assert relative_error(model) < 0.15
