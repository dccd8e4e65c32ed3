"""``nncf-hqq demo``: RTN vs HQQ vs data-free AWQ (with and without HQQ) vs self-calibrated AWQ + Scale Estimation +
HQQ (calibrated on text the model generates itself, what ``nncf-hqq compress`` does by default) on the real
SmolLM2-135M-Instruct.

Every row compresses the same fp32 OpenVINO IR with INT4_ASYM, group size 64, ratio 1 and ``backup_mode=NONE``
(shared/PROTOCOL.md: embeddings and lm_head stay float, only the decoder's Linear weights differ between rows), and
is evaluated on the same first N 512-token windows of WikiText-2 against the float model.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nncf.common.logging import nncf_logger
from nncf.common.logging.track_progress import track

from nncf_hqq.llm.compression import compress_model
from nncf_hqq.llm.compression import self_calibrated
from nncf_hqq.llm.evaluate_job import evaluate_against
from nncf_hqq.llm.evaluation import Metrics
from nncf_hqq.llm.layout import read_model
from nncf_hqq.llm.logs import on_a_terminal
from nncf_hqq.llm.logs import progress_bars_only_on_a_terminal
from nncf_hqq.llm.options import CompressionOptions
from nncf_hqq.llm.options import OptionError
from nncf_hqq.llm.records import versions
from nncf_hqq.llm.records import write_json
from nncf_hqq.llm.reports import require_matplotlib
from nncf_hqq.llm.reports import write_png
from nncf_hqq.llm.texts import WINDOW
from nncf_hqq.llm.timing import StepTimer
from nncf_hqq.llm.zoo import SMOLLM2
from nncf_hqq.llm.zoo import default_text
from nncf_hqq.llm.zoo import model_cache
from nncf_hqq.llm.zoo import smollm2_ov_dir
from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT

Log = Callable[[str], None]

DEMO_MODEL = SMOLLM2
DEFAULT_WINDOWS = 8
DEFAULT_OUT = Path("results") / "demo"

#: PROTOCOL.md's comparison settings for SmolLM2 (hidden 576: group size 64).
DEMO_BASE = CompressionOptions(mode="int4_asym", group_size=64, ratio=1.0, backup_mode="none")

#: The demo's rows: name -> compression options (no user data anywhere: the first four are data-free, the last
#: calibrates on sequences the float model generates, starting from its BOS token).
DEMO_METHODS: dict[str, CompressionOptions] = {
    "rtn": dataclasses.replace(DEMO_BASE, hqq=False),
    "hqq": DEMO_BASE,
    "awq": dataclasses.replace(DEMO_BASE, hqq=False, awq=True),
    "awq_hqq": dataclasses.replace(DEMO_BASE, awq=True),
    "self_awq_se_hqq": dataclasses.replace(
        DEMO_BASE, awq=True, scale_estimation=True, self_calibration=SELF_CALIBRATION_DEFAULT
    ),
}


@dataclass
class DemoResult:
    """What the demo measured and where it wrote it."""

    results: dict[str, Metrics]
    compress_seconds: dict[str, float]
    steps: dict[str, float]
    wall_seconds: float
    json_path: Path
    png_path: Path


def demo_text(text: Path | None) -> Path:
    """``text`` or the shared WikiText-2 test text; a FileNotFoundError that says what to do when neither exists."""
    if text is not None:
        if not text.is_file():
            raise OptionError("{text} {path} is not a file", path=text)
        return text
    found = default_text()
    if found is None:
        msg = (
            "WikiText-2 (shared/data/wikitext-2-raw/wiki.test.raw) was not found: set $NNCF_HQQ_SHARED to the shared/ "
            "directory or pass --text FILE (any English text of at least N x 512 tokens)"
        )
        raise FileNotFoundError(msg)
    return found


def run_demo(
    windows: int = DEFAULT_WINDOWS,
    cache: Path | None = None,
    out_dir: Path = DEFAULT_OUT,
    text: Path | None = None,
    log: Log = nncf_logger.info,
    methods: Mapping[str, CompressionOptions] | None = None,
) -> DemoResult:
    """Obtain SmolLM2 (cached), compress it once per method, evaluate all against FP, write JSON and PNG."""
    start = time.perf_counter()
    if windows <= 0:
        raise OptionError("{windows} must be positive, got {value}", value=windows)
    methods = dict(methods or DEMO_METHODS)
    text_path = demo_text(text)
    require_matplotlib()
    timer = StepTimer(log, announce=on_a_terminal())
    with progress_bars_only_on_a_terminal():
        with model_cache(cache), timer.step(f"obtain {DEMO_MODEL} (fp32 OpenVINO IR)"):
            ir_dir = smollm2_ov_dir()
        methods = {name: _with_model_start_token(options, ir_dir) for name, options in methods.items()}
        compressed, compress_seconds = {}, {}
        for name, options in track(list(methods.items()), description=f"Compressing {len(methods)} ways"):
            step = f"compress {name}"
            with timer.step(step):
                compressed[name] = compress_model(read_model(ir_dir), options)
            compress_seconds[name] = timer.seconds[step]
        with timer.step(f"evaluate fp + {len(compressed)} models on {windows} windows of {text_path.name}"):
            # SmolLM2's candidates are small: all compiled at once, the reference run once
            results = evaluate_against(ir_dir, compressed, ir_dir, text_path, windows, one_at_a_time=False)
    wall = time.perf_counter() - start
    record = _record(ir_dir, text_path, windows, methods, results, compress_seconds, timer.seconds, wall)
    json_path = write_json(out_dir / "demo.json", record)
    title = f"{DEMO_MODEL}, INT4_ASYM g64, {windows} x 512-token windows of {text_path.name}"
    png_path = write_png(out_dir / "demo.png", results, title)
    return DemoResult(results, compress_seconds, timer.seconds, wall, json_path, png_path)


def _with_model_start_token(options: CompressionOptions, ir_dir: Path) -> CompressionOptions:
    """A self-calibrated row's options with generation starting from the model's BOS token."""
    if options.self_calibration is None:
        return options
    return self_calibrated(options, ir_dir, options.self_calibration.num_samples)


def _record(
    ir_dir: Path,
    text_path: Path,
    windows: int,
    methods: Mapping[str, CompressionOptions],
    results: Mapping[str, Metrics],
    compress_seconds: Mapping[str, float],
    steps: Mapping[str, float],
    wall: float,
) -> dict[str, Any]:
    return {
        "model": DEMO_MODEL,
        "ir_dir": str(ir_dir),
        "text": str(text_path),
        "windows": windows,
        "window_size": WINDOW,
        "reference": "fp",
        "methods": {name: dataclasses.asdict(options) for name, options in methods.items()},
        "results": dict(results),
        "compress_seconds": dict(compress_seconds),
        "steps_seconds": dict(steps),
        "wall_seconds": wall,
        "versions": versions(),
    }
