"""OpenVINO CPU inference cost of the zero-point formats: latency (prefill, decode) and compiled-model memory.

Variants (every one compressed from the same f16 IR of the float model, so weights left uncompressed, like SmolLM2's
tied embedding / lm_head under INT4 with backup_mode NONE, are f16 in all of them):

    fp16       uncompressed weights stored as f16
    rtn        NNCF INT4_ASYM round-to-nearest: u4 codes, u4 zero point, f16 scale
    hqq_float  hqq=True (HQQ_DEFAULT): u4 codes, f16 zero point, f16 scale
    hqq_int    hqq_params=HQQParameters(zero_point_format="integer", refine_rounds=5): u4 zero point
    hqq_split  hqq_params={"zero_point_format": "split"}: HQQ's float zero point as the nearest u4 one plus an output
               correction per MatMul (group sums of its input, a correction MatMul with int8 rows, Add)
    hqq_split_f16  the same split with f16 correction weights (``split_float_zero_points(correction="f16")``, the
               split format before 2026-12-06), for comparison
    int4_sym   NNCF INT4_SYM: i4 codes, no zero point (reference for the symmetric formats)
    int8_rtn   NNCF INT8_ASYM (per channel): u8 codes, u8 zero point
    int8_hqq   INT8_ASYM with hqq=True: u8 codes, f16 zero point

The split variants of a model are written from its ``hqq_float`` IR by ``split_float_zero_points`` (the pass that
``zero_point_format="split"`` runs after NNCF has written the model, so the result is the same), which saves one HQQ
compression per split variant.

Models: ``matmul`` (a stack of 4096x4096 MatMuls, g128), ``decoder`` (a small decoder-like stack of MatMuls:
fused QKV, O, gate/up/down, g128), ``qwen1.5b_layers`` and ``qwen7b_layers`` (decoder layers at the MatMul shapes of
Qwen2.5-1.5B and Qwen2.5-7B: q/k/v with biases, o, gate/up, down; hidden 1536 / 3584, KV width 256 / 512,
intermediate 8960 / 18944; 4 / 2 layers; g128; attention replaced by a cheap mix of q, k and v), ``smollm2`` (the
stateful SmolLM2-135M IR, g64, ratio 1, backup_mode NONE), ``qwen`` (the stateful Qwen2.5-1.5B-shaped IR, g128, the
same settings; not in the default set: ~1.1 GB download).

Latency: all variants of a model are compiled in one process (``PERFORMANCE_HINT=LATENCY``,
``INFERENCE_NUM_THREADS=2``, otherwise the CPU plugin's defaults unless ``--config`` says otherwise) and measured
in interleaved rounds; in each round the variants take turns, one inference at a time, at 128-token prefills and then
at single-token decode steps (continuing each variant's KV cache for SmolLM2). The rounds are split among
``--latency-processes`` fresh processes (default 3), each compiling the variants in a new random order: one compiled
instance of a model can run 10% faster or slower than another of the same IR (``measure_latency``). Reported: medians
over rounds, and the median over rounds of each round's ratio to RTN.
Memory: every variant is read, compiled and run once (prefill + one decode step) in a fresh child process; the RSS
growth over a baseline (the CPU plugin already loaded by a tiny model) is reported, steady and peak.

    python benchmarks/inference.py --out results/inference.json              # all three models (~35 min, 2 busy cores)
    python benchmarks/inference.py --quick --models matmul,decoder            # smoke run (~1 min)
    python benchmarks/inference.py --irs rtn=RTN_DIR,hqq=OUT --rounds 12 --prefill-reps 1 --decode-steps 32
                                         # written model dirs (stateful LLMs, a VLM's language model) instead
    python benchmarks/inference.py --models smollm2 --config accuracy         # f32, no dynamic quantization
    python benchmarks/inference.py --models qwen1.5b_layers,qwen7b_layers --variants rtn,hqq_float,hqq_split,\
        hqq_split_f16 --memory-rounds 1 --out results/inference_layers.json  # the 1.5B / 7B layer shapes

``--max-isa`` caps the instruction sets oneDNN uses (``ONEDNN_MAX_CPU_ISA``, set before the CPU plugin loads, and in
the memory probes' processes): ``--max-isa AVX512_CORE_VNNI --config f32`` runs an AVX-512 CPU with VNNI but without
BF16 (Cascade Lake, Ice Lake) on this one. Caps below that (AVX2, AVX2_VNNI) make the plugin fail to create its
compressed FullyConnected primitives (it still sees the CPU's own capabilities), so AVX2-only CPUs cannot be
emulated this way.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
from nncf.common.logging import nncf_logger
from openvino import opset13 as opset

PREFILL_TOKENS = 128
MODELS = ("matmul", "decoder", "qwen1.5b_layers", "qwen7b_layers", "smollm2", "qwen")
DEFAULT_MODELS = ("matmul", "decoder", "qwen1.5b_layers", "qwen7b_layers", "smollm2")
THREADS = 2
PROBE_FLAG = "--_memory-probe"
LOWBIT_FLAG = "--_lowbit-probe"
LATENCY_FLAG = "--_latency-probe"

#: Extra CPU properties on top of PERFORMANCE_HINT=LATENCY and INFERENCE_NUM_THREADS=2.
CONFIGS: dict[str, dict[str, str]] = {
    "default": {},
    "no-dq": {"DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"},
    "f32": {"INFERENCE_PRECISION_HINT": "f32"},  # what the plugin picks on CPUs without bf16 (with --max-isa)
    "accuracy": {
        "INFERENCE_PRECISION_HINT": "f32",
        "KV_CACHE_PRECISION": "f32",
        "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
    },
}
#: Properties read back from every compiled model and recorded in the JSON.
RECORDED_PROPERTIES = (
    "INFERENCE_PRECISION_HINT",
    "KV_CACHE_PRECISION",
    "DYNAMIC_QUANTIZATION_GROUP_SIZE",
    "PERFORMANCE_HINT",
    "INFERENCE_NUM_THREADS",
    "NUM_STREAMS",
    "ENABLE_HYPER_THREADING",
    "ENABLE_CPU_PINNING",
)


@dataclasses.dataclass(frozen=True)
class Variant:
    """How one row is produced: None mode means the uncompressed (f16-stored) model."""

    mode: str | None
    hqq: bool = False
    hqq_params: dict[str, Any] | None = None
    grouped: bool = True  # INT8 modes are per channel in NNCF
    #: Written from the ``hqq_float`` IR by ``split_float_zero_points`` with this correction type.
    split_correction: str | None = None


VARIANTS: dict[str, Variant] = {
    "fp16": Variant(None),
    "rtn": Variant("INT4_ASYM"),
    "hqq_float": Variant("INT4_ASYM", hqq=True),
    "hqq_int": Variant("INT4_ASYM", hqq=True, hqq_params={"zero_point_format": "integer", "refine_rounds": 5}),
    "hqq_split": Variant("INT4_ASYM", hqq=True, hqq_params={"zero_point_format": "split"}, split_correction="int8"),
    "hqq_split_f16": Variant("INT4_ASYM", hqq=True, split_correction="f16"),
    "int4_sym": Variant("INT4_SYM"),
    "int8_rtn": Variant("INT8_ASYM", grouped=False),
    "int8_hqq": Variant("INT8_ASYM", hqq=True, grouped=False),
    "int8_split": Variant("INT8_ASYM", hqq=True, hqq_params={"zero_point_format": "split"}, grouped=False),
}
BASELINES = {"int8_hqq": "int8_rtn", "int8_split": "int8_rtn"}  # secondary ratio reported besides the ratio to RTN


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A benchmark model: how to build its float ``ov.Model`` and how to compress it."""

    name: str
    build: Callable[[], ov.Model]
    group_size: int
    stateful_llm: bool
    all_layers: bool


