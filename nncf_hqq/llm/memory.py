"""How much memory each phase of the compress and evaluate jobs needs, estimated before it starts, and the decision
on it: a phase that cannot fit in the machine's memory is refused up front (with what fits instead), never killed
halfway.

The sizes come from the model's files without loading it: the safetensors headers of a HF checkpoint, the
constants of an OpenVINO IR (read memory-mapped). The coefficients are what the phases measured on random
checkpoints of real shapes (``benchmarks/checkpoint_memory.py``, docs/memory.md):

- export (optimum-intel, in the checkpoint's precision): the checkpoint's pages (PyTorch maps the safetensors files;
  the converted model shares their memory), about the checkpoint's bytes;
- compression: NNCF's writer compresses the largest weight first, so its peak is the larger of that weight's working
  set (a few float32 copies of it, the compressed weights not yet there) and, at the end, the compressed weights
  plus the working set of the largest other weight (more copies when Scale Estimation and HQQ's data-aware steps
  and guard run on it); the IR's pages are dropped weight by weight (``nncf_hqq.openvino.pages``) and AWQ's
  rescaled weights are built one at a time (``nncf_hqq.openvino.rescaling``);
- a compiled float model (self-calibration's generation, NNCF's statistics, the output check's reference,
  ``evaluate``): the CPU plugin packs the weights into its own memory, in the precision they are stored in (an
  optimum-intel export keeps a bf16 checkpoint's weights in bf16, also in f32 inference), on the first inference; the
  command lines drop the weights file's pages meanwhile (``nncf_hqq.openvino.pages.releasing_file_pages``), so the
  packed copy is the float model's memory. Then its KV cache (f32, twice its keys and values: the plugin grows it in
  steps) and logits for the sequences it runs, from the model's ``config.json`` (not counted without one);
- the output check: one candidate at a time, compressed data-free or compiled from the file it was written to
  (about its compressed bytes), never the candidate kept nor the float model beside it (both wait on disk, the float
  model as its recorded logits), with the data-free working set and what the data-aware compression before it left
  in the process.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nncf_hqq.llm.layout import HF_CONFIG
from nncf_hqq.llm.layout import ir_xml
from nncf_hqq.llm.layout import read_model
from nncf_hqq.llm.options import JobError
from nncf_hqq.llm.stand_in import STAND_IN_BYTES_PER_PARAMETER
from nncf_hqq.llm.stand_in import STAND_IN_PARTS
from nncf_hqq.llm.stand_in import STAND_IN_PHASES
from nncf_hqq.llm.timing import COMPRESSION_PHASE
from nncf_hqq.llm.timing import EXPORT_PHASE
from nncf_hqq.llm.timing import OUTPUT_CHECK_PHASE
from nncf_hqq.llm.timing import OUTPUT_REFERENCE_PHASE
from nncf_hqq.llm.timing import SELF_CALIBRATION_PHASE
from nncf_hqq.llm.timing import STAND_IN_PHASE
from nncf_hqq.llm.timing import STATISTICS_PHASE
from nncf_hqq.self_calibration import SelfCalibration

GIB = 1024**3

#: Bytes per element of the safetensors dtypes a checkpoint stores.
SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
#: Python, OpenVINO, NNCF and optimum imported, tokenizers loaded.
BASELINE_BYTES = int(0.8 * GIB)
#: Export's peak resident memory over the checkpoint's bytes: PyTorch maps the checkpoint and the model loaded in its
#: precision keeps its tensors in that mapping, whose pages the conversion reads (measured 0.8-1.05x on a bf16 7B).
EXPORT_FACTOR = 1.0
#: Export's peak of a vision-language model over the checkpoint's bytes, anonymous memory the system cannot drop:
#: optimum-intel's image-text-to-text export holds more than two copies of the weights while it converts the parts
#: (Qwen2.5-VL-3B's shapes, bf16, 6.99 GiB: 16.84 GiB anonymous, 17.91 resident; optimum-cli's own int4 export of it
#: 16.6 anonymous; AMD EPYC, 2026-12-07).
VLM_EXPORT_FACTOR = 2.5
#: Compressed bytes per parameter: INT4 codes (0.5), a scale and zero point per group of 64 (0.06), the embeddings
#: and the output head in INT8 (their share is counted at 1 byte in ``compressed_bytes``).
INT4_BYTES_PER_PARAMETER = 0.56
#: Float32 copies of a weight that compressing it data-free (or to INT8) holds at once.
LARGEST_WEIGHT_COPIES = 3
#: Float32 copies of the largest body weight that a compression with calibration data holds beside the compressed
#: weights (NNCF's statistics' and Scale Estimation's leftovers, HQQ's data-aware steps and guard), from the
#: self-calibrated jobs' compression phases: anonymous memory less the baseline and the compressed weights, over the
#: largest body weight's float32 bytes. Phi-3.5-mini's shapes (gate/up projection 3072 x 16384) held 19.4 (6.51 GiB
#: with the INT8 stand-in) and Qwen2.5-7B's (down projection 3584 x 18944) 21 (10.52 GiB); once Scale Estimation's
#: compiled models and freed heap were let go before the writer (``HQQAlgoBackend.release_working_memory``) Phi-3.5
#: held 17.2 (6.09 GiB). The 7B's 21 less that 2.2, rounded up; the 7B is not measured again yet, nor the guard's
#: in-place errors on a whole job (one weight: 2 copies fewer). (docs/research-log.md, 2026-12-08 night.)
DATA_AWARE_WEIGHT_COPIES = 19
#: Float32 copies of the largest body weight that the output check holds beside the candidate it compresses
#: data-free (or has compiled): the data-free working set (``LARGEST_WEIGHT_COPIES``) and what the data-aware
#: compression before it left in the process (NNCF's statistics leave native memory the allocator keeps). Phi-3.5-mini's
#: shapes with the INT8 stand-in measured 4.60 GiB anonymous in the output check: the baseline, the compressed weights
#: (2.09 GiB) and 9.1 copies of its 3072 x 16384 gate/up projection. Qwen2.5-7B's shapes measured 11.63 GiB while the
#: data-free candidate (4.4 GiB) still stayed alive beside the next one, about 7.2 without it, against 7.5 by this
#: count (docs/research-log.md, 2026-12-08).
OUTPUT_CHECK_WEIGHT_COPIES = 9
#: Float32 copies of the largest weight that NNCF's INT8 compression holds at once while it writes the stand-in
#: (measured when it was written in one part: 1.76 GiB resident on Qwen2.5-0.5B's shapes, whose largest weight is the
#: embedding table; estimated 1.77 then).
STAND_IN_WORKING_COPIES = 1
#: The CPU plugin's memory for a stateful KV cache over the keys and values it holds: it grows the cache in steps of
#: capacity, and holds the old cache while it copies it into the new (self-calibration's generation of SmolLM2-135M,
#: 32 sequences: 0.34 GiB more at 160 tokens than at 32, for 0.18 GiB of keys and values; Phi-3.5-mini's shapes with
#: the INT8 stand-in: 9.82 GiB anonymous generating its calibration text, against 7.4 GiB estimated with the keys and
#: values counted once; AMD EPYC, 2026-12-07).
KV_CACHE_GROWTH = 2
#: Bytes per parameter of a model compiled in bf16 (``nncf-hqq evaluate --inference-precision bf16``) at most.
BF16_COMPILED_BYTES = 2


@dataclass(frozen=True)
class DecoderShape:
    """What a decoder's inference memory depends on besides its weights (from its ``config.json``)."""

    layers: int
    kv_heads: int
    head_dim: int
    vocabulary: int

    def kv_bytes_per_token(self) -> int:
        """Bytes of one token's keys and values in every layer, in f32."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 4

    def working_bytes(self, sequences: int, tokens: int, first_request_tokens: int) -> int:
        """KV cache of ``sequences`` of ``tokens`` (as the CPU plugin allocates it: ``KV_CACHE_GROWTH``) and the f32
        logits of a first request of ``first_request_tokens`` tokens for each."""
        kv = KV_CACHE_GROWTH * sequences * tokens * self.kv_bytes_per_token()
        return kv + sequences * first_request_tokens * self.vocabulary * 4


def decoder_shape(config_dir: Path) -> DecoderShape | None:
    """The ``DecoderShape`` in ``config_dir/config.json`` (None: no such file, or not a decoder's config)."""
    try:
        config = json.loads((Path(config_dir) / HF_CONFIG).read_text())
        config = config.get("text_config", config)
        layers, heads, hidden = config["num_hidden_layers"], config["num_attention_heads"], config["hidden_size"]
        kv_heads = config.get("num_key_value_heads") or heads
        head_dim = config.get("head_dim") or hidden // heads
        return DecoderShape(int(layers), int(kv_heads), int(head_dim), int(config["vocab_size"]))
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError, AttributeError):
        return None


