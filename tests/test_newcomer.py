"""A newcomer's first hour (issue 78): a method of their own in one file, followed from
docs/your_method.md end to end; the notebooks' parameters and kernels."""
from __future__ import annotations

import json
import re
import sys

import pytest

from pflcore.cli import main
from pflcore.notebooks import project_root

ROOT = project_root()


@pytest.fixture
def clean_registry(monkeypatch):
    """Whatever a test registers or imports is gone afterwards (the registry-wide tests and
    docs/config.md see the package's methods only)."""
    from pflcore.algorithms import ALGORITHMS

    monkeypatch.setattr(sys, "path", list(sys.path))
    before, modules = dict(ALGORITHMS), set(sys.modules)
    ALGORITHMS.pop("fedavgm", None)  # the tutorial's method, should a contributor have added it to the package
    yield
    ALGORITHMS.clear()
    ALGORITHMS.update(before)
    for name in set(sys.modules) - modules:
        if not name.startswith(("pflcore", "torch", "numpy")):
            sys.modules.pop(name, None)


def tutorial_file() -> str:
    """The method file of docs/your_method.md (its first Python block)."""
    page = (ROOT / "docs" / "your_method.md").read_text(encoding="utf-8")
    return re.search(r"```python\n(.*?)```", page, re.S).group(1)


