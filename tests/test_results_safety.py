"""Results directories under stress: two processes on one run, output locations that cannot
hold results, damaged or foreign files, and the permissions of what a run writes."""
from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import pflcore.engine.simulation as simulation
from pflcore.engine import run
from pflcore.engine.results import LOCK_NAME, ResultsError, RunDirectory, RunResult, atomic_write_json

from conftest import run_killed_after


def one_sentence(message: str) -> bool:
    return message.endswith(".") and ". " not in message and "\n" not in message


def no_data(monkeypatch):
    """Make loading the data fail loudly: a check that must come first did not."""
    def fail(config):
        raise AssertionError("the data was loaded before the output location was checked")
    monkeypatch.setattr(simulation, "build_data", fail)


def wait_for(predicate, proc, seconds=120.0):
    deadline = time.time() + seconds
    while not predicate():
        assert proc.poll() is None, f"the child process ended early: {proc.communicate()}"
        assert time.time() < deadline, "the child process did not get ready in time"
        time.sleep(0.02)


# ----------------------------------------------------------------------------- two processes
PAUSING_RUN = """
import json, sys
from pflcore.config import ExperimentConfig
from pflcore.engine import run

cfg = ExperimentConfig.from_dict(json.loads(sys.argv[1]))
planted = sys.argv[2]

def pause(round_number, record):
    if round_number == 1:  # a live writer's temporary file, then wait for the parent
        open(planted, "w").write("half-written")
        print("ready", flush=True)
        sys.stdin.readline()

run(cfg, on_round_end=pause)
"""


