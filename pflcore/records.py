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
from .record_schema import (  # the schema's names, read as records.<name> across pflcore
    ACCURACY_ARRAYS,
    CLIENT_ARRAYS,
    MAX_RECORD_BYTES,
    READABLE_VERSIONS,
    RECORDS_FOLDER,
    REPLICATIONS,
    SCHEMA,
    SCHEMA_VERSION,
    RecordError,
    check_name,
    floats,
    parse,
    read_regular,
    record_name,
    shorten,
    upgrade,
    validate,
)

TRAIN_ENV = "PFLCORE_TRAIN"  # "1": train even where a record exists
RECORDS_ONLY_ENV = "PFLCORE_RECORDS_ONLY"  # "1": a run without a record is refused, never trained (the report)


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
    """A record, checked against itself (:mod:`pflcore.record_schema`); one sentence
    naming the file and what is wrong if it is not a record this pflcore reads. ``root``: the
    folder the file must lie in (default: its project, else its own folder); a link that
    points out of it, a pipe or a device is refused, and at most :data:`MAX_RECORD_BYTES` are read."""
    path = Path(path)
    record = parse(read_regular(path, root), path)
    validate(record, path, READABLE_VERSIONS)
    record = upgrade(record)
    check_name(record, path)
    return record


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
