"""The device check: on a machine with a GPU, prove the CUDA path and time FedPAC's workload.

    python benchmarks/device_check.py [--out FILE] [--budget SECONDS] [--cpu-smoke]

One run, in this order, each part written to the record as soon as it is done (a part that
fails is recorded with its error and the next one runs; the record is complete JSON after
every part, so a run cut short still leaves what it measured):

1. the environment: device name, torch, CUDA and cuDNN versions, the machine's CPU count;
2. FedAvg, FedPAC and FedCP rounds on FedPAC's Fashion-MNIST workload
   (:func:`pflcore.papers.fedpac.fedpac_config`: 20 clients x 600 samples, dominant-class
   partition s = 20%, batch 50, E = 5, the FedPAC CNN), one warm-up round then timed rounds,
   with the sequential CUDA executor and the vectorised one
   (:mod:`pflcore.engine.vectorised`), and one evaluation of all clients;
3. ``pytest tests/test_cuda.py`` (its outcome and the names of failed tests);
4. the CPU baseline: the same rounds on this machine's CPUs with ``workers: auto`` (one
   worker process per core; the record says how many cores: not this project's 2-core
   machine's numbers);
5. CPU against GPU on the same round (two clients, fixed batches): the largest weight
   difference with TF32 allowed in cuDNN's convolutions (PyTorch's default) and with TF32
   off (what pflcore's runs compute in, :func:`pflcore.numerics.float32_on_gpu`, so the
   other parts time float32), and whether the same seed gives bit-identical weights twice
   on the GPU;
6. every method of FedPAC's Table 1 (Fashion-MNIST column, 15 methods) for one timed
   round each (vectorised too where that executor stacks the method), while the budget
   lasts, and the column's estimate: 200 rounds per method plus one evaluation every 10
   rounds, from the measured round times (a method not timed takes FedAvg's).

7. the device campaign (``python -m pflcore.campaign device``, :mod:`pflcore.device_campaign`)
   for the rest of the budget: the plan's remaining entries (``--table``, ``--first`` narrow
   them) on the GPU, K at once (``--concurrent``, default ``auto``: a short probe measures it),
   each started only while its estimate (the plan's 2-core seconds over the speed-up measured
   in part 2 against FedPAC Table 1's committed CPU records) fits what is left; each finished
   run's record goes to ``--campaign-out`` and, with the manifest, to ``--campaign-tar`` (one
   file, rewritten after every finished run: bring it back, then
   ``python -m pflcore.campaign adopt TAR`` checks and commits the records). Part 6's column
   estimate is set beside the committed device checks' (the earlier H200 and H100 runs).
   The notebooks run under papermill: the machine needs papermill, nbformat, ipykernel and
   cvxpy (carried as wheels where its image lacks them), and the datasets the entries read.

``--cpu-smoke`` runs every part at a toy scale on the CPU (2 clients x 100 samples, one
local epoch, no pytest), to check the script itself on a machine without a GPU.
Fashion-MNIST is found as pflcore finds it (``PFL_DATA``, the cache, Debian's package).
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
import traceback
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from pflcore.engine import Simulation, build_data  # noqa: E402
from pflcore.papers.fedpac import FEDPAC_T1_METHODS, fedpac_config  # noqa: E402

TIMED = ("fedavg", "fedpac", "fedcp")
T1_ROUNDS, T1_EVAL_EVERY = 200, 10


class Check:
    """The record, written to ``path`` after every part."""

    def __init__(self, path: Path, budget: float):
        self.path, self.budget, self.start = path, budget, time.perf_counter()
        self.reserve = 0.0  # seconds kept for the device campaign at the end
        self.record: dict = {"kind": "device-check",
                             "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                             "budget_s": budget, "parts": {}}

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.start)

    def part(self, name: str, fn, *args) -> None:
        t0 = time.perf_counter()
        print(f"[{time.perf_counter() - self.start:6.1f} s] {name} ...", flush=True)
        try:
            out = fn(*args)
            entry = {"ok": True, **(out or {})}
        except Exception as e:  # recorded, and the next part runs
            entry = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}
            print(entry["traceback"], flush=True)
        entry["seconds"] = round(time.perf_counter() - t0, 2)
        self.record["parts"][name] = entry
        self.write()

    def write(self) -> None:
        self.record["elapsed_s"] = round(time.perf_counter() - self.start, 2)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.record, indent=1, default=str) + "\n")
        os.replace(tmp, self.path)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def config(method: str, device: str, smoke: bool, **changes):
    if smoke:
        changes = {"num_clients": 2, "local_epochs": 1,
                   "partition": {"samples_per_client": 100}, **changes}
        return fedpac_config(method, "fmnist", changes.pop("num_clients"), device=device, quiet=True, **changes)
    return fedpac_config(method, "fmnist", 20, device=device, quiet=True, **changes)


def time_rounds(sim: Simulation, timed: int, warm: int = 1) -> dict:
    """``warm`` rounds untimed, then ``timed`` rounds and one evaluation, each timed whole."""
    for r in range(warm):
        sim.run_round(r)
    sync()
    times = []
    for r in range(warm, warm + timed):
        t0 = time.perf_counter()
        sim.run_round(r)
        sync()
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    acc = sim.evaluate(warm + timed - 1)
    sync()
    return {"round_s": [round(t, 4) for t in times], "median_round_s": round(statistics.median(times), 4),
            "eval_s": round(time.perf_counter() - t0, 4),
            "acc_mean_after": round(float(acc[~(acc != acc)].mean()), 2)}  # percent


def environment(smoke: bool) -> dict:
    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
           "cuda_available": torch.cuda.is_available(), "cpu_count": os.cpu_count(),
           "machine": platform.machine(), "cpu_smoke": smoke,
           "tf32_conv_default": torch.backends.cudnn.allow_tf32,
           "tf32_matmul_default": torch.backends.cuda.matmul.allow_tf32}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(device_name=p.name, device_memory_gib=round(p.total_memory / 2 ** 30, 1),
                   multiprocessors=p.multi_processor_count)
    try:
        import cvxpy

        from pflcore.algorithms.fedpac import qp_solvers

        env["cvxpy"], env["qp_solvers"] = cvxpy.__version__, qp_solvers()
    except Exception as e:
        env["cvxpy"] = f"missing: {e}"
    source = ROOT / ".device-data" / "SOURCE"  # the commit device_prepare.sh saw: no .git travels to the device
    if source.is_file():
        env["prepared_from"] = dict(line.split(" ", 1) for line in source.read_text().splitlines() if " " in line)
    return env


def gpu_timings(device: str, smoke: bool, data_cache: dict, timed: int) -> dict:
    out: dict = {"workload": "FedPAC Fashion-MNIST: 20 clients x 600, s=0.2, batch 50, E=5, fedpac_cnn"
                 if not smoke else "smoke: 2 clients x 100, E=1"}
    try:
        from pflcore.engine.vectorised import Vectorised
    except ImportError as e:
        Vectorised = None
        out["vectorised"] = f"not available: {e}"
    for method in TIMED:
        cfg = config(method, device, smoke, workers=0)
        data = data_cache.setdefault(device, build_data(cfg))
        entry = {}
        try:
            sim = Simulation(cfg, data)
            entry["sequential"] = time_rounds(sim, timed)
        except Exception as e:
            entry["sequential"] = {"error": f"{type(e).__name__}: {e}"}
        if Vectorised is not None:
            try:
                sim = Simulation(cfg, data)
                sim.executor = Vectorised(sim.worker)
                entry["vectorised"] = time_rounds(sim, timed)
                seq, vec = entry["sequential"].get("median_round_s"), entry["vectorised"]["median_round_s"]
                if seq:
                    entry["vectorised_speedup"] = round(seq / vec, 2)
            except Exception as e:
                entry["vectorised"] = {"error": f"{type(e).__name__}: {e}"}
        out[method] = entry
        print(f"  {method}: {json.dumps(entry)}", flush=True)
    return out


def run_tests(timeout: float, log_dir: Path) -> dict:
    junit = log_dir / "device-check-pytest.xml"
    log = log_dir / "device-check-pytest.log"
    cmd = [sys.executable, "-m", "pytest", "tests/test_cuda.py", "-q", "-rfE", "-p", "no:cacheprovider",
           f"--junitxml={junit}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=max(timeout, 10))
        text, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timeout"
    log.write_text(text)
    # a run that timed out or failed is not ok, whatever it printed before
    out = {"ok": rc == 0, "returncode": rc, "wall_s": round(time.perf_counter() - t0, 1), "tail": text[-3000:]}
    if junit.exists():
        suite = ET.parse(junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        out.update({k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")})
        failed = {}
        for case in suite.iter("testcase"):
            bad = case.find("failure") if case.find("failure") is not None else case.find("error")
            if bad is not None:
                failed[case.get("name")] = (bad.get("message") or "")[:400]
        out["failed"] = failed
    return out


def cpu_baseline(smoke: bool, data_cache: dict, timed: int) -> dict:
    from pflcore.engine.executors import available_cores, shutdown_workers

    out = {"cores": available_cores(), "workers": "auto (one process per core, one thread each)"}
    for method in TIMED:
        cfg = config(method, "cpu", smoke, workers="auto")
        data = data_cache.setdefault("cpu", build_data(cfg))
        sim = Simulation(cfg, data)
        sim.use_workers("auto")
        try:
            out[method] = time_rounds(sim, timed)
        except Exception as e:
            out[method] = {"error": f"{type(e).__name__}: {e}"}
        finally:
            sim.close()
        print(f"  cpu {method}: {json.dumps(out[method])}", flush=True)
    shutdown_workers()
    return out


def agreement(device: str, smoke: bool, data_cache: dict) -> dict:
    """FedAvg's round for clients 0 and 1 from the same initial weights on both devices."""
    def weights(dev: str, tf32: bool) -> dict:
        saved = torch.backends.cudnn.allow_tf32
        try:
            cfg = config("fedavg", dev, smoke, workers=0)
            sim = Simulation(cfg, data_cache.setdefault(dev, build_data(cfg)))
            torch.backends.cudnn.allow_tf32 = tf32  # after the Simulation, which turns TF32 off on a GPU
            sim.run_round(0, clients=[0, 1])
            return {k: v.detach().double().cpu() for k, v in sim.state["model"].items()}
        finally:
            torch.backends.cudnn.allow_tf32 = saved

    def gap(a: dict, b: dict) -> float:
        return max(float((a[k] - b[k]).abs().max()) for k in a)

    cpu = weights("cpu", False)
    out = {"what": "max |w_gpu - w_cpu| over all weights after one FedAvg round of clients 0 and 1"}
    if device == "cpu":
        return {**out, "skipped": "no GPU"}
    default, again = weights(device, True), weights(device, True)
    off = weights(device, False)
    out.update(tf32_on=gap(default, cpu), tf32_off=gap(off, cpu), gpu_repeat_bitwise=gap(default, again) == 0.0,
               gpu_repeat_gap=gap(default, again), weight_scale=max(float(v.abs().max()) for v in cpu.values()))
    return out


