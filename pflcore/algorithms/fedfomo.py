"""FedFomo (Zhang, Sapra, Fidler, Yeung, Alvarez, ICLR 2021): each client combines the
personal models of the clients that help it most on its own validation data.

Server (section 3.3): it keeps every client's latest personal model theta_j and the
affinity matrix P (N x N, initially the identity). Client i's TRAIN payload carries its own
theta_i and M candidates theta_n: the others that have uploaded a model, ranked by P[i, n];
each of the M slots takes the best-ranked remaining one, or with probability
epsilon_t = max(0, epsilon - decay * t) (t the round) a random remaining one (epsilon-greedy
exploration; ties in P are broken at random). The draws come from a generator derived from
the run's seed, the round and the client, so ``payload`` stays a pure function of the state
and a resumed run draws the same candidates. An EVALUATE payload carries theta_i only.

Client (section 3.2, eq. 6): on a validation split (a fraction 0.2 of its train data, drawn
once from the run's seed and the client id, the same in every round)
w_n = max(0, (L(theta_i) - L(theta_n)) / ||theta_n - theta_i||) (parameters' L2 distance),
normalised to sum 1 (all zero: theta_i is kept); theta_i <- theta_i + sum_n w_n (theta_n -
theta_i) (every floating-point entry, BatchNorm statistics too; computed in float64, so one
helpful candidate is copied exactly); then E epochs of SGD on the training part only. It
uploads theta_i and the w_n; the server adds them to P[i, n]. A client's first
participation (no candidates yet) is plain local training from the initial model.

Switch: ``affinity="raw"`` adds the unclipped, unnormalised first-order weights to P, as
PFLlib does (negatives included). PFLlib also skips the exploration (``epsilon=0``), takes
its validation part as the last 20% of the train data in stored order and compares the
candidates with the model from before the previous local training; those are not copied.
"""
from __future__ import annotations

import copy
import math
from typing import Mapping

import torch
from torch import nn

from ..models import SplitModel
from ..streams import FEDFOMO_PICK_KEY as _PICK_KEY, FEDFOMO_SPLIT_KEY as _SPLIT_KEY
from ..training import derive_seed, mean_loss
from .base import TRAIN, Algorithm, Client, FederationInfo, Param, ServerContext, load, snapshot



