"""The engine: determinism, resume, results directories, validation, schedule, evaluation."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pflcore.algorithms import ALGORITHMS
from pflcore.config import ConfigError, ExperimentConfig
from pflcore.engine import DivergenceError, ResultsConflictError, RunResult, Simulation, build_data, run
from pflcore.engine.schedule import participants

from conftest import run_killed_after, strip


def test_same_seed_same_numbers(make_config, tmp_path):
    a = run(make_config(name="a"))
    b = run(make_config(name="b"))
    assert strip(a.history) == strip(b.history)
    np.testing.assert_array_equal(a.client_acc, b.client_acc)
    c = run(make_config(name="c", seed=8))
    assert strip(c.history) != strip(a.history)


@pytest.mark.parametrize("method", sorted(ALGORITHMS))
def test_resume_equals_uninterrupted(make_config, method):
    full = run(make_config(method=method, rounds=5, name="full"))

    cfg = make_config(method=method, rounds=5, name="killed", checkpoint_every=2)
    run_killed_after(cfg, 3)
    assert (full.path.parent / "killed" / "checkpoint.pt").exists()
    assert not (full.path.parent / "killed" / "summary.json").exists()
    resumed = run(cfg)
    assert strip(resumed.history) == strip(full.history)
    np.testing.assert_array_equal(resumed.acc_history, full.acc_history)
    assert not (resumed.path / "checkpoint.pt").exists()


@pytest.mark.parametrize("participation", [1.0, 0.5])
def test_a_checkpoint_leaves_out_state_the_next_round_rebuilds_and_the_resume_equals_uninterrupted(
        make_config, participation):
    """pFedMe's personal models are solved afresh in every round a client trains: the checkpoint
    leaves them out for exactly the clients the next round trains (all of them at C = 1), keeps the
    others', and the resumed run ends bit for bit as the uninterrupted one."""
    full = run(make_config(method="pfedme", rounds=5, participation=participation, name="full"))
    cfg = make_config(method="pfedme", rounds=5, participation=participation, name="killed", checkpoint_every=2)
    run_killed_after(cfg, 3)
    snap = torch.load(full.path.parent / "killed" / "checkpoint.pt", weights_only=True)["sim"]
    scheduled = participants(2, num_clients=4, rounds=5, participation=participation, seed=cfg.seed).tolist()
    assert snap["rebuilt_for"] == sorted(scheduled) and (len(scheduled) == 4) == (participation == 1.0)
    assert [c for c, s in snap["client_states"].items() if "personal" in s] == \
        [c for c in range(4) if c not in scheduled]
    resumed = run(cfg)
    assert strip(resumed.history) == strip(full.history)
    np.testing.assert_array_equal(resumed.acc_history, full.acc_history)


def test_a_client_that_fails_in_the_first_round_after_a_resume_without_its_rebuilt_state_stops_the_run(
        make_config, monkeypatch):
    """Where the client whose personal model the checkpoint left out fails in the round that would
    have rebuilt it, it has none, where an uninterrupted run keeps its old one: one sentence, and the
    run does not go on unlike the uninterrupted one."""
    from pflcore.engine.results import ResultsError

    cfg = make_config(method="pfedme", rounds=4, name="killed", checkpoint_every=1)
    run_killed_after(cfg, 2)
    dispatch = Simulation.dispatch

    def client_1_fails(self, kind, ids, round_index):
        outputs, errors = dispatch(self, kind, [c for c in ids if c != 1 or kind != "train"], round_index)
        return outputs, {**errors, **({1: "node 1: lost"} if kind == "train" and 1 in ids else {})}

    monkeypatch.setattr(Simulation, "dispatch", client_1_fails)
    rounds = []
    with pytest.raises(ResultsError, match=r"^client\(s\) \[1\] failed in round 3, the first after the resume, and "
                                           r"the checkpoint does not keep their personal \(rebuilt in every round "
                                           r"they train\), so the run cannot go on as an uninterrupted one would: run "
                                           r"it again from its first round \(delete .*killed\)\.$"):
        run(cfg, on_round_end=lambda r, record: rounds.append(r))
    assert rounds == []


