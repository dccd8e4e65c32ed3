"""Builds HQQ's pull-request series on NNCF 3.4.0: ``python upstream/build.py DEST``.

Takes the installed nncf package (the wheel holds all of its source), lays it out as NNCF's repository does
(``DEST/src/nncf``) and applies the patches of ``series.SERIES`` in order. It writes
- ``DEST/patches/NNNN-<name>.patch``: each pull request as a unified diff against the tree the previous ones left
  (paths ``a/src/nncf/...``, ``a/tests/...``; ``patch -p1`` or ``git apply`` in a tree whose ``src/nncf`` is nncf
  3.4.0), ``DEST/patches/NNNN-<name>.md``, its description, and ``DEST/patches/NNNN-<name>-Usage.md``, its section
  of NNCF's ``docs/usage/post_training_compression/weights_compression/Usage.md`` (which the wheel lacks), if any,
  and ``DEST/patches/NNNN-cspell-words.txt``, the words it adds to NNCF's ``.ci/cspell_dict.txt`` (also not in it);
- ``DEST/src/nncf`` and ``DEST/tests``: the whole series applied;
- ``DEST/patches/series.json``: per patch the files it adds and changes and its added and removed lines;
- ``DEST/ruff.toml``: NNCF's ruff rules (``upstream/nncf_ruff.toml``), so that ``ruff check``/``ruff format --check``
  in DEST check the series as NNCF's pre-commit would.

The wheel has no ``tests/``: ``--nncf-tests NNCF_REPO`` lays NNCF's ``tests/`` (from a checkout or an export of
NNCF's repository) into DEST before the patches apply, so that their edits of NNCF's test files (the
``TemplateWeightCompression`` cases, the unsupported-parameter lists) anchor into NNCF's real files and the patches
hold them as diffs. Without it those edits are skipped and the build says so, with the lines they would add.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import json
import py_compile
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import edit
import series

REPO = Path(__file__).resolve().parent.parent
RUFF_CONFIG = Path(__file__).resolve().parent / "nncf_ruff.toml"
MARKER = ".nncf_hqq_build"
EXPECTED_NNCF = "3.4.0"
#: The header of every file NNCF's repository holds (its ruff rule CPY001).
LICENCE_HEADER = """# Copyright (c) 2026 Intel Corporation
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#      http://www.apache.org/licenses/LICENSE-2.0
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""
#: The ruff release NNCF's pre-commit runs: placed modules get its import sorting and formatting under NNCF's rules.
RUFF_VERSION = "0.14.14"
#: Text no patch may contain: names of this package, its memory tooling, runtime replacements of NNCF.
FORBIDDEN = re.compile(r"nncf_hqq|nncf-hqq|madvise|malloc_trim|/proc/|setattr\(|NNCF_HQQ_|Generated from")


class BuildError(Exception):
    """The build cannot go on: the source package, the destination or a patch is not as expected."""


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


