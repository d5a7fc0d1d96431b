"""FedCP (Zhang et al., KDD 2023): a conditional policy network (CPN) splits every sample's
feature h into a personal part s*h, read by the client's personal head, and a global part
r*h, read by the frozen global head (section 3.2).

Per client (section 3.1, Algorithm 1): a trainable body (overwritten by the global body on
arrival), a trainable personal head (never leaves the client), a frozen global head, a
frozen copy of the received global body (only for the feature-alignment MMD term) and the
CPN (overwritten by the global CPN on arrival).

- CPN (section 3.2.1): Linear(d, 2d) -> LayerNorm(2d) -> ReLU, viewed as (B, 2, d) and
  softmaxed over the pair; index 0 is s (personal), index 1 is r (global). Gumbel noise
  (tau = 1) is added in training (the paper's "inspired by the Gumbel-Max trick"); at
  evaluation the plain softmax is used unless ``gumbel_eval`` (upstream draws noise there too).
- Conditional input C_i = h * v_i / ||v_i||, v_i = the column sums of the personal head's
  weight (bias ignored). v_i starts uniform in [0, 1) and is recomputed at the END of each
  round the client took part in; it is constant within a round.
- Logits: head_p(s*h) + head_g(r*h). Loss (eq. 8): CE + lambda * MMD(h, frozen_body(x)).
- After training (eq. 6) the client uploads its body, the mixed head (head_p + head_g)/2
  and its CPN; the server averages each by n_i (BatchNorm buffers too).

A selected client receives the CURRENT body, global head and CPN (Algorithm 1, line 5).
``stale_modules`` reproduces the authors' code, where head and CPN reach only the clients
selected in the previous round (identical under full participation).

Ablations (section 5.3, Table 1) and CPN variants (appendix, Table 10) are switches:
``cpn_input`` ("cs_ss", "h" = w.o. cs, "v" = w.o. ss, "random" = w.o. cs&ss), ``lam = 0``
(w.o. GFM: no frozen body either), ``use_cpn = False`` (logits head_g(h) + head_p(h): the
paper does not write this variant down, an assumption), ``global_head = False`` (personal
head only); ``cpn_layers``, ``cpn_norm``, ``cpn_activation`` for Table 10.

PIR (section 8, Fig. 5a): each participant reports the mean of s over its last local
epoch's training samples and the feature dimensions; :meth:`FedCP.policies` gives the
per-sample s on any data (Fig. 5b).
"""
from __future__ import annotations

import copy
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ..models import SplitModel
from ..streams import FEDCP_CPN_INIT_KEY, FEDCP_CPN_KEY as _CPN_KEY  # the initial conditional vectors v_i and random CPN inputs
from ..training import INFERENCE_BATCH, INIT_KEY, Batch, derive_seed, generator_for
from .base import (TRAIN, Algorithm, Client, FederationInfo, Param, ServerContext, load, sample_weights, snapshot,
                   weighted_average)
from .losses import rbf_mmd



def logistic_noise(shape: tuple[int, ...] | torch.Size, generator: torch.Generator,
                   device: torch.device) -> torch.Tensor:
    """Draws of log(u / (1 - u)), u uniform in (0, 1): the difference of two Gumbel draws."""
    u = torch.rand(shape, generator=generator, device=device).clamp_(min=2.0 ** -24)
    return torch.logit(u)


