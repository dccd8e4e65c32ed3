"""The package's layers only import downwards, NNCF internals come through one module, and nothing has a cycle.

Every import of every module counts, function-level ones included (read from the source, not by importing).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import nncf
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nncf_hqq"

#: Bottom to top. A module may import modules of its own layer or of lower layers, never of higher ones.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundations", ("nncf_hqq.parameters", "nncf_hqq._nncf")),
    ("maths", ("nncf_hqq.maths",)),
    ("kernels", ("nncf_hqq.kernels",)),
    ("algorithm", ("nncf_hqq.hqq", "nncf_hqq.statistics")),
    ("backends", ("nncf_hqq.openvino", "nncf_hqq.torch")),
    ("integration", ("nncf_hqq.integration",)),
    ("api", ("nncf_hqq.api", "nncf_hqq")),
    ("tooling", ("nncf_hqq.llm",)),
]

#: The tooling's own layers, bottom to top (``nncf_hqq.llm.NAME``): a module of ``nncf_hqq.llm`` imports modules of
#: its own layer or of lower ones. The package itself re-exports the jobs (lazily), on top.
LLM_LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundations", ("timing", "cpu", "staging", "logs", "layout", "records")),
    ("inputs", ("export", "texts", "reports")),
    ("options, models and metrics", ("options", "zoo", "evaluation")),
    ("checks", ("sanity", "memory", "disk", "encoders", "stand_in")),
    ("steps", ("compression", "source")),
    ("stages", ("output_check", "writing", "vlm")),
    ("jobs", ("compress_job", "evaluate_job")),
    ("demo", ("demo",)),
    ("command line", ("cli",)),
    ("package", ("",)),
]

#: NNCF modules any layer may import: the public package, its backend-agnostic tensors, its logger and the
#: public advanced-parameters module. Everything else of NNCF is internal and only ``nncf_hqq._nncf`` imports it.
PUBLIC_NNCF = ("nncf", "nncf.tensor", "nncf.common.logging", "nncf.quantization.advanced_parameters")

#: The modules that may import NNCF internals: the one module that gathers them for the package, and the modules that
#: are NNCF code as the pull requests add them (upstream/series.py places them unchanged but for their imports).
#: The package itself imports ``nncf.quantization`` to install ``hqq=`` into ``compress_weights`` there too.
NNCF_INTERNALS_ALLOWED = (
    "nncf_hqq._nncf",
    "nncf_hqq",
    "nncf_hqq.maths.core",
    "nncf_hqq.maths.data_free_steps",
    "nncf_hqq.maths.guard",
    "nncf_hqq.maths.integer",
    "nncf_hqq.maths.scale_on_data",
    "nncf_hqq.maths.zero_point_solver",
    "nncf_hqq.statistics",
)

#: Third-party imports the layers below the backends must not make (they are backend-specific or tooling).
FORBIDDEN_BELOW_BACKENDS = ("torch", "transformers", "optimum")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports (``from a.b import c`` counts as ``a.b`` and, if it is a module, ``a.b.c``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
OWN_IMPORTS = {name: {m for m in imports_of(path) if m in MODULES} for name, path in MODULES.items()}


def is_within(module: str, public: str) -> bool:
    """Whether ``module`` is the public NNCF module ``public`` or inside it; inside ``nncf`` itself only its
    attributes that are not modules count (``from nncf import CompressWeightsMode``), else every NNCF module would."""
    if module == public:
        return True
    if public != "nncf":
        return module.startswith(public + ".")
    name = module.removeprefix("nncf.")
    return "." not in name and hasattr(nncf, name) and not inspect.ismodule(getattr(nncf, name))


def layer_of(module: str) -> int:
    best = -1, -1  # (layer, length of the matching prefix): the longest prefix decides
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best[1]:
                best = index, len(prefix)
    if best[0] < 0:
        pytest.fail(f"module {module} belongs to no layer; add it to LAYERS")
    return best[0]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_only_go_downwards(module: str) -> None:
    upward = [m for m in OWN_IMPORTS[module] if layer_of(m) > layer_of(module)]
    assert not upward, f"{module} ({LAYERS[layer_of(module)][0]}) imports higher layers: {sorted(upward)}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_the_nncf_module_imports_nncf_internals(module: str) -> None:
    if module in NNCF_INTERNALS_ALLOWED or layer_of(module) == len(LAYERS) - 1:
        return  # the NNCF-internals module, NNCF's own code; the tooling is not part of the library
    internal = [
        m
        for m in imports_of(MODULES[module])
        if (m == "nncf" or m.startswith("nncf.")) and not any(is_within(m, p) for p in PUBLIC_NNCF)
    ]
    assert not internal, f"{module} imports NNCF internals {sorted(internal)}; take them from nncf_hqq._nncf"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if layer_of(m) < 4))
def test_lower_layers_import_no_backend_or_tooling_packages(module: str) -> None:
    third_party = {m.split(".")[0] for m in imports_of(MODULES[module])}
    assert not third_party & set(FORBIDDEN_BELOW_BACKENDS)


def test_no_import_cycles() -> None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(OWN_IMPORTS[module]):
            if target == module or (target == "nncf_hqq" and module.startswith("nncf_hqq.llm")):
                continue  # the tooling may use the public API
            if state.get(target) == 1:
                cycle = [*path[path.index(target) :], target] if target in path else [module, target]
                pytest.fail(f"import cycle: {' -> '.join(cycle)}")
            if target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(MODULES):
        if module not in state:
            visit(module, [module])


def test_the_layer_check_sees_function_level_imports(tmp_path: Path) -> None:
    """A function-level upward import (the kind that can hide a cycle) is found and ranked as upward."""
    path = tmp_path / "probe.py"
    path.write_text("def f():\n    from nncf_hqq.integration import weight_compression_with_hqq\n")
    assert "nncf_hqq.integration" in imports_of(path)
    assert layer_of("nncf_hqq.integration") > layer_of("nncf_hqq.hqq")


def llm_layer_of(module: str) -> int:
    name = module.removeprefix("nncf_hqq.llm").removeprefix(".")
    for index, (_, names) in enumerate(LLM_LAYERS):
        if name in names:
            return index
    pytest.fail(f"module {module} belongs to no layer of the tooling; add it to LLM_LAYERS")


LLM_MODULES = sorted(m for m in MODULES if m == "nncf_hqq.llm" or m.startswith("nncf_hqq.llm."))


@pytest.mark.parametrize("module", LLM_MODULES)
def test_the_tooling_imports_only_downwards(module: str) -> None:
    own = [m for m in OWN_IMPORTS[module] if m in LLM_MODULES and m != module]
    upward = [m for m in own if llm_layer_of(m) > llm_layer_of(module)]
    assert not upward, f"{module} ({LLM_LAYERS[llm_layer_of(module)][0]}) imports higher tooling: {sorted(upward)}"


def test_every_tooling_module_has_a_layer() -> None:
    listed = {f"nncf_hqq.llm.{name}" if name else "nncf_hqq.llm" for _, names in LLM_LAYERS for name in names}
    assert listed == set(LLM_MODULES)
