"""Where the limit of local training lies on this machine: one core, and all cores at once.

    python benchmarks/ceiling.py [--models fmnist rgb32] [--seconds 4] [--out FILE]

For each model three workloads run, first in one process, then in one single-thread
process per core, all at the same time (as the engine's workers run):

- ``matmul``: torch.mm 2048 x 2048, the float32 peak;
- ``kernels``: only the convolutions and linear layers of one training step (batch 50),
  forward and backward, replayed on tensors of the step's shapes: what no implementation
  of the step can skip;
- ``step``: the whole training step as :func:`pflcore.training.sgd_train` runs it.

``kernels`` and ``step`` are reported in GFLOP/s of the same training FLOPs (3 x the
forward FLOPs of the convolutions and linear layers per sample), so the ratios say how
much of the peak the kernels reach, how much the rest of the step costs (pooling,
activations, loss, optimizer, dispatch), and how much is lost when every core works.
``benchmarks/speed.py`` includes this in its record.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

WORKLOADS = ("matmul", "kernels", "step")
SHAPES = {"fmnist": (1, 28), "rgb32": (3, 32)}  # (channels, image size) of FedPAC's two CNNs
BATCH = 50


def training_flops_per_sample(model: nn.Module, sample: torch.Tensor) -> float:
    """3 x the forward FLOPs of the convolutions and linear layers (forward + backward)."""
    total = 0.0

    def hook(module, inputs, output):
        nonlocal total
        if isinstance(module, nn.Conv2d):
            k = module.kernel_size[0] * module.kernel_size[1] * module.in_channels // module.groups
            total += 2.0 * output.numel() * k
        elif isinstance(module, nn.Linear):
            total += 2.0 * module.in_features * module.out_features * (output.numel() // module.out_features)

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        model.eval()(sample[:1])
    for h in handles:
        h.remove()
    return 3 * total


def _model(name: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    from pflcore.models import fedpac_cnn

    channels, size = SHAPES[name]
    g = torch.Generator().manual_seed(0)
    model = fedpac_cnn(channels, 10, size).to(memory_format=torch.channels_last)
    x = torch.randn(600, channels, size, size, generator=g).contiguous(memory_format=torch.channels_last)
    return model, x, torch.randint(0, 10, (600,), generator=g)


def _kernel_replay(model: nn.Module, x: torch.Tensor):
    """A function running the step's convolution and linear kernels, forward and backward
    (no input gradient for the first layer, as autograd skips it), on tensors of the
    shapes one batch produces."""
    calls = []

    def hook(module, inputs, output):
        calls.append((module, inputs[0].detach(), output.detach()))

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        model(x[:BATCH])
    for h in handles:
        h.remove()
    ops = []
    for i, (module, inp, out) in enumerate(calls):
        w, b = module.weight.detach(), module.bias.detach()
        grad_out = torch.randn_like(out)
        if isinstance(module, nn.Conv2d):
            w = w.contiguous(memory_format=torch.channels_last)
            mask = [i > 0, True, True]
            ops.append(lambda inp=inp, w=w, b=b, m=module: F.conv2d(inp, w, b, m.stride, m.padding, m.dilation, m.groups))
            ops.append(lambda g=grad_out, inp=inp, w=w, m=module, mask=mask: torch.ops.aten.convolution_backward(
                g, inp, w, [w.shape[0]], list(m.stride), list(m.padding), list(m.dilation), False, [0, 0],
                m.groups, mask))
        else:
            ops.append(lambda inp=inp, w=w, b=b: F.linear(inp, w, b))
            ops.append(lambda g=grad_out, inp=inp: g.t().mm(inp))
            if i > 0:
                ops.append(lambda g=grad_out, w=w: g.mm(w))

    def run() -> int:
        for op in ops:
            op()
        return BATCH

    return run


def _workload(kind: str, name: str):
    """(function doing one unit of work and returning the samples it trained, FLOPs per sample)."""
    if kind == "matmul":
        a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
        return (lambda: (torch.mm(a, b), 1)[1]), 2.0 * 2048 ** 3
    from pflcore.training import TrainSettings, sgd_train

    model, x, y = _model(name)
    flops = training_flops_per_sample(model, x)
    if kind == "kernels":
        return _kernel_replay(model, x), flops
    settings = TrainSettings(epochs=1, batch_size=BATCH, lr=0.01)
    g = torch.Generator().manual_seed(0)
    return (lambda: (sgd_train(model, model.parameters(), x, y, settings, g), x.shape[0])[1]), flops


def _measure(name: str, seconds: float, start=None) -> dict[str, float]:
    """GFLOP/s of each workload in this process with one thread. The workloads take turns
    in 0.25 s slices for ``seconds`` each (the machine's speed drifts from minute to
    minute; taking turns keeps the ratios fair); each gets the median of its slices.
    ``start`` is a barrier shared by processes that must work at the same time."""
    from pflcore.engine.executors import _keep_freed_memory

    torch.set_num_threads(1)
    _keep_freed_memory()  # as the engine's workers do
    work = {kind: _workload(kind, name) for kind in WORKLOADS}
    for fn, _ in work.values():  # warm-up
        t_end = time.perf_counter() + 0.3
        while time.perf_counter() < t_end:
            fn()
    if start is not None:
        start.wait()
    rates: dict[str, list[float]] = {kind: [] for kind in WORKLOADS}
    for _ in range(max(1, round(seconds / 0.25))):
        for kind, (fn, flops) in work.items():
            t0, units = time.perf_counter(), 0
            while time.perf_counter() - t0 < 0.25:
                units += fn()
            rates[kind].append(units * flops / (time.perf_counter() - t0) / 1e9)
    return {kind: statistics.median(r) for kind, r in rates.items()}


def _child(name, seconds, start, queue):
    queue.put(_measure(name, seconds, start))


def concurrent(name: str, processes: int, seconds: float) -> list[dict[str, float]]:
    """Each workload's GFLOP/s in each of ``processes`` single-thread processes working at once."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    start, queue = ctx.Barrier(processes), ctx.Queue()
    procs = [ctx.Process(target=_child, args=(name, seconds, start, queue)) for _ in range(processes)]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    return results


