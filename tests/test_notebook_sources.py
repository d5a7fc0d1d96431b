"""Notebook sources: a notebook's code cells use pflcore, they do not rebuild it (issue 31).

Every paper setting and helper a paper notebook needs lives in its paper module
(:mod:`pflcore.papers`), whose config functions take the notebook's scale parameters, so
that notebooks sharing a setting share it there and not through a copied block (finished
runs are reused only when the configs are identical). So a paper notebook defines no
function, class or lambda. No notebook reads a run's files itself: results come from
:func:`pflcore.run` and :class:`pflcore.RunResult` (a run read from its record has no
folder), never from ``summary.json``, ``clients.npz``, ``partition.npz`` and the like.

Walkthroughs (``notebooks/teaching``) show the code of a method step for a student to read,
so they may define functions; they too read results only through the API."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from pflcore.notebooks import discover, project_root

ROOT = project_root(Path(__file__).parent)
NOTEBOOKS = discover(ROOT)
TEACHING = ROOT / "notebooks" / "teaching"

#: The files of a run's folder (pflcore.engine.results) and of its per-round arrays.
RESULTS_FILES = ("summary.json", "metrics.json", "config.json", "clients.npz", "partition.npz", "final_state.pt",
                 "checkpoint.pt", "round_")
#: Modules whose readers would read a results file's format directly (``np.load``, ``json.load``, ...).
FILE_MODULES = {"np", "numpy", "json", "torch", "pickle", "pd", "pandas", "yaml"}
FILE_READERS = {"load", "loads", "safe_load", "read_csv", "read_json", "read_pickle", "loadtxt", "genfromtxt",
                "fromfile"}


def code_cells(nb: Path) -> list[tuple[int, ast.Module]]:
    """(index among the code cells, parsed source) of each code cell; IPython's ``%`` and ``!``
    lines are left out."""
    cells = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
    out = []
    for i, cell in enumerate(cells):
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        out.append((i, ast.parse("\n".join(lines), filename=f"{nb.name} code cell {i}")))
    return out


def definitions(tree: ast.AST) -> list[str]:
    """Each function, class or lambda the source defines, as ``"line N: def name"``."""
    kinds = {ast.FunctionDef: "def", ast.AsyncFunctionDef: "async def", ast.ClassDef: "class", ast.Lambda: "lambda"}
    return [f"line {node.lineno}: {kinds[type(node)]} {getattr(node, 'name', '')}".rstrip()
            for node in ast.walk(tree) if type(node) in kinds]


def direct_reads(tree: ast.AST) -> list[str]:
    """Each place the source reads a file itself (``open``, ``np.load``, ``json.load``,
    ``Path.read_text``, ...) or names a file of a run's folder."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "open":
                found.append(f"line {node.lineno}: open(...)")
            elif isinstance(func, ast.Attribute):
                if func.attr in ("read_text", "read_bytes", "open"):
                    found.append(f"line {node.lineno}: .{func.attr}(...)")
                elif (func.attr in FILE_READERS and isinstance(func.value, ast.Name)
                      and func.value.id in FILE_MODULES):
                    found.append(f"line {node.lineno}: {func.value.id}.{func.attr}(...)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            named = [f for f in RESULTS_FILES if f in node.value]
            if named:
                found.append(f"line {node.lineno}: names {named[0]!r}")
    return found


def _ids(nb: Path) -> str:
    return str(nb.relative_to(ROOT / "notebooks"))


@pytest.mark.parametrize("nb", [nb for nb in NOTEBOOKS if not nb.is_relative_to(TEACHING)], ids=_ids)
def test_paper_notebook_defines_nothing(nb):
    found = [f"code cell {i}, {where}" for i, tree in code_cells(nb) for where in definitions(tree)]
    assert not found, (f"{_ids(nb)} defines {found}: a setting or helper belongs in its paper module "
                       "(pflcore/papers/<paper>.py), taking the notebook's scale parameters")


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=_ids)
def test_notebook_reads_results_through_the_api(nb):
    found = [f"code cell {i}, {where}" for i, tree in code_cells(nb) for where in direct_reads(tree)]
    assert not found, (f"{_ids(nb)} reads files itself ({found}): read runs through pflcore.run and RunResult "
                       "(e.g. RunResult.clients['test_sizes']), which also serve runs read from their records")


def test_the_checks_find_what_they_look_for():
    source = """
import numpy as np
from pathlib import Path
def config(label):
    return label
short = lambda s: s
class Row:
    pass
with np.load(Path(result.path) / "partition.npz") as z:
    sizes = z["test_0"]
summary = json.load(open(result.path / "summary.json"))
text = (result.path / "metrics.json").read_text()
again = RunResult.load(result.path)  # the API: allowed
"""
    tree = ast.parse(source)
    assert sorted(definitions(tree)) == ["line 4: def config", "line 6: lambda", "line 7: class Row"]
    assert sorted(direct_reads(tree)) == sorted([
        "line 9: np.load(...)", "line 9: names 'partition.npz'", "line 11: json.load(...)", "line 11: open(...)",
        "line 11: names 'summary.json'", "line 12: .read_text(...)", "line 12: names 'metrics.json'"])  # not line 13
