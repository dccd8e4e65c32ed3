"""The evidence of the HQQ pull requests, measured by the patched NNCF trees themselves: accuracy and compression time.

    python upstream/build.py /tmp/core --upto 0001                  # the pull request's tree (DEST)
    python upstream/pr3981_tree.py NNCF_REPO /tmp/pr3981            # NNCF's open HQQ PR #3981 on nncf 3.4.0
    python benchmarks/upstream_evidence.py --trees pr3981=/tmp/pr3981,core=/tmp/core --timed core \\
        --out results/upstream_evidence.json
    python benchmarks/upstream_evidence.py --report results/upstream_evidence.json      # its tables as Markdown

Rows: ``rtn`` (the installed nncf 3.4.0, ``hqq`` off: NNCF's round to nearest) and one row per tree (``DIR/src``
first on ``PYTHONPATH``, ``hqq=True``); ``--ablations TREE:FIELD=VALUE`` adds a tree's row with one
``AdvancedHQQParameters`` field changed, and ``--rows SOURCE:SETTING+SETTING,...`` (SOURCE ``rtn`` or a tree) a row
with further ``compress_weights`` settings: ``mode=INT4_SYM`` (a ``CompressWeightsMode`` name), ``awq=True``,
``scale_estimation=True``, ``hqq.FIELD=VALUE`` (an ``AdvancedHQQParameters`` field; trees only) and ``dataset=self``:
calibration on the 32 x 128 tokens the float model generates from its BOS token (``SELF_CALIBRATION_DEFAULT``,
made in the parent by ``nncf_hqq.self_calibration``: only the text; the child compresses with the tree's NNCF).
Every compression runs in a child process of its own that reads the float IR, calls ``nncf.compress_weights``
(INT4_ASYM unless the row sets ``mode``, the model's group size, ratio 1, backup mode NONE; shared/PROTOCOL.md),
saves the result and prints the seconds ``compress_weights`` took; in the child any import of ``nncf_hqq`` fails
and the ``nncf`` it imported must come from the row's tree (checked). Nothing is compressed by ``nncf_hqq``.

Parts (``--parts``):

- ``smollm2``: SmolLM2-135M-Instruct (float weights dequantized from a 4-bit GGUF file), g64, PPL / KL / top-1 over
  40 WikiText-2 windows of 512 tokens against the float model (PROTOCOL.md).
- ``qwen``: the Qwen2.5-1.5B-shaped model (Qwen2.5-Coder-1.5B-Instruct, dequantized from a GGUF file; its f32 IR
  is about 6 GB), g128, 20 windows; runs holding ``--lock`` (the machine's memory lock).
- ``minilm``, ``mpnet``: all-MiniLM-L6-v2 and all-mpnet-base-v2 (genuine float weights), g64, mean and minimum
  cosine of mean-pooled embeddings of 200 WikiText-2 lines against the float encoder's.
- ``time``: compression time of RTN and of each ``--timed`` tree (or tree with one parameter changed), alternated,
  median of ``--repeats``, on SmolLM2, on eight 2048x2048 MatMuls and on one decoder layer's MatMuls at
  Qwen2.5-1.5B's shapes (q/k/v with biases, o, gate, up, down; random weights, g128, every layer compressed).
"""

from __future__ import annotations

import argparse
import ast
import fcntl
import hashlib
import importlib.abc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WIKITEXT = "data/wikitext-2-raw/wiki.test.raw"
WORKER = "--_compress"
PARTS = ("smollm2", "minilm", "mpnet", "time", "qwen")
#: Group size and WikiText-2 windows per accuracy model (PROTOCOL.md; encoders: 10 lines per window).
ACCURACY = {"smollm2": (64, 40), "qwen": (128, 20), "minilm": (64, 20), "mpnet": (64, 20)}
#: The synthetic models of the timing part: name -> (builder name in benchmarks/inference.py, its arguments).
TIMING_MODELS = {
    "matmul_2048x8": ("matmul_stack", (2048, 8)),
    "qwen1.5b_layer": ("qwen_layers", (1536, 8960, 256, 1)),
}
TIMING_GROUP_SIZE = 128
MEMORY_LOCK = "/tmp/nncf-hqq-bigmem.lock"
#: The ``--rows`` setting of a row calibrated on the float model's own text.
SELF_CALIBRATED = "dataset=self"
#: ``compress_weights`` keywords the protocol fixes for every row (or the script sets), not ``--rows`` settings.
RESERVED_OPTIONS = ("group_size", "ratio", "backup_mode", "hqq", "all_layers", "subset_size", "advanced_parameters")


