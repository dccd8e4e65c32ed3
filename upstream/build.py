"""Builds NNCF with HQQ inside it: ``python upstream/build.py DEST``.

Takes the installed nncf 3.4.0 package (the wheel holds all of its source) and writes
- ``DEST/nncf/``: a copy of it with the ``nncf_hqq`` library placed in its tree (``placement.py``: which module goes
  where, imports rewritten to NNCF's modules) and NNCF's call sites changed (``nncf_edits.py``: anchored edits; the
  OpenVINO writer's with functions copied from ``nncf_hqq/openvino/writer.py``);
- ``DEST/hqq.patch``: the change as a unified diff against the unpatched package (paths ``a/nncf/...``,
  ``b/nncf/...``);
- ``DEST/tests/openvino/native/quantization/test_hqq_compression.py``: HQQ's tests in NNCF's style, to run inside
  NNCF's test tree (``upstream/run_nncf_tests.py``).

Everything placed is generated from this repository's sources at build time; the project holds no NNCF file.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import py_compile
import re
import shutil
import sys
import tempfile
from pathlib import Path

import nncf_edits
import placement

REPO = Path(__file__).resolve().parent.parent
LIBRARY = REPO / "nncf_hqq"
TEMPLATE = Path(__file__).resolve().parent / "templates" / "test_hqq_compression.py.in"
TEST_TARGET = Path("tests/openvino/native/quantization/test_hqq_compression.py")
MARKER = ".nncf_hqq_build"
EXPECTED_NNCF = "3.4.0"
#: Lines of placed modules that still name ``nncf_hqq`` (docstrings about the out-of-tree package), for review.
MENTIONS: list[str] = []


class BuildError(Exception):
    """The build cannot go on: the source package, the destination or the library is not as expected."""


def installed_nncf() -> Path:
    """The directory of the ``nncf`` package this interpreter imports, unpatched."""
    spec = importlib.util.find_spec("nncf")
    if spec is None or spec.origin is None:
        msg = "nncf is not installed in this environment (pip install nncf==3.4.0)"
        raise BuildError(msg)
    source = Path(spec.origin).parent
    if (source / "quantization/algorithms/weight_compression/hqq.py").exists():
        msg = f"{source} is already patched with HQQ: run the build without a patched nncf on PYTHONPATH"
        raise BuildError(msg)
    return source


def nncf_version(source: Path) -> str:
    match = re.search(r'__version__ = "([^"]+)"', (source / "version.py").read_text())
    if match is None:
        msg = f"{source}/version.py holds no __version__"
        raise BuildError(msg)
    return match.group(1)


def prepare_destination(dest: Path) -> None:
    """Empties a destination written by an earlier build; refuses any other non-empty directory."""
    if dest.exists() and any(dest.iterdir()):
        if not (dest / MARKER).exists():
            msg = f"{dest} is not empty and was not written by upstream/build.py; choose an empty directory"
            raise BuildError(msg)
        shutil.rmtree(dest)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / MARKER).write_text("written by upstream/build.py; the next build empties this directory\n")


def copy_package(source: Path, target: Path) -> None:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def place_library(root: Path) -> list[Path]:
    """Writes every placed module of the library into the tree at ``root`` (which holds ``nncf/``); returns the
    files written, relative to ``root``."""
    modules = placement.library_modules(LIBRARY)
    origins = placement.nncf_origins(modules["_nncf"])
    written: list[Path] = []
    for ours, theirs in placement.PLACEMENT.items():
        path = modules[ours]
        label = f"nncf_hqq/{path.relative_to(LIBRARY).as_posix()}"
        source = placement.rewrite_imports(path.read_text(), label, origins)
        target = placement.target_path(theirs, path.name == "__init__.py")
        source = placement.rewrite_references(source)
        MENTIONS.extend(f"{target}: {line}" for line in placement.remaining_mentions(source))
        written.append(write_module(root, target, source, label))
    for package, doc in placement.GENERATED_PACKAGES.items():
        written.append(write_module(root, placement.target_path(package, True), f'"""{doc}"""\n', None))
    return written


def edit_nncf(root: Path) -> list[str]:
    """Applies the edits of NNCF's files to the tree at ``root``, the OpenVINO writer's with the functions copied
    from ``nncf_hqq/openvino/writer.py``; returns the files changed. A copied function that uses a name the edited
    file does not bind stops the build."""
    label = nncf_edits.WRITER_SOURCE
    source = (REPO / label).read_text()
    functions, uses = placement.copied_functions(source, nncf_edits.WRITER_FUNCTIONS, label)
    MENTIONS.extend(f"{nncf_edits.OV_BACKEND}: {line}" for line in placement.remaining_mentions(functions))
    changed = nncf_edits.apply_edits(root, nncf_edits.ALL_EDITS + nncf_edits.writer_edits(functions))
    bound = placement.module_bindings((root / nncf_edits.OV_BACKEND).read_text())
    unbound = {f"{name}: {sorted(used - bound)}" for name, used in uses.items() if used - bound}
    if unbound:
        msg = f"{label}: functions copied into {nncf_edits.OV_BACKEND} use names it does not bind: {sorted(unbound)}"
        raise BuildError(msg)
    return changed


def write_module(root: Path, target: Path, text: str, origin: str | None) -> Path:
    """Writes one module of the tree (never over an NNCF file), headed by the file it comes from."""
    path = root / target
    if path.exists():
        msg = f"{target} exists in NNCF's tree: the placement would overwrite an NNCF module"
        raise BuildError(msg)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = f"# Generated from {origin} by upstream/build.py.\n" if origin else ""
    path.write_text(header + text)
    return target


def write_tests(dest: Path) -> Path:
    target = dest / TEST_TARGET
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(TEMPLATE.read_text())
    return target


def compile_all(paths: list[Path]) -> None:
    """Every written or edited file compiles (a broken edit fails here, not in a user's import)."""
    for path in paths:
        try:
            py_compile.compile(str(path), doraise=True, cfile=str(Path(tempfile.gettempdir()) / "nncf_hqq_check.pyc"))
        except py_compile.PyCompileError as error:
            msg = f"{path} does not compile after the build: {error.msg}"
            raise BuildError(msg) from error


def unified_diff(pristine: Path, patched: Path) -> str:
    """``diff -ruN``-style unified diff of two trees, each holding ``nncf/``: changed and added files only."""
    old_files = {p.relative_to(pristine) for p in (pristine / "nncf").rglob("*.py")}
    new_files = {p.relative_to(patched) for p in (patched / "nncf").rglob("*.py")}
    if old_files - new_files:
        msg = f"the build removed NNCF files: {sorted(map(str, old_files - new_files))}"
        raise BuildError(msg)
    chunks: list[str] = []
    for relative in sorted(new_files):
        old = (pristine / relative).read_text().splitlines(keepends=True) if relative in old_files else []
        new = (patched / relative).read_text().splitlines(keepends=True)
        if old == new:
            continue
        name = relative.as_posix()
        chunks.append(f"diff -ruN a/{name} b/{name}\n")
        from_file = f"a/{name}" if relative in old_files else "/dev/null"
        chunks.extend(difflib.unified_diff(old, new, from_file, f"b/{name}"))
    return "".join(chunks)


def build(dest: Path) -> dict[str, object]:
    """The whole build; returns a summary (version, files added and changed)."""
    source = installed_nncf()
    version = nncf_version(source)
    prepare_destination(dest)
    with tempfile.TemporaryDirectory(prefix="nncf_pristine_") as tmp:
        pristine = Path(tmp)
        copy_package(source, pristine / "nncf")
        copy_package(source, dest / "nncf")
        added = place_library(dest)
        changed = edit_nncf(dest)
        test_file = write_tests(dest)
        compile_all([dest / p for p in added] + [dest / p for p in changed] + [test_file])
        patch = unified_diff(pristine, dest)
    header = f"HQQ in NNCF {version}: generated by upstream/build.py from nncf-hqq's sources.\n\n"
    (dest / "hqq.patch").write_text(header + patch)
    return {"version": version, "added": [str(p) for p in added], "changed": changed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path, help="the directory to write nncf/, hqq.patch and tests/ into")
    args = parser.parse_args(argv)
    try:
        summary = build(args.dest.resolve())
    except (BuildError, placement.PlacementError, nncf_edits.EditError) as error:
        sys.stderr.write(f"build.py: error: {error}\n")
        return 1
    if summary["version"] != EXPECTED_NNCF:
        sys.stderr.write(f"build.py: warning: built on nncf {summary['version']}, written for {EXPECTED_NNCF}\n")
    for line in MENTIONS:
        sys.stderr.write(f"build.py: note: still names nncf_hqq: {line}\n")
    added, changed = summary["added"], summary["changed"]
    sys.stdout.write(
        f"nncf {summary['version']} + HQQ in {args.dest}/nncf: {len(added)} files added, "  # type: ignore[arg-type]
        f"{len(changed)} changed; {args.dest}/hqq.patch; {args.dest}/{TEST_TARGET}\n"  # type: ignore[arg-type]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
