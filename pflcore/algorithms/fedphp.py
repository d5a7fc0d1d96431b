"""FedPHP (Li, Zhan, Shao, Li, Song, ECML PKDD 2021): FedAvg plus a historical personal model
v_i per client that teaches the local training and inherits the local models.

Client round (section 4): a copy w_i of the received global model trains for E epochs on
(1 - lambda) CE + lambda R with the frozen v_i as teacher: R = MMD(phi(x), phi_v(x)) between
the two bodies' features (default) or KD, -sum softmax(v(x) / T) log softmax(w(x)) at
T = 4 (the authors' code: the student at temperature 1, no T^2 factor). Then
v_i <- mu_t v_i + (1 - mu_t) w_i with mu_t = min(mu cnt_i / (C T), mu), cnt_i the client's
earlier participations (0 at the first, so v_i becomes its first local model) and C T the
expected participations of a client (rounded, at least 1; the authors' code). w_i is
uploaded and averaged by n_i (FedAvg). v_i starts as the first received global model and
is the personal model.

MMD kernel: the authors' code sums five RBF kernels exp(-||u - v||^2 / s) with
s = s_0 * 2^k, k = -2..2, s_0 the batch's mean squared pairwise distance (no gradient)
(``mmd_kernel="adaptive"``, default); PFLlib, whose authors ran FedPHP for FedCP, uses
FedCP's fixed kernels a in {10, 15, 20, 50} (``"fixed"``). Both take the biased estimator
mean(K_xx) + mean(K_yy) - 2 mean(K_xy). PFLlib also scores the trained w_i instead of v_i
(``evaluate="local"``); its other departures (mixing at download, mu_t from the round
number, the global model as teacher) are not reproduced.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from ..models import SplitModel
from ..training import cross_entropy
from .base import TRAIN, Client, FederationInfo, Param, load, snapshot
from .fedavg import FedAvg
from .losses import rbf_mmd


def adaptive_rbf_mmd(x: torch.Tensor, y: torch.Tensor, kernels: int = 5, multiplier: float = 2.0) -> torch.Tensor:
    """Squared MMD with a sum of ``kernels`` RBF kernels exp(-||u - v||^2 / s), s = s_0 *
    multiplier^k for k = -(kernels // 2) .. kernels - 1 - kernels // 2, s_0 the mean squared
    distance between distinct points of the pooled batch (held constant); the biased
    estimator mean(K_xx) + mean(K_yy) - 2 mean(K_xy). Zero for identical batches."""
    n = x.shape[0]
    z = torch.cat([x, y]).float()
    m = z.shape[0]
    sq = (z * z).sum(1)
    dist = (sq[:, None] + sq[None, :] - 2.0 * (z @ z.t())).clamp_min(0.0)
    base = dist.detach().sum() / max(m * m - m, 1) + 1e-8
    kernel = sum(torch.exp(-dist / (base * multiplier ** (k - kernels // 2))) for k in range(kernels))
    return kernel[:n, :n].mean() + kernel[n:, n:].mean() - 2.0 * kernel[:n, n:].mean()


def moving_average(v: dict[str, torch.Tensor], w: dict[str, torch.Tensor], mu: float) -> dict[str, torch.Tensor]:
    """mu v + (1 - mu) w for floating-point entries (w itself when mu = 0); counters are w's."""
    if mu == 0:
        return {k: t.detach().clone() for k, t in w.items()}
    return {k: (mu * v[k] + (1.0 - mu) * t).to(t.dtype) if t.is_floating_point() else t.clone()
            for k, t in w.items()}


class FedPHP(FedAvg):
    name = "fedphp"
    paper = "Li, Zhan, Shao, Li, Song, ECML PKDD 2021"
    predicts_globally = False
    hyperparams = {
        "mu": Param(0.9, low=0, high=1, doc="the largest weight of the old v_i in its moving average"),
        "lam": Param(0.01, low=0, high=1, doc="lambda, the weight of the transfer term R against CE"),
        "reg": Param("mmd", choices=("mmd", "kd"), doc="R: MMD of the features or KD of the logits"),
        "temperature": Param(4.0, low=0, low_open=True, doc="T, the teacher's temperature for KD"),
        "mmd_kernel": Param("adaptive", choices=("adaptive", "fixed"),
                            doc="RBF bandwidths: from the batch (authors' code) or FedCP's 10/15/20/50 (PFLlib)"),
        "evaluate": Param("personal", choices=("personal", "local"),
                          doc="the model scored: v_i (paper) or the last local model w_i (PFLlib)"),
    }

    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        expected = max(1, round(info.participation * info.rounds))  # C T, a client's expected participations
        return {**super().init(model, info), "expected_participations": int(expected)}

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        if purpose == TRAIN:
            return {"model": state["model"], "expected_participations": state["expected_participations"]}
        return {"model": state["model"]}

    def client_modules(self, model: SplitModel) -> dict[str, nn.Module]:
        return {"teacher": copy.deepcopy(model)}

    def local_update(self, payload: dict, client: Client) -> dict:
        w = load(client.model, payload["model"])
        v = client.state.get("personal", payload["model"])
        loss = client.train(w.parameters(), loss_fn=self._loss(client.modules["teacher"], v))
        count = int(client.state.get("participations", 0))
        mu_t = min(float(self.mu) * count / int(payload["expected_participations"]), float(self.mu))
        local = snapshot(w)
        client.state["personal"] = moving_average(v, local, mu_t)
        client.state["participations"] = count + 1
        if self.evaluate == "local":
            client.state["local"] = local
        return {"model": local, "num_samples": client.num_samples, "loss": loss}

    def _loss(self, teacher: nn.Module, v: dict[str, torch.Tensor]):
        """(1 - lambda) CE + lambda R with the frozen v_i (plain CE when lambda = 0)."""
        lam = float(self.lam)
        if lam == 0:
            return cross_entropy
        load(teacher, v).eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
        mmd = adaptive_rbf_mmd if self.mmd_kernel == "adaptive" else rbf_mmd
        temperature = float(self.temperature)

        def loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            z = model.features(x)
            logits = model.head(z)
            with torch.no_grad():
                tz = teacher.features(x)
            if self.reg == "mmd":
                reg = mmd(z.flatten(1), tz.flatten(1))
            else:
                with torch.no_grad():
                    soft = F.softmax(teacher.head(tz).float() / temperature, dim=1)
                reg = -(soft * F.log_softmax(logits.float(), dim=1)).sum(1).mean()
            return (1.0 - lam) * F.cross_entropy(logits, y) + lam * reg

        return loss

    def shared_predictor(self, state: dict, model: SplitModel) -> None:
        return None  # every client predicts with its own model

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        key = "local" if self.evaluate == "local" else "personal"
        return load(client.model, client.state.get(key, payload["model"]))
