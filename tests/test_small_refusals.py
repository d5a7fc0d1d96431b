"""Issue 74's smaller items, each refused in one sentence naming what is wrong: Flower's deploy
never writes into a folder it did not create; an impossible ``figures_dir``; FedFA F.2's
``per_class`` before any training; pFedHN's hypernetwork counted in the memory estimate; the
command line names ``--overwrite``; a failing Flower node's reason without terminal codes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pflcore.cli import main
from pflcore.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------- deploy --workdir
def test_deploy_refuses_a_workdir_of_the_users_and_resumes_in_its_own(tmp_path, make_config, capsys):
    pytest.importorskip("flwr", reason="the Flower extra is not installed")
    from pflcore.flower import deploy

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "experiment.json").write_text("my own notes")
    (mine / "thesis.tex").write_text("mine")
    config = tmp_path / "exp.json"
    config.write_text(json.dumps({**make_config().to_dict(), "output_dir": str(tmp_path / "results")}))
    assert deploy.main(["--config", str(config), "--workdir", str(mine)]) == 2
    err = capsys.readouterr().err.strip()
    assert "workdir" in err and str(mine) in err and "did not write" in err and err.count("\n") == 0
    assert (mine / "experiment.json").read_text() == "my own notes" and sorted(p.name for p in mine.iterdir()) == [
        "experiment.json", "thesis.tex"]
    ours = tmp_path / "ours"
    deploy.claim_workdir(ours)  # a new folder becomes deploy's; the same command may use it again
    (ours / "experiment.json").write_text("{}")
    deploy.claim_workdir(ours)
    earlier = tmp_path / "earlier"  # written by a deploy before the marker: its entries and nothing else
    (earlier / "logs").mkdir(parents=True)
    (earlier / "experiment.json").write_text("{}")
    (earlier / "state.db").write_text("")
    deploy.claim_workdir(earlier)
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(ConfigError, match="workdir .* is a file"):
        deploy.claim_workdir(file)


# ---------------------------------------------------------------------- notebook parameters
def notebook_cells(notebook: str) -> list[str]:
    cells = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def test_an_impossible_figures_dir_is_one_sentence_naming_the_parameter(tmp_path, monkeypatch):
    from pflcore.notebooks import use_preset

    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(notebook_cells("fedfa/f2_tsne")[0], namespace)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    namespace.update(output_dir=str(tmp_path / "results"), figures_dir=str(blocker / "figures"))
    with pytest.raises(ConfigError) as info:
        use_preset("fedfa/f2_tsne", "smoke", namespace, log=lambda *a: None)
    text = str(info.value)
    assert text.startswith("notebook parameter 'figures_dir'") and "not a directory" in text and "\n" not in text


def test_fedfa_f2_refuses_per_class_minus_one_before_it_trains(tmp_path, monkeypatch):
    """The notebook's cells as Jupyter runs them: the parameters, then the set-up cell, which
    refuses the value; the training cell is never reached."""
    from pflcore.papers.fedfa import check_per_class, f2_feature_views

    monkeypatch.chdir(ROOT)
    parameters, setup, *_ = notebook_cells("fedfa/f2_tsne")
    namespace: dict = {}
    exec(parameters, namespace)
    namespace.update(per_class=-1, output_dir=str(tmp_path / "results"), figures_dir=str(tmp_path / "figures"))
    with pytest.raises(ConfigError, match=r"notebook parameter 'per_class' = -1 is not allowed") as info:
        exec(setup, namespace)
    assert "\n" not in str(info.value) and not (tmp_path / "results").exists()
    for bad in (0, 2.5, True, "10"):
        with pytest.raises(ConfigError, match="per_class"):
            check_per_class(bad)
    with pytest.raises(ConfigError, match="per_class"):
        f2_feature_views(None, per_class=-1)  # refused before it looks at the run
    assert check_per_class(10) == 10


# ---------------------------------------------------------------------- pFedHN's memory
def test_pfedhn_memory_estimate_counts_the_hypernetwork(make_config, monkeypatch):
    import pflcore.config as config_module
    from pflcore.algorithms import ALGORITHMS
    from pflcore.config import _model_bytes, memory_estimate
    from pflcore.data.sources import dataset_shape

    fedavg = make_config()
    pfedhn = make_config(method="pfedhn", method_params={"hidden": 64})
    shape = dataset_shape("digits", None)
    parameters = _model_bytes(fedavg.model, shape) // 4
    extra = memory_estimate(pfedhn, shape) - memory_estimate(fedavg, shape)
    assert extra >= 4 * 65 * parameters  # at least the output layers: (hidden + 1) weights per generated one
    assert extra == ALGORITHMS["pfedhn"].server_bytes({"hidden": 64}, parameters, fedavg.num_clients)
    # a machine with room for FedAvg's run but not for the hypernetwork: refused before anything starts
    monkeypatch.setattr(config_module, "machine_memory", lambda: memory_estimate(fedavg, shape) + extra // 2)
    fedavg.replace(seed=1)
    with pytest.raises(ConfigError, match="this run needs at least") as info:
        pfedhn.replace(seed=1)
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------------- --overwrite
def test_the_command_line_names_its_overwrite_flag_and_python_its_argument(tmp_path, capsys, make_config):
    from pflcore.engine import ResultsConflictError, run

    config = tmp_path / "exp.yaml"
    config.write_text("method: fedavg\ndataset: digits\nmodel: mlp\nnum_clients: 3\nrounds: 1\nlocal_epochs: 1\n"
                      "batch_size: 16\nlr: 0.05\npartition: {kind: dominant, s: 0.2, samples_per_client: 60}\n")
    common = ["run", str(config), "--output-dir", str(tmp_path / "res"), "--name", "x", "--quiet"]
    assert main(common) == 0
    capsys.readouterr()
    assert main([*common, "--set", "lr=0.1"]) == 2
    err = capsys.readouterr().err
    assert "holds a different experiment" in err and "--overwrite" in err and "overwrite=True" not in err
    with pytest.raises(ResultsConflictError, match=r"pass overwrite=True\.$"):  # from Python: the argument
        run(make_config(output_dir=str(tmp_path / "res"), name="x", lr=0.2))


# ---------------------------------------------------------------------- Flower's failing node
RAY_REASON = ("<class 'flwr.clientapp.client_app.ClientAppException'>:<'\x1b[36mray::ClientAppActor.run()\x1b[39m "
              "(pid=4242, ip=127.0.0.1, actor_id=9f)\n  File \"/venv/flwr/client.py\", line 41, in run\n"
              "    raise ValueError(\"client 2 was told to fail\")\n\x1b[1;31mValueError\x1b[0m: client 2 was told to "
              "fail'>")


# what Flower's simulation engine records for a node that raised (the shape of str(RayTaskError), shortened)
RAY_TASK_ERROR = (
    "<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'\x1b[36mray::ClientAppActor.run()\x1b[39m (pid=1, "
    "ip=192.0.2.2, actor_id=f1)\n  File \"/work/main/pflcore/flower/app.py\", line 304, in handle\n    raise "
    "RuntimeError(f\"the node serving clients {clients} was told to fail\")\nRuntimeError: the node serving "
    "clients [2] was told to fail\n\nThe above exception was the direct cause of the following exception:\n\n"
    "\x1b[36mray::ClientAppActor.run()\x1b[39m (pid=1, ip=192.0.2.2)\n  File \"ray_actor.py\", line 65, in run\n"
    "    raise ClientAppException(str(ex)) from ex\nflwr.clientapp.client_app.ClientAppException: \nException "
    "ClientAppException occurred. Message: the node serving clients [2] was told to fail'>")


def test_a_failing_nodes_reason_is_a_readable_sentence_without_terminal_codes():
    pytest.importorskip("flwr", reason="the Flower extra is not installed")
    from pflcore.flower.app import readable_reason

    assert readable_reason(RAY_REASON) == "ValueError: client 2 was told to fail."
    assert readable_reason(RAY_TASK_ERROR) == "RuntimeError: the node serving clients [2] was told to fail."
    assert readable_reason("<class 'flwr.clientapp.client_app.ClientAppException'>:<'\nException ClientAppException "
                           "occurred. Message: out of memory'>") == "ClientAppException: out of memory."
    assert readable_reason("<class 'RuntimeError'>:<'\x1b[31mboom\x1b[0m'>") == "RuntimeError: boom."
    assert readable_reason("node crashed") == "node crashed."
    long = readable_reason("x" * 5000)
    assert len(long) <= 401 and "\x1b" not in long
