"""The reproduction report (pflcore.report): cells and verdicts from records on small
hand-checkable cases, the claims, and the site built from the shipped records and opened
in a real browser (Debian's chromium through Selenium): every page loads, every figure
renders, no local link is broken. Screenshots go to outputs/report/."""
from __future__ import annotations

import json
import math
from html import unescape
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import pytest

from browser import chrome, require_browser
from pflcore import records
from pflcore.report import (FIGURES_FOLDER, MANIFEST, NOT_FROM_RECORDS, Cell, build, cells_of, commit_figures, first_place,
                            other_settings, variant_cells, verdict)
from pflcore.report.pages import Page, render_paper
from pflcore.report.catalogue import CATALOGUE, TABLES

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "outputs" / "report-screenshots"
T1 = next(t for t in TABLES if t.notebook == "fedpac/t1_main")


def record(notebook: str, method: str, seed: int, acc: float, **config) -> dict:
    """A minimal valid record of a 3-round run whose final mean accuracy is ``acc``, with the
    method parameters of its notebook's table (those of the row a real run would be in) unless
    ``method_params`` is given."""
    spec = next((t for t in TABLES if t.notebook == notebook), None)
    if "method_params" not in config and spec is not None and spec.row_params(method):
        config["method_params"] = spec.row_params(method)
    history = [{"round": r, "train_loss": 1.0 / r, "acc_mean": acc - 3 + r, "acc_std": 1.0,
                "acc_weighted": acc - 3 + r} for r in (1, 2, 3)]
    summary = {"acc_mean": acc, "acc_std": 1.0, "acc_weighted": acc, "best_acc_mean": acc, "best_round": 3,
               "best_acc_weighted": acc, "rounds": 200, "seconds": 60.0}
    cfg = {"method": method, "dataset": "fmnist", "num_clients": 20, "rounds": 200, "seed": seed,
           "partition": {"kind": "dominant"}, **config}
    return {"schema": records.SCHEMA, "schema_version": records.SCHEMA_VERSION, "notebook": notebook,
            "fingerprint": f"{method[:4]}{seed:06d}", "seed": seed, "config": cfg,
            "provenance": {"seconds_per_round": 0.3, "git_commit": "0" * 40}, "summary": summary,
            "history": history, "clients": {"final": [acc] * 2, "history": [[50.0, 50.0]] * 3,  # percent
                                            "eval_rounds": [1, 2, 3]},
            "arrays": {}, "notes": []}


def test_cells_group_records_by_column_and_method_with_mean_and_std_over_seeds():
    found = [(Path(f"{m}{s}.json"), record("fedpac/t1_main", m, s, a))
             for m, s, a in [("fedpac", 0, 91.0), ("fedpac", 1, 93.0), ("fedavg", 0, 85.0),
                             ("fedavg", 1, 87.0), ("fedpac", 2, 92.0)]]
    found.append((Path("other.json"), record("fedfa/t2_label_skew", "fedpac", 3, 10.0)))  # another notebook
    cells = cells_of(T1, found)
    fedpac = cells[("fmnist 20", "fedpac")]
    assert fedpac.n == 3 and fedpac.seeds() == [0, 1, 2]
    assert fedpac.mean("acc_mean") == pytest.approx(92.0)
    assert fedpac.std("acc_mean") == pytest.approx(1.0)  # sample std of 91, 93, 92
    assert cells[("fmnist 20", "pfedme")].n == 0
    assert verdict(fedpac, "acc_mean")[0] == "reproduced"  # the paper: 91.83
    assert verdict(cells[("fmnist 20", "pfedme")], "acc_mean")[0] == "not run yet"
    claim = first_place(cells, "fmnist 20", "fedpac", "acc_mean")
    assert claim["status"] == "holds so far" and "+6.00 points" in claim["text"]


def test_a_table_shows_only_its_paper_preset_s_runs_and_refuses_two_configs_for_one_seed():
    """A run at the paper preset with a training parameter changed is another setting: its record
    stays out of the table (a record written before records kept their changes is read as the
    preset's). Two records of one row and seed with different configs are refused in one sentence
    rather than averaged."""
    preset = record("fedpac/t1_main", "fedpac", 0, 91.0)
    preset["preset_changes"] = {}
    changed = record("fedpac/t1_main", "fedpac", 1, 70.0, local_epochs=1)
    changed["preset_changes"] = {"local_epochs": 1}
    legacy = record("fedpac/t1_main", "fedpac", 2, 93.0)  # no preset_changes
    found = [(Path("a.json"), preset), (Path("b.json"), changed), (Path("c.json"), legacy)]
    cell = cells_of(T1, found)[("fmnist 20", "fedpac")]
    assert cell.seeds() == [0, 2] and cell.mean("acc_mean") == pytest.approx(92.0)
    others = other_settings(T1, found)
    assert others == ["FedPAC seed 1 (changed: local_epochs = 1)"]  # said on the table's page, not silently missing
    page = Page("fedpac", "FedPAC", tables=[(T1, cells_of(T1, found), [], None, [], others, {})])
    assert "Not in this table: 1 record(s) of its notebook" in unescape(render_paper(page, verdict))

    fedcp_t2 = next(t for t in TABLES if t.notebook == "fedcp/t2_main")  # the table's own change: 300 rounds
    short = record("fedcp/t2_main", "fedcp", 0, 90.0, rounds=300)
    assert cells_of(fedcp_t2, [(Path("x.json"), {**short, "preset_changes": {"rounds": 300}})])[
        ("practical mnist", "fedcp")].n == 1
    assert cells_of(fedcp_t2, [(Path("x.json"), {**short, "preset_changes": {"rounds": 300, "subsample": 0.5}})])[
        ("practical mnist", "fedcp")].n == 0

    other = record("fedpac/t1_main", "fedpac", 0, 80.0, lr=0.1)  # an older record of another config, same seed
    with pytest.raises(records.RecordError, match=r"^a.json and d.json are both FedPAC's seed 0 .* different configs"):
        cells_of(T1, [(Path("a.json"), preset), (Path("d.json"), other)])


