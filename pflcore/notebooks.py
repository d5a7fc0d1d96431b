"""Execute the notebook collection with papermill, one preset at a time.

Notebook ``notebooks/<dir>/<NN_>name.ipynb`` takes its parameters from
``params/<dir>/<name>/<preset>.yaml`` (a leading ``NN_`` ordering prefix is dropped), e.g.
``notebooks/00_quickstart.ipynb`` -> ``params/quickstart/smoke.yaml``. Executed copies go
to ``<out>/<preset>/...``; the source notebooks stay without outputs. A preset is a plain
name (letters, digits, ``-``, ``_``) that some notebook has a file for.
"""
from __future__ import annotations

import json
import platform
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import records
from .project import project_path, project_root  # noqa: F401  (part of this module's API)
from .yaml_io import read_yaml_file

PRESETS = ("smoke", "paper")
PRESET_NAME = re.compile(r"[A-Za-z0-9_-]+")


class PresetError(FileNotFoundError, ValueError):
    """A preset that no notebook has, or a name that is not a plain name; one sentence."""


@dataclass
class NotebookRun:
    notebook: str
    preset: str
    status: str  # "ok", "failed", "no preset"
    seconds: float
    output: str | None = None
    error: str | None = None


def params_path(notebook: Path, root: Path, preset: str) -> Path:
    """Where a notebook's preset lives (see module docstring)."""
    rel = notebook.relative_to(root / "notebooks")
    stem = re.sub(r"^\d+_", "", rel.stem)
    return root / "params" / rel.parent / stem / f"{preset}.yaml"


#: Parameters holding a path: :func:`use_preset` resolves them with :func:`project_path`.
PATH_PARAMETERS = ("output_dir", "figures_dir", "data_root")


def check_parameter_types(notebook: str, smoke: dict, namespace: dict) -> None:
    """Refuse, in the parameter's own terms, a notebook parameter whose value is not of the
    kind its smoke preset gives it (a list, a mapping, true/false, a number): papermill's
    ``-p methods fedavg`` passes the text 'fedavg' where a list of methods belongs."""
    from .errors import ConfigError, shorten

    kinds = (("true or false", (bool,)), ("a list", (list, tuple)), ("a mapping", (dict,)), ("a number", (int, float)))
    for name, example in smoke.items():
        value = namespace.get(name)
        if value is None or example is None or name not in namespace:
            continue
        for words, types in kinds:
            if isinstance(example, types):
                if not isinstance(value, types) or (types != (bool,) and isinstance(value, bool)):
                    hint = {"a list": f" (papermill: -y '{name}: [a, b]')",
                            "a mapping": f" (papermill: -y '{name}: {{key: value}}')"}.get(words, "")
                    raise ConfigError(f"notebook parameter {name!r} = {shorten(value)} is not allowed: it must be "
                                      f"{words}, like the smoke preset's {shorten(example)} in params/{notebook}/"
                                      f"smoke.yaml{hint}.")
                break


def use_preset(notebook: str, preset: str, namespace: dict, log=print) -> dict:
    """Give a notebook the values of its ``preset``; the first call of every notebook.

    The notebook's parameters cell holds its ``smoke`` values (so Run All in JupyterLab runs
    at the smoke scale) and ``preset``; ``notebook`` names its preset folder (``"fedfa/t2_label_skew"``
    -> ``params/fedfa/t2_label_skew/<preset>.yaml``). For another preset, each value of that
    file is set in ``namespace`` (the notebook's ``globals()``) unless the notebook changed
    it from its smoke value (an edit in Lab, or papermill's ``-p``): those are kept. Then the
    path parameters (:data:`PATH_PARAMETERS`) are resolved under the project
    (:func:`project_path`; the working directory is left alone) and ``figures_dir`` is
    created. Prints where results and figures go; returns the preset's values as applied."""
    try:
        root = project_root()
    except FileNotFoundError:  # a notebook copied out of the project: its cell's smoke values only
        if preset != "smoke":
            raise PresetError(f"preset {preset!r} lives in params/{notebook}/ of a pflcore project, and "
                              f"{Path.cwd()} is not inside one: set preset = 'smoke' or edit the values.") from None
        root = None
    if preset != "smoke":
        check_preset(preset, root)
    folder = root / "params" / notebook if root else None
    smoke = (read_yaml_file(folder / "smoke.yaml", "preset") or {}) if folder else {}
    chosen = smoke if preset == "smoke" else read_yaml_file(folder / f"{preset}.yaml", "preset") or {}
    kept = []
    for name, value in chosen.items() if preset != "smoke" else ():
        if name in namespace and name in smoke and namespace[name] != smoke[name]:
            if namespace[name] != value:
                kept.append(name)  # changed from the smoke value by the user: theirs wins
        else:
            namespace[name] = value
    check_parameter_types(notebook, smoke, namespace)
    for name in PATH_PARAMETERS:
        if isinstance(namespace.get(name), (str, Path)):
            namespace[name] = str(project_path(namespace[name]))
    if "figures_dir" in namespace:
        Path(namespace["figures_dir"]).mkdir(parents=True, exist_ok=True)
    where = ", ".join(f"{what} in {namespace[n]}" for n, what in (("output_dir", "results"), ("figures_dir", "figures"))
                      if n in namespace)
    records.set_notebook(notebook, preset, train=namespace.get("train") is True)  # paper preset: records
    log(f"preset {preset!r} (params/{notebook}/{preset}.yaml)" + (f"; kept your {', '.join(kept)}" if kept else "")
        + (f": {where}" if where else ""))
    return {n: namespace.get(n) for n in chosen}


