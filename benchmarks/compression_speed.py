"""Compression time and peak memory: NNCF's RTN vs HQQ (fast path and reference) vs the ``hqq`` library, on
OpenVINO models and on PyTorch models (NNCF's Torch backend: its RTN against ``hqq=True``).

Every case runs in a fresh child process, so compiled-model caches and the peak RSS of one case never leak
into another; the peak RSS is ``getrusage(RUSAGE_SELF).ru_maxrss`` of the child at its end. Each child
times its first call ("cold": includes OpenVINO model compilation, for RTN as for HQQ) and, with
``--repeats`` > 1, the best of the following calls ("warm"). Ratios are taken against NNCF's RTN of the
same configuration, measured in the same run.

    python benchmarks/compression_speed.py                  # full run (~30 min on 2 busy cores)
    python benchmarks/compression_speed.py --quick          # smoke run (~1 min)
    python benchmarks/compression_speed.py --layers 4 --out results/speed_4_layers.json
    python benchmarks/compression_speed.py --methods rtn,hqq,hqq_proximal --no-hqq-lib   # without the slow rows
    python benchmarks/compression_speed.py --only PyTorch --torch-layers 4    # the PyTorch rows only
    python benchmarks/compression_speed.py --only PyTorch --torch-device cuda  # ... with the model on a GPU
    python benchmarks/compression_speed.py --only alternated   # RTN and HQQ alternated: two 4096x4096 layers and
                                                                # a bf16 decoder layer of Qwen2.5-7B's shapes
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CACHE_DIR = Path(os.environ.get("NNCF_HQQ_CACHE", Path.home() / ".cache" / "nncf_hqq"))
DISABLE_ENV = "NNCF_DISABLE_OPTIMIZED_COMPRESSION"
#: Qwen2.5-1.5B decoder shapes: hidden size, intermediate size, key/value width, layers.
QWEN_HIDDEN, QWEN_INTERMEDIATE, QWEN_KV, QWEN_LAYERS = 1536, 8960, 256, 28

Case = dict[str, Any]

#: Methods compared. "hqq" is what ``hqq=True`` does (``HQQ_DEFAULT``: proximal loop plus refinement, RTN guard,
#: norm-gain importance, ...); "hqq_proximal" is the proximal solver alone (``HQQ_REFERENCE``), on the fast path
#: or, with the fast path switched off, on the numpy reference.
METHODS = {
    "rtn": "NNCF RTN",
    "hqq": "hqq=True (HQQ_DEFAULT)",
    "hqq_proximal": "HQQ proximal only, fast path",
    "hqq_proximal_reference": "HQQ proximal only, reference",
}
HQQ_METHODS = ["rtn", "hqq", "hqq_proximal", "hqq_proximal_reference"]
#: Methods of the PyTorch rows (NNCF's Torch backend).
TORCH_METHODS = {"rtn": "NNCF RTN (Torch backend)", "hqq": "hqq=True (HQQ_DEFAULT, Torch backend)"}


# ----------------------------------------------------------------------------------------------------------------
# Inputs (built inside the child, before timing)
# ----------------------------------------------------------------------------------------------------------------


def random_weight(shape: tuple[int, ...], seed: int, heavy_tailed: bool = True) -> Any:
    """LLM-like random f32 weights: Student-t (heavy tails) by default, normal (faster to draw) otherwise.

    Drawn in blocks, so that building the inputs does not raise the child's peak RSS above the weight itself.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    values = np.empty(shape, dtype=np.float32)
    flat = values.reshape(-1)
    block = 1 << 20
    for start in range(0, flat.size, block):
        size = min(block, flat.size - start)
        draw = rng.standard_t(4, size=size) if heavy_tailed else rng.standard_normal(size, dtype=np.float32)
        flat[start : start + size] = draw * 0.02
    return values


