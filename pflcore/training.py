"""The shared local-training primitives every method goes through.

Speed is won here: data is a tensor, each epoch's shuffled order is gathered once and
batches are slices (:func:`shuffled_batches`), the optimizer step is foreach SGD without
torch.optim bookkeeping (:class:`SGDStep`), and the loss is accumulated on the device (one
``.item()`` per call, none per step). A method with its own inner loop uses the same
batches and step, so it is as fast and as reproducible as :func:`sgd_train`.
Randomness comes only from the generator passed in, so a client's work is a pure
function of (weights, data, generator).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, ContextManager, Iterable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .streams import ADAPT_KEY, COLLECT_KEY, EVAL_KEY, INIT_KEY, SERVER_KEY, TRAIN_KEY  # noqa: F401  (re-exported)

LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class TrainSettings:
    """Optimiser settings for one local-training call (SGD as in all four papers)."""

    epochs: int
    batch_size: int
    lr: float
    momentum: float = 0.5
    weight_decay: float = 5e-4
    precision: str = "float32"  # "bfloat16": forward/backward under autocast, fp32 master weights
    lr_decay: float = 1.0  # per-round decay of the run's lr: round t trains with lr * lr_decay ** t

    def for_round(self, round_index: int) -> "TrainSettings":
        """The settings of round ``round_index`` (0-based): ``lr * lr_decay ** round_index``
        (these very settings when ``lr_decay`` is 1, so no decay changes nothing). Applied
        once, to the run's settings, by whatever builds a client for a job."""
        if self.lr_decay == 1.0 or round_index == 0:
            return self
        return dataclasses.replace(self, lr=self.lr * self.lr_decay ** round_index)


def cross_entropy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The default loss: cross-entropy of ``model(x)``."""
    return F.cross_entropy(model(x), y)


# The purposes that derive_seed's keys start with (one random stream per purpose, round and
# client, so no draw for one purpose can shift another's) come from the one registry of
# streams, pflcore.streams.


def derive_seed(seed: int, *keys: int) -> int:
    """A 63-bit seed determined by ``seed`` and integer keys (round, client, purpose)."""
    state = np.random.SeedSequence([seed, *keys]).generate_state(2, np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1]))


def generator_for(seed: int, *keys: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A torch generator seeded by :func:`derive_seed`."""
    g = torch.Generator(device=device)
    g.manual_seed(derive_seed(seed, *keys))
    return g


def epoch_orders(n: int, epochs: int, generator: torch.Generator,
                 device: str | torch.device = "cpu") -> Iterator[torch.Tensor]:
    """One random order of ``range(n)`` per epoch (a ``randperm`` drawn from ``generator``):
    the visiting order of :func:`shuffled_batches`, for loops that need the sample indices."""
    for _ in range(epochs):
        yield torch.randperm(n, generator=generator, device=generator.device).to(device)


def shuffled_batches(x: torch.Tensor, y: torch.Tensor, epochs: int, batch_size: int,
                     generator: torch.Generator) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The mini-batches of ``epochs`` passes over (x, y): each epoch visits every sample once
    in an order drawn from ``generator`` (one ``randperm`` per epoch, gathered once, batches
    are slices; the last batch may be smaller). :func:`sgd_train` trains on exactly these."""
    n = int(y.shape[0])
    for order in epoch_orders(n, epochs, generator, x.device):
        xs, ys = x[order], y[order]
        for start in range(0, n, batch_size):
            yield xs[start:start + batch_size], ys[start:start + batch_size]


@dataclass(frozen=True)
class Batch:
    """One step of :func:`client_loop`: the inputs and labels, the samples' positions in the
    client's data (``index``), the epoch (0-based), the step over the whole call (0-based)
    and where the batch starts in its epoch's order (``start``: 0 opens an epoch).
    ``precision()`` is the forward context of the run's precision."""

    x: torch.Tensor
    y: torch.Tensor
    index: torch.Tensor
    epoch: int
    step: int
    start: int
    precision: Callable[[], ContextManager]


#: A method's step: the SGD step(s) on one batch; it returns the loss to report (``None``:
#: the batch was skipped and counts for nothing).
StepFn = Callable[[Batch], "torch.Tensor | None"]


