"""One directory per run, written atomically, never silently overwritten.

Layout of ``<output_dir>/<run name>/``:

- ``config.json``     the validated config (and its fingerprint)
- ``metrics.json``    one record per round (participants, train loss, evaluation)
- ``clients.npz``     per-client accuracies in percent: ``final``, ``best`` (at the best
                      round), ``history`` (evaluations x clients), ``eval_rounds``, sizes
- ``summary.json``    written last: its presence means the run finished; its
                      ``accuracy_unit: percent`` says that ``clients.npz`` holds percent
                      (a folder written before pflcore had it holds fractions, converted
                      when read)
- ``checkpoint.pt``   while running (every ``checkpoint_every`` rounds); removed at the end
- ``parked.json``     while parked (stopped at ``PFLCORE_PARK_AT``): the round it resumes from
- ``arrays/``         per-round arrays a method reports (e.g. FedPAC's weight matrices)
- ``.pflcore.lock``   while a process runs the experiment (an exclusive ``flock``)

Only the process holding the lock writes; a finished run is read without it.
"""
from __future__ import annotations

import fcntl
import io
import json
import os
import pickle
import shutil
import tempfile
import time
import warnings
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from ..atomic import atomic_write_bytes, current_umask  # noqa: F401  (re-exported)
from .. import records
from ..config import ExperimentConfig

LOCK_NAME = ".pflcore.lock"
PROBE_PREFIX = ".pflcore-probe-"  # a folder made and removed at once, to see whether we may write
LOCK_WAIT_SECONDS = 2.0  # how long acquiring waits out another process's brief in-use check


class ResultsError(ValueError):
    """A results directory or a file in it cannot be used; the message is one sentence."""


class ResultsInUseError(ResultsError):
    """Another live process holds the results directory's lock."""


class ResultsConflictError(FileExistsError):
    """The results directory holds a different experiment."""


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=1, default=_json_default) + "\n").encode())


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def atomic_save_npz(path: Path, **arrays: np.ndarray) -> None:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


def atomic_torch_save(path: Path, obj: Any) -> None:
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


#: Set (to the flag's spelling) by a command line that has an ``--overwrite`` flag, for it and the
#: processes it starts: the sentences below then name the flag instead of the keyword argument.
OVERWRITE_FLAG_ENV = "PFLCORE_OVERWRITE_FLAG"


def overwrite_words() -> str:
    """How the user asks for a fresh run: ``--overwrite`` from the command line, else ``overwrite=True``."""
    return os.environ.get(OVERWRITE_FLAG_ENV) or "overwrite=True"


def _damaged(path: Path, what: str = "is damaged") -> ResultsError:
    folder = path.parent
    return ResultsError(f"results file {path} {what}; delete the folder {folder} (or pass {overwrite_words()}) to "
                        "run the experiment again.")


def read_json(path: Path) -> Any:
    """A results file's JSON; one sentence naming the file if it is not valid JSON."""
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise _damaged(path, "is damaged (not valid JSON)") from None


#: The file of a finished run holding its final server and client states.
FINAL_STATE = "final_state.pt"
#: A parked run's mark in its folder: the round it resumes from, when it parked (RunDirectory.write_parked).
PARKED = "parked.json"
#: Every accuracy pflcore reports, per client and summarised, in files and in the API.
ACCURACY_UNIT = "percent"

