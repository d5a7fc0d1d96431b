"""The device campaign: the plan's remaining entries run on a lent GPU for a fixed budget,
several at once, and their records checked and committed on this side (issue 77).

    python -m pflcore.campaign device --budget SECONDS --out DIR [--table NAME]... [--first KEY]...
                                      [--concurrent K] [--device cuda] [--speedup X] [--tar FILE]
    python -m pflcore.campaign adopt DIR-or-TAR [--no-commit]

**device** picks the entries without a record in the order ``next`` takes them (by step,
cheapest per record first; ``--table`` keeps a table's entries, ``--first`` puts named keys,
or a table's or notebook's entries, first) and runs each as ``next`` does, its notebook at the
paper preset under papermill, in a process of its own (:func:`run_one`), with every run's config
moved to ``--device`` and to the vectorised executor where it stacks the method's training
(``workers: 0`` otherwise, also for the methods it runs client by client,
:data:`pflcore.engine.vectorised.CLIENT_BY_CLIENT`, whose numbers there are exactly the sequential
ones: their records name the executor that really ran them): the runner sets ``PFLCORE_DEVICE``
and ``PFLCORE_WORKERS=vectorised`` for its kernel (:func:`pflcore.config.placed`), since the
notebooks take no device parameter. Neither field enters a config's fingerprint, so a run keeps
the fingerprint, the record name and the preset changes of the plan entry's CPU run.

- *How many at once* (``--concurrent``): a number, or ``auto`` (the default), which measures it
  first (:func:`probe_concurrency`): 1, 2, 4 and 8 processes (at most the cores) each time a few
  rounds of FedPAC's Fashion-MNIST FedAvg (``--probe-scale toy``: the digits MLP) at once; K is
  the count after which doubling the processes adds less than a quarter to the rounds per second
  of all together. The probe and its per-process slow-down go into the manifest.
- *The budget rule*: an entry starts only if its estimate fits the budget left with a tenth to
  spare. Its estimate on the device is its plan estimate (2-core CPU seconds) divided by the
  speed-up of its executor (vectorised where the executor stacks every method it runs, else
  sequential), times the probe's slow-down at K; the speed-ups are ``--speedup`` where given,
  else measured (:func:`measured_speedups`): the 2-core seconds per round of FedPAC Table 1's
  committed FedAvg and FedPAC records over the GPU seconds per round (with the evaluation every
  10 rounds) of the newest committed ``benchmarks/records/device-check-*.json`` (or of the
  device check that calls this, the same run). Once runs finish, the slowest observed ratio of
  wall seconds to plan estimate of each executor replaces the measured one. An entry that does
  not fit is passed over (a cheaper one may fit); the manifest says why.
- *The end of the budget*: a run still going is killed with everything it started (its
  papermill kernel runs in a session of its own) and leaves nothing in DIR; a record reaches DIR
  only once its run's notebook ended well, copied atomically (:mod:`pflcore.atomic`) and checked
  (:func:`pflcore.records.read`). The working tree's ``reproductions/`` is left as it was
  (records new to it are moved to DIR): adopt is how they enter a project.
- *DIR*: ``manifest.json`` (rewritten atomically after every change: what ran, on which
  numeric path, its seconds and seconds per round, what was cut off or not started, K and how
  it was chosen, the speed-ups and where they came from) and
  ``reproductions/<notebook>/<record>.json``. ``--tar FILE`` also keeps one tar of both,
  rewritten atomically after every finished run (a lent machine returns a few files only).

**adopt** takes DIR (or the tar): every record in it must pass :func:`pflcore.records.read`, be
listed by the manifest under its run and belong to its plan entry (the entry's notebook, seed,
row, column and preset changes: :func:`pflcore.campaign._record_of`); else one sentence names
the first that does not, and nothing is adopted. A record of an entry without a record yet is
copied into ``reproductions/`` atomically and read again there, the plan notes it (and derives
the probe-free records of probed runs, as ``next``). A record whose file the project has
already (a CPU run recorded the same (row, seed) while the GPU ran it) becomes a *replication
record* of that record (:func:`replication`, the format of ``python -m pflcore.replicate
--keep``): ``replication_of`` (the record's file, both numeric paths, the verdict and the
differences against the seed spread of its row) in ``replications/<record>.on-<path key>.json``
beside it, never part of a row's mean. Records, replications and plan are committed together,
and the figures are redrawn and committed as after ``next``.

**GPU records and the plan.** A record's fingerprint hashes the fields that change the numbers;
``device`` and ``workers`` are not among them, so a GPU run of an entry's (row, seed) has the
entry's fingerprint and file name: it *is* that entry's record, and the plan counts the entry
done as for a CPU record. What differs is the numeric path, kept in the record's provenance
(device, GPU, CUDA, cuDNN, TF32, executor): ``status`` marks such entries ``(GPU)``, and the
plan's estimates from measured seconds (:func:`pflcore.campaign.measured_seconds`) take only
CPU records, since the estimates are 2-core CPU seconds. A CPU record and a GPU record of one
run cannot both be entries' records (one file name): adopt keeps the later one as a replication.
"""
from __future__ import annotations