# --------------------------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------------------------
def _weight(rng: np.random.Generator, out_features: int, in_features: int) -> ov.Node:
    values = (rng.standard_t(4, size=(out_features, in_features)) * 0.02).astype(np.float32)
    return opset.constant(values, dtype=ov.Type.f32)


def _linear(x: ov.Output | ov.Node, rng: np.random.Generator, out_features: int, in_features: int) -> ov.Node:
    return opset.matmul(x, _weight(rng, out_features, in_features), False, True)


def matmul_stack(hidden: int, layers: int, seed: int = 0) -> ov.Model:
    """``layers`` square ``hidden x hidden`` MatMuls in a chain, input ``[1, T, hidden]`` f32."""
    rng = np.random.default_rng(seed)
    x = opset.parameter([1, -1, hidden], ov.Type.f32, name="x")
    y: ov.Node = x
    for _ in range(layers):
        y = _linear(y, rng, hidden, hidden)
    return ov.Model([opset.result(y)], [x], "matmul_stack")


def decoder_stack(hidden: int, intermediate: int, kv: int, layers: int, seed: int = 0) -> ov.Model:
    """Decoder-like MatMuls without attention: norm gain, fused QKV, a cheap q/k/v mix, O, SiLU-gated MLP."""
    rng = np.random.default_rng(seed)
    x = opset.parameter([1, -1, hidden], ov.Type.f32, name="x")
    h: ov.Node = x
    for _ in range(layers):
        gain = opset.constant((1.0 + rng.random(hidden)).astype(np.float32))
        normed = opset.multiply(h, gain)
        q, k, v = opset.variadic_split(_linear(normed, rng, hidden + 2 * kv, hidden), -1, [hidden, kv, kv]).outputs()
        mix = opset.sigmoid(opset.reduce_mean(opset.multiply(k, v), np.int64(-1), True))
        h = opset.add(h, _linear(opset.multiply(q, mix), rng, hidden, hidden))
        normed = opset.multiply(h, opset.constant((1.0 + rng.random(hidden)).astype(np.float32)))
        gate = opset.swish(_linear(normed, rng, intermediate, hidden))
        up = _linear(normed, rng, intermediate, hidden)
        h = opset.add(h, _linear(opset.multiply(gate, up), rng, hidden, intermediate))
    return ov.Model([opset.result(h)], [x], "decoder_stack")


def qwen_layers(hidden: int, intermediate: int, kv: int, layers: int, seed: int = 0) -> ov.Model:
    """Decoder layers at Qwen2.5's MatMul shapes: norm gain, q/k/v projections with biases (each its own MatMul, as
    in the exported models), a cheap mix of q, k and v in place of attention, o, SiLU-gated MLP (gate, up, down)."""
    rng = np.random.default_rng(seed)
    x = opset.parameter([1, -1, hidden], ov.Type.f32, name="x")
    h: ov.Node = x

    def gain() -> ov.Node:
        return opset.constant((1.0 + rng.random(hidden)).astype(np.float32))

    def biased(source: ov.Node, out_features: int) -> ov.Node:
        bias = opset.constant((0.02 * rng.standard_normal(out_features)).astype(np.float32))
        return opset.add(_linear(source, rng, out_features, hidden), bias)

    for _ in range(layers):
        normed = opset.multiply(h, gain())
        q, k, v = biased(normed, hidden), biased(normed, kv), biased(normed, kv)
        mix = opset.sigmoid(opset.reduce_mean(opset.multiply(k, v), np.int64(-1), True))
        h = opset.add(h, _linear(opset.multiply(q, mix), rng, hidden, hidden))
        normed = opset.multiply(h, gain())
        gate = opset.swish(_linear(normed, rng, intermediate, hidden))
        up = _linear(normed, rng, intermediate, hidden)
        h = opset.add(h, _linear(opset.multiply(gate, up), rng, hidden, intermediate))
    return ov.Model([opset.result(h)], [x], "qwen_layers")


