"""A record counts only after it is checked against itself (issue 74): every shipped record
passes the checks, and a record changed field by field (types, ranges, consistency) is either
refused in one sentence naming the file, or reads as the same evidence as the original."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from pflcore import records
from pflcore.engine.results import RunResult

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[1] / records.RECORDS_FOLDER


def shipped_paths() -> list[Path]:
    return [p for p in sorted(SHIPPED.rglob("*.json"))
            if p.name != "plan.json" and "replications" not in p.relative_to(SHIPPED).parts]


def kinds_of(raw: dict) -> set[str]:
    return {f"v{raw['schema_version']}",
            *(["derived"] if raw.get("derived_arrays") else []),
            *(["scored"] if any("Scored" in n for n in raw["notes"]) else []),
            *(["arrays"] if raw["arrays"] else []),
            *(["no-correct"] if "correct" not in raw["clients"] else [])}


def samples() -> list[Path]:
    """The smallest shipped record of each kind (versions, scored, with figure or derived arrays, without hits)."""
    chosen: dict[str, Path] = {}
    for path in sorted(shipped_paths(), key=lambda p: p.stat().st_size):
        for kind in kinds_of(json.loads(path.read_text())):
            chosen.setdefault(kind, path)
    return sorted(set(chosen.values()))


SAMPLES = samples()
RAW = {p: json.loads(p.read_text()) for p in SAMPLES}


def evidence(record: dict) -> dict:
    """What a record is evidence of: the numbers the report and the notebooks show, of the config
    its fingerprint names (fields outside the fingerprint, provenance and notes are not evidence)."""
    # global_test_acc scores the final global model on the whole test split: the record keeps no model to
    # check it against, only its range (0 to 100) is checked, so it is left out here
    summary = {k: v for k, v in record["summary"].items()
               if ("acc" in k or "round" in k or k == "final_train_loss") and k != "global_test_acc"}
    clients = {k: record["clients"][k] for k in ("final", "best", "history", "eval_rounds", "test_sizes", "new_final")
               if k in record["clients"]}
    hits = records.unpack_correct(record)
    metrics = [{k: h.get(k) for k in ("round", "acc_mean", "acc_std", "acc_weighted")} for h in record["history"]]
    return {"seed": record["seed"], "fingerprint": record["fingerprint"], "notebook": record["notebook"],
            "summary": summary, "clients": clients, "metrics": metrics,
            "hits": None if hits is None else hits.astype(int).tolist()}  # compared by value: -0.0 is 0.0


def test_every_shipped_record_passes_its_self_checks():
    """All shipped records (version 1 upgraded ones, and those scored from another run's final state too)."""
    found = records.all_records(SHIPPED)
    assert len(found) == len(shipped_paths()) >= 100
    kinds = set().union(*(kinds_of(json.loads(p.read_text())) for p, _ in found))
    assert {"v1", "v2", "scored"} <= kinds


def one_sentence(err: records.RecordError, path: Path) -> None:
    text = str(err)
    assert str(path) in text and "\n" not in text and text.endswith("."), text
    assert "Traceback" not in text and "Error:" not in text, text


# ---------------------------------------------------------------------- mutations, field by field
def places(value, prefix=(), depth=0) -> list[tuple]:
    """Paths into a record: every mapping key, and of each list its first, second and last items."""
    out = [prefix] if prefix else []
    if depth >= 6:
        return out
    if isinstance(value, dict):
        for key in value:
            out += places(value[key], (*prefix, key), depth + 1)
    elif isinstance(value, list) and value:
        for i in sorted({0, min(1, len(value) - 1), len(value) - 1}):
            out += places(value[i], (*prefix, i), depth + 1)
    return out


PLACES = {p: {} for p in SAMPLES}
for _path, _raw in RAW.items():
    for _place in places(_raw):
        PLACES[_path].setdefault(_place[0], []).append(_place)

REPLACEMENTS = [None, True, False, 0, -1, 1, 7, 0.5, -0.5, 100.5, 1e300, 2**60, 10**30, "", "text", "../../x", [],
                [1, 2], [None], {}, {"a": 1}, float("nan"), float("inf"), -float("inf")]
TRIED: dict[str, int] = {"mutations": 0, "refused": 0, "harmless": 0}


def get(record, place):
    for key in place:
        record = record[key]
    return record


def mutate(record: dict, place: tuple, how: str, value, other: dict) -> bool:
    """Change ``record`` at ``place``; False when the mutation does not apply there."""
    parent, key = get(record, place[:-1]), place[-1]
    old = parent[key]
    if how == "replace":
        parent[key] = value
    elif how == "delete":
        del parent[key]
    elif how == "nudge":
        if not isinstance(old, (int, float)) or isinstance(old, bool):
            return False
        parent[key] = old + value if isinstance(value, (int, float)) and not isinstance(value, bool) else -old
    elif how == "scale":
        if not isinstance(old, (int, float)) or isinstance(old, bool):
            return False
        parent[key] = old * 100 if old < 1 else old / 100
    elif how == "grow":
        if not isinstance(old, list):
            return False
        old.append(old[-1] if old else 1)
    elif how == "shrink":
        if not isinstance(old, list) or not old:
            return False
        old.pop()
    elif how == "from_another":  # the same field of another shipped record
        try:
            parent[key] = json.loads(json.dumps(get(other, place)))
        except (KeyError, IndexError, TypeError):
            return False
    return True


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_mutated_record_is_refused_in_one_sentence_or_harmless(tmp_path_factory, data):
    source = data.draw(st.sampled_from(SAMPLES), label="record")
    section = data.draw(st.sampled_from(sorted(PLACES[source], key=str)), label="section")
    place = data.draw(st.sampled_from(PLACES[source][section]), label="place")
    how = data.draw(st.sampled_from(["replace", "replace", "delete", "nudge", "nudge", "scale", "grow", "shrink",
                                     "from_another"]), label="how")
    value = data.draw(st.sampled_from(REPLACEMENTS + [1e-6, -1e-6, 0.01, -1, 50]), label="value")
    other = RAW[data.draw(st.sampled_from([p for p in SAMPLES if p != source] or SAMPLES), label="other")]
    original = records.read(source)
    record = json.loads(json.dumps(RAW[source]))
    if not mutate(record, place, how, value, other):  # e.g. nudging text: replace it instead
        how = "replace"
        mutate(record, place, how, value, other)
    root = tmp_path_factory.mktemp("project") / records.RECORDS_FOLDER
    path = root / source.relative_to(SHIPPED)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))  # NaN and infinities as JSON's NaN / Infinity, as an editor might
    TRIED["mutations"] += 1
    try:
        read = records.read(path)
    except records.RecordError as err:
        one_sentence(err, path)
        TRIED["refused"] += 1
        return
    TRIED["harmless"] += 1
    if os.environ.get("SHOW_HARMLESS"):
        print("harmless:", how, place, repr(value)[:40])
    if records.unpack_correct(read) is None:  # the per-sample hits are optional (records before them have none)
        original = {**original, "clients": {k: v for k, v in original["clients"].items() if k != "correct"}}
    assert evidence(read) == evidence(original), f"{how} {place} = {value!r} was read as other evidence"
    # what is left over is harmless to every reader: the loader, the one-line description, the records page
    from pflcore.report.pages import render_records

    RunResult.from_record(read, path=path)
    records.describe(read, path)
    render_records([(path, read)], {path: "records/x.json"})