import io
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from . import record_schema, records
from .processes import process_tree
from .atomic import atomic_write_bytes

MANIFEST = "manifest.json"
KIND = "pflcore-device-campaign"
#: The longest budget one command takes (a week); more is surely a typing error.
MAX_BUDGET_S = 7 * 24 * 3600.0
#: An entry starts only if its estimate times this fits the budget left.
MARGIN = 1.1
#: Process counts the probe tries, and the gain a doubling must bring to be taken.
PROBE_COUNTS = (1, 2, 4, 8)
PROBE_GAIN = 1.25
#: The workload's evaluation cadence in the speed-up: FedPAC Table 1 evaluates every 10 rounds.
EVAL_EVERY = 10
class DeviceCampaignError(ValueError):
    """Bad input to the device campaign or to adopt: one sentence, before any work."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _slug(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", key).strip("_")[:120]


# ---------------------------------------------------------------------- input
def check_budget(value: float) -> float:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise DeviceCampaignError(f"--budget is the seconds the campaign may use, more than 0; got {value!r}.")
    if value > MAX_BUDGET_S:
        raise DeviceCampaignError(f"--budget {value:g} s is more than a week ({MAX_BUDGET_S:.0f} s); give the "
                                  "seconds the device is lent for.")
    return float(value)


def check_out(out: Path, root: Path) -> Path:
    """DIR: a new or empty folder outside the project's ``reproductions/``."""
    out = Path(out).expanduser()
    resolved = out.resolve()
    folder = (root / records.RECORDS_FOLDER).resolve()
    if resolved == folder or resolved.is_relative_to(folder):
        raise DeviceCampaignError(f"--out {out} is the project's {records.RECORDS_FOLDER}/ (or in it); the device "
                                  "campaign writes elsewhere and adopt brings its records in: choose another folder.")
    if out.exists() and not out.is_dir():
        raise DeviceCampaignError(f"--out {out} is a file; the device campaign writes a folder there: choose a "
                                  "new folder.")
    if out.is_dir() and any(out.iterdir()):
        raise DeviceCampaignError(f"--out {out} is not empty; the device campaign writes into a new or empty "
                                  "folder (adopt an earlier campaign's folder, then choose a new one).")
    return out


def check_selection(plan: dict, tables: list[str], first: list[str]) -> None:
    names = {r["table"] for r in plan["runs"]} | {r["notebook"] for r in plan["runs"]}
    for table in tables:
        if table not in names:
            shown = ", ".join(sorted({r["table"] for r in plan["runs"]}))
            raise DeviceCampaignError(f"--table {table!r} is no table of the plan; its tables are: {shown}.")
    keys = {r["key"] for r in plan["runs"]}
    for key in first:
        if key not in keys and key not in names:
            raise DeviceCampaignError(f"the campaign has no entry, table or notebook {key!r} (python -m "
                                      "pflcore.campaign status lists them).")


def first_order(row: dict, first: tuple[str, ...]) -> int:
    """Where ``row`` goes in the campaign's order: the place of the first ``--first`` naming its
    key, its table or its notebook; after them all where none does (the plan's order kept)."""
    return next((i for i, name in enumerate(first) if name in (row["key"], row["table"], row["notebook"])),
                len(first))


def device_problem(device: str) -> str | None:
    from .config import device_problem as problem

    return problem(device)


# ---------------------------------------------------------------------- speed
def measured_speedups(root: Path, gpu_rounds: dict | None = None) -> dict:
    """Per executor (``vectorised``, ``sequential``), the GPU's speed-up over the 2-core
    machine the plan's estimates are for, on FedPAC Table 1's Fashion-MNIST workload: the
    committed FedAvg and FedPAC records' seconds per round (median over seeds) over the GPU's
    seconds per round plus a tenth of an evaluation, from ``gpu_rounds`` (a device check's part
    of that name) or the newest committed device check; the smaller of the two methods'. Empty
    where either side is missing."""
    cpu: dict[str, list[float]] = {}
    for _path, record in records.all_records(root / records.RECORDS_FOLDER):
        method = record.get("config", {}).get("method")
        if record.get("notebook") != "fedpac/t1_main" or method not in ("fedavg", "fedpac"):
            continue
        prov = record.get("provenance", {})
        path = prov.get("numeric_path") or {}
        if path.get("device") == "cuda" or record["config"].get("num_clients") != 20:
            continue
        if isinstance(prov.get("seconds_per_round"), (int, float)) and prov["seconds_per_round"] > 0:
            cpu.setdefault(method, []).append(float(prov["seconds_per_round"]))
    source = "the device check of this run"
    if gpu_rounds is None:
        checks = sorted((root / "benchmarks" / "records").glob("device-check-*.json"))
        for check in reversed(checks):
            try:
                gpu_rounds = json.loads(check.read_text())["parts"]["gpu_rounds"]
                source = str(check.relative_to(root))
                break
            except (OSError, ValueError, KeyError, TypeError):
                continue
    out: dict = {}
    for executor in ("vectorised", "sequential"):
        ratios = {}
        for method, seconds in cpu.items():
            timed = ((gpu_rounds or {}).get(method) or {}).get(executor) or {}
            if isinstance(timed.get("median_round_s"), (int, float)) and timed["median_round_s"] > 0:
                gpu = timed["median_round_s"] + float(timed.get("eval_s") or 0) / EVAL_EVERY
                ratios[method] = round(statistics.median(seconds) / gpu, 2)
        if ratios:
            out[executor] = {"speedup": min(ratios.values()), "per_method": ratios,
                             "from": f"FedPAC Table 1's committed CPU records against {source}"}
    return out