def available_presets(root: Path) -> list[str]:
    """Every preset some notebook has: the names of the YAML files under ``params/``."""
    return sorted({p.stem for p in (root / "params").rglob("*.yaml")})


def check_preset(preset: str, root: Path) -> None:
    """Refuse, with one sentence, a preset that is not a plain name or that no notebook has."""
    presets = available_presets(root)
    known = ", ".join(presets) or "none"
    if not isinstance(preset, str) or not PRESET_NAME.fullmatch(preset):
        raise PresetError(f"preset {preset!r} is not a plain name (letters, digits, '-' and '_' only); "
                          f"the presets are: {known}.")
    if preset not in presets:
        raise PresetError(f"there is no preset {preset!r} under {root / 'params'}; the presets are: {known}.")


def discover(root: Path, only: list[str] | None = None) -> list[Path]:
    """All notebooks of the collection in order, optionally those whose path contains a pattern."""
    found = sorted(p for p in (root / "notebooks").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    if only:
        found = [p for p in found if any(pattern in str(p.relative_to(root)) for pattern in only)]
    return found


def takes_preset(notebook: Path) -> bool:
    """Whether a notebook's parameters cell has a ``preset`` (every paper notebook does,
    :func:`use_preset`; the teaching walkthroughs do not)."""
    cells = json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])
    return any("parameters" in c.get("metadata", {}).get("tags", [])
               and re.search(r"^preset\s*=", "".join(c.get("source", "")), re.M) for c in cells)


def lab_metadata() -> dict:
    """The notebook metadata JupyterLab 4 writes for the project's kernel (the ``python3``
    ipykernel of the environment pflcore runs in): its kernelspec, and the language_info
    the kernel reports once it starts (its Python version included)."""
    return {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                          "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                          "pygments_lexer": "ipython3", "version": platform.python_version()},
    }


def canonical_notebook(text: str) -> str:
    """A notebook as JupyterLab saves it after opening it, without outputs: nbformat 4.5
    JSON (indent 1, sorted keys, a final newline), the kernel's metadata
    (:func:`lab_metadata`), no outputs or execution counts, and cells keeping only their
    tags as metadata (papermill's and the execution timings go)."""
    import nbformat

    nb = nbformat.reads(text, as_version=4)
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags")
        cell["metadata"] = nbformat.NotebookNode({"tags": tags} if tags else {})
        if cell.cell_type == "code":
            cell["outputs"], cell["execution_count"] = [], None
    nb.metadata = nbformat.NotebookNode(lab_metadata())
    nb.nbformat, nb.nbformat_minor = 4, 5
    return nbformat.writes(nb) + "\n"


def tidy_notebooks(root: str | Path | None = None, only: list[str] | None = None, log=print) -> list[Path]:
    """Rewrite the collection's notebooks in their committed form (:func:`canonical_notebook`);
    returns those that changed. Run before committing a notebook."""
    root = project_root(root)
    notebooks, changed = discover(root, only), []
    for nb in notebooks:
        text = nb.read_text(encoding="utf-8")
        tidy = canonical_notebook(text)
        if tidy != text:
            nb.write_text(tidy, encoding="utf-8")
            changed.append(nb)
            log(f"tidied {nb.relative_to(root)}")
    log(f"{len(changed)} of {len(notebooks)} notebooks rewritten in the form JupyterLab saves")
    return changed


def run_notebooks(preset: str = "smoke", out: str | Path = "outputs", only: list[str] | None = None,
                  root: str | Path | None = None, kernel: str = "python3",
                  overrides: dict | None = None, log=print) -> list[NotebookRun]:
    """Execute every notebook that has ``preset``; returns one :class:`NotebookRun` each and
    writes ``<out>/<preset>/summary.json``. ``overrides`` replace preset values for every
    notebook (e.g. ``output_dir``)."""
    import papermill

    root = project_root(root)
    check_preset(preset, root)  # before anything runs or is written
    out_dir = Path(out).resolve() / preset
    notebooks = discover(root, only)
    if not notebooks:
        raise FileNotFoundError(f"no notebook under {root / 'notebooks'} matches {only}.")
    if not any(params_path(nb, root, preset).exists() for nb in notebooks):
        raise PresetError(f"none of the {len(notebooks)} selected notebook(s) has a {preset!r} preset; "
                          f"the presets are: {', '.join(available_presets(root))}.")
    runs: list[NotebookRun] = []
    for nb in notebooks:
        rel = nb.relative_to(root)
        preset_file = params_path(nb, root, preset)
        if not preset_file.exists():
            runs.append(NotebookRun(str(rel), preset, "no preset", 0.0))
            log(f"skip   {rel}: no {preset_file.relative_to(root)}")
            continue
        named = {"preset": preset} if takes_preset(nb) else {}  # walkthroughs have no preset parameter
        parameters = {**named, **(read_yaml_file(preset_file, 'preset') or {}), **(overrides or {})}
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
    ran = [r for r in runs if r.status != "no preset"]
    failed = sum(r.status == "failed" for r in ran)
    skipped = len(runs) - len(ran)
    log(f"{len(ran) - failed} of {len(ran)} notebooks ran without error in {total:.1f} s (preset {preset!r}"
        + (f"; {skipped} skipped, without this preset" if skipped else "") + f"); executed copies in {out_dir}")
    return runs