@dataclass
class RunResult:
    """What a run produced; also what :func:`RunResult.load` reads back from disk. Every
    accuracy is in percent: ``summary``'s, ``client_acc`` (final, per client) and
    ``acc_history`` (evaluations x clients)."""

    config: ExperimentConfig
    summary: dict
    history: list[dict]
    client_acc: np.ndarray
    eval_rounds: np.ndarray
    acc_history: np.ndarray
    path: Path | None = None
    extras: dict = field(default_factory=dict)
    #: every per-client array of ``clients.npz`` (``final``, ``best``, ``history``,
    #: ``eval_rounds``, ``train_sizes``, ``test_sizes``, ``new_final``), accuracies in percent
    clients: dict = field(default_factory=dict)

    @property
    def acc_mean(self) -> float:
        return self.summary["acc_mean"]

    @property
    def record(self) -> str | None:
        """The committed record this result was read from (None: trained or loaded from results/)."""
        return self.extras.get("record")

    def curve(self, key: str = "acc_mean") -> tuple[np.ndarray, np.ndarray]:
        """(rounds, values) of a per-round metric; evaluation metrics only where evaluated."""
        rows = [(h["round"], h[key]) for h in self.history if key in h]
        if not rows:
            return np.zeros(0, dtype=int), np.zeros(0)
        r, v = zip(*rows)
        return np.asarray(r), np.asarray(v, dtype=float)

    def array_names(self) -> list[str]:
        """The names of the per-round arrays the method reported."""
        if "arrays" in self.extras:
            return sorted(self.extras["arrays"])
        names: set[str] = set()
        for f in sorted((self.path / "arrays").glob("round_*.npz")) if self.path is not None else ():
            with np.load(f) as z:
                names.update(z.files)
        return sorted(names)

    def arrays(self, name: str) -> dict[int, np.ndarray]:
        """A per-round array the method reported (e.g. ``"weights"``), keyed by round (from a
        record: round 1 and the evaluated rounds)."""
        if "arrays" in self.extras:
            return dict(self.extras["arrays"].get(name, {}))
        if self.path is None:
            return {}
        out = {}
        for f in sorted((self.path / "arrays").glob("round_*.npz")):
            with np.load(f) as z:
                if name in z:
                    out[int(f.stem.split("_")[1])] = z[name]
        return out

    def final_state(self) -> dict:
        """The run's final server state and client states (``{"state", "client_states"}``,
        what :meth:`pflcore.engine.Simulation.restore` takes), read without executing
        anything in the file; one sentence if the run kept none."""
        if self.record is not None:
            raise ResultsError(f"this run was read from the record {self.record}, which keeps no model state; "
                               "train it (PFLCORE_TRAIN=1, train = True in the notebook, or pflcore notebooks "
                               "--train) to analyse its final models.")
        if self.path is None or not (self.path / FINAL_STATE).exists():
            raise ResultsError(f"the run in {self.path} kept no final state (runs finished before pflcore "
                               "saved one, or results never written to disk); run it again with "
                               f"{overwrite_words()} to keep one.")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                saved = torch.load(self.path / FINAL_STATE, weights_only=True)
            return saved["sim"]
        except Exception:
            raise _damaged(self.path / FINAL_STATE, "is damaged or not a pflcore final state") from None

    @classmethod
    def load(cls, path: str | Path) -> "RunResult":
        """Read a finished run; a damaged file is named in one sentence (:class:`ResultsError`).
        A folder whose ``summary.json`` has no ``accuracy_unit`` was written before pflcore
        kept per-client accuracies in percent: its ``clients.npz`` fractions are read as percent."""
        path = Path(path)
        summary = read_json(path / "summary.json")
        if not isinstance(summary, dict):
            raise _damaged(path / "summary.json", "is not a pflcore run summary")
        config = _recorded_config(path / "config.json")
        history = read_json(path / "metrics.json")
        if not isinstance(history, list):
            raise _damaged(path / "metrics.json", "is not a pflcore list of round records")
        clients = path / "clients.npz"
        try:
            with np.load(clients) as z:
                everything = {k: z[k] for k in z.files}
                if not {"final", "eval_rounds", "history"} <= everything.keys():
                    raise KeyError("final, eval_rounds or history")
        except FileNotFoundError:
            raise
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError):
            raise _damaged(clients, "is damaged or not a pflcore clients file") from None
        unit = summary.get("accuracy_unit")
        if unit is None:  # written before pflcore kept accuracies in percent: fractions
            everything = {k: (100 * np.asarray(v, dtype=np.float64) if k in records.ACCURACY_ARRAYS else v)
                          for k, v in everything.items()}
            summary = {**summary, "accuracy_unit": ACCURACY_UNIT}
        elif unit != ACCURACY_UNIT:
            raise _damaged(path / "summary.json", f"gives accuracy_unit {unit!r}, which this pflcore does not know "
                           f"(it writes {ACCURACY_UNIT!r})")
        return cls(config, summary, history, everything["final"], everything["eval_rounds"], everything["history"],
                   path, clients=everything)

    @classmethod
    def from_record(cls, record: dict, config: ExperimentConfig | None = None,
                    path: Path | None = None) -> "RunResult":
        """The result a committed record stands for (:mod:`pflcore.records`). ``config``: the
        caller's, whose fingerprint matched the record's; else the recorded config (built
        without validating it against local data). ``record`` as :func:`pflcore.records.read`
        returns it, or of an earlier schema version (:func:`pflcore.records.upgrade`)."""
        record = records.upgrade(record)  # version 1's fractions as percent
        config = config if config is not None else ExperimentConfig(**record["config"])
        clients = {k: (records.floats(v) if k in records.ACCURACY_ARRAYS else np.asarray(v))
                   for k, v in record["clients"].items()}
        history = [records.unrecorded(h) for h in record["history"]]
        arrays = {name: {int(r): np.asarray(a) for r, a in by_round.items()}
                  for name, by_round in record["arrays"].items()}
        summary = {**records.unrecorded(record["summary"]), "accuracy_unit": ACCURACY_UNIT,
                   "provenance": record["provenance"]}
        return cls(config, summary, history, clients["final"], clients["eval_rounds"].astype(int),
                   clients["history"], None, extras={"record": str(path) if path else None, "arrays": arrays},
                   clients=clients)


