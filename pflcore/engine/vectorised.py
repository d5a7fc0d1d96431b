"""The vectorised executor: a round's clients trained together, one stacked step for all.

Opt-in (``Simulation.use_workers("vectorised")``, config ``workers: vectorised``), for a GPU:
there a batch-50 step of a small CNN is a few dozen tiny kernel launches and the device idles
between them; stacking K clients' weights keeps the launches and multiplies the work. On a
CPU it is slower than the sequential executor (the issue's measurements: 0.40-0.61 of a plain
step per core), so it is never chosen by default.

How: every client's job runs the method's own code (``local_update``, ``predictor``) in a
lane of its own (a thread with its own scratch model; the lanes take turns, one at a time,
so nothing runs concurrently). Whenever a method asks for the standard training loop
(:meth:`Client.train`, :meth:`Client.train_head_on_features`: the engine's client-loop
primitive), the lane hands the request over and waits. When every lane waits or is done,
the requests that agree (same architecture, parameters, settings and loss code) are run
together: the clients' weights and momentum buffers stacked on a leading axis, the loss
(the method's own ``loss_fn``, the tensors and modules' weights it captures per client
stacked too) evaluated with ``torch.func.functional_call`` under ``torch.func.vmap``, one
backward for all, a proximal pull's gradient added (:class:`pflcore.training.Pull`, each
client's reference stacked), and SGD with momentum and weight decay applied row by row
exactly as :class:`pflcore.training.SGDStep` does. Each client draws its batches from its own
generator, as in the sequential path, so the clients see exactly their sequential batches.

Clients of unequal size: at each step the clients that still have a batch are grouped by
the size of that batch (a full batch, a client's last smaller batch), each group one stacked
step; a client with no batch left takes no step (no padding, so no padded step can act).

Results equal the sequential executor's to rounding, not bit for bit: a stacked convolution
or matrix product sums in another order (a grouped convolution, a batched GEMM), so after two
rounds float32 states differ by up to 1e-4 of their largest value (the tests' runs: at most
1.2e-6; FedPAC's feature centroids, features of those weights, 1e-3, measured 2e-4), with
the same per-client accuracies; in float64 the two agree to 1e-12 (Fed-RoD's reported loss,
float32 by its balanced softmax's cast, to 1e-6; ``tests/test_vectorised.py``).

Measured on an NVIDIA H200 (``benchmarks/records/device-check-2026-11-26T0349-h200.json``,
FedPAC's Fashion-MNIST workload, 20 clients): a FedAvg round 0.36 s against 1.99 s sequential
on the GPU (5.6x), FedPAC 0.53 s against 2.53 s (4.8x).

Covered (:data:`COVERED`, every method of FedCP's Table 2 and FedPAC's Table 1, each tested
against the sequential executor). Stacked: FedAvg, FedProx, FedPer, FedRep, LG-FedAvg,
FedBABU, Local, Ditto, FedPAC, FedAvg-FT, kNN-Per, FedAMP (its pull towards u_i is in the
loss, u_i stacked), Fed-RoD (body and both heads one model, the two losses of its section 3
one loss), FedFomo (the training part of its split) and FedPHP (its frozen teacher v_i, a
module the loss captures, has its weights stacked and swapped in). A loss may capture
tensors and modules; a module that shares a weight with the trained model, or would update
its buffers, keeps its client out of any stack.

Run client by client (:data:`CLIENT_BY_CLIENT`): a method whose inner loop is its own
(``client.loop`` with a step of its own, not the standard loop) runs it in its lane, one
client after the other, so its numbers are the sequential ones exactly. Each needs what the
stacked step (one loss's gradient, then SGD) does not express: FedFA a calibration after every
step; FedCP a step that reads the batch's place (Gumbel noise drawn per epoch, section 3.2.1,
the frozen body's features looked up by sample index for eq. 8, the policy summed over the
last epoch, section 8); Per-FedAvg two gradients at two points on two batches (the MAML step
of its section 4); pFedMe K inner steps and an outer step per batch (its Algorithm 1); APFL
two models on each batch, one through the mixture, and alpha's own step (its Algorithm 1);
pFedHN a per-client clip of each step's gradient norm (its hypernetwork is on the server, in
the engine, untouched). A method outside :data:`COVERED` is refused in one sentence.
"""
from __future__ import annotations

import copy
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import nn

from ..algorithms.base import Client
from ..training import Pull, TrainSettings, cross_entropy, precision_context, shuffled_batches
from .jobs import ClientJob, ClientResult, ClientWorker