def one_matmul_model(size: int, seed: int = 0) -> Any:
    """``x @ W^T`` with one f32 ``[size, size]`` weight."""
    import openvino as ov
    from openvino import opset13 as opset

    x = opset.parameter([1, size], ov.Type.f32, name="x")
    weight = opset.constant(random_weight((size, size), seed), dtype=ov.Type.f32, name="weight", shared_memory=True)
    return ov.Model([opset.result(opset.matmul(x, weight, False, True))], [x], "one_matmul")


def matmul_chain_model(size: int, layers: int, seed: int = 0) -> Any:
    """``layers`` MatMuls ``x @ W_i^T`` in a chain, each with its own f32 ``[size, size]`` Student-t weight."""
    import openvino as ov
    from openvino import opset13 as opset

    x = opset.parameter([1, size], ov.Type.f32, name="x")
    h = x
    for i in range(layers):
        values = random_weight((size, size), seed + i)
        weight = opset.constant(values, dtype=ov.Type.f32, name=f"weight{i}", shared_memory=True)
        h = opset.matmul(h, weight, False, True, name=f"matmul{i}")
    return ov.Model([opset.result(h)], [x], f"matmul_chain_{layers}")


#: Qwen2.5-7B decoder shapes: hidden size, intermediate size, key/value width.
QWEN7B_HIDDEN, QWEN7B_INTERMEDIATE, QWEN7B_KV = 3584, 18944, 512


def qwen7b_layer_model(seed: int = 0) -> Any:
    """One decoder layer's MatMuls of Qwen2.5-7B (q, k, v, o, gate, up, down: 233 M parameters) with normal random
    bf16 weights, each read through a Convert to f32, as in a bf16 IR."""
    import numpy as np
    import openvino as ov
    from openvino import opset13 as opset

    rng = np.random.default_rng(seed)

    def linear(x: Any, out_features: int, in_features: int, name: str) -> Any:
        values = rng.standard_normal((out_features, in_features), dtype=np.float32) * 0.02
        weight = opset.convert(opset.constant(values, dtype=ov.Type.bf16, name=name), ov.Type.f32)
        return opset.matmul(x, weight, False, True, name=f"{name}/matmul")

    hidden, kv = QWEN7B_HIDDEN, QWEN7B_KV
    x = opset.parameter([1, hidden], ov.Type.f32, name="hidden")
    q = linear(x, hidden, hidden, "q")
    keys_values = opset.add(linear(x, kv, hidden, "k"), linear(x, kv, hidden, "v"))
    keys_values = opset.reduce_mean(keys_values, opset.constant(np.array([1], dtype=np.int64)), True)
    h = opset.add(opset.add(x, linear(q, hidden, hidden, "o")), keys_values)
    gate = opset.relu(linear(h, QWEN7B_INTERMEDIATE, hidden, "gate"))
    up = linear(h, QWEN7B_INTERMEDIATE, hidden, "up")
    h = opset.add(h, linear(opset.multiply(gate, up), hidden, QWEN7B_INTERMEDIATE, "down"))
    return ov.Model([opset.result(h)], [x], "qwen2.5_7b_decoder_layer_bf16")


def decoder_stack_model(layers: int, seed: int = 0) -> Any:
    """The decoder MatMuls of Qwen2.5-1.5B (q, k, v, o, gate, up, down) with random f16 weights."""
    import numpy as np
    import openvino as ov
    from openvino import opset13 as opset

    counter = iter(range(seed, seed + 10 * layers))

    def linear(x: Any, out_features: int, in_features: int, name: str) -> Any:
        values = random_weight((out_features, in_features), next(counter), heavy_tailed=False).astype(np.float16)
        weight = opset.convert(opset.constant(values, dtype=ov.Type.f16, name=name), ov.Type.f32)
        return opset.matmul(x, weight, False, True, name=f"{name}/matmul")

    x = opset.parameter([1, QWEN_HIDDEN], ov.Type.f32, name="hidden")
    h = x
    for i in range(layers):
        q = linear(h, QWEN_HIDDEN, QWEN_HIDDEN, f"l{i}.q")
        kv = opset.add(linear(h, QWEN_KV, QWEN_HIDDEN, f"l{i}.k"), linear(h, QWEN_KV, QWEN_HIDDEN, f"l{i}.v"))
        kv = opset.reduce_mean(kv, opset.constant(np.array([1], dtype=np.int64)), True)
        h = opset.add(opset.add(h, linear(q, QWEN_HIDDEN, QWEN_HIDDEN, f"l{i}.o")), kv)
        gate = opset.relu(linear(h, QWEN_INTERMEDIATE, QWEN_HIDDEN, f"l{i}.gate"))
        up = linear(h, QWEN_INTERMEDIATE, QWEN_HIDDEN, f"l{i}.up")
        h = opset.add(h, linear(opset.multiply(gate, up), QWEN_HIDDEN, QWEN_INTERMEDIATE, f"l{i}.down"))
    return ov.Model([opset.result(h)], [x], f"qwen2.5_1.5b_decoder_{layers}_layers")


