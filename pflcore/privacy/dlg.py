"""Deep Leakage from Gradients (Zhu et al., NeurIPS 2019) against any method's body update,
scored in PSNR as in FedCP's privacy evaluation (Zhang et al., KDD 2023, appendix B, Table 9).

The attack, as the FedCP evaluation specifies it:

- the observed update of a client is ``received body - trained body`` (the body is the
  part FedAvg, FedPer and FedCP all upload; a method that uploads no body has no update
  to attack);
- the targets are the client's first 2 train batches; each is attacked on its own;
- a dummy input and a dummy output, both ~ randn from a seeded generator, are optimised
  with L-BFGS so that the gradient of an MSE loss between the network's output on the
  dummy input and the dummy output matches the observed update (squared Euclidean
  distance summed over the body's tensors); ``label_loss="soft_ce"`` gives Zhu et al.'s
  original cross-entropy against ``softmax(dummy label)`` instead;
- the reconstruction is ``sigmoid(dummy input)``, an image in [0, 1]; it goes through the
  dataset's normalisation before the network sees it, and is scored against the true
  images de-normalised to [0, 1]: PSNR = 20 log10(1 / sqrt(MSE)).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..algorithms.base import TRAIN, Algorithm
from ..training import TRAIN_KEY, shuffled_batches

if TYPE_CHECKING:
    from ..engine.jobs import ClientWorker
    from ..engine.simulation import Simulation

LABEL_LOSSES = ("mse", "soft_ce")


# ---------------------------------------------------------------------------- PSNR
def psnr(reconstruction: torch.Tensor, target: torch.Tensor, reduction: str = "batch") -> float | torch.Tensor:
    """PSNR = 20 log10(1 / sqrt(MSE)) of images in [0, 1] (FedCP appendix B, Table 9).

    ``reduction``: ``"batch"`` (default) one float from the MSE over every pixel of the
    batch; ``"none"`` a tensor with one PSNR per image (MSE over that image's pixels);
    ``"mean"`` the mean of the per-image PSNRs. An MSE of 0 gives ``inf``."""
    if reconstruction.shape != target.shape:
        raise ValueError(f"psnr needs two batches of the same shape, got {tuple(reconstruction.shape)} "
                         f"and {tuple(target.shape)}.")
    diff = (reconstruction.detach().double() - target.detach().double()).reshape(target.shape[0], -1)
    if reduction == "batch":
        mse = float(diff.pow(2).mean())
        return math.inf if mse == 0 else -10.0 * math.log10(mse)
    per_image = -10.0 * torch.log10(diff.pow(2).mean(dim=1))  # log10(0) = -inf -> +inf
    if reduction == "none":
        return per_image
    if reduction == "mean":
        return float(per_image.mean())
    raise ValueError(f"reduction must be 'batch', 'none' or 'mean', got {reduction!r}.")


# ---------------------------------------------------------------------------- the attack
class DLGResult(NamedTuple):
    """``reconstruction``: sigmoid(dummy input), in [0, 1]; ``loss``: the final matching
    loss (the last finite one if the attack stopped); ``steps``: L-BFGS steps completed;
    ``stopped``: why it stopped early (a non-finite loss), else ``None``."""

    reconstruction: torch.Tensor
    loss: float
    steps: int
    stopped: str | None = None


def dlg_reconstruct(model: nn.Module, params: Sequence[str] | Sequence[torch.Tensor],
                    observed_update: Sequence[torch.Tensor] | Mapping[str, torch.Tensor],
                    batch_shape: Sequence[int], num_classes: int, steps: int = 100, lr: float = 1.0, *,
                    generator: torch.Generator | None = None, max_iter: int = 20, label_loss: str = "mse",
                    mean: Sequence[float] | torch.Tensor | None = None,
                    std: Sequence[float] | torch.Tensor | None = None) -> DLGResult:
    """Invert ``observed_update`` into a batch of images of ``batch_shape`` (Zhu et al. 2019;
    FedCP appendix B, Table 9).

    ``params``: names in ``model.named_parameters()`` or the parameters themselves, one per
    tensor of ``observed_update`` (a sequence in the same order, or a mapping by name).
    Dummy input ``(batch_shape)`` and dummy output ``(B, num_classes)`` are drawn ~ randn
    from ``generator`` (default: seeded 0) and optimised by ``torch.optim.LBFGS`` (``lr``,
    ``max_iter`` inner iterations per step) for ``steps`` steps to minimise
    sum ||grad_params loss(dummy) - update||^2, where loss is
    ``mse(model(x), dummy output)`` (``label_loss="mse"``, the FedCP evaluation) or
    ``cross_entropy(model(x), softmax(dummy output))`` (``"soft_ce"``, Zhu et al.). The
    network sees ``(sigmoid(dummy) - mean) / std`` (``mean``/``std`` per channel, default
    none). Runs in eval mode (deterministic closure); the model's mode and gradient flags
    are restored. A non-finite loss stops the attack and is reported, not raised."""
    if label_loss not in LABEL_LOSSES:
        raise ValueError(f"label_loss must be one of {LABEL_LOSSES}, got {label_loss!r}.")
    named = dict(model.named_parameters())
    names = [p for p in params if isinstance(p, str)]
    if names and len(names) != len(params):
        raise ValueError("params must be all parameter names or all parameters, not a mix.")
    if names:
        missing = [n for n in names if n not in named]
        if missing:
            raise ValueError(f"the model has no parameter(s) {missing}.")
        tensors = [named[n] for n in names]
    else:
        tensors = list(params)
    if isinstance(observed_update, Mapping):
        if not names:
            raise ValueError("a mapping of updates needs params given by name.")
        observed = [observed_update[n] for n in names]
    else:
        observed = list(observed_update)
    if len(observed) != len(tensors) or not tensors:
        raise ValueError(f"need one observed tensor per parameter, got {len(observed)} for {len(tensors)}.")
    for p, u in zip(tensors, observed):
        if tuple(p.shape) != tuple(u.shape):
            raise ValueError(f"an observed update of shape {tuple(u.shape)} does not match its parameter "
                             f"of shape {tuple(p.shape)}.")

    device = tensors[0].device
    observed = [u.detach().to(device=device, dtype=p.dtype) for p, u in zip(tensors, observed)]
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    batch_shape = tuple(int(s) for s in batch_shape)
    dummy_x = torch.randn(batch_shape, generator=generator, device=generator.device).to(device).requires_grad_(True)
    dummy_y = torch.randn((batch_shape[0], int(num_classes)), generator=generator,
                          device=generator.device).to(device).requires_grad_(True)
    shift, scale = _channel_stats(mean, std, len(batch_shape), device)

    def matching_loss(create_graph: bool) -> torch.Tensor:
        out = model((torch.sigmoid(dummy_x) - shift) / scale)
        if label_loss == "mse":
            loss = F.mse_loss(out, dummy_y)
        else:
            loss = F.cross_entropy(out, F.softmax(dummy_y, dim=-1))
        grads = torch.autograd.grad(loss, tensors, create_graph=create_graph)
        return sum(((g - u) ** 2).sum() for g, u in zip(grads, observed))

    was_training = model.training
    flags = [p.requires_grad for p in tensors]
    optimizer = torch.optim.LBFGS([dummy_x, dummy_y], lr=lr, max_iter=max_iter)
    last_finite = (dummy_x.detach().clone(), dummy_y.detach().clone())
    done, stopped, seen = 0, None, [math.inf]

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = matching_loss(create_graph=True)
        seen[0] = float(loss.detach())
        if math.isfinite(seen[0]):
            loss.backward()
        return loss

    try:
        model.eval()
        for p in tensors:
            p.requires_grad_(True)
        for _ in range(int(steps)):
            optimizer.step(closure)
            finite_dummies = bool(torch.isfinite(dummy_x).all() and torch.isfinite(dummy_y).all())
            if not (math.isfinite(seen[0]) and finite_dummies):
                stopped = f"the matching loss became non-finite in L-BFGS step {done + 1}"
                break
            last_finite = (dummy_x.detach().clone(), dummy_y.detach().clone())
            done += 1
        with torch.no_grad():
            dummy_x.copy_(last_finite[0])
            dummy_y.copy_(last_finite[1])
        final = float(matching_loss(create_graph=False).detach())
    finally:
        model.train(was_training)
        for p, flag in zip(tensors, flags):
            p.requires_grad_(flag)
    return DLGResult(torch.sigmoid(dummy_x).detach(), final, done, stopped)


def _channel_stats(mean, std, ndim: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    view = (1, -1) + (1,) * (ndim - 2) if ndim >= 2 else (-1,)
    shift = torch.zeros(()) if mean is None else torch.as_tensor(mean, dtype=torch.float32).reshape(view)
    scale = torch.ones(()) if std is None else torch.as_tensor(std, dtype=torch.float32).reshape(view)
    return shift.to(device), scale.to(device)


# ---------------------------------------------------------------------------- any method
def body_tensors(message: Mapping[str, Any]) -> dict[str, torch.Tensor] | None:
    """The body parameters a payload or an update carries, keyed by name inside the body
    (``model.body``): a ``"body"`` entry, the ``body.*`` entries of a whole ``"model"``,
    or those of a method wrapping another's payload (``"base"``); ``None`` if none."""
    if isinstance(message.get("body"), Mapping):
        return dict(message["body"])
    if isinstance(message.get("model"), Mapping):
        body = {k[len("body."):]: v for k, v in message["model"].items() if k.startswith("body.")}
        return body or None
    if isinstance(message.get("base"), Mapping):
        return body_tensors(message["base"])
    return None


def body_update(algorithm: Algorithm, payload: Mapping[str, Any], update: Mapping[str, Any],
                names: Sequence[str]) -> dict[str, torch.Tensor]:
    """``received body - trained body`` for the body parameters ``names`` (FedCP appendix B):
    from the payload's and the update's body, or from an update that already is that
    difference (a ``"delta"`` over the whole model, pFedHN). Raises a one-sentence
    ValueError when the update carries no body."""
    if isinstance(update.get("delta"), Mapping):
        delta = {k[len("body."):]: v for k, v in update["delta"].items() if k.startswith("body.")}
        if all(n in delta for n in names):
            return {n: delta[n].detach() for n in names}
    sent, trained = body_tensors(payload), body_tensors(update)
    if trained is None or not all(n in trained for n in names):
        raise ValueError(f"method {algorithm.name!r} uploads no body parameters, so it has no body update "
                         "for DLG to invert.")
    if sent is None or not all(n in sent for n in names):
        raise ValueError(f"method {algorithm.name!r} sends the client no body parameters, so its body update "
                         "(received - trained) is undefined.")
    return {n: (sent[n].detach() - trained[n].detach()) for n in names}


@dataclass
class DLGReport:
    """A DLG attack on one client's update in one round (FedCP appendix B, Table 9).

    ``psnr``: mean over the attacked batches of each batch's PSNR (MSE over all its
    pixels); ``psnr_per_batch`` / ``psnr_per_image`` the details; ``losses`` the final
    matching losses; ``stopped`` a reason per batch when the attack stopped early;
    ``reconstructions`` / ``targets`` the images in [0, 1] (for plots)."""

    client_id: int
    round: int
    psnr: float = math.nan
    psnr_per_batch: list[float] = field(default_factory=list)
    psnr_per_image: list[torch.Tensor] = field(default_factory=list, repr=False)
    losses: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    stopped: list[str | None] = field(default_factory=list)
    reconstructions: list[torch.Tensor] = field(default_factory=list, repr=False)
    targets: list[torch.Tensor] = field(default_factory=list, repr=False)


def dlg_psnr(algorithm: Algorithm, server_state: dict, worker: "ClientWorker", client_id: int, *,
             mean: Sequence[float], std: Sequence[float], round_index: int = 0,
             client_state: dict | None = None, batches: int = 2, steps: int = 100, lr: float = 1.0,
             max_iter: int = 20, label_loss: str = "mse", seed: int = 0) -> DLGReport:
    """DLG on client ``client_id``'s body update in round ``round_index`` (FedCP appendix B,
    Table 9), for any method.

    The client is built by ``worker`` (:meth:`ClientWorker.for_run`) exactly as the engine
    builds it for that round's training job, from a copy of ``client_state`` (nothing of the
    run changes but the worker's scratch modules); it runs ``algorithm.local_update`` on
    ``algorithm.payload(server_state, client_id, "train")``. The update is received body -
    trained body; the attacked network is the client's model after the update with the
    trained body loaded (and the uploaded head when a whole model is uploaded). Targets are
    the first ``batches`` mini-batches of the client's first local epoch (the order its
    training generator draws), de-normalised with ``mean``/``std``; each batch is attacked
    with its own dummies from one generator seeded ``seed``."""
    client = worker.client(client_id, round_index, TRAIN_KEY, copy.deepcopy(client_state or {}))
    settings = client.settings
    targets = []
    for i, (xb, _) in enumerate(shuffled_batches(client.x, client.y, 1, settings.batch_size,
                                                 client.fresh_generator())):
        if i == batches:
            break
        targets.append(xb)
    if not targets:
        raise ValueError(f"client {client_id} has no training data to attack.")
    payload = algorithm.payload(server_state, client_id, TRAIN)
    update = algorithm.local_update(payload, client)

    model = client.model
    names = [n for n, _ in model.body.named_parameters()]
    delta = body_update(algorithm, payload, update, names)
    with torch.no_grad():
        if isinstance(update.get("model"), Mapping):  # a whole model uploaded: attack that model
            model.load_state_dict(update["model"], strict=True)
        elif (trained := body_tensors(update)) is not None:
            model.body.load_state_dict({**model.body.state_dict(), **trained}, strict=True)
        else:  # only a delta came back: the trained body is received - delta
            sent = body_tensors(payload)
            if sent is not None:
                for n, p in model.body.named_parameters():
                    p.copy_(sent[n] - delta[n])

    generator = torch.Generator().manual_seed(int(seed))
    mean_t = torch.as_tensor(mean, dtype=torch.float32).reshape(1, -1, 1, 1).to(client.x.device)
    std_t = torch.as_tensor(std, dtype=torch.float32).reshape(1, -1, 1, 1).to(client.x.device)
    report = DLGReport(client_id, round_index)
    for xb in targets:
        truth = (xb.float() * std_t + mean_t).clamp(0, 1)
        result = dlg_reconstruct(model, ["body." + n for n in names],
                                 [delta[n] for n in names], tuple(xb.shape), client.num_classes, steps, lr,
                                 generator=generator, max_iter=max_iter, label_loss=label_loss, mean=mean, std=std)
        report.reconstructions.append(result.reconstruction.cpu())
        report.targets.append(truth.cpu())
        report.psnr_per_batch.append(psnr(result.reconstruction, truth))
        report.psnr_per_image.append(psnr(result.reconstruction, truth, reduction="none").cpu())
        report.losses.append(result.loss)
        report.steps.append(result.steps)
        report.stopped.append(result.stopped)
    report.psnr = float(sum(report.psnr_per_batch) / len(report.psnr_per_batch))
    return report


def simulation_dlg_psnr(sim: "Simulation", client_id: int, round_index: int, **kwargs: Any) -> DLGReport:
    """:func:`dlg_psnr` on a running :class:`~pflcore.engine.simulation.Simulation` before
    round ``round_index`` (0-based) runs: the update client ``client_id`` would send in
    that round (e.g. every 100 rounds from a notebook driving ``sim.run_round``). The
    run's state is left as it was."""
    from ..data.sources import load_dataset

    dataset = load_dataset(sim.config.dataset, root=sim.config.data_root, download=False)
    return dlg_psnr(sim.algorithm, sim.state, sim.worker, client_id, mean=dataset.mean, std=dataset.std,
                    round_index=round_index, client_state=sim.client_states.get(client_id, {}), **kwargs)
