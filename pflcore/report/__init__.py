"""The reproduction report: a static HTML site built offline from the committed run records.

``pflcore report`` (or :func:`build`) writes ``<out>/index.html`` (a status matrix over
every table and figure of the four papers), one page per paper (each reproduced table:
the paper's number, ours as mean +- std over the seeds recorded with n shown, the
difference, the final and the best round, the evaluation protocol in words, the paper's
claim checked, and figures drawn from the records), and the paper notebooks executed at
their ``paper`` preset from the records (nbconvert's HTML), linked from the paper pages.
Every number on a page comes from a record or from :mod:`pflcore.papers`; none is typed.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Iterator

import numpy as np

from .. import records
from ..papers import display_name, split_label
from ..project import project_root
from .catalogue import (ALL_TABLES, CATALOGUE, FIGURES, PAPERS, TABLES, FigureSpec, TableSpec, column_status,
                        config_values)

#: The reproduction rule (stated on every page, :func:`rule_words`). A row needs MIN_SEEDS seeds
#: to be judged (fewer: "preliminary"). Its judge is the error rate (100 - accuracy), ours against
#: the paper's, so that 99.59 against 99.71 is judged on 0.41 against 0.29, not on a tenth of a
#: point: the tolerance is ERROR_TOLERANCE of the paper's error rate, and our mean's uncertainty
#: is its two-sided CONFIDENCE t-interval over the seeds (ddof 1, n - 1 degrees of freedom).
MIN_SEEDS = 3
CONFIDENCE = 0.95
ERROR_TOLERANCE = 0.10
#: A comparison a claim rests on is tested (paired t over seeds, McNemar per seed) when its
#: margin is under CLOSE_STDS of the larger std over seeds of the two rows, whatever its sign.
CLOSE_STDS = 2.0


@dataclass(frozen=True)
class Judgement:
    """The rule applied to one row: ``status`` is "reproduced" (our mean's error rate is within the
    tolerance of the paper's, and our interval is no wider than the tolerance), "differs" (our
    interval lies wholly outside the paper's error rate +- the tolerance), "inconclusive" (neither:
    the mean is beyond the tolerance but the interval reaches it, or the interval is wider than the
    tolerance) or "preliminary" (fewer than :data:`MIN_SEEDS` seeds); in points of error rate."""

    status: str
    n: int
    error: float  # ours: 100 - mean over seeds
    paper_error: float
    tolerance: float
    half_width: float  # of our t-interval (nan below 2 seeds)

    @property
    def gap(self) -> float:
        return self.error - self.paper_error

    def words(self) -> str:
        gap = f"error rate {self.error:.2f} against the paper's {self.paper_error:.2f} ({self.gap:+.2f} points)"
        if self.status == "preliminary":
            return f"{self.n} seed{'s' if self.n != 1 else ''}; the rule needs {MIN_SEEDS}; {gap}"
        interval = f"{int(round(100 * CONFIDENCE))}% interval \u00b1{self.half_width:.2f}"
        return f"{gap}; tolerance \u00b1{self.tolerance:.2f}, {interval} over {self.n} seeds"


def judge(values, paper: float) -> Judgement:
    """The reproduction rule on our values over seeds (accuracies, %) against the paper's number."""
    from scipy import stats

    values = np.asarray(values, dtype=float)
    n = len(values)
    error, paper_error = 100.0 - float(values.mean()), 100.0 - float(paper)
    tolerance = ERROR_TOLERANCE * paper_error
    half = (float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * values.std(ddof=1) / math.sqrt(n)) if n > 1
            else float("nan"))
    if n < MIN_SEEDS:
        status = "preliminary"
    elif abs(error - paper_error) > tolerance + half:
        status = "differs"
    elif abs(error - paper_error) <= tolerance and half <= tolerance:
        status = "reproduced"
    else:
        status = "inconclusive"
    return Judgement(status, n, error, paper_error, tolerance, half)


def rule_words(example: tuple[str, float, float, "Judgement"] | None = None) -> str:
    """The rule in words, with its constants and their reason (on every page); ``example``: a
    recorded row (its name, our mean, the paper's number, its judgement) to show it on, and the
    records' seed spread fields (:func:`seed_spread`) are filled in by the caller."""
    pct = int(round(100 * ERROR_TOLERANCE))
    conf = int(round(100 * CONFIDENCE))
    shown = ""
    if example is not None:
        name, ours, paper, j = example
        shown = (f" (so {name}, ours {ours:.2f} against the paper's {paper:.2f}, is judged on error rates "
                 f"{j.error:.2f} against {j.paper_error:.2f}, tolerance \u00b1{j.tolerance:.2f})")
    return (f"A row is judged once it has {MIN_SEEDS} seeds; with fewer it is <b>preliminary</b>, never reproduced "
            f"or differs. Its error rate (100 minus the accuracy, mean over seeds) is set against the paper's, with a "
            f"tolerance of {pct}% of the paper's error rate{shown}; our uncertainty is the two-sided {conf}% "
            f"t-interval of the mean over seeds (std with ddof 1, n - 1 degrees of freedom). <b>reproduced</b>: our "
            f"error rate is within the tolerance of the paper's and the interval is no wider than the tolerance; "
            f"<b>differs</b>: the interval lies wholly outside the paper's error rate \u00b1 the tolerance; "
            f"<b>inconclusive</b>: neither (the mean is beyond the tolerance but the interval reaches it, or the "
            f"interval is wider than the tolerance: more seeds are needed to tell). Why these constants: {MIN_SEEDS} "
            f"seeds are the fewest whose std has more than one degree of freedom; a tolerance relative to the error "
            f"rate keeps its meaning at every accuracy, where a fixed number of points would let a high row's "
            f"error rate double; {pct}% of the error rate is {{spread_ratio}} times the median std over seeds of a row's "
            f"error rate in the records ({{spread_median}}% of it, over {{spread_rows}} rows with {MIN_SEEDS} seeds "
            f"or more), so a gap beyond it is more than seed noise. The paper's own \u00b1 (over its runs or its "
            f"clients, as labelled) is shown beside its number and never enters the rule.")


def seed_spread(tables: Iterable[tuple[TableSpec, dict]]) -> dict:
    """The records' typical seed-to-seed spread of a row's error rate, relative to it (the reason for
    :data:`ERROR_TOLERANCE` given on the pages): the median, over the rows with :data:`MIN_SEEDS`
    seeds or more, of std over seeds / error rate."""
    ratios = []
    for spec, cells in tables:
        for cell in cells.values():
            if cell.n >= MIN_SEEDS:
                v = cell.values(spec.metric)
                if np.all(np.isfinite(v)) and 100 - v.mean() > 0:
                    ratios.append(float(v.std(ddof=1) / (100 - v.mean())))
    if not ratios:
        return {"spread_ratio": "(no row with enough seeds yet)", "spread_median": "?", "spread_rows": 0}
    median = float(np.median(ratios))
    return {"spread_ratio": f"{ERROR_TOLERANCE / median:.1f}" if median > 0 else "many",
            "spread_median": f"{100 * median:.1f}", "spread_rows": len(ratios)}


