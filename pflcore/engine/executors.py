"""Where the clients' work runs: in this process, or spread over worker processes.

The engine hands an executor a list of :class:`~pflcore.engine.jobs.ClientJob` s and gets
back one :class:`~pflcore.engine.jobs.ClientResult` per job, in order; every executor runs
them through the same :class:`~pflcore.engine.jobs.ClientWorker`. An executor keeps
nothing between calls: the engine owns the state, checkpoints it, and gets the same
numbers whichever executor ran the work (any speed path must give the numbers of the
plain path; tests check it bit for bit).

- :class:`InProcess`: one client after the other, with this process's torch threads.
- :class:`WorkerPool`: ``n`` spawned processes with one thread each, clients split into
  ``n`` contiguous groups of about equal training size. On small CNNs this beats
  intra-op threading (measured on a 2-core machine: 2 x 1 thread is 1.9-2.0x one thread,
  2 threads in one process only 1.4-1.7x, and it collapses when another process holds a
  core).
"""
from __future__ import annotations

import atexit
import os
import pickle
import signal
import sys
import threading
import time
import traceback
import types
import warnings
from contextlib import contextmanager
from typing import Sequence

import torch

from .jobs import JOB_KINDS, ClientJob, ClientResult, ClientWorker


class InProcess:
    """Runs every job here, one after the other."""

    def __init__(self, worker: ClientWorker):
        self.worker = worker

    def run(self, jobs: Sequence[ClientJob]) -> list[ClientResult]:
        return [self.worker.run(job) for job in jobs]

    def close(self) -> None:
        pass


class WorkerError(RuntimeError):
    """A worker process failed; the message carries its traceback."""


class WorkerPool:
    """Runs jobs in ``num_workers`` processes with one torch thread each.

    The processes are started once per Python session (spawning one costs seconds: it
    imports torch) and reused by every later run with the same number of workers (a run
    with another number first stops the idle ones, so they never pile up); each
    run sends them its data once, packed into a few tensors that travel through shared
    memory. Each round only payloads, states and updates travel (pickled). Jobs are cut
    into contiguous groups of about equal size (train samples, or test samples for an
    evaluation: :attr:`JobKind.sized_by`), one group per worker.
    """

    def __init__(self, worker: ClientWorker, num_workers: int):
        if num_workers < 2:
            raise ValueError(f"a WorkerPool needs at least 2 workers, got {num_workers}.")
        if type(worker.algorithm).__module__ == "__main__":
            raise ValueError(f"worker processes cannot import the method class {type(worker.algorithm).__name__!r} "
                             "defined in __main__ (a notebook or script): put it in a module, or use workers=0.")
        self.worker = worker
        self.num_workers = num_workers
        self.sizes = {"train": [int(y.shape[0]) for _, y in worker.train_data],
                      "test": [int(y.shape[0]) for _, y in worker.test_data]}
        self._setup: dict | None = None
        self._processes()  # start (or reuse) them now, so start-up errors come before any work

    def _processes(self) -> "_Processes":
        procs = _PROCESSES.get(self.num_workers)
        if procs is None or not procs.alive():
            for other in list(_PROCESSES.values()):  # a broken pool, idle ones of other sizes: stop them
                if other is procs or other.owner is None:
                    other.shutdown()
            procs = _PROCESSES[self.num_workers] = _Processes(self.num_workers)
        if procs.owner is not self:
            if self._setup is None:
                w = self.worker
                self._setup = {"algorithm": (type(w.algorithm), w.algorithm.params), "settings": w.settings,
                               "seed": w.seed, "num_classes": w.num_classes, "train": _pack(w.train_data),
                               "test": _pack(w.test_data), "model": pickle.dumps(w.model), "hooks": w.hooks}
            procs.configure(self._setup)
            procs.owner = self
        return procs

    def run(self, jobs: Sequence[ClientJob]) -> list[ClientResult]:
        groups = _split(jobs, job_costs(jobs, self.sizes), self.num_workers)
        return self._processes().run(groups)

    def close(self) -> None:
        """Release the processes for the next run (they keep running; see :func:`shutdown_workers`)."""
        procs = _PROCESSES.get(self.num_workers)
        if procs is not None and procs.owner is self:
            procs.owner = None


