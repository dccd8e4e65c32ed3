"""Model quality and compression time of NNCF trees with HQQ patched in, beside NNCF's RTN and nncf_hqq, in one run.

    python upstream/build.py /tmp/series                      # the series; --upto 0001 for the core PR alone
    python upstream/pr3981_tree.py NNCF_REPO /tmp/pr3981      # NNCF's open HQQ PR #3981 on the installed nncf
    python benchmarks/upstream_quality.py --trees core=/tmp/series_0001,pr3981=/tmp/pr3981 --out results/up.json

Rows: ``rtn`` (the installed NNCF, ``hqq`` off), ``nncf_hqq`` (the installed NNCF with ``nncf_hqq``, ``hqq=True``),
and one row per tree (``DIR/src/nncf`` first on ``PYTHONPATH``, ``hqq=True``). Every compression runs in a child
process of its own from the same float IR (INT4_ASYM, the model's group size, ratio 1, backup mode NONE, as
shared/PROTOCOL.md fixes); its ``compress_weights`` time is measured inside the child. The compressed models are then
evaluated one at a time against the float model's cached log-probs (``_sequential``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nncf
import openvino as ov

WIKITEXT = "data/wikitext-2-raw/wiki.test.raw"
#: Group size of each model (PROTOCOL.md); nncf_hqq is imported by the parent only, never by a tree's child.
GROUP_SIZES = {"smollm2": 64, "qwen": 128}
WORKER = "--_compress"


def compress_in_child(ir: Path, out: Path, group_size: int, hqq: bool, nncf_hqq: bool, tree: Path | None) -> float:
    """Compresses ``ir`` into ``out`` in a child process (``tree/src`` first on its path); returns the seconds of
    ``compress_weights`` as the child measured them."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if tree is not None:
        env["PYTHONPATH"] = str(tree / "src")
    command = [sys.executable, __file__, WORKER, str(ir), str(out), str(group_size)]
    command += ["--hqq"] * hqq + ["--nncf-hqq"] * nncf_hqq
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"compression failed ({tree or 'installed'}):\n{done.stderr[-3000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def compress_worker(argv: list[str]) -> None:
    """The child: reads the IR, compresses it, saves it, prints the seconds ``compress_weights`` took."""
    ir, out, group_size = Path(argv[0]), Path(argv[1]), int(argv[2])
    if "--nncf-hqq" in argv:
        import nncf_hqq  # noqa: F401  (teaches nncf.compress_weights hqq=)
    model = ov.Core().read_model(ir)
    options = {"hqq": True} if "--hqq" in argv else {}
    start = time.perf_counter()
    model = nncf.compress_weights(
        model,
        mode=nncf.CompressWeightsMode.INT4_ASYM,
        group_size=group_size,
        ratio=1.0,
        backup_mode=nncf.BackupMode.NONE,
        **options,
    )
    seconds = time.perf_counter() - start
    ov.save_model(model, out, compress_to_fp16=False)
    print(seconds)


def main() -> None:
    from _sequential import evaluate_against
    from _sequential import reference_log_probs
    from _sequential import reference_metrics

    from nncf_hqq.llm.layout import ir_xml
    from nncf_hqq.llm.texts import load_tokenizer
    from nncf_hqq.llm.texts import wikitext_windows
    from nncf_hqq.llm.zoo import cache_dir
    from nncf_hqq.llm.zoo import qwen_ov_dir
    from nncf_hqq.llm.zoo import shared_path
    from nncf_hqq.llm.zoo import smollm2_ov_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", default="", help="NAME=DIR,...: trees holding DIR/src/nncf")
    parser.add_argument("--model", choices=sorted(GROUP_SIZES), default="smollm2")
    parser.add_argument("--windows", type=int, default=40)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    ir_dir = {"smollm2": smollm2_ov_dir, "qwen": qwen_ov_dir}[args.model]()
    group_size = GROUP_SIZES[args.model]
    trees = {name: Path(path) for name, path in (item.split("=", 1) for item in args.trees.split(",") if item)}
    rows: list[tuple[str, bool, bool, Path | None]] = [("rtn", False, False, None), ("nncf_hqq", True, True, None)]
    rows += [(name, True, False, tree) for name, tree in trees.items()]

    windows = wikitext_windows(load_tokenizer(ir_dir), shared_path(WIKITEXT), args.windows)
    reference = reference_log_probs(ir_dir, cache_dir() / "fp_logp" / args.model, windows)
    results = {"fp": reference_metrics(windows, reference)}
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="upstream_quality_") as tmp:
        for name, hqq, with_nncf_hqq, tree in rows:
            out = Path(tmp) / f"{name}.xml"
            seconds[name] = compress_in_child(ir_xml(ir_dir), out, group_size, hqq, with_nncf_hqq, tree)
            results[name] = evaluate_against(ov.Core().read_model(out), windows, reference)
            print(f"{name}: {results[name]} ({seconds[name]:.1f} s)", flush=True)
    gap = results["rtn"]["ppl"] - results["fp"]["ppl"]
    print(f"\n{'row':<12}{'PPL':>9}{'gap closed':>12}{'KL':>9}{'top-1':>9}{'compress s':>12}")
    for name, values in results.items():
        closed = "" if name in ("fp", "rtn") else f"{(results['rtn']['ppl'] - values['ppl']) / gap:.0%}"
        print(
            f"{name:<12}{values['ppl']:>9.2f}{closed:>12}{values['kl']:>9.4f}{values['top1']:>9.4f}"
            f"{seconds.get(name, 0.0):>12.1f}"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "model": args.model,
            "group_size": group_size,
            "windows": args.windows,
            "trees": {name: str(tree) for name, tree in trees.items()},
            "results": results,
            "compress_seconds": seconds,
            "nncf": nncf.__version__,
            "openvino": ov.__version__,
            "cpu": platform.processor() or platform.machine(),
            "command": " ".join(sys.argv),
        }
        args.out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == WORKER:
        compress_worker(sys.argv[2:])
    else:
        main()
