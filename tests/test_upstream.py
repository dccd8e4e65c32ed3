"""upstream/build.py: the pull-request series applies in order to NNCF 3.4.0, follows NNCF's rules, holds nothing of
nncf_hqq, and the patched NNCF writes what nncf_hqq writes (NNCF without hqq unchanged)."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import nncf
import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
UPSTREAM = REPO / "upstream"
BUILT_FOR = "3.4.0"
#: The core pull request is reviewable in one sitting: at most this many added lines, its tests included.
MAX_CORE_LINES = 800
#: A checkout (or export) of NNCF's repository: its tests/ let the build apply the patches' edits of NNCF's test files.
NNCF_REPO = os.environ.get("NNCF_REPO")
sys.path.insert(0, str(UPSTREAM))  # upstream/ is a folder of scripts that import each other


def load_upstream_module(name: str) -> ModuleType:
    """A module of upstream/ (a folder of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"upstream_{name}", UPSTREAM / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


equivalence = load_upstream_module("equivalence")
series = load_upstream_module("series")
edit = load_upstream_module("edit")


def clean_environment(pythonpath: list[Path]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    return env


@pytest.mark.parametrize("started_by", ["tests", "equivalence"])
def test_processes_started_for_the_equivalence_send_no_telemetry(started_by: str) -> None:
    """A telemetry event forks from a thread; OpenBLAS's fork handler then stops the threads a matmul in flight on the
    main thread waits for, and it spins forever (one equivalence run in five hung). Both switches turn it off."""
    env = clean_environment([])
    if started_by == "equivalence":
        env = {k: v for k, v in env.items() if k != "NNCF_CI"} | equivalence.NO_TELEMETRY_ENVIRONMENT
    code = "from nncf.telemetry import wrapper; print(isinstance(wrapper.telemetry, wrapper.NNCFTelemetry))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr[-2000:]  # NNCF's stub instead


def run_build(dest: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(UPSTREAM / "build.py"), str(dest), *arguments]
    return subprocess.run(command, env=clean_environment([]), capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The series built on the installed nncf: "series" (every patch) and "core" (0001 alone)."""
    if nncf.__version__ != BUILT_FOR:
        pytest.skip(f"upstream/build.py edits nncf {BUILT_FOR}; nncf {nncf.__version__} is installed")
    found = {}
    for build, arguments in (("series", ()), ("core", ("--upto", "0001"))):
        dest = tmp_path_factory.mktemp(build)
        done = run_build(dest, *arguments)
        assert done.returncode == 0, done.stderr
        found[build] = dest
    return found


def summary(dest: Path) -> dict[str, Any]:
    return json.loads((dest / "patches" / "series.json").read_text())


def test_series_has_every_patch_with_its_description(builds: dict[str, Path]) -> None:
    patches = [entry["patch"] for entry in summary(builds["series"])["patches"]]
    assert patches == [patch.stem for patch in series.SERIES]
    for stem in patches:
        assert (builds["series"] / "patches" / f"{stem}.md").read_text().startswith("# ")
    assert [entry["patch"] for entry in summary(builds["core"])["patches"]] == patches[:1]
    usage = (builds["core"] / "patches" / f"{patches[0]}-Usage.md").read_text()
    assert "hqq=True" in usage and "AdvancedHQQParameters" in usage


def test_core_patch_brings_its_words_for_nncf_spell_check(builds: dict[str, Path]) -> None:
    patches = builds["core"] / "patches"
    words = (patches / "0001-cspell-words.txt").read_text().split()
    assert words == sorted(words) and words == [word.lower() for word in words]
    added = "\n".join(
        line for line in (patches / f"{series.SERIES[0].stem}.patch").read_text().splitlines() if line[:1] == "+"
    )
    assert all(word in added.lower() for word in words)
    assert {"badri", "shaji", "hqq"} <= set(words)


def test_core_patch_is_reviewable_in_one_sitting(builds: dict[str, Path]) -> None:
    """At most 800 added lines, its edits of NNCF's test files included (skipped without NNCF's tests: counted)."""
    core = summary(builds["series"])["patches"][0]
    skipped = core["skipped_test_edits"]
    assert core["added_lines"] + skipped["added_lines"] <= MAX_CORE_LINES
    assert any(name.startswith("tests/") for name in core["added_files"])
    assert "tests/cross_fw/test_templates/template_test_weights_compression.py" in skipped["files"]


def test_build_without_nncf_tests_says_which_edits_it_skips(tmp_path: Path) -> None:
    done = run_build(tmp_path / "core", "--upto", "0001")
    assert done.returncode == 0, done.stderr
    assert "its edits of NNCF's test files (tests/cross_fw/test_templates/" in done.stderr
    assert "pass --nncf-tests NNCF_REPO to apply them" in done.stderr


@pytest.mark.skipif(NNCF_REPO is None, reason="NNCF_REPO (a checkout of NNCF's repository) is not set")
def test_edits_of_nncf_tests_anchor_in_nncf_repository(tmp_path: Path) -> None:
    """With NNCF's tests laid in (``--nncf-tests``), every patch's edits of NNCF's test files find their anchors, the
    core stays within 800 added lines counted exactly, the files pass NNCF's ruff rules, and the patches apply with
    ``patch -p1`` to nncf 3.4.0's ``src/nncf`` beside NNCF's ``tests/``."""
    if nncf.__version__ != BUILT_FOR or shutil.which("patch") is None:
        pytest.skip(f"needs nncf {BUILT_FOR} (installed: {nncf.__version__}) and the patch tool")
    dest = tmp_path / "series"
    done = run_build(dest, "--nncf-tests", str(NNCF_REPO))
    assert done.returncode == 0, done.stderr
    entries = summary(dest)["patches"]
    assert all(entry["skipped_test_edits"]["files"] == [] for entry in entries)
    assert entries[0]["added_lines"] <= MAX_CORE_LINES
    changed = sorted({name for entry in entries for name in entry["changed_files"] if name.startswith("tests/")})
    assert "tests/cross_fw/test_templates/template_test_weights_compression.py" in changed
    for arguments in (["check", "--no-fix"], ["format", "--check"]):
        command = [sys.executable, "-m", "ruff", *arguments, *changed]
        ruffed = subprocess.run(command, cwd=dest, capture_output=True, text=True, timeout=120)
        assert ruffed.returncode == 0, ruffed.stdout + ruffed.stderr
    tree = tmp_path / "tree"
    shutil.copytree(Path(nncf.__file__).parent, tree / "src" / "nncf", ignore=shutil.ignore_patterns("__pycache__"))
    repo = Path(NNCF_REPO)
    shutil.copytree(repo if repo.name == "tests" else repo / "tests", tree / "tests")
    for entry in entries:
        command = ["patch", "-p1", "-s", "-i", str(dest / "patches" / f"{entry['patch']}.patch")]
        patched = subprocess.run(command, cwd=tree, capture_output=True, text=True, timeout=60)
        assert patched.returncode == 0, patched.stdout + patched.stderr
    for name in changed:
        assert (tree / name).read_text() == (dest / name).read_text(), name


def test_patches_apply_in_order_to_the_release(builds: dict[str, Path], tmp_path: Path) -> None:
    """``patch -p1`` of every patch in order, onto a tree whose src/nncf is the installed nncf, gives the build."""
    patch_tool = shutil.which("patch")
    if patch_tool is None:
        pytest.skip("the patch tool is not installed (apt-get install patch)")
    shutil.copytree(Path(nncf.__file__).parent, tmp_path / "src" / "nncf", ignore=shutil.ignore_patterns("__pycache__"))
    for entry in summary(builds["series"])["patches"]:
        command = [patch_tool, "-p1", "-s", "-i", str(builds["series"] / "patches" / f"{entry['patch']}.patch")]
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    for folder in ("src", "tests"):
        for path in (builds["series"] / folder).rglob("*.py"):
            relative = path.relative_to(builds["series"])
            assert (tmp_path / relative).read_text() == path.read_text(), relative


def assert_passes_nncf_ruff_rules(dest: Path) -> None:
    """Every file the patches built in ``dest`` add or change passes ``ruff check`` and ``ruff format --check`` under
    NNCF's rules (upstream/nncf_ruff.toml, ruff 0.14.14), licence headers included."""
    files = sorted(
        {name for entry in summary(dest)["patches"] for key in ("added_files", "changed_files") for name in entry[key]}
    )
    for arguments in (["check", "--no-fix"], ["format", "--check"]):
        command = [sys.executable, "-m", "ruff", *arguments, *files]
        done = subprocess.run(command, cwd=dest, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr


def test_series_passes_nncf_ruff_rules(builds: dict[str, Path]) -> None:
    assert_passes_nncf_ruff_rules(builds["series"])


@pytest.mark.parametrize("upto", ["0001", "0002", "0003", "0004"])
def test_every_patch_passes_nncf_ruff_rules_at_its_own_commit(upto: str, tmp_path: Path) -> None:
    """A pull request is checked on its own: the tree up to it passes NNCF's rules, not only the whole series
    (0005's tree is the series')."""
    done = run_build(tmp_path, "--upto", upto)
    assert done.returncode == 0, done.stderr
    assert_passes_nncf_ruff_rules(tmp_path)


def test_patches_hold_nothing_of_nncf_hqq(builds: dict[str, Path]) -> None:
    for path in sorted((builds["series"] / "patches").glob("*.patch")):
        added = [line for line in path.read_text().splitlines() if line.startswith("+")]
        found = [line for line in added if load_upstream_module("build").FORBIDDEN.search(line)]
        assert found == [], path.name


def nncf_module_patches(source: str) -> list[str]:
    """Statements of ``source`` that replace something of NNCF at runtime: an assignment to (or deletion of) an
    attribute of a name imported from NNCF (a module, class or function), or ``setattr``/``delattr`` on such a name
    or on a module looked up at runtime (``importlib.import_module(...)``, ``sys.modules[...]``)."""
    tree = ast.parse(source)
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {(a.asname or a.name.split(".")[0]) for a in node.names if a.name.split(".")[0] == "nncf"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "nncf":
            imported |= {a.asname or a.name for a in node.names}

    def is_nncf_object(node: ast.expr) -> bool:
        while isinstance(node, ast.Attribute):
            node = node.value
        return (isinstance(node, ast.Name) and node.id in imported) or isinstance(node, ast.Call | ast.Subscript)

    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            targets = [ast.Attribute(value=node.args[0], attr="?")] if node.args else []
        if any(isinstance(t, ast.Attribute) and is_nncf_object(t.value) for t in targets):
            found.append(ast.get_source_segment(source, node) or "")
    return found


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("import nncf.a.b as m\nm.f = 1\n", True),
        ("from nncf.a import b\nsetattr(b, 'f', 1)\n", True),
        ("import importlib\nsetattr(importlib.import_module('nncf.a.b'), 'f', 1)\n", True),
        ("from nncf.a import b\nb.c.f = 1\n", True),
        ("from nncf.a.b import C\nC.f = 1\n", True),
        ("from nncf.a.b import C\nc = C()\nc.f = 1\nobject.__setattr__(c, 'f', 1)\n", False),
        ("import nncf.a.b as m\ndef f(self):\n    self.m = m.g()\n", False),
    ],
    ids=[
        "module-attribute",
        "setattr",
        "setattr-on-a-module-imported-at-runtime",
        "submodule-attribute",
        "class-attribute",
        "instance-attribute",
        "own-attribute",
    ],
)
def test_the_runtime_patch_check_finds_what_replaces_nncf_attributes(source: str, found: bool) -> None:
    assert bool(nncf_module_patches(source)) == found


def test_series_replaces_no_nncf_function_at_runtime(builds: dict[str, Path]) -> None:
    added = {name for entry in summary(builds["series"])["patches"] for name in entry["added_files"]}
    assert len(added) > 5
    patches = [
        f"{name}: {line}"
        for name in sorted(added)
        for line in nncf_module_patches((builds["series"] / name).read_text())
    ]
    assert patches == []


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def patched(builds: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """What each patched NNCF wrote for its cases, in a process where nncf_hqq cannot be imported."""
    found = {}
    for build, dest in builds.items():
        out = tmp_path_factory.mktemp(f"patched_{build}") / "patched.npz"
        command = [sys.executable, str(UPSTREAM / "equivalence.py"), str(out), "--build", build]
        env = clean_environment([dest / "src", REPO])
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, cwd=dest)
        assert done.returncode == 0, done.stderr[-4000:]
        with np.load(out) as saved:
            found[build] = {key: saved[key] for key in saved.files}
    return found


def test_patched_runs_used_the_built_nncf_without_nncf_hqq(
    builds: dict[str, Path], patched: dict[str, dict[str, Any]]
) -> None:
    for build, saved in patched.items():
        assert Path(str(saved["nncf_file"])).is_relative_to(builds[build].resolve())
        assert saved["nncf_hqq_modules"].size == 0


CASES = [(build, case) for build in equivalence.BUILDS for case in equivalence.CASES if build in case.builds]


@pytest.mark.parametrize(("build", "case"), CASES, ids=[f"{build}-{case.name}" for build, case in CASES])
def test_patched_nncf_writes_what_nncf_hqq_writes(build: str, case: Any, patched: dict[str, dict[str, Any]]) -> None:
    """Same codes, scales and zero points (every constant, byte for byte, in graph order) as nncf_hqq with the case's
    preset, both on their numpy references; without hqq, the same model as NNCF's own, rt_info included."""
    if case.torch:
        pytest.importorskip("torch")
    with environment(equivalence.REFERENCE_ENVIRONMENT):
        expected = equivalence.results(equivalence.compress_reference(case, build), case)
    got = {key: value for key, value in patched[build].items() if key.startswith(f"{case.name}/")}
    assert sorted(got) == sorted(expected)
    if not case.hqq:  # the patched NNCF dumps hqq=False and the default hqq_params, as it dumps gptq's
        text, removed = equivalence.without_hqq_rt_info(str(got[f"{case.name}/serialized"]))
        hqq_params, hqq = removed
        assert hqq == '<hqq value="False" />'
        second = "'rtn_value_projections': True" + ("}" if build == "core" else ", 'refinement_steps': 5,")
        assert hqq_params.startswith(f", 'hqq_params': {{'num_iterations': 20, {second}")
        got[f"{case.name}/serialized"] = np.array(text)
    differing = [key for key in expected if not np.array_equal(got[key], expected[key])]
    assert differing == []


@pytest.mark.parametrize(("name", "kwargs"), [(name, kwargs) for name, kwargs, *_ in equivalence.SWITCHES])
def test_each_switch_of_the_data_free_steps_changes_what_the_series_writes(
    name: str, kwargs: dict[str, Any], patched: dict[str, dict[str, Any]]
) -> None:
    """The switches that measure 0003's steps one at a time are not inert on the equivalence model."""
    default = "hqq_int4_sym" if kwargs.get("mode") == "INT4_SYM" else "hqq_int4_asym_g64"
    saved = patched["series"]
    keys = [key.split("/", 1)[1] for key in saved if key.startswith(f"{default}/") and "serialized" not in key]
    assert keys and any(not np.array_equal(saved[f"{default}/{key}"], saved[f"{name}/{key}"]) for key in keys)


REFUSALS = [(build, case) for build in equivalence.BUILDS for case in equivalence.REFUSALS if build in case.builds]


@pytest.mark.parametrize(("build", "case"), REFUSALS, ids=[f"{build}-{case.name}" for build, case in REFUSALS])
def test_refused_request_leaves_the_model_as_it_was(build: str, case: Any, patched: dict[str, dict[str, Any]]) -> None:
    """Issue 45's reproducer (hqq with Scale Estimation on a 3-D batched MatMul weight, then a 2-D one): 0001
    refuses it with nncf.ValidationError before it transforms anything (the series compresses it: see the cases)."""
    error = str(patched[build][f"{case.name}/refusal/error"])
    assert error.startswith("ValidationError: HQQ and Scale Estimation both set the scales")
    assert bool(patched[build][f"{case.name}/refusal/unchanged"])


@pytest.mark.parametrize("build", ["core", "series"])
def test_own_tests_pass(build: str, builds: dict[str, Path], tmp_path: Path) -> None:
    """The tests the patches add, in NNCF's layout, pass on the tree they are in (0001's on the core build, all on
    the series; NNCF's test packages stood in for by empty ``__init__.py`` files; one session per suite, as NNCF
    runs them)."""
    shutil.copytree(builds[build] / "tests", tmp_path / "tests")
    for folder in [tmp_path / "tests", *(p for p in (tmp_path / "tests").rglob("*") if p.is_dir())]:
        (folder / "__init__.py").touch()
    env = clean_environment([builds[build] / "src", tmp_path])
    for suite in sorted(p.name for p in (tmp_path / "tests").iterdir() if p.is_dir()):
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"tests/{suite}"]
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-4000:]


