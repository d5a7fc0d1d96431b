"""Run records (pflcore.records): written when a paper-preset run finishes, read instead of
training, refused in one sentence when foreign or of another schema version, and a user's
own run of the same config equal to the record bit for bit."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from pflcore import numerics, records
from pflcore.engine import RunResult, run


def test_a_finished_paper_run_writes_a_valid_record_with_provenance(project, make_config):
    config = make_config(method="fedpac", rounds=2)
    with records.recording("paper_x/t1"):
        result = run(config)
    [path] = list((project / "reproductions" / "paper_x" / "t1").glob("*.json"))
    assert path.name.endswith(f"-seed7-{config.fingerprint()}.json")
    record = records.read(path)
    assert record["schema_version"] == records.SCHEMA_VERSION and record["fingerprint"] == config.fingerprint()
    assert record["preset_changes"] == {} and records.preset_changes_in_words(record) == "none"  # the preset's run
    assert records.preset_changes_in_words({k: v for k, v in record.items() if k != "preset_changes"}) == "not recorded"
    schema = (Path(__file__).resolve().parents[1] / "reproductions" / "SCHEMA.md").read_text()
    assert [key for key in record if f"| `{key}` |" not in schema] == []  # every field is documented
    prov = record["provenance"]
    for key in ("pflcore_version", "git_commit", "git_dirty", "python", "torch", "numpy", "device", "cpu_model",
                "cpu_count", "workers", "started", "finished", "seconds_per_round", "stretches"):
        assert key in prov, key
    assert prov["stretches"][0]["first_round"] == 1 and prov["stretches"][-1]["last_round"] == 2
    assert record["summary"]["acc_mean"] == result.summary["acc_mean"]
    assert {"best_acc_mean", "best_round", "best_acc_weighted"} <= set(record["summary"])
    assert len(record["history"]) == 2 and len(record["clients"]["final"]) == 4
    # FedPAC's combination weights: the per-round arrays a figure draws (round 1 and evaluated rounds)
    assert set(record["arrays"]) and all(set(rounds) <= {"1", "2"} for rounds in record["arrays"].values())
    # which test samples each client's final predictor gets right: paired tests from records alone
    hits = records.unpack_correct(record)
    sizes = np.asarray(record["clients"]["test_sizes"])
    assert hits.size == sizes.sum()
    per_client = np.split(hits, np.cumsum(sizes)[:-1])
    np.testing.assert_array_equal([100 * h.mean() for h in per_client], result.client_acc)  # percent
    np.testing.assert_array_equal(records.floats(record["clients"]["history"]), result.acc_history)
    # summary.json of the run carries the same provenance
    summary = json.loads((result.path / "summary.json").read_text())
    assert summary["provenance"]["git_commit"] == prov["git_commit"]


def test_a_record_keeps_the_parameters_its_run_changed_from_the_paper_preset(project, make_config):
    changes = {"local_epochs": 2, "data_root": "data/other", "clients": {3, 1}}  # a set, as a Lab edit might give
    with records.recording("paper_x/t1", changes=changes):
        run(make_config(rounds=1))
    [path] = list((project / "reproductions" / "paper_x" / "t1").glob("*.json"))
    record = records.read(path)
    assert record["preset_changes"] == {"local_epochs": 2, "data_root": "data/other", "clients": "{1, 3}"}
    assert records.preset_changes_in_words(record) == 'clients = "{1, 3}", data_root = "data/other", local_epochs = 2'

    assert records.active_changes() == {}  # outside the block: none


def test_a_recorded_config_is_read_not_trained_and_forcing_trains_the_same_numbers(project, make_config, capsys):
    config = make_config(rounds=2)
    with records.recording("paper_x/t1"):
        first = run(config)
    elsewhere = make_config(rounds=2, output_dir=str(project / "other"))  # no finished results there
    assert elsewhere.fingerprint() == config.fingerprint()
    with records.recording("paper_x/t1"):
        shipped = run(elsewhere)
    assert shipped.record is not None and shipped.path is None
    assert "from the record" in capsys.readouterr().out
    assert not (project / "other").exists()  # nothing trained, nothing written
    np.testing.assert_array_equal(shipped.acc_history, first.acc_history)
    assert shipped.summary["acc_mean"] == first.summary["acc_mean"]
    # forcing training: same code, same seed, on CPU, the same numbers bit for bit
    with records.recording("paper_x/t1", train=True):
        own = run(elsewhere)
    assert own.record is None and own.path is not None
    comparison = records.compare(own, records.read(records.find(config)))
    assert comparison["identical"]
    assert all(row["diff"] == 0 for row in comparison["metrics"].values())


def test_compare_shows_the_difference_per_metric(project, make_config):
    config = make_config(rounds=2)
    with records.recording("paper_x/t1"):
        result = run(config)
    record = records.read(records.find(config))
    record["summary"]["acc_mean"] += 1.5
    record["history"][0]["train_loss"] += 1e-9
    comparison = records.compare(result, record)
    assert not comparison["identical"]
    assert comparison["metrics"]["acc_mean"]["diff"] == pytest.approx(-1.5)
    with pytest.raises(records.RecordError, match="not the record's"):
        records.compare(run(make_config(rounds=2, seed=3)), record)


def test_arrays_of_a_record_read_back_for_figures(project, make_config):
    config = make_config(method="fedpac", rounds=3, eval_every=2)
    with records.recording("paper_x/c1"):
        trained = run(config)
    loaded = RunResult.from_record(records.read(records.find(config)))
    name = trained.array_names()[0]
    assert sorted(loaded.arrays(name)) == [1, 2, 3]  # round 1 and the evaluated rounds 2 and 3
    np.testing.assert_allclose(loaded.arrays(name)[2], trained.arrays(name)[2], rtol=1e-6)
    with pytest.raises(ValueError, match="keeps no model state"):
        RunResult.from_record(records.read(records.find(config)), path=Path("x.json")).final_state()


def test_arrays_derived_from_the_final_models_are_kept_in_the_record_and_read_back_without_training(
        project, make_config):
    from pflcore.engine.revisit import final_simulation

    def client_norms(result):  # stands for a figure's analysis of the final models (F.2's t-SNE, pairs)
        def tensors(obj):
            if isinstance(obj, dict):
                return [t for v in obj.values() for t in tensors(v)]
            return [obj] if hasattr(obj, "is_floating_point") and obj.is_floating_point() else []

        sim = final_simulation(result)
        norms = [float(sum(t.double().norm() ** 2 for t in tensors(state)) ** 0.5)
                 for _, state in sorted(sim.client_states.items())]
        calls.append(1)
        return {"norms": np.array(norms), "clients": np.arange(len(norms))}

    calls: list[int] = []
    config = make_config(method="fedper", rounds=2)
    with records.recording("paper_x/f2"):
        trained = run(config)
        fresh = records.derived_arrays(trained, "norms", client_norms)
    assert calls == [1] and fresh["norms"].dtype == np.float32 and fresh["clients"].dtype == np.int32
    shutil.rmtree(config.output_dir)  # a fresh clone: the record, and no results folder
    with records.recording("paper_x/f2"):
        shipped = run(config)  # from the record: no final state, no training
        again = records.derived_arrays(shipped, "norms", client_norms)
    assert shipped.record is not None and calls == [1], "the record's arrays were computed again"
    assert all(np.array_equal(fresh[k], again[k]) for k in fresh)  # the figure is the same both ways
    with pytest.raises(records.RecordError, match="keeps no 'other'.*train"):
        records.derived_arrays(shipped, "other", client_norms)
    assert records.decode_array(records.encode_array(np.array([[1.5, -2.0]]))).tolist() == [[1.5, -2.0]]
    with pytest.raises(records.RecordError, match="arrays of numbers"):
        records.encode_array(np.array(["a"]))


def test_records_only_refuses_a_run_without_a_record_in_one_sentence_and_trains_nothing(project, make_config,
                                                                                          monkeypatch):
    config = make_config(rounds=2)
    monkeypatch.setenv(records.RECORDS_ONLY_ENV, "1")
    with records.recording("paper_x/t1"), pytest.raises(records.RecordError, match="no committed record of this run"):
        run(config)
    assert not Path(config.output_dir).exists(), "something was written"
    monkeypatch.delenv(records.RECORDS_ONLY_ENV)
    with records.recording("paper_x/t1"):
        trained = run(config)
    shutil.rmtree(config.output_dir)
    monkeypatch.setenv(records.RECORDS_ONLY_ENV, "1")
    with records.recording("paper_x/t1"):
        assert run(config).summary["acc_mean"] == trained.summary["acc_mean"]  # read from the record


@pytest.mark.parametrize("change, message", [
    (lambda r: r.update(schema_version=0), "schema version 0"),
    (lambda r: r.update(schema="something-else"), "not a pflcore run record"),
    (lambda r: r.pop("history"), "field 'history'"),
    (lambda r: r["summary"].pop("acc_mean"), "no 'acc_mean'"),
])
def test_an_older_foreign_or_damaged_record_is_refused_naming_the_file(project, make_config, change, message):
    config = make_config(rounds=2)
    with records.recording("paper_x/t1"):
        run(config)
    path = records.find(config)
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))
    with pytest.raises(records.RecordError, match=message) as info:
        records.read(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    path.write_text("{not json")
    with pytest.raises(records.RecordError, match="not valid JSON"):
        records.read(path)


def test_a_version_1_record_reads_in_percent_as_the_same_run_gives_now(project, make_config):
    """Version 1 kept per-client accuracies as fractions: read, they are percent, equal bit for
    bit to the arrays of the same run now, and the run is still identical to the record."""
    config = make_config(num_clients=6, new_clients=0.34, rounds=2)
    with records.recording("paper_x/t1"):
        result = run(config)
    path = records.find(config)
    current = json.loads(path.read_text())
    assert current["schema_version"] == 3 == records.SCHEMA_VERSION
    sizes = np.asarray(current["clients"]["test_sizes"])
    v1 = json.loads(path.read_text())
    v1["schema_version"] = 1
    del v1["summary"]["accuracy_unit"]
    for key in ("final", "best", "history", "new_final"):  # correct count / test size, as version 1 wrote them
        fractions = np.round(records.floats(v1["clients"][key]) * sizes / 100) / sizes
        v1["clients"][key] = [None if np.isnan(v) else v for v in fractions.tolist()] if fractions.ndim == 1 else \
            [[None if np.isnan(v) else v for v in row] for row in fractions.tolist()]
    assert max(v for v in v1["clients"]["final"] if v is not None) <= 1
    path.write_text(json.dumps(v1))
    read = records.read(path)
    assert read["schema_version"] == 3 and read["upgraded_from"] == 1
    assert read["provenance"]["numeric_path"] == numerics.unknown_path()  # never guessed
    assert read["clients"] == current["clients"]  # None (NaN) where it was, every value 100 x the fraction
    loaded = RunResult.from_record(read, config, path)
    np.testing.assert_array_equal(loaded.client_acc, result.client_acc)
    np.testing.assert_array_equal(loaded.acc_history, result.acc_history)
    np.testing.assert_array_equal(loaded.clients["new_final"], result.clients["new_final"])
    assert records.compare(result, path)["identical"]
    assert records.compare(result, v1)["identical"]  # a version-1 record given as it was read from JSON
    np.testing.assert_array_equal(RunResult.from_record(v1, config).acc_history, result.acc_history)
    hits = records.unpack_correct(read)  # the per-sample hits are the same in both versions
    assert hits is not None and hits.size == sizes[~np.isnan(result.client_acc)].sum()


def test_the_shipped_version_1_records_read_in_percent():
    """The committed records of version 1 stay as written and read as 100 x their fractions."""
    root = Path(__file__).resolve().parents[1] / "reproductions"
    v1 = [p for p in sorted(root.rglob("*.json")) if p.name != "plan.json"
          and json.loads(p.read_text()).get("schema_version") == 1]
    if not v1:
        pytest.skip("no version-1 record is committed")
    for path in v1[:3]:
        raw, read = json.loads(path.read_text()), records.read(path)
        for key in ("final", "history"):
            np.testing.assert_array_equal(records.floats(read["clients"][key]), 100 * records.floats(raw["clients"][key]))
        final = records.floats(read["clients"]["final"])
        assert np.nanmax(final) > 1 and np.nanmax(final) <= 100
        assert RunResult.from_record(read).acc_mean == raw["summary"]["acc_mean"]


def test_outside_the_paper_preset_nothing_is_recorded(project, make_config):
    run(make_config(rounds=2))
    assert not (project / "reproductions").exists()


def test_the_shipped_records_are_valid_and_small():
    """Every committed record reads (schema, version, fields) and the folder stays small."""
    root = Path(__file__).resolve().parents[1] / "reproductions"
    found = records.all_records(root)
    for path, record in found:
        assert record["notebook"] and path.parent.relative_to(root).as_posix() == record["notebook"]
        assert path.name.endswith(f"-seed{record['seed']}-{record['fingerprint']}.json")
    assert records.folder_size(root) < 50 * 2**20


def test_a_forced_run_is_set_beside_the_shipped_record_in_one_line(project, make_config, capsys):
    config = make_config(rounds=2)
    with records.recording("paper_x/t1"):
        run(config)
    capsys.readouterr()
    with records.recording("paper_x/t1", train=True):
        run(make_config(rounds=2, output_dir=str(project / "mine")))
    assert "bit for bit" in capsys.readouterr().out


def test_the_readme_quotes_no_result_number():
    """Measured accuracies live in records and the report built from them, not in the README
    (speed measurements name the benchmark record they come from)."""
    import re

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    # paragraphs naming a benchmark record quote measurements, checked against it below
    text = "\n\n".join(p for p in text.split("\n\n") if "benchmarks/records/" not in p)
    quoted = re.findall(r"(?<![\w.])\d{2}\.\d{1,2}(?![\w.])", text)
    assert not quoted, f"the README quotes numbers that look like results: {quoted}"
    assert len(text.splitlines()) <= 300


@pytest.mark.parametrize("method", ["fedavg_ft", "knn_per"])
def test_a_method_that_trains_as_fedavg_is_scored_from_fedavg_s_final_state_with_the_numbers_of_a_full_run(
        project, tmp_path, method):
    """FedAvg-FT and kNN-Per train exactly as FedAvg: scoring FedAvg's final state with their
    predictor gives a full run's final numbers bit for bit, and the record says so."""
    from conftest import tiny_config

    full = run(tiny_config(tmp_path / "full", method=method, rounds=3))  # trained: no FedAvg run beside it
    assert "scored_from" not in full.summary
    shared = tiny_config(tmp_path / "shared", method="fedavg", rounds=3)
    base = run(shared)
    with records.recording("paper_x/t1"):
        scored = run(shared.replace(method=method))
    assert scored.summary["scored_from"]["fingerprint"] == base.config.fingerprint()
    np.testing.assert_array_equal(scored.client_acc, full.client_acc)
    for key in ("acc_mean", "acc_std", "acc_weighted"):
        assert scored.summary[key] == full.summary[key]
    assert [h["train_loss"] for h in scored.history] == [h["train_loss"] for h in full.history]
    record = records.read(records.find(scored.config))
    assert "Scored from the final state of the fedavg run" in record["notes"][0]