def qwen_shaped_torch_model(layers: int, seed: int = 0) -> Any:
    """A transformers Qwen2 model of Qwen2.5-1.5B's decoder shapes (``layers`` layers, a 1024-token vocabulary so
    that the decoder MatMuls dominate), random weights in f32."""
    import torch
    from transformers import Qwen2Config
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=1024,
        hidden_size=QWEN_HIDDEN,
        intermediate_size=QWEN_INTERMEDIATE,
        num_hidden_layers=layers,
        num_attention_heads=12,
        num_key_value_heads=QWEN_KV // 128,
        max_position_embeddings=512,
    )
    return Qwen2ForCausalLM(config).eval()


def find_smollm_hf_dir() -> Path | None:
    """The float SmolLM2-135M transformers checkpoint in the cache directory, if any."""
    path = CACHE_DIR / "hf" / "SmolLM2-135M-Instruct"
    return path if (path / "config.json").is_file() else None


def find_smollm_ir() -> Path | None:
    """An exported SmolLM2-135M ``openvino_model.xml`` under the cache directory, if any."""
    if not CACHE_DIR.is_dir():
        return None
    candidates = sorted(p for p in CACHE_DIR.rglob("openvino_model.xml") if "smollm2-135m" in str(p).lower())
    return candidates[0] if candidates else None


# ----------------------------------------------------------------------------------------------------------------
# Child process: one case
# ----------------------------------------------------------------------------------------------------------------


def hqq_parameters(method: str) -> Any:
    from nncf_hqq import HQQ_DEFAULT
    from nncf_hqq import HQQ_REFERENCE

    return HQQ_DEFAULT if method == "hqq" else HQQ_REFERENCE


def compression_mode(case: Case) -> Any:
    """NNCF's mode of a case: ``int{bits}_asym``, or ``int{bits}_sym`` for a symmetric case."""
    import nncf

    return nncf.CompressWeightsMode(f"int{case['bits']}_{'sym' if case.get('symmetric') else 'asym'}")