@dataclass(frozen=True)
class ModelSize:
    """A model's weights as stored: parameters, bytes, and the largest tensor, the embedding-like ones and the
    largest of the others (by parameters; 0: not known, taken as ``largest``)."""

    parameters: int
    stored_bytes: int
    largest: int
    vocabulary_parameters: int = 0
    decoder: DecoderShape | None = None
    largest_body: int = 0

    def compressed_bytes(self) -> int:
        """About the bytes of the model compressed to INT4 (INT8 embeddings and output head)."""
        body = self.parameters - self.vocabulary_parameters
        return int(body * INT4_BYTES_PER_PARAMETER + self.vocabulary_parameters * 1.0)

    def compiled_bytes(self, precision: str = "f32") -> int:
        """The weights of the float model compiled in ``precision`` (``f32``: as stored; ``bf16``: 2 bytes a
        parameter at most)."""
        if precision == "f32":
            return self.stored_bytes
        return min(self.stored_bytes, BF16_COMPILED_BYTES * self.parameters)

    def compression_bytes(self, data_aware: bool) -> int:
        """The compression's peak over the baseline: the largest weight's working set (compressed first) or the
        compressed weights and the working set of the largest other weight (``DATA_AWARE_WEIGHT_COPIES`` with
        calibration data), whichever is larger."""
        copies = DATA_AWARE_WEIGHT_COPIES if data_aware else LARGEST_WEIGHT_COPIES
        body = self.largest_body or self.largest
        return max(LARGEST_WEIGHT_COPIES * 4 * self.largest, self.compressed_bytes() + copies * 4 * body)

    def output_check_bytes(self) -> int:
        """The output check's peak over the baseline: the largest weight's working set (each data-free candidate
        compresses it first) or one candidate's compressed weights with ``OUTPUT_CHECK_WEIGHT_COPIES`` of the
        largest other weight, whichever is larger."""
        body = self.largest_body or self.largest
        candidate = self.compressed_bytes() + OUTPUT_CHECK_WEIGHT_COPIES * 4 * body
        return max(LARGEST_WEIGHT_COPIES * 4 * self.largest, candidate)

    def stand_in_bytes(self) -> int:
        """The weights of the float model's INT8 stand-in (``nncf_hqq.llm.stand_in``)."""
        return int(self.parameters * STAND_IN_BYTES_PER_PARAMETER)

    def float_model_parts(
        self, sequences: int, tokens: int, first_request_tokens: int, stand_in: bool = False
    ) -> tuple[tuple[str, int], ...]:
        """The parts of a phase that runs the float model (compiled in f32), or its INT8 stand-in, on ``sequences``
        of ``tokens`` at once."""
        if stand_in:
            parts = [("INT8 stand-in's packed weights", self.stand_in_bytes())]
        else:
            parts = [("float model's packed weights", self.compiled_bytes())]
        if self.decoder is not None:
            working = self.decoder.working_bytes(sequences, tokens, first_request_tokens)
            parts.append(("KV cache and logits", working))
        return tuple(parts)


