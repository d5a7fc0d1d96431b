"""Round time of each method against FedAvg's on one paper's Fashion-MNIST workload: what a
method's own work costs, measured rather than guessed.

    python benchmarks/method_overhead.py [--setting fedpac|fedfa] [--methods fedavg ditto ...]
                                         [--rounds 3] [--workers auto] [--out FILE]

Workloads: ``fedpac`` (default) is FedPAC's Table 1, 20 clients x 600 samples (dominant-class
partition, s = 20%), batch 50, E = 5, FedPAC's CNN and its hyperparameters for each baseline
(``pflcore.papers.fedpac``); ``fedfa`` is FedFA's Table 2 #C=2, 100 clients with 10 per round,
batch 64, E = 5, FedFA's CNN and the baselines' settings there (``pflcore.papers.fedfa``). For each
method a simulation runs one warm-up round, then ``--rounds`` timed rounds; the methods take
turns round by round, so the machine's drift hits them alike. A round is timed whole (the
clients' work, the server's aggregation and, for CCVR, its collect phase and calibration,
forced every round here) and so is one evaluation of all clients. Prints medians and the
ratio to FedAvg, and writes a JSON record (default
``benchmarks/records/method-overhead-<date>.json``). A benchmark, not a test: run it on a
quiet machine.
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

from pflcore.engine import Simulation, build_data
from pflcore.papers.fedfa import fedfa_config
from pflcore.papers.fedpac import fedpac_config


def workload(setting: str, method: str, **changes):
    """The config of ``method`` on the ``setting`` paper's FMNIST workload."""
    if setting == "fedfa":
        return fedfa_config(method, "fmnist", "c2", **changes)
    return fedpac_config(method, "fmnist", 20, **changes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setting", choices=["fedpac", "fedfa"], default="fedpac")
    parser.add_argument("--methods", nargs="+", default=["fedavg", "ditto", "pfedme", "pfedhn", "ccvr"])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per method (after one warm-up)")
    parser.add_argument("--workers", default="auto", help="'auto', or a number of worker processes (0: here)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    workers = args.workers if args.workers == "auto" else int(args.workers)

    sims = {}
    data = None
    for method in args.methods:
        params = {"calibrate_every": 1} if method == "ccvr" else None  # calibrate in every timed round
        changes = {"method_params": params} if params else {}
        config = workload(args.setting, method, rounds=args.rounds + 1, quiet=True, workers=workers, **changes)
        data = data or build_data(config)
        sims[method] = Simulation(config, data)
    rounds: dict[str, list[float]] = {m: [] for m in sims}
    evals: dict[str, list[float]] = {m: [] for m in sims}
    for r in range(args.rounds + 1):
        for method, sim in sims.items():  # one executor at a time: they share the machine's cores
            sim.use_workers(workers)
            t0 = time.perf_counter()
            sim.run_round(r)
            t1 = time.perf_counter()
            sim.evaluate(r)
            t2 = time.perf_counter()
            sim.close()
            if r > 0:  # round 0 is the warm-up
                rounds[method].append(t1 - t0)
                evals[method].append(t2 - t1)

    base = statistics.median(rounds["fedavg"]) if "fedavg" in rounds else None
    record = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
              "torch": torch.__version__, "setting": args.setting, "workers": workers, "rounds": args.rounds,
              "methods": {}}
    print(f"{'method':8s} {'round s':>9s} {'min-max':>13s} {'x FedAvg':>9s} {'eval s':>7s}")
    for method in sims:
        med = statistics.median(rounds[method])
        record["methods"][method] = {"round_seconds": rounds[method], "eval_seconds": evals[method],
                                     "median_round": med, "ratio_to_fedavg": med / base if base else None}
        ratio = f"{med / base:9.2f}" if base else f"{'':9s}"
        print(f"{method:8s} {med:9.2f} {min(rounds[method]):6.2f}-{max(rounds[method]):<6.2f} {ratio} "
              f"{statistics.median(evals[method]):7.2f}")
    out = Path(args.out or f"benchmarks/records/method-overhead-{datetime.now():%Y-%m-%dT%H%M}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"record: {out}")


if __name__ == "__main__":
    main()
