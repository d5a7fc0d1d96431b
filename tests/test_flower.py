"""pflcore on Flower: the codec, the client/node mapping and the executor (fast, no Flower
runtime), then FedAvg and FedPAC on Flower's simulation engine against the in-process
engine, a failing node, and a SuperLink with 2 SuperNodes on 127.0.0.1 (deployment engine).

Tolerance between in-process and Flower runs: each client's accuracy within one test sample
(2 points: 50 test samples per client here) and the mean within 0.5 points (one sample on
one of the 4 clients); training losses within a relative 1e-5. The nodes run the same code
with the same seed-derived generators and, by default, the same torch thread count as the
in-process engine (one thread per job when it uses worker processes), so on this machine
the numbers come out identical (measured: accuracy differences 0.0, losses equal to the
last bit). The margin is for runs where the thread counts differ (``threads=`` /
``client_cpus=``, or nodes on other machines): float32 convolutions and sums then round
differently in the last bits, which can drift over rounds and flip a borderline test
sample, but not more than that in 2-3 rounds.
"""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

flwr = pytest.importorskip("flwr", reason="the Flower extra is not installed (pip install -e .[flower])")

import pflcore  # noqa: E402
from conftest import alive, tiny_config  # noqa: E402
from pflcore import ExperimentConfig  # noqa: E402
from pflcore.algorithms import ALGORITHMS  # noqa: E402
from pflcore.engine.jobs import COLLECT, EVALUATE, TRAIN, ClientJob  # noqa: E402
from pflcore.engine.simulation import Simulation, build_data  # noqa: E402
from pflcore.flower import (ClientsFailed, CodecError, GridExecutor, assign_clients, decode, encode,  # noqa: E402
                            simulate)
from pflcore.flower.app import handle  # noqa: E402

pytestmark = pytest.mark.flower

FMNIST = Path("/usr/share/datasets/fashion-mnist")
ACC_TOL = 0.5  # percentage points of mean accuracy: one test sample of one client (module docstring)


def fmnist_config(out: Path, **changes) -> ExperimentConfig:
    if not (FMNIST / "train-images-idx3-ubyte.gz").exists():
        pytest.skip(f"Fashion-MNIST is not installed in {FMNIST}")
    values = dict(method="fedavg", dataset="fmnist", num_clients=4, rounds=3, local_epochs=1, lr=0.05,
                  partition={"kind": "dominant", "s": 0.2, "samples_per_client": 100}, seed=3, quiet=True,
                  output_dir=str(out))
    values.update(changes)
    return ExperimentConfig.from_dict(values)


def roundtrip(value, prefix="x"):
    from flwr.app import RecordDict

    return decode(RecordDict(encode(value, prefix)), prefix)


def assert_same(a, b, path="value"):
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, path
        assert torch.equal(a, b) or (a.is_floating_point() and torch.equal(a.isnan(), b.isnan())
                                     and torch.equal(a.nan_to_num(), b.nan_to_num())), path
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), path
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), path
    else:
        assert a == b, path


# ====================================================================== codec
def test_codec_roundtrip_exact_for_every_supported_type():
    value = {
        "body": {"conv.weight": torch.randn(4, 3, 5, 5).contiguous(memory_format=torch.channels_last),
                 "bn.num_batches_tracked": torch.tensor(7)},
        "heads": {0: {"w": torch.randn(10, 8)}, 17: {"w": torch.randn(10, 8)}},  # int keys
        "has_centroid": torch.tensor([True, False, True]),
        "ids": torch.tensor([3, 1, 2], dtype=torch.long),
        "half": torch.randn(3).to(torch.bfloat16), "f16": torch.randn(2, 2).half(), "f64": torch.randn(2).double(),
        "empty": torch.zeros(0, 5), "scalar_t": torch.tensor(2.5),
        "np": np.arange(6, dtype=np.int32).reshape(2, 3), "np_f32": np.float32(1.25), "np_f64": np.float64(0.1),
        "np_bool": np.bool_(True), "np_i64": np.int64(-3),
        "loss": 0.1 + 0.2, "nan": float("nan"), "inf": float("-inf"), "n": 600, "big": 2 ** 70, "flag": False,
        "name": "fedpac/ü", "raw": b"\x00\xff", "none": None, "list": [1, 2.0, "three", [torch.ones(2)]],
        "tuple": (1, "a"), "": {}, "a/b": 1, "a": {"b": 2},  # path-like keys must not collide
    }
    back = roundtrip(value)
    assert_same(value, back)
    assert list(back["heads"]) == [0, 17] and all(isinstance(k, int) for k in back["heads"])