def client_loop(x: torch.Tensor, y: torch.Tensor, step: StepFn, *, epochs: int, batch_size: int,
                generator: torch.Generator, precision: str = "float32",
                on_epoch_end: Callable[[int], None] | None = None, max_steps: int | None = None) -> float:
    """The one client training loop: ``epochs`` passes over (x, y), each in an order drawn
    from ``generator`` (one ``randperm`` per epoch, gathered once; batches are slices, the
    last may be smaller), ``step(batch)`` on every batch and ``on_epoch_end(epoch)`` after
    each epoch; ``max_steps`` ends the call after that many batches (an epoch cut short gets
    no end-of-epoch call, and no later epoch's order is drawn). The losses the steps return
    are summed on the device (one ``.item()`` per call). Returns their mean (0.0 if no step
    returned one; NaN if training diverged).

    A step is a function of what it closes over (the models and optimiser steps it
    updates), the batch and the generators it is given: nothing comes from a client
    object, so the same loop can drive many clients at once."""
    n = int(y.shape[0])
    total = torch.zeros((), device=x.device)
    steps = position = 0
    context = _precision_factory(precision, x.device)
    for epoch in range(epochs):
        if position == max_steps:
            break
        order = torch.randperm(n, generator=generator, device=generator.device).to(x.device)  # as epoch_orders
        xs, ys = x[order], y[order]
        for start in range(0, n, batch_size):
            if position == max_steps:
                break
            end = start + batch_size
            loss = step(Batch(xs[start:end], ys[start:end], order[start:end], epoch, position, start, context))
            position += 1
            if loss is not None:
                total += loss.detach()
                steps += 1
        else:
            if on_epoch_end is not None:
                on_epoch_end(epoch)
    return float(total.item()) / steps if steps else 0.0


def _precision_factory(precision: str, device: torch.device) -> Callable[[], ContextManager]:
    if precision == "bfloat16":
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


def precision_context(settings: TrainSettings, device: torch.device) -> ContextManager:
    """The forward/backward context of local training: bfloat16 autocast when the settings
    ask for it, else nothing."""
    if settings.precision == "bfloat16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@dataclass(frozen=True)
class Pull:
    """A proximal pull towards fixed weights: the term ``weight/2 * ||w - reference||^2``
    added to a step's objective (Ditto's personal objective, its Algorithm 1). It is applied
    as its gradient, ``weight * (w - reference)`` added to the loss's, which is bit for bit
    the gradient autograd takes of the term (a test checks) at a fraction of its cost; the
    mean loss the loop reports leaves the term out. ``reference``: one tensor per trained
    parameter, in their order."""

    reference: Sequence[torch.Tensor]
    weight: float

    @torch.no_grad()
    def added(self, params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None]) -> list[torch.Tensor]:
        """``grads`` (``None``: a parameter the loss does not use) plus the pull's gradient."""
        pulls = torch._foreach_sub(list(params), list(self.reference))
        if self.weight != 1.0:
            torch._foreach_mul_(pulls, float(self.weight))
        used = [i for i, g in enumerate(grads) if g is not None]
        if used:
            torch._foreach_add_([pulls[i] for i in used], [grads[i] for i in used])
        return pulls


def sgd_train(model: nn.Module, params: Iterable[nn.Parameter], x: torch.Tensor, y: torch.Tensor,
              settings: TrainSettings, generator: torch.Generator, loss_fn: LossFn = cross_entropy,
              pull: Pull | None = None) -> float:
    """Train ``params`` of ``model`` with mini-batch SGD for ``settings.epochs`` epochs on the
    batches of :func:`shuffled_batches`, stepping with :class:`SGDStep` on the gradient of
    ``loss_fn`` (plus ``pull``'s, if given).

    Parameters of ``model`` that are not in ``params`` are frozen for the call (no
    gradient is computed for them) and restored afterwards. Returns the mean loss over all
    steps (NaN if training diverged; 0.0 if no step ran).
    """
    params = list(params)
    n = int(y.shape[0])
    if settings.epochs == 0 or n == 0 or not params:
        return 0.0
    sgd = SGDStep(params, settings)

    def step(batch: Batch) -> torch.Tensor:
        with batch.precision():
            loss = loss_fn(model, batch.x, batch.y)
        if pull is None:
            sgd(loss)
        else:
            sgd.update(pull.added(params, torch.autograd.grad(loss, params, allow_unused=True)))
        return loss

    with only_training(model, params):
        return client_loop(x, y, step, epochs=settings.epochs, batch_size=settings.batch_size, generator=generator,
                           precision=settings.precision)


