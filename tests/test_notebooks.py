"""The notebook collection: clean sources, presets that match the parameters cell, and a
smoke execution of every notebook under papermill."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml

from pflcore.notebooks import (PRESETS, PresetError, canonical_notebook, discover, params_path, project_path,
                               project_root, run_notebooks, takes_preset, use_preset)

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
    teaching = nb.is_relative_to(ROOT / "notebooks" / "teaching")  # walkthroughs: no paper setting
    for preset in ("smoke",) if teaching else PRESETS:
        path = params_path(nb, ROOT, preset)
        assert path.exists(), f"missing preset {path}"
        values = yaml.safe_load(path.read_text()) or {}
        unknown = set(values) - set(defined)
        assert not unknown, f"{path} sets {unknown}, which {nb.name}'s parameters cell does not define"
    assert takes_preset(nb) != teaching, f"{nb}: paper notebooks take a preset parameter, walkthroughs do not"
    if teaching:
        return
    # Run All in JupyterLab runs the smoke preset; another preset is one edit away (use_preset)
    smoke, paper = (yaml.safe_load(params_path(nb, ROOT, p).read_text()) or {} for p in ("smoke", "paper"))
    assert defined.get("preset") == "smoke", f"{nb} needs `preset = \"smoke\"` in its parameters cell"
    assert set(smoke) == set(paper), f"{nb}: its presets set different names {set(smoke) ^ set(paper)}"
    differ = {k for k in smoke if defined[k] != smoke[k]}
    assert not differ, f"{nb}: the parameters cell differs from the smoke preset in {differ}"
    key = str(params_path(nb, ROOT, "smoke").parent.relative_to(ROOT / "params"))
    assert f'use_preset(\\"{key}\\", preset, globals())' in nb.read_text(), f"{nb} does not call use_preset({key!r}, ...)"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_committed_in_the_form_jupyterlab_saves(nb):
    # JupyterLab rewrites a notebook on open-and-autosave unless it is already in this form;
    # `pflcore notebooks --tidy` writes it (tests/test_jupyterlab.py checks it in a real browser).
    text = nb.read_text(encoding="utf-8")
    assert text == canonical_notebook(text), f"{nb} is not in its committed form: run `pflcore notebooks --tidy`"


def test_canonical_form_drops_outputs_and_execution_metadata():
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"], "papermill": {}},
                                          execution_count=3, outputs=[nbformat.v4.new_output("stream", text="1")])]
    nb.metadata = {"papermill": {"duration": 1.0}, "kernelspec": {"name": "python3", "display_name": "Python 3"}}
    tidy = nbformat.reads(canonical_notebook(nbformat.writes(nb)), as_version=4)
    cell = tidy.cells[0]
    assert cell.outputs == [] and cell.execution_count is None and cell.metadata == {"tags": ["parameters"]}
    assert set(tidy.metadata) == {"kernelspec", "language_info"}
    assert tidy.metadata.kernelspec.display_name == "Python 3 (ipykernel)"
    assert canonical_notebook(canonical_notebook(nbformat.writes(nb))) == canonical_notebook(nbformat.writes(nb))


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
    for executed in (tmp_path / "out" / "smoke").rglob("*.ipynb"):
        for line in progress_fallbacks(executed):  # what Lab shows for a widget without saved state
            count = re.search(r"(\d+)/(\d+) rounds", line)
            assert count, f"{executed.name} has a widget output without a progress line: {line!r}"
            assert count[1] == count[2] and "interrupted" not in line, f"{executed.name} shows unfinished progress: {line}"


def progress_fallbacks(executed: Path) -> list[str]:
    """The plain-text fallbacks of an executed notebook's widget outputs."""
    lines = []
    for cell in json.loads(executed.read_text())["cells"]:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data:
                lines.append("".join(data.get("text/plain", "")))
    return lines


def refuse_execution(monkeypatch):
    import papermill

    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: pytest.fail("a notebook was executed"))


@pytest.mark.parametrize("preset", ["nosuch", "../../x", "a/b", "..", "", "smoke.yaml"])
def test_unknown_or_illegal_preset_fails_before_anything_runs(tmp_path, monkeypatch, preset):
    refuse_execution(monkeypatch)
    out = tmp_path / "deep" / "out"
    with pytest.raises(PresetError) as err:
        run_notebooks(preset, out=out, root=ROOT, log=lambda *_: None)
    message = str(err.value)
    assert "paper" in message and "smoke" in message
    assert message.endswith(".") and ". " not in message
    assert isinstance(err.value, FileNotFoundError) and isinstance(err.value, ValueError)
    assert not any(tmp_path.rglob("*")), "something was written"


