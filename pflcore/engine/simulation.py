"""The in-process simulation engine: rounds, client work, evaluation, checkpoints, results.

``run(config)`` is the one entry point: it validates the config, builds the data and the
method, and runs (or resumes, or skips) the experiment in its results directory.
Everything random is derived from ``config.seed``: the partition, the model's
initialisation, the participation schedule, and one generator per (round, client,
purpose). Because no random state lives outside the checkpoint, a resumed run ends with
exactly the numbers of an uninterrupted one.
"""
from __future__ import annotations

import copy
import math
import time
from typing import Any, Callable, Iterable

import numpy as np
import torch

from ..algorithms import make_algorithm
from ..algorithms.base import Algorithm, Client, FederationInfo
from ..config import ExperimentConfig
from ..data.federated import FederatedData
from ..data.partition import make_partition, subsample
from ..data.shifts import make_shift
from ..data.sources import load_dataset
from ..models import SplitModel, build_model
from ..training import TrainSettings, derive_seed, generator_for
from .evaluation import client_accuracies, summarize
from .results import RunDirectory, RunResult
from .schedule import participants

TRAIN_KEY, EVAL_KEY, INIT_KEY = 11, 12, 13


class DivergenceError(RuntimeError):
    """Training produced a non-finite loss; the run stopped and kept what it wrote."""


def build_data(config: ExperimentConfig) -> FederatedData:
    """Load the dataset and partition it as the config says (deterministic in the seed)."""
    dataset = load_dataset(config.dataset, root=config.data_root)
    params = {k: v for k, v in config.partition.items() if k not in ("kind", "subsample")}
    partition = make_partition(config.partition["kind"], dataset.train_y.numpy(), dataset.test_y.numpy(),
                               config.num_clients, seed=config.seed, num_classes=dataset.num_classes, **params)
    if config.partition.get("subsample", 1.0) < 1.0:
        partition = subsample(partition, config.partition["subsample"], seed=config.seed)
    transforms = [make_shift(config.shift, dataset.num_classes, config.seed)] if config.shift else []
    return FederatedData(dataset, partition, device=config.device, transforms=transforms)


def initial_model(config: ExperimentConfig, data: FederatedData) -> SplitModel:
    """The model architecture with weights drawn from the run's seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(config.seed, INIT_KEY))
        model = build_model(config.model, data.in_channels, data.num_classes, data.image_size)
    return model.to(config.device, memory_format=torch.channels_last)


class Simulation:
    """A federation in one process: the method, the data, the server state and the
    per-client personal states (only what the method keeps per client)."""

    def __init__(self, config: ExperimentConfig, data: FederatedData, algorithm: Algorithm | None = None):
        self.config = config
        self.data = data
        self.algorithm = algorithm or make_algorithm(config.method, **config.method_params)
        self.settings = TrainSettings(config.local_epochs, config.batch_size, config.lr,
                                      config.momentum, config.weight_decay)
        self.model = initial_model(config, data)
        self.scratch = copy.deepcopy(self.model)
        info = FederationInfo(data.num_clients, data.num_classes, tuple(int(n) for n in data.train_sizes),
                              config.seed, self.settings)
        self.state = self.algorithm.init(copy.deepcopy(self.model), info)
        self.client_states: dict[int, dict[str, Any]] = {}

    def client(self, cid: int, round_index: int, purpose: int) -> Client:
        split = self.data.train[cid]
        return Client(cid, round_index, split.x, split.y, self.data.num_classes,
                      self.client_states.setdefault(cid, {}),
                      generator_for(self.config.seed, purpose, round_index, cid),
                      self.scratch, self.settings)

    def participants(self, round_index: int) -> np.ndarray:
        c = self.config
        return participants(round_index, num_clients=self.data.num_clients, rounds=c.rounds,
                            participation=c.participation, full_last_round=c.full_last_round,
                            dropout=tuple(c.dropout) if c.dropout else None, seed=c.seed)

    def run_round(self, round_index: int) -> dict:
        """One round: payloads out, local updates, aggregation. Returns the round's record."""
        ids = [int(c) for c in self.participants(round_index)]
        updates = {}
        for cid in ids:
            payload = self.algorithm.payload(self.state, cid)
            updates[cid] = self.algorithm.local_update(payload, self.client(cid, round_index, TRAIN_KEY))
        losses = [float(u["loss"]) for u in updates.values() if "loss" in u]
        record: dict[str, Any] = {"round": round_index + 1, "participants": ids,
                                  "train_loss": float(np.mean(losses)) if losses else float("nan")}
        bad = [cid for cid, u in updates.items() if "loss" in u and not math.isfinite(float(u["loss"]))]
        if bad:
            raise DivergenceError(f"round {round_index + 1}: the training loss of client(s) {bad} is not finite "
                                  f"(lr={self.config.lr} may be too high); the run stopped, results so far are kept.")
        self.state = self.algorithm.aggregate(self.state, updates)
        return record

    def evaluate(self, round_index: int) -> np.ndarray:
        """Per-client test accuracy of each client's predictor (the one evaluation)."""
        return client_accuracies(self.algorithm, self.state, self.data, self.model,
                                 lambda cid: self.client(cid, round_index, EVAL_KEY))

    # -- checkpointing ------------------------------------------------------------------
    def snapshot(self) -> dict:
        return {"state": self.state, "client_states": self.client_states}

    def restore(self, snap: dict) -> None:
        self.state = snap["state"]
        self.client_states = {int(k): v for k, v in snap["client_states"].items()}


