"""FedPAC (Xu, Tong, Huang, ICLR 2023): feature alignment to global class centroids and
classifier collaboration through a per-client quadratic programme.

Client round (paper Algorithm 1, as the authors' code runs it):
statistics of the received model (class means, prior, the variance term v and
h_k = pi_k mu_k, section 4.2 / appendix A.5), one head epoch at eta_g with the body
frozen, E body epochs on CE + lambda * MSE(z, global centroid of y) with the head frozen
(section 4.1, eq. 5), then the local centroids of the new features.

Server: body averaged by n_i; centroids averaged per class by class counts; for each
participant i the weights a_i = argmin a^T P a, sum a = 1, a >= 0 with
P = diag(v) + D, D[j1,j2] = sum_k (h_ik - h_j1k) . (h_ik - h_j2k) (eq. 46 with identity
covariance), and the personal head sum_j a_ij * head_j (section 4.2).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..models import SplitModel
from .base import (TRAIN, Algorithm, Client, FederationInfo, Param, ServerContext,
                   load, sample_weights, snapshot, weighted_average)


def feature_statistics(z: torch.Tensor, y: torch.Tensor, num_classes: int) -> dict[str, torch.Tensor]:
    """Class counts, prior pi, class means mu (zero rows for absent classes), the variance
    term v = [sum_k pi_k E_k||z||^2 - sum_k pi_k^2 ||mu_k||^2] / n, and h = pi * mu."""
    n = z.shape[0]
    counts = torch.bincount(y, minlength=num_classes).to(z.dtype)
    prior = counts / n
    means = torch.zeros(num_classes, z.shape[1], dtype=z.dtype, device=z.device).index_add_(0, y, z)
    means /= counts.clamp(min=1)[:, None]
    sq = torch.zeros(num_classes, dtype=z.dtype, device=z.device).index_add_(0, y, (z * z).sum(1))
    sq /= counts.clamp(min=1)
    v = (prior * sq - prior ** 2 * (means * means).sum(1)).sum() / n
    return {"counts": counts, "prior": prior, "means": means, "v": v, "h": prior[:, None] * means}


def alignment_loss(features: torch.Tensor, labels: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """The feature-alignment term lambda multiplies (section 4.1, eq. 5): the mean squared
    distance between each sample's features and its class's centroid (``centroids``: (C, d))."""
    return F.mse_loss(features, centroids[labels])


def combination_matrix(v: torch.Tensor, h: torch.Tensor, i: int, eig_floor: float = 0.01) -> np.ndarray:
    """P = diag(v) + D for client ``i`` among m participants (``v``: (m,), ``h``: (m, C, d)).

    D is the Gram matrix of the flattened differences h_i - h_j. If rounding leaves P with
    a negative eigenvalue, P is rebuilt from the eigenpairs with eigenvalue >= ``eig_floor``.
    """
    diff = (h[i][None] - h).reshape(h.shape[0], -1).double()
    p = torch.diag(v.double()) + diff @ diff.T
    p = 0.5 * (p + p.T)
    evals, evecs = torch.linalg.eigh(p)
    if bool((evals < 0).any()):
        keep = evals >= eig_floor
        p = (evecs[:, keep] * evals[keep]) @ evecs[:, keep].T
    return p.cpu().numpy()


def qp_solvers() -> list[str]:
    """The installed cvxpy solvers that can solve the combination QP (a convex quadratic
    objective, or its second-order-cone form)."""
    import cvxpy as cp
    from cvxpy.reductions.solvers.defines import CONIC_SOLVERS, QP_SOLVERS, SOLVER_MAP_CONIC

    socp = {name for name in CONIC_SOLVERS if cp.SOC in getattr(SOLVER_MAP_CONIC.get(name), "SUPPORTED_CONSTRAINTS", [])}
    return sorted(set(cp.installed_solvers()) & (set(QP_SOLVERS) | socp))


class SimplexQP:
    """min_a a^T P a s.t. sum(a) = 1, a >= 0, with cvxpy and a named solver.

    The problem is written as ||L a||^2 with P = L^T L and L a parameter, so cvxpy compiles it
    once per number of participants and re-solves cheaply."""

    def __init__(self, solver: str = "CLARABEL"):
        self.solver = solver
        self._problems: dict[int, tuple[Any, Any, Any]] = {}

    def solve(self, p: np.ndarray) -> np.ndarray:
        import cvxpy as cp

        m = p.shape[0]
        if m not in self._problems:
            a = cp.Variable(m)
            root = cp.Parameter((m, m))
            problem = cp.Problem(cp.Minimize(cp.sum_squares(root @ a)), [cp.sum(a) == 1, a >= 0])
            self._problems[m] = (problem, a, root)
        problem, a, root = self._problems[m]
        evals, evecs = np.linalg.eigh(0.5 * (p + p.T))
        root.value = (evecs * np.sqrt(np.clip(evals, 0, None))).T
        problem.solve(solver=self.solver, warm_start=False)  # no memory of earlier solves: exact resume
        if problem.status not in ("optimal", "optimal_inaccurate") or a.value is None:
            raise RuntimeError(f"QP status {problem.status}")
        return np.asarray(a.value, dtype=np.float64)


def combination_weights(p: np.ndarray, solver: SimplexQP, threshold: float = 1e-3) -> np.ndarray:
    """Solve the QP, zero weights <= ``threshold`` and renormalise (upstream's eps = 1e-3)."""
    a = solver.solve(p)
    a = np.where(a > threshold, a, 0.0)
    if a.sum() <= 0:
        raise RuntimeError("all combination weights fell below the threshold")
    return a / a.sum()


class FedPAC(Algorithm):
    name = "fedpac"
    paper = "Xu, Tong, Huang, ICLR 2023"
    hyperparams = {
        "lam": Param(1.0, low=0, doc="lambda, weight of the feature-alignment term (eq. 5)"),
        "head_lr": Param(0.1, low=0, low_open=True, doc="eta_g, the head's learning rate"),
        "head_epochs": Param(1, low=0, high=10000, doc="head epochs with the body frozen"),
        "feature_alignment": Param(True, doc='Table 2 "FA": align features to the global centroids'),
        "classifier_collab": Param(True, doc='Table 2 "CC": combine heads by the per-client QP'),
        "solver": Param("CLARABEL", choices=lambda: qp_solvers(), words="the name of an installed cvxpy solver",
                        doc="the cvxpy solver of the QP"),
        "weight_threshold": Param(1e-3, low=0, high=1, high_open=True,
                                  doc="combination weights at or below it are zeroed (upstream eps)"),
        "eig_floor": Param(0.01, low=0, doc="eigenvalue floor when rounding makes P indefinite"),
    }
    failure_counters = ("qp_failures",)

    def __init__(self, **params: Any):
        super().__init__(**params)
        self._qp = SimplexQP(self.solver)

    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        c, d = model.num_classes, model.feature_dim
        device = next(model.parameters()).device
        return {"body": snapshot(model.body), "init_head": snapshot(model.head), "heads": {},
                "centroids": torch.zeros(c, d, device=device),
                "has_centroid": torch.zeros(c, dtype=torch.bool, device=device),
                "weights": torch.zeros(0, 0), "weight_clients": torch.zeros(0, dtype=torch.long),
                "qp_failures": 0}

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        return {"body": state["body"], "head": state["heads"].get(client_id, state["init_head"]),
                "centroids": state["centroids"], "has_centroid": state["has_centroid"]}

    def local_update(self, payload: dict, client: Client) -> dict:
        model = client.model
        load(model.body, payload["body"])
        load(model.head, payload["head"])
        z = client.features(model)
        stats = feature_statistics(z, client.y, client.num_classes)

        # Head phase: one epoch at eta_g with the body frozen (exact on the fixed features z).
        client.train_head_on_features(model.head, z, epochs=int(self.head_epochs), lr=self.head_lr)

        # Body phase: CE + lambda * MSE to the global centroid of each sample's class
        # (own pre-training class mean where no global centroid exists; none in round 0).
        use_alignment = self.feature_alignment and bool(payload["has_centroid"].any())
        targets = torch.where(payload["has_centroid"][:, None].to(z.device),
                              payload["centroids"].to(z.device), stats["means"])
        lam = float(self.lam)

        def loss_fn(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            feats = m.body(x)
            loss = F.cross_entropy(m.head(feats), y)
            if use_alignment:
                loss = loss + lam * alignment_loss(feats, y, targets)
            return loss

        loss = client.train(model.body.parameters(), loss_fn=loss_fn)
        after = feature_statistics(client.features(model), client.y, client.num_classes)
        return {"body": snapshot(model.body), "head": snapshot(model.head), "num_samples": client.num_samples,
                "loss": loss, "centroids": after["means"], "counts": after["counts"],
                "h": stats["h"], "v": stats["v"]}

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        ids, sizes = sample_weights(updates)
        counts = torch.stack([updates[c]["counts"] for c in ids])            # (m, C)
        cents = torch.stack([updates[c]["centroids"] for c in ids])          # (m, C, d)
        total = counts.sum(0)
        held = total > 0
        pooled = (counts[:, :, None] * cents).sum(0) / total.clamp(min=1)[:, None]
        centroids = torch.where(held[:, None], pooled, state["centroids"])

        heads = dict(state["heads"])
        weights = torch.zeros(len(ids), len(ids))  # row/column r is participant ids[r]
        failures = 0
        own_heads = [updates[c]["head"] for c in ids]
        if self.classifier_collab:
            v = torch.stack([torch.as_tensor(updates[c]["v"]) for c in ids])
            h = torch.stack([updates[c]["h"] for c in ids])
            for row, cid in enumerate(ids):
                try:
                    a = combination_weights(combination_matrix(v, h, row, self.eig_floor), self._qp,
                                            self.weight_threshold)
                except Exception:  # solver failure: the client keeps its own head (counted)
                    a = np.eye(len(ids))[row]
                    failures += 1
                heads[cid] = weighted_average(own_heads, a.tolist())
                weights[row] = torch.as_tensor(a, dtype=weights.dtype)
        else:
            for row, cid in enumerate(ids):
                heads[cid] = own_heads[row]
                weights[row, row] = 1.0
        return {**state, "body": weighted_average([updates[c]["body"] for c in ids], sizes),
                "heads": heads, "centroids": centroids, "has_centroid": state["has_centroid"] | held,
                "weights": weights, "weight_clients": torch.tensor(ids), "qp_failures": failures}

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        load(client.model.body, payload["body"])
        load(client.model.head, payload["head"])
        return client.model

    def report(self, state: dict) -> dict[str, Any]:
        """The round's combination weights (participants x participants, with their ids) for
        the appendix C.1 heatmaps, and the number of failed solves."""
        return {"qp_failures": state["qp_failures"], "weights": state["weights"].numpy(),
                "weight_clients": state["weight_clients"].numpy()}
