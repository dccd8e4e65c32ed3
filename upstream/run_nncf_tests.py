"""Runs NNCF's OpenVINO and Torch weight-compression tests on the installed NNCF, on the tree after the core pull
request (0001), on the tree after the whole series, and on the installed NNCF with ``nncf_hqq`` imported; compares
the outcomes test by test; and runs the series' own tests inside NNCF's test tree.

    python upstream/build.py /tmp/core --upto 0001
    python upstream/build.py /tmp/series
    python upstream/run_nncf_tests.py NNCF_REPO --core /tmp/core --series /tmp/series --out /tmp/nncf_runs

``NNCF_REPO`` holds NNCF's ``tests/`` (a checkout, or the files of ``fetch openvinotoolkit/nncf``). Every run is
``pytest -p no:cacheprovider --junitxml=OUT/RUN-SUITE.xml`` (``nice``), one suite at a time (NNCF's OpenVINO and Torch
conftests cannot share a session), logged in ``OUT/RUN-SUITE.log``:
- ``installed``: NNCF's tests on the installed nncf;
- ``core`` / ``series``: the same tests with the build's ``src`` first on ``PYTHONPATH``;
- ``with_nncf_hqq``: the installed nncf, with ``import nncf_hqq`` done first (a pytest plugin);
- ``own``: the tests the series adds (``DEST/tests``), copied into NNCF's test tree for the run, on the series.
The tests import ``torchvision`` and ``timm`` at module level for models the weight-compression tests never build;
where they are not installed (PyPI has no CPU torchvision build for this torch), import-only placeholders stand in.
``--compare-only`` reads the JUnit files of earlier runs.

With ``--tests-from-builds`` (builds made with ``upstream/build.py --nncf-tests NNCF_REPO``), the core and series runs
take the tests from their build (NNCF's files with the patches' edits: HQQ's template cases, the unsupported lists),
so the new tests run and the shared ones are compared with the installed run on NNCF's unedited files. The suites
``fx`` and ``onnx`` (not run by default) need ``torchao`` and ``onnx``/``onnxruntime``; for ``fx`` a plugin undoes
the cuDNN conv TF32 flag NNCF's Torch conftest sets, which torch 2.13's ``torch.export`` refuses beside the RNN flag.
``--extra-path`` puts a folder of test-only packages (``pip install --target``) on the path.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

#: NNCF's weight-compression test files of each suite.
SUITES = {
    "openvino": [
        "tests/openvino/native/quantization/test_weights_compression.py",
        "tests/openvino/native/quantization/test_weights_compression_backends.py",
    ],
    "torch": [
        "tests/torch/function_hook/quantization/test_weights_compression.py",
        "tests/torch/function_hook/quantization/test_weights_compression_backends.py",
    ],
    "fx": ["tests/torch/fx/test_weights_compression.py"],
    "onnx": ["tests/onnx/quantization/test_weights_compression.py"],
}
DEFAULT_SUITES = ("openvino", "torch")
LEFT_OUT = {
    "tests/openvino/native/quantization/test_weights_compression_statistics_caching.py": (
        "downloads a Hugging Face model and dataset (no network here)"
    ),
}
RUNS = ("installed", "core", "series", "with_nncf_hqq", "own")
COMPARED = ("core", "series", "with_nncf_hqq")
PLUGIN = "nncf_hqq_imported_first"
TF32_PLUGIN = "same_tf32_flags"
TF32_PLUGIN_TEXT = """\"\"\"Undoes the cuDNN conv TF32 flag of NNCF's Torch conftest (torch.export refuses it).\"\"\"

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def same_tf32_flags(disable_tf32_precision):
    torch.backends.cudnn.conv.fp32_precision = "tf32"
"""
PLACEHOLDERS = {
    "torchvision/__init__.py": "",
    "torchvision/models/__init__.py": "mobilenet_v2 = mobilenet_v3_small = None\n",
    "torchvision/transforms/__init__.py": "",
    "torchvision/transforms/functional.py": "normalize = None\n",
    "timm/__init__.py": "",
    "timm/layers/__init__.py": "DropPath = to_2tuple = trunc_normal_ = None\n",
}


def write_shims(folder: Path) -> None:
    """The plugin that imports nncf_hqq, and placeholders for torchvision/timm where they are not installed."""
    (folder / f"{PLUGIN}.py").write_text('"""Imports nncf_hqq before any test."""\n\nimport nncf_hqq  # noqa: F401\n')
    (folder / f"{TF32_PLUGIN}.py").write_text(TF32_PLUGIN_TEXT)
    for relative, text in PLACEHOLDERS.items():
        if importlib.util.find_spec(relative.split("/")[0]) is None:
            path = folder / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f'"""Import-only placeholder (upstream/run_nncf_tests.py)."""\n\n{text}')


def run_pytest(
    name: str, files: list[str], repo: Path, source: Path | None, shims: Path, out: Path, extra: Path | None = None
) -> int:
    """One pytest session in NNCF's repository (``source``, a build's ``src``, first on the path); its exit code."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (source, extra, shims, repo) if p is not None)
    plugin = ["-p", PLUGIN] if name.startswith("with_nncf_hqq") else []
    plugin += ["-p", TF32_PLUGIN] if name.endswith("-fx") else []
    command = ["nice", "-n", "10", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin]
    command += [f"--junitxml={out / f'{name}.xml'}", *files]
    with open(out / f"{name}.log", "w") as log:
        log.write(f"PYTHONPATH={env['PYTHONPATH']} {' '.join(command)}\n")
        log.flush()
        return subprocess.run(command, cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT, check=False).returncode