class ConditionalPolicyNetwork(nn.Module):
    """The CPN (section 3.2.1; Table 10 variants): (k - 1) x [Linear(d, d), ReLU], then
    Linear(d, 2d) -> norm -> activation, read as (B, 2, d) intermediates."""

    def __init__(self, dim: int, layers: int = 1, norm: str = "layer", activation: str = "relu"):
        super().__init__()
        blocks: list[nn.Module] = []
        for _ in range(layers - 1):
            blocks += [nn.Linear(dim, dim), nn.ReLU()]
        blocks.append(nn.Linear(dim, 2 * dim))
        blocks.append({"layer": lambda: nn.LayerNorm(2 * dim), "batch": lambda: nn.BatchNorm1d(2 * dim),
                       "group": lambda: nn.GroupNorm(2, 2 * dim)}[norm]())
        blocks.append({"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[activation]())
        self.net = nn.Sequential(*blocks)
        self.dim = dim

    def forward(self, c: torch.Tensor) -> torch.Tensor:
        return self.net(c).view(c.shape[0], 2, self.dim)


class ConditionalModel(nn.Module):
    """One client's FedCP model: personal body and head, frozen global head (and body), CPN.

    ``forward(x)`` gives the logits; :meth:`outputs` also the feature h and the policy s."""

    def __init__(self, method: "FedCP", model: SplitModel, modules: Mapping[str, nn.Module],
                 context: torch.Tensor, noise: torch.Generator | None, eval_noise: bool):
        super().__init__()
        self.body, self.head = model.body, model.head
        self.global_head, self.global_body, self.cpn = modules["global_head"], modules["global_body"], modules["cpn"]
        self.method = method
        self.register_buffer("context", context)
        self.register_buffer("direction", F.normalize(context, p=2, dim=1))  # v / ||v||, fixed for the round
        self.noise, self.eval_noise = noise, eval_noise

    def policy(self, h: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        """The personal share s (B, d); the global share is r = 1 - s.

        The softmax over the pair (a_0, a_1) is sigmoid(a_0 - a_1), and Gumbel noise on both,
        g_0 - g_1, is one logistic draw log(u / (1 - u)): the same distribution in fewer steps.
        ``noise`` (B, d) gives the draws (local training takes them from a per-epoch bank);
        otherwise they come from the model's generator when it has one."""
        kind = self.method.cpn_input
        if kind == "h":
            c = h
        elif kind == "random":
            c = self.context.expand_as(h)
        else:
            v = self.direction
            c = v.expand_as(h) if kind == "v" else h * v
        a = self.cpn(c)
        z = a[:, 0] - a[:, 1]
        if noise is not None:
            z = z + noise
        elif self.noise is not None and (self.training or self.eval_noise):
            z = z + logistic_noise(z.shape, self.noise, z.device)
        tau = self.method.tau
        return torch.sigmoid(z if tau == 1 else z / tau)

    def outputs(self, x: torch.Tensor, h: torch.Tensor | None = None, noise: torch.Tensor | None = None,
                personal_share: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Logits, the feature h (computed from x unless given) and the policy s (None
        without a CPN); ``noise`` as in :meth:`policy`. ``personal_share`` forces s to that
        value in every dimension instead of the CPN's (1: the personal head alone reads h,
        0: the global head alone; section 3.2's two extremes), for inspection."""
        if h is None:
            h = self.body(x)
        m = self.method
        if not m.use_cpn:
            logits = self.head(h) + self.global_head(h) if m.global_head else self.head(h)
            return logits, h, None
        s = self.policy(h, noise) if personal_share is None else torch.full_like(h, float(personal_share))
        personal = s * h
        logits = self.head(personal) + self.global_head(h - personal) if m.global_head else self.head(personal)
        return logits, h, s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.outputs(x)[0]


class FedCP(Algorithm):
    name = "fedcp"
    paper = "Zhang, Hua, Wang, Song, Xue, Ma, Guan, KDD 2023"
    hyperparams = {
        "lam": Param(5.0, low=0, doc="lambda, weight of the feature-alignment MMD (5 for the 4-layer CNN, 1 for "
                                     "ResNet-18 and fastText); 0 drops the frozen global body (w.o. GFM)"),
        "cpn_input": Param("cs_ss", choices=("cs_ss", "h", "v", "random"),
                           doc="CPN input: h * v/||v|| (cs_ss), h (w.o. cs), v/||v|| (w.o. ss) or a per-client "
                               "random frozen vector (w.o. cs&ss)"),
        "use_cpn": Param(True, doc="False: no policy, logits head_g(h) + head_p(h) (w.o. CPN)"),
        "global_head": Param(True, doc="False: the personal head alone reads the features (w.o. GH)"),
        "gumbel_train": Param(True, doc="Gumbel noise on the policy in training"),
        "gumbel_eval": Param(False, doc="Gumbel noise on the policy at evaluation too (the authors' code)"),
        "tau": Param(1.0, low=0, low_open=True, doc="softmax temperature of the policy"),
        "cpn_layers": Param(1, low=1, high=4, doc="Linear layers in the CPN (Table 10: 2-4 FC)"),
        "cpn_norm": Param("layer", choices=("layer", "batch", "group"), doc="the CPN's norm layer (Table 10)"),
        "cpn_activation": Param("relu", choices=("relu", "tanh", "sigmoid"),
                                doc="the CPN's final activation (Table 10)"),
        "stale_modules": Param(False, doc="the authors' code: head and CPN reach only the previous round's "
                                          "participants, so under partial participation clients train with "
                                          "stale ones"),
    }

    # -- server -----------------------------------------------------------------------
    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        with torch.random.fork_rng(devices=[]):  # the same CPN on every client, from the run's seed
            torch.manual_seed(derive_seed(info.seed, INIT_KEY, FEDCP_CPN_INIT_KEY))
            cpn = self._cpn(model.feature_dim)
        # v_i starts uniform in [0, 1) (the random CPN inputs of w.o. cs&ss likewise), one row per client
        contexts = torch.rand(info.num_clients, 1, model.feature_dim, generator=generator_for(info.seed, _CPN_KEY))
        state = {"body": snapshot(model.body), "head": snapshot(model.head), "cpn": snapshot(cpn),
                 "init_head": snapshot(model.head), "contexts": contexts,
                 "pir": torch.full((info.num_clients,), float("nan"))}
        if self.stale_modules:  # which round's head and CPN each client last received (-1: the initial ones)
            state["received"] = torch.full((info.num_clients,), -1, dtype=torch.long)
            state["versions"] = {"-1": {"head": state["head"], "cpn": state["cpn"]}}
        return state

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        head, cpn = state["head"], state["cpn"]
        if self.stale_modules:
            version = state["versions"][str(int(state["received"][client_id]))]
            head, cpn = version["head"], version["cpn"]
        return {"body": state["body"], "head": head, "cpn": cpn, "init_head": state["init_head"],
                "context": state["contexts"][client_id]}

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        ids, weights = sample_weights(updates)
        new = {**state}
        for part in ("body", "head", "cpn"):
            new[part] = weighted_average([updates[c][part] for c in ids], weights)
        pir = state["pir"].clone()
        for c in ids:
            pir[c] = float(updates[c].get("pir", float("nan")))
        new["pir"] = pir
        if self.stale_modules:
            # the authors' code sends the new head and CPN to this round's participants only
            received = state["received"].clone()
            received[ids] = ctx.round
            new["received"] = received
            alive = set(received.tolist())
            versions = {k: v for k, v in state["versions"].items() if int(k) in alive}
            versions[str(ctx.round)] = {"head": new["head"], "cpn": new["cpn"]}
            new["versions"] = versions
        return new

    def report(self, state: dict) -> dict:
        pir = state["pir"]
        known = pir[~torch.isnan(pir)]
        return {"pir": pir.clone(), "pir_mean": float(known.mean()) if known.numel() else float("nan")}

    # -- client -----------------------------------------------------------------------
    def client_modules(self, model: SplitModel) -> dict[str, nn.Module]:
        frozen_body, frozen_head = copy.deepcopy(model.body), copy.deepcopy(model.head)
        for p in (*frozen_body.parameters(), *frozen_head.parameters()):
            p.requires_grad_(False)
        return {"cpn": self._cpn(model.feature_dim).to(next(model.parameters()).device),
                "global_head": frozen_head, "global_body": frozen_body}

    def local_update(self, payload: dict, client: Client) -> dict:
        noise = None
        if self.use_cpn and self.gumbel_train:  # its own stream, seeded from the client's
            noise = torch.Generator(device=client.x.device)
            noise.manual_seed(int(torch.randint(2 ** 62, (1,), generator=client.generator)))
        net = self._network(payload, client, None)
        if self.lam > 0:  # the frozen copy of the received body serves only the training's MMD term
            load(client.modules["global_body"], payload["body"])
        model, cpn = client.model, client.modules["cpn"]
        params = [*model.body.parameters(), *model.head.parameters()]
        if self.use_cpn:
            params += list(cpn.parameters())
        step = client.sgd(params)
        align = self.lam > 0
        lone_sample_breaks_norm = self.use_cpn and self.cpn_norm == "batch"
        last_epoch = client.settings.epochs - 1
        shares = {"sum": torch.zeros((), device=client.x.device), "count": 0, "bank": None}
        # The frozen global body is the same for the whole round: without batch-dependent layers
        # its features are computed once, in large batches, and looked up per step.
        reference_all = self._reference_features(net.global_body, client) if align else None

        def train_step(batch: Batch) -> torch.Tensor | None:
            if noise is not None and batch.start == 0:
                # one draw per epoch, row j for the epoch's j-th sample: far fewer draws than per batch
                shares["bank"] = logistic_noise((client.num_samples, model.feature_dim), noise, batch.x.device)
            bank = shares["bank"]
            eps = bank[batch.start:batch.start + batch.x.shape[0]] if bank is not None else None
            if lone_sample_breaks_norm and batch.x.shape[0] < 2:
                return None  # BatchNorm cannot normalise one sample in training (the authors' loader drops it)
            with batch.precision():
                logits, h, s = net.outputs(batch.x, noise=eps)
                loss = F.cross_entropy(logits, batch.y)
                if align:
                    if reference_all is not None:
                        reference = reference_all[batch.index]
                    else:
                        with torch.no_grad():
                            reference = net.global_body(batch.x)
                    loss = loss + self.lam * rbf_mmd(h, reference)
            step(loss)
            if s is not None and batch.epoch == last_epoch:  # the last local epoch (Fig. 5a)
                shares["sum"] += s.detach().float().sum() / s.shape[1]
                shares["count"] += s.shape[0]
            return loss

        with client.trainable(net, params):
            net.global_body.train()
            loss = client.loop(train_step)
        s_sum, s_count = shares["sum"], shares["count"]
        personal = client.state["head"] = snapshot(model.head)
        if self.cpn_input != "random":  # v_i is recomputed once the round's training is over
            client.state["context"] = model.head.weight.detach().sum(0, keepdim=True).clone()
        mixed = {k: 0.5 * v + 0.5 * payload["head"][k] for k, v in personal.items()}
        return {"body": snapshot(model.body), "head": mixed, "cpn": snapshot(cpn), "num_samples": client.num_samples,
                "loss": loss, "pir": float(s_sum) / s_count if s_count else float("nan")}

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        noise = client.generator if self.gumbel_eval else None
        return self._network(payload, client, noise)

    @torch.inference_mode()
    def policies(self, payload: dict, client: Client, x: torch.Tensor) -> torch.Tensor:
        """The personal share s (B, d) of each sample of ``x`` at inference (Fig. 5b)."""
        net = self.predictor(payload, client).eval()
        if not self.use_cpn:
            raise ValueError("this FedCP variant has no CPN (use_cpn=False), so there is no policy to show.")
        return net.outputs(x)[2]

    # -- helpers ----------------------------------------------------------------------
    @staticmethod
    @torch.no_grad()
    def _reference_features(body: nn.Module, client: Client) -> torch.Tensor | None:
        """The frozen global body's features of all the client's training samples, or None if
        the body has layers that behave differently per batch or in training (BatchNorm,
        dropout): those are computed batch by batch, in training mode, like the authors'."""
        if any(isinstance(m, (nn.modules.batchnorm._NormBase, nn.modules.dropout._DropoutNd)) for m in body.modules()):
            return None
        with client.precision():
            return torch.cat([body(client.x[i:i + INFERENCE_BATCH])
                              for i in range(0, client.num_samples, INFERENCE_BATCH)]).float()

    def _cpn(self, dim: int) -> ConditionalPolicyNetwork:
        return ConditionalPolicyNetwork(dim, self.cpn_layers, self.cpn_norm, self.cpn_activation)

    def _network(self, payload: dict, client: Client, noise: torch.Generator | None) -> ConditionalModel:
        """The client's model from what it received and what it kept: body, global head and CPN
        from the payload, personal head (the initial head before its first round) and v_i
        from its state."""
        model = client.model
        load(model.body, payload["body"])
        load(model.head, client.state.get("head", payload["init_head"]))
        load(client.modules["global_head"], payload["head"])
        load(client.modules["cpn"], payload["cpn"])
        context = client.state.get("context", payload["context"]).to(client.x.device)
        return ConditionalModel(self, model, client.modules, context, noise, self.gumbel_eval)
