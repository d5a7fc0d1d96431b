"""Bad input is refused before any work, in one sentence naming what is wrong, and leaves
nothing behind; the command line never shows a traceback for it.

The cases are data: add a row to ``CONFIG_CASES`` (a config mapping and the words the
refusal must contain) or ``CLI_CASES`` (a config file's text, the command's arguments
and those words).
"""
from __future__ import annotations

import math
import os
import re
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
    # hostile sizes (issue 33): a bound, and the sentence quotes the value shortened
    ({"num_clients": 10**9}, "'num_clients' = 1000000000 is not allowed: it must be a whole number in [1, 100000]"),
    ({"seed": 10**5000}, "'seed' = <an integer of about 5001 digits>"),
    ({"workers": 10**9}, "'workers' = 1000000000"),
    ({"lr": "x" * 10**7}, "'lr' = 'xxxx"),
    ({"lr": [0.1] * 10**6}, "'lr' = [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, ...]"),
    ({"method": "moon", "method_params": {"projection_dim": 10**9}}, "'method_params.projection_dim' = 1000000000"),
    ({"method": "fedem", "method_params": {"M": 10**6}}, "'method_params.M' = 1000000"),
    ({"method": "hypcluster", "method_params": {"k": 10**6}}, "'method_params.k' = 1000000"),
    ({"partition": {"kind": "dirichlet", "alpha": 0.1, "max_retries": 10**12}}, "'partition.max_retries'"),
    ({"partition": {"kind": "iid", "samples_per_client": 10**9}}, "needs at least"),
    ({"shift": {"kind": "rotation", "groups": 10**9}},
     "'shift.groups' = 1000000000 is not allowed for shift 'rotation'"),
    ({"local_epochs": 10**9}, "'local_epochs' = 1000000000"),  # one round would run for years, silently
    ({"method": "fedavg_ft", "method_params": {"ft_epochs": 10**9}}, "'method_params.ft_epochs' = 1000000000"),
    # careless inputs: a name must be printable, keys must be names
    ({"name": "a\nb"}, "'name' = 'a\\nb'"),
    ({"name": "run\x1b[31m"}, "'name'"),
    ({"partition": {"kind": "iid", 1: 2}}, "'partition' has the key 1"),
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
    assert "\n" not in message and message.endswith(".") and len(message) < 600
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
            "--rounds", "100000", "--workers", "0", "--output-dir", "out", "--name", "long", "--quiet",
            "--set", "partition.kind=iid", "--set", "local_epochs=1", "--set", "checkpoint_every=2"]
    # rounds enough that the run is still going when Ctrl-C arrives, however fast the machine; and
    # Ctrl-C's default action in the run's process, as in a terminal (a test suite started in the
    # background by a non-interactive shell inherits SIGINT ignored, and Python then keeps ignoring it)
    proc = _cli(*args, cwd=tmp_path, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        checkpoint = tmp_path / "out" / "long" / "checkpoint.pt"
        deadline = time.monotonic() + 120
        while not checkpoint.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert checkpoint.exists(), proc.communicate()[1]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
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


def test_a_parked_run_is_one_line_and_the_same_command_finishes_it(tmp_path, monkeypatch, capsys):
    """PFLCORE_PARK_AT in the past: the first round ends, checkpoints and stops with one line
    saying where the run resumes; the same command without it finishes the run."""
    monkeypatch.chdir(tmp_path)
    args = ["run", "--method", "fedavg", "--dataset", "digits", "--set", "model=mlp", "--num-clients", "2",
            "--rounds", "3", "--workers", "0", "--output-dir", "out", "--name", "r", "--quiet",
            "--set", "partition.kind=iid"]
    monkeypatch.setenv("PFLCORE_PARK_AT", "0")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == ("pflcore run: fedavg (seed 0) parked after round 1 of 3, as PFLCORE_PARK_AT "
                                            "asked; the same run resumes from round 2 (its checkpoint in out/r).")
    monkeypatch.delenv("PFLCORE_PARK_AT")
    assert main(args) == 0 and (tmp_path / "out" / "r" / "summary.json").exists()


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


# ---------------------------------------------------------------------- issue 33: the edges
@pytest.mark.parametrize("value, words", [(None, "not None"), ([TINY], "not a value of type list"),
                                          ("experiment.yaml", "ExperimentConfig.from_yaml")])
def test_run_given_something_else_than_a_config_is_one_sentence(value, words):
    import pflcore

    with pytest.raises(ConfigError, match=words):
        pflcore.run(value)


def test_a_repeated_yaml_key_names_the_key_and_both_lines(tmp_path):
    from pflcore.config import read_config_file

    path = tmp_path / "exp.yaml"
    path.write_text("method: fedavg\nlr: 0.1\nrounds: 3\nlr: 0.2\n")
    with pytest.raises(ConfigError, match=r"repeats the key 'lr' \(lines 2 and 4\)"):
        read_config_file(path)
    path.write_text("base: &b {lr: 0.1}\nx:\n  <<: *b\n  lr: 0.3\n")  # a merge key may be overridden
    assert read_config_file(path)["x"] == {"lr": 0.3}


@pytest.mark.parametrize("kind", ["fifo", "device", "large", "aliases"])
def test_config_input_is_a_regular_file_of_sane_size(tmp_path, kind):
    """A FIFO is not waited on, /dev/zero not read to the end of memory, a huge file not read
    at all, and aliases that expand to 10^9 values refused."""
    from pflcore.config import read_config_file

    path = tmp_path / "exp.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path = Path("/dev/zero")
    elif kind == "large":
        path.write_bytes(b"#" * (2 << 20))
    else:
        path.write_text("a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
            f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)))
    words = {"fifo": "not a regular file", "device": "not a regular file", "large": "more than the 1048576",
             "aliases": "expands through its aliases"}[kind]
    with pytest.raises(ConfigError, match=words):
        read_config_file(path)


