"""The report's HTML: the landing page (status matrix), a page per paper, and executed
notebooks converted with nbconvert. Plain HTML and one stylesheet, no script and nothing
fetched from the network, so the site opens from a folder."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import jinja2
from markupsafe import Markup, escape

from .. import __version__, records
from ..papers import display_name, split_label

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; vertical-align: top; }
th { background: #f2f2f2; } td.l, th.l { text-align: left; } th[colspan] { text-align: center; }
.reproduced { background: #e3f4e1; } .differs { background: #fdebd0; } .cannot { background: #eee; color: #555; }
.inconclusive { background: #fff6cc; } .preliminary { background: #f1ecf9; }
.not-run { background: #fff; color: #777; } .reference { background: #e6eefb; } .drawn { background: #f3f0e8; }
.variant { background: #f7f7f7; font-style: italic; } .variant td:first-child { padding-left: 1.6em; }
.holds { color: #1a7f37; font-weight: 600; } .does-not-hold { color: #b35900; font-weight: 600; }
.so-far { color: #7a5c00; font-weight: 600; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
nav a { margin-right: 1em; } p.protocol { background: #f7f7f7; padding: 0.6em; border-left: 3px solid #999; }
p.rule { background: #f5f7fa; padding: 0.6em; border-left: 3px solid #6a7f99; font-size: 0.92em; }
code { background: #f4f4f4; padding: 0 0.2em; } .nowrap { white-space: nowrap; }
table.matrix td { font-size: 0.86em; min-width: 7em; } .paper { color: #555; } .small { font-size: 0.85em; color: #555; }
"""

_ENV = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)

