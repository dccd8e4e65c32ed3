"""Where a self-calibrated compression's time goes: wall and process CPU seconds of each step.

The steps are NNCF's statistics, AWQ, NNCF's Scale Estimation (run only as HQQ's output-guard reference), HQQ's
data-free base, its refinement on the activations, its output guard, and NNCF's writer, which includes HQQ's
per-weight work. The compression is `nncf-hqq compress`'s self-calibrated recipe: int4_asym g128 (``--group-size``),
split zero points, AWQ and HQQ on data. The data is 32 random-token sequences of 128 tokens; the step times do not
depend on the text.

    python research/compression_steps.py IR.xml                     # the recipe (guard_reference=False)
    python research/compression_steps.py IR.xml --guard-reference   # with NNCF's Scale Estimation in the guard
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nncf
import numpy as np
import openvino as ov
from nncf.quantization.algorithms.weight_compression.algorithm import WeightCompression
from nncf.quantization.algorithms.weight_compression.awq import AWQ

from nncf_hqq._nncf import ScaleEstimation
from nncf_hqq.hqq import HQQ
from nncf_hqq.llm.compression import compress_model
from nncf_hqq.llm.options import CompressionOptions
from nncf_hqq.openvino.backend import HQQOVBackend
from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT
from nncf_hqq.self_calibration import calibration_inputs

#: Each timed step, as (owner, method, label).
STEPS = (
    (WeightCompression, "_collect_statistics", "statistics"),
    (AWQ, "apply", "AWQ"),
    (ScaleEstimation, "apply", "Scale Estimation (guard reference)"),
    (HQQ, "compress", "HQQ data-free base"),
    (HQQ, "refine_on_activations", "HQQ refinement on activations"),
    (HQQ, "guard_on_outputs", "HQQ output guard"),
    (HQQOVBackend, "transform_model", "writer (HQQ's per-weight work included)"),
)


def timed(method: Callable[..., Any], totals: list[float]) -> Callable[..., Any]:
    """``method`` adding its wall and process CPU seconds to ``totals`` at every call."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return method(*args, **kwargs)
        finally:
            totals[0] += time.perf_counter() - wall
            totals[1] += time.process_time() - cpu

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ir", type=Path, help="an LLM's OpenVINO IR (stateful, as optimum-intel exports it)")
    parser.add_argument("--guard-reference", action="store_true", help="NNCF's Scale Estimation in the guard")
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--out", type=Path, help="write the table as JSON here")
    args = parser.parse_args()
    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for owner, name, label in STEPS:
        setattr(owner, name, timed(getattr(owner, name), totals[label]))
    model = ov.Core().read_model(args.ir)
    names = sorted(name for port in model.inputs for name in port.get_names())
    vocabulary = int(model.output(0).get_partial_shape()[-1].get_length())
    sequences = np.random.default_rng(0).integers(0, vocabulary, size=(32, 128), dtype=np.int64)
    options = CompressionOptions(
        mode="int4_asym",
        group_size=args.group_size,
        awq=True,
        scale_estimation=True,
        zero_point="split",
        self_calibration=SELF_CALIBRATION_DEFAULT,
        guard_reference=args.guard_reference,
    )
    wall, cpu = time.perf_counter(), time.process_time()
    compress_model(model, options, nncf.Dataset(calibration_inputs(sequences, names)))
    totals["total"] = [time.perf_counter() - wall, time.process_time() - cpu]
    rows = {label: {"wall_s": round(w, 1), "cpu_s": round(c, 1)} for label, (w, c) in totals.items()}
    for label, row in rows.items():
        print(f"{label:45s} {row['wall_s']:8.1f} s wall {row['cpu_s']:8.1f} s CPU")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