def smollm2_model() -> ov.Model:
    from nncf_hqq.llm.layout import ir_xml
    from nncf_hqq.llm.zoo import smollm2_ov_dir

    return ov.Core().read_model(ir_xml(smollm2_ov_dir()))


def qwen_model() -> ov.Model:
    from nncf_hqq.llm.layout import ir_xml
    from nncf_hqq.llm.zoo import qwen_ov_dir

    return ov.Core().read_model(ir_xml(qwen_ov_dir()))


def model_specs(quick: bool) -> dict[str, ModelSpec]:
    if quick:
        matmul, decoder = (lambda: matmul_stack(1024, 2)), (lambda: decoder_stack(512, 1408, 128, 2))
    else:
        matmul, decoder = (lambda: matmul_stack(4096, 4)), (lambda: decoder_stack(2048, 5632, 512, 2))
    layers_15b, layers_7b = (1, 1) if quick else (4, 2)
    qwen15, qwen7 = (
        (lambda: qwen_layers(1536, 8960, 256, layers_15b)),
        (lambda: qwen_layers(3584, 18944, 512, layers_7b)),
    )
    return {
        "matmul": ModelSpec("matmul", matmul, 128, stateful_llm=False, all_layers=True),
        "decoder": ModelSpec("decoder", decoder, 128, stateful_llm=False, all_layers=True),
        "qwen1.5b_layers": ModelSpec("qwen1.5b_layers", qwen15, 128, stateful_llm=False, all_layers=True),
        "qwen7b_layers": ModelSpec("qwen7b_layers", qwen7, 128, stateful_llm=False, all_layers=True),
        "smollm2": ModelSpec("smollm2", smollm2_model, 64, stateful_llm=True, all_layers=False),
        "qwen": ModelSpec("qwen", qwen_model, 128, stateful_llm=True, all_layers=False),
    }


# --------------------------------------------------------------------------------------------------------------------
# Compression
# --------------------------------------------------------------------------------------------------------------------
def compress(model: ov.Model, spec: ModelSpec, variant: Variant) -> ov.Model:
    """The variant of ``model`` (``model`` is cloned first, never changed)."""
    import nncf

    import nncf_hqq

    model = model.clone()
    if variant.mode is None:
        return model
    kwargs: dict[str, Any] = {
        "mode": nncf.CompressWeightsMode[variant.mode],
        "group_size": spec.group_size if variant.grouped else None,
    }
    if variant.grouped:  # NNCF's INT8 modes are per channel, always on all layers, and refuse these options
        kwargs.update(ratio=1.0, backup_mode=nncf.BackupMode.NONE, all_layers=spec.all_layers)
    if variant.hqq:
        kwargs.update(hqq=True, hqq_params=variant.hqq_params)
    return nncf_hqq.compress_weights(model, **kwargs)


def split_variant(float_xml: Path, correction: str) -> ov.Model:
    """The ``hqq_float`` IR with its f16 zero points split (``correction``: how the correction weights are stored)."""
    from nncf_hqq.openvino.split import split_float_zero_points

    model = ov.Core().read_model(float_xml)
    split_float_zero_points(model, correction=correction)
    return model


def decompression_summary(model: ov.Model) -> dict[str, int]:
    """Counts of the constants by role and type: ``zero_point:u4``, ``scale:f16``, ``hqq_split_correction:i8``
    (split zero points), ``weight:u4`` (weights: the other constants of at least 4096 elements, e.g. ``weight:f16``
    for uncompressed ones)."""
    counts: dict[str, int] = {}
    for op in model.get_ops():
        if op.get_type_name() != "Constant":
            continue
        name = op.get_friendly_name()
        role = next((r for r in ("zero_point", "scale", "hqq_split_correction") if name.endswith(f"/{r}")), None)
        if role is None and int(np.prod(op.get_output_shape(0))) >= 4096:
            role = "weight"
        if role:
            key = f"{role}:{op.get_element_type().get_type_name()}"
            counts[key] = counts.get(key, 0) + 1
    return counts


def f16_source(spec: ModelSpec, workdir: Path) -> ov.Model:
    """The float model saved as an f16 IR (``ov.save_model``'s default, optimum-intel's default export) and read
    back: every variant is compressed from it, so weights left uncompressed are f16 in all of them. (Saving an
    NNCF-compressed f32 model would keep them f32: ``save_model`` ignores ``compress_to_fp16`` for such models.)"""
    xml = workdir / spec.name / "source_f16" / "model.xml"
    if not xml.is_file():
        xml.parent.mkdir(parents=True, exist_ok=True)
        ov.save_model(spec.build(), xml, compress_to_fp16=True)
    return ov.Core().read_model(xml)