def test_the_property_test_tried_mutations():
    """Runs after the property test (file order): it tried mutations, and refused most of them."""
    if TRIED["mutations"] == 0:
        pytest.skip("the property test did not run first")
    print(f"\nrecord mutations tried: {TRIED['mutations']} ({TRIED['refused']} refused, {TRIED['harmless']} harmless)")
    assert TRIED["refused"] > TRIED["harmless"] / 2


# ---------------------------------------------------------------------- the cases issue 74 names
@pytest.fixture
def copy(tmp_path):
    """A copy of a shipped record at its place in a fresh reproductions/ folder."""
    source = SAMPLES[0]
    path = tmp_path / records.RECORDS_FOLDER / source.relative_to(SHIPPED)
    path.parent.mkdir(parents=True)
    shutil.copyfile(source, path)
    return path


def edit(path: Path, change) -> None:
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


@pytest.mark.parametrize("change, field", [
    (lambda r: r["summary"].update(acc_mean=99.51), "summary.acc_mean"),
    (lambda r: r["summary"].update(best_acc_mean=r["summary"]["acc_mean"] - 1), "summary.best_acc_mean"),
    (lambda r: r["summary"].update(acc_std=r["summary"]["acc_std"] + 0.01), "summary.acc_std"),
    (lambda r: r["summary"].update(best_round=r["summary"]["best_round"] + 1), "summary.best_round"),
    (lambda r: r["summary"].update(seconds=-3), "summary.seconds"),
    (lambda r: r["summary"].update(seconds={}), "summary.seconds"),
    (lambda r: r["summary"].update(acc_mean={"x": 1}), "summary.acc_mean"),
    (lambda r: r["clients"]["final"].__setitem__(0, 1e300), "clients.final"),
    (lambda r: r["clients"]["history"][0].__setitem__(1, "88"), "clients.history"),
    (lambda r: r.update(fingerprint="0123456789"), "fingerprint"),
    (lambda r: r["config"].update(lr=r["config"]["lr"] * 2), "fingerprint"),
    (lambda r: r.update(seed=r["seed"] + 1), "seed"),
    (lambda r: r["provenance"].update(git_commit={"a": 1}), "provenance.git_commit"),
    (lambda r: r["history"][0].update(seconds=float("inf")), "history[0].seconds"),
])
def test_a_forged_or_impossible_field_is_refused_naming_the_file_and_the_field(copy, change, field):
    edit(copy, change)
    with pytest.raises(records.RecordError) as info:
        records.read(copy)
    one_sentence(info.value, copy)
    assert field in str(info.value)


