"""Run records: the committed evidence behind every number pflcore reports.

A record is one small JSON file per (config, seed), written when a paper-preset run
finishes and committed under ``reproductions/<paper>/<notebook>/``. It holds what a reader
needs to check a number without the run's folder: the config and its fingerprint, the
provenance (pflcore's version and git commit, whether the tree was dirty, Python, torch
and numpy, the device, CPU model and cores, the workers setting, start and end of each
stretch of rounds, seconds per round, the machine's load), the per-round metrics, the
per-client final and best accuracies, the summary (final and best round: mean, std,
weighted), and the per-round arrays a notebook's figures draw (kept at round 1 and at
every evaluated round). No model state is kept.

The format is described field by field in ``reproductions/SCHEMA.md`` and carries
:data:`SCHEMA_VERSION`. Every accuracy in a record is in percent; a version-1 record (per-client
accuracies as fractions) is read into the current version (:func:`upgrade`), and a record of
another version or of another program is refused with one sentence naming the file. Records
are written atomically and validated when read.

A paper notebook at its ``paper`` preset calls :func:`pflcore.engine.run` as usual; when
a record of that exact config exists, ``run`` returns it instead of training (and prints
where it comes from), unless training is forced (``PFLCORE_TRAIN=1``, the notebook's
``train = True``, or ``pflcore notebooks --train``). :func:`compare` sets a user's own run
beside the shipped record, metric by metric.
"""
from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import json
import math
import os
import platform
import re
import subprocess
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from . import __version__, numerics
from .atomic import atomic_write_bytes
from .project import project_root

SCHEMA = "pflcore-run-record"
SCHEMA_VERSION = 3  # 3: provenance names the numeric path; 2: per-client accuracies in percent (1: fractions)
READABLE_VERSIONS = (1, 2, 3)
RECORDS_FOLDER = "reproductions"
REPLICATIONS = "replications"  # <notebook>/replications/: records retrained on another numeric path
TRAIN_ENV = "PFLCORE_TRAIN"  # "1": train even where a record exists
RECORDS_ONLY_ENV = "PFLCORE_RECORDS_ONLY"  # "1": a run without a record is refused, never trained (the report)
MAX_RECORD_BYTES = 8 * 2**20  # a record is small; a larger file is not one of ours

#: Fields every record has, with their JSON types (validated on read).
REQUIRED = {"schema": str, "schema_version": int, "notebook": (str, type(None)), "fingerprint": str,
            "seed": int, "config": dict, "provenance": dict, "summary": dict, "history": list,
            "clients": dict, "arrays": dict, "notes": list}
CLIENT_ARRAYS = ("final", "best", "history", "eval_rounds", "train_sizes", "test_sizes", "new_final")
#: The per-client arrays that hold accuracies (percent; fractions in version 1 and in results
#: folders written before pflcore kept them in percent).
ACCURACY_ARRAYS = ("final", "best", "history", "new_final")


class RecordError(ValueError):
    """A record cannot be used; the message is one sentence naming the file."""

    def _render_traceback_(self) -> list[str]:  # IPython (a notebook in Lab): the sentence, not a traceback
        return [f"RecordError: {self}"]


# ---------------------------------------------------------------------- provenance
#: A file naming the commit a copy of the code without ``.git`` was prepared from (a lent GPU
#: machine's copy of the tree: ``benchmarks/device_prepare.sh`` writes ``commit <sha>`` and
#: ``package <digest>`` lines), so that its records still name their code.
SOURCE_ENV = "PFLCORE_SOURCE"


def package_digest() -> str:
    """SHA-256 over the package's Python files (their paths and bytes): whether two copies of
    pflcore hold the same code, where git cannot tell."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def prepared_source() -> dict:
    """The code's commit where there is no git: the one :data:`SOURCE_ENV`'s file names, with
    ``git_dirty`` whether the package differs from the one it was prepared with; else unknown."""
    unknown = {"git_commit": None, "git_dirty": None}
    try:
        lines = Path(os.environ[SOURCE_ENV]).read_text().splitlines()
    except (KeyError, OSError, UnicodeDecodeError):
        return unknown
    fields = dict(line.split(" ", 1) for line in lines if " " in line)
    commit, package = fields.get("commit", "").strip(), fields.get("package", "").strip()
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        return unknown
    return {"git_commit": commit, "git_dirty": (package_digest() != package) if package else None}


def git_state(start: Path | None = None) -> dict:
    """The git commit of the code that runs (the checkout pflcore is imported from) and
    whether that code (the package's tracked files) has uncommitted changes; ``None`` where
    there is no git. Only the package is looked at: notebooks pass through a git filter
    (nbstripout) that would cost a process per notebook, and a run's config is in its record."""
    where = Path(start or Path(__file__).resolve().parent)
    # No optional locks: ``git status`` would otherwise refresh the index under .git/index.lock, and
    # a timeout that kills it then leaves the lock behind, failing every later commit.
    git = ["git", "--no-optional-locks"]
    quiet = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        commit = subprocess.run([*git, "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True,
                                timeout=10, env=quiet).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    if commit is None:
        return prepared_source()
    try:  # a status cut off by its timeout leaves the commit known and whether it was dirty unknown
        status = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no", "--", "."], cwd=where,
                                capture_output=True, text=True, timeout=30, env=quiet)
        dirty = bool(status.stdout.strip()) if status.returncode == 0 and commit else None
    except (OSError, subprocess.SubprocessError):
        dirty = None
    return {"git_commit": commit, "git_dirty": dirty}


def _cpuinfo(field: str) -> str | None:
    """One field of /proc/cpuinfo (the first CPU's), or None where there is none."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_vendor() -> str:
    """The CPU's vendor (e.g. AuthenticAMD, GenuineIntel): float kernels, and so a run's last bits, differ by it."""
    return _cpuinfo("vendor_id") or "unknown"


def environment(device: str = "cpu", workers: Any = 0) -> dict:
    """Where and with what a run executes (the provenance fields besides its timing), with
    the numeric path that decides its last bits (:func:`pflcore.numerics.numeric_path`)."""
    import torch

    env = {"pflcore_version": __version__, **git_state(), "python": platform.python_version(),
           "torch": torch.__version__, "numpy": np.__version__, "device": str(device),
           "cpu_model": cpu_model(), "cpu_vendor": cpu_vendor(), "cpu_count": os.cpu_count(), "workers": workers,
           "platform": platform.platform(), "numeric_path": numerics.numeric_path(device, workers)}
    if str(device).startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(torch.device(device))
        env["cuda"] = torch.version.cuda
    return env


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def stretch(first_round: int) -> dict:
    """The start of one stretch of rounds in one process (a run resumed from a checkpoint
    has several); :func:`end_stretch` completes it."""
    return {"started": now(), "first_round": first_round + 1, "load_at_start": load_average(), **git_state()}


def end_stretch(entry: dict, last_round: int, seconds: float) -> dict:
    return {**entry, "ended": now(), "last_round": last_round, "seconds": round(seconds, 3),
            "load_at_end": load_average()}


def provenance(config: Any, stretches: list[dict], seconds: float, rounds: int,
               worker_processes: int | None = None) -> dict:
    """The provenance block of a finished run's ``summary.json`` and of its record;
    ``worker_processes``: how many processes trained the clients (the engine's executor)."""
    env = environment(config.device, config.workers)
    env["numeric_path"] = numerics.numeric_path(config.device, config.workers, worker_processes=worker_processes)
    return {**env, "started": stretches[0]["started"] if stretches else None,
            "finished": now(), "seconds": seconds, "seconds_per_round": seconds / max(rounds, 1),
            "stretches": stretches}


# ---------------------------------------------------------------------- where records live
def records_root(start: str | Path | None = None) -> Path | None:
    """``reproductions/`` of the pflcore project at or above ``start`` (the working
    directory by default), or ``None`` outside a project."""
    try:
        return project_root(start) / RECORDS_FOLDER
    except FileNotFoundError:
        return None


def record_name(record: dict) -> str:
    """A record's file name: ``<method>-<dataset>-seed<k>-<fingerprint>.json`` (:func:`find`
    looks records up by the fingerprint at its end)."""
    label = re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"{record['config']['method']}-{record['config']['dataset']}")
    return f"{label}-seed{record['seed']}-{record['fingerprint']}.json"


def find(config: Any, root: str | Path | None = None) -> Path | None:
    """The committed record of exactly this config (by fingerprint), or ``None``."""
    root = Path(root) if root is not None else records_root()
    if root is None or not root.is_dir():
        return None
    matches = sorted(root.rglob(f"*-{config.fingerprint()}.json"))
    return matches[0] if matches else None


# ---------------------------------------------------------------------- the record context
@dataclass
class _Context:
    notebook: str | None = None  # "fedpac/t1_main": records of this notebook's runs are written
    train: bool = False  # train even where a record exists
    changes: dict = field(default_factory=dict)  # the notebook's parameters changed from the preset's


_context = _Context()


def set_notebook(notebook: str | None, preset: str, train: bool = False, changes: dict | None = None) -> None:
    """Called by :func:`pflcore.notebooks.use_preset`: at the ``paper`` preset, runs of
    ``notebook`` read their records and write one when they finish, keeping ``changes`` (the
    parameters changed from the preset's, :func:`pflcore.notebooks.preset_changes`)."""
    _context.notebook = notebook if preset == "paper" else None
    _context.train = bool(train)
    _context.changes = dict(changes or {})


def active_changes() -> dict:
    """The active notebook's parameters changed from its paper preset (``{}``: the preset's runs)."""
    return dict(_context.changes)


def active_notebook() -> str | None:
    return _context.notebook


def training_forced() -> bool:
    return _context.train or os.environ.get(TRAIN_ENV, "") not in ("", "0")


def records_only() -> bool:
    """Whether runs may only be read (from a record or a finished results folder), never
    trained: what the report sets while it executes notebooks."""
    return os.environ.get(RECORDS_ONLY_ENV, "") not in ("", "0")


@contextmanager
def recording(notebook: str | None, train: bool = False, changes: dict | None = None) -> Iterator[None]:
    """Runs inside the block read and write records as ``notebook``'s paper preset would
    (with ``changes`` to its parameters, :func:`set_notebook`)."""
    saved = (_context.notebook, _context.train, _context.changes)
    _context.notebook, _context.train, _context.changes = notebook, train, dict(changes or {})
    try:
        yield
    finally:
        _context.notebook, _context.train, _context.changes = saved


# ---------------------------------------------------------------------- writing
def _exact(value: Any) -> Any:
    """JSON for numbers that must read back bit for bit (floats keep repr's 17 digits; NaN
    and infinities as null / strings are not JSON, so NaN becomes None)."""
    if isinstance(value, dict):
        return {str(k): _exact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_exact(v) for v in value]
    if isinstance(value, np.ndarray):
        return _exact(value.tolist())
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


def _compact(array: np.ndarray) -> Any:
    """A figure's array: 7 significant digits are plenty to draw it."""
    arr = np.asarray(array)
    if arr.dtype.kind == "f":
        return _exact(np.vectorize(lambda x: float(f"{x:.7g}"), otypes=[float])(arr)) if arr.size else []
    return _exact(arr)


def from_result(result: Any, notebook: str | None, notes: list[str] | None = None,
                derived: Mapping[str, float] | None = None, kept_rounds: set[int] | None = None,
                changes: Mapping[str, Any] | None = None) -> dict:
    """The record of a finished run (a :class:`pflcore.engine.RunResult`); ``changes``: the
    notebook's parameters changed from its paper preset (:func:`active_changes`)."""
    config = result.config
    summary = dict(result.summary)
    prov = summary.pop("provenance", None) or {"note": "run finished before pflcore recorded provenance"}
    summary.update(derived or {})
    clients = {k: _exact(np.asarray(v)) for k, v in result.clients.items() if k in CLIENT_ARRAYS}
    if result.clients.get("correct") is not None:
        clients["correct"] = pack_correct(result.clients["correct"])
    evals = {int(r) for r in np.asarray(result.eval_rounds).tolist()}
    keep = kept_rounds if kept_rounds is not None else (evals | {1})
    arrays: dict[str, dict[str, Any]] = {}
    for name in result.array_names():
        arrays[name] = {str(r): _compact(a) for r, a in sorted(result.arrays(name).items()) if r in keep}
    cfg = config.to_dict()
    for key in ("output_dir", "data_root"):  # machine-specific paths: relative to the project where possible
        if isinstance(cfg.get(key), str):
            cfg[key] = relative_path(cfg[key])
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "notebook": notebook,
            "fingerprint": config.fingerprint(), "seed": int(config.seed), "config": _exact(cfg),
            "provenance": _exact(prov), "summary": _exact(summary), "history": _exact(result.history),
            "clients": clients, "arrays": arrays, "notes": list(notes or []),
            "preset_changes": json.loads(json.dumps(_exact(dict(changes or {})), default=repr))}  # any value: JSON


