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

from . import __version__
from .atomic import atomic_write_bytes
from .project import project_root

SCHEMA = "pflcore-run-record"
SCHEMA_VERSION = 2  # 2: per-client accuracies in percent (1: fractions)
READABLE_VERSIONS = (1, 2)
RECORDS_FOLDER = "reproductions"
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


# ---------------------------------------------------------------------- provenance
def git_state(start: Path | None = None) -> dict:
    """The git commit of the code that runs (the checkout pflcore is imported from) and
    whether that code (the package's tracked files) has uncommitted changes; ``None`` where
    there is no git. Only the package is looked at: notebooks pass through a git filter
    (nbstripout) that would cost a process per notebook, and a run's config is in its record."""
    where = Path(start or Path(__file__).resolve().parent)
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "."], cwd=where,
                                capture_output=True, text=True, timeout=10)
        dirty = bool(status.stdout.strip()) if status.returncode == 0 and commit else None
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
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
    """Where and with what a run executes (the provenance fields besides its timing)."""
    import torch

    env = {"pflcore_version": __version__, **git_state(), "python": platform.python_version(),
           "torch": torch.__version__, "numpy": np.__version__, "device": str(device),
           "cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "workers": workers,
           "platform": platform.platform()}
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


def provenance(config: Any, stretches: list[dict], seconds: float, rounds: int) -> dict:
    """The provenance block of a finished run's ``summary.json`` and of its record."""
    env = environment(config.device, config.workers)
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
def read(path: str | Path) -> dict:
    """A record, validated; one sentence naming the file if it is not a record this pflcore reads."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_RECORD_BYTES:
            raise RecordError(f"{path} is {path.stat().st_size} bytes, larger than any pflcore run record "
                              f"({MAX_RECORD_BYTES} at most); it is not one.")
        record = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise RecordError(f"{path} is not a pflcore run record (not valid JSON).") from None
    validate(record, path, READABLE_VERSIONS)
    return upgrade(record)


def upgrade(record: dict) -> dict:
    """A valid record of an earlier schema version in the current one: the one place where
    version 1's per-client accuracies (fractions) become percent, 100 times each value
    (exactly the numbers a run of this pflcore gives). ``upgraded_from`` keeps the file's
    version; a current record is returned as it is."""
    if record["schema_version"] == SCHEMA_VERSION:
        return record
    clients = {k: (percent(v) if k in ACCURACY_ARRAYS else v) for k, v in record["clients"].items()}
    return {**record, "schema_version": SCHEMA_VERSION, "upgraded_from": record["schema_version"],
            "clients": clients}


def percent(values: Any) -> Any:
    """Fractions (a number, None for NaN, or nested lists of them) as percent, 100 times each."""
    if isinstance(values, list):
        return [percent(v) for v in values]
    return None if values is None else 100 * float(values)


def validate(record: Any, path: Path, versions: tuple[int, ...] = (SCHEMA_VERSION,)) -> None:
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise RecordError(f"{path} is not a pflcore run record (no 'schema': {SCHEMA!r}).")
    version = record.get("schema_version")
    if version not in versions:
        readable = " and ".join(str(v) for v in versions)
        raise RecordError(f"{path} is a run record of schema version {version!r}, and this pflcore reads "
                          f"version{'s' if len(versions) > 1 else ''} {readable}; rerun it or read it with the "
                          "pflcore that wrote it.")
    for key, kind in REQUIRED.items():
        if not isinstance(record.get(key), kind):
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
    for name, arrays in record.get("derived_arrays", {}).items():  # optional: what figures derive from final models
        if not isinstance(arrays, dict) or not all(isinstance(a, dict) and {"dtype", "shape", "data"} <= set(a)
                                                   for a in arrays.values()):
            raise RecordError(f"{path} is a damaged run record: its derived arrays {name!r} are not "
                              "{dtype, shape, data} entries.")


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


def all_records(root: str | Path | None = None) -> list[tuple[Path, dict]]:
    """Every record under ``root`` (the project's ``reproductions/``), validated."""
    root = Path(root) if root is not None else records_root()
    if root is None or not root.is_dir():
        return []
    return [(p, read(p)) for p in sorted(root.rglob("*.json")) if p.name != "plan.json"]


# ---------------------------------------------------------------------- comparing
COMPARED = ("acc_mean", "acc_std", "acc_weighted", "best_acc_mean", "best_round", "best_acc_weighted",
            "final_train_loss")


def compare(result: Any, record: dict | str | Path) -> dict:
    """A user's run beside the shipped record of the same config: per summary metric ours,
    the record's and the difference; ``identical`` when every per-round metric and every
    per-client accuracy is equal bit for bit."""
    record = read(record) if not isinstance(record, dict) else upgrade(record)
    if result.config.fingerprint() != record["fingerprint"]:
        raise RecordError(f"the run's config (fingerprint {result.config.fingerprint()}) is not the record's "
                          f"({record['fingerprint']}); compare a run with the record of its own config.")
    rows = {}
    for key in COMPARED:
        ours, theirs = result.summary.get(key), record["summary"].get(key)
        if ours is None or theirs is None:
            continue
        rows[key] = {"ours": ours, "record": theirs, "diff": float(ours) - float(theirs)}
    same_history = _json_equal(_exact(_numbers_only(result.history)), _numbers_only(record["history"]))
    same_clients = all(np.array_equal(np.asarray(result.clients[k], dtype=float), floats(record["clients"][k]),
                                      equal_nan=True)
                       for k in ("final", "best", "history") if k in record["clients"] and k in result.clients)
    return {"identical": bool(same_history and same_clients), "metrics": rows}


def comparison_line(comparison: dict, path: Path) -> str:
    """One line for a person: a run against the shipped record of its config."""
    if comparison["identical"]:
        return f"same numbers as the record {path}, bit for bit (every round's metrics and every client's accuracy)"
    diffs = ", ".join(f"{k} {row['diff']:+.4g}" for k, row in comparison["metrics"].items() if row["diff"] != 0)
    return (f"differs from the record {path}: {diffs or 'the summary agrees, some per-round or per-client numbers do not'}"
            " (ours minus the record's)")


def _numbers_only(history: list[dict]) -> list[dict]:
    """The per-round metrics without timings (seconds differ between any two runs)."""
    return [{k: v for k, v in h.items() if k != "seconds"} for h in history]


def _json_equal(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def folder_size(root: str | Path | None = None) -> int:
    root = Path(root) if root is not None else records_root()
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root and root.is_dir() else 0
