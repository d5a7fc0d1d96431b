"""The in-process simulation engine: rounds, client work, evaluation, checkpoints, results.

``run(config)`` is the one entry point: it validates the config, builds the data and the
method, and runs (or resumes, or skips) the experiment in its results directory.
Everything random is derived from ``config.seed``: the partition, the model's
initialisation, the participation schedule, and one generator per (round, client,
purpose). Because no random state lives outside the checkpoint, a resumed run ends with
exactly the numbers of an uninterrupted one.
"""
from __future__ import annotations

import copy
import math
import time
import warnings
from typing import Any, Callable, Iterable

import numpy as np
import torch

from ..algorithms import ALGORITHMS, make_algorithm
from ..algorithms.base import ADAPT, COLLECT, EVALUATE, TRAIN, Algorithm, Client, FederationInfo, ServerContext
from .. import numerics, records
from ..config import ExperimentConfig, as_config
from ..data.federated import FederatedData
from ..data.partition import make_partition, subsample
from ..data.shifts import make_shift
from ..data.sources import load_dataset
from ..training import EVAL_KEY, SERVER_KEY, generator_for
from .evaluation import accuracies, shared_correct, summarize
from .executors import InProcess, WorkerPool, resolve_workers
from .hooks import take_measurements
from .jobs import JOB_KINDS, ClientJob, ClientWorker
from .progress import RoundProgress
from .results import ACCURACY_UNIT, FINAL_STATE, ResultsError, RunDirectory, RunResult
from .schedule import held_out_clients, participants
from .setup import initial_model, train_settings
from .vectorised import Vectorised


#: The environment variable that parks a run: a Unix time after which the run, at the end of its
#: current round, writes a checkpoint and stops with :class:`RunParked` (the campaign sets it so that an
#: entry longer than a session's stretch of compute goes on in the next one, :mod:`pflcore.campaign`).
PARK_AT_ENV = "PFLCORE_PARK_AT"

#: The environment variable that bounds a run that cannot park: a Unix time by which it must end.
#: Once :func:`pace_rounds` rounds of this stretch show its pace, a run whose rounds left would end
#: after it stops with :class:`RunTooSlow`, a few minutes in rather than hours past the time (the
#: campaign sets it so that a stretch on a slower machine than its records goes on with what fits).
END_BY_ENV = "PFLCORE_END_BY"


class RunParked(RuntimeError):
    """A run stopped at the time :data:`PARK_AT_ENV` gave, with a checkpoint of its last round:
    the same run resumes from there, and ends as an uninterrupted run would."""


class RunTooSlow(RuntimeError):
    """A run stopped early because its pace here would end it after the time :data:`END_BY_ENV`
    gave; what it wrote is kept (the same run resumes from its last checkpoint, if it wrote one)."""


def _env_time(name: str, what: str) -> float | None:
    """The Unix time in the environment variable ``name``, or ``None`` when it is not set;
    anything that is not a number is one sentence (``ValueError``) saying ``what`` it is for."""
    import os

    text = os.environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"{name} = {text!r} is not a time; give the Unix time (seconds) {what}, or leave it unset.")
    return value


def park_time() -> float | None:
    """The Unix time of :data:`PARK_AT_ENV` (:func:`_env_time`)."""
    return _env_time(PARK_AT_ENV, "at which a run parks")


def end_by_time() -> float | None:
    """The Unix time of :data:`END_BY_ENV` (:func:`_env_time`)."""
    return _env_time(END_BY_ENV, "by which a run must end")


def pace_rounds(rounds: int) -> int:
    """After how many rounds of a stretch its pace is judged against :data:`END_BY_ENV`: 3% of the
    rounds and at least 4 (the stretch's first round, which starts the worker processes and warms
    the caches, is left out of the pace)."""
    return max(4, math.ceil(0.03 * rounds))


class DivergenceError(RuntimeError):
    """Training produced a non-finite loss; the run stopped and kept what it wrote."""


class MethodFailureWarning(UserWarning):
    """A method counted failures of its own (e.g. FedPAC's QP solves) during a run."""


