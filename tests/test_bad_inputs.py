"""Bad input is refused before any work, in one sentence naming what is wrong, and leaves
nothing behind; the command line never shows a traceback for it.

The cases are data: add a row to ``CONFIG_CASES`` (a config mapping and the words the
refusal must contain) or ``CLI_CASES`` (a config file's text, the command's arguments
and those words).
"""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pflcore.cli import main
from pflcore.config import ExperimentConfig
from pflcore.errors import ConfigError
from pflcore.yaml_io import load_yaml

TINY = {"method": "fedavg", "dataset": "digits", "model": "mlp", "num_clients": 2, "rounds": 1, "local_epochs": 1,
        "partition": {"kind": "iid"}, "workers": 0, "quiet": True}

# (config changes on top of TINY, words the one-sentence refusal must contain)
CONFIG_CASES = [
    ({"lr": math.inf}, "'lr' = inf"),
    ({"lr": math.nan}, "'lr' = nan"),
    ({"weight_decay": math.inf}, "'weight_decay' = inf"),
    ({"momentum": math.nan}, "'momentum'"),
    ({"participation": math.inf}, "'participation'"),
    ({"dropout": [0.1, math.nan]}, "'dropout'"),
    ({"method": "fedpac", "method_params": {"lam": math.nan}}, "'method_params.lam' = nan"),
    ({"method": "fedpac", "method_params": {"lam": math.inf}}, "'method_params.lam' = inf"),
    ({"method": "fedprox", "method_params": {"mu": math.nan}}, "'method_params.mu' = nan"),
    ({"method": "fedpac", "method_params": {"head_epochs": 1.5}}, "'method_params.head_epochs' = 1.5"),
    ({"method": "fedrep", "method_params": {"head_epochs": True}}, "'method_params.head_epochs' = True"),
    ({"method": "fedpac", "method_params": {"solver": "NOSUCH"}}, "'method_params.solver' = 'NOSUCH'"),
    ({"method": "fedpac", "method_params": {"weight_threshold": 5}}, "'method_params.weight_threshold' = 5"),
    ({"method": "fedpac", "method_params": {"feature_alignment": "yes"}}, "'method_params.feature_alignment'"),
    ({"method": "fedpac", "method_params": {"head_lr": 0}}, "'method_params.head_lr' = 0"),
    ({"method": "fedbabu", "method_params": {"ft_body": 1}}, "'method_params.ft_body' = 1"),
    ({"method": "fedprox", "method_params": {"nu": 1}}, "no parameter 'nu'"),
    ({"method": "fedavg", "method_params": [1]}, "'method_params'"),
    ({"quiet": "maybe"}, "'quiet' = 'maybe'"),
    ({"full_last_round": 7}, "'full_last_round' = 7"),
    ({"rounds": 2.0}, "'rounds' = 2.0"),
    ({"local_epochs": 1.5}, "'local_epochs' = 1.5"),
    ({"device": "cuda:x"}, "'device' = 'cuda:x'"),
    ({"device": 5}, "'device' = 5"),
    ({"device": "tpu"}, "'device' = 'tpu'"),
    ({"output_dir": None}, "'output_dir' = None"),
    ({"output_dir": ""}, "'output_dir' = ''"),
    ({"name": "a/b"}, "'name' = 'a/b'"),
    ({"name": 7}, "'name' = 7"),
    ({"data_root": "/no/such/folder"}, "'data_root' = '/no/such/folder'"),
    ({"dataset": ["fmnist"]}, "'dataset'"),
    ({"partition": {"kind": "dirichlet", "alpha": -1}}, "'partition.alpha'"),
    ({"partition": {"kind": "dirichlet", "alpha": math.inf}}, "'partition.alpha'"),
    ({"partition": {"kind": "dirichlet", "beta": 1}}, "'partition.beta'"),
    ({"partition": {"kind": "pathological", "classes_per_client": 2.5}}, "'partition.classes_per_client'"),
    ({"partition": {"kind": "dominant", "s": 2}}, "'partition.s'"),
    ({"partition": {"kind": ["iid"]}}, "'partition'"),
    ({"model": "fedpac_cnn"}, "'model' = 'fedpac_cnn'"),  # its convolutions need more than 8x8 pixels
]