def test_a_run_of_a_row_s_method_with_other_method_parameters_is_a_variant_beside_the_row():
    """An investigation (FedBABU fine-tuning the whole model, FedDyn as FedFA's code runs it) is
    a notebook's methods label such as "fedbabu ft_body=true": its records sit on the line below
    their row, compared with the row's paper number, and never enter the row's mean, its verdict,
    the claim or the collision check. A record of the table's own parameters, written out or left
    to the method's defaults, is the row itself."""
    from pflcore.papers import join_label, split_label

    assert join_label("fedbabu", {"ft_body": True}) == "fedbabu ft_body=true" and join_label("fedbabu", {}) == "fedbabu"
    plain = [(Path(f"b{s}.json"), record(T1.notebook, "fedbabu", s, 70.0 + s)) for s in (0, 1)]
    body = [(Path(f"v{s}.json"), record(T1.notebook, "fedbabu", s, 80.0 + s, method_params={"ft_body": True}))
            for s in (0, 1, 2)]
    pfedme = record(T1.notebook, "pfedme", 0, 88.0, method_params={"lam": 10.0, "inner_steps": 5})  # FedPAC's choice
    spelled = record(T1.notebook, "fedbabu", 2, 72.0, method_params={"ft_body": False, "ft_epochs": 5})  # defaults
    found = [*plain, *body, (Path("p.json"), pfedme), (Path("s.json"), spelled)]
    assert T1.row_of(body[0][1]) == "fedbabu ft_body=true" and split_label("fedbabu ft_body=true") == (
        "fedbabu", {"ft_body": True})
    assert T1.row_of(pfedme) == "pfedme" and T1.row_of(spelled) == "fedbabu"
    assert T1.row_of(record(T1.notebook, "pfedme", 0, 1.0, method_params={})) == "pfedme lam=15.0"  # pFedMe's own default
    cells = cells_of(T1, found)
    assert cells[("fmnist 20", "fedbabu")].seeds() == [0, 1, 2] and cells[("fmnist 20", "fedbabu")].mean(
        "acc_mean") == pytest.approx(71.0)
    assert cells[("fmnist 20", "pfedme")].n == 1
    variants = variant_cells(T1, found)
    assert list(variants) == [("fmnist 20", "fedbabu ft_body=true")]
    variant = variants[("fmnist 20", "fedbabu ft_body=true")]
    assert variant.mean("acc_mean") == pytest.approx(81.0) and variant.paper == cells[("fmnist 20", "fedbabu")].paper
    html = unescape(render_paper(Page("fedpac", "FedPAC", tables=[(T1, cells, [], None, [], [], variants)]), verdict))
    rows = [part.split("</tr>")[0] for part in html.split("<tr class=")[1:]]
    names = [line.split('<td class="l">')[1].split("<")[0] for line in rows]
    assert names[names.index("FedBABU") + 1] == "FedBABU ft_body=true"
    assert "a variant of FedBABU's row, not in the table" in rows[names.index("FedBABU") + 1]
    assert "fedpac/t1_main/fedbabu ft_body=true seed 2" in html  # among the records behind the table
    with pytest.raises(records.RecordError, match="FedBABU ft_body=true's seed 0"):  # one check, per variant too
        variant_cells(T1, [*body, (Path("w.json"), record(T1.notebook, "fedbabu", 0, 1.0, lr=0.5,
                                                               method_params={"ft_body": True}))])
    fedfa_t2 = next(t for t in TABLES if t.notebook == "fedfa/t2_label_skew")  # a string value, as FedFA's note says
    feddyn = record(fedfa_t2.notebook, "feddyn", 2021, 50.0, method_params={"alpha": 0.1, "variant": "fedfa_code"},
                    partition={"kind": "fedfa_shards"})
    assert fedfa_t2.row_of(feddyn) == "feddyn variant=fedfa_code"
    assert split_label(fedfa_t2.row_of(feddyn)) == ("feddyn", {"variant": "fedfa_code"})
    for value in (True, 0.5, 10, "fedfa_code", "true", "[x", [1, 2], {"a": 1}):  # every value reads back as itself
        ran = record(T1.notebook, "fedbabu", 0, 1.0, method_params={"ft_epochs": value})
        assert split_label(T1.row_of(ran)) == ("fedbabu", {"ft_epochs": value}), value


