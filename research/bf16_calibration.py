"""Would the self-calibrated default lose accuracy if its float model ran in bf16 instead of f32?

The self-calibrated default compiles the float model in f32 twice: to generate its calibration text
(``nncf_hqq.self_calibration.GENERATION_CONFIG``) and inside NNCF to collect AWQ's and Scale Estimation's statistics
(``OVNativeEngine(use_fp32_precision=True)``, no option). In f32 the CPU plugin holds twice a bf16 checkpoint, the
floor of the command's peak memory (docs/memory.md). This compresses SmolLM2-135M saved as a bf16 checkpoint with the
default recipe both ways, for each of several self-calibration seeds (a different text each), without the output
check (it compiles the float model once more, and picks between candidates), and evaluates every result against the
float model (the fp32 export) as shared/PROTOCOL.md says. The bf16 runs set both compilations to bf16 in their own
process only; nothing in the package changes.

    python research/bf16_calibration.py --windows 40 --seeds 0,1,2 --json results/bf16_calibration.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bf16_export

GIB = 1024**3

#: Run in a child: the compress job (``nncf_hqq.llm.compress`` of ``argv[3]`` into ``argv[4]``, group size 64, no
#: output check) with the self-calibration seed replaced by ``argv[1]`` and, when ``argv[2]`` is ``bf16``, the float
#: model compiled in bf16 (generation and NNCF's statistics).
CHILD = """
import dataclasses, sys
import nncf.openvino.engine as engine
from nncf_hqq import self_calibration
from nncf_hqq.llm import compress
seed, precision = int(sys.argv[1]), sys.argv[2]
generate = self_calibration.generate_sequences
def seeded(model, params=self_calibration.SELF_CALIBRATION_DEFAULT):
    return generate(model, dataclasses.replace(params, seed=seed))
self_calibration.generate_sequences = seeded
if precision == "bf16":
    engine.OVNativeEngine.__init__.__defaults__ = (False,)
    self_calibration.GENERATION_CONFIG.update({"INFERENCE_PRECISION_HINT": "bf16", "KV_CACHE_PRECISION": "bf16"})
compress(sys.argv[3], sys.argv[4], group_size=64, output_check=False, memory_check=False)
"""


def compress_in_a_child(seed: int, precision: str, source: Path, out: Path) -> dict[str, float]:
    """Runs the compress job (``CHILD``) in a fresh process; its wall time and peak RSS (``ru_maxrss``)."""
    import time

    start = time.perf_counter()
    args = [sys.executable, "-c", CHILD, str(seed), precision, str(source), str(out)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"compress failed for {out}")
    return {"wall_s": round(time.perf_counter() - start, 1), "maxrss_gib": round(usage.ru_maxrss * 1024 / GIB, 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=Path.home() / ".cache" / "nncf_hqq" / "bf16_export")
    p.add_argument("--windows", type=int, default=40)
    p.add_argument("--json", type=Path, default=Path("results/bf16_calibration.json"))
    p.add_argument("--seeds", default="0", help="comma-separated self-calibration seeds, each run in both precisions")
    args = p.parse_args()
    from nncf_hqq.llm import evaluate
    from nncf_hqq.llm.export import export_to_openvino

    checkpoint = bf16_export.bf16_checkpoint(args.work)
    fp32_ir = args.work / "fp32-ir"
    if not fp32_ir.is_dir():
        export_to_openvino(checkpoint, fp32_ir, dtype="fp32")
    outs, memory = {}, {}
    for seed in (int(text) for text in args.seeds.split(",")):
        for precision in ("f32", "bf16"):
            name = f"{precision}, seed {seed}"
            out = args.work / f"calibration-{precision}-{seed}"
            memory[name] = compress_in_a_child(seed, precision, checkpoint, out)
            outs[name] = out
    report = args.work / "calibration-evaluate.json"
    results = evaluate(outs, fp32_ir, windows=args.windows, json=report).results
    print(f"{'row':20} {'ppl':>8} {'kl':>8} {'top1':>7} {'wall s':>7} {'maxrss GiB':>10}")
    for name, m in results.items():
        run = memory.get(name, {"wall_s": "", "maxrss_gib": ""})
        print(f"{name:20} {m['ppl']:8.3f} {m['kl']:8.4f} {m['top1']:7.4f} {run['wall_s']:7} {run['maxrss_gib']:10}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    payload = {"windows": args.windows, "results": results, "compress": memory}
    args.json.write_text(json.dumps(payload, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