#: Methods with their own inner loop: the lanes run it one client after the other, so their
#: numbers are the sequential executor's exactly (the module docstring says why for each).
CLIENT_BY_CLIENT = ("fedfa", "fedcp", "perfedavg", "pfedme", "apfl", "pfedhn")

#: Methods the vectorised executor runs, each tested against the sequential executor: their
#: training stacked, except :data:`CLIENT_BY_CLIENT`.
COVERED = ("fedavg", "fedprox", "fedper", "fedrep", "lg_fedavg", "fedbabu", "local", "ditto", "fedpac",
           "fedavg_ft", "knn_per", "fedamp", "fedrod", "fedfomo", "fedphp") + CLIENT_BY_CLIENT


class VectorisedError(ValueError):
    """The vectorised executor cannot run this method (one sentence)."""


class Vectorised:
    """Runs a round's jobs in lanes and their standard training loops stacked (see the module)."""

    def __init__(self, worker: ClientWorker):
        name = getattr(worker.algorithm, "name", type(worker.algorithm).__name__)
        if not self.covers(name):
            raise VectorisedError(f"the vectorised executor covers {', '.join(COVERED)}; {name} has not been "
                                  "checked against the sequential executor there: use workers 0 or 'auto'.")
        self.worker = worker
        self._lanes: list[_Lane] = []  # kept between calls: a thread's first CUDA work costs (its handles)
        self.stacked_steps = 0  # stacked SGD steps taken (a test and the device check read it)

    @staticmethod
    def covers(method: str) -> bool:
        return method in COVERED

    def _lane(self, i: int) -> "_Lane":
        while len(self._lanes) <= i:
            worker = copy.copy(self.worker)
            worker.__class__ = _LaneWorker
            worker.model = copy.deepcopy(self.worker.model)
            worker.modules = self.worker.algorithm.client_modules(worker.model)
            self._lanes.append(_Lane(worker))
        return self._lanes[i]

    def run(self, jobs: Sequence[ClientJob]) -> list[ClientResult]:
        if len(jobs) < 2:
            return [self.worker.run(job) for job in jobs]
        lanes = [self._lane(i) for i in range(len(jobs))]
        try:
            for lane, job in zip(lanes, jobs):
                lane.start(job)
            while True:
                waiting = [lane for lane in lanes if lane.request is not None]
                if not waiting:
                    break
                for group in _groups([lane.request for lane in waiting]):
                    self._train(group)
                for lane in waiting:
                    lane.request = None
                    lane.resume()
        finally:
            for lane in lanes:  # a lane left waiting (a failure elsewhere) is released with an error
                while not lane.done:
                    if lane.request is not None:
                        lane.request.error = RuntimeError("another client's job failed")
                        lane.request = None
                    lane.resume()
        for lane in lanes:
            if lane.error is not None:
                raise lane.error
        return [lane.result for lane in lanes]

    def close(self) -> None:
        """End the lanes' threads (a later run starts new ones)."""
        for lane in getattr(self, "_lanes", ()):  # (none if the constructor refused the method)
            lane.stop()
        self._lanes = []

    def __del__(self) -> None:
        self.close()

    # -- the stacked loop -----------------------------------------------------------------
    def _train(self, group: list["_Request"]) -> None:
        try:
            if len(group) == 1 or not _stackable(group):
                for req in group:
                    req.result = _sequential(req)
                return
            self.stacked_steps += _stacked(group)
        except BaseException as e:  # each waiting lane raises it in the method's code
            for req in group:
                req.error = e


# ---------------------------------------------------------------------- lanes
@dataclass
class _Request:
    """One call of the standard loop: ``sgd_train(model, params, x, y, settings, generator, loss_fn, pull)``."""

    model: nn.Module
    params: list[nn.Parameter]
    x: torch.Tensor
    y: torch.Tensor
    settings: TrainSettings
    generator: torch.Generator
    loss_fn: Callable
    pull: Pull | None = None
    result: float | None = None
    error: BaseException | None = None
    names: list[str] = field(default_factory=list)


