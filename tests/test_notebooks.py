"""The notebook collection: clean sources, presets that match the parameters cell, and a
smoke execution of every notebook under papermill."""
from __future__ import annotations

import ast
import json
import platform
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
    assert tidy.metadata.language_info.version == platform.python_version()
    nb.metadata["language_info"] = {"name": "python", "version": "3.9.1"}  # tidied on another Python: kept
    kept = nbformat.reads(canonical_notebook(nbformat.writes(nb)), as_version=4)
    assert kept.metadata.language_info.version == "3.9.1"


@pytest.mark.slow
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT / "notebooks")))
def test_smoke_preset_executes_the_notebook(nb, tmp_path, own_core):
    # one test per notebook: a failure names it, and `pytest --durations=10` shows the slow ones
    rel = str(nb.relative_to(ROOT))
    runs = run_notebooks("smoke", out=tmp_path / "out", root=ROOT, only=[rel],
                         overrides={"output_dir": str(tmp_path / "results"), "figures_dir": str(tmp_path / "figures")},
                         log=lambda *_: None)
    assert [r.notebook for r in runs] == [rel]
    assert runs[0].status == "ok", f"{rel}: {runs[0].error}"
    if "savefig" in nb.read_text(encoding="utf-8"):
        assert list((tmp_path / "figures").rglob("*.png")), f"{rel} saves figures but wrote none"
    summary = json.loads((tmp_path / "out" / "smoke" / "summary.json").read_text())
    assert [s["notebook"] for s in summary] == [rel]
    executed = tmp_path / "out" / "smoke" / nb.relative_to(ROOT / "notebooks")
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

    # papermill's -p seeds "[0]" equals the smoke value, yet it is the caller's choice: kept
    injected = {**cell, "In": ["", '# Parameters\npreset = "paper"\nseeds = [0]\n', "use_preset(...)"]}
    use_preset("demo/nb", "paper", injected, log=lambda *_: None)
    assert injected["seeds"] == [0] and injected["rounds"] == 200

    with pytest.raises(PresetError, match="no preset 'nosuch'"):
        use_preset("demo/nb", "nosuch", dict(cell), log=lambda *_: None)
    monkeypatch.chdir(tmp_path)  # a notebook copied out of the project runs its cell's values
    copied = dict(cell)
    use_preset("demo/nb", "smoke", copied, log=lambda *_: None)
    assert copied["output_dir"] == str(tmp_path.resolve() / "results/smoke/demo")
    with pytest.raises(PresetError, match="not inside one"):
        use_preset("demo/nb", "paper", dict(cell), log=lambda *_: None)


def test_use_preset_gives_the_records_the_parameters_changed_from_the_preset_and_no_others(tmp_path, monkeypatch):
    """A record keeps what its run changed from the paper preset (the report's tables show only
    the preset's runs): not the selections (methods, seeds), not where outputs go, and a path
    only where it points elsewhere."""
    from pflcore import records

    root = tmp_path / "proj"
    (root / "notebooks").mkdir(parents=True)
    (root / "params" / "nb").mkdir(parents=True)
    (root / "params" / "nb" / "smoke.yaml").write_text(
        "rounds: 3\nlocal_epochs: 1\nmethods: [fedavg]\ndata_root: data/small\noutput_dir: results/smoke\n")
    (root / "params" / "nb" / "paper.yaml").write_text(
        "rounds: 200\nlocal_epochs: 5\nmethods: [fedavg, fedpac]\ndata_root: data/full\noutput_dir: results/paper\n")
    monkeypatch.chdir(root / "notebooks")
    cell = {"rounds": 3, "local_epochs": 1, "methods": ["fedavg"], "data_root": "data/small",
            "output_dir": "results/smoke", "seed": 0, "quiet": False}

    def changes(namespace: dict, preset: str = "paper") -> dict:
        use_preset("nb", preset, namespace, log=lambda *_: None)
        return records.active_changes()

    try:
        # the preset narrowed to one method and another seed, its data named by an absolute path, its
        # outputs elsewhere, quiet: still the preset's run
        given = ('# Parameters\npreset = "paper"\nmethods = ["fedpac"]\nseed = 2\nquiet = True\n'
                 f'data_root = "{root / "data" / "full"}"\noutput_dir = "/tmp/elsewhere"\n')
        assert changes({**cell, "methods": ["fedpac"], "seed": 2, "quiet": True, "data_root": str(root / "data/full"),
                        "output_dir": "/tmp/elsewhere", "In": [given]}) == {}
        # a changed training parameter, and other data: another setting, kept with the record (the path
        # relative to the project)
        assert changes({**cell, "local_epochs": 2, "data_root": "data/other"}) == {
            "data_root": "data/other", "local_epochs": 2}
        # a parameter papermill set that no preset names: its default is unknown, so it counts
        assert changes({**cell, "lr": 0.1, "In": ['# Parameters\nlr = 0.1\n']}) == {"lr": 0.1}
        assert changes(dict(cell), preset="smoke") == {}  # the smoke preset writes no records anyway
    finally:
        records.set_notebook(None, "smoke")


