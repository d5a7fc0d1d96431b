"""Run an experiment on Flower's deployment engine: a SuperLink and N SuperNodes on 127.0.0.1.

    python -m pflcore.flower.deploy --config experiment.yaml --supernodes 2

starts, each in its own process group and logging to ``<workdir>/logs/``:

1. ``flower-superlink --insecure --host 127.0.0.1 --port P --database state.db
   --disable-runtime-dependency-installation``
2. N x ``flower-supernode --insecure --superlink 127.0.0.1:P --host 127.0.0.1 --port Q_i
   --node-config "partition-id=i num-partitions=N"``
3. ``flwr run <workdir>/app pflcore-local --run-config run_config.toml --stream``, where
   ``app/pyproject.toml`` points at :mod:`pflcore.flower.apps` and ``FLWR_HOME`` (a
   ``config.toml`` naming only this SuperLink) lies in the workdir,

waits for the run, stops every process it started by PID (its process group: SIGTERM,
then SIGKILL), and returns the run's :class:`~pflcore.engine.results.RunResult` from the
results directory (the same one ``pflcore.run`` would write). Everything stays on the
loopback interface, with Flower's telemetry, update check and runtime dependency
installation off. Every Flower command (those started here, and ``flower-superexec``,
``flwr-serverapp`` and ``flwr-clientapp``, which Flower starts by name) comes from the
folder of the running Python (``sys.executable``'s, e.g. ``.venv/bin``), whatever the
user's ``PATH``. Real machines: README, section "Flower".
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from ..engine.results import RunResult
from ..processes import is_alive as _alive, process_tree
from . import OFFLINE_ENV
from .app import _as_config, matching_threads
from .apps import RUN_CONFIG_DEFAULTS

CONNECTION = "pflcore-local"

APP_PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "pflcore-experiment"
version = "0.1.0"
description = "A pflcore experiment on Flower"
license = "MIT"
dependencies = []  # pflcore[flower] is installed on every machine beforehand

[tool.flwr.app]
publisher = "pflcore"

[tool.flwr.app.components]
serverapp = "pflcore.flower.apps:server_app"
clientapp = "pflcore.flower.apps:client_app"

[tool.flwr.app.config]
{config}
"""


#: What one SuperNode costs this machine, for the bound on ``supernodes``: a process whose
#: client app imports torch and builds the federation's data (an estimate, on the high side).
SUPERNODE_BYTES = 512 * 2 ** 20


class DeploymentError(RuntimeError):
    """The deployed run did not finish; the message says where its logs are."""


