"""Execute the notebook collection with papermill, one preset at a time.

Notebook ``notebooks/<dir>/<NN_>name.ipynb`` takes its parameters from
``params/<dir>/<name>/<preset>.yaml`` (a leading ``NN_`` ordering prefix is dropped), e.g.
``notebooks/00_quickstart.ipynb`` -> ``params/quickstart/smoke.yaml``. Executed copies go
to ``<out>/<preset>/...``; the source notebooks stay without outputs.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PRESETS = ("smoke", "paper")


@dataclass
class NotebookRun:
    notebook: str
    preset: str
    status: str  # "ok", "failed", "no preset"
    seconds: float
    output: str | None = None
    error: str | None = None


def project_root(start: str | Path | None = None) -> Path:
    """The nearest folder at or above ``start`` (default: cwd) holding ``notebooks/`` and ``params/``."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "notebooks").is_dir() and (folder / "params").is_dir():
            return folder
    raise FileNotFoundError(f"no pflcore project (a folder with notebooks/ and params/) at or above {here}.")


def params_path(notebook: Path, root: Path, preset: str) -> Path:
    """Where a notebook's preset lives (see module docstring)."""
    rel = notebook.relative_to(root / "notebooks")
    stem = re.sub(r"^\d+_", "", rel.stem)
    return root / "params" / rel.parent / stem / f"{preset}.yaml"


def discover(root: Path, only: list[str] | None = None) -> list[Path]:
    """All notebooks of the collection in order, optionally those whose path contains a pattern."""
    found = sorted(p for p in (root / "notebooks").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    if only:
        found = [p for p in found if any(pattern in str(p.relative_to(root)) for pattern in only)]
    return found


def run_notebooks(preset: str = "smoke", out: str | Path = "outputs", only: list[str] | None = None,
                  root: str | Path | None = None, kernel: str = "python3",
                  overrides: dict | None = None, log=print) -> list[NotebookRun]:
    """Execute every notebook that has ``preset``; returns one :class:`NotebookRun` each and
    writes ``<out>/<preset>/summary.json``. ``overrides`` replace preset values for every
    notebook (e.g. ``output_dir``)."""
    import papermill
    import yaml

    root = project_root(root)
    out_dir = Path(out).resolve() / preset
    notebooks = discover(root, only)
    if not notebooks:
        raise FileNotFoundError(f"no notebook under {root / 'notebooks'} matches {only}.")
    runs: list[NotebookRun] = []
    for nb in notebooks:
        rel = nb.relative_to(root)
        preset_file = params_path(nb, root, preset)
        if not preset_file.exists():
            runs.append(NotebookRun(str(rel), preset, "no preset", 0.0))
            log(f"skip   {rel}: no {preset_file.relative_to(root)}")
            continue
        parameters = {**(yaml.safe_load(preset_file.read_text()) or {}), **(overrides or {})}
        target = out_dir / rel.relative_to("notebooks")
        target.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        try:
            papermill.execute_notebook(str(nb), str(target), parameters=parameters, cwd=str(root),
                                       kernel_name=kernel, progress_bar=False)
            run = NotebookRun(str(rel), preset, "ok", time.perf_counter() - t0, str(target))
        except Exception as exc:  # papermill raises PapermillExecutionError with the cell's traceback
            message = str(exc).strip().splitlines()
            run = NotebookRun(str(rel), preset, "failed", time.perf_counter() - t0, str(target),
                              message[-1] if message else repr(exc))
        runs.append(run)
        log(f"{run.status:6s} {rel}  {run.seconds:7.1f} s" + (f"  ({run.error})" if run.error else ""))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps([asdict(r) for r in runs], indent=1) + "\n")
    total = sum(r.seconds for r in runs)
    failed = sum(r.status == "failed" for r in runs)
    log(f"{len(runs) - failed} of {len(runs)} notebooks ran without error in {total:.1f} s "
        f"(preset {preset!r}); executed copies in {out_dir}")
    return runs
