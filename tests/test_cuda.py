"""The CUDA path end to end: every registered method on a GPU at a tiny scale, checkpoints
that move between a GPU and a CPU, seeded numbers on one device and across devices.

Every test here needs CUDA and is skipped without it (CI runs on CPUs: the whole file is
skipped there in well under a second). ``benchmarks/device_check.py`` runs it on a GPU
machine and keeps the outcome in its record.

Tolerances, and why: a GPU run shuffles with the same CPU generators as a CPU run, so both
see the same batches in the same order; they differ only in float rounding (other kernels,
other summation orders; pflcore turns TF32 off on a GPU, so both compute in float32). On the digits MLP the final
models of two rounds agree to 1e-4 (absolute, per weight) and the accuracies to two test
samples per client. On one device the same seed gives the same numbers to 1e-6 (bit for bit
where the kernels are deterministic; the device check records whether they were).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import advance
from pflcore.algorithms import ALGORITHMS
from pflcore.engine import Simulation, build_data
from pflcore.engine.simulation import run

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

#: Methods with state on the device and bookkeeping on the CPU, client states, a QP, a beta
#: solver and GPU-side noise: the checkpoint tests move each between devices.
MOVED = ["fedavg", "fedpac", "ditto", "pfedfda", "fedcp", "fedfa"]


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


class _Stop(Exception):
    pass


def _stop_after(round_number: int):
    def hook(done: int, record: dict) -> None:
        if done == round_number:
            raise _Stop
    return hook


@pytest.mark.parametrize("method", sorted(ALGORITHMS))
def test_every_method_runs_on_cuda(make_config, method):
    """Data, training, evaluation, the method's solvers and the results, all from a GPU run."""
    result = run(make_config(method=method, device="cuda", rounds=2))
    assert result.summary["status"] == "finished", result.summary  # no QP or beta solve failed
    assert np.all(np.isfinite(result.client_acc))
    assert np.isfinite(result.summary["acc_mean"]) and 0 <= result.summary["acc_mean"] <= 100
    for name in ("summary.json", "metrics.json", "clients.npz", "config.json", "final_state.pt"):
        assert (result.path / name).is_file(), name
    saved = torch.load(result.path / "final_state.pt", weights_only=True)
    assert all(t.device.type == "cpu" for t in _tensors(saved))  # it loads on a machine without a GPU


def test_data_and_model_live_on_the_device(make_config):
    cfg = make_config(device="cuda")
    sim = Simulation(cfg, build_data(cfg))
    assert sim.data.train_x.is_cuda and sim.data.test_y.is_cuda
    assert all(p.is_cuda for p in sim.model.parameters())
    advance(sim, 1)
    assert all(t.is_cuda for t in _tensors(sim.state["model"]))


@pytest.mark.parametrize("method", MOVED)
@pytest.mark.parametrize("first, second", [("cuda", "cpu"), ("cpu", "cuda")])
def test_a_checkpoint_resumes_on_the_other_device(make_config, method, first, second):
    """Half the run on one device, interrupted after its checkpoint, finished on the other;
    the checkpoint holds CPU tensors only, and the finished run is close to one that ran on
    the second device throughout."""
    cfg = make_config(method=method, rounds=4, checkpoint_every=2, device=first, name="moved")
    with pytest.raises(_Stop):
        run(cfg, on_round_end=_stop_after(2))
    ckpt = torch.load(cfg_path(cfg) / "checkpoint.pt", weights_only=True)
    assert all(t.device.type == "cpu" for t in _tensors(ckpt["sim"]))
    resumed = run(make_config(method=method, rounds=4, checkpoint_every=2, device=second, name="moved"))
    assert resumed.summary["status"] == "finished" and len(resumed.history) == 4
    if method != "fedcp":  # FedCP's Gumbel noise is drawn on the device: another stream on each
        whole = run(make_config(method=method, rounds=4, device=second, name="whole"))
        assert np.nanmax(np.abs(resumed.client_acc - whole.client_acc)) <= 10  # ten points at most per client


def cfg_path(cfg):
    from pflcore.engine.results import RunDirectory

    return RunDirectory(cfg).path


def _models(method: str, device: str, make_config, rounds: int = 2):
    cfg = make_config(method=method, device=device, name=f"{method}-{device}")
    sim = advance(Simulation(cfg, build_data(cfg)), rounds)
    return sim, {k: v.detach().cpu().double() for k, v in sim.state["model"].items()}


@pytest.mark.parametrize("method", ["fedavg", "fedprox"])
def test_same_seed_same_numbers_on_one_device(make_config, method):
    _, a = _models(method, "cuda", make_config)
    _, b = _models(method, "cuda", make_config)
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6


@pytest.mark.parametrize("method", ["fedavg", "fedprox"])
def test_cpu_and_gpu_agree(make_config, method):
    """Same batches, same order, same initial weights: only float rounding differs."""
    sim_gpu, gpu = _models(method, "cuda", make_config)
    sim_cpu, cpu = _models(method, "cpu", make_config)
    assert max(float((gpu[k] - cpu[k]).abs().max()) for k in gpu) <= 1e-4
    correct = np.abs(sim_gpu.evaluate(1) - sim_cpu.evaluate(1)) / 100 * sim_cpu.data.test_sizes  # percent
    assert np.nanmax(correct) <= 2


def test_workers_on_a_gpu_are_refused_in_one_sentence(make_config):
    from pflcore.config import ConfigError

    with pytest.raises(ConfigError, match="worker processes are for CPU runs"):
        make_config(device="cuda", workers=2).validate()


@pytest.mark.parametrize("method", ["fedavg", "fedprox", "fedrep", "ditto", "fedpac"])
def test_vectorised_on_cuda_is_close_to_sequential(method):
    """The vectorised executor on the GPU against the sequential one on the GPU (FedPAC's CNN,
    Fashion-MNIST, clients of unequal size; the tolerance of tests/test_vectorised.py)."""
    from test_vectorised import _config, _relative_gap
    from pflcore.engine.vectorised import Vectorised

    cfg = _config(method, device="cuda")
    data = build_data(cfg)
    seq, vec = Simulation(cfg, data), Simulation(cfg, data)
    vec.executor = Vectorised(vec.worker)
    for r in range(2):
        seq.run_round(r)
        vec.run_round(r)
    assert vec.executor.stacked_steps > 0
    assert _relative_gap(seq, vec) <= 1e-3


def test_a_gpu_run_computes_in_float32_and_its_record_says_so(make_config):
    """TF32 off for matrix products and cuDNN (pflcore.numerics.float32_on_gpu), so a GPU record
    pools with CPU records of its row under the report's rule; the record's path says so."""
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default: the run must turn it off itself
    result = run(make_config(method="fedavg", device="cuda", rounds=1))
    path = result.summary["provenance"]["numeric_path"]
    assert path["device"] == "cuda" and path["tf32_matmul"] is False and path["tf32_cudnn"] is False