def test_a_parked_run_stops_after_the_round_its_time_passes_and_resumes_elsewhere_as_uninterrupted(
        make_config, monkeypatch, tmp_path):
    """PFLCORE_PARK_AT: the round that ends after that time checkpoints (between the periodic
    checkpoints too), marks the folder parked and stops; the folder, copied to another output_dir
    (another checkout, another session), resumes from the next round and ends bit for bit as the
    uninterrupted run, with one stretch per process. A time that is not a number is one sentence."""
    import shutil

    from pflcore.engine import RunParked
    from pflcore.engine.simulation import PARK_AT_ENV

    full = run(make_config(method="perfedavg", rounds=5, name="full"))
    cfg = make_config(method="perfedavg", rounds=5, name="parked", checkpoint_every=4)
    rounds_done = []
    monkeypatch.setenv(PARK_AT_ENV, "1e30")  # not yet: the first round runs on
    monkeypatch.setattr("pflcore.engine.simulation.time.time", lambda: 2e30 if rounds_done else 0.0)
    with pytest.raises(RunParked, match=r"parked after round 2 of 5, as PFLCORE_PARK_AT asked; the same run "
                                        r"resumes from round 3"):
        run(cfg, on_round_end=lambda r, record: rounds_done.append(r))
    folder = full.path.parent / "parked"
    assert rounds_done == [1] and not (folder / "summary.json").exists()
    assert json.loads((folder / "parked.json").read_text())["next_round"] == 3
    moved = tmp_path / "elsewhere"
    shutil.copytree(folder, moved / "parked")
    monkeypatch.delenv(PARK_AT_ENV)
    resumed = run(cfg.replace(output_dir=str(moved)))
    assert strip(resumed.history) == strip(full.history)
    np.testing.assert_array_equal(resumed.acc_history, full.acc_history)
    assert not (resumed.path / "parked.json").exists() and not (resumed.path / "checkpoint.pt").exists()
    assert [s["first_round"] for s in resumed.summary["provenance"]["stretches"]] == [1, 3]
    monkeypatch.setenv(PARK_AT_ENV, "soon")
    monkeypatch.setattr(Simulation, "run_round", lambda *a: pytest.fail("a round ran"))
    with pytest.raises(ValueError, match=r"^PFLCORE_PARK_AT = 'soon' is not a time; give the Unix time \(seconds\) "
                                         r"at which a run parks, or leave it unset\.$"):
        run(make_config(method="perfedavg", rounds=5, name="bad"))
    assert not (full.path.parent / "bad").exists()


def test_a_run_whose_pace_would_end_it_after_its_end_by_time_stops_early_and_one_with_time_to_spare_is_unchanged(
        make_config, monkeypatch):
    """PFLCORE_END_BY (the end of a campaign's budget, for an entry that cannot park): after
    pace_rounds rounds of a stretch, a run whose rounds left at its pace would end after that time
    stops, saying its pace and how late it would be, and writes no summary; the same run started
    again without the time ends as the uninterrupted run, and so does one with time to spare. A
    time that is not a number is one sentence before anything is written."""
    from pflcore.engine import RunTooSlow
    from pflcore.engine.simulation import END_BY_ENV, pace_rounds

    assert [pace_rounds(n) for n in (6, 133, 134, 200, 300)] == [4, 4, 5, 6, 9]
    full = run(make_config(rounds=6, name="full"))
    monkeypatch.setattr("pflcore.engine.simulation.time.time", lambda: 0.0)
    monkeypatch.setenv(END_BY_ENV, "1e30")
    spare = run(make_config(rounds=6, name="spare"))
    assert strip(spare.history) == strip(full.history)
    monkeypatch.setenv(END_BY_ENV, "0")  # now: any round left ends after it
    rounds_done = []
    cfg = make_config(rounds=6, name="late")
    with pytest.raises(RunTooSlow, match=r"^fedavg \(seed 7\) stopped after round 4 of 6: at \d+\.\d s a round here "
                                         r"its rounds left would end \d+ s after the time PFLCORE_END_BY gave\.$"):
        run(cfg, on_round_end=lambda r, record: rounds_done.append(r))
    folder = full.path.parent / "late"
    assert rounds_done == [1, 2, 3] and not (folder / "summary.json").exists()
    assert [m["round"] for m in json.loads((folder / "metrics.json").read_text())] == [1, 2, 3, 4]
    monkeypatch.delenv(END_BY_ENV)
    again = run(cfg)
    assert strip(again.history) == strip(full.history)
    np.testing.assert_array_equal(again.acc_history, full.acc_history)
    monkeypatch.setenv(END_BY_ENV, "soon")
    monkeypatch.setattr(Simulation, "run_round", lambda *a: pytest.fail("a round ran"))
    with pytest.raises(ValueError, match=r"^PFLCORE_END_BY = 'soon' is not a time; give the Unix time \(seconds\) "
                                         r"by which a run must end, or leave it unset\.$"):
        run(make_config(rounds=6, name="bad"))
    assert not (full.path.parent / "bad").exists()


