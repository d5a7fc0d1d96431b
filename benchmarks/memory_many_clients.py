"""Peak memory of a federation with many clients (FedPAC appendix C.9 scale).

    python benchmarks/memory_many_clients.py [--clients 1000] [--samples 50] [--methods fedpac local]
                                             [--workers auto]

Builds CIFAR-shaped data (random 3x32x32 uint8 images, 10 classes) for ``--clients``
clients with ``--samples`` training samples each and the FedPAC CIFAR CNN. Every client
then takes part once, in rounds of ``--per-round`` clients (the paper's rate 0.03 gives 30),
so that every client holds its personal state (the worst case for memory). The rounds go
through the engine (``Simulation.run_round``) and its worker processes (``--workers``).
Prints the time of one such round, the personal state kept, what one client downloads per
round (HypCluster: its k models), the server's state, this process's peak resident memory, and each worker's peak and how much of it is the shared client data. A benchmark, not a test.
"""
from __future__ import annotations

import argparse
import resource
import time

import torch

from pflcore import ExperimentConfig
from pflcore.data.federated import FederatedData
from pflcore.data.partition import make_partition
from pflcore.data.sources import Dataset
from pflcore.engine import Simulation
from pflcore.engine.executors import shutdown_workers


def state_bytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(state_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(state_bytes(v) for v in obj)
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--per-round", type=int, default=30)
    parser.add_argument("--methods", nargs="+", default=["fedpac", "local"])
    parser.add_argument("--workers", default="auto", help="worker processes: 'auto', N, or 0 (in this process)")
    args = parser.parse_args()
    n_train = args.clients * args.samples
    g = torch.Generator().manual_seed(0)
    dataset = Dataset("synthetic-cifar", torch.randint(0, 256, (n_train, 3, 32, 32), dtype=torch.uint8, generator=g),
                      torch.arange(n_train) % 10, torch.randint(0, 256, (10000, 3, 32, 32), dtype=torch.uint8, generator=g),
                      torch.arange(10000) % 10, 10, (0.5,) * 3, (0.25,) * 3)
    partition = make_partition("iid", dataset.train_y.numpy(), dataset.test_y.numpy(), args.clients, seed=0,
                               num_classes=10, samples_per_client=args.samples, test_fraction=0.5)
    data = FederatedData(dataset, partition)
    for method in args.methods:
        config = ExperimentConfig.from_dict(dict(method=method, dataset="cifar10", num_clients=args.clients,
                                                 local_epochs=5, rounds=1, quiet=True))
        sim = Simulation(config, data)
        sim.use_workers(args.workers if args.workers == "auto" else int(args.workers))
        seconds = []
        for start in range(0, args.clients, args.per_round):
            t0 = time.perf_counter()
            sim.run_round(0, clients=range(start, min(start + args.per_round, args.clients)))
            seconds.append(time.perf_counter() - t0)
        sim.close()
        seconds = sorted(seconds)[len(seconds) // 2]
        per_client = state_bytes(sim.client_states) + state_bytes(sim.state.get("heads", {}))
        download = state_bytes(sim.algorithm.payload(sim.state, 0))  # what one client receives per round
        server = state_bytes(sim.state)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{method}: {args.clients} clients x {args.samples} samples, a round of {args.per_round} clients "
              f"{seconds:.2f} s (median); personal state "
              f"{per_client / 2**20:.1f} MiB in all ({per_client / args.clients / 1024:.1f} KiB per client); "
              f"download {download / 2**20:.2f} MiB per client per round; server state {server / 2**20:.1f} MiB; "
              f"peak RSS so far {peak:.0f} MiB", flush=True)
    for pid, status in worker_memory().items():
        print(f"worker {pid}: peak RSS {status['VmHWM'] / 1024:.0f} MiB; now {status['RssAnon'] / 1024:.0f} MiB "
              f"its own + {status['RssShmem'] / 1024:.0f} MiB of the shared client data")
    shutdown_workers()


def worker_memory() -> dict[int, dict[str, int]]:
    """VmHWM, RssAnon and RssShmem (KiB) of this process's live worker processes, from
    /proc (Linux). Not getrusage(RUSAGE_CHILDREN): Linux carries a spawned child's peak
    over from the parent it was forked from."""
    import multiprocessing

    out = {}
    for child in multiprocessing.active_children():
        try:
            lines = open(f"/proc/{child.pid}/status").read().splitlines()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in lines if ":" in line)
        out[child.pid] = {k: int(fields[k].split()[0]) for k in ("VmHWM", "RssAnon", "RssShmem") if k in fields}
    return out


if __name__ == "__main__":
    main()