def test_the_shipped_records_of_every_table_are_its_rows_or_a_planned_investigation():
    """Pinned: a record's row is read from its method parameters, and every shipped record a
    table shows was made with the table's parameters, so it sits in its method's row, unless it
    is a run of one of the campaign's investigations (a variant shown beside its row)."""
    from pflcore import campaign

    shipped = records.all_records(ROOT / "reproductions")
    planned = {(e.notebook, e.label) for e in campaign.CAMPAIGN if e.investigates}
    for spec in TABLES:
        shown = [r for _, r in shipped if spec.shows(r)]
        assert shown and all(spec.row_of(r) == r["config"]["method"] or (spec.notebook, spec.row_of(r)) in planned
                             for r in shown), spec.id
        assert {(spec.notebook, row) for _, row in variant_cells(spec, shipped)} <= planned, spec.id


def test_fedfa_s_claim_names_the_settings_as_the_paper_does_and_waits_for_both():
    fedfa_t2 = next(t for t in TABLES if t.notebook == "fedfa/t2_label_skew")

    def shards(method, seed, acc):
        rec = record("fedfa/t2_label_skew", method, seed, acc, partition={"kind": "fedfa_shards"})
        rec["summary"]["global_test_acc"] = acc
        return (Path(f"{method}{seed}.json"), rec)

    found = [shards("fedavg", s, a) for s, a in ((2021, 72.0), (2022, 74.0))]
    found += [shards("fedfa", s, a) for s, a in ((2021, 83.0), (2022, 84.0))]
    claim = fedfa_t2.claim(cells_of(fedfa_t2, found))
    assert claim["status"] == "holds so far"  # Dir(0.1) is not recorded yet
    assert "#C = 2: +10.50 points (n = 2 / 2" in claim["text"] and "Dir(0.1): not recorded yet" in claim["text"]


def test_pfedfda_s_claim_weighs_the_gain_under_scarcity_and_waits_for_every_row():
    """pFedFDA's claim holds when its lead over the best other row is positive at 25% and larger
    than at 100%; while a row of either column has no record it says "so far"."""
    fda = next(t for t in TABLES if t.notebook == "pfedfda/t1_covariate_shift")

    def run(method, share, acc):
        rec = record("pfedfda/t1_covariate_shift", method, 0, acc, partition={"kind": "dirichlet", "subsample": share})
        return (Path(f"{method}{share}.json"), rec)

    found = [run("pfedfda", 0.25, 90.0), run("fedpac", 0.25, 87.0), run("pfedfda", 1.0, 92.0), run("fedpac", 1.0, 93.0)]
    claim = fda.claim(cells_of(fda, found))
    assert claim["status"] == "holds so far"  # +3.00 at 25% over -1.00 at 100%; Local, FedAvg-FT, Ditto unrecorded
    assert "25%: pFedFDA 90.00 (n=1) against the best other, FedPAC 87.00 (n=1) (+3.00)" in claim["text"]
    assert claim["text"].endswith("not the paper's CIFAR10-S")  # the page's sentence adds the full stop
    found += [run(m, share, 80.0) for m in ("local", "fedavg_ft", "ditto") for share in (0.25, 1.0)]
    assert fda.claim(cells_of(fda, found))["status"] == "holds"
    found[0] = run("pfedfda", 0.25, 86.0)  # behind FedPAC under scarcity
    assert fda.claim(cells_of(fda, found))["status"] == "does not hold"


def test_verdict_uses_one_std_over_seeds_or_one_point():
    far = Cell("c", "m", runs=[record("n", "m", s, a) for s, a in [(0, 80.0), (1, 84.0)]], paper=85.0)
    assert verdict(far, "acc_mean") == ("differs", "-3.00 points")  # std 2.83 < 3.00
    wide = Cell("c", "m", runs=[record("n", "m", s, a) for s, a in [(0, 78.0), (1, 86.0)]], paper=84.0)
    status, why = verdict(wide, "acc_mean")
    assert status == "reproduced" and "std" in why  # diff -2.0 within std 5.66
    near = Cell("c", "m", runs=[record("n", "m", 0, 84.5)], paper=85.0)
    assert verdict(near, "acc_mean")[0] == "reproduced" and not math.isfinite(near.std("acc_mean"))


def test_a_row_that_differs_points_to_its_investigation_note_or_says_it_has_none():
    import dataclasses

    spec = dataclasses.replace(TABLES[0], row_notes=((TABLES[0].columns[0], "fedavg", "The authors' code ..."),))
    column = spec.columns[0]
    cells = {(column, m): Cell(column, m, paper=spec.paper_numbers(column).get(m)) for m in spec.rows}
    for method, acc in (("fedavg", 60.0), ("local", 50.0), ("fedpac", spec.paper_numbers(column)["fedpac"])):
        cells[(column, method)].runs = [record(spec.notebook, method, 0, acc)]
    html = unescape(render_paper(Page(spec.paper, "t", tables=[(spec, cells, [], None, [], [], {})]), verdict))
    assert "-25.28 points; see note 1" in html and "The authors' code ..." in html
    assert "-35.68 points; not investigated yet" in html
    assert html.count("not investigated yet") == 1  # FedPAC is within a point: reproduced


