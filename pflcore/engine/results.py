"""One directory per run, written atomically, never silently overwritten.

Layout of ``<output_dir>/<run name>/``:

- ``config.json``     the validated config (and its fingerprint)
- ``metrics.json``    one record per round (participants, train loss, evaluation)
- ``clients.npz``     per-client accuracies: ``final``, ``best`` (at the best round),
                      ``history`` (evaluations x clients), ``eval_rounds``, sizes
- ``summary.json``    written last: its presence means the run finished
- ``checkpoint.pt``   while running (every ``checkpoint_every`` rounds); removed at the end
- ``arrays/``         per-round arrays a method reports (e.g. FedPAC's weight matrices)
"""
from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import ExperimentConfig


class ResultsConflictError(FileExistsError):
    """The results directory holds a different experiment."""


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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


@dataclass
class RunResult:
    """What a run produced; also what :func:`RunResult.load` reads back from disk."""

    config: ExperimentConfig
    summary: dict
    history: list[dict]
    client_acc: np.ndarray
    eval_rounds: np.ndarray
    acc_history: np.ndarray
    path: Path | None = None
    extras: dict = field(default_factory=dict)

    @property
    def acc_mean(self) -> float:
        return self.summary["acc_mean"]

    def curve(self, key: str = "acc_mean") -> tuple[np.ndarray, np.ndarray]:
        """(rounds, values) of a per-round metric; evaluation metrics only where evaluated."""
        rows = [(h["round"], h[key]) for h in self.history if key in h]
        if not rows:
            return np.zeros(0, dtype=int), np.zeros(0)
        r, v = zip(*rows)
        return np.asarray(r), np.asarray(v, dtype=float)

    def arrays(self, name: str) -> dict[int, np.ndarray]:
        """A per-round array the method reported (e.g. ``"weights"``), keyed by round."""
        if self.path is None:
            return {}
        out = {}
        for f in sorted((self.path / "arrays").glob("round_*.npz")):
            with np.load(f) as z:
                if name in z:
                    out[int(f.stem.split("_")[1])] = z[name]
        return out

    @classmethod
    def load(cls, path: str | Path) -> "RunResult":
        path = Path(path)
        summary = json.loads((path / "summary.json").read_text())
        config = ExperimentConfig.from_dict(json.loads((path / "config.json").read_text())["config"])
        history = json.loads((path / "metrics.json").read_text())
        with np.load(path / "clients.npz") as z:
            return cls(config, summary, history, z["final"], z["eval_rounds"], z["history"], path)


class RunDirectory:
    """The on-disk home of one run: decides skip / resume / start, and writes atomically."""

    def __init__(self, config: ExperimentConfig, overwrite: bool = False):
        self.config = config
        self.path = Path(config.output_dir) / config.run_name()
        self.fingerprint = config.fingerprint()
        config_file = self.path / "config.json"
        if overwrite and self.path.exists():
            shutil.rmtree(self.path)
        elif config_file.exists():
            recorded = json.loads(config_file.read_text()).get("fingerprint")
            if recorded != self.fingerprint:
                raise ResultsConflictError(
                    f"results directory {self.path} holds a different experiment (fingerprint {recorded}, "
                    f"this config {self.fingerprint}); choose another name or output_dir, or pass overwrite=True.")
        elif self.path.exists() and any(self.path.iterdir()):
            raise ResultsConflictError(f"results directory {self.path} exists but is not a pflcore run; "
                                       "choose another name or output_dir.")

        if self.path.exists():  # remove temporary files of a write interrupted by a kill
            for stale in self.path.rglob(".*.tmp"):
                stale.unlink(missing_ok=True)

    @property
    def finished(self) -> bool:
        return (self.path / "summary.json").exists()

    @property
    def checkpoint_path(self) -> Path:
        return self.path / "checkpoint.pt"

    def start(self) -> None:
        atomic_write_json(self.path / "config.json",
                          {"fingerprint": self.fingerprint, "config": self.config.to_dict()})

    def load_checkpoint(self) -> dict | None:
        if not self.checkpoint_path.exists():
            return None
        ckpt = torch.load(self.checkpoint_path, weights_only=True)
        return ckpt if ckpt.get("fingerprint") == self.fingerprint else None

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

    def finish(self, result: RunResult, client_arrays: dict[str, np.ndarray]) -> None:
        self.write_progress(result.history)
        atomic_save_npz(self.path / "clients.npz", **client_arrays)
        atomic_write_json(self.path / "summary.json", result.summary)
        self.checkpoint_path.unlink(missing_ok=True)
