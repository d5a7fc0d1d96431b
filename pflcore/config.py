"""Experiment configuration: one dataclass, validated before any work starts.

A bad value gets one sentence naming the field, the value and what is allowed
(:class:`ConfigError`). Configs round-trip through plain dicts / YAML so that a results
directory records exactly what ran.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from .errors import ConfigError, shorten

if TYPE_CHECKING:
    from .data.sources import TextShape


#: The most clients a run may have: 100 times the largest federation of the papers here
#: (FedPAC Table 9: 1000 clients), and each client costs the engine per-client state.
MAX_CLIENTS = 100_000
#: Seeds are 64-bit (numpy's and torch's generators take at most that much entropy per key).
MAX_SEED = 2 ** 64 - 1
#: The most local epochs (and, in the methods' parameters, epochs or steps of any kind).
MAX_EPOCHS = 10_000
#: The most worker processes: more than any machine's cores (they are cut to the cores anyway).
MAX_WORKERS = 1024
#: Method parameters that count whole models the server keeps (FedEM's components,
#: HypCluster's clusters, FedFomo's downloads): the memory estimate multiplies by them.
MODEL_COUNTS = {"fedem": "M", "fedem_ft": "M", "hypcluster": "k", "fedfomo": "num_models"}
#: Config files are a few lines; anything larger than this is not one (and is never read whole).
MAX_CONFIG_BYTES = 1 << 20


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
    # how a round's clients are drawn: "uniform" (round(C*N) of them without replacement) or
    # "bernoulli" (each joins independently with probability C: pFedFDA appendix C.2)
    sampling: str = "uniform"
    full_last_round: bool = False
    # the fraction of clients held out of training and scored after the last round as new
    # clients, each first adapting as its method prescribes (pFedFDA section 5, Table 4); 0: off
    new_clients: float = 0.0
    dropout: list[float] | None = None  # [rho_min, rho_max]: FedCP Table 7 drop-out
    local_epochs: int = 5
    batch_size: int = 50
    lr: float = 0.01
    lr_decay: float = 1.0  # round t (0-based) trains with lr * lr_decay ** t; 1: no decay (FedFA: 0.99)
    momentum: float = 0.5
    weight_decay: float = 5e-4
    eval_every: int = 1
    # samples per class of a fixed verification set whose features every participant's trained
    # model reports each round (FedFA Fig. 4: feature distance, classifier-update similarity); 0: off
    feature_probe: int = 0
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
        if not isinstance(values, Mapping):
            raise ConfigError(f"a config must be a mapping of fields (field: value), not a {type(values).__name__}.")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = [k for k in values if k not in names]
        if unknown:
            raise ConfigError(f"unknown config field {shorten(min(unknown, key=str))}; allowed fields are "
                              f"{sorted(names)}.")
        cfg = cls(**dict(values))
        cfg.validate()
        return cfg

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> "ExperimentConfig":
        return cls.from_dict({**read_config_file(path), **overrides})

    def replace(self, **changes: Any) -> "ExperimentConfig":
        """A validated copy with some fields changed."""
        return ExperimentConfig.from_dict({**self.to_dict(), **changes})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    # ------------------------------------------------------------------ identity
    def fingerprint(self) -> str:
        """Hash of every field that changes the numbers.

        Left out: naming, output and cadence fields, where the work runs (device, workers),
        and fields set to ``None``, ``lr_decay`` at 1, ``feature_probe`` at 0, ``sampling`` uniform or
        ``new_clients`` at 0 (so adding an optional feature later keeps existing fingerprints). The method's parameters enter
        with its defaults filled in, so changing a default changes the fingerprint."""
        from .algorithms import ALGORITHMS

        ignored = {"name", "output_dir", "quiet", "checkpoint_every", "data_root", "device", "workers"}
        payload = {k: v for k, v in self.to_dict().items() if k not in ignored and v is not None}
        if payload.get("lr_decay") == 1.0:  # no decay: the fingerprint of runs from before the field
            del payload["lr_decay"]
        for key, off in (("feature_probe", 0), ("sampling", "uniform"), ("new_clients", 0.0)):
            if payload.get(key) == off:  # likewise: a feature left off keeps the fingerprint of runs from before it
                del payload[key]
        payload["method_params"] = {**ALGORITHMS[self.method].defaults, **self.method_params}
        if self.dataset == "pfllib" and self.data_root is not None:
            # the data is the folder's: two PFLlib folders must not share results (its
            # config.json lists every client's label counts, so it identifies the partition)
            described = Path(self.data_root).expanduser() / "config.json"
            try:
                payload["data"] = hashlib.sha256(described.read_bytes()).hexdigest()
            except OSError:
                payload["data"] = str(Path(self.data_root).expanduser().resolve())
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:10]

    def run_name(self) -> str:
        return self.name or f"{self.method}-{self.dataset}-{self.fingerprint()}"

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Check every field; raise ConfigError with one sentence on the first bad one."""
        from .algorithms import ALGORITHMS
        from .data.partition import PARTITIONERS, PartitionError, validate_partition_args
        from .data.sources import (DATASETS, DatasetCorruptError, DatasetNotFoundError, TextShape, canonical_name,
                                   dataset_shape)
        from .models import MODELS

        def bad(name: str, allowed: str) -> ConfigError:
            return ConfigError(f"config field {name!r} = {shorten(getattr(self, name))} is not allowed: {allowed}.")

        if not isinstance(self.method, str) or self.method not in ALGORITHMS:
            raise bad("method", f"choose one of {sorted(ALGORITHMS)}")
        if not isinstance(self.method_params, dict):
            raise bad("method_params", "it must be a mapping of the method's hyperparameters")
        try:
            canonical_name(self.dataset)
        except (ValueError, TypeError, AttributeError):
            raise bad("dataset", f"choose one of {list(DATASETS)}") from None
        if self.data_root is not None:
            if not isinstance(self.data_root, str) or not self.data_root:
                raise bad("data_root", "it must be a folder path, or null to search the usual places")
            if not Path(self.data_root).expanduser().is_dir():
                what = "is not a folder" if Path(self.data_root).expanduser().exists() else "does not exist"
                raise bad("data_root", f"the path {what}; give an existing folder, or null to search the usual places")
        if not isinstance(self.model, str) or self.model not in MODELS:
            raise bad("model", f"choose one of {sorted(MODELS)}")
        try:  # most shapes are declared; a PFLlib folder's is read from its files (cheaply)
            shape = dataset_shape(self.dataset, self.data_root)
        except DatasetNotFoundError as exc:
            raise bad("data_root", str(exc).rstrip(".")) from None
        except DatasetCorruptError as exc:
            raise bad("data_root", f"the {self.dataset} files there cannot be read ({str(exc).rstrip('.')})") from None
        problem = model_problem(self.model, canonical_name(self.dataset), shape)
        if problem:
            raise bad("model", problem)
        if not isinstance(self.partition, dict) or not isinstance(self.partition.get("kind"), str) \
                or self.partition["kind"] not in PARTITIONERS:
            raise bad("partition", f"it must be a mapping whose 'kind' is one of {sorted(PARTITIONERS)}")
        for name in ("num_clients", "rounds", "batch_size", "eval_every", "checkpoint_every"):
            if not _is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise bad(name, "it must be a whole number >= 1")
        if self.num_clients > MAX_CLIENTS:
            raise bad("num_clients", f"it must be at most {MAX_CLIENTS} (100 times the largest federation of the "
                                     "papers here; each client holds its own data and state)")
        if not _is_int(self.feature_probe) or self.feature_probe < 0:
            raise bad("feature_probe", "it must be a whole number >= 0 (samples per class; 0: off)")
        if not _is_int(self.local_epochs) or not 0 <= self.local_epochs <= MAX_EPOCHS:
            raise bad("local_epochs", f"it must be a whole number in [0, {MAX_EPOCHS}] (the papers here use at most "
                                      "40; a round of more would run for days without a word)")
        if not _is_int(self.seed) or not 0 <= self.seed <= MAX_SEED:
            raise bad("seed", "it must be a whole number in [0, 2**64 - 1]")
        if not _is_number(self.participation) or not 0 < self.participation <= 1:
            raise bad("participation", "it must be a rate in (0, 1]")
        if self.sampling not in ("uniform", "bernoulli"):
            raise bad("sampling", "use 'uniform' (round(participation * num_clients) clients per round) or "
                                  "'bernoulli' (each client joins with probability participation)")
        if not _is_number(self.new_clients) or not 0 <= self.new_clients < 1:
            raise bad("new_clients", "it must be the fraction in [0, 1) of clients held out of training and scored "
                                     "as new clients at the end (0: off)")
        if self.new_clients and round(self.new_clients * self.num_clients) in (0, self.num_clients):
            raise bad("new_clients", f"with {self.num_clients} clients it must hold out at least one client and "
                                     "train on at least one")
        if not _is_number(self.lr) or self.lr <= 0:
            raise bad("lr", "it must be a finite number > 0")
        if not _is_number(self.lr_decay) or not 0 < self.lr_decay <= 1:
            raise bad("lr_decay", "it must be a number in (0, 1], the factor the lr is multiplied by each "
                                  "round (1: no decay)")
        if not _is_number(self.momentum) or not 0 <= self.momentum < 1:
            raise bad("momentum", "it must be a number in [0, 1)")
        if not _is_number(self.weight_decay) or self.weight_decay < 0:
            raise bad("weight_decay", "it must be a finite number >= 0")
        for name in ("full_last_round", "quiet"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, "it must be true or false")
        if self.dropout is not None:
            d = self.dropout
            if (not isinstance(d, (list, tuple)) or len(d) != 2 or not all(_is_number(v) for v in d)
                    or not 0 < d[0] <= d[1] <= 1):
                raise bad("dropout", "it must be null or a range [rho_min, rho_max] with 0 < rho_min <= rho_max <= 1")
        if self.precision not in (None, "float32", "bfloat16"):
            raise bad("precision", "use null/'float32', or 'bfloat16' for autocast local training")
        if not (self.workers in ("auto", "vectorised") or (_is_int(self.workers) and 0 <= self.workers <= MAX_WORKERS)):
            raise bad("workers", f"use 0 (in this process), a number of worker processes up to {MAX_WORKERS} (cut "
                                 "to the cores), 'auto' (one per core) or 'vectorised' (a round's clients trained "
                                 "together, for a GPU)")
        if self.workers == "vectorised":
            from .engine.vectorised import COVERED

            if self.method not in COVERED:
                raise bad("workers", f"'vectorised' runs {', '.join(COVERED)}; use 0 or 'auto' for {self.method}")
        problem = device_problem(self.device)
        if problem:
            raise bad("device", problem)
        if self.device != "cpu" and self.workers not in (0, 1, "auto", "vectorised"):
            raise bad("workers", "worker processes are for CPU runs; on a GPU use 0, 'auto' or 'vectorised'")
        if not isinstance(self.output_dir, str) or not self.output_dir.strip() or not self.output_dir.isprintable():
            raise bad("output_dir", "it must be the path of a folder for results (for example 'results'), without "
                                    "control characters such as a newline")
        if self.name is not None and (not isinstance(self.name, str) or not self.name or "/" in self.name
                                      or not self.name.isprintable() or self.name.startswith(".")
                                      or len(self.name.encode("utf-8", "surrogatepass")) > 255):
            raise bad("name", "it must be a plain folder name of printable characters (no '/', no newline or "
                              "other control character, not starting with '.', at most 255 bytes)")
        for name in ("method_params", "partition", "shift"):
            keys = getattr(self, name) if isinstance(getattr(self, name), dict) else {}
            odd = [k for k in keys if not isinstance(k, str)]
            if odd:
                raise ConfigError(f"config field {name!r} has the key {shorten(odd[0])}, which is not allowed: its "
                                  "keys are parameter names (text).")
        ALGORITHMS[self.method].check_params(self.method_params)
        params = {k: v for k, v in self.partition.items() if k not in ("kind", "subsample")}
        try:
            validate_partition_args(self.partition["kind"], self.num_clients, **params)
        except PartitionError as exc:
            where = f"config field 'partition.{exc.param}'" if exc.param else "config field 'partition'"
            raise ConfigError(f"{where} is not allowed: {exc}") from None
        fraction = self.partition.get("subsample", 1.0)
        if not _is_number(fraction) or not 0 < fraction <= 1:
            raise ConfigError(f"config field 'partition' has subsample = {shorten(fraction)}, which is not allowed: "
                              "it must be a fraction in (0, 1] of each client's training samples.")
        if self.shift is not None:
            from .data.shifts import ShiftError, check_shift

            try:
                check_shift(self.shift)
            except ShiftError as exc:
                raise ConfigError(f"config field 'shift': {exc}") from None
            acts = {"rotation": "a rotation turns images", "corruption": "a corruption changes images"}
            if self.shift["kind"] in acts and isinstance(shape, TextShape):
                raise bad("shift", f"{acts[self.shift['kind']]}, and {self.dataset!r} holds token ids (text); use "
                                   "'label_permutation' or no shift")
        need, have = memory_estimate(self, shape), machine_memory()
        if have and need > have:
            raise ConfigError(f"this run needs at least {need / 2**30:.1f} GiB of memory (its clients' samples as "
                              f"float32 tensors and the models the server keeps), and this machine has "
                              f"{have / 2**30:.1f} GiB: lower num_clients, partition.samples_per_client or the "
                              "method's model count.")