def test_the_shipped_tables_notes_are_exactly_on_the_rows_that_differ_from_the_paper():
    """Issue #35's rule, both ways. Every recorded row is within one std or a point of the
    paper's number, or its table carries a note saying what was tried and what remains (a new
    record that moves a row out of agreement fails here until the row is investigated); and
    a note on a recorded row explains a row that differs (once its seeds bring it within one
    std or a point, the note, often about having too few seeds, is stale and must go)."""
    shipped = records.all_records(ROOT / "reproductions")
    silent, stale = [], []
    for spec in TABLES:
        cells = cells_of(spec, shipped)
        assert all((column, method) in cells for column, method, _ in spec.row_notes), spec.row_notes
        for column in spec.columns:
            for method in spec.rows:
                cell = cells[(column, method)]
                if not cell.n:
                    continue  # a note may wait for its row's record
                status, why = verdict(cell, spec.metric)
                noted = spec.row_note(column, method) is not None
                if noted and status != "differs":
                    stale.append(f"{spec.paper} {spec.id}: the note on {method} under {column} explains a row "
                                 f"that is now {status}")
                # a table whose paper numbers are for another dataset shows them for reference only
                if spec.comparable and status == "differs" and not noted:
                    silent.append(f"{spec.paper} {spec.id} {column} {method} ({why})")
    assert not stale, stale
    assert not silent, silent


def test_the_fedbabu_note_s_account_of_its_swings_holds_for_the_shipped_records():
    """The FedBABU row's note says its accuracy moves by more than a point between evaluated
    rounds (100 to 200) in each seed, where every other row of the column but pFedMe (whose
    second seed swings too) moves by less than a point, and in most seeds (four in five or more) by less than half a point: a record
    that breaks this makes the note wrong."""
    note = next(text for column, method, text in T1.row_notes if method == "fedbabu")
    assert "more than a point" in note and "but pFedMe's moves by less than a point, and in most seeds by less " \
        "than half" in note
    largest = {}
    for _, rec in records.all_records(ROOT / "reproductions" / T1.notebook):
        if T1.shows(rec) and T1.row_of(rec) in T1.rows:  # the table's rows, not a variant beside one
            acc = [h["acc_mean"] for h in rec["history"] if h.get("acc_mean") is not None and h["round"] >= 100]
            if len(acc) > 1:
                largest.setdefault(T1.row_of(rec), []).append(max(np.abs(np.diff(acc))))
    fedbabu = largest.pop("fedbabu")
    assert any(step > 1.0 for step in largest.pop("pfedme")), "the note excepts pFedMe's swings; drop the exception"
    assert len(fedbabu) == 3 and all(step > 1.0 for step in fedbabu), fedbabu  # "in each of the three seeds"
    others = [step for steps in largest.values() for step in steps]
    assert others and all(step < 1.0 for step in others), largest
    assert sum(step < 0.5 for step in others) >= 0.8 * len(others), largest


def _t1_note_and_cells(method):
    """FedPAC Table 1's note for a method's row, the table's cells, and the cells of the variants
    on the lines below rows (keyed by column and "method setting"), all from one read of the
    shipped records."""
    note = next(text for column, m, text in T1.row_notes if m == method)
    found = list(records.all_records(ROOT / "reproductions" / T1.notebook))
    return note, cells_of(T1, found), variant_cells(T1, found)


def _score_by_seed(cell):
    """A cell's final score (T1's metric) by seed."""
    return {r["seed"]: r["summary"][T1.metric] for r in cell.runs}


def test_the_fedbabu_note_s_account_of_whole_model_fine_tuning_holds_for_the_shipped_records():
    """The FedBABU row's note says that with ft_body (the whole model fine-tuned, the variant on
    the line below the row) every seed scores above the row's same seed, and the three-seed mean
    sits within one std and within a point of the paper's number: a record that breaks this
    makes the note wrong."""
    note, cells, variants = _t1_note_and_cells("fedbabu")
    variant = variants[("fmnist 20", "fedbabu ft_body=true")]
    row = cells[("fmnist 20", "fedbabu")]
    by_seed = _score_by_seed(row)
    assert "in every seed it scores above this row's same seed" in note
    assert "within one std and within a point of the paper's number" in note
    assert variant.n == 3 and variant.seeds() == row.seeds() == [0, 1, 2]
    assert all(r["summary"][T1.metric] > by_seed[r["seed"]] for r in variant.runs), (variant.runs, by_seed)
    gap = abs(variant.mean(T1.metric) - variant.paper)
    assert gap < variant.std(T1.metric) and gap < 1.0, (variant.mean(T1.metric), variant.std(T1.metric))


def test_the_apfl_note_s_account_of_its_place_holds_for_the_shipped_records():
    """The APFL row's note says that with three seeds it sits below the paper's number by more
    than the seeds' spread, above Local and FedAvg and below FedAvg-FT and kNN-Per: a record
    that breaks this makes the note wrong."""
    note, cells, _ = _t1_note_and_cells("apfl")
    assert "With three seeds" in note and "above Local and FedAvg and below FedAvg-FT and kNN-Per" in note
    mean = {m: cells[("fmnist 20", m)].mean(T1.metric) for m in ("apfl", "local", "fedavg", "fedavg_ft", "knn_per")}
    apfl = cells[("fmnist 20", "apfl")]
    assert apfl.n == 3 and apfl.paper - mean["apfl"] > apfl.std(T1.metric), (mean, apfl.std(T1.metric))
    assert max(mean["local"], mean["fedavg"]) < mean["apfl"] < min(mean["fedavg_ft"], mean["knn_per"]), mean