@contextlib.contextmanager
def only_training(model: nn.Module, params: Iterable[nn.Parameter]) -> Iterator[None]:
    """``model`` in training mode with gradients for ``params`` only; everything restored
    on exit."""
    trainable = {id(p) for p in params}
    saved = [(p, p.requires_grad) for p in model.parameters()]
    for p, _ in saved:
        p.requires_grad_(id(p) in trainable)
    was_training = model.training
    model.train()
    try:
        yield
    finally:
        for p, flag in saved:
            p.requires_grad_(flag)
        model.train(was_training)


class SGDStep:
    """One SGD step with momentum and weight decay: the foreach operations of
    ``torch.optim.SGD(foreach=True)`` in its order (bit-for-bit the same; a test checks),
    without its per-step bookkeeping. A parameter's momentum buffer starts at its first
    gradient; a parameter the loss does not use is left alone, as torch's SGD does."""

    def __init__(self, params: list[torch.Tensor], settings: TrainSettings):
        self.params = params
        self.lr, self.momentum, self.weight_decay = settings.lr, settings.momentum, settings.weight_decay
        self.buffers: list[torch.Tensor | None] = [None] * len(params)

    def __call__(self, loss: torch.Tensor) -> None:
        self.update(list(torch.autograd.grad(loss, self.params, allow_unused=True)))

    @torch.no_grad()
    def update(self, grads: list[torch.Tensor | None]) -> None:
        used = [i for i, g in enumerate(grads) if g is not None]
        params, grads = [self.params[i] for i in used], [grads[i] for i in used]
        if not params:
            return
        if self.weight_decay:
            grads = torch._foreach_add(grads, params, alpha=self.weight_decay)
        if self.momentum:
            if all(self.buffers[i] is not None for i in used):
                buffers = [self.buffers[i] for i in used]
                torch._foreach_mul_(buffers, self.momentum)
                torch._foreach_add_(buffers, grads)
            else:
                for i, g in zip(used, grads):
                    if self.buffers[i] is None:
                        self.buffers[i] = g.clone()
                    else:
                        self.buffers[i].mul_(self.momentum).add_(g)
                buffers = [self.buffers[i] for i in used]
            grads = buffers
        torch._foreach_add_(params, grads, alpha=-self.lr)


#: The batch of inference passes (evaluation, features, losses): large enough to amortise
#: each call's overhead, small enough that a layer's activations stay in cache. On the
#: FedCP CNN (channels_last, one thread) 128-256 samples cost 140 us each, 1024 cost 225
#: and 4096 cost 314.
INFERENCE_BATCH = 256


@torch.inference_mode()
def compute_features(model: nn.Module, x: torch.Tensor, batch_size: int = INFERENCE_BATCH) -> torch.Tensor:
    """Features ``model.body(x)`` in evaluation mode, in batches."""
    was_training = model.training
    model.eval()
    out = torch.cat([model.body(x[i:i + batch_size]) for i in range(0, x.shape[0], batch_size)])
    model.train(was_training)
    return out


@torch.inference_mode()
def predict_correct(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                    batch_size: int = INFERENCE_BATCH) -> np.ndarray:
    """Boolean array: which samples of (x, y) ``model`` classifies correctly."""
    was_training = model.training
    model.eval()
    hits = torch.cat([model(x[i:i + batch_size]).argmax(1) == y[i:i + batch_size]
                      for i in range(0, x.shape[0], batch_size)]) if x.shape[0] else torch.zeros(0, dtype=torch.bool)
    model.train(was_training)
    return hits.cpu().numpy()


@torch.no_grad()
def mean_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = INFERENCE_BATCH) -> float:
    """The mean cross-entropy of ``model`` on (x, y) in evaluation mode, summed in float64
    (NaN for no sample)."""
    n = int(y.shape[0])
    if n == 0:
        return math.nan
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=x.device)
    for i in range(0, n, batch_size):
        total += F.cross_entropy(model(x[i:i + batch_size]).float(), y[i:i + batch_size], reduction="sum").double()
    model.train(was_training)
    return float(total) / n