# --------------------------------------------------------------------------------------------------------------------
# The child: one compression with one tree's NNCF, nncf_hqq unimportable
# --------------------------------------------------------------------------------------------------------------------
class _ForbidNNCFHQQ(importlib.abc.MetaPathFinder):
    """Makes any import of ``nncf_hqq`` fail in the child."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> None:
        if fullname.split(".")[0] == "nncf_hqq":
            msg = f"{fullname} must not be imported while a tree's NNCF compresses"
            raise ImportError(msg)


def compress_worker(argv: list[str]) -> None:
    """``IR OUT GROUP_SIZE [--hqq] [--all-layers] [--tree DIR] [--hqq-param FIELD=VALUE]... [--option KEY=VALUE]...
    [--dataset TOKENS.npy]``: prints the seconds of ``compress_weights``."""
    sys.meta_path.insert(0, _ForbidNNCFHQQ())
    import nncf
    import numpy as np
    import openvino as ov

    ir, out, group_size = Path(argv[0]), Path(argv[1]), int(argv[2])
    if "--tree" in argv:
        tree = Path(argv[argv.index("--tree") + 1]).resolve()
        if not Path(nncf.__file__).resolve().is_relative_to(tree):
            sys.exit(f"nncf came from {nncf.__file__}, not from the tree {tree}")
    model = ov.Core().read_model(ir)
    options: dict[str, Any] = {"hqq": True} if "--hqq" in argv else {}
    if "--all-layers" in argv:
        options["all_layers"] = True
    options.update(parse_param(argv[i + 1], strings=True) for i, arg in enumerate(argv) if arg == "--option")
    mode = nncf.CompressWeightsMode[options.pop("mode", "INT4_ASYM")]
    if "--dataset" in argv:
        tokens = np.load(argv[argv.index("--dataset") + 1])
        names = {name for port in model.inputs for name in port.get_names()}
        options["dataset"] = nncf.Dataset(prefill_inputs(tokens, names))
        options["subset_size"] = len(tokens)
    hqq_params = dict(parse_param(argv[i + 1]) for i, arg in enumerate(argv) if arg == "--hqq-param")
    if hqq_params:
        from nncf.quantization.advanced_parameters import AdvancedCompressionParameters
        from nncf.quantization.advanced_parameters import AdvancedHQQParameters

        options["advanced_parameters"] = AdvancedCompressionParameters(hqq_params=AdvancedHQQParameters(**hqq_params))
    start = time.perf_counter()
    model = nncf.compress_weights(
        model,
        mode=mode,
        group_size=group_size,
        ratio=1.0,
        backup_mode=nncf.BackupMode.NONE,
        **options,
    )
    seconds = time.perf_counter() - start
    if out.name != "-":
        ov.save_model(model, out, compress_to_fp16=False)
    print(seconds)


# --------------------------------------------------------------------------------------------------------------------
# The parent
# --------------------------------------------------------------------------------------------------------------------
def parse_param(text: str, strings: bool = False) -> tuple[str, Any]:
    """``FIELD=VALUE`` -> (field, value); the value is a Python literal (``strings``: or else the bare text, as in
    ``mode=INT4_SYM``)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        msg = f"{text!r} is not FIELD=VALUE"
        raise ValueError(msg)
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        if strings and value.isidentifier():
            return name, value
        raise