def model_operation(case: Case) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(prepare, run) for a whole-model ``nncf.compress_weights`` case."""
    import nncf
    import openvino as ov

    import nncf_hqq  # noqa: F401  (teaches nncf.compress_weights hqq=)

    state: dict[str, Any] = {}
    if case["kind"] == "smollm":

        def build() -> Any:
            return ov.Core().read_model(case["path"])
    elif case["kind"] == "stack":

        def build() -> Any:
            return decoder_stack_model(case["layers"])
    else:

        def build() -> Any:
            return one_matmul_model(case["size"])

    options: dict[str, Any] = {"mode": compression_mode(case)}
    if case["method"] != "rtn":
        options.update(hqq=True, hqq_params=hqq_parameters(case["method"]))
    if case["bits"] == 4:
        options.update(group_size=case["group_size"], ratio=1.0)
    if case["kind"] != "smollm":
        options["all_layers"] = True

    def prepare() -> None:
        state["model"] = build()

    def run() -> None:
        state["model"] = nncf.compress_weights(state.pop("model"), **options)

    return prepare, run


def torch_model_operation(case: Case) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(prepare, run) for a PyTorch ``nncf.compress_weights`` case (NNCF's Torch backend traces the model with
    one 8-token input, for RTN as for HQQ; the timing includes that)."""
    import nncf
    import torch

    import nncf_hqq  # noqa: F401  (teaches nncf.compress_weights hqq=)

    state: dict[str, Any] = {}

    def build() -> Any:
        if case["kind"] == "torch_smollm":
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(case["path"], dtype=torch.float32).eval()
        else:
            model = qwen_shaped_torch_model(case["layers"])
        return model.to(case.get("device", "cpu"))

    options: dict[str, Any] = {"mode": compression_mode(case), "group_size": case["group_size"], "ratio": 1.0}
    if case["method"] != "rtn":
        options.update(hqq=True, hqq_params=hqq_parameters(case["method"]))

    def prepare() -> None:
        state["model"] = build()
        ids = torch.arange(1, 9)[None].to(case.get("device", "cpu"))
        options["dataset"] = nncf.Dataset([{"input_ids": ids}])

    def run() -> None:
        state["model"] = nncf.compress_weights(state.pop("model"), **options)

    return prepare, run


def weight_operation(case: Case) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(prepare, run) for a single-weight case: NNCF's compress function, ``HQQ.compress``, the bare solver
    or the ``hqq`` library."""
    values = random_weight((case["size"], case["size"]), seed=0)
    method, bits, group_size = case["method"], case["bits"], case["group_size"]
    if method == "hqq_lib":
        import torch
        from hqq.core.quantize import Quantizer

        tensor = torch.from_numpy(values)
        return lambda: None, lambda: Quantizer.quantize(
            tensor, nbits=bits, group_size=group_size, axis=1, optimize=True, bitpack=False, device="cpu"
        )
    import openvino as ov
    from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
    from nncf.quantization.algorithms.weight_compression.weight_lowering import compress_weight
    from nncf.tensor import Tensor

    from nncf_hqq.hqq import HQQ
    from nncf_hqq.kernels import proximal
    from nncf_hqq.maths.core import split_into_groups
    from nncf_hqq.maths.solver import hqq_solve

    mode = compression_mode(case)
    config = WeightCompressionConfig(mode=mode, group_size=group_size)
    weight = Tensor(ov.Tensor(values))  # what NNCF's OpenVINO backend hands to the compression step
    if case["kind"] == "solver":
        grouped, axis = split_into_groups(Tensor(values), 1, group_size)
        solver = hqq_solve if method.endswith("_reference") else proximal.solve
        return lambda: None, lambda: solver(grouped, axis, bits, hqq_parameters(method))
    if method == "rtn":
        return lambda: None, lambda: compress_weight(weight, (1,), config)
    hqq = HQQ(hqq_parameters(method), mode)
    as_read = Tensor(values)  # what HQQ gets from the backend's ``get_weight``: a numpy array
    return lambda: None, lambda: hqq.compress(as_read, 1, config)


def run_alternated_child(case: Case) -> dict[str, Any]:
    """RTN and ``hqq=True`` on the same ``case["layers"]``-layer model, one warm-up call each, then ``rounds``
    rounds of one call each, alternated, in this one process (compiled models cached as in a session that
    compresses several models); returns every call's seconds and process CPU seconds per method."""
    import nncf

    import nncf_hqq  # noqa: F401  (teaches nncf.compress_weights hqq=)

    options: dict[str, Any] = {"mode": compression_mode(case), "group_size": case["group_size"], "ratio": 1.0}
    options["all_layers"] = True
    # built once, copied for every call: drawing the random weights takes longer than compressing them
    template = qwen7b_layer_model() if case.get("model") == "qwen7b_layer" else matmul_chain_model(case["size"], 2)
    times: dict[str, list[float]] = {"rtn": [], "hqq": []}
    cpu: dict[str, list[float]] = {"rtn": [], "hqq": []}
    for round_index in range(case["rounds"] + 1):
        for method in ("rtn", "hqq"):
            model = template.clone()
            extra = {"hqq": True} if method == "hqq" else {}
            start, start_cpu = time.perf_counter(), time.process_time()
            nncf.compress_weights(model, **options, **extra)
            if round_index:  # round 0 is the warm-up
                times[method].append(time.perf_counter() - start)
                cpu[method].append(time.process_time() - start_cpu)
            del model
    return {"times_s": times, "cpu_s": cpu}