def test_the_apfl_note_s_account_of_the_adaptive_alpha_holds_for_the_shipped_records():
    """The APFL row's note says the paper's adaptive alpha (the variant on the line below the
    row) scores below the row's same seed in each of the three seeds, that its clients' mean
    alpha is below 0.01 from the second round on, and that it scores within a point of FedAvg's
    same seed: a record that breaks this makes the note wrong."""
    note, cells, variants = _t1_note_and_cells("apfl")
    variant = variants[("fmnist 20", "apfl adaptive_alpha=true")]
    row = cells[("fmnist 20", "apfl")]
    by_seed, fedavg_by_seed = _score_by_seed(row), _score_by_seed(cells[("fmnist 20", "fedavg")])
    assert "in each of the three seeds it scores below this row's same seed" in note
    assert "mean alpha falls below 0.01 by the second round and stays there" in note
    assert "within a point of FedAvg's same seed" in note
    assert variant.n == 3 and variant.seeds() == row.seeds() == [0, 1, 2]
    assert all(r["summary"][T1.metric] < by_seed[r["seed"]] for r in variant.runs), (variant.runs, by_seed)
    for r in variant.runs:
        alphas = [h["alpha_mean"] for h in r["history"] if h["round"] >= 2]
        assert len(alphas) == r["config"]["rounds"] - 1 and max(alphas) < 0.01, (r["seed"], max(alphas))
    assert all(abs(r["summary"][T1.metric] - fedavg_by_seed[r["seed"]]) < 1.0 for r in variant.runs), fedavg_by_seed


def test_the_pfedhn_note_s_account_of_its_place_holds_for_the_shipped_records():
    """The pFedHN row's note says that in every recorded seed it sits above the paper's number
    by more than a point and below FedPAC's row, and still gains over its last fifty rounds:
    a record that breaks this makes the note wrong."""
    note, cells, _ = _t1_note_and_cells("pfedhn")
    assert "above the paper's number by more than a point and below FedPAC's row" in note
    assert "still gains over its last fifty rounds" in note
    pfedhn, fedpac = cells[("fmnist 20", "pfedhn")], cells[("fmnist 20", "fedpac")]
    assert pfedhn.n and fedpac.n
    for rec in pfedhn.runs:
        acc = {h["round"]: h["acc_mean"] for h in rec["history"] if h.get("acc_mean") is not None}
        assert acc[200] - pfedhn.paper > 1.0 and acc[200] > acc[150], (rec["seed"], acc[150], acc[200])
    assert pfedhn.mean(T1.metric) < fedpac.mean(T1.metric)


def test_the_pfedme_note_s_account_of_its_gap_holds_for_the_shipped_records():
    """The pFedMe row's note says that in each of its three seeds both the final round and the
    best evaluated round sit more than a point below the paper's number, that its second and
    third seeds move by more than a point between evaluated rounds over their last hundred
    rounds, and that the authors'-code schedule (the variant on the line below the row) ends
    several points (more than three) below the row's same seed in each of its three seeds: a
    record that breaks this makes the note wrong."""
    note, cells, variants = _t1_note_and_cells("pfedme")
    assert "In each of its three seeds its final round sits more than a point below the paper's number, and so " \
        "does its best evaluated round" in note
    assert "its second and third seeds move by more than a point" in note
    assert "each of its three seeds ends several points below this row's same seed" in note
    row = cells[("fmnist 20", "pfedme")]
    variant = variants[("fmnist 20", "pfedme inner_weight_decay=0.001 local_iterations=20")]
    assert row.n == 3 and row.seeds() == variant.seeds() == [0, 1, 2]
    for rec in row.runs:
        summary = rec["summary"]
        assert row.paper - summary[T1.metric] > 1.0 and row.paper - summary["best_acc_mean"] > 1.0, rec["seed"]
        acc = [h["acc_mean"] for h in rec["history"] if h.get("acc_mean") is not None and h["round"] >= 100]
        assert (max(np.abs(np.diff(acc))) > 1.0) == (rec["seed"] in (1, 2)), rec["seed"]
    by_seed = _score_by_seed(row)
    assert all(by_seed[r["seed"]] - r["summary"][T1.metric] > 3.0 for r in variant.runs), (variant.runs, by_seed)


def test_the_catalogue_covers_every_notebook_and_each_table_has_a_protocol():
    notebooks = {p.relative_to(ROOT / "notebooks").with_suffix("").as_posix()
                 for p in (ROOT / "notebooks").glob("*/*.ipynb") if p.parent.name in ("fedpac", "fedcp", "fedfa",
                                                                                       "pfedfda")}
    assert {i.notebook for i in CATALOGUE} <= notebooks
    assert notebooks - {i.notebook for i in CATALOGUE} == set(), "a paper notebook missing from the status matrix"
    for spec in TABLES:
        assert len(spec.protocol.split()) > 20 and spec.notebook in notebooks