def run_own_tests(repo: Path, series: Path, shims: Path, out: Path, extra: Path | None = None) -> None:
    """The test files the series adds, copied into NNCF's test tree for the run (one session per top-level suite)."""
    entries = json.loads((series / "patches" / "series.json").read_text())["patches"]
    added = {name for entry in entries for name in entry["added_files"] if name.startswith("tests/")}
    own = sorted(name for name in added if Path(name).name.startswith("test_"))
    present = [name for name in own if (repo / name).exists()]
    if present:
        msg = f"{present} exist in {repo} already; remove them (they are copied there for the run only)"
        raise SystemExit(msg)
    for name in own:
        shutil.copyfile(series / name, repo / name)
    try:
        for suite in sorted({name.split("/")[1] for name in own}):
            files = [name for name in own if name.split("/")[1] == suite]
            run_pytest(f"own-{suite}", files, repo, series / "src", shims, out, extra)
    finally:
        for name in own:
            (repo / name).unlink()


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


def report(out: Path) -> str:
    """Counts of every run and suite, and the tests whose outcome differs from the installed run's."""
    results = {junit.stem: outcomes(junit) for junit in sorted(out.glob("*.xml"))}
    lines = []
    for name, found in results.items():
        counts = Counter(found.values())
        summary = ", ".join(f"{counts[k]} {k}" for k in ("passed", "failed", "error", "skipped"))
        lines.append(f"{name}: {len(found)} tests: {summary}")
    for suite in SUITES:
        baseline = results.get(f"installed-{suite}")
        for run in COMPARED:
            compared = results.get(f"{run}-{suite}")
            if baseline is None or compared is None:
                continue
            shared = baseline.keys() & compared.keys()
            differing = sorted(t for t in shared if baseline[t] != compared[t])
            new = Counter(compared[t] for t in compared.keys() - baseline.keys())  # the patches' new tests
            gone = sorted(baseline.keys() - compared.keys())
            lines.append(
                f"{suite}: installed vs {run}: {len(shared)} shared tests, {len(differing)} differ; "
                f"new tests: {dict(sorted(new.items()))}; tests gone: {len(gone)}"
            )
            lines.extend(f"  {t}: {baseline[t]} -> {compared[t]}" for t in differing)
            lines.extend(f"  gone: {t}" for t in gone)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nncf_repo", type=Path, help="NNCF's repository checkout (or its tests/ folder)")
    parser.add_argument("--core", type=Path, help="upstream/build.py DEST --upto 0001 (the core run)")
    parser.add_argument("--series", type=Path, help="upstream/build.py DEST (the series and own runs)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "nncf_hqq_nncf_tests")
    parser.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, of {', '.join(RUNS)}")
    parser.add_argument("--suites", default=",".join(DEFAULT_SUITES), help=f"comma-separated, of {', '.join(SUITES)}")
    parser.add_argument(
        "--tests-from-builds", action="store_true", help="core and series runs take the tests from their build"
    )
    parser.add_argument("--extra-path", type=Path, help="a folder of test-only packages to put on the path")
    parser.add_argument("--compare-only", action="store_true", help="only compare the JUnit files in --out")
    args = parser.parse_args(argv)
    repo = args.nncf_repo.resolve()
    repo = repo.parent if repo.name == "tests" else repo
    runs = [r for r in args.runs.split(",") if r]
    suites = [s for s in args.suites.split(",") if s]
    unknown = sorted(set(runs) - set(RUNS)) + sorted(set(suites) - set(SUITES))
    builds = {"core": args.core, "series": args.series, "own": args.series}
    missing = sorted(run for run in runs if run in builds and builds[run] is None)
    if unknown or (missing and not args.compare_only):
        parser.error(f"unknown runs or suites {unknown}" if unknown else f"the runs {missing} need --core/--series")
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.compare_only:
        with tempfile.TemporaryDirectory(prefix="nncf_test_shims_") as tmp:
            write_shims(Path(tmp))
            for run in runs:
                if run == "own":
                    run_own_tests(repo, args.series.resolve(), Path(tmp), args.out, args.extra_path)
                    continue
                source = builds[run].resolve() / "src" if run in builds else None
                tests = builds[run].resolve() if args.tests_from_builds and run in builds else repo
                for suite in suites:
                    run_pytest(f"{run}-{suite}", SUITES[suite], tests, source, Path(tmp), args.out, args.extra_path)
    for name, reason in LEFT_OUT.items():
        sys.stdout.write(f"left out: {name}: {reason}\n")
    sys.stdout.write(report(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