def test_a_value_papermill_sets_wins_over_the_preset_even_where_it_equals_the_smoke_value(tmp_path):
    import nbformat
    import papermill

    root = tmp_path / "proj"
    (root / "notebooks").mkdir(parents=True)
    (root / "params" / "nb").mkdir(parents=True)
    (root / "params" / "nb" / "smoke.yaml").write_text("seeds: [0]\nrounds: 3\n")
    (root / "params" / "nb" / "paper.yaml").write_text("seeds: [0, 1, 2, 3, 4]\nrounds: 300\n")
    params = nbformat.v4.new_code_cell('preset = "smoke"\nseeds = [0]\nrounds = 3')
    params.metadata["tags"] = ["parameters"]
    body = nbformat.v4.new_code_cell("from pflcore.notebooks import use_preset\n"
                                     "use_preset('nb', preset, globals())\n"
                                     "open('chosen.txt', 'w').write(repr((seeds, rounds)))")
    nbformat.write(nbformat.v4.new_notebook(cells=[params, body], metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}}), root / "notebooks" / "nb.ipynb")
    papermill.execute_notebook(str(root / "notebooks" / "nb.ipynb"), str(tmp_path / "out.ipynb"),
                               parameters={"preset": "paper", "seeds": [0]}, cwd=str(root / "notebooks"),
                               progress_bar=False)
    assert (root / "notebooks" / "chosen.txt").read_text() == "([0], 300)"


def test_progress_lines_estimate_and_merged_summary(small_project, tmp_path, monkeypatch):
    import papermill

    (small_project / "notebooks" / "02_c.ipynb").write_text("{}")
    (small_project / "params" / "c").mkdir()
    (small_project / "params" / "c" / "smoke.yaml").write_text("x: 3\n")
    (small_project / "params" / "durations.json").write_text(json.dumps(
        {"smoke": {"notebooks/00_a.ipynb": 10.0, "notebooks/02_c.ipynb": 30.0}}))
    clock = iter([0.0, 20.0, 100.0, 160.0])  # a: 20 s (twice its record), c: 60 s
    monkeypatch.setattr("pflcore.notebooks.time.perf_counter", lambda: next(clock))
    monkeypatch.setattr(papermill, "execute_notebook", lambda source, target, **kw: Path(target).write_text("{}"))
    lines = []
    run_notebooks("smoke", out=tmp_path / "out", root=small_project, log=lines.append, record=True)
    assert "about 40 s going by the seconds recorded" in lines[0]
    assert lines[1].startswith("[1/2] ok     notebooks/00_a.ipynb") and lines[1].endswith("about 1 min 00 s left")
    assert lines[3].startswith("[2/2] ok     notebooks/02_c.ipynb") and "left" not in lines[3]
    durations = json.loads((small_project / "params" / "durations.json").read_text())
    assert durations == {"smoke": {"notebooks/00_a.ipynb": 20.0, "notebooks/02_c.ipynb": 60.0}}

    # a partial run replaces its notebook's entry and keeps the others'
    clock = iter([0.0, 5.0])
    monkeypatch.setattr("pflcore.notebooks.time.perf_counter", lambda: next(clock))
    run_notebooks("smoke", out=tmp_path / "out", root=small_project, only=["02_c"], log=lines.append)
    summary = {s["notebook"]: s for s in json.loads((tmp_path / "out" / "smoke" / "summary.json").read_text())}
    assert set(summary) == {"notebooks/00_a.ipynb", "notebooks/01_b.ipynb", "notebooks/02_c.ipynb"}
    assert summary["notebooks/00_a.ipynb"]["seconds"] == 20.0 and summary["notebooks/02_c.ipynb"]["seconds"] == 5.0
    assert summary["notebooks/02_c.ipynb"]["finished"]
    assert json.loads((small_project / "params" / "durations.json").read_text()) == durations  # only full runs record