# ---------------------------------------------------------------------- from records to cells
@dataclass
class Cell:
    """One (column, method) of a table: the recorded seeds and what they give."""

    column: str
    method: str
    runs: list[dict] = field(default_factory=list)  # records, one per seed: those that count
    paper: float | None = None
    paper_std: float | None = None
    #: records of its seeds that do not count (:func:`pflcore.records.pool`), each ``{"record", "why"}``:
    #: another numeric path of a seed that counts, or a run in reduced precision (TF32, bfloat16)
    others: list[dict] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.runs)

    def values(self, key: str) -> np.ndarray:
        return np.array([float(r["summary"].get(key, np.nan)) for r in sorted(self.runs, key=lambda r: r["seed"])])

    def mean(self, key: str) -> float:
        v = self.values(key)
        return float(np.mean(v)) if len(v) else float("nan")

    def std(self, key: str) -> float:
        v = self.values(key)
        return float(np.std(v, ddof=1)) if len(v) > 1 else float("nan")

    def seeds(self) -> list[int]:
        return sorted(r["seed"] for r in self.runs)


def cells_of(spec: TableSpec, found: Iterable[tuple[Path, dict]]) -> dict[tuple[str, str], Cell]:
    """The table's cells from the records of its notebook, keyed (column, method): one for every
    row and every column of the paper's table (a column that cannot run here keeps none); the
    runs of a row's variant (:meth:`TableSpec.row_of`) are :func:`variant_cells`'."""
    cells: dict[tuple[str, str], Cell] = {}
    for column in dict.fromkeys([*spec.columns, *(c.key for c in spec.all_columns())]):
        paper, paper_std = spec.paper_numbers(column), spec.paper_stds(column)
        for method in spec.rows:
            cells[(column, method)] = Cell(column, method, paper=paper.get(method), paper_std=paper_std.get(method))
    _gather(spec, found, lambda column, row: cells.get((column, row)))
    return cells


def variant_cells(spec: TableSpec, found: Iterable[tuple[Path, dict]]) -> dict[tuple[str, str], Cell]:
    """The table's variants from the records of its notebook, keyed (column, variant label):
    runs of a row's method with other method parameters than the table's (an investigation
    of a row that differs from the paper), each with the paper's number of its method's row,
    and never part of the table's verdicts or claim."""
    variants: dict[tuple[str, str], Cell] = {}

    def cell(column: str, row: str) -> Cell | None:
        if row in spec.rows or column not in spec.columns:
            return None
        method = split_label(row)[0]
        if method not in spec.rows:
            return None
        if (column, row) not in variants:
            variants[(column, row)] = Cell(column, row, paper=spec.paper_numbers(column).get(method),
                                           paper_std=spec.paper_stds(column).get(method))
        return variants[(column, row)]

    _gather(spec, found, cell)
    return variants


def _gather(spec: TableSpec, found: Iterable[tuple[Path, dict]], cell_of: Callable[[str, str], Cell | None]) -> None:
    """Add each record the table shows to the cell ``cell_of(column, row)`` gives (None: not
    this kind of cell). One (row, seed) with records of one setting from several numeric paths
    (a CPU and a GPU run; float32 and TF32): one counts and the others join the cell's
    :attr:`Cell.others`, as the pooling rule says (:func:`pflcore.records.pool`); two records of
    one row and seed with different configs are refused."""
    seen: dict[tuple[str, str, int], tuple[Cell, list[tuple[Path, dict]]]] = {}
    for path, record in found:
        if not spec.shows(record):
            continue
        column, row = spec.column_of(record), spec.row_of(record)
        cell = cell_of(column, row)
        if cell is None:
            continue
        _, twins = seen.setdefault((column, row, record["seed"]), (cell, []))
        for twin, twin_record in twins:
            if twin != path and not records.same_setting(twin_record, record):
                # two configs for one row and seed: averaging both would mix two settings
                raise records.RecordError(f"{twin} and {path} are both {display_name(row)}'s seed {record['seed']} "
                                          f"in {spec.paper} {spec.id}'s column {column!r} with different configs; "
                                          "remove the one that is not the table's setting.")
        twins.append((path, record))
    for cell, twins in seen.values():
        counted, others = records.pool([r for _, r in twins])
        if counted is not None:
            cell.runs.append(counted)
        cell.others += others


def other_settings(spec: TableSpec, found: Iterable[tuple[Path, dict]]) -> list[str]:
    """The records of the table's notebook and columns that it leaves out because their runs
    changed the paper preset otherwise (:meth:`TableSpec.changes_otherwise`), each in words: what the
    table's page says, so that a user's own run at the paper preset is not silently missing."""
    out = []
    for _, record in found:
        if (record["notebook"] != spec.notebook or not spec.changes_otherwise(record)
                or spec.column_of(record) not in spec.columns or record["config"]["method"] not in spec.rows):
            continue
        out.append(f"{display_name(spec.row_of(record))} seed {record['seed']} "
                   f"(changed: {records.preset_changes_in_words(record)})")
    return sorted(out)


def verdict(cell: Cell, metric: str) -> tuple[str, str]:
    """(status, the reason in words) of a row under the reproduction rule (:func:`judge`):
    "reproduced", "differs", "inconclusive", "preliminary" (fewer than :data:`MIN_SEEDS` seeds),
    "not run yet" or "no paper number"."""
    if not cell.n:
        return "not run yet", ""
    if cell.paper is None:
        return "no paper number", ""
    j = judge(cell.values(metric), cell.paper)
    return j.status, j.words()


# ---------------------------------------------------------------------- claims
def paired_t(a: np.ndarray, b: np.ndarray) -> float | None:
    """Two-sided p-value of the paired t-test over seeds (None with fewer than 2 pairs or
    no variation)."""
    from scipy import stats

    if len(a) < 2 or len(a) != len(b) or np.allclose(a - b, (a - b)[0]):
        return None
    return float(stats.ttest_rel(a, b).pvalue)


def seed_matched(x: Cell, y: Cell, metric: str) -> tuple[np.ndarray, np.ndarray]:
    common = sorted(set(x.seeds()) & set(y.seeds()))
    pick = lambda c: np.array([float(next(r for r in c.runs if r["seed"] == s)["summary"][metric]) for s in common])
    return pick(x), pick(y)


def same_samples(x: Cell, y: Cell) -> list[tuple[int, int, int, float]]:
    """Per seed both records of which keep their final predictors' per-sample hits: the
    samples only ``x`` gets right, only ``y``, and the exact McNemar p-value."""
    from ..analysis.statistics import mcnemar_exact

    out = []
    for seed in sorted(set(x.seeds()) & set(y.seeds())):
        ra = next(r for r in x.runs if r["seed"] == seed)
        rb = next(r for r in y.runs if r["seed"] == seed)
        a, b = records.unpack_correct(ra), records.unpack_correct(rb)
        if a is None or b is None or a.shape != b.shape:
            continue
        only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
        out.append((seed, only_a, only_b, mcnemar_exact(only_a, only_b)))
    return out


def is_close(mine: Cell, rival: Cell, metric: str) -> bool:
    """Whether a comparison is close enough to be tested: its margin is under :data:`CLOSE_STDS`
    of the larger of the two rows' stds over seeds, whatever its sign (a row with one seed has no
    std: always tested)."""
    spreads = [s for s in (mine.std(metric), rival.std(metric)) if math.isfinite(s)]
    if len(spreads) < 2:
        return True
    return abs(mine.mean(metric) - rival.mean(metric)) < CLOSE_STDS * max(spreads)


