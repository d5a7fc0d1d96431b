"""The Algorithm protocol and the few helpers all methods share.

A method is a few functions over plain dicts:

- ``init(model, info) -> server_state``
- ``payload(server_state, client_id, purpose) -> payload``: what the server sends that
  client for a job of kind ``purpose`` (``"train"``, ``"evaluate"`` or ``"collect"``)
- ``local_update(payload, client) -> update``: the client's work; ``client`` is a
  :class:`Client` (its data, persistent personal state, seeded generators, a scratch
  model, the method's extra modules and the training building blocks)
- ``aggregate(server_state, {client_id: update}, ctx) -> server_state``; ``ctx`` is a
  :class:`ServerContext` (round, seeded server generator, device, federation, settings,
  a scratch model)
- ``predictor(payload, client) -> model``: what that client uses for inference, built
  from what the server would send it now and its personal state, so it can be built
  wherever the client runs (a worker process, a Flower node); the engine's one evaluation
  scores it on the client's test split.

Optional: ``adapt(payload, client)`` prepares a client held out of training (a new
client) before it is scored; ``client_modules(model)`` declares extra per-client modules (a second model, a
frozen copy, a projection head), built once wherever the client runs; a collect phase
(``collects`` / ``collect`` / ``absorb``) gathers statistics from every client after a
round's aggregation (CCVR).

Payloads, updates and states are dicts of tensors, numbers, strings and lists (nested
dicts allowed), so the same method runs in-process, in worker processes and on Flower.
State lives only in the server state and the clients' states: a method object holds its
hyperparameters and scratch space, nothing that must survive a round. Methods never see
the engine, the backends or the test data.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Iterator, Mapping, Sequence

import torch
from torch import nn

from ..models import SplitModel
from ..training import (Batch, LossFn, Pull, SGDStep, StepFn, TrainSettings, client_loop, compute_features,
                        cross_entropy, only_training, precision_context, sgd_train, shuffled_batches)
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
    rounds: int = 0             # T, the run's rounds (0: unknown)
    participation: float = 1.0  # C, the fraction of clients sampled per round


TRAIN, EVALUATE, COLLECT = "train", "evaluate", "collect"  # the purposes of a payload (job kinds)
ADAPT = "adapt"  # the job of a new client: adapt (from a train payload), then be scored


@dataclass(frozen=True)
class ServerContext:
    """What the server side of a method may use when it aggregates: the round (0-based),
    a generator seeded from the run seed and the round (the same draws on every resume),
    the device, the federation, the clients' training settings and a scratch model of
    the run's architecture (its weights on entry are arbitrary)."""

    round: int
    generator: torch.Generator
    device: torch.device
    info: FederationInfo
    settings: TrainSettings
    model: SplitModel