_BASE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title><style>{{ style }}</style></head>
<body><nav><a href="index.html">Status</a>{% for p, name in papers %}<a href="{{ p }}.html">{{ name }}</a>{% endfor %}<a href="records.html">Records</a></nav>
{{ body }}
<hr><p><small>Built by pflcore {{ version }} from the run records in <code>reproductions/</code>
(<code>pflcore report</code>) at git commit <code>{{ built.commit }}</code>{% if built.dirty %} (with uncommitted
changes to the package){% endif %} on {{ built.date }}. No number on this page is typed by hand: ours come from the
records, the papers' from <code>pflcore.papers</code> and the report's catalogue.</small></p></body></html>
"""

_INDEX = """
<h1>pflcore reproduction report</h1>
<p>{{ n_records }} run records ({{ size_kb }} KiB) in <code>reproductions/</code>. Status of every table and figure
of the four papers: <b>reproduced</b>, <b>differs</b>, <b>inconclusive</b> and <b>preliminary</b> (the rule below;
a table takes the worst of its recorded cells), <b>reference only</b> (stand-in data: the paper's dataset cannot be had
here and the same experiment runs on another), <b>drawn from records</b> (a figure drawn from the records, with no
number to judge), <b>not run yet</b> (no record), <b>cannot run here</b> (the paper's datasets are not available on
this machine).</p>
<p class="rule"><b>The reproduction rule.</b> {{ rule }}</p>
{% if pooling %}<p class="rule"><b>Which runs a row's mean pools.</b> {{ pooling }}</p>{% endif %}
{% if failed %}<p class="differs"><b>{{ failed|length }} notebook(s) failed to execute in this build</b>, so their
pages and figures are missing from this site (the errors are in <code>failed.json</code> beside this page):
{% for f in failed %}<code>{{ f.notebook }}</code> ({{ f.error }}){% if not loop.last %}; {% endif %}{% endfor %}.</p>
{% endif %}
<p><b>Items:</b> {% for status, css, count in counts %}<span class="{{ css }}">&nbsp;{{ count }} {{ status }}&nbsp;</span>{% if not loop.last %} &middot; {% endif %}{% endfor %}</p>
<p><b>Cells</b> of the {{ n_tables }} tables the report shows whole ({{ total_cells }} cells in all):
{% for status, css, count in cell_counts %}<span class="{{ css }}">&nbsp;{{ count }} {{ status }}&nbsp;</span>{% if not loop.last %} &middot; {% endif %}{% endfor %}</p>
<table><tr><th class="l">paper</th><th class="l">item</th><th class="l">what</th><th class="l">status</th>
<th class="l">detail</th><th class="l">notebook</th></tr>
{% for row in rows %}
<tr class="{{ row.css }}"><td class="l"><a href="{{ row.paper }}.html">{{ row.paper_name }}</a></td>
<td class="l">{% if row.anchor %}<a href="{{ row.paper }}.html#{{ row.anchor }}">{{ row.id }}</a>{% else %}{{ row.id }}{% endif %}</td>
<td class="l">{{ row.what }}</td><td class="l nowrap">{{ row.status }}</td><td class="l">{{ row.detail }}</td>
<td class="l"><code>{{ row.notebook }}</code></td></tr>
{% endfor %}
</table>
<p>Built in {{ seconds }} s.</p>
"""

_PAPER = """
<h1>{{ title }}</h1>
<p><b>Cite:</b> {{ citation }} <a href="https://arxiv.org/abs/{{ arxiv }}">arxiv.org/abs/{{ arxiv }}</a></p>
<p class="rule"><b>The reproduction rule.</b> {{ rule }}</p>
{% if pooling %}<p class="rule"><b>Which runs a row's mean pools.</b> {{ pooling }}</p>{% endif %}
{% if contents %}<p><b>On this page:</b> {% for href, text in contents %}<a href="#{{ href }}">{{ text }}</a>{% if not loop.last %} &middot; {% endif %}{% endfor %}</p>{% endif %}
{% if not tables and not figures %}<p>No table of this paper has run records yet; see the status page.</p>{% endif %}
{% for t in tables %}
<h2 id="{{ t.anchor }}">{{ t.title }}</h2>
<p class="protocol"><b>Protocol.</b> {{ t.protocol }}</p>
{% if t.deviations %}<p><b>Deviations from the paper's protocol:</b></p><ul>{% for d in t.deviations %}<li>{{ d }}</li>{% endfor %}</ul>{% endif %}
{% if t.claim %}<p><b>The paper's claim:</b> {{ t.claim_words }} Here it <span class="{{ t.claim_css }}">{{ t.claim_status }}</span>.
{{ t.claim_text }}.</p>{% endif %}
<h3 id="{{ t.anchor }}-whole">The whole table, in the paper's order</h3>
<p class="small">Each cell: the paper's number{% if t.paper_std_kind %} (± its {{ t.paper_std_kind }}){% endif %},
then ours: mean ± std over seeds (ddof 1) with n, the number of seeds, and its status under the rule (the reasons
in the tables below); or, where we have none, why (a column's reason under its heading).</p>
<table class="matrix">
{% if t.groups %}<tr><th class="l"></th>{% for g, span in t.groups %}<th colspan="{{ span }}">{{ g }}</th>{% endfor %}</tr>{% endif %}
<tr><th class="l">{{ t.corner }}</th>{% for h, why in t.headers %}<th>{{ h }}{% if why %}<br><span class="small">{{ why }}</span>{% endif %}</th>{% endfor %}</tr>
{% for r in t.matrix %}
<tr><td class="l">{{ r.name }}</td>{% for c in r.cells %}<td class="{{ c.css }}"{% if c.span > 1 %} colspan="{{ c.span }}"{% endif %}>{% if c.paper %}<span class="paper">paper {{ c.paper }}</span><br>{% endif %}{% if c.ours %}ours {{ c.ours }}<br>{% endif %}<span class="small">{{ c.status }}</span></td>{% endfor %}</tr>
{% endfor %}
</table>
{% for c in t.columns %}
<h3 id="{{ t.anchor }}-{{ c.slug }}">{{ c.title }}: ours beside the paper</h3>
<table><tr><th class="l">method</th><th>n</th><th>seeds</th><th>ours: {{ t.metric_words }} (mean ± std over seeds, ddof 1)</th>
<th>paper{% if t.paper_std_kind %} (± its {{ t.paper_std_kind }}){% endif %}</th><th>diff</th>
<th>final mean over clients (mean ± std over seeds, ddof 1)</th><th>best round's mean over clients (mean over seeds)</th>
<th>s/round</th><th class="l">status</th></tr>
{% for r in c.rows %}
<tr class="{{ r.css }}"><td class="l">{{ r.name }}</td><td>{{ r.n }}</td><td>{{ r.seeds }}</td><td>{{ r.ours }}</td>
<td>{{ r.paper }}</td><td>{{ r.diff }}</td><td>{{ r.final }}</td><td>{{ r.best }}</td><td>{{ r.spr }}</td>
<td class="l">{{ r.status }}{% if r.note %}; <a href="#{{ r.note }}">see note {{ r.note_n }}</a>{% endif %}</td></tr>
{% endfor %}
</table>
{% endfor %}
{% if t.notes %}<p><b>Notes</b> (investigations of rows beyond the tolerance):</p><ol class="notes">{% for id, row, note in t.notes %}<li id="{{ id }}"><b>{{ row }}</b>: {{ note }}</li>{% endfor %}</ol>{% endif %}
{% for src, caption in t.figures %}<figure><img src="{{ src }}" alt="{{ caption }}"><figcaption>{{ caption }}</figcaption></figure>{% endfor %}
{% if t.notebooks %}<p>Executed notebooks (from the records):</p><ul>
{% for href, caption in t.notebooks %}<li><a href="{{ href }}">{{ caption }}</a></li>{% endfor %}</ul>{% endif %}
{% if t.hosts %}<details class="hosts"><summary><b>Where each row's seeds ran</b> ({{ t.hosts | selectattr("mixed") | list | length }} row(s) mix hosts; {{ t.hosts | map(attribute="replications") | map("length") | sum }} replication(s): a recorded run retrained on another machine{% if t.not_counted %}; {{ t.not_counted }} record(s) of a row's seed that do not count in its mean, as the pooling rule says{% endif %}). Bit-identity holds on the same numeric path only; a replication never enters a row's mean.</summary><ul>
{% for h in t.hosts %}<li><b>{{ h.row }}</b>: {{ h.hosts }}{% for rep in h.replications %}<br>&rarr; {{ rep }}{% endfor %}{% for line in h.get("not_counted", []) %}<br>&rarr; {{ line }}{% endfor %}</li>{% endfor %}</ul></details>{% endif %}
<p>Records behind this table: {% for rec in t.records %}<code>{{ rec }}</code>{% if not loop.last %}, {% endif %}{% endfor %}{% if not t.records %}none yet{% endif %}.</p>
{% if t.others %}<p>Not in this table: {{ t.others|length }} record(s) of its notebook whose runs changed the paper
preset's parameters{% if t.preset_changes %} otherwise than the table's{% endif %}, so another setting:
{% for o in t.others %}<code>{{ o }}</code>{% if not loop.last %}, {% endif %}{% endfor %}.</p>{% endif %}
{% endfor %}
{% for f in figures %}
<h2 id="{{ f.anchor }}">Figure {{ f.id }}, drawn from records{% if f.stand_in %} (reference only: stand-in data){% endif %}</h2>
<p>{{ f.caption }}.{% if f.stand_in %} Stand-in data: {{ f.stand_in }}.{% endif %}</p>
{% for src, alt in f.images %}<figure><img src="{{ src }}" alt="{{ alt }}"><figcaption>{{ src.rsplit("/", 1)[-1] }}</figcaption></figure>{% endfor %}
<p>Executed notebook (from the records): <a href="{{ f.notebook }}">{{ f.notebook_title }}</a>. Records behind this figure:
{% for rec in f.records %}<code>{{ rec }}</code>{% if not loop.last %}, {% endif %}{% endfor %}.</p>
{% endfor %}
"""


@dataclass
class Page:
    paper: str
    title: str
    tables: list = field(default_factory=list)
    figures: list = field(default_factory=list)  # dicts: id, caption, images [(src, alt)], notebook href, records


def _papers() -> list[tuple[str, str]]:
    from .catalogue import PAPERS

    return [(p, display_name(p)) for p in PAPERS]


def _built(built: dict | None) -> dict:
    return {"commit": "unknown", "dirty": False, "date": "unknown", "rule": "", "pooling": "", **(built or {})}


def _wrap(title: str, body: str, built: dict | None = None) -> str:
    return _ENV.from_string(_BASE).render(title=title, style=Markup(STYLE), papers=_papers(), body=Markup(body),
                                          version=__version__, built=_built(built))


def _num(value: float, std: float | None = None, digits: tuple[int, int] = (2, 2)) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    text = f"{value:.{digits[0]}f}"
    if std is not None and not math.isnan(std):
        text += f" \u00b1 {std:.{digits[1]}f}"
    return text


def _ours(cell, metric: str) -> str:
    """Ours as every page gives it: mean +- std over seeds (ddof 1), and n."""
    if not cell.n:
        return ""
    std = cell.std(metric)
    spread = f" \u00b1 {std:.2f}" if math.isfinite(std) else ""
    return f"{cell.mean(metric):.2f}{spread} (n = {cell.n} seed{'s' if cell.n != 1 else ''}, std ddof 1)"


def _css(status: str) -> str:
    return {"reproduced": "reproduced", "differs": "differs", "inconclusive": "inconclusive",
            "preliminary": "preliminary", "reference only": "reference", "cannot run here": "cannot",
            "drawn from records": "drawn"}.get(status, "not-run")


def _row(spec, cell, status: str, why: str, name: str, css: str | None = None) -> dict:
    """One line of a table on a paper's page: the cell's numbers beside the paper's."""
    diff = (cell.mean(spec.metric) - cell.paper if cell.n and cell.paper is not None and spec.comparable
            else float("nan"))  # no difference to another dataset's number
    spr = [r["provenance"].get("seconds_per_round") for r in cell.runs]
    spr = [s for s in spr if isinstance(s, (int, float))]
    return {
        "name": name, "n": cell.n, "seeds": ", ".join(map(str, cell.seeds())),
        "ours": _num(cell.mean(spec.metric), cell.std(spec.metric)) if cell.n else "",
        "paper": _num(cell.paper, cell.paper_std, spec.paper_digits) if cell.paper is not None else "",
        "diff": f"{diff:+.2f}" if not math.isnan(diff) else "",
        "final": _num(cell.mean("acc_mean"), cell.std("acc_mean")) if cell.n else "",
        "best": _num(cell.mean("best_acc_mean")) if cell.n else "",
        "spr": f"{sum(spr) / len(spr):.1f}" if spr else "",
        "status": status + (f" ({why})" if why else ""), "note": "", "note_n": 0,
        "css": css or _css(status)}