def comparison_tests(mine: Cell, rival: Cell, metric: str) -> str:
    """The paired t-test over the seeds both rows have and, per seed, the exact McNemar test on
    the same test samples (where both records keep their per-sample hits), in words."""
    a, b = seed_matched(mine, rival, metric)
    p = paired_t(a, b)
    text = (f"paired t over {len(a)} seed{'s' if len(a) != 1 else ''}: "
            + (f"p = {p:.3f}" if p is not None else "too few seeds for a t-test"))
    tests = same_samples(mine, rival)
    if tests:
        text += ("; McNemar on the same test samples, per seed (samples only the first gets right vs only the "
                 "second): " + ", ".join(f"seed {seed}: {a_only} vs {b_only}, p = {pv:.3g}"
                                         for seed, a_only, b_only, pv in tests))
    return text


def close_rivals(mine: Cell, others: list[Cell], metric: str) -> str:
    """For each rival close to ``mine`` (:func:`is_close`): its margin and the tests
    (:func:`comparison_tests`). "" where none is that close."""
    text = ""
    for rival in others:
        if rival.n and mine.n and is_close(mine, rival, metric):
            text += (f"; against {display_name(rival.method)} ({mine.mean(metric) - rival.mean(metric):+.2f}): "
                     + comparison_tests(mine, rival, metric))
    return text


def _missing(cell: Cell) -> str | None:
    """Why a row does not count yet towards a claim's scope (None: it has its seeds)."""
    if cell.n >= MIN_SEEDS:
        return None
    return "not run yet" if not cell.n else f"{cell.n} seed{'s' if cell.n != 1 else ''}"


def check_claim(kind: str, spec: TableSpec, cells: dict, method: str, columns: tuple[str, ...],
                over: str | None = None) -> dict:
    """A paper claim checked from the cells, with its scope. ``kind``: "first" (``method`` ahead of
    every other row in each of ``columns``), "lead" (ahead of ``over``), "scarcity" (pFedFDA's:
    ahead under the first column, by more than under the second). Only the columns that can run
    here count. It "holds" only when every row it compares has :data:`MIN_SEEDS` seeds in every
    such column; else it "holds so far, against k of n baselines" per column, naming the missing.
    Every comparison it rests on whose margin is close (:func:`is_close`) gets its tests."""
    baselines = [over] if over else [m for m in spec.rows if m != method]
    here = [c for c in columns if spec.runs_here(c)]
    parts, scope, holds, any_compared, complete, gains = [], [], True, False, True, {}
    unsure = []  # close comparisons whose paired t over seeds does not reach 1 - CONFIDENCE
    for column in here:
        title = spec.column_title(column)
        mine = cells[(column, method)]
        rivals = [cells[(column, m)] for m in baselines]
        ready = [r for r in rivals if _missing(r) is None]
        missing = [f"{spec.row_name(r.method)} ({_missing(r)})" for r in rivals if _missing(r) is not None]
        complete = complete and not missing and _missing(mine) is None
        scope.append((title, len(ready), len(rivals)))
        recorded = [r for r in rivals if r.n]
        if not mine.n or not recorded:
            parts.append(f"{title}: {display_name(method)} " + ("not run yet" if not mine.n else
                                                               "has no recorded rival yet"))
            continue
        any_compared = True
        best = max(recorded, key=lambda c: c.mean(spec.metric))
        lead = mine.mean(spec.metric) - best.mean(spec.metric)
        gains[column] = lead
        if kind != "scarcity":
            holds = holds and lead > 0
        text = (f"{title}: {display_name(method)} {mine.mean(spec.metric):.2f} (n = {mine.n}) against the best other, "
                f"{spec.row_name(best.method)} {best.mean(spec.metric):.2f} (n = {best.n}): {lead:+.2f} points")
        if mine.paper is not None and best.paper is not None:
            text += f" (the paper's: {mine.paper - best.paper:+.2f})"
        text += f"; checked against {len(ready)} of {len(rivals)} baseline{'s' if len(rivals) != 1 else ''} with " \
                f"{MIN_SEEDS} seeds or more" + (f" (missing: {', '.join(missing)})" if missing else "")
        tested = [r for r in recorded if r is best or is_close(mine, r, spec.metric)]  # the nearest always
        for rival in tested:
            spread = all(math.isfinite(c.std(spec.metric)) for c in (mine, rival))
            close = is_close(mine, rival, spec.metric)
            p = paired_t(*seed_matched(mine, rival, spec.metric)) if close else None
            if close and (p is None or p >= 1 - CONFIDENCE):
                unsure.append(f"{spec.row_name(rival.method)}" + (f" (paired t p = {p:.3f})" if p is not None else "")
                              + (f" in {title}" if len(here) > 1 else ""))
            why = ("the nearest rival" if not close
                   else f"under {CLOSE_STDS:g} stds over seeds" if spread else "a row with one seed has no std")
            text += (f"; against {spec.row_name(rival.method)} ({mine.mean(spec.metric) - rival.mean(spec.metric):+.2f}, "
                     f"{why}): " + comparison_tests(mine, rival, spec.metric))
        parts.append(text)
    if kind == "scarcity":
        first, second = columns
        if first in gains and second in gains:
            holds = gains[first] > 0 and gains[first] > gains[second]
        else:
            any_compared = False
    if not any_compared:
        return {"status": "not run yet", "text": "; ".join(parts) or "not enough records yet", "scope": scope}
    words = "holds" if holds else "does not hold"
    if holds and complete and unsure and kind != "scarcity":
        words += (f" on the means only: its margin over {', '.join(unsure)} is within the seed noise "
                  f"(not significant at {1 - CONFIDENCE:.2f})")
    if not complete:
        words += " so far, against " + "; ".join(
            f"{k} of {n} baseline{'s' if n != 1 else ''}" + (f" in {title}" if len(scope) > 1 else "")
            for title, k, n in scope)
    text = "; ".join(parts)
    if not spec.comparable:
        text += ". On stand-in data: " + ", ".join(sorted({spec.paper_column(c).stand_in for c in here
                                                         if spec.paper_column(c).stand_in}))
    return {"status": words, "text": text, "scope": scope}


def claim_status(holds: bool, complete: bool) -> str:
    """A claim's verdict: "holds" or "does not hold", with "so far" while a row it rests on lacks
    its seeds (:func:`check_claim` adds the scope)."""
    return ("holds" if holds else "does not hold") + ("" if complete else " so far")


def first_place(cells: dict, column: str, method: str, metric: str, spec: TableSpec | None = None) -> dict:
    """Whether ``method`` has the best mean in ``column`` (:func:`check_claim`'s "first" on one column)."""
    spec = spec or next(t for t in ALL_TABLES if (column, method) in cells and column in t.columns
                        and method in t.rows and t.metric == metric)
    return check_claim("first", spec, cells, method, (column,))