def safetensors_size(hf_dir: Path) -> ModelSize | None:
    """The size of the weights in ``hf_dir``'s safetensors files, from their headers (None: there are none)."""
    files = sorted(Path(hf_dir).glob("*.safetensors"))
    if not files:
        return None
    parameters = stored = largest = vocabulary = body = 0
    for file in files:
        for name, entry in _safetensors_header(file).items():
            if name == "__metadata__":
                continue
            count = math.prod(entry["shape"])
            parameters += count
            stored += count * SAFETENSORS_BYTES.get(entry["dtype"], 4)
            largest = max(largest, count)
            if _is_vocabulary(name):
                vocabulary += count
            else:
                body = max(body, count)
    return ModelSize(parameters, stored, largest, vocabulary, largest_body=body)


def _safetensors_header(path: Path) -> dict[str, Any]:
    with path.open("rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        header: dict[str, Any] = json.loads(file.read(length))
    return header


def _is_vocabulary(name: str) -> bool:
    return any(part in name for part in ("embed_tokens", "lm_head", "wte", "word_embeddings", "embed_out"))


def ir_size(model: Any) -> ModelSize:
    """The size of an OpenVINO model's float weights (2-D and larger constants), from its constants' shapes."""
    parameters = stored = largest = vocabulary = body = 0
    for op in model.get_ops():
        if op.get_type_name() != "Constant" or len(op.get_output_shape(0)) < 2:
            continue
        element = op.get_element_type()
        if not element.is_real():
            continue
        count = math.prod(op.get_output_shape(0))
        parameters += count
        stored += count * element.size
        largest = max(largest, count)
        if _is_vocabulary(op.get_friendly_name()):
            vocabulary += count
        else:
            body = max(body, count)
    return ModelSize(parameters, stored, largest, vocabulary, largest_body=body)


@dataclass(frozen=True)
class PhaseEstimate:
    """A phase's estimated peak memory, and what makes it up (for the message)."""

    phase: str
    parts: tuple[tuple[str, int], ...]
    #: Bytes of ``total`` that are pages of a file mapped read-only in effect (the checkpoint PyTorch maps), which the
    #: system drops under pressure and reads again when they are needed: resident, but not needed at once.
    reclaimable: int = 0

    @property
    def total(self) -> int:
        """The peak resident memory expected."""
        return BASELINE_BYTES + sum(value for _, value in self.parts)

    @property
    def needed(self) -> int:
        """The memory the phase cannot run without: ``total`` less the file pages the system can drop."""
        return self.total - self.reclaimable

    def describe(self) -> str:
        parts = ", ".join(f"{name} {value / GIB:.1f}" for name, value in self.parts)
        dropped = f"; {self.reclaimable / GIB:.1f} of it file pages the system can drop" if self.reclaimable else ""
        return (
            f"{self.phase}: about {self.total / GIB:.1f} GiB ({parts}; Python and libraries "
            f"{BASELINE_BYTES / GIB:.1f}{dropped})"
        )


def compress_estimates(
    size: ModelSize,
    export: bool,
    generation: SelfCalibration | None,
    held_out: int,
    stand_in: bool = False,
    vision_language: bool = False,
) -> list[PhaseEstimate]:
    """The phases the compress job will run on a model of ``size`` and the peak memory each needs: ``export`` (a HF
    model; ``vision_language``: exported as image-text-to-text), self-calibrated with ``generation`` (its sequences;
    None: data-free), output-checked on ``held_out`` generated sequences (0: no check), with the float model's INT8
    stand-in in the phases ``STAND_IN_PHASES`` names when ``stand_in``."""
    compressed = size.compressed_bytes()
    phases = []
    if export and vision_language:
        copies = int(VLM_EXPORT_FACTOR * size.stored_bytes)
        phases.append(PhaseEstimate(EXPORT_PHASE, (("vision-language export's copies of the weights", copies),)))
    elif export:
        pages = int(EXPORT_FACTOR * size.stored_bytes)
        converted = size.largest * size.stored_bytes // max(size.parameters, 1)  # the largest weight, as stored
        parts: tuple[tuple[str, int], ...] = (("checkpoint being converted", pages),)
        phases.append(PhaseEstimate(EXPORT_PHASE, parts, reclaimable=max(pages - converted, 0)))
    if generation is not None:
        if stand_in:
            copies = STAND_IN_WORKING_COPIES * 4 * size.largest
            parts = (
                (f"INT8 copy, one of {STAND_IN_PARTS} parts at a time", size.stand_in_bytes() // STAND_IN_PARTS),
                ("working set", copies),
            )
            phases.append(PhaseEstimate(STAND_IN_PHASE, parts))

        def runs(phase: str, sequences: int, tokens: int, first: int) -> PhaseEstimate:
            return PhaseEstimate(
                phase, size.float_model_parts(sequences, tokens, first, stand_in and phase in STAND_IN_PHASES)
            )

        tokens, first_request = generation.seq_len, 1 + generation.prompt_len  # BOS and a window of prompt text
        if held_out:  # generated like the calibration text, then the logits recorded one sequence at a time
            phases.append(runs(OUTPUT_REFERENCE_PHASE, held_out, tokens, first_request))
        phases.append(runs(SELF_CALIBRATION_PHASE, generation.num_samples, tokens, first_request))
        phases.append(runs(STATISTICS_PHASE, 1, tokens, tokens))  # one sequence at a time
    compressing = size.compression_bytes(data_aware=generation is not None)
    if compressing == LARGEST_WEIGHT_COPIES * 4 * size.largest:
        compression: tuple[tuple[str, int], ...] = (("the largest weight's working set", compressing),)
    else:
        compression = (("compressed weights", compressed), ("working set", compressing - compressed))
    phases.append(PhaseEstimate(COMPRESSION_PHASE, compression))
    if generation is not None and held_out:  # the kept candidate waits on disk
        checking = size.output_check_bytes()
        if checking == LARGEST_WEIGHT_COPIES * 4 * size.largest:
            check: tuple[tuple[str, int], ...] = (("the largest weight's working set", checking),)
        else:
            check = (
                ("one candidate being compressed data-free, or compiled", compressed),
                ("working set and what the data-aware steps left", checking - compressed),
            )
        phases.append(PhaseEstimate(OUTPUT_CHECK_PHASE, check))
    return phases


def evaluate_estimate(size: ModelSize, candidate_bytes: Sequence[int], precision: str = "f32") -> PhaseEstimate:
    """``evaluate``'s peak: the float model compiled in ``precision`` (``ModelSize.compiled_bytes``) and the largest
    candidate (``candidate_bytes``: their weights files; one is compiled at a time)."""
    parts = (
        (f"float model compiled in {precision}", size.compiled_bytes(precision)),
        ("candidate", max(candidate_bytes, default=0)),
    )
    return PhaseEstimate("evaluate", parts)


def available_bytes() -> int:
    """Memory the system can give without swapping (``psutil``'s ``available``)."""
    import psutil

    return int(psutil.virtual_memory().available)


def too_large(estimates: Sequence[PhaseEstimate], available: int) -> list[PhaseEstimate]:
    """The phases that need more than ``available`` (``PhaseEstimate.needed``)."""
    return [e for e in estimates if e.needed > available]


# --------------------------------------------------------------------------------------------------------------------
# Decisions
# --------------------------------------------------------------------------------------------------------------------
class NotEnoughMemoryError(JobError, RuntimeError):
    """A phase's estimated memory exceeds what the machine has available: refused before anything starts."""


def first_line(err: BaseException) -> str:
    """The first line of an error's message, at most 200 characters."""
    return (str(err).splitlines() or [""])[0][:200]


@dataclass(frozen=True)
class MemoryPlan:
    """What ``check_compress_memory`` decided: the estimate of every phase and whether the INT8 stand-in runs the
    float model's phases (``stand_in``), with the reason when it was chosen for the memory (``why``)."""

    estimates: tuple[PhaseEstimate, ...]
    stand_in: bool
    why: str | None = None


def check_compress_memory(
    model: str,
    size: ModelSize,
    export: bool,
    generation: SelfCalibration | None,
    held_out: int,
    log: Callable[[str], None],
    refuse: bool = True,
    stand_in: bool | None = False,
    available: int | None = None,
    vision_language: bool = False,
) -> MemoryPlan:
    """The estimates of every phase the compress job will run (``compress_estimates``), the largest logged, within
    ``available`` bytes (default: what the system has available, ``available_bytes``).

    ``vision_language``: a HF vision-language model, exported as image-text-to-text. ``stand_in``: True or False
    runs the phases as asked; None (automatic) runs the float model where every phase
    fits, and the INT8 stand-in where only it fits (logged, with the estimate that did not fit). With ``refuse``,
    ``NotEnoughMemoryError`` names the phases that exceed the memory available and the options that fit.
    """
    available = available_bytes() if available is None else available
    why = None
    if stand_in is None:
        why = _why_stand_in(size, export, generation, held_out, available)
        stand_in = why is not None
        if why is not None:
            log(f"memory: {why}")
    estimates = compress_estimates(size, export, generation, held_out, stand_in, vision_language)
    peak = max(estimates, key=lambda e: e.total)
    log(f"memory: {peak.describe()} at most; {available / GIB:.1f} GiB available")
    over = too_large(estimates, available)
    if not over or not refuse:
        return MemoryPlan(tuple(estimates), stand_in, why)
    fits = []
    with_stand_in = compress_estimates(size, export, generation, held_out, True, vision_language)
    if generation is not None and not stand_in and not too_large(with_stand_in, available):
        fits.append("{int8_stand_in}")
    data_free = compress_estimates(size, export, None, 0, vision_language=vision_language)
    if generation is not None and not too_large(data_free, available):
        fits.append("{no_self_calibration} (data-free)")
    instead = f"; {' or '.join(fits)} fits" if fits else ""
    if any(e.phase == EXPORT_PHASE for e in over):
        instead += (
            "; export the model on a larger machine (optimum-cli export openvino --model MODEL --weight-format fp16 "
            "DIR) and compress DIR"
        )
    msg = "not enough memory for {model_path}: {needs}, but {available} GiB is available" + instead
    msg += " ({no_memory_check} runs it anyway)"
    needs = "; ".join(e.describe() for e in over)
    raise NotEnoughMemoryError(msg, model_path=model, needs=needs, available=f"{available / GIB:.1f}")


def _why_stand_in(
    size: ModelSize, export: bool, generation: SelfCalibration | None, held_out: int, available: int
) -> str | None:
    """Why the automatic choice runs the INT8 stand-in: a phase of the float model does not fit in ``available``
    and every phase with the stand-in does; None where the float model fits (or nothing fits either way, which the
    refusal then says)."""
    if generation is None:
        return None
    over = too_large(compress_estimates(size, export, generation, held_out, stand_in=False), available)
    if not over or too_large(compress_estimates(size, export, generation, held_out, stand_in=True), available):
        return None
    largest = max(over, key=lambda e: e.total)
    return (
        f"the float model's {largest.phase} needs about {largest.total / GIB:.1f} GiB, more than the "
        f"{available / GIB:.1f} GiB available: an INT8 copy of it runs the phases that need its outputs "
        "(--no-int8-stand-in, int8_stand_in=False, refuses instead)"
    )


def check_evaluate_memory(
    reference: Path, candidates: Sequence[Path], precision: str, log: Callable[[str], None], refuse: bool = True
) -> PhaseEstimate | None:
    """Estimates the evaluate job's peak memory (the float model compiled in ``precision``, the largest candidate;
    None when the reference cannot be read: the evaluation says why) and, with ``refuse``, raises
    ``NotEnoughMemoryError`` when it exceeds the memory available, naming bf16 inference when that fits."""
    try:
        size = ir_size(read_model(reference))
    except RuntimeError as err:  # not an IR OpenVINO reads: the evaluation itself says why, in its own words
        log(f"memory: not estimated ({reference} could not be read: {first_line(err)})")
        return None
    weights = [ir_xml(c).with_suffix(".bin") for c in candidates]
    candidate_bytes = [w.stat().st_size for w in weights if w.is_file()]
    estimate = evaluate_estimate(size, candidate_bytes, precision)
    available = available_bytes()
    log(f"memory: {estimate.describe()}; {available / GIB:.1f} GiB available")
    if estimate.total <= available or not refuse:
        return estimate
    instead = ""
    if precision == "f32" and evaluate_estimate(size, candidate_bytes, "bf16").total <= available:
        instead = "; {inference_precision=bf16} fits"
    msg = "not enough memory to evaluate against {reference}: {needs}, but {available} GiB is available" + instead
    msg += " ({no_memory_check} runs it anyway)"
    raise NotEnoughMemoryError(msg, reference=reference, needs=estimate.describe(), available=f"{available / GIB:.1f}")
