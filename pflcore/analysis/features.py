"""Feature analysis of client models (FedFA, Zhou, Zhang, Tsang, ICLR 2023): the
verification set, every client's features on it, t-SNE and cosine-similarity histograms
(section 3, Figures 2 and 6-9; appendix F.2), and the per-round feature distance and
classifier-update similarity (section 5, Figure 4).

Works on any pflcore method: features come from each client's predictor (the model the
client uses for inference, as in the engine's evaluation) or from any mapping client ->
model with a ``body``. :func:`local_models` gives the models clients return after one
round of local training (the paper's "local models"; for a global method such as FedAvg
every client's predictor is the one global model).

The per-round statistics of Figure 4 are pure functions (:func:`feature_distance`,
:func:`classifier_update_similarity`, :func:`round_feature_statistics`) meant to be called
after local training and before aggregation.
"""
from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from ..algorithms.base import EVALUATE, TRAIN, snapshot
from ..engine.hooks import RunHook, register_hook
from ..training import EVAL_KEY, INFERENCE_BATCH, TRAIN_KEY
from .feature_plots import plot_cosine_histograms, plot_tsne  # drawn there; importable from here as before

#: Cosine similarity's guard against zero vectors (torch's ``cosine_similarity`` default):
#: a zero vector (e.g. an all-zero post-ReLU feature, or a head row that did not move) has
#: cosine 0 with everything.
COSINE_EPS = 1e-8


