"""Training and evaluation speed against this machine's own float32 matrix-multiply peak.

    python benchmarks/speed.py [--repeats 5] [--workers 0 2] [--precision float32 bfloat16]
                               [--models fmnist rgb32] [--methods fedavg fedpac] [--out FILE]

Workloads (FedPAC's Fashion-MNIST round): 20 clients x 600 samples, batch 50, E = 5 (60,000 training
samples per round), on
- ``fmnist``: Fashion-MNIST with FedPAC's 28x28 grey CNN;
- ``rgb32``: FedPAC's 32x32 RGB CNN on random tensors of CIFAR's shape.

For every (model, method, workers, precision) it times whole rounds, the clients' local
training within them (what the executor spends, inter-process traffic included; the
server's aggregation is the rest of the round) and the evaluation of all clients (median
of ``--repeats`` after one warm-up, with min and max), and reports local-training
samples/s as a fraction of the float32 peak measured at the start of the same run
(torch.mm 4096 x 4096 with every core; one thread per core, as the workers use). It then
runs ``benchmarks/ceiling.py`` (``--ceiling-seconds``): the same model's convolution and
linear kernels alone, and its whole training step, in one process and on every core at
once, each against torch.mm measured alongside, which shows where the limit lies.
It writes a JSON record (default ``benchmarks/records/speed-<date>.json``) and prints a
table. A benchmark, not a test: run it on a quiet machine (another busy process can
slow a run several-fold).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from pflcore import ExperimentConfig
from pflcore.data.federated import FederatedData
from pflcore.data.partition import make_partition
from pflcore.data.sources import Dataset
from pflcore.engine import Simulation, build_data
from pflcore.engine.executors import available_cores

from ceiling import ceiling, table, training_flops_per_sample

WORKLOAD = dict(num_clients=20, local_epochs=5, batch_size=50,
                partition={"kind": "dominant", "s": 0.2, "samples_per_client": 600})
MODEL_FOR = {"fmnist": "fedpac_cnn", "rgb32": "fedpac_cnn"}


def matmul_peak(dtype: torch.dtype, threads: int, n: int = 4096, repeats: int = 5) -> float:
    """GFLOP/s of torch.mm n x n (best of ``repeats``) with ``threads`` threads."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    torch.set_num_threads(saved)
    return 2 * n ** 3 / best / 1e9


def random_rgb32(seed: int = 0) -> Dataset:
    """CIFAR-shaped random data (uint8 3 x 32 x 32, 10 classes): speed depends on shape only."""
    g = torch.Generator().manual_seed(seed)
    make = lambda n: (torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g),
                      torch.randint(0, 10, (n,), generator=g))
    (tx, ty), (vx, vy) = make(50_000), make(10_000)
    return Dataset("rgb32", tx, ty, vx, vy, 10, (0.5,) * 3, (0.25,) * 3)


def make_data(name: str, config: ExperimentConfig) -> FederatedData:
    if name == "fmnist":
        return build_data(config)
    dataset = random_rgb32(config.seed)
    params = {k: v for k, v in config.partition.items() if k != "kind"}
    partition = make_partition(config.partition["kind"], dataset.train_y.numpy(), dataset.test_y.numpy(),
                               config.num_clients, seed=config.seed, num_classes=10, **params)
    return FederatedData(dataset, partition)


def measure(name: str, method: str, workers: int, precision: str, repeats: int, data_cache: dict) -> dict:
    config = ExperimentConfig.from_dict(dict(WORKLOAD, method=method, dataset="fmnist", model=MODEL_FOR[name],
                                             workers=workers, precision=precision, quiet=True))
    if name not in data_cache:
        data_cache[name] = make_data(name, config)
    data = data_cache[name]
    threads = 1 if workers > 1 else available_cores()
    torch.set_num_threads(threads)
    sim = Simulation(config, data)
    sim.use_workers(workers)
    timer = _Timed(sim.executor)
    sim.executor = timer
    try:
        samples = int(data.train_sizes.sum()) * config.local_epochs
        sim.run_round(0)  # warm-up (and the pool's first setup)
        sim.evaluate(0)
        rounds, trains, evals = [], [], []
        for r in range(1, repeats + 1):
            timer.seconds = 0.0
            t0 = time.perf_counter()
            sim.run_round(r)
            rounds.append(time.perf_counter() - t0)
            trains.append(timer.seconds)
            t0 = time.perf_counter()
            sim.evaluate(r)
            evals.append(time.perf_counter() - t0)
    finally:
        sim.executor = timer.inner
        sim.close()
    flops = training_flops_per_sample(sim.model, data.train[0].x)
    train = statistics.median(trains)
    return {"model": name, "method": method, "workers": workers, "threads_per_process": threads,
            "precision": precision, "samples_per_round": samples, "train_mflop_per_sample": flops / 1e6,
            "round_s_median": statistics.median(rounds), "round_s_min": min(rounds), "round_s_max": max(rounds),
            "train_s_median": train, "train_s_min": min(trains), "train_s_max": max(trains),
            "samples_per_s": samples / train, "eval_s_median": statistics.median(evals),
            "eval_s_min": min(evals), "eval_s_max": max(evals), "train_gflop_s": samples * flops / train / 1e9}