def table1(device: str, smoke: bool, data_cache: dict, check: Check, measured: dict) -> dict:
    """One timed round (after a warm-up) and one evaluation per Table 1 method, then the
    column's estimate; stops timing when the budget is nearly spent."""
    try:
        from pflcore.device_campaign import stacks
        from pflcore.engine.vectorised import Vectorised
    except ImportError:
        Vectorised = None
    per: dict = {}
    for method in FEDPAC_T1_METHODS:
        if check.left() < 25 + check.reserve:
            per[method] = {"skipped": "budget"}
            continue
        try:
            cfg = config(method, device, smoke, workers=0)
            sim = Simulation(cfg, data_cache.setdefault(device, build_data(cfg)))
            per[method] = {"sequential": time_rounds(sim, 1)}
            if Vectorised is not None and stacks(method) and check.left() > 25 + check.reserve:
                sim = Simulation(cfg, data_cache[device])
                sim.executor = Vectorised(sim.worker)
                per[method]["vectorised"] = time_rounds(sim, 1)
        except Exception as e:
            per[method] = {"error": f"{type(e).__name__}: {e}"}
        print(f"  t1 {method}: {json.dumps(per[method])}", flush=True)
    return {"methods": per, "estimate": estimate(per, measured), "earlier": earlier_estimates()}