def test_codec_roundtrips_real_fedpac_payload_update_and_state(tmp_path):
    config = fmnist_config(tmp_path, method="fedpac", rounds=1)
    sim = Simulation(config, build_data(config))
    payload = sim.algorithm.payload(sim.state, 2)
    assert_same(payload, roundtrip(payload))
    result = sim.worker.run(ClientJob(TRAIN, 2, 0, payload, {}))
    assert_same(result.output, roundtrip(result.output))
    for value in ({}, [], 0, "x", None, torch.ones(3)):  # any top-level value
        assert_same(value, roundtrip(value))


@pytest.mark.parametrize("method", sorted(ALGORITHMS))
def test_codec_roundtrips_every_methods_messages_exactly(tmp_path, method):
    """Every registered method's payloads (each purpose), updates, statistics and states
    cross Flower exactly."""
    config = tiny_config(tmp_path, method=method, rounds=2)
    sim = Simulation(config, build_data(config))
    for r in range(2):  # the second round sees personal states and a trained server state
        for cid in range(config.num_clients):
            for purpose in (TRAIN, EVALUATE, COLLECT):
                payload = sim.algorithm.payload(sim.state, cid, purpose)
                assert_same(payload, roundtrip(payload))
            state = sim.client_states.get(cid, {})
            assert_same(state, roundtrip(state))
            result = sim.worker.run(ClientJob(TRAIN, cid, r, sim.algorithm.payload(sim.state, cid, TRAIN),
                                              dict(state)))
            assert_same(result.output, roundtrip(result.output))
            assert_same(result.state, roundtrip(result.state))
        if sim.algorithm.collects(r, config.rounds):
            out = sim.worker.run(ClientJob(COLLECT, 0, r, sim.algorithm.payload(sim.state, 0, COLLECT), {}))
            assert_same(out.output, roundtrip(out.output))
        sim.run_round(r)


def test_codec_rejects_what_it_cannot_carry_naming_the_path():
    with pytest.raises(CodecError, match="body/w"):
        encode({"body": {"w": object()}}, "p")
    with pytest.raises(CodecError, match="dict keys"):
        encode({"m": {(1, 2): 3}}, "p")
    with pytest.raises(CodecError, match="no encoded value"):
        decode({}, "p")


# ====================================================================== mapping and executor
def test_assign_clients_by_partition_id():
    # N == num_clients: client c on the node whose partition-id is c.
    assert assign_clients({50: 1, 40: 0, 70: 3, 60: 2}, 4) == {0: 40, 1: 50, 2: 60, 3: 70}
    # N < num_clients: node of partition p serves clients p, p + N, ...
    assert assign_clients({9: 1, 8: 0}, 5) == {0: 8, 1: 9, 2: 8, 3: 9, 4: 8}
    # nodes without a partition-id come last, by node id
    assert assign_clients({5: None, 7: 0, 3: None}, 3) == {0: 7, 1: 3, 2: 5}
    with pytest.raises(RuntimeError, match="no Flower node"):
        assign_clients({}, 3)


class FakeGrid:
    """A Grid that hands each message to the pflcore client handler in this process
    (node ``drop`` never answers, node ``crash`` sends Flower's error reply)."""

    def __init__(self, nodes, drop=None, crash=None):
        self.nodes, self.drop, self.crash = nodes, drop, crash
        self.sent = []

    def get_node_ids(self):
        return list(self.nodes)

    def send_and_receive(self, messages, *, timeout=None):
        from flwr.app import Context, Error, Message, RecordDict

        replies = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            node = msg.metadata.dst_node_id
            self.sent.append(msg)
            if node == self.drop:
                continue
            if node == self.crash:
                reply = Message(Error(code=1, reason="node crashed"), reply_to=msg)
            else:
                ctx = Context(run_id=1, node_id=node, node_config={"partition-id": self.nodes[node]},
                              state=RecordDict(), run_config={})
                try:
                    reply = handle(msg, ctx)
                except Exception as exc:  # what Flower's runtime does with a raising ClientApp
                    reply = Message(Error(code=2, reason=repr(exc)), reply_to=msg)
            reply.metadata.__dict__["_reply_to_message_id"] = msg.metadata.message_id
            replies.append(reply)
        return replies


