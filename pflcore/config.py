"""Experiment configuration: one dataclass, validated before any work starts.

A bad value gets one sentence naming the field, the value and what is allowed
(:class:`ConfigError`). Configs round-trip through plain dicts / YAML so that a results
directory records exactly what ran.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping


class ConfigError(ValueError):
    """A configuration value is not allowed; the message is one sentence."""


def _default_partition() -> dict:
    return {"kind": "dominant", "s": 0.2, "samples_per_client": 600}


@dataclass
class ExperimentConfig:
    """Everything that determines a run. Defaults follow FedPAC's FMNIST setting (B.2)."""

    method: str = "fedavg"
    method_params: dict = field(default_factory=dict)
    dataset: str = "fmnist"
    data_root: str | None = None
    model: str = "fedpac_cnn"
    partition: dict = field(default_factory=_default_partition)
    shift: dict | None = None  # per-group concept/feature shift, see pflcore.data.shifts
    num_clients: int = 20
    rounds: int = 200
    participation: float = 1.0
    full_last_round: bool = False
    dropout: list[float] | None = None  # [rho_min, rho_max]: FedCP Table 7 drop-out
    local_epochs: int = 5
    batch_size: int = 50
    lr: float = 0.01
    momentum: float = 0.5
    weight_decay: float = 5e-4
    eval_every: int = 1
    checkpoint_every: int = 10
    seed: int = 0
    precision: str | None = None  # local training: None/"float32", or "bfloat16" (autocast)
    device: str = "cpu"
    workers: int | str = "auto"  # processes for the clients' work: "auto" (one per core), N, or 0 (here)
    name: str | None = None
    output_dir: str = "results"
    quiet: bool = False

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "ExperimentConfig":
        """Build from a mapping, rejecting unknown keys with the list of allowed ones."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ConfigError(f"unknown config field {unknown[0]!r}; allowed fields are {sorted(names)}.")
        cfg = cls(**dict(values))
        cfg.validate()
        return cfg

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> "ExperimentConfig":
        import yaml

        with open(path) as f:
            values = yaml.safe_load(f) or {}
        if not isinstance(values, dict):
            raise ConfigError(f"config file {path} must hold a mapping of fields, got {type(values).__name__}.")
        values.update(overrides)
        return cls.from_dict(values)

    def replace(self, **changes: Any) -> "ExperimentConfig":
        """A validated copy with some fields changed."""
        return ExperimentConfig.from_dict({**self.to_dict(), **changes})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    # ------------------------------------------------------------------ identity
    def fingerprint(self) -> str:
        """Hash of every field that changes the numbers.

        Left out: naming, output and cadence fields, where the work runs (device, workers),
        and fields set to ``None`` (so adding an optional feature later keeps existing
        fingerprints). The method's parameters enter
        with its defaults filled in, so changing a default changes the fingerprint."""
        from .algorithms import ALGORITHMS

        ignored = {"name", "output_dir", "quiet", "checkpoint_every", "data_root", "device", "workers"}
        payload = {k: v for k, v in self.to_dict().items() if k not in ignored and v is not None}
        payload["method_params"] = {**ALGORITHMS[self.method].defaults, **self.method_params}
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:10]

    def run_name(self) -> str:
        return self.name or f"{self.method}-{self.dataset}-{self.fingerprint()}"

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Check every field; raise ConfigError with one sentence on the first bad one."""
        from .algorithms import ALGORITHMS
        from .data.partition import PARTITIONERS, validate_partition_args
        from .data.sources import DATASETS, canonical_name
        from .models import MODELS

        def bad(name: str, allowed: str) -> ConfigError:
            return ConfigError(f"config field {name!r} = {getattr(self, name)!r} is not allowed: {allowed}.")

        if self.method not in ALGORITHMS:
            raise bad("method", f"choose one of {sorted(ALGORITHMS)}")
        if not isinstance(self.method_params, dict):
            raise bad("method_params", "it must be a mapping of the method's hyperparameters")
        try:
            canonical_name(self.dataset)
        except ValueError:
            raise bad("dataset", f"choose one of {list(DATASETS)}") from None
        if self.model not in MODELS:
            raise bad("model", f"choose one of {sorted(MODELS)}")
        if not isinstance(self.partition, dict) or self.partition.get("kind") not in PARTITIONERS:
            raise bad("partition", f"it must be a mapping whose 'kind' is one of {sorted(PARTITIONERS)}")
        for name in ("num_clients", "rounds", "batch_size", "eval_every", "checkpoint_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise bad(name, "it must be an integer >= 1")
        if not isinstance(self.local_epochs, int) or isinstance(self.local_epochs, bool) or self.local_epochs < 0:
            raise bad("local_epochs", "it must be an integer >= 0")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise bad("seed", "it must be an integer >= 0")
        if not _is_number(self.participation) or not 0 < self.participation <= 1:
            raise bad("participation", "it must be a rate in (0, 1]")
        for name in ("lr", "momentum", "weight_decay"):
            value = getattr(self, name)
            if not _is_number(value) or value < 0 or (name == "lr" and value == 0):
                raise bad(name, "it must be a number >= 0" + (" (and > 0)" if name == "lr" else ""))
        if self.momentum >= 1:
            raise bad("momentum", "it must be in [0, 1)")
        if self.dropout is not None:
            d = self.dropout
            if (not isinstance(d, (list, tuple)) or len(d) != 2 or not all(_is_number(v) for v in d)
                    or not 0 < d[0] <= d[1] <= 1):
                raise bad("dropout", "it must be null or a range [rho_min, rho_max] with 0 < rho_min <= rho_max <= 1")
        if self.precision not in (None, "float32", "bfloat16"):
            raise bad("precision", "use null/'float32', or 'bfloat16' for autocast local training")
        if not (self.workers == "auto" or (isinstance(self.workers, int) and not isinstance(self.workers, bool)
                                           and self.workers >= 0)):
            raise bad("workers", "use 0 (in this process), a number of worker processes, or 'auto' (one per core)")
        if self.device != "cpu" and self.workers not in (0, 1, "auto"):
            raise bad("workers", "worker processes are for CPU runs; on a GPU use 0 or 'auto'")
        if not (self.device == "cpu" or self.device == "cuda" or self.device.startswith("cuda:")):
            raise bad("device", "use 'cpu', 'cuda' or 'cuda:N'")
        if self.name is not None and (not self.name or "/" in self.name or self.name.startswith(".")):
            raise bad("name", "it must be a plain folder name (no '/', not starting with '.')")
        ALGORITHMS[self.method].check_params(self.method_params)
        params = {k: v for k, v in self.partition.items() if k not in ("kind", "subsample")}
        validate_partition_args(self.partition["kind"], self.num_clients, **params)
        fraction = self.partition.get("subsample", 1.0)
        if not _is_number(fraction) or not 0 < fraction <= 1:
            raise ConfigError(f"config field 'partition' has subsample = {fraction!r}, which is not allowed: "
                              "it must be a fraction in (0, 1] of each client's training samples.")
        if self.shift is not None:
            from .data.shifts import ShiftError, check_shift

            try:
                check_shift(self.shift)
            except ShiftError as exc:
                raise ConfigError(f"config field 'shift': {exc}") from None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