class _Timed:
    """Wraps an executor and adds up the seconds spent in the clients' work (local
    training, including any inter-process traffic), apart from the server's part."""

    def __init__(self, inner):
        self.inner, self.seconds = inner, 0.0

    def run(self, jobs):
        t0 = time.perf_counter()
        try:
            return self.inner.run(jobs)
        finally:
            self.seconds += time.perf_counter() - t0

    def close(self):
        self.inner.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, available_cores()])
    parser.add_argument("--precision", nargs="+", default=["float32"], choices=["float32", "bfloat16"])
    parser.add_argument("--models", nargs="+", default=["fmnist", "rgb32"], choices=sorted(MODEL_FOR))
    parser.add_argument("--methods", nargs="+", default=["fedavg", "fedpac"])
    parser.add_argument("--ceiling-seconds", type=float, default=4.0,
                        help="seconds per workload for benchmarks/ceiling.py's measurement (0: skip it)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    n = available_cores()
    peaks = {"fp32_1_thread": matmul_peak(torch.float32, 1), f"fp32_{n}_threads": matmul_peak(torch.float32, n),
             "bf16_1_thread": matmul_peak(torch.bfloat16, 1)}
    # The float32 limit of n one-thread workers is n x the one-thread peak; compare with the
    # larger of that and n-thread torch.mm, so the fraction is never flattered.
    peak = max(n * peaks["fp32_1_thread"], peaks[f"fp32_{n}_threads"])
    rows, cache = [], {}
    for name in args.models:
        for method in args.methods:
            for precision in args.precision:
                for workers in args.workers:
                    row = measure(name, method, workers, precision, args.repeats, cache)
                    row["fraction_of_fp32_peak"] = row["train_gflop_s"] / peak
                    rows.append(row)
                    print(_line(row), flush=True)
    limits = ceiling(args.models, n, args.ceiling_seconds) if args.ceiling_seconds > 0 else None
    record = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host": platform.node(),
              "cpu": platform.processor() or platform.machine(), "cores": n, "torch": torch.__version__,
              "peaks_gflop_s": peaks, "fp32_peak_used_gflop_s": peak, "workload": WORKLOAD,
              "repeats": args.repeats, "rows": rows, "ceiling": limits}
    out = args.out or Path(__file__).parent / "records" / f"speed-{datetime.now():%Y%m%d-%H%M}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))
    if limits is not None:
        print("\nWhere the limit lies (benchmarks/ceiling.py; each against torch.mm measured alongside):")
        print(table(limits))
    print("\npeaks (GFLOP/s): " + ", ".join(f"{k} {v:.0f}" for k, v in peaks.items()) + f"; fp32 peak used {peak:.0f}")
    print(f"record: {out}")


def _line(r: dict) -> str:
    mode = f"{r['workers']} workers x 1 thread" if r["workers"] > 1 else f"in-process, {r['threads_per_process']} threads"
    return (f"{r['model']:6s} {r['method']:7s} {r['precision']:8s} {mode:26s} "
            f"round {r['round_s_median']:5.2f} s [{r['round_s_min']:.2f}-{r['round_s_max']:.2f}]  "
            f"training {r['train_s_median']:5.2f} s  {r['samples_per_s']:7,.0f} samples/s  {100 * r['fraction_of_fp32_peak']:4.0f}% of fp32 peak  "
            f"eval {r['eval_s_median']:.2f} s")


if __name__ == "__main__":
    main()