def run(config: ExperimentConfig | dict, *, overwrite: bool = False,
        on_round_end: Callable[[int, dict], None] | None = None) -> RunResult:
    """Run (or resume, or load if finished) one experiment and return its results.

    ``on_round_end(round_number, record)`` is called after each round is recorded (and
    checkpointed, when due); raising from it stops the run like a kill would.
    """
    if isinstance(config, dict):
        config = ExperimentConfig.from_dict(config)
    config.validate()
    rundir = RunDirectory(config, overwrite=overwrite)
    if rundir.finished:
        return RunResult.load(rundir.path)

    data = build_data(config)
    sim = Simulation(config, data)
    history: list[dict] = []
    acc_history: list[list[float]] = []
    eval_rounds: list[int] = []
    seconds = 0.0
    start_round = 0
    ckpt = rundir.load_checkpoint()
    if ckpt is not None:
        sim.restore(ckpt["sim"])
        history, acc_history, eval_rounds = ckpt["history"], ckpt["acc_history"], ckpt["eval_rounds"]
        seconds, start_round = float(ckpt["seconds"]), int(ckpt["next_round"])
    else:
        rundir.start()
        rundir.write_partition(list(data.partition.train), list(data.partition.test))

    progress = _progress(range(start_round, config.rounds), config, initial=start_round)
    for r in progress:
        t0 = time.perf_counter()
        try:
            record = sim.run_round(r)
        except DivergenceError:
            rundir.write_progress(history)
            raise
        extras = sim.algorithm.report(sim.state)
        arrays = {k: np.asarray(v) for k, v in extras.items() if not np.isscalar(v)}
        record.update({k: float(v) for k, v in extras.items() if np.isscalar(v)})
        if arrays:
            rundir.write_arrays(r + 1, arrays)
        if (r + 1) % config.eval_every == 0 or r == config.rounds - 1:
            acc = sim.evaluate(r)
            record.update(summarize(acc, data.test_sizes))
            acc_history.append(acc.tolist())
            eval_rounds.append(r + 1)
            progress.set_postfix(acc=f"{record['acc_mean']:.2f}", loss=f"{record['train_loss']:.3f}")
        seconds += time.perf_counter() - t0
        record["seconds"] = seconds
        history.append(record)
        if (r + 1) % config.checkpoint_every == 0 and r < config.rounds - 1:
            rundir.save_checkpoint({"sim": sim.snapshot(), "history": history, "acc_history": acc_history,
                                    "eval_rounds": eval_rounds, "seconds": seconds, "next_round": r + 1})
            rundir.write_progress(history)
        if on_round_end is not None:
            on_round_end(r + 1, record)

    result = _result(config, history, acc_history, eval_rounds, seconds, data, rundir)
    return result


def _result(config: ExperimentConfig, history: list[dict], acc_history: list[list[float]],
            eval_rounds: list[int], seconds: float, data: FederatedData, rundir: RunDirectory) -> RunResult:
    accs = np.asarray(acc_history, dtype=np.float64)
    means = np.array([h["acc_mean"] for h in history if "acc_mean" in h])
    best = int(np.nanargmax(means))
    last = history[-1]
    summary = {
        "method": config.method, "dataset": config.dataset, "num_clients": data.num_clients,
        "acc_mean": last["acc_mean"], "acc_std": last["acc_std"], "acc_weighted": last["acc_weighted"],
        "best_acc_mean": float(means[best]), "best_round": int(eval_rounds[best]),
        "final_train_loss": last["train_loss"], "rounds": config.rounds, "seconds": seconds,
        "status": "finished",
    }
    result = RunResult(config, summary, history, accs[-1], np.asarray(eval_rounds), accs, rundir.path)
    rundir.finish(result, {"final": accs[-1], "best": accs[best], "history": accs,
                           "eval_rounds": np.asarray(eval_rounds), "train_sizes": data.train_sizes,
                           "test_sizes": data.test_sizes})
    return result


def _progress(rounds: Iterable[int], config: ExperimentConfig, initial: int):
    from tqdm.auto import tqdm

    return tqdm(rounds, total=config.rounds, initial=initial, disable=config.quiet,
                desc=f"{config.method} {config.dataset}", unit="round", leave=False)


def sweep(configs: Iterable[ExperimentConfig | dict], **kwargs: Any) -> list[RunResult]:
    """Run several experiments in turn; finished ones are loaded, not re-run."""
    return [run(c, **kwargs) for c in configs]
