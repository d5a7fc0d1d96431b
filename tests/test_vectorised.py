"""The vectorised executor against the sequential one, on the CPU, for every covered method.

Not bit for bit: the stacked step sums in another order (vmap turns a convolution over K
clients into one grouped convolution and a linear layer into a batched product), so float32
weights differ by rounding, which training then carries on. The tests say how much: in
float64 the two executors agree to 1e-12 (relative to the largest value in the states); in
float32, after two rounds, to 1e-3 (the weights to about 1e-5; FedPAC's feature centroids,
features of slightly different weights, move most), with the same per-client accuracies.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pflcore.config import ConfigError
from pflcore.engine import Simulation, build_data
from pflcore.engine.vectorised import COVERED, Vectorised, VectorisedError
from pflcore.papers.fedpac import fedpac_config


def _config(method: str, **changes):
    """FedPAC's CNN on Fashion-MNIST, 4 clients of unequal size (70 and 55 samples: full and
    smaller last batches, and clients with fewer steps than others), one local epoch."""
    values = dict(local_epochs=1, batch_size=20, rounds=3, quiet=True, workers=0,
                  partition={"kind": "dominant", "s": 0.2, "samples_per_client": 70})
    values.update(changes)
    return fedpac_config(method, "fmnist", 4, **values)


def _tensors(obj, prefix=""):
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensors(v, f"{prefix}/{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{prefix}/{i}")


def _both(method: str, rounds: int = 2, shrink: int | None = None):
    cfg = _config(method)
    data = build_data(cfg)
    if shrink is not None:  # unequal clients: client 1 loses samples (a smaller last batch, fewer steps)
        data.train[1].x, data.train[1].y = data.train[1].x[:shrink], data.train[1].y[:shrink]
    seq, vec = Simulation(cfg, data), Simulation(cfg, data)
    for sim in (seq, vec):
        sim.worker.train_data = [(s.x, s.y) for s in data.train]
    vec.executor = Vectorised(vec.worker)
    records = [(seq.run_round(r), vec.run_round(r)) for r in range(rounds)]
    return seq, vec, records


def _relative_gap(seq: Simulation, vec: Simulation) -> float:
    a = dict(_tensors({"server": seq.state, "clients": seq.client_states}))
    b = dict(_tensors({"server": vec.state, "clients": vec.client_states}))
    assert a.keys() == b.keys()
    floats = [k for k in a if a[k].is_floating_point()]
    scale = max(float(a[k].abs().max()) for k in floats if a[k].numel())
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in floats if a[k].numel()) / scale


@pytest.fixture
def float64():
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(saved)


@pytest.mark.parametrize("method", [m for m in COVERED if m != "fedfa"])  # FedFA computes in float32 only
def test_vectorised_equals_sequential_in_float64(float64, method):
    seq, vec, records = _both(method, shrink=45)
    assert _relative_gap(seq, vec) <= 1e-12
    for a, b in records:
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-12)
    assert vec.executor.stacked_steps > 0


def test_fedfa_runs_its_own_loop_client_by_client():
    """FedFA's inner loop (a calibration after every step) is its own: the lanes run it one
    client after the other, so the numbers are the sequential ones exactly."""
    seq, vec, records = _both("fedfa", shrink=45)
    assert _relative_gap(seq, vec) == 0.0 and vec.executor.stacked_steps == 0


@pytest.mark.parametrize("method", ["fedavg", "fedprox", "fedrep", "ditto", "fedpac"])
def test_vectorised_is_close_to_sequential_in_float32(method):
    seq, vec, records = _both(method)
    assert _relative_gap(seq, vec) <= 1e-3  # weights within 1e-5; FedPAC's feature centroids move most
    for a, b in records:
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
    assert np.array_equal(seq.evaluate(1), vec.evaluate(1))


def test_each_client_keeps_its_own_batches(float64):
    """Stacked clients draw from their own generators: a client's stacked training is its
    training alone (the stacked run of clients 0-3 gives client 2 what running it alone gives)."""
    cfg = _config("local")
    data = build_data(cfg)
    together = Simulation(cfg, data)
    together.executor = Vectorised(together.worker)
    together.run_round(0)
    alone = Simulation(cfg, data)
    alone.run_round(0, clients=[2])
    for k, v in alone.client_states[2]["model"].items():
        assert torch.allclose(v, together.client_states[2]["model"][k], rtol=0, atol=1e-12)


def test_a_method_it_does_not_cover_is_refused_in_one_sentence():
    cfg = _config("fedcp")
    with pytest.raises(VectorisedError, match="covers fedavg.*fedcp has not been checked"):
        Vectorised(Simulation(cfg, build_data(cfg)).worker)
    with pytest.raises(ConfigError, match="'vectorised' runs fedavg.*for fedcp"):
        _config("fedcp", workers="vectorised").validate()


def test_workers_vectorised_picks_it():
    cfg = _config("fedavg", workers="vectorised")
    cfg.validate()
    sim = Simulation(cfg, build_data(cfg))
    sim.use_workers("vectorised")
    assert isinstance(sim.executor, Vectorised)
    assert _config("fedavg").workers == 0  # never the default
