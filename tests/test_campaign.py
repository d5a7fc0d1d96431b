"""The campaign's plan (pflcore.campaign) against the records folder: every run the plan
marks done has its committed record, every record of the campaign's notebooks belongs to a
run of the plan, the first campaign covers its 36 settings with three seeds each and the
second (issue 76) every cell that can run here in its order; status and next believe only
the records on disk, and a damaged plan is refused in one sentence (issue 74)."""
from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from pflcore import campaign, records
from pflcore.algorithms import ALGORITHMS

ROOT = Path(__file__).resolve().parents[1]


def test_the_campaign_has_three_seeds_for_each_of_its_36_settings_cheapest_per_record_first():
    first = [e for e in campaign.CAMPAIGN if e.stage == 0]  # the first campaign's
    tables = [e for e in first if e.notebook in campaign.TABLE_NOTEBOOKS and not e.investigates]
    settings = Counter((e.notebook, e.label.rsplit(" ", 1)[0] if " " in e.label else "", method)
                       for e in tables for method in e.methods)
    assert len(settings) == 36 and set(settings.values()) == {3}
    assert len({e.key for e in campaign.CAMPAIGN}) == len(campaign.CAMPAIGN)
    # by step, then the investigations last within the first campaign, cheapest per record first
    costs = [(e.stage, e.investigates, e.seconds_per_record) for e in campaign.CAMPAIGN]
    assert costs == sorted(costs) and all(s > 0 for _, _, s in costs)
    assert campaign.CAMPAIGN[:len(first)] == first and len(first) == 120
    for entry in tables:  # each narrows its notebook to one seed and the methods it names
        params = entry.parameters
        assert params["methods"] == entry.label.split()[-1].split("+") and entry.records_written == 0
        # a run of several methods trains the first once and scores the others from its final state
        assert all(ALGORITHMS[m].trains_as == params["methods"][0] for m in params["methods"][1:])
        assert params.get("seed", (params.get("seeds") or [None])[0]) == entry.seed


def test_each_investigation_is_a_variant_of_a_noted_row_that_its_notebook_can_run():
    """An investigation's label is a notebook's methods label: a row of its table with method
    parameters its method accepts and the table's runs do not use, on a row whose note says what
    remains; its record is then that variant (the report shows it beside the row)."""
    from pflcore.algorithms.hyperparams import check_hyperparams
    from pflcore.papers import split_label
    from pflcore.report.catalogue import TABLES

    investigations = [e for e in campaign.CAMPAIGN if e.investigates]
    assert investigations and Counter(e.label for e in investigations) == {e.label: 3 for e in investigations}
    for entry in investigations:
        spec = next(t for t in TABLES if t.notebook == entry.notebook)
        [label] = entry.parameters["methods"]  # the entry's label, after the column it runs in where it names one
        assert entry.label.endswith(label) and entry.label.removesuffix(label).strip() in ("", *spec.columns)
        method, params = split_label(label)
        assert method in spec.rows
        check_hyperparams(method, ALGORITHMS[method].hyperparams, params)  # a parameter its method has
        assert all(spec.row_params(method).get(k, ALGORITHMS[method].defaults[k]) != v for k, v in params.items())
        assert any(spec.row_note(column, method) for column in spec.columns), entry.label
        ran = {"config": {"method": method, "method_params": {**spec.row_params(method), **params}}}
        assert spec.row_of(ran) == label


def test_each_figure_that_rests_on_runs_of_its_own_has_entries_that_write_them():
    from pflcore.report.catalogue import FIGURES

    figures = [e for e in campaign.CAMPAIGN if e.notebook not in campaign.TABLE_NOTEBOOKS and e.stage == 0]
    for spec in FIGURES:
        mine = [n for n in spec.needs if n.notebook == spec.notebook]
        entries = [e for e in figures if e.notebook == spec.notebook]
        if not entries:  # recorded before the campaign (FedFA F.2) or resting on table runs only
            continue
        assert sum(e.records_written or len(e.methods) for e in entries) == len(mine)
        assert {(n.method, n.seed) for n in mine} == {(m, e.seed) for e in entries for m in e.methods}
        assert all(dict(spec.overrides).items() <= e.parameters.items() for e in entries)
    assert {e.notebook for e in figures} == {"fedpac/c1_weight_heatmaps", "fedpac/t2_ablation",
                                             "fedfa/f4_feature_distance"}


def test_the_plan_file_agrees_with_the_records_folder():
    from pflcore.report.catalogue import TABLES

    plan_file = ROOT / "reproductions" / campaign.PLAN
    plan = json.loads(plan_file.read_text()) if plan_file.exists() else {"runs": []}
    known = {e.key: e for e in campaign.CAMPAIGN}
    claimed = set()
    for row in plan["runs"]:
        assert row["key"] in known, f"the plan lists a run the campaign does not have: {row['key']}"
        entry = known[row["key"]]
        for rel in row["records"]:
            record = records.read(ROOT / rel)  # exists and is a valid record
            # a probed run's record, or (entry.probe_free) the record of the same run without the probe
            assert record["notebook"] in (entry.notebook, entry.probe_free) and record["seed"] == entry.seed
            table = next((t for t in TABLES if t.notebook == record["notebook"]), None)
            assert (table.row_of(record) if table else record["config"]["method"]) in entry.methods  # variants too
            claimed.add(rel)
    if plan["runs"]:
        done = sum(bool(r["records"]) for r in plan["runs"])
        assert plan["done"] == done and plan["remaining"] == len(plan["runs"]) - done
    notebooks = {e.notebook for e in campaign.CAMPAIGN}
    for path, record in records.all_records(ROOT / "reproductions"):
        if record["notebook"] in notebooks:
            assert str(path.relative_to(ROOT)) in claimed, f"{path} is not claimed by a run of the plan"


def test_the_plan_is_recomputed_from_the_campaign_and_keeps_what_is_done(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "params").mkdir()
    first = campaign.CAMPAIGN[0]
    campaign.write_plan({"runs": [{"key": first.key, "records": ["reproductions/x.json"]}]}, tmp_path)
    plan = campaign.current_plan(tmp_path)
    assert plan["done"] == 1 and plan["remaining"] == len(campaign.CAMPAIGN) - 1
    assert plan["runs"][0]["records"] == ["reproductions/x.json"]
    assert plan["remaining_estimate_s"] == sum(e.estimate_s for e in campaign.CAMPAIGN[1:])


def test_a_commit_takes_added_and_removed_figures_and_nothing_else(tmp_path):
    import subprocess

    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    git("config", "user.email", "t@example.org")
    git("config", "user.name", "t")
    (tmp_path / "figures" / "old").mkdir(parents=True)
    (tmp_path / "figures" / "old" / "a.png").write_bytes(b"a")
    (tmp_path / "other.txt").write_text("x")
    git("add", "-A")
    git("commit", "-q", "-m", "start")
    (tmp_path / "figures" / "old" / "a.png").unlink()
    (tmp_path / "figures" / "new").mkdir()
    (tmp_path / "figures" / "new" / "b.png").write_bytes(b"b")
    (tmp_path / "other.txt").write_text("changed by someone else")
    campaign._commit(tmp_path, ["figures"], "Figures: redrawn", log=lambda *a, **k: None)
    assert git("log", "--format=%s") == "Figures: redrawn\nstart\n"
    assert git("ls-files", "figures").split() == ["figures/new/b.png"]
    assert git("status", "--short") == " M other.txt\n", "the commit swept another file"
    campaign._commit(tmp_path, ["figures"], "again", log=lambda *a, **k: None)  # nothing changed: no commit
    assert git("log", "--format=%s").count("\n") == 2


def test_a_redraw_in_which_a_notebook_failed_commits_the_record_and_keeps_the_committed_figures(
        tmp_path, monkeypatch):
    """A figure notebook that fails during the redraw (its data missing, say) must not cost the
    committed figures it draws: the record is committed, figures/ is not touched, the log says why."""
    import subprocess

    from pflcore import report

    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    git("config", "user.email", "t@example.org")
    git("config", "user.name", "t")
    for folder in ("notebooks", "params", "figures/p"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "figures" / "p" / "f5.png").write_bytes(b"committed")
    (tmp_path / ".gitignore").write_text("outputs/\n")  # as the project's
    git("add", "-A")
    git("commit", "-q", "-m", "start")

    def run_entry(entry, root, out, park_at=None, end_by=None):
        path = root / records.RECORDS_FOLDER / entry.notebook / "r.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
        return [str(path.relative_to(root))]

    def build(out, root, log, reuse):  # drew nothing: its one notebook failed
        out.mkdir(parents=True, exist_ok=True)
        (out / report.DRAWN).write_text("[]")
        (out / report.FAILED).write_text(json.dumps([{"notebook": "p/f5", "error": "no data in ../shared"}]))
        return out / "index.html"

    monkeypatch.setattr(campaign, "run_entry", run_entry)
    monkeypatch.setattr(report, "build", build)
    logged = []
    campaign.next_runs(1, root=tmp_path, log=lambda *a, **k: logged.append(" ".join(map(str, a))))
    assert git("log", "--format=%s") == f"Record: {campaign.CAMPAIGN[0].key}\nstart\n"
    assert (tmp_path / "figures" / "p" / "f5.png").read_bytes() == b"committed" and git("status", "--short") == ""
    assert any(line.startswith("campaign: figures not redrawn: figures/ is left as it was") for line in logged)