def test_results_directory_contents_and_skip(make_config, monkeypatch):
    result = run(make_config(rounds=2))
    files = {p.name for p in result.path.iterdir()}
    assert {"config.json", "metrics.json", "clients.npz", "summary.json", "partition.npz"} <= files
    summary = json.loads((result.path / "summary.json").read_text())
    for key in ("acc_mean", "acc_std", "acc_weighted", "best_acc_mean", "rounds", "seconds"):
        assert key in summary
    assert summary["rounds"] == 2 and 0 <= summary["acc_mean"] <= 100
    loaded = RunResult.load(result.path)
    np.testing.assert_array_equal(loaded.client_acc, result.client_acc)
    # A finished run is loaded, never trained again.
    monkeypatch.setattr(Simulation, "run_round", lambda *a: pytest.fail("finished run was re-run"))
    again = run(make_config(rounds=2))
    assert again.summary == result.summary


def test_results_never_silently_overwritten(make_config):
    run(make_config(rounds=1, name="exp"))
    with pytest.raises(ResultsConflictError, match="different experiment"):
        run(make_config(rounds=2, name="exp"))
    replaced = run(make_config(rounds=2, name="exp"), overwrite=True)
    assert replaced.summary["rounds"] == 2


def test_summary_statistics_match_client_arrays(make_config):
    """Every accuracy in percent: the summary's, ``client_acc``'s, ``acc_history``'s and the files'."""
    result = run(make_config(rounds=2))
    acc = result.client_acc
    stored = np.load(result.path / "clients.npz")
    sizes = stored["test_sizes"]
    np.testing.assert_array_equal(stored["final"], acc)
    np.testing.assert_array_equal(stored["history"], result.acc_history)
    assert acc.max() > 1 and result.summary["accuracy_unit"] == "percent"
    assert result.summary["acc_mean"] == pytest.approx(acc.mean())
    assert result.summary["acc_std"] == pytest.approx(acc.std())
    assert result.summary["acc_weighted"] == pytest.approx((acc * sizes).sum() / sizes.sum())
    assert result.summary["best_acc_mean"] == pytest.approx(max(h["acc_mean"] for h in result.history))
    # the best round's pooled accuracy (FedCP's metric), from the per-client arrays
    pooled = (result.acc_history * sizes).sum(1) / sizes.sum()
    assert result.summary["best_acc_weighted"] == pytest.approx(pooled.max())
    assert result.summary["best_weighted_round"] == result.eval_rounds[int(pooled.argmax())]


def as_fractions(percent, test_sizes) -> np.ndarray:
    """Per-client accuracies as pflcore wrote them before they were in percent: correct count
    over test size (the count recovered from the percent, so the fraction is the old one)."""
    return np.round(np.asarray(percent, dtype=np.float64) * test_sizes / 100) / test_sizes


def test_a_results_folder_written_in_fractions_reads_in_percent(make_config):
    """Folders written before accuracies were in percent (no ``accuracy_unit`` in summary.json,
    fractions in clients.npz) load as percent, exactly the numbers a run now gives."""
    result = run(make_config(method="fedavg", rounds=2, num_clients=6, new_clients=0.34))
    sizes = result.clients["test_sizes"]
    old = {k: (as_fractions(v, sizes) if k in ("final", "best", "history", "new_final") else v)
           for k, v in result.clients.items()}
    assert np.nanmax(old["final"]) <= 1 and "new_final" in old
    np.savez_compressed(result.path / "clients.npz", **old)
    summary = json.loads((result.path / "summary.json").read_text())
    del summary["accuracy_unit"]
    (result.path / "summary.json").write_text(json.dumps(summary))
    for loaded in (RunResult.load(result.path), run(result.config)):
        np.testing.assert_array_equal(loaded.client_acc, result.client_acc)
        np.testing.assert_array_equal(loaded.acc_history, result.acc_history)
        for key in ("final", "best", "history", "new_final"):
            np.testing.assert_array_equal(loaded.clients[key], result.clients[key])
        assert loaded.summary["acc_mean"] == result.summary["acc_mean"]
        assert loaded.summary["accuracy_unit"] == "percent"
    summary["accuracy_unit"] = "permille"
    (result.path / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ValueError, match="accuracy_unit 'permille'"):
        RunResult.load(result.path)


def test_a_checkpoint_written_in_fractions_resumes_in_percent(make_config):
    """A run interrupted before accuracies were in percent resumes with exactly the numbers of
    an uninterrupted run now."""
    full = run(make_config(rounds=4, name="full"))

    cfg = make_config(rounds=4, name="killed", checkpoint_every=2)
    run_killed_after(cfg, 2)
    path = full.path.parent / "killed" / "checkpoint.pt"
    ckpt = torch.load(path, weights_only=True)
    assert ckpt.pop("accuracy_unit") == "percent"
    ckpt["acc_history"] = as_fractions(ckpt["acc_history"], full.clients["test_sizes"]).tolist()
    torch.save(ckpt, path)
    resumed = run(cfg)
    np.testing.assert_array_equal(resumed.acc_history, full.acc_history)
    assert strip(resumed.history) == strip(full.history)


