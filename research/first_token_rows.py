"""benchmarks/quality.py with every calibration sample's token rows including the sample's first token.

An experiment on attention sinks (docs/research-log.md, 2026-12-03): HQQ's token rows
(``HQQParameters.calibration_token_rows``) are drawn at random, so a sample's first token, whose inputs to some
layers are hundreds of times the others', is among them only by chance. Here it always is (it takes the place of
one random row). Same arguments as benchmarks/quality.py:

    python research/first_token_rows.py --model qwen --windows 20 --sequential \
        --rows self_awq_se_hqq_tok32_held_out --out first_token_rows.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from nncf.tensor import Tensor
from nncf.tensor import functions as fns

import nncf_hqq.statistics


def token_rows_with_first_tokens(
    activation: Tensor, channel_axis: int, count: int, rng: np.random.Generator
) -> list[Tensor]:
    """``nncf_hqq.statistics.sample_token_rows`` with the first token of every sequence always drawn."""
    rows = fns.moveaxis(activation, channel_axis % activation.ndim, -1)
    tokens = rows.shape[-2] if rows.ndim >= 2 else 1
    rows = rows.reshape((-1, rows.shape[-1]))
    total = rows.shape[0]
    firsts = np.arange(0, total, tokens)
    rest = np.setdiff1d(np.arange(total), firsts)
    extra = min(max(min(count, total) - firsts.size, 0), rest.size)
    chosen = np.sort(np.concatenate([firsts, rng.choice(rest, size=extra, replace=False)]))
    picked = rows[chosen]
    return [picked[i] for i in range(picked.shape[0])]


if __name__ == "__main__":
    nncf_hqq.statistics.sample_token_rows = token_rows_with_first_tokens  # type: ignore[assignment]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import quality

    sys.argv[0] = "quality.py"
    quality.main()