def earlier_estimates() -> dict:
    """The column's estimate in each committed device check, with the GPU it ran on."""
    out = {}
    for path in sorted((ROOT / "benchmarks" / "records").glob("device-check-*.json")):
        try:
            parts = json.loads(path.read_text())["parts"]
            out[path.name] = {"device": parts["environment"].get("device_name"),
                              **{k: parts["table1_fmnist"]["estimate"][k] for k in ("sequential_min",
                                                                                   "best_executor_min")}}
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def campaign(device: str, smoke: bool, check: Check, args) -> dict:
    """The rest of the budget on the device campaign (part 7)."""
    import importlib.util

    missing = [m for m in ("papermill", "nbformat", "ipykernel", "cvxpy") if importlib.util.find_spec(m) is None]
    if missing:
        raise RuntimeError(f"the notebooks cannot run here: {', '.join(missing)} missing (carry them as wheels)")
    from pflcore import device_campaign as dc

    budget = check.left() - 20  # the record written after it
    if smoke:  # the probe and the budget rule only: no paper-preset entry (minutes at least) fits 90 s at 1x
        budget = min(budget, 90.0)
    if budget < 60:
        return {"skipped": f"{max(budget, 0):.0f} s of the budget left"}
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M")
    out = Path(args.campaign_out) if args.campaign_out else ROOT / "outputs" / f"device-campaign-{stamp}"
    tar = Path(args.campaign_tar) if args.campaign_tar else check.path.with_suffix(".campaign.tar")
    gpu = {m: v for m, v in check.record["parts"].get("gpu_rounds", {}).items() if isinstance(v, dict)}
    concurrent = args.concurrent if args.concurrent == "auto" else int(args.concurrent)
    manifest = dc.device_campaign(budget, out, root=ROOT, device=device, concurrent=concurrent,
                                  tables=tuple(args.table), first=tuple(args.first), tar=tar,
                                  gpu_rounds=None if smoke else gpu, speedup=1.0 if smoke else None,
                                  probe_scale="toy" if smoke else "fedpac")
    runs = manifest["runs"]
    return {"out": str(out), "tar": str(tar), "concurrent": manifest["concurrent"],
            "concurrent_from": manifest.get("concurrent_from"), "probe": manifest.get("probe"),
            "speedups": manifest["speedups"], "finished": [r["key"] for r in runs if r["status"] == "finished"],
            "cut_off": [r["key"] for r in runs if r["status"] == "cut_off"],
            "failed": {r["key"]: r.get("why") for r in runs if r["status"] == "failed"},
            "seconds_per_round": {rel: v for r in runs for rel, v in (r.get("seconds_per_round") or {}).items()},
            "not_started": len(manifest["not_started"])}