def test_a_list_parameter_given_text_is_refused_in_its_own_terms():
    """papermill's ``-p methods fedavg`` passes the text 'fedavg' where the notebook takes a list."""
    from pflcore.notebooks import check_parameter_types

    smoke = {"methods": ["fedavg", "fedpac"], "rounds": 3, "train": False, "data_root": None}
    with pytest.raises(ConfigError, match="parameter 'methods' = 'fedavg' is not allowed: it must be a list"):
        check_parameter_types("fedpac/t1_main", smoke, {"methods": "fedavg"})
    with pytest.raises(ConfigError, match="'rounds' = '3'.*a number"):
        check_parameter_types("fedpac/t1_main", smoke, {"rounds": "3"})
    with pytest.raises(ConfigError, match="'train' = 1.*true or false"):
        check_parameter_types("fedpac/t1_main", smoke, {"train": 1})
    check_parameter_types("fedpac/t1_main", smoke, {"methods": ["fedavg"], "rounds": 2.5, "data_root": "/x"})


@pytest.mark.parametrize("named", [True, False])
def test_a_full_disk_names_the_path_and_says_the_same_command_resumes(tmp_path, monkeypatch, capsys, named):
    """With the file the system names, or (a write through a stream) the run's folder."""
    import errno

    import pflcore.engine

    metrics = str(tmp_path / "out" / "r" / "metrics.json")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), *([metrics] if named else []))

    monkeypatch.setattr(pflcore.engine, "run", full)
    code = main(["run", "--method", "fedavg", "--dataset", "digits", "--set", "model=mlp", "--output-dir",
                 str(tmp_path / "out"), "--name", "r", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and "Errno" not in err
    where = f"{metrics}: no space left on device" if named else \
        f"{tmp_path / 'out' / 'r'}: no space left on device writing the run's files"
    assert where in err and err.endswith("the same command starts again from round 1."), err


def test_an_os_error_is_described_with_its_path():
    from pflcore.cli import describe

    text = describe(NotADirectoryError(20, "Not a directory", "/dev/null/smoke"))
    assert text == "/dev/null/smoke: not a directory."


def _deploy_main(*args: str) -> tuple[int, str]:
    pytest.importorskip("flwr")
    from pflcore.flower.deploy import main as deploy_main

    return deploy_main(list(args)), ""


@pytest.mark.parametrize("args, words", [
    (["--config", "missing.yaml"], "config file 'missing.yaml' does not exist."),
    (["--config", "bad.yaml"], "config field 'lr' = -1 is not allowed"),
    (["--config", "ok.yaml", "--supernodes", "0"], "supernodes = 0 is not allowed: it must be an integer >= 1."),
    (["--config", "ok.yaml", "--supernodes", "1000000"], "it must be at most 2 (one per client of this run's 2"),
    (["--config", "ok.yaml", "--run-timeout", "nan"], "run_timeout = nan is not allowed"),
])
def test_deploy_answers_a_mistake_in_one_line(tmp_path, monkeypatch, capsys, args, words):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PFLCORE_DEBUG", raising=False)
    (tmp_path / "ok.yaml").write_text("method: fedavg\ndataset: digits\nmodel: mlp\nnum_clients: 2\nrounds: 1\n"
                                      "partition: {kind: iid}\nworkers: 0\n")
    (tmp_path / "bad.yaml").write_text("method: fedavg\ndataset: digits\nmodel: mlp\nlr: -1\n")
    code, _ = _deploy_main(*args, "--workdir", str(tmp_path / "work"))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert err[0].startswith("python -m pflcore.flower.deploy: ") and words in err[0], err
    assert not (tmp_path / "work").exists()  # refused before anything started
    with pytest.raises(ValueError, match=re.escape(words.split(" (")[0][:40])):
        _deploy_main(*args, "--workdir", str(tmp_path / "work"), "--debug")


def test_simulate_refuses_a_million_supernodes_in_one_sentence(tmp_path):
    pytest.importorskip("flwr")
    from pflcore.flower import simulate

    with pytest.raises(ConfigError, match=r"num_supernodes = 1000000 is not allowed: it must be at most 2"):
        simulate({**TINY, "output_dir": str(tmp_path / "r")}, num_supernodes=10**6)
    assert not (tmp_path / "r").exists()


FINGERPRINTS = {"tiny": "e676c26aac", "fedem": "55fd73eb50", "default": "f72bf7ed9a"}  # at 7348943~1


def test_fingerprints_of_valid_configs_are_unchanged():
    """Bounds only refuse; a valid config keeps the fingerprint its records are keyed by
    (values computed before issue 33's bounds were added)."""
    assert ExperimentConfig.from_dict(TINY).fingerprint() == FINGERPRINTS["tiny"]
    assert ExperimentConfig.from_dict({**TINY, "method": "fedem", "method_params": {"M": 3}}).fingerprint() \
        == FINGERPRINTS["fedem"]
    assert ExperimentConfig().fingerprint() == FINGERPRINTS["default"]
