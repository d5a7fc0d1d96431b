"""Executors: worker processes give exactly the in-process numbers; failures are reported."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import torch

from conftest import alive
from pflcore.algorithms import ALGORITHMS
from pflcore.config import ConfigError
from pflcore.engine import Simulation, build_data
from pflcore.engine import executors
from pflcore.engine.executors import (InProcess, WorkerError, WorkerPool, _pack, _split, _unpack, available_cores,
                                      job_costs, resolve_workers)
from pflcore.engine.jobs import EVALUATE, TRAIN, ClientJob, ClientResult
from pflcore.engine.simulation import run



@pytest.mark.parametrize("method", sorted(ALGORITHMS))
def test_two_workers_give_exactly_the_in_process_numbers(make_config, one_thread, method):
    """Every registered method: a method that kept state anywhere but the server state and
    the clients' states would give other numbers in worker processes."""
    here = run(make_config(method=method, workers=0, name="here"))
    pooled = run(make_config(method=method, workers=2, name="pooled"))
    assert np.array_equal(here.acc_history, pooled.acc_history)
    assert [h["train_loss"] for h in here.history] == [h["train_loss"] for h in pooled.history]


def test_workers_are_not_part_of_the_run_identity(make_config):
    assert make_config(workers=0).fingerprint() == make_config(workers=2).fingerprint()
    assert make_config(precision="bfloat16").fingerprint() != make_config().fingerprint()
    assert make_config(precision=None).fingerprint() == make_config().fingerprint()


def test_split_keeps_order_and_balances_cost():
    jobs = [ClientJob(TRAIN, c, 0, {}) for c in range(7)]
    groups = _split(jobs, [10, 10, 10, 10, 10, 10, 40], 2)
    assert [j.client_id for g in groups for j in g] == list(range(7))  # every job once, in order
    assert [sum(10 if j.client_id < 6 else 40 for j in g) for g in groups] == [50, 50]
    assert [j.client_id for g in _split(jobs[:1], [5], 3) for j in g] == [0]


def test_training_balances_on_train_samples_and_evaluation_on_test_samples():
    """A client's evaluation costs its test samples, not its training ones: FedCP's MNIST
    clients hold 125-1,548 test samples, and a cut by job count left one worker 1.7 times
    the other's evaluation."""
    sizes = {"train": [100] * 6, "test": [300, 300, 10, 10, 10, 10]}
    train = [ClientJob(TRAIN, c, 0, {}) for c in range(6)]
    evaluate = [ClientJob(EVALUATE, c, 0, {}) for c in range(6)]
    assert job_costs(train, sizes) == [101] * 6 and job_costs(evaluate, sizes) == [301, 301, 11, 11, 11, 11]
    assert [[j.client_id for j in g] for g in _split(train, job_costs(train, sizes), 2)] == [[0, 1, 2], [3, 4, 5]]
    assert [[j.client_id for j in g] for g in _split(evaluate, job_costs(evaluate, sizes), 2)] == [[0], [1, 2, 3, 4, 5]]


def test_client_data_goes_to_the_workers_without_a_copy(make_config):
    data = build_data(make_config())
    pairs = [(s.x, s.y) for s in data.train]
    packed = _pack(pairs)
    assert packed["x"].data_ptr() == data.train_x.data_ptr()  # the same storage, now shared
    assert packed["x"].is_shared() and data.train[0].x.is_shared()
    assert all(torch.equal(a, x) and torch.equal(b, y) for (a, b), (x, y) in zip(_unpack(packed), pairs))
    # tensors that are not consecutive views of one tensor are concatenated instead
    loose = [(x.clone(), y.clone()) for x, y in reversed(pairs)]
    assert all(torch.equal(a, x) and torch.equal(b, y) for (a, b), (x, y) in zip(_unpack(_pack(loose)), loose))