@pytest.fixture
def task_identity(monkeypatch):
    """Flower's Message constructor reads the process's task identity, set by its runtimes."""
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_task_id", 1), ("_run_id", 1), ("_node_id", 0)):
        monkeypatch.setattr(TaskIdentity, name, value)


def test_grid_executor_matches_worker_and_reports_lost_nodes(tmp_path, task_identity):
    config = fmnist_config(tmp_path, method="fedpac", rounds=1)
    sim = Simulation(config, build_data(config))
    jobs = [ClientJob(TRAIN, c, 0, sim.algorithm.payload(sim.state, c), {}) for c in range(4)]
    expected = [sim.worker.run(ClientJob(j.kind, j.client_id, j.round, j.payload, {})) for j in jobs]

    grid = FakeGrid({10: 0, 11: 1})
    executor = GridExecutor(grid, config, {0: 10, 1: 11, 2: 10, 3: 11})
    results = executor.run(jobs)
    assert len(grid.sent) == 2  # one message per node, two clients in each
    for got, want in zip(results, expected):
        assert not got.failed
        assert_same(want.output, got.output)
    evaluated = executor.run([ClientJob(EVALUATE, c, 0, jobs[c].payload, {}) for c in range(4)])
    assert all(isinstance(r.output, int) for r in evaluated)

    lost = GridExecutor(FakeGrid({10: 0, 11: 1}, drop=11), config, {0: 10, 1: 11, 2: 10, 3: 11}, timeout=0.1)
    results = lost.run(jobs)
    assert [r.failed for r in results] == [False, True, False, True]
    assert "no reply within 0.1 s" in results[1].error and results[1].state is jobs[1].state
    crashed = GridExecutor(FakeGrid({10: 0, 11: 1}, crash=10), config, {0: 10, 1: 11, 2: 10, 3: 11})
    assert [r.failed for r in crashed.run(jobs)] == [True, False, True, False]
    assert "node crashed" in crashed.log[-1]["jobs"][0]["error"]
    # one job that raises on its node fails alone; if every job raises, the run stops
    told = GridExecutor(FakeGrid({10: 0, 11: 1, 12: 2, 13: 3}), config, {0: 10, 1: 11, 2: 12, 3: 13},
                        fail_clients={1})
    assert [r.failed for r in told.run(jobs)] == [False, True, False, False]
    broken = [ClientJob(TRAIN, c, 0, {k: v for k, v in j.payload.items() if c != 2 or k != "head"}, {})
              for c, j in enumerate(jobs)]  # client 2's job raises KeyError on the node that also serves 0
    results = GridExecutor(FakeGrid({10: 0, 11: 1}), config, {0: 10, 1: 11, 2: 10, 3: 11}).run(broken)
    assert [r.failed for r in results] == [False, False, True, False] and "KeyError" in results[2].error
    everyone = GridExecutor(FakeGrid({10: 0}), config, dict.fromkeys(range(4), 10), fail_clients={0})
    with pytest.raises(ClientsFailed, match="every client job"):
        everyone.run(jobs)


def test_simulate_rejects_bad_arguments_before_any_work(tmp_path):
    config = fmnist_config(tmp_path)
    with pytest.raises(ValueError, match="num_supernodes"):
        simulate(config, num_supernodes=0)
    with pytest.raises(ValueError, match="timeout"):
        simulate(config, timeout=-1)
    with pytest.raises(ValueError, match="fail_clients"):
        simulate(config, fail_clients=[9])
    with pytest.raises(pflcore.ConfigError, match="rounds"):
        simulate({**config.to_dict(), "rounds": 0})
    from pflcore.flower.deploy import deploy, main

    with pytest.raises(ValueError, match="supernodes"):
        deploy(config, supernodes=0, workdir=tmp_path / "work")
    assert main(["--config", str(tmp_path / "missing.yaml")]) == 2  # one line on stderr (tests/test_bad_inputs.py)
    with pytest.raises(pflcore.ConfigError, match="missing.yaml' does not exist"):
        main(["--config", str(tmp_path / "missing.yaml"), "--debug"])
    assert not (tmp_path / config.run_name()).exists() and not (tmp_path / "work").exists()


