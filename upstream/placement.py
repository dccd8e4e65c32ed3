"""Where each module of the ``nncf_hqq`` library goes in NNCF's tree, and how its imports are rewritten there.

Every module of the library is either placed (``PLACEMENT``: our module path -> NNCF module path) or left out
(``LEFT_OUT``, with the reason); a module in neither is an error, so a new module of the library needs a decision
before the next build. Imports of ``nncf_hqq`` modules are rewritten to the placed paths, and imports from
``nncf_hqq._nncf`` (the one module that imports NNCF internals) to the NNCF module each name comes from. A name
of a left-out module that stands in for NNCF's own as the pull request changes it (``NNCF_EQUIVALENTS``) is
imported from NNCF. An import that cannot be mapped stops the build, naming the file and the line.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass
from pathlib import Path

WC = "nncf.quantization.algorithms.weight_compression"
KERNELS = "nncf.openvino.optimized_functions.hqq"

#: Our module (dotted, relative to ``nncf_hqq``) -> its NNCF module. Packages map their ``__init__``.
PLACEMENT: dict[str, str] = {
    "hqq": f"{WC}.hqq",
    "parameters": f"{WC}.hqq_parameters",
    "statistics": f"{WC}.hqq_statistics",
    "maths": f"{WC}.hqq_solver",
    "maths.solver": f"{WC}.hqq_solver.solver",
    "maths.conversion": f"{WC}.hqq_solver.conversion",
    "maths.guard": f"{WC}.hqq_solver.guard",
    "maths.error_feedback": f"{WC}.hqq_solver.error_feedback",
    "kernels": KERNELS,
    "kernels.runtime": f"{KERNELS}.runtime",
    "kernels.proximal": f"{KERNELS}.proximal",
    "kernels.refine": f"{KERNELS}.refine",
    "kernels.symmetric": f"{KERNELS}.symmetric",
    "kernels.activations": f"{KERNELS}.activations",
    "openvino": f"{WC}.hqq_openvino",
    "openvino.graph": f"{WC}.hqq_openvino.graph",
    "openvino.decompression": f"{WC}.hqq_openvino.decompression",
    "openvino.split": f"{WC}.hqq_openvino.split",
    "openvino.pages": f"{WC}.hqq_openvino.pages",
    "openvino.backend": f"{WC}.hqq_openvino.backend",
    "torch.graph": f"{WC}.hqq_torch.graph",
    "torch.decompression": f"{WC}.hqq_torch.decompression",
    "torch.targets": f"{WC}.hqq_torch.targets",
    "torch.backend": f"{WC}.hqq_torch.backend",
}

#: Modules that stay out of the pull request, and why.
LEFT_OUT: dict[str, str] = {
    "__init__": "installs the hqq= wrapper into nncf.compress_weights; the patched compress_weights has hqq itself",
    "api": "the wrapper's argument checks; the patch checks hqq requests in check_hqq_configuration (algorithm.py)",
    "integration": "HQQWeightCompression and the runtime replacements; the patch edits WeightCompression directly",
    "_nncf": "imports NNCF internals for the out-of-tree package; placed modules import NNCF's modules directly",
    "self_calibration": "dataset='self' (self-generated calibration text) is a separate feature",
    "torch.__init__": "imports the checkpoint helpers; hqq_torch gets a generated package docstring",
    "torch.checkpoint": "saving a compressed Torch model's structure (NNCF's decompressors are not serializable)",
    "torch.huggingface": "the transformers quantization method for those checkpoints",
    "openvino.writer": "NNCF's OpenVINO writer keeping final codes, done from outside NNCF; the patch edits the "
    "writer in openvino_backend.py (nncf_edits.py), into which the build copies the functions it calls",
}
LEFT_OUT_PACKAGES = ("llm",)

#: Names of left-out modules that placed modules import, and the NNCF names they stand for in NNCF's tree: what
#: the out-of-tree package does from outside NNCF, the patch does in NNCF's own file.
NNCF_EQUIVALENTS: dict[tuple[str, str], tuple[str, str]] = {
    ("openvino.writer", "OVWeightCompressionAlgoBackend"): (f"{WC}.openvino_backend", "OVWeightCompressionAlgoBackend"),
}

#: Package docstrings written for NNCF packages that have no ``__init__`` of ours.
GENERATED_PACKAGES: dict[str, str] = {
    f"{WC}.hqq_torch": "HQQ's Torch backend: graph facts, decompressors, targeted parameters and the writer.",
}


class PlacementError(Exception):
    """A module or an import of the library that the build cannot place."""


@dataclass(frozen=True)
class Origin:
    """Where a name imported from ``_nncf`` comes from: ``from module import name``."""

    module: str
    name: str


def module_name(path: Path, library: Path) -> str:
    """``nncf_hqq/maths/solver.py`` -> ``maths.solver``; a package's ``__init__.py`` -> the package."""
    parts = list(path.relative_to(library).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def library_modules(library: Path) -> dict[str, Path]:
    """Every module of the library outside ``LEFT_OUT_PACKAGES``, by its ``module_name``; every one must be
    placed or left out."""
    modules: dict[str, Path] = {}
    for path in sorted(library.rglob("*.py")):
        relative = path.relative_to(library)
        if relative.parts[0] in LEFT_OUT_PACKAGES:
            continue
        name = "torch.__init__" if relative.as_posix() == "torch/__init__.py" else module_name(path, library)
        if name not in PLACEMENT and name not in LEFT_OUT:
            msg = f"nncf_hqq/{relative.as_posix()}: not placed in NNCF's tree nor left out (upstream/placement.py)"
            raise PlacementError(msg)
        modules[name] = path
    missing = sorted(set(PLACEMENT) - set(modules))
    if missing:
        msg = f"upstream/placement.py places modules the library does not have: {missing}"
        raise PlacementError(msg)
    return modules


def target_path(nncf_module: str, is_package: bool) -> Path:
    """The file of an NNCF module, relative to the directory holding the ``nncf`` package."""
    path = Path(*nncf_module.split("."))
    return path / "__init__.py" if is_package else path.with_suffix(".py")


def nncf_origins(nncf_shim: Path) -> dict[str, Origin]:
    """What ``_nncf`` imports, by the name it binds: every ``from M import N [as A]`` in the file, wherever it is
    (module level, under ``TYPE_CHECKING``)."""
    origins: dict[str, Origin] = {}
    for node in ast.walk(ast.parse(nncf_shim.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                origin = Origin(node.module, alias.name)
                bound = alias.asname or alias.name
                if origins.setdefault(bound, origin) != origin:
                    msg = f"nncf_hqq/_nncf.py imports {bound} from two places: {origins[bound]} and {origin}"
                    raise PlacementError(msg)
    return origins


def rewrite_imports(source: str, label: str, origins: dict[str, Origin]) -> str:
    """``source`` with every import of an ``nncf_hqq`` module rewritten to NNCF's modules (one name a line)."""
    lines = source.splitlines(keepends=True)
    nodes = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Import | ast.ImportFrom)]
    for node in sorted(nodes, key=lambda n: n.lineno, reverse=True):
        if isinstance(node, ast.Import):
            if any(alias.name.split(".")[0] == "nncf_hqq" for alias in node.names):
                msg = f"{label}:{node.lineno}: 'import nncf_hqq...' cannot be placed; use 'from ... import ...'"
                raise PlacementError(msg)
            continue
        if node.level or not node.module or node.module.split(".")[0] != "nncf_hqq":
            continue
        statements = [_placed_import(node.module, alias, origins, f"{label}:{node.lineno}") for alias in node.names]
        end = node.end_lineno or node.lineno
        indent = " " * node.col_offset
        tail = lines[end - 1][node.end_col_offset :] if node.end_col_offset is not None else "\n"
        new = [f"{indent}{s}\n" for s in statements]
        new[-1] = new[-1].rstrip("\n") + tail
        lines[node.lineno - 1 : end] = new
    return "".join(lines)


def _placed_import(module: str, alias: ast.alias, origins: dict[str, Origin], where: str) -> str:
    """The NNCF import of one name that ``from module import alias`` imports from the library."""
    bound = alias.asname or alias.name
    if module == "nncf_hqq._nncf":
        origin = origins.get(alias.name)
        if origin is None:
            msg = f"{where}: nncf_hqq._nncf.{alias.name} is not an NNCF import (placed modules use NNCF's names only)"
            raise PlacementError(msg)
        return _import_line(origin.module, origin.name, bound)
    relative = module.removeprefix("nncf_hqq").lstrip(".")
    equivalent = NNCF_EQUIVALENTS.get((relative, alias.name))
    if equivalent is not None:
        return _import_line(*equivalent, bound)
    if relative not in PLACEMENT:
        reason = LEFT_OUT.get(relative, "not placed")
        msg = f"{where}: imports {module}, which is not in NNCF's tree ({reason})"
        raise PlacementError(msg)
    return _import_line(PLACEMENT[relative], alias.name, bound)


def _import_line(module: str, name: str, bound: str) -> str:
    return f"from {module} import {name}" + (f" as {bound}" if bound != name else "")


_REFERENCE = re.compile(r"\bnncf_hqq((?:\.[A-Za-z_]\w*)+)")


def rewrite_references(source: str) -> str:
    """Dotted references to placed modules in docstrings and comments (``nncf_hqq.maths.solver.hqq_solve``) point
    to their NNCF paths; other mentions of ``nncf_hqq`` (left-out modules included) are left as they are."""

    def replace(match: re.Match[str]) -> str:
        parts = match.group(1).lstrip(".").split(".")
        for cut in range(len(parts), 0, -1):
            if ".".join(parts[:cut]) in LEFT_OUT:
                return match.group(0)  # not in NNCF's tree: left as it is (and listed by the build)
            placed = PLACEMENT.get(".".join(parts[:cut]))
            if placed is not None:
                return ".".join([placed, *parts[cut:]])
        return match.group(0)

    return _REFERENCE.sub(replace, source)


def remaining_mentions(source: str) -> list[str]:
    """Lines that still name ``nncf_hqq`` after the rewrite (docstrings about the out-of-tree package)."""
    return [line.strip() for line in source.splitlines() if "nncf_hqq" in line]


def copied_functions(source: str, names: tuple[str, ...], label: str) -> tuple[str, dict[str, set[str]]]:
    """The source of the module-level functions ``names`` of ``source``, in that order (two blank lines between
    them), and by function the names it takes from its module, which the file it is copied into must bind."""
    functions = {s.name: s for s in ast.parse(source).body if isinstance(s, ast.FunctionDef)}
    lines = source.splitlines()
    chunks: list[str] = []
    uses: dict[str, set[str]] = {}
    for name in names:
        function = functions.get(name)
        if function is None:
            msg = f"{label}: defines no function {name}"
            raise PlacementError(msg)
        start = min([function.lineno] + [d.lineno for d in function.decorator_list])
        chunks.append("\n".join(lines[start - 1 : function.end_lineno]) + "\n")
        uses[name] = free_names(function)
    return "\n\n".join(chunks), uses


def free_names(function: ast.FunctionDef) -> set[str]:
    """The names ``function`` reads (annotations included) that it does not bind itself and are not builtins."""
    arguments = function.args
    parameters = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]
    bound = {a.arg for a in parameters if a is not None}
    names = [n for n in ast.walk(function) if isinstance(n, ast.Name)]
    bound |= {n.id for n in names if not isinstance(n.ctx, ast.Load)}
    return {n.id for n in names if isinstance(n.ctx, ast.Load)} - bound - set(dir(builtins))


def module_bindings(source: str) -> set[str]:
    """The names bound at the module level of ``source``: imports, definitions, assignments."""
    return {name for statement in ast.parse(source).body for name in _bound_names(statement)}


def _bound_names(statement: ast.stmt) -> set[str]:
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in statement.names}
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {statement.name}
    if isinstance(statement, ast.Assign | ast.AnnAssign):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()
