"""Anonymous memory at each step of a self-calibrated compression: statistics, AWQ, Scale Estimation's reference
pass and HQQ's writing of every weight of 10 M elements or more.

Compresses the Qwen2.5-1.5B-shaped IR (``nncf_hqq.llm.zoo.qwen_ov_dir``, f32) with ``nncf-hqq compress``'s
self-calibrated options (AWQ, Scale Estimation, HQQ with its output guard) on 32 random-token sequences of 128
tokens (the memory does not depend on what the tokens say), and prints one JSON line per step: the process's
anonymous memory before, its peak during (sampled every 2 ms) and after, in GiB. ``--keep-compiled-models`` skips
``HQQOVBackend.release_working_memory`` (NNCF's compiled weight-lowering models kept through the writer, as before
it existed), for the comparison. ``--guard OUTxIN`` instead measures the output guard's error computation alone on
one random weight of that shape with four candidates: its peak above the weight and the candidates, in float32
copies of the weight, through NNCF's dequantization (as before) and in place (``maths.guard.candidate_row_errors``).

    python research/compression_working_set.py
    python research/compression_working_set.py --keep-compiled-models
    python research/compression_working_set.py --guard 18944x3584
"""

from __future__ import annotations

import argparse
import functools
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import nncf
import numpy as np
from _memory import anonymous_gib  # research/, first on the path when run as a script
from nncf.quantization.algorithms.weight_compression.weight_lowering import do_integer_dequantization
from nncf.tensor import Tensor

from nncf_hqq._nncf import AWQ
from nncf_hqq._nncf import CompressedWeight
from nncf_hqq._nncf import WeightCompression
from nncf_hqq.hqq import HQQ
from nncf_hqq.llm.compression import compress_model
from nncf_hqq.llm.compression import self_calibrated
from nncf_hqq.llm.layout import ir_xml
from nncf_hqq.llm.layout import read_model
from nncf_hqq.llm.options import CompressionOptions
from nncf_hqq.llm.zoo import qwen_ov_dir
from nncf_hqq.maths.core import split_into_groups
from nncf_hqq.maths.grids import rtn_scale_zero_point
from nncf_hqq.maths.grids import to_compressed_weight
from nncf_hqq.maths.guard import candidate_row_errors
from nncf_hqq.maths.guard import row_output_errors
from nncf_hqq.openvino.backend import HQQOVBackend
from nncf_hqq.openvino.pages import return_free_heap
from nncf_hqq.self_calibration import calibration_inputs

SAMPLES, TOKENS, VOCABULARY = 32, 128, 150_000
LARGE_WEIGHT = 10_000_000


class PeakSampler(threading.Thread):
    """The highest anonymous memory since the last ``reset``, sampled every 2 ms (a sample read across a reset is
    dropped)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0.0
        self.resets = 0
        self.stopped = False

    def reset(self) -> float:
        self.resets += 1
        self.peak = anonymous_gib()
        return self.peak

    def run(self) -> None:
        while not self.stopped:
            resets = self.resets
            sample = anonymous_gib()
            if resets == self.resets:
                self.peak = max(self.peak, sample)
            time.sleep(0.002)


def watched(sampler: PeakSampler, step: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        before = sampler.reset()
        result = method(*args, **kwargs)
        row: dict[str, Any] = {"step": step, "before": before, "peak": sampler.peak, "after": anonymous_gib()}
        if step == "hqq weight":
            params = args[1].params
            row["weight"], row["elements"] = params.weight_name, int(np.prod(params.weight_shape))
            if row["elements"] < LARGE_WEIGHT:
                return result
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
        return result

    return wrapper


def guard_errors_peak(shape: tuple[int, int], group_size: int = 128, samples: int = 32) -> None:
    """Prints the guard's error computation's peak above its inputs, both ways, on one random weight."""
    rng = np.random.default_rng(0)
    weight = Tensor(rng.standard_normal(shape, dtype=np.float32))
    activations = Tensor(rng.standard_normal((shape[1], samples), dtype=np.float32))
    grouped, axis = split_into_groups(weight, 1, group_size)
    candidates = []
    for shrink in (1.0, 0.95, 0.9, 0.85):
        scale, zero_point = rtn_scale_zero_point(grouped, axis, 4)
        candidates.append(to_compressed_weight(grouped, scale * shrink, zero_point, 4, True))
    copy_gib = 4 * shape[0] * shape[1] / 2**30
    sampler = PeakSampler()
    sampler.start()
    ways: dict[str, Callable[[CompressedWeight], Tensor]] = {
        "NNCF's dequantization": lambda c: row_output_errors(
            weight, do_integer_dequantization(c).reshape(shape), activations, 1
        ),
        "in place": lambda c: candidate_row_errors(weight, c, activations, 1),
    }
    for way, errors in ways.items():
        return_free_heap()
        before = sampler.reset()
        for candidate in candidates:
            errors(candidate)
        extra = sampler.peak - before
        print(
            json.dumps(
                {"guard errors": way, "peak above inputs GiB": round(extra, 3), "copies": round(extra / copy_gib, 2)}
            )
        )
    sampler.stopped = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep-compiled-models", action="store_true")
    parser.add_argument("--guard", default=None, help="OUTxIN: the guard's errors alone on one weight")
    args = parser.parse_args()
    if args.guard is not None:
        rows, columns = (int(n) for n in args.guard.split("x"))
        guard_errors_peak((rows, columns))
        return
    if args.keep_compiled_models:
        HQQOVBackend.release_working_memory = lambda self: None  # type: ignore[method-assign]
    sampler = PeakSampler()
    for owner, name, step in (
        (WeightCompression, "_collect_statistics", "statistics"),
        (AWQ, "apply", "awq"),
        (HQQ, "with_scale_estimation_references", "scale estimation reference"),
        (HQQ, "compress_planned", "hqq weight"),
    ):
        setattr(owner, name, watched(sampler, step, getattr(owner, name)))
    model = read_model(ir_xml(qwen_ov_dir()))
    options = self_calibrated(CompressionOptions(), None, SAMPLES)
    tokens = np.random.default_rng(0).integers(0, VOCABULARY, size=(SAMPLES, TOKENS), dtype=np.int64)
    names = sorted(name for port in model.inputs for name in port.get_names())
    dataset = nncf.Dataset(calibration_inputs(tokens, names))
    return_free_heap()
    print(json.dumps({"step": "start", "anonymous": round(anonymous_gib(), 3)}), flush=True)
    sampler.start()
    compressed = compress_model(model, options, dataset)
    sampler.stopped = True
    print(json.dumps({"step": "end", "anonymous": round(anonymous_gib(), 3)}), flush=True)
    del compressed


if __name__ == "__main__":
    main()