def test_your_own_method_in_one_file_runs_from_the_command_line(tmp_path, monkeypatch, capsys, clean_registry):
    from pflcore import run

    # worker processes already running (from an earlier run in this process) learn the plugin's folder too
    run({"method": "fedavg", "dataset": "digits", "model": "mlp", "num_clients": 2, "rounds": 1, "workers": 2,
         "quiet": True, "partition": {"kind": "iid", "samples_per_client": 20}, "output_dir": str(tmp_path / "warm")})
    (tmp_path / "fedavgm.py").write_text(tutorial_file())
    monkeypatch.chdir(tmp_path)
    assert main(["list", "methods", "--plugin", "fedavgm.py"]) == 0
    assert re.search(r"^fedavgm\s+FedAvgM\s+FedAvgM \(Hsu", capsys.readouterr().out, re.M)
    assert main(["list", "params", "fedavgm", "--plugin", "fedavgm.py"]) == 0
    assert re.search(r"^beta\s+0.9\s+a finite number in \[0, 1\)", capsys.readouterr().out, re.M)
    # the page's command, at a tiny scale, in two worker processes (they import the file's module by name)
    args = ["run", str(ROOT / "experiment.yaml"), "--plugin", "fedavgm.py", "--set", "method=fedavgm",
            "--set", "method_params.beta=0.5", "--set", "rounds=2", "--num-clients", "2",
            "--set", "partition.samples_per_client=20", "--output-dir", str(tmp_path / "res"), "--quiet"]
    assert main([*args, "--workers", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["method"] == "fedavgm" and summary["rounds"] == 2
    # a misspelt parameter of it is refused like any other
    misspelt = [a.replace("method_params.beta", "method_params.bet") for a in args]
    assert main([*misspelt, "--name", "misspelt"]) == 2
    assert "method 'fedavgm' has no parameter 'bet' (did you mean 'beta'?)" in capsys.readouterr().err


def test_the_tutorials_method_with_beta_0_is_fedavg_and_has_a_derived_display_name(tmp_path, clean_registry):
    from pflcore import run
    from pflcore.algorithms import ALGORITHMS, load_plugin
    from pflcore.papers import display_name

    text = tutorial_file().replace('    display_name = "FedAvgM"', "")  # the name derived from the class
    (tmp_path / "fedavgm.py").write_text(text)
    assert load_plugin(str(tmp_path / "fedavgm.py")) == ["fedavgm"]
    assert display_name("fedavgm") == "FedAvgM" and display_name("fedavgm beta=0.5") == "FedAvgM beta=0.5"
    base = {"dataset": "digits", "model": "mlp", "num_clients": 2, "rounds": 2, "local_epochs": 1, "workers": 0,
            "quiet": True, "partition": {"kind": "iid", "samples_per_client": 30}, "output_dir": str(tmp_path)}
    momentum = run({**base, "method": "fedavgm", "method_params": {"beta": 0.0}})
    plain = run({**base, "method": "fedavg"})
    assert momentum.curve("acc_mean")[1].tolist() == plain.curve("acc_mean")[1].tolist()
    assert "fedavgm" in ALGORITHMS


def test_a_plugin_is_refused_in_one_sentence(tmp_path, clean_registry):
    from pflcore.algorithms import load_plugin
    from pflcore.errors import ConfigError

    with pytest.raises(ConfigError, match="there is no such file"):
        load_plugin(str(tmp_path / "missing.py"))
    with pytest.raises(ConfigError, match="no importable module 'no_such_module_here'"):
        load_plugin("no_such_module_here")
    (tmp_path / "empty_plugin.py").write_text("x = 1\n")
    with pytest.raises(ConfigError, match="defines no method"):
        load_plugin(str(tmp_path / "empty_plugin.py"))
    (tmp_path / "taken_plugin.py").write_text("from pflcore.algorithms.fedavg import FedAvg\n"
                                              "class Mine(FedAvg):\n    pass\n")
    with pytest.raises(ConfigError, match="called 'fedavg', which is pflcore.algorithms.fedavg.FedAvg's name"):
        load_plugin(str(tmp_path / "taken_plugin.py"))


def test_the_readme_says_how_to_run_your_own_method():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "--plugin" in readme and "docs/your_method.md" in readme


# ---------------------------------------------------------------------- every notebook parameter checked
def test_a_notebook_parameter_of_the_wrong_kind_is_refused_before_any_notebook_runs(monkeypatch, capsys):
    import papermill

    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: pytest.fail("a notebook was executed"))
    assert main(["notebooks", "--only", "t2_ablation", "-p", "variants", "Both"]) == 2
    err = capsys.readouterr().err
    assert "notebook parameter 'variants' = 'Both' is not allowed: it must be a list" in err
    assert "pflcore notebooks -p variants '[None, w FA]'" in err and len(err.strip().splitlines()) == 1
    assert main(["notebooks", "--only", "t2_ablation", "-p", "variants", "[None, both]"]) == 2
    assert "each item must be one of ['None', 'w FA', 'w CC', 'Both'], and 'both' is not (did you mean 'Both'?)" \
        in capsys.readouterr().err
    assert main(["notebooks", "--only", "00_quickstart", "-p", "rounds", "many"]) == 2  # not in any preset's terms
    assert "'rounds' = 'many' is not allowed: it must be a number" in capsys.readouterr().err


def test_the_kernel_checks_every_parameter_of_the_cell_not_only_the_presets():
    """papermill -p variants '["None","Both"]' gives the kernel the text; use_preset refuses it
    by the parameters cell's default (the smoke preset does not name variants)."""
    from pflcore.errors import ConfigError
    from pflcore.notebooks import declared_parameters, use_preset

    smoke = (ROOT / "params" / "fedpac" / "t2_ablation" / "smoke.yaml").read_text()
    assert "variants" not in smoke
    declared = declared_parameters("fedpac/t2_ablation", root=ROOT)
    assert declared["variants"] == ["None", "w FA", "w CC", "Both"] and declared["preset"] == "smoke"
    namespace = {**declared, "variants": '["None","Both"]'}
    with pytest.raises(ConfigError, match=r"""'variants' = '\["None","Both"\]' is not allowed: it must be a list.*"""
                                          r"""papermill's -p passes its value as text, -y reads YAML"""):
        use_preset("fedpac/t2_ablation", "smoke", namespace, log=lambda *_: None)
    use_preset("fedpac/t2_ablation", "smoke", {**declared, "variants": ["None", "Both"]}, log=lambda *_: None)


def _project_with_notebook(tmp_path, text: str):
    (tmp_path / "params" / "demo").mkdir(parents=True)
    (tmp_path / "notebooks" / "demo").mkdir(parents=True)
    path = tmp_path / "notebooks" / "demo" / "03_nb.ipynb"
    path.write_text(text)
    return path


_DEMO_NOTEBOOK = json.dumps({"cells": [{"cell_type": "code", "metadata": {"tags": ["parameters"]},
                                        "source": ["rounds = 7\n", "methods = ['fedavg']\n"]}]})


def test_the_kernel_reads_the_parameters_cell_once_lab_has_finished_saving_it(tmp_path):
    """Jupyter's server saves a notebook by truncating it and writing it again in place; a
    kernel reading it during an autosave (Run All in JupyterLab) must wait for the whole file,
    not fail on the empty one."""
    import threading

    from pflcore.notebooks import declared_parameters

    path = _project_with_notebook(tmp_path, "")  # as the file is mid-save
    writer = threading.Timer(0.5, lambda: path.write_text(_DEMO_NOTEBOOK))
    writer.start()
    try:
        declared = declared_parameters("demo/nb", {"In": ["", "rounds = 99"]}, root=tmp_path)
    finally:
        writer.join()
    assert declared == {"rounds": 7, "methods": ["fedavg"]}  # the file's cell, not the kernel's


def test_a_notebook_file_that_never_parses_falls_back_to_the_kernel_s_first_cell(tmp_path, monkeypatch):
    from pflcore import notebooks

    monkeypatch.setattr(notebooks, "NOTEBOOK_WRITE_WAIT_S", 0.3)
    _project_with_notebook(tmp_path, '{"cells": [')  # cut off, and it stays so
    assert notebooks.declared_parameters("demo/nb", {"In": ["", "rounds = 99\nlr = 0.5"]}, root=tmp_path) == \
        {"rounds": 99, "lr": 0.5}


def test_every_preset_gives_each_parameter_the_kind_of_its_default():
    """The check never refuses a shipped preset."""
    import yaml

    from pflcore.notebooks import check_parameter_types, declared_parameters, discover, notebook_choices, params_path

    for nb in discover(ROOT):
        key = str(params_path(nb, ROOT, "smoke").parent.relative_to(ROOT / "params"))
        declared = declared_parameters(key, root=ROOT)
        assert declared, f"{nb}: no parameters cell found for {key}"
        for preset in ("smoke", "paper"):
            path = params_path(nb, ROOT, preset)
            if path.exists():
                check_parameter_types(key, declared, yaml.safe_load(path.read_text()) or {}, notebook_choices(key))


def test_rows_of_an_ablation_not_run_say_not_run():
    from pflcore.analysis import results_table, seeds_table
    from pflcore.papers.fedcp import FEDCP_TABLE1
    from pflcore.papers.fedpac import FEDPAC_TABLE2

    assert set(results_table({}, paper=FEDPAC_TABLE2["fmnist"])["status"]) == {"not run"}
    assert set(seeds_table({}, paper=FEDCP_TABLE1)["status"]) == {"not run"}


# ---------------------------------------------------------------------- kernels without the plain-TCP notice
def tiny_notebook(path):
    import nbformat

    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("import logging\nlogging.getLogger('IPKernelApp').warning('a real one')\n"
                                          "print(x)")]
    nbformat.write(nb, path)
    return path


