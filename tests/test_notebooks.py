"""The notebook collection: clean sources, presets that match the parameters cell, and a
smoke execution of every notebook under papermill."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml

from pflcore.notebooks import PRESETS, discover, params_path, project_root, run_notebooks

ROOT = project_root(Path(__file__).parent)
NOTEBOOKS = discover(ROOT)


def parameters_cell(nb_path: Path) -> dict:
    nb = json.loads(nb_path.read_text())
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"{nb_path} needs exactly one cell tagged 'parameters'"
    names = {}
    for node in ast.parse("".join(cells[0]["source"])).body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                names[target.id] = ast.literal_eval(node.value)
    return names


def test_collection_is_not_empty():
    assert any(p.name == "00_quickstart.ipynb" for p in NOTEBOOKS)


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_committed_clean_with_presets(nb):
    data = json.loads(nb.read_text())
    for cell in data["cells"]:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs") and cell.get("execution_count") is None, f"{nb} has outputs"
    defined = parameters_cell(nb)
    for preset in PRESETS:
        path = params_path(nb, ROOT, preset)
        assert path.exists(), f"missing preset {path}"
        values = yaml.safe_load(path.read_text()) or {}
        unknown = set(values) - set(defined)
        assert not unknown, f"{path} sets {unknown}, which {nb.name}'s parameters cell does not define"


@pytest.mark.slow
def test_smoke_preset_executes_every_notebook(tmp_path):
    runs = run_notebooks("smoke", out=tmp_path / "out", root=ROOT,
                         overrides={"output_dir": str(tmp_path / "results"), "figures_dir": str(tmp_path / "figures")},
                         log=lambda *_: None)
    failed = [(r.notebook, r.error) for r in runs if r.status != "ok"]
    assert not failed, failed
    assert len(runs) == len(NOTEBOOKS)
    assert list((tmp_path / "figures").rglob("*.png")), "the notebooks wrote no figure"
    summary = json.loads((tmp_path / "out" / "smoke" / "summary.json").read_text())
    assert {s["notebook"] for s in summary} == {str(p.relative_to(ROOT)) for p in NOTEBOOKS}
