"""pFedFDA (McLaughlin & Su, NeurIPS 2024): personalised federated learning by feature
distribution adaptation (Algorithm 1).

The classifier is generative: class-conditional Gaussians over the body's features with
means ``M``, one shared covariance ``S`` and the client's label priors ``pi`` give the
linear head (section 4.1)

    S~ = (1 - eps) S + eps tr(S)/d I,   W = (S~^-1 M^T)^T,   b_k = -1/2 mu_k . W_k + log pi_k.

A client round (Algorithm 1): the head is built from the GLOBAL means and covariance with
the client's priors and frozen; the body trains E epochs with cross-entropy; the features
of those training passes (``stat_features``) give the local means and covariance; beta
interpolates local and global statistics (section 4.2), chosen by 2-fold cross-validation
of the head's held-out cross-entropy with bounded L-BFGS; the client uploads its body and
the interpolated statistics, and the server averages all three weighted by n_i.

At evaluation every client re-solves beta on the eval-mode features of its whole train
split under the current global body and statistics, and predicts with the head of its
interpolated statistics (the authors' evaluation, without its drop_last loss of samples).

Settled from the authors' code, with its defects fixed by default:
- covariance (``covariance: upstream``, the recipe behind the paper's numbers): pooled
  within-class scatter / (N - 1), plus 1e-4 on every entry, plus I, then the nearest
  correlation matrix (eigenvalues clipped at 1e-15); ``covariance: ridge`` is scatter /
  (N - 1) + ``ridge`` I instead;
- a class's local mean needs more than 2 samples (upstream's check is always true in
  training); otherwise, and for absent classes, the global mean stands in;
- beta modes (``beta``): ``single`` (SB, one beta for means and covariance: the paper's
  headline), ``multi`` (MB, one for each: upstream's shipped default), ``none`` (NB,
  beta = 1: local statistics only);
- a client whose features cannot be split in two stratified folds uses beta = 0 (global
  statistics); a failed optimisation keeps the client's previous beta. Both are counted
  per round (``beta_unsplittable``, ``beta_failures``); failures are never silent.
"""
from __future__ import annotations

import math
import time
from typing import Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from ..models import SplitModel
from ..streams import PFEDFDA_MEANS_KEY as _MEANS_KEY
from ..training import INIT_KEY, Batch, derive_seed
from .base import (TRAIN, Algorithm, Client, FederationInfo, Param, ServerContext, load, sample_weights,
                   snapshot, weighted_average)

PRIOR_EPS = 1e-4       # added to every label frequency before renormalising (upstream)
SHRINK_EPS = 1e-4      # the head's shrinkage of the covariance towards tr(S)/d I
MIN_CLASS_COUNT = 3    # a class's local mean needs more than 2 samples
CV_FOLDS = 2
CV_SEED = 0            # the folds' fixed shuffle (upstream: StratifiedKFold(random_state=0))

# beta statuses a client reports
SOLVED, UNSPLITTABLE, FAILED, LOCAL_ONLY = 0, 1, 2, 3


