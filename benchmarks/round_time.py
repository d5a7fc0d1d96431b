"""Time one FedAvg round and one evaluation of all clients (Fashion-MNIST, FedPAC CNN,
20 clients x 600 samples, E=5, batch 50) on this machine.

    python benchmarks/round_time.py [--repeats 3] [--threads 2] [--method fedavg]

Prints seconds per round and training samples per second (median and spread over the
repeats). A benchmark, not a test: run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from pflcore import ExperimentConfig
from pflcore.engine import Simulation, build_data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--method", default="fedavg")
    parser.add_argument("--dataset", default="fmnist")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    config = ExperimentConfig.from_dict(dict(
        method=args.method, dataset=args.dataset, num_clients=20, local_epochs=5, batch_size=50,
        partition={"kind": "dominant", "s": 0.2, "samples_per_client": 600}, quiet=True))
    data = build_data(config)
    sim = Simulation(config, data)
    samples = int(data.train_sizes.sum()) * config.local_epochs
    sim.run_round(0)  # warm-up
    rounds, evals = [], []
    for r in range(1, args.repeats + 1):
        t0 = time.perf_counter()
        sim.run_round(r)
        rounds.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        sim.evaluate(r)
        evals.append(time.perf_counter() - t0)
    med = statistics.median(rounds)
    record = {
        "method": args.method, "dataset": args.dataset, "threads": args.threads, "torch": torch.__version__,
        "clients": data.num_clients, "samples_per_round": samples,
        "round_seconds_median": med, "round_seconds_min": min(rounds), "round_seconds_max": max(rounds),
        "train_samples_per_second": samples / med,
        "eval_seconds_median": statistics.median(evals), "test_samples": int(data.test_sizes.sum()),
    }
    print(f"{args.method} on {args.dataset}: {med:.2f} s/round (min {min(rounds):.2f}, max {max(rounds):.2f}), "
          f"{samples / med:,.0f} training samples/s; evaluation of all {data.num_clients} clients "
          f"{record['eval_seconds_median']:.2f} s ({args.threads} threads)")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
