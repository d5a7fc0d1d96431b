"""pflcore methods as Flower apps: the server drives the engine, the clients do the work.

Server: :func:`serve` waits for the SuperNodes, asks each for its ``partition-id`` (one
QUERY round), assigns the federation's clients to nodes (:func:`assign_clients`), then runs
the unchanged engine (:func:`pflcore.engine.simulation.run`) with a :class:`GridExecutor`:
each exchange sends every node one message (TRAIN for local updates, EVALUATE for
personalised evaluation, QUERY for a method's collect phase) with the jobs of the clients it serves, each with that client's
own payload (FedPAC: its personal head), its personal state, and the experiment config.
A node that fails or does not answer in time leaves its clients out of that round (the
engine records them under ``"failed"``); the rounds go on with the others. One message
per node, not per client, because a deployed node starts a new process per message.

Client: :func:`make_client_app` builds, once per process and config, the federation's data
from the config and the engine's :class:`~pflcore.engine.jobs.ClientWorker`, decodes
the job, runs it and sends back the update (or the number of correct test predictions)
and the new personal state. Nodes keep nothing between messages: the server's engine owns
and checkpoints the personal states, so any node can serve any client id. (Each node here
builds the whole federation's data from the config; a real deployment would load only its
own partition.)
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
import time
import uuid
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Collection, Iterator, Mapping

import torch
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from ..config import ExperimentConfig
from ..errors import ConfigError, shorten
from ..engine.executors import available_cores, resolve_workers
from ..engine.jobs import JOB_KINDS, ClientJob, ClientResult, ClientWorker
from ..engine.results import RunDirectory, RunResult
from ..engine.simulation import build_data, run
from .codec import decode, encode

log = logging.getLogger(__name__)

JOB = "job"          # ConfigRecord: kind, round, token, config, threads, clients (JSON), fail
RESULT = "result"    # ConfigRecord of a reply: token, errors (JSON: job index -> why), seconds
NODE = "node"        # ConfigRecord of a QUERY reply: partition-id
# The Flower message type of each job kind (train, evaluate; collect travels as a query).
_MESSAGE_TYPES = {name: getattr(MessageType, kind.message_type.upper()) for name, kind in JOB_KINDS.items()}


# ====================================================================== server side
class ClientsFailed(RuntimeError):
    """Every client job of an exchange raised an error: most likely a bug, not a flaky node."""


class GridExecutor:
    """An engine executor whose clients are Flower nodes reached through a ``Grid``.

    ``client_nodes`` maps every client id to the node that serves it. Each exchange sends
    one message per node (TRAIN for local updates, EVALUATE for personalised evaluation)
    holding the jobs of the clients it serves: each client's own payload and personal
    state, the config and the round. ``timeout`` (seconds, ``None`` = wait for every reply)
    bounds each exchange; a node's missing or error reply fails its clients' jobs, a job
    that raises on the node fails alone (see :func:`handle`); the engine leaves failed
    clients out of the round and records them. If every job of an exchange raised,
    :class:`ClientsFailed` stops the run (a bug would otherwise skip every round).

    ``threads`` > 0 asks the nodes to use that many torch threads (``simulate`` passes
    this process's count so the numbers match the in-process engine). ``fail_clients``:
    the nodes serving these client ids are told to raise instead of working (testing fault
    tolerance). ``log`` records each exchange: who got what (a digest of each payload
    entry), on which node, how long it took and who failed.
    """

    def __init__(self, grid: Grid, config: ExperimentConfig, client_nodes: Mapping[int, int], *,
                 timeout: float | None = None, threads: int = 0, fail_clients: Collection[int] = ()):
        missing = [c for c in range(config.num_clients) if c not in client_nodes]
        if missing:
            raise ValueError(f"clients {missing} have no Flower node to run on.")
        self.grid = grid
        self.client_nodes = {int(c): int(n) for c, n in client_nodes.items()}
        self.timeout = timeout
        self.threads = int(threads)
        self.fail_clients = {int(c) for c in fail_clients}
        self.config_json = json.dumps(config.to_dict(), sort_keys=True)
        self.log: list[dict] = []

    def run(self, jobs: list[ClientJob]) -> list[ClientResult]:
        t0 = time.perf_counter()
        groups: dict[tuple[int, str], list[int]] = {}  # (node, kind) -> indices into jobs
        for i, job in enumerate(jobs):
            groups.setdefault((self.client_nodes[job.client_id], job.kind), []).append(i)
        sent = []
        for (node, kind), idx in groups.items():
            token = uuid.uuid4().hex
            records: dict[str, Any] = {JOB: ConfigRecord({
                "kind": kind, "round": int(jobs[idx[0]].round), "token": token, "config": self.config_json,
                "threads": self.threads, "clients": json.dumps([int(jobs[i].client_id) for i in idx]),
                "fail": any(jobs[i].client_id in self.fail_clients for i in idx)})}
            for k, i in enumerate(idx):
                records.update(encode(jobs[i].payload, f"payload.{k}"))
                records.update(encode(jobs[i].state, f"state.{k}"))
            kwargs = {"ttl": float(self.timeout)} if self.timeout else {}
            msg = Message(RecordDict(records), dst_node_id=node, message_type=_MESSAGE_TYPES[kind],
                          group_id=str(jobs[idx[0]].round), **kwargs)
            sent.append((node, idx, token, msg))
        replies = {r.metadata.reply_to_message_id: r
                   for r in self.grid.send_and_receive([m for *_, m in sent], timeout=self.timeout)}
        results: list[ClientResult | None] = [None] * len(jobs)
        raised = 0
        memo: dict[int, str] = {}  # payload entries shared by several clients are hashed once
        for node, idx, token, msg in sent:
            for i, (result, from_node) in zip(idx, self._unpack(jobs, node, idx, token,
                                                                replies.get(msg.metadata.message_id))):
                results[i] = result
                raised += from_node
        self.log.append({"round": jobs[0].round + 1 if jobs else None, "kind": jobs[0].kind if jobs else None,
                         "seconds": time.perf_counter() - t0,
                         "jobs": [{"client": job.client_id, "node": self.client_nodes[job.client_id],
                                   "payload": _digests(job.payload, memo),
                                   **({"error": r.error} if r.failed else {})} for job, r in zip(jobs, results)]})
        if jobs and raised == len(jobs):
            raise ClientsFailed(f"every client job of round {jobs[0].round + 1} failed on its node; the first: "
                                f"{results[0].error}")
        return results  # type: ignore[return-value]

    def _unpack(self, jobs: list[ClientJob], node: int, idx: list[int], token: str,
                reply: Message | None) -> list[tuple[ClientResult, bool]]:
        """One (result, raised-on-the-node) per job of a node's message."""
        def failed(why: str, raised: bool) -> list[tuple[ClientResult, bool]]:
            return [(ClientResult(None, jobs[i].state, error=why), raised) for i in idx]

        if reply is None:
            return failed(f"node {node} sent no reply within {self.timeout} s", False)
        if reply.has_error():
            return failed(f"node {node} failed: {readable_reason(reply.error.reason)}", True)
        try:
            head = reply.content[RESULT]
            if head["token"] != token:
                raise ValueError("the reply answers another message")
            errors = {int(k): v for k, v in json.loads(str(head["errors"])).items()}
            out = []
            for k, i in enumerate(idx):
                if k in errors:
                    out.append((ClientResult(None, jobs[i].state, error=f"node {node}: {errors[k]}"), True))
                    continue
                keeps = JOB_KINDS[jobs[i].kind].keeps_state
                state = decode(reply.content, f"state.{k}") if keeps else jobs[i].state
                out.append((ClientResult(decode(reply.content, f"output.{k}"), state), False))
            return out
        except (KeyError, TypeError, ValueError) as exc:
            return failed(f"node {node} sent an unreadable reply: {exc}", True)

    def close(self) -> None:
        pass


_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")  # terminal colour and cursor codes
_ERROR_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Exception|Interrupt|Exit|Failed)):\s*(\S.*?)\s*$")
_WRAPPERS = ("ClientAppException", "RayTaskError", "RayActorError")  # how Flower and Ray pass an error on