@pytest.mark.parametrize("changes, words", CONFIG_CASES, ids=[w for _, w in CONFIG_CASES])
def test_bad_config_is_one_sentence_before_any_work(tmp_path, changes, words):
    out = tmp_path / "results"
    values = {**TINY, "output_dir": str(out), **changes}
    with pytest.raises(ConfigError) as info:
        import pflcore

        pflcore.run(values)
    message = str(info.value)
    assert words in message
    assert "\n" not in message and message.endswith(".")
    assert not out.exists()


def test_cuda_is_refused_where_this_torch_has_none():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match="'device' = 'cuda'.*use 'cpu'"):
        ExperimentConfig.from_dict({**TINY, "device": "cuda"})


def test_every_method_declares_typed_hyperparameters():
    """Each parameter has a declared type and its default passes its own check."""
    from pflcore.algorithms import ALGORITHMS

    for cls in ALGORITHMS.values():
        assert set(cls.defaults) == set(cls.hyperparams)
        cls.check_params(cls.defaults)


def test_yaml_numbers_read_as_a_user_means_them():
    values = load_yaml("weight_decay: 5e-4\nlr: 1E-2\nrounds: 7\nmu: .5\nname: 1e3x")
    assert values == {"weight_decay": 5e-4, "lr": 0.01, "rounds": 7, "mu": 0.5, "name": "1e3x"}
    assert isinstance(values["rounds"], int)


# (config file text or None for no file, arguments after `pflcore run [file]`, words of the one line)
CLI_CASES = [
    ("- method: fedavg\n", [], "must hold a mapping of config fields"),
    ("3\n", [], "not the single value 3"),
    ("", [], "names no method"),
    ("method: fedavg\n\tlr: 0.1\n", [], "a tab character"),
    ("method: [fedavg\n", [], "is not valid YAML at line 2"),
    ("method: fedavg\nrounds: x\n", [], "'rounds' = 'x'"),
    ("method: fedavg\nrounds: 1\n", ["--set", "rounds.a.b=1"], "'rounds' is 1, not a mapping"),
    ("method: fedavg\n", ["--set", "=1"], "--set expects KEY=VALUE"),
    ("method: fedavg\n", ["--set", "lr=[1"], "not valid YAML"),
    ("method: fedavg\n", ["--set", "nosuch=1"], "unknown config field 'nosuch'"),
    ("method: fedprox\n", ["--set", "method_params.mu=.nan"], "'method_params.mu' = nan"),
    ("method: fedpac\n", ["--set", "method_params.solver=NOSUCH"], "'method_params.solver' = 'NOSUCH'"),
    ("method: fedavg\n", ["--set", "partition.kind=dirichlet", "--set", "partition.alpha=-1"], "'partition.alpha'"),
    ("method: fedavg\n", ["--set", "device=cuda:x"], "'device' = 'cuda:x'"),
    (None, ["nosuch.yaml"], "'nosuch.yaml' does not exist"),
    (None, ["."], "is a folder, not a YAML file"),
    (None, [], "the command names no method"),
]