def read_config_file(path: str | Path) -> dict:
    """The mapping of config fields in a YAML file (YAML 1.2 numbers: ``5e-4`` is a number);
    one sentence if the file is missing, a folder, not YAML, or not a mapping."""
    from .yaml_io import read_yaml_file

    values = read_yaml_file(path, max_bytes=MAX_CONFIG_BYTES)
    if values is None:
        return {}
    if not isinstance(values, dict):
        kind = "a list" if isinstance(values, list) else f"the single value {shorten(values)}"
        raise ConfigError(f"config file {shorten(str(path))} must hold a mapping of config fields (lines "
                          f"'field: value'), not {kind}.")
    return values


def as_config(config: Any) -> ExperimentConfig:
    """A validated config from an :class:`ExperimentConfig` or a mapping of its fields; any
    other value (a list, None, a file path) is one sentence saying what to pass instead."""
    if isinstance(config, ExperimentConfig):
        config.validate()
        return config
    if isinstance(config, Mapping):
        return ExperimentConfig.from_dict(config)
    if isinstance(config, (str, Path)):
        raise ConfigError(f"a run takes an ExperimentConfig or a mapping of its fields, not the text "
                          f"{shorten(str(config))}; for a YAML file pass ExperimentConfig.from_yaml(path).")
    raise ConfigError(f"a run takes an ExperimentConfig or a mapping of its fields (field: value), not "
                      f"{'None' if config is None else 'a value of type ' + type(config).__name__}.")