def test_cli_unknown_preset_exits_2(tmp_path, monkeypatch, capsys):
    from pflcore.cli import main

    refuse_execution(monkeypatch)
    monkeypatch.chdir(ROOT)
    assert main(["notebooks", "--preset", "nosuch", "--out", str(tmp_path / "out")]) == 2
    assert "no preset 'nosuch'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.fixture
def small_project(tmp_path):
    """Two notebooks: ``a`` has only a smoke preset, ``b`` only a paper one."""
    root = tmp_path / "project"
    (root / "notebooks").mkdir(parents=True)
    for name in ("00_a", "01_b"):
        (root / "notebooks" / f"{name}.ipynb").write_text("{}")
    (root / "params" / "a").mkdir(parents=True)
    (root / "params" / "a" / "smoke.yaml").write_text("x: 1\n")
    (root / "params" / "b").mkdir(parents=True)
    (root / "params" / "b" / "paper.yaml").write_text("x: 2\n")
    return root


def test_summary_line_counts_only_notebooks_that_ran(small_project, tmp_path, monkeypatch):
    import papermill

    executed = []

    def fake_execute(source, target, **kwargs):
        executed.append(Path(source).name)
        Path(target).write_text("{}")

    monkeypatch.setattr(papermill, "execute_notebook", fake_execute)
    lines = []
    runs = run_notebooks("smoke", out=tmp_path / "out", root=small_project, log=lines.append)
    assert executed == ["00_a.ipynb"]
    assert [r.status for r in runs] == ["ok", "no preset"]
    assert lines[-1].startswith("1 of 1 notebooks ran without error"), lines[-1]
    assert "1 skipped" in lines[-1]
    with pytest.raises(PresetError, match="none of the 1 selected"):
        run_notebooks("paper", out=tmp_path / "out2", root=small_project, only=["00_a"], log=lines.append)
    assert not (tmp_path / "out2").exists()


def test_project_path_resolves_inside_a_project_and_falls_back_to_cwd(tmp_path):
    project = tmp_path / "proj"
    (project / "notebooks" / "fedfa").mkdir(parents=True)
    (project / "params").mkdir()
    inside = project / "notebooks" / "fedfa"  # where JupyterLab starts the kernel
    assert project_path("results/x", start=inside) == project.resolve() / "results" / "x"
    elsewhere = tmp_path / "copy"
    elsewhere.mkdir()
    assert project_path("results/x", start=elsewhere) == elsewhere.resolve() / "results" / "x"
    assert project_path(tmp_path / "abs", start=inside) == tmp_path / "abs"


def test_use_preset_applies_the_preset_but_keeps_what_the_user_changed(tmp_path, monkeypatch):
    root = tmp_path / "proj"
    (root / "notebooks" / "demo").mkdir(parents=True)
    (root / "params" / "demo" / "nb").mkdir(parents=True)
    (root / "params" / "demo" / "nb" / "smoke.yaml").write_text(
        "rounds: 3\nseeds: [0]\noutput_dir: results/smoke/demo\nfigures_dir: figures/smoke/demo\n")
    (root / "params" / "demo" / "nb" / "paper.yaml").write_text(
        "rounds: 200\nseeds: [0, 1, 2]\noutput_dir: results/paper/demo\nfigures_dir: figures/demo\n")
    monkeypatch.chdir(root / "notebooks" / "demo")  # where JupyterLab starts the kernel
    cell = {"rounds": 3, "seeds": [0], "output_dir": "results/smoke/demo", "figures_dir": "figures/smoke/demo"}

    smoke = dict(cell)
    use_preset("demo/nb", "smoke", smoke, log=lambda *_: None)
    assert smoke["rounds"] == 3 and smoke["output_dir"] == str(root.resolve() / "results/smoke/demo")
    assert (root / "figures/smoke/demo").is_dir() and Path.cwd() == root / "notebooks" / "demo"

    paper, lines = {**cell, "seeds": [7]}, []  # the user edited seeds in the parameters cell
    use_preset("demo/nb", "paper", paper, log=lines.append)
    assert paper["rounds"] == 200 and paper["seeds"] == [7]
    assert paper["output_dir"] == str(root.resolve() / "results/paper/demo")
    assert "kept your seeds" in lines[0]

    with pytest.raises(PresetError, match="no preset 'nosuch'"):
        use_preset("demo/nb", "nosuch", dict(cell), log=lambda *_: None)
    monkeypatch.chdir(tmp_path)  # a notebook copied out of the project runs its cell's values
    copied = dict(cell)
    use_preset("demo/nb", "smoke", copied, log=lambda *_: None)
    assert copied["output_dir"] == str(tmp_path.resolve() / "results/smoke/demo")
    with pytest.raises(PresetError, match="not inside one"):
        use_preset("demo/nb", "paper", dict(cell), log=lambda *_: None)