def test_nan_infinity_huge_numbers_and_deep_nesting_are_one_sentence(copy):
    text = copy.read_text()
    for bad in (text.replace('"acc_std":', '"acc_std":NaN,"x":', 1),
                text.replace('"acc_std":', '"acc_std":1e999,"x":', 1),
                text.replace('"seed":', '"seed":' + "9" * 5000 + ',"x":', 1),
                text.replace('"notes":[]', '"notes":' + "[" * 100000 + "]" * 100000, 1),
                text[: len(text) // 2]):
        copy.write_text(bad)
        with pytest.raises(records.RecordError) as info:
            records.read(copy)
        one_sentence(info.value, copy)


def test_another_record_under_this_name_is_refused(copy):
    other = next(p for p in shipped_paths() if p.name != copy.name and p.parent.name == copy.parent.name)
    shutil.copyfile(other, copy)
    with pytest.raises(records.RecordError, match="file name does not match its content") as info:
        records.read(copy)
    one_sentence(info.value, copy)


def test_a_link_out_of_the_project_a_pipe_and_a_folder_are_refused_without_reading(copy, tmp_path):
    outside = tmp_path.parent / f"{tmp_path.name}-outside.json"
    shutil.copyfile(copy, outside)
    copy.unlink()
    copy.symlink_to(outside)
    with pytest.raises(records.RecordError, match="outside") as info:
        records.all_records(copy.parents[2])
    one_sentence(info.value, copy)
    copy.unlink()
    os.mkfifo(copy)  # no writer: reading it would block for ever
    with pytest.raises(records.RecordError, match="named pipe") as info:
        records.read(copy)
    one_sentence(info.value, copy)
    copy.unlink()
    copy.mkdir()
    with pytest.raises(records.RecordError, match="not a regular file"):
        records.read(copy)
    outside.unlink()


def test_a_file_larger_than_any_record_is_refused_whatever_its_reported_size(copy, monkeypatch):
    """The limit holds while reading: a file whose size the system reports as small is still read no further."""
    copy.write_bytes(b" " * (records.MAX_RECORD_BYTES + 10))
    real_fstat = os.fstat
    monkeypatch.setattr(os, "fstat", lambda fd: os.stat_result((*real_fstat(fd)[:6], 0, *real_fstat(fd)[7:])))
    with pytest.raises(records.RecordError, match="larger than any pflcore run record") as info:
        records.read(copy)
    one_sentence(info.value, copy)


def project_with_sample(tmp_path: Path) -> tuple[Path, Path]:
    """A project holding a copy of the first sample record; returns (project, the copy's path)."""
    project = tmp_path / "project"
    (project / "notebooks").mkdir(parents=True)
    (project / "params").mkdir()
    path = project / records.RECORDS_FOLDER / SAMPLES[0].relative_to(SHIPPED)
    path.parent.mkdir(parents=True)
    shutil.copyfile(SAMPLES[0], path)
    return project, path


def test_the_report_refuses_a_forged_record_in_one_sentence(tmp_path, capsys):
    """`pflcore report` over a project whose record was edited: one line naming the file, exit 2, no traceback."""
    from pflcore.cli import main

    project, path = project_with_sample(tmp_path)
    edit(path, lambda r: r["summary"].update(acc_mean=99.51))
    cwd = os.getcwd()
    os.chdir(project)
    try:
        code = main(["report", "--no-notebooks", "--out", str(tmp_path / "site")])
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "Traceback" not in err
    assert path.name in err and "summary.acc_mean" in err
    assert not (tmp_path / "site").exists()


def test_a_notebook_run_of_a_forged_record_is_refused_before_training(tmp_path, monkeypatch):
    """`pflcore.engine.run` finds the record of its config by fingerprint; a forged one is one sentence."""
    from pflcore.config import ExperimentConfig
    from pflcore.engine import run

    raw = RAW[SAMPLES[0]]
    project, path = project_with_sample(tmp_path)
    edit(path, lambda r: r["clients"]["final"].__setitem__(0, -5))
    monkeypatch.chdir(project)
    config = ExperimentConfig(**raw["config"])
    assert records.find(config) is not None
    with pytest.raises(records.RecordError, match=r"clients\.final\[0\]") as info:
        run(config)
    assert "\n" not in str(info.value) and not (project / "results").exists()


def test_a_record_whose_data_is_not_on_this_machine_is_still_read_and_still_checked(tmp_path):
    """FedCP's records name the MNIST partition beside the project; a clone without it still reads
    them (every check but the fingerprint, which hashes that folder's files), and still refuses a
    damaged config."""
    [source] = [p for p in shipped_paths() if "/fedcp/t2_main/" in str(p)][:1]
    project = tmp_path / "clone"
    target = project / records.RECORDS_FOLDER / "fedcp" / "t2_main" / source.name
    target.parent.mkdir(parents=True)
    (project / "notebooks").mkdir()
    (project / "params").mkdir()
    shutil.copy(source, target)
    raw = json.loads(source.read_text())
    assert raw["config"]["data_root"] and not (project / raw["config"]["data_root"]).exists()
    assert records.read(target)["fingerprint"] == raw["fingerprint"]
    raw["config"]["method_params"] = {**raw["config"]["method_params"], "no_such_parameter": 1}
    target.write_text(json.dumps(raw))
    with pytest.raises(records.RecordError, match=r"field 'config' is not a config this pflcore runs"):
        records.read(target)
