"""A client's work, whatever runs it: the job kinds and the :class:`ClientWorker`.

The engine hands an executor :class:`ClientJob` s and gets one :class:`ClientResult` per
job. What a kind of job does is one row of :data:`JOB_KINDS`, shared by the in-process
executor, the worker processes and Flower's nodes (which also read there which Flower
message type carries it):

- ``train``: the method's ``local_update``; the client's personal state comes back.
- ``evaluate``: build the client's predictor and count its correct test predictions.
- ``collect``: the method's ``collect`` (statistics for a collect phase, e.g. CCVR's
  per-class feature moments).
- ``adapt``: a new client (held out of training) adapts as its method prescribes
  (``Algorithm.adapt`` on the train payload) and its predictor is scored like ``evaluate``
  (pFedFDA section 5); its personal state comes back unchanged.

Personal state travels with the job and comes back with the result, so nothing that
runs jobs keeps anything: the engine owns the state and checkpoints it.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from ..algorithms import make_algorithm
from ..algorithms.base import ADAPT, COLLECT, EVALUATE, TRAIN, Algorithm, Client
from ..training import ADAPT_KEY, COLLECT_KEY, EVAL_KEY, TRAIN_KEY, TrainSettings, generator_for, predict_correct
from .hooks import RunHook, hooks_for, measure
from .setup import initial_model, train_settings

if TYPE_CHECKING:
    from ..config import ExperimentConfig
    from ..data.federated import FederatedData


@dataclass
class ClientJob:
    """One piece of client work: ``kind`` is a key of :data:`JOB_KINDS`."""

    kind: str
    client_id: int
    round: int
    payload: dict
    state: dict = field(default_factory=dict)


@dataclass
class ClientResult:
    """``output`` is what the job kind produces (an update, a count of correct test
    predictions, statistics); ``state`` the client's personal state afterwards.

    An executor that talks to real clients (Flower) reports a client that failed or
    timed out as ``output=None`` with ``error`` saying why: the engine leaves that client
    out and records it; its personal state stays as it was."""

    output: Any
    state: dict
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


@dataclass(frozen=True)
class JobKind:
    """What one kind of client job does.

    ``purpose``: the key of the client's random stream; ``keeps_state``: whether the job
    may change the client's personal state (else it works on a copy and the state comes
    back unchanged); ``sized_by``: the client data its cost grows with, ``"train"`` or
    ``"test"`` (the worker pool balances on its size); ``message_type``: the Flower message type
    that carries it; ``work(worker, job, client)``: the job itself."""

    purpose: int
    keeps_state: bool
    sized_by: str
    message_type: str
    work: Callable[["ClientWorker", ClientJob, Client], Any]


def _train(worker: "ClientWorker", job: ClientJob, client: Client) -> Any:
    update = worker.algorithm.local_update(job.payload, client)
    measure(worker.hooks, update, client)  # the run hooks' client halves, on the model just trained
    return update


def _evaluate(worker: "ClientWorker", job: ClientJob, client: Client) -> Any:
    x, y = worker.test_data[job.client_id]
    return int(predict_correct(worker.algorithm.predictor(job.payload, client), x, y).sum())


def _adapt(worker: "ClientWorker", job: ClientJob, client: Client) -> Any:
    worker.algorithm.adapt(job.payload[TRAIN], client)
    x, y = worker.test_data[job.client_id]
    return int(predict_correct(worker.algorithm.predictor(job.payload[EVALUATE], client), x, y).sum())


def _collect(worker: "ClientWorker", job: ClientJob, client: Client) -> Any:
    return worker.algorithm.collect(job.payload, client)


JOB_KINDS: dict[str, JobKind] = {
    TRAIN: JobKind(TRAIN_KEY, keeps_state=True, sized_by="train", message_type="train", work=_train),
    EVALUATE: JobKind(EVAL_KEY, keeps_state=False, sized_by="test", message_type="evaluate", work=_evaluate),
    COLLECT: JobKind(COLLECT_KEY, keeps_state=False, sized_by="train", message_type="query", work=_collect),
    ADAPT: JobKind(ADAPT_KEY, keeps_state=False, sized_by="train", message_type="evaluate", work=_adapt),
}


class ClientWorker:
    """Does one client's work on that client's data (the same code in every executor).

    ``train`` / ``test`` are per-client ``(x, y)`` pairs; ``model`` is a scratch model of
    the run's architecture (its weights are overwritten by every method); the method's
    extra scratch modules (:meth:`Algorithm.client_modules`) are built here, once;
    ``hooks`` are the run's hooks (:mod:`pflcore.engine.hooks`), whose client halves run
    after every train job.
    """

    def __init__(self, algorithm: Algorithm, settings: TrainSettings, seed: int, num_classes: int,
                 train: Sequence[tuple[torch.Tensor, torch.Tensor]],
                 test: Sequence[tuple[torch.Tensor, torch.Tensor]], model: torch.nn.Module,
                 hooks: Sequence[RunHook] = ()):
        self.algorithm = algorithm
        self.settings = settings
        self.seed = seed
        self.num_classes = num_classes
        self.train_data = train
        self.test_data = test
        self.model = model
        self.hooks = list(hooks)
        self.modules = algorithm.client_modules(model)

    @classmethod
    def for_run(cls, config: "ExperimentConfig", data: "FederatedData", algorithm: Algorithm | None = None,
                model: torch.nn.Module | None = None) -> "ClientWorker":
        """The worker of a run: its method, settings, scratch model and hooks as the engine
        builds them (all a Flower node needs). ``model``: the run's initial model, if built."""
        return cls(algorithm or make_algorithm(config.method, **config.method_params), train_settings(config),
                   config.seed, data.num_classes, [(s.x, s.y) for s in data.train], [(s.x, s.y) for s in data.test],
                   copy.deepcopy(model if model is not None else initial_model(config, data)),
                   hooks_for(config, data))

    def client(self, client_id: int, round_index: int, purpose: int, state: dict) -> Client:
        x, y = self.train_data[client_id]
        # A CPU generator on every device: a GPU run shuffles exactly like a CPU run. The
        # settings are the round's (the lr decayed per round, if the run asks for it).
        return Client(client_id, round_index, x, y, self.num_classes, state,
                      generator_for(self.seed, purpose, round_index, client_id), self.model,
                      self.settings.for_round(round_index), self.modules)

    def run(self, job: ClientJob) -> ClientResult:
        kind = JOB_KINDS.get(job.kind)
        if kind is None:
            raise ValueError(f"unknown client job kind {job.kind!r}; the kinds are {sorted(JOB_KINDS)}.")
        # A job that must not change the personal state works on a copy of it.
        state = job.state if kind.keeps_state else dict(job.state)
        client = self.client(job.client_id, job.round, kind.purpose, state)
        output = kind.work(self, job, client)
        return ClientResult(output, client.state if kind.keeps_state else job.state)


__all__ = ["ClientJob", "ClientResult", "ClientWorker", "JOB_KINDS", "JobKind", "ADAPT", "COLLECT", "EVALUATE",
           "TRAIN"]