def prepare_models(
    spec: ModelSpec, variants: list[str], workdir: Path, reuse: bool = False
) -> dict[str, dict[str, Any]]:
    """Compress and save every variant; returns per-variant info (path, IR size, compression time, formats).

    With ``reuse``, an IR already saved in ``workdir`` by an earlier run is taken as it is.
    """
    source: ov.Model | None = None
    info: dict[str, dict[str, Any]] = {}
    for name in sorted(variants, key=lambda n: VARIANTS[n].split_correction is not None):  # hqq_float before splits
        xml = workdir / spec.name / name / "model.xml"
        seconds = None
        if not (reuse and xml.is_file()):
            start = time.perf_counter()
            correction = VARIANTS[name].split_correction
            float_xml = workdir / spec.name / "hqq_float" / "model.xml"
            if correction is not None and not (float_xml.is_file() and ("hqq_float" in variants or reuse)):
                source = source or f16_source(spec, workdir)
                float_xml.parent.mkdir(parents=True, exist_ok=True)
                ov.save_model(compress(source, spec, VARIANTS["hqq_float"]), float_xml)
            if correction is not None:
                model = split_variant(float_xml, correction)
            else:
                source = source or f16_source(spec, workdir)
                model = compress(source, spec, VARIANTS[name])
            seconds = time.perf_counter() - start
            xml.parent.mkdir(parents=True, exist_ok=True)
            ov.save_model(model, xml)
            del model
        info[name] = {
            "xml": str(xml),
            "ir_bytes": xml.with_suffix(".bin").stat().st_size,
            "compress_seconds": seconds,
            "constants": decompression_summary(ov.Core().read_model(xml)),
        }
        print(f"  {spec.name}/{name}: compressed in {seconds or 0:.1f} s, IR {info[name]['ir_bytes'] / 2**20:.1f} MiB")
        gc.collect()
    return info


# --------------------------------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------------------------------
class Runner:
    """A compiled variant with a prefill and a decode step (stateful LLM with KV cache, or a plain MatMul stack)."""

    def __init__(self, compiled: Any, stateful_llm: bool, width: int, seed: int = 0) -> None:
        self.compiled = compiled
        self.request = compiled.create_infer_request()
        self.stateful_llm = stateful_llm
        self.position = 0
        rng = np.random.default_rng(seed)
        if stateful_llm:
            ports = {name: port for port in compiled.inputs for name in port.get_names()}
            self.names = set(ports)
            self.tokens = rng.integers(100, 20000, size=PREFILL_TOKENS + 4096, dtype=np.int64)
            # 3 for Qwen2-VL's multimodal rotary positions ``[3, batch, tokens]``
            positions = ports.get("position_ids")
            self.position_rank = 2 if positions is None else positions.get_partial_shape().rank.get_length()
            self.embeddings: np.ndarray | None = None
            if "inputs_embeds" in self.names:  # a VLM's language model takes embeddings, not token ids
                hidden = ports["inputs_embeds"].get_partial_shape()[2].get_length()
                size = (PREFILL_TOKENS + 4096, hidden)
                self.embeddings = (0.02 * rng.standard_normal(size)).astype(np.float32)
        else:
            self.prefill_x = rng.standard_normal((1, PREFILL_TOKENS, width)).astype(np.float32)
            self.decode_x = rng.standard_normal((1, 1, width)).astype(np.float32)

    def _llm_inputs(self, start: int, stop: int) -> dict[str, np.ndarray]:
        positions = np.arange(start, stop, dtype=np.int64).reshape(1, -1)
        if self.position_rank == 3:  # text tokens: the same position on the three rotary axes
            positions = np.broadcast_to(positions, (3, 1, stop - start)).copy()
        inputs: dict[str, np.ndarray] = {
            "input_ids": self.tokens[start:stop].reshape(1, -1),
            "attention_mask": np.ones((1, stop), dtype=np.int64),
            "position_ids": positions,
            "beam_idx": np.zeros(1, dtype=np.int32),
        }
        if self.embeddings is not None:
            inputs["inputs_embeds"] = self.embeddings[start:stop][None]
        return {k: v for k, v in inputs.items() if k in self.names}

    def prefill(self) -> float:
        """Seconds for a fresh 128-token prefill (the KV cache is reset first)."""
        if not self.stateful_llm:
            return self._timed({0: self.prefill_x})
        self.request.reset_state()
        self.position = PREFILL_TOKENS
        return self._timed(self._llm_inputs(0, PREFILL_TOKENS))

    def decode(self) -> float:
        """Seconds for one single-token step (after the prefill: the KV cache grows by one token)."""
        if not self.stateful_llm:
            return self._timed({0: self.decode_x})
        inputs = self._llm_inputs(self.position, self.position + 1)
        self.position += 1
        return self._timed(inputs)

    def _timed(self, inputs: dict[Any, np.ndarray]) -> float:
        start = time.perf_counter()
        self.request.infer(inputs)
        return time.perf_counter() - start