def prefill_inputs(tokens: Any, names: set[str]) -> list[dict[str, Any]]:
    """One stateful-LLM prefill sample (batch 1, empty state) per row of ``tokens`` ``[samples, length]``, with the
    inputs in ``names`` (as optimum-intel's models take them)."""
    import numpy as np

    samples = []
    for row in tokens:
        length = len(row)
        inputs = {
            "input_ids": np.asarray(row, dtype=np.int64).reshape(1, length),
            "attention_mask": np.ones((1, length), dtype=np.int64),
            "position_ids": np.arange(length, dtype=np.int64).reshape(1, length),
            "beam_idx": np.zeros(1, dtype=np.int32),
        }
        samples.append({name: value for name, value in inputs.items() if name in names})
    return samples


@dataclass(frozen=True)
class Row:
    """One compressed row: the tree that compresses (None: the installed nncf's RTN) and the ``AdvancedHQQParameters``
    fields it sets (an ablation row)."""

    tree: Path | None
    hqq_params: tuple[str, ...] = ()
    #: Further ``compress_weights`` settings, ``KEY=VALUE`` (``dataset=self``: self-calibration; see ``--rows``).
    options: tuple[str, ...] = ()

    @property
    def calibrated(self) -> bool:
        return SELF_CALIBRATED in self.options


def parse_ablations(text: str, trees: dict[str, Path]) -> dict[str, Row]:
    """``TREE:FIELD=VALUE,...`` -> {"TREE FIELD=VALUE": Row}: the tree with one of its HQQ parameters changed."""
    rows: dict[str, Row] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, param = item.partition(":")
        if not sep or name not in trees:
            msg = f"--ablations: {item!r} is not TREE:FIELD=VALUE with TREE in --trees"
            raise ValueError(msg)
        parse_param(param)
        rows[f"{name} {param}"] = Row(trees[name], (param,))
    return rows


def parse_timed(text: str, trees: dict[str, Path]) -> dict[str, Row]:
    """``NAME,...`` -> the rows timed against RTN: a tree with its defaults (``TREE``) or with one HQQ parameter
    changed (``TREE:FIELD=VALUE``, named as ``--ablations`` names it); every tree when ``text`` is empty."""
    rows: dict[str, Row] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if ":" in item:
            rows.update(parse_ablations(item, trees))
        elif item in trees:
            rows[item] = Row(trees[item])
        else:
            msg = f"--timed: {item!r} is neither a tree in --trees nor TREE:FIELD=VALUE"
            raise ValueError(msg)
    return rows or {name: Row(tree) for name, tree in trees.items()}


def parse_rows(text: str, trees: dict[str, Path]) -> dict[str, Row]:
    """``SOURCE:SETTING+SETTING,...`` -> {"SOURCE SETTING+SETTING": Row}: SOURCE ``rtn`` (the installed nncf, ``hqq``
    off) or a tree; SETTING ``hqq.FIELD=VALUE`` (an ``AdvancedHQQParameters`` field, trees only), ``dataset=self`` or a
    ``compress_weights`` keyword ``KEY=VALUE`` (``mode``: a ``CompressWeightsMode`` name)."""
    rows: dict[str, Row] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        source, sep, settings = item.partition(":")
        if not sep or not settings or (source != "rtn" and source not in trees):
            msg = f"--rows: {item!r} is not SOURCE:SETTING+... with SOURCE rtn or a tree in --trees"
            raise ValueError(msg)
        hqq_params, options = [], []
        for setting in settings.split("+"):
            key, value = parse_param(setting, strings=True)
            if key.startswith("hqq."):
                if source == "rtn":
                    msg = f"--rows: {item!r}: the rtn row has no HQQ parameters"
                    raise ValueError(msg)
                hqq_params.append(setting.removeprefix("hqq."))
            elif key == "dataset" and value != "self":
                msg = f"--rows: {item!r}: the only dataset is 'self' (the float model's own text)"
                raise ValueError(msg)
            elif key in RESERVED_OPTIONS:
                msg = f"--rows: {item!r}: {key} is fixed by the protocol"
                raise ValueError(msg)
            else:
                options.append(setting)
        name = f"{source} {settings}"
        if name in rows:
            msg = f"--rows: {item!r} given twice"
            raise ValueError(msg)
        rows[name] = Row(None if source == "rtn" else trees[source], tuple(hqq_params), tuple(options))
    return rows