def test_import_pflcore_does_not_import_flower_and_flower_stays_offline():
    code = "import sys, pflcore, pflcore.engine; assert 'flwr' not in sys.modules and 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    code = ("import os; os.environ['FLWR_TELEMETRY_ENABLED'] = '1'; import pflcore.flower, flwr.supercore.telemetry as t; "
            "assert t.FLWR_TELEMETRY_ENABLED == '0' and os.environ['FLWR_DISABLE_UPDATE_CHECK'] == '1' and "
            "os.environ['RAY_USAGE_STATS_ENABLED'] == '0' and "
            "os.environ['FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION'] == '1' and os.environ['FLWR_HOME']")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    code = "import sys; sys.modules['flwr'] = None; import pflcore.flower"  # as if the extra were missing
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "pip install -e .[flower]" in out.stderr


# ====================================================================== simulation engine
def run_both(tmp_path: Path, method: str, **changes):
    config = fmnist_config(tmp_path / "inprocess", method=method, **changes)
    here = pflcore.run(config)
    flower = simulate(config.replace(output_dir=str(tmp_path / "flower")))
    return here, flower


def assert_agree(here, flower):
    assert flower.path != here.path and flower.path.name == here.path.name
    assert sorted(p.relative_to(flower.path).as_posix() for p in flower.path.rglob("*")) == \
        sorted(p.relative_to(here.path).as_posix() for p in here.path.rglob("*"))
    assert abs(flower.summary["acc_mean"] - here.summary["acc_mean"]) <= ACC_TOL
    with np.load(here.path / "clients.npz") as z:
        test_sizes = z["test_sizes"]
    flips = np.abs(flower.acc_history - here.acc_history) / 100 * test_sizes  # percent, in test samples
    assert np.array_equal(np.isnan(flower.acc_history), np.isnan(here.acc_history))  # NaN: a new client
    assert np.nanmax(flips) <= 1 + 1e-9, flips
    for a, b in zip(here.history, flower.history):
        assert a["participants"] == b["participants"] and "failed" not in b
        assert math.isclose(a["train_loss"], b["train_loss"], rel_tol=1e-5) or \
            (math.isnan(a["train_loss"]) and math.isnan(b["train_loss"]))  # NaN: a round nobody joined
    loaded = pflcore.engine.RunResult.load(flower.path)
    assert np.array_equal(loaded.acc_history, flower.acc_history, equal_nan=True)


@pytest.mark.slow
def test_fedavg_on_flower_simulation_matches_in_process(tmp_path):
    here, flower = run_both(tmp_path, "fedavg")
    assert_agree(here, flower)
    info = flower.extras["flower"]
    assert sorted(info["nodes"].values()) == [0, 1, 2, 3]  # one node per client, partition-id = client id
    assert {int(c): info["nodes"][str(n)] for c, n in info["clients"].items()} == {0: 0, 1: 1, 2: 2, 3: 3}


@pytest.mark.slow
def test_fedpac_on_flower_simulation_matches_in_process_with_personal_heads(tmp_path):
    here, flower = run_both(tmp_path, "fedpac")
    assert_agree(here, flower)
    exchanges = flower.extras["flower"]["exchanges"]
    assert [e["kind"] for e in exchanges] == [TRAIN, EVALUATE] * 3  # personalised evaluation on the nodes
    second = next(e for e in exchanges if e["round"] == 2 and e["kind"] == TRAIN)
    bodies = {j["payload"]["body"] for j in second["jobs"]}
    heads = {j["payload"]["head"] for j in second["jobs"]}
    assert len(bodies) == 1 and len(heads) == 4  # shared body, each client its own head
    assert len({j["node"] for j in second["jobs"]}) == 4
    weights = flower.arrays("weights")
    assert set(weights) == {1, 2, 3} and all(np.allclose(w, here.arrays("weights")[r]) for r, w in weights.items())


@pytest.mark.slow
def test_ccvr_collect_phase_runs_on_the_nodes_and_matches_in_process(tmp_path):
    """A method's collect phase travels as QUERY messages and gives the in-process numbers."""
    here, flower = run_both(tmp_path, "ccvr")
    assert_agree(here, flower)
    kinds = [e["kind"] for e in flower.extras["flower"]["exchanges"]]
    assert kinds.count(COLLECT) == 1 and kinds.index(COLLECT) == len(kinds) - 1  # after the last round only
    assert [h["calibrated"] for h in flower.history] == [0, 0, 1]