def test_evaluation_never_changes_personal_state(make_config):
    cfg = make_config(method="local")
    sim = Simulation(cfg, build_data(cfg))
    sim.run_round(0)
    before = {k: v.clone() for k, v in sim.client_states[0]["model"].items()}
    job = ClientJob(EVALUATE, 0, 0, sim.algorithm.payload(sim.state, 0), sim.client_states[0])
    result = sim.executor.run([job])[0]
    assert 0 <= result.output <= len(sim.data.test[0])
    assert all(torch.equal(before[k], v) for k, v in sim.client_states[0]["model"].items())


def test_a_failing_client_is_left_out_and_recorded(make_config):
    cfg = make_config(method="fedavg", rounds=1)
    sim = Simulation(cfg, build_data(cfg))

    class FailsClientOne(InProcess):
        def run(self, jobs):
            return [ClientResult(None, j.state, error="timed out") if j.client_id == 1 else self.worker.run(j)
                    for j in jobs]

    sim.executor = FailsClientOne(sim.worker)
    alone = Simulation(cfg, sim.data)
    record = sim.run_round(0)
    assert record["failed"] == {"1": "timed out"}
    # The aggregate is FedAvg over the three clients that answered.
    updates = {c: alone.worker.run(ClientJob(TRAIN, c, 0, alone.algorithm.payload(alone.state, c))).output
               for c in (0, 2, 3)}
    expected = alone.algorithm.aggregate(alone.state, updates, alone.server_context(0))["model"]
    assert all(torch.equal(expected[k], sim.state["model"][k]) for k in expected)


def test_a_worker_exception_surfaces_with_its_traceback_and_the_pool_recovers(make_config):
    cfg = make_config(method="fedavg", rounds=1)
    sim = Simulation(cfg, build_data(cfg))
    sim.executor = WorkerPool(sim.worker, 2)  # not use_workers: that runs in-process on a 1-core machine
    try:
        bad = ClientJob(TRAIN, 0, 0, {"model": {"not a weight": torch.zeros(1)}})
        with pytest.raises(WorkerError, match="Traceback"):
            sim.executor.run([bad])
        sim.run_round(0)  # a fresh pool takes over
    finally:
        sim.close()


def test_a_method_class_from_main_is_refused_before_any_work(make_config):
    cfg = make_config(method="fedavg")
    sim = Simulation(cfg, build_data(cfg))
    sim.algorithm.__class__ = type("NotebookMethod", (type(sim.algorithm),), {"__module__": "__main__"})
    with pytest.raises(ValueError, match="__main__"):
        WorkerPool(sim.worker, 2)


@pytest.mark.parametrize("changes, field", [({"workers": -1}, "workers"), ({"workers": "many"}, "workers"),
                                            ({"precision": "float16"}, "precision")])
def test_bad_execution_settings_get_one_sentence(make_config, changes, field):
    with pytest.raises(ConfigError, match=field):
        make_config(**changes)


def test_bfloat16_local_training_learns(make_config):
    fp32 = run(make_config(name="fp32", rounds=3))
    bf16 = run(make_config(name="bf16", rounds=3, precision="bfloat16"))
    assert np.isfinite(bf16.summary["final_train_loss"])
    assert bf16.summary["final_train_loss"] != fp32.summary["final_train_loss"]  # it did change the arithmetic
    assert abs(bf16.summary["acc_mean"] - fp32.summary["acc_mean"]) < 10


# ---------------------------------------------------------------------- machine limits
def test_an_explicit_worker_count_is_cut_to_the_cores_and_the_clients():
    cap = min(4, available_cores())
    with pytest.warns(UserWarning, match=rf"workers = 1000 was cut to {cap}: one worker process per core and "
                                         rf"per client at most"):
        assert resolve_workers(1000, num_clients=4) == cap
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a request that fits is taken as it is, silently
        assert resolve_workers(1, num_clients=4) == 1 and resolve_workers(0, num_clients=4) == 0