def build_data(config: ExperimentConfig) -> FederatedData:
    """Load the dataset and partition it as the config says (deterministic in the seed).

    Kind ``given`` gets the client of each sample from the dataset (``Dataset.owners``, a
    dataset shipped already federated such as ``pfllib``); any other kind re-partitions it."""
    dataset = load_dataset(config.dataset, root=config.data_root)
    params = {k: v for k, v in config.partition.items() if k not in ("kind", "subsample")}
    if config.partition["kind"] == "given":
        params["train_owners"], params["test_owners"] = dataset.owners or (None, None)
    elif config.partition["kind"] == "domains":
        domains = getattr(dataset, "domains", None)  # a multi-domain dataset's (digit5); None for the others
        params["train_domains"], params["test_domains"] = (domains.train, domains.test) if domains else (None, None)
    partition = make_partition(config.partition["kind"], dataset.train_y.numpy(), dataset.test_y.numpy(),
                               config.num_clients, seed=config.seed, num_classes=dataset.num_classes, **params)
    if config.partition.get("subsample", 1.0) < 1.0:
        partition = subsample(partition, config.partition["subsample"], seed=config.seed)
    transforms = ([make_shift(config.shift, dataset.num_classes, config.seed, num_clients=config.num_clients)]
                  if config.shift else [])
    return FederatedData(dataset, partition, device=config.device, transforms=transforms)