# ---------------------------------------------------------------------- building
def build(out: str | Path = "outputs/report", root: str | Path | None = None, execute: bool = True,
          log=print, reuse: dict | None = None) -> Path:
    """Build the site into ``out`` from the records under ``root/reproductions``; returns
    the path of ``index.html``. ``execute``: also run the paper notebooks from the records
    (papermill) and include them as HTML. ``<out>/drawn.json`` lists every figure drawn from
    records with the records it rests on (what :func:`commit_figures` copies into ``figures/``);
    ``<out>/failed.json`` the notebooks that failed to execute, with their errors (:func:`failures`).
    ``reuse``: a dict kept across builds (the campaign's, one per entry); a notebook whose
    inputs are unchanged since a build that shared it is not executed again (:func:`_inputs_digest`).
    The site is built in a new folder beside ``out`` and swapped in only when the build succeeds
    (:func:`building`): a failed, interrupted or concurrent build leaves the previous report whole,
    and a folder that is not a report pflcore built is refused in one sentence, never emptied."""
    root = project_root(root)
    target = Path(out) if Path(out).is_absolute() else root / out
    with building(target, root) as new:
        _build_into(new, root, execute, log, reuse)
    index = target / "index.html"
    log(f"report: {index}")
    return index


def _build_into(out: Path, root: Path, execute: bool, log, reuse: dict | None) -> Path:
    """Write the site into the new folder ``out`` (:func:`build`); returns its index.html."""
    from ..analysis.record_figures import plot_seed_curves
    from .pages import Page, render_index, render_paper, render_records

    t0 = time.perf_counter()
    (out / "figures").mkdir(parents=True)
    found = records.all_records(root / records.RECORDS_FOLDER)
    replications = records.all_replications(root / records.RECORDS_FOLDER)
    log(f"report: {len(found)} records and {len(replications)} replications under {root / records.RECORDS_FOLDER}")
    pages: dict[str, Page] = {paper: Page(paper, PAPERS[paper]) for paper in PAPERS}
    table_status: dict[tuple[str, str], tuple[str, str]] = {}
    drawn: list[dict] = []  # {"figure": path in out, "as": path under figures/, "records": [...]}
    failed: list[dict] = []  # {"notebook": where, "error": ...}: executions that did not finish
    judged = []  # (spec, cells) of every table, for the rule's reason (the records' seed spread)
    for spec in ALL_TABLES:
        cells = cells_of(spec, found)
        judged.append((spec, cells))
        figures = []
        for column in spec.columns if spec.curves else ():
            runs = {m: cells[(column, m)].runs for m in spec.rows if cells[(column, m)].n}
            if not runs:
                continue
            name = f"{spec.paper}-{spec.id}-{_slug(column)}-curves.png"
            setting = spec.column_title(column)
            plot_seed_curves(runs, out / "figures" / name, key=spec.curve_key, ylabel=spec.curve_label,
                             styles=sorted(spec.rows, key=lambda m: m != spec.paper),  # the paper's method first
                             title=spec.title if setting in spec.title else f"{spec.title}\n{setting}")
            figures.append((f"figures/{name}", f"{spec.column_title(column)}: {spec.curve_label} over rounds, "
                                                f"mean over the recorded seeds (band: lowest to highest seed); "
                                                f"{_seeds_per_row(spec, runs)}"))
            drawn.append({"figure": f"figures/{name}", "as": f"{spec.notebook}/{_slug(column)}/seed_curves.png",
                          "records": sorted(record_ref(r) for rs in runs.values() for r in rs)})
        claim = spec.claim(cells) if spec.claim else None
        notebooks_html = (execute_notebooks(spec, cells, root, out, log, drawn, reuse, failed)
                          if execute and spec.execute else [])
        pages[spec.paper].tables.append((spec, cells, figures, claim, notebooks_html, other_settings(spec, found),
                                         variant_cells(spec, found), config_values(spec, found, root),
                                         hosts_and_replications(spec, cells, replications)))
        table_status[(spec.paper, spec.id)] = _table_status(spec, cells)
        if figures and spec.curves_item:
            table_status[(spec.paper, spec.curves_item)] = (
                "drawn from records", f"the accuracy curves of {spec.id}'s records, mean over the recorded seeds "
                                      f"({_seeds_per_row(spec, {m: cells[(c, m)].runs for c in spec.columns for m in spec.rows if cells[(c, m)].n})}); "
                                      "see the paper's page")
    for spec in FIGURES if execute else ():
        drawn_here = execute_figure(spec, found, root, out, log, drawn, reuse, failed)
        if drawn_here is not None:
            pages[spec.paper].figures.append(drawn_here)
            so_far = (f" of the {len(spec.needs)} runs it rests on (the others wait in the campaign's plan)"
                      if drawn_here["waiting"] else "")
            drawn_words = (f"drawn from {len(drawn_here['records'])} record(s){so_far}, "
                           f"{_seed_words(drawn_here['seeds'])}; see the paper's page")
            if (spec.paper, spec.id) in table_status:  # a table of its own too (FedPAC's ablation)
                continue
            table_status[(spec.paper, spec.id)] = (
                ("reference only", f"stand-in data: {spec.stand_in}; {drawn_words}") if spec.stand_in
                else ("drawn from records", drawn_words))
    built = build_info(root, judged, replications)
    for page in pages.values():
        (out / f"{page.paper}.html").write_text(render_paper(page, verdict, built), encoding="utf-8")
    hrefs = {}
    for path, _ in found:  # each record's JSON travels with the site, linked from the records page
        rel = path.relative_to(root / records.RECORDS_FOLDER)
        (out / "records" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, out / "records" / rel)
        hrefs[path] = f"records/{rel.as_posix()}"
    (out / "records.html").write_text(render_records(found, hrefs, built), encoding="utf-8")
    (out / DRAWN).write_text(json.dumps(drawn, indent=1) + "\n", encoding="utf-8")
    (out / FAILED).write_text(json.dumps(failed, indent=1) + "\n", encoding="utf-8")
    index = out / "index.html"
    index.write_text(render_index(CATALOGUE, table_status, found, time.perf_counter() - t0, failed, built,
                                  {(spec.paper, spec.id): cell_counts(spec, cells) for spec, cells in judged}),
                     encoding="utf-8")
    log(f"report: built in {time.perf_counter() - t0:.0f} s")
    return index


VERDICT_WORDS = {
    "identical": "bit for bit the record's numbers",
    "defect": "other numbers on the same numeric path: a defect",
    "within_spread": "within the seed spread of its row",
    "outside_spread": "outside the seed spread of its row",
    "spread_unknown": "too few seeds recorded to judge against the seed spread",
}


def _path_words(same_path) -> str:
    return ("the record's path unrecorded" if same_path is None
            else "another numeric path" if same_path is False else "the same path")


def _difference(final: dict, std, against: str) -> str:
    """A run's final client mean beside ``against``'s, with the difference in points and in seed stds."""
    size = f", {abs(final['diff']) / std:.2f} of the seed std" if std and "diff" in final else ""
    return (f"final client mean {final.get('ours', float('nan')):.2f} against {against} "
            f"{final.get('record', float('nan')):.2f} ({final.get('diff', float('nan')):+.3f} points{size})")