@dataclass
class Client:
    """One client's view during ``local_update`` / ``predictor`` / ``collect``.

    ``state`` is the client's persistent personal state (a dict of tensors the engine
    stores between rounds and checkpoints; empty before the first participation).
    ``model`` is a scratch model of the right architecture and ``modules`` the method's
    extra scratch modules (:meth:`Algorithm.client_modules`): load weights into them, train
    them, return what matters; their weights on entry are arbitrary.

    Training building blocks: :meth:`train` (the standard loop), and for a method's own
    inner loop :meth:`batches` (the batches ``train`` would visit, in its order),
    :meth:`sgd` (the same fast SGD step) and :meth:`precision` (the forward context).
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
    modules: dict[str, nn.Module] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._generator_start = self.generator.get_state()

    @property
    def num_samples(self) -> int:
        return int(self.y.shape[0])

    def train(self, params: Iterable[nn.Parameter], *, model: nn.Module | None = None,
              loss_fn: LossFn = cross_entropy, generator: torch.Generator | None = None,
              pull: Pull | None = None, data: tuple[torch.Tensor, torch.Tensor] | None = None,
              **overrides: Any) -> float:
        """SGD on this client's train data (``data``: an (x, y) of it instead, e.g. FedFomo's
        training part) with the run's settings (``overrides`` replace
        epochs/lr/batch_size/momentum/weight_decay), on ``loss_fn`` plus a proximal ``pull``
        if given. Returns the mean loss."""
        x, y = data if data is not None else (self.x, self.y)
        return sgd_train(model if model is not None else self.model, params, x, y,
                         self.training_settings(**overrides), generator or self.generator, loss_fn, pull)

    def train_adjusted(self, model: nn.Module, params: Iterable[nn.Parameter],
                       adjust: Callable[[list[torch.Tensor]], list[torch.Tensor]],
                       loss_fn: LossFn = cross_entropy) -> tuple[float, int]:
        """The standard loop (:meth:`batches`, :meth:`sgd`) with a hook on the gradient: each
        step's gradients of ``loss_fn`` (zeros for parameters the loss does not use) go
        through ``adjust`` (called without autograd) and the SGD step follows what it
        returns: SCAFFOLD's control variates, FedDyn's linear and proximal terms. Returns the
        mean loss and the number of steps taken."""
        params = list(params)
        sgd = self.sgd(params)
        steps = 0

        def step(batch: Batch) -> torch.Tensor:
            nonlocal steps
            with batch.precision():
                loss = loss_fn(model, batch.x, batch.y)
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            with torch.no_grad():
                direction = adjust([torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)])
            sgd.update(direction)
            steps += 1
            return loss

        with self.trainable(model, params):
            loss = self.loop(step)
        return loss, steps

    def train_head_on_features(self, head: nn.Module, features: torch.Tensor, **overrides: Any) -> float:
        """Train a head on fixed features: exactly head training with a frozen body, far cheaper."""
        return sgd_train(head, head.parameters(), features, self.y, self.training_settings(**overrides),
                         self.generator)

    def training_settings(self, **overrides: Any) -> TrainSettings:
        """The run's settings with some replaced (epochs, lr, batch_size, momentum, weight_decay)."""
        return TrainSettings(**{**self.settings.__dict__, **overrides}) if overrides else self.settings

    def batches(self, epochs: int | None = None, batch_size: int | None = None,
                generator: torch.Generator | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The (x, y) mini-batches :meth:`train` visits: ``epochs`` shuffled passes (default:
        the run's local epochs) drawn from this client's generator."""
        s = self.settings
        return shuffled_batches(self.x, self.y, s.epochs if epochs is None else epochs,
                                batch_size or s.batch_size, generator or self.generator)

    def loop(self, step: StepFn, *, epochs: int | None = None, batch_size: int | None = None,
             generator: torch.Generator | None = None, on_epoch_end: Callable[[int], None] | None = None,
             max_steps: int | None = None) -> float:
        """:func:`~pflcore.training.client_loop` on this client's train data with the run's
        settings (``epochs``, ``batch_size``, ``generator`` replace them): ``step(batch)``
        on the batches :meth:`train` visits (at most ``max_steps``), ``on_epoch_end(epoch)``
        after each epoch;
        returns the mean of the losses the steps return. A method writes its step, not a
        loop."""
        s = self.settings
        return client_loop(self.x, self.y, step, epochs=s.epochs if epochs is None else epochs,
                           batch_size=batch_size or s.batch_size, generator=generator or self.generator,
                           precision=s.precision, on_epoch_end=on_epoch_end, max_steps=max_steps)

    def sgd(self, params: Iterable[nn.Parameter], **overrides: Any) -> SGDStep:
        """The fast SGD step (momentum, weight decay as torch's SGD) over ``params`` with the
        run's settings (``overrides`` replace lr, momentum, weight_decay): ``step(loss)``."""
        return SGDStep(list(params), self.training_settings(**overrides))

    def precision(self):
        """The context for a forward pass of local training (bfloat16 autocast if the run
        asks for it)."""
        return precision_context(self.settings, self.x.device)

    def trainable(self, model: nn.Module, params: Iterable[nn.Parameter]):
        """Context: ``model`` in training mode with gradients for ``params`` only."""
        return only_training(model, list(params))

    def fresh_generator(self) -> torch.Generator:
        """A new generator in the state this client's generator had when the job started:
        two models trained with the two see the same batches in the same order."""
        g = torch.Generator(device=self.generator.device)
        g.set_state(self._generator_start)
        return g

    def features(self, model: SplitModel | None = None) -> torch.Tensor:
        return compute_features(model if model is not None else self.model, self.x)

    def class_counts(self) -> torch.Tensor:
        return torch.bincount(self.y, minlength=self.num_classes)


class Algorithm:
    """Base class: subclasses set ``name`` and ``hyperparams`` and override the protocol.

    ``hyperparams`` declares the method's parameters (:class:`Param`: default, type,
    range, choices); ``defaults`` is derived from it. The constructor accepts exactly
    those parameters, checked by :meth:`check_params` before a run starts.
    ``predicts_globally`` says that every client predicts with the same global model
    (:meth:`shared_predictor`), which calibrations such as CCVR build on.
    ``failure_counters`` names numbers the method reports each round (:meth:`report`)
    that count its own failures (FedPAC's ``qp_failures``); the engine totals them and
    warns when they are not zero.
    """

    name: ClassVar[str] = "base"
    hyperparams: ClassVar[dict[str, Param]] = {}
    defaults: ClassVar[dict[str, Any]] = {}
    failure_counters: ClassVar[tuple[str, ...]] = ()
    predicts_globally: ClassVar[bool] = False  # every client predicts with the one global model
    #: a method whose training this one shares exactly (same server and client states, same
    #: random streams), differing only at prediction time: a finished run of it can be scored
    #: as this method instead of training again (FedAvg-FT and kNN-Per on FedAvg's training)
    trains_as: ClassVar[str | None] = None
    # the predictor adapts to the client's own train data by itself (fine-tuning, statistics),
    # so a new client needs nothing more (see :meth:`adapt`)
    adapts_in_predictor: ClassVar[bool] = False
    #: keys of a client's state that its local update writes, without reading them, in every round
    #: it trains (pFedMe's personal model, solved afresh from the received one): a checkpoint leaves
    #: them out for the clients the next round trains, so a resumed run rebuilds them before use
    rebuilt_client_state: ClassVar[tuple[str, ...]] = ()
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

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        raise NotImplementedError

    def local_update(self, payload: dict, client: Client) -> dict:
        raise NotImplementedError

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        raise NotImplementedError

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        raise NotImplementedError

    # -- optional hooks ---------------------------------------------------------------
    def client_modules(self, model: SplitModel) -> dict[str, nn.Module]:
        """Extra scratch modules every client needs (``client.modules``), built once where
        the client runs from the run's model (e.g. a second model: ``copy.deepcopy(model)``)."""
        return {}

    def adapt(self, payload: dict, client: Client) -> None:
        """Prepare a client that never took part for inference, from the train payload it
        would get now (new-client generalisation, pFedFDA section 5 and appendix C.3): by
        default one local update as in a round, its upload discarded and its personal state
        kept for the predictor; nothing for a method whose clients all predict with the
        global model or whose predictor adapts by itself (``adapts_in_predictor``:
        fine-tuning, statistics)."""
        if not (self.predicts_globally or self.adapts_in_predictor):
            self.local_update(payload, client)

    def shared_predictor(self, state: dict, model: SplitModel) -> nn.Module | None:
        """If every client uses the same model, return it (evaluation then batches all
        clients' test data together); ``None`` for personalised predictors."""
        return None

    def collects(self, round_index: int, rounds: int) -> bool:
        """Whether a collect phase follows this round's aggregation: every client runs
        :meth:`collect` on ``payload(state, id, "collect")`` and :meth:`absorb` folds the
        results into the server state."""
        return False

    def collect(self, payload: dict, client: Client) -> dict:
        """A client's statistics for the collect phase (it must not change ``client.state``)."""
        raise NotImplementedError

    def absorb(self, state: dict, collected: Mapping[int, dict], ctx: ServerContext) -> dict:
        """The server state after a collect phase, from every answering client's statistics."""
        raise NotImplementedError

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