@pytest.mark.slow
def test_failing_node_is_recorded_and_rounds_go_on(tmp_path):
    config = fmnist_config(tmp_path, rounds=2)
    seen = []
    result = simulate(config, fail_clients={2}, on_round_end=lambda r, record: seen.append(r))
    assert seen == [1, 2]
    for record in result.history:
        assert list(record["failed"]) == ["2"] and "told to fail" in record["failed"]["2"]
        assert record["participants"] == [0, 1, 2, 3] and not record.get("skipped")
        assert math.isfinite(record["train_loss"])
    assert result.summary["status"] == "finished" and len(result.history) == 2


# ====================================================================== deployment engine
NEW_USER_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # a user who runs .venv/bin/python without activating the venv
FLOWER_COMMANDS = ("flower-superlink", "flower-supernode", "flwr",  # started by pflcore
                   "flower-superexec", "flwr-serverapp", "flwr-clientapp")  # started by Flower, by name


def test_deployment_takes_flower_commands_from_beside_the_interpreter_never_from_path(tmp_path, monkeypatch):
    from pflcore.flower import deploy

    decoys = tmp_path / "decoys"
    decoys.mkdir()
    for name in FLOWER_COMMANDS:
        (decoys / name).write_text("#!/bin/sh\nexit 3\n")
        (decoys / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{decoys}{os.pathsep}{NEW_USER_PATH}")
    here = Path(sys.executable).parent  # the venv's bin, not where its python link resolves to
    env = deploy._environment(tmp_path / "home")
    assert env["PATH"].split(os.pathsep)[0] == str(here)
    for name in FLOWER_COMMANDS:  # what every process the deployment starts will find
        assert shutil.which(name, path=env["PATH"]) == str(here / name)
        assert deploy._tool(name) == str(here / name)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bare" / "bin" / "python"))
    with pytest.raises(FileNotFoundError, match=r"not installed beside .*pip install -e \.\[flower\]"):
        deploy._tool("flower-superlink")


@pytest.mark.slow
def test_deployment_superlink_and_two_supernodes_on_a_new_users_path(tmp_path, monkeypatch):
    """A real deployment (a SuperLink and two SuperNodes) started as the README's
    `.venv/bin/python -m pytest` starts it: the venv's bin is not on PATH. (Flower's commands
    always come from this Python's folder, so an activated venv changes nothing; one
    deployment test is enough.)"""
    from pflcore.flower.deploy import deploy

    monkeypatch.setenv("PATH", NEW_USER_PATH)
    config = fmnist_config(tmp_path / "results", rounds=2)
    here = pflcore.run(config.replace(output_dir=str(tmp_path / "inprocess")))
    result = deploy(config, supernodes=2, workdir=tmp_path / "work", timeout=180, run_timeout=420)
    info = result.extras["flower"]
    try:
        assert result.summary["status"] == "finished" and result.path.parent == tmp_path / "results"
        assert sorted(info["nodes"].values()) == [0, 1]
        assert {int(c): info["nodes"][str(n)] for c, n in info["clients"].items()} == {0: 0, 1: 1, 2: 0, 3: 1}
        assert abs(result.summary["acc_mean"] - here.summary["acc_mean"]) <= ACC_TOL
        assert all("failed" not in h for h in result.history)
    finally:
        running = [pid for pid in info.get("stopped_pids", []) if alive(pid)]
        assert not running, f"processes left running: {running}"


def test_codec_carries_the_feature_probe(tmp_path):
    """A train job's output with the feature probe's measurements crosses Flower exactly."""
    config = tiny_config(tmp_path, method="fedavg", rounds=1, feature_probe=2)
    sim = Simulation(config, build_data(config))
    result = sim.worker.run(ClientJob(TRAIN, 1, 0, sim.algorithm.payload(sim.state, 1, TRAIN), {}))
    assert "_feature_probe" in result.output
    assert_same(result.output, roundtrip(result.output))


@pytest.mark.slow
def test_new_clients_adapt_on_the_nodes_and_match_in_process(tmp_path):
    """pFedFDA's new clients (config new_clients): their adapt-and-score jobs travel as
    EVALUATE messages after the last round and give the in-process numbers."""
    here, flower = run_both(tmp_path, "pfedfda", num_clients=6, new_clients=0.5, sampling="bernoulli",
                            participation=0.5, full_last_round=True)
    assert_agree(here, flower)
    kinds = [e["kind"] for e in flower.extras["flower"]["exchanges"]]
    assert kinds[-1] == "adapt" and kinds.count("adapt") == 1
    assert abs(flower.summary["new_acc_mean"] - here.summary["new_acc_mean"]) <= ACC_TOL
