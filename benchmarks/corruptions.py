"""Speed of pFedFDA's image corruptions (appendix C.1.1) and of building an "-S" federation.

    python benchmarks/corruptions.py [--images 10000] [--clients 100] [--repeats 1] [--threads N]

1. Fashion-MNIST-S: the pooled 70,000 images, Dirichlet partition (alpha 0.5, seed 42) into
   ``--clients`` clients, the ``corruption`` shift (first half corrupted); FederatedData
   built without the shift (twice: the first build warms up), then with it twice: cold
   (an empty corruption cache in a temporary folder) and cached (the files the cold
   build wrote).
2. Each corruption at each severity on ``--images`` Fashion-MNIST test images (28x28 grey;
   random images of that shape if Fashion-MNIST cannot be found), median of ``--repeats``
   after a warm-up on 16 images (which builds frost's textures once).

Prints two tables. A benchmark, not a test: other busy processes slow it (the load
average is printed).
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from pflcore.data import corruptions
from pflcore.data.corruptions import CORRUPTIONS, SEVERITIES, corrupt
from pflcore.data.federated import FederatedData
from pflcore.data.partition import make_partition
from pflcore.data.shifts import make_shift
from pflcore.data.sources import load_dataset


def fmnist():
    try:
        return load_dataset("fmnist", download=False)
    except Exception as exc:  # noqa: BLE001 - a benchmark falls back to random images
        print(f"Fashion-MNIST not found ({type(exc).__name__}); timing random 28x28 images")
        return None


def time_corruptions(images: torch.Tensor, repeats: int) -> dict[str, list[float]]:
    seconds = {}
    for name in CORRUPTIONS:
        corrupt(images[:16], name, 1, seed=0)  # warm-up (frost's textures are built once)
        row = []
        for severity in SEVERITIES:
            runs = []
            for r in range(repeats):
                t0 = time.perf_counter()
                corrupt(images, name, severity, seed=r)
                runs.append(time.perf_counter() - t0)
            row.append(statistics.median(runs))
        seconds[name] = row
        print(f"  {name:17s}" + "".join(f"{s:8.2f}" for s in row), flush=True)
    return seconds


def time_builds(dataset, clients: int) -> list[tuple[str, float]]:
    partition = make_partition("dirichlet", dataset.train_y.numpy(), dataset.test_y.numpy(), clients, seed=42,
                               num_classes=dataset.num_classes, alpha=0.5)
    shift = make_shift({"kind": "corruption"}, dataset.num_classes, 42, num_clients=clients)
    rows = []

    def build(label: str, transforms) -> FederatedData:
        t0 = time.perf_counter()
        data = FederatedData(dataset, partition, transforms=transforms)
        rows.append((label, time.perf_counter() - t0))
        print(f"  {label:34s}{rows[-1][1]:8.2f}", flush=True)
        return data

    with tempfile.TemporaryDirectory() as folder:
        original = corruptions.corruption_cache_dir
        corruptions.corruption_cache_dir = lambda: Path(folder)  # a cold cache, removed afterwards
        try:
            build("no shift (first build: warm-up)", [])
            build("no shift", [])
            cold = build("corruption shift, cold cache", [shift])
            cached = build("corruption shift, cached", [shift])
            files = list(Path(folder).glob("*.pt"))
            size = sum(f.stat().st_size for f in files) / 2 ** 20
            print(f"  cache: {len(files)} files, {size:.0f} MiB; cached build identical: "
                  f"{torch.equal(cold.train_x, cached.train_x) and torch.equal(cold.test_x, cached.test_x)}")
        finally:
            corruptions.corruption_cache_dir = original
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's); on a busy machine 1 avoids waiting on descheduled ones")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average "
          f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    dataset = fmnist()
    if dataset is not None:
        images = (dataset.test_x.float() / 255).repeat(args.images // len(dataset.test_x) + 1, 1, 1, 1)[:args.images]
    else:
        images = torch.rand(args.images, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    if dataset is not None:  # first: after the big batches below, allocations are slower for a while
        n = len(dataset.train_y) + len(dataset.test_y)
        print(f"\nFederatedData of Fashion-MNIST-S ({n} images, {args.clients} clients, Dirichlet alpha 0.5), seconds")
        time_builds(dataset, args.clients)
    print(f"\nseconds per call on {tuple(images.shape)} images")
    print(f"  {'corruption':17s}" + "".join(f"{'sev ' + str(s):>8s}" for s in SEVERITIES))
    time_corruptions(images, args.repeats)
    print(f"load average after: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
