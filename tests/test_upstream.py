"""upstream/build.py: NNCF with HQQ in its own tree writes what nncf_hqq writes, and NNCF without hqq is unchanged."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import nncf
import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
UPSTREAM = REPO / "upstream"
BUILT_FOR = "3.4.0"


def load_upstream_module(name: str) -> ModuleType:
    """A module of upstream/ (a folder of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"upstream_{name}", UPSTREAM / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


equivalence = load_upstream_module("equivalence")


def clean_environment(pythonpath: list[Path]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    return env


@pytest.fixture(scope="module")
def dest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """NNCF 3.4.0 with HQQ, built by upstream/build.py from the installed nncf."""
    if nncf.__version__ != BUILT_FOR:
        pytest.skip(f"upstream/build.py edits nncf {BUILT_FOR}; nncf {nncf.__version__} is installed")
    dest = tmp_path_factory.mktemp("nncf_with_hqq")
    command = [sys.executable, str(UPSTREAM / "build.py"), str(dest)]
    done = subprocess.run(command, env=clean_environment([]), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return dest


@pytest.fixture(scope="module")
def patched(dest: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What the patched NNCF wrote for every case, in a process where nncf_hqq cannot be imported."""
    out = tmp_path_factory.mktemp("patched") / "patched.npz"
    command = [sys.executable, str(UPSTREAM / "equivalence.py"), str(out)]
    env = clean_environment([dest, REPO])
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=dest)
    assert done.returncode == 0, done.stderr[-4000:]
    with np.load(out) as saved:
        return {key: saved[key] for key in saved.files}


def test_patched_run_used_the_built_nncf_without_nncf_hqq(dest: Path, patched: dict[str, Any]) -> None:
    assert Path(str(patched["nncf_file"])).is_relative_to(dest.resolve())
    assert patched["nncf_hqq_modules"].size == 0


@pytest.mark.parametrize("case", equivalence.CASES, ids=lambda case: case.name)
def test_patched_nncf_writes_what_nncf_hqq_writes(case: Any, patched: dict[str, Any]) -> None:
    """Same codes, scales and zero points (every constant, byte for byte, in graph order); without hqq, the same
    model as NNCF's own compress_weights, rt_info included."""
    if case.torch:
        pytest.importorskip("torch")
    expected = equivalence.results(equivalence.compress_reference(case), case)
    got = {key: value for key, value in patched.items() if key.startswith(f"{case.name}/")}
    assert sorted(got) == sorted(expected)
    differing = [key for key in expected if not np.array_equal(got[key], expected[key])]
    assert differing == []


def test_patch_touches_only_nncf(dest: Path) -> None:
    patch = (dest / "hqq.patch").read_text()
    files = re.findall(r"^diff -ruN a/(\S+) b/(\S+)$", patch, flags=re.MULTILINE)
    assert len(files) > 20
    assert all(old == new and new.startswith("nncf/") for old, new in files)
    edited = {name for name, _ in files if f"--- a/{name}\n" in patch}
    assert edited == {
        "nncf/quantization/quantize_model.py",
        "nncf/quantization/advanced_parameters.py",
        "nncf/quantization/algorithms/weight_compression/algorithm.py",
        "nncf/openvino/quantization/quantize_model.py",
        "nncf/torch/function_hook/quantization/quantize_model.py",
        "nncf/quantization/algorithms/weight_compression/openvino_backend.py",
    }


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


def test_patched_tree_replaces_no_nncf_function_at_runtime(dest: Path) -> None:
    """The patch calls NNCF as it is: no added module assigns to an attribute of what it imports from NNCF, and none
    of the runtime replacement the out-of-tree package needs (nncf_hqq/openvino/writer.py) is in it."""
    patch = (dest / "hqq.patch").read_text()
    added = re.findall(r"^diff -ruN a/(\S+) b/\S+\n--- /dev/null$", patch, flags=re.MULTILINE)
    assert len(added) > 20
    patches = [f"{name}: {line}" for name in added for line in nncf_module_patches((dest / name).read_text())]
    assert patches == []
    added_lines = [line for line in patch.splitlines() if line.startswith("+")]
    leftovers = ("runtime_patch", "_replaced(", "original_compress_weight", "nncf_hqq.openvino.writer")
    assert [line for line in added_lines if any(word in line for word in leftovers)] == []


def test_patch_applies_to_the_unpatched_package(dest: Path, tmp_path: Path) -> None:
    patch_tool = shutil.which("patch")
    if patch_tool is None:
        pytest.skip("the patch tool is not installed (apt-get install patch)")
    shutil.copytree(Path(nncf.__file__).parent, tmp_path / "nncf", ignore=shutil.ignore_patterns("__pycache__"))
    command = [patch_tool, "-p1", "--dry-run", "-s", "-i", str(dest / "hqq.patch")]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_build_refuses_a_foreign_destination(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a build")
    command = [sys.executable, str(UPSTREAM / "build.py"), str(tmp_path)]
    done = subprocess.run(command, env=clean_environment([]), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "was not written by upstream/build.py" in done.stderr
    assert (tmp_path / "notes.txt").exists()


def test_edit_with_a_missing_anchor_names_file_and_anchor(tmp_path: Path) -> None:
    edits = load_upstream_module("nncf_edits")
    target = tmp_path / "nncf" / "quantization" / "quantize_model.py"
    target.parent.mkdir(parents=True)
    target.write_text("def compress_weights(model):\n    pass\n")
    with pytest.raises(edits.EditError, match=r"nncf/quantization/quantize_model\.py: anchor found 0 times"):
        edits.apply_edits(tmp_path, edits.COMPRESS_WEIGHTS_EDITS)


def test_unplaceable_import_names_file_and_line() -> None:
    placement = load_upstream_module("placement")
    source = "import numpy\nfrom nncf_hqq.api import compress_weights\n"
    with pytest.raises(placement.PlacementError, match=r"x\.py:2: imports nncf_hqq\.api"):
        placement.rewrite_imports(source, "x.py", {})


def test_copied_functions_carry_the_names_they_need_from_their_module() -> None:
    """The writer's functions are copied into NNCF's file as they are; the build checks that the file binds what
    they take from their module (parameters, locals and builtins excluded)."""
    placement = load_upstream_module("placement")
    source = "import numpy as np\n\n\ndef f(x: Shape) -> int:\n    y = np.zeros(x)\n    return len(y) + g(y)\n\n\n"
    source += "def g(y):\n    return [v for v in y][0]\n"
    text, uses = placement.copied_functions(source, ("g", "f"), "w.py")
    assert text.index("def g(") < text.index("def f(")
    assert uses == {"f": {"Shape", "np", "g"}, "g": set()}
    assert placement.module_bindings(source) == {"np", "f", "g"}
    with pytest.raises(placement.PlacementError, match=r"w\.py: defines no function h"):
        placement.copied_functions(source, ("h",), "w.py")