def choose_concurrency(per_process_s: dict[int, float]) -> tuple[int, float]:
    """From each process count's seconds per round per process, K (the count after which doubling
    adds less than :data:`PROBE_GAIN` to the rounds per second of all together) and the slow-down
    of one process at K against one alone."""
    counts = sorted(per_process_s)
    best = counts[0]
    for n in counts[1:]:
        if (n / per_process_s[n]) < PROBE_GAIN * (best / per_process_s[best]):
            break
        best = n
    return best, max(1.0, round(per_process_s[best] / per_process_s[counts[0]], 2))  # never faster than alone


def probe_concurrency(device: str, cores: int, scale: str = "fedpac", rounds: int = 3, log=print) -> dict:
    """Time ``rounds`` rounds (after one untimed) in 1, 2, 4, 8 processes at once (at most
    ``cores``), each its own process as the campaign's runs are; stops doubling once the gain is
    under :data:`PROBE_GAIN`. Returns the measurements, K and the slow-down at K."""
    measured: dict[int, float] = {}
    for n in [c for c in PROBE_COUNTS if c <= max(cores, 1)]:
        procs = [subprocess.Popen([sys.executable, "-m", "pflcore.device_campaign", "_probe", device, scale,
                                   str(rounds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True) for _ in range(n)]
        times = []
        for proc in procs:
            try:
                stdout, stderr = proc.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                _kill_tree(proc)
                stdout, stderr = "", "timed out"
            lines = [line for line in stdout.splitlines() if line.startswith("round_s ")]
            if proc.returncode != 0 or not lines:
                raise RuntimeError(f"the concurrency probe failed ({(stderr.strip().splitlines() or ['?'])[-1]})")
            times.append(float(lines[-1].split()[1]))
        measured[n] = round(statistics.median(times), 4)
        log(f"device campaign: probe, {n} process(es) at once: {measured[n]:.3f} s a round each", flush=True)
        if len(measured) > 1:
            k, _ = choose_concurrency(measured)
            if k != n:
                break
    k, slowdown = choose_concurrency(measured)
    return {"per_process_round_s": {str(n): s for n, s in measured.items()}, "concurrent": k, "slowdown": slowdown,
            "workload": scale, "rounds": rounds}


def _probe_main(device: str, scale: str, rounds: str) -> int:
    """One probe process: print ``round_s <median seconds>`` of ``rounds`` timed rounds."""
    import torch

    from .engine import Simulation, build_data
    from .engine.vectorised import Vectorised

    if scale == "toy":
        from .config import ExperimentConfig

        config = ExperimentConfig.from_dict(dict(
            method="fedavg", dataset="digits", model="mlp", num_clients=4, rounds=10, local_epochs=1, batch_size=16,
            partition={"kind": "dominant", "s": 0.2, "samples_per_client": 80}, quiet=True, device=device,
            workers="vectorised" if Vectorised.covers("fedavg") else 0))
    else:
        from .papers.fedpac import fedpac_config

        config = fedpac_config("fedavg", "fmnist", 20, device=device, quiet=True,
                               workers="vectorised" if Vectorised.covers("fedavg") else 0)
    sim = Simulation(config, build_data(config))
    sim.use_workers(config.workers)
    sim.run_round(0)
    times = []
    for r in range(1, int(rounds) + 1):
        if device != "cpu":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        sim.run_round(r)
        if device != "cpu":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    sim.close()
    print(f"round_s {statistics.median(times):.5f}", flush=True)
    return 0


# ---------------------------------------------------------------------- processes
def _kill_tree(proc: subprocess.Popen) -> list[int]:
    """SIGKILL ``proc`` and everything it started (a papermill kernel runs in a session of its
    own, so its process group is not enough), by PID; returns the PIDs signalled."""
    pids = process_tree([proc.pid])
    for pid in reversed(pids):  # children first: none is re-parented and missed
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    return pids


@dataclass
class _Running:
    entry: object
    proc: subprocess.Popen
    started: float
    stamps: dict
    log: Path
    executor: str
    estimate_s: float
    row: dict = field(default_factory=dict)


def stacks(method: str) -> bool:
    """Whether the vectorised executor trains ``method``'s clients together (covered, and not
    run client by client, where its numbers and its speed are the sequential executor's)."""
    from .engine.vectorised import CLIENT_BY_CLIENT, Vectorised

    return Vectorised.covers(method) and method not in CLIENT_BY_CLIENT


def executors_of(entry) -> dict[str, str]:
    """Per method the entry runs, the executor its runs get on the device (as
    :func:`pflcore.config.placed` moves them under ``PFLCORE_WORKERS=vectorised``)."""
    from .papers import split_label

    return {m: "vectorised" if stacks(split_label(m)[0]) else "sequential" for m in entry.methods}


def run_one(spec: dict) -> int:
    """The runner process: one entry's notebook at the paper preset, as ``next`` runs it, its
    runs moved to ``spec['device']`` and to the vectorised executor where it stacks their
    method, by ``PFLCORE_DEVICE`` and ``PFLCORE_WORKERS`` (:func:`pflcore.config.placed`), which
    its kernel inherits."""
    from .config import DEVICE_ENV, WORKERS_ENV
    from .notebooks import run_notebooks

    root, out = Path(spec["root"]), Path(spec["work"])
    os.environ.update({DEVICE_ENV: spec["device"], WORKERS_ENV: "vectorised"})
    overrides = {**spec["parameters"], "quiet": True, "figures_dir": str(out / "figures")}
    [result] = run_notebooks("paper", out / "notebooks", only=[f"notebooks/{spec['notebook']}.ipynb"], root=root,
                             overrides=overrides)
    if result.status != "ok":
        print(f"{spec['key']}: the notebook failed ({result.error}); executed copy in {result.output}", flush=True)
        return 1
    return 0


# ---------------------------------------------------------------------- the campaign
class Manifest:
    """DIR's ``manifest.json``, rewritten whole and atomically after every change (and the tar)."""

    def __init__(self, out: Path, tar: Path | None, data: dict):
        self.out, self.tar, self.data = out, tar, data

    def write(self) -> None:
        atomic_write_bytes(self.out / MANIFEST, (json.dumps(self.data, indent=1) + "\n").encode())
        if self.tar is not None:
            self.pack()

    def pack(self) -> None:
        """DIR's manifest and records as one tar, written whole (:func:`pflcore.atomic.atomic_write_bytes`)."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as bundle:
            bundle.add(self.out / MANIFEST, arcname=MANIFEST)
            for path in sorted((self.out / records.RECORDS_FOLDER).rglob("*.json")):
                bundle.add(path, arcname=str(path.relative_to(self.out)))
        self.tar.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.tar, buffer.getvalue())


def device_campaign(budget: float, out: Path, root: Path | None = None, device: str = "cuda",
                    concurrent: int | str = "auto", tables: tuple[str, ...] = (), first: tuple[str, ...] = (),
                    speedup: float | None = None, tar: Path | None = None, gpu_rounds: dict | None = None,
                    probe_scale: str = "fedpac", log=print) -> dict:
    """Run the plan's remaining entries on ``device`` for ``budget`` seconds (see the module
    docstring); returns the manifest. Bad input raises :class:`DeviceCampaignError` before any
    run starts."""
    from . import campaign
    from .project import project_root

    t0 = time.monotonic()
    budget = check_budget(budget)
    root = Path(root) if root is not None else project_root()
    out = check_out(out, root)
    if tar is not None and (Path(tar).is_dir() or Path(tar).resolve().is_relative_to(out.resolve())):
        raise DeviceCampaignError(f"--tar {tar} must be a file outside --out.")
    problem = device_problem(device)
    if problem:
        raise DeviceCampaignError(f"--device {device}: {problem.rstrip('.')}.")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if concurrent != "auto" and not (isinstance(concurrent, int) and 1 <= concurrent <= max(cores, 1)):
        raise DeviceCampaignError(f"--concurrent is 'auto' or a whole number from 1 to this machine's {cores} cores; "
                                  f"got {concurrent!r}.")
    if speedup is not None and not (isinstance(speedup, (int, float)) and math.isfinite(speedup) and speedup > 0):
        raise DeviceCampaignError(f"--speedup is a positive number; got {speedup!r}.")
    campaign.refuse_unbelieved(root)
    plan = campaign.current_plan(root)
    check_selection(plan, list(tables), list(first))
    known = campaign.entries_by_key()
    todo = [r for r in plan["runs"] if not r["records"] and (not tables or r["table"] in tables
                                                             or r["notebook"] in tables)]
    todo.sort(key=lambda r: first_order(r, first))

    out.mkdir(parents=True, exist_ok=True)
    work = root / "outputs" / "device-campaign" / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    from .numerics import in_words, numeric_path, path_key

    measured = {} if speedup is not None else measured_speedups(root, gpu_rounds)
    speedups = {k: {"speedup": float(speedup), "from": "--speedup"} for k in ("vectorised", "sequential")} \
        if speedup is not None else measured
    if "sequential" not in speedups and "vectorised" in speedups:
        speedups["sequential"] = {**speedups["vectorised"], "from": "the vectorised speed-up (no sequential one)"}
    manifest = Manifest(out, Path(tar) if tar else None, {
        "kind": KIND, "version": 1, "started": _now(), "budget_s": budget, "device": device,
        "numeric_path": numeric_path(device, 0), "speedups": speedups, "concurrent": None, "runs": [],
        "not_started": [], "finished": None})
    manifest.data["numeric_path_in_words"] = in_words(manifest.data["numeric_path"])
    manifest.write()
    if not speedups:
        manifest.data["stopped"] = ("no measured GPU speed-up (no committed device check or FedPAC Table 1 records); "
                                    "give --speedup")
        manifest.data["not_started"] = [{"key": r["key"], "why": "no speed-up to estimate it by"} for r in todo]
        manifest.data["finished"] = _now()
        manifest.write()
        log(f"device campaign: {manifest.data['stopped']}; nothing ran.", flush=True)
        return manifest.data
    if concurrent == "auto":
        try:
            probe = probe_concurrency(device, cores, probe_scale, log=log)
        except RuntimeError as err:
            probe = {"error": str(err), "concurrent": 1, "slowdown": 1.0}
        k, slowdown, chosen = probe["concurrent"], probe["slowdown"], "probe"
        manifest.data["probe"] = probe
    else:
        k, slowdown, chosen = int(concurrent), 1.0, "--concurrent"
    manifest.data.update(concurrent=k, concurrent_from=chosen, slowdown=slowdown)
    manifest.write()
    observed: dict[str, float] = {}  # executor -> largest wall / plan estimate seen

    def estimate(row: dict, executor: str) -> float:
        factor = observed.get(executor)
        if factor is None:
            factor = slowdown / speedups[executor]["speedup"]
        return row["estimate_s"] * factor

    running: list[_Running] = []
    waiting = list(todo)
    while waiting or running:
        left = budget - (time.monotonic() - t0)
        while waiting and len(running) < k:
            fits = None
            for row in waiting:
                executor = "vectorised" if set(executors_of(known[row["key"]]).values()) == {"vectorised"} \
                    else "sequential"
                if estimate(row, executor) * MARGIN <= left:
                    fits = (row, executor)
                    break
            if fits is None:
                break
            row, executor = fits
            waiting.remove(row)
            running.append(_start(known[row["key"]], row, executor, estimate(row, executor), root, work, device))
            log(f"device campaign: started {row['key']} ({executor}, about {estimate(row, executor):.0f} s; "
                f"{left:.0f} s of the budget left)", flush=True)
        if not running:
            break
        time.sleep(0.2)
        left = budget - (time.monotonic() - t0)
        for run in list(running):
            if run.proc.poll() is None and left > 0:
                continue
            running.remove(run)
            entry = run.entry
            seconds = round(time.monotonic() - run.started, 1)
            result = {"key": entry.key, "notebook": entry.notebook, "executor": run.executor,
                      "executors": executors_of(entry), "estimate_s": round(run.estimate_s, 1),
                      "plan_estimate_s": run.row["estimate_s"], "seconds": seconds, "records": [],
                      "started_s": round(run.started - t0, 1), "ended_s": round(time.monotonic() - t0, 1)}
            if run.proc.poll() is None:
                pids = _kill_tree(run.proc)
                result.update(status="cut_off", why=f"the budget ran out after {seconds:.0f} s of it",
                              killed_processes=pids)
                log(f"device campaign: cut off {entry.key} at the end of the budget", flush=True)
            elif run.proc.returncode != 0:
                tail = run.log.read_text(errors="replace")[-2000:] if run.log.exists() else ""
                result.update(status="failed", why=(tail.strip().splitlines() or ["no output"])[-1][:500])
                log(f"device campaign: {entry.key} failed: {result['why']}", flush=True)
            else:
                rels = _collect(entry, root, out, run.stamps)
                result.update(status="finished" if rels else "no_record", records=rels)
                for rel in rels:
                    record = records.read(out / rel, root=out)
                    prov = record["provenance"]
                    result.setdefault("numeric_paths", {})[rel] = {
                        "key": path_key(prov.get("numeric_path", {})),
                        "in_words": in_words(prov.get("numeric_path", {}))}
                    result.setdefault("seconds_per_round", {})[rel] = prov.get("seconds_per_round")
                if rels and run.row["estimate_s"] > 0:
                    ratio = seconds / run.row["estimate_s"]
                    observed[run.executor] = max(observed.get(run.executor, 0.0), ratio)
                log(f"device campaign: {entry.key} {result['status']} in {seconds:.0f} s -> "
                    f"{', '.join(rels) or 'no record (its runs had records)'}", flush=True)
            manifest.data["runs"].append(result)
            manifest.data["observed_s_per_estimate_s"] = {k: round(v, 4) for k, v in observed.items()}
            manifest.write()
    left = budget - (time.monotonic() - t0)
    manifest.data["not_started"] = [
        {"key": r["key"], "plan_estimate_s": r["estimate_s"],
         "why": f"its estimate does not fit the {max(left, 0):.0f} s left of the budget"} for r in waiting]
    manifest.data["finished"] = _now()
    manifest.data["seconds"] = round(time.monotonic() - t0, 1)
    manifest.write()
    done = sum(r["status"] == "finished" for r in manifest.data["runs"])
    log(f"device campaign: {done} entries finished, {sum(r['status'] == 'cut_off' for r in manifest.data['runs'])} "
        f"cut off, {len(waiting)} not started; manifest {out / MANIFEST}", flush=True)
    return manifest.data


def _start(entry, row: dict, executor: str, estimate_s: float, root: Path, work: Path, device: str) -> _Running:
    """Start the runner process of ``entry`` (its own session; its output to a log)."""
    slug = _slug(entry.key)
    folder = work / slug
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"key": entry.key, "notebook": entry.notebook, "parameters": entry.parameters, "root": str(root),
            "work": str(folder), "device": device}
    (folder / "spec.json").write_text(json.dumps(spec))
    stamps = _stamps(root, entry)
    log = folder / "runner.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "pflcore.device_campaign", "_run", str(folder / "spec.json")],
                                cwd=root, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    return _Running(entry, proc, time.monotonic(), stamps, log, executor, estimate_s, row)


def _folders(root: Path, entry) -> list[Path]:
    folder = root / records.RECORDS_FOLDER
    return [folder / nb for nb in (entry.notebook, entry.probe_free) if nb]


def _stamps(root: Path, entry) -> dict:
    from .campaign import record_stamps

    out = {}
    for folder in _folders(root, entry):
        out.update(record_stamps(folder))
    return out


def _collect(entry, root: Path, out: Path, before: dict) -> list[str]:
    """The records of ``entry``'s run written in the tree since it started, copied to DIR
    atomically and checked there; a record new to the tree is removed from it."""
    from .campaign import _record_of, record_stamps

    found = []
    for folder in _folders(root, entry)[:1]:  # the probe-free record is derived on adopt
        for path, stamp in sorted(record_stamps(folder).items()):
            if before.get(path) == stamp:
                continue
            try:
                record = records.read(path)
            except (records.RecordError, OSError):
                continue
            if not _record_of(entry, record, strict=True, root=root):
                continue
            rel = str(path.relative_to(root))
            atomic_write_bytes(out / rel, path.read_bytes())
            records.read(out / rel, root=out)
            if path not in before:
                path.unlink()
            found.append(rel)
    return found


# ---------------------------------------------------------------------- adopt
def _unpack(tar: Path, into: Path) -> Path:
    """A campaign's tar unpacked into ``into``: regular files only, each the manifest or a record
    path under ``reproductions/``, 8 MiB at most each; anything else refuses the tar."""
    safe = re.compile(r"(manifest\.json|reproductions(/[A-Za-z0-9_.=-]+)+\.json)")
    try:
        with tarfile.open(tar, "r:") as bundle:
            members = bundle.getmembers()
            if len(members) > 100_000:
                raise DeviceCampaignError(f"{tar} holds more files than any device campaign writes.")
            for member in members:
                if not member.isfile() or not safe.fullmatch(member.name) or ".." in member.name.split("/") \
                        or member.size > records.MAX_RECORD_BYTES:
                    raise DeviceCampaignError(f"{tar} is not a device campaign's tar: it holds {member.name!r}, "
                                              "which is not a record or its manifest.")
                target = into / member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                source = bundle.extractfile(member)
                target.write_bytes(source.read(records.MAX_RECORD_BYTES + 1))
    except (tarfile.TarError, OSError, EOFError) as err:
        raise DeviceCampaignError(f"{tar} cannot be read as a device campaign's tar ({err}).") from None
    return into


def adopt(source: Path, root: Path | None = None, commit: bool = True, log=print) -> list[str]:
    """Check the records of a device campaign's DIR (or tar) and bring them into the project:
    see the module docstring. Returns the paths written (relative to the project). Any record
    that fails a check refuses the whole adoption in one sentence (:class:`DeviceCampaignError`)
    before anything is written."""
    from . import campaign
    from .project import project_root

    root = Path(root) if root is not None else project_root()
    source = Path(source).expanduser()
    if not source.exists():
        raise DeviceCampaignError(f"{source} does not exist; name the folder (or tar) a device campaign wrote.")
    folder = (root / records.RECORDS_FOLDER).resolve()
    if source.resolve() == folder or source.resolve().is_relative_to(folder):
        raise DeviceCampaignError(f"{source} is the project's {records.RECORDS_FOLDER}/ (or in it); name the folder "
                                  "a device campaign wrote.")
    with tempfile.TemporaryDirectory(prefix="pflcore-adopt-") as scratch:
        if source.is_file():
            if not tarfile.is_tarfile(source):
                raise DeviceCampaignError(f"{source} is neither a folder nor a tar of a device campaign.")
            source = _unpack(source, Path(scratch))
        elif not source.is_dir():
            raise DeviceCampaignError(f"{source} is neither a folder nor a tar of a device campaign.")
        return _adopt(source, root, commit, log, campaign)


def _adopt(source: Path, root: Path, commit: bool, log, campaign) -> list[str]:
    try:
        manifest = json.loads(record_schema.read_regular(source / MANIFEST, source).decode("utf-8"))
        assert isinstance(manifest, dict) and manifest.get("kind") == KIND and isinstance(manifest.get("runs"), list)
    except records.RecordError:
        raise DeviceCampaignError(f"{source} has no readable {MANIFEST}, so it is no device campaign's folder.") \
            from None
    except (ValueError, AssertionError, RecursionError):
        raise DeviceCampaignError(f"{source / MANIFEST} is not a device campaign's manifest.") from None
    listed: dict[str, str] = {}  # record path -> the key of the run that wrote it
    for run in manifest["runs"]:
        if isinstance(run, dict) and run.get("status") == "finished" and isinstance(run.get("records"), list):
            for rel in run["records"]:
                listed[str(rel)] = str(run.get("key"))
    campaign.refuse_unbelieved(root)
    plan = campaign.current_plan(root)
    rows = {r["key"]: r for r in plan["runs"]}
    known = campaign.entries_by_key()
    found = sorted((source / records.RECORDS_FOLDER).rglob("*.json")) \
        if (source / records.RECORDS_FOLDER).is_dir() else []
    if not found:
        raise DeviceCampaignError(f"{source} holds no record to adopt.")
    by_entry: dict[str, list[str]] = {}
    data: dict[str, bytes] = {}
    replications: dict[str, tuple[str, dict, dict]] = {}  # record path -> (replication path, record, comparison)
    seen: set[str] = set()
    for path in found:
        rel = str(path.relative_to(source))
        try:
            record = records.read(path, root=source)
        except records.RecordError as err:
            raise DeviceCampaignError(f"refused, nothing adopted: {str(err).rstrip('.')}.") from None
        if rel not in listed:
            raise DeviceCampaignError(f"refused, nothing adopted: {rel} is listed by no finished run of "
                                      f"{source / MANIFEST}.")
        entry = known.get(listed[rel])
        if entry is None or not campaign._record_of(entry, record, strict=True, root=root):
            owner = next((e for e in campaign.CAMPAIGN if campaign._record_of(e, record, strict=True, root=root)), None)
            raise DeviceCampaignError(
                f"refused, nothing adopted: {rel} ({record['notebook']}, {record['config']['method']}, seed "
                f"{record['seed']}) is a record of no entry of the plan" if owner is None else
                f"refused, nothing adopted: {rel} is a record of {owner.key}, not of {listed[rel]!r} as the manifest "
                "says")
        target = root / rel
        if target.exists() or target.is_symlink():
            kept = replication(record, rel, target, entry, root, campaign)
            if kept is None:
                log(f"campaign: {rel} not kept: it is the project's record bit for bit, on the same numeric path",
                    flush=True)
            else:
                replications[rel] = kept
            seen.add(rel)
            continue
        if rows[entry.key]["records"]:
            raise DeviceCampaignError(f"refused, nothing adopted: {rel} is a record of {entry.key}, which has its "
                                      f"record(s) already ({', '.join(rows[entry.key]['records'])}).")
        by_entry.setdefault(entry.key, []).append(rel)
        data[rel] = path.read_bytes()
        seen.add(rel)
    missing = [rel for rel in listed if rel not in seen]
    if missing:
        raise DeviceCampaignError(f"refused, nothing adopted: the manifest lists {missing[0]}, which is not in "
                                  f"{source}.")
    taken = [kept[0] for kept in replications.values()]
    if len(set(taken)) < len(taken):
        raise DeviceCampaignError(f"refused, nothing adopted: two records of {source} would be the one replication "
                                  f"{next(t for t in taken if taken.count(t) > 1)}.")
    written: list[str] = []
    try:
        for rel, content in data.items():
            atomic_write_bytes(root / rel, content)
            written.append(rel)
            records.read(root / rel)  # again in its place: the data folder resolved against this project
        for rel, (kept, record, _) in replications.items():
            records._dump(record, root / kept)  # atomic, as python -m pflcore.replicate --keep writes it
            written.append(kept)
            records.read(root / kept)
    except (records.RecordError, OSError) as err:
        for rel in written:
            (root / rel).unlink(missing_ok=True)
        raise DeviceCampaignError(f"refused, nothing adopted: {str(err).rstrip('.')}.") from None
    if not written:
        log(f"campaign: nothing adopted from {source}: each of its records is the project's already", flush=True)
        return written
    for key, rels in by_entry.items():
        rows[key]["records"] = rels
    derived = campaign.derive_probe_free(plan, root)
    plan.update(campaign.current_plan_counts(plan))
    path = campaign.write_plan(plan, root)
    written += derived
    where = sorted({prov.get("gpu") or prov.get("device", "?") for prov in
                    [json.loads(content).get("provenance", {}) for content in data.values()]
                    + [kept[1].get("provenance", {}) for kept in replications.values()]})
    for rel, (kept, _, comparison) in replications.items():
        log(f"campaign: {rel} kept as the replication {kept}: {records.comparison_line(comparison, root / rel)}",
            flush=True)
    also = f" and {len(replications)} replication(s)" if replications else ""
    log(f"campaign: adopted {len(by_entry)} entries ({len(written) - len(replications)} records){also} run on "
        f"{', '.join(where)}", flush=True)
    if commit:
        message = (f"Records: {len(by_entry)} entries{also} from a device campaign on {', '.join(where)}\n\n"
                   + "\n".join([*(f"- {key}" for key in by_entry),
                                 *(f"- {kept}: {comparison['verdict']}" for kept, _, comparison
                                   in replications.values())]))
        campaign._commit(root, [*written, str(path.relative_to(root))], message, log)
        out = root / "outputs" / "campaign"
        if campaign.redraw_figures(root, root, out, log):
            campaign._commit(root, [campaign.report.FIGURES_FOLDER],
                             "Figures: redrawn from the records after a device campaign", log)
    return written


def replication(record: dict, rel: str, target: Path, entry, root: Path, campaign) -> tuple[str, dict, dict] | None:
    """``record`` (a campaign's record of ``entry``, at ``rel``) as a replication of the project's
    record ``target`` of the same run: (its path, the replication record, the comparison), or
    None where the two are one run on one numeric path, bit for bit (nothing new to keep). The
    replication is ``record`` with ``replication_of`` (:func:`pflcore.replicate.replication_of`:
    the verdict and differences against the seed spread of its row, :func:`pflcore.records.compare`),
    named as ``python -m pflcore.replicate --keep`` names it. Refuses in one sentence a file that is
    no record of this run, or a replication that would replace one."""
    from .config import ExperimentConfig
    from .engine.results import RunResult
    from .replicate import replication_of, replication_path

    try:
        ours = records.read(target)
    except records.RecordError:
        ours = None
    if ours is None or ours.get("fingerprint") != record["fingerprint"] or ours.get("seed") != record["seed"] \
            or not campaign._record_of(entry, ours, strict=True, root=root):
        raise DeviceCampaignError(f"refused, nothing adopted: {rel} would replace the file of that name in the "
                                  "project, which is no record of the same run.")
    result = RunResult.from_record(record, ExperimentConfig(**{**record["config"], "data_root": None}), target)
    comparison = records.compare(result, target)
    comparison["verdict"] = records.verdict(comparison)
    if comparison["verdict"] == "identical" and comparison["same_path"]:
        return None
    kept = {**record, "replication_of": replication_of(target, ours, comparison)}
    path = replication_path(target, kept)
    if path.exists() or path.is_symlink():
        raise DeviceCampaignError(f"refused, nothing adopted: {rel} would replace the replication "
                                  f"{path.relative_to(root)}, kept already.")
    record_schema.validate(kept, path)
    return str(path.relative_to(root)), kept, comparison


def _main(argv: list[str]) -> int:
    """The processes the campaign starts: ``_run SPEC`` (one entry) and ``_probe DEVICE SCALE ROUNDS``."""
    if argv[:1] == ["_run"] and len(argv) == 2:
        return run_one(json.loads(Path(argv[1]).read_text()))
    if argv[:1] == ["_probe"] and len(argv) == 4:
        return _probe_main(*argv[1:])
    print("python -m pflcore.device_campaign is started by python -m pflcore.campaign device; run that.",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
