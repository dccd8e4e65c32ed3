"""Sequential evaluation against cached FP log-probs: one candidate model in memory at a time.

``evaluate_llms`` runs every model window by window in lockstep, which keeps all of them compiled at once; for
the 1.5B model (an f32 FP model plus several compressed ones) that exceeds this machine's 23 GB. Here the FP
model's log-probs are computed once into a memory-mapped file and each candidate is compiled, evaluated with the
same metrics (PPL, KL(P_fp || P), top-1 agreement) and freed before the next.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov

from nncf_hqq.llm.evaluation import StatefulLLM
from nncf_hqq.llm.evaluation import log_softmax64
from nncf_hqq.llm.evaluation import nll_sum


def reference_log_probs(ir_dir: Path, root: Path, windows: list[np.ndarray]) -> np.ndarray:
    """The FP model's log-probs ``[windows, T, V]`` (f32, memory-mapped file, computed once)."""
    path = root / f"fp_logp_{len(windows)}.npy"
    if not path.exists():
        root.mkdir(parents=True, exist_ok=True)
        llm = StatefulLLM(ir_dir)
        shape = (len(windows), len(windows[0]), int(llm.compiled.output("logits").get_partial_shape()[-1].get_length()))
        out = np.lib.format.open_memmap(path.with_suffix(".tmp.npy"), mode="w+", dtype=np.float32, shape=shape)
        for i, ids in enumerate(windows):
            out[i] = log_softmax64(llm.logits(ids))
        out.flush()
        del out
        path.with_suffix(".tmp.npy").rename(path)
    return np.load(path, mmap_mode="r")


def window_sums(model: ov.Model, windows: list[np.ndarray], reference: np.ndarray) -> dict[str, list[float]]:
    """Per window: the summed negative log-likelihood and the tokens it predicts, the summed KL(P_fp || P), the
    positions where both models' top token agree, and the positions (for intervals over windows)."""
    llm = StatefulLLM(model)
    sums: dict[str, list[float]] = {"nll": [], "predicted": [], "kl": [], "top1": [], "positions": []}
    for ids, ref in zip(windows, reference, strict=True):
        logp = log_softmax64(llm.logits(ids))
        ref64 = np.asarray(ref, dtype=np.float64)
        sums["kl"].append(float((np.exp(ref64) * (ref64 - logp)).sum()))
        sums["top1"].append(float((logp.argmax(-1) == ref64.argmax(-1)).sum()))
        sums["nll"].append(float(nll_sum(logp, ids)))
        sums["positions"].append(float(len(ids)))
        sums["predicted"].append(float(len(ids) - 1))
    return sums


def metrics_of_sums(sums: dict[str, np.ndarray] | dict[str, list[float]]) -> dict[str, float]:
    """PPL, KL and top-1 of (a resample of) the windows' sums."""
    total = {key: float(np.sum(values)) for key, values in sums.items()}
    return {
        "ppl": float(np.exp(total["nll"] / total["predicted"])),
        "kl": total["kl"] / total["positions"],
        "top1": total["top1"] / total["positions"],
    }


def evaluate_against(model: ov.Model, windows: list[np.ndarray], reference: np.ndarray) -> dict[str, float]:
    return metrics_of_sums(window_sums(model, windows, reference))


def reference_metrics(windows: list[np.ndarray], reference: np.ndarray) -> dict[str, float]:
    """The FP model's own row: its perplexity, KL 0 and top-1 agreement 1."""
    nll = sum(nll_sum(np.asarray(ref, dtype=np.float64), ids) for ids, ref in zip(windows, reference, strict=True))
    predicted = sum(len(ids) - 1 for ids in windows)
    return {"ppl": float(np.exp(nll / predicted)), "kl": 0.0, "top1": 1.0}


#: Resamples of the windows for the paired intervals, and their confidence level.
BOOTSTRAP_DRAWS = 2000
INTERVAL_LEVEL = 0.95


def paired_interval(
    row: dict[str, list[float]], base: dict[str, list[float]], seed: int = 0
) -> dict[str, tuple[float, float, float]]:
    """The difference row - base of PPL, KL and top-1 on the same windows, and its paired bootstrap interval: the
    windows resampled with replacement (the same draw for both rows), ``INTERVAL_LEVEL`` of the resamples' differences
    inside. A difference whose interval holds zero is within what the choice of windows moves."""
    rng = np.random.default_rng(seed)
    arrays = {key: np.asarray(values) for key, values in row.items()}, {k: np.asarray(v) for k, v in base.items()}
    count = len(arrays[0]["nll"])
    draws = rng.integers(0, count, size=(BOOTSTRAP_DRAWS, count))
    point = {key: metrics_of_sums(arrays[0])[key] - metrics_of_sums(arrays[1])[key] for key in ("ppl", "kl", "top1")}
    resampled: dict[str, list[float]] = {key: [] for key in point}
    for draw in draws:
        ours = metrics_of_sums({key: values[draw] for key, values in arrays[0].items()})
        theirs = metrics_of_sums({key: values[draw] for key, values in arrays[1].items()})
        for key in point:
            resampled[key].append(ours[key] - theirs[key])
    tail = 100 * (1 - INTERVAL_LEVEL) / 2
    return {
        key: (point[key], float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail)))
        for key, values in resampled.items()
    }


def paired_mean_interval(row: list[float], base: list[float], seed: int = 0) -> tuple[float, float, float]:
    """The difference of the means of two rows' per-item values (the encoders' per-line cosines) and its paired
    bootstrap interval, as ``paired_interval``."""
    differences = np.asarray(row) - np.asarray(base)
    draws = np.random.default_rng(seed).integers(0, len(differences), size=(BOOTSTRAP_DRAWS, len(differences)))
    means = differences[draws].mean(axis=1)
    tail = 100 * (1 - INTERVAL_LEVEL) / 2
    return float(differences.mean()), float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))
