"""FedCP's round against FedAvg's on FedCP's own MNIST workload (section 4): where per-step
overhead dominates, measured.

    python benchmarks/fedcp_round.py [--data-root DIR] [--methods fedavg fedcp] [--rounds 3]
                                     [--blocks 2] [--workers auto] [--authors-round SECONDS] [--out FILE]

Workload: the authors' MNIST practical partition (Dir(0.1), 20 clients, 52,492 training
samples; the PFLlib folder, default ``../shared/data/mnist-fedcp-dir0.1`` beside the
repository), the 4-layer CNN, batch 10, one local epoch, SGD lr 0.005, lambda 5.

The methods take turns in blocks, so that the machine's drift over minutes reaches each
alike, and each block runs consecutive rounds of one method, as a run does: the block hands
the worker processes to that method's simulation, runs one warm-up round (recorded apart:
on 24 November it was as fast as the later ones), then ``--rounds`` timed rounds. A round is
timed whole (all clients' training and the aggregation), and one evaluation of all clients
separately; the medians are over all blocks' timed rounds.
``--authors-round`` records the authors' code's round time measured on the same machine in
the same session (their code is not part of pflcore: time it outside the repository) and
prints the ratio. A benchmark, not a test: run it on a quiet machine.
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
from pflcore.papers.fedcp import fedcp_config

DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist-fedcp-dir0.1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", default=str(DEFAULT_ROOT))
    parser.add_argument("--methods", nargs="+", default=["fedavg", "fedcp"])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per method and block")
    parser.add_argument("--blocks", type=int, default=2, help="turns each method takes (one warm-up round each)")
    parser.add_argument("--workers", default="auto", help="'auto', or a number of worker processes (0: here)")
    parser.add_argument("--authors-round", type=float, default=None,
                        help="seconds per round of the authors' FedCP code, measured in this session")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.rounds < 1 or args.blocks < 1:
        parser.error("--rounds and --blocks must be at least 1.")
    workers = args.workers if args.workers == "auto" else int(args.workers)

    sims, data = {}, None
    for method in args.methods:
        config = fedcp_config(method, data_root=args.data_root, rounds=args.blocks * (args.rounds + 1), quiet=True,
                              workers=workers)
        data = data or build_data(config)
        sims[method] = Simulation(config, data)
    rounds: dict[str, list[float]] = {m: [] for m in sims}
    evals: dict[str, list[float]] = {m: [] for m in sims}
    warmups: dict[str, list[float]] = {m: [] for m in sims}
    for block in range(args.blocks):
        for method, sim in sims.items():
            sim.use_workers(workers)
            for k in range(args.rounds + 1):
                r = block * (args.rounds + 1) + k
                t0 = time.perf_counter()
                sim.run_round(r)
                t1 = time.perf_counter()
                sim.evaluate(r)
                t2 = time.perf_counter()
                if k == 0:
                    warmups[method].append(t1 - t0)
                else:
                    rounds[method].append(t1 - t0)
                    evals[method].append(t2 - t1)
            sim.close()

    base = statistics.median(rounds["fedavg"]) if "fedavg" in rounds else None
    record = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
              "torch": torch.__version__, "threads": torch.get_num_threads(), "workers": workers,
              "rounds": args.rounds, "blocks": args.blocks, "train_samples": int(data.train_sizes.sum()), "methods": {},
              "authors_fedcp_round": args.authors_round}
    print(f"{'method':8s} {'round s':>9s} {'min-max':>13s} {'x FedAvg':>9s} {'eval s':>7s} {'warm-up s':>10s}")
    for method in sims:
        med = statistics.median(rounds[method])
        entry = {"round_seconds": rounds[method], "eval_seconds": evals[method],
                 "warmup_round_seconds": warmups[method], "median_round": med,
                 "ratio_to_fedavg": med / base if base else None}
        if args.authors_round:
            entry["fraction_of_authors_round"] = med / args.authors_round
        record["methods"][method] = entry
        ratio = f"{med / base:9.2f}" if base else f"{'':9s}"
        print(f"{method:8s} {med:9.2f} {min(rounds[method]):6.2f}-{max(rounds[method]):<6.2f} {ratio} "
              f"{statistics.median(evals[method]):7.2f} {statistics.median(warmups[method]):10.2f}")
    if args.authors_round and "fedcp" in rounds:
        print(f"authors' FedCP round {args.authors_round:.1f} s: pflcore's is "
              f"{statistics.median(rounds['fedcp']) / args.authors_round:.3f} of it")
    out = Path(args.out or f"benchmarks/records/fedcp-round-{datetime.now():%Y-%m-%dT%H%M}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"record: {out}")


if __name__ == "__main__":
    main()