def memory_estimate(config: ExperimentConfig, shape: Any) -> int:
    """A lower bound, in bytes, of the memory a run needs: its clients' samples (float32
    tensors, train and test) where the partition gives each client a fixed number, and the
    models the server keeps (the global one plus, for FedEM, HypCluster and FedFomo, one per
    component the method parameters ask for), counted on PyTorch's meta device."""
    from .data.sources import TextShape

    p = config.partition
    per_client = [v for v in (p.get("samples_per_client"),) if _is_int(v)]
    per_client += [max(v) for v in (p.get("size_choices"),) if isinstance(v, (list, tuple)) and v
                   and all(_is_int(x) for x in v)]
    if _is_int(p.get("shards_per_client")) and _is_int(p.get("shard_size")):
        per_client.append(p["shards_per_client"] * p["shard_size"])
    test = p.get("test_fraction")
    test = test if _is_number(test) and 0 < test <= 1 else 0.5
    sample = 8 * shape.seq_len if isinstance(shape, TextShape) else 4 * shape[0] * shape[1] * shape[1]
    samples = config.num_clients * min(max(per_client, default=0), 10**15) * (1 + test)  # 10**15: no machine's
    count_name = MODEL_COUNTS.get(config.method)
    count = config.method_params.get(count_name, 0) if count_name else 0
    copies = 1 + (min(count, 10**6) if _is_int(count) and count > 0 else 0)
    return int(samples * (sample + 16)) + copies * _model_bytes(config.model, shape)