class _Processes:
    """The long-lived worker processes and their pipes. A worker exits when this process
    dies, even in the middle of a job (see :func:`_exit_with_parent`)."""

    def __init__(self, num_workers: int):
        import torch.multiprocessing as mp  # registers the shared-memory tensor reductions

        ctx = mp.get_context("spawn")  # fork hangs once the parent has used OpenMP
        self.owner: WorkerPool | None = None
        self.connections, self.processes = [], []
        # The kernel's parent-death signal follows the thread that started the child: use it
        # only when that thread lives as long as this process.
        death_signal = threading.current_thread() is threading.main_thread()
        saved = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the children before torch loads
        try:
            with _main_module_hidden():
                for _ in range(num_workers):
                    parent, child = ctx.Pipe()
                    proc = ctx.Process(target=_worker_main, args=(child, os.getpid(), death_signal), daemon=True)
                    proc.start()
                    child.close()
                    self.connections.append(parent)
                    self.processes.append(proc)
        except BaseException:
            self.shutdown()
            raise
        finally:
            if saved is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = saved

    def alive(self) -> bool:
        return bool(self.processes) and all(p.is_alive() for p in self.processes)

    def configure(self, setup: dict) -> None:
        for conn in self.connections:
            # this process's import path first: a method defined outside pflcore (a plugin, whose folder
            # went on sys.path after these workers started) is unpickled by its module name
            conn.send(("path", list(sys.path)))
            conn.send(("setup", setup))  # the tensors go through shared memory

    def run(self, groups: Sequence[Sequence[ClientJob]]) -> list[ClientResult]:
        try:
            return self._run(groups)
        except BaseException:  # a failed job, or Ctrl-C with replies pending: start afresh
            self.shutdown()
            raise

    def _run(self, groups: Sequence[Sequence[ClientJob]]) -> list[ClientResult]:
        busy = []
        for conn, group in zip(self.connections, groups):
            if group:
                conn.send(("jobs", pickle.dumps(list(group), protocol=pickle.HIGHEST_PROTOCOL)))
                busy.append(conn)
        results: list[ClientResult] = []
        errors = []
        for conn in busy:
            try:
                status, body = conn.recv()
            except (EOFError, OSError):
                status, body = "died", "a worker process died (out of memory, or killed)"
            if status == "ok":
                results.extend(pickle.loads(body))
            else:
                errors.append(body)
        if errors:  # run() shuts the pool down: the next run starts clean
            raise WorkerError(f"client work failed in a worker process:\n{errors[0]}")
        return results

    def shutdown(self) -> None:
        for conn in self.connections:
            try:
                conn.send(("stop", None))
                conn.close()
            except OSError:
                pass
        for proc in self.processes:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        self.connections, self.processes = [], []
        for key, value in list(_PROCESSES.items()):
            if value is self:
                del _PROCESSES[key]


_PROCESSES: dict[int, _Processes] = {}


def shutdown_workers() -> None:
    """Stop every worker process this Python session started (also done at exit)."""
    for procs in list(_PROCESSES.values()):
        procs.shutdown()


atexit.register(shutdown_workers)


def resolve_workers(workers: int | str, *, device: str = "cpu", num_clients: int | None = None) -> int:
    """The number of worker processes to use: ``"auto"`` means one per core on CPU (at
    most one per client; none on a 1-core machine or on a GPU). An explicit number is cut
    to at most one per core and one per client, with a warning saying so."""
    cores = available_cores()
    if workers == "vectorised":  # in this process (pflcore.engine.vectorised); Flower's nodes run in-process
        return 0
    if workers != "auto":
        asked = int(workers)
        n = min(asked, cores, num_clients or asked)
        if n < asked:
            clients = f", the run {_count(num_clients, 'client')}" if num_clients else ""
            warnings.warn(f"workers = {asked} was cut to {n}: one worker process per core and per client at most "
                          f"(this machine has {_count(cores, 'core')}{clients}).", stacklevel=2)
        return n
    if device != "cpu":
        return 0
    n = min(cores, num_clients or cores)
    return n if n > 1 else 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS reports it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# ---------------------------------------------------------------------- internals
