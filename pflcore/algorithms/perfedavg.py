"""Per-FedAvg (Fallah, Mokhtari, Ozdaglar, NeurIPS 2020): FedAvg on the MAML objective
F_i(w) = f_i(w - alpha grad f_i(w)), so that one gradient step from w personalises well.

Client round (the paper's Algorithm 1): from the received w, every local step takes
independent batches D, D' (and D'' for HF) and does
    w~ = w - alpha grad f(w; D)                                    (the inner step)
    w  <- w - beta (I - alpha H(w; D'')) grad f(w~; D')            (the meta step)
``variant = "fo"`` (Per-FedAvg (FO), the default) drops the Hessian term; ``"hf"``
(Per-FedAvg (HF)) replaces H(w; D'') v by the gradient difference
[grad f(w + delta v) - grad f(w - delta v)] / (2 delta), v = grad f(w~; D'). On ReLU
networks that quotient differs from the exact H v wherever +-delta v crosses a kink. The
server averages the uploaded w by n_i (FedAvg); clients keep no state.

Personal model (the paper's evaluation): w after ``personal_steps`` plain gradient steps
at lr alpha on the client's TRAIN batches (from its evaluation-job generator), never on
test data.

Batches: D' runs through the client's standard batch stream (``client.batches()``, the
batches FedAvg would visit, in its order); D and D'' come from a second, independent
shuffle of the same train data. So a round has as many meta steps as FedAvg has steps,
and alpha = 0 is FedAvg with lr beta bit for bit. (PFLlib splits double batches into D
and D' and calls the client's training twice per round: the same number of meta steps.)
The inner and personal steps are the paper's plain gradient steps; the meta step is the
run's SGD (its momentum and weight decay) at lr beta. BatchNorm statistics see every
forward pass (D, D', D'').

Defaults: alpha = 0.005 (the original MNIST comparisons' setting, also FedCP's eta,
section 4); beta = 0 means the run's lr (those MNIST runs used 0.001); delta = 0.001.
"""
from __future__ import annotations

from typing import Callable, ContextManager, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ..models import SplitModel
from ..streams import PERFEDAVG_AUX_KEY as _AUX_KEY  # the second shuffle that D and D'' are drawn from
from ..training import Batch, derive_seed, shuffled_batches
from .base import Client, Param, load, snapshot
from .fedavg import FedAvg



class PerFedAvg(FedAvg):
    name = "perfedavg"
    paper = "Fallah, Mokhtari, Ozdaglar, NeurIPS 2020"
    predicts_globally = False
    hyperparams = {
        "alpha": Param(0.005, low=0, doc="alpha, the inner (and personalisation) step size"),
        "beta": Param(0.0, low=0, doc="beta, the meta step size (0: the run's lr)"),
        "variant": Param("fo", choices=("fo", "hf"), doc="'fo' first order, 'hf' Hessian-free (finite differences)"),
        "delta": Param(1e-3, low=0, low_open=True, doc="delta, the finite-difference step of 'hf'"),
        "personal_steps": Param(1, low=0, high=10000,
                                doc="SGD steps at lr alpha on train data that give the personal model"),
    }

    def meta_lr(self, client: Client) -> float:
        return float(self.beta) or client.settings.lr

    def local_update(self, payload: dict, client: Client) -> dict:
        model = load(client.model, payload["model"])
        params = list(model.parameters())
        step = client.sgd(params, lr=self.meta_lr(client))
        alpha, hf = float(self.alpha), self.variant == "hf"
        aux = self._aux_batches(client)

        def train_step(batch: Batch) -> torch.Tensor:
            """One MAML step: the inner step on an auxiliary batch D, the outer gradient on the
            loop's batch D' (section 4)."""
            saved = [p.detach().clone() for p in params]
            xd, yd = next(aux)
            inner = self._grad(model, params, xd, yd, batch.precision)[1]
            with torch.no_grad():
                torch._foreach_add_(params, inner, alpha=-alpha)          # w~ = w - alpha grad f(w; D)
            loss, direction, used = self._grad(model, params, batch.x, batch.y, batch.precision)  # grad f(w~; D')
            self._restore(params, saved)
            if hf:
                direction = self._hessian_corrected(model, params, saved, direction, next(aux), batch.precision)
            step.update([g if u else None for g, u in zip(direction, used)])
            return loss

        with client.trainable(model, params):
            loss = client.loop(train_step)
        return {"model": snapshot(model), "num_samples": client.num_samples, "loss": loss}

    def _hessian_corrected(self, model: nn.Module, params: list[nn.Parameter], saved: list[torch.Tensor],
                           v: list[torch.Tensor], batch: tuple[torch.Tensor, torch.Tensor],
                           precision: Callable[[], ContextManager]) -> list[torch.Tensor]:
        """v - alpha H(w; D'') v, with H v by central differences of gradients on D''."""
        delta = float(self.delta)
        grads = []
        for sign in (1.0, -1.0):
            with torch.no_grad():
                torch._foreach_add_(params, v, alpha=sign * delta)
            grads.append(self._grad(model, params, *batch, precision)[1])
            self._restore(params, saved)
        hv = torch._foreach_sub(grads[0], grads[1])
        return torch._foreach_add(v, hv, alpha=-float(self.alpha) / (2 * delta))

    @staticmethod
    def _grad(model: nn.Module, params: list[nn.Parameter], x: torch.Tensor, y: torch.Tensor,
              precision: Callable[[], ContextManager]) -> tuple[torch.Tensor, list[torch.Tensor], list[bool]]:
        with precision():
            loss = F.cross_entropy(model(x), y)
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        used = [g is not None for g in grads]  # a parameter the loss does not use is left alone, as in FedAvg
        return loss, [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)], used

    @staticmethod
    @torch.no_grad()
    def _restore(params: list[nn.Parameter], saved: list[torch.Tensor]) -> None:
        torch._foreach_copy_(params, saved)

    @staticmethod
    def _aux_batches(client: Client) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """An endless stream of batches from a second shuffle, seeded from the job's
        generator without drawing from it (the standard stream stays FedAvg's)."""
        probe = client.fresh_generator()
        seed = int(torch.randint(0, 2 ** 62, (1,), generator=probe, device=probe.device))
        g = torch.Generator(device=client.generator.device)
        g.manual_seed(derive_seed(seed, _AUX_KEY))
        return shuffled_batches(client.x, client.y, 2 ** 62, client.settings.batch_size, g)

    def shared_predictor(self, state: dict, model: SplitModel) -> None:
        return None  # each client adapts the global model on its own data

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        model = load(client.model, payload["model"])
        steps = int(self.personal_steps)
        if steps and float(self.alpha) and client.num_samples:
            params = list(model.parameters())

            def personal_step(batch: Batch) -> None:
                grads = self._grad(model, params, batch.x, batch.y, batch.precision)[1]
                with torch.no_grad():
                    torch._foreach_add_(params, grads, alpha=-float(self.alpha))

            with client.trainable(model, params):
                client.loop(personal_step, epochs=steps, max_steps=steps)
        return model
