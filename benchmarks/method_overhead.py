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

``--versions DIR DIR``: the same workload on two source trees of pflcore in one invocation
(e.g. a ``git worktree`` of an older commit and ``.``): each tree runs in its own process
(clients in that process), the trees take turns round by round and method by method, in
alternating order, so a loaded machine's drift hits both alike; each round's training loss
and mean accuracy are compared between the trees (they must be identical), and the medians
and the after/before ratio are printed per method. ``--local-epochs`` shortens the workload.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
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
    parser.add_argument("--versions", nargs=2, metavar="DIR", help="two pflcore source trees to compare")
    parser.add_argument("--local-epochs", type=int, default=None, help="replace the workload's local epochs")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args)
    if args.versions:
        return compare(args)
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


def _changes(args) -> dict:
    return {} if args.local_epochs is None else {"local_epochs": args.local_epochs}


def serve(args) -> None:
    """One source tree's side of ``--versions``: build the simulations, then run the round
    each input line names ("round method") and answer its timings and numbers."""
    torch.set_num_threads(1)
    sims, data = {}, None
    for method in args.methods:
        config = workload(args.setting, method, rounds=args.rounds + 1, quiet=True, workers=0, **_changes(args))
        data = data or build_data(config)
        sims[method] = Simulation(config, data)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        r, method = line.split()
        sim = sims[method]
        t0 = time.perf_counter()
        record = sim.run_round(int(r))
        t1 = time.perf_counter()
        acc = sim.evaluate(int(r))
        t2 = time.perf_counter()
        if not hasattr(sim, "count_correct"):  # a tree from before accuracies were in percent: fractions
            acc = 100 * acc  # exactly the percent a newer tree gives
        print(json.dumps({"round": t1 - t0, "eval": t2 - t1, "train_loss": record["train_loss"],
                          "acc": float(acc[~np.isnan(acc)].mean())}), flush=True)


def compare(args) -> None:
    """``--versions A B``: both trees on one workload, alternating, in one invocation."""
    script = Path(__file__).resolve()
    procs = []
    for tree in args.versions:
        env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve()), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        cmd = [sys.executable, str(script), "--serve", "--setting", args.setting, "--rounds", str(args.rounds),
               "--methods", *args.methods] + ([] if args.local_epochs is None else
                                              ["--local-epochs", str(args.local_epochs)])
        procs.append(subprocess.Popen(cmd, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True))
    for p in procs:
        json.loads(p.stdout.readline())  # ready
    times = {(v, m): [] for v in range(2) for m in args.methods}
    same = True
    for r in range(args.rounds + 1):
        for i, method in enumerate(args.methods):
            order = (0, 1) if (r + i) % 2 == 0 else (1, 0)
            answers = {}
            for v in order:
                procs[v].stdin.write(f"{r} {method}\n")
                procs[v].stdin.flush()
                answers[v] = json.loads(procs[v].stdout.readline())
            same &= (answers[0]["train_loss"], answers[0]["acc"]) == (answers[1]["train_loss"], answers[1]["acc"])
            if r > 0:  # round 0 is the warm-up
                for v in range(2):
                    times[v, method].append(answers[v]["round"])
    for p in procs:
        p.stdin.close()
        p.wait()
    record = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
              "torch": torch.__version__, "setting": args.setting, "local_epochs": args.local_epochs,
              "rounds": args.rounds, "versions": args.versions, "identical_numbers": same, "methods": {}}
    print(f"{'method':8s} {'A round s':>10s} {'B round s':>10s} {'B / A':>7s}   (A = {args.versions[0]}, "
          f"B = {args.versions[1]})")
    for method in args.methods:
        a, b = statistics.median(times[0, method]), statistics.median(times[1, method])
        record["methods"][method] = {"a_round_seconds": times[0, method], "b_round_seconds": times[1, method],
                                     "a_median": a, "b_median": b, "ratio": b / a}
        print(f"{method:8s} {a:10.3f} {b:10.3f} {b / a:7.3f}")
    print(f"identical training losses and accuracies in every round: {same}")
    out = Path(args.out or f"benchmarks/records/method-overhead-ab-{datetime.now():%Y-%m-%dT%H%M}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"record: {out}")


if __name__ == "__main__":
    main()
