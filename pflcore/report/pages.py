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
from markupsafe import Markup

from .. import __version__, records
from ..papers import display_name, split_label

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th { background: #f2f2f2; } td.l, th.l { text-align: left; }
.reproduced { background: #e3f4e1; } .differs { background: #fdebd0; } .cannot { background: #eee; color: #555; }
.not-run { background: #fff; color: #777; } .reference { background: #eef3fb; }
.variant { background: #f7f7f7; font-style: italic; } .variant td:first-child { padding-left: 1.6em; }
.holds { color: #1a7f37; font-weight: 600; } .does-not-hold { color: #b35900; font-weight: 600; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
nav a { margin-right: 1em; } p.protocol { background: #f7f7f7; padding: 0.6em; border-left: 3px solid #999; }
code { background: #f4f4f4; padding: 0 0.2em; } .nowrap { white-space: nowrap; }
"""

_ENV = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)

_BASE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title><style>{{ style }}</style></head>
<body><nav><a href="index.html">Status</a>{% for p, name in papers %}<a href="{{ p }}.html">{{ name }}</a>{% endfor %}<a href="records.html">Records</a></nav>
{{ body }}
<hr><p><small>Built by pflcore {{ version }} from the run records in <code>reproductions/</code>
(<code>pflcore report</code>). No number on this page is typed by hand.</small></p></body></html>
"""

_INDEX = """
<h1>pflcore reproduction report</h1>
<p>{{ n_records }} run records ({{ size_kb }} KiB) in <code>reproductions/</code>. Status of every table and figure
of the four papers: <b>reproduced</b> (every recorded row within one std over seeds or 1.0 point of the paper),
<b>differs</b> (the paper's page says where and why), <b>reference only</b> (the paper's dataset cannot be had
here; the same experiment runs on another), <b>cannot run here</b> (the paper's datasets are not available on
this machine), <b>not run yet</b> (no record).</p>
{% if failed %}<p class="differs"><b>{{ failed|length }} notebook(s) failed to execute in this build</b>, so their
pages and figures are missing from this site (the errors are in <code>failed.json</code> beside this page):
{% for f in failed %}<code>{{ f.notebook }}</code> ({{ f.error }}){% if not loop.last %}; {% endif %}{% endfor %}.</p>
{% endif %}
<p>{% for status, count in counts %}<span class="{{ status[1] }}">&nbsp;{{ count }} {{ status[0] }}&nbsp;</span>{% if not loop.last %} &middot; {% endif %}{% endfor %}</p>
<table><tr><th class="l">paper</th><th class="l">item</th><th class="l">what</th><th class="l">status</th>
<th class="l">detail</th><th class="l">notebook</th></tr>
{% for row in rows %}
<tr class="{{ row.css }}"><td class="l"><a href="{{ row.paper }}.html">{{ row.paper_name }}</a></td><td class="l">{{ row.id }}</td>
<td class="l">{{ row.what }}</td><td class="l nowrap">{{ row.status }}</td><td class="l">{{ row.detail }}</td>
<td class="l"><code>{{ row.notebook }}</code></td></tr>
{% endfor %}
</table>
<p>Built in {{ seconds }} s.</p>
"""

_PAPER = """
<h1>{{ title }}</h1>
{% if not tables and not figures %}<p>No table of this paper has run records yet; see the status page.</p>{% endif %}
{% for t in tables %}
<h2 id="{{ t.anchor }}">{{ t.title }}</h2>
<p class="protocol"><b>Protocol.</b> {{ t.protocol }}</p>
{% if t.claim %}<p><b>The paper's claim:</b> {{ t.claim_words }} <span class="{{ t.claim_css }}">{{ t.claim_status }}</span>
here. {{ t.claim_text }}.</p>{% endif %}
{% for c in t.columns %}
<h3>{{ c.title }}</h3>
<table><tr><th class="l">method</th><th>n</th><th>seeds</th><th>ours: {{ t.metric_words }}</th><th>paper</th><th>diff</th>
<th>final mean over clients</th><th>best round's mean over clients</th><th>s/round</th><th class="l">status</th></tr>
{% for r in c.rows %}
<tr class="{{ r.css }}"><td class="l">{{ r.name }}</td><td>{{ r.n }}</td><td>{{ r.seeds }}</td><td>{{ r.ours }}</td>
<td>{{ r.paper }}</td><td>{{ r.diff }}</td><td>{{ r.final }}</td><td>{{ r.best }}</td><td>{{ r.spr }}</td>
<td class="l">{{ r.status }}</td></tr>
{% endfor %}
</table>
{% endfor %}
{% if t.notes %}<ol class="notes">{% for row, note in t.notes %}<li><b>{{ row }}</b>: {{ note }}</li>{% endfor %}</ol>{% endif %}
{% for src, caption in t.figures %}<figure><img src="{{ src }}" alt="{{ caption }}"><figcaption>{{ caption }}</figcaption></figure>{% endfor %}
{% if t.notebooks %}<p>Executed notebooks (from the records):</p><ul>
{% for href, caption in t.notebooks %}<li><a href="{{ href }}">{{ caption }}</a></li>{% endfor %}</ul>{% endif %}
<p>Records behind this table: {% for rec in t.records %}<code>{{ rec }}</code>{% if not loop.last %}, {% endif %}{% endfor %}{% if not t.records %}none yet{% endif %}.</p>
{% if t.others %}<p>Not in this table: {{ t.others|length }} record(s) of its notebook whose runs changed the paper
preset's parameters{% if t.preset_changes %} otherwise than the table's{% endif %}, so another setting:
{% for o in t.others %}<code>{{ o }}</code>{% if not loop.last %}, {% endif %}{% endfor %}.</p>{% endif %}
{% endfor %}
{% for f in figures %}
<h2 id="{{ f.id }}">Figure {{ f.id }}, drawn from records</h2>
<p>{{ f.caption }}.</p>
{% for src, alt in f.images %}<figure><img src="{{ src }}" alt="{{ alt }}"><figcaption>{{ src.rsplit("/", 1)[-1] }}</figcaption></figure>{% endfor %}
<p>Executed notebook (from the records): <a href="{{ f.notebook }}">{{ f.notebook }}</a>. Records behind this figure:
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


def _wrap(title: str, body: str) -> str:
    return _ENV.from_string(_BASE).render(title=title, style=Markup(STYLE), papers=_papers(), body=Markup(body),
                                          version=__version__)


def _num(value: float, std: float | None = None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    text = f"{value:.2f}"
    if std is not None and not math.isnan(std):
        text += f" \u00b1 {std:.2f}"
    return text


def _row(spec, cell, status: str, why: str, name: str, css: str | None = None) -> dict:
    """One line of a table on a paper's page: the cell's numbers beside the paper's."""
    diff = (cell.mean(spec.metric) - cell.paper if cell.n and cell.paper is not None and spec.comparable
            else float("nan"))  # no difference to another dataset's number
    spr = [r["provenance"].get("seconds_per_round") for r in cell.runs]
    spr = [s for s in spr if isinstance(s, (int, float))]
    return {
        "name": name, "n": cell.n, "seeds": ", ".join(map(str, cell.seeds())),
        "ours": _num(cell.mean(spec.metric), cell.std(spec.metric)) if cell.n else "",
        "paper": _num(cell.paper, cell.paper_std) if cell.paper is not None else "",
        "diff": f"{diff:+.2f}" if not math.isnan(diff) else "",
        "final": _num(cell.mean("acc_mean"), cell.std("acc_mean")) if cell.n else "",
        "best": _num(cell.mean("best_acc_mean")) if cell.n else "",
        "spr": f"{sum(spr) / len(spr):.1f}" if spr else "",
        "status": status + (f" ({why})" if why else ""),
        "css": css or {"reproduced": "reproduced", "differs": "differs", "reference only": "reference"}.get(
            status, "not-run")}


def render_paper(page: Page, verdict: Callable) -> str:
    tables = []
    for spec, cells, figures, claim, notebooks, others, variants in page.tables:
        columns, used, notes = [], [], []
        for column in spec.columns:
            rows = []
            for method in spec.rows:
                cell = cells[(column, method)]
                used += [f"{r['notebook']}/{r['config']['method']} seed {r['seed']}" for r in cell.runs]
                status, why = verdict(cell, spec.metric)
                if not spec.comparable and cell.n:
                    status, why = "reference only", "the paper's number is for another dataset"
                elif status == "differs":  # investigated in a note under the table, or said to be not yet
                    note = spec.row_note(column, method)
                    if note:
                        notes.append((f"{display_name(method)}, {spec.column_title(column)}", note))
                    why += f"; see note {len(notes)}" if note else "; not investigated yet"
                rows.append(_row(spec, cell, status, why, display_name(method)))
                for label in sorted(row for c, row in variants if c == column and split_label(row)[0] == method):
                    variant = variants[(column, label)]  # beside its row, outside the table's verdicts
                    used += [f"{r['notebook']}/{label} seed {r['seed']}" for r in variant.runs]
                    status, why = verdict(variant, spec.metric)
                    if not spec.comparable:
                        status, why = "reference only", ""
                    rows.append(_row(spec, variant, f"a variant of {display_name(method)}'s row, not in the table: "
                                     + status, why, display_name(label), css="variant"))
            columns.append({"title": spec.column_title(column), "rows": rows})
        tables.append({
            "anchor": spec.id, "title": spec.title, "protocol": spec.protocol + (f" {spec.note}" if spec.note else ""),
            "metric_words": spec.metric_words, "columns": columns, "figures": figures, "notebooks": notebooks,
            "claim": claim is not None, "claim_words": spec.claim_words,
            "claim_status": claim["status"] if claim else "", "claim_text": claim["text"] if claim else "",
            "claim_css": ("holds" if claim and claim["status"].startswith("holds") else "does-not-hold"),
            "records": sorted(set(used)), "notes": notes, "others": others, "preset_changes": spec.preset_changes})
    body = _ENV.from_string(_PAPER).render(title=page.title, tables=tables, figures=page.figures)
    return _wrap(display_name(page.paper), body)


def render_index(catalogue: list, table_status: dict, found: list, seconds: float, failed: list[dict] = ()) -> str:
    """The status page: one row per catalogue item, and first, where a notebook failed to
    execute in this build, which ones (``failed``: {"notebook", "error"}) and that the site lacks them."""
    from .catalogue import TABLES

    comparable = {(t.paper, t.id): t.comparable for t in TABLES}
    rows = []
    for item in catalogue:
        key = (item.paper, item.id)
        if key in table_status:
            status, detail = table_status[key]
            if not comparable.get(key, True) and status in ("reproduced", "differs"):
                status = "reference only"
                detail = (f"the paper's datasets ({', '.join(item.datasets)}) cannot be had here; run on "
                          f"Fashion-MNIST: {detail}")
        elif not item.runnable_here:
            status, detail = "cannot run here", (f"needs {', '.join(item.datasets)}; the notebook's smoke preset "
                                                 "runs the same experiment on Fashion-MNIST")
        else:
            status, detail = "not run yet", "no run record yet"
        css = {"reproduced": "reproduced", "differs": "differs", "cannot run here": "cannot",
               "reference only": "reference", "drawn from records": "reproduced"}.get(status, "not-run")
        rows.append({"paper": item.paper, "paper_name": display_name(item.paper), "id": item.id, "what": item.what,
                     "status": status, "detail": detail, "notebook": item.notebook, "css": css})
    size = sum(p.stat().st_size for p, _ in found)
    order = ["reproduced", "drawn from records", "differs", "reference only", "not run yet", "cannot run here"]
    counts = [((status, next(r["css"] for r in rows if r["status"] == status)), sum(r["status"] == status for r in rows))
              for status in order if any(r["status"] == status for r in rows)]
    body = _ENV.from_string(_INDEX).render(n_records=len(found), size_kb=f"{size / 1024:,.0f}", rows=rows,
                                           seconds=f"{seconds:.0f}", counts=counts,
                                           failed=list(failed))
    return _wrap("pflcore reproduction report", body)


def notebook_html(path: Path) -> str:
    """An executed notebook as one self-contained HTML page (nbconvert's ``lab`` template),
    with every script that would load from the network removed."""
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab")
    body, _ = exporter.from_notebook_node(nbformat.read(path, as_version=4))
    body = re.sub(r"<script[^>]*src=\"https?://[^\"]*\"[^>]*>\s*</script>", "", body)
    body = re.sub(r"<link[^>]*href=\"https?://[^\"]*\"[^>]*>", "", body)
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


def render_records(found: list, hrefs: dict) -> str:
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
    return _wrap("Run records", _ENV.from_string(_RECORDS).render(rows=rows))