def parse_trees(text: str) -> dict[str, Path]:
    """``NAME=DIR,...`` -> {name: DIR}; every DIR must hold ``src/nncf``; ``rtn`` is taken by the installed NNCF."""
    trees: dict[str, Path] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            msg = f"--trees: {item!r} is not NAME=DIR"
            raise ValueError(msg)
        if name == "rtn" or name in trees:
            msg = f"--trees: the name {name!r} is taken"
            raise ValueError(msg)
        if not (Path(path) / "src" / "nncf" / "__init__.py").is_file():
            msg = f"--trees: {path} holds no src/nncf"
            raise ValueError(msg)
        trees[name] = Path(path)
    return trees


def child_command(
    ir: Path, out: Path | str, group_size: int, row: Row, all_layers: bool, dataset: Path | None = None
) -> list[str]:
    """The child's command line: ``hqq=True`` exactly when a tree is given; ``dataset``: the calibration tokens of a
    ``dataset=self`` row."""
    command = [sys.executable, str(Path(__file__).resolve()), WORKER, str(ir), str(out), str(group_size)]
    if row.tree is not None:
        command += ["--hqq", "--tree", str(row.tree.resolve())]
    for param in row.hqq_params:
        command += ["--hqq-param", param]
    for option in row.options:
        if option != SELF_CALIBRATED:
            command += ["--option", option]
    if row.calibrated:
        if dataset is None:
            msg = "a dataset=self row needs the calibration tokens"
            raise ValueError(msg)
        command += ["--dataset", str(dataset)]
    return command + ["--all-layers"] * all_layers


