"""The Algorithm protocol and the few helpers all methods share.

A method is five functions over plain dicts (ARCHITECTURE.md):

- ``init(model, info) -> server_state``
- ``payload(server_state, client_id) -> payload``: what the server sends that client
- ``local_update(payload, client) -> update``: the client's work; ``client`` is a
  :class:`Client` (its data, persistent personal state, a seeded generator, a scratch
  model and the training primitives)
- ``aggregate(server_state, {client_id: update}) -> server_state``
- ``predictor(payload, client) -> model``: what that client uses for inference, built
  from what the server would send it now (``payload(server_state, client_id)``) and
  its personal state, so it can be built wherever the client runs (a worker process, a
  Flower node); the engine's one evaluation scores it on the client's test split.

Payloads, updates and states are dicts of tensors, numbers, strings and lists (nested
dicts allowed), so the same method runs in-process, in worker processes and on Flower.
Methods never see the engine, the backends or the test data.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Mapping, Sequence

import torch
from torch import nn

from ..models import SplitModel
from ..training import LossFn, TrainSettings, compute_features, cross_entropy, sgd_train
from .hyperparams import Param, check_hyperparams

Tensors = dict[str, torch.Tensor]


@dataclass(frozen=True)
class FederationInfo:
    """What a method may know about the federation when it initialises."""

    num_clients: int
    num_classes: int
    train_sizes: tuple[int, ...]
    seed: int
    settings: TrainSettings


@dataclass
class Client:
    """One client's view during ``local_update`` / ``predictor``.

    ``state`` is the client's persistent personal state (a dict of tensors the engine
    stores between rounds and checkpoints; empty before the first participation).
    ``model`` is a scratch model of the right architecture: load weights into it, train
    it, return it; its weights on entry are arbitrary.
    """

    id: int
    round: int
    x: torch.Tensor
    y: torch.Tensor
    num_classes: int
    state: dict[str, Any]
    generator: torch.Generator
    model: SplitModel
    settings: TrainSettings

    @property
    def num_samples(self) -> int:
        return int(self.y.shape[0])

    def train(self, params: Iterable[nn.Parameter], *, model: nn.Module | None = None,
              loss_fn: LossFn = cross_entropy, **overrides: Any) -> float:
        """SGD on this client's train data with the run's settings (``overrides`` replace
        epochs/lr/batch_size/momentum/weight_decay). Returns the mean loss."""
        settings = self.settings if not overrides else TrainSettings(**{**self.settings.__dict__, **overrides})
        return sgd_train(model if model is not None else self.model, params, self.x, self.y,
                         settings, self.generator, loss_fn)

    def train_head_on_features(self, head: nn.Module, features: torch.Tensor, **overrides: Any) -> float:
        """Train a head on fixed features: exactly head training with a frozen body, far cheaper."""
        settings = TrainSettings(**{**self.settings.__dict__, **overrides})
        return sgd_train(head, head.parameters(), features, self.y, settings, self.generator)

    def features(self, model: SplitModel | None = None) -> torch.Tensor:
        return compute_features(model if model is not None else self.model, self.x)

    def class_counts(self) -> torch.Tensor:
        return torch.bincount(self.y, minlength=self.num_classes)


class Algorithm:
    """Base class: subclasses set ``name`` and ``hyperparams`` and override the protocol.

    ``hyperparams`` declares the method's parameters (:class:`Param`: default, type,
    range, choices); ``defaults`` is derived from it. The constructor accepts exactly
    those parameters, checked by :meth:`check_params` before a run starts.
    ``failure_counters`` names numbers the method reports each round (:meth:`report`)
    that count its own failures (FedPAC's ``qp_failures``); the engine totals them and
    warns when they are not zero.
    """

    name: ClassVar[str] = "base"
    hyperparams: ClassVar[dict[str, Param]] = {}
    defaults: ClassVar[dict[str, Any]] = {}
    failure_counters: ClassVar[tuple[str, ...]] = ()
    paper: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        cls.defaults = {key: spec.default for key, spec in cls.hyperparams.items()}

    def __init__(self, **params: Any):
        self.check_params(params)
        self.params = {**self.defaults, **params}
        for key, value in self.params.items():
            setattr(self, key, value)

    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> None:
        """Refuse an unknown parameter or a bad value with one sentence (ConfigError)."""
        check_hyperparams(cls.name, cls.hyperparams, dict(params) if isinstance(params, Mapping) else params)

    # -- protocol -------------------------------------------------------------------
    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        raise NotImplementedError

    def payload(self, state: dict, client_id: int) -> dict:
        raise NotImplementedError

    def local_update(self, payload: dict, client: Client) -> dict:
        raise NotImplementedError

    def aggregate(self, state: dict, updates: Mapping[int, dict]) -> dict:
        raise NotImplementedError

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        raise NotImplementedError

    # -- optional hooks ---------------------------------------------------------------
    def shared_predictor(self, state: dict, model: SplitModel) -> nn.Module | None:
        """If every client uses the same model, return it (evaluation then batches all
        clients' test data together); ``None`` for personalised predictors."""
        return None

    def report(self, state: dict) -> dict[str, Any]:
        """Per-round extras: numbers go to the round's metrics, tensors/arrays are saved
        with the results (e.g. FedPAC's combination weights)."""
        return {}


# ---------------------------------------------------------------------- helpers
def snapshot(module: nn.Module) -> Tensors:
    """A detached copy of a module's parameters and buffers (a plain dict of tensors)."""
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def load(module: nn.Module, tensors: Mapping[str, torch.Tensor]) -> nn.Module:
    """Copy ``tensors`` into ``module`` in place; returns the module."""
    module.load_state_dict(tensors, strict=True)
    return module


def weighted_average(items: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[float]) -> Tensors:
    """Sum_i w_i * items[i] / sum_i w_i, key by key (FedAvg's aggregation)."""
    w = torch.as_tensor(list(weights), dtype=torch.float64)
    if len(items) == 0 or float(w.sum()) <= 0:
        raise ValueError("weighted_average needs at least one item with positive weight.")
    w = w / w.sum()
    out = {}
    for key in items[0]:
        stacked = torch.stack([item[key].to(torch.float64) for item in items])
        avg = torch.tensordot(w.to(stacked.device), stacked, dims=1)
        out[key] = avg.to(items[0][key].dtype)
    return out


def sample_weights(updates: Mapping[int, dict]) -> tuple[list[int], list[float]]:
    """Participant ids (sorted) and their train sizes n_i, the FedAvg weights."""
    ids = sorted(updates)
    return ids, [float(updates[c]["num_samples"]) for c in ids]