def run_child(case: Case) -> dict[str, Any]:
    """Builds the inputs, then times ``repeats`` calls; returns seconds and peak RSS (MiB)."""
    if case["kind"] == "alternated":
        return run_alternated_child(case)
    if case["kind"].startswith("torch"):
        prepare, run = torch_model_operation(case)
    elif case["kind"] in ("model", "stack", "smollm"):
        prepare, run = model_operation(case)
    else:
        prepare, run = weight_operation(case)
    times = []
    prepare()
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for i in range(case["repeats"]):
        if i:
            prepare()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    warm = min(times[1:]) if len(times) > 1 else None
    return {"cold_s": times[0], "warm_s": warm, "peak_rss_mb": peak_rss, "input_rss_mb": base_rss}


# ----------------------------------------------------------------------------------------------------------------
# Parent: cases, subprocesses, table
# ----------------------------------------------------------------------------------------------------------------


def hqq_library_available() -> bool:
    probe = "import hqq.core.quantize, torch; assert torch.__version__"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, check=False).returncode == 0


def torch_available() -> bool:
    probe = "import torch, transformers"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, check=False).returncode == 0


def build_cases(args: argparse.Namespace) -> list[Case]:
    size = 1024 if args.quick else 4096
    repeats = args.repeats
    configs = (
        [(4, 128, False), (8, 128, False)]
        if args.quick
        else [(4, 128, False), (4, 64, False), (8, 128, False), (8, 64, False)]
    )
    configs += [(4, 128, True), (8, 128, True)]
    cases: list[Case] = []
    for bits, group_size, symmetric in configs:
        kind_name = "sym" if symmetric else "asym"
        group = f"weight {size}x{size} int{bits}_{kind_name} g{group_size}"
        common = {"size": size, "bits": bits, "group_size": group_size, "repeats": repeats, "group": group}
        common.update(rounds=args.rounds, symmetric=symmetric)
        # the reference and the hqq library: one process, one warm call
        slow = {**common, "repeats": min(repeats, 2), "rounds": 1}
        for kind, label, methods in (
            ("model", "compress_weights", HQQ_METHODS if bits == 4 else []),
            ("weight", "compress step", HQQ_METHODS),
            ("solver", "bare solver", [] if symmetric else HQQ_METHODS[2:]),
        ):
            for m in methods:
                base = slow if m.endswith("_reference") else common
                cases.append({**base, "kind": kind, "method": m, "label": f"{label}: {METHODS[m]}"})
        if not args.no_hqq_lib and not symmetric:
            cases.append({**slow, "kind": "weight", "method": "hqq_lib", "label": "hqq library 0.2.8 (torch CPU)"})
    cases += stack_cases(args)
    cases += alternated_cases(args)
    if not args.no_torch:
        cases += torch_cases(args)
    smollm = find_smollm_ir()
    if smollm is not None and not args.quick:
        for symmetric in (False, True):
            mode = "int4_sym" if symmetric else "int4"
            common = {"kind": "smollm", "path": str(smollm), "bits": 4, "group_size": 64, "repeats": 1, "rounds": 1}
            common.update(symmetric=symmetric, group=f"SmolLM2-135M IR, {mode} g64 (ratio 1, NNCF defaults otherwise)")
            cases += [{**common, "method": m, "label": f"compress_weights: {METHODS[m]}"} for m in HQQ_METHODS]
    return cases