def test_second_process_is_refused_and_the_running_one_is_not_harmed(make_config, tmp_path):
    cfg = make_config(rounds=3, name="shared")
    rundir = Path(cfg.output_dir) / "shared"
    planted = rundir / ".metrics.json.live.tmp"
    child = subprocess.Popen([sys.executable, "-c", PAUSING_RUN, json.dumps(cfg.to_dict()), str(planted)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready", child.communicate()
        with pytest.raises(ResultsError, match=f"in use by another process \\(pid {child.pid}\\)") as err:
            run(cfg)
        assert one_sentence(str(err.value))
        assert planted.exists(), "the second starter deleted the running process's temporary file"
        out, errors = child.communicate("go\n", timeout=120)
        assert child.returncode == 0, errors
    finally:
        if child.poll() is None:
            child.kill()
    assert (rundir / "summary.json").exists()
    assert not (rundir / LOCK_NAME).exists()
    loaded = run(cfg)  # finished: read back, nothing re-run
    assert loaded.summary["rounds"] == 3


HOLD_LOCK = """
import fcntl, sys
f = open(sys.argv[1], "a+")
fcntl.flock(f, fcntl.LOCK_EX)
f.seek(0); f.truncate(); f.write("4242\\n"); f.flush()
print("locked", flush=True)
sys.stdin.readline()
"""


def test_a_finished_run_is_read_while_another_process_holds_its_lock(make_config):
    first = run(make_config(rounds=2, name="done"))
    child = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(first.path / LOCK_NAME)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "locked"
        again = run(make_config(rounds=2, name="done"))
        assert again.summary == first.summary
        with pytest.raises(ResultsError, match=r"in use by another process \(pid 4242\)"):
            run(make_config(rounds=2, name="done"), overwrite=True)
        assert (first.path / "summary.json").exists()
    finally:
        child.communicate("\n", timeout=60)


def test_stale_temporary_files_go_once_the_lock_is_held(make_config):
    cfg = make_config(rounds=2, name="stale")

    run_killed_after(cfg.replace(checkpoint_every=1))
    rundir = Path(cfg.output_dir) / "stale"
    assert not (rundir / LOCK_NAME).exists(), "the lock file outlived the run that held it"
    stale = rundir / ".checkpoint.pt.dead.tmp"
    stale.write_bytes(b"left by a killed writer")
    run(cfg.replace(checkpoint_every=1))
    assert not stale.exists()


def test_a_run_whose_data_fails_leaves_nothing(make_config, tmp_path, monkeypatch):
    def fail(config):
        raise FileNotFoundError("no such dataset here.")
    monkeypatch.setattr(simulation, "build_data", fail)
    cfg = make_config(output_dir=str(tmp_path / "new" / "results"))
    with pytest.raises(FileNotFoundError, match="no such dataset"):
        run(cfg)
    assert not (tmp_path / "new").exists()


def test_a_run_that_fails_before_writing_removes_its_folder_and_lock(make_config, tmp_path, monkeypatch):
    monkeypatch.setattr(simulation.Simulation, "use_workers", lambda self, w: (_ for _ in ()).throw(OSError("boom")))
    cfg = make_config(output_dir=str(tmp_path / "out"))
    with pytest.raises(OSError, match="boom"):
        run(cfg)
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- where results go
def test_output_dir_that_is_a_file(make_config, tmp_path, monkeypatch):
    no_data(monkeypatch)
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    for out in (a_file, a_file / "sub"):
        with pytest.raises(ResultsError, match="is a file") as err:
            run(make_config(output_dir=str(out)))
        assert one_sentence(str(err.value)) and "notes.txt" in str(err.value)
    assert a_file.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_run_folder_that_is_a_file(make_config, tmp_path, monkeypatch):
    no_data(monkeypatch)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "exp").write_text("mine")
    with pytest.raises(ResultsError, match="is a file") as err:
        run(make_config(name="exp"))
    assert one_sentence(str(err.value))


def test_name_longer_than_the_filesystem_allows(make_config, tmp_path, monkeypatch):
    no_data(monkeypatch)
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    with pytest.raises(ValueError, match="name") as err:
        run(make_config(name="n" * (limit + 1)))
    assert one_sentence(str(err.value)) and str(limit) in str(err.value)
    with pytest.raises(ValueError, match="shorter") as err:
        run(make_config(output_dir=str(tmp_path / ("d" * (limit + 1)) / "results")))
    assert one_sentence(str(err.value))
    assert not (tmp_path / "results").exists()


def test_null_output_dir(make_config, tmp_path, monkeypatch):
    no_data(monkeypatch)
    values = {**make_config().to_dict(), "output_dir": None}
    with pytest.raises(ValueError, match="output_dir") as err:
        run(values)
    assert one_sentence(str(err.value))


READ_ONLY_CHILD = """
import json, sys
from pflcore.config import ExperimentConfig
from pflcore.engine.results import RunDirectory
try:
    RunDirectory(ExperimentConfig.from_dict(json.loads(sys.argv[1])))
except ValueError as exc:
    print("refused:", exc)
else:
    print("accepted")
"""


def _runs_as_nobody() -> bool:
    """Whether an unprivileged user (uid 65534) can start this Python with pflcore."""
    try:
        return subprocess.run([sys.executable, "-c", "import pflcore"], user=65534, capture_output=True,
                              timeout=120, cwd="/").returncode == 0
    except (PermissionError, OSError):
        return False


def test_unwritable_output_dir_is_refused_in_one_sentence(make_config, monkeypatch, tmp_path):
    """Where creating the probe folder is refused (a read-only folder for a user without
    root), the run is refused before any work, naming the folder."""
    real = tempfile.mkdtemp

    def refuse(*args, **kwargs):
        if str(kwargs.get("dir", "")).startswith(str(tmp_path / "ro")):
            raise PermissionError(13, "Permission denied")
        return real(*args, **kwargs)

    (tmp_path / "ro").mkdir()
    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    with pytest.raises(ValueError, match="cannot write results in") as info:
        RunDirectory(make_config(output_dir=str(tmp_path / "ro" / "results")))
    assert one_sentence(str(info.value))
    assert list((tmp_path / "ro").iterdir()) == []


def test_read_only_output_dir_is_refused(make_config):
    """Root writes through mode bits, so as root the check runs in a child without root."""
    base = Path(tempfile.mkdtemp(prefix="pflcore-ro-"))
    try:
        os.chmod(base, 0o755)
        (base / "ro").mkdir()
        os.chmod(base / "ro", 0o555)
        cfg = make_config(output_dir=str(base / "ro" / "results"))
        as_root = os.geteuid() == 0
        if as_root and not _runs_as_nobody():
            pytest.skip("this Python is not reachable by an unprivileged user (it lies in a private folder)")
        proc = subprocess.run([sys.executable, "-c", READ_ONLY_CHILD, json.dumps(cfg.to_dict())],
                              capture_output=True, text=True, cwd=base, timeout=120,
                              env={**os.environ, "HOME": str(base)}, **({"user": 65534} if as_root else {}))
        assert proc.returncode == 0, proc.stderr
        message = proc.stdout.strip()
        assert message.startswith("refused:") and "cannot write results in" in message, message
        assert one_sentence(message.split(":", 1)[1].strip())
        assert list((base / "ro").iterdir()) == []
    finally:
        os.chmod(base / "ro", 0o755)
        shutil.rmtree(base)


# ----------------------------------------------------------------------------- damaged or foreign files
class PlantedCode:
    """Unpickling this would run a shell command (it touches a marker file)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def interrupted_run(make_config):
    cfg = make_config(rounds=3, name="ckpt", checkpoint_every=1)
    run_killed_after(cfg, 2)
    path = Path(cfg.output_dir) / "ckpt" / "checkpoint.pt"
    assert path.exists()
    return cfg, path


@pytest.mark.parametrize("kind", ["truncated", "random", "planted code (torch.save)", "planted code (pickle)"])
def test_damaged_or_foreign_checkpoint(make_config, tmp_path, kind):
    cfg, path = interrupted_run(make_config)
    marker = tmp_path / "code-ran"
    if kind == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif kind == "random":
        path.write_bytes(np.random.default_rng(0).bytes(4096))
    elif kind == "planted code (torch.save)":
        torch.save({"fingerprint": cfg.fingerprint(), "sim": PlantedCode(str(marker))}, path)
    else:
        path.write_bytes(pickle.dumps(PlantedCode(str(marker)), protocol=2))
    with pytest.raises(ResultsError, match="not a pflcore checkpoint") as err:
        run(cfg)
    message = str(err.value)
    assert one_sentence(message) and "checkpoint.pt" in message and "overwrite" in message
    assert "weights_only" not in message
    assert not marker.exists(), "loading the checkpoint ran the code planted in it"
    fresh = run(cfg, overwrite=True)
    assert fresh.summary["status"] == "finished" and not marker.exists()


@pytest.fixture
def finished(make_config):
    cfg = make_config(rounds=2, name="done")
    return cfg, run(cfg).path


@pytest.mark.parametrize("name,content", [
    ("summary.json", b'{"acc_mean": 5'),
    ("summary.json", b"\xff\xfe\x00garbage"),
    ("config.json", b"{not json"),
    ("config.json", "this run's fingerprint, but no config pflcore can read"),
    ("metrics.json", b"[{"),
])
def test_damaged_json_file_is_named(finished, name, content):
    cfg, path = finished
    if isinstance(content, str):
        content = json.dumps({"fingerprint": cfg.fingerprint(), "config": {"method": 3}}).encode()
    (path / name).write_bytes(content)
    for attempt in (lambda: run(cfg), lambda: RunResult.load(path)):
        with pytest.raises(ValueError, match=name.replace(".", r"\.")) as err:
            attempt()
        assert one_sentence(str(err.value))


@pytest.mark.parametrize("damage", ["truncated", "random", "foreign"])
def test_damaged_clients_file_is_named(finished, damage):
    cfg, path = finished
    clients = path / "clients.npz"
    if damage == "truncated":
        clients.write_bytes(clients.read_bytes()[:100])
    elif damage == "random":
        clients.write_bytes(np.random.default_rng(1).bytes(2048))
    else:
        np.savez(clients, something=np.zeros(3))  # a valid .npz, but not pflcore's
    for attempt in (lambda: run(cfg), lambda: RunResult.load(path)):
        with pytest.raises(ResultsError, match=r"clients\.npz") as err:
            attempt()
        assert one_sentence(str(err.value))


# ----------------------------------------------------------------------------- permissions
def test_result_files_honour_the_umask(make_config, tmp_path):
    old = os.umask(0o022)
    try:
        result = run(make_config(rounds=2))
        for name in ("config.json", "metrics.json", "summary.json", "clients.npz", "partition.npz"):
            assert (result.path / name).stat().st_mode & 0o777 == 0o644, name
        os.umask(0o027)
        atomic_write_json(tmp_path / "x.json", {"a": 1})
        assert (tmp_path / "x.json").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)
