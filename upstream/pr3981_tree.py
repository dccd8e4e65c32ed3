"""NNCF's own open HQQ pull request (#3981) applied to a copy of the installed nncf, for side-by-side measurements:
``python upstream/pr3981_tree.py NNCF_REPO DEST`` writes ``DEST/src/nncf``.

``NNCF_REPO`` is a git directory of NNCF's repository holding ``refs/pull/3981/head`` (``fetch
openvinotoolkit/nncf``). The pull request's change of ``src/`` against its merge base is applied with ``patch -p1``;
files the installed release does not have (the pull request predates the move of the Torch
``compress_weights_impl``) are left out and listed.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import build

PULL_REQUEST = "refs/pull/3981/head"


def pull_request_diff(repo: Path) -> str:
    def git(*arguments: str) -> str:
        command = ["git", f"--git-dir={repo}", *arguments]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout

    head = git("rev-parse", "HEAD").strip()
    base = git("merge-base", head, PULL_REQUEST).strip()
    return git("diff", base, PULL_REQUEST, "--", "src/")


def applicable(diff: str, tree: Path) -> tuple[str, list[str]]:
    """The parts of the diff whose files the tree has (or creates), and the files left out."""
    parts = re.split(r"(?=^diff --git )", diff, flags=re.MULTILINE)
    kept, left_out = [], []
    for part in parts:
        match = re.match(r"diff --git a/(\S+) b/", part)
        if match is None:
            continue
        if "\nnew file mode" in part.split("@@")[0] or (tree / match.group(1)).exists():
            kept.append(part)
        else:
            left_out.append(match.group(1))
    return "".join(kept), left_out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="a git directory of NNCF's repository with refs/pull/3981/head")
    parser.add_argument("dest", type=Path, help="an empty or missing directory")
    args = parser.parse_args(argv)
    if args.dest.exists() and any(args.dest.iterdir()):
        sys.stderr.write(f"pr3981_tree.py: error: {args.dest} is not empty\n")
        return 1
    shutil.copytree(build.installed_nncf(), args.dest / "src" / "nncf", ignore=shutil.ignore_patterns("__pycache__"))
    diff, left_out = applicable(pull_request_diff(args.repo), args.dest)
    subprocess.run(["patch", "-p1", "-s"], input=diff, text=True, cwd=args.dest, check=True)
    for name in left_out:
        sys.stderr.write(f"pr3981_tree.py: note: {name} is not in this nncf release; its change is left out\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