def validation_split(num_samples: int, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(validation indices, training indices): a random ``fraction`` of the samples, fixed by ``seed``."""
    order = torch.randperm(num_samples, generator=torch.Generator().manual_seed(seed))
    n_val = int(fraction * num_samples)
    return order[:n_val], order[n_val:]


def fomo_weights(base_loss: float, losses: list[float], distances: list[float]) -> torch.Tensor:
    """The raw first-order weights (L(theta_i) - L(theta_n)) / ||theta_n - theta_i|| (eq. 6,
    0 for a candidate identical to theta_i), float64."""
    return torch.tensor([(base_loss - loss) / d if d > 0 else 0.0 for loss, d in zip(losses, distances)],
                        dtype=torch.float64)


def normalised(raw: torch.Tensor) -> torch.Tensor:
    """max(0, w) normalised to sum 1; all zeros if none is positive."""
    w = raw.clamp_min(0.0)
    total = float(w.sum())
    return w / total if total > 0 else w


def combine(own: Mapping[str, torch.Tensor], candidates: list[Mapping[str, torch.Tensor]],
            weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """theta_i + sum_n w_n (theta_n - theta_i) over floating-point entries (in float64);
    other entries (counters) stay theta_i's."""
    out = {}
    for key, value in own.items():
        if not value.is_floating_point():
            out[key] = value.clone()
            continue
        base = value.to(torch.float64)
        acc = base.clone()
        for w, cand in zip(weights.tolist(), candidates):
            if w:
                acc += w * (cand[key].to(torch.float64) - base)
        out[key] = acc.to(value.dtype)
    return out


class FedFomo(Algorithm):
    name = "fedfomo"
    paper = "Zhang, Sapra, Fidler, Yeung, Alvarez, ICLR 2021"
    hyperparams = {
        "num_models": Param(5, low=1, high=100, doc="M, candidate models a client downloads per round"),
        "epsilon": Param(0.3, low=0, high=1, doc="initial probability that a slot is filled at random"),
        "epsilon_decay": Param(0.05, low=0, doc="decrease of epsilon per round"),
        "val_fraction": Param(0.2, low=0, high=1, high_open=True,
                              doc="fraction of a client's train data held out (fixed) to score candidates"),
        "affinity": Param("normalised", choices=("normalised", "raw"),
                          doc="what is added to P: the normalised weights (paper) or the raw ones (PFLlib)"),
    }

    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        device = next(model.parameters()).device
        return {"initial": snapshot(model), "models": {}, "seed": int(info.seed), "round": 0,
                "P": torch.eye(info.num_clients, dtype=torch.float64, device=device)}

    def client_modules(self, model: SplitModel) -> dict[str, nn.Module]:
        return {"candidate": copy.deepcopy(model)}

    def candidates(self, state: dict, client_id: int) -> list[int]:
        """The M clients whose models client ``client_id`` downloads this round (epsilon-greedy
        over P's row among the others that have a model)."""
        pool = sorted(n for n in state["models"] if n != client_id)
        if not pool:
            return []
        g = torch.Generator().manual_seed(derive_seed(state["seed"], _PICK_KEY, int(state["round"]), client_id))
        epsilon = max(0.0, float(self.epsilon) - float(self.epsilon_decay) * int(state["round"]))
        row = state["P"][client_id].tolist()
        ties = torch.rand(len(pool), generator=g).tolist()
        ranked = [pool[k] for k in sorted(range(len(pool)), key=lambda k: (-row[pool[k]], ties[k]))]
        shuffled = [pool[k] for k in torch.randperm(len(pool), generator=g).tolist()]
        explore = (torch.rand(len(pool), generator=g) < epsilon).tolist()
        chosen: list[int] = []
        for slot in range(min(int(self.num_models), len(pool))):
            source = shuffled if explore[slot] else ranked
            chosen.append(next(n for n in source if n not in chosen))
        return chosen

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        own = state["models"].get(client_id, state["initial"])
        if purpose != TRAIN:
            return {"model": own}  # prediction needs the personal model only
        return {"model": own, "candidates": {n: state["models"][n] for n in self.candidates(state, client_id)},
                "split_seed": derive_seed(state["seed"], _SPLIT_KEY, client_id)}

    def local_update(self, payload: dict, client: Client) -> dict:
        val, train = validation_split(client.num_samples, float(self.val_fraction), int(payload["split_seed"]))
        val, train = val.to(client.x.device), train.to(client.x.device)
        own, ids = payload["model"], sorted(payload["candidates"])
        model = load(client.model, own)
        raw = torch.zeros(len(ids), dtype=torch.float64)
        weights = raw
        if ids and val.numel() > 0:
            xv, yv = client.x[val], client.y[val]
            base_loss = mean_loss(model, xv, yv)
            scratch = client.modules["candidate"]
            losses, distances = [], []
            for n in ids:
                theta = payload["candidates"][n]
                losses.append(mean_loss(load(scratch, theta), xv, yv))
                distances.append(math.sqrt(sum(float(((theta[k].double() - own[k].double()) ** 2).sum())
                                               for k, _ in model.named_parameters())))
            raw = fomo_weights(base_loss, losses, distances)
            weights = normalised(raw)
            if float(weights.sum()) > 0:
                load(model, combine(own, [payload["candidates"][n] for n in ids], weights))
        loss = client.train(model.parameters(), model=model, data=(client.x[train], client.y[train]))
        return {"model": snapshot(model), "ids": ids, "weights": raw if self.affinity == "raw" else weights,
                "num_samples": int(train.numel()), "loss": loss}

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        models, affinity = dict(state["models"]), state["P"].clone()
        for cid in sorted(updates):
            update = updates[cid]
            models[cid] = update["model"]
            for n, w in zip(update["ids"], update["weights"].tolist()):
                affinity[cid, int(n)] += w
        return {**state, "models": models, "P": affinity, "round": ctx.round + 1}

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        return load(client.model, payload["model"])

    def report(self, state: dict) -> dict:
        """The affinity matrix P after the round (the client-to-client weights of figure 6)."""
        return {"affinity": state["P"].detach().cpu().float().numpy()}