@pytest.mark.parametrize("text, args, words", CLI_CASES, ids=[w for *_, w in CLI_CASES])
def test_cli_refuses_in_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys, text, args, words):
    monkeypatch.chdir(tmp_path)
    argv = ["run"]
    if text is not None:
        (tmp_path / "experiment.yaml").write_text(text)
        argv.append("experiment.yaml")
    assert main([*argv, *args, "--output-dir", "out"]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_weight_decay_written_as_5e_4_is_a_number(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "experiment.yaml").write_text("method: fedavg\nweight_decay: 5e-4\n"
                                              + "".join(f"{k}: {v}\n" for k, v in TINY.items() if k != "method"))
    assert main(["run", "experiment.yaml", "--set", "lr=1e-2", "--output-dir", "out"]) == 0
    import json

    config = json.loads(next((tmp_path / "out").glob("*/config.json")).read_text())["config"]
    assert config["weight_decay"] == 5e-4 and config["lr"] == 0.01


def test_debug_shows_the_traceback(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError):
        main(["--debug", "run", "--method", "nosuch"])
    monkeypatch.setenv("PFLCORE_DEBUG", "1")
    with pytest.raises(ConfigError):
        main(["run", "--method", "nosuch"])


def test_empty_data_root_warns_that_the_search_moved_on(tmp_path):
    from pflcore.data.sources import DatasetNotFoundError, load_dataset

    with pytest.warns(UserWarning, match="holds no fmnist files; the search moved on"):
        try:
            load_dataset("fmnist", root=tmp_path, download=False)
        except DatasetNotFoundError:
            pass  # a machine without Fashion-MNIST: the warning came first all the same
    with pytest.raises(DatasetNotFoundError, match="is not an existing folder"):
        load_dataset("fmnist", root=tmp_path / "missing", download=False)


def _cli(*args: str, cwd: Path, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PFLCORE_DEBUG", None)
    return subprocess.Popen([sys.executable, "-m", "pflcore.cli", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.mark.slow
def test_ctrl_c_says_where_the_run_resumes(tmp_path):
    """Ctrl-C: one line, exit 130, and the same command resumes from the last checkpoint."""
    args = ["run", "--method", "fedavg", "--dataset", "digits", "--set", "model=mlp", "--num-clients", "2",
            "--rounds", "500", "--workers", "0", "--output-dir", "out", "--name", "long", "--quiet",
            "--set", "partition.kind=iid", "--set", "local_epochs=1", "--set", "checkpoint_every=2"]
    proc = _cli(*args, cwd=tmp_path)
    checkpoint = tmp_path / "out" / "long" / "checkpoint.pt"
    deadline = time.monotonic() + 120
    while not checkpoint.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert checkpoint.exists(), proc.communicate()[1]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("pflcore run: interrupted; the same command resumes from round "), err


def test_diverging_run_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["run", "--method", "fedavg", "--dataset", "digits", "--set", "model=mlp", "--num-clients", "2",
                 "--rounds", "3", "--workers", "0", "--output-dir", "out", "--quiet", "--set", "partition.kind=iid",
                 "--set", "lr=1e6", "--set", "momentum=0.9"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "not finite" in err.strip().splitlines()[-1]


@pytest.mark.parametrize("damaged", ["summary.json", "config.json", "clients.npz", "checkpoint.pt"])
def test_cli_names_a_damaged_result_file(tmp_path, monkeypatch, capsys, damaged):
    """A damaged file of an existing run is one line naming it; a checkpoint is never
    suggested to be loaded with weights_only=False."""
    monkeypatch.chdir(tmp_path)
    args = ["run", "--method", "fedavg", "--dataset", "digits", "--set", "model=mlp", "--num-clients", "2",
            "--rounds", "2", "--workers", "0", "--output-dir", "out", "--name", "r", "--quiet",
            "--set", "partition.kind=iid", "--set", "local_epochs=1"]
    if damaged == "checkpoint.pt":  # an unfinished run: stop it after its first checkpoint
        assert main([*args, "--set", "checkpoint_every=1", "--set", "rounds=3"]) == 0
        (tmp_path / "out" / "r" / "summary.json").unlink()
        args += ["--set", "checkpoint_every=1", "--set", "rounds=3"]
    else:
        assert main(args) == 0
    capsys.readouterr()
    (tmp_path / "out" / "r" / damaged).write_bytes(b"\x80\x04not what it should be")
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert damaged in err and "Traceback" not in err and "weights_only" not in err