def ceiling(models: list[str], cores: int, seconds: float = 4.0) -> dict:
    """For each model and workload: GFLOP/s in one process alone and in ``cores`` processes
    at once, and each as a fraction of the matmul peak measured alongside."""
    out: dict = {"cores": cores, "seconds_per_workload": seconds, "gflop_s": {}}
    for name in models:
        alone = concurrent(name, 1, seconds)[0]
        together = concurrent(name, cores, seconds) if cores > 1 else [alone]
        rows = {kind: {"one_process": alone[kind], "all_cores_each": sorted(r[kind] for r in together),
                       "all_cores_total": sum(r[kind] for r in together)} for kind in WORKLOADS}
        for kind in WORKLOADS:
            rows[kind]["fraction_one_process"] = rows[kind]["one_process"] / rows["matmul"]["one_process"]
            rows[kind]["fraction_all_cores"] = rows[kind]["all_cores_total"] / rows["matmul"]["all_cores_total"]
        out["gflop_s"][name] = rows
    return out


def table(result: dict) -> str:
    n = result["cores"]
    lines = [f"{'model':7s} {'workload':8s} {'1 process GFLOP/s':>18s} {'of peak':>8s}   "
             f"{f'{n} processes GFLOP/s (each)':>34s} {'of peak':>8s}"]
    for name, rows in result["gflop_s"].items():
        for kind, r in rows.items():
            each = " + ".join(f"{v:.0f}" for v in r["all_cores_each"])
            lines.append(f"{name:7s} {kind:8s} {r['one_process']:18.0f} {100 * r['fraction_one_process']:7.0f}%   "
                         f"{r['all_cores_total']:14.0f} ({each:>15s}) {100 * r['fraction_all_cores']:7.0f}%")
    return "\n".join(lines)


def main() -> None:
    from pflcore.engine.executors import available_cores

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(SHAPES), choices=sorted(SHAPES))
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result = ceiling(args.models, available_cores(), args.seconds)
    print(table(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