def _matrix(spec, cells) -> dict:
    """The paper's whole table: its groups of columns, its headers, and each row's cells."""
    from . import cell_status
    from .catalogue import column_status

    columns = [c for c in spec.all_columns() if not c.per_group]
    groups: list[list] = []
    for c in columns:
        if groups and groups[-1][0] == c.group:
            groups[-1][1] += 1
        else:
            groups.append([c.group, 1])

    def cell(column, row, span=1) -> dict:
        status = cell_status(spec, cells, column.key, row)
        c = cells.get((column.key, row))
        paper = (_num(c.paper, c.paper_std, spec.paper_digits) if c is not None and c.paper is not None else "")
        return {"paper": paper, "ours": _ours(c, spec.metric) if c is not None else "", "status": status,
                "css": _css(status), "span": span}

    rows = []
    for label, method in spec.group_rows:  # printed across each group's columns
        out = []
        for c in spec.all_columns():
            if c.per_group:
                out.append(cell(c, method, span=sum(1 for x in columns if x.group == c.group)))
        rows.append({"name": label, "cells": out})
    for row in spec.rows:
        rows.append({"name": spec.row_name(row), "cells": [cell(c, row) for c in columns]})
    headers = [(c.title, column_status(spec, c)[1]) for c in columns]
    show_groups = [(g, n) for g, n in groups] if any(g for g, _ in groups) else []
    if spec.transposed:  # the paper prints the rows as columns
        rows = [{"name": columns[i].title, "cells": [r["cells"][i] for r in rows]} for i in range(len(columns))]
        headers, show_groups = [(spec.row_name(r), "") for r in spec.rows], []
        for i, r in enumerate(rows):
            r["name"] = f"{columns[i].title}" + (f" ({column_status(spec, columns[i])[1]})"
                                                 if column_status(spec, columns[i])[1] else "")
    return {"groups": show_groups, "headers": headers, "matrix": rows,
            "corner": "dataset" if spec.transposed else "method"}