def tree_files(root: Path) -> dict[str, str]:
    """Every Python file of a tree (``src/``, ``tests/``) by its path relative to the tree."""
    return {
        path.relative_to(root).as_posix(): path.read_text()
        for top in ("src", "tests")
        if (root / top).exists()
        for path in sorted((root / top).rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def write_new(root: Path, relative: str, text: str) -> None:
    path = root / relative
    if path.exists():
        msg = f"{relative} exists in the tree: a patch adds files, it changes existing ones by edits only"
        raise BuildError(msg)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(LICENCE_HEADER + text)


def module_name(path: str) -> str:
    """``nncf_hqq/maths/core.py`` -> ``nncf_hqq.maths.core``; ``src/nncf/a/b.py`` -> ``nncf.a.b``."""
    return path.removeprefix("src/").removesuffix(".py").replace("/", ".")


def placed_text(ours: str) -> str:
    """A placed module's source with its imports of other placed modules pointing to their places in NNCF's tree;
    an import of a module of this package that no patch places stops the build."""
    placed = {module_name(a): module_name(b) for patch in series.SERIES for a, b in patch.placed.items()}
    text = (REPO / ours).read_text()

    def rewrite(match: re.Match[str]) -> str:
        if match.group(1) not in placed:
            msg = f"{ours} imports {match.group(1)}, which no patch of the series places in NNCF's tree"
            raise BuildError(msg)
        return f"from {placed[match.group(1)]} import"

    return re.sub(r"^from (nncf_hqq[\w.]*) import", rewrite, text, flags=re.MULTILINE)


def ruff(root: Path, arguments: list[str]) -> None:
    """Runs NNCF's ruff release in the tree at ``root`` (which holds NNCF's rules as ruff.toml)."""
    command = [sys.executable, "-m", "ruff", *arguments]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        msg = f"ruff {' '.join(arguments)}: {(done.stdout + done.stderr).strip()}"
        raise BuildError(msg)


def check_ruff_version() -> None:
    done = subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True, text=True, check=False)
    if done.returncode != 0 or done.stdout.split()[-1:] != [RUFF_VERSION]:
        msg = f"the build sorts and formats placed modules with ruff {RUFF_VERSION}: pip install ruff=={RUFF_VERSION}"
        raise BuildError(msg)


def is_skipped(root: Path, change: edit.Edit, nncf_tests: bool) -> bool:
    """An edit of one of NNCF's test files, in a build without NNCF's tests (the wheel has none)."""
    return not nncf_tests and change.file.startswith("tests/") and not (root / change.file).exists()


def edit_added_lines(change: edit.Edit) -> int:
    """The lines an edit adds, as its diff counts them."""
    diff = difflib.unified_diff(change.anchor.splitlines(), change.new.splitlines(), lineterm="", n=0)
    return sum(1 for line in diff if line.startswith("+") and not line.startswith("+++"))


def apply_patch(root: Path, patch: series.Patch, added_earlier: set[str], nncf_tests: bool) -> list[edit.Edit]:
    """Adds the patch's placed modules (imports sorted and formatted as NNCF's ruff rules want) and files to the
    tree at ``root``, then applies its edits; returns the edits of NNCF's test files it skipped (a build without
    ``--nncf-tests``). A file of the patch that an earlier patch added is its new version (the diff shows what
    changed); NNCF's own files change by anchored edits only."""
    for ours, theirs in patch.placed.items():
        write_new(root, theirs, placed_text(ours))
    if patch.placed:
        ruff(root, ["check", "--fix", "--select", "I", "--quiet", *patch.placed.values()])
        ruff(root, ["format", "--quiet", *patch.placed.values()])
    for path in sorted(patch.files.rglob("*.py")):
        relative = path.relative_to(patch.files).as_posix()
        if relative in added_earlier:
            (root / relative).write_text(LICENCE_HEADER + path.read_text())
        else:
            write_new(root, relative, path.read_text())
    skipped = [change for change in patch.edits if is_skipped(root, change, nncf_tests)]
    edit.apply_edits(root, [change for change in patch.edits if change not in skipped])
    return skipped


def compile_all(root: Path, files: list[str]) -> None:
    """Every added or changed file compiles (a broken edit fails here, not in a user's import)."""
    for relative in files:
        try:
            py_compile.compile(str(root / relative), doraise=True, cfile=str(Path(tempfile.mkdtemp()) / "c.pyc"))
        except py_compile.PyCompileError as error:
            msg = f"{relative} does not compile after the build: {error.msg}"
            raise BuildError(msg) from error


def unified_diff(before: dict[str, str], after: dict[str, str]) -> str:
    """A git-style unified diff of two trees' files (changed and added files; no file is removed)."""
    removed = sorted(set(before) - set(after))
    if removed:
        msg = f"a patch removed files: {removed}"
        raise BuildError(msg)
    chunks: list[str] = []
    for name in sorted(after):
        old, new = before.get(name), after[name]
        if old == new:
            continue
        chunks.append(f"diff --git a/{name} b/{name}\n")
        if old is None:
            chunks.append("new file mode 100644\n")
        lines = difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            new.splitlines(keepends=True),
            f"a/{name}" if old is not None else "/dev/null",
            f"b/{name}",
        )
        chunks.extend(lines)
    return "".join(chunks)


def diff_stats(before: dict[str, str], after: dict[str, str], diff: str) -> dict[str, object]:
    lines = diff.splitlines()
    return {
        "added_files": sorted(set(after) - set(before)),
        "changed_files": sorted(name for name in before if name in after and before[name] != after[name]),
        "added_lines": sum(1 for line in lines if line.startswith("+") and not line.startswith("+++ ")),
        "removed_lines": sum(1 for line in lines if line.startswith("-") and not line.startswith("--- ")),
    }


def nncf_tests_folder(repo: Path) -> Path:
    """NNCF's ``tests/`` in a checkout (or export) of NNCF's repository, or that folder itself."""
    folder = repo if repo.name == "tests" else repo / "tests"
    if not (folder / "cross_fw" / "test_templates" / "template_test_weights_compression.py").exists():
        msg = f"--nncf-tests {repo}: no NNCF tests there (tests/cross_fw/test_templates/... is missing)"
        raise BuildError(msg)
    return folder