def stack_cases(args: argparse.Namespace) -> list[Case]:
    """The Qwen2.5-1.5B-shaped stack without the reference, and a short stack that also runs the reference."""
    layers = 1 if args.quick else args.layers
    reference_layers = min(layers, args.reference_layers)
    runs = [(reference_layers, HQQ_METHODS)]
    if layers != reference_layers:
        runs.insert(0, (layers, HQQ_METHODS[:3]))
    cases: list[Case] = []
    for count, methods in runs:
        common = {"kind": "stack", "layers": count, "bits": 4, "group_size": 128, "repeats": 1, "rounds": 1}
        common["group"] = f"Qwen2.5-1.5B decoder MatMuls x{count} layers, int4 g128"
        cases += [{**common, "method": m, "label": f"compress_weights: {METHODS[m]}"} for m in methods]
    return cases


def alternated_cases(args: argparse.Namespace) -> list[Case]:
    """Two 4096x4096 Student-t layers, int4_asym g128, RTN and ``hqq=True`` alternated in one process (the ratio is
    the medians' over ``--alternated-rounds`` rounds)."""
    size = 1024 if args.quick else 4096
    group = f"two {size}x{size} layers, int4_asym g128, RTN and HQQ alternated in one process"
    case = {"kind": "alternated", "size": size, "layers": 2, "bits": 4, "group_size": 128, "symmetric": False}
    case.update(rounds=args.alternated_rounds, group=group, method="rtn+hqq", label="compress_weights, medians")
    if args.quick:
        return [case]
    layer = {**case, "model": "qwen7b_layer", "size": QWEN7B_HIDDEN, "layers": 7}
    layer["group"] = "Qwen2.5-7B decoder layer, bf16 (233 M parameters), int4_asym g128, RTN and HQQ alternated"
    return [case, layer]


def torch_cases(args: argparse.Namespace) -> list[Case]:
    """PyTorch models through NNCF's Torch backend, NNCF's RTN against ``hqq=True``: SmolLM2-135M (when its float
    checkpoint is cached) and the Qwen2.5-1.5B-shaped model with ``--torch-layers`` layers."""
    device = args.torch_device
    layers = 1 if args.quick else args.torch_layers
    common = {"bits": 4, "repeats": 1, "rounds": args.torch_rounds, "device": device, "symmetric": False}
    stack = {**common, "kind": "torch_stack", "layers": layers, "group_size": 128}
    stack["group"] = f"PyTorch Qwen2.5-1.5B-shaped x{layers} layers ({device}), int4 g128"
    cases = [{**stack, "method": m, "label": f"compress_weights: {TORCH_METHODS[m]}"} for m in TORCH_METHODS]
    hf_dir = find_smollm_hf_dir()
    if hf_dir is not None and not args.quick:
        for symmetric in (False, True):
            mode = "int4_sym" if symmetric else "int4"
            smollm = {**common, "kind": "torch_smollm", "path": str(hf_dir), "group_size": 64, "symmetric": symmetric}
            smollm["group"] = f"PyTorch SmolLM2-135M ({device}), {mode} g64 (ratio 1)"
            cases += [{**smollm, "method": m, "label": f"compress_weights: {TORCH_METHODS[m]}"} for m in TORCH_METHODS]
    return cases


def run_case(case: Case) -> dict[str, Any]:
    """One child process for ``case``: its measurements, or an ``error`` entry."""
    env = dict(os.environ)
    env.pop(DISABLE_ENV, None)
    if case["method"].endswith("_reference"):
        env[DISABLE_ENV] = "1"
    command = [sys.executable, __file__, "--child", json.dumps(case)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr or done.stdout).strip().splitlines()[-1:]}
    return json.loads(lines[-1])