def test_the_docs_measured_numbers_come_from_the_record_they_name():
    """Every decimal number in a paragraph of the README or docs/ that names a benchmark record
    is a value of that record, rounded as shown."""
    import re

    root = Path(__file__).resolve().parents[1]
    paragraphs = [p for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
                  for p in doc.read_text().split("\n\n")]
    checked = 0
    for paragraph in paragraphs:
        named = re.findall(r"benchmarks/records/[\w.-]+\.json", paragraph)
        if not named:
            continue
        values: list[float] = []

        def collect(node):
            if isinstance(node, dict):
                for v in node.values():
                    collect(v)
            elif isinstance(node, list):
                for v in node:
                    collect(v)
            elif isinstance(node, (int, float)) and not isinstance(node, bool):
                values.append(float(node))
        for name in named:
            collect(json.loads((root / name).read_text()))
        text = re.sub(r"benchmarks/records/[\w.-]+\.json", "", paragraph)
        for number in re.findall(r"(?<![\w.-])\d+\.\d+(?![\w.])", text):
            digits = len(number.split(".")[1])
            assert any(f"{v:.{digits}f}" == number for v in values), f"{number} is not in {named}"
            checked += 1
    assert checked >= 5


def test_a_probed_run_s_record_without_its_probe_is_the_record_of_the_run_without_it(project, tmp_path):
    """FedFA Figure 4's run is Table 2's run plus the feature probe, which never changes
    training: its record with the probe's statistics left out equals, timings and notes
    aside, the record that training the probe-free config writes, and reads as its record."""
    from pflcore.analysis.features import FeatureProbe

    from conftest import tiny_config

    with records.recording("paper_x/f4"):
        probed = run(tiny_config(tmp_path / "probed", method="fedavg", rounds=2, feature_probe=3))
    with records.recording("paper_x/t2"):
        plain = run(tiny_config(tmp_path / "plain", method="fedavg", rounds=2))
    source = records.read(probed.extras["written_record"])
    assert all(set(FeatureProbe.measures) <= set(h) for h in source["history"])
    free = records.without_probe(source, "paper_x/t2", FeatureProbe.measures, "reproductions/paper_x/f4/a.json")
    trained = records.read(plain.extras["written_record"])

    def untimed(record):
        cfg = {k: v for k, v in record["config"].items() if k != "output_dir"}
        history = [{k: v for k, v in h.items() if k != "seconds"} for h in record["history"]]
        summary = {k: v for k, v in record["summary"].items() if k != "seconds"}
        return {**record, "config": cfg, "history": history, "summary": summary, "provenance": None, "notes": None}

    assert untimed(free) == untimed(trained)
    assert free["fingerprint"] == plain.config.fingerprint() != probed.config.fingerprint()
    assert "reproductions/paper_x/f4/a.json" in free["notes"][-1] and "timings are the probed run's" in free["notes"][-1]
    path = records.write(free)  # filed where the probe-free config finds it
    assert records.find(plain.config) == path
    with pytest.raises(records.RecordError, match="without the feature probe"):
        records.without_probe(trained, "paper_x/t2", FeatureProbe.measures, "b.json")