def build(dest: Path, upto: str | None = None, nncf_repo: Path | None = None) -> dict[str, object]:
    """The whole build (the patches up to ``upto`` only, when given; NNCF's tests from ``nncf_repo`` laid in first,
    when given); returns the summary written to ``DEST/patches/series.json``."""
    numbers = [patch.number for patch in series.SERIES]
    if upto is not None and upto not in numbers:
        msg = f"--upto {upto}: the series has the patches {', '.join(numbers)}"
        raise BuildError(msg)
    tests = None if nncf_repo is None else nncf_tests_folder(nncf_repo)
    source = installed_nncf()
    version = nncf_version(source)
    check_ruff_version()
    prepare_destination(dest)
    shutil.copyfile(RUFF_CONFIG, dest / "ruff.toml")
    shutil.copytree(source, dest / "src" / "nncf", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if tests is None:
        (dest / "tests").mkdir()
    else:
        shutil.copytree(tests, dest / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    patches_dir = dest / "patches"
    patches_dir.mkdir()
    summary: dict[str, object] = {"nncf": version, "nncf_tests": tests is not None, "patches": []}
    added_earlier: set[str] = set()
    for patch in series.SERIES[: numbers.index(upto) + 1 if upto else None]:
        before = tree_files(dest)
        skipped = apply_patch(dest, patch, added_earlier, tests is not None)
        after = tree_files(dest)
        diff = unified_diff(before, after)
        added = "\n".join(line for line in diff.splitlines() if line.startswith("+"))
        found = sorted({match.group(0) for match in FORBIDDEN.finditer(added)})
        if found:
            msg = f"{patch.stem} contains {found}: nothing of nncf-hqq may be in a patch"
            raise BuildError(msg)
        stats = diff_stats(before, after, diff)
        added_earlier.update(stats["added_files"])  # type: ignore[arg-type]
        compile_all(dest, [*stats["added_files"], *stats["changed_files"]])  # type: ignore[misc]
        (patches_dir / f"{patch.stem}.patch").write_text(diff)
        shutil.copyfile(patch.description, patches_dir / f"{patch.stem}.md")
        if patch.usage.exists():  # the patch's section of NNCF's weight-compression Usage.md
            shutil.copyfile(patch.usage, patches_dir / f"{patch.stem}-Usage.md")
        if patch.cspell_words.exists():  # for .ci/cspell_dict.txt, which the wheel lacks: the PR adds them there
            shutil.copyfile(patch.cspell_words, patches_dir / f"{patch.number}-cspell-words.txt")
        stats["skipped_test_edits"] = {
            "files": sorted({change.file for change in skipped}),
            "added_lines": sum(edit_added_lines(change) for change in skipped),
        }
        summary["patches"].append({"patch": patch.stem, "title": patch.title, **stats})  # type: ignore[attr-defined]
    (patches_dir / "series.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path, help="the directory to write src/, tests/ and patches/ into")
    parser.add_argument("--upto", default=None, help="the last patch to apply (e.g. 0001); default: all")
    parser.add_argument(
        "--nncf-tests",
        type=Path,
        default=None,
        metavar="NNCF_REPO",
        help="a checkout of NNCF's repository (or its tests/): its tests are laid into DEST and the patches' edits "
        "of NNCF's test files applied; without it they are skipped",
    )
    args = parser.parse_args(argv)
    try:
        summary = build(args.dest.resolve(), args.upto, args.nncf_tests)
    except (BuildError, edit.EditError) as error:
        sys.stderr.write(f"build.py: error: {error}\n")
        return 1
    if summary["nncf"] != EXPECTED_NNCF:
        sys.stderr.write(f"build.py: warning: built on nncf {summary['nncf']}, written for {EXPECTED_NNCF}\n")
    for entry in summary["patches"]:  # type: ignore[attr-defined]
        sys.stdout.write(
            f"{args.dest}/patches/{entry['patch']}.patch: {len(entry['added_files'])} files added, "
            f"{len(entry['changed_files'])} changed, +{entry['added_lines']} -{entry['removed_lines']}\n"
        )
        skipped = entry["skipped_test_edits"]
        if skipped["files"]:
            sys.stderr.write(
                f"build.py: note: {entry['patch']}: its edits of NNCF's test files ({', '.join(skipped['files'])}; "
                f"+{skipped['added_lines']} lines, not counted above) are skipped: the wheel has no tests/; "
                "pass --nncf-tests NNCF_REPO to apply them\n"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
