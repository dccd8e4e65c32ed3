"""HQQ against round-to-nearest on weights whose groups are narrower than HQQ's clamp, through OpenVINO inference.

For the review of 0001 (docs/upstreaming.md, second review, B1): a MatMul with a weight of each kind (small
heavy-tailed weights, a small spread far from zero, constant rows) compressed by ``nncf.compress_weights`` with and
without ``hqq=True`` (INT4_ASYM g32, every layer; INT8_ASYM per channel), then the decompressed weight read back by
running the compiled model on the identity (f32 inference) and its mean squared error against the float weight.
Run it with a patched tree's NNCF first on ``PYTHONPATH`` (or with nncf_hqq imported, ``--nncf-hqq``):

    PYTHONPATH=DEST/src python research/narrow_groups.py          # DEST: upstream/build.py DEST --upto 0001
"""

from __future__ import annotations

import argparse

import nncf
import numpy as np
import openvino as ov
import openvino.opset13 as opset

CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}


def weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    cases = {f"t4, std {std:g}": (rng.standard_t(4, (64, 512)) * std).astype(np.float32) for std in (1e-3, 1e-4, 1e-5)}
    cases["0.02 + 1e-5 noise"] = (0.02 + rng.standard_normal((64, 512)) * 1e-5).astype(np.float32)
    cases["-0.5 + 1e-4 noise"] = (-0.5 + rng.standard_normal((64, 512)) * 1e-4).astype(np.float32)
    cases["constant 0.01"] = np.full((64, 512), 0.01, dtype=np.float32)
    return cases


def decompressed_error(weight: np.ndarray, mode: nncf.CompressWeightsMode, hqq: bool) -> float:
    x = opset.parameter([-1, weight.shape[1]], ov.Type.f32)
    model = ov.Model([opset.matmul(x, opset.constant(weight), False, True)], [x])
    int4 = mode == nncf.CompressWeightsMode.INT4_ASYM
    options = {"group_size": 32, "all_layers": True} if int4 else {}
    model = nncf.compress_weights(model, mode=mode, ratio=1.0, hqq=hqq, **options)
    restored = ov.Core().compile_model(model, "CPU", CONFIG)(np.eye(weight.shape[1], dtype=np.float32))[0].T
    return float(np.mean((restored - weight) ** 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nncf-hqq", action="store_true", help="import nncf_hqq (its hqq=True) instead of a tree")
    args = parser.parse_args()
    if args.nncf_hqq:
        import nncf_hqq  # noqa: F401  (teaches nncf.compress_weights hqq=)
    print(f"nncf from {nncf.__file__}")
    print(f"{'mode':<10}{'weights':<22}{'HQQ MSE / RTN MSE':>20}{'HQQ MSE':>12}")
    for mode in (nncf.CompressWeightsMode.INT4_ASYM, nncf.CompressWeightsMode.INT8_ASYM):
        for name, weight in weights().items():
            hqq, rtn = decompressed_error(weight, mode, True), decompressed_error(weight, mode, False)
            print(f"{mode.value:<10}{name:<22}{hqq / rtn:>20.3f}{hqq:>12.3g}", flush=True)


if __name__ == "__main__":
    main()