def _recorded_config(path: Path) -> ExperimentConfig:
    record = read_json(path)
    try:
        return ExperimentConfig.from_dict(record["config"])
    except (TypeError, KeyError, ValueError):
        raise _damaged(path, "does not hold a config this pflcore can read") from None


class RunDirectory:
    """The on-disk home of one run: decides skip / resume / start, and writes atomically.

    Creating one writes nothing: it checks that results can go where the config says and
    that the folder holds this experiment (or nothing). :meth:`lock` then takes the
    folder for this process while it writes; ``overwrite`` empties it only then.
    """

    def __init__(self, config: ExperimentConfig, overwrite: bool = False):
        self.config = config
        self.overwrite = overwrite
        self._check_location()
        self.path = Path(config.output_dir) / config.run_name()
        self.fingerprint = config.fingerprint()
        self._lock_fd: int | None = None
        self._created: list[Path] = []
        self._check_contents()
        if not self.finished:
            holder = self._holder()
            if holder is not None:
                raise self._in_use(holder)
            self._check_writable()

    # -- checks (nothing written) -----------------------------------------------------
    def _check_location(self) -> None:
        """One sentence if results cannot go to ``output_dir / run name``: no path, a file
        in the way, a folder name longer than the filesystem allows."""
        out = self.config.output_dir
        if not isinstance(out, (str, os.PathLike)) or not str(out).strip():
            raise ResultsError(f"output_dir = {out!r} is not a folder path; give one, for example 'results'.")
        target = Path(out) / self.config.run_name()
        parts = target.absolute().parts
        current, exists = Path(parts[0]), True  # the deepest folder that exists so far
        for i, part in enumerate(parts[1:], start=1):
            last = i == len(parts) - 1
            limit = _name_max(current)
            size = len(os.fsencode(part))
            if size > limit:
                shown = _short(part)
                if last:
                    raise ResultsError(f"the run name {shown!r} is {size} bytes long but the filesystem of {current} "
                                       f"allows at most {limit} for a folder name; choose a shorter name.")
                raise ResultsError(f"output_dir has a folder name {shown!r} of {size} bytes but the filesystem of "
                                   f"{current} allows at most {limit}; choose a shorter output_dir.")
            if not exists:
                continue
            nxt = current / part
            if os.path.isdir(nxt):
                current = nxt
            elif os.path.lexists(nxt):
                what = "a file, not a folder" if os.path.exists(nxt) else "a broken symbolic link"
                if last:
                    raise ResultsError(f"results directory {target} is {what}; remove it or choose another "
                                       "name or output_dir.")
                raise ResultsError(f"output_dir {_short(str(out))!r} cannot hold results because {nxt} is {what}; "
                                   "choose another output_dir.")
            else:
                exists = False  # the rest is to be created, on the filesystem of ``current``
        self._deepest_existing = current

    def _check_writable(self) -> None:
        """Try to create (and remove) a folder where the run's first folder would go:
        permission bits do not say what root, read-only mounts or quotas allow."""
        where = self._deepest_existing
        try:
            probe = tempfile.mkdtemp(prefix=PROBE_PREFIX, dir=where)
            os.rmdir(probe)
        except OSError as exc:
            reason = (exc.strerror or type(exc).__name__).lower()
            raise ResultsError(f"cannot write results in {where} ({reason}); choose another output_dir or make "
                               "that folder writable.") from None

    def _check_contents(self) -> None:
        """Refuse a folder that holds another experiment or something that is not a run."""
        if self.overwrite or not self.path.is_dir():
            return
        config_file = self.path / "config.json"
        if config_file.exists():
            record = read_json(config_file)
            recorded = record.get("fingerprint") if isinstance(record, dict) else None
            if recorded is None:
                raise _damaged(config_file, "is not a pflcore run config")
            if recorded != self.fingerprint:
                raise ResultsConflictError(
                    f"results directory {self.path} holds a different experiment (fingerprint {recorded}, "
                    f"this config {self.fingerprint}); choose another name or output_dir, or pass "
                    f"{overwrite_words()}.")
        elif any(p.name != LOCK_NAME and not _is_temp(p) and not p.name.startswith(PROBE_PREFIX)
                 for p in self.path.iterdir()):
            raise ResultsConflictError(f"results directory {self.path} exists but is not a pflcore run; "
                                       "choose another name or output_dir.")

    # -- the lock ---------------------------------------------------------------------
    @property
    def lock_path(self) -> Path:
        return self.path / LOCK_NAME

    def _holder(self) -> str | None:
        """The pid (as text, or "unknown") of a live process holding the lock, else None."""
        try:
            fd = os.open(self.lock_path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return _read_pid(fd)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    def _in_use(self, holder: str) -> ResultsInUseError:
        return ResultsInUseError(f"results directory {self.path} is in use by another process (pid {holder}); "
                                 "wait for it to finish or choose another name or output_dir.")

    @contextmanager
    def lock(self) -> Iterator["RunDirectory"]:
        """Hold the folder for this process (an exclusive ``flock`` on ``.pflcore.lock``)
        while the body writes; another process is refused with one sentence. With the lock
        held, temporary files of an interrupted write are removed (no other process can own
        them) and ``overwrite`` empties the folder. On release the lock file goes, and so do
        the folders this call created if nothing was written in them."""
        self._acquire()
        try:
            yield self
        finally:
            self._release()

    def _acquire(self) -> None:
        if self._lock_fd is not None:
            raise RuntimeError(f"{self.path} is already locked by this RunDirectory.")
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while True:
            self._make_folders()
            try:
                fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            except FileNotFoundError:  # a releasing process removed the folder just now
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_pid(fd)
                os.close(fd)
                if time.monotonic() < deadline:  # maybe only another process's in-use check
                    time.sleep(0.05)
                    continue
                self._remove_created()
                raise self._in_use(holder) from None
            try:  # the file we locked must still be the lock file (a releaser unlinks it)
                same = os.path.samestat(os.fstat(fd), os.stat(self.lock_path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self._lock_fd = fd
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            for stale in self.path.rglob(".*.tmp"):  # no live process owns them now
                stale.unlink(missing_ok=True)
            if self.overwrite:
                for entry in self.path.iterdir():
                    if entry.name == LOCK_NAME:
                        continue
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry)
                    else:
                        entry.unlink()
                self.overwrite = False
            else:
                self._check_contents()  # another process may have started this folder meanwhile
        except BaseException:
            self._release()
            raise

    def _make_folders(self) -> None:
        missing = []
        folder = self.path
        while not folder.exists():
            missing.append(folder)
            folder = folder.parent
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except FileExistsError:
                continue
            self._created.append(folder)

    def _release(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is None:
            return
        try:
            self.lock_path.unlink(missing_ok=True)
        finally:
            os.close(fd)
        self._remove_created()

    def _remove_created(self) -> None:
        """Remove the folders this process created, if they are still empty."""
        for folder in reversed(self._created):
            try:
                folder.rmdir()
            except OSError:
                break
        self._created = []

    # -- reading and writing ----------------------------------------------------------
    @property
    def finished(self) -> bool:
        return not self.overwrite and (self.path / "summary.json").exists()

    @property
    def checkpoint_path(self) -> Path:
        return self.path / "checkpoint.pt"

    def start(self) -> None:
        atomic_write_json(self.path / "config.json",
                          {"fingerprint": self.fingerprint, "config": self.config.to_dict()})

    def load_checkpoint(self) -> dict | None:
        """The checkpoint of this experiment, or None; a file that is not one (damaged,
        foreign) is refused with one sentence, and nothing in it is executed."""
        if not self.checkpoint_path.exists():
            return None
        try:
            with warnings.catch_warnings():  # torch's notes on a foreign file's pickle protocol
                warnings.simplefilter("ignore")
                ckpt = torch.load(self.checkpoint_path, weights_only=True)
        except FileNotFoundError:
            raise
        except Exception:  # weights_only: a damaged file or one that would run code fails to load
            ckpt = None
        if not isinstance(ckpt, dict):
            raise ResultsError(f"{self.checkpoint_path} is not a pflcore checkpoint or is damaged; delete it to "
                               f"restart this run from round 1, or delete the folder {self.path} "
                               f"(or pass {overwrite_words()}) to start over.")
        return ckpt if ckpt.get("fingerprint") == self.fingerprint else None

    def write_parked(self, note: dict) -> None:
        """Mark the run parked (:class:`pflcore.engine.simulation.RunParked`): ``note`` says the round
        it resumes from; the mark goes when the run goes on (:meth:`clear_parked`)."""
        atomic_write_json(self.path / PARKED, note)

    def clear_parked(self) -> None:
        (self.path / PARKED).unlink(missing_ok=True)

    def save_checkpoint(self, ckpt: dict) -> None:
        atomic_torch_save(self.checkpoint_path, {**ckpt, "fingerprint": self.fingerprint})

    def write_progress(self, history: list[dict]) -> None:
        atomic_write_json(self.path / "metrics.json", history)

    def write_arrays(self, round_number: int, arrays: dict[str, np.ndarray]) -> None:
        atomic_save_npz(self.path / "arrays" / f"round_{round_number:04d}.npz", **arrays)

    def write_partition(self, train: list[np.ndarray], test: list[np.ndarray]) -> None:
        atomic_save_npz(self.path / "partition.npz",
                        **{f"train_{i}": a for i, a in enumerate(train)},
                        **{f"test_{i}": a for i, a in enumerate(test)})

    def finish(self, result: RunResult, client_arrays: dict[str, np.ndarray], final_state: dict | None = None) -> None:
        """Write the finished run: metrics, per-client accuracies, the final server and client
        states (``final_state.pt``, for analysis and re-evaluation), then the summary that
        marks the run finished; the checkpoint goes."""
        self.write_progress(result.history)
        atomic_save_npz(self.path / "clients.npz", **client_arrays)
        if final_state is not None:
            atomic_torch_save(self.path / FINAL_STATE, {"sim": final_state, "fingerprint": self.fingerprint})
        atomic_write_json(self.path / "summary.json", result.summary)
        self.checkpoint_path.unlink(missing_ok=True)


def _name_max(folder: Path) -> int:
    """The longest file name (bytes) the filesystem of ``folder`` allows."""
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def _short(text: str, keep: int = 40) -> str:
    return text if len(text) <= keep else text[:keep] + "\u2026"


def _is_temp(path: Path) -> bool:
    return path.name.startswith(".") and path.name.endswith(".tmp")


def _read_pid(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return text if text.isdigit() else "unknown"
