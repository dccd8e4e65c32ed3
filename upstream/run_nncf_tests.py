"""Runs NNCF's OpenVINO weight-compression tests against the installed NNCF, the patched one, and the installed one
with ``nncf_hqq`` imported; then compares the outcomes test by test.

    python upstream/run_nncf_tests.py NNCF_REPO [--dest DEST] [--out DIR] [--runs installed,patched,...]

``NNCF_REPO`` is a checkout of NNCF's repository (its ``tests/`` folder, or the folder holding it). The runs, one
after the other (``nice``), each ``pytest -p no:cacheprovider --junitxml=DIR/RUN.xml``, log in ``DIR/RUN.log``:
- ``installed``: NNCF's tests on the installed nncf;
- ``patched``: the same tests with ``DEST`` (``upstream/build.py DEST``) first on ``PYTHONPATH``;
- ``with_nncf_hqq``: the same tests on the installed nncf, with ``import nncf_hqq`` done first (a pytest plugin);
- ``hqq``: the HQQ tests that build.py writes in NNCF's style (``DEST/tests/...``), run inside NNCF's test tree with
  ``DEST`` first on ``PYTHONPATH`` (the file is copied into ``NNCF_REPO/tests`` for the run, then removed).

The tests import ``torchvision`` and ``timm`` at module level for models the weight-compression tests never build;
where they are not installed (PyPI has no CPU torchvision build for this torch), import-only placeholders stand in.
``--compare-only`` reads the JUnit files of earlier runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

WC_TESTS = "tests/openvino/native/quantization"
#: NNCF's weight-compression test files run, and those left out with the reason.
TEST_FILES = ("test_weights_compression.py", "test_weights_compression_backends.py")
LEFT_OUT = {
    "test_weights_compression_statistics_caching.py": "downloads a Hugging Face model and dataset (no network here)",
}
HQQ_TEST = Path("tests/openvino/native/quantization/test_hqq_compression.py")
RUNS = ("installed", "patched", "with_nncf_hqq", "hqq")
PLUGIN = "nncf_hqq_imported_first"
PLACEHOLDERS = {
    "torchvision/__init__.py": "",
    "torchvision/models/__init__.py": "mobilenet_v2 = mobilenet_v3_small = None\n",
    "timm/__init__.py": "",
    "timm/layers/__init__.py": "DropPath = to_2tuple = trunc_normal_ = None\n",
}


def write_shims(folder: Path) -> None:
    """The plugin that imports nncf_hqq, and placeholders for torchvision/timm where they are not installed."""
    (folder / f"{PLUGIN}.py").write_text('"""Imports nncf_hqq before any test."""\n\nimport nncf_hqq  # noqa: F401\n')
    for relative, text in PLACEHOLDERS.items():
        if importlib.util.find_spec(relative.split("/")[0]) is None:
            path = folder / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f'"""Import-only placeholder (upstream/run_nncf_tests.py)."""\n\n{text}')


def run_pytest(run: str, repo: Path, dest: Path | None, shims: Path, out: Path) -> int:
    """One run of pytest in NNCF's repository; returns its exit code."""
    paths = [shims] if run in ("installed", "with_nncf_hqq") else [dest, shims]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths if p is not None)
    files = [str(HQQ_TEST)] if run == "hqq" else [f"{WC_TESTS}/{name}" for name in TEST_FILES]
    plugin = ["-p", PLUGIN] if run == "with_nncf_hqq" else []
    command = ["nice", "-n", "10", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin]
    command += [f"--junitxml={out / f'{run}.xml'}", *files]
    with open(out / f"{run}.log", "w") as log:
        log.write(f"PYTHONPATH={env['PYTHONPATH']} {' '.join(command)}\n")
        log.flush()
        return subprocess.run(command, cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT, check=False).returncode


def run_hqq_tests(repo: Path, dest: Path, shims: Path, out: Path) -> int:
    """The generated HQQ tests, copied into NNCF's test tree for the run."""
    target = repo / HQQ_TEST
    if target.exists():
        msg = f"{target} exists already; remove it (it is copied there for the run only)"
        raise SystemExit(msg)
    shutil.copyfile(dest / HQQ_TEST, target)
    try:
        return run_pytest("hqq", repo, dest, shims, out)
    finally:
        target.unlink()


def outcomes(junit: Path) -> dict[str, str]:
    """Each test's outcome in a JUnit file: passed, failed, error or skipped."""
    found: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        found[test_id] = {"failure": "failed", "error": "error", "skipped": "skipped"}.get(
            kinds[0] if kinds else "", "passed"
        )
    return found


def report(out: Path, runs: list[str]) -> str:
    """Counts of every run, and the tests whose outcome differs from the installed run."""
    results = {run: outcomes(out / f"{run}.xml") for run in runs if (out / f"{run}.xml").exists()}
    lines = []
    for run, found in results.items():
        counts = Counter(found.values())
        summary = ", ".join(f"{counts[k]} {k}" for k in ("passed", "failed", "error", "skipped"))
        lines.append(f"{run}: {len(found)} tests: {summary}")
    baseline = results.get("installed")
    for run in ("patched", "with_nncf_hqq"):
        if baseline is None or run not in results:
            continue
        differing = sorted(t for t in baseline.keys() | results[run].keys() if baseline.get(t) != results[run].get(t))
        lines.append(f"installed vs {run}: {len(differing)} tests differ")
        lines.extend(f"  {t}: {baseline.get(t, 'absent')} -> {results[run].get(t, 'absent')}" for t in differing)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nncf_repo", type=Path, help="NNCF's repository checkout (or its tests/ folder)")
    parser.add_argument("--dest", type=Path, help="the output of upstream/build.py (patched and hqq runs)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "nncf_hqq_nncf_tests")
    parser.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, of {', '.join(RUNS)}")
    parser.add_argument("--compare-only", action="store_true", help="only compare the JUnit files in --out")
    args = parser.parse_args(argv)
    repo = args.nncf_repo.resolve()
    repo = repo.parent if repo.name == "tests" else repo
    runs = [r for r in args.runs.split(",") if r]
    unknown = sorted(set(runs) - set(RUNS))
    if unknown or (args.dest is None and {"patched", "hqq"} & set(runs) and not args.compare_only):
        parser.error(f"unknown runs {unknown}" if unknown else "the patched and hqq runs need --dest")
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.compare_only:
        dest = args.dest.resolve() if args.dest else None
        with tempfile.TemporaryDirectory(prefix="nncf_test_shims_") as tmp:
            write_shims(Path(tmp))
            for run in runs:
                if run == "hqq" and dest is not None:
                    run_hqq_tests(repo, dest, Path(tmp), args.out)
                else:
                    run_pytest(run, repo, dest, Path(tmp), args.out)
    for name, reason in LEFT_OUT.items():
        sys.stdout.write(f"left out: {WC_TESTS}/{name}: {reason}\n")
    sys.stdout.write(report(args.out, runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