def estimate(per: dict, measured: dict) -> dict:
    """Seconds for the column: per method 200 rounds + 20 evaluations, from its own times,
    else FedAvg's (from the timed part)."""
    def cost(entry: dict | None) -> float | None:
        if not entry or "median_round_s" not in entry:
            return None
        return T1_ROUNDS * entry["median_round_s"] + T1_ROUNDS / T1_EVAL_EVERY * entry["eval_s"]

    fallback = {k: cost(measured.get("fedavg", {}).get(k)) for k in ("sequential", "vectorised")}
    totals = {"sequential": 0.0, "best": 0.0}
    assumed = []
    for method in FEDPAC_T1_METHODS:
        entry = per.get(method, {})
        seq = cost(entry.get("sequential")) or cost(measured.get(method, {}).get("sequential"))
        if seq is None:
            seq = fallback["sequential"] or 0.0
            assumed.append(method)
        vec = cost(entry.get("vectorised")) or cost(measured.get(method, {}).get("vectorised"))
        totals["sequential"] += seq
        totals["best"] += min(seq, vec) if vec else seq
    return {"rounds": T1_ROUNDS, "eval_every": T1_EVAL_EVERY, "methods": len(FEDPAC_T1_METHODS),
            "sequential_min": round(totals["sequential"] / 60, 1),
            "best_executor_min": round(totals["best"] / 60, 1), "fedavg_time_assumed_for": assumed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="the record (default benchmarks/records/device-check-<time>.json)")
    parser.add_argument("--budget", type=float, default=440.0, help="seconds for the whole check (default 440)")
    parser.add_argument("--timed-rounds", type=int, default=3)
    parser.add_argument("--cpu-smoke", action="store_true", help="every part at a toy scale on the CPU (no pytest)")
    parser.add_argument("--skip-cpu", action="store_true",
                        help="leave out the CPU baseline (when an earlier record of the same machine kind has it)")
    parser.add_argument("--no-campaign", action="store_true", help="leave out the device campaign (part 7)")
    parser.add_argument("--campaign-out", help="the campaign's DIR (default outputs/device-campaign-<time>)")
    parser.add_argument("--campaign-tar", help="its manifest and records as one tar (default: beside --out, "
                                               "<record>.campaign.tar)")
    parser.add_argument("--table", action="append", default=[], help="the campaign runs only this table's entries")
    parser.add_argument("--first", action="append", default=[],
                        help="an entry, table or notebook whose entries the campaign runs first")
    parser.add_argument("--concurrent", default="auto", help="the campaign's runs at once (default auto: a probe)")
    parser.add_argument("--campaign-reserve", type=float, default=None,
                        help="seconds part 6 leaves for the campaign (default 240; 70 with --cpu-smoke)")
    args = parser.parse_args()
    smoke = args.cpu_smoke
    device = "cuda" if torch.cuda.is_available() and not smoke else "cpu"
    if device == "cpu" and not smoke:
        parser.error("no CUDA device here: run with --cpu-smoke to check the script on a CPU.")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M")
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "records" / f"device-check-{stamp}.json"
    check = Check(out, args.budget)
    if not args.no_campaign:
        check.reserve = args.campaign_reserve if args.campaign_reserve is not None else (70.0 if smoke else 240.0)
    timed = 1 if smoke else args.timed_rounds
    data: dict = {}
    check.part("environment", environment, smoke)
    check.part("gpu_rounds", gpu_timings, device, smoke, data, timed)
    if smoke:
        check.record["parts"]["pytest"] = {"ok": True, "skipped": "--cpu-smoke"}
    else:
        check.part("pytest", run_tests, min(240.0, check.left() - 150 - check.reserve), out.parent)
    if args.skip_cpu:
        check.record["parts"]["cpu_baseline"] = {"ok": True, "skipped": "--skip-cpu"}
    else:
        check.part("cpu_baseline", cpu_baseline, smoke, data, 1 if smoke else 2)
    check.part("agreement", agreement, device, smoke, data)
    measured = {m: v for m, v in check.record["parts"]["gpu_rounds"].items() if isinstance(v, dict)}
    check.part("table1_fmnist", table1, device, smoke, data, check, measured)
    if args.no_campaign:
        check.record["parts"]["campaign"] = {"ok": True, "skipped": "--no-campaign"}
    else:
        data.clear()  # the runs load their own data; free this process's
        check.part("campaign", campaign, device, smoke, check, args)
    check.record["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    check.write()
    print(f"record: {out} ({check.record['elapsed_s']} s)", flush=True)


if __name__ == "__main__":
    main()