def test_build_refuses_a_foreign_destination(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a build")
    done = run_build(tmp_path)
    assert done.returncode == 1
    assert "was not written by upstream/build.py" in done.stderr
    assert (tmp_path / "notes.txt").exists()


def test_build_refuses_an_unknown_patch(tmp_path: Path) -> None:
    done = run_build(tmp_path / "dest", "--upto", "0099")
    assert done.returncode == 1
    assert "--upto 0099: the series has the patches 0001" in done.stderr


def test_edit_with_a_missing_anchor_names_file_and_anchor(tmp_path: Path) -> None:
    target = tmp_path / "src" / "nncf" / "quantization" / "quantize_model.py"
    target.parent.mkdir(parents=True)
    target.write_text("def compress_weights(model):\n    pass\n")
    edits = [e for e in series.SERIES[0].edits if e.file == "src/nncf/quantization/quantize_model.py"]
    with pytest.raises(edit.EditError, match=r"src/nncf/quantization/quantize_model\.py: anchor found 0 times"):
        edit.apply_edits(tmp_path, edits)


def test_placed_module_importing_an_unplaced_one_stops_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    build = load_upstream_module("build")
    patch = series.Patch("0009", "x", "x", placed={"nncf_hqq/hqq.py": "src/nncf/x.py"})
    monkeypatch.setattr(build.series, "SERIES", (*series.SERIES, patch))
    with pytest.raises(build.BuildError, match=r"nncf_hqq/hqq\.py imports nncf_hqq\.\w+, which no patch"):
        build.placed_text("nncf_hqq/hqq.py")