# ------------------------------------------------------------------ verification set
def verification_set(data, per_class: int = 10, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """FedFA appendix F.2: ``per_class`` test samples of every class, drawn from the pooled
    test data of all clients, the same for every model (deterministic in ``seed``).

    Returns ``(x, y)`` ordered by class (then by pooled index), on the data's device. A
    class with fewer test samples gives all it has (a warning names it); a class with none
    is left out."""
    if per_class < 1:
        raise ValueError(f"per_class must be at least 1, got {per_class}.")
    y_all = data.all_test_y().cpu().numpy()
    rng = np.random.default_rng(seed)
    chosen, short = [], []
    for c in range(int(data.num_classes)):
        idx = np.flatnonzero(y_all == c)
        if len(idx) < per_class:
            short.append(f"{c} ({len(idx)})")
        take = idx if len(idx) <= per_class else np.sort(rng.choice(idx, per_class, replace=False))
        chosen.append(take)
    if short:
        warnings.warn(f"the pooled test data has fewer than {per_class} samples of class(es) {', '.join(short)}: "
                      "the verification set holds all there are.", stacklevel=2)
    index = torch.from_numpy(np.concatenate(chosen).astype(np.int64)).to(data.all_test_y().device)
    return data.all_test_x()[index], data.all_test_y()[index]


def held_classes(data, client: int, min_count: int = 1) -> tuple[int, ...]:
    """The classes ``client`` holds in its train split (at least ``min_count`` samples)."""
    counts = data.class_counts("train")[int(client)]
    return tuple(int(c) for c in np.flatnonzero(counts >= min_count))


def _held_map(held, clients: Iterable[int], num_classes: int) -> dict[int, set[int]]:
    """``held`` as client -> set of classes: a mapping, a FederatedData (its train splits),
    or None (every client holds every class)."""
    if held is None:
        return {k: set(range(num_classes)) for k in clients}
    if hasattr(held, "class_counts"):
        return {k: set(held_classes(held, k)) for k in clients}
    missing = [k for k in clients if k not in held]
    if missing:
        raise KeyError(f"held names no classes for client(s) {missing}.")
    return {k: {int(c) for c in held[k]} for k in clients}


# ------------------------------------------------------------------ client features
def _with_body(model: nn.Module) -> nn.Module:
    """The module whose ``body`` gives the features: the model itself, or a wrapper's
    inner ``model`` (kNN-Per's predictor)."""
    if hasattr(model, "body"):
        return model
    inner = getattr(model, "model", None)
    if isinstance(inner, nn.Module) and hasattr(inner, "body"):
        return inner
    raise TypeError(f"a {type(model).__name__} has no feature extractor `body`, so its features cannot be "
                    "compared with other models' (give a model split into body and head).")


@torch.inference_mode()
def model_features(model: nn.Module, x: torch.Tensor, batch_size: int = INFERENCE_BATCH) -> torch.Tensor:
    """``body(x)`` of ``model`` (post-activation for pflcore's models) in evaluation mode,
    without gradients, in batches; float32 on the CPU. The training flags are restored."""
    holder = _with_body(model)
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    holder.eval()
    try:
        device = next((p.device for p in holder.body.parameters()), x.device)
        out = [holder.body(x[i:i + batch_size].to(device)).float().flatten(1).cpu()
               for i in range(0, x.shape[0], batch_size)]
    finally:
        for m, flag in flags:
            m.training = flag
    return torch.cat(out) if out else torch.zeros(0, 0)


def client_features(source, x: torch.Tensor, clients: Iterable[int] | None = None,
                    round_index: int | None = None) -> dict[int, torch.Tensor]:
    """FedFA section 3 / appendix F.2: every client's features on the same inputs ``x``.

    ``source``: a :class:`~pflcore.engine.Simulation` (each client's predictor, built as
    the engine's evaluation builds it, from the current server and personal states, which
    are left unchanged; a global method's one model serves all clients), or a mapping
    client -> model with a ``body``. ``round_index``: the round whose evaluation draws a
    predictor that trains (fine-tuning methods) uses; default the run's last round.
    Returns client -> (len(x), d) float32 CPU tensor."""
    if isinstance(source, Mapping):
        ids = list(source) if clients is None else [int(c) for c in clients]
        return {k: model_features(source[k], x) for k in ids}
    if not (hasattr(source, "algorithm") and hasattr(source, "state")):
        raise TypeError(f"client_features takes a Simulation or a mapping client -> model, got "
                        f"{type(source).__name__}.")
    sim = source
    ids = list(range(sim.data.num_clients)) if clients is None else [int(c) for c in clients]
    shared = sim.algorithm.shared_predictor(sim.state, sim.model)
    if shared is not None:
        features = model_features(shared, x)
        return {k: features for k in ids}
    r = sim.config.rounds - 1 if round_index is None else int(round_index)
    out = {}
    for k in ids:  # one at a time: a predictor is usually the worker's scratch model, reused
        client = sim.worker.client(k, r, EVAL_KEY, dict(sim.client_states.get(k, {})))
        out[k] = model_features(sim.algorithm.predictor(sim.algorithm.payload(sim.state, k, EVALUATE), client), x)
    return out


def local_models(sim, round_index: int, clients: Iterable[int] | None = None) -> dict[int, nn.Module]:
    """The models clients hold right after the local training of round ``round_index``
    (0-based) from the simulation's current states, as FedFA's figures show them ("local
    models"); nothing in ``sim`` changes. Each is a copy of the scratch model the method
    trained (``client.model``): for methods that train a second, personal model beside it
    (Ditto, pFedMe) that is the global-side one."""
    ids = list(range(sim.data.num_clients)) if clients is None else [int(c) for c in clients]
    out = {}
    for k in ids:
        client = sim.worker.client(k, round_index, TRAIN_KEY, copy.deepcopy(sim.client_states.get(k, {})))
        sim.algorithm.local_update(sim.algorithm.payload(sim.state, k, TRAIN), client)
        out[k] = copy.deepcopy(client.model)
    return out


def _points(features: Mapping[int, Any], labels, clients, held) -> tuple[np.ndarray, ...]:
    """The (client, held class, sample) triples: their features stacked, class, client and
    index into the verification set."""
    y = torch.as_tensor(labels).cpu().numpy()
    ids = list(features) if clients is None else [int(c) for c in clients]
    num_classes = int(y.max()) + 1 if y.size else 0
    held = _held_map(held, ids, num_classes)
    rows, cls, cl, idx = [], [], [], []
    for k in ids:
        f = torch.as_tensor(features[k]).detach().float().cpu().numpy().reshape(len(y), -1)
        keep = np.flatnonzero(np.isin(y, sorted(held[k])))
        rows.append(f[keep])
        cls.append(y[keep])
        cl.append(np.full(len(keep), k))
        idx.append(keep)
    if not rows:
        return np.zeros((0, 0)), *(np.zeros(0, dtype=np.int64),) * 3
    return np.concatenate(rows), np.concatenate(cls), np.concatenate(cl), np.concatenate(idx)


# ------------------------------------------------------------------ t-SNE
@dataclass
class FeatureEmbedding:
    """A 2-D t-SNE of (client, held class, verification sample) triples: ``points[i]``
    is the feature of verification sample ``samples[i]`` (class ``classes[i]``) through
    client ``clients[i]``'s model."""

    points: np.ndarray
    classes: np.ndarray
    clients: np.ndarray
    samples: np.ndarray


def minmax(features: np.ndarray) -> np.ndarray:
    """Min-max normalisation per feature dimension to [0, 1] over all rows (a constant
    dimension becomes 0)."""
    low, high = features.min(0, keepdims=True), features.max(0, keepdims=True)
    span = high - low
    return np.where(span > 0, (features - low) / np.where(span > 0, span, 1.0), 0.0)


def tsne_embedding(features: Mapping[int, Any], labels, clients: Iterable[int] | None = None, held=None,
                   random_state: int = 0, perplexity: float | None = None, threads: int | None = 1,
                   **tsne_options: Any) -> FeatureEmbedding:
    """FedFA Figures 2, 6-9: sklearn ``TSNE(2, init='pca', random_state)`` (Barnes-Hut) on
    the min-max-normalised features of every (client, held class, verification sample).

    ``features``: client -> (N, d) features on the verification set ``labels`` (N,);
    ``held``: client -> classes it holds, or a FederatedData (its train splits), or None
    (all classes). ``perplexity`` defaults to sklearn's 30, lowered to (points - 1) / 3
    for small sets; ``tsne_options`` go to TSNE (e.g. ``max_iter``, default 1000).
    ``threads``: the OpenMP threads of the Barnes-Hut gradient (None: sklearn's default,
    all cores). One by default: its cost is ~9 CPU-seconds for 2,000 points, and on a
    small machine shared with a training run more threads only compete (on 2 busy cores,
    2 threads took 3-4x the wall time of 1). With ``init='pca'`` the only draw is the PCA's
    (randomised, converged), so ``random_state`` hardly changes the result."""
    from sklearn.manifold import TSNE
    from threadpoolctl import threadpool_limits

    feats, classes, owners, samples = _points(features, labels, clients, held)
    n = len(classes)
    if n < 4:
        raise ValueError(f"t-SNE needs at least 4 (client, held class, sample) points, got {n}.")
    if perplexity is None:
        perplexity = min(30.0, (n - 1) / 3.0)
    options = {"init": "pca", "method": "barnes_hut", "n_jobs": 1, **tsne_options}
    tsne = TSNE(n_components=2, perplexity=perplexity, random_state=random_state, **options)
    with threadpool_limits(limits=threads):
        points = tsne.fit_transform(minmax(feats.astype(np.float64)).astype(np.float32))
    return FeatureEmbedding(np.asarray(points, dtype=np.float64), classes, owners, samples)


# ------------------------------------------------------------------ cosine histograms
def _unit_rows(f: torch.Tensor) -> torch.Tensor:
    f = f.double()
    return f / f.norm(dim=-1, keepdim=True).clamp_min(COSINE_EPS)


def cosine_pairs(features: Mapping[int, Any], labels, held=None,
                 clients: Iterable[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """FedFA Figures 2, 6-9 (histograms): cosine similarities of feature pairs across
    clients, only on the classes each client holds.

    Positive: for each class c and clients k < j both holding c, every (sample a of c
    through k, sample b of c through j), a = b included. Negative: for client k and a class
    c it holds, every later client k' > k and class c' != c that k' holds, every (sample of
    c through k, sample of c' through k'). Clients in the order of ``clients`` (default the
    sorted keys of ``features``); ``held`` as in :func:`tsne_embedding`.
    Returns (positive, negative) float64 arrays."""
    y = torch.as_tensor(labels).cpu()
    ids = sorted(features) if clients is None else [int(c) for c in clients]
    held = _held_map(held, ids, int(y.max()) + 1 if y.numel() else 0)
    unit = {k: _unit_rows(torch.as_tensor(features[k]).detach().cpu().reshape(len(y), -1)) for k in ids}
    in_held = {k: torch.isin(y, torch.tensor(sorted(held[k]), dtype=y.dtype)) for k in ids}
    same = y[:, None] == y[None, :]
    positive, negative = [], []
    for i, k in enumerate(ids):
        for j in ids[i + 1:]:
            sims = unit[k] @ unit[j].T
            allowed = in_held[k][:, None] & in_held[j][None, :]
            positive.append(sims[allowed & same])
            negative.append(sims[allowed & ~same])
    cat = (lambda parts: torch.cat(parts).numpy() if parts else np.zeros(0))
    return cat(positive), cat(negative)


# ------------------------------------------------------------------ Figure 4 statistics
def feature_distance(models_or_features: Sequence[Any], x: torch.Tensor | None = None) -> float:
    """FedFA Figure 4 (feature distance): the mean over all ordered pairs (k, j) of the
    given clients, k = j included, of the mean over the inputs of ||f_k(x) - f_j(x)||_2.

    Give the selected clients' models (after local training) and the verification inputs
    ``x``, or their features on the same inputs (each (N, d); ``x`` unused)."""
    if not len(models_or_features):
        raise ValueError("feature_distance needs at least one client.")
    if x is None and any(isinstance(m, nn.Module) for m in models_or_features):
        raise ValueError("give the inputs x to compute the models' features on.")
    feats = [model_features(m, x) if isinstance(m, nn.Module) else torch.as_tensor(m).detach().cpu()
             for m in models_or_features]
    stacked = torch.stack([f.double().flatten(1) for f in feats])  # (K, N, d)
    if stacked.shape[1] == 0:
        raise ValueError("feature_distance needs at least one input.")
    total = sum(float(torch.linalg.vector_norm(stacked[k][None] - stacked, dim=2).mean(1).sum())
                for k in range(len(stacked)))
    return total / len(stacked) ** 2


def _head_tensors(head: Any) -> torch.Tensor:
    """[W | b] (C, d + 1) of a head: a module with ``head``, a Linear, or a state dict
    ({weight, bias} or a whole model's {head.weight, head.bias})."""
    if isinstance(head, nn.Module):
        head = getattr(head, "head", head)
        head = {"weight": head.weight, "bias": head.bias}
    if "weight" not in head and "head.weight" in head:
        head = {"weight": head["head.weight"], "bias": head.get("head.bias")}
    weight = torch.as_tensor(head["weight"]).detach().double().cpu()
    bias = head.get("bias")
    bias = torch.zeros(weight.shape[0], dtype=torch.float64) if bias is None else \
        torch.as_tensor(bias).detach().double().cpu()
    return torch.cat([weight.flatten(1), bias.reshape(-1, 1)], dim=1)


def classifier_update_similarity(heads: Sequence[Any], global_head: Any) -> float:
    """FedFA Figure 4 (classifier-update similarity): with Delta_k = [W_k - W_g | b_k - b_g]
    the update of client k's classifier from the received global one, the mean over all
    ordered pairs (k, j), k = j included, of the mean over classes of the cosine of the
    rows Delta_k[c] and Delta_j[c].

    ``heads``: the selected clients' classifiers after local training (Linear modules,
    models with a ``head``, or state dicts); ``global_head``: the received classifier, or
    one per client (what each started the round from, for methods with personal heads).
    A row that did not move has cosine 0 with every row."""
    if not len(heads):
        raise ValueError("classifier_update_similarity needs at least one client.")
    starts = list(global_head) if isinstance(global_head, (list, tuple)) else [global_head] * len(heads)
    if len(starts) != len(heads):
        raise ValueError(f"give one global head, or one per client ({len(heads)}), not {len(starts)}.")
    deltas = torch.stack([_head_tensors(h) - _head_tensors(g) for h, g in zip(heads, starts)])  # (K, C, d+1)
    unit = _unit_rows(deltas)
    per_pair = torch.einsum("kcd,jcd->kj", unit, unit) / unit.shape[1]
    return float(per_pair.mean())


def round_feature_statistics(models: Sequence[nn.Module], global_head: Any, x: torch.Tensor) -> dict[str, float]:
    """FedFA Figure 4, one round: ``feature_distance`` and ``classifier_update_similarity``
    of the selected clients' models after local training (before aggregation), on the
    verification inputs ``x``, against the classifier they received."""
    return {"feature_distance": feature_distance(models, x),
            "classifier_update_similarity": classifier_update_similarity(list(models), global_head)}


def received_head(sim) -> dict[str, torch.Tensor] | None:
    """The classifier the clients receive this round for a global method (a copy of its
    one model's head); None for a method with personal predictors."""
    shared = sim.algorithm.shared_predictor(sim.state, sim.model)
    if shared is None:
        return None
    head = shared.head if hasattr(shared, "head") else _with_body(shared).head
    return {k: v.detach().clone() for k, v in head.state_dict().items()}


# ------------------------------------------------------------------ the per-round probe
class FeatureProbe(RunHook):
    """FedFA Figure 4 during a run (``config.feature_probe``: samples per class of the
    verification set): after local training and before aggregation, every participant's
    trained model gives its features of the verification inputs ``x`` and its classifier;
    the round's record gets their ``feature_distance`` and, for a global method, the
    ``classifier_update_similarity`` against the classifier the clients received."""

    key = "_feature_probe"
    #: what it adds to a round's record
    measures = ("feature_distance", "classifier_update_similarity")

    def __init__(self, x: torch.Tensor):
        self.x = x
        self.received: dict[str, torch.Tensor] | None = None

    @classmethod
    def for_run(cls, config, data) -> "FeatureProbe | None":
        """The probe a config asks for (None when ``feature_probe`` is 0)."""
        if not config.feature_probe:
            return None
        return cls(verification_set(data, per_class=config.feature_probe, seed=0)[0])

    def __getstate__(self) -> dict:  # what a worker process needs: the inputs
        return {"x": self.x, "received": None}

    def measure(self, update: dict, client) -> dict:
        return {"features": model_features(client.model, self.x), "head": snapshot(client.model.head)}

    def round_start(self, sim, round_index: int) -> None:
        self.received = received_head(sim)

    def round_end(self, sim, round_index: int, record: dict, measured: dict) -> None:
        if not measured:
            return
        ids = sorted(measured)
        distance, similarity = self.measures
        record[distance] = feature_distance([measured[c]["features"] for c in ids])
        if self.received is not None:
            record[similarity] = classifier_update_similarity(
                [measured[c]["head"] for c in ids], self.received)


register_hook("feature_probe", FeatureProbe.for_run)


__all__ = ["COSINE_EPS", "FeatureEmbedding", "FeatureProbe", "classifier_update_similarity", "client_features", "cosine_pairs",
           "feature_distance", "held_classes", "local_models", "minmax", "model_features", "plot_cosine_histograms",
           "plot_tsne", "received_head", "round_feature_statistics", "tsne_embedding", "verification_set"]
