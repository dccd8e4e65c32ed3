"""The whole data-free quality table of docs/results.md in one command: NNCF's RTN, the published HQQ solver and
``hqq=True`` on SmolLM2-135M (g64), the Qwen2.5-1.5B-shaped model (g64 and g128) and all-MiniLM-L6-v2 (g64),
with the share of RTN's gap to FP each closes.

    python benchmarks/quality_table.py                     # the protocol's windows (~1 h on 2 cores)
    python benchmarks/quality_table.py --quick             # 2 windows / 20 lines: checks the plumbing only

Every (model, group size) runs ``benchmarks/quality.py`` in its own process (``--sequential`` for the LLMs) and
writes its JSON under ``--results``; a JSON already there is reused unless ``--rerun``. Prints the table and writes
``--results/quality_table.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROWS = ("rtn", "hqq_reference", "default")
#: (model, group size, protocol windows: LLM windows, or MiniLM lines / 10)
RUNS = (("smollm2", 64, 40), ("qwen", 64, 20), ("qwen", 128, 20), ("minilm", 64, 20))


def run_quality(model: str, group_size: int, windows: int, out: Path) -> None:
    command = [sys.executable, str(Path(__file__).with_name("quality.py")), "--model", model]
    command += ["--group-size", str(group_size), "--windows", str(windows), "--rows", ",".join(ROWS)]
    command += ["--out", str(out)] + (["--sequential"] if model != "minilm" else [])
    subprocess.run(command, check=True)


def gap_closed(metric: str, fp: float, rtn: float, value: float) -> float:
    """Share of RTN's gap to FP closed (negative: worse than RTN); cosine gaps are measured from 1."""
    return (rtn - value) / (rtn - fp) if metric == "ppl" else (value - rtn) / (fp - rtn)


def table_rows(model: str, group_size: int, results: dict[str, Any]) -> list[dict[str, Any]]:
    metric = "cosine" if model == "minilm" else "ppl"
    fp = 1.0 if metric == "cosine" else results["fp"]["ppl"]
    rtn = results["rtn"][metric]
    rows = []
    for row in ROWS:
        entry = {"model": model, "group_size": group_size, "row": row, metric: results[row][metric]}
        entry["gap_closed"] = gap_closed(metric, fp, rtn, results[row][metric])
        entry.update({k: results[row][k] for k in ("kl", "top1") if k in results[row]})
        rows.append(entry)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results/quality_table"))
    parser.add_argument("--quick", action="store_true", help="2 windows / 20 lines per model")
    parser.add_argument("--rerun", action="store_true", help="recompute JSONs that already exist")
    args = parser.parse_args()
    args.results.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for model, group_size, windows in RUNS:
        windows = 2 if args.quick else windows
        out = args.results / f"{model}_g{group_size}_w{windows}.json"
        if args.rerun or not out.exists():
            run_quality(model, group_size, windows, out)
        rows += table_rows(model, group_size, json.loads(out.read_text())["results"])
    print(f"\n{'model':<10}{'group':>6}  {'row':<16}{'ppl/cos':>10}{'kl':>9}{'top1':>8}{'gap closed':>12}")
    for r in rows:
        value = r.get("ppl", r.get("cosine"))
        kl, top1 = (f"{r[k]:>9.4f}" if k in r else f"{'-':>9}" for k in ("kl", "top1"))
        head = f"{r['model']:<10}{r['group_size']:>6}  {r['row']:<16}{value:>10.4f}"
        print(f"{head}{kl}{top1[1:]}{r['gap_closed']:>12.0%}")
    (args.results / "quality_table.json").write_text(json.dumps(rows, indent=2))
    print(f"-> {args.results / 'quality_table.json'}")


if __name__ == "__main__":
    main()
