"""FedFA (Zhou, Zhang, Tsang, "FedFA: Federated Learning with Feature Anchors to Align
Feature and Classifier for Heterogeneous Data", section 4 and Algorithm 1 of appendix E):
a global model trained with shared feature anchors and a classifier calibrated on them.

Anchors (section 4): the server creates C anchors in the feature space once, C random
rows of the identity I_d (distinct, in random order; Property 1's orthogonal anchors;
``anchor_init = "gaussian"``: rows of a standard normal matrix scaled to unit norm, also
used when C > d), drawn from the run seed. d is the model's feature dimension
(``fedfa_cnn``: the 192 post-ReLU features).

Client round (Algorithm 1), from the received model w and anchors A, for E epochs of the
run's shuffled batches (last partial batch kept), per mini-batch (x, y):

1. one SGD step (the round's lr, the run's momentum and weight decay, all parameters) on
   equation (6), CE(h(f), y) + mu * L_A with f = phi(x), mu = 0.1, and the anchor loss as
   the authors' code computes it: L_A = (1/C) * sum over the classes c present in the
   batch of the mean over the batch's class-c samples of ||f - a_c||^2 (equation (5)
   writes 1/(2 n) * sum_j ||f_j - a_{y_j}||^2 instead);
2. classifier calibration, equation (7): one step of CE(h(A), (0, ..., C-1)) on the
   classifier's weight and bias only, by Adam (lr ``calibration_lr`` = 1e-3, torch's
   defaults otherwise) created at the start of the round, as the authors' code does;
   ``calibration_optimizer = "sgd"``: a plain gradient step with the round's lr (no
   momentum, no weight decay), as Algorithm 1 writes it.

The anchors used in steps 1 and 2 stay the received ones all round (section 4, step 3).
Anchor update (equations (16), (17)): a_bar starts at A; at the end of every epoch, for
each class c the client holds, a_bar_c <- m * a_bar_c + (1 - m) * mean_c with m =
``anchor_momentum`` (0.5), mean_c the mean over the epoch's batches that contain class c of
the batch's mean class-c feature (from the forward pass of step 1: before the step, in
training mode). Rows of classes the client lacks are unchanged. The client uploads its
model and a_bar.

Server (equation (8)): the n_i-weighted average of the participants' models and of their
whole anchor matrices (so a class held by some participants mixes their means with the
old anchor the others carried; a class no participant holds keeps its anchor exactly).
Evaluation: the global model (``predicts_globally``).

Deviations from the authors' code (TailinZhou/FedFA), each a fix with a switch back where
it changes the method:

- upstream divides the sum of per-batch class means by ALL batches of the epoch, so a
  class present in few batches shrinks towards zero; here by the batches that contain it
  (``upstream_anchor_division = True``: upstream's);
- upstream reseeds every client's batch order with the run seed (the same order for every
  client and round); here each (round, client) draws its own from the run seed.

Elsewhere in pflcore: upstream's per-round decay lr * 0.99^t of every method is the config
field ``lr_decay`` (on in :mod:`pflcore.papers.fedfa`); upstream normalises FMNIST with
MNIST's statistics, pflcore with the dataset's own.

Ablations (Tables 3, 5, 6, 7): ``anchor_update = False`` (no EMA: the anchors never move),
``calibration`` "batch" (default) / "epoch" (one step at each epoch end, after the
epoch's EMA) / "none"; ``anchor_init``; ``anchor_momentum`` m in [0, 1] (m = 1: the
anchors never move); ``initialization`` "random" (default), "fedavg_round" (round 0
trains without the anchor loss, calibration and EMA on; the paper pairs it with Gaussian
anchors: set ``anchor_init = "gaussian"`` too) or "from_run" (the anchors of a finished
run's final state, ``anchors_from``: its results folder or its ``final_state.pt``). CCVR
after training (Table 5) is pflcore's ``ccvr`` method with ``base = "fedfa"``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from ..models import SplitModel
from ..streams import FEDFA_ANCHOR_KEY as _ANCHOR_KEY
from ..training import INIT_KEY, Batch, SGDStep, TrainSettings, generator_for
from .base import (TRAIN, Algorithm, Client, FederationInfo, Param, ServerContext, load, sample_weights, snapshot,
                   weighted_average)

#: The key (after INIT_KEY) of the stream that draws the anchors: not the model's.


def initial_anchors(num_classes: int, dim: int, kind: str, generator: torch.Generator) -> torch.Tensor:
    """C x d anchors: ``kind = "identity"``: C distinct random rows of I_d in random order
    (C <= d); ``"gaussian"`` (and whenever C > d): standard normal rows scaled to unit norm."""
    if kind == "identity" and num_classes <= dim:
        rows = torch.randperm(dim, generator=generator)[:num_classes]
        return torch.eye(dim)[rows]
    return F.normalize(torch.randn(num_classes, dim, generator=generator), dim=1)


def anchor_loss(features: torch.Tensor, y: torch.Tensor, anchors: torch.Tensor,
                counts: torch.Tensor | None = None) -> torch.Tensor:
    """FedFA's anchor loss in the authors' form of equation (5): (1/C) * sum over the
    classes present in the batch of the mean over their samples of ||f - a_c||^2.
    ``counts``: the batch's class counts (``bincount(y, minlength=C)``), if computed."""
    num_classes = anchors.shape[0]
    if counts is None:
        counts = torch.bincount(y, minlength=num_classes)
    squared = (features - anchors.index_select(0, y)).pow(2).sum(1)
    return (squared / counts.index_select(0, y)).sum() / num_classes