def preset_changes_in_words(record: dict) -> str:
    """What the record's run changed from its notebook's paper preset: ``"none"``,
    ``"local_epochs = 1, ..."``, or ``"not recorded"`` (a record written before records kept it)."""
    changes = record.get("preset_changes")
    if changes is None:
        return "not recorded"
    return ", ".join(f"{name} = {json.dumps(value)}" for name, value in sorted(changes.items())) or "none"


def relative_path(path: str) -> str:
    """An absolute path under the project as a path relative to it (records hold no machine's paths)."""
    try:
        root = project_root()
        return os.path.relpath(Path(path).resolve(), root) if Path(path).is_absolute() else path
    except (FileNotFoundError, ValueError):
        return path


def write(record: dict, root: str | Path | None = None) -> Path:
    """Write ``record`` atomically to ``<root>/<notebook>/<name>.json`` (root: the project's
    ``reproductions/``); returns the path."""
    validate(record, Path("<new record>"))
    root = Path(root) if root is not None else records_root()
    if root is None:
        raise RecordError("records live in reproductions/ of a pflcore project, and the working directory is not "
                          "inside one; pass root=.")
    path = root / (record["notebook"] or "unfiled") / record_name(record)
    _dump(record, path)
    return path


def _dump(record: dict, path: Path) -> None:
    text = json.dumps(record, indent=None, separators=(",", ":"), sort_keys=False, allow_nan=False)
    atomic_write_bytes(path, (text + "\n").encode())


# ---------------------------------------------------------------------- derived arrays
#: How a derived array is kept: float32 or int32 (a figure needs no more), zlib-compressed, base64.
_KEPT_DTYPES = {"f": np.float32, "i": np.int32, "u": np.int32, "b": np.int32}


def encode_array(array: Any) -> dict:
    """A derived array as JSON: ``{"dtype", "shape", "data"}`` (float32 or int32 bytes,
    little-endian, zlib-compressed, base64)."""
    arr = np.asarray(array)
    if arr.dtype.kind not in _KEPT_DTYPES:
        raise RecordError(f"a record keeps arrays of numbers, not of {arr.dtype}.")
    arr = np.ascontiguousarray(arr, dtype=np.dtype(_KEPT_DTYPES[arr.dtype.kind]).newbyteorder("<"))
    return {"dtype": arr.dtype.name, "shape": list(arr.shape),
            "data": base64.b64encode(zlib.compress(arr.tobytes(), 9)).decode("ascii")}


def decode_array(entry: Mapping[str, Any]) -> np.ndarray:
    """The array :func:`encode_array` kept."""
    raw = zlib.decompress(base64.b64decode(entry["data"]))
    return np.frombuffer(raw, dtype=np.dtype(entry["dtype"]).newbyteorder("<")).reshape(entry["shape"]).copy()


