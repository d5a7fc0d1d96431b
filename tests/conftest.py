"""Shared fixtures: a tiny real federation (scikit-learn digits, 4 clients, an MLP) that
trains in well under a second per round."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

# One thread per test process and per process it starts (papermill kernels, Lab, CLI runs): on a
# busy machine several threads only contend (FedAvg's resume test: 24.8 s with two, 7.8 s with one),
# and worker processes use one each anyway. A test that measures threading sets its own.
for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from pflcore.config import ExperimentConfig  # noqa: E402
from pflcore.engine import run  # noqa: E402

torch.set_num_threads(1)

#: The FedCP authors' MNIST partition, in ``../shared`` beside the project (as the README and CI have it).
FEDCP_MNIST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mnist-fedcp-dir0.1"
needs_fedcp_mnist = pytest.mark.skipif(not (FEDCP_MNIST / "config.json").is_file(),
                                       reason=f"{FEDCP_MNIST} is not present")


# Hypothesis (tests/test_fuzz.py): profile "ci", a small, fixed set of examples, by default and
# under CI; "local" (HYPOTHESIS_PROFILE=local), many random ones. Each example has a deadline;
# every failure either profile finds is kept in test_fuzz.py as an explicit @example.
try:
    from datetime import timedelta

    from hypothesis import HealthCheck
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # the test extra is not installed: test_fuzz.py skips itself
    pass
else:
    _slow_ok = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]
    _hypothesis_settings.register_profile("ci", max_examples=200, derandomize=True, database=None,
                                          deadline=timedelta(seconds=30), suppress_health_check=_slow_ok,
                                          print_blob=True)
    _hypothesis_settings.register_profile("local", max_examples=1000, deadline=timedelta(seconds=30),
                                          suppress_health_check=_slow_ok, print_blob=True)
    _hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or "ci")


def tiny_config(tmp_path, **changes) -> ExperimentConfig:
    """Digits, 4 clients x 80 samples (dominant-class partition), MLP, 3 rounds, in-process
    (tests/test_executors.py covers the worker processes)."""
    values = dict(
        method="fedavg", dataset="digits", model="mlp", num_clients=4, rounds=3, local_epochs=1,
        batch_size=16, lr=0.05, partition={"kind": "dominant", "s": 0.2, "samples_per_client": 80},
        output_dir=str(tmp_path / "results"), quiet=True, seed=7, workers=0,
    )
    values.update(changes)
    return ExperimentConfig.from_dict(values)


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """An empty pflcore project (notebooks/ and params/) as the working directory, training not forced."""
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "params").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PFLCORE_TRAIN", raising=False)
    return tmp_path


@pytest.fixture
def make_config(tmp_path):
    return lambda **changes: tiny_config(tmp_path, **changes)


@pytest.fixture
def iso(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Dataset loading isolated from the machine: no PFL_DATA, the cache in tmp, no system
    folders, no network, nothing cached in memory."""
    from pflcore.data import sources

    monkeypatch.delenv("PFL_DATA", raising=False)
    monkeypatch.setattr(sources, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(sources, "SYSTEM_DIRS", {})

    def no_network(url: str, known_hash: str, dest: Path) -> Path:
        raise ConnectionError("network disabled in tests")

    monkeypatch.setattr(sources, "_fetch", no_network)
    sources.clear_cache()
    yield tmp_path
    sources.clear_cache()


def alive(pid: int) -> bool:
    """A live process, not a zombie waiting for its new parent to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] not in "ZX"


def advance(sim, rounds: int):
    """Run rounds 0 .. rounds-1 of a Simulation; returns it."""
    for r in range(rounds):
        sim.run_round(r)
    return sim


def strip(history: list[dict]) -> list[dict]:
    """A run's per-round records without their timings (which differ between runs)."""
    return [{k: v for k, v in h.items() if k != "seconds"} for h in history]


class Killed(Exception):
    """What :func:`run_killed_after` stops a run with: an exception from its round hook, as a kill would."""


def run_killed_after(config, round_number: int | None = None) -> None:
    """Run ``config`` and stop it after round ``round_number`` (None: after the first round
    it finishes) the way a kill would, leaving whatever it had checkpointed."""
    def kill(done: int, record: dict) -> None:
        if round_number is None or done == round_number:
            raise Killed

    with pytest.raises(Killed):
        run(config, on_round_end=kill)


@pytest.fixture
def own_core() -> Iterator[None]:
    """When pytest-xdist runs a test process on every core, the processes this test starts (a
    notebook's kernel and whatever it starts) run on this test process's own core. pflcore
    counts the cores in the CPU affinity, so ``workers: "auto"`` then trains in the kernel, with
    one torch thread: bit for bit the numbers of worker processes (tests/test_executors.py),
    without starting two worker processes per notebook on cores the other test processes use."""
    processes = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if not hasattr(os, "sched_setaffinity") or processes < len(os.sched_getaffinity(0)):
        yield
        return
    saved = os.sched_getaffinity(0)
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    os.sched_setaffinity(0, {sorted(saved)[index % len(saved)]})
    try:
        yield
    finally:
        os.sched_setaffinity(0, saved)


@pytest.fixture
def one_thread():
    """In-process runs with one thread, like each worker, so float results can match bit for bit."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def states_equal(a: dict, b: dict) -> bool:
    """Two state dicts with the same keys and bit-identical tensors."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def noisy(model: dict, scale: float, seed: int) -> dict:
    """A state dict with seeded Gaussian noise of ``scale`` on its float tensors."""
    g = torch.Generator().manual_seed(seed)
    return {k: v + scale * torch.randn(v.shape, generator=g) if v.is_floating_point() else v
            for k, v in model.items()}


def assert_workers_give_the_in_process_numbers(make_config, method: str, params: dict) -> None:
    """A method variant in two worker processes gives the in-process numbers bit for bit."""
    from pflcore.engine import run

    saved = torch.get_num_threads()
    torch.set_num_threads(1)  # like each worker, so float results can match bit for bit
    try:
        here = run(make_config(method=method, method_params=params, workers=0, name="here"))
        pooled = run(make_config(method=method, method_params=params, workers=2, name="pooled"))
    finally:
        torch.set_num_threads(saved)
    assert (here.acc_history == pooled.acc_history).all()
    assert strip(here.history) == strip(pooled.history)



def pytest_terminal_summary(terminalreporter) -> None:
    """One line where the pinned-number tests ran on a numeric path without exact pins (they
    then checked the runs within tolerance of the pinned path's metrics instead)."""
    ran = any("test_method_numbers_are_pinned" in getattr(report, "nodeid", "")
              for reports in terminalreporter.stats.values() for report in reports)
    if not ran:
        return
    from test_pinned_numbers import pinless_summary

    line = pinless_summary()
    if line:
        terminalreporter.write_line(line)
