"""HypCluster (Mansour, Mohri, Ro, Suresh, "Three approaches for personalization with
applications to federated learning", 2020, section 3 and its Algorithm HypCluster).

The server keeps k cluster models h_1..h_k. In a round every participant scores all k on
its own train data (the mean cross-entropy, evaluation mode, no gradients), picks the one
with the least loss (ties: the lowest index), trains it for the run's E epochs with the
run's settings (exactly FedAvg's local training) and uploads it with its cluster index.
The server averages the uploads of each cluster weighted by the train sizes n_i; a cluster
nobody picked keeps its model. A client's personal model is the cluster model with the
least loss on its train data under the current models (recomputed when it predicts, so
nothing is kept on the client).

Initialisation: the clusters start from INDEPENDENT random draws (a shared start would
make every client pick cluster 0 and the others would never move). Cluster 0 is the run's
initial model, so k = 1 is FedAvg bit for bit; cluster m >= 1 is a copy whose layers are
re-initialised by their own ``reset_parameters`` (the architectures' own init for the
ResNet bodies, see :func:`independent_inits`) under a seed derived from the run seed and m:
the same draws on every run and resume, the same as FedEM's components.

The number of clients that picked each cluster in the round is reported
(``cluster_<m>_clients``). The FedEM authors' public code has no HypCluster (its
``clustered`` baseline is Sattler et al.'s clustered FL), so nothing here follows it;
FedPAC (Xu et al., ICLR 2023, appendix C.4, Table 4) uses k = 3 and 5.
"""
from __future__ import annotations

import copy
import math
from typing import Mapping, Sequence

import torch
from torch import nn

from ..models import SplitModel
from ..streams import HYPCLUSTER_COPIES_KEY as _COPIES_KEY
from ..training import INIT_KEY, derive_seed, mean_loss
from .base import (TRAIN, Algorithm, Client, FederationInfo, Param, ServerContext, Tensors, load, snapshot,
                   weighted_average)

#: The key (after INIT_KEY) of the streams that draw the extra models' initial weights.


def _reset(module: nn.Module) -> None:
    """Re-draw ``module``'s weights as its constructor does: every module's own
    ``reset_parameters``, inner modules first, so a body whose init overrides its layers'
    (a ResNet's) applies it last."""
    for m in reversed(list(module.modules())):
        reset = getattr(m, "reset_parameters", None)
        if callable(reset):
            reset()


def independent_init(model: nn.Module, seed: int, index: int) -> Tensors:
    """The weights of ``model``'s architecture drawn afresh from a seed derived from
    ``seed`` and ``index`` (drawn on the CPU, so every device gets the same numbers; the
    tensors come back with ``model``'s devices, dtypes and layouts)."""
    fresh = copy.deepcopy(model).cpu()
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(derive_seed(seed, INIT_KEY, _COPIES_KEY, index))
        _reset(fresh)
    drawn = fresh.state_dict()
    out = {}
    for key, value in model.state_dict().items():
        out[key] = value.detach().clone()
        out[key].copy_(drawn[key])
    return out


def independent_inits(model: nn.Module, seed: int, count: int) -> list[Tensors]:
    """``count`` initial models: the given one first, then independent draws 1..count-1."""
    return [snapshot(model)] + [independent_init(model, seed, m) for m in range(1, count)]


def pick(losses: Sequence[float]) -> int:
    """The index of the least loss (ties: the lowest index; a non-finite loss never wins
    unless all are)."""
    best, best_loss = 0, math.inf
    for m, loss in enumerate(losses):
        if math.isfinite(loss) and loss < best_loss:
            best, best_loss = m, loss
    return best


class HypCluster(Algorithm):
    name = "hypcluster"
    paper = "Mansour, Mohri, Ro, Suresh, 2020"
    hyperparams = {"k": Param(3, low=1, high=100, doc="the number of cluster models")}

    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        k = int(self.k)
        return {"models": independent_inits(model, info.seed, k), "cluster_sizes": [0] * k}

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        return {"models": state["models"]}

    def choose(self, models: Sequence[Mapping[str, torch.Tensor]], client: Client) -> int:
        """The cluster whose model has the least mean loss on the client's train data."""
        if len(models) == 1:
            return 0
        return pick([mean_loss(load(client.model, m), client.x, client.y) for m in models])

    def local_update(self, payload: dict, client: Client) -> dict:
        models = payload["models"]
        cluster = self.choose(models, client)
        model = load(client.model, models[cluster])
        loss = client.train(model.parameters())
        return {"model": snapshot(model), "cluster": cluster, "num_samples": client.num_samples, "loss": loss}

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        models, sizes = list(state["models"]), [0] * len(state["models"])
        for m in range(len(models)):
            ids = [c for c in sorted(updates) if int(updates[c]["cluster"]) == m]
            sizes[m] = len(ids)
            weights = [float(updates[c]["num_samples"]) for c in ids]
            if ids and sum(weights) > 0:
                models[m] = weighted_average([updates[c]["model"] for c in ids], weights)
        return {**state, "models": models, "cluster_sizes": sizes}

    def report(self, state: dict) -> dict:
        return {f"cluster_{m}_clients": int(n) for m, n in enumerate(state["cluster_sizes"])}

    def shared_predictor(self, state: dict, model: SplitModel) -> nn.Module | None:
        return load(model, state["models"][0]) if len(state["models"]) == 1 else None

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        models = payload["models"]
        return load(client.model, models[self.choose(models, client)])


__all__ = ["HypCluster", "independent_init", "independent_inits", "pick"]