def test_eval_every_and_always_at_end(make_config):
    result = run(make_config(rounds=5, eval_every=2))
    assert list(result.eval_rounds) == [2, 4, 5]
    assert result.acc_history.shape == (3, 4)


@pytest.mark.parametrize("field,value,words", [
    ("method", "fedfoo", "method"),
    ("dataset", "imagenet", "dataset"),
    ("participation", 0.0, "participation"),
    ("participation", 1.5, "participation"),
    ("local_epochs", -1, "local_epochs"),
    ("rounds", 0, "rounds"),
    ("lr", 0, "lr"),
    ("dropout", [0.5, 1.2], "dropout"),
    ("partition", {"kind": "nope"}, "partition"),
    ("method_params", {"mu": 0.1}, "mu"),
])
def test_bad_config_values_get_one_sentence(tmp_path, field, value, words):
    with pytest.raises(ConfigError) as err:
        ExperimentConfig.from_dict({"method": "fedavg", field: value, "output_dir": str(tmp_path)})
    message = str(err.value)
    assert words in message
    assert message.count(". ") == 0 and message.endswith(".")


def test_unknown_config_field(tmp_path):
    with pytest.raises(ConfigError, match="unknown config field 'epochs'"):
        ExperimentConfig.from_dict({"epochs": 3})


def test_bad_partition_parameter_fails_before_training(make_config, monkeypatch):
    monkeypatch.setattr(Simulation, "run_round", lambda *a: pytest.fail("trained despite a bad partition"))
    with pytest.raises(ValueError, match="alpha"):
        run(make_config(partition={"kind": "dirichlet", "alpha": -1.0}))
    with pytest.raises(ValueError):
        run(make_config(num_clients=5000, partition={"kind": "iid"}))


def test_divergence_stops_with_a_clear_message(make_config):
    cfg = make_config(lr=1e6, momentum=0.9, rounds=4, local_epochs=3)
    with pytest.raises(DivergenceError, match="not finite"):
        run(cfg)
    path = cfg.output_dir + "/" + cfg.run_name()
    assert json.loads(open(path + "/config.json").read())["config"]["lr"] == 1e6


def test_divergence_names_the_method_parameter_that_caused_it(make_config):
    """A huge FedPAC lambda, not lr, makes the loss infinite: the message names it."""
    cfg = make_config(method="fedpac", method_params={"lam": 1e30}, rounds=3)
    with pytest.raises(DivergenceError) as err:
        run(cfg)
    message = str(err.value)
    assert "round 2" in message and "not finite" in message
    assert "method_params.lam=1e+30" in message and "lr=0.05" in message and "weight_decay=" in message
    assert message.endswith(".") and ". " not in message


def test_divergence_names_a_method_learning_rate_even_at_its_default(make_config):
    """pFedMe's personal_lr scales its inner steps whether or not it was changed (at its default 0.1
    FedCP's CNN diverged): the message lists it beside the run's lr; pFedMe's unchanged lambda stays out."""
    sim = Simulation(make_config(method="pfedme", method_params={"inner_steps": 2}), build_data(make_config()))
    values = sim.scaling_values()
    assert values[:1] == ["lr=0.05"] and "method_params.personal_lr=0.1" in values
    assert "method_params.inner_steps=2" in values and not any(v.startswith("method_params.lam=") for v in values)


def test_method_failures_are_totalled_and_warned_about(make_config, monkeypatch):
    """FedPAC counts QP solves that fail; when every solve fails the run still finishes,
    with a warning, the total in summary.json and a status that says so."""
    import pflcore.algorithms.fedpac as fedpac
    from pflcore.engine.simulation import MethodFailureWarning

    monkeypatch.setattr(fedpac.FedPAC, "failure_counters", ("qp_failures",), raising=False)
    ok = run(make_config(method="fedpac", rounds=2, name="ok"))
    assert ok.summary["qp_failures_total"] == 0 and ok.summary["status"] == "finished"

    def no_solution(*args, **kwargs):
        raise RuntimeError("QP status infeasible")

    monkeypatch.setattr(fedpac, "combination_weights", no_solution)
    with pytest.warns(MethodFailureWarning, match="qp_failures 8 in 2 of 2 rounds") as caught:
        result = run(make_config(method="fedpac", rounds=2, name="failing"))
    message = str(caught[0].message)
    assert message.endswith(".") and ". " not in message
    assert [h["qp_failures"] for h in result.history] == [4, 4]
    summary = json.loads((result.path / "summary.json").read_text())
    assert summary["qp_failures_total"] == 8 and summary["status"] == "finished with failures"