def render_paper(page: Page, verdict: Callable, built: dict | None = None) -> str:
    from .catalogue import ARXIV, CITATIONS, fill, note_values

    tables = []
    for entry in page.tables:
        spec, cells, figures, claim, notebooks, others, variants, *rest = entry
        values = rest[0] if rest else {}
        hosts = rest[1] if len(rest) > 1 else []
        columns, used, notes = [], [], []
        for column in spec.columns:
            rows = []
            if not any(cells[(column, m)].n for m in spec.rows) and not any(
                    c == column for c, _ in variants):
                continue  # no record in this column yet: the whole table above says so
            for method in spec.rows:
                cell = cells[(column, method)]
                used += [f"{r['notebook']}/{r['config']['method']} seed {r['seed']}" for r in cell.runs]
                status, why = verdict(cell, spec.metric)
                note = spec.row_note(column, method)
                if not spec.comparable and cell.n:
                    status, why = "reference only", "the paper's number is for another dataset"
                row = _row(spec, cell, status, why, spec.row_name(method))
                if note and cell.n:  # investigated in a note under the table
                    notes.append((f"{spec.paper}-{spec.id}-note-{len(notes) + 1}",
                                  f"{spec.row_name(method)}, {spec.column_title(column)}",
                                  fill(note, {**values, **note_values(spec, column, method, cells, variants)})))
                    row["note"], row["note_n"] = notes[-1][0], len(notes)
                elif status == "differs":
                    row["status"] += "; not investigated yet"
                rows.append(row)
                for label in sorted(row for c, row in variants if c == column and split_label(row)[0] == method):
                    variant = variants[(column, label)]  # beside its row, outside the table's verdicts
                    used += [f"{r['notebook']}/{label} seed {r['seed']}" for r in variant.runs]
                    status, why = verdict(variant, spec.metric)
                    if not spec.comparable:
                        status, why = "reference only", ""
                    rows.append(_row(spec, variant, f"a variant of {spec.row_name(method)}'s row, not in the table: "
                                     + status, why, display_name(label), css="variant"))
            columns.append({"title": spec.column_title(column), "rows": rows, "slug": _slug(column)})
        claim_status = claim["status"] if claim else ""
        tables.append({
            "anchor": f"{spec.paper}-{spec.id}", "title": spec.title,
            "protocol": fill(spec.protocol, values) + (f" {spec.note}" if spec.note else ""),
            "deviations": [fill(d, values) for d in spec.deviations],
            "metric_words": spec.metric_words, "columns": columns, "figures": figures, "notebooks": notebooks,
            "claim": claim is not None, "claim_words": spec.claim_words,
            "claim_status": claim_status, "claim_text": claim["text"] if claim else "",
            "claim_css": ("so-far" if "so far" in claim_status or "means only" in claim_status
                          else "holds" if claim_status.startswith("holds")
                          else "does-not-hold"),
            "paper_std_kind": spec.paper_std_kind, **_matrix(spec, cells),
            "records": sorted(set(used)), "notes": notes, "others": others, "preset_changes": spec.preset_changes,
            "hosts": hosts, "not_counted": sum(len(h.get("not_counted", ())) for h in hosts)})
    figures = [{**f, "anchor": f"{page.paper}-figure-{f['id']}", "stand_in": f.get("stand_in", ""),
                "notebook_title": f["notebook"].removesuffix(".html").replace("-", "/", 1)} for f in page.figures]
    contents = ([(t["anchor"], t["title"].split(",")[0]) for t in tables]
                + [(f["anchor"], f"Figure {f['id']}") for f in figures])
    body = _ENV.from_string(_PAPER).render(title=page.title, tables=tables, figures=figures, contents=contents,
                                           citation=CITATIONS.get(page.paper, ""), arxiv=ARXIV.get(page.paper, ""),
                                           rule=Markup(_built(built)["rule"]), pooling=_built(built)["pooling"])
    return _wrap(display_name(page.paper), body, built)


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in str(text)).strip("-").lower()


