"""The vectorised executor against the sequential one, on the CPU, for every covered method.

Not bit for bit where it stacks: the stacked step sums in another order (vmap turns a
convolution over K clients into one grouped convolution and a linear layer into a batched
product), so float32 weights differ by rounding, which training then carries on. The tests
say how much. In float64 the two executors agree to 1e-12 (relative to the largest value
in the states). In float32, after two rounds, to 1e-4 (measured at most 1.2e-6, FedPHP's
MMD of features of slightly different weights; FedPAC 1e-3, its feature centroids, measured
2e-4), with the same per-client accuracies. Methods run client by client
(``CLIENT_BY_CLIENT``, their own inner loops) give the sequential numbers exactly.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pflcore.config import ConfigError
from pflcore.engine import Simulation, build_data
from pflcore.engine.vectorised import CLIENT_BY_CLIENT, COVERED, Vectorised, VectorisedError, _cell_key
from pflcore.papers.fedcp import FEDCP_T2_METHODS, fedcp_config
from pflcore.papers.fedpac import FEDPAC_T1_METHODS, fedpac_config

STACKED = [m for m in COVERED if m not in CLIENT_BY_CLIENT]
NEWLY_STACKED = ["fedamp", "fedrod", "fedfomo", "fedphp"]


def _config(method: str, paper: str = "fedpac", **changes):
    """4 clients of unequal size (70 and 55 samples: full and smaller last batches, and
    clients with fewer steps than others) on Fashion-MNIST, one local epoch, in FedPAC's
    setting (its CNN, batch 20, momentum 0.5) or FedCP's (its CNN, batch 10, no momentum or
    weight decay, its methods' parameters)."""
    values = dict(local_epochs=1, rounds=3, quiet=True, workers=0,
                  partition={"kind": "dominant", "s": 0.2, "samples_per_client": 70})
    if paper == "fedcp":
        values.update(changes)
        return fedcp_config(method, dataset="fmnist", num_clients=4, **values)
    values.update(batch_size=20, **changes)
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


def _both(method: str, rounds: int = 2, shrink: int | None = None, paper: str = "fedpac"):
    cfg = _config(method, paper)
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


def test_every_method_of_the_gpu_tables_is_covered():
    assert set(FEDCP_T2_METHODS) | set(FEDPAC_T1_METHODS) <= set(COVERED)
    assert set(CLIENT_BY_CLIENT) <= set(COVERED)


@pytest.mark.parametrize("method,paper", [(m, "fedpac") for m in STACKED]
                         + [(m, "fedcp") for m in FEDCP_T2_METHODS if m in STACKED])
def test_vectorised_equals_sequential_in_float64(float64, method, paper):
    """Stacked training equals the sequential one to rounding. (FedRoD's losses are float32
    whatever the dtype, its balanced softmax casts the logits, so its reported loss agrees
    to float32 rounding.)"""
    seq, vec, records = _both(method, shrink=45, paper=paper)
    assert _relative_gap(seq, vec) <= 1e-12
    for a, b in records:
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-6 if method == "fedrod" else 1e-12)
    assert vec.executor.stacked_steps > 0


@pytest.mark.parametrize("method", CLIENT_BY_CLIENT)
def test_a_method_with_its_own_loop_runs_client_by_client(method):
    """An inner loop of the method's own (FedFA's calibration after every step, FedCP's
    per-epoch noise and per-sample lookups, Per-FedAvg's two-batch meta step, pFedMe's K
    inner steps, APFL's two models, pFedHN's clipped steps) runs in the lanes one client
    after the other: the numbers are the sequential ones exactly, and nothing is stacked."""
    seq, vec, records = _both(method, shrink=45, paper="fedcp" if method == "fedcp" else "fedpac")
    assert _relative_gap(seq, vec) == 0.0 and vec.executor.stacked_steps == 0
    assert [a["train_loss"] for a, _ in records] == [b["train_loss"] for _, b in records]
    assert np.array_equal(seq.evaluate(1), vec.evaluate(1))


@pytest.mark.parametrize("method,paper", [(m, "fedpac") for m in ["fedavg", "fedprox", "fedrep", "ditto", "fedpac"]]
                         + [(m, p) for m in NEWLY_STACKED for p in ("fedpac", "fedcp")])
def test_vectorised_is_close_to_sequential_in_float32(method, paper):
    seq, vec, records = _both(method, paper=paper)
    assert _relative_gap(seq, vec) <= (1e-3 if method == "fedpac" else 1e-4)  # FedPAC's feature centroids move most
    for a, b in records:
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
    assert np.array_equal(seq.evaluate(1), vec.evaluate(1))
    assert vec.executor.stacked_steps > 0


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
    cfg = _config("scaffold")  # its gradient hook (train_adjusted) has not been checked here
    one_sentence = r"^the vectorised executor covers fedavg[^.]*; scaffold has not been checked[^.]*\.$"
    with pytest.raises(VectorisedError, match=one_sentence):
        Vectorised(Simulation(cfg, build_data(cfg)).worker)
    with pytest.raises(ConfigError, match="'vectorised' runs fedavg.*for scaffold"):
        _config("scaffold", workers="vectorised").validate()


def test_a_captured_module_is_stacked_only_apart_from_the_trained_model():
    """A module a loss captures (FedPHP's frozen teacher) is stacked by its architecture; one
    that shares a weight with the trained model, or would update its buffers, keys by its
    identity, so its client trains alone (its weights change with the model's)."""
    model, teacher = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2).eval()
    assert _cell_key(teacher, model) == _cell_key(torch.nn.Linear(3, 2).eval(), model)
    sharing = torch.nn.Sequential(model)
    assert _cell_key(sharing, model) == ("object", id(sharing))
    norm = torch.nn.BatchNorm1d(3)
    assert _cell_key(norm.train(), model)[0] == "object" and _cell_key(norm.eval(), model)[0] == "module"


def test_workers_vectorised_picks_it():
    cfg = _config("fedavg", workers="vectorised")
    cfg.validate()
    sim = Simulation(cfg, build_data(cfg))
    sim.use_workers("vectorised")
    assert isinstance(sim.executor, Vectorised)
    assert _config("fedavg").workers == 0  # never the default