def test_a_run_asking_for_1000_workers_starts_at_most_one_per_core(make_config, monkeypatch):
    cores = available_cores()
    started = []

    def guarded(num_workers):  # refuses before spawning anything, so the old code fails safely
        assert num_workers <= cores, f"{num_workers} worker processes requested on {cores} cores"
        started.append(num_workers)
        return real(num_workers)

    real = executors._Processes
    monkeypatch.setattr(executors, "_Processes", guarded)
    executors.shutdown_workers()
    with pytest.warns(UserWarning, match="workers = 1000 was cut"):
        result = run(make_config(workers=1000, rounds=1))
    assert result.summary["status"] == "finished"
    assert all(n <= min(4, cores) for n in started)
    assert sum(len(p.processes) for p in executors._PROCESSES.values()) <= cores


SLOW_METHOD = '''
import os, time
from pathlib import Path
from pflcore.algorithms.fedavg import FedAvg

class SlowFedAvg(FedAvg):
    def local_update(self, payload, client):
        Path(os.environ["PFLCORE_TEST_BUSY"], str(os.getpid())).touch()
        time.sleep(300)  # busy when the parent dies: no closed pipe will wake this worker
        return super().local_update(payload, client)
'''

PARENT = '''
import sys, threading
from pathlib import Path
from slow_method import SlowFedAvg
from pflcore.config import ExperimentConfig
from pflcore.engine import Simulation, build_data, executors
from pflcore.engine.executors import WorkerPool
from pflcore.engine.jobs import EVALUATE, TRAIN, ClientJob

out, mode = Path(sys.argv[1]), sys.argv[2]
cfg = ExperimentConfig.from_dict(dict(method="fedavg", dataset="digits", model="mlp", num_clients=4, rounds=1,
                                      batch_size=16, partition={"kind": "dominant", "s": 0.2, "samples_per_client": 80},
                                      output_dir=str(out / "results"), quiet=True, seed=7, workers=0))
sim = Simulation(cfg, build_data(cfg))
sim.worker.algorithm = SlowFedAvg(**sim.algorithm.params)
pools = []


def start():
    pools.append(WorkerPool(sim.worker, 2))
    # Both workers answer before this thread ends: each is fully started while it lives.
    pools[0].run([ClientJob(EVALUATE, c, 0, sim.algorithm.payload(sim.state, c)) for c in (0, 1)])


if mode == "thread":  # the workers must outlive the thread that started them, not the process
    starter = threading.Thread(target=start)
    starter.start()
    starter.join()
else:
    start()
(out / "pids").write_text(" ".join(str(p.pid) for p in executors._PROCESSES[2].processes))
pools[0].run([ClientJob(TRAIN, c, 0, sim.algorithm.payload(sim.state, c)) for c in range(4)])
'''


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["main", "thread"])
def test_busy_workers_exit_when_their_parent_is_killed(tmp_path, mode):
    (tmp_path / "slow_method.py").write_text(SLOW_METHOD)
    (tmp_path / "parent.py").write_text(PARENT)
    busy = tmp_path / "busy"
    busy.mkdir()
    env = {**os.environ, "PFLCORE_TEST_BUSY": str(busy),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    pids: list[int] = []
    with open(tmp_path / "parent.log", "wb") as log:
        parent = subprocess.Popen([sys.executable, str(tmp_path / "parent.py"), str(tmp_path), mode], env=env,
                                  stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and parent.poll() is None and len(list(busy.iterdir())) < 2:
            time.sleep(0.2)
        if (tmp_path / "pids").exists():
            pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
        assert parent.poll() is None and sorted(int(p.name) for p in busy.iterdir()) == sorted(pids), \
            f"the workers never got busy:\n{(tmp_path / 'parent.log').read_text()}"
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(alive(pid) for pid in pids):
            time.sleep(0.1)
        assert not [pid for pid in pids if alive(pid)], "worker processes outlived their killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)