def not_counted_line(cell: Cell, other: dict) -> str:
    """One record of a row's seed that does not count in its mean (:attr:`Cell.others`), in words:
    where it ran, why it does not count, and its difference against the record of its seed that
    counts (:func:`pflcore.records.compare_records`) or, where none does, against the row's mean,
    judged by the seed spread of the row's counted seeds (:func:`pflcore.records.verdict`)."""
    record = other["record"]
    twin = next((r for r in cell.runs if r["seed"] == record["seed"]), None)
    if twin is not None:
        comparison = records.compare_records(record, twin, cell.runs)
        against = "the counted record's"
    else:
        comparison = records.compare_to_setting(record, cell.runs)
        n = comparison["spread"]["n"]
        against = f"the row's mean over its {n} counted seed{'s' if n != 1 else ''}"
    kind = records.verdict(comparison)
    std = (comparison["spread"].get("acc_mean") or {}).get("std")
    reduced = records.reduced_precision(record)
    never = f"{reduced}: never pooled" if reduced else ""
    seed = record["seed"]
    if twin is not None:
        head = (f"seed {seed} on {records.host_of(record)} ({_path_words(comparison['same_path'])}"
                f"{', ' + never if never else ''}; not in the mean: seed {seed}'s record on {records.host_of(twin)} "
                "counts)")
    else:
        head = (f"seed {seed} on {records.host_of(record)} ({never}; not in the mean, and no record of seed {seed} "
                "counts)")
    if not comparison["metrics"]:
        return f"{head}: no counted seed to set it beside"
    final = comparison["metrics"].get("acc_mean", {})
    line = f"{head}: {VERDICT_WORDS.get(kind, kind)}; {_difference(final, std, against)}"
    if twin is not None:
        line += (f", largest per-client difference {comparison['largest_client_diff']:.2f} points "
                 f"({comparison['clients_differing']} of {comparison['clients']} clients differ)")
    return line


def hosts_and_replications(spec: TableSpec, cells: dict, replications: list[tuple[Path, dict]]) -> list[dict]:
    """Per recorded row of a table: the machines and numeric paths its seeds ran on
    (:func:`pflcore.records.host_of`), the replications of its records (a recorded run
    retrained on another numeric path, :mod:`pflcore.replicate`) with their verdict, and the
    records of its seeds that do not count in its mean (the pooling rule, :func:`pooling_words`:
    another path of a counted seed, or a run in reduced precision) with their difference. None of
    these enters the row's mean."""
    by_fingerprint = {}
    for _, rep in replications:
        by_fingerprint.setdefault(rep["replication_of"]["fingerprint"], []).append(rep)
    rows = []
    for column in spec.columns:
        for method in spec.rows:
            cell = cells[(column, method)]
            if not cell.n and not cell.others:
                continue
            hosts: dict[str, list[int]] = {}
            for run in sorted(cell.runs, key=lambda r: r["seed"]):
                hosts.setdefault(records.host_of(run), []).append(run["seed"])
            retrained = []
            for run in sorted(cell.runs, key=lambda r: r["seed"]):
                for rep in by_fingerprint.get(run["fingerprint"], []):
                    of = rep["replication_of"]
                    std = (of.get("spread") or {}).get("acc_mean", {}).get("std")
                    retrained.append(
                        f"seed {run['seed']} retrained on {records.host_of(rep)} ({_path_words(of.get('same_path'))}"
                        + (f", {records.reduced_precision(rep)}" if not records.pools(rep) else "") + "): "
                        f"{VERDICT_WORDS.get(of['verdict'], of['verdict'])}; "
                        + _difference(of["metrics"].get("acc_mean", {}), std, "the record's")
                        + f", largest per-client difference {of['largest_client_diff']:.2f} points "
                        f"({of['clients_differing']} of {of['clients']} clients differ)")
            not_counted = [not_counted_line(cell, other)
                           for other in sorted(cell.others, key=lambda o: (o["record"]["seed"],
                                                                           records.counting_order(o["record"])))]
            rows.append({"row": f"{spec.row_name(method)}, {spec.column_title(column)}",
                         "hosts": "; ".join(f"{_seed_words(seeds)}: {host}" for host, seeds in hosts.items())
                         or "no seed counts yet",
                         "mixed": len(hosts) > 1, "replications": retrained, "not_counted": not_counted})
    return rows


def replication_sizes(replications: list[tuple[Path, dict]]) -> dict:
    """How far the kept replications (a record retrained on another numeric path) in float32 moved
    their runs, in stds over their setting's seeds: the largest of the final and of the best client
    mean, and how many lie within their setting's prediction interval (the reason of
    :func:`pooling_words`; a replication on the record's own path or in reduced precision is no
    evidence for pooling float32 runs and is left out)."""
    final, best, judged, within, n = [], [], 0, 0, 0
    for _, rep in replications:
        of = rep["replication_of"]
        if of.get("same_path") is True or not records.pools(rep):
            continue
        n += 1
        for key, sizes in (("acc_mean", final), ("best_acc_mean", best)):
            std = ((of.get("spread") or {}).get(key) or {}).get("std")
            diff = (of.get("metrics", {}).get(key) or {}).get("diff")
            if std and diff is not None:
                sizes.append(abs(diff) / std)
        if of.get("verdict") in ("identical", "within_spread", "outside_spread"):
            judged += 1
            within += of["verdict"] in ("identical", "within_spread")
    return {"n": n, "final": max(final, default=None), "best": max(best, default=None), "judged": judged,
            "within": within}


def pooling_words(replications: list[tuple[Path, dict]]) -> str:
    """The pooling rule in words, with its reason from the kept replications (on every page that
    states the reproduction rule): which runs of different numeric paths enter a row's mean."""
    sizes = replication_sizes(replications)
    if sizes["final"] is None:
        evidence = ("No replication is kept yet to measure how far a change of numeric path moves a run; until "
                    "one is, the rule rests on the arithmetic alone")
    else:
        evidence = (f"In the {sizes['n']} replication(s) kept in float32 (a record retrained on another numeric "
                    f"path, shown under their tables), a change of path moved the final client mean by at most "
                    f"{sizes['final']:.2f}"
                    + (f" and the best round's by at most {sizes['best']:.2f}" if sizes["best"] is not None else "")
                    + f" of the std over its setting's seeds, and {sizes['within']} of the {sizes['judged']} judged "
                    f"lie within the {int(round(100 * records.PREDICTION))}% prediction interval of those seeds, "
                    "where a further seed would land")
    return ("Runs of one setting made on different numeric paths are pooled into a row's mean when they compute in "
            "float32 throughout, so that they differ only in the order of their sums and in their kernels: CPU runs "
            "of any vendor, instruction set, thread count or executor, and GPU runs with TF32 off for matrix "
            "products and for cuDNN and no autocast (no bfloat16). Such a difference sends a run along its own "
            "trajectory from the first round on; the rule takes where it ends for one more draw of the seed noise, "
            f"which the replications measure. {evidence}. "
            "A run with TF32 on (PyTorch allows it for cuDNN by default) or in any reduced precision computes with "
            "fewer bits of mantissa, a change of the arithmetic that no replication measures, so it is never "
            "pooled: it is shown under its table (“Where each row's seeds ran”) with its difference against "
            "its seed's counted record, or the row's mean, and the row's seed spread. Where one (row, seed) has "
            "records from more than one path, one counts: the CPU one, else the one finished first; the others are "
            "shown there too, with their difference against the seed spread. A replication never enters a row's "
            "mean.")


def _seed_words(seeds: list[int]) -> str:
    return f"seed{'s' if len(seeds) != 1 else ''} {', '.join(map(str, seeds))}" if seeds else "no seed"


def _seeds_per_row(spec: TableSpec, runs: dict[str, list[dict]]) -> str:
    """How many seeds a figure drawn from rows' records rests on, in words."""
    counts = {m: len({r["seed"] for r in rs}) for m, rs in runs.items()}
    if len(set(counts.values())) == 1:
        n = next(iter(counts.values()))
        return f"{n} seed{'s' if n != 1 else ''} per row, {len(counts)} row{'s' if len(counts) != 1 else ''}"
    return "seeds per row: " + ", ".join(f"{spec.row_name(m)} {n}" for m, n in counts.items())


