"""pFedHN (Shamsian, Navon, Fetaya, Chechik, ICML 2021): a hypernetwork on the server
generates each client's model.

Server (section 3): client i has a learned embedding e_i (dimension (1 + N) / 4); an MLP
(width 100; a first layer and 3 hidden ones, as the authors' code) maps it to a
representation from which one linear layer per weight tensor produces theta_i = h(e_i; phi).
Client: from theta_i, local SGD (the run's E epochs, or ``local_steps`` mini-batch steps)
gives theta~_i; it returns Delta_i = theta_i - theta~_i. Server:
grad_phi = sum_i (d theta_i / d phi)^T Delta_i over the round's participants, by autograd,
and one SGD step on phi (lr, momentum, weight decay of its own; the momentum buffers persist
in the server state). As in the authors' code, the client's and the server's gradients are
clipped to norm 50.

The paper trains one client per hypernetwork step, each from the latest phi. A round's
clients here train in parallel from the same phi, so their deltas are summed into one step:
applying the stale deltas one after the other overshoots (on FedPAC's Fashion-MNIST setting
it diverged in the second round), and their mean learns too slowly (13% accuracy after five
rounds, against 69% after six with the sum). A client whose Delta is zero (it took no step)
sends no information. Personal model: h(e_i). Buffers (none in the papers' CNNs) stay at the
initial model's.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from ..models import SplitModel
from ..streams import PFEDHN_INIT_KEY
from ..training import INIT_KEY, Batch, SGDStep, TrainSettings, derive_seed
from .base import TRAIN, Algorithm, Client, FederationInfo, Param, ServerContext, load, snapshot


def clipped(grads: list[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    """``grads`` scaled so that their joint L2 norm is at most ``max_norm`` (0: unchanged)."""
    if max_norm:
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        if norm > max_norm:
            torch._foreach_mul_(grads, max_norm / (float(norm) + 1e-6))
    return grads


class HyperNetwork(nn.Module):
    """e_i -> MLP -> one linear output per generated tensor (section 3.1)."""

    def __init__(self, num_clients: int, embedding_dim: int, hidden: int, hidden_layers: int,
                 shapes: Mapping[str, torch.Size]):
        super().__init__()
        self.embeddings = nn.Embedding(num_clients, embedding_dim)
        blocks: list[nn.Module] = [nn.Linear(embedding_dim, hidden)]
        for _ in range(hidden_layers):
            blocks += [nn.ReLU(), nn.Linear(hidden, hidden)]
        self.mlp = nn.Sequential(*blocks)
        self.names = list(shapes)
        self.shapes = dict(shapes)
        self.outputs = nn.ModuleList(nn.Linear(hidden, int(torch.Size(s).numel())) for s in shapes.values())

    def forward(self, client_id: int) -> dict[str, torch.Tensor]:
        e = self.embeddings(torch.tensor([client_id], device=self.embeddings.weight.device))
        z = self.mlp(e)
        return {name: out(z).reshape(self.shapes[name]) for name, out in zip(self.names, self.outputs)}


class PFedHN(Algorithm):
    name = "pfedhn"
    paper = "Shamsian, Navon, Fetaya, Chechik, ICML 2021"
    hyperparams = {
        "embedding_dim": Param(0, low=0, high=4096, doc="dimension of e_i (0: (1 + N) / 4, at least 1)"),
        "hidden": Param(100, low=1, high=1024, doc="width of the hypernetwork's MLP"),
        "hidden_layers": Param(3, low=0, high=32, doc="hidden-to-hidden layers of the MLP after the first"),
        "server_lr": Param(0.01, low=0, low_open=True, doc="the hypernetwork's SGD learning rate"),
        "server_momentum": Param(0.9, low=0, high=1, high_open=True, doc="its momentum"),
        "server_weight_decay": Param(1e-3, low=0, doc="its weight decay"),
        "local_steps": Param(0, low=0, high=10000, doc="client SGD steps (0: the run's local epochs)"),
        "clip": Param(50.0, low=0, doc="gradient-norm clip of the client's steps and the server's (0: none)"),
    }

    @classmethod
    def server_bytes(cls, params: Mapping[str, Any], model_parameters: int, num_clients: int) -> int:
        """float32 bytes the server keeps besides the global model: the hypernetwork (its
        embeddings, MLP and one output layer per generated tensor, ``(hidden + 1)`` weights per
        generated parameter) and its SGD momentum, as many again (what config validation counts)."""
        p = {**cls.defaults, **params}
        hidden, layers = int(p["hidden"]), int(p["hidden_layers"])
        dim = int(p["embedding_dim"]) or max(1, (1 + num_clients) // 4)
        weights = num_clients * dim + (dim + 1) * hidden + layers * (hidden + 1) * hidden
        weights += (hidden + 1) * model_parameters
        return 2 * 4 * weights

    def _hypernetwork(self, num_clients: int, shapes: Mapping[str, list[int]]) -> HyperNetwork:
        dim = self.embedding_dim or max(1, (1 + num_clients) // 4)
        return HyperNetwork(num_clients, dim, int(self.hidden), int(self.hidden_layers),
                            {name: torch.Size(s) for name, s in shapes.items()})

    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        shapes = {name: list(p.shape) for name, p in model.named_parameters()}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(info.seed, INIT_KEY, PFEDHN_INIT_KEY))  # its own stream, not the model's
            hn = self._hypernetwork(info.num_clients, shapes)
        hn.to(next(model.parameters()).device)
        return {"hypernetwork": snapshot(hn), "momentum": {}, "shapes": shapes,
                "buffers": {k: v.detach().clone() for k, v in model.named_buffers()}}

    def _loaded(self, state: dict) -> HyperNetwork:
        """The hypernetwork with the state's weights (its module is scratch, built once)."""
        hn = getattr(self, "_scratch", None)
        if hn is None:
            num_clients = int(state["hypernetwork"]["embeddings.weight"].shape[0])
            hn = self._scratch = self._hypernetwork(num_clients, state["shapes"]).to(
                state["hypernetwork"]["embeddings.weight"].device)
        return load(hn, state["hypernetwork"])

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        with torch.no_grad():
            theta = self._loaded(state)(client_id)
        return {"model": {**theta, **state["buffers"]}}

    def local_update(self, payload: dict, client: Client) -> dict:
        model = load(client.model, payload["model"])
        params = list(model.parameters())
        per_epoch = -(-client.num_samples // client.settings.batch_size)
        steps = int(self.local_steps) or client.settings.epochs * per_epoch
        step, losses = client.sgd(params), []

        def train_step(batch: Batch) -> torch.Tensor:
            with batch.precision():
                loss = nn.functional.cross_entropy(model(batch.x), batch.y)
            step.update(clipped(list(torch.autograd.grad(loss, params)), float(self.clip)))
            losses.append(loss.detach())  # reported as the mean of the stacked losses, as before
            return loss

        with client.trainable(model, params):
            client.loop(train_step, epochs=-(-steps // per_epoch) if steps else 0, max_steps=steps)
        delta = {name: payload["model"][name] - p.detach() for name, p in model.named_parameters()}
        return {"delta": delta, "num_samples": client.num_samples,
                "loss": float(torch.stack(losses).mean()) if losses else 0.0}

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        hn = self._loaded(state)
        params = list(hn.parameters())
        step = SGDStep(params, TrainSettings(1, 1, float(self.server_lr), float(self.server_momentum),
                                             float(self.server_weight_decay)))
        step.buffers = [state["momentum"].get(str(i)) for i in range(len(params))]
        total = None
        for cid in sorted(updates):
            delta = updates[cid]["delta"]
            if not any(bool(d.any()) for d in delta.values()):
                continue  # no step taken: no information
            theta = hn(cid)
            names = list(theta)
            grads = torch.autograd.grad([theta[n] for n in names], params, grad_outputs=[delta[n] for n in names])
            total = list(grads) if total is None else torch._foreach_add(total, grads)
        if total is not None:  # one step on the participants' summed gradient
            step.update(clipped(total, float(self.clip)))
        return {**state, "hypernetwork": snapshot(hn),
                "momentum": {str(i): b.clone() for i, b in enumerate(step.buffers) if b is not None}}

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        return load(client.model, payload["model"])