def _model_bytes(model: str, shape: Any) -> int:
    """float32 bytes of ``model``'s parameters, built on the meta device (no memory used)."""
    import torch

    from .data.sources import TextShape
    from .models import build_model

    try:
        with torch.device("meta"):
            if isinstance(shape, TextShape):
                net = build_model(model, None, shape.num_classes, vocab_size=shape.vocab_size or 1)
            else:
                net = build_model(model, shape[0], shape[2], shape[1])
    except Exception:  # a model that cannot take this data is refused elsewhere; nothing counted here
        return 0
    return 4 * sum(t.numel() for t in net.parameters())


def machine_memory() -> int:
    """This machine's physical memory in bytes (0 where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def device_problem(device: Any) -> str | None:
    """Why this PyTorch cannot run on ``device`` (None if it can): 'cpu', or 'cuda' /
    'cuda:N' where this build has CUDA and device N exists."""
    if not isinstance(device, str):
        return "use 'cpu', 'cuda' or 'cuda:N'"
    if device == "cpu":
        return None
    if device != "cuda" and not (device.startswith("cuda:") and device[5:].isdigit()):
        return "use 'cpu', 'cuda' or 'cuda:N' (N a GPU index)"
    import torch

    if not torch.cuda.is_available():
        why = "is built without CUDA" if torch.version.cuda is None else "sees no usable GPU on this machine"
        return f"this PyTorch ({torch.__version__}) {why}; use 'cpu'"
    count = torch.cuda.device_count()
    if device != "cuda" and int(device[5:]) >= count:
        return f"this machine has {count} GPU(s), cuda:0 to cuda:{count - 1}"
    return None


def model_problem(model: str, dataset: str, shape: tuple[int, int, int] | TextShape | None = None) -> str | None:
    """Why ``model`` cannot take ``dataset``'s inputs (None if it can). An image model
    refuses a text dataset's token ids (FedCP section 6.1: AG News takes fastText) and a
    text model refuses images; an image model then gets one forward pass of an image of
    the dataset's shape (``shape``, else its declared one) on PyTorch's meta device, which
    computes shapes only."""
    import torch

    from .data.sources import SHAPES, TextShape
    from .models import INPUTS, build_model

    shape = shape or SHAPES[dataset]
    takes = INPUTS[model]
    if isinstance(shape, TextShape):
        if takes != "tokens":
            text = sorted(m for m, kind in INPUTS.items() if kind == "tokens")
            return f"it reads images, but {dataset!r} holds token ids (text); choose a text model, one of {text}"
        return None
    channels, size, classes = shape
    if takes != "images":
        images = sorted(m for m, kind in INPUTS.items() if kind == "images")
        return (f"it reads token ids (text), but {dataset!r} holds {channels}x{size}x{size} images; choose an "
                f"image model, one of {images}")
    try:
        with torch.device("meta"):
            build_model(model, channels, classes, size)(torch.empty(2, channels, size, size))
    except RuntimeError:
        return f"it cannot take the {channels}x{size}x{size} images of {dataset!r} (its layers need larger ones); try 'mlp'"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """A finite int or float (not a bool): NaN and infinity are never allowed, nor an integer
    too large to be a float (10**400: training would overflow)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    return abs(value) <= sys.float_info.max if isinstance(value, int) else math.isfinite(value)