def render_index(catalogue: list, table_status: dict, found: list, seconds: float, failed: list[dict] = (),
                 built: dict | None = None, cell_counts: dict | None = None) -> str:
    """The status page: one row per catalogue item (with its cells counted where the report shows
    the paper's table whole, ``cell_counts``), and first, where a notebook failed to execute in
    this build, which ones (``failed``: {"notebook", "error"}) and that the site lacks them."""
    from .catalogue import ALL_TABLES, FIGURES

    anchors = {(f.paper, f.id): f"{f.paper}-figure-{f.id}" for f in FIGURES}
    anchors.update({(t.paper, t.curves_item): f"{t.paper}-{t.id}" for t in ALL_TABLES if t.curves_item})
    anchors.update({(t.paper, t.id): f"{t.paper}-{t.id}" for t in ALL_TABLES})
    rows = []
    for item in catalogue:
        key = (item.paper, item.id)
        if key in table_status:
            status, detail = table_status[key]
        elif not item.runnable_here:
            status, detail = "cannot run here", (f"needs {', '.join(item.datasets)}; the notebook's smoke preset "
                                                 "runs the same experiment on Fashion-MNIST")
        else:
            status, detail = "not run yet", "no run record yet"
        rows.append({"paper": item.paper, "paper_name": display_name(item.paper), "id": item.id, "what": item.what,
                     "status": status, "detail": detail, "notebook": item.notebook, "css": _css(status),
                     "anchor": anchors.get(key, "") if key in table_status else ""})
    size = sum(p.stat().st_size for p, _ in found)
    from . import STATUS_ORDER

    counts = [(status, _css(status), sum(r["status"] == status for r in rows))
              for status in STATUS_ORDER if any(r["status"] == status for r in rows)]
    totals: dict[str, int] = {}
    for c in (cell_counts or {}).values():
        for status, n in c["by_status"].items():
            totals[status] = totals.get(status, 0) + n
    cells = [(status, _css(status), totals[status]) for status in STATUS_ORDER if status in totals]
    body = _ENV.from_string(_INDEX).render(n_records=len(found), size_kb=f"{size / 1024:,.0f}", rows=rows,
                                           seconds=f"{seconds:.0f}", counts=counts, failed=list(failed),
                                           cell_counts=cells, total_cells=sum(totals.values()),
                                           n_tables=len(cell_counts or {}), rule=Markup(_built(built)["rule"]),
                                           pooling=_built(built)["pooling"])
    return _wrap("pflcore reproduction report", body, built)