def readable_reason(reason: Any) -> str:
    """A failing node's reason as one readable sentence: Flower's ``<class 'X'>:<'text'>`` and
    Ray's task-error text (a traceback, coloured for a terminal) become ``X: the error's own
    message`` (the last ``SomeError: ...`` line raised by the node's code, not the wrappers
    Flower and Ray put around it), without terminal codes, on one line."""
    text = _ANSI.sub("", str(reason))
    kind = ""
    wrapped = re.fullmatch(r"\s*<class '([\w.]+)'>:<'(.*)'>\s*", text, flags=re.DOTALL)
    if wrapped:
        kind, text = wrapped.group(1).rsplit(".", 1)[-1], wrapped.group(2)
    lines = [line for line in text.replace("\\n", "\n").splitlines() if line.strip()]
    errors = [m for m in map(_ERROR_LINE.match, lines) if m and m.group(1) not in _WRAPPERS]
    passed_on = [m for m in (re.search(r"occurred\. Message: (\S.*)$", line) for line in lines) if m]
    if errors:  # the innermost error raised on the node (a traceback ends with it)
        kind, message = errors[-1].group(1), errors[-1].group(2)
    elif passed_on:  # Flower's "Exception ClientAppException occurred. Message: ..."
        message = passed_on[-1].group(1)
    else:
        message = lines[-1].strip() if lines else "no reason given"
    sentence = " ".join((f"{kind}: {message}" if kind else message).split())
    if len(sentence) > 400:
        sentence = sentence[:397] + "..."
    return sentence if sentence.endswith((".", "!", "?")) else sentence + "."