class _Lane:
    """A thread (with its own scratch model) that runs one client's job at a time, and only
    while the coordinator waits for it."""

    def __init__(self, worker: "_LaneWorker"):
        self.worker = worker
        worker.lane = self
        self.job: ClientJob | None = None
        self.request: _Request | None = None
        self.result: ClientResult | None = None
        self.error: BaseException | None = None
        self.done = True
        self._go, self._back = threading.Semaphore(0), threading.Semaphore(0)
        self.thread = threading.Thread(target=self._main, name="pflcore-lane", daemon=True)
        self.thread.start()

    def start(self, job: ClientJob) -> None:
        """Give the lane ``job`` and let it run until it asks for training or finishes."""
        self.job, self.request, self.result, self.error, self.done = job, None, None, None, False
        self.resume()

    def stop(self) -> None:
        self.job = None
        self._go.release()
        self.thread.join(timeout=5)

    def _main(self) -> None:
        while True:
            self._go.acquire()
            if self.job is None:
                return
            try:
                self.result = self.worker.run(self.job)
            except BaseException as e:
                self.error = e
            finally:
                self.done = True
                self._back.release()

    def resume(self) -> None:
        """Let the lane run until it asks for training or finishes."""
        self._go.release()
        self._back.acquire()

    def submit(self, request: _Request) -> float:
        """From the lane's thread: hand ``request`` over and wait for its result."""
        self.request = request
        self._back.release()
        self._go.acquire()
        if request.error is not None:
            raise request.error
        return request.result


class _LaneWorker(ClientWorker):
    lane: _Lane

    def client(self, client_id: int, round_index: int, purpose: int, state: dict) -> Client:
        client = super().client(client_id, round_index, purpose, state)
        client.__class__ = _LaneClient
        client._lane = self.lane
        return client


class _LaneClient(Client):
    """A client whose standard training loop is run by the coordinator, stacked."""

    _lane: _Lane

    def train(self, params, *, model: nn.Module | None = None, loss_fn=cross_entropy,
              generator: torch.Generator | None = None, pull: Pull | None = None,
              data: tuple[torch.Tensor, torch.Tensor] | None = None, **overrides: Any) -> float:
        x, y = data if data is not None else (self.x, self.y)
        return self._lane.submit(_Request(model if model is not None else self.model, list(params), x, y,
                                          self.training_settings(**overrides), generator or self.generator, loss_fn,
                                          pull))

    def train_head_on_features(self, head: nn.Module, features: torch.Tensor, **overrides: Any) -> float:
        return self._lane.submit(_Request(head, list(head.parameters()), features, self.y,
                                          self.training_settings(**overrides), self.generator, cross_entropy))


# ---------------------------------------------------------------------- grouping
def _cells(fn: Callable) -> tuple:
    return tuple(c.cell_contents for c in (fn.__closure__ or ()))


def _module_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [*module.named_parameters(), *module.named_buffers()]


def _cell_key(value: Any, model: nn.Module | None = None) -> Any:
    """What must agree between clients for a captured value: a tensor's (or tensors') shape
    and dtype (stacked), a module's architecture (its weights stacked: FedPHP's frozen
    teacher), any other value itself (or its identity if it is not hashable). A module that
    shares a weight with the trained ``model``, or that would update its buffers (training
    mode), is keyed by its identity, so its client trains alone."""
    if isinstance(value, nn.Module):
        own = {id(p) for p in model.parameters()} if model is not None else set()
        tensors = _module_tensors(value)
        if any(id(t) in own for _, t in tensors) or (value.training and any(True for _ in value.buffers())):
            return ("object", id(value))
        return ("module", type(value), value.training,
                tuple((n, tuple(t.shape), t.dtype, t.device) for n, t in tensors))
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype, value.device)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return ("tensors", tuple(_cell_key(v) for v in value))
    if isinstance(value, dict) and value and all(isinstance(v, torch.Tensor) for v in value.values()):
        return ("dict", tuple((k, _cell_key(v)) for k, v in value.items()))
    try:
        hash(value)
        return ("value", type(value), value)
    except TypeError:
        return ("object", id(value))


def _signature(req: _Request) -> tuple:
    names = {id(p): n for n, p in req.model.named_parameters()}
    req.names = [names.get(id(p), "") for p in req.params]
    fn = req.loss_fn
    code = getattr(fn, "__code__", None)
    return (type(req.model), tuple((n, tuple(p.shape)) for n, p in req.model.named_parameters()),
            tuple(req.names), req.settings, code if code is not None else id(fn),
            tuple(_cell_key(c, req.model) for c in _cells(fn)) if code is not None else (),
            tuple(req.x.shape[1:]), req.x.dtype, req.x.device, int(req.y.shape[0]) > 0,
            None if req.pull is None else (float(req.pull.weight), tuple(_cell_key(t) for t in req.pull.reference)))


def _groups(requests: list[_Request]) -> list[list[_Request]]:
    groups: dict[tuple, list[_Request]] = {}
    for req in requests:
        groups.setdefault(_signature(req), []).append(req)
    return list(groups.values())