def matrix_cells(spec: TableSpec) -> list[tuple[str, str]]:
    """Every cell of the paper's table as (column, row), in the paper's order: each row's cell in
    each column, and each of :attr:`TableSpec.group_rows`' cells in its group's own column."""
    columns = spec.all_columns()
    out = [(c.key, row) for row in spec.rows for c in columns if not c.per_group]
    out += [(c.key, method) for _, method in spec.group_rows for c in columns if c.per_group]
    return out


def cell_status(spec: TableSpec, cells: dict, column: str, row: str) -> str:
    """A cell's status: its verdict (:func:`verdict`) where it has records of ours ("reference
    only" on stand-in data), else why not: "not run yet" or "cannot run here"."""
    kind, _ = column_status(spec, spec.paper_column(column))
    cell = cells.get((column, row))
    if kind == "cannot run here":
        return kind
    if cell is None or not cell.n:
        return "not run yet"
    if kind == "reference" or not spec.comparable:
        return "reference only"
    return verdict(cell, spec.metric)[0]


#: The order statuses are counted and shown in.
STATUS_ORDER = ("reproduced", "differs", "inconclusive", "preliminary", "no paper number", "reference only",
                "drawn from records", "not run yet", "cannot run here")


def cell_counts(spec: TableSpec, cells: dict) -> dict:
    """A table's cells counted by status, and its rows and columns with any record of ours."""
    keys = matrix_cells(spec)
    statuses = {key: cell_status(spec, cells, *key) for key in keys}
    recorded = [key for key in keys if cells.get(key) is not None and cells[key].n]
    return {"cells": len(keys), "recorded": len(recorded),
            "by_status": {s: sum(v == s for v in statuses.values()) for s in STATUS_ORDER
                          if any(v == s for v in statuses.values())},
            "rows": len(spec.rows) + len(spec.group_rows),
            "rows_recorded": len({row for _, row in recorded if row in spec.rows}),
            "columns": sum(not c.per_group for c in spec.all_columns()),
            "columns_recorded": len({c for c, _ in recorded if not spec.paper_column(c).per_group})}


def _table_status(spec: TableSpec, cells: dict[tuple[str, str], Cell]) -> tuple[str, str]:
    """The status matrix's line of a table: its worst verdict, and its cells counted."""
    counts = cell_counts(spec, cells)
    rows, columns = ((counts["rows_recorded"], counts["rows"]), (counts["columns_recorded"], counts["columns"]))
    if spec.transposed:  # the paper prints the table's rows as its columns
        rows, columns = columns, rows
    shown = (f"{rows[0]} of {rows[1]} rows, {columns[0]} of {columns[1]} columns, "
             f"{counts['recorded']} of {counts['cells']} cells recorded: "
             + ", ".join(f"{n} {s}" for s, n in counts["by_status"].items()))
    if not counts["recorded"]:
        return "not run yet", shown
    if not spec.comparable:
        stand_ins = sorted({f"{c.stand_in} for the paper's {c.group.split(',')[0]}" for c in spec.all_columns()
                            if c.stand_in and c.key in spec.columns})
        return "reference only", f"stand-in data: {'; '.join(stand_ins)}; {shown}"
    verdicts = counts["by_status"]
    status = next(s for s in ("differs", "inconclusive", "preliminary", "reproduced", "no paper number") if s in verdicts)
    return status, shown


def build_info(root: Path, judged: list[tuple[TableSpec, dict]],
               replications: list[tuple[Path, dict]] = ()) -> dict:
    """What every page says about its build: the git commit of the code and records it was
    built from (and whether the tree had uncommitted changes), the date (UTC), the
    reproduction rule in words with its constants' reason from the records, and the pooling
    rule (:func:`pooling_words`) with its reason from the kept ``replications``."""
    from datetime import datetime, timezone

    state = records.git_state(root)
    example = None
    for spec, cells in judged:
        for (column, row), cell in cells.items():
            if (spec.comparable and cell.n >= MIN_SEEDS and cell.paper is not None
                    and (example is None or cell.paper > example[2])):
                name = f"{spec.row_name(row)} in {display_name(spec.paper)} {spec.id}"
                example = (name, cell.mean(spec.metric), cell.paper, judge(cell.values(spec.metric), cell.paper))
    return {"commit": state.get("git_commit") or "unknown", "dirty": bool(state.get("git_dirty")),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "rule": rule_words(example).format(**seed_spread(judged)), "pooling": pooling_words(list(replications))}


def execute_notebooks(spec: TableSpec, cells: dict[tuple[str, str], Cell], root: Path, out: Path,
                      log, drawn: list[dict], reuse: dict | None = None,
                      failed: list[dict] | None = None) -> list[tuple[str, str]]:
    """Run the table's notebook at the paper preset, narrowed to what is recorded (one
    execution per column, first recorded seed), reading every run from its record; each
    executed copy becomes an HTML page. Returns (href, caption) pairs; the figures the
    notebook saved are appended to ``drawn`` with the records they rest on."""
    pages = []
    for column in spec.columns:
        recorded = [m for m in spec.rows if cells[(column, m)].n]
        if not recorded:
            continue
        seed = min(min(cells[(column, m)].seeds()) for m in recorded)
        methods = [m for m in recorded if seed in cells[(column, m)].seeds()]
        used = [record_ref(r) for m in methods for r in cells[(column, m)].runs if r["seed"] == seed]
        narrowed = spec.narrow(column, methods, seed)  # and the column's own changes to the preset (its setting)
        narrowed.update({k: v for k, v in spec.changes_of(column).items() if k not in narrowed})
        ran = _execute_from_records(spec.notebook, narrowed, f"{spec.notebook}/{_slug(column)}",
                                    used, root, out, log, drawn, reuse, failed)
        if ran is not None:
            pages.append((ran[0], f"{spec.notebook} at the paper preset, {spec.column_title(column)}, seed {seed}, "
                                  f"{len(methods)} recorded method(s), read from their records"))
    return pages


def execute_figure(spec: FigureSpec, found: list[tuple[Path, dict]], root: Path, out: Path, log,
                   drawn: list[dict], reuse: dict | None = None, failed: list[dict] | None = None) -> dict | None:
    """Run a figure notebook at its paper preset from the records it rests on, once each has
    one (else None: not yet); a figure of one run per method (``methods_parameter``) is drawn
    from those recorded so far, its caption naming the others. Its figures join ``drawn``.
    Returns what its paper page shows."""
    matched = [(need, next((r for _, r in found if need.matches(r)), None)) for need in spec.needs]
    used = [record_ref(r) for _, r in matched if r is not None]
    waiting = [need.method for need, r in matched if r is None]
    overrides, caption = dict(spec.overrides), spec.caption
    if waiting:
        if not (spec.methods_parameter and used):
            return None
        overrides[spec.methods_parameter] = [need.method for need, r in matched if r is not None]
        caption += (f"; so far {len(used)} of its {len(spec.needs)} runs {'has' if len(used) == 1 else 'have'} a record "
                    f"({', '.join(display_name(m) for m in waiting)} wait in the campaign's plan)")
    ran = _execute_from_records(spec.notebook, overrides, spec.notebook, used, root, out, log, drawn, reuse, failed)
    if ran is None:
        return None
    name, figures = ran
    seeds = sorted({r["seed"] for _, r in matched if r is not None})
    caption += f"; drawn from {len(used)} record(s), {_seed_words(seeds)}"
    images = [(rel, f"{caption} ({Path(rel).name})") for rel in figures]
    return {"id": spec.id, "caption": caption, "images": images, "notebook": name, "records": sorted(used),
            "waiting": waiting, "seeds": seeds, "stand_in": spec.stand_in}