def test_pflcore_starts_kernels_over_an_encrypted_connection(tmp_path):
    import tempfile

    import papermill

    from pflcore.notebooks import _kernel_manager

    with tempfile.TemporaryFile("w+") as stderr:
        papermill.execute_notebook(str(tiny_notebook(tmp_path / "nb.ipynb")), str(tmp_path / "out.ipynb"),
                                   parameters={"x": 2}, kernel_name="python3", progress_bar=False,
                                   kernel_manager_class=_kernel_manager(stderr))
        stderr.seek(0)
        said = stderr.read()
    assert "without encryption" not in said
    assert "2" in json.dumps(json.loads((tmp_path / "out.ipynb").read_text())["cells"][-1]["outputs"])


def test_the_papermill_command_prints_no_plain_tcp_notice_but_other_kernel_messages(tmp_path):
    """`pflcore lab --setup` (what .ci/setup runs) writes the kernel's start-up file into the environment."""
    import subprocess
    from pathlib import Path

    from pflcore.lab import write_kernel_config

    path = write_kernel_config()
    assert path is not None and path.parent == Path(sys.prefix) / "etc" / "ipython"
    done = subprocess.run([str(Path(sys.executable).with_name("papermill")), str(tiny_notebook(tmp_path / "nb.ipynb")),
                           str(tmp_path / "out.ipynb"), "--no-progress-bar"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "without encryption" not in done.stderr


def test_the_kernel_filter_drops_only_the_plain_tcp_notice(tmp_path):
    import logging

    from pflcore.lab import kernel_config_path, write_kernel_config

    path = write_kernel_config(tmp_path)
    assert path == kernel_config_path(tmp_path)
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    drop = namespace["_PlainTcpNotice"]()

    def record(msg):
        return logging.LogRecord("IPKernelApp", logging.WARNING, __file__, 1, msg, None, None)

    assert not drop.filter(record("Kernel is running over TCP without encryption. All communication ..."))
    assert drop.filter(record("Failed to load connection file: 'x'"))
    (tmp_path / "etc" / "ipython" / "ipython_kernel_config.py").write_text("c = get_config()\n")  # the user's own
    assert write_kernel_config(tmp_path) is None


def test_pflcore_notebooks_says_did_you_mean_for_a_notebook_a_preset_and_a_parameter(capsys):
    assert main(["notebooks", "--only", "t2_ablaton"]) == 2
    assert "(did you mean 't2_ablation'?)" in capsys.readouterr().err
    assert main(["notebooks", "--preset", "papr", "--only", "t2_ablation"]) == 2
    assert "(did you mean 'paper'?)" in capsys.readouterr().err
    assert main(["notebooks", "--only", "t2_ablation", "-p", "variant", "[Both]"]) == 2
    assert "(did you mean 'variants'?)" in capsys.readouterr().err