def notebook_html(path: Path, notebook: str = "", where: str = "") -> str:
    """An executed notebook as one self-contained HTML page (nbconvert's ``lab`` template),
    with every script that would load from the network removed, titled by its notebook, and
    opened by a banner saying what its +- are over (the notebook's own tables: std with ddof 0,
    numpy's default, over the run's clients, or over seeds where a column says so)."""
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab")
    body, _ = exporter.from_notebook_node(nbformat.read(path, as_version=4))
    body = re.sub(r"<script[^>]*src=\"https?://[^\"]*\"[^>]*>\s*</script>", "", body)
    body = re.sub(r"<link[^>]*href=\"https?://[^\"]*\"[^>]*>", "", body)
    if notebook:
        title = f"{notebook} ({where}), executed from records" if where and where != notebook else \
            f"{notebook}, executed from records"
        body = re.sub(r"<title>.*?</title>", f"<title>{escape(title)}</title>", body, count=1, flags=re.S)
        banner = (f'<div style="font-family: system-ui, sans-serif; padding: 0.8em 1em; background: #f5f7fa; '
                  f'border-bottom: 1px solid #ccc"><h1 style="margin: 0 0 0.3em 0; font-size: 1.4em">'
                  f'{escape(title)}</h1><p style="margin: 0">The notebook <code>notebooks/{escape(notebook)}.ipynb'
                  f'</code> at its paper preset, every run read from its record (nothing trained). In its own '
                  f'tables and prints, <b>acc_std</b> and <b>\u00b1 over clients</b> are the std over the run\'s '
                  f'clients with ddof 0 (numpy\'s default), and a <b>*_std</b> column beside a mean over seeds is '
                  f'the std over those seeds, also with ddof 0; the report\'s paper pages give the std over seeds '
                  f'with ddof 1. <a href="index.html">Back to the report</a>.</p></div>')
        body = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + banner, body, count=1)
    return body