def supernode_limit(config: Any) -> tuple[int, str]:
    """The most SuperNodes worth starting for ``config`` and why: one per client at most (a
    node without a client has nothing to do), and no more than this machine's memory holds
    at :data:`SUPERNODE_BYTES` each."""
    from ..config import machine_memory

    memory = machine_memory()
    by_memory = max(1, memory // SUPERNODE_BYTES) if memory else config.num_clients
    if by_memory < config.num_clients:
        return by_memory, (f"each SuperNode is a process of up to about {SUPERNODE_BYTES / 2**30:.1f} GiB and this "
                           f"machine has {memory / 2**30:.1f} GiB")
    return config.num_clients, f"one per client of this run's {config.num_clients}; a node without a client idles"


def deploy(config: Any, *, supernodes: int = 2, workdir: str | Path | None = None, overwrite: bool = False,
           timeout: float | None = None, run_timeout: float = 900.0, startup_timeout: float = 60.0,
           threads: int | None = None, log=print) -> RunResult:
    """Run ``config`` (an ExperimentConfig, a mapping, or a YAML/JSON path) on a local
    SuperLink with ``supernodes`` SuperNodes; see the module docstring. ``timeout`` bounds
    each exchange (seconds), ``run_timeout`` the whole run; ``workdir`` (default: a new
    temporary folder) keeps the app, the logs and ``report.json`` (who served whom).
    ``threads``: torch threads per client job on the nodes (default: as the in-process
    engine would use for this config, see :func:`pflcore.flower.simulate`; 0: the nodes'
    own default)."""
    from ..errors import ConfigError, shorten

    config = _as_config(config)
    if not isinstance(supernodes, int) or isinstance(supernodes, bool) or supernodes < 1:
        raise ConfigError(f"supernodes = {shorten(supernodes)} is not allowed: it must be an integer >= 1.")
    most, why = supernode_limit(config)
    if supernodes > most:
        raise ConfigError(f"supernodes = {shorten(supernodes)} is not allowed: it must be at most {most} ({why}).")
    for name, value in (("run_timeout", run_timeout), ("startup_timeout", startup_timeout)):
        if not _seconds(value):
            raise ConfigError(f"{name} = {shorten(value)} is not allowed: it must be a number of seconds > 0.")
    if timeout is not None and not _seconds(timeout):
        raise ConfigError(f"timeout = {shorten(timeout)} is not allowed: it must be a number of seconds > 0, or None.")
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or not 0 <= threads <= 1024):
        raise ConfigError(f"threads = {shorten(threads)} is not allowed: it must be an integer in [0, 1024] (0: the "
                          "nodes' default).")
    if threads is None:
        threads = matching_threads(config)[0]
    # The ServerApp runs in a process of the SuperLink's: give it absolute paths.
    config = config.replace(output_dir=str(Path(config.output_dir).resolve()))
    work = Path(workdir).resolve() if workdir else Path(tempfile.mkdtemp(prefix="pflcore-deploy-"))
    claim_workdir(work)
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (work / "home").mkdir(exist_ok=True)
    (work / "app").mkdir(exist_ok=True)
    (work / "experiment.json").write_text(json.dumps(config.to_dict(), indent=1) + "\n")
    report = work / "report.json"
    report.unlink(missing_ok=True)
    run_config = {**RUN_CONFIG_DEFAULTS, "config": str(work / "experiment.json"), "overwrite": overwrite,
                  "timeout": float(timeout or 0.0), "min-nodes": supernodes, "join-timeout": float(startup_timeout),
                  "threads": threads, "report": str(report)}
    (work / "app" / "pyproject.toml").write_text(APP_PYPROJECT.format(config=_toml(RUN_CONFIG_DEFAULTS)))
    (work / "run_config.toml").write_text(_toml(run_config))
    port, *node_ports = free_ports(1 + supernodes)
    (work / "home" / "config.toml").write_text(
        f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
        f'address = "127.0.0.1:{port}"\ninsecure = true\n')
    env = _environment(work / "home")

    procs: list[subprocess.Popen] = []
    result: RunResult | None = None
    try:
        procs.append(_start([_tool("flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port", str(port),
                             "--database", str(work / "state.db"), "--disable-runtime-dependency-installation"],
                            logs / "superlink.log", env, work))
        _wait_for_port(port, startup_timeout, procs[0], logs / "superlink.log")
        for i, node_port in enumerate(node_ports):
            procs.append(_start([_tool("flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{port}",
                                 "--host", "127.0.0.1", "--port", str(node_port),
                                 "--node-config", f"partition-id={i} num-partitions={supernodes}"],
                                logs / f"supernode-{i}.log", env, work))
        log(f"SuperLink on 127.0.0.1:{port} and {supernodes} SuperNodes started; logs in {logs}")
        t0 = time.perf_counter()
        runner = _start([_tool("flwr"), "run", str(work / "app"), CONNECTION, "--run-config",
                         str(work / "run_config.toml"), "--stream"], logs / "flwr-run.log", env, work)
        procs.append(runner)
        try:
            runner.wait(timeout=run_timeout)
        except subprocess.TimeoutExpired:
            raise DeploymentError(f"the deployed run did not finish within {run_timeout:g} s; logs in {logs}.") from None
        # `flwr run --stream` returns when the run ends; the report is written just before.
        deadline = time.monotonic() + 10
        while not report.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        if not report.exists():
            raise DeploymentError(f"the deployed run ended without a result (flwr run exit code {runner.returncode}); "
                                  f"see {logs / 'flwr-run.log'}:\n{_tail(logs / 'flwr-run.log')}")
        info = json.loads(report.read_text())
        result = RunResult.load(info["path"])
        result.extras["flower"] = {**info.get("flower", {}), "wall_seconds": time.perf_counter() - t0,
                                   "workdir": str(work)}
        return result
    finally:
        stopped = stop(procs)
        if result is not None:
            result.extras["flower"]["stopped_pids"] = stopped


#: Written into every workdir deploy uses: a folder holding it is one deploy may write again.
WORKDIR_MARKER = ".pflcore-deploy"
#: What deploy writes into its workdir (a workdir of an earlier pflcore holds these and nothing else).
WORKDIR_ENTRIES = ("app", "home", "logs", "experiment.json", "report.json", "run_config.toml", WORKDIR_MARKER)


def claim_workdir(work: Path) -> None:
    """Refuse (one sentence naming ``workdir``) a folder deploy did not create: deploy writes its
    app, config and logs there, so a folder of the user's would have files overwritten. A new or
    empty folder, or one an earlier deploy wrote (the same command resumes there), is marked as deploy's."""
    from ..errors import ConfigError

    if work.exists() and not work.is_dir():
        raise ConfigError(f"workdir {work} is a file, and deploy writes a folder there; choose a new "
                          "folder (or none: a temporary one).")
    names = sorted(p.name for p in work.iterdir()) if work.is_dir() else []
    earlier = "experiment.json" in names and all(n in WORKDIR_ENTRIES or n.startswith("state.db") for n in names)
    if names and WORKDIR_MARKER not in names and not earlier:
        raise ConfigError(f"workdir {work} already holds files deploy did not write "
                          f"({', '.join(names[:5])[:160]}{', ...' if len(names) > 5 else ''}), and deploy "
                          "would overwrite its app/, home/, logs/ and config files there; choose a new or empty "
                          "folder (or none: a temporary one).")
    work.mkdir(parents=True, exist_ok=True)
    (work / WORKDIR_MARKER).write_text("a working folder of python -m pflcore.flower.deploy\n")


def stop(procs: Sequence[subprocess.Popen], grace: float = 10.0) -> list[int]:
    """Stop each process and everything it started, by PID: SIGTERM to the process, its
    descendants and its process group, then SIGKILL to whatever is left after ``grace`` s.
    (Flower starts some helpers in new sessions, so process groups alone are not enough.)
    Returns the PIDs it signalled."""
    pids = process_tree([p.pid for p in procs])
    for pid in pids:
        _kill(pid, signal.SIGTERM)
    for proc in procs:
        _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        for proc in procs:
            proc.poll()  # reap our own children
        time.sleep(0.1)
    for pid in process_tree([pid for pid in pids if _alive(pid)]):
        _kill(pid, signal.SIGKILL)
    for proc in procs:
        _signal_group(proc.pid, signal.SIGKILL)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    return pids


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on 127.0.0.1 right now."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# ---------------------------------------------------------------------- internals
def _start(cmd: list[str], logfile: Path, env: dict, cwd: Path) -> subprocess.Popen:
    with open(logfile, "ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=cwd, start_new_session=True)


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _bin_dir() -> Path:
    """The folder of the running Python, where its environment's commands are installed
    (not resolved: a venv's ``python`` links to the base interpreter elsewhere)."""
    return Path(sys.executable).parent


def _environment(flwr_home: Path) -> dict:
    """The environment of every process the deployment starts: offline, its own
    ``FLWR_HOME``, and this Python's folder first on ``PATH``, so that the commands Flower
    starts by name are this environment's, also when the venv was never activated."""
    path = os.environ.get("PATH", os.defpath)
    return {**os.environ, **OFFLINE_ENV, "FLWR_HOME": str(flwr_home),
            "PATH": os.pathsep.join([str(_bin_dir()), *filter(None, path.split(os.pathsep))])}


def _tool(name: str) -> str:
    """A Flower command from this Python's environment (never from the user's ``PATH``)."""
    here = _bin_dir() / name
    if not (here.is_file() and os.access(here, os.X_OK)):
        raise FileNotFoundError(f"the Flower command {name!r} is not installed beside {sys.executable}: install "
                                f"Flower into that environment with `{sys.executable} -m pip install -e .[flower]`.")
    return str(here)


def _wait_for_port(port: int, timeout: float, proc: subprocess.Popen, logfile: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DeploymentError(f"the SuperLink exited with code {proc.returncode}:\n{_tail(logfile)}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise DeploymentError(f"the SuperLink did not open 127.0.0.1:{port} within {timeout:g} s:\n{_tail(logfile)}")


def _seconds(value: Any) -> bool:
    """A finite, positive number of seconds (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _toml(values: dict) -> str:
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())  # JSON scalars are TOML scalars


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def main(argv: Sequence[str] | None = None) -> int:
    """The command: a mistake (a bad or missing config, a bad number of SuperNodes) or a
    failed deployment is one line on stderr with exit code 2 (1 for an unexpected error),
    never a traceback; ``--debug`` or ``PFLCORE_DEBUG=1`` shows the traceback instead."""
    from ..cli import EXIT_INTERRUPTED, EXIT_USER_ERROR, _known_errors, describe

    prog = "python -m pflcore.flower.deploy"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="experiment YAML/JSON file")
    parser.add_argument("--supernodes", type=int, default=2, help="number of SuperNodes (default 2)")
    parser.add_argument("--workdir", default=None, help="folder for the app, logs and report (default: a temp dir)")
    parser.add_argument("--overwrite", action="store_true", help="replace a results directory holding this run")
    parser.add_argument("--timeout", type=float, default=None, help="seconds to wait for the nodes per exchange")
    parser.add_argument("--run-timeout", type=float, default=900.0, help="seconds for the whole run (default 900)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads per client job (default: as in-process; 0: the nodes' default)")
    parser.add_argument("--debug", action="store_true",
                        help="show Python tracebacks instead of one-line errors (also: PFLCORE_DEBUG=1)")
    args = parser.parse_args(argv)
    debug = args.debug or os.environ.get("PFLCORE_DEBUG", "") not in ("", "0")
    from ..engine.results import OVERWRITE_FLAG_ENV

    saved = os.environ.get(OVERWRITE_FLAG_ENV)
    os.environ[OVERWRITE_FLAG_ENV] = "--overwrite"  # the nodes' sentences name the flag (they inherit it)
    try:
        result = deploy(args.config, supernodes=args.supernodes, workdir=args.workdir, overwrite=args.overwrite,
                        timeout=args.timeout, run_timeout=args.run_timeout, threads=args.threads)
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{prog}: interrupted; every process it started was stopped, and the same command resumes the run "
              "from its last checkpoint.", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if debug:
            raise
        text = str(exc).splitlines()[0] if isinstance(exc, DeploymentError) else describe(exc)  # logs hold the rest
        print(f"{prog}: {text}", file=sys.stderr)
        return EXIT_USER_ERROR if isinstance(exc, (*_known_errors(), DeploymentError)) else 1
    finally:
        if saved is None:
            os.environ.pop(OVERWRITE_FLAG_ENV, None)
        else:
            os.environ[OVERWRITE_FLAG_ENV] = saved
    s = result.summary
    print(f"{s['method']} on {args.supernodes} SuperNodes: acc_mean {s['acc_mean']:.2f} +- {s['acc_std']:.2f} "
          f"after {s['rounds']} rounds; results in {result.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