def test_parameters_go_to_the_notebooks_that_define_them_and_train_sets_the_environment(small_project, tmp_path,
                                                                                       monkeypatch):
    import os

    import papermill

    import pflcore.notebooks as notebooks

    (small_project / "params" / "b" / "smoke.yaml").write_text("x: 2\n")
    monkeypatch.setattr(notebooks, "notebook_parameters",
                        lambda nb: {"x", "rounds"} if nb.name == "00_a.ipynb" else {"x"})
    seen = {}

    def fake_execute(source, target, parameters, **kwargs):
        seen[Path(source).name] = (parameters, os.environ.get("PFLCORE_TRAIN"))
        Path(target).write_text("{}")

    monkeypatch.setattr(papermill, "execute_notebook", fake_execute)
    monkeypatch.delenv("PFLCORE_TRAIN", raising=False)
    run_notebooks("smoke", out=tmp_path / "out", root=small_project, parameters={"rounds": 5, "x": 9}, train=True,
                  log=lambda *_: None)
    assert seen == {"00_a.ipynb": ({"x": 9, "rounds": 5}, "1"), "01_b.ipynb": ({"x": 9}, "1")}
    assert "PFLCORE_TRAIN" not in os.environ
    with pytest.raises(ValueError, match="no selected notebook has a parameter 'roundz'"):
        run_notebooks("smoke", out=tmp_path / "out", root=small_project, parameters={"roundz": 5}, log=lambda *_: None)