def cpu_config(config: str) -> dict[str, str]:
    return {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": str(THREADS), **CONFIGS[config]}


def recorded_properties(compiled: Any) -> dict[str, str]:
    values: dict[str, str] = {}
    for key in RECORDED_PROPERTIES:
        try:
            values[key] = str(compiled.get_property(key))
        except RuntimeError:
            continue
    return values


def input_width(model: ov.Model) -> int:
    shape = model.inputs[0].get_partial_shape()
    return int(shape[shape.rank.get_length() - 1].get_length()) if shape.rank.get_length() == 3 else 0


# --------------------------------------------------------------------------------------------------------------------
# Latency: all variants in one process, interleaved rounds
# --------------------------------------------------------------------------------------------------------------------
def compile_runners(xmls: dict[str, str], stateful_llm: bool, config: str, order: list[str]) -> dict[str, Runner]:
    """The variants compiled in ``order`` (returned in the order of ``xmls``)."""
    core = ov.Core()
    runners: dict[str, Runner] = {}
    for name in order:
        model = core.read_model(xmls[name])
        compiled = core.compile_model(model, "CPU", cpu_config(config))
        runners[name] = Runner(compiled, stateful_llm, input_width(model))
    return {name: runners[name] for name in xmls}


def one_round(
    runners: dict[str, Runner], rng: np.random.Generator, prefill_reps: int, decode_steps: int
) -> dict[str, tuple[float, float]]:
    """Median prefill and decode-step seconds of every variant in one round.

    Variants take turns inference by inference (in a new random order each time), so that a drift of the shared
    machine's load hits all of them alike. Each variant's decode steps continue its own last prefill's KV cache.
    """
    names = list(runners)
    prefills: dict[str, list[float]] = {name: [] for name in names}
    decodes: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(prefill_reps):
        for name in rng.permutation(names):
            prefills[name].append(runners[name].prefill())
    for _ in range(decode_steps):
        for name in rng.permutation(names):
            decodes[name].append(runners[name].decode())
    return {name: (float(np.median(prefills[name])), float(np.median(decodes[name]))) for name in names}


def latency_probe(request: dict[str, Any]) -> dict[str, Any]:
    """In this (fresh) process: the variants compiled in a random order (seeded by ``request["seed"]``), then
    per-variant, per-round median prefill and decode seconds (see ``one_round``)."""
    xmls: dict[str, str] = request["xmls"]
    rng = np.random.default_rng(request["seed"])
    order = [str(name) for name in rng.permutation(list(xmls))]
    runners = compile_runners(xmls, request["stateful_llm"], request["config"], order)
    one_round(runners, rng, 2, 4)  # warm-up: first inferences allocate and repack
    times: dict[str, dict[str, list[float]]] = {name: {"prefill": [], "decode": []} for name in runners}
    for _ in range(request["rounds"]):
        for name, (prefill, decode) in one_round(
            runners, rng, request["prefill_reps"], request["decode_steps"]
        ).items():
            times[name]["prefill"].append(prefill)
            times[name]["decode"].append(decode)
    properties = {name: recorded_properties(runner.compiled) for name, runner in runners.items()}
    return {"times": times, "properties": properties, "compile_order": order}


def measure_latency(
    spec: ModelSpec,
    info: dict[str, dict[str, Any]],
    config: str,
    rounds: int,
    prefill_reps: int,
    decode_steps: int,
    processes: int = 1,
) -> dict[str, Any]:
    """``latency_probe`` in ``processes`` fresh child processes, ``rounds`` split among them, the times pooled.

    One compiled instance of a model runs at its own speed: three compilations of the same IR in one process decoded
    a token of the 1.5B-shaped layers in 5.1, 4.7 and 4.5 ms (the same order in every repetition), more than the
    differences between some variants. Each process compiles the variants in a new random order, so that this
    spread falls on every variant alike over the processes."""
    request = {
        "xmls": {name: variant_info["xml"] for name, variant_info in info.items()},
        "stateful_llm": spec.stateful_llm,
        "config": config,
        "rounds": -(-rounds // processes),
        "prefill_reps": prefill_reps,
        "decode_steps": decode_steps,
    }
    times: dict[str, dict[str, list[float]]] = {name: {"prefill": [], "decode": []} for name in info}
    orders, properties = [], {}
    for seed in range(processes):
        result = _child([LATENCY_FLAG, json.dumps(request | {"seed": seed})])
        for name, phases in result["times"].items():
            for phase, values in phases.items():
                times[name][phase].extend(values)
        orders.append(result["compile_order"])
        properties = result["properties"]
    return {"times": times, "properties": properties, "compile_orders": orders}


def summarize_latency(times: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """Median ms per phase, and the median (with quartiles) over rounds of the per-round ratio to RTN (and to
    BASELINES)."""
    summary: dict[str, dict[str, float]] = {}
    for name, phases in times.items():
        row: dict[str, float] = {}
        for phase, values in phases.items():
            row[f"{phase}_ms"] = 1e3 * float(np.median(values))
            row[f"{phase}_min_ms"] = 1e3 * float(np.min(values))
            for label, base in (("rtn", "rtn"), ("base", BASELINES.get(name))):
                if base in times:
                    ratios = np.asarray(values) / np.asarray(times[base][phase])
                    q1, median, q3 = np.percentile(ratios, [25, 50, 75])
                    row |= {f"{phase}_vs_{label}": median, f"{phase}_vs_{label}_q1": q1, f"{phase}_vs_{label}_q3": q3}
        summary[name] = row
    return summary


# --------------------------------------------------------------------------------------------------------------------
# Memory: one fresh child process per variant and repetition
# --------------------------------------------------------------------------------------------------------------------
def _status_mib(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _plugin_baseline(core: ov.Core, config: str) -> float:
    """Loads the CPU plugin with a tiny model, resets VmHWM and returns the RSS (MiB) to measure growth from."""
    Runner(core.compile_model(matmul_stack(64, 1), "CPU", cpu_config(config)), False, 64).prefill()
    gc.collect()
    with open("/proc/self/clear_refs", "w") as refs:  # resets VmHWM to the current RSS
        refs.write("5")
    return _status_mib("VmRSS")


def memory_probe(xml: str, stateful_llm: bool, config: str) -> dict[str, float]:
    """In this (fresh) process: RSS growth from reading, compiling and running the model once (prefill + decode)."""
    core = ov.Core()
    base = _plugin_baseline(core, config)
    model = core.read_model(xml)
    width = input_width(model)
    start = time.perf_counter()
    compiled = core.compile_model(model, "CPU", cpu_config(config))
    compile_seconds = time.perf_counter() - start
    del model
    gc.collect()
    after_compile = _status_mib("VmRSS") - base
    runner = Runner(compiled, stateful_llm, width)
    runner.prefill()
    runner.decode()
    return {
        "compile_s": compile_seconds,
        "rss_after_compile_mib": after_compile,
        "rss_after_infer_mib": _status_mib("VmRSS") - base,
        "peak_mib": _status_mib("VmHWM") - base,
    }


def measure_memory(spec: ModelSpec, info: dict[str, dict[str, Any]], config: str, rounds: int) -> dict[str, Any]:
    """Median over ``rounds`` fresh child processes per variant (variants interleaved)."""
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in info}
    for _ in range(rounds):
        for name, variant_info in info.items():
            args = [PROBE_FLAG, variant_info["xml"], str(int(spec.stateful_llm)), config]
            samples[name].append(_child(args))
    return {
        name: {key: float(np.median([s[key] for s in values])) for key in values[0]} for name, values in samples.items()
    }


# --------------------------------------------------------------------------------------------------------------------
# Low-bit formats: does the CPU plugin keep u2/u3/u4/u8 codes compressed, and does it run them?
# --------------------------------------------------------------------------------------------------------------------
LOWBIT_ZERO_POINTS = ("int", "f16", "none")
CODE_TYPES = {2: ov.Type.u2, 3: ov.Type.u3, 4: ov.Type.u4, 8: ov.Type.u8}


def lowbit_matmul(bits: int, zero_point: str, size: int, group: int, seed: int = 0) -> ov.Model:
    """One ``size x size`` MatMul: Constant codes -> Convert f16 -> Subtract zero point -> Multiply f16 scale ->
    Reshape -> Convert f32. ``zero_point``: "int" (codes of the same type), "f16" or "none"."""
    rng = np.random.default_rng(seed)
    groups, levels = size // group, 2**bits
    codes = rng.integers(0, levels, size=(size, groups, group), dtype=np.uint8)
    weight = opset.convert(opset.constant(codes, dtype=CODE_TYPES[bits]), ov.Type.f16)
    if zero_point == "int":
        zp_codes = rng.integers(0, levels, size=(size, groups, 1), dtype=np.uint8)
        weight = opset.subtract(weight, opset.convert(opset.constant(zp_codes, dtype=CODE_TYPES[bits]), ov.Type.f16))
    elif zero_point == "f16":
        zp = ((levels - 1) * rng.random((size, groups, 1))).astype(np.float16)
        weight = opset.subtract(weight, opset.constant(zp, dtype=ov.Type.f16))
    scale = (0.001 + 0.01 * rng.random((size, groups, 1))).astype(np.float16)
    weight = opset.multiply(weight, opset.constant(scale, dtype=ov.Type.f16))
    weight = opset.convert(opset.reshape(weight, [size, size], special_zero=False), ov.Type.f32)
    x = opset.parameter([1, -1, size], ov.Type.f32, name="x")
    return ov.Model([opset.result(opset.matmul(x, weight, False, True))], [x], f"u{bits}_zp_{zero_point}")


def weight_precisions(compiled: Any) -> str:
    """runtimePrecision of the FullyConnected nodes of the CPU plugin's runtime graph (u4: codes kept packed)."""
    precisions = {
        str(op.get_rt_info()["runtimePrecision"].astype(str))
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "FullyConnected"
    }
    return ",".join(sorted(precisions))


def lowbit_probe(xml: str, config: str) -> dict[str, Any]:
    """In this (fresh) process: the FullyConnected precision, whether inference runs, and the RSS growth."""
    core = ov.Core()
    base = _plugin_baseline(core, config)
    model = core.read_model(xml)
    width = input_width(model)
    compiled = core.compile_model(model, "CPU", cpu_config(config))
    del model
    gc.collect()
    result: dict[str, Any] = {
        "rss_after_compile_mib": _status_mib("VmRSS") - base,
        "weights": weight_precisions(compiled),
    }
    runner = Runner(compiled, False, width)
    try:
        runner.prefill()
        runner.decode()
        result["error"] = ""
    except RuntimeError as error:
        result["error"] = next((line for line in str(error).splitlines() if "[CPU]" in line), str(error))[:200]
    result["rss_after_infer_mib"] = _status_mib("VmRSS") - base
    result["peak_mib"] = _status_mib("VmHWM") - base
    return result


def run_lowbit(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Every code type x zero-point kind as one MatMul, each probed in ``--memory-rounds`` fresh processes."""
    size = 1024 if args.quick else 4096
    results: dict[str, Any] = {"size": size, "group_size": 128, "formats": {}}
    for bits in CODE_TYPES:
        for zero_point in LOWBIT_ZERO_POINTS:
            xml = workdir / "lowbit" / f"u{bits}_{zero_point}" / "model.xml"
            xml.parent.mkdir(parents=True, exist_ok=True)
            ov.save_model(lowbit_matmul(bits, zero_point, size, 128), xml)
            samples = [_child([LOWBIT_FLAG, str(xml), args.config]) for _ in range(args.memory_rounds)]
            row = {k: float(np.median([s[k] for s in samples])) for k in samples[0] if k.endswith("_mib")}
            row |= {"weights": samples[0]["weights"], "error": samples[0]["error"]}
            results["formats"][f"u{bits}_{zero_point}"] = row | {"ir_bytes": xml.with_suffix(".bin").stat().st_size}
    print_lowbit(results, args.config)
    return results


def _child(args: list[str]) -> dict[str, Any]:
    """Runs this script with ``args`` in a fresh interpreter; its last stdout line is JSON."""
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        msg = f"child {args} failed:\n{proc.stderr[-3000:]}"
        raise RuntimeError(msg)
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


# --------------------------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------------------------
def _ratio(row: dict[str, float], key: str, quartiles: bool = False) -> str:
    if key not in row:
        return "-"
    spread = f" ({row[key + '_q1']:.2f}-{row[key + '_q3']:.2f})" if quartiles and key + "_q1" in row else ""
    return f"{row[key]:.2f}{spread}"


def _formats(constants: dict[str, int]) -> str:
    """``u4 / zp u4`` from a decompression summary (the type of the most frequent weight and zero point;
    ``+ correction`` for split zero points)."""
    weight = max((k for k in constants if k.startswith("weight:")), key=constants.__getitem__, default="weight:?")
    zero_point = max((k for k in constants if k.startswith("zero_point:")), key=constants.__getitem__, default="")
    text = weight.split(":")[1] + (f" / zp {zero_point.split(':')[1]}" if zero_point else "")
    corrections = sorted(k.split(":")[1] for k in constants if k.startswith("hqq_split_correction:"))
    return text + (f" + {'/'.join(corrections)} correction" if corrections else "")


def print_tables(model: str, result: dict[str, Any]) -> None:
    """Markdown tables of one model: latency (median and best round; median ratio to RTN with quartiles) and memory."""
    latency, memory, info = result["latency"], result["memory"], result["variants"]
    print(f"\n### {model}: latency ({result['config']} config, {THREADS} threads)\n")
    print("| variant | weights | prefill ms (best) | prefill / RTN | decode ms (best) | decode / RTN |")
    print("|---|---|---|---|---|---|")
    for name, row in latency.items():
        print(
            f"| {name} | {_formats(info[name]['constants'])} | {row['prefill_ms']:.0f} ({row['prefill_min_ms']:.0f}) | "
            f"{_ratio(row, 'prefill_vs_rtn', True)} | {row['decode_ms']:.1f} ({row['decode_min_ms']:.1f}) | "
            f"{_ratio(row, 'decode_vs_rtn', True)} |"
        )
    for name, base in BASELINES.items():
        if name in latency and base in latency:
            row = latency[name]
            print(
                f"\n{name} / {base}: prefill {_ratio(row, 'prefill_vs_base', True)}, "
                f"decode {_ratio(row, 'decode_vs_base', True)}"
            )
    print(f"\n### {model}: memory (RSS growth over a loaded CPU plugin, fresh process per variant)\n")
    print("| variant | IR MiB | RSS MiB | RSS / RTN | peak MiB | compile s |\n|---|---|---|---|---|---|")
    rtn_rss = memory.get("rtn", {}).get("rss_after_infer_mib", float("nan"))
    for name, mem in memory.items():
        rss = mem["rss_after_infer_mib"]
        print(
            f"| {name} | {info[name]['ir_bytes'] / 2**20:.1f} | {rss:.0f} | {rss / rtn_rss:.2f} | "
            f"{mem['peak_mib']:.0f} | {mem['compile_s']:.2f} |"
        )


def print_lowbit(results: dict[str, Any], config: str) -> None:
    size = results["size"]
    print(f"\n### Low-bit formats: one {size}x{size} MatMul, g{results['group_size']} ({config} config)\n")
    print(
        "| codes | zero point | runtime weights | runs | RSS MiB | peak MiB | IR MiB |\n|---|---|---|---|---|---|---|"
    )
    for key, row in results["formats"].items():
        codes, zero_point = key.split("_")
        print(
            f"| {codes} | {zero_point} | {row['weights']} | {'**fails**' if row['error'] else 'yes'} | "
            f"{row['rss_after_infer_mib']:.0f} | {row['peak_mib']:.0f} | {row['ir_bytes'] / 2**20:.1f} |"
        )


def report(path: Path) -> None:
    """Prints the tables of a saved JSON again (ratios recomputed from the raw per-round times)."""
    results = json.loads(path.read_text())
    config = results["environment"]["config_name"]
    if "lowbit" in results:
        print_lowbit(results["lowbit"], config)
    for model in MODELS:
        if model in results:
            results[model]["latency"] = summarize_latency(results[model]["latency_seconds"])
            print_tables(model, results[model])


def environment(config: str) -> dict[str, Any]:
    """Versions, the CPU (model name, kind, the ``/proc/cpuinfo`` flags that pick OpenVINO's kernels, and the
    plugin's view of it) and the CPU properties."""
    from nncf_hqq.llm.cpu import this_cpu
    from nncf_hqq.llm.records import versions

    cpu = this_cpu()
    return {
        **versions(),
        "cpu_model": cpu.model,
        "cpu_kind": cpu.kind,
        "isa": cpu.isa(),
        "machine": platform.machine(),
        "cpu": ov.Core().get_property("CPU", "FULL_DEVICE_NAME"),
        "cpu_capabilities": list(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")),
        "config_name": config,
        "config": cpu_config(config),
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
    }


def run_model(spec: ModelSpec, variants: list[str], args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    print(f"[{spec.name}] compressing {len(variants)} variants")
    info = prepare_models(spec, variants, workdir, reuse=args.reuse)
    print(f"[{spec.name}] memory ({args.memory_rounds} fresh process(es) per variant)")
    memory = measure_memory(spec, info, args.config, args.memory_rounds)
    print(f"[{spec.name}] latency ({args.rounds} interleaved rounds in {args.latency_processes} process(es))")
    measured = measure_latency(
        spec, info, args.config, args.rounds, args.prefill_reps, args.decode_steps, args.latency_processes
    )
    result = {
        "config": args.config,
        "group_size": spec.group_size,
        "variants": info,
        "memory": memory,
        "latency": summarize_latency(measured["times"]),
        "latency_seconds": measured["times"],
        "compiled_properties": measured["properties"],
        "compile_orders": measured["compile_orders"],
    }
    print_tables(spec.name, result)
    return result


def ir_of(path: str) -> Path:
    """The IR to time for ``path``: an ``.xml`` as it is; in a model dir its language model (a VLM's) or its
    ``openvino_model.xml``."""
    path_ = Path(path)
    if path_.suffix == ".xml":
        return path_
    for name in ("openvino_language_model.xml", "openvino_model.xml"):
        if (path_ / name).is_file():
            return path_ / name
    msg = f"{path}: no openvino_language_model.xml or openvino_model.xml"
    raise FileNotFoundError(msg)


def run_irs(args: argparse.Namespace) -> dict[str, Any]:
    """Prefill and decode latency of written stateful LLM IRs (``--irs``), measured like the variants
    (``measure_latency``: interleaved steps, fresh processes, random compile orders), against the one named rtn."""
    info = {name: {"xml": str(ir_of(path))} for name, path in args.irs.items()}
    spec = ModelSpec("irs", lambda: ov.Model([], []), 0, stateful_llm=True, all_layers=False)
    print(f"[irs] latency ({args.rounds} interleaved rounds in {args.latency_processes} process(es))")
    measured = measure_latency(
        spec, info, args.config, args.rounds, args.prefill_reps, args.decode_steps, args.latency_processes
    )
    latency = summarize_latency(measured["times"])
    env = environment(args.config)
    print(f"CPU: {env['cpu_model']} ({env['cpu_kind']}), OpenVINO {env.get('openvino')}")
    print(f"{'IR':<14} {'prefill ms':>10} {'/ RTN (q1-q3)':>20} {'decode ms':>10} {'/ RTN (q1-q3)':>20}")
    for name, row in latency.items():
        print(
            f"{name:<14} {row['prefill_ms']:>10.1f} {_ratio(row, 'prefill_vs_rtn', quartiles=True):>20} "
            f"{row['decode_ms']:>10.2f} {_ratio(row, 'decode_vs_rtn', quartiles=True):>20}"
        )
    results = {
        "environment": env,
        "args": vars(args),
        "irs": info,
        "latency": latency,
        "latency_seconds": measured["times"],
        "compiled_properties": measured["properties"],
        "compile_orders": measured["compile_orders"],
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2, default=str))
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS), help=f"comma-separated: {','.join(MODELS)}")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of the variants")
    parser.add_argument("--config", default="default", choices=sorted(CONFIGS), help="extra CPU properties")
    parser.add_argument("--quick", action="store_true", help="small synthetic shapes, few rounds")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved latency rounds (default 15, quick 3)")
    parser.add_argument("--prefill-reps", type=int, default=3, help="prefills per variant and round")
    parser.add_argument("--decode-steps", type=int, default=16, help="decode steps per variant and round")
    parser.add_argument("--memory-rounds", type=int, default=None, help="fresh processes per variant (default 3)")
    parser.add_argument(
        "--latency-processes", type=int, default=None, help="fresh processes the latency rounds are split among (3)"
    )
    parser.add_argument("--workdir", type=Path, default=None, help="keep the compressed IRs here (default: temp)")
    parser.add_argument("--lowbit", action="store_true", help="also probe u2/u3/u4/u8 x zero-point formats")
    parser.add_argument("--reuse", action="store_true", help="take IRs already in --workdir instead of compressing")
    parser.add_argument("--report", type=Path, default=None, help="only print the tables of a saved JSON")
    parser.add_argument("--max-isa", default=None, help="ONEDNN_MAX_CPU_ISA for this run, e.g. AVX512_CORE_VNNI")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument(
        "--irs",
        default=None,
        help="time written stateful LLM IRs instead of compressing: NAME=PATH,... (PATH an .xml or a model dir; a "
        "VLM dir's language model); one NAME must be rtn",
    )
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (3 if args.quick else 15)
    args.memory_rounds = args.memory_rounds or (1 if args.quick else 3)
    args.latency_processes = args.latency_processes or (1 if args.quick else 3)
    if args.irs:
        items = args.irs.split(",")
        if any("=" not in item for item in items):
            parser.error(f"--irs takes NAME=PATH,...; got {args.irs!r}")
        args.irs = dict(item.split("=", 1) for item in items)
        if "rtn" not in args.irs:
            parser.error("--irs: one of the IRs must be named rtn (the ratios' baseline)")
        return args
    unknown = sorted(set(args.variants.split(",")) - set(VARIANTS))
    if unknown or "rtn" not in args.variants.split(","):
        parser.error(f"unknown variants {unknown}; the variants must include rtn (the ratios' baseline)")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.report:
        report(args.report)
        return {}
    if args.max_isa:  # read by oneDNN when the CPU plugin first runs; inherited by the child processes
        os.environ["ONEDNN_MAX_CPU_ISA"] = args.max_isa
    nncf_logger.setLevel(logging.WARNING)
    if args.irs:
        return run_irs(args)
    specs = model_specs(args.quick)
    variants = args.variants.split(",")
    results: dict[str, Any] = {"environment": environment(args.config), "args": vars(args) | {"workdir": None}}
    with tempfile.TemporaryDirectory(prefix="nncf_hqq_inference_") as tmp:
        workdir = args.workdir or Path(tmp)
        if args.lowbit:
            results["lowbit"] = run_lowbit(args, workdir)
        for model in filter(None, args.models.split(",")):
            results[model] = run_model(specs[model], variants, args, workdir)
            if args.out:  # written after every model, so a long run keeps what it measured
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(results, indent=2, default=str))
    return results


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == PROBE_FLAG:
        xml, stateful, config = sys.argv[2:5]
        print(json.dumps(memory_probe(xml, bool(int(stateful)), config)))
    elif len(sys.argv) > 1 and sys.argv[1] == LATENCY_FLAG:
        print(json.dumps(latency_probe(json.loads(sys.argv[2]))))
    elif len(sys.argv) > 1 and sys.argv[1] == LOWBIT_FLAG:
        print(json.dumps(lowbit_probe(sys.argv[2], sys.argv[3])))
    else:
        main()
