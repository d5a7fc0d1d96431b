"""Experiment configuration: one dataclass, validated before any work starts.

Each field is declared once as a :class:`~pflcore.spec.Field` (the vocabulary partition
kinds, shifts and method parameters share); a bad value gets one sentence naming the field,
the value and what is allowed (:class:`ConfigError`), and ``docs/config.md`` is generated
from the same declarations (:func:`reference_page`). Configs round-trip through plain dicts
/ YAML so that a results directory records exactly what ran.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from .errors import ConfigError, shorten
from .spec import UNSET, Field, Refusal, did_you_mean, first_refusal, is_int, is_number, markdown_table

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


def _spec(default: Any, **spec: Any) -> Any:
    """A config field declared by its :class:`~pflcore.spec.Field` (kept in the dataclass
    field's metadata, where :data:`FIELDS` collects it); a mapping or list default is copied
    for each config."""
    declared = Field(default, **spec)
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata={"spec": declared})
    return field(default=default, metadata={"spec": declared})


# ------------------------------------------------------------------ the rules of single fields
def _methods() -> list[str]:
    from .algorithms import ALGORITHMS

    return sorted(ALGORITHMS)


def _models() -> list[str]:
    from .models import MODELS

    return sorted(MODELS)


def _dataset_problem(name: str) -> str | None:
    from .data.sources import DATASETS, canonical_name

    try:
        canonical_name(name)
    except (ValueError, TypeError, AttributeError):
        return f"choose one of {list(DATASETS)}"
    return None


def _folder_problem(path: str) -> str | None:
    if not path:
        return "it must be a folder path, or null to search the usual places"
    if not Path(path).expanduser().is_dir():
        what = "is not a folder" if Path(path).expanduser().exists() else "does not exist"
        return f"the path {what}; give an existing folder, or null to search the usual places"
    return None


def _partition_problem(partition: dict) -> str | None:
    from .data.partition import KINDS

    if not isinstance(partition.get("kind"), str) or partition["kind"] not in KINDS:
        return (f"it must be a mapping whose 'kind' is one of {sorted(KINDS)}"
                f"{did_you_mean(partition.get('kind'), sorted(KINDS))}")
    return None


def _ordered(pair: list) -> str | None:
    return None if pair[0] <= pair[1] else "it must be [rho_min, rho_max] with rho_min <= rho_max"


def _results_folder_problem(path: str) -> str | None:
    if not path.strip() or not path.isprintable():
        return ("it must be the path of a folder for results (for example 'results'), without control characters "
                "such as a newline")
    return None


def _name_problem(name: str) -> str | None:
    if (not name or "/" in name or not name.isprintable() or name.startswith(".")
            or len(name.encode("utf-8", "surrogatepass")) > 255):
        return ("it must be a plain folder name of printable characters (no '/', no newline or other control "
                "character, not starting with '.', at most 255 bytes)")
    return None


@dataclass
class ExperimentConfig:
    """Everything that determines a run. Defaults follow FedPAC's FMNIST setting (B.2).

    Each field is declared once, as a :class:`~pflcore.spec.Field` (type, range, choices, doc,
    default): :meth:`validate` checks every value against it, the refusal sentence and
    ``docs/config.md``'s table are made from it (:func:`reference_page`), and its fingerprint
    settings say whether it enters :meth:`fingerprint`."""

    method: str = _spec("fedavg", choices=_methods, doc="the federated method (docs/methods.md; its parameters "
                                                        "below)")
    method_params: dict = _spec({}, doc="the method's parameters (tables below); unset ones take their defaults")
    dataset: str = _spec("fmnist", type=str, rule=_dataset_problem, words="a dataset name (docs/data.md)",
                         doc="the dataset")
    data_root: str | None = _spec(None, type=str, rule=_folder_problem, fingerprint=False,
                                  words="an existing folder",
                                  doc="where the dataset's files are (null: the usual places); a PFLlib folder's "
                                      "config.json enters the fingerprint")
    model: str = _spec("fedpac_cnn", choices=_models, doc="the network (body + head)")
    partition: dict = _spec({"kind": "dominant", "s": 0.2, "samples_per_client": 600}, rule=_partition_problem,
                            words="a mapping with a 'kind' and its parameters",
                            doc="how samples are shared out: 'kind' and its parameters (tables below), and "
                                "'subsample'")
    shift: dict | None = _spec(None, type=dict, doc="per-group concept/feature shift: 'kind' and its parameters "
                                                    "(tables below); null: none")
    num_clients: int = _spec(20, low=1, high=MAX_CLIENTS,
                             why="100 times the largest federation of the papers here; each client holds its own "
                                 "data and state",
                             doc="clients in the federation")
    rounds: int = _spec(200, low=1, doc="communication rounds")
    participation: float = _spec(1.0, low=0, high=1, low_open=True, doc="C, the rate of clients taking part in "
                                                                        "a round")
    sampling: str = _spec("uniform", choices=("uniform", "bernoulli"), fingerprint_default="uniform",
                          doc="how a round's clients are drawn: 'uniform' (round(C N) of them without replacement) "
                              "or 'bernoulli' (each joins with probability C, pFedFDA appendix C.2)")
    full_last_round: bool = _spec(False, doc="every client takes part in the last round")
    new_clients: float = _spec(0.0, low=0, high=1, high_open=True, fingerprint_default=0.0,
                               doc="the fraction of clients held out of training and scored after the last round "
                                   "as new clients, each first adapting as its method prescribes (pFedFDA section "
                                   "5, Table 4); 0: off")
    dropout: list[float] | None = _spec(None, type=list, items=Field(type=float, low=0, high=1, low_open=True),
                                        min_length=2, max_length=2, rule=_ordered,
                                        doc="[rho_min, rho_max], rho_min <= rho_max: FedCP Table 7 drop-out; null: "
                                            "none")
    local_epochs: int = _spec(5, low=0, high=MAX_EPOCHS,
                              why="the papers here use at most 40; a round of more would run for days without a "
                                  "word",
                              doc="E, local epochs per round")
    batch_size: int = _spec(50, low=1, doc="B, the local mini-batch size")
    lr: float = _spec(0.01, low=0, low_open=True, doc="the local SGD learning rate")
    lr_decay: float = _spec(1.0, low=0, high=1, low_open=True, fingerprint_default=1.0,
                            doc="round t (0-based) trains with lr * lr_decay ** t; 1: no decay (FedFA: 0.99)")
    momentum: float = _spec(0.5, low=0, high=1, high_open=True, doc="the local SGD momentum")
    weight_decay: float = _spec(5e-4, low=0, doc="the local SGD weight decay")
    eval_every: int = _spec(1, low=1, doc="evaluate every this many rounds (and after the last)")
    feature_probe: int = _spec(0, low=0, fingerprint_default=0,
                               doc="samples per class of a fixed verification set whose features every "
                                   "participant's trained model reports each round (FedFA Fig. 4); 0: off")
    checkpoint_every: int = _spec(10, low=1, fingerprint=False, doc="checkpoint every this many rounds")
    seed: int = _spec(0, low=0, high=MAX_SEED, doc="the one seed of partition, sampling, initialisation and "
                                                  "every client's draws")
    precision: str | None = _spec(None, choices=("float32", "bfloat16"),
                                  doc="local training: null/'float32', or 'bfloat16' (autocast)")
    device: str = _spec("cpu", type=str, rule=lambda d: device_problem(d), fingerprint=False,
                        words="'cpu', 'cuda' or 'cuda:N'", doc="where the run trains")
    workers: int | str = _spec("auto", type=int, low=0, high=MAX_WORKERS, also=("auto", "vectorised"),
                               fingerprint=False,
                               doc="processes for the clients' work: 'auto' (one per core), N (cut to the cores), "
                                   "0 (this process) or 'vectorised' (a round's clients trained together, for a "
                                   "GPU)")
    name: str | None = _spec(None, type=str, rule=_name_problem, fingerprint=False,
                             words="a plain folder name", doc="the run's folder name (null: method-dataset-"
                                                              "fingerprint)")
    output_dir: str = _spec("results", rule=_results_folder_problem, fingerprint=False,
                            words="a folder path", doc="the folder of results")
    quiet: bool = _spec(False, fingerprint=False, doc="no progress lines")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "ExperimentConfig":
        """Build from a mapping, rejecting unknown keys with the list of allowed ones."""
        if not isinstance(values, Mapping):
            raise ConfigError(f"a config must be a mapping of fields (field: value), not a {type(values).__name__}.")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = [k for k in values if k not in names]
        if unknown:
            first = min(unknown, key=str)
            raise ConfigError(f"unknown config field {shorten(first)}{did_you_mean(first, sorted(names))}; allowed "
                              f"fields are {sorted(names)}.")
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

        Left out: the fields declared ``fingerprint=False`` (naming, output and cadence fields,
        where the work runs: device, workers), fields set to ``None``, and a field at its
        ``fingerprint_default`` (``lr_decay`` 1, ``feature_probe`` 0, ``sampling`` uniform,
        ``new_clients`` 0: adding an optional feature later keeps existing fingerprints). The
        method's parameters enter with its defaults filled in, so changing a default changes the
        fingerprint; a method parameter at its own ``fingerprint_default`` is left out likewise."""
        from .algorithms import ALGORITHMS

        payload = {}
        for key, value in self.to_dict().items():
            spec = FIELDS[key]
            if not spec.fingerprint or value is None:
                continue
            if spec.fingerprint_default is not UNSET and value == spec.fingerprint_default:
                continue  # a feature left off: the fingerprint of runs from before the field
            payload[key] = value
        algorithm = ALGORITHMS[self.method]
        payload["method_params"] = {
            key: value for key, value in {**algorithm.defaults, **self.method_params}.items()
            if key not in algorithm.hyperparams or algorithm.hyperparams[key].fingerprint_default is UNSET
            or value != algorithm.hyperparams[key].fingerprint_default}
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
    def validate(self, machine: bool = True) -> None:
        """Check every field against its spec, then the rules between fields; raise
        ConfigError with one sentence on the first bad one. ``machine=False`` leaves out the one
        rule that depends on this machine (its memory), as when a record made elsewhere is read."""
        from .algorithms import ALGORITHMS
        from .data.partition import SUBSAMPLE, PartitionError, validate_partition_args
        from .data.shifts import ShiftError, check_shift
        from .data.sources import DatasetCorruptError, DatasetNotFoundError, TextShape, canonical_name, dataset_shape

        def bad(name: str, allowed: str) -> ConfigError:
            return ConfigError(Refusal(name, getattr(self, name), allowed).sentence())

        refusal = first_refusal(FIELDS, self.__dict__)
        if refusal is not None:
            raise ConfigError(refusal.sentence())
        # The rules between fields (and a mapping's keys), in the order a user would fix them.
        try:  # most shapes are declared; a PFLlib folder's is read from its files (cheaply)
            shape = dataset_shape(self.dataset, self.data_root)
        except DatasetNotFoundError as exc:
            raise bad("data_root", str(exc).rstrip(".")) from None
        except DatasetCorruptError as exc:
            raise bad("data_root", f"the {self.dataset} files there cannot be read ({str(exc).rstrip('.')})") from None
        problem = model_problem(self.model, canonical_name(self.dataset), shape)
        if problem:
            raise bad("model", problem)
        if self.new_clients and round(self.new_clients * self.num_clients) in (0, self.num_clients):
            raise bad("new_clients", f"with {self.num_clients} clients it must hold out at least one client and "
                                     "train on at least one")
        if self.workers == "vectorised":
            from .engine.vectorised import COVERED

            if self.method not in COVERED:
                raise bad("workers", f"'vectorised' runs {', '.join(COVERED)}; use 0 or 'auto' for {self.method}")
        if self.device != "cpu" and self.workers not in (0, 1, "auto", "vectorised"):
            raise bad("workers", "worker processes are for CPU runs; on a GPU use 0, 'auto' or 'vectorised'")
        for name in ("method_params", "partition", "shift"):
            odd = [k for k in (getattr(self, name) or {}) if not isinstance(k, str)]
            if odd:
                raise ConfigError(f"config field {name!r} has the key {shorten(odd[0])}, which is not allowed: its "
                                  "keys are parameter names (text).")
        ALGORITHMS[self.method].check_params(self.method_params)
        kind = self.partition["kind"]
        try:
            validate_partition_args(kind, self.num_clients, **{k: v for k, v in self.partition.items()
                                                               if k not in ("kind", "subsample")})
        except PartitionError as exc:
            if exc.refusal is not None:
                context = f" for partition kind {kind!r}"
                raise ConfigError(exc.refusal.within("partition").sentence(context=context)) from None
            where = f"config field 'partition.{exc.param}'" if exc.param else "config field 'partition'"
            raise ConfigError(f"{where} is not allowed: {exc}") from None
        refusal = first_refusal({"subsample": SUBSAMPLE}, self.partition)
        if refusal is not None:
            raise ConfigError(refusal.within("partition").sentence())
        if self.shift is not None:
            try:
                check_shift(self.shift)
            except ShiftError as exc:
                if exc.refusal is not None:
                    context = f" for shift {self.shift['kind']!r}"
                    raise ConfigError(exc.refusal.within("shift").sentence(context=context)) from None
                raise ConfigError(f"config field 'shift': {exc}") from None
            acts = {"rotation": "a rotation turns images", "corruption": "a corruption changes images"}
            if self.shift["kind"] in acts and isinstance(shape, TextShape):
                raise bad("shift", f"{acts[self.shift['kind']]}, and {self.dataset!r} holds token ids (text); use "
                                   "'label_permutation' or no shift")
        need, have = memory_estimate(self, shape), machine_memory()
        if machine and have and need > have:
            raise ConfigError(f"this run needs at least {need / 2**30:.1f} GiB of memory (its clients' samples as "
                              f"float32 tensors and the models the server keeps), and this machine has "
                              f"{have / 2**30:.1f} GiB: lower num_clients, partition.samples_per_client or the "
                              "method's model count.")


#: Every config field's spec, in declaration order (from the dataclass fields' metadata).
FIELDS: dict[str, Field] = {f.name: f.metadata["spec"] for f in dataclasses.fields(ExperimentConfig)}


#: The page :func:`reference_page` writes, relative to the project root.
REFERENCE_PAGE = "docs/config.md"


def reference_page() -> str:
    """``docs/config.md``: the tables of every user-facing field, made from the same specs that
    validate them (the run config, each partition kind, each shift, each method)."""
    from .algorithms import ALGORITHMS
    from .data.partition import KINDS, SUBSAMPLE
    from .data.shifts import PARAMETERS, SHIFTS

    parts = ["# Config reference\n",
             "Every field a run takes, what it allows and its default. This page is generated from the fields' "
             "specs (`pflcore.spec.Field`), the same ones that check a config before any work starts, by "
             "`pflcore.config.write_reference()`; a test fails when it is out of date. A bad value is refused "
             "with one sentence naming the field, the value and what is allowed.\n",
             "## The run config\n",
             "The fields of `ExperimentConfig` (a YAML file's top-level keys, `pflcore run --set field=value`).\n",
             markdown_table(FIELDS),
             f"### Where a run trains: `{DEVICE_ENV}` and `{WORKERS_ENV}`\n",
             f"Set in the environment, they move every run of the process (and of the notebook kernels it "
             f"starts) to a device and an executor, whatever its config says: a notebook takes no device "
             f"parameter. `{DEVICE_ENV}` takes what `device` takes. `{WORKERS_ENV}` takes what `workers` "
             f"takes; `vectorised` moves a run to the vectorised executor where it stacks the method's "
             f"training and any other run to `0` (a method it runs client by client, such as FedCP, gets "
             f"exactly the sequential numbers there and no speed-up; a method it does not cover would be "
             f"refused), so that one setting serves a notebook of many methods. Unset or empty: the config's "
             f"own fields. A value this machine cannot use is refused in one sentence naming the variable, "
             f"as is a GPU with worker processes (`{DEVICE_ENV}=cuda` with `workers: 2` asks for "
             f"`{WORKERS_ENV}` too). Neither field enters the fingerprint: a run keeps its results folder, "
             f"record name and shipped record; its record's `config` and `provenance.numeric_path` (device, "
             f"executor) say where it ran. `python -m pflcore.campaign device` sets both for its runs.\n",
             "## Partition kinds\n",
             "`partition: {kind: ..., <parameters>}`. Any kind also takes `subsample`:\n",
             markdown_table({"subsample": SUBSAMPLE})]
    for name, kind in KINDS.items():
        parts += [f"### `{name}`\n", f"{kind.doc[0].upper()}{kind.doc[1:]}.\n", markdown_table(kind.params)]
    parts += ["## Shifts\n", "`shift: {kind: ..., <parameters>}`, or null for none.\n"]
    for name, doc in SHIFTS.items():
        parts += [f"### `{name}`\n", f"{doc[0].upper()}{doc[1:]}.\n", markdown_table(PARAMETERS[name])]
    parts += ["## Method parameters\n", "`method_params: {<parameter>: value}` for the config's `method`.\n"]
    for name in sorted(n for n, m in ALGORITHMS.items() if m.__module__.startswith("pflcore.")):  # not plugins
        method = ALGORITHMS[name]
        parts += [f"### `{name}`\n", *([f"{method.paper}.\n"] if method.paper else []),
                  markdown_table(method.hyperparams) if method.hyperparams else "No parameters.\n"]
    return "\n".join(parts)


def write_reference(root: str | Path | None = None) -> Path:
    """Write :func:`reference_page` to ``docs/config.md`` under ``root`` (the project root by
    default); returns the path."""
    path = Path(root or Path(__file__).resolve().parents[1]) / REFERENCE_PAGE
    path.write_text(reference_page(), encoding="utf-8")
    return path


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
    """The config a run takes (:func:`pflcore.engine.run`): a validated config from an
    :class:`ExperimentConfig` or a mapping of its fields, moved to where this process's runs
    train where ``PFLCORE_DEVICE`` or ``PFLCORE_WORKERS`` say (:func:`placed`); any other value
    (a list, None, a file path) is one sentence saying what to pass instead."""
    if isinstance(config, ExperimentConfig):
        config.validate()
        return placed(config)
    if isinstance(config, Mapping):
        return placed(ExperimentConfig.from_dict(config))
    if isinstance(config, (str, Path)):
        raise ConfigError(f"a run takes an ExperimentConfig or a mapping of its fields, not the text "
                          f"{shorten(str(config))}; for a YAML file pass ExperimentConfig.from_yaml(path).")
    raise ConfigError(f"a run takes an ExperimentConfig or a mapping of its fields (field: value), not "
                      f"{'None' if config is None else 'a value of type ' + type(config).__name__}.")


#: Where this process's runs train, whatever their configs say: a notebook takes no device parameter,
#: so a GPU session sets these for its kernels (``python -m pflcore.campaign device`` does).
DEVICE_ENV, WORKERS_ENV = "PFLCORE_DEVICE", "PFLCORE_WORKERS"


def placement_from_environment() -> dict:
    """The fields ``PFLCORE_DEVICE`` and ``PFLCORE_WORKERS`` set (unset or empty: none), each
    checked; a bad value is one sentence naming the variable (:class:`ConfigError`)."""
    out: dict = {}
    device = os.environ.get(DEVICE_ENV, "").strip()
    if device:
        problem = device_problem(device)
        if problem:
            raise ConfigError(f"{DEVICE_ENV}={shorten(device)} cannot be used: {problem.rstrip('.')} (or unset it).")
        out["device"] = device
    workers = os.environ.get(WORKERS_ENV, "").strip()
    if workers:
        if workers in ("auto", "vectorised"):
            out["workers"] = workers
        elif workers.isdigit() and int(workers) <= MAX_WORKERS:
            out["workers"] = int(workers)
        else:
            raise ConfigError(f"{WORKERS_ENV}={shorten(workers)} cannot be used: it takes what the field workers "
                              f"takes, 'auto', 'vectorised' or a whole number from 0 to {MAX_WORKERS} (or unset it).")
    return out


def placed(config: ExperimentConfig) -> ExperimentConfig:
    """``config`` moved to ``PFLCORE_DEVICE`` and ``PFLCORE_WORKERS`` where they are set, else as it is.

    ``PFLCORE_WORKERS=vectorised`` moves a run to the vectorised executor where it stacks the
    method's training (:data:`pflcore.engine.vectorised.COVERED` less ``CLIENT_BY_CLIENT``), and
    any other run to ``workers: 0``: a method the executor runs client by client gets exactly the
    sequential numbers there and no speed-up, so its record names the executor that really ran it
    (and a method it does not cover would be refused), one setting serving a notebook of many
    methods. Neither field enters the fingerprint (:meth:`ExperimentConfig.fingerprint`): the run
    keeps its results folder, record name and shipped record; its record's config and provenance
    (``numeric_path``: device, executor) say where it ran, as for any device or workers."""
    changes = placement_from_environment()
    if not changes:
        return config
    if changes.get("workers") == "vectorised":
        from .engine.vectorised import CLIENT_BY_CLIENT, COVERED

        if config.method not in COVERED or config.method in CLIENT_BY_CLIENT:
            changes["workers"] = 0
    if all(getattr(config, k) == v for k, v in changes.items()):
        return config
    try:
        return config.replace(**changes)
    except ConfigError as err:
        said = " and ".join(f"{DEVICE_ENV if k == 'device' else WORKERS_ENV}={v}" for k, v in changes.items())
        raise ConfigError(f"{said} cannot place this {config.method} run: {str(err).rstrip('.')}"
                          + ("; set PFLCORE_WORKERS too (0, 'auto' or 'vectorised')." if "workers" not in changes
                             else ".")) from None


def memory_estimate(config: ExperimentConfig, shape: Any) -> int:
    """A lower bound, in bytes, of the memory a run needs: its clients' samples (float32
    tensors, train and test) where the partition gives each client a fixed number, and the
    models the server keeps (the global one plus, for FedEM, HypCluster and FedFomo, one per
    component the method parameters ask for), counted on PyTorch's meta device, and what else
    the server keeps (pFedHN's hypernetwork, :func:`_server_bytes`)."""
    from .data.sources import TextShape

    p = config.partition
    per_client = [v for v in (p.get("samples_per_client"),) if is_int(v)]
    per_client += [max(v) for v in (p.get("size_choices"),) if isinstance(v, (list, tuple)) and v
                   and all(is_int(x) for x in v)]
    if is_int(p.get("shards_per_client")) and is_int(p.get("shard_size")):
        per_client.append(p["shards_per_client"] * p["shard_size"])
    test = p.get("test_fraction")
    test = test if is_number(test) and 0 < test <= 1 else 0.5
    sample = 8 * shape.seq_len if isinstance(shape, TextShape) else 4 * shape[0] * shape[1] * shape[1]
    samples = config.num_clients * min(max(per_client, default=0), 10**15) * (1 + test)  # 10**15: no machine's
    count_name = MODEL_COUNTS.get(config.method)
    count = config.method_params.get(count_name, 0) if count_name else 0
    copies = 1 + (min(count, 10**6) if is_int(count) and count > 0 else 0)
    model = _model_bytes(config.model, shape)
    return int(samples * (sample + 16)) + copies * model + _server_bytes(config, model // 4)


def _server_bytes(config: ExperimentConfig, model_parameters: int) -> int:
    """What the method's server keeps besides its models (pFedHN: the hypernetwork that
    generates them), as the method counts it (``server_bytes``); 0 for methods without one."""
    from .algorithms import ALGORITHMS

    count = getattr(ALGORITHMS.get(config.method), "server_bytes", None)
    if count is None:
        return 0
    try:
        return max(0, int(count(config.method_params, model_parameters, config.num_clients)))
    except (TypeError, ValueError, KeyError, OverflowError):  # a bad parameter is refused by its own check
        return 0


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
