"""CCVR (Luo, Chen, Hu, Zhang, Liang, Feng, NeurIPS 2021): classifier calibration with
virtual representations, after any method that trains one global model.

The method ``base`` (FedAvg by default; any method with ``predicts_globally``) runs
unchanged. After its last round (and every ``calibrate_every`` rounds, if set), a collect
phase asks every client for the per-class count N_ck, mean mu_ck and unbiased covariance
Sigma_ck of its training features under the global model (section 4). The server pools
them exactly: mu_c = sum_k N_ck mu_ck / N_c and
Sigma_c = [sum_k (N_ck - 1) Sigma_ck + sum_k N_ck mu_ck mu_ck^T - N_c mu_c mu_c^T] / (N_c - 1),
draws ``virtual_per_class`` features per class from N(mu_c, Sigma_c) with the server's
seeded generator, and retrains only the classifier on them with cross-entropy (SGD from
the trained head). The calibrated head is used for evaluation of that round only: the
next round trains the base method's own model on, and calibration does not feed back.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from ..errors import ConfigError
from ..models import SplitModel
from ..training import TrainSettings, sgd_train
from .base import EVALUATE, TRAIN, Algorithm, Client, FederationInfo, Param, ServerContext, load, snapshot
from .registry import ALGORITHMS, make_algorithm


def _global_methods() -> list[str]:
    return sorted(name for name, cls in ALGORITHMS.items() if cls.predicts_globally and cls is not CCVR)


def class_moments(z: torch.Tensor, y: torch.Tensor, num_classes: int) -> dict[str, torch.Tensor]:
    """Per-class count, mean and unbiased covariance (zero where a class has < 2 samples) of
    features ``z`` (n, d) with labels ``y``, in float64."""
    z = z.double()
    d = z.shape[1]
    counts = torch.bincount(y, minlength=num_classes).double()
    means = torch.zeros(num_classes, d, dtype=torch.float64, device=z.device).index_add_(0, y, z)
    means /= counts.clamp(min=1)[:, None]
    covs = torch.zeros(num_classes, d, d, dtype=torch.float64, device=z.device)
    for c in torch.nonzero(counts >= 2).flatten().tolist():
        centred = z[y == c] - means[c]
        covs[c] = centred.T @ centred / (counts[c] - 1)
    return {"counts": counts, "means": means, "covs": covs}


def pool_class_moments(parts: list[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The moments of the union of the clients' features, from each client's moments
    (exact: equal to :func:`class_moments` of the concatenated features)."""
    counts = torch.stack([p["counts"] for p in parts])            # (K, C)
    means = torch.stack([p["means"] for p in parts])              # (K, C, d)
    covs = torch.stack([p["covs"] for p in parts])                # (K, C, d, d)
    total = counts.sum(0)                                         # (C,)
    mean = (counts[..., None] * means).sum(0) / total.clamp(min=1)[:, None]
    scatter = ((counts - 1).clamp(min=0)[..., None, None] * covs).sum(0) \
        + torch.einsum("kc,kci,kcj->cij", counts, means, means) - total[:, None, None] * torch.einsum(
            "ci,cj->cij", mean, mean)
    cov = scatter / (total - 1).clamp(min=1)[:, None, None]
    cov[total < 2] = 0
    return {"counts": total, "means": mean, "covs": cov}


def sample_virtual_features(moments: Mapping[str, torch.Tensor], per_class: int,
                            generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``per_class`` draws from N(mu_c, Sigma_c) for every class with samples (float32)."""
    xs, ys = [], []
    for c in torch.nonzero(moments["counts"] > 0).flatten().tolist():
        evals, evecs = torch.linalg.eigh(moments["covs"][c].cpu())
        root = evecs * evals.clamp(min=0).sqrt()
        noise = torch.randn(per_class, root.shape[0], generator=generator, dtype=torch.float64)
        xs.append(moments["means"][c].cpu() + noise @ root.T)
        ys.append(torch.full((per_class,), c, dtype=torch.long))
    return torch.cat(xs).float(), torch.cat(ys)


class CCVR(Algorithm):
    name = "ccvr"
    paper = "Luo, Chen, Hu, Zhang, Liang, Feng, NeurIPS 2021"
    predicts_globally = True
    hyperparams = {
        "base": Param("fedavg", choices=_global_methods, doc="the global method whose classifier is calibrated"),
        "base_params": Param({}, doc="the base method's hyperparameters"),
        "virtual_per_class": Param(200, low=1, high=10000, doc="virtual features drawn per class"),
        "epochs": Param(10, low=1, high=10000, doc="epochs of classifier retraining on the virtual features"),
        "lr": Param(0.01, low=0, low_open=True, doc="its SGD learning rate (momentum: the run's)"),
        "calibrate_every": Param(0, low=0, doc="also calibrate every this many rounds (0: after the last only)"),
    }

    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> None:
        super().check_params(params)
        base = ALGORITHMS[params.get("base", cls.defaults["base"])]
        try:
            base.check_params(params.get("base_params", {}))
        except ConfigError as exc:
            raise ConfigError(f"config field 'method_params.base_params' of method 'ccvr' is not allowed: {exc}") \
                from None

    def __init__(self, **params: Any):
        super().__init__(**params)
        self.inner = make_algorithm(self.base, **self.base_params)
        self.failure_counters = self.inner.failure_counters

    # -- the base method, unchanged ---------------------------------------------------
    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        return {"base": self.inner.init(model, info), "head": {}}

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        # A collect phase looks at the model the base method would train next.
        payload = self.inner.payload(state["base"], client_id, EVALUATE if purpose == EVALUATE else TRAIN)
        return {"base": payload, "head": state["head"]}

    def client_modules(self, model: SplitModel) -> dict[str, nn.Module]:
        return self.inner.client_modules(model)

    def local_update(self, payload: dict, client: Client) -> dict:
        return self.inner.local_update(payload["base"], client)

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        return {"base": self.inner.aggregate(state["base"], updates, ctx), "head": {}}

    def report(self, state: dict) -> dict[str, Any]:
        return {**self.inner.report(state["base"]), "calibrated": int(bool(state["head"]))}

    def shared_predictor(self, state: dict, model: SplitModel) -> nn.Module:
        shared = self.inner.shared_predictor(state["base"], model)
        if state["head"]:
            load(shared.head, state["head"])
        return shared

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        model = self.inner.predictor(payload["base"], client)
        if payload["head"]:
            load(model.head, payload["head"])
        return model

    # -- the calibration --------------------------------------------------------------
    def collects(self, round_index: int, rounds: int) -> bool:
        every = int(self.calibrate_every)
        return round_index == rounds - 1 or bool(every and (round_index + 1) % every == 0)

    def collect(self, payload: dict, client: Client) -> dict:
        model = self.inner.predictor(payload["base"], client)
        return class_moments(client.features(model), client.y, client.num_classes)

    def absorb(self, state: dict, collected: Mapping[int, dict], ctx: ServerContext) -> dict:
        pooled = pool_class_moments([collected[c] for c in sorted(collected)])
        x, y = sample_virtual_features(pooled, int(self.virtual_per_class), ctx.generator)
        head = self.inner.shared_predictor(state["base"], ctx.model).head
        settings = TrainSettings(int(self.epochs), ctx.settings.batch_size, float(self.lr), ctx.settings.momentum, 0.0)
        sgd_train(head, head.parameters(), x.to(ctx.device), y.to(ctx.device), settings, ctx.generator)
        return {**state, "head": snapshot(head)}