# ---------------------------------------------------------------- the generative head
def generative_head(means: torch.Tensor, covariance: torch.Tensor, priors: torch.Tensor,
                    eps: float = SHRINK_EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """(W, b) of the linear classifier of Gaussians N(mu_k, S) with priors pi (section 4.1):
    logits = z W^T + b are the log-posteriors up to a constant, after shrinking S by ``eps``."""
    d = covariance.shape[0]
    eye = torch.eye(d, dtype=covariance.dtype, device=covariance.device)
    shrunk = (1 - eps) * covariance + eps * torch.trace(covariance) / d * eye
    weight = torch.linalg.solve(shrunk, means.T).T
    bias = -0.5 * (means * weight).sum(1) + torch.log(priors.to(means.device))  # priors may be a GPU client's
    return weight, bias


def label_priors(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """The client's label frequencies + 1e-4, renormalised (float64)."""
    freq = torch.bincount(labels, minlength=num_classes).double() / max(int(labels.numel()), 1)
    freq = freq + PRIOR_EPS
    return freq / freq.sum()


def class_statistics(features: torch.Tensor, labels: torch.Tensor, fallback_means: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Class means (a class with at most 2 samples takes ``fallback_means``' row), the
    pooled within-class scatter sum_i (z_i - mu_{y_i})(z_i - mu_{y_i})^T, and N."""
    z = features.double()
    c = fallback_means.shape[0]
    counts = torch.bincount(labels, minlength=c)
    sums = torch.zeros(c, z.shape[1], dtype=z.dtype, device=z.device).index_add_(0, labels, z)
    own = (counts >= MIN_CLASS_COUNT).unsqueeze(1)
    means = torch.where(own, sums / counts.clamp(min=1).unsqueeze(1).to(z.dtype), fallback_means.to(z))
    centered = z - means[labels]
    return means, centered.T @ centered, int(labels.numel())


def nearest_correlation_clip(cov: torch.Tensor, threshold: float = 1e-15) -> torch.Tensor:
    """The covariance whose correlation matrix has its eigenvalues clipped at ``threshold``
    and its diagonal rescaled to 1 (statsmodels' ``cov_nearest(method="clipped")``, the
    authors' step); ``cov`` itself when no eigenvalue is below the threshold."""
    std = torch.sqrt(torch.diagonal(cov))
    corr = cov / std.unsqueeze(0) / std.unsqueeze(1)
    values, vectors = torch.linalg.eigh(corr)
    if bool((values >= threshold).all()):
        return cov
    corr = (vectors * values.clamp(min=threshold)) @ vectors.T
    scale = torch.sqrt(torch.diagonal(corr))
    corr = corr / scale.unsqueeze(0) / scale.unsqueeze(1)
    return corr * std.unsqueeze(0) * std.unsqueeze(1)


def covariance_estimate(scatter: torch.Tensor, n: int, recipe: str = "upstream", ridge: float = 1e-4) -> torch.Tensor:
    """The shared covariance from a scatter matrix of ``n`` features: ``upstream`` (scatter/(n-1)
    + 1e-4 on every entry + I, nearest correlation clip) or ``ridge`` (scatter/(n-1) + ridge I)."""
    d = scatter.shape[0]
    eye = torch.eye(d, dtype=scatter.dtype, device=scatter.device)
    sample = scatter / max(n - 1, 1)
    if recipe == "upstream":
        return nearest_correlation_clip(sample + 1e-4 + eye)
    return sample + ridge * eye


def interpolate(beta: tuple[float, float], local: tuple[torch.Tensor, torch.Tensor],
                global_: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """beta * local + (1 - beta) * global for the means (beta[0]) and the covariance (beta[1])."""
    (bm, bc), (lm, lc), (gm, gc) = beta, local, global_
    return bm * lm + (1 - bm) * gm.to(lm), bc * lc + (1 - bc) * gc.to(lc)


# ---------------------------------------------------------------- choosing beta
def cv_folds(labels: np.ndarray, groups: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """The 2 stratified folds (train, held-out indices) over the samples of classes with at
    least 2 samples, shuffled with a fixed seed; all features of one ``groups`` value stay
    in one fold. None when no such split exists."""
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold

    values, counts = np.unique(labels, return_counts=True)
    keep = np.flatnonzero(np.isin(labels, values[counts >= CV_FOLDS]))
    if len(np.unique(labels[keep])) == 0 or len(keep) < CV_FOLDS:
        return None
    try:
        if groups is None:
            splitter = StratifiedKFold(CV_FOLDS, shuffle=True, random_state=CV_SEED)
            splits = splitter.split(keep, labels[keep])
        else:
            if len(np.unique(groups[keep])) < CV_FOLDS:
                return None
            splitter = StratifiedGroupKFold(CV_FOLDS, shuffle=True, random_state=CV_SEED)
            splits = splitter.split(keep, labels[keep], groups[keep])
        folds = [(keep[a], keep[b]) for a, b in splits]
    except ValueError:
        return None
    return folds if all(len(a) and len(b) for a, b in folds) else None


def solve_beta(features: torch.Tensor, labels: torch.Tensor, global_means: torch.Tensor,
               global_covariance: torch.Tensor, priors: torch.Tensor, *, mode: str = "single",
               recipe: str = "upstream", ridge: float = 1e-4, groups: np.ndarray | None = None,
               iterations: int = 10, tolerance: float = 1e-3) -> tuple[tuple[float, float] | None, int]:
    """beta by 2-fold cross-validation (section 4.2): minimise over beta in [0, 1] the SUM
    over folds of the held-out mean cross-entropy of the head built from beta * fold-local +
    (1 - beta) * global statistics (local priors), with scipy's bounded L-BFGS from 0.5.

    Returns ((beta_means, beta_cov), status): ``single`` ties the two, ``multi`` frees them,
    ``none`` is (1, 1). An unsplittable client gets (0, 0); a failed solve gives None."""
    from scipy.optimize import minimize

    if mode == "none":
        return (1.0, 1.0), LOCAL_ONLY
    y = labels.cpu().numpy()
    folds = cv_folds(y, groups)
    if folds is None:
        return (0.0, 0.0), UNSPLITTABLE
    z = features.double()
    gm, gc = global_means.double(), global_covariance.double()
    pri = priors.double()
    prepared = []
    for train_idx, held_idx in folds:
        tr = torch.as_tensor(train_idx)
        means, scatter, n = class_statistics(z[tr], labels[tr], gm)
        held = torch.as_tensor(held_idx)
        prepared.append((means, covariance_estimate(scatter, n, recipe, ridge), z[held], labels[held]))

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        beta = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        bm, bc = (beta[0], beta[0]) if mode == "single" else (beta[0], beta[1])
        total = 0.0
        for means, cov, zh, yh in prepared:
            m, c = interpolate((bm, bc), (means, cov), (gm, gc))
            weight, bias = generative_head(m, c, pri)
            total = total + F.cross_entropy(zh @ weight.T + bias, yh)
        total.backward()
        return float(total.detach()), beta.grad.numpy().copy()

    size = 1 if mode == "single" else 2
    try:
        with np.errstate(all="ignore"):
            result = minimize(objective, np.full(size, 0.5), jac=True, method="L-BFGS-B", bounds=[(0.0, 1.0)] * size,
                              options={"maxiter": iterations, "gtol": tolerance})
        x = np.clip(result.x, 0.0, 1.0)
        if not (np.all(np.isfinite(x)) and math.isfinite(float(result.fun))):
            return None, FAILED
    except (RuntimeError, ValueError, torch.linalg.LinAlgError):
        return None, FAILED
    return ((float(x[0]), float(x[0])) if mode == "single" else (float(x[0]), float(x[1]))), SOLVED


class PFedFDA(Algorithm):
    name = "pfedfda"
    paper = "McLaughlin & Su, NeurIPS 2024"
    failure_counters = ("beta_failures",)
    adapts_in_predictor = True  # a new client estimates its statistics and beta there (appendix C.3)
    hyperparams = {
        "beta": Param("single", choices=("single", "multi", "none"),
                      doc="SB (one beta), MB (means and covariance apart) or NB (beta = 1, local only)"),
        "stat_features": Param("all_epochs", choices=("all_epochs", "last_epoch", "fresh_pass"),
                               doc="features behind the local statistics: every training pass (upstream), "
                                   "the last epoch's, or one eval-mode pass after training"),
        "covariance": Param("upstream", choices=("upstream", "ridge"),
                            doc="upstream: +1e-4 everywhere + I, nearest correlation; ridge: + ridge I"),
        "ridge": Param(1e-4, low=0.0, doc="the ridge of covariance: ridge"),
        "cv_group_by_sample": Param(False, doc="keep all epochs' features of one sample in one fold"),
        "beta_iterations": Param(10, low=1, high=10000, doc="L-BFGS iterations of the beta solve"),
        "profile": Param(False, doc="time each step of a client's round (Table 9): network passes, "
                                   "statistics, beta; reported per round as seconds summed over clients"),
    }

    # -- server ---------------------------------------------------------------------
    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        head = self.check_head(model)
        d, c = head.in_features, head.out_features
        g = torch.Generator().manual_seed(derive_seed(info.seed, INIT_KEY, _MEANS_KEY))
        return {"body": snapshot(model.body),
                "means": torch.rand(c, d, generator=g, dtype=torch.float64),  # upstream: uniform random
                "covariance": torch.eye(d, dtype=torch.float64),
                "betas": torch.full((info.num_clients, 2), math.nan, dtype=torch.float64),
                "beta_failures": 0, "beta_unsplittable": 0}

    @staticmethod
    def check_head(model: SplitModel) -> nn.Linear:
        if not isinstance(model.head, nn.Linear):
            raise ConfigError("pfedfda builds a linear head from feature statistics: choose a model whose head "
                              "is one linear layer.")
        return model.head

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        return {k: state[k] for k in ("body", "means", "covariance")}

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        ids, weights = sample_weights(updates)
        stats = weighted_average([{k: updates[c][k] for k in ("means", "covariance")} for c in ids], weights)
        betas = state["betas"].clone()
        for c in ids:
            betas[c] = torch.as_tensor(updates[c]["beta"], dtype=torch.float64)
        status = [int(updates[c]["beta_status"]) for c in ids]
        new = {"body": weighted_average([updates[c]["body"] for c in ids], weights), **stats, "betas": betas,
               "beta_failures": status.count(FAILED), "beta_unsplittable": status.count(UNSPLITTABLE)}
        if self.profile:
            new["profile"] = {k: float(sum(updates[c]["profile"][k] for c in ids))
                              for k in ("passes", "statistics", "beta")}
        return new

    def report(self, state: dict) -> dict:
        out = {"beta_failures": state["beta_failures"], "beta_unsplittable": state["beta_unsplittable"],
               "beta": state["betas"].numpy().copy()}
        for key, seconds in state.get("profile", {}).items():
            out[f"seconds_{key}"] = seconds
        return out

    # -- client ---------------------------------------------------------------------
    def _beta(self, features: torch.Tensor, labels: torch.Tensor, payload: dict, client: Client,
              groups: np.ndarray | None = None) -> tuple[tuple[float, float], int]:
        beta, status = solve_beta(features, labels, payload["means"], payload["covariance"],
                                  label_priors(client.y, client.num_classes), mode=self.params["beta"],
                                  recipe=self.covariance, ridge=self.ridge, groups=groups,
                                  iterations=int(self.beta_iterations))
        if beta is None:  # the optimiser failed: keep the previous beta (0.5 before any)
            previous = client.state.get("beta")
            beta = (float(previous[0]), float(previous[1])) if previous is not None else (0.5, 0.5)
        return beta, status

    def _adapted(self, features: torch.Tensor, labels: torch.Tensor, payload: dict, beta: tuple[float, float]
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """The interpolated statistics of these features (Algorithm 1's last lines)."""
        means, scatter, n = class_statistics(features, labels, payload["means"].double())
        local = (means, covariance_estimate(scatter, n, self.covariance, self.ridge))
        return interpolate(beta, local, (payload["means"].double(), payload["covariance"].double()))

    def _set_head(self, model: SplitModel, means: torch.Tensor, covariance: torch.Tensor, client: Client) -> None:
        weight, bias = generative_head(means.double(), covariance.double(), label_priors(client.y, client.num_classes))
        with torch.no_grad():
            model.head.weight.copy_(weight.to(model.head.weight))
            model.head.bias.copy_(bias.to(model.head.bias))

    def local_update(self, payload: dict, client: Client) -> dict:
        started = time.perf_counter()
        model = client.model
        load(model.body, payload["body"])
        self._set_head(model, payload["means"], payload["covariance"], client)  # global statistics, frozen
        params = list(model.body.parameters())
        step = client.sgd(params)
        epochs = client.settings.epochs
        # each epoch's training features and the samples they belong to (the statistics' input)
        feats: list[list[torch.Tensor]] = [[] for _ in range(epochs)]
        seen: list[list[torch.Tensor]] = [[] for _ in range(epochs)]

        def train_step(batch: Batch) -> torch.Tensor:
            with batch.precision():
                z = model.body(batch.x)
                loss = F.cross_entropy(model.head(z), batch.y)
            step(loss)
            feats[batch.epoch].append(z.detach().float())
            seen[batch.epoch].append(batch.index)
            return loss

        with client.trainable(model, params):
            loss = client.loop(train_step)
        if self.stat_features == "fresh_pass" or not any(feats):
            features, index = client.features(model).float(), torch.arange(client.num_samples)
        else:
            chosen = range(epochs) if self.stat_features == "all_epochs" else [epochs - 1]
            features = torch.cat([f for e in chosen for f in feats[e]])
            index = torch.cat([i for e in chosen for i in seen[e]])
        labels = client.y[index.to(client.y.device)].cpu()
        features = features.cpu()
        groups = index.cpu().numpy() if self.cv_group_by_sample else None
        trained = time.perf_counter()
        beta, status = self._beta(features, labels, payload, client, groups)
        solved = time.perf_counter()
        means, covariance = self._adapted(features, labels, payload, beta)
        client.state["beta"] = torch.tensor(beta, dtype=torch.float64)
        update = {"body": snapshot(model.body), "means": means, "covariance": covariance,
                  "beta": torch.tensor(beta, dtype=torch.float64), "beta_status": status,
                  "num_samples": client.num_samples, "loss": loss}
        if self.profile:  # Table 9's split of a client's round (its lines 7, 8 and 9)
            update["profile"] = {"passes": trained - started, "beta": solved - trained,
                                 "statistics": time.perf_counter() - solved}
        return update

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        """The global body with the head of this client's interpolated statistics, beta
        re-solved on the eval-mode features of its whole train split (the authors'
        evaluation; a client that never trained is served the same way: Table 4)."""
        model = client.model
        load(model.body, payload["body"])
        features, labels = client.features(model).float().cpu(), client.y.cpu()
        beta, _ = self._beta(features, labels, payload, client)
        means, covariance = self._adapted(features, labels, payload, beta)
        self._set_head(model, means, covariance, client)
        return model