@pytest.mark.slow
def test_each_figure_drawn_from_records_is_a_catalogue_item_and_names_the_runs_it_needs():
    from pflcore.report.catalogue import FIGURES

    items = {(i.paper, i.id): i for i in CATALOGUE}
    tables = {t.notebook: t for t in TABLES}
    for spec in FIGURES:
        assert items[(spec.paper, spec.id)].notebook == spec.notebook
        assert (ROOT / "notebooks" / f"{spec.notebook}.ipynb").is_file() and spec.needs
        for need in spec.needs:
            assert (ROOT / "notebooks" / f"{need.notebook}.ipynb").is_file()
            assert need.column is None or need.column in tables[need.notebook].columns


def test_a_figure_need_matches_the_record_of_its_method_seed_and_partition():
    from pflcore.report.catalogue import Need

    def record(method="fedpac", seed=0, s=0.2):
        return {"notebook": "fedpac/c1_weight_heatmaps", "seed": seed,
                "config": {"method": method, "partition": {"s": s, "samples_per_client": 600}}}

    need = Need("fedpac/c1_weight_heatmaps", "fedpac", 0, where=(("partition.s", 0.2),))
    assert need.matches(record())
    assert not need.matches(record(s=0.6)) and not need.matches(record(seed=1))
    assert not need.matches(record(method="fedavg"))
    assert not need.matches({**record(), "notebook": "fedpac/t1_main"})
    of_table = Need("fedpac/t1_main", "fedpac", 0, column="fmnist 20")  # the row's run, never a variant of it
    run = {"notebook": "fedpac/t1_main", "seed": 0, "preset_changes": {},
           "config": {"method": "fedpac", "dataset": "fmnist", "num_clients": 20, "rounds": 200}}
    assert of_table.matches(run)
    assert not of_table.matches({**run, "config": {**run["config"], "method_params": {"lam": 5.0}}})
    assert not Need("fedpac/c1_weight_heatmaps", "fedpac", 0, where=(("method_params.lam", 1),)).matches(record())


def test_a_figure_of_one_run_per_method_is_drawn_from_those_recorded_and_says_which_wait(monkeypatch, tmp_path):
    """FedFA Figure 4 rests on six runs; before all have records it is drawn from those that
    do (the notebook's methods narrowed to them), its caption naming the others. A figure
    without a methods parameter (C.1's four shares) waits for all of its runs."""
    import pflcore.report as report
    from pflcore.report.catalogue import FIGURES

    def record(notebook, method, seed, **config):
        return {"notebook": notebook, "seed": seed, "fingerprint": f"{method}{seed}",
                "config": {"method": method, "dataset": "fmnist", **config}}

    calls = []
    monkeypatch.setattr(report, "_execute_from_records",
                        lambda notebook, overrides, *rest: calls.append((notebook, overrides)) or ("p.html", []))
    f4 = next(f for f in FIGURES if f.notebook == "fedfa/f4_feature_distance")
    found = [(tmp_path / "x.json", record(f4.notebook, m, 2021)) for m in ("fedfa", "fedavg")]
    shown = report.execute_figure(f4, found, tmp_path, tmp_path, print, [])
    assert calls == [(f4.notebook, {"methods": ["fedavg", "fedfa"]})]  # in the figure's order
    assert shown["waiting"] == ["fedprox", "feddyn", "moon", "fedproc"] and len(shown["records"]) == 2
    assert "so far 2 of its 6 runs have a record (FedProx, FedDyn, MOON, FedProc wait" in shown["caption"]
    c1 = next(f for f in FIGURES if f.id == "C1")
    found = [(tmp_path / "y.json", record(c1.notebook, "fedpac", 0, partition={"s": 0.0}))]
    assert report.execute_figure(c1, found, tmp_path, tmp_path, print, []) is None and len(calls) == 1


def test_the_report_builds_from_the_shipped_records_and_opens_in_a_real_browser(tmp_path):
    require_browser("the report's browser test")
    from selenium.webdriver.common.by import By

    shipped = records.all_records(ROOT / "reproductions")
    index = build(tmp_path / "site", root=ROOT, execute=bool(shipped))
    pages = sorted(index.parent.glob("*.html"))
    assert {p.name for p in pages} >= {"index.html", "fedpac.html", "fedcp.html", "fedfa.html", "pfedfda.html"}
    text = index.read_text()
    assert f"{len(shipped)} run records" in text
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver, service = chrome(1300, 1600)
    try:
        for page in pages:
            driver.get(page.as_uri())
            assert driver.execute_script("return document.readyState") == "complete"
            assert driver.find_elements(By.TAG_NAME, "h1"), f"{page.name} has no heading"
            for img in driver.find_elements(By.TAG_NAME, "img"):
                width = driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img)
                assert width and width > 100, f"{page.name}: figure {img.get_attribute('src')} did not render"
            for link in driver.find_elements(By.TAG_NAME, "a"):
                href = link.get_attribute("href") or ""
                if href.startswith("file://"):
                    target = Path(unquote(urlparse(href).path))
                    assert target.exists(), f"{page.name}: broken link {href}"
            driver.save_screenshot(str(SHOTS / f"{page.stem}.png"))
    finally:
        driver.quit()
        service.stop()
    if shipped:  # the committed figures are exactly those the shipped records draw
        drawn = json.loads((index.parent / "drawn.json").read_text())
        committed = json.loads((ROOT / FIGURES_FOLDER / MANIFEST).read_text())
        assert {e["as"]: e["records"] for e in drawn} == committed, \
            "figures/ is not what the records draw: run `pflcore report --figures` and commit figures/"
    if shipped:  # the paper pages show the recorded runs, n and the paper's numbers
        notebooks = {r["notebook"] for _, r in shipped}
        for spec in TABLES:
            if spec.notebook in notebooks:  # as a reader sees the page (a title's "authors'" is escaped in HTML)
                page = unescape((index.parent / f"{spec.paper}.html").read_text())
                assert spec.title in page and "Protocol." in page