def _stackable(group: list[_Request]) -> bool:
    """Stack only plain parameters: buffers (BatchNorm's running statistics) would be updated
    in place under vmap, and a parameter outside the model cannot be stacked."""
    first = group[0]
    return (all(first.names) and not any(True for _ in first.model.buffers())
            and first.settings.epochs > 0 and len(first.params) > 0 and int(first.y.shape[0]) > 0
            and len({id(r.model) for r in group}) == len(group))


def _sequential(req: _Request) -> float:
    from ..training import sgd_train

    return sgd_train(req.model, req.params, req.x, req.y, req.settings, req.generator, req.loss_fn, req.pull)


class _LossOf(nn.Module):
    """``loss_fn(model, x, y)`` as a module, so functional_call can swap the model's weights
    (and those of the modules the loss captures, ``cell<i>``)."""

    def __init__(self, model: nn.Module, fn: Callable, held: dict[str, nn.Module]):
        super().__init__()
        self.model = model
        self.fn = fn
        for name, module in held.items():
            self.add_module(name, module)

    def forward(self, x: torch.Tensor, y: torch.Tensor, cells: tuple) -> torch.Tensor:
        fn = self.fn
        if fn.__closure__:
            fn = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                                    tuple(types.CellType(c) for c in cells))
        return fn(self.model, x, y)


def _stack_cell(values: list[Any]) -> tuple[Any, Any]:
    """(value to pass, vmap in_dims) for one captured variable across the clients."""
    first = values[0]
    if isinstance(first, torch.Tensor):
        if all(v is first for v in values):
            return first, None
        return torch.stack(values), 0
    if isinstance(first, (list, tuple)) and first and all(isinstance(v, torch.Tensor) for v in first):
        if all(v is first for v in values):
            return first, None
        return type(first)(torch.stack([v[i] for v in values]) for i in range(len(first))), 0
    if isinstance(first, dict) and first and all(isinstance(v, torch.Tensor) for v in first.values()):
        if all(v is first for v in values):
            return first, None
        return {k: torch.stack([v[k] for v in values]) for k in first}, 0
    return first, None


def _stacked(group: list[_Request]) -> int:
    """Train the group's clients together; returns the number of stacked steps taken."""
    from torch.func import functional_call, grad, vmap

    first = group[0]
    settings, model = first.settings, first.model
    k = len(group)
    all_names = [n for n, _ in model.named_parameters()]
    trained = list(dict.fromkeys(first.names))
    frozen = [n for n in all_names if n not in set(trained)]
    params = {}
    for n in all_names:
        params[n] = torch.stack([dict(r.model.named_parameters())[n].detach() for r in group])
    cells = [_stack_cell([_cells(r.loss_fn)[i] for r in group]) for i in range(len(_cells(first.loss_fn)))]
    pull = None  # one Pull for the group: each client's reference stacked as its weights
    if first.pull is not None:
        stacked = {n: torch.stack([r.pull.reference[j] for r in group]) for j, n in enumerate(first.names)}
        pull = Pull([stacked[n] for n in trained], first.pull.weight)  # the weight is in the group's signature
    cell_values, cell_dims = tuple(c[0] for c in cells), tuple(c[1] for c in cells)
    held_modules, held = {}, {}  # captured modules, one per client: their weights stacked, swapped in
    for i, c in enumerate(_cells(first.loss_fn)):
        if isinstance(c, nn.Module) and not all(_cells(r.loss_fn)[i] is c for r in group):
            held_modules[f"cell{i}"] = c
            for n, _ in _module_tensors(c):
                held[f"cell{i}.{n}"] = torch.stack([dict(_module_tensors(_cells(r.loss_fn)[i]))[n].detach()
                                                    for r in group])
    wrapper = _LossOf(model, first.loss_fn, held_modules)

    def one(trained_params: dict, frozen_params: dict, held: dict, x: torch.Tensor, y: torch.Tensor, cells: tuple):
        weights = {f"model.{n}": t for n, t in {**trained_params, **frozen_params}.items()}
        weights.update(held)
        with precision_context(settings, x.device):
            loss = functional_call(wrapper, weights, (x, y, cells))
        return loss, loss.detach()

    # grad (not one backward of the summed losses): inside it the trained weights require
    # grad and the frozen ones do not, as a loss such as FedProx's proximal term may ask.
    step_fn = vmap(grad(one, has_aux=True),
                   in_dims=(0, 0, 0, 0, 0, tuple(None if d is None else 0 for d in cell_dims)))

    batches = [shuffled_batches(r.x, r.y, settings.epochs, settings.batch_size, r.generator) for r in group]
    buffers = {n: torch.zeros_like(params[n]) for n in trained}
    started = [False] * k  # on the host: no device sync per step
    totals = torch.zeros(k, device=first.x.device)  # the default dtype, as sgd_train's total
    counts = [0] * k
    steps = 0
    lr, momentum, decay = settings.lr, settings.momentum, settings.weight_decay
    was_training = model.training
    model.train()
    try:
        while True:  # the stacked weights are plain tensors: only torch.func.grad differentiates
            current = []
            for i, it in enumerate(batches):
                b = next(it, None) if it is not None else None
                if b is None:
                    batches[i] = None
                else:
                    current.append((i, b))
            if not current:
                break
            by_size: dict[int, list] = {}
            for i, (xb, yb) in current:
                by_size.setdefault(int(yb.shape[0]), []).append((i, xb, yb))
            for members in by_size.values():
                rows = [i for i, _, _ in members]
                everyone = len(rows) == k
                index = torch.tensor(rows, device=first.x.device)
                xs = torch.stack([xb for _, xb, _ in members])
                ys = torch.stack([yb for _, _, yb in members])
                leaves = params if everyone else {n: params[n][index] for n in all_names}
                sub_cells = tuple(v if d is None else _select(v, index, everyone)
                                  for v, d in zip(cell_values, cell_dims))
                grads, losses = step_fn({n: leaves[n] for n in trained}, {n: leaves[n] for n in frozen},
                                        held if everyone else {n: t[index] for n, t in held.items()},
                                        xs, ys, sub_cells)
                trained_grads = [grads[n] for n in trained]
                if pull is not None:
                    rows_pull = pull if everyone else Pull([r[index] for r in pull.reference], pull.weight)
                    trained_grads = rows_pull.added([leaves[n] for n in trained], trained_grads)
                _sgd_rows(params, buffers, started, trained, trained_grads, rows, index, everyone,
                          lr, momentum, decay)
                totals.index_add_(0, index, losses.to(totals.dtype))
                for i in rows:
                    counts[i] += 1
                steps += 1
    finally:
        model.train(was_training)
    with torch.no_grad():
        for j, req in enumerate(group):
            named = dict(req.model.named_parameters())
            for n in trained:
                named[n].copy_(params[n][j])
    sums = totals.tolist()
    for j, req in enumerate(group):
        req.result = sums[j] / counts[j] if counts[j] else 0.0
    return steps