class AdamStep:
    """Adam (torch's defaults: betas (0.9, 0.999), eps 1e-8, no weight decay) over a few
    tensors: the foreach operations of ``torch.optim.Adam(foreach=True)`` without its
    per-step bookkeeping (a test checks it against torch's): ``update(grads)``."""

    def __init__(self, params: list[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        self.params, self.lr, self.betas, self.eps = params, lr, betas, eps
        self.exp_avg = [torch.zeros_like(p) for p in params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in params]
        self.steps = 0

    @torch.no_grad()
    def update(self, grads: list[torch.Tensor]) -> None:
        beta1, beta2 = self.betas
        self.steps += 1
        torch._foreach_lerp_(self.exp_avg, grads, 1 - beta1)
        torch._foreach_mul_(self.exp_avg_sq, beta2)
        torch._foreach_addcmul_(self.exp_avg_sq, grads, grads, 1 - beta2)
        step_size = self.lr / (1 - beta1 ** self.steps)
        denom = torch._foreach_sqrt(self.exp_avg_sq)
        torch._foreach_div_(denom, (1 - beta2 ** self.steps) ** 0.5)
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(self.params, self.exp_avg, denom, -step_size)


class Calibration:
    """The classifier calibration step, equation (7): one step of CE(h(A), (0..C-1)) on
    the head's weight and bias, by Adam (its state kept across the round's steps) or plain
    SGD."""

    def __init__(self, head: nn.Linear, anchors: torch.Tensor, optimizer: str, lr: float):
        self.head, self.anchors = head, anchors
        self.params = [head.weight, head.bias]
        self.targets = torch.arange(anchors.shape[0], device=anchors.device)
        if optimizer == "adam":
            self.step = AdamStep(self.params, lr)
        else:
            self.step = SGDStep(self.params, TrainSettings(1, 1, lr, momentum=0.0, weight_decay=0.0))

    def __call__(self) -> None:
        loss = F.cross_entropy(F.linear(self.anchors, self.head.weight, self.head.bias), self.targets)
        self.step.update(list(torch.autograd.grad(loss, self.params)))


class FedFA(Algorithm):
    name = "fedfa"
    paper = "Zhou, Zhang, Tsang, FedFA (feature anchors)"
    predicts_globally = True
    hyperparams = {
        "mu": Param(0.1, low=0, doc="weight of the anchor loss"),
        "anchor_momentum": Param(0.5, low=0, high=1, doc="m of the anchor update a <- m a + (1 - m) mean"),
        "anchor_update": Param(True, doc="update the anchors from the clients' features (False: fixed anchors)"),
        "calibration": Param("batch", choices=("batch", "epoch", "none"),
                             doc="classifier calibration on the anchors: after every batch, at each epoch end, "
                                 "or never"),
        "calibration_optimizer": Param("adam", choices=("adam", "sgd"),
                                       doc="Adam re-created each round (the authors' code) or a plain step with "
                                           "the round's lr (the paper's Algorithm 1)"),
        "calibration_lr": Param(1e-3, low=0, low_open=True, doc="Adam's lr for the calibration"),
        "anchor_init": Param("identity", choices=("identity", "gaussian"),
                             doc="random rows of the identity, or unit-norm Gaussian rows"),
        "upstream_anchor_division": Param(False, doc="divide a class's summed batch means by all batches of the "
                                                     "epoch, as the authors' code does (default: by the batches "
                                                     "holding the class)"),
        "initialization": Param("random", choices=("random", "fedavg_round", "from_run"),
                                doc="anchors as drawn; round 0 without the anchor loss; or a finished run's "
                                    "anchors (anchors_from)"),
        "anchors_from": Param("", doc="for initialization from_run: a finished FedFA run's results folder or "
                                      "its final_state.pt"),
    }

    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> None:
        super().check_params(params)
        given = bool(params.get("anchors_from", ""))
        if (params.get("initialization") == "from_run") != given:
            raise ConfigError("config field 'method_params.anchors_from' of method 'fedfa' goes with "
                              "initialization 'from_run' and only with it: give both or neither.")

    # -- server -----------------------------------------------------------------------
    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        state = snapshot(model)
        device = next(iter(state.values())).device
        if self.initialization == "from_run":
            anchors = self.saved_anchors(info.num_classes, model.head.in_features)
        else:
            anchors = initial_anchors(info.num_classes, model.head.in_features, str(self.anchor_init),
                                      generator_for(info.seed, INIT_KEY, _ANCHOR_KEY))
        return {"model": state, "anchors": anchors.to(device)}

    def saved_anchors(self, num_classes: int, dim: int) -> torch.Tensor:
        """The anchors of the finished run ``anchors_from`` (its final server state)."""
        path = Path(str(self.anchors_from)).expanduser()
        if path.is_dir():
            path = path / "final_state.pt"
        try:
            saved = torch.load(path, map_location="cpu", weights_only=True)
            anchors = saved["sim"]["state"]["anchors"]
        except FileNotFoundError:
            raise ConfigError(f"config field 'method_params.anchors_from' = {str(self.anchors_from)!r} is not "
                              f"allowed: {path} does not exist (a finished run keeps its final state there).") \
                from None
        except Exception:
            raise ConfigError(f"config field 'method_params.anchors_from' = {str(self.anchors_from)!r} is not "
                              f"allowed: {path} holds no FedFA final state with anchors.") from None
        if not isinstance(anchors, torch.Tensor) or tuple(anchors.shape) != (num_classes, dim):
            raise ConfigError(f"config field 'method_params.anchors_from' = {str(self.anchors_from)!r} is not "
                              f"allowed: its anchors are not {num_classes} x {dim} (this run's classes x features).")
        return anchors.float()

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        if purpose == TRAIN:
            return {"model": state["model"], "anchors": state["anchors"]}
        return {"model": state["model"]}

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        ids, weights = sample_weights(updates)
        out = {**state, "model": weighted_average([updates[c]["model"] for c in ids], weights)}
        if self.anchor_update:
            out["anchors"] = weighted_average([{"a": updates[c]["anchors"]} for c in ids], weights)["a"]
        return out

    def shared_predictor(self, state: dict, model: SplitModel) -> nn.Module:
        return load(model, state["model"])

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        return load(client.model, payload["model"])

    # -- client -----------------------------------------------------------------------
    def local_update(self, payload: dict, client: Client) -> dict:
        model = load(client.model, payload["model"])
        device = client.x.device
        anchors = payload["anchors"].to(device=device, dtype=torch.float32)
        num_classes = anchors.shape[0]
        params = list(model.parameters())
        step = client.sgd(params)
        calibrate = None
        if self.calibration != "none":
            lr = float(self.calibration_lr) if self.calibration_optimizer == "adam" else client.settings.lr
            calibrate = Calibration(model.head, anchors, str(self.calibration_optimizer), lr)
        with_anchor_loss = float(self.mu) > 0 and not (self.initialization == "fedavg_round" and client.round == 0)
        mu, m = float(self.mu), float(self.anchor_momentum)
        own = (client.class_counts() > 0).to(device)[:, None]
        # per epoch and class: the sum of the class's batch means and the batches holding it
        epoch = {"sums": torch.zeros_like(anchors), "holding": torch.zeros(num_classes, device=device), "batches": 0,
                 "moving": anchors.clone()}

        def train_step(batch: Batch) -> torch.Tensor:
            with batch.precision():
                f = model.body(batch.x)
                logits = model.head(f)
            f = f.float()
            loss = F.cross_entropy(logits.float(), batch.y)
            counts = torch.bincount(batch.y, minlength=num_classes)
            if with_anchor_loss:
                loss = loss + mu * anchor_loss(f, batch.y, anchors, counts)
            step(loss)
            if calibrate is not None and self.calibration == "batch":
                calibrate()
            if self.anchor_update:
                with torch.no_grad():
                    class_sums = torch.zeros_like(anchors).index_add_(0, batch.y, f.detach())
                    epoch["sums"] += class_sums / counts.clamp(min=1)[:, None]
                    epoch["holding"] += counts > 0
            epoch["batches"] += 1
            return loss

        def end_of_epoch(_: int) -> None:
            """Algorithm 1's anchor update from the epoch's class means, then the epoch-end
            calibration (Table 5's "epoch" timing)."""
            if self.anchor_update and epoch["batches"]:
                holding = epoch["holding"]
                divisor = torch.full_like(holding, epoch["batches"]) if self.upstream_anchor_division \
                    else holding.clamp(min=1)
                means = epoch["sums"] / divisor[:, None]
                epoch["moving"] = torch.where(own, m * epoch["moving"] + (1 - m) * means, epoch["moving"])
            epoch.update(sums=torch.zeros_like(anchors), holding=torch.zeros(num_classes, device=device), batches=0)
            if calibrate is not None and self.calibration == "epoch":
                calibrate()

        with client.trainable(model, params):
            loss = client.loop(train_step, on_epoch_end=end_of_epoch)
        moving = epoch["moving"]
        update = {"model": snapshot(model), "num_samples": client.num_samples, "loss": loss}
        if self.anchor_update:
            update["anchors"] = moving
        return update


__all__ = ["FedFA", "AdamStep", "Calibration", "anchor_loss", "initial_anchors"]