class Simulation:
    """A federation driven from this process: the method, the data, the server state and
    the per-client personal states (only what the method keeps per client).

    The clients' work goes through ``executor`` (in this process by default; see
    :mod:`pflcore.engine.executors`); the numbers do not depend on which one.
    """

    def __init__(self, config: ExperimentConfig, data: FederatedData, algorithm: Algorithm | None = None):
        self.config = config
        self.data = data
        numerics.float32_on_gpu(config.device)
        self.algorithm = algorithm or make_algorithm(config.method, **config.method_params)
        self.settings = train_settings(config)
        self.model = initial_model(config, data)
        self.info = FederationInfo(data.num_clients, data.num_classes, tuple(int(n) for n in data.train_sizes),
                                   config.seed, self.settings, config.rounds, config.participation)
        self.state = self.algorithm.init(copy.deepcopy(self.model), self.info)
        self.client_states: dict[int, dict[str, Any]] = {}
        # new clients (pFedFDA Table 4): kept out of training and out of the per-round scores
        self.new_clients = held_out_clients(data.num_clients, config.new_clients, config.seed)
        self.worker = ClientWorker.for_run(config, data, self.algorithm, self.model)
        self.hooks = self.worker.hooks  # what the run measures beside the method (engine.hooks)
        self._server_model = copy.deepcopy(self.model)
        self.executor = InProcess(self.worker)

    def server_context(self, round_index: int, phase: int = 0) -> ServerContext:
        """What the method's server side gets in round ``round_index`` (0-based); ``phase``
        0 is the aggregation, 1 the collect phase (each with its own random stream)."""
        return ServerContext(round_index, generator_for(self.config.seed, SERVER_KEY, round_index, phase),
                             torch.device(self.config.device), self.info, self.settings.for_round(round_index),
                             self._server_model)

    def client(self, cid: int, round_index: int, purpose: int) -> Client:
        """Client ``cid`` as a method sees it in this process (its stored personal state)."""
        return self.worker.client(cid, round_index, purpose, self.client_states.setdefault(cid, {}))

    def participants(self, round_index: int) -> np.ndarray:
        c = self.config
        return participants(round_index, num_clients=self.data.num_clients, rounds=c.rounds,
                            participation=c.participation, full_last_round=c.full_last_round,
                            dropout=tuple(c.dropout) if c.dropout else None, seed=c.seed, sampling=c.sampling,
                            pool=self.training_clients() if len(self.new_clients) else None)

    def training_clients(self) -> np.ndarray:
        """The ids of the clients that take part in training (all but the new clients)."""
        return np.setdiff1d(np.arange(self.data.num_clients), self.new_clients)

    def run_round(self, round_index: int, clients: Iterable[int] | None = None) -> dict:
        """One round: payloads out, local updates, aggregation. Returns the round's record.

        ``clients`` replaces the schedule's participants (benchmarks, custom schedules)."""
        ids = [int(c) for c in (self.participants(round_index) if clients is None else clients)]
        for hook in self.hooks:
            hook.round_start(self, round_index)
        updates, failed = self.dispatch(TRAIN, ids, round_index)
        # With local_epochs = 0 no training step ran, so there is no training loss to report.
        losses = [float(u["loss"]) for u in updates.values() if "loss" in u] if self.config.local_epochs > 0 else []
        record: dict[str, Any] = {"round": round_index + 1, "participants": ids,
                                  "train_loss": float(np.mean(losses)) if losses else float("nan")}
        measured = take_measurements(self.hooks, updates)
        for hook in self.hooks:
            hook.round_end(self, round_index, record, measured.get(hook.key, {}))
        if failed:
            record["failed"] = {str(cid): error for cid, error in failed.items()}
        if not updates:
            record["skipped"] = True  # nobody answered: the server state stays as it was
            return record
        bad = [cid for cid, u in updates.items() if "loss" in u and not math.isfinite(float(u["loss"]))]
        if bad:
            raise DivergenceError(f"round {round_index + 1}: the training loss of client(s) {bad} is not finite; "
                                  f"the values that scale training here are {', '.join(self.scaling_values())}: "
                                  "lower the one that is too large (the run stopped and results so far are kept).")
        self.state = self.algorithm.aggregate(self.state, updates, self.server_context(round_index))
        if self.algorithm.collects(round_index, self.config.rounds):
            self.collect(round_index, record)
        return record

    def collect(self, round_index: int, record: dict) -> None:
        """The collect phase: every training client with training data computes the method's
        statistics; the method folds the answers into the server state."""
        ids = [cid for cid in self.training_clients().tolist() if self.data.train_sizes[cid] > 0]
        collected, failed = self.dispatch(COLLECT, ids, round_index)
        if failed:
            record["collect_failed"] = {str(cid): error for cid, error in failed.items()}
        if collected:
            self.state = self.algorithm.absorb(self.state, collected, self.server_context(round_index, phase=1))

    def scaling_values(self) -> list[str]:
        """``name=value`` of the settings that scale local training: lr, weight_decay,
        momentum, the method's own learning rates (``*lr*``, at their defaults too: pFedMe's
        personal_lr is one), and its other numeric parameters that differ from their defaults."""
        c = self.config
        values = [f"lr={c.lr!r}", f"weight_decay={c.weight_decay!r}", f"momentum={c.momentum!r}"]
        params = getattr(self.algorithm, "params", None) or dict(c.method_params)
        defaults = getattr(self.algorithm, "defaults", {})
        for key, value in sorted(params.items()):
            if isinstance(value, (int, float)) and not isinstance(value, bool) and (
                    "lr" in key or value != defaults.get(key)):
                values.append(f"method_params.{key}={value!r}")
        return values

    def predictor(self, cid: int, round_index: int) -> torch.nn.Module:
        """Client ``cid``'s predictor as the evaluation of round ``round_index`` builds it
        (the shared model of a global method, else the method's personal predictor), in
        eval mode; for inspecting predictions, not for the scoring itself."""
        model = self.algorithm.shared_predictor(self.state, self.model)
        if model is None:
            client = self.worker.client(cid, round_index, EVAL_KEY, dict(self.client_states.get(cid, {})))
            model = self.algorithm.predictor(self.algorithm.payload(self.state, cid, EVALUATE), client)
        return model.eval()

    def evaluate(self, round_index: int) -> np.ndarray:
        """Per-client test accuracy (percent) of each client's predictor (the one evaluation);
        NaN for a client held out as a new client (see :meth:`evaluate_new_clients`)."""
        return accuracies(self.count_correct(round_index), self.data.test_sizes)

    def count_correct(self, round_index: int) -> np.ndarray:
        """Per-client count of correct test predictions of each client's predictor, what
        :meth:`evaluate` and the run's summary are computed from; NaN for a held-out client.

        A global method's model scores all clients' test data here in one batched pass;
        personalised predictors are built and scored per client by the executor."""
        shared = self.algorithm.shared_predictor(self.state, self.model)
        if shared is not None:
            correct = shared_correct(shared, self.data)
            correct[self.new_clients] = np.nan
            return correct
        return self._correct(EVALUATE, self.training_clients(), round_index)

    def evaluate_new_clients(self, round_index: int) -> np.ndarray:
        """New-client generalisation (pFedFDA section 5, Table 4): every held-out client
        adapts as its method prescribes (:meth:`Algorithm.adapt`: fine-tuning, statistics,
        beta) from what the server would send it now, then its predictor is scored on its
        test split. Per-client accuracy (percent), NaN for the training clients."""
        return accuracies(self.count_correct_new_clients(round_index), self.data.test_sizes)

    def count_correct_new_clients(self, round_index: int) -> np.ndarray:
        """Per-client count of correct test predictions behind :meth:`evaluate_new_clients`."""
        return self._correct(ADAPT, self.new_clients, round_index)

    def dispatch(self, kind: str, ids: Iterable[int], round_index: int) -> tuple[dict[int, Any], dict[int, str]]:
        """Run one ``kind`` job per client of ``ids`` (in that order) through the executor:
        ``(outputs, errors)`` keyed by client id, outputs in job order. A job kind that keeps
        state stores the personal state that comes back; a failed client keeps its old one."""
        jobs = [ClientJob(kind, cid, round_index, self._payload(kind, cid), self.client_states.get(cid, {}))
                for cid in ids]
        keeps_state = JOB_KINDS[kind].keeps_state
        outputs, errors = {}, {}
        for job, result in zip(jobs, self.executor.run(jobs)):
            if result.failed:
                errors[job.client_id] = result.error
                continue
            outputs[job.client_id] = result.output
            if keeps_state and result.state:
                self.client_states[job.client_id] = result.state
        return outputs, errors

    def _payload(self, kind: str, cid: int) -> Any:
        """What client ``cid`` gets for a ``kind`` job (an adapting new client: both the train
        and the evaluate payloads)."""
        if kind == ADAPT:
            return {TRAIN: self.algorithm.payload(self.state, cid, TRAIN),
                    EVALUATE: self.algorithm.payload(self.state, cid, EVALUATE)}
        return self.algorithm.payload(self.state, cid, kind)

    def _correct(self, kind: str, clients: np.ndarray, round_index: int) -> np.ndarray:
        """Per-client correct counts of ``kind`` jobs that count correct test predictions; NaN
        for the other clients and for a client that failed (or has no test data)."""
        sizes = self.data.test_sizes
        correct = np.full(self.data.num_clients, np.nan)
        counts, _ = self.dispatch(kind, [cid for cid in clients.tolist() if sizes[cid] > 0], round_index)
        for cid, count in counts.items():
            correct[cid] = count
        return correct

    def use_workers(self, workers: int | str) -> None:
        """Run the clients' work in ``workers`` processes (``"auto"``: one per core), or with
        ``"vectorised"`` in this process, a round's clients trained together
        (:mod:`pflcore.engine.vectorised`)."""
        if workers == "vectorised":
            self.close()
            self.executor = Vectorised(self.worker)
            return
        n = resolve_workers(workers, device=self.config.device, num_clients=self.data.num_clients)
        self.close()
        self.executor = WorkerPool(self.worker, n) if n > 1 else InProcess(self.worker)

    def close(self) -> None:
        self.executor.close()

    # -- checkpointing ------------------------------------------------------------------
    def snapshot(self, next_round: int | None = None) -> dict:
        """The server and client states with every tensor on the CPU (the same tensors on a
        CPU run), so a checkpoint or final state written on a GPU loads on any machine.

        A checkpoint's (``next_round``, 0-based, the round a resume runs first) leaves out the
        method's :attr:`~pflcore.algorithms.base.Algorithm.rebuilt_client_state` of the clients
        that round trains, who write it afresh before anything reads it; ``"rebuilt_for"`` lists
        them (pFedMe's checkpoint with FedCP's CNN and 20 clients: the server's model, not 21)."""
        states, rebuilt = self.client_states, self.algorithm.rebuilt_client_state
        scheduled = set(self.participants(next_round).tolist()) if (
            rebuilt and next_round is not None and next_round < self.config.rounds) else set()
        if scheduled:
            states = {cid: {k: v for k, v in s.items() if k not in rebuilt} if cid in scheduled else s
                      for cid, s in states.items()}
        snap = {"state": _on_cpu(self.state), "client_states": _on_cpu(states)}
        return snap if next_round is None else {**snap, "rebuilt_for": sorted(int(c) for c in scheduled)}

    def restore(self, snap: dict) -> None:
        """Take a snapshot's states, each tensor moved to this run's device, or to the CPU
        where this run's initial server state keeps the same entry on the CPU (bookkeeping
        such as FedPAC's weights): a GPU's checkpoint resumes on a CPU and the other way round."""
        device = torch.device(self.config.device)
        self.state = _placed(snap["state"], self.state, device)
        self.client_states = {int(k): _placed(v, None, device) for k, v in snap["client_states"].items()}


