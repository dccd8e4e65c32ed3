"""The float model's INT8 stand-in: a weight-only INT8 copy of the IR (NNCF's ``INT8_ASYM``, per output channel) that
runs, in place of the float model, the phases of the compress job that only need what the float model says.

Those phases (the output check's reference logits, the self-calibration text, NNCF's activation statistics) compile
the model they run: the CPU plugin packs its weights in their stored precision, so a bf16 model of 14.2 GiB needs
14.2 GiB for each of them. The INT8 copy holds about half of that (a quarter of an fp32 model), reads half the
bytes per generated token, and its outputs are nearly the float model's (docs/memory.md measures both). It is written
once, to a scratch directory beside OUT, before the first of those phases, and removed at the end of the job; the
compression itself still reads and compresses the float weights. It is written in two parts (``STAND_IN_PARTS``):
NNCF holds the INT8 codes of what it compresses until the model is saved, so half the weights are compressed and
saved, and the rest compressed on that saved model, whose first half is then read from its file.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nncf
import openvino as ov

from nncf_hqq._nncf import WeightCompression
from nncf_hqq.llm.layout import read_model
from nncf_hqq.llm.layout import remove_ir
from nncf_hqq.llm.logs import bitwidth_tables_held_back
from nncf_hqq.llm.options import CompressionOptions
from nncf_hqq.llm.timing import OUTPUT_REFERENCE_PHASE
from nncf_hqq.llm.timing import SELF_CALIBRATION_PHASE
from nncf_hqq.llm.timing import STAND_IN_PHASE
from nncf_hqq.llm.timing import STATISTICS_PHASE
from nncf_hqq.llm.timing import StepTimer
from nncf_hqq.openvino.pages import release_file_mappings
from nncf_hqq.openvino.pages import releasing_file_pages

#: The compression of the stand-in: 8-bit asymmetric codes, one scale and zero point per output channel.
STAND_IN_MODE = nncf.CompressWeightsMode.INT8_ASYM
#: The phases the stand-in runs in place of the float model. Each kept the default's accuracy on SmolLM2 g64
#: (docs/memory.md, "The INT8 stand-in"); a phase left out runs the float model.
STAND_IN_PHASES = frozenset({OUTPUT_REFERENCE_PHASE, SELF_CALIBRATION_PHASE, STATISTICS_PHASE})
#: The stand-in's file name in its scratch directory.
STAND_IN_XML = "int8_stand_in.xml"
#: The stand-in's bytes per parameter: its INT8 codes (1) and, per output channel, a scale and a zero point.
STAND_IN_BYTES_PER_PARAMETER = 1.0
#: The parts the stand-in is compressed in, one after the other (``write_stand_in``): one part's codes are held at a
#: time.
STAND_IN_PARTS = 2
#: The first part, saved beside the stand-in while the second is compressed.
_FIRST_PART_XML = "int8_stand_in_first_part.xml"
#: The operations whose constant weights NNCF compresses to ``STAND_IN_MODE`` (all of them).
_WEIGHTED_OPS = frozenset({"MatMul", "Gather", "Convolution", "GroupConvolution", "ConvolutionBackpropData"})


def weight_parts(model: ov.Model, parts: int = STAND_IN_PARTS) -> list[list[str]]:
    """The names of ``model``'s operations with a float constant weight (behind a Convert, if any) of two or more
    dimensions, in ``parts`` lists of about equal parameters: by weight, largest first, each to the part that holds
    the fewest so far (the output head and the embeddings go to different parts; operations that share a weight, as
    tied embeddings do, to the same part)."""
    users: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() not in _WEIGHTED_OPS:
            continue
        for value in op.input_values():
            node = value.get_node()
            if node.get_type_name() == "Convert":
                node = node.input_value(0).get_node()
            shape = node.get_output_shape(0) if node.get_type_name() == "Constant" else ()
            if len(shape) >= 2 and node.get_element_type().is_real():
                weight = node.get_friendly_name()
                users.setdefault(weight, []).append(op.get_friendly_name())
                counts[weight] = math.prod(shape)
                break
    names: list[list[str]] = [[] for _ in range(parts)]
    held = [0] * parts
    for weight in sorted(counts, key=lambda name: -counts[name]):
        part = held.index(min(held))
        names[part].extend(users[weight])
        held[part] += counts[weight]
    return names


def _compressed_without(model_xml: Path, ignored: list[str]) -> ov.Model:
    """The model of ``model_xml`` with every weight but those of the ``ignored`` operations compressed to
    ``STAND_IN_MODE``."""
    scope = nncf.IgnoredScope(names=ignored, validate=False) if ignored else None
    with bitwidth_tables_held_back():  # NNCF's table of the stand-in's precisions: not the model written
        return nncf.compress_weights(read_model(model_xml), mode=STAND_IN_MODE, ignored_scope=scope)


def write_stand_in(model_xml: Path, directory: Path) -> Path:
    """The model of ``model_xml`` compressed to ``STAND_IN_MODE`` (every weight, embeddings and output head too) and
    saved in ``directory``; returns the written ``.xml``. Compressed in two parts (``weight_parts``): the first is
    saved (``_FIRST_PART_XML``, removed after) and the second compressed on the saved model, so that one part's
    codes are held at a time; the same constants as compressing all at once. The float model's pages are dropped as
    it is read (the caller's ``releasing_file_pages``), the first part's as the second is saved, and each compressed
    model is freed once written."""
    first, *rest = weight_parts(read_model(model_xml))
    later = [name for part in rest for name in part]
    directory = Path(directory)
    xml, first_xml = directory / STAND_IN_XML, directory / _FIRST_PART_XML
    model = _compressed_without(model_xml, later)
    ov.save_model(model, first_xml, compress_to_fp16=False)
    del model
    release_file_mappings(Path(model_xml).with_suffix(".bin"))
    try:
        with releasing_file_pages(first_xml.with_suffix(".bin")):
            model = _compressed_without(first_xml, first)
            ov.save_model(model, xml, compress_to_fp16=False)
            del model
    finally:
        remove_ir(first_xml)
    return xml


@contextlib.contextmanager
def stand_in_for(
    model_xml: Path,
    compression: CompressionOptions,
    wanted: bool,
    scratch_dir: Path,
    log: Callable[[str], None],
    timer: StepTimer,
) -> Iterator[Path | None]:
    """The stand-in of ``model_xml`` (written in a temporary directory under ``scratch_dir``, timed as
    ``STAND_IN_PHASE``, removed on exit) when ``compression`` self-calibrates and the stand-in is ``wanted``; else
    None (the float model runs every phase)."""
    if compression.self_calibration is None or not wanted:
        yield None
        return
    scratch_dir.mkdir(parents=True, exist_ok=True)
    phases = ", ".join(sorted(STAND_IN_PHASES))
    log(
        f"INT8 stand-in: an INT8 copy of the float model (per channel) runs {phases} in its place, in half the memory "
        "of bf16 weights (--int8-stand-in)"
    )
    with tempfile.TemporaryDirectory(prefix=".nncf-hqq-stand-in-", dir=scratch_dir) as scratch:
        with timer.step(STAND_IN_PHASE):
            xml = write_stand_in(model_xml, Path(scratch))
        yield xml


def runs_in_place_of_float(stand_in: Path | None, phase: str) -> bool:
    """Whether ``stand_in`` (None: there is none) runs ``phase`` in place of the float model."""
    return stand_in is not None and phase in STAND_IN_PHASES


def model_for(phase: str, model_xml: Path, stand_in: Path | None) -> Path:
    """The IR that runs ``phase``: the stand-in where it takes the float model's place, else ``model_xml``."""
    return stand_in if stand_in is not None and runs_in_place_of_float(stand_in, phase) else model_xml


@contextlib.contextmanager
def running(stand_in: Path | None) -> Iterator[None]:
    """While the body runs, the pages of the stand-in's weights file are dropped as they are read
    (``releasing_file_pages``): a compiled stand-in holds the weights it packed, not the file's pages."""
    if stand_in is None:
        yield
        return
    with releasing_file_pages(stand_in.with_suffix(".bin")):
        yield


@contextlib.contextmanager
def statistics_collected_on(stand_in: Path | None) -> Iterator[None]:
    """For the duration, NNCF's activation statistics for weight compression are collected by running the stand-in
    instead of the model being compressed (``WeightCompression._collect_statistics`` in NNCF 3.4 gets the stand-in
    as its model). The statistic points name the float model's activations, which the stand-in has under the same
    names: NNCF's INT8 compression changes only the weights' constants. Without a stand-in, or where
    ``STATISTICS_PHASE`` keeps the float model, nothing changes."""
    name = "_collect_statistics"
    original = getattr(WeightCompression, name, None)
    if original is None or stand_in is None or not runs_in_place_of_float(stand_in, STATISTICS_PHASE):
        yield
        return
    xml = stand_in

    def on_stand_in(self: Any, dataset: Any, graph: Any, model: Any, statistic_points: Any) -> Any:
        if not isinstance(model, ov.Model):
            return original(self, dataset, graph, model, statistic_points)
        with running(xml):
            return original(self, dataset, graph, read_model(xml), statistic_points)

    setattr(WeightCompression, name, on_stand_in)
    try:
        yield
    finally:
        setattr(WeightCompression, name, original)