def _select(value: Any, index: torch.Tensor, everyone: bool) -> Any:
    if everyone:
        return value
    if isinstance(value, torch.Tensor):
        return value[index]
    if isinstance(value, dict):
        return {k: v[index] for k, v in value.items()}
    return type(value)(v[index] for v in value)


def _sgd_rows(params: dict, buffers: dict, started: list[bool], trained: list[str], grads: Sequence,
              rows: list[int], index: torch.Tensor, everyone: bool, lr: float, momentum: float, decay: float) -> None:
    """SGDStep's update (weight decay, momentum from the first gradient, step) on the rows
    ``index`` of the stacked parameters. (torch.func.grad gives a parameter the loss does not
    use a zero gradient, so weight decay still moves it, where SGDStep leaves it alone: no
    covered method trains a parameter its loss does not use.)"""
    used = [(n, g) for n, g in zip(trained, grads) if g is not None]
    if not used:
        return
    names = [n for n, _ in used]
    if everyone and all(started):
        ps, gs, bs = [params[n].data for n in names], [g for _, g in used], [buffers[n] for n in names]
        if decay:
            gs = torch._foreach_add(gs, ps, alpha=decay)
        if momentum:
            torch._foreach_mul_(bs, momentum)
            torch._foreach_add_(bs, gs)
            gs = bs
        torch._foreach_add_(ps, gs, alpha=-lr)
        return
    fresh = torch.tensor([not started[i] for i in rows], device=index.device)
    for n, g in used:
        p = params[n].data
        rows_p = p if everyone else p[index]
        if decay:
            g = torch.add(g, rows_p, alpha=decay)
        if momentum:
            old = buffers[n] if everyone else buffers[n][index]
            shape = (-1,) + (1,) * (g.dim() - 1)
            buf = torch.where(fresh.view(shape), g, old * momentum + g)
            if everyone:
                buffers[n].copy_(buf)
            else:
                buffers[n].index_copy_(0, index, buf)
            g = buf
        new = torch.add(rows_p, g, alpha=-lr)
        if everyone:
            p.copy_(new)
        else:
            p.index_copy_(0, index, new)
    for i in rows:
        started[i] = True


__all__ = ["CLIENT_BY_CLIENT", "COVERED", "Vectorised", "VectorisedError"]
