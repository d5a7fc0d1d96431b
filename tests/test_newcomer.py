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
