"""The pflcore command line."""
from __future__ import annotations

import json

from pflcore.cli import main


def test_run_writes_results(tmp_path, capsys):
    config = tmp_path / "exp.yaml"
    config.write_text("method: fedper\ndataset: digits\nmodel: mlp\nnum_clients: 3\nrounds: 2\n"
                      "local_epochs: 1\nbatch_size: 16\nlr: 0.05\n"
                      "partition: {kind: dominant, s: 0.2, samples_per_client: 60}\n")
    code = main(["run", str(config), "--output-dir", str(tmp_path / "res"), "--name", "cli",
                 "--set", "partition.s=0.5", "--set", "seed=3", "--quiet", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)  # --json: the summary alone, for programs
    assert summary["rounds"] == 2 and summary["method"] == "fedper"
    recorded = json.loads((tmp_path / "res" / "cli" / "config.json").read_text())["config"]
    assert recorded["partition"]["s"] == 0.5 and recorded["seed"] == 3

    # without --json (the finished run is loaded): a few lines for a person
    assert main(["run", str(config), "--output-dir", str(tmp_path / "res"), "--name", "cli",
                 "--set", "partition.s=0.5", "--set", "seed=3", "--quiet"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].startswith("fedper on digits, 3 clients: 2 rounds in ")
    assert lines[0].endswith("(finished; loaded from disk, not trained again)")  # not trained: said so
    assert "loading it, not training (--overwrite trains it again)" in err
    assert lines[1] == (f"accuracy, mean over clients: final {summary['acc_mean']:.2f}% "
                        f"(std {summary['acc_std']:.2f}), best {summary['best_acc_mean']:.2f}% at round "
                        f"{summary['best_round']}")
    assert lines[2].startswith(f"results in {tmp_path / 'res' / 'cli'}") and len(lines) == 3


def test_run_report_reads_minutes():
    from pflcore.cli import run_report

    text = run_report({"method": "fedavg", "dataset": "fmnist", "num_clients": 20, "rounds": 200, "seconds": 754.2,
                       "acc_mean": 29.000000000000004, "acc_std": 3.25, "best_acc_mean": 30.5, "best_round": 150,
                       "status": "finished"}, "results/x")
    assert text.splitlines()[0] == "fedavg on fmnist, 20 clients: 200 rounds in 12 min 34 s (finished)"
    assert "final 29.00% (std 3.25), best 30.50% at round 150" in text


def test_bad_value_gets_one_sentence_and_exit_2(tmp_path, capsys):
    code = main(["run", "--method", "fedfoo", "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "'method'" in err and "fedavg" in err
    assert not any(tmp_path.iterdir())


# ---------------------------------------------------------------------- pflcore lab
def test_lab_command_runs_this_environments_lab_in_the_project_and_as_root_allows_it(tmp_path, monkeypatch):
    import sys
    from pathlib import Path

    from pflcore.lab import lab_command

    monkeypatch.setattr("os.geteuid", lambda: 0)
    command = lab_command(tmp_path, ["--no-browser"])
    assert command[:3] == [str(Path(sys.executable).with_name("jupyter")), "lab", f"--ServerApp.root_dir={tmp_path}"]
    assert command[3:] == ["--allow-root", "--no-browser"]
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert "--allow-root" not in lab_command(tmp_path)


def test_lab_passes_its_options_to_jupyter_and_other_commands_refuse_unknown_ones(monkeypatch, capsys):
    import pytest

    import pflcore.lab

    started = []
    monkeypatch.setattr(pflcore.lab, "start_lab", lambda root, extra: started.append((root, extra)))
    assert main(["lab", "--no-browser", "--port", "8890"]) == 0
    assert started[0][1] == ["--no-browser", "--port", "8890"] and (started[0][0] / "notebooks").is_dir()
    with pytest.raises(SystemExit):
        main(["notebooks", "--no-browser"])
    assert "unrecognized arguments: --no-browser" in capsys.readouterr().err


def test_lab_overrides_go_into_the_environment_and_keep_other_settings(tmp_path):
    from pflcore.lab import overrides_path, write_lab_overrides, write_server_config

    hook = json.loads(write_server_config(tmp_path).read_text())  # <venv>/etc/jupyter/jupyter_server_config.d/
    assert hook == {"FileContentsManager": {"pre_save_hook": "pflcore.lab.keep_python_version",
                                            "post_save_hook": "pflcore.lab.refresh_git_index"}}

    path = overrides_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"@jupyterlab/apputils-extension:notification": {"doNotDisturbMode": True},
                                "@jupyterlab/notebook-extension:tracker": {"kernelShutdown": True}}))
    assert write_lab_overrides(tmp_path) == path
    assert json.loads(path.read_text()) == {
        "@jupyterlab/apputils-extension:notification": {"doNotDisturbMode": True, "fetchNews": "false",
                                                        "checkForUpdates": False},
        "@jupyterlab/notebook-extension:tracker": {"kernelShutdown": True}}


def test_the_git_filter_keeps_an_executed_notebook_out_of_git(tmp_path):
    """The git filter ``pflcore lab --setup`` (what .ci/setup runs) installs, with Lab's post-save
    hook: a committed notebook that gains outputs, execution counts and Lab's run metadata is
    unchanged for git."""
    import shutil
    import subprocess

    import nbformat

    from pflcore.lab import install_notebook_filter, refresh_git_index, refresh_notebook_entry
    from pflcore.notebooks import canonical_notebook, project_root

    root = project_root()
    clone = tmp_path / "clone"
    (clone / "notebooks").mkdir(parents=True)
    shutil.copy(root / ".gitattributes", clone / ".gitattributes")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(1)"), nbformat.v4.new_markdown_cell("text")]
    path = clone / "notebooks" / "nb.ipynb"
    path.write_text(canonical_notebook(nbformat.writes(nb)))

    def git(*args):
        return subprocess.run(["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    assert install_notebook_filter(clone) and install_notebook_filter(clone)  # idempotent
    assert "filter=nbstripout" in (clone / ".gitattributes").read_text()
    assert not (clone / ".git" / "info" / "attributes").exists() or "nbstripout" not in \
        (clone / ".git" / "info" / "attributes").read_text()
    git("add", "-A")
    git("commit", "-qm", "notebook")
    executed = nbformat.read(path, as_version=4)  # what Run All and an autosave leave in the file
    executed.cells[0].outputs = [nbformat.v4.new_output("stream", text="1\n")]
    executed.cells[0].execution_count = 1
    executed.cells[0].metadata.update({"execution": {"iopub.status.idle": "2026-01-01T00:00:00Z"}, "scrolled": True})
    executed.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    nbformat.write(executed, path)
    assert path.read_text() != git("show", "HEAD:notebooks/nb.ipynb")
    assert git("diff") == ""  # through the filter, the content is the committed one
    refresh_git_index(os_path=str(path)).join()  # Lab's post-save hook: git status trusts sizes, so refresh
    assert git("status", "--porcelain") == ""
    executed.cells[0].source = "print(2)"  # an edit is still seen
    nbformat.write(executed, path)
    assert not refresh_notebook_entry(path)
    assert git("status", "--porcelain").strip() == "M notebooks/nb.ipynb" and git("diff", "--cached") == ""


def test_a_saved_notebook_keeps_the_python_version_it_records(tmp_path):
    from types import SimpleNamespace

    from pflcore.lab import keep_python_version

    (tmp_path / "nb.ipynb").write_text(json.dumps({"metadata": {"language_info": {"version": "3.11.2"}}}))
    manager = SimpleNamespace(root_dir=str(tmp_path))
    model = {"type": "notebook", "content": {"metadata": {"language_info": {"name": "python", "version": "3.12.4"}}}}
    keep_python_version(model=model, path="/nb.ipynb", contents_manager=manager)
    assert model["content"]["metadata"]["language_info"] == {"name": "python", "version": "3.11.2"}
    new = {"type": "notebook", "content": {"metadata": {"language_info": {"version": "3.12.4"}}}}
    keep_python_version(model=new, path="new.ipynb", contents_manager=manager)  # nothing on disk yet
    assert new["content"]["metadata"]["language_info"]["version"] == "3.12.4"


# ---------------------------------------------------------------------- the command line explains itself
def test_every_flag_of_pflcore_run_has_help_made_from_its_field_spec():
    import argparse

    from pflcore.cli import build_parser
    from pflcore.config import FIELDS

    parser = build_parser()
    run = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    for action in run._actions:
        if action.dest in ("help", "debug_here"):
            continue
        assert action.help and action.help != argparse.SUPPRESS, f"pflcore run {action.option_strings}: no help"
        if action.dest in FIELDS:
            assert FIELDS[action.dest].doc.split(" (")[0] in action.help, action.dest
    text = " ".join(run.format_help().split())  # argparse wraps lines
    assert "a whole number >= 1 (default: 200)" in text  # --rounds, from its spec
    assert "pflcore list methods" in text and "experiment.yaml" in text


def test_list_shows_methods_datasets_partitions_and_a_methods_parameters(capsys):
    assert main(["list", "methods"]) == 0
    out = capsys.readouterr().out
    assert "fedprox" in out and "FedAvg-FT" in out and "pflcore list params METHOD" in out
    assert all(len(line) < 160 for line in out.splitlines())
    assert main(["list", "params", "fedprox"]) == 0
    out = capsys.readouterr().out
    assert "mu" in out and "0.01" in out and "a finite number >= 0" in out and "method_params" in out
    assert main(["list", "datasets"]) == 0 and "Fashion-MNIST" in capsys.readouterr().out
    assert main(["list", "partitions"]) == 0 and "pathological" in capsys.readouterr().out
    assert main(["list", "params", "dominant"]) == 0 and "samples_per_client" in capsys.readouterr().out
    assert main(["list", "fields"]) == 0 and "local_epochs" in capsys.readouterr().out
    assert main(["list", "params", "fedprx"]) == 2
    assert "did you mean 'fedprox'?" in capsys.readouterr().err
    assert main(["list", "params"]) == 2 and "needs a NAME" in capsys.readouterr().err


def test_a_misspelt_key_or_name_gets_did_you_mean(tmp_path, capsys):
    assert main(["run", "--method", "fedavg", "--set", "local_epoch=2", "--output-dir", str(tmp_path)]) == 2
    assert "unknown config field 'local_epoch' (did you mean 'local_epochs'?)" in capsys.readouterr().err
    assert main(["run", "--method", "fedprx", "--output-dir", str(tmp_path)]) == 2
    assert "(did you mean 'fedprox'?)" in capsys.readouterr().err
    assert main(["run", "--method", "fedprox", "--set", "method_params.muu=1", "--output-dir", str(tmp_path)]) == 2
    assert "has no parameter 'muu' (did you mean 'mu'?)" in capsys.readouterr().err
    assert main(["run", "--method", "fedavg", "--set", "partition.kind=dominat", "--output-dir", str(tmp_path)]) == 2
    assert "(did you mean 'dominant'?)" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_piped_progress_is_one_plain_line_per_round(tmp_path, capsys):
    config = tmp_path / "exp.yaml"
    config.write_text("method: fedavg\ndataset: digits\nmodel: mlp\nnum_clients: 2\nrounds: 3\nlocal_epochs: 1\n"
                      "workers: 0\npartition: {kind: iid, samples_per_client: 30}\n")
    assert main(["run", str(config), "--output-dir", str(tmp_path / "res")]) == 0  # stderr is captured: not a TTY
    err = capsys.readouterr().err
    assert "\r" not in err
    progress = [line for line in err.splitlines() if " rounds in " in line and line.startswith("fedavg digits")]
    assert [line.split(": ")[1].split(" ")[0] for line in progress] == ["1/3", "2/3", "3/3"]


def test_the_shipped_experiment_yaml_parses_and_runs(tmp_path, capsys):
    """README's `pflcore run experiment.yaml --set partition.s=0.5 --set method_params.mu=0.1`,
    at a tiny scale."""
    from pflcore.config import read_config_file
    from pflcore.notebooks import project_root

    path = project_root() / "experiment.yaml"
    values = read_config_file(path)
    assert values["method"] == "fedprox" and values["partition"]["kind"] == "dominant"
    readme = (project_root() / "README.md").read_text()
    assert "pflcore run experiment.yaml --set partition.s=0.5 --set method_params.mu=0.1" in readme
    assert main(["run", str(path), "--set", "partition.s=0.5", "--set", "method_params.mu=0.1",
                 "--set", "rounds=1", "--num-clients", "2", "--set", "partition.samples_per_client=20",
                 "--workers", "0", "--output-dir", str(tmp_path), "--quiet", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["method"] == "fedprox" and summary["rounds"] == 1
    assert main(["run", str(path), "--set", "method=fedrep", "--set", "rounds=1", "--num-clients", "2",
                 "--set", "partition.samples_per_client=20", "--workers", "0", "--output-dir", str(tmp_path),
                 "--quiet"]) == 0  # the file's comment: another method with the same file
