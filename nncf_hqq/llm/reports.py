"""Reports of the jobs' results: a fixed-width text table, and a PNG bar chart (matplotlib, imported only here)."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path

#: A metric column of ``format_table``: the metric's key, its header, the column's width and its number format.
Column = tuple[str, str, int, str]
#: The columns of the LLM metrics (``evaluation.evaluate_llms``).
LLM_COLUMNS: tuple[Column, ...] = (("ppl", "PPL", 10, ".3f"), ("kl", "KL", 10, ".5f"), ("top1", "top-1", 9, ".4f"))


def format_table(
    results: Mapping[str, Mapping[str, float]],
    extra: Mapping[str, Mapping[str, float]] | None = None,
    columns: Sequence[Column] = LLM_COLUMNS,
) -> str:
    """A fixed-width text table: one row per model, PPL / KL / top-1 (or other ``columns``) and ``extra`` columns
    (e.g. compress s)."""
    extra = extra or {}
    extra_columns = sorted({column for row in extra.values() for column in row})
    width = max([len("model"), *(len(name) for name in results)]) + 2
    header = f"{'model':<{width}}" + "".join(f"{title:>{w}}" for _, title, w, _ in columns)
    header += "".join(f"{c:>14}" for c in extra_columns)
    lines = [header, "-" * len(header)]
    for name, m in results.items():
        values = [extra.get(name, {}).get(column) for column in extra_columns]
        cells = "".join(f"{'-':>14}" if v is None else f"{v:>14.1f}" for v in values)
        metrics = "".join(f"{m[key]:>{w}{fmt}}" for key, _, w, fmt in columns)
        lines.append(f"{name:<{width}}{metrics}{cells}")
    return "\n".join(lines)


def require_matplotlib() -> None:
    """Raise a RuntimeError with the install hint when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        msg = "matplotlib is needed for the PNG chart: pip install -e '.[llm]' (or pip install matplotlib)"
        raise RuntimeError(msg) from err


#: The charts of ``write_png`` for the LLM metrics: metric key -> title.
LLM_CHARTS: dict[str, str] = {
    "ppl": "perplexity (lower is better)",
    "kl": "KL vs reference (lower)",
    "top1": "top-1 agreement",
}
#: Metrics whose best value is 1 (the reference's): their axes end just above 1.
AGREEMENT_METRICS = frozenset({"top1", "cosine", "cosine_min", "neighbour_agreement"})


def write_png(
    path: Path,
    results: Mapping[str, Mapping[str, float]],
    title: str,
    reference: str = "fp",
    charts: Mapping[str, str] = LLM_CHARTS,
) -> Path:
    """A bar chart (Agg backend, no display needed) per metric of ``charts``: by default perplexity, KL vs the
    reference and top-1 agreement."""
    require_matplotlib()
    from matplotlib.figure import Figure

    names = list(results)
    colors = ["0.6" if name == reference else f"C{i % 10}" for i, name in enumerate(names)]
    figure = Figure(figsize=(max(9.0, 3.0 + 1.6 * len(names)), 4.2), layout="constrained")
    axes = figure.subplots(1, len(charts))
    for ax, (metric, label) in zip(axes, charts.items(), strict=True):
        values = [results[name][metric] for name in names]
        bars = ax.bar(range(len(names)), values, color=colors)
        ax.bar_label(bars, fmt="%.4g", fontsize=7)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(label, fontsize=9)
        if metric == "ppl":
            low, high = min(values), max(values)
            ax.set_ylim(low - 0.15 * (high - low + 1e-9) if low > 0 else 0, high + 0.1 * (high - low + 1e-9))
        if metric in AGREEMENT_METRICS:
            ax.set_ylim(min(values) - 0.05 * (1 - min(values) + 1e-3), 1.0 + 0.03 * (1 - min(values) + 1e-3))
    figure.suptitle(title, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    return path