def compress(
    ir: Path, out: Path | str, group_size: int, row: Row, all_layers: bool = False, dataset: Path | None = None
) -> float:
    """Runs one child (``tree/src`` alone on its ``PYTHONPATH``, or none for the installed nncf); its seconds."""
    # NNCF_CI: no telemetry, whose event forks from a thread under a threaded matmul (docs/research-log.md, 2026-12-07)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"NNCF_CI": "1"}
    if row.tree is not None:
        env["PYTHONPATH"] = str((row.tree / "src").resolve())
    done = subprocess.run(
        child_command(ir, out, group_size, row, all_layers, dataset),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"compression failed ({row.tree or 'installed nncf'}, {ir.name}):\n{done.stderr[-3000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def gap_closed(rtn: float, row: float, reference: float) -> float:
    """The share of RTN's distance to the reference that the row closes (perplexity: reference = float PPL;
    cosine: reference = 1)."""
    return (rtn - row) / (rtn - reference)


def median_alternated(runs: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in runs.items()}


def tree_identity(tree: Path) -> dict[str, Any]:
    """What identifies a built tree: its patches' sha256 (upstream/build.py writes DEST/patches), if it has any."""
    patches = sorted((tree / "patches").glob("*.patch"))
    return {
        "path": str(tree.resolve()),
        "patches": {p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in patches},
    }


@contextmanager
def held(lock: str | None) -> Iterator[None]:
    """Holds the machine's memory lock (flock on ``lock``) for the block; None: no lock."""
    if lock is None:
        yield
        return
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def llm_part(model: str, rows: dict[str, Row], tmp: Path, reused: dict[str, Any] | None) -> dict[str, Any]:
    import openvino as ov
    from _sequential import metrics_of_sums
    from _sequential import paired_interval
    from _sequential import reference_log_probs
    from _sequential import reference_metrics
    from _sequential import window_sums

    from nncf_hqq.llm.layout import ir_xml
    from nncf_hqq.llm.texts import load_tokenizer
    from nncf_hqq.llm.texts import wikitext_windows
    from nncf_hqq.llm.zoo import cache_dir
    from nncf_hqq.llm.zoo import qwen_ov_dir
    from nncf_hqq.llm.zoo import shared_path
    from nncf_hqq.llm.zoo import smollm2_ov_dir

    group_size, count = ACCURACY[model]
    ir_dir = {"smollm2": smollm2_ov_dir, "qwen": qwen_ov_dir}[model]()
    windows = wikitext_windows(load_tokenizer(ir_dir), shared_path(WIKITEXT), count)
    reference = reference_log_probs(ir_dir, cache_dir() / "fp_logp" / model, windows)
    metrics: dict[str, dict[str, float]] = {"float": reference_metrics(windows, reference)}
    seconds: dict[str, float] = {}
    sums: dict[str, dict[str, list[float]]] = {}
    if reused is not None:
        metrics["rtn"], seconds["rtn"] = reused["metrics"]["rtn"], reused["compress_seconds"]["rtn"]
    dataset = (
        self_calibration_tokens(ir_dir, tmp / f"{model}_self.npy") if any(r.calibrated for r in rows.values()) else None
    )
    for name, row in rows.items():
        if name in metrics:
            continue
        out = tmp / f"{model}_{name}.xml"
        seconds[name] = compress(ir_xml(ir_dir), out, group_size, row, dataset=dataset)
        sums[name] = window_sums(ov.Core().read_model(out), windows, reference)
        metrics[name] = metrics_of_sums(sums[name])
        out.unlink()
        out.with_suffix(".bin").unlink()
        print(f"  {model} {name}: {metrics[name]} (compressed in {seconds[name]:.1f} s)", flush=True)
    fp, rtn = metrics["float"]["ppl"], metrics["rtn"]["ppl"]
    for name in rows:
        metrics[name]["ppl_gap_closed"] = gap_closed(rtn, metrics[name]["ppl"], fp)
    intervals = {f"{name} - {base}": paired_interval(sums[name], sums[base]) for name, base in compared_pairs(sums)}
    return {
        "group_size": group_size,
        "windows": count,
        "metrics": metrics,
        "compress_seconds": seconds,
        "window_sums": sums,
        "intervals": intervals,
    }


def self_calibration_tokens(ir_dir: Path, path: Path) -> Path:
    """``SELF_CALIBRATION_DEFAULT``'s sequences the float model generates from its BOS token, saved to ``path`` (the
    parent makes the text; every ``dataset=self`` row of the run compresses on the same tokens)."""
    import numpy as np
    import openvino as ov

    from nncf_hqq.llm.layout import ir_xml
    from nncf_hqq.llm.sanity import generation_bos_token_id
    from nncf_hqq.self_calibration import SELF_CALIBRATION_DEFAULT
    from nncf_hqq.self_calibration import generate_sequences

    bos = generation_bos_token_id(ir_dir)
    params = SELF_CALIBRATION_DEFAULT if bos is None else SELF_CALIBRATION_DEFAULT.replace(start_token_ids=(bos,))
    np.save(path, generate_sequences(ov.Core().read_model(ir_xml(ir_dir)), params))
    return path


def encoder_part(model: str, rows: dict[str, Row], tmp: Path, reused: dict[str, Any] | None) -> dict[str, Any]:
    import numpy as np
    import openvino as ov
    from _sequential import paired_mean_interval

    from nncf_hqq.llm.encoders import ENCODER_CONFIG
    from nncf_hqq.llm.encoders import cosine_rows
    from nncf_hqq.llm.encoders import mean_pooled
    from nncf_hqq.llm.evaluation import compile_model
    from nncf_hqq.llm.layout import ir_xml
    from nncf_hqq.llm.texts import load_tokenizer
    from nncf_hqq.llm.texts import wikitext_lines
    from nncf_hqq.llm.zoo import minilm_ov_dir
    from nncf_hqq.llm.zoo import mpnet_ov_dir
    from nncf_hqq.llm.zoo import shared_path

    if calibrated := [name for name, row in rows.items() if row.calibrated]:
        sys.exit(f"{model}: an encoder does not generate its own calibration text ({', '.join(calibrated)})")
    group_size, count = ACCURACY[model]
    ir_dir = {"minilm": minilm_ov_dir, "mpnet": mpnet_ov_dir}[model]()
    lines = wikitext_lines(shared_path(WIKITEXT), count * 10)
    tokenizer = load_tokenizer(ir_dir)
    reference = mean_pooled(compile_model(ir_dir, ENCODER_CONFIG), tokenizer, lines)
    metrics: dict[str, dict[str, float]] = {}
    seconds: dict[str, float] = {}
    per_line: dict[str, list[float]] = {}
    if reused is not None:
        metrics["rtn"], seconds["rtn"] = reused["metrics"]["rtn"], reused["compress_seconds"]["rtn"]
    for name, row in rows.items():
        if name in metrics:
            continue
        out = tmp / f"{model}_{name}.xml"
        seconds[name] = compress(ir_xml(ir_dir), out, group_size, row)
        embeddings = mean_pooled(compile_model(ov.Core().read_model(out), ENCODER_CONFIG), tokenizer, lines)
        cosines = cosine_rows(reference, embeddings)
        per_line[name] = [float(c) for c in cosines]
        metrics[name] = {"cosine": float(np.mean(cosines)), "cosine_min": float(np.min(cosines))}
        print(f"  {model} {name}: {metrics[name]} (compressed in {seconds[name]:.1f} s)", flush=True)
    for name in rows:
        metrics[name]["cosine_gap_closed"] = gap_closed(metrics["rtn"]["cosine"], metrics[name]["cosine"], 1.0)
    intervals = {
        f"{name} - {base}": {"cosine": paired_mean_interval(per_line[name], per_line[base])}
        for name, base in compared_pairs(per_line)
    }
    return {
        "group_size": group_size,
        "lines": len(lines),
        "metrics": metrics,
        "compress_seconds": seconds,
        "line_cosines": per_line,
        "intervals": intervals,
    }


def time_part(rows: dict[str, Row], repeats: int, tmp: Path) -> dict[str, Any]:
    import inference
    import openvino as ov

    from nncf_hqq.llm.layout import ir_xml
    from nncf_hqq.llm.zoo import smollm2_ov_dir

    models: dict[str, tuple[Path, int, bool]] = {"smollm2": (ir_xml(smollm2_ov_dir()), 64, False)}
    for name, (builder, arguments) in TIMING_MODELS.items():
        path = tmp / f"{name}.xml"
        ov.save_model(getattr(inference, builder)(*arguments), path, compress_to_fp16=False)
        models[name] = (path, TIMING_GROUP_SIZE, True)
    results: dict[str, Any] = {}
    for model, (ir, group_size, all_layers) in models.items():
        runs: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(repeats):
            for name, row in rows.items():
                runs[name].append(compress(ir, "-", group_size, row, all_layers))
        medians = median_alternated(runs)
        ratios = {name: medians[name] / medians["rtn"] for name in rows}
        results[model] = {"runs": runs, "median_seconds": medians, "ratio_to_rtn": ratios}
        shown = ", ".join(f"{name} {medians[name]:.1f} s ({ratios[name]:.2f}x)" for name in rows)
        print(f"  time {model}: {shown}", flush=True)
    return results


def compared_pairs(rows: Mapping[str, object]) -> list[tuple[str, str]]:
    """(row, base) for the paired intervals: every row against ``rtn`` and an ablation row (``TREE FIELD=VALUE``)
    against its tree's own row, where both were measured in the run."""
    return [
        (name, base)
        for name in rows
        for base in dict.fromkeys(("rtn", name.split(" ")[0]))
        if base != name and base in rows
    ]


def interval_lines(part: dict[str, Any]) -> list[str]:
    """The paired differences of an LLM part's rows with their bootstrap intervals over windows (none in runs saved
    before they were recorded)."""
    lines = []
    for pair, values in part.get("intervals", {}).items():
        shown = ", ".join(f"{key} {point:+.4g} [{low:+.4g}, {high:+.4g}]" for key, (point, low, high) in values.items())
        lines.append(f"- {pair}: {shown}")
    if lines:
        lines.insert(0, "paired differences, 95% bootstrap intervals over the windows (lines for the encoders):")
    return lines


def print_tables(record: dict[str, Any]) -> None:
    parts = record["parts"]
    for model in ("smollm2", "qwen"):
        if model not in parts:
            continue
        part = parts[model]
        print(f"\n{model}, INT4_ASYM g{part['group_size']}, {part['windows']} windows")
        print(f"{'row':<34}{'PPL':>9}{'gap closed':>12}{'KL':>9}{'top-1':>9}{'compress s':>12}")
        for name, values in part["metrics"].items():
            closed = "" if name in ("float", "rtn") else f"{values['ppl_gap_closed']:.0%}"
            seconds = part["compress_seconds"].get(name)
            shown = "" if seconds is None else f"{seconds:.1f}"
            print(f"{name:<34}{values['ppl']:>9.2f}{closed:>12}{values['kl']:>9.4f}{values['top1']:>9.4f}{shown:>12}")
        for line in interval_lines(part):
            print(line)
    for model in ("minilm", "mpnet"):
        if model not in parts:
            continue
        part = parts[model]
        print(f"\n{model}, INT4_ASYM g{part['group_size']}, {part['lines']} lines")
        print(f"{'row':<34}{'cosine':>10}{'min':>10}{'gap closed':>12}{'compress s':>12}")
        for name, values in part["metrics"].items():
            closed = "" if name == "rtn" else f"{values['cosine_gap_closed']:.0%}"
            print(
                f"{name:<34}{values['cosine']:>10.5f}{values['cosine_min']:>10.5f}{closed:>12}"
                f"{part['compress_seconds'][name]:>12.1f}"
            )
        for line in interval_lines(part):
            print(line)
    if "time" in parts:
        print(f"\ncompression time, median of {record['repeats']} alternated runs (seconds, ratio to RTN)")
        for model, part in parts["time"].items():
            ratios = part["ratio_to_rtn"]
            shown = "  ".join(f"{n} {s:.1f} ({ratios[n]:.2f}x)" for n, s in part["median_seconds"].items())
            print(f"{model:<16}{shown}")


def markdown(record: dict[str, Any]) -> str:
    """The tables of a saved run as Markdown (for docs/upstreaming.md and the pull requests' descriptions)."""
    parts, lines = record["parts"], []
    for model in ("smollm2", "qwen"):
        if model not in parts:
            continue
        part = parts[model]
        lines += [
            f"\n**{model}**, INT4_ASYM g{part['group_size']}, {part['windows']} windows",
            "",
            "| row | PPL | gap closed | KL | top-1 | compression s |",
            "|---|---|---|---|---|---|",
        ]
        for name, values in part["metrics"].items():
            closed = "" if name in ("float", "rtn") else f"{values['ppl_gap_closed']:.0%}"
            seconds = part["compress_seconds"].get(name)
            shown = "" if seconds is None else f"{seconds:.1f}"
            lines.append(
                f"| {name} | {values['ppl']:.2f} | {closed} | {values['kl']:.4f} | {values['top1']:.4f} | {shown} |"
            )
        lines += ["", *interval_lines(part)]
    for model in ("minilm", "mpnet"):
        if model not in parts:
            continue
        part = parts[model]
        lines += [
            f"\n**{model}**, INT4_ASYM g{part['group_size']}, {part['lines']} lines",
            "",
            "| row | cosine | min cosine | gap closed | compression s |",
            "|---|---|---|---|---|",
        ]
        for name, values in part["metrics"].items():
            closed = "" if name == "rtn" else f"{values['cosine_gap_closed']:.0%}"
            lines.append(
                f"| {name} | {values['cosine']:.5f} | {values['cosine_min']:.5f} | {closed} "
                f"| {part['compress_seconds'][name]:.1f} |"
            )
        lines += ["", *interval_lines(part)]
    if "time" in parts:
        names = list(next(iter(parts["time"].values()))["median_seconds"])
        lines += [
            f"\n**compression time**, median of {record['repeats']} alternated runs, seconds (ratio to RTN)",
            "",
            "| model | " + " | ".join(names) + " |",
            "|---|" + "---|" * len(names),
        ]
        for model, part in parts["time"].items():
            cells = [f"{part['median_seconds'][n]:.1f} ({part['ratio_to_rtn'][n]:.2f}x)" for n in names]
            lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines).strip() + "\n"