def test_only_takes_several_names_and_refuses_an_empty_one(small_project, tmp_path, monkeypatch, capsys):
    from pflcore.cli import main

    refuse_execution(monkeypatch)
    assert [p.name for p in discover(small_project, ["00_a", "01_b"])] == ["00_a.ipynb", "01_b.ipynb"]
    monkeypatch.chdir(small_project)
    for argv in (["--only", ""], ["--only", "00_a", "nosuch"]):
        assert main(["notebooks", *argv, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ("empty name" in err or "'nosuch'" in err), err
    assert not (tmp_path / "out").exists()


def test_papermills_harmless_warnings_are_filtered_and_others_kept(small_project, tmp_path, monkeypatch, caplog):
    import logging

    import papermill

    def fake_execute(source, target, **kwargs):
        logging.getLogger("papermill.translators").warning("Unable to parse line 5 'x = f(a=1)'.")
        logging.getLogger("papermill").warning("Passed unknown parameter: preset")
        logging.getLogger("papermill").warning("Input notebook does not contain a cell with tag 'parameters'")
        Path(target).write_text("{}")

    monkeypatch.setattr(papermill, "execute_notebook", fake_execute)
    with caplog.at_level(logging.WARNING):
        run_notebooks("smoke", out=tmp_path / "out", root=small_project, log=lambda *_: None)
    assert [r.getMessage() for r in caplog.records] == ["Input notebook does not contain a cell with tag 'parameters'"]


@pytest.mark.slow
def test_each_notebooks_line_reaches_a_pipe_when_it_ends_and_no_warning_does(tmp_path):
    """Two real notebooks under ``pflcore notebooks``, stdout a pipe: the first one's line
    arrives while the second still runs (it waits for a file the test writes on reading it)."""
    import subprocess
    import sys

    import nbformat

    root = tmp_path / "project"
    flag = tmp_path / "go"
    cells = {"00_a": "print('a')", "01_b": f"import pathlib, time\nwhile not pathlib.Path({str(flag)!r}).exists():\n"
                                          "    time.sleep(0.2)"}
    for name, code in cells.items():
        nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                               "language": "python"}})
        nb.cells = [nbformat.v4.new_code_cell("x = dict(a=1)\ny = 2", metadata={"tags": ["parameters"]}),
                    nbformat.v4.new_code_cell(code)]
        (root / "notebooks").mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, root / "notebooks" / f"{name}.ipynb")
        (root / "params" / name[3:]).mkdir(parents=True)
        (root / "params" / name[3:] / "smoke.yaml").write_text("y: 3\n")
    command = [str(Path(sys.executable).with_name("pflcore")), "notebooks", "--out", str(tmp_path / "out")]
    process = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [process.stdout.readline(), process.stdout.readline()]
        assert not flag.exists() and process.poll() is None  # b is still waiting
        assert lines[1].startswith("[1/2] ok     notebooks/00_a.ipynb"), lines
        flag.write_text("")
        rest, err = process.communicate(timeout=120)
    finally:
        flag.write_text("")
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert rest.splitlines()[0].startswith("[2/2] ok     notebooks/01_b.ipynb")
    assert err == "", f"warnings reached the user: {err}"


def _one_cell_project(root: Path, code: str) -> Path:
    """A project with one notebook, ``notebooks/00_a.ipynb`` (a smoke preset), whose cell is ``code``."""
    import nbformat

    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell("y = 2", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell(code)]
    (root / "notebooks").mkdir(parents=True)
    nbformat.write(nb, root / "notebooks" / "00_a.ipynb")
    (root / "params" / "a").mkdir(parents=True)
    (root / "params" / "a" / "smoke.yaml").write_text("y: 3\n")
    return root


@pytest.mark.slow
def test_what_a_kernel_writes_to_stderr_as_it_exits_does_not_reach_the_user(tmp_path):
    """A kernel may write to its stderr after the notebook has run (libzmq once printed
    'Assertion failed: pfd.revents & POLLIN' as a kernel's sockets closed): the user's terminal
    stays quiet, and what the cells print is still in the executed copy."""
    import subprocess
    import sys

    import nbformat

    root = _one_cell_project(tmp_path / "project", "import atexit, os\nprint('a cell prints')\n"
                                                   "atexit.register(os.write, 2, b'noise as the kernel exits\\n')")
    command = [str(Path(sys.executable).with_name("pflcore")), "notebooks", "--out", str(tmp_path / "out")]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "[1/1] ok     notebooks/00_a.ipynb" in done.stdout
    executed = nbformat.read(tmp_path / "out" / "smoke" / "00_a.ipynb", as_version=4)
    assert executed.cells[-1].outputs[0]["text"] == "a cell prints\n"


@pytest.mark.slow
def test_a_kernel_that_dies_fails_its_notebook_with_the_last_line_it_wrote(tmp_path):
    """The kernel's stderr is kept from the terminal, but when the kernel dies its last line
    is what tells the user why, so the notebook's error line carries it."""
    from pflcore.notebooks import run_notebooks

    root = _one_cell_project(tmp_path / "project", "import os\nos.write(2, b'the kernel ran out of room\\n')\nos._exit(1)")
    lines = []
    [run] = run_notebooks("smoke", out=tmp_path / "out", root=root, log=lines.append)
    assert run.status == "failed"
    assert run.error.endswith("(the kernel's last line on stderr: the kernel ran out of room)"), run.error
    assert lines[1].startswith("[1/1] failed notebooks/00_a.ipynb")