def test_a_campaign_in_a_separate_checkout_writes_records_and_plan_home_and_leaves_its_own_plan(
        tmp_path, monkeypatch):
    """``--home``: the record and the plan go to the home clone; the redraw copies home's
    records into the checkout that runs (so its figures draw them all), never home's plan."""
    from pflcore import report

    root, home = tmp_path / "checkout", tmp_path / "home"
    for project in (root, home):
        for folder in ("notebooks", "params", records.RECORDS_FOLDER):
            (project / folder).mkdir(parents=True)
    (root / records.RECORDS_FOLDER / campaign.PLAN).write_text("the checkout's own\n")
    (home / records.RECORDS_FOLDER / "earlier.json").write_text("{}")

    def run_entry(entry, root, out, park_at=None, end_by=None):
        path = root / records.RECORDS_FOLDER / entry.notebook / "r.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"new": 1}')
        return [str(path.relative_to(root))]

    def build(out, root, log, reuse):
        out.mkdir(parents=True, exist_ok=True)
        (out / report.DRAWN).write_text("[]")
        (out / report.FAILED).write_text("[]")
        return out / "index.html"

    monkeypatch.setattr(campaign, "run_entry", run_entry)
    monkeypatch.setattr(report, "build", build)
    copied = {}

    def commit_figures(site, **where):  # note what the checkout held when its figures were drawn, and stop there
        copied.update({p.name: p.read_text() for p in (root / records.RECORDS_FOLDER).rglob("*.json")})
        raise report.FiguresKept("stopped by the test")

    monkeypatch.setattr(report, "commit_figures", commit_figures)
    campaign.next_runs(1, commit=False, root=root, home=home, log=lambda *a, **k: None)
    record = f"{records.RECORDS_FOLDER}/{campaign.CAMPAIGN[0].notebook}/r.json"
    assert (home / record).read_text() == '{"new": 1}'
    assert json.loads(campaign.plan_path(home).read_text())["runs"][0]["records"] == [record]
    assert copied == {"earlier.json": "{}", "r.json": '{"new": 1}', campaign.PLAN: "the checkout's own\n"}


def test_an_entry_s_records_are_those_its_run_wrote_new_or_again_and_no_other(tmp_path):
    """A run whose config equals an earlier record's writes that record again under its name
    (records.write, whole and atomically): it is the run's record. Another record of the same
    notebook, method and seed (the other column of pFedFDA's table, say) is not."""
    from pflcore.atomic import atomic_write_bytes

    folder = tmp_path / "pfedfda" / "t1_covariate_shift"
    assert campaign.written_since(folder, campaign.record_stamps(folder)) == []  # no record yet
    for name in ("fedpac-seed0-25percent.json", "fedpac-seed0-100percent.json"):
        atomic_write_bytes(folder / name, b'{"run": "earlier"}\n')
    before = campaign.record_stamps(folder)
    atomic_write_bytes(folder / "fedpac-seed0-100percent.json", b'{"run": "earlier"}\n')  # the same bytes again
    atomic_write_bytes(folder / "fedpac_ft-seed0-100percent.json", b"{}\n")
    assert campaign.written_since(folder, before) == [folder / "fedpac-seed0-100percent.json",
                                                      folder / "fedpac_ft-seed0-100percent.json"]
    assert campaign.written_since(folder, campaign.record_stamps(folder)) == []