def run_alternated(case: Case) -> list[dict[str, Any]]:
    """One child process alternating RTN and HQQ (``run_alternated_child``): a row per method with its median
    seconds (as ``warm_s``) and CPU seconds, HQQ's row with the medians' ratios."""
    import statistics

    measured = run_case(case)
    print(f"{case['group']} | {measured}", flush=True)
    if "error" in measured:
        return [{**case, **measured}]
    rows = []
    for method in ("rtn", "hqq"):
        times, cpu = measured["times_s"][method], measured["cpu_s"][method]
        row = {**case, "method": method, "label": f"compress_weights: {METHODS[method]}, median"}
        row.update(cold_s=min(times), warm_s=statistics.median(times), cpu_s=statistics.median(cpu), runs=times)
        row.update(cpu_runs=cpu, peak_rss_mb=None)
        rows.append(row)
    rtn, hqq = rows
    hqq["warm_s_vs_rtn"] = hqq["warm_s"] / rtn["warm_s"]
    hqq["cpu_s_vs_rtn"] = hqq["cpu_s"] / rtn["cpu_s"]
    return rows


def run_group(cases: list[Case]) -> list[dict[str, Any]]:
    """Runs the cases of one group round-robin (``rounds`` child processes each), so that the cases compared
    with each other see the same machine load; keeps the best times and the highest peak RSS of the rounds."""
    if cases[0]["kind"] == "alternated":
        return run_alternated(cases[0])
    if any(case["kind"] == "smollm" for case in cases):
        _read_through(Path(cases[0]["path"]).with_suffix(".bin"))  # a warm page cache for every method alike
    runs: list[list[dict[str, Any]]] = [[] for _ in cases]
    for round_index in range(max(case["rounds"] for case in cases)):
        for case, case_runs in zip(cases, runs, strict=True):
            if round_index < case["rounds"]:
                case_runs.append(run_case(case))
                value = case_runs[-1].get("cold_s", case_runs[-1].get("error"))
                print(f"{case['group']} | {case['label']} | round {round_index + 1}: {value}", flush=True)
    return [{**case, **_merge(case_runs)} for case, case_runs in zip(cases, runs, strict=True)]


def _merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [r for r in runs if "error" not in r]
    if not good:
        return runs[-1]
    warm = [r["warm_s"] for r in good if r["warm_s"] is not None]
    return {
        "cold_s": min(r["cold_s"] for r in good),
        "warm_s": min(warm) if warm else None,
        "peak_rss_mb": max(r["peak_rss_mb"] for r in good),
        "input_rss_mb": max(r["input_rss_mb"] for r in good),
        "runs": runs,
    }


def _read_through(path: Path) -> None:
    with path.open("rb") as stream:
        while stream.read(1 << 24):
            pass


def add_ratios(results: list[dict[str, Any]]) -> None:
    """Time and peak-RSS ratios to the RTN row of the same group and level (model-level or step-level)."""

    def level(r: dict[str, Any]) -> str:
        return "step" if r["kind"] in ("weight", "solver") else "model"

    rtn = {(r["group"], level(r)): r for r in results if r["method"] == "rtn" and "error" not in r}
    for r in results:
        base = rtn.get((r["group"], level(r)))
        if base is None or "error" in r or r["kind"] == "alternated":
            continue
        for key in ("cold_s", "warm_s", "peak_rss_mb"):
            if r.get(key) is not None and base.get(key):
                r[f"{key}_vs_rtn"] = r[key] / base[key]


def format_table(results: list[dict[str, Any]]) -> str:
    header = f"{'case':52s} {'cold s':>8s} {'warm s':>8s} {'x RTN':>7s} {'peak MiB':>9s} {'x RTN':>6s}"
    lines: list[str] = []
    group = None
    for r in results:
        if r["group"] != group:
            group = r["group"]
            lines += ["", f"== {group}", header]
        if "error" in r:
            lines.append(f"{r['label']:52s} FAILED: {r['error']}")
            continue
        time_key = "warm_s" if r.get("warm_s") is not None else "cold_s"
        time_ratio, rss_ratio = _num(r.get(f"{time_key}_vs_rtn"), 7, 2), _num(r.get("peak_rss_mb_vs_rtn"), 6, 2)
        line = (
            f"{r['label']:52s} {r['cold_s']:8.3f} {_num(r.get('warm_s'), 8, 3)} {time_ratio} "
            f"{_num(r.get('peak_rss_mb'), 9, 0)} {rss_ratio}"
        )
        if r.get("cpu_s") is not None:
            line += f"   CPU {r['cpu_s']:.3f} s, x RTN {_num(r.get('cpu_s_vs_rtn'), 5, 2).strip() or '-'}"
        lines.append(line)
    return "\n".join(lines)