def derived_arrays(result: Any, name: str, compute: Callable[[Any], Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Arrays a figure derives from a run's final models (FedFA appendix F.2: the t-SNE
    points and cosine pairs of the clients' features), kept in the run's record so that the
    figure is drawn again from the record alone. A result read from a record returns what
    it keeps under ``name``; otherwise ``compute(result)`` runs on the final state, and when
    this run has just written its record (a paper-preset run), the arrays join it. Either
    way the arrays come back as kept (float32 / int32), so a figure is the same both ways."""
    shipped = result.extras.get("record")
    if shipped is not None:
        kept = read(shipped).get("derived_arrays", {}).get(name)
        if kept is None:
            raise RecordError(f"the record {shipped} keeps no {name!r}; train the run (train = True in the notebook, "
                              f"{TRAIN_ENV}=1, or pflcore notebooks --train) to compute it from the final models.")
        return {key: decode_array(entry) for key, entry in kept.items()}
    encoded = {str(key): encode_array(value) for key, value in compute(result).items()}
    written = result.extras.get("written_record")
    if written is not None:
        record = read(written)
        record.setdefault("derived_arrays", {})[name] = encoded
        validate(record, Path(written))
        _dump(record, Path(written))
    return {key: decode_array(entry) for key, entry in encoded.items()}


# ---------------------------------------------------------------------- a run without its probe
def without_probe(record: dict, notebook: str, measures: tuple[str, ...], source: str) -> dict:
    """The record of ``record``'s run with its feature probe off (``feature_probe`` 0), filed
    under ``notebook``: a run hook never changes training (:mod:`pflcore.engine.hooks`), so
    that run's numbers are these without the probe's per-round ``measures`` (FedFA Figure 4's
    run is Table 2's #C=2 run plus the probe). Only the timings differ: they stay the probed
    run's, which its note says. ``source``: the probed record's path, for the note."""
    from .config import ExperimentConfig  # the config module builds on this one

    config = dict(record["config"], feature_probe=0)
    fingerprint = ExperimentConfig.from_dict(config).fingerprint()
    if fingerprint == record["fingerprint"]:
        raise RecordError(f"{source} is the record of a run without the feature probe; it is its own record.")
    history = [{k: v for k, v in h.items() if k not in measures} for h in record["history"]]
    note = (f"The run of {source} (the same config with the feature probe on) without the probe's per-round "
            "statistics: a run hook never changes training, so this config trains to these numbers; the "
            "timings are the probed run's.")
    return {**record, "notebook": notebook, "fingerprint": fingerprint, "config": config, "history": history,
            "notes": [*record.get("notes", []), note]}


# ---------------------------------------------------------------------- reading
def read(path: str | Path, root: str | Path | None = None) -> dict:
    """A record, checked against itself (:func:`validate`, :func:`check_name`); one sentence
    naming the file and what is wrong if it is not a record this pflcore reads. ``root``: the
    folder the file must lie in (default: its project, else its own folder); a link that
    points out of it, a pipe or a device is refused, and at most :data:`MAX_RECORD_BYTES` are read."""
    path = Path(path)
    record = parse(read_regular(path, root), path)
    validate(record, path, READABLE_VERSIONS)
    record = upgrade(record)
    check_name(record, path)
    return record


def upgrade(record: dict) -> dict:
    """A valid record of an earlier schema version in the current one: the one place where
    version 1's per-client accuracies (fractions) become percent, 100 times each value
    (exactly the numbers a run of this pflcore gives), and where a version-1 or -2 record gets
    the numeric path of version 3 with every field unknown (never guessed from its CPU model
    string). ``upgraded_from`` keeps the file's version; a current record is returned as it is."""
    version = record["schema_version"]
    if version == SCHEMA_VERSION:
        return record
    clients = record["clients"]
    if version == 1:
        clients = {k: (percent(v) if k in ACCURACY_ARRAYS else v) for k, v in clients.items()}
    provenance = {"cpu_vendor": numerics.UNKNOWN, **record["provenance"], "numeric_path": numerics.unknown_path()}
    return {**record, "schema_version": SCHEMA_VERSION, "upgraded_from": version, "clients": clients,
            "provenance": provenance}


def percent(values: Any) -> Any:
    """Fractions (a number, None for NaN, or nested lists of them) as percent, 100 times each."""
    if isinstance(values, list):
        return [percent(v) for v in values]
    return None if values is None else 100 * float(values)


def validate(record: Any, path: Path, versions: tuple[int, ...] = (SCHEMA_VERSION,)) -> None:
    """Refuse (:class:`RecordError`, one sentence naming ``path`` and the field) a record that is
    not one of ``versions`` or is not consistent with itself (:func:`check_record`)."""
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise RecordError(f"{path} is not a pflcore run record (no 'schema': {SCHEMA!r}).")
    version = record.get("schema_version")
    if isinstance(version, bool) or version not in versions:
        readable = " and ".join(str(v) for v in versions)
        raise RecordError(f"{path} is a run record of schema version {version!r}, and this pflcore reads "
                          f"version{'s' if len(versions) > 1 else ''} {readable}; rerun it or read it with the "
                          "pflcore that wrote it.")
    for key, kind in REQUIRED.items():
        if key not in record or not isinstance(record[key], kind) or isinstance(record[key], bool):
            raise RecordError(f"{path} is a damaged run record: field {key!r} is missing or not a "
                              f"{getattr(kind, '__name__', 'valid value')}.")
    for key in ("acc_mean", "acc_std", "acc_weighted", "best_acc_mean", "best_round", "rounds", "seconds"):
        if key not in record["summary"]:
            raise RecordError(f"{path} is a damaged run record: its summary has no {key!r}.")
    for key in ("final", "history", "eval_rounds"):
        if key not in record["clients"]:
            raise RecordError(f"{path} is a damaged run record: its clients have no {key!r}.")
    if not isinstance(record.get("preset_changes", {}), dict):  # optional: records before it have none
        raise RecordError(f"{path} is a damaged run record: its 'preset_changes' is not a mapping.")
    derived = record.get("derived_arrays", {})
    if not isinstance(derived, dict):
        raise RecordError(f"{path} is a damaged run record: its 'derived_arrays' is not a mapping.")
    for name, arrays in derived.items():  # optional: what figures derive from final models
        if not isinstance(arrays, dict) or not all(isinstance(a, dict) and {"dtype", "shape", "data"} <= set(a)
                                                   for a in arrays.values()):
            raise RecordError(f"{path} is a damaged run record: its derived arrays {name!r} are not "
                              "{dtype, shape, data} entries.")
    check_record(record, path)


# ---------------------------------------------------------------------- a record checked against itself
#: How far a mean, std or weighted mean recomputed from the per-client accuracies may lie from the
#: recorded one, in percentage points. The run computes it from correct counts (100 x the statistic of
#: the fractions), the check from the percentages: float64 rounding of either is below n x 2.3e-14 for
#: n clients (the shipped records differ by 6e-14 at most); a change a reader could see is 1e7 x larger.
TOLERANCE = 1e-9
MAX_DEPTH = 24  # a record nests 6 deep (arrays.<name>.<round>[client][value]); anything deeper is not one
MAX_INT = 2**53  # every integer a record holds (rounds, sizes, seeds, counts) is far smaller
_SAFE_FOLDER = re.compile(r"[A-Za-z0-9_.=-]+(/[A-Za-z0-9_.=-]+)*")


def read_regular(path: Path, root: str | Path | None = None) -> bytes:
    """The bytes of ``path`` once it is known to be a regular file inside ``root`` (default: its
    project, else its own folder); at most ``MAX_RECORD_BYTES + 1`` bytes are read, whatever size
    the system reports, and a pipe or device is never read at all."""
    import stat

    try:
        real = path.resolve(strict=True)
    except FileNotFoundError:
        raise RecordError(f"{path} does not exist, so it is no run record.") from None
    except (OSError, RuntimeError):
        raise RecordError(f"{path} cannot be resolved (a loop of symbolic links?), so it is not read as a run "
                          "record.") from None
    home = _record_home(path, root)
    if not real.is_relative_to(home):
        raise RecordError(f"{path} is a link to {real}, outside {home}; a run record is a file inside the project, "
                          "so it is not read.")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    chunks: list[bytes] = []
    try:
        fd = os.open(real, flags)
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                kind = ("a folder" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode)
                        else "a socket" if stat.S_ISSOCK(mode)
                        else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file")
                raise RecordError(f"{path} is {kind}, not a regular file, so it is not read as a run record.")
            left = MAX_RECORD_BYTES + 1
            while left > 0:
                chunk = os.read(fd, min(left, 2**20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
        finally:
            os.close(fd)
    except OSError as exc:
        raise RecordError(f"{path} cannot be read ({(exc.strerror or type(exc).__name__).lower()}).") from None
    data = b"".join(chunks)
    if len(data) > MAX_RECORD_BYTES:
        raise RecordError(f"{path} is larger than any pflcore run record ({MAX_RECORD_BYTES} bytes at most); it is "
                          "not one.")
    return data


def _record_home(path: Path, root: str | Path | None) -> Path:
    """The folder a record must really lie in: ``root``, else the project holding it, else its folder."""
    if root is not None:
        return Path(root).resolve()
    try:
        return project_root(path.absolute().parent)
    except FileNotFoundError:
        return path.absolute().parent.resolve()


class _NotFinite:
    """NaN or Infinity in a file (not JSON, never written by pflcore), kept until the field is named."""

    def __init__(self, name: str):
        self.name = name


def parse(data: bytes, path: Path) -> Any:
    """JSON of a record file; one sentence naming the file for anything that is not plain JSON."""
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_NotFinite)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise RecordError(f"{path} is not a pflcore run record (not valid JSON).") from None
    except RecursionError:
        raise RecordError(f"{path} is not a pflcore run record (its JSON nests deeper than any record does).") from None
    except (ValueError, OverflowError):  # an integer of thousands of digits
        raise RecordError(f"{path} is not a pflcore run record (it holds a number too long for one).") from None


def check_name(record: dict, path: Path) -> None:
    """The file's name and folder are those its content gives (:func:`record_name`, its notebook)."""
    expected = record_name(record)
    parent = path.absolute().parent
    if parent.name == REPLICATIONS:  # a replication record: <its record's name>.on-<numeric path>.json
        named = path.name.startswith(expected[:-len(".json")] + ".on-") and path.suffix == ".json"
        parent = parent.parent
    else:
        named = path.name == expected
    if not named:
        raise RecordError(f"{path} is a damaged run record: its file name does not match its content (its method, "
                          f"dataset, seed and fingerprint give {expected}).")
    folder = (record["notebook"] or "unfiled").split("/")
    if list(parent.parts[-len(folder):]) != folder:
        raise RecordError(f"{path} is a damaged run record: its field 'notebook' is {record['notebook']!r}, and the "
                          f"file lies outside that notebook's folder ({'/'.join(folder)}/).")


def _bad(path: Path, field: str, what: str) -> RecordError:
    return RecordError(f"{path} is a damaged run record: field {field!r} {what}.")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _walk(record: dict, path: Path) -> None:
    """Every number in the record finite and of a sane size, and nothing nested deeper than a record nests."""
    stack: list[tuple[Any, Any, Any, int]] = [(record, None, None, 0)]  # value, parent entry, key, depth
    while stack:
        entry = stack.pop()
        value, depth = entry[0], entry[3]
        if isinstance(value, (dict, list)):
            if depth >= MAX_DEPTH:
                raise _bad(path, _where(entry), f"nests deeper than any run record ({MAX_DEPTH} levels)")
            if isinstance(value, list) and len(value) > 4 and _plain_numbers(value, MAX_DEPTH - depth):
                continue  # an array of numbers and nulls (most of a record), checked at once
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend((v, entry, k, depth + 1) for k, v in items
                         if isinstance(v, (dict, list, float, int, _NotFinite)))
        elif isinstance(value, _NotFinite):
            raise _bad(path, _where(entry), f"is {value.name}, which a record never holds (it writes a missing "
                                            "number as null)")
        elif isinstance(value, float) and not math.isfinite(value):
            raise _bad(path, _where(entry), f"is {value}, not a finite number")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise _bad(path, _where(entry), "is an integer larger than any a run record holds")


def _plain_numbers(value: list, depth_left: int) -> bool:
    """Whether ``value`` is a regular nested list of finite numbers of a sane size and nulls."""
    try:
        with np.errstate(all="ignore"):
            arr = np.array(value, dtype=np.float64)  # null -> NaN; a string, mapping or ragged list refuses
    except (ValueError, TypeError, OverflowError):
        return False
    known = arr[~np.isnan(arr)]
    return arr.ndim < depth_left and not np.isinf(known).any() and not (np.abs(known) > MAX_INT).any()


def _where(entry: tuple) -> str:
    """A walked value's place: ``summary.acc_mean``, ``clients.final[3]``."""
    parts = []
    while entry[1] is not None:
        key = entry[2]
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
        entry = entry[1]
    return "".join(reversed(parts)).lstrip(".") or "the record"


def check_record(record: dict, path: Path) -> None:
    """A record (of any readable version, its required fields present) checked against itself:
    its fingerprint recomputed from its config, its summary from its history and per-client
    arrays, every accuracy a finite number in [0, 100], best never below final, times positive.
    The first check that fails is one :class:`RecordError` sentence naming the file and field."""
    _walk(record, path)
    _check_fields(record, path)
    config = _check_fingerprint(record, path)
    for key in ACCURACY_ARRAYS:  # numbers before version 1's are made percent
        if key in record["clients"] and (not isinstance(record["clients"][key], list)
                                         or _regular(record["clients"][key]) is None):
            raise _bad(path, f"clients.{key}", "is not a list of per-client accuracies")
    current = upgrade(record)
    _check_clients(current, path)
    _check_summary(current, path, config)


def _check_fields(record: dict, path: Path) -> None:
    """The types of the fields the report, the notebooks and :func:`describe` use."""
    if not re.fullmatch(r"[0-9a-f]{6,64}", record["fingerprint"]):
        raise _bad(path, "fingerprint", f"is {shorten(record['fingerprint'])!r}, not a config's fingerprint")
    if record["seed"] < 0:
        raise _bad(path, "seed", f"is {record['seed']}, and a seed is a number 0 or above")
    notebook = record["notebook"]
    if notebook is not None and (not _SAFE_FOLDER.fullmatch(notebook) or ".." in notebook.split("/")):
        raise _bad(path, "notebook", f"is {shorten(notebook)!r}, not a notebook's name (paper/notebook)")
    for i, note in enumerate(record["notes"]):
        if not isinstance(note, str):
            raise _bad(path, f"notes[{i}]", "is not text")
    prov = record["provenance"]
    for key in ("git_commit", "started", "finished", "cpu_model", "device", "gpu", "cuda", "pflcore_version",
                "python", "torch", "numpy", "platform", "note"):
        if prov.get(key) is not None and not isinstance(prov[key], str):
            raise _bad(path, f"provenance.{key}", "is not text")
    if prov.get("git_dirty") is not None and not isinstance(prov["git_dirty"], bool):
        raise _bad(path, "provenance.git_dirty", "is not true, false or null")
    if prov.get("cpu_count") is not None and not (_is_int(prov["cpu_count"]) and prov["cpu_count"] > 0):
        raise _bad(path, "provenance.cpu_count", "is not a number of cores")
    if prov.get("workers") is not None and not isinstance(prov["workers"], (str, int)):
        raise _bad(path, "provenance.workers", "is not a workers setting")
    for key in ("seconds", "seconds_per_round"):
        if prov.get(key) is not None and not (_is_number(prov[key]) and prov[key] >= 0):
            raise _bad(path, f"provenance.{key}", "is not a number of seconds")
    stretches = prov.get("stretches", [])
    if not isinstance(stretches, list) or not all(isinstance(s, dict) for s in stretches):
        raise _bad(path, "provenance.stretches", "is not a list of stretches of rounds")
    for i, s in enumerate(stretches):
        for key in ("load_at_start", "load_at_end", "seconds"):
            if s.get(key) is not None and not _is_number(s[key]):
                raise _bad(path, f"provenance.stretches[{i}].{key}", "is not a number")
    for name, by_round in record["arrays"].items():
        if not isinstance(by_round, dict):
            raise _bad(path, f"arrays.{name}", "is not a mapping of rounds to arrays")
        for r, value in by_round.items():
            if not r.isdigit() or _regular(value) is None:
                raise _bad(path, f"arrays.{name}.{shorten(r)}", "is not a round's array of numbers")
    for name, arrays in record.get("derived_arrays", {}).items():
        for key, entry in arrays.items():
            if not _decodable(entry):
                raise _bad(path, f"derived_arrays.{name}.{key}", "is not an array pflcore encoded")
    if record["summary"].get("scored_from") is not None and not isinstance(record["summary"]["scored_from"], dict):
        raise _bad(path, "summary.scored_from", "is not a mapping")
    for key in ("method", "dataset", "status"):
        if record["summary"].get(key) is not None and not isinstance(record["summary"][key], str):
            raise _bad(path, f"summary.{key}", "is not text")
    if "accuracy_unit" in record["summary"] and record["summary"]["accuracy_unit"] != "percent":
        raise _bad(path, "summary.accuracy_unit", "is not 'percent', the unit of every accuracy in a record")
    for key in ("method", "dataset"):  # the record's name and every page use them
        if not isinstance(record["config"].get(key), str):
            raise _bad(path, f"config.{key}", "is missing or not text")


def shorten(text: Any, limit: int = 80) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "..."


def _regular(value: Any) -> tuple | None:
    """The shape of ``value`` (a number, null, or a regular nested list of them), or None."""
    if not isinstance(value, list):
        return () if value is None or _is_number(value) else None
    shapes = {_regular(v) for v in value}
    if len(shapes) > 1 or None in shapes:
        return None
    return (len(value), *(shapes.pop() if shapes else ()))


def _decodable(entry: Any) -> bool:
    """Whether ``entry`` is a derived array :func:`decode_array` reads: a known dtype, a shape,
    and data that decompresses to exactly that many bytes (read no further than that)."""
    import binascii

    if not (isinstance(entry, dict) and entry.get("dtype") in ("float32", "int32")
            and isinstance(entry.get("shape"), list) and all(_is_int(n) and n >= 0 for n in entry["shape"])
            and isinstance(entry.get("data"), str)):
        return False
    size = 4 * math.prod(entry["shape"])
    if size > MAX_RECORD_BYTES * 64:
        return False
    try:
        inflate = zlib.decompressobj()
        raw = inflate.decompress(base64.b64decode(entry["data"], validate=True), size + 1)
    except (binascii.Error, ValueError, zlib.error):
        return False
    return len(raw) == size and inflate.eof


_VALID_CONFIGS: dict[str, str | None] = {}  # a config (without its seed) -> why it is refused, None: valid


def _check_fingerprint(record: dict, path: Path) -> Any:
    """The fingerprint and the seed are those of the config the record holds, a config this
    pflcore validates (where it ran is no part of that: it is checked as if on this machine's CPU)."""
    from .config import ExperimentConfig  # the config module builds on this one

    values = dict(record["config"], device="cpu", workers=0)  # neither enters the fingerprint
    data_root = values.get("data_root")
    if isinstance(data_root, str) and not Path(data_root).expanduser().is_absolute():
        project = next((p.parent for p in path.resolve().parents if p.name == RECORDS_FOLDER), None)
        if project is not None:  # written relative to the project (relative_path), read so wherever we run
            values["data_root"] = str(project / data_root)
    if isinstance(values.get("data_root"), str) and not Path(values["data_root"]).expanduser().is_dir():
        # The data the record was trained on is not on this machine (FedCP's MNIST partition lives
        # beside the project): its fingerprint hashes that folder's config.json, so it cannot be
        # recomputed here; every other check still holds, and the record is read as evidence.
        return _check_fields_only(record, values, path)
    try:
        key = json.dumps({k: v for k, v in values.items() if k != "seed"}, sort_keys=True)
    except (TypeError, ValueError):
        raise _bad(path, "config", "is not a config this pflcore runs") from None
    if key not in _VALID_CONFIGS:  # validating builds the model on the meta device: once per setting
        try:
            config = ExperimentConfig(**values)
            config.validate(machine=False)  # a record made on a bigger machine is still evidence here
            _VALID_CONFIGS[key] = None
        except ValueError as exc:  # ConfigError: a sentence naming the field
            _VALID_CONFIGS[key] = shorten(str(exc).rstrip("."), 300)
        except Exception:
            _VALID_CONFIGS[key] = "it cannot be built"
        if len(_VALID_CONFIGS) > 4096:
            _VALID_CONFIGS.pop(next(iter(_VALID_CONFIGS)))
    if _VALID_CONFIGS[key] is not None:
        raise _bad(path, "config", f"is not a config this pflcore runs ({_VALID_CONFIGS[key]})")
    try:
        config = ExperimentConfig(**values)
        fingerprint = config.fingerprint()
    except Exception:
        raise _bad(path, "config", "is not a config this pflcore runs") from None
    if fingerprint != record["fingerprint"]:
        raise _bad(path, "fingerprint", f"is {record['fingerprint']}, and the config it holds gives {fingerprint}, so "
                                        "the record is not of that config")
    if config.seed != record["seed"] or not _is_int(config.seed):
        raise _bad(path, "seed", f"is {record['seed']}, and its config's seed is {shorten(config.seed)}")
    return config


def _check_fields_only(record: dict, values: dict, path: Path) -> Any:
    """The checks of :func:`_check_fingerprint` that need no data: every field against its spec
    and the method's parameters against the method's, and the seed."""
    from .algorithms import ALGORITHMS
    from .config import FIELDS, ExperimentConfig
    from .spec import first_refusal

    values = dict(values, data_root=None)  # the one field that names this machine's folders
    try:
        refusal = first_refusal(FIELDS, values)
        if refusal is None:
            ALGORITHMS[values["method"]].check_params(values["method_params"])
        config = ExperimentConfig(**values)
    except (ValueError, KeyError, TypeError) as exc:
        raise _bad(path, "config", f"is not a config this pflcore runs ({shorten(str(exc).rstrip('.'), 300)})") from None
    if refusal is not None:
        raise _bad(path, "config", f"is not a config this pflcore runs ({refusal.sentence().rstrip('.')})")
    if config.seed != record["seed"] or not _is_int(config.seed):
        raise _bad(path, "seed", f"is {record['seed']}, and its config's seed is {shorten(config.seed)}")
    return config


def _accuracies(values: Any, field: str, path: Path, n: int | None = None) -> np.ndarray:
    """A per-client list of accuracies (percent, null for none) as float64, or one sentence."""
    if not isinstance(values, list) or not all(v is None or _is_number(v) for v in values):
        raise _bad(path, field, "is not a list of per-client accuracies")
    if n is not None and len(values) != n:
        raise _bad(path, field, f"has {len(values)} clients, and the record has {n}")
    arr = floats(values) if values else np.zeros(0)
    outside = np.flatnonzero((arr < 0) | (arr > 100))
    if outside.size:
        raise _bad(path, f"{field}[{outside[0]}]", f"is {arr[outside[0]]:g}, outside 0 to 100 percent")
    return arr


def _counts(values: Any, field: str, path: Path, n: int) -> np.ndarray:
    if not isinstance(values, list) or not all(_is_int(v) and v >= 0 for v in values):
        raise _bad(path, field, "is not a list of per-client sample counts")
    if len(values) != n:
        raise _bad(path, field, f"has {len(values)} clients, and the record has {n}")
    return np.asarray(values, dtype=np.int64)


def _check_clients(record: dict, path: Path) -> None:
    """The per-client arrays: types, lengths, ranges; final and best are rows of the history."""
    clients = record["clients"]
    for key in ("best", "test_sizes", "train_sizes"):  # every record pflcore writes has them
        if key not in clients:
            raise _bad(path, f"clients.{key}", "is missing")
    final = _accuracies(clients["final"], "clients.final", path)
    n = len(final)
    if n == 0:
        raise _bad(path, "clients.final", "holds no client")
    rows = clients["history"]
    if not isinstance(rows, list) or not rows:
        raise _bad(path, "clients.history", "is not a list of evaluated rounds")
    history = np.stack([_accuracies(row, f"clients.history[{i}]", path, n) for i, row in enumerate(rows)])
    rounds = clients["eval_rounds"]
    if not isinstance(rounds, list) or not all(_is_int(r) for r in rounds) or len(rounds) != len(rows):
        raise _bad(path, "clients.eval_rounds", f"is not a list of the {len(rows)} evaluated rounds")
    if any(b <= a for a, b in zip(rounds, rounds[1:])) or rounds[0] < 1:
        raise _bad(path, "clients.eval_rounds", "is not a rising list of round numbers")
    if not np.array_equal(history[-1], final, equal_nan=True):
        raise _bad(path, "clients.final", "is not the last evaluated round of clients.history")
    if "best" in clients:
        _accuracies(clients["best"], "clients.best", path, n)
    for key in ("train_sizes", "test_sizes"):
        if key in clients:
            _counts(clients[key], f"clients.{key}", path, n)
    if "new_final" in clients:
        _accuracies(clients["new_final"], "clients.new_final", path)
    if "correct" in clients:
        _check_correct(record, final, path)
    if record["summary"].get("num_clients") is not None and record["summary"]["num_clients"] != n:
        raise _bad(path, "summary.num_clients", f"is {shorten(record['summary']['num_clients'])}, and its clients "
                                                f"arrays hold {n}")


def _check_correct(record: dict, final: np.ndarray, path: Path) -> None:
    """The per-sample hits give each client's final accuracy."""
    import binascii

    clients = record["clients"]
    if not isinstance(clients["correct"], str) or "test_sizes" not in clients:
        raise _bad(path, "clients.correct", "is not the packed per-sample hits of clients with test sizes")
    try:
        packed = np.frombuffer(base64.b64decode(clients["correct"], validate=True), dtype=np.uint8)
    except (binascii.Error, ValueError):
        raise _bad(path, "clients.correct", "is not base64 text") from None
    sizes = np.asarray(clients["test_sizes"], dtype=np.int64)
    scored = ~np.isnan(final)
    total = int(sizes[scored].sum())
    if packed.size != (total + 7) // 8:
        raise _bad(path, "clients.correct", f"holds {8 * packed.size} bits, and the scored clients have {total} "
                                            "test samples")
    running = np.concatenate([[0], np.cumsum(np.unpackbits(packed)[:total], dtype=np.int64)])
    ends = np.cumsum(sizes[scored])
    counts = running[ends] - running[ends - sizes[scored]]
    with np.errstate(invalid="ignore", divide="ignore"):
        recomputed = 100 * (counts / sizes[scored])
    wrong = np.flatnonzero(~(np.abs(recomputed - final[scored]) <= TOLERANCE))
    if wrong.size:
        cid = int(np.flatnonzero(scored)[wrong[0]])
        raise _bad(path, f"clients.final[{cid}]", f"is {final[cid]:.6g}, and its per-sample hits give "
                                                  f"{recomputed[wrong[0]]:.6g}")


def _number(summary: dict, key: str, path: Path, low: float = 0.0, high: float = 100.0) -> float:
    value = summary.get(key)
    if not _is_number(value):
        raise _bad(path, f"summary.{key}", f"is {shorten(json.dumps(value))}, not a number")
    if not low <= value <= high:
        raise _bad(path, f"summary.{key}", f"is {value:g}, outside {low:g} to {high:g}")
    return float(value)


def _check_summary(record: dict, path: Path, config: Any) -> None:
    """The summary and the per-round history against each other and against the per-client arrays."""
    summary, history, clients = record["summary"], record["history"], record["clients"]
    rounds = summary["rounds"]
    if not _is_int(rounds) or rounds != config.rounds:
        raise _bad(path, "summary.rounds", f"is {shorten(json.dumps(rounds))}, and its config runs "
                                           f"{config.rounds} rounds")
    if len(history) != rounds:
        raise _bad(path, "history", f"holds {len(history)} rounds, and the run had {rounds}")
    for key in ("method", "dataset"):
        if summary.get(key) is not None and summary[key] != getattr(config, key):
            raise _bad(path, f"summary.{key}", f"is {shorten(summary[key])!r}, and its config's is "
                                               f"{getattr(config, key)!r}")
    n = len(clients["final"])
    evaluated = []
    for i, h in enumerate(history):
        if not isinstance(h, dict):
            raise _bad(path, f"history[{i}]", "is not a round's metrics")
        if h.get("round") != i + 1 or not _is_int(h.get("round")):
            raise _bad(path, f"history[{i}].round", f"is {shorten(json.dumps(h.get('round')))}, not {i + 1}")
        for key in ("train_loss", "seconds"):
            if h.get(key) is not None and not _is_number(h[key]):
                raise _bad(path, f"history[{i}].{key}", "is not a number")
        if _is_number(h.get("seconds")) and h["seconds"] <= 0:
            raise _bad(path, f"history[{i}].seconds", f"is {h['seconds']:g}, and a round takes some time")
        participants = h.get("participants", [])
        if not isinstance(participants, list) or not all(_is_int(c) and 0 <= c < n for c in participants):
            raise _bad(path, f"history[{i}].participants", f"is not a list of client ids below {n}")
        if "acc_mean" in h:
            for key in ("acc_mean", "acc_std", "acc_weighted"):
                if not (_is_number(h.get(key)) and 0 <= h[key] <= 100):
                    raise _bad(path, f"history[{i}].{key}", f"is {shorten(json.dumps(h.get(key)))}, not a number "
                                                            "from 0 to 100")
            evaluated.append(i)
    if [i + 1 for i in evaluated] != clients["eval_rounds"]:
        raise _bad(path, "clients.eval_rounds", "is not the list of rounds whose history holds an accuracy")
    if evaluated[-1] != rounds - 1:
        raise _bad(path, "history", "has no accuracy at the last round")
    per_client = floats(clients["history"])
    sizes = np.asarray(clients["test_sizes"], dtype=np.float64) if "test_sizes" in clients else None
    for row, i in zip(per_client, evaluated):
        ok = ~np.isnan(row)
        if not ok.any():
            raise _bad(path, f"clients.history[{evaluated.index(i)}]", "holds no client's accuracy")
        recomputed = {"acc_mean": row[ok].mean(), "acc_std": row[ok].std()}
        if sizes is not None and sizes[ok].sum() > 0:
            recomputed["acc_weighted"] = np.average(row[ok], weights=sizes[ok])
        for key, value in recomputed.items():
            if not abs(history[i][key] - value) <= TOLERANCE:
                raise _bad(path, f"history[{i}].{key}", f"is {history[i][key]:.10g}, and its clients' accuracies "
                                                        f"give {value:.10g}")
    last = history[-1]
    for key in ("best_acc_weighted", "best_weighted_round", "final_train_loss"):  # every record pflcore writes has them
        if key not in summary:
            raise _bad(path, f"summary.{key}", "is missing")
    for key in ("acc_mean", "acc_std", "acc_weighted"):
        if _number(summary, key, path) != last[key]:
            raise _bad(path, f"summary.{key}", f"is {summary[key]:.10g}, and the last round's is {last[key]:.10g}")
    if _number(summary, "best_acc_mean", path) < summary["acc_mean"]:
        raise _bad(path, "summary.best_acc_mean", f"is {summary['best_acc_mean']:.6g}, below the final "
                                                  f"{summary['acc_mean']:.6g}")
    _check_best(summary, history, evaluated, clients, "acc_mean", "best_acc_mean", "best_round", path)
    if "best" in clients and not np.array_equal(floats(clients["best"]),
                                                per_client[clients["eval_rounds"].index(summary["best_round"])],
                                                equal_nan=True):
        raise _bad(path, "clients.best", "is not the clients' accuracies at the best round")
    if "best_acc_weighted" in summary or "best_weighted_round" in summary:
        _check_best(summary, history, evaluated, clients, "acc_weighted", "best_acc_weighted", "best_weighted_round",
                    path)
    if "final_train_loss" in summary and summary["final_train_loss"] != last.get("train_loss"):
        raise _bad(path, "summary.final_train_loss", "is not the last round's train loss")
    seconds = summary["seconds"]
    if not (_is_number(seconds) and seconds > 0):
        raise _bad(path, "summary.seconds", f"is {shorten(json.dumps(seconds))}, not a positive number of seconds")
    for key in ("global_test_acc", "new_acc_mean", "new_acc_std", "new_acc_weighted"):
        if key in summary:
            _number(summary, key, path)
    if "new_final" in clients and "new_acc_mean" in summary:
        new = floats(clients["new_final"]) if clients["new_final"] else np.zeros(0)
        ok = ~np.isnan(new)
        for key, value in (("new_acc_mean", new[ok].mean() if ok.any() else None),
                           ("new_acc_std", new[ok].std() if ok.any() else None)):
            if key in summary and (value is None or not abs(summary[key] - value) <= TOLERANCE):
                raise _bad(path, f"summary.{key}", "is not what the new clients' accuracies give")


def _check_best(summary: dict, history: list, evaluated: list[int], clients: dict, metric: str, best: str,
                at: str, path: Path) -> None:
    """``summary[best]`` is the highest ``metric`` over the evaluated rounds, first reached at ``summary[at]``."""
    values = [history[i][metric] for i in evaluated]
    top = int(np.argmax(values))
    if _number(summary, best, path) != values[top]:
        raise _bad(path, f"summary.{best}", f"is {summary[best]:.10g}, and the highest over the evaluated rounds "
                                            f"is {values[top]:.10g}")
    if summary.get(at) != clients["eval_rounds"][top] or not _is_int(summary.get(at)):
        raise _bad(path, f"summary.{at}", f"is {shorten(json.dumps(summary.get(at)))}, and the round of "
                                          f"{summary[best]:.6g} is {clients['eval_rounds'][top]}")


def floats(values: Any) -> np.ndarray:
    """A recorded list (or list of lists) of numbers as float64, None read as NaN."""
    return np.asarray([[np.nan if v is None else v for v in row] if isinstance(row, list)
                       else (np.nan if row is None else row) for row in values], dtype=np.float64)


def unrecorded(value: Any) -> Any:
    """None (how a record writes NaN) back to NaN, in a flat mapping's values."""
    return {k: (float("nan") if v is None else v) for k, v in value.items()}


def pack_correct(per_client: list[np.ndarray]) -> str:
    """Per-client boolean arrays (each client's test samples in order) as one base64 string of
    packed bits; the clients' test sizes split it again (:func:`unpack_correct`)."""
    bits = np.concatenate([np.asarray(a, dtype=bool) for a in per_client]) if per_client else np.zeros(0, bool)
    return base64.b64encode(np.packbits(bits).tobytes()).decode("ascii")


def unpack_correct(record: dict) -> np.ndarray | None:
    """All clients' per-sample hits of the final predictors, concatenated in client order
    (``None`` for a record without them)."""
    packed = record["clients"].get("correct")
    if not isinstance(packed, str):
        return None
    total = int(sum(size for cid, size in enumerate(record["clients"]["test_sizes"])
                    if record["clients"]["final"][cid] is not None))
    bits = np.unpackbits(np.frombuffer(base64.b64decode(packed), dtype=np.uint8))[:total]
    return bits.astype(bool)


def describe(record: dict, path: Path) -> str:
    """One line: where a number comes from."""
    p = record["provenance"]
    commit = (p.get("git_commit") or "unknown")[:10] + (" (uncommitted changes)" if p.get("git_dirty") else "")
    when = (p.get("finished") or "unknown date")[:10]
    where = f"{p.get('cpu_model', 'unknown CPU')}, {p.get('cpu_count', '?')} cores"
    if str(p.get("device", "cpu")).startswith("cuda"):
        where = f"{p.get('gpu', p.get('device'))}"
    seconds = record["summary"].get("seconds")
    spent = f"{seconds:,.0f} s of rounds" if isinstance(seconds, (int, float)) else "time unknown"
    try:
        shown = path.relative_to(Path.cwd())
    except ValueError:
        shown = path
    return (f"{record['config']['method']} seed {record['seed']}: from the record {shown} "
            f"(pflcore {commit}, {when}, {where}, {spent})")


def host_of(record: dict) -> str:
    """A short label of the machine and numeric path a record ran on, for tables that list the
    hosts of a row's seeds ("AMD EPYC, path unknown" for a record written before paths were kept)."""
    p = record["provenance"]
    path = p.get("numeric_path")
    if on_gpu(record):
        gpu = p.get("gpu") or (path or {}).get("gpu") or "GPU"
        if not numerics.is_known(path):
            return f"{gpu}, path unknown"
        return f"{gpu}, CUDA {path.get('cuda', '?')}, " + (reduced_precision(record) or "float32 throughout")
    model = p.get("cpu_model") or "unknown CPU"
    if not numerics.is_known(path):
        return f"{model}, path unknown"
    threads = (f", {path['training_threads']} training thread(s)" if "training_threads" in path else "")
    return (f"{model} (family {path['cpu_family']} model {path['cpu_model_number']}), "
            f"{path['torch_cpu_capability']}{threads}")


# ---------------------------------------------------------------------- pooling across numeric paths
def on_gpu(record: dict) -> bool:
    """Whether ``record``'s run trained on a GPU (its provenance's device or numeric path says so)."""
    p = record.get("provenance") or {}
    path = p.get("numeric_path")
    return str(p.get("device", "cpu")).startswith("cuda") or (isinstance(path, dict) and path.get("device") == "cuda")


def reduced_precision(record: dict) -> str | None:
    """Why ``record``'s run did not compute in float32 throughout, in words, or None where it did.

    Reduced: bfloat16 autocast (``precision: bfloat16``), on any device; on a GPU, TF32 allowed in
    matrix products or in cuDNN's convolutions (PyTorch allows the latter by default), or a GPU
    path that does not say (a record without the settings is never taken for float32)."""
    if (record.get("config") or {}).get("precision") not in (None, "float32"):
        return f"{record['config']['precision']} autocast"
    if not on_gpu(record):
        return None
    path = (record.get("provenance") or {}).get("numeric_path")
    if not numerics.is_known(path) or not all(isinstance(path.get(k), bool) for k in ("tf32_matmul", "tf32_cudnn")):
        return "TF32 settings not recorded"
    tf32 = [what for key, what in (("tf32_matmul", "matrix products"), ("tf32_cudnn", "cuDNN convolutions"))
            if path[key]]
    return f"TF32 in {' and '.join(tf32)}" if tf32 else None


def pools(record: dict) -> bool:
    """Whether ``record`` may enter a row's mean beside runs of other numeric paths: its run computed
    in float32 throughout (:func:`reduced_precision`), so it differs from a run of another path only
    in the order of its sums and in its kernels. A replication record never enters a row's mean."""
    return reduced_precision(record) is None


#: Fields of a setting's config that its runs may differ in: the seed, and ``precision``, which the
#: pooling rule judges itself (:func:`reduced_precision`). So may the config fields a fingerprint
#: leaves out (the device, the workers, names, files), but for ``data_root``: a PFLlib folder is data.
_NOT_THE_SETTING = ("seed", "precision")


def same_setting(a: dict, b: dict) -> bool:
    """Whether two records are runs of one setting: the same notebook, changes to its paper preset
    and config, but for the seed, the precision and where the work ran (:data:`_NOT_THE_SETTING`)."""
    return _setting(a) == _setting(b)


def _setting(record: dict) -> tuple:
    from .config import FIELDS

    config = {k: v for k, v in record["config"].items() if k not in _NOT_THE_SETTING
              and (k not in FIELDS or FIELDS[k].fingerprint or k == "data_root")}
    return (record.get("notebook"), json.dumps(record.get("preset_changes") or {}, sort_keys=True),
            json.dumps(config, sort_keys=True, default=str))


def counting_order(record: dict) -> tuple:
    """Which of one (row, seed)'s pooled records counts: the CPU one before a GPU one, then the
    earliest finished (a record without its finishing time last)."""
    finished = (record.get("provenance") or {}).get("finished")
    return (on_gpu(record), not isinstance(finished, str), finished if isinstance(finished, str) else "")


def pool(runs: list[dict]) -> tuple[dict | None, list[dict]]:
    """One (row, seed)'s records (one run of a setting on one or more numeric paths): the record
    that counts in the row's mean (None where none may: every one used reduced precision), and
    the others, each ``{"record", "why"}``: another path of the counted seed, or reduced precision."""
    pooled = sorted((r for r in runs if pools(r)), key=counting_order)
    counted = pooled[0] if pooled else None
    others = [{"record": r, "why": "another numeric path of a seed that counts"} for r in pooled[1:]]
    others += [{"record": r, "why": f"{reduced_precision(r)}: never pooled"} for r in runs if not pools(r)]
    return counted, others


def all_records(root: str | Path | None = None) -> list[tuple[Path, dict]]:
    """Every record under ``root`` (the project's ``reproductions/``), validated."""
    root = Path(root) if root is not None else records_root()
    if root is None or not root.is_dir():
        return []
    return [(p, read(p)) for p in sorted(root.rglob("*.json"))
            if p.name != "plan.json" and REPLICATIONS not in p.relative_to(root).parts]


def all_replications(root: str | Path | None = None) -> list[tuple[Path, dict]]:
    """Every replication record under ``root``: a recorded run retrained on another numeric
    path (:mod:`pflcore.replicate`), kept in ``replications/`` beside its record and never part
    of a row's mean."""
    root = Path(root) if root is not None else records_root()
    if root is None or not root.is_dir():
        return []
    found = []
    for p in sorted(root.rglob(f"{REPLICATIONS}/*.json")):
        record = read(p)
        if not isinstance(record.get("replication_of"), dict):
            raise RecordError(f"{p} is in a {REPLICATIONS}/ folder but is not a replication record "
                              "(no 'replication_of').")
        found.append((p, record))
    return found


# ---------------------------------------------------------------------- comparing
COMPARED = ("acc_mean", "acc_std", "acc_weighted", "best_acc_mean", "best_round", "best_acc_weighted",
            "final_train_loss")


def compare(result: Any, record: dict | str | Path, setting: list[dict] | None = None) -> dict:
    """A user's run beside the shipped record of the same config, with a verdict.

    Per summary metric: ours, the record's and the difference; ``identical`` when every
    per-round metric and every per-client accuracy is equal bit for bit; ``same_path`` whether
    the two ran on the same numeric path (:func:`pflcore.numerics.same_path`: None where the
    record predates it); the largest per-client difference of final accuracy; and ``spread``:
    the final and best means of the setting's recorded seeds (``setting``, by default the
    records of the same row found under the project's ``reproductions/``), against which a
    retrained run on another path is judged (:func:`comparison_line`)."""
    path = None if isinstance(record, dict) else Path(record)
    record = read(record) if not isinstance(record, dict) else upgrade(record)
    if result.config.fingerprint() != record["fingerprint"]:
        raise RecordError(f"the run's config (fingerprint {result.config.fingerprint()}) is not the record's "
                          f"({record['fingerprint']}); compare a run with the record of its own config.")
    if setting is None:
        setting = [r for _, r in setting_records(record, path)]
    return _comparison(result.summary, result.history, result.clients,
                       (result.summary.get("provenance") or {}).get("numeric_path"), record, setting)


def compare_records(ours: dict, record: dict, setting: list[dict]) -> dict:
    """:func:`compare` for two records of one (row, seed) made on different numeric paths (a GPU
    record beside the CPU one that counts; :func:`pool`): ``ours`` set beside ``record``, judged
    against ``setting``, the row's counted seeds."""
    clients = {k: floats(v) for k, v in ours["clients"].items() if k in ("final", "best", "history")}
    return _comparison(ours["summary"], ours["history"], clients, ours["provenance"].get("numeric_path"), record,
                       setting)


def compare_to_setting(ours: dict, setting: list[dict]) -> dict:
    """A record whose seed has no counted record (:func:`pool`) set beside its setting's counted
    seeds: shaped as :func:`compare`'s answer (``record``: the setting's mean), so that
    :func:`verdict` judges it by the prediction interval of those seeds."""
    spread = seed_spread(setting)
    rows = {key: {"ours": ours["summary"][key], "record": spread[key]["mean"],
                  "diff": float(ours["summary"][key]) - spread[key]["mean"]}
            for key in ("acc_mean", "best_acc_mean")
            if ours["summary"].get(key) is not None and spread[key]["mean"] is not None}
    return {"identical": False, "metrics": rows, "same_path": False, "spread": spread, "against": "setting",
            "ours_path": ours["provenance"].get("numeric_path"), "record_path": None}


def _comparison(summary: dict, history: list, clients: Mapping[str, Any], ours_path: Any, record: dict,
                setting: list[dict]) -> dict:
    rows = {}
    for key in COMPARED:
        ours, theirs = summary.get(key), record["summary"].get(key)
        if ours is None or theirs is None:
            continue
        rows[key] = {"ours": ours, "record": theirs, "diff": float(ours) - float(theirs)}
    same_history = _json_equal(_exact(_numbers_only(history)), _numbers_only(record["history"]))
    same_clients = all(np.array_equal(np.asarray(clients[k], dtype=float), floats(record["clients"][k]),
                                      equal_nan=True)
                       for k in ("final", "best", "history") if k in record["clients"] and k in clients)
    theirs_path = record["provenance"].get("numeric_path")
    client_diff = np.abs(np.asarray(clients["final"], dtype=float) - floats(record["clients"]["final"]))
    return {"identical": bool(same_history and same_clients), "metrics": rows,
            "same_path": numerics.same_path(ours_path, theirs_path), "ours_path": ours_path,
            "record_path": theirs_path,
            "largest_client_diff": float(np.nanmax(client_diff)) if np.isfinite(client_diff).any() else 0.0,
            "clients_differing": int(np.sum(client_diff > 0)), "clients": int(client_diff.size),
            "spread": seed_spread(setting)}


def setting_records(record: dict, path: Path | None = None, root: str | Path | None = None) -> list[tuple[Path, dict]]:
    """The records of ``record``'s setting that count in its row's mean: the same notebook, preset
    changes and config but for the seed and where the work ran (:func:`same_setting`), one per seed
    as the pooling rule picks it (:func:`pool`: reduced precision never counts), ``record`` itself
    included where it counts."""
    if root is None and path is not None:
        root = next((p for p in path.resolve().parents if p.name == RECORDS_FOLDER), None)
    by_seed: dict[int, list[tuple[Path, dict]]] = {}
    for p, r in all_records(root):
        if same_setting(r, record):
            by_seed.setdefault(r["seed"], []).append((p, r))
    out = []
    for found in by_seed.values():
        counted, _ = pool([r for _, r in found])
        out += [(p, r) for p, r in found if r is counted]
    return out


def seed_spread(setting: list[dict]) -> dict:
    """The mean and std (over seeds, ddof 1) of final and best client-mean accuracy over
    records of one setting (one record per seed)."""
    by_seed = {r["seed"]: r["summary"] for r in setting}
    out: dict[str, Any] = {"n": len(by_seed), "seeds": sorted(by_seed)}
    for key in ("acc_mean", "best_acc_mean"):
        values = np.asarray([float(s[key]) for s in by_seed.values() if s.get(key) is not None], dtype=float)
        out[key] = {"mean": float(values.mean()) if values.size else None,
                    "std": float(values.std(ddof=1)) if values.size > 1 else None}
    return out


#: A retrained run on another numeric path counts as seed noise when its final and best client
#: means both lie in the 95 % prediction interval of its setting's recorded seeds (mean +- t s
#: sqrt(1 + 1/n), s over seeds with ddof 1): where a further seed of the setting would land. Its
#: trajectory starts from the same seed, so it should land closer than that; with three seeds s
#: itself is uncertain (two degrees of freedom), which the t quantile accounts for.
PREDICTION = 0.95


def prediction_interval(spread: dict, key: str) -> tuple[float, float] | None:
    """Where a further seed of the setting would land (:data:`PREDICTION`), or None (n < 2)."""
    from scipy import stats

    n, entry = spread.get("n", 0), spread.get(key) or {}
    if n < 2 or entry.get("std") is None or entry.get("mean") is None:
        return None
    half = float(stats.t.ppf(0.5 + PREDICTION / 2, n - 1)) * entry["std"] * math.sqrt(1 + 1 / n)
    return entry["mean"] - half, entry["mean"] + half


def verdict(comparison: dict) -> str:
    """``identical``, ``defect`` (same numeric path, other numbers), ``within_spread`` or
    ``outside_spread`` (another or an unrecorded path, judged by the setting's prediction
    interval), or ``spread_unknown`` (another path, and fewer than two recorded seeds)."""
    if comparison["identical"]:
        return "identical"
    if comparison["same_path"]:
        return "defect"
    judged = []
    for key in ("acc_mean", "best_acc_mean"):
        interval = prediction_interval(comparison["spread"], key)
        if key not in comparison["metrics"] or interval is None:
            return "spread_unknown"
        judged.append(interval[0] <= comparison["metrics"][key]["ours"] <= interval[1])
    return "within_spread" if all(judged) else "outside_spread"


def comparison_line(comparison: dict, path: Path) -> str:
    """What a person should make of a run retrained beside the shipped record of its config."""
    kind = verdict(comparison)
    ours = numerics.in_words(comparison.get("ours_path"))
    theirs = numerics.in_words(comparison.get("record_path"))
    if kind == "identical":
        where = ("on the same numeric path" if comparison["same_path"]
                 else f"on {ours}, the record on {theirs}")
        return (f"same numbers as the record {path}, bit for bit (every round's metrics and every client's "
                f"accuracy), {where}")
    diffs = ", ".join(f"{k} {row['diff']:+.4g}" for k, row in comparison["metrics"].items() if row["diff"] != 0)
    diffs = diffs or "the summary agrees, some per-round or per-client numbers do not"
    clients = (f"largest per-client difference {comparison['largest_client_diff']:.2f} points "
               f"({comparison['clients_differing']} of {comparison['clients']} clients differ)")
    if kind == "defect":
        return (f"DEFECT: differs from the record {path} ({diffs}, ours minus the record's; {clients}) on the same "
                f"numeric path ({ours}), where the same code, config and seed must give the same bits; please "
                "report it as a pflcore issue with this line and the provenance blocks of both runs' summary.json.")
    spread = comparison["spread"]
    if comparison["same_path"] is None:
        head = (f"differs from the record {path} in its last bits, which is expected here: the record's numeric path "
                f"was not recorded, and this run's ({ours}) is evidently another")
    else:
        head = (f"differs from the record {path} in its last bits, which is expected here: this run's numeric path "
                f"({ours}) is not the record's ({theirs})")
    if kind == "spread_unknown":
        return (f"{head}; {diffs}; {clients}. Its setting has {spread['n']} recorded seed(s), too few to judge "
                "whether that is seed noise.")
    parts = []
    for key, name in (("acc_mean", "final mean"), ("best_acc_mean", "best mean")):
        row, std = comparison["metrics"][key], spread[key]["std"]
        low, high = prediction_interval(spread, key)
        parts.append(f"{name} {row['ours']:.2f} against the record's {row['record']:.2f} ({row['diff']:+.3f}, "
                     f"{abs(row['diff']) / std if std else float('inf'):.2f} of the std {std:.2f} over its "
                     f"setting's {spread['n']} seeds; a further seed would land in {low:.2f}-{high:.2f})")
    if kind == "within_spread":
        end = "within the seed spread: the evidence holds on this machine."
    else:
        end = (f"outside the seed spread (beyond the {PREDICTION:.0%} prediction interval of its setting's seeds): "
               "the evidence does not hold on this machine; please report it as a pflcore issue with this line.")
    return f"{head}; {'; '.join(parts)}; {clients}: {end}"


def _numbers_only(history: list[dict]) -> list[dict]:
    """The per-round metrics without timings (seconds differ between any two runs)."""
    return [{k: v for k, v in h.items() if k != "seconds"} for h in history]


def _json_equal(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def folder_size(root: str | Path | None = None) -> int:
    root = Path(root) if root is not None else records_root()
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root and root.is_dir() else 0