@contextmanager
def _main_module_hidden():
    """Start spawned workers without re-running the caller's script or notebook: they only
    need pflcore, and a script without an ``if __name__ == "__main__"`` guard would
    otherwise start its own run inside every worker."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def job_costs(jobs: Sequence[ClientJob], sizes: dict[str, Sequence[int]]) -> list[int]:
    """Each job's cost for balancing: one plus the samples its kind's work grows with
    (``sizes["train"]`` or ``sizes["test"]``, per client; :attr:`JobKind.sized_by`)."""
    return [1 + int(sizes[JOB_KINDS[j.kind].sized_by][j.client_id]) for j in jobs]


def _split(jobs: Sequence[ClientJob], costs: Sequence[int], parts: int) -> list[list[ClientJob]]:
    """Contiguous groups of about equal total cost: each job goes to the part of the total
    that the middle of its own cost falls in (for two parts, the most even contiguous cut)."""
    total = sum(costs)
    groups: list[list[ClientJob]] = [[] for _ in range(parts)]
    acc = 0
    for job, cost in zip(jobs, costs):
        groups[min(parts - 1, int((acc + cost / 2) * parts / total)) if total else 0].append(job)
        acc += cost
    return groups


def _pack(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> dict:
    """Per-client (x, y) as two shareable tensors plus sizes: the tensors they are
    consecutive views of when they are (FederatedData packs them so; nothing is copied,
    the storage moves to shared memory), else their concatenation."""
    sizes = [int(y.shape[0]) for _, y in pairs]
    x = _whole([x for x, _ in pairs]) if pairs else torch.zeros(0)
    y = _whole([y for _, y in pairs]) if pairs else torch.zeros(0, dtype=torch.long)
    if x.dim() == 4 and not x.is_contiguous(memory_format=torch.channels_last):
        x = x.contiguous(memory_format=torch.channels_last)  # the layout the CPU convolutions want
    return {"x": x.share_memory_(), "y": y.share_memory_(), "sizes": sizes}


def _whole(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """The tensor ``parts`` are consecutive row blocks of, if they are exactly that, else
    their concatenation."""
    base = parts[0]._base
    if base is not None and base.shape[0] == sum(p.shape[0] for p in parts):
        rows, row = 0, base[0].numel() if base.shape[0] else 0
        for p in parts:
            if p._base is not base or p.storage_offset() != base.storage_offset() + rows * row \
                    or p.stride() != base.stride():
                break
            rows += p.shape[0]
        else:
            return base
    return torch.cat(list(parts))


def _unpack(packed: dict) -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y = packed["x"], packed["y"]
    out, start = [], 0
    for n in packed["sizes"]:
        out.append((x[start:start + n], y[start:start + n]))
        start += n
    return out


def _keep_freed_memory() -> None:
    """Ask glibc to keep freed buffers (up to 32 MiB each) instead of returning them to the
    OS: otherwise every step's activation gradients are fresh pages, and page faults cost
    about 10% of a small CNN's step on this machine. Numbers are unaffected."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 * 1024 * 1024)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 1024 * 1024 * 1024)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass


def _exit_with_parent(parent_pid: int, death_signal: bool) -> None:
    """End this worker when ``parent_pid`` dies, busy or not: a closed pipe only wakes a
    worker that is waiting for work. On Linux the kernel sends SIGKILL when the thread that
    started us exits (``death_signal``: that thread is the parent's main thread); in every
    case a daemon thread checks every 0.5 s whether we were handed to another parent."""
    if death_signal and sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before we got here
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="pflcore-parent-watch", daemon=True).start()


def _worker_main(conn, parent_pid: int, death_signal: bool = False) -> None:
    _exit_with_parent(parent_pid, death_signal)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _keep_freed_memory()
    torch.set_num_threads(1)
    worker: ClientWorker | None = None
    while True:
        try:
            command, body = conn.recv()
        except (EOFError, OSError):
            return
        if command == "stop":
            return
        if command == "path":
            sys.path[:0] = [p for p in body if p not in sys.path]
            continue
        if command == "setup":
            cls, params = body["algorithm"]
            worker = ClientWorker(cls(**params), body["settings"], body["seed"], body["num_classes"],
                                  _unpack(body["train"]), _unpack(body["test"]), pickle.loads(body["model"]),
                                  body["hooks"])
            continue
        try:
            reply = ("ok", pickle.dumps([worker.run(job) for job in pickle.loads(body)],
                                        protocol=pickle.HIGHEST_PROTOCOL))
        except BaseException:  # report it; the engine decides what to do
            reply = ("error", traceback.format_exc())
        try:
            conn.send(reply)
        except OSError:  # the parent is gone (killed or interrupted): nothing left to do
            return


__all__ = ["InProcess", "WorkerPool", "WorkerError", "available_cores", "resolve_workers", "shutdown_workers"]