def test_reading_git_state_takes_no_lock_and_a_timeout_leaves_none(tmp_path, monkeypatch):
    """Provenance reads git without optional locks: a `git status` cut off by its timeout (here a
    clean filter as slow as the notebook filter in a fresh clone) leaves no .git/index.lock behind,
    so later commits (the campaign's) still work."""
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "config", "filter.slow.clean", "sleep 5; cat"], check=True)
    (repo / ".gitattributes").write_text("*.txt filter=slow\n")
    (repo / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    (repo / "a.txt").write_text("two\n")  # modified: status must run the slow filter
    real = subprocess.run

    def quick(command, *args, **kwargs):  # git status cut off after a second
        return real(command, *args, **{**kwargs, "timeout": 1 if "status" in command else kwargs.get("timeout")})

    monkeypatch.setattr(records.subprocess, "run", quick)
    state = records.git_state(repo)
    assert state["git_commit"] and state["git_dirty"] is None  # status was cut off: unknown, not guessed
    assert not (repo / ".git" / "index.lock").exists()
    monkeypatch.setattr(records.subprocess, "run", real)
    subprocess.run([*git, "commit", "-qam", "y"], check=True)  # and git still commits


def test_code_without_git_names_the_commit_it_was_prepared_from(tmp_path, monkeypatch):
    """A lent GPU machine's copy of the tree has no .git: its records name the commit
    benchmarks/device_prepare.sh saw, dirty where the package's files differ from that copy's."""
    assert records.git_state(tmp_path) == {"git_commit": None, "git_dirty": None}  # no git, nothing said
    source = tmp_path / "SOURCE"
    monkeypatch.setenv(records.SOURCE_ENV, str(source))
    commit = "0123456789abcdef0123456789abcdef01234567"
    source.write_text(f"commit {commit}\npackage {records.package_digest()}\n")
    assert records.git_state(tmp_path) == {"git_commit": commit, "git_dirty": False}
    source.write_text(f"commit {commit}\npackage {'0' * 64}\n")  # the package changed after it was prepared
    assert records.git_state(tmp_path) == {"git_commit": commit, "git_dirty": True}
    source.write_text("commit HEAD\n")  # not a commit: never believed
    assert records.git_state(tmp_path) == {"git_commit": None, "git_dirty": None}
    assert records.git_state()["git_commit"] != commit  # in a checkout, git itself answers
