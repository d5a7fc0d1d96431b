"""Shared fixtures: a tiny real federation (scikit-learn digits, 4 clients, an MLP) that
trains in well under a second per round."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from pflcore.config import ExperimentConfig

#: The FedCP authors' MNIST partition, in ``../shared`` beside the project (as the README and CI have it).
FEDCP_MNIST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mnist-fedcp-dir0.1"
needs_fedcp_mnist = pytest.mark.skipif(not (FEDCP_MNIST / "config.json").is_file(),
                                       reason=f"{FEDCP_MNIST} is not present")


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
