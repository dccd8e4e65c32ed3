"""Does a built series tree compress SmolLM2-shaped random weights to the same bytes as another built tree?

For refactorings of the pull-request series (upstream/) that must not change what it writes, e.g. 0003-0005 calling
NNCF's ``weight_lowering`` helpers instead of their own. Each tree is imported in a process of its own (only its
``nncf`` on the path), on NNCF's numpy reference (``NNCF_DISABLE_OPTIMIZED_COMPRESSION`` set) or on its compiled
quantization (unset). ``HQQ.compress`` runs on the seven SmolLM2-135M projections (random t4 weights x 0.02) for
INT4_ASYM g64 and g32, INT8_ASYM per channel, ``unit_gain=False`` and (a 0005 tree) integer zero points and
INT4/INT3 g64 and INT8 per-channel SYM, with and without input importance, with and without ``keep_rtn``; a tree
from 0004 on also refines q and down on random activations and runs the output guard. The results are held until
all are computed, as ``HQQ.apply`` holds them until the model is written.

    python upstream/build.py /tmp/old --upto 0005        # at the revision before
    python upstream/build.py /tmp/new --upto 0005        # at this one
    python research/series_same_bytes.py /tmp/old /tmp/new --level 0005
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SHAPES = {
    "q": (576, 576),
    "k": (192, 576),
    "v": (192, 576),
    "o": (576, 576),
    "gate": (1536, 576),
    "up": (1536, 576),
    "down": (576, 1536),
}


def dump(out: str, level: str) -> None:
    """Every compressed tensor of the cases, by name, into an npz file (runs inside the tree's process)."""
    from nncf import CompressWeightsMode as M
    from nncf.quantization.algorithms.weight_compression.config import WeightCompressionConfig
    from nncf.quantization.algorithms.weight_compression.hqq import HQQ
    from nncf.tensor import Tensor

    rng = np.random.default_rng(0)
    weights = {n: (rng.standard_t(4, s) * 0.02).astype(np.float32) for n, s in SHAPES.items()}
    importance = {n: rng.gamma(2.0, 1.0, s[1]).astype(np.float32) for n, s in SHAPES.items()}
    cases = [("int4g64", M.INT4_ASYM, 64, {}), ("int4g32", M.INT4_ASYM, 32, {}), ("int8pc", M.INT8_ASYM, -1, {})]
    cases.append(("int4g64_nogain", M.INT4_ASYM, 64, {"unit_gain": False}))
    if level >= "0005":
        cases += [("int4g64_intzp", M.INT4_ASYM, 64, {"integer_zero_point": True}), ("int4sym", M.INT4_SYM, 64, {})]
        cases += [("int3sym", M.INT3_SYM, 64, {}), ("int8sym", M.INT8_SYM, -1, {})]
    found: dict[str, object] = {}

    def keep(key: str, compressed: object) -> None:
        for part in ("tensor", "scale", "zero_point"):
            value = getattr(compressed, part)
            if value is not None:
                found[f"{key}/{part}"] = value.data  # held until the end, as HQQ.apply holds its results

    for case, mode, group_size, options in cases:
        algorithm, config = HQQ(mode, **options), WeightCompressionConfig(mode, group_size=group_size)
        for name, weight in weights.items():
            for weighted in (False, True):
                for keep_rtn in (False, True):
                    energy = Tensor(importance[name]) if weighted else None
                    result = algorithm.compress(Tensor(weight), 1, config, energy, keep_rtn)
                    key = f"{case}/{name}/{'weighted' if weighted else 'plain'}/{'rtn' if keep_rtn else 'hqq'}"
                    keep(key, result)
                    if level >= "0004" and not keep_rtn and not weighted and name in ("q", "down"):
                        activations = Tensor(rng.normal(size=(weight.shape[1], 48)).astype(np.float32))
                        refined = algorithm.refine_on_activations(Tensor(weight), 1, config, activations, result)
                        keep(f"{key}/refined", refined)
                        guarded = algorithm._guard_on_outputs(Tensor(weight), 1, config, activations, refined, None)
                        keep(f"{key}/guarded", guarded)
    np.savez(out, **{key: np.array(value) for key, value in found.items()})


def run_tree(tree: Path, level: str, optimized: bool, out: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NNCF_DISABLE_OPTIMIZED_COMPRESSION")}
    env["PYTHONPATH"] = str(tree / "src")
    if not optimized:
        env["NNCF_DISABLE_OPTIMIZED_COMPRESSION"] = "1"
    command = [sys.executable, __file__, "--dump", str(out), "--level", level]
    subprocess.run(command, env=env, cwd=tempfile.gettempdir(), check=True)


def differing(first: Path, second: Path) -> tuple[int, list[str]]:
    a, b = np.load(first), np.load(second)
    if set(a.files) != set(b.files):
        return len(a.files), sorted(set(a.files) ^ set(b.files))

    def same(x: np.ndarray, y: np.ndarray) -> bool:
        return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()

    return len(a.files), [k for k in a.files if not same(a[k], b[k])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="*", type=Path, help="the two built trees (DEST of upstream/build.py)")
    parser.add_argument("--level", default="0005", help="the last patch the trees hold (0003, 0004 or 0005)")
    parser.add_argument("--dump", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dump:
        dump(args.dump, args.level)
        return
    old, new = args.trees
    with tempfile.TemporaryDirectory() as scratch:
        reference = Path(scratch, "old.npz")
        run_tree(old, args.level, False, reference)
        for optimized in (False, True):
            candidate = Path(scratch, f"new-{optimized}.npz")
            run_tree(new, args.level, optimized, candidate)
            count, bad = differing(reference, candidate)
            path = "NNCF's compiled quantization" if optimized else "numpy reference"
            print(f"{args.level} ({path}): {count} arrays, {len(bad)} differ bitwise {bad[:5]}")


if __name__ == "__main__":
    main()
