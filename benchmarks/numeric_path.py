"""What pinning the numeric path would cost: a FedAvg round on FedPAC's Fashion-MNIST CNN on
this machine's default path against a pinned one (ATen at AVX2, oneDNN at AVX2, MKL's
conditional numerical reproducibility ``COMPATIBLE``: the settings that could make last bits
the same on any x86-64 CPU with AVX2), and whether the two give the same bits.

    python benchmarks/numeric_path.py [--rounds 4] [--repeats 3] [--out FILE]

Each path runs in its own process (the settings are read when torch loads), one thread, the
clients in that process; the paths take turns, so a loaded machine's drift hits both alike.
Reported per path: the median CPU seconds of a round (process time, which another busy process
on the machine disturbs far less than wall time) and the wall seconds, with the pinned/default
ratio, and each round's training loss to compare bits. Writes a JSON record (default
``benchmarks/records/numeric-path-<date>.json``). A benchmark, not a test.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = {"default": {},
         "pinned": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"}}

CHILD = r"""
import json, sys, tempfile, time
import torch
torch.set_num_threads(1)
from pflcore.engine.simulation import Simulation
from pflcore.engine.simulation import build_data
from pflcore.papers.fedpac import fedpac_config
from pflcore.numerics import numeric_path, path_key
rounds = int(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    config = fedpac_config("fedavg", "fmnist", 20).replace(rounds=rounds + 1, workers=0, output_dir=tmp, quiet=True,
                                                           local_epochs=1, eval_every=1000)
    sim = Simulation(config, build_data(config))
    sim.use_workers(0)
    cpu, wall, losses = [], [], []
    for r in range(rounds + 1):
        c, w = time.process_time(), time.perf_counter()
        record = sim.run_round(r)
        cpu.append(time.process_time() - c); wall.append(time.perf_counter() - w)
        losses.append(float(record["train_loss"]))
    sim.close()
print(json.dumps({"cpu": cpu[1:], "wall": wall[1:], "losses": losses, "key": path_key(numeric_path("cpu", 0)),
                  "capability": torch.backends.cpu.get_cpu_capability()}))
"""


def run_path(name: str, rounds: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **PATHS[name]}
    done = subprocess.run([sys.executable, "-c", CHILD, str(rounds)], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {name: [] for name in PATHS}
    for repeat in range(args.repeats):
        order = list(PATHS) if repeat % 2 == 0 else list(reversed(PATHS))
        for name in order:
            runs[name].append(run_path(name, args.rounds))
    result = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "workload": "FedAvg, FedPAC's CNN, Fashion-MNIST, 20 clients x 600 samples, E=1, batch 50, 1 thread",
              "paths": {}}
    sys.path.insert(0, str(ROOT))
    from pflcore.numerics import in_words, numeric_path

    result["host"] = in_words(numeric_path("cpu", 0))
    for name, found in runs.items():
        cpu = [s for run in found for s in run["cpu"]]
        wall = [s for run in found for s in run["wall"]]
        result["paths"][name] = {"settings": PATHS[name], "key": found[0]["key"],
                                 "capability": found[0]["capability"],
                                 "cpu_s_per_round": statistics.median(cpu), "wall_s_per_round": statistics.median(wall),
                                 "losses": found[0]["losses"],
                                 "same_bits_every_repeat": all(run["losses"] == found[0]["losses"] for run in found)}
    d, p = result["paths"]["default"], result["paths"]["pinned"]
    result["pinned_over_default_cpu"] = p["cpu_s_per_round"] / d["cpu_s_per_round"]
    result["pinned_over_default_wall"] = p["wall_s_per_round"] / d["wall_s_per_round"]
    result["same_bits_across_paths"] = d["losses"] == p["losses"]
    out = args.out or ROOT / "benchmarks" / "records" / f"numeric-path-{dt.datetime.now():%Y-%m-%dT%H%M}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"default {d['cpu_s_per_round']:.2f} s CPU a round, pinned {p['cpu_s_per_round']:.2f} s: x"
          f"{result['pinned_over_default_cpu']:.2f} (wall x{result['pinned_over_default_wall']:.2f}); same bits "
          f"across paths: {result['same_bits_across_paths']}; written {out}")


if __name__ == "__main__":
    main()