def test_no_local_epochs_reports_no_training_loss(make_config):
    """local_epochs = 0 trains nothing: the loss is NaN, not 0.0 as if training had happened."""
    result = run(make_config(local_epochs=0, rounds=2))
    assert all(np.isnan(h["train_loss"]) for h in result.history)
    assert np.isnan(result.summary["final_train_loss"])
    assert np.isnan(RunResult.load(result.path).summary["final_train_loss"])


def test_schedule_is_fixed_by_the_seed():
    kw = dict(num_clients=100, rounds=10, participation=0.3, seed=3)
    a = [participants(r, **kw) for r in range(10)]
    b = [participants(r, **kw) for r in range(10)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert all(len(x) == 30 and len(np.unique(x)) == 30 for x in a)
    assert not all(np.array_equal(a[0], x) for x in a[1:])
    # The first rounds do not depend on the total number of rounds.
    assert np.array_equal(participants(2, **{**kw, "rounds": 50}), a[2])
    last = participants(9, **kw, full_last_round=True)
    assert np.array_equal(last, np.arange(100))


def test_dropout_keeps_a_fraction_in_range():
    sizes = [len(participants(r, num_clients=50, rounds=100, dropout=(0.5, 1.0), seed=0)) for r in range(100)]
    assert min(sizes) >= 25 and max(sizes) <= 50 and len(set(sizes)) > 5


def test_shared_and_per_client_evaluation_agree(make_config):
    cfg = make_config(rounds=1)
    sim = Simulation(cfg, build_data(cfg))
    sim.run_round(0)
    batched = sim.evaluate(0)
    sim.algorithm.shared_predictor = lambda state, model: None  # forces the per-client path
    np.testing.assert_allclose(batched, sim.evaluate(0))


def test_participation_rate_samples_clients(make_config):
    result = run(make_config(num_clients=4, participation=0.5, rounds=3, full_last_round=True))
    assert [len(h["participants"]) for h in result.history] == [2, 2, 4]


def test_a_round_of_chosen_clients_trains_exactly_those(make_config):
    config = make_config(method="fedper")
    sim = Simulation(config, build_data(config))
    before = {k: v.clone() for k, v in sim.state["body"].items()}
    record = sim.run_round(0, clients=[3, 1])
    assert record["participants"] == [3, 1]
    assert sorted(sim.client_states) == [1, 3]  # only they hold a personal head
    assert any(not torch.equal(before[k], v) for k, v in sim.state["body"].items())


def test_sigkill_mid_run_then_resume_equals_uninterrupted(make_config, tmp_path):
    """A real kill (SIGKILL, no cleanup) between checkpoints; the resumed run ends with the
    numbers of an uninterrupted one and no temporary files are left behind."""
    import os
    import signal
    import subprocess
    import sys
    import time

    cfg = make_config(method="fedper", rounds=60, checkpoint_every=3, name="killed", eval_every=5)
    code = ("import json, sys; from pflcore.engine import run; from pflcore.config import ExperimentConfig; "
            "run(ExperimentConfig.from_dict(json.loads(sys.argv[1])))")
    proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(cfg.to_dict())])
    rundir = tmp_path / "results" / "killed"

    def checkpoint_version():
        try:  # a checkpoint is written to a new file and renamed into place
            stat = (rundir / "checkpoint.pt").stat()
            return stat.st_ino, stat.st_mtime_ns
        except FileNotFoundError:
            return None

    def wait_for_checkpoint_other_than(version):
        deadline = time.time() + 120
        while time.time() < deadline and checkpoint_version() in (None, version) and proc.poll() is None:
            time.sleep(0.005)
        return checkpoint_version()

    # Kill half-way between the second and third checkpoints, timed by this machine's own pace.
    first = wait_for_checkpoint_other_than(None)
    started = time.time()
    wait_for_checkpoint_other_than(first)
    time.sleep((time.time() - started) / 2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (rundir / "summary.json").exists(), "the run finished before it could be killed"
    assert (rundir / "checkpoint.pt").exists()
    resumed = run(cfg)
    full = run(cfg.replace(name="full"))
    assert strip(resumed.history) == strip(full.history)
    np.testing.assert_array_equal(resumed.client_acc, full.client_acc)
    assert not [p for p in rundir.rglob("*.tmp")]
