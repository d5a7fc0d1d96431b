"""The import graph of pflcore: no cycle, and no hidden one.

An import inside a function hides a cycle from Python but not from the design: the engine
importing ``analysis`` in a function while ``analysis`` imports the engine is a cycle all
the same. The graph below has an edge for every import of a pflcore module, at module
level or inside a function (an import also runs its parent packages' ``__init__``), and
must have no cycle, apart from the few function-level imports listed in
:data:`ALLOWED_LAZY` with their reason. Imports under ``if TYPE_CHECKING:`` are left out
(they never run)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pflcore"

#: Function-level imports that close a cycle, each kept for a reason (module, imported).
ALLOWED_LAZY: dict[tuple[str, str], str] = {
    # a config is validated against what lives downstream of it (methods, datasets,
    # partitions, models, executors) and is itself imported by all of them
    **{("pflcore.config", target): "validation against the registries"
       for target in ("pflcore.algorithms", "pflcore.data.partition", "pflcore.data.sources", "pflcore.models",
                      "pflcore.data.shifts", "pflcore.engine.vectorised", "pflcore.yaml_io")},
    # a finished paper-preset run derives its record's numbers from its final state, which
    # revisit (built on the simulation) restores
    ("pflcore.engine.simulation", "pflcore.engine.revisit"): "run records",
    # the campaign's one command line (python -m pflcore.campaign device|adopt) hands over to the
    # device campaign, which is built on the plan the campaign keeps
    ("pflcore.campaign", "pflcore.device_campaign"): "the campaign's command line",
}


def _modules() -> dict[str, Path]:
    out = {}
    for f in PACKAGE.rglob("*.py"):
        rel = f.relative_to(PACKAGE.parent).with_suffix("")
        out[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = f
    return out


def _targets(modules: dict[str, Path], module: str, node: ast.AST) -> list[str]:
    package = module if modules[module].name == "__init__.py" else module.rsplit(".", 1)[0]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            parts = package.split(".")
            base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        names = [f"{base}.{a.name}" for a in node.names] or [base]
        names = [n if n in modules else base for n in names]
    else:
        names = [a.name for a in node.names]
    found = []
    for name in names:
        while name and name not in modules:
            name = name.rsplit(".", 1)[0] if "." in name else ""
        if name.startswith("pflcore"):
            found.append(name)
    return found


def import_graph() -> tuple[dict[str, set[str]], dict[str, dict[str, set[str]]]]:
    """(module-level edges, function-level imports) between pflcore modules: each import
    also points at the parent packages it initialises; a function-level import is kept as
    its target and those edges."""
    modules = _modules()
    top: dict[str, set[str]] = {m: set() for m in modules}
    lazy: dict[str, dict[str, set[str]]] = {m: {} for m in modules}

    def visit(module: str, node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in _targets(modules, module, child):
                    parts = target.split(".")
                    edges = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
                    edges = {e for e in edges if e != module and not module.startswith(e + ".")}
                    if in_function:
                        lazy[module].setdefault(target, set()).update(edges)
                    else:
                        top[module] |= edges
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            else:
                visit(module, child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    for module, path in modules.items():
        visit(module, ast.parse(path.read_text()), False)
    return top, lazy


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def test_module_level_imports_have_no_cycle():
    top, _ = import_graph()
    assert cycles(top) == []


def test_function_level_imports_hide_no_cycle():
    top, lazy = import_graph()
    graph = {m: top[m].union(*(edges for t, edges in lazy[m].items() if (m, t) not in ALLOWED_LAZY)) for m in top}
    assert cycles(graph) == [], "a function-level import closes an import cycle: move the code, not the import"


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("module", ["pflcore.engine.simulation", "pflcore.engine.jobs", "pflcore.engine.hooks",
                                    "pflcore.engine.evaluation", "pflcore.training", "pflcore.algorithms"])
def test_the_engine_and_the_methods_name_no_analysis(module):
    """The engine calls hooks; analyses register them (pflcore.analysis imports the engine)."""
    top, lazy = import_graph()
    assert not {t for t in top[module] | set(lazy[module]) if t.startswith("pflcore.analysis")}