def _execute_from_records(notebook: str, overrides: dict, where: str, used: list[str], root: Path, out: Path, log,
                          drawn: list[dict], reuse: dict | None = None,
                          failed: list[dict] | None = None) -> tuple[str, list[str]] | None:
    """Execute ``notebook`` at its paper preset with ``overrides``, every run read from its
    record (one without is refused, never trained); write its HTML page; add the figures it
    saved to ``drawn`` as ``figures/<where>/...`` resting on the records ``used``. Returns
    the page's name and the figures' paths under ``out``, or None if it failed. With
    ``reuse``, an execution whose inputs are those of one kept there is not repeated: its
    page and figures are written from what was kept. A failed execution is appended to
    ``failed`` (and never kept for reuse)."""
    from ..notebooks import run_notebooks
    from .pages import notebook_html

    figures_dir = out / "notebook-figures" / where
    name = f"{where.replace('/', '-')}.html"
    digest = _inputs_digest(notebook, overrides, where, used, root) if reuse is not None else None
    if digest in (reuse or {}):
        page, images = reuse[digest]
        for rel, data in images.items():
            (figures_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (figures_dir / rel).write_bytes(data)
        (out / name).write_text(page, encoding="utf-8")
        how = "reused (its notebook, code and records unchanged since the last build)"
    else:
        with _records_only():
            [ran] = run_notebooks("paper", out / "notebooks", only=[f"notebooks/{notebook}.ipynb"], root=root,
                                  overrides={**overrides, "quiet": True, "figures_dir": str(figures_dir)},
                                  log=lambda *a, **k: None)
        if ran.status != "ok":
            log(f"report: {where} failed: {ran.error}")
            if failed is not None:
                failed.append({"notebook": where, "error": str(ran.error)})
            return None
        page = notebook_html(Path(ran.output), notebook, where)
        (out / name).write_text(page, encoding="utf-8")
        if digest is not None:
            reuse[digest] = (page, {png.relative_to(figures_dir).as_posix(): png.read_bytes()
                                    for png in figures_dir.rglob("*.png")})
        how = f"executed from records in {ran.seconds:.0f} s"
    figures = []
    for png in sorted(figures_dir.rglob("*.png")):
        figures.append(png.relative_to(out).as_posix())
        drawn.append({"figure": figures[-1], "as": f"{where}/{png.relative_to(figures_dir).as_posix()}",
                      "records": sorted(used)})
    log(f"report: {where} {how}")
    return name, figures


def _inputs_digest(notebook: str, overrides: dict, where: str, used: list[str], root: Path) -> str:
    """What an execution from records depends on: the notebook, its paper preset, pflcore's
    source, the overrides and the bytes of the records it reads. Equal digests, equal output."""
    from ..notebooks import params_path

    nb = root / "notebooks" / f"{notebook}.ipynb"
    sha = hashlib.sha256(json.dumps([notebook, where, overrides, sorted(used)], sort_keys=True).encode())
    package = Path(__file__).resolve().parents[1]
    source = sorted(f for f in package.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
    read = [root / records.RECORDS_FOLDER / ref for ref in sorted(used)]
    for path in [nb, params_path(nb, root, "paper"), *source, *read]:
        sha.update(str(path).encode() + b"\0" + (path.read_bytes() if path.is_file() else b"") + b"\0")
    return sha.hexdigest()


@contextmanager
def _records_only() -> Iterator[None]:
    """Notebooks executed inside read every run from its record; one without is refused, never trained."""
    saved = os.environ.get(records.RECORDS_ONLY_ENV)
    os.environ[records.RECORDS_ONLY_ENV] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(records.RECORDS_ONLY_ENV, None)
        else:
            os.environ[records.RECORDS_ONLY_ENV] = saved


def record_ref(record: dict) -> str:
    """A record's path under ``reproductions/``: ``<notebook>/<record file name>``."""
    return f"{record['notebook']}/{records.record_name(record)}"


# ---------------------------------------------------------------------- committed figures
#: The list of figures a build drew from records (in the build's folder).
DRAWN = "drawn.json"
#: The notebooks that failed to execute in a build, with their errors (in the build's folder).
FAILED = "failed.json"
#: The committed figures' folder, and its list of which records each figure rests on.
FIGURES_FOLDER = "figures"
MANIFEST = "MANIFEST.json"
#: Folders under ``figures/`` that are not drawn from records (smoke and walkthrough runs, not committed).
NOT_FROM_RECORDS = ("smoke", "teaching")


class FiguresKept(ValueError):
    """``commit_figures`` refused: a notebook failed in the build, so the figures it draws are
    missing from it and replacing ``figures/`` would delete them."""


# ---------------------------------------------------------------------- where a build goes
#: Written first into every build's folder: a folder holding it is a report pflcore built.
MARKER = ".pflcore-report"
#: What a report built before the marker holds (folders, and files by their ending).
_LEGACY_FOLDERS = ("figures", "notebooks", "notebook-figures", "records")
_LEGACY_FILES = (".html", ".json", ".png")


class ReportRefused(ValueError):
    """``pflcore report`` refused its target folder (not a report it built, or another build writes
    it now); the message is one sentence, and nothing was deleted."""


def is_report(folder: Path) -> bool:
    """Whether ``folder`` is a report pflcore built: it holds :data:`MARKER`, or it is one built
    before the marker (index.html, records.html and drawn.json, and nothing a build does not write)."""
    if (folder / MARKER).is_file():
        return True
    try:
        entries = list(folder.iterdir())
    except OSError:
        return False
    names = {e.name for e in entries}
    return {"index.html", "records.html", DRAWN} <= names and all(
        (e.is_dir() and not e.is_symlink() and e.name in _LEGACY_FOLDERS)
        or (e.is_file() and not e.is_symlink() and e.name.endswith(_LEGACY_FILES)) for e in entries)


def check_target(target: Path, root: Path) -> None:
    """Refuse, in one sentence and before anything is written, a target the report would harm."""
    real = target.resolve()
    for name, kept in ((records.RECORDS_FOLDER, "the records live"), (FIGURES_FOLDER, "the committed figures live"),
                       (".git", "git keeps the repository")):
        if real == (root / name).resolve() or real.is_relative_to((root / name).resolve()):
            raise ReportRefused(f"pflcore report does not write into {target}: that is {name}/, where {kept}; "
                                "choose another folder (the default is outputs/report).")
    if root.resolve().is_relative_to(real):
        raise ReportRefused(f"pflcore report does not write into {target}: it holds the project; choose a folder of "
                            "its own (the default is outputs/report).")
    if target.is_symlink():
        raise ReportRefused(f"pflcore report does not replace {target}: it is a symbolic link; name the folder itself.")
    if target.exists() and not target.is_dir():
        raise ReportRefused(f"pflcore report does not replace {target}: it is a file, not a report's folder; choose "
                            "a new folder.")
    if target.is_dir() and any(target.iterdir()) and not is_report(target):
        raise ReportRefused(f"pflcore report leaves {target} as it is: that folder is not a report pflcore built (it "
                            f"holds no {MARKER}), so replacing it could delete files of yours; choose a new or empty "
                            "folder, or one pflcore report wrote.")


@contextmanager
def exclusive(lock: Path, what: str) -> Iterator[None]:
    """Hold ``lock`` (``fcntl.flock``; a file, created if missing, or an existing folder) for the
    block; another process holding it is one sentence (:class:`ReportRefused`). The lock goes
    with the process, however it ends."""
    try:
        import fcntl
    except ImportError:  # no flock on this system: builds are not guarded against each other
        yield
        return
    lock.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_RDONLY if lock.is_dir() else os.O_RDWR | os.O_CREAT
    fd = os.open(lock, flags | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ReportRefused(f"another pflcore process is writing {what} now (it holds {lock}); wait for it to "
                                "finish, then run this again.") from None
        yield
    finally:
        os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two folders in one step (Linux ``renameat2`` RENAME_EXCHANGE); False where the system cannot."""
    try:
        import ctypes

        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    return renameat2(-100, os.fsencode(a), -100, os.fsencode(b), 2) == 0  # AT_FDCWD, RENAME_EXCHANGE


def swap_in(new: Path, target: Path) -> None:
    """Put the folder ``new`` where ``target`` is; the folder that was there is deleted only after."""
    if not target.exists():
        new.rename(target)
        return
    if _exchange(new, target):
        shutil.rmtree(new, ignore_errors=True)  # now the previous one
        return
    previous = target.with_name(f".{target.name}.previous-{os.getpid()}")
    target.rename(previous)
    try:
        new.rename(target)
    except BaseException:
        previous.rename(target)
        raise
    shutil.rmtree(previous, ignore_errors=True)


def _tidy_beside(target: Path) -> None:
    """Leftovers of builds into ``target`` that were killed (the lock is held): a previous report
    left aside mid-swap goes back where it was; unfinished builds go."""
    for left in sorted(target.parent.glob(f".{target.name}.previous-*")):
        if not target.exists() and is_report(left):
            left.rename(target)
        elif is_report(left):
            shutil.rmtree(left, ignore_errors=True)
    for left in target.parent.glob(f".{target.name}.building-*"):
        if left.is_dir() and not left.is_symlink() and ((left / MARKER).is_file() or not any(left.iterdir())):
            shutil.rmtree(left, ignore_errors=True)


@contextmanager
def building(target: Path, root: Path) -> Iterator[Path]:
    """A new folder beside ``target`` to build the report in, swapped in for ``target`` only when
    the block succeeds; a failed, interrupted or concurrent build leaves the previous report whole.
    A target that is not a report pflcore built is refused (:func:`check_target`), never emptied."""
    check_target(target, root)
    with exclusive(target.with_name(f".{target.name}.lock"), f"the report {target}"):
        _tidy_beside(target)
        check_target(target, root)
        new = Path(tempfile.mkdtemp(prefix=f".{target.name}.building-", dir=target.parent))
        try:
            (new / MARKER).write_text(json.dumps({"built_by": "pflcore report", "pid": os.getpid(),
                                                  "started": records.now()}) + "\n", encoding="utf-8")
            yield new
            swap_in(new, target)
        except BaseException:
            shutil.rmtree(new, ignore_errors=True)
            raise


def failures(out: str | Path) -> list[dict]:
    """The notebooks that failed to execute in the build written to ``out`` ({"notebook", "error"})."""
    path = Path(out) / FAILED
    if not path.exists():
        return []
    try:
        failed = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        failed = None
    if not isinstance(failed, list) or not all(isinstance(f, dict) and isinstance(f.get("notebook"), str)
                                               for f in failed):
        raise ReportRefused(f"{path} cannot be read as the list of notebooks that failed in a build; build the "
                            "report again.")
    return failed


def commit_figures(out: str | Path, root: str | Path | None = None) -> Path:
    """Replace the figures under ``figures/`` by those a build in ``out`` drew from the
    records, and write ``figures/MANIFEST.json`` (figure -> the records it is drawn from),
    so that every committed figure traces to committed records. Returns the manifest.
    Refused (:class:`FiguresKept`, ``figures/`` untouched) when a notebook failed in that build;
    refused (:class:`ReportRefused`) when ``out`` lists a figure outside itself. The new
    ``figures/`` is put together beside the old one and swapped in at once, under a lock on the
    project's folder (two at once: the second is refused)."""
    root = project_root(root)
    out = Path(out)
    failed = failures(out)
    if failed:
        names = ", ".join(f["notebook"] for f in failed)
        raise FiguresKept(f"figures/ is left as it was: {len(failed)} notebook(s) failed in this build ({names}; "
                          f"the first: {failed[0]['error']}), and replacing figures/ would delete what they draw.")
    drawn = _drawn(out)
    target = root / FIGURES_FOLDER
    with exclusive(root, f"{FIGURES_FOLDER}/"):
        for left in root.glob(f".{FIGURES_FOLDER}-new-*"):  # of a commit that was killed
            shutil.rmtree(left, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{FIGURES_FOLDER}-new-", dir=root))
        try:
            for entry in drawn:
                dest = staging / entry["as"]
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(out / entry["figure"], dest)
            manifest = {entry["as"]: entry["records"] for entry in sorted(drawn, key=lambda e: e["as"])}
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
            for kept in target.iterdir() if target.is_dir() else ():  # not drawn from records: kept as they are
                if kept.name in NOT_FROM_RECORDS or kept.name == "README.md":
                    if kept.is_dir() and not kept.is_symlink():
                        shutil.copytree(kept, staging / kept.name, symlinks=True)
                    else:
                        shutil.copy2(kept, staging / kept.name, follow_symlinks=False)
            swap_in(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return target / MANIFEST


def _drawn(out: Path) -> list[dict]:
    """The figures a build in ``out`` drew (:data:`DRAWN`), each a file inside ``out`` going to a
    place inside ``figures/``; anything else is one sentence naming the file."""
    path = out / DRAWN
    try:
        drawn = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        raise ReportRefused(f"{path} cannot be read as the list of figures a build drew; build the report again.") \
            from None
    real = out.resolve()
    for entry in drawn if isinstance(drawn, list) else [None]:
        ok = (isinstance(entry, dict) and isinstance(entry.get("figure"), str) and isinstance(entry.get("as"), str)
              and isinstance(entry.get("records"), list) and all(isinstance(r, str) for r in entry["records"]))
        if ok:
            source, place = (out / entry["figure"]).resolve(), PurePosixPath(entry["as"])
            ok = (source.is_relative_to(real) and source.is_file() and not place.is_absolute() and bool(place.parts)
                  and ".." not in place.parts and "\\" not in entry["as"] and place.parts[0] not in NOT_FROM_RECORDS
                  and entry["as"] not in (MANIFEST, "README.md"))
        if not ok:
            raise ReportRefused(f"{path} lists a figure that is not one the build drew into its own folder "
                                f"({records.shorten(json.dumps(entry))}); build the report again.")
    return drawn


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in str(text)).strip("-").lower()


__all__ = ["Cell", "FiguresKept", "ReportRefused", "build", "building", "is_report", "cells_of", "close_rivals",
           "commit_figures", "failures", "first_place",
           "paired_t", "verdict"]