def main(argv: list[str] | None = None) -> None:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--report"]:
        print(markdown(json.loads(Path(argv[1]).read_text())), end="")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", required=True, help="NAME=DIR,...: built trees holding DIR/src/nncf")
    parser.add_argument(
        "--ablations",
        default="",
        help="TREE:FIELD=VALUE,...: accuracy rows of a tree with one AdvancedHQQParameters field changed",
    )
    parser.add_argument(
        "--rows",
        default="",
        help="SOURCE:SETTING+SETTING,...: accuracy rows of rtn or a tree with further compress_weights settings "
        "(mode=INT4_SYM, awq=True, scale_estimation=True, dataset=self, hqq.FIELD=VALUE)",
    )
    parser.add_argument(
        "--no-tree-rows",
        action="store_true",
        help="accuracy: no row of a tree with its defaults, only the --ablations and --rows rows (and rtn)",
    )
    parser.add_argument(
        "--timed", default="", help="NAME,...: the trees (TREE or TREE:FIELD=VALUE) timed against RTN (default: all)"
    )
    parser.add_argument("--parts", default=",".join(PARTS), help=f"any of {','.join(PARTS)}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lock", default=MEMORY_LOCK, help="held during the qwen part; 'none' for no lock")
    parser.add_argument(
        "--reuse-rtn",
        type=Path,
        default=None,
        help="a saved run whose rtn accuracy rows (the installed nncf, deterministic) stand in for this run's",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    reused = json.loads(args.reuse_rtn.read_text())["parts"] if args.reuse_rtn else {}
    try:
        trees = parse_trees(args.trees)
    except ValueError as error:
        parser.error(str(error))
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if unknown := sorted(set(parts) - set(PARTS)):
        parser.error(f"--parts: unknown {unknown}")
    try:
        timed = parse_timed(args.timed, trees)
    except ValueError as error:
        parser.error(str(error))

    import nncf
    import openvino as ov

    from nncf_hqq.llm.cpu import this_cpu

    cpu = this_cpu()
    try:
        ablations = parse_ablations(args.ablations, trees)
        extra = parse_rows(args.rows, trees)
    except ValueError as error:
        parser.error(str(error))
    plain = {} if args.no_tree_rows else {name: Row(tree) for name, tree in trees.items()}
    rows = {"rtn": Row(None), **plain, **ablations, **extra}
    record: dict[str, Any] = {
        "command": " ".join(["python benchmarks/upstream_evidence.py", *argv]),
        "trees": {name: tree_identity(tree) for name, tree in trees.items()},
        "nncf": nncf.__version__,
        "openvino": ov.get_version(),
        "cpu": {"model": cpu.model, "kind": cpu.kind, "isa": cpu.isa()},
        "repeats": args.repeats,
        "rtn_accuracy_from": str(args.reuse_rtn) if args.reuse_rtn else None,
        "parts": {},
    }
    if extra:
        record["rows"] = {
            name: {"hqq_params": list(r.hqq_params), "options": list(r.options)} for name, r in extra.items()
        }
    print(f"CPU: {cpu.describe()}; trees: {', '.join(f'{n}={t}' for n, t in trees.items())}", flush=True)
    with tempfile.TemporaryDirectory(prefix="upstream_evidence_") as tmp:
        for part in parts:
            start = time.perf_counter()
            if part in ("smollm2", "qwen"):
                with held(None if part == "smollm2" or args.lock == "none" else args.lock):
                    record["parts"][part] = llm_part(part, rows, Path(tmp), reused.get(part))
            elif part in ("minilm", "mpnet"):
                record["parts"][part] = encoder_part(part, rows, Path(tmp), reused.get(part))
            else:
                record["parts"]["time"] = time_part({"rtn": Row(None), **timed}, args.repeats, Path(tmp))
            print(f"[{part} done in {time.perf_counter() - start:.0f} s]", flush=True)
            if args.out:  # written after every part: a long run keeps what it measured
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(record, indent=2) + "\n")
    print_tables(record)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == WORKER:
        compress_worker(sys.argv[2:])
    else:
        main()