def wait_for_nodes(grid: Grid, min_nodes: int, timeout: float) -> list[int]:
    """The connected node ids, once at least ``min_nodes`` have joined (or fail after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(int(n) for n in grid.get_node_ids())
        if len(nodes) >= min_nodes:
            return nodes
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(nodes)} of {min_nodes} Flower nodes joined within {timeout:g} s.")
        time.sleep(0.2)


def query_partitions(grid: Grid, nodes: list[int], timeout: float | None) -> dict[int, int | None]:
    """One QUERY round: each answering node's ``partition-id`` (``None`` where it has none).
    Nodes that do not answer in time are left out."""
    messages = [Message(RecordDict({NODE: ConfigRecord({"ask": "partition-id"})}), dst_node_id=n,
                        message_type=MessageType.QUERY) for n in nodes]
    replies = grid.send_and_receive(messages, timeout=timeout)
    out: dict[int, int | None] = {}
    for reply in replies:
        if reply.has_error():
            log.warning("node %s failed the partition query: %s", reply.metadata.src_node_id,
                        readable_reason(reply.error.reason))
            continue
        pid = int(reply.content[NODE]["partition-id"])
        out[int(reply.metadata.src_node_id)] = pid if pid >= 0 else None
    return out


def assign_clients(partitions: Mapping[int, int | None], num_clients: int) -> dict[int, int]:
    """Client id -> node id. Nodes are ranked by ``partition-id`` (nodes without one last,
    ties by node id) and client ``c`` goes to the node of rank ``c % len(nodes)``: with
    partition ids 0..N-1, client ``c`` is served by the node whose partition-id is ``c mod N``
    (so by partition ``c`` itself when N == num_clients)."""
    if not partitions:
        raise RuntimeError("no Flower node answered: there is nobody to run the clients on.")
    ranked = sorted(partitions, key=lambda n: (partitions[n] is None, partitions[n] or 0, n))
    return {c: ranked[c % len(ranked)] for c in range(num_clients)}


def serve(grid: Grid, config: ExperimentConfig | dict, *, overwrite: bool = False, timeout: float | None = None,
          min_nodes: int = 1, join_timeout: float = 120.0, threads: int = 0, fail_clients: Collection[int] = (),
          on_round_end: Callable[[int, dict], None] | None = None) -> RunResult:
    """The ServerApp's work: find the nodes, map clients to them, run the experiment through
    them. Returns the run's result; ``result.extras["flower"]`` says which node served which
    client and what each exchange sent (payload digests), took and lost."""
    config = _as_config(config)
    t0 = time.perf_counter()
    nodes = wait_for_nodes(grid, min_nodes, join_timeout)
    t1 = time.perf_counter()
    # like every exchange: ``timeout`` None waits for each node's answer (a loaded machine
    # can take minutes to start the nodes' apps; a fixed wait here once lost them all)
    partitions = query_partitions(grid, nodes, timeout)
    t2 = time.perf_counter()
    if not partitions:
        raise RuntimeError(f"none of the {len(nodes)} Flower nodes answered the partition query"
                           f"{f' within {timeout:g} s' if timeout else ''} (each failure is logged above): "
                           "there is nobody to run the clients on.")
    client_nodes = assign_clients(partitions, config.num_clients)
    executor = GridExecutor(grid, config, client_nodes, timeout=timeout, threads=threads, fail_clients=fail_clients)
    try:
        result = run(config, overwrite=overwrite, executor=executor, on_round_end=on_round_end)
    finally:
        executor.close()
    result.extras["flower"] = {"nodes": {str(n): p for n, p in partitions.items()},
                               "clients": {str(c): n for c, n in client_nodes.items()},
                               "join_seconds": t1 - t0, "query_seconds": t2 - t1,
                               "run_seconds": time.perf_counter() - t2, "exchanges": executor.log}
    return result


def make_server_app(config: ExperimentConfig | dict, *, on_result: Callable[[RunResult], None] | None = None,
                    **serve_kwargs: Any) -> ServerApp:
    """A ServerApp that runs ``config`` (see :func:`serve` for the keyword arguments) and
    hands the :class:`RunResult` to ``on_result``."""
    config = _as_config(config)
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        result = serve(grid, config, **serve_kwargs)
        if on_result is not None:
            on_result(result)

    return app


# ====================================================================== client side
_WORKERS: dict[str, ClientWorker] = {}  # this process's worker for the current config


def client_worker(config_json: str, data_root: str | None = None) -> ClientWorker:
    """The engine's ClientWorker for a config (built once per process and config: data,
    method, settings and scratch model exactly as the in-process engine builds them)."""
    key = hashlib.sha256(f"{config_json}\0{data_root}".encode()).hexdigest()
    if key not in _WORKERS:
        values = json.loads(config_json)
        if data_root:
            values["data_root"] = data_root
        config = ExperimentConfig.from_dict(values)
        _WORKERS.clear()  # one federation's data at a time
        _WORKERS[key] = ClientWorker.for_run(config, build_data(config))
    return _WORKERS[key]


def handle(msg: Message, context: Context) -> Message:
    """Run the jobs in ``msg`` (any kind of :data:`~pflcore.engine.jobs.JOB_KINDS`) on this
    node and reply with their results.

    A job that raises is reported in the reply (that client fails, the others on this node
    go on); anything else that goes wrong fails the whole message (Flower's error reply)."""
    head = msg.content[JOB]
    kind, clients = str(head["kind"]), [int(c) for c in json.loads(str(head["clients"]))]
    if _MESSAGE_TYPES.get(kind) != msg.metadata.message_type.split(".")[0]:
        raise ValueError(f"a {msg.metadata.message_type!r} message carries {kind!r} jobs.")
    if bool(head["fail"]):
        raise RuntimeError(f"the node serving clients {clients} was told to fail (pflcore fault-tolerance test)")
    threads = int(head["threads"])
    if threads > 0 and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    data_root = context.node_config.get("data-root")
    worker = client_worker(str(head["config"]), str(data_root) if data_root else None)
    records: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for k, cid in enumerate(clients):
        job = ClientJob(kind, cid, int(head["round"]), decode(msg.content, f"payload.{k}"),
                        decode(msg.content, f"state.{k}"))
        try:
            result = worker.run(job)
        except Exception as exc:  # this client fails; the node's other clients go on
            log.exception("client %s failed", cid)
            errors[str(k)] = f"client {cid} raised {type(exc).__name__}: {exc}"
            continue
        records.update(encode(result.output, f"output.{k}"))
        if JOB_KINDS[kind].keeps_state:
            records.update(encode(result.state, f"state.{k}"))
    records[RESULT] = ConfigRecord({"token": str(head["token"]), "errors": json.dumps(errors),
                                    "seconds": time.perf_counter() - t0})
    return Message(RecordDict(records), reply_to=msg)


def make_client_app() -> ClientApp:
    """The ClientApp for every pflcore method: the config travels in each message, so one
    app serves any experiment. A node's ``partition-id`` (node config) is reported to the
    server; ``data-root`` in the node config overrides where the node finds the dataset."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return handle(msg, context)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        return handle(msg, context)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        if JOB in msg.content:  # a method's collect phase
            return handle(msg, context)
        pid = context.node_config.get("partition-id")
        return Message(RecordDict({NODE: ConfigRecord({"partition-id": int(pid) if pid is not None else -1})}),
                       reply_to=msg)

    return app


# ====================================================================== simulation
def simulate(config: ExperimentConfig | dict, *, num_supernodes: int | None = None, overwrite: bool = False,
             timeout: float | None = None, client_cpus: float | None = None, threads: int | None = None,
             fail_clients: Collection[int] = (), on_round_end: Callable[[int, dict], None] | None = None,
             verbose: bool = False) -> RunResult:
    """Run ``config`` on Flower's simulation engine in this process and return its result.

    Same results object and results directory as :func:`pflcore.run` (a finished run there
    is loaded, not re-run; use another ``output_dir`` or ``name`` to compare the two).
    ``num_supernodes`` (default: one per client) virtual nodes with ``partition-id``
    0..N-1; with fewer nodes than clients a node serves several client ids.

    By default the nodes work the way the in-process engine would for this config, so the
    numbers match: with worker processes (``workers``, default ``"auto"``: one per core)
    each client job gets one torch thread and ``cores / workers`` of Ray's CPUs (that many
    jobs at once); in-process (``workers=0``) one job at a time with this process's torch
    threads. ``client_cpus`` (Ray CPUs per client job) and ``threads`` (torch threads per
    job) override this. ``timeout`` bounds each exchange (seconds; ``None``: wait).
    ``fail_clients``: the nodes serving these client ids raise instead of working
    (fault-tolerance tests). ``on_round_end`` as in :func:`pflcore.run` (called in the
    ServerApp's thread); ``verbose`` shows Flower's and Ray's logs.
    """
    config = _as_config(config)
    cores = available_cores()
    n = config.num_clients if num_supernodes is None else num_supernodes
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ConfigError(f"num_supernodes = {shorten(num_supernodes)} is not allowed: it must be an integer >= 1.")
    if n > config.num_clients:
        raise ConfigError(f"num_supernodes = {shorten(num_supernodes)} is not allowed: it must be at most "
                          f"{config.num_clients}, one per client of this run (a node without a client idles, and "
                          "each virtual node costs memory).")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout = {timeout!r} is not allowed: it must be a number of seconds > 0, or None.")
    default_threads, parallel = matching_threads(config)
    cpus = cores / parallel if client_cpus is None else client_cpus
    if not isinstance(cpus, (int, float)) or isinstance(cpus, bool) or not 0 < cpus <= cores:
        raise ValueError(f"client_cpus = {client_cpus!r} is not allowed: it must be a number in (0, {cores}].")
    threads = default_threads if threads is None else threads
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise ValueError(f"threads = {threads!r} is not allowed: it must be an integer >= 0 (0: the node's default).")
    bad = [c for c in fail_clients if not 0 <= int(c) < config.num_clients]
    if bad:
        raise ValueError(f"fail_clients {bad} are not client ids of this run (0..{config.num_clients - 1}).")

    rundir = RunDirectory(config, overwrite=False) if not overwrite else None
    if rundir is not None and rundir.finished:
        return RunResult.load(rundir.path)

    from flwr.simulation import run_simulation

    box: list[RunResult] = []
    server_app = make_server_app(config, on_result=box.append, overwrite=overwrite, timeout=timeout, min_nodes=n,
                                 threads=threads, fail_clients=fail_clients, on_round_end=on_round_end)
    gpus = 1.0 if config.device.startswith("cuda") else 0.0
    backend_config = {"client_resources": {"num_cpus": cpus, "num_gpus": gpus},
                      "init_args": {"num_cpus": cores, "include_dashboard": False,
                                    "logging_level": logging.INFO if verbose else logging.ERROR,
                                    "log_to_driver": bool(verbose)}}
    with _flower_logging(verbose, config.quiet), warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module="ray")  # a tip about GPU env vars
        run_simulation(server_app=server_app, client_app=make_client_app(), num_supernodes=n,
                       backend_config=backend_config, verbose_logging=verbose)
    if not box:
        raise RuntimeError("the Flower simulation ended without a result (see the log above for the ServerApp's error).")
    return box[0]


# ====================================================================== helpers
def matching_threads(config: ExperimentConfig) -> tuple[int, int]:
    """(torch threads per client job, jobs at once) of the in-process engine for ``config``:
    worker processes use one thread each; in-process work uses this process's threads."""
    workers = resolve_workers(config.workers, device=config.device, num_clients=config.num_clients)
    return (1, workers) if workers > 1 else (torch.get_num_threads(), 1)


def _as_config(config: ExperimentConfig | dict | str | Path) -> ExperimentConfig:
    """A validated config from a config, a mapping, a YAML/JSON file or a JSON string."""
    if isinstance(config, ExperimentConfig):
        config.validate()
        return config
    if isinstance(config, dict):
        return ExperimentConfig.from_dict(config)
    if isinstance(config, (str, Path)):
        text = str(config).strip()
        if text.startswith("{"):
            try:
                values = json.loads(text)
            except (ValueError, RecursionError) as exc:
                raise ConfigError(f"config text {shorten(text)} is not valid JSON ({shorten(str(exc))[1:-1]}).") from None
            return ExperimentConfig.from_dict(values)
        return ExperimentConfig.from_yaml(text)  # YAML is a superset of JSON; a missing file is one sentence
    raise ConfigError(f"config must be an ExperimentConfig, a mapping or a file path, got {type(config).__name__}.")


def _digests(value: Any, memo: dict[int, str]) -> dict[str, str]:
    """A short hash of each top-level entry of a payload (to see who was sent what);
    ``memo`` caches them by object id while the payloads are alive."""
    def one(v: Any) -> str:
        if id(v) not in memo:
            memo[id(v)] = _digest(v)
        return memo[id(v)]

    if not isinstance(value, dict):
        return {".": one(value)}
    return {str(k): one(v) for k, v in value.items()}


def _digest(value: Any) -> str:
    h = hashlib.sha1()

    def walk(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu().contiguous()
            h.update(str(t.dtype).encode() + str(tuple(t.shape)).encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(v, dict):
            for k in v:
                h.update(repr(k).encode())
                walk(v[k])
        elif isinstance(v, (list, tuple)):
            for item in v:
                walk(item)
        else:
            h.update(repr(v).encode())

    walk(value)
    return h.hexdigest()[:12]


@contextmanager
def _flower_logging(verbose: bool, quiet: bool) -> Iterator[None]:
    """Flower's INFO logs only when asked for; errors always show."""
    logger = logging.getLogger("flwr")
    saved = logger.level
    if not verbose:
        logger.setLevel(logging.ERROR if quiet else logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(saved)


__all__ = ["ClientsFailed", "GridExecutor", "assign_clients", "client_worker", "handle", "make_client_app",
           "make_server_app", "matching_threads", "query_partitions", "serve", "simulate", "wait_for_nodes"]