def _num(value: float | None, width: int, digits: int) -> str:
    return f"{value:{width}.{digits}f}" if value is not None else " " * (width - 1) + "-"


def machine() -> dict[str, Any]:
    import numpy

    from nncf_hqq.llm.cpu import this_cpu
    from nncf_hqq.llm.records import versions

    cpu = this_cpu()
    return {
        "cpu_count": os.cpu_count(),
        "processor": _cpu_name(),
        "cpu_kind": cpu.kind,
        "isa": cpu.isa(),
        **versions(),
        "numpy": numpy.__version__,
        "torch": _version_of("torch"),
        "transformers": _version_of("transformers"),
    }


def _version_of(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("results/compression_speed.json"))
    parser.add_argument("--quick", action="store_true", help="1024x1024 weights, 1-layer stack, fewer configs")
    parser.add_argument("--layers", type=int, default=QWEN_LAYERS, help="decoder layers of the Qwen-shaped stack")
    parser.add_argument(
        "--reference-layers", type=int, default=2, help="layers of the stack also run with the reference"
    )
    parser.add_argument("--repeats", type=int, default=3, help="calls per single-weight case (first one is cold)")
    parser.add_argument("--rounds", type=int, default=3, help="child processes per fast single-weight case (best kept)")
    parser.add_argument("--no-hqq-lib", action="store_true", help="skip the hqq library rows")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch rows")
    parser.add_argument("--torch-layers", type=int, default=4, help="layers of the Qwen-shaped PyTorch model")
    parser.add_argument("--torch-device", default="cpu", help="device of the PyTorch models (cpu, cuda)")
    parser.add_argument("--torch-rounds", type=int, default=3, help="child processes per PyTorch case (best kept)")
    parser.add_argument(
        "--alternated-rounds", type=int, default=3, help="rounds of the alternated RTN/HQQ case (median kept)"
    )
    parser.add_argument("--only", help="run only the cases whose group or label contains this text")
    parser.add_argument("--methods", help=f"comma-separated methods to run (of {', '.join([*METHODS, 'hqq_lib'])})")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(run_child(json.loads(args.child))))
        return
    notes = []
    if not args.no_hqq_lib and not hqq_library_available():
        args.no_hqq_lib = True
        notes.append("hqq library not installed (pip install hqq): its rows are skipped")
    if find_smollm_ir() is None:
        notes.append(f"no SmolLM2-135M openvino_model.xml under {CACHE_DIR}: its rows are skipped")
    if not args.no_torch and not torch_available():
        args.no_torch = True
        notes.append("torch/transformers not installed (pip install -e '.[llm]'): the PyTorch rows are skipped")
    cases = [c for c in build_cases(args) if not args.only or args.only in f"{c['group']} {c['label']}"]
    if args.methods:
        keep = {m.strip() for m in args.methods.split(",")}
        both = {"rtn", "hqq"} <= keep  # the alternated case runs the two
        cases = [c for c in cases if c["method"] in keep or (c["kind"] == "alternated" and both)]
    results = []
    for group in dict.fromkeys(case["group"] for case in cases):
        results += run_group([case for case in cases if case["group"] == group])
    add_ratios(results)
    description = machine()
    isa = ", ".join(flag for flag, present in description["isa"].items() if present) or "none of the listed"
    print(f"CPU: {description['processor']} ({description['cpu_kind']}; {isa}), {description['cpu_count']} cores")
    print(format_table(results))
    for note in notes:
        print(f"note: {note}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {"command": " ".join(sys.argv), "machine": description, "notes": notes, "results": results}
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