def _on_cpu(obj: Any, memo: dict | None = None) -> Any:
    """``obj`` (dicts, lists, tuples of tensors and plain values) with its tensors on the CPU;
    a tensor held in two places is copied once (``memo``), so it stays one tensor."""
    memo = {} if memo is None else memo
    if isinstance(obj, torch.Tensor):
        if id(obj) not in memo:
            memo[id(obj)] = obj.cpu()
        return memo[id(obj)]
    if isinstance(obj, dict):
        return {k: _on_cpu(v, memo) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_on_cpu(v, memo) for v in obj)
    return obj


def _placed(obj: Any, template: Any, device: torch.device) -> Any:
    """``obj`` with each tensor on the device of ``template``'s tensor at the same place, or
    on ``device`` where ``template`` has none."""
    if isinstance(obj, torch.Tensor):
        return obj.to(template.device if isinstance(template, torch.Tensor) else device)
    if isinstance(obj, dict):
        return {k: _placed(v, template.get(k) if isinstance(template, dict) else None, device)
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        same = isinstance(template, (list, tuple)) and len(template) == len(obj)
        return type(obj)(_placed(v, template[i] if same else None, device) for i, v in enumerate(obj))
    return obj


def run(config: ExperimentConfig | dict, *, overwrite: bool = False,
        on_round_end: Callable[[int, dict], None] | None = None, executor: Any = None) -> RunResult:
    """Run (or resume, or load if finished) one experiment and return its results.

    ``on_round_end(round_number, record)`` is called after each round is recorded (and
    checkpointed, when due); raising from it stops the run like a kill would.
    ``executor`` replaces the one ``config.workers`` asks for (e.g. Flower's, see
    :mod:`pflcore.flower`); its owner closes it. While it writes, the run holds its results
    directory: another process starting the same run is refused (``ResultsInUseError``).
    """
    config = as_config(config)  # a mapping is validated; anything else is one sentence (ConfigError)
    park_at, end_by = park_time(), end_by_time()  # a bad time is one sentence before anything is loaded or written
    rundir = RunDirectory(config, overwrite=overwrite)  # checks where results go; writes nothing
    if rundir.finished:
        return _recorded(RunResult.load(rundir.path))
    shipped = None if overwrite or records.training_forced() else records.find(config)
    if shipped is not None:  # a committed record of exactly this config: its numbers, no training
        record = records.read(shipped)
        print(records.describe(record, shipped), flush=True)
        return RunResult.from_record(record, config, shipped)
    if records.records_only():
        raise records.RecordError(
            f"no committed record of this run ({config.method} on {config.dataset}, seed {config.seed}, fingerprint "
            f"{config.fingerprint()}), and {records.RECORDS_ONLY_ENV}=1 reads runs without training any.")

    data = build_data(config)
    sim = Simulation(config, data)
    # The folder is this process's from here on (another starter is refused); it is
    # created only now, so a run that fails to load its data leaves nothing behind.
    with rundir.lock():
        if rundir.finished:  # another process finished it while the data loaded
            return RunResult.load(rundir.path)
        if executor is not None:
            sim.executor = executor
        else:
            sim.use_workers(config.workers)
        try:
            # a paper-preset run (records on) whose method trains as one already finished: score that one
            scoring = records.active_notebook() is not None and not records.training_forced()
            base = finished_base_run(config) if scoring else None
            result = (_scored_from(sim, rundir, base) if base is not None
                      else _run_rounds(sim, rundir, on_round_end, park_at, end_by))
        finally:
            if executor is None:
                sim.close()
    return _recorded(result)


def _recorded(result: RunResult) -> RunResult:
    """In a paper notebook at its ``paper`` preset (:func:`pflcore.records.set_notebook`),
    a finished run without a committed record gets one, written now while its folder still
    holds the final state (FedFA's global test accuracy is computed from it)."""
    notebook = records.active_notebook()
    shipped = records.find(result.config) if result.path is not None else None
    if shipped is not None:  # training was forced: set this run beside the shipped record
        print(records.comparison_line(records.compare(result, shipped), shipped), flush=True)
        return result
    if notebook is None or result.path is None:
        return result
    path = records.write(record_of(result, notebook))
    result.extras["written_record"] = str(path)  # records.derived_arrays adds what figures derive from the final state
    print(f"record written: {path}", flush=True)
    return result


def record_of(result: RunResult, notebook: str) -> dict:
    """The run record of a finished run of ``notebook``'s paper preset, with what is computed
    from its final state (FedFA's global test accuracy, the per-sample hits for paired tests)."""
    derived = {}
    if (result.path / FINAL_STATE).exists():
        from .revisit import final_correctness, global_test_accuracy  # revisit builds on this module

        if "global_test_acc" not in result.summary:
            try:
                derived["global_test_acc"] = global_test_accuracy(result)
            except ValueError:  # a personal predictor per client: no global model to score
                pass
        correct = final_correctness(result)
        if correct is not None:  # per-sample hits of the final predictors: paired tests from records
            result.clients["correct"] = correct
    notes = []
    if "scored_from" in result.summary:
        base = result.summary["scored_from"]
        notes.append(f"Scored from the final state of the {base['method']} run of the same setting (fingerprint "
                     f"{base['fingerprint']}), whose training this method shares exactly, instead of training "
                     "again: only the final round is evaluated, so the best round is the final one.")
    record = records.from_result(result, notebook, notes=notes, derived=derived, changes=records.active_changes())
    result.summary.update(derived)
    return record


def finished_base_run(config: ExperimentConfig) -> RunResult | None:
    """The finished run, in the same ``output_dir``, of the method whose training ``config``'s
    method shares exactly (:attr:`Algorithm.trains_as`: FedAvg-FT and kNN-Per train as
    FedAvg), with its final state; ``None`` if there is none (or the run is named, or holds
    new clients, which the base's training would not have scored)."""
    base_method = ALGORITHMS[config.method].trains_as
    if base_method is None or config.name is not None or config.new_clients:
        return None
    params = {k: v for k, v in config.method_params.items() if k in ALGORITHMS[base_method].hyperparams}
    try:
        base_dir = RunDirectory(config.replace(method=base_method, method_params=params))
    except (ValueError, OSError):  # a folder in use, in conflict or not writable: train instead
        return None
    if not base_dir.finished or not (base_dir.path / FINAL_STATE).exists():
        return None
    return RunResult.load(base_dir.path)


def _scored_from(sim: Simulation, rundir: RunDirectory, base: RunResult) -> RunResult:
    """This run scored from ``base``'s final state instead of trained: the same training
    (:attr:`Algorithm.trains_as`), so the same final server and client states, evaluated with
    this method's predictor (a test checks that this equals training it). Only the final
    round is evaluated; the per-round training metrics are the base run's."""
    config, data = sim.config, sim.data
    t0 = time.perf_counter()
    rundir.start()
    rundir.write_partition(list(data.partition.train), list(data.partition.test))
    this_stretch = records.stretch(config.rounds - 1)
    sim.restore(base.final_state())
    correct = sim.count_correct(config.rounds - 1)
    acc, scores = accuracies(correct, data.test_sizes), summarize(correct, data.test_sizes)
    history = [{k: v for k, v in h.items() if k not in scores} for h in base.history]
    history[-1].update(scores)
    seconds = float(base.summary["seconds"])  # the rounds are the base run's; add this evaluation
    seconds += time.perf_counter() - t0
    history[-1]["seconds"] = seconds
    scored_from = {"method": base.config.method, "fingerprint": base.config.fingerprint(),
                   "seconds_of_rounds": float(base.summary["seconds"])}
    return _result(config, history, [acc.tolist()], [config.rounds], seconds, data, rundir,
                   final_state=sim.snapshot(), stretches=[records.end_stretch(this_stretch, config.rounds,
                                                                               time.perf_counter() - t0)],
                   extra_summary={"scored_from": scored_from}, worker_processes=_processes_of(sim))


def _run_rounds(sim: Simulation, rundir: RunDirectory, on_round_end: Callable[[int, dict], None] | None,
                park_at: float | None = None, end_by: float | None = None) -> RunResult:
    """The rounds from the checkpoint (or the first), each recorded and checkpointed when due; at
    ``park_at`` (a Unix time, :data:`PARK_AT_ENV`) the round that ends after it checkpoints and the
    run stops with :class:`RunParked`; where the stretch's pace after :func:`pace_rounds` rounds
    would end the run after ``end_by`` (:data:`END_BY_ENV`), it stops with :class:`RunTooSlow`."""
    config, data = sim.config, sim.data
    history: list[dict] = []
    acc_history: list[list[float]] = []
    eval_rounds: list[int] = []
    seconds = 0.0
    start_round = 0
    ckpt = rundir.load_checkpoint()
    stretches: list[dict] = []
    if ckpt is not None:
        sim.restore(ckpt["sim"])
        history, acc_history, eval_rounds = ckpt["history"], _percent_history(ckpt), ckpt["eval_rounds"]
        seconds, start_round = float(ckpt["seconds"]), int(ckpt["next_round"])
        stretches = list(ckpt.get("stretches", []))
        rundir.clear_parked()  # it goes on
    else:
        rundir.start()
        rundir.write_partition(list(data.partition.train), list(data.partition.test))

    this_stretch, stretch_start = records.stretch(start_round), seconds
    judged_after, first_round_end = start_round + pace_rounds(config.rounds), seconds
    progress = _progress(range(start_round, config.rounds), config, initial=start_round)
    for r in progress:
        t0 = time.perf_counter()
        try:
            record = sim.run_round(r)
        except DivergenceError:
            rundir.write_progress(history)
            raise
        if r == start_round and ckpt is not None:
            _check_rebuilt(sim, ckpt["sim"], record, rundir)
        extras = sim.algorithm.report(sim.state)
        arrays = {k: np.asarray(v) for k, v in extras.items() if not np.isscalar(v)}
        record.update({k: float(v) for k, v in extras.items() if np.isscalar(v)})
        if arrays:
            rundir.write_arrays(r + 1, arrays)
        if (r + 1) % config.eval_every == 0 or r == config.rounds - 1:
            correct = sim.count_correct(r)
            record.update(summarize(correct, data.test_sizes))
            acc_history.append(accuracies(correct, data.test_sizes).tolist())
            eval_rounds.append(r + 1)
            for hook in sim.hooks:
                hook.evaluated(sim, r, record)
            progress.set_postfix(acc=f"{record['acc_mean']:.2f}", loss=f"{record['train_loss']:.3f}")
        seconds += time.perf_counter() - t0
        record["seconds"] = seconds
        history.append(record)
        parking = park_at is not None and r < config.rounds - 1 and time.time() >= park_at
        if ((r + 1) % config.checkpoint_every == 0 or parking) and r < config.rounds - 1:
            done = records.end_stretch(this_stretch, r + 1, seconds - stretch_start)
            rundir.save_checkpoint({"sim": sim.snapshot(next_round=r + 1), "history": history,
                                    "acc_history": acc_history, "accuracy_unit": ACCURACY_UNIT, "eval_rounds": eval_rounds,
                                    "seconds": seconds, "next_round": r + 1,
                                    "stretches": [*stretches, done]})
            rundir.write_progress(history)
        if parking:
            rundir.write_parked({"next_round": r + 2, "rounds": config.rounds, "seconds": round(seconds, 3),
                                 "parked": records.now()})
            raise RunParked(f"{config.method} (seed {config.seed}) parked after round {r + 1} of {config.rounds}, "
                            f"as {PARK_AT_ENV} asked; the same run resumes from round {r + 2} (its checkpoint in "
                            f"{rundir.path}).")
        if r == start_round:
            first_round_end = seconds
        if end_by is not None and r + 1 == judged_after and r < config.rounds - 1:
            per_round = (seconds - first_round_end) / (r - start_round)
            late = time.time() + per_round * (config.rounds - r - 1) - end_by
            if late > 0:
                rundir.write_progress(history)
                raise RunTooSlow(f"{config.method} (seed {config.seed}) stopped after round {r + 1} of {config.rounds}: "
                                 f"at {per_round:.1f} s a round here its rounds left would end {late:.0f} s after "
                                 f"the time {END_BY_ENV} gave.")
        if on_round_end is not None:
            on_round_end(r + 1, record)

    stretches.append(records.end_stretch(this_stretch, config.rounds, seconds - stretch_start))
    return _result(config, history, acc_history, eval_rounds, seconds, data, rundir,
                   getattr(sim.algorithm, "failure_counters", ()), final_state=sim.snapshot(), stretches=stretches,
                   worker_processes=_processes_of(sim))


def _check_rebuilt(sim: Simulation, snap: dict, record: dict, rundir: RunDirectory) -> None:
    """After the first round of a resume: a client whose rebuilt state the checkpoint left out
    (:meth:`Simulation.snapshot`) and whose training failed in that round has none, where the
    uninterrupted run would keep its old one; the run stops rather than go on unlike it."""
    lost = sorted(set(snap.get("rebuilt_for", ())) & {int(c) for c in record.get("failed", {})})
    if lost:
        raise ResultsError(f"client(s) {lost} failed in round {record['round']}, the first after the resume, and "
                           f"the checkpoint does not keep their {', '.join(sim.algorithm.rebuilt_client_state)} "
                           f"(rebuilt in every round they train), so the run cannot go on as an uninterrupted one "
                           f"would: run it again from its first round (delete {rundir.path}).")


def _processes_of(sim: Simulation) -> int:
    """How many processes trained the clients: a worker pool's size, else 0 (this process)."""
    return int(getattr(sim.executor, "num_workers", 0) or 0)


def _percent_history(ckpt: dict) -> list[list[float]]:
    """A checkpoint's per-client accuracies in percent: a checkpoint without
    ``accuracy_unit`` was written before pflcore kept accuracies in percent, in fractions."""
    if ckpt.get("accuracy_unit") == ACCURACY_UNIT:
        return ckpt["acc_history"]
    return (100 * np.asarray(ckpt["acc_history"], dtype=np.float64)).tolist()


def _result(config: ExperimentConfig, history: list[dict], acc_history: list[list[float]],
            eval_rounds: list[int], seconds: float, data: FederatedData, rundir: RunDirectory,
            failure_counters: Iterable[str] = (), final_state: dict | None = None,
            stretches: list[dict] | None = None, extra_summary: dict | None = None,
            worker_processes: int | None = None) -> RunResult:
    accs = np.asarray(acc_history, dtype=np.float64)
    means = np.array([h["acc_mean"] for h in history if "acc_mean" in h])
    pooled = np.array([h["acc_weighted"] for h in history if "acc_weighted" in h])
    best, best_pooled = int(np.nanargmax(means)), int(np.nanargmax(pooled))
    last = history[-1]
    new_acc = last.pop("new_clients_acc", None)  # per-client arrays go with the arrays, not the history
    summary = {
        "method": config.method, "dataset": config.dataset, "num_clients": data.num_clients,
        "acc_mean": last["acc_mean"], "acc_std": last["acc_std"], "acc_weighted": last["acc_weighted"],
        "best_acc_mean": float(means[best]), "best_round": int(eval_rounds[best]),
        # FedCP's and PFLlib's metric: the best evaluated round's sample-weighted (pooled) accuracy
        "best_acc_weighted": float(pooled[best_pooled]), "best_weighted_round": int(eval_rounds[best_pooled]),
        "final_train_loss": last["train_loss"], "rounds": config.rounds, "seconds": seconds,
        "status": "finished", "accuracy_unit": ACCURACY_UNIT,  # clients.npz too: old folders hold fractions
    }
    if new_acc is not None:  # new-client generalisation (config new_clients)
        summary.update({k: last[k] for k in ("new_acc_mean", "new_acc_std", "new_acc_weighted")})
        summary["new_clients"] = int(np.sum(~np.isnan(np.asarray(new_acc, dtype=np.float64))))
    failures = []
    for name in failure_counters:  # numbers the method reports that count its own failures
        per_round = [float(h.get(name, 0) or 0) for h in history]
        total = sum(per_round)
        summary[f"{name}_total"] = int(total) if float(total).is_integer() else total
        if total:
            failures.append(f"{name} {summary[f'{name}_total']} in {sum(v != 0 for v in per_round)} "
                            f"of {len(history)} rounds")
    if failures:
        summary["status"] = "finished with failures"
        warnings.warn(f"{config.method} counted failures of its own ({', '.join(failures)}), so these results "
                      f"are not those of the method as specified; summary.json in {rundir.path} records the totals.",
                      MethodFailureWarning, stacklevel=4)
    summary.update(extra_summary or {})
    summary["provenance"] = records.provenance(config, stretches or [], seconds, config.rounds, worker_processes)
    clients = {"final": accs[-1], "best": accs[best], "history": accs, "eval_rounds": np.asarray(eval_rounds),
               "train_sizes": data.train_sizes, "test_sizes": data.test_sizes,
               **({"new_final": np.asarray(new_acc, dtype=np.float64)} if new_acc is not None else {})}
    result = RunResult(config, summary, history, accs[-1], np.asarray(eval_rounds), accs, rundir.path,
                       clients=clients)
    rundir.finish(result, clients, final_state)
    return result


def _progress(rounds: Iterable[int], config: ExperimentConfig, initial: int) -> RoundProgress:
    return RoundProgress(rounds, total=config.rounds, initial=initial, desc=f"{config.method} {config.dataset}",
                         disable=config.quiet)


def sweep(configs: Iterable[ExperimentConfig | dict], **kwargs: Any) -> list[RunResult]:
    """Run several experiments in turn; finished ones are loaded, not re-run."""
    return [run(c, **kwargs) for c in configs]
