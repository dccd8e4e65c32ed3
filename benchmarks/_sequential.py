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


def evaluate_against(model: ov.Model, windows: list[np.ndarray], reference: np.ndarray) -> dict[str, float]:
    llm = StatefulLLM(model)
    kl = nll = 0.0
    top1 = positions = predicted = 0
    for ids, ref in zip(windows, reference, strict=True):
        logp = log_softmax64(llm.logits(ids))
        ref64 = np.asarray(ref, dtype=np.float64)
        kl += float((np.exp(ref64) * (ref64 - logp)).sum())
        top1 += int((logp.argmax(-1) == ref64.argmax(-1)).sum())
        nll += nll_sum(logp, ids)
        positions += len(ids)
        predicted += len(ids) - 1
    return {"ppl": float(np.exp(nll / predicted)), "kl": kl / positions, "top1": top1 / positions}


def reference_metrics(windows: list[np.ndarray], reference: np.ndarray) -> dict[str, float]:
    """The FP model's own row: its perplexity, KL 0 and top-1 agreement 1."""
    nll = sum(nll_sum(np.asarray(ref, dtype=np.float64), ids) for ids, ref in zip(windows, reference, strict=True))
    predicted = sum(len(ids) - 1 for ids in windows)
    return {"ppl": float(np.exp(nll / predicted)), "kl": 0.0, "top1": 1.0}