def test_every_committed_figure_is_drawn_from_committed_records():
    folder = ROOT / FIGURES_FOLDER
    manifest = json.loads((folder / MANIFEST).read_text())
    pngs = {p.relative_to(folder).as_posix() for p in folder.rglob("*.png")
            if p.relative_to(folder).parts[0] not in NOT_FROM_RECORDS}
    assert pngs == set(manifest), "the figures under figures/ and figures/MANIFEST.json disagree"
    for figure, used in manifest.items():
        assert used, f"{figure} names no record"
        for ref in used:
            assert (ROOT / "reproductions" / ref).is_file(), f"{figure} rests on {ref}, which is not committed"
    drawn_from = {ref for used in manifest.values() for ref in used}
    tables = {spec.notebook: spec for spec in TABLES}
    for path, rec in records.all_records(ROOT / "reproductions"):
        spec = tables.get(rec["notebook"])
        if spec and spec.row_of(rec) in spec.rows:  # a variant beside a row is in its table, in no figure
            ref = path.relative_to(ROOT / "reproductions").as_posix()
            assert ref in drawn_from, f"no committed figure draws {ref}: run `pflcore report --figures`"


def test_commit_figures_replaces_the_drawn_figures_and_keeps_the_rest(tmp_path):
    project = tmp_path / "project"
    for folder in ("notebooks", "params", "figures/old/t1", "figures/smoke/x"):
        (project / folder).mkdir(parents=True)
    (project / "figures/old/t1/stale.png").write_bytes(b"stale")
    (project / "figures/smoke/x/keep.png").write_bytes(b"smoke")
    (project / "figures/README.md").write_text("readme")
    out = tmp_path / "site"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "a.png").write_bytes(b"png")
    (out / "drawn.json").write_text(json.dumps([{"figure": "figures/a.png", "as": "p/t1/c/seed_curves.png",
                                                 "records": ["p/t1/r.json"]}]))
    manifest = commit_figures(out, root=project)
    assert json.loads(manifest.read_text()) == {"p/t1/c/seed_curves.png": ["p/t1/r.json"]}
    assert (project / "figures/p/t1/c/seed_curves.png").read_bytes() == b"png"
    assert not (project / "figures/old").exists(), "a figure no record draws stayed"
    assert (project / "figures/smoke/x/keep.png").exists() and (project / "figures/README.md").exists()
    assert not any(p.name.startswith(".") for p in (project).iterdir()), "the staging folder stayed"


def test_commit_figures_leaves_the_figures_alone_when_a_notebook_failed_in_the_build(tmp_path):
    """A notebook that fails (its data missing, say) draws nothing, so replacing figures/ by the
    build's figures would delete its committed ones: the replacement is refused, byte for byte."""
    from pflcore.report import FiguresKept

    project = tmp_path / "project"
    for folder in ("notebooks", "params", "figures/p/f5"):
        (project / folder).mkdir(parents=True)
    (project / "figures/p/f5/policy.png").write_bytes(b"committed")
    (project / "figures/MANIFEST.json").write_text('{"p/f5/policy.png": ["p/t2/r.json"]}\n')
    before = {p: p.read_bytes() for p in (project / "figures").rglob("*") if p.is_file()}
    out = tmp_path / "site"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "a.png").write_bytes(b"png")
    (out / "drawn.json").write_text(json.dumps([{"figure": "figures/a.png", "as": "p/t1/c/seed_curves.png",
                                                 "records": ["p/t1/r.json"]}]))
    (out / "failed.json").write_text(json.dumps([{"notebook": "p/f5", "error": "no data in ../shared"}]))
    with pytest.raises(FiguresKept, match=r"left as it was: 1 notebook\(s\) failed in this build \(p/f5; "):
        commit_figures(out, root=project)
    assert {p: p.read_bytes() for p in (project / "figures").rglob("*") if p.is_file()} == before
    assert not any(p.name.startswith(".") for p in project.iterdir()), "a staging folder was left"


def test_pflcore_report_exits_non_zero_naming_the_notebooks_that_failed(monkeypatch, tmp_path, capsys):
    import pflcore.notebooks
    from pflcore.cli import main

    def fail(preset, out, only, root, overrides, log):
        return [pflcore.notebooks.NotebookRun(only[0], preset, "failed", 0.1, error="FileNotFoundError: no data")]

    monkeypatch.setattr(pflcore.notebooks, "run_notebooks", fail)
    assert main(["report", "--out", str(tmp_path / "site")]) == 1
    failed = json.loads((tmp_path / "site" / "failed.json").read_text())
    assert failed and {f["error"] for f in failed} == {"FileNotFoundError: no data"}
    assert "fedpac/t1_main/fmnist-20" in {f["notebook"] for f in failed}
    index = (tmp_path / "site" / "index.html").read_text()  # the site itself says what it lacks
    assert f"{len(failed)} notebook(s) failed to execute in this build</b>" in index
    assert "<code>fedpac/t1_main/fmnist-20</code> (FileNotFoundError: no data)" in index
    err = capsys.readouterr().err
    assert f"{len(failed)} notebook(s) failed to execute (" in err and "Traceback" not in err