_RECORDS = """
<h1>Run records</h1>
<p>Every record behind the report ({{ rows | length }}), with where and how it ran. Each links to its JSON
file (schema: <code>reproductions/SCHEMA.md</code> in the repository).</p>
<table><tr><th class="l">notebook</th><th class="l">method</th><th>seed</th><th class="l">fingerprint</th>
<th class="l">pflcore commit</th><th class="l">finished (UTC)</th><th class="l">machine</th><th>workers</th>
<th>s/round</th><th>load</th><th class="l">changed from the paper preset</th><th class="l">notes</th></tr>
{% for r in rows %}
<tr><td class="l">{{ r.notebook }}</td><td class="l"><a href="{{ r.href }}">{{ r.method }}</a></td><td>{{ r.seed }}</td>
<td class="l"><code>{{ r.fingerprint }}</code></td><td class="l"><code>{{ r.commit }}</code></td><td class="l">{{ r.finished }}</td>
<td class="l">{{ r.machine }}</td><td>{{ r.workers }}</td><td>{{ r.spr }}</td><td>{{ r.load }}</td>
<td class="l">{{ r.changes }}</td><td class="l">{{ r.notes }}</td></tr>
{% endfor %}
</table>
"""


def render_records(found: list, hrefs: dict, built: dict | None = None) -> str:
    """The records page: provenance of every record, each linked to its JSON copy in the site."""
    rows = []
    for path, record in found:
        p = record["provenance"]
        loads = [s.get(k) for s in p.get("stretches", []) for k in ("load_at_start", "load_at_end")]
        loads = [x for x in loads if isinstance(x, (int, float))]
        commit = (p.get("git_commit") or "unknown")[:10] + (" (dirty)" if p.get("git_dirty") else "")
        machine = (p.get("gpu") or f"{p.get('cpu_model', '?')}, {p.get('cpu_count', '?')} cores")
        spr = p.get("seconds_per_round")
        rows.append({"notebook": record["notebook"], "method": display_name(record["config"]["method"]),
                     "seed": record["seed"], "fingerprint": record["fingerprint"], "commit": commit,
                     "finished": (p.get("finished") or "")[:16].replace("T", " "), "machine": machine,
                     "workers": p.get("workers", ""), "spr": f"{spr:.1f}" if isinstance(spr, (int, float)) else "",
                     "load": f"{min(loads):.1f}-{max(loads):.1f}" if loads else "",
                     "changes": records.preset_changes_in_words(record),
                     "notes": " ".join(record.get("notes", [])), "href": hrefs[path]})
    return _wrap("Run records", _ENV.from_string(_RECORDS).render(rows=rows), built)