def test_first_runs_the_named_entry_before_the_cheapest_and_an_unknown_key_is_refused(tmp_path, monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(campaign, "run_entry", lambda entry, root, out, park_at=None, end_by=None: ran.append(entry.key) or [])
    wanted = campaign.CAMPAIGN[7].key
    campaign.next_runs(1, commit=False, root=tmp_path, first=(wanted,), log=lambda *a, **k: None)
    campaign.next_runs(1, commit=False, root=tmp_path, log=lambda *a, **k: None)
    assert ran == [wanted, campaign.CAMPAIGN[0].key]
    assert campaign.main(["next", "--first", "no such run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the campaign has no entry 'no such run'") and err.count("\n") == 1
    assert ran == [wanted, campaign.CAMPAIGN[0].key], "a refused call ran something"


def test_bad_input_is_one_sentence_before_any_run(tmp_path, monkeypatch, capsys):
    """A mistyped --home or --count, or a working directory outside a project, is refused
    before a run starts (a paper-preset run costs a quarter of an hour); a notebook that
    fails mid-campaign ends in one line naming it, not a traceback."""
    import pytest

    ran = []
    monkeypatch.setattr(campaign, "run_entry", lambda entry, root, out, park_at=None, end_by=None: ran.append(entry.key) or [])
    assert campaign.main(["next", "--home", str(tmp_path / "no such clone")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --home ") and "is not a pflcore project" in err and err.count("\n") == 1
    for count in ("0", "-2", "two"):
        with pytest.raises(SystemExit) as stopped:
            campaign.main(["next", "--count", count])
        assert stopped.value.code == 2
        assert f"a whole number of runs, 1 or more, is expected; got '{count}'." in capsys.readouterr().err
    assert ran == [], "a refused call ran something"

    def fails(entry, root, out, park_at=None, end_by=None):
        raise RuntimeError(f"{entry.key}: the notebook failed (ValueError: no data); executed copy in x.ipynb")

    assert campaign.current_plan()["remaining"], "the shipped plan has entries left to run"
    monkeypatch.setattr(campaign, "run_entry", fails)
    assert campaign.main(["next", "--no-commit"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and ": the notebook failed (ValueError: no data)" in err and err.count("\n") == 1
    monkeypatch.chdir(tmp_path)
    assert campaign.main(["status"]) == 2
    assert capsys.readouterr().err.startswith("error: no pflcore project (a folder with notebooks/ and params/)")


def test_status_piped_into_head_ends_without_a_traceback():
    import subprocess
    import sys

    run = subprocess.run(f"'{sys.executable}' -m pflcore.campaign status | head -1", shell=True, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.stdout.count("\n") == 1 and "runs recorded" in run.stdout
    assert run.stderr == "", run.stderr


def test_a_probed_figure_run_also_gives_its_table_s_record_and_the_plan_notes_it_on_both_entries(
        tmp_path, monkeypatch):
    """FedFA Figure 4's #C=2 run is Table 2's run plus the feature probe: one training gives
    both records (pflcore.records.without_probe), and Table 2's entry of that run is done."""
    from pflcore.engine import run

    from conftest import tiny_config

    f4 = next(e for e in campaign.CAMPAIGN if e.key == "fedfa/f4_feature_distance | c2 fedavg | seed 2021")
    table = next(e for e in campaign.CAMPAIGN if e.key == f4.probe_free_key())
    assert table.notebook == "fedfa/t2_label_skew" and f4.seconds_per_record == f4.estimate_s / 2
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "params").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(records.TRAIN_ENV, raising=False)
    probed = tiny_config(tmp_path, method="fedavg", rounds=2, feature_probe=2)

    def run_entry(entry, root, out, park_at=None, end_by=None):
        with records.recording(entry.notebook):
            path = Path(run(probed).extras["written_record"])
        return [str(path.relative_to(root))]

    monkeypatch.setattr(campaign, "run_entry", run_entry)
    monkeypatch.setattr(campaign, "redraw_figures", lambda *a, **k: None)
    campaign.next_runs(1, commit=False, root=tmp_path, first=(f4.key,), log=lambda *a, **k: None)
    rows = {r["key"]: r for r in campaign.read_plan(tmp_path)["runs"]}
    source, free = rows[f4.key]["records"]
    assert rows[table.key]["records"] == [free] and free.startswith("reproductions/fedfa/t2_label_skew/")
    record = records.read(tmp_path / free)
    assert record["fingerprint"] == probed.replace(feature_probe=0).fingerprint() and record["notebook"] == table.notebook
    assert source in record["notes"][-1]


def test_a_figure_drawn_from_another_notebook_s_run_finds_the_arrays_it_derives_in_that_run_s_record():
    """A figure that reads arrays derived from a run's final models (records.derived_arrays:
    FedCP Figure 5b's personal shares) and rests on another notebook's run (Table 2's FedCP
    run) finds them only if that notebook computes them when it trains the run: the record
    keeps what was computed right after it was written, and the final models are not kept."""
    import ast
    import inspect

    from pflcore.papers import fedcp, fedfa, fedpac, pfedfda
    from pflcore.report.catalogue import FIGURES

    deriving = set()  # the papers' functions that keep arrays in a record
    for module in (fedpac, fedcp, fedfa, pfedfda):
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if isinstance(node, ast.FunctionDef) and "derived_arrays(" in ast.unparse(node):
                deriving.add(node.name)
    assert {"final_personal_shares", "f2_feature_views"} <= deriving

    from test_notebook_sources import code_cells

    def called(notebook: str) -> set[str]:
        """The names the notebook's code cells call (``f(...)`` or ``module.f(...)``)."""
        calls = (node.func for _, tree in code_cells(ROOT / "notebooks" / f"{notebook}.ipynb")
                 for node in ast.walk(tree) if isinstance(node, ast.Call))
        return {getattr(f, "attr", None) or getattr(f, "id", None) for f in calls}

    checked = 0
    for spec in FIGURES:
        reads = deriving & called(spec.notebook)
        for need in {n.notebook for n in spec.needs if n.notebook != spec.notebook}:
            missing = reads - called(need)
            assert not missing, f"{spec.notebook} reads {missing} from {need}'s records, which {need} never computes"
            checked += bool(reads)
    assert checked >= 1  # FedCP Figure 5 on Table 2's run


def test_status_shows_the_seeds_recorded_per_row_with_the_tables_first(tmp_path, monkeypatch, capsys):
    """`status` opens with the small matrix of seeds recorded per row (what whoever continues
    reads first), each row whole on its line, before the runs in the order `next` takes them."""
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "params").mkdir()
    done = ["fedpac/t1_main | apfl | seed 0", "fedpac/t1_main | apfl | seed 2",
            "fedfa/f4_feature_distance | c2 moon | seed 2021"]
    campaign.write_plan({"runs": [{"key": key, "records": [f"reproductions/{i}.json"]} for i, key in enumerate(done)]},
                        tmp_path)
    plan = campaign.current_plan(tmp_path)
    rows = campaign.seeds_per_row(plan)
    assert list(rows)[:len(campaign.TABLE_NOTEBOOKS)] == list(campaign.TABLE_NOTEBOOKS)
    t1 = {label: (recorded, planned) for label, recorded, planned in rows["fedpac/t1_main"]}
    assert t1["apfl"] == (2, 3) and t1["pfedme"] == (0, 3) and t1["fedavg+fedavg_ft+knn_per"] == (0, 3)
    assert dict((label, (r, p)) for label, r, p in rows["fedfa/f4_feature_distance"])["c2 moon"] == (1, 1)
    assert sum(r for labels in rows.values() for _, r, _ in labels) == plan["done"] == 3
    assert sum(p for labels in rows.values() for _, _, p in labels) == len(campaign.CAMPAIGN)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(campaign, "verify_records", lambda plan, root=None: {})  # its records are names only
    assert campaign.main(["status"]) == 0
    out = capsys.readouterr().out.splitlines()
    steps_at = next(i for i, line in enumerate(out) if line.startswith("Per step of the order"))
    tables = out[2:steps_at]
    assert out[1].startswith("Per table: entries recorded") and len(tables) == len(plan["tables"])
    # each step of the order (issue 76's numbered list) with its entries recorded and hours left
    shown = out[steps_at + 1:next(i for i, line in enumerate(out) if line.startswith("Longer than a stretch"))]
    by_step = campaign.steps(plan)
    assert len(shown) == len(campaign.STAGES) == len(by_step) and all(len(line) <= 100 for line in shown)
    assert sum(s["entries"] for s in by_step.values()) == len(campaign.CAMPAIGN)
    assert sum(s["done"] for s in by_step.values()) == 3 and by_step[0]["done"] == 3
    assert sum(s["remaining_cpu_hours"] for s in by_step.values()) == pytest.approx(plan["remaining_estimate_s"] / 3600)
    for line, (stage, step) in zip(shown, by_step.items()):
        assert line.startswith(f"  {stage:2d}. {step['done']:3d}/{step['entries']:<3d} "
                               f"{step['remaining_cpu_hours']:6.1f} h left")
    assert by_step[4]["entries"] == 7 and "FedCP Table 2 practical MNIST" in shown[4]  # FedCP T2 practical at one seed
    matrix = out[out.index("Seeds recorded per row, of those planned:") + 1:out.index("Runs, in the order `next` takes them:")]
    assert matrix[0].startswith("  pfedfda/t1_covariate_shift:")
    assert all(len(line) <= 100 for line in matrix)
    text = " ".join(matrix)
    for labels in rows.values():
        for label, recorded, planned in labels:
            assert f" {label} {recorded}/{planned}" in text  # never broken across lines
    runs = out[out.index("Runs, in the order `next` takes them:") + 1:]
    assert len(runs) == len(campaign.CAMPAIGN) and sum(line.startswith("  done ") for line in runs) == 3
    # the entries longer than a session's stretch of CPU here (no records here: speed 1, each its own estimate)
    too_long = {e.key for e in campaign.CAMPAIGN if e.key not in done and e.estimate_s > campaign.STRETCH_S}
    assert "fedcp/t2_main | pfedme | seed 0" in too_long and "fedpac/t1_main | apfl | seed 1" not in too_long
    assert {line.split("  ")[-2].strip() for line in runs if "(longer than a stretch" in line} == too_long
    parks = {e.key for e in campaign.CAMPAIGN if e.key in too_long and e.parkable}
    assert "fedcp/t2_main | pfedme | seed 0" in parks and "fedcp/t2_main | fedphp | seed 0" not in parks
    assert {line.split("  ")[-2].strip() for line in runs if line.endswith("; it parks between stretches)")} == parks
    at = next(i for i, line in enumerate(out) if line.startswith("Longer than a stretch (2.5 h of CPU)"))
    assert f": {len(too_long)} entries, " in out[at]
    named = out[at + 1:out.index("Seeds recorded per row, of those planned:")]
    assert sum(int(line.split()[-5]) for line in named) == len(too_long)
    longest = max(e.estimate_s for e in campaign.CAMPAIGN)  # a stretch as long as the longest entry: none is named
    assert campaign.main(["status", "--stretch", str(longest)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert not any("(longer than a stretch" in line for line in out)
    assert any(line.startswith("Longer than a stretch") and ": 0 entries, 0.0 h here" in line for line in out)


def test_each_table_s_runs_change_exactly_the_table_s_preset_changes_from_its_paper_preset():
    """The records a table shows are those made with exactly its changes to the paper preset
    (FedCP: 300 of 2,000 rounds): every campaign entry of a table notebook, and the report's own
    narrowing of each of its cells, changes exactly those, so no campaign record is left out."""
    from pflcore.notebooks import preset_changes
    from pflcore.report.catalogue import TABLES
    from pflcore.yaml_io import read_yaml_file

    root = Path(__file__).resolve().parents[1]

    def changes(notebook: str, overrides: dict) -> dict:
        paper = read_yaml_file(root / "params" / notebook / "paper.yaml", "preset")
        smoke = read_yaml_file(root / "params" / notebook / "smoke.yaml", "preset")
        return preset_changes(paper, smoke, {**paper, **overrides}, set(overrides))

    for spec in TABLES:
        # (the notebook that runs it, its parameters): the table's own entries and cells, and the probed
        # runs whose records without the probe the table shows (FedFA Figure 4's for Table 2)
        # (a column whose runs change the preset in their own way, FedPAC Table 1's 100 clients and FedCP Table 2's
        # pathological setting, is checked against that column's changes below)
        runs = [(e.notebook, e.parameters) for e in campaign.CAMPAIGN if spec.notebook in (e.notebook, e.probe_free)
                and e.group not in NEW_COLUMNS]
        runs += [(spec.notebook, spec.narrow(column, [method], 0)) for column in spec.columns for method in spec.rows]
        assert len({notebook for notebook, _ in runs}) == (2 if spec.notebook == "fedfa/t2_label_skew" else 1)
        for notebook, overrides in runs:
            assert changes(notebook, overrides) == spec.preset_changes, (notebook, overrides)
        for entry in campaign.CAMPAIGN:
            if entry.notebook == spec.notebook and entry.group in NEW_COLUMNS:
                expected = spec.changes_of(NEW_COLUMNS[entry.group])
                assert expected != spec.preset_changes, (spec.id, NEW_COLUMNS[entry.group])
                assert changes(entry.notebook, entry.parameters) == expected == campaign.expected_changes(entry)
    # the second campaign's entries of other notebooks (the tables not in the report yet, FedPAC Table 2's
    # ablation) change nothing from their presets: the report can show their records as the paper's setting
    tables = {spec.notebook for spec in TABLES}
    others = [e for e in campaign.CAMPAIGN if e.notebook not in tables and e.stage > 0]
    assert len({e.notebook for e in others}) == 11
    for entry in others:
        assert campaign.expected_changes(entry) == changes(entry.notebook, entry.parameters) == {}, entry.key


#: The columns the second campaign adds to a table the report shows, whose runs change the preset in their own way:
#: the campaign's table name -> the report's column.
NEW_COLUMNS = {"FedPAC T1 (100 clients)": "fmnist 100", "FedCP T2 pathological MNIST": "pathological mnist"}


# ---------------------------------------------------------------- the campaign believes only the records on disk
def _project(tmp_path, monkeypatch):
    """An empty pflcore project in ``tmp_path``, the working directory, records read from it."""
    for folder in ("notebooks", "params", records.RECORDS_FOLDER):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(records.TRAIN_ENV, raising=False)
    return tmp_path


def _recorded(tmp_path, entry, method: str | None = None):
    """A real record at toy scale of ``entry``'s notebook and seed (of ``method``, default its
    own), written where that notebook's records go; returns its path relative to the project."""
    from pflcore.engine import run

    from conftest import tiny_config

    config = tiny_config(tmp_path, method=method or entry.methods[0], rounds=2, seed=entry.seed)
    with records.recording(entry.notebook):
        path = Path(run(config).extras["written_record"])
    return str(path.relative_to(tmp_path))


def _one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err + captured.out
    return captured.err


def _t1_local(seed: int = 0):
    return next(e for e in campaign.CAMPAIGN if e.key == f"fedpac/t1_main | local | seed {seed}")


def test_a_damaged_or_hand_edited_plan_is_refused_in_one_sentence_naming_it(tmp_path, monkeypatch, capsys):
    _project(tmp_path, monkeypatch)
    ran = []
    monkeypatch.setattr(campaign, "run_entry", lambda entry, root, out, park_at=None, end_by=None: ran.append(entry.key) or [])
    key = campaign.CAMPAIGN[0].key
    damaged = {
        "not JSON": '{"runs": [',
        "not UTF-8": b"\xff\xfe{}",
        "a list": "[]",
        "a number": "3",
        "no runs": "{}",
        "runs a mapping": '{"runs": {}}',
        "a run a string": '{"runs": ["x"]}',
        "no key": '{"runs": [{"records": []}]}',
        "no records": json.dumps({"runs": [{"key": key}]}),
        "key a number": '{"runs": [{"key": 3, "records": []}]}',
        "records text": json.dumps({"runs": [{"key": key, "records": "reproductions/a.json"}]}),
        "record a number": json.dumps({"runs": [{"key": key, "records": [7]}]}),
        "record outside": json.dumps({"runs": [{"key": key, "records": ["/etc/passwd"]}]}),
        "record upwards": json.dumps({"runs": [{"key": key, "records": ["reproductions/../../x.json"]}]}),
        "listed twice": json.dumps({"runs": [{"key": key, "records": []}, {"key": key, "records": []}]}),
        "unknown entry": json.dumps({"runs": [{"key": "no such run", "records": ["reproductions/a.json"]}]}),
        "nested deeply": '{"runs": ' + "[" * 100000 + "]" * 100000 + "}",
    }
    path = campaign.plan_path(tmp_path)
    for what, text in damaged.items():
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        assert campaign.main(["status"]) == 2, what
        err = _one_line_error(capsys)
        assert "reproductions/plan.json" in err and "git checkout" in err, (what, err)
        assert campaign.main(["next", "--no-commit"]) == 2, what
        assert "reproductions/plan.json" in _one_line_error(capsys)
    assert ran == [], "a refused plan ran something"
    path.write_text(json.dumps({"runs": [{"key": "an entry no longer in the campaign", "records": []}]}))
    assert campaign.current_plan(tmp_path)["done"] == 0  # an old entry without records is dropped, harmlessly


def test_status_and_next_believe_the_records_on_disk_not_the_plan(tmp_path, monkeypatch, capsys):
    import os

    _project(tmp_path, monkeypatch)
    ran = []
    monkeypatch.setattr(campaign, "run_entry", lambda entry, root, out, park_at=None, end_by=None: ran.append(entry.key) or [])
    entry, other = _t1_local(0), _t1_local(1)
    good = _recorded(tmp_path, entry)
    folder = f"{records.RECORDS_FOLDER}/{entry.notebook}"
    (tmp_path / folder / "damaged.json").write_text('{"schema": "pflcore.run-record", "schema_version"')
    os.mkfifo(tmp_path / folder / "pipe.json")  # opened, it would wait for a writer forever
    (tmp_path / folder / "folder.json").mkdir()
    capsys.readouterr()  # what the toy run printed
    cases = {  # what plan.json says of `other` -> what status must say of it
        f"{folder}/missing.json": "is not on disk",
        f"{folder}/pipe.json": "is not a regular file",
        f"{folder}/folder.json": "is not a regular file",
        f"{folder}/damaged.json": "is refused by the record checks",
        good: "is a record of another run",  # entry's record (seed 0) listed under seed 1's entry
    }
    for listed, why in cases.items():
        campaign.write_plan({"runs": [{"key": entry.key, "records": [good] if listed != good else []},
                                      {"key": other.key, "records": [listed]}]}, tmp_path)
        plan, problems = campaign.believed(campaign.current_plan(tmp_path), tmp_path)
        assert set(problems) == {other.key} and why in problems[other.key] and listed in problems[other.key]
        assert campaign.main(["status"]) == 1
        out = capsys.readouterr().out
        assert out.startswith(f"{1 if listed != good else 0} of {len(campaign.CAMPAIGN)} runs recorded")
        assert f"  {problems[other.key]}." in out.splitlines() and f"  bad " in out
        assert campaign.main(["next", "--no-commit"]) == 2
        err = _one_line_error(capsys)
        assert "reproductions/plan.json and the records on disk disagree, so the campaign runs nothing" in err
        assert listed in err
    assert ran == [], "a plan the records do not bear out ran something"
    # the plan and the records agree: believed, and next runs
    campaign.write_plan({"runs": [{"key": entry.key, "records": [good]}]}, tmp_path)
    plan, problems = campaign.believed(campaign.current_plan(tmp_path), tmp_path)
    assert problems == {} and plan["done"] == 1
    for name in ("damaged.json", "pipe.json"):
        (tmp_path / folder / name).unlink()
    (tmp_path / folder / "folder.json").rmdir()
    campaign.next_runs(1, commit=False, root=tmp_path, log=lambda *a, **k: None)
    assert ran == [campaign.CAMPAIGN[0].key]


def test_an_emptied_plan_while_its_records_exist_is_refused(tmp_path, monkeypatch, capsys):
    """plan.json's entries emptied by hand (or the file lost) while their records lie on disk:
    the campaign says which entry's record it is and runs nothing, instead of training it again."""
    import shutil

    _project(tmp_path, monkeypatch)
    shutil.copytree(ROOT / "params" / "fedpac" / "t1_main", tmp_path / "params" / "fedpac" / "t1_main")
    ran = []
    monkeypatch.setattr(campaign, "run_entry", lambda entry, root, out, park_at=None, end_by=None: ran.append(entry.key) or [])
    entry = _t1_local(0)
    rel = _recorded(tmp_path, entry)
    fedper = _recorded(tmp_path, _t1_local(2), method="fedper")  # FedPer's seed 2 run, no entry of Local's
    capsys.readouterr()  # what the toy runs printed
    for plan in ({"runs": [{"key": e.key, "records": []} for e in campaign.CAMPAIGN]}, None):
        if plan is None:
            campaign.plan_path(tmp_path).unlink()
        else:
            campaign.write_plan(plan, tmp_path)
        _, problems = campaign.believed(campaign.current_plan(tmp_path), tmp_path)
        assert set(problems) == {entry.key, "fedpac/t1_main | fedper | seed 2"}
        assert rel in problems[entry.key] and "lists no record" in problems[entry.key]
        assert fedper in problems["fedpac/t1_main | fedper | seed 2"]
        assert campaign.main(["status"]) == 1
        assert "plan.json lists no record for it" in capsys.readouterr().out
        assert campaign.main(["next", "--no-commit"]) == 2
        err = _one_line_error(capsys)
        assert "plan.json lists no record for it" in err and (rel in err or fedper in err)
    assert ran == []
    # a record of the same row and seed but another setting (FedPAC Table 1's 100-client column) is not its run
    hundred = next(e for e in campaign.CAMPAIGN if e.key == "fedpac/t1_main | 100 clients local | seed 0")
    record = records.read(tmp_path / rel)
    assert campaign._record_of(entry, record, strict=True, root=tmp_path)
    assert not campaign._record_of(hundred, record, strict=True, root=tmp_path)


def test_check_dry_runs_an_entry_and_says_what_it_would_train(tmp_path, monkeypatch, capsys):
    """`check KEY`: the entry's notebook at the paper preset reading records only, so it builds its
    runs and trains none; the outcome in one line per entry."""
    import os
    from types import SimpleNamespace

    from pflcore import notebooks

    outcomes = iter([
        SimpleNamespace(status="ok", error=None),
        SimpleNamespace(status="failed", error="RecordError: no committed record of this run (fedprox on fmnist, seed "
                                              "2022, fingerprint abc), and PFLCORE_RECORDS_ONLY=1 reads runs without "
                                              "training any."),
        SimpleNamespace(status="failed", error="Traceback ...\nConfigError: unknown method 'fedprox2'"),
    ])
    seen = []

    def run_notebooks(preset, out, only, root, overrides, log):
        seen.append((preset, only, os.environ.get(records.RECORDS_ONLY_ENV), overrides))
        return [next(outcomes)]

    monkeypatch.setattr(notebooks, "run_notebooks", run_notebooks)
    keys = [e.key for e in campaign.CAMPAIGN if e.stage == 1][:3]
    assert campaign.main(["check", *keys]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("every run it makes has a record already; it would train nothing.")
    assert out[1].endswith("ready; its notebook builds its runs and would train the first without a record "
                           "(fedprox on fmnist, seed 2022, fingerprint abc).")
    assert out[2].endswith("its notebook fails before any run trains (ConfigError: unknown method 'fedprox2').")
    first = next(e for e in campaign.CAMPAIGN if e.key == keys[0])
    assert seen[0][:3] == ("paper", [f"notebooks/{first.notebook}.ipynb"], "1")
    assert first.parameters.items() <= seen[0][3].items()
    assert os.environ.get(records.RECORDS_ONLY_ENV) is None
    assert campaign.main(["check", "no such run"]) == 2
    assert _one_line_error(capsys).startswith("error: the campaign has no entry 'no such run'")


def test_an_entry_that_writes_no_record_stops_the_campaign_instead_of_running_again(tmp_path, monkeypatch):
    """An entry whose runs all had records (another entry gave them) writes none; taking it again
    would loop on it for --count runs."""
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "params").mkdir()
    ran, logged = [], []
    monkeypatch.setattr(campaign, "run_entry", lambda entry, root, out, park_at=None, end_by=None: ran.append(entry.key) or [])
    campaign.next_runs(3, commit=False, root=tmp_path, log=lambda *a, **k: logged.append(" ".join(map(str, a))))
    assert ran == [campaign.CAMPAIGN[0].key] and "the campaign stops here" in logged[-1]


def test_no_two_entries_of_the_second_campaign_make_the_same_run():
    """Rows that are another table's run (by config fingerprint) have no entry of their own: FedFA's
    own row in Tables 3 and 5 and FedAvg's in Table 5 are Table 2's #C=2 runs, FedPAC Table 2's Both is
    Table 1's FedPAC, Table 8's #C=2 FedFA is Tables 6-7's default run, Table 5's FedFA w/o CC is Table 3's."""
    from pflcore.papers.fedfa import fedfa_config
    from pflcore.papers.fedpac import FEDPAC_ABLATION, fedpac_config

    labels = {(e.notebook, e.label) for e in campaign.CAMPAIGN}
    assert not {("fedfa/t3_ablation", "fedfa"), ("fedfa/t5_calibration_timing", "fedfa"),
                ("fedfa/t5_calibration_timing", "fedavg"), ("fedfa/t5_calibration_timing", "fedfa calibration=none"),
                ("fedfa/t8_rounds_to_target", "c2 fedfa"), ("fedpac/c4_global_models", "fedpac"),
                ("fedpac/c5_fedproto", "fedpac"), ("fedpac/c5_fedproto", "local"),
                ("fedpac/c5_fedproto", "fedavg_ft")} & labels
    t6 = dict(num_clients=100, participation=0.1, rounds=200, local_epochs=5, eval_every=1, subsample=1.0)
    assert fedfa_config("fedfa", "fmnist", "c2", seed=2021, **t6).fingerprint() == \
        fedfa_config("fedfa anchor_momentum=0.5", "fmnist", "c2", seed=2021, **t6).fingerprint()
    for seed, t1 in ((1, "e2a9355218"), (2, "a08668eacc")):  # Table 1's FedPAC records, seeds 1 and 2
        both = fedpac_config("fedpac", "fmnist", 20, method_params=FEDPAC_ABLATION["Both"],
                             partition={"samples_per_client": 600}, seed=seed)
        assert both.fingerprint() == t1 and (ROOT / "reproductions" / "fedpac" / "t1_main" /
                                             f"fedpac-fmnist-seed{seed}-{t1}.json").exists()


def test_each_entry_of_the_second_campaign_names_parameters_and_rows_its_notebook_has():
    """What `check KEY` (a dry run of the notebook, reading records only) showed for one entry of each
    kind, held without running a notebook: every parameter an entry passes is one its notebook's
    parameters cell defines, each row is a method pflcore has with parameters it accepts, and a row of
    a notebook whose paper preset lists its rows is one of them (the paper's row, not another)."""
    import ast

    from pflcore.algorithms.hyperparams import check_hyperparams
    from pflcore.papers import split_label
    from pflcore.yaml_io import read_yaml_file

    def defined_in(notebook: str) -> set[str]:
        """The names the notebook's parameters cell assigns (papermill's own reading misses a list
        whose strings hold '=', FedFA Table 3's methods)."""
        cells = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())["cells"]
        [cell] = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
        tree = ast.parse("".join(cell["source"]))
        return {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets}

    second = [e for e in campaign.CAMPAIGN if e.stage > 0]
    assert {e.stage for e in second} == set(range(1, len(campaign.STAGES)))
    defined = {nb: defined_in(nb) for nb in {e.notebook for e in second}}
    for entry in second:
        assert set(entry.parameters) <= defined[entry.notebook], entry.key
        paper = read_yaml_file(ROOT / "params" / entry.notebook / "paper.yaml", "preset")
        for label in entry.parameters.get("methods", []):
            method, params = split_label(label)
            assert method in ALGORITHMS, entry.key
            check_hyperparams(method, ALGORITHMS[method].hyperparams, params)
            assert label in paper.get("methods", [label]) or entry.investigates, entry.key
        for name in ("settings", "sample_percents"):
            assert set(entry.parameters.get(name, [])) <= set(paper.get(name, entry.parameters.get(name, []))), entry.key
        seeds = entry.parameters.get("seeds", [entry.parameters.get("seed")])
        assert seeds == [entry.seed] and entry.estimate_s > 0 and entry.group, entry.key


def _plan_with_one_record(tmp_path, monkeypatch):
    """A project whose plan notes one real toy-scale record, of FedPAC T1's Local seed 0: the
    entry, the record's seconds of rounds, and the plan as it stands."""
    _project(tmp_path, monkeypatch)
    entry = _t1_local(0)
    rel = _recorded(tmp_path, entry)
    seconds = records.read(tmp_path / rel)["summary"]["seconds"]
    campaign.write_plan({"runs": [{"key": entry.key, "records": [rel]}]}, tmp_path)
    return entry, seconds, campaign.current_plan(tmp_path)


def test_a_row_s_remaining_seeds_are_estimated_from_its_recorded_seeds(tmp_path, monkeypatch):
    """Once a row has a record, its other seeds' estimate is what the recorded ones took (their
    summary seconds), and the table's hours left follow; an entry of several records, or without a
    recorded sibling, keeps the campaign's own estimate."""
    entry, seconds, plan = _plan_with_one_record(tmp_path, monkeypatch)
    rows = {r["key"]: r for r in plan["runs"]}
    for seed in (1, 2):
        assert rows[_t1_local(seed).key]["estimate_s"] == round(seconds, -1)
        assert rows[_t1_local(seed).key]["measured"] == 1
    assert rows[entry.key]["measured"] == 0 and rows[entry.key]["estimate_s"] == entry.estimate_s  # done: its own
    fedavg = next(e for e in campaign.CAMPAIGN if e.key == "fedpac/t1_main | fedavg+fedavg_ft+knn_per | seed 1")
    assert rows[fedavg.key]["estimate_s"] == fedavg.estimate_s and rows[fedavg.key]["measured"] == 0
    t1 = plan["tables"]["FedPAC T1 (20 clients)"]
    assert t1["remaining_estimate_s"] == sum(r["estimate_s"] for r in plan["runs"]
                                             if r["table"] == "FedPAC T1 (20 clients)" and not r["records"])


def test_a_record_left_by_a_stopped_run_is_adopted_and_a_committed_one_outside_the_plan_is_refused(
        tmp_path, monkeypatch, capsys):
    """An entry of several runs writes each record as its run ends: stopped half-way, it leaves
    uncommitted records no entry claims. They are no sign of a damaged plan: next runs the entry
    (its notebook reads them instead of training again) and notes them as its own. The same record
    committed while plan.json lists none is a plan emptied or edited by hand: refused."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    _project(tmp_path, monkeypatch)
    git("init", "-q")
    git("config", "user.email", "t@example.org")
    git("config", "user.name", "t")
    entry = _t1_local(0)
    rel = _recorded(tmp_path, entry)  # uncommitted: left by a stopped run
    capsys.readouterr()
    plan, problems = campaign.believed(campaign.current_plan(tmp_path), tmp_path)
    assert problems == {}
    ran = []
    monkeypatch.setattr(campaign, "run_entry", lambda e, root, out, park_at=None, end_by=None: ran.append(e.key) or [])  # read, not trained
    monkeypatch.setattr(campaign, "redraw_figures", lambda *a, **k: False)
    campaign.next_runs(1, commit=False, root=tmp_path, first=(entry.key,), log=lambda *a, **k: None)
    assert ran == [entry.key]
    assert {r["key"]: r["records"] for r in campaign.read_plan(tmp_path)["runs"]}[entry.key] == [rel]
    # committed, and the plan emptied: refused
    git("add", rel)
    git("commit", "-q", "-m", "record")
    campaign.write_plan({"runs": []}, tmp_path)
    _, problems = campaign.believed(campaign.current_plan(tmp_path), tmp_path)
    assert list(problems) == [entry.key] and rel in problems[entry.key]


# ---------------------------------------------------------------- next --budget: every run finishes in its stretch
def test_this_cpu_s_speed_is_the_median_of_its_records_against_their_entries_estimates(tmp_path, monkeypatch):
    """A record made here counts for this kind of CPU (its numeric path names it), per notebook,
    else per paper, else all; on another kind of CPU nothing is known and the estimates stand
    (factor 1). `status` gives each table's hours on this kind of CPU from it."""
    from pflcore import numerics

    entry, seconds, plan = _plan_with_one_record(tmp_path, monkeypatch)
    assert campaign.host_speed(plan, tmp_path, "fedpac/t1_main") == (seconds / entry.estimate_s, 1)
    assert campaign.host_speed(plan, tmp_path, "fedpac/t3_concept_shift") == (seconds / entry.estimate_s, 1)  # paper's
    assert campaign.host_speed(plan, tmp_path, "fedcp/t2_main") == (seconds / entry.estimate_s, 1)  # all of them
    here = campaign.hours_here(plan, tmp_path)
    own = {e.key: e.estimate_s for e in campaign.CAMPAIGN}
    left = [r for r in plan["runs"] if r["table"] == "FedPAC T1 (20 clients)" and not r["records"]]
    assert here["FedPAC T1 (20 clients)"] == pytest.approx(sum(own[r["key"]] for r in left) * seconds
                                                           / entry.estimate_s / 3600)
    # Local's other seeds are estimated in the plan from the record (made here): that estimate is
    # this CPU's already, and is not scaled by this CPU's speed a second time
    assert any(r["measured"] for r in left) and sum(own[r["key"]] for r in left) != sum(r["estimate_s"] for r in left)
    path = numerics.numeric_path("cpu")
    monkeypatch.setattr(numerics, "numeric_path", lambda *a, **k: {**path, "cpu_model_number": "another"})
    assert campaign.host_speed(plan, tmp_path, "fedpac/t1_main") == (1.0, 0)


def test_a_record_older_than_numeric_paths_counts_only_where_its_notebook_has_none_of_this_kind(tmp_path,
                                                                                                monkeypatch):
    """Records that name only a CPU model name (several kinds of CPU share one) stand in for a
    notebook's speed here only until the notebook has a record whose numeric path names this CPU."""
    entry, seconds, plan = _plan_with_one_record(tmp_path, monkeypatch)
    own = next(r for r in plan["runs"] if r["key"] == entry.key)["records"][0]
    older = _t1_local(1)
    rel = _recorded(tmp_path, older)
    read = campaign._read_record

    def as_before_numeric_paths(path):
        record = read(path)
        if path.name != Path(rel).name:
            return record
        provenance = {k: v for k, v in record["provenance"].items() if k != "numeric_path"}
        return {**record, "provenance": {**provenance, "cpu_model": records.cpu_model()},
                "summary": {**record["summary"], "seconds": 40 * older.estimate_s}}

    monkeypatch.setattr(campaign, "_read_record", as_before_numeric_paths)
    campaign.write_plan({"runs": [{"key": entry.key, "records": [own]}, {"key": older.key, "records": [rel]}]},
                        tmp_path)
    plan = campaign.current_plan(tmp_path)
    assert campaign.host_speed(plan, tmp_path, "fedpac/t1_main") == (seconds / entry.estimate_s, 1)
    campaign.write_plan({"runs": [{"key": older.key, "records": [rel]}]}, tmp_path)
    assert campaign.host_speed(campaign.current_plan(tmp_path), tmp_path, "fedpac/t1_main") == (40.0, 1)


def test_older_records_of_a_notebook_without_one_of_this_kind_are_scaled_by_how_this_kind_ran_against_them(
        tmp_path, monkeypatch):
    """Where a notebook has only records that name a CPU model name, they count at the speed this
    kind of CPU showed against such records on a notebook that has both: this kind took twice what
    they said on FedPAC T1, so four times the estimates on FedCP T2 where they said two."""
    entry, seconds, plan = _plan_with_one_record(tmp_path, monkeypatch)
    own = next(r for r in plan["runs"] if r["key"] == entry.key)["records"][0]
    mine = seconds / entry.estimate_s
    older_t1 = _t1_local(1)
    older_cp = next(e for e in campaign.CAMPAIGN if e.key == "fedcp/t2_main | fedavg | seed 0")
    named = {_recorded(tmp_path, older_t1): mine / 2, _recorded(tmp_path, older_cp): 2.0}
    estimates = {Path(rel).name: e.estimate_s for rel, e in zip(named, (older_t1, older_cp))}
    read = campaign._read_record

    def as_before_numeric_paths(path):
        record = read(path)
        if path.name not in estimates:
            return record
        ratio = next(r for rel, r in named.items() if Path(rel).name == path.name)
        provenance = {k: v for k, v in record["provenance"].items() if k != "numeric_path"}
        return {**record, "provenance": {**provenance, "cpu_model": records.cpu_model()},
                "summary": {**record["summary"], "seconds": ratio * estimates[path.name]}}

    monkeypatch.setattr(campaign, "_read_record", as_before_numeric_paths)
    (rel_t1, rel_cp), keys = named, (older_t1.key, older_cp.key)
    runs = [{"key": entry.key, "records": [own]}, {"key": keys[0], "records": [rel_t1]},
            {"key": keys[1], "records": [rel_cp]}]
    campaign.write_plan({"runs": runs}, tmp_path)
    plan = campaign.current_plan(tmp_path)
    assert campaign.host_speed(plan, tmp_path, "fedpac/t1_main") == (mine, 1)  # its own kind's record
    assert campaign.host_speed(plan, tmp_path, "fedcp/t2_main") == (pytest.approx(4.0), 1)
    campaign.write_plan({"runs": runs[1:]}, tmp_path)  # no record of this kind: the older ones as they are
    assert campaign.host_speed(campaign.current_plan(tmp_path), tmp_path, "fedcp/t2_main") == (pytest.approx(2.0), 1)


def _budget_clock(tmp_path, monkeypatch, speed: float) -> list[float]:
    """An empty project for ``next --budget``: a clock the fake runs move (returned), this CPU
    taking ``speed`` times the estimates, no figures redrawn and no records to believe."""
    _project(tmp_path, monkeypatch)
    clock = [0.0]
    monkeypatch.setattr(campaign.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(campaign.time, "time", lambda: clock[0])
    monkeypatch.setattr(campaign, "host_speed", lambda plan, root=None, notebook=None, ratios=None: (speed, 3))
    monkeypatch.setattr(campaign, "redraw_figures", lambda *a, **k: False)
    monkeypatch.setattr(campaign, "refuse_unbelieved", lambda home: None)
    return clock


def test_next_with_a_budget_starts_an_entry_only_if_it_fits_what_is_left(tmp_path, monkeypatch, capsys):
    """Each entry's expected time is its estimate times this CPU's speed plus an entry's overhead
    (the largest measured so far); where the next does not fit what is left, the first after it
    that fits goes on, and the campaign stops, saying so, when none does; one longer than the whole
    budget is passed over, and a bad budget is one sentence before any run."""
    clock = _budget_clock(tmp_path, monkeypatch, speed=1.5)
    ran, logged, rounds, pace = [], [], {}, [1.5]

    def run_entry(entry, root, out, park_at=None, end_by=None):  # its rounds take its estimate times the pace (1.5), and the entry 30 s more
        ran.append(entry.key)
        clock[0] += pace[0] * entry.estimate_s + 30
        rel = f"{records.RECORDS_FOLDER}/{entry.notebook}/{len(rounds)}.json"
        rounds[rel] = pace[0] * entry.estimate_s
        return [rel]

    monkeypatch.setattr(campaign, "run_entry", run_entry)
    monkeypatch.setattr(campaign, "_rounds_seconds", lambda rels, root: sum(rounds[rel] for rel in rels))
    first, second = (e.estimate_s for e in campaign.CAMPAIGN[:2])
    budget = 1.5 * first + 30 + 1.5 * second + campaign.ENTRY_OVERHEAD_S + 1  # two entries, not a third
    campaign.next_runs(None, commit=False, root=tmp_path, budget_s=budget,
                       log=lambda *a, **k: logged.append(" ".join(map(str, a))))
    assert ran == [e.key for e in campaign.CAMPAIGN[:2]]
    assert "this kind of CPU takes 1.50 times the estimates (the median of its 3 records)" in logged[0]
    assert logged[-1].startswith(f"campaign: {campaign.CAMPAIGN[2].key} would take about ")
    assert logged[-1].endswith("left of the budget, and no entry after it fits; it stops before it.")
    # an entry longer than the whole budget is passed over for those after it (a GPU, or a longer stretch, runs it)
    longest = max((e for e in campaign.CAMPAIGN if not e.parkable), key=lambda e: e.estimate_s)
    ran.clear()
    logged.clear()
    campaign.next_runs(1, commit=False, root=tmp_path, budget_s=1.5 * campaign.CAMPAIGN[2].estimate_s + 200,
                       first=(longest.key,), log=lambda *a, **k: logged.append(" ".join(map(str, a))))
    assert ran == [campaign.CAMPAIGN[2].key]
    assert any(line.startswith(f"campaign: {longest.key} would take about") and "more than the whole budget" in line
               for line in logged)
    assert len(ran) == 1
    # the next entry does not fit what is left, a later one does: that one goes on, and the stretch ends full
    before, after = campaign.CAMPAIGN[3], campaign.CAMPAIGN[4]
    wide = next(e for e in campaign.CAMPAIGN
                if after.estimate_s + 1 < e.estimate_s < before.estimate_s + after.estimate_s)
    ran.clear()
    logged.clear()
    campaign.next_runs(None, commit=False, root=tmp_path, first=(before.key, wide.key, after.key),
                       budget_s=1.5 * before.estimate_s + 30 + 1.5 * after.estimate_s + campaign.ENTRY_OVERHEAD_S + 1,
                       log=lambda *a, **k: logged.append(" ".join(map(str, a))))
    assert ran == [before.key, after.key]
    expected = f"campaign: {wide.key} would take about {1.5 * wide.estimate_s + campaign.ENTRY_OVERHEAD_S:.0f} s"
    assert any(line.startswith(expected) and line.endswith(
        f"it waits for the next stretch, and the first entry after it that fits goes on: {after.key}.")
        for line in logged)
    assert logged[-1].startswith(expected) and logged[-1].endswith("no entry after it fits; it stops before it.")
    # this stretch's machine runs faster than the records made on its kind: once it has run an entry of a
    # notebook, its own pace estimates that notebook's next entries (1.5 would not fit the second)
    first, second = campaign.CAMPAIGN[5], campaign.CAMPAIGN[6]
    assert first.notebook == second.notebook
    pace[0] = 0.5
    ran.clear()
    campaign.next_runs(None, commit=False, root=tmp_path, first=(first.key, second.key),
                       budget_s=1.5 * first.estimate_s + campaign.ENTRY_OVERHEAD_S + 1,  # the first fits by the records
                       log=lambda *a, **k: None)
    assert ran == [first.key, second.key]
    for bad in ("0", "-5", "soon", "inf", "nan", "1e9"):
        with pytest.raises(SystemExit) as stopped:
            campaign.main(["next", "--budget", bad])
        assert stopped.value.code == 2
        err = capsys.readouterr().err
        assert f"argument --budget: the seconds the entries may take, more than 0 and at most a week (604800), " \
               f"are expected; got '{bad}'." in err and "Traceback" not in err
    assert len(ran) == 2  # the bad budgets ran nothing


# ---------------------------------------------------------------- entries longer than a stretch park between stretches
def test_an_entry_slower_here_than_its_records_stops_early_and_the_next_that_fits_goes_on(tmp_path, monkeypatch):
    """A stretch on a machine slower than the records of its kind said: an entry that cannot park is
    given the end of the budget as the time its runs must end by (PFLCORE_END_BY); one whose run
    stops early for it is said in one line and not run again in this call, its notebook's later
    entries are expected to take no less than the time it was given, and the next entry that fits
    goes on."""
    clock = _budget_clock(tmp_path, monkeypatch, speed=1.0)
    slow = campaign.CAMPAIGN[0]
    same = next(e for e in campaign.CAMPAIGN if e.notebook == slow.notebook and e.estimate_s > slow.estimate_s)
    budget, overhead = 1000.0, campaign.ENTRY_OVERHEAD_S
    other = next(e for e in campaign.CAMPAIGN if e.notebook != slow.notebook and not e.parkable
                 and e.estimate_s + overhead <= budget - 60)
    assert not slow.parkable and same.estimate_s + overhead <= budget - 60  # both fit by the records
    said = ("local (seed 0) stopped after round 4 of 200: at 20.0 s a round here its rounds left would end "
            "3000 s after the time PFLCORE_END_BY gave.")
    calls, logged = [], []

    def run_entry(entry, root, out, park_at=None, end_by=None):
        calls.append((entry.key, park_at, end_by))
        clock[0] += 60
        if entry.key == slow.key:
            raise campaign.EntryTooSlow(said)
        return []  # read, not trained: the campaign stops after it

    monkeypatch.setattr(campaign, "run_entry", run_entry)
    campaign.next_runs(None, commit=False, root=tmp_path, budget_s=budget, first=(slow.key, same.key, other.key),
                       log=lambda *a, **k: logged.append(" ".join(map(str, a))))
    ends = budget - overhead  # the budget's end, less an entry's overhead (the figures' redraw)
    assert calls == [(slow.key, None, ends), (other.key, None, ends)]
    assert f"campaign: {slow.key}: {said} It waits for a longer stretch or a GPU, and the next entry that fits " \
           f"goes on." in logged
    expected = same.estimate_s * (ends / slow.estimate_s) + overhead  # at least the time the slow one was given
    assert f"campaign: {same.key} would take about {expected:.0f} s on this CPU, more than the whole budget; it is " \
           f"left for a longer budget or a GPU (device), and the next entry goes on." in logged


def test_run_entry_gives_its_runs_the_time_they_must_end_by_and_turns_their_early_stop_into_one_sentence(
        tmp_path, monkeypatch):
    """run_entry's ``end_by`` reaches the notebook's kernel as PFLCORE_END_BY, and the engine's
    RunTooSlow (the notebook's last error line, its colours off) becomes EntryTooSlow with the
    engine's sentence; without ``end_by`` the same failure is the notebook's failure."""
    from pflcore import notebooks
    from pflcore.engine.simulation import END_BY_ENV

    said = "ditto (seed 1) stopped after round 9 of 300: at 30.1 s a round here its rounds left would end 99 s after " \
           "the time PFLCORE_END_BY gave."
    seen = []

    def stops(preset, out, only=None, root=None, overrides=None):
        seen.append(os.environ.get(END_BY_ENV))
        return [notebooks.NotebookRun(only[0], preset, "failed", 1.0, "x.ipynb",
                                      f"\x1b[0;31mRunTooSlow\x1b[0m: {said}")]

    monkeypatch.setattr(notebooks, "run_notebooks", stops)
    entry = campaign.CAMPAIGN[0]
    with pytest.raises(campaign.EntryTooSlow) as stopped:
        campaign.run_entry(entry, tmp_path, tmp_path / "out", end_by=1234.5)
    assert str(stopped.value) == said and seen == ["1234.5"] and END_BY_ENV not in os.environ
    with pytest.raises(RuntimeError, match="the notebook failed"):
        campaign.run_entry(entry, tmp_path, tmp_path / "out")
    assert seen[-1] is None


def test_a_parkable_method_s_checkpoint_holds_one_model_and_at_most_a_head_per_client_and_the_others_do_not(
        make_config):
    """What makes a parked run small enough to commit: after rounds that gave every client state,
    the checkpoint of each parkable method (FedAvg, FedProx, FedBABU, Per-FedAvg; pFedMe, whose
    personal models the next round solves afresh; FedPer, FedRep and FedRoD, a head per client)
    holds the server's model and at most a classifier head per client, while FedPHP's and Ditto's
    (a model per client that carries over between rounds) are larger, and pFedMe's is too where
    the next round does not train every client."""
    import io

    import torch

    from pflcore.engine import Simulation, build_data

    def saved(state) -> int:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        return buffer.tell()

    def bound_ratio(method, **changes):
        """The checkpoint's bytes over those of the server's model and a head per client."""
        config = make_config(method=method, rounds=3, **changes)
        sim = Simulation(config, build_data(config))
        for r in range(2):
            sim.run_round(r, clients=range(config.num_clients))  # every client trains, so each has state
        model, head = saved(sim.model.state_dict()), saved(sim.model.head.state_dict())
        return saved(sim.snapshot(next_round=2)) / (model + config.num_clients * head)

    assert campaign.PARKABLE_METHODS >= {"perfedavg", "pfedme", "fedper", "fedprox"}
    assert all(bound_ratio(m) <= 1.0 for m in campaign.PARKABLE_METHODS)
    assert bound_ratio("fedphp") > 2 and bound_ratio("ditto") > 2  # four clients, each with its own model
    assert bound_ratio("pfedme", participation=0.25) > 1.5  # three clients sit the next round out


def _parking_project(tmp_path, monkeypatch):
    """A home project and the separate checkout a campaign stretch runs in, with a parkable entry
    first and a budget rule that runs it: (home, checkout, entry)."""
    home, root = tmp_path / "home", tmp_path / "checkout"
    for project in (home, root):
        for folder in ("notebooks", "params", records.RECORDS_FOLDER):
            (project / folder).mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(home)
    entry = next(e for e in campaign.CAMPAIGN if e.parkable and e.key.startswith("fedcp/t2_main | perfedavg |"))
    monkeypatch.setattr(campaign, "host_speed", lambda plan, root=None, notebook=None, ratios=None: (1.0, 3))
    monkeypatch.setattr(campaign, "redraw_figures", lambda *a, **k: False)
    monkeypatch.setattr(campaign, "refuse_unbelieved", lambda home: None)
    monkeypatch.setattr(campaign, "_here_path_key", lambda: "this-path")
    return home, root, entry


def _stand_in_record(entry, root) -> list[str]:
    """What a fake ``run_entry`` returns: an empty file where ``entry``'s record would go in ``root``."""
    rel = f"{records.RECORDS_FOLDER}/{entry.notebook}/{entry.label}-seed{entry.seed}.json"
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text("{}")
    return [rel]


def test_the_numeric_path_a_parked_note_names_is_the_one_its_run_s_record_names(make_config):
    """A parked run goes on only on the path its note names, so that its record names one: the
    note's key and words are those of a run with the notebooks' ``workers: auto`` (its worker
    processes and their one training thread each), not of the campaign's own process."""
    from pflcore import numerics
    from pflcore.engine import run

    result = run(make_config(rounds=1, workers="auto"))
    path = result.summary["provenance"]["numeric_path"]
    assert campaign._here_path_key() == numerics.path_key(path)
    assert campaign._here_in_words() == numerics.in_words(path)
    if path["worker_processes"] > 1:  # a machine with several cores
        assert f"{path['worker_processes']} worker processes of 1 training thread(s) each" in numerics.in_words(path)


def test_a_parkable_entry_parks_at_the_budget_s_end_and_the_next_stretch_goes_on_from_its_round(
        tmp_path, monkeypatch):
    """A Per-FedAvg entry longer than the budget runs until the budget ends (PFLCORE_PARK_AT) and
    its run folder goes to home's parked-runs/ with a note; the next stretch, in a fresh checkout,
    puts the folder back where the notebook resumes it, expects only the rounds left, and the
    record's commit takes the parked folder away. A run parked on another numeric path waits for
    that path, and a damaged note is one sentence."""
    home, root, entry = _parking_project(tmp_path, monkeypatch)
    run_dir = "results/paper/fedcp/perfedavg-pfllib-0123456789"
    calls, logged = [], []

    def parks(entry, root, out, park_at=None, end_by=None):
        # a parkable entry parks at the budget's end; it stops early only if it would not end in three stretches
        assert end_by == park_at + (campaign.PARK_STRETCHES - 1) * campaign.STRETCH_S
        calls.append((root, park_at))
        folder = root / run_dir
        folder.mkdir(parents=True)
        (folder / "checkpoint.pt").write_bytes(b"the state after round 120")
        (folder / "parked.json").write_text(json.dumps({"next_round": 121, "rounds": 300, "seconds": 7000.0}))
        raise campaign.EntryParked("RunParked: parked after round 120 of 300")

    monkeypatch.setattr(campaign, "run_entry", parks)
    budget = entry.estimate_s / 2
    campaign.next_runs(None, commit=False, root=root, home=home, first=(entry.key,), budget_s=budget,
                       log=lambda *a, **k: logged.append(" ".join(map(str, a))))
    [(where, park_at)] = calls
    assert where == root and park_at == pytest.approx(time.time() + budget - campaign.ENTRY_OVERHEAD_S, abs=5)
    assert "it runs until the budget ends and parks, to go on in the next stretch." in logged[1]
    parked = campaign.parked_folder(entry, home)
    assert parked == home / "parked-runs" / "fedcp" / "t2_main" / f"perfedavg-seed{entry.seed}"
    assert (parked / "run" / "checkpoint.pt").read_bytes() == b"the state after round 120"
    note = campaign.parked_note(entry, home)
    assert (note["folder"], note["next_round"], note["rounds"], note["path_key"]) == (run_dir, 121, 300, "this-path")
    assert logged[-1].startswith(f"campaign: {entry.key} parked after round 120 of 300 as the budget ends")

    # the next stretch, in a fresh checkout: the rounds left are expected, and the run is back where it resumes
    fresh = tmp_path / "fresh"
    for folder in ("notebooks", "params", records.RECORDS_FOLDER):
        (fresh / folder).mkdir(parents=True)
    seen, logged[:] = [], []

    def finishes(entry, root, out, park_at=None, end_by=None):
        seen.append((root / run_dir / "checkpoint.pt").read_bytes())
        return _stand_in_record(entry, root)

    monkeypatch.setattr(campaign, "run_entry", finishes)
    monkeypatch.setattr(campaign, "_rounds_seconds", lambda rels, root: 0.0)
    left_over = entry.estimate_s * 180 / 300 + campaign.ENTRY_OVERHEAD_S
    campaign.next_runs(1, commit=False, root=fresh, home=home, first=(entry.key,), budget_s=left_over + 1,
                       log=lambda *a, **k: logged.append(" ".join(map(str, a))))
    assert seen == [b"the state after round 120"]
    assert any(line.startswith(f"campaign: {entry.key} goes on from round 121 of 300") for line in logged)
    assert not parked.exists()

    # parked on another numeric path: it waits for that path (it does not fit whole here), and the next entry goes on
    other = next(e for e in campaign.CAMPAIGN if e.parkable and e.key != entry.key and e.estimate_s > budget)
    monkeypatch.setattr(campaign, "run_entry", parks)
    shutil.rmtree(root / "results")
    campaign.next_runs(None, commit=False, root=root, home=home, first=(other.key,), budget_s=budget,
                       log=lambda *a, **k: None)
    monkeypatch.setattr(campaign, "_here_path_key", lambda: "another-path")
    ran, logged[:] = [], []
    monkeypatch.setattr(campaign, "run_entry", lambda entry, root, out, park_at=None, end_by=None: ran.append(entry.key) or [])
    campaign.next_runs(1, commit=False, root=fresh, home=home, first=(other.key,), budget_s=budget,
                       log=lambda *a, **k: logged.append(" ".join(map(str, a))))
    assert other.key not in ran and len(ran) == 1
    assert any(f"{other.key} is parked after round 120 of 300 on another numeric path" in line for line in logged)

    # a note that is not one: one sentence naming it, before any run
    (campaign.parked_folder(other, home) / "entry.json").write_text("{not json")
    with pytest.raises(campaign.PlanError, match=r"entry\.json is not the note of a parked run of .*; delete "):
        campaign.next_runs(1, commit=False, root=fresh, home=home, first=(other.key,), budget_s=budget,
                           log=lambda *a, **k: None)


def _park_by_hand(entry, home, path_key: str, next_round: int = 121) -> None:
    """``entry``'s run parked in ``home`` after round ``next_round - 1`` of 300 on ``path_key``."""
    parked = campaign.parked_folder(entry, home)
    (parked / "run").mkdir(parents=True)
    (parked / "run" / "checkpoint.pt").write_bytes(b"the state")
    (parked / "entry.json").write_text(json.dumps({"entry": entry.key, "folder": f"results/paper/{entry.label}",
                                                   "next_round": next_round, "rounds": 300, "path_key": path_key}))


def test_one_run_at_most_parks_per_numeric_path_and_it_goes_on_before_any_other_entry_there(tmp_path, monkeypatch):
    """With a run parked on this path, the campaign goes on with it before the cheapest entry, and
    another parkable entry longer than what is left does not start to park beside it (the first
    asked for is passed over; it parks once this path has none); parked runs are found by path."""
    home, root, entry = _parking_project(tmp_path, monkeypatch)
    campaign.write_plan({"runs": []}, home)
    other = next(e for e in campaign.CAMPAIGN if e.parkable and e.key != entry.key and e.estimate_s > 4000)
    _park_by_hand(entry, home, "this-path")
    _park_by_hand(next(e for e in campaign.CAMPAIGN if e.parkable and e.key not in (entry.key, other.key)), home,
                  "another-path")
    assert campaign.parked_here(home, "this-path") == [entry.key]
    calls = []

    def parks(e, root, out, park_at=None, end_by=None):
        calls.append((e.key, park_at is not None, end_by is not None))
        raise campaign.EntryParked("RunParked")

    monkeypatch.setattr(campaign, "run_entry", parks)
    monkeypatch.setattr(campaign, "park", lambda *a: {"next_round": 200, "rounds": 300})
    campaign.next_runs(None, commit=False, root=root, home=home, budget_s=3000, log=lambda *a, **k: None)
    assert calls == [(entry.key, True, False)]  # not the cheapest entry: the run parked here goes on
    calls.clear()
    campaign.next_runs(None, commit=False, root=root, home=home, first=(other.key,), budget_s=3000,
                       log=lambda *a, **k: None)
    assert calls == [(entry.key, True, False)]  # the other would park beside it: passed over
    shutil.rmtree(campaign.parked_folder(entry, home))
    calls.clear()
    campaign.next_runs(None, commit=False, root=root, home=home, first=(other.key,), budget_s=3000,
                       log=lambda *a, **k: None)
    assert calls == [(other.key, True, True)]  # fresh: it also stops early if it would not end in three stretches


def test_a_parkable_entry_that_would_take_more_than_three_stretches_here_does_not_start_to_park(
        tmp_path, monkeypatch):
    """No entry is tied for long to a machine that runs it slowly: where this CPU would take more
    than what is left and two more stretches, a parkable entry is passed over, said in one line."""
    home, root, entry = _parking_project(tmp_path, monkeypatch)
    campaign.write_plan({"runs": []}, home)
    budget = 3000.0
    slow = (budget + (campaign.PARK_STRETCHES - 1) * campaign.STRETCH_S) / entry.estimate_s * 1.05
    monkeypatch.setattr(campaign, "host_speed", lambda plan, root=None, notebook=None, ratios=None: (slow, 3))
    ran, logged = [], []
    monkeypatch.setattr(campaign, "run_entry", lambda e, root, out, park_at=None, end_by=None: ran.append(e.key) or [])
    campaign.next_runs(1, commit=False, root=root, home=home, first=(entry.key,), budget_s=budget,
                       log=lambda *a, **k: logged.append(" ".join(map(str, a))))
    assert entry.key not in ran
    assert any(line.startswith(f"campaign: {entry.key} would take about") and "more than 3 stretches; it does not "
               "park here" in line for line in logged)


def test_an_entry_parked_on_another_path_that_fits_whole_here_runs_afresh_and_its_record_ends_the_parking(
        tmp_path, monkeypatch):
    """A parked run goes on only on its numeric path, but where the whole entry fits what is left
    here it runs from its first round, bounded by the budget's end (it stops early rather than park
    on a second path); the parked run stays where it is until the record is in, and then goes."""
    home, root, entry = _parking_project(tmp_path, monkeypatch)
    campaign.write_plan({"runs": []}, home)
    _park_by_hand(entry, home, "another-path")
    seen, logged = [], []

    def finishes(e, root, out, park_at=None, end_by=None):
        seen.append((e.key, park_at, end_by is not None, (root / "results").exists()))
        return _stand_in_record(e, root)

    monkeypatch.setattr(campaign, "run_entry", finishes)
    monkeypatch.setattr(campaign, "_rounds_seconds", lambda rels, root: 0.0)
    budget = entry.estimate_s + campaign.ENTRY_OVERHEAD_S + 60
    campaign.next_runs(1, commit=False, root=root, home=home, first=(entry.key,), budget_s=budget,
                       log=lambda *a, **k: logged.append(" ".join(map(str, a))))
    assert seen == [(entry.key, None, True, False)]  # from round 1, not unparked, and it cannot park
    assert any(f"{entry.key} is parked after round 120 of 300 on another numeric path" in line
               and "it fits whole here" in line for line in logged)
    assert not campaign.parked_folder(entry, home).exists()


def test_a_parked_entry_counts_only_its_rounds_left_in_the_hours_status_gives(tmp_path, monkeypatch, capsys):
    """An entry parked after 120 of its 300 rounds has 180 left: `status` gives its table's hours,
    by the estimates and on this kind of CPU, for those rounds only, and lists it with them."""
    home, _, entry = _parking_project(tmp_path, monkeypatch)
    campaign.write_plan({"runs": []}, home)
    whole = campaign.believed(campaign.current_plan(home), home)[0]
    parked = campaign.parked_folder(entry, home)
    (parked / "run").mkdir(parents=True)
    (parked / "run" / "checkpoint.pt").write_bytes(b"the state after round 120")
    (parked / "entry.json").write_text(json.dumps({"entry": entry.key, "folder": "results/paper/fedcp/run",
                                                   "next_round": 121, "rounds": 300, "path_key": "this-path"}))
    assert campaign.share_left(campaign.parked_note(entry, home)) == pytest.approx(180 / 300)
    assert campaign.share_left(None) == 1.0
    left = campaign.with_parked_progress(whole, home)
    row = next(r for r in left["runs"] if r["key"] == entry.key)
    assert row["estimate_s"] == pytest.approx(entry.estimate_s * 180 / 300)
    cut = entry.estimate_s * 120 / 300
    assert left["remaining_estimate_s"] == pytest.approx(whole["remaining_estimate_s"] - cut)
    assert left["tables"][entry.group]["remaining_estimate_s"] == pytest.approx(
        whole["tables"][entry.group]["remaining_estimate_s"] - cut)
    assert campaign.seconds_here(whole, home)[entry.key] == pytest.approx(entry.estimate_s * 180 / 300)  # speed 1

    assert campaign.main(["status"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"{left['remaining_estimate_s'] / 3600:.1f} h of rounds by the estimates" in out[0]
    table = next(line for line in out if line.startswith(f"  {entry.group} "))
    assert f"{round(left['tables'][entry.group]['remaining_estimate_s'] / 3600, 1):6.1f} h left" in table
    listed = next(line for line in out if line.endswith(f"s  {entry.key}") or f"s  {entry.key}  (" in line)
    assert listed.split()[0] == f"{entry.estimate_s * 180 / 300:.0f}" and "parked after round 120 of 300" in listed