def test_close_rivals_are_compared_on_the_same_test_samples_per_seed():
    from pflcore.report import same_samples

    def with_hits(method, seed, hits):
        r = record("fedpac/t1_main", method, seed, 90.0)
        r["clients"].update(final=[0.5, 0.5], test_sizes=[4, 4],
                            correct=records.pack_correct([np.array(hits[:4]), np.array(hits[4:])]))
        return r

    a = Cell("c", "fedpac", runs=[with_hits("fedpac", 0, [1, 1, 1, 1, 1, 1, 0, 0])])
    b = Cell("c", "ditto", runs=[with_hits("ditto", 0, [0, 0, 0, 1, 1, 1, 1, 0])])
    [(seed, only_a, only_b, p)] = same_samples(a, b)
    assert (seed, only_a, only_b) == (0, 3, 1) and p == pytest.approx(0.625)  # 2 * P(X <= 1), X ~ Bin(4, 1/2)


def test_pflcore_report_builds_the_pages_from_the_command_line(tmp_path, capsys):
    from pflcore.cli import main

    assert main(["report", "--no-notebooks", "--out", str(tmp_path / "site")]) == 0
    assert (tmp_path / "site" / "index.html").exists() and (tmp_path / "site" / "records.html").exists()
    assert "open " in capsys.readouterr().out


def test_fedpac_c2_is_drawn_from_the_table_1_records_once_they_exist(tmp_path):
    root = tmp_path / "proj"
    for folder in ("notebooks", "params", "reproductions/fedpac/t1_main"):
        (root / folder).mkdir(parents=True)
    index = build(tmp_path / "empty", root=root, execute=False, log=lambda *a: None)
    assert "C2</td>" in index.read_text() and "drawn from records" not in index.read_text()
    rec = record("fedpac/t1_main", "fedavg", 0, 84.0, dataset="fmnist")
    (root / "reproductions" / "fedpac" / "t1_main" / records.record_name(rec)).write_text(json.dumps(rec))
    text = unescape(build(tmp_path / "site", root=root, execute=False, log=lambda *a: None).read_text())
    row = text[text.index("C2</td>"):].split("</tr>")[0]
    assert "drawn from records" in row and "T1's records" in row


def test_a_build_that_shares_reuse_runs_a_notebook_again_only_when_its_inputs_change(monkeypatch, tmp_path):
    """The campaign redraws the figures after every entry; a notebook whose notebook, preset,
    code and records are those of the last build is not executed again, and what the build
    writes (its page, its figures, drawn.json's entries) is what the execution wrote."""
    import nbformat

    import pflcore.notebooks
    from pflcore.report import _execute_from_records

    project = tmp_path / "project"
    for folder in ("notebooks/p", "params/p/t1", "reproductions/p/t1"):
        (project / folder).mkdir(parents=True)
    (project / "notebooks/p/t1.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()))
    (project / "params/p/t1/paper.yaml").write_text("rounds: 200\n")
    (project / "reproductions/p/t1/r.json").write_text('{"acc": 1}')
    runs = []

    def execute(preset, out, only, root, overrides, log):  # draws a figure that says which execution it was
        runs.append(only)
        figures = Path(overrides["figures_dir"])
        figures.mkdir(parents=True, exist_ok=True)
        (figures / "curve.png").write_bytes(f"execution {len(runs)}".encode())
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"execution {len(runs)}")])
        (Path(out) / "run.ipynb").parent.mkdir(parents=True, exist_ok=True)
        (Path(out) / "run.ipynb").write_text(nbformat.writes(nb))
        return [pflcore.notebooks.NotebookRun(only[0], preset, "ok", 1.0, output=str(Path(out) / "run.ipynb"))]

    monkeypatch.setattr(pflcore.notebooks, "run_notebooks", execute)

    def build_once(reuse):
        out = tmp_path / f"site{len(list(tmp_path.glob('site*')))}"
        out.mkdir()
        drawn = []
        name, figures = _execute_from_records("p/t1", {"column": "c"}, "p/t1/c", ["p/t1/r.json"], project, out,
                                              lambda *a: None, drawn, reuse)
        return (out / name).read_text(), {f: (out / f).read_bytes() for f in figures}, drawn

    reuse = {}
    first = build_once(reuse)
    assert build_once(reuse) == first and len(runs) == 1, "an unchanged notebook was executed again"
    (project / "reproductions/p/t1/r.json").write_text('{"acc": 2}')  # a record's bytes change
    changed = build_once(reuse)
    assert len(runs) == 2 and changed[1] != first[1] and "execution 2" in changed[0]
    (project / "params/p/t1/paper.yaml").write_text("rounds: 300\n")  # the preset changes
    build_once(reuse)
    assert len(runs) == 3
    build_once(None)  # without reuse, every build executes
    assert len(runs) == 4
