"""Does this checkout's zero-point solver give the same bits as another git revision's on real models' weights?

``solve_zero_point`` (``nncf_hqq/maths/zero_point_solver.py``, 0001's ``hqq_solver.py``) of the revision
``--against`` (read with ``git show``) and of this checkout run on every 2-D float weight of the models' IRs, grouped
along the last axis in groups of 64 and 128 (INT4, 20 iterations). Prints per model how many cases differ and both
solvers' total seconds (one run each, side by side; a rough comparison, not a benchmark).

    python research/zero_point_same_bits.py --against main --models SmolLM2-135M-Instruct,all-MiniLM-L6-v2
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import openvino as ov
from nncf.tensor import Tensor

ROOT = Path(__file__).resolve().parents[1]
SOLVER = "nncf_hqq/maths/zero_point_solver.py"
MODELS = "SmolLM2-135M-Instruct,all-MiniLM-L6-v2,all-mpnet-base-v2,Qwen2.5-Coder-1.5B-Instruct"
IR_DIR = Path.home() / ".cache" / "nncf_hqq" / "ov"


def module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def weights(xml: Path) -> list[np.ndarray]:
    constants = (op.get_data() for op in ov.Core().read_model(xml).get_ops() if op.get_type_name() == "Constant")
    return [w for w in constants if w.ndim == 2 and w.size >= 4096 and w.dtype.kind == "f"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", default="main", help="the git revision to compare with")
    parser.add_argument("--models", default=MODELS, help=f"IR dirs under {IR_DIR}")
    args = parser.parse_args()
    source = subprocess.run(["git", "show", f"{args.against}:{SOLVER}"], cwd=ROOT, check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "against.py").write_bytes(source.stdout)
        solvers = {"against": module(Path(tmp) / "against.py", "against"), "this": module(ROOT / SOLVER, "this")}
    seconds = dict.fromkeys(solvers, 0.0)
    for model in args.models.split(","):
        cases = differ = 0
        for w in weights(next((IR_DIR / model).glob("*.xml"))):
            for group_size in (64, 128):
                if w.shape[1] % group_size:
                    continue
                grouped = Tensor(np.ascontiguousarray(w, dtype=np.float32).reshape(w.shape[0], -1, group_size))
                zeros = {}
                for name, solver in solvers.items():
                    start = time.perf_counter()
                    zeros[name] = solver.solve_zero_point(grouped, 2, 4, 20)[1].data
                    seconds[name] += time.perf_counter() - start
                cases += 1
                differ += not np.array_equal(zeros["against"], zeros["this"])
        shown = ", ".join(f"{name} {value:.1f} s" for name, value in seconds.items())
        print(f"{model}: {cases} weight x group-size cases, {differ} differ (total so far: {shown})", flush=True)


if __name__ == "__main__":
    main()
