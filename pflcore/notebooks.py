"""Execute the notebook collection with papermill, one preset at a time.

Notebook ``notebooks/<dir>/<NN_>name.ipynb`` takes its parameters from
``params/<dir>/<name>/<preset>.yaml`` (a leading ``NN_`` ordering prefix is dropped), e.g.
``notebooks/00_quickstart.ipynb`` -> ``params/quickstart/smoke.yaml``. Executed copies go
to ``<out>/<preset>/...``; the source notebooks stay without outputs. A preset is a plain
name (letters, digits, ``-``, ``_``) that some notebook has a file for.
"""
from __future__ import annotations

import ast
import json
import logging
import os
import platform
import re
import statistics
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
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
    finished: str | None = None  # when it ended (UTC, ISO 8601): summary.json keeps each notebook's last run


def params_path(notebook: Path, root: Path, preset: str) -> Path:
    """Where a notebook's preset lives (see module docstring)."""
    rel = notebook.relative_to(root / "notebooks")
    stem = re.sub(r"^\d+_", "", rel.stem)
    return root / "params" / rel.parent / stem / f"{preset}.yaml"


#: Parameters holding a path: :func:`use_preset` resolves them with :func:`project_path`.
PATH_PARAMETERS = ("output_dir", "figures_dir", "data_root")
#: Parameters that choose which of a preset's runs execute (methods, seeds, a table's columns), never
#: how one trains: a run they narrow to is still the preset's run.
SELECTION_PARAMETERS = ("methods", "seed", "seeds", "settings", "sample_percents")
#: Parameters that never change a run's numbers: where results and figures go, printing, retraining.
NEUTRAL_PARAMETERS = ("preset", "output_dir", "figures_dir", "quiet", "train", "download")


def preset_changes(preset_values: dict, smoke: dict, namespace: dict, given: set[str]) -> dict:
    """The notebook parameters in ``namespace`` whose values differ from those the preset
    gives (``preset_values``, else the smoke value), leaving out the selection and neutral
    ones: ``{}`` for the preset's own runs. A run's record keeps them, and the report's tables
    take only records of their paper preset's runs (a run at the paper preset with, say,
    ``local_epochs`` changed is another setting). A path is compared where it points, and
    kept relative to the project. ``given``: the names papermill set (their defaults are unknown,
    so one the presets never name counts as changed)."""
    changes = {}
    for name in sorted((set(preset_values) | set(smoke) | set(given)) - set(SELECTION_PARAMETERS)
                       - set(NEUTRAL_PARAMETERS)):
        if name not in namespace:
            continue
        value = namespace[name]
        if name in PATH_PARAMETERS and isinstance(value, (str, Path)):
            value = str(project_path(value).resolve())
        if name in preset_values or name in smoke:
            expected = preset_values.get(name, smoke.get(name))
            if name in PATH_PARAMETERS and isinstance(expected, (str, Path)):
                expected = str(project_path(expected).resolve())
            if value == expected:
                continue
        changes[name] = records.relative_path(value) if name in PATH_PARAMETERS and isinstance(value, str) else value
    return changes


#: How long :func:`declared_parameters` waits for a notebook file that JupyterLab is writing.
NOTEBOOK_WRITE_WAIT_S = 5.0


def _notebook_cells(path: Path) -> list:
    """A notebook file's cells, waiting (up to :data:`NOTEBOOK_WRITE_WAIT_S`) while it is being
    written: Jupyter's server saves a notebook by truncating the file and writing it again in
    place, so a kernel reading it during an autosave sees an empty or cut-off file. Returns []
    if it never parses (the caller then reads the kernel's own first cell)."""
    deadline = time.monotonic() + NOTEBOOK_WRITE_WAIT_S
    while True:
        try:
            cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
            return cells if isinstance(cells, list) else []
        except (OSError, ValueError, AttributeError):  # mid-write (empty or cut off), gone, or not a notebook
            if time.monotonic() >= deadline:
                return []
            time.sleep(0.1)


def declared_parameters(notebook: str, namespace: dict | None = None, root: Path | None = None) -> dict:
    """The defaults of a notebook's parameters cell (the literal ones, as papermill reads
    them): from the committed notebook whose preset folder is ``notebook``
    (``"fedpac/t2_ablation"`` -> ``notebooks/fedpac/t2_ablation.ipynb``, a leading ``NN_``
    allowed), or, for a notebook copied out of the project or whose file cannot be read
    (:func:`_notebook_cells`), from the first cell this kernel ran (IPython's ``In``). Each
    parameter is checked against the kind of its default (:func:`check_parameter_types`),
    whatever preset sets it."""
    sources = []
    if root is not None:
        folder, _, stem = notebook.rpartition("/")
        candidates = sorted((root / "notebooks" / folder).glob("*.ipynb")) if (root / "notebooks" / folder).is_dir() \
            else []
        for path in candidates:
            if re.sub(r"^\d+_", "", path.stem) == stem:
                cells = _notebook_cells(path)
                sources = ["".join(c.get("source", "")) for c in cells
                           if "parameters" in c.get("metadata", {}).get("tags", [])]
                break
    if not sources:  # out of the project, or not found: the first cell of this kernel
        sources = [src for src in (namespace or {}).get("In") or () if isinstance(src, str) and src.strip()][:1]
    declared = {}
    for source in sources[:1]:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    declared[node.targets[0].id] = ast.literal_eval(node.value)
                except ValueError:  # not a literal (an expression): its kind is unknown, not checked
                    continue
    return declared


def _kind_words(example) -> tuple[str, tuple] | None:
    for words, types in (("true or false", (bool,)), ("a list", (list, tuple)), ("a mapping", (dict,)),
                         ("a number", (int, float)), ("text", (str,))):
        if isinstance(example, types):
            return words, types
    return None


def check_parameter_types(notebook: str, declared: dict, namespace: dict, choices: dict | None = None,
                          source: str = "") -> None:
    """Refuse, in the parameter's own terms and before any work, a notebook parameter whose
    value is not of the kind of its default in the parameters cell (``declared``: a list, a
    mapping, true/false, a number, text), or (``choices``: parameter -> allowed values, a
    paper module's :data:`NOTEBOOK_CHOICES`) names something not allowed: papermill's
    ``-p variants Both`` passes the text 'Both' where a list of variants belongs."""
    from .errors import ConfigError, shorten
    from .spec import did_you_mean

    where = source or "the parameters cell"
    for name, example in declared.items():
        if name not in namespace or example is None:
            continue
        value = namespace[name]
        if value is None:
            continue
        kind = _kind_words(example)
        if kind is None:
            continue
        words, types = kind
        if not isinstance(value, types) or (types != (bool,) and isinstance(value, bool)):
            hint = ""
            if words == "a list":
                items = ", ".join(map(str, example[:2])) if example else "a, b"
                hint = (f"; give a list, e.g. papermill -y '{name}: [{items}]' or pflcore notebooks -p {name} "
                        f"'[{items}]'" + (" (papermill's -p passes its value as text, -y reads YAML)"
                                          if isinstance(value, str) and value.lstrip().startswith("[") else ""))
            elif words == "a mapping":
                hint = f" (papermill: -y '{name}: {{key: value}}')"
            raise ConfigError(f"notebook parameter {name!r} = {shorten(value)} is not allowed: it must be {words}, "
                              f"like {where}'s {shorten(example)} in {notebook}{hint}.")
        allowed = (choices or {}).get(name)
        if allowed is None:
            continue
        allowed = list(allowed)
        for item in (value if isinstance(value, (list, tuple)) else [value]):
            if not any(type(item) is type(a) and item == a for a in allowed):
                what = "each item" if isinstance(value, (list, tuple)) else "it"
                raise ConfigError(f"notebook parameter {name!r} = {shorten(value)} is not allowed: {what} must be "
                                  f"one of {allowed}, and {shorten(item)} is not{did_you_mean(item, allowed)}.")


def use_preset(notebook: str, preset: str, namespace: dict, log=print) -> dict:
    """Give a notebook the values of its ``preset``; the first call of every notebook.

    The notebook's parameters cell holds its ``smoke`` values (so Run All in JupyterLab runs
    at the smoke scale) and ``preset``; ``notebook`` names its preset folder (``"fedfa/t2_label_skew"``
    -> ``params/fedfa/t2_label_skew/<preset>.yaml``). For another preset, each value of that
    file is set in ``namespace`` (the notebook's ``globals()``) unless the notebook changed
    it from its smoke value (an edit in Lab) or papermill set it (``-p``, even to the smoke
    value: :func:`papermill_parameters`): those are kept. Then the
    path parameters (:data:`PATH_PARAMETERS`) are resolved under the project
    (:func:`project_path`; the working directory is left alone) and ``figures_dir`` is
    created, and pflcore's palette becomes matplotlib's colour cycle (:func:`pflcore.analysis.palette.install`).
    Prints where results and figures go; returns the preset's values as applied."""
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
    given = papermill_parameters(namespace)
    for name, value in chosen.items() if preset != "smoke" else ():
        if name in namespace and name in smoke and (namespace[name] != smoke[name] or name in given):
            if namespace[name] != value:
                kept.append(name)  # changed from the smoke value by the user: theirs wins
        else:
            namespace[name] = value
    declared = {**smoke, **declared_parameters(notebook, namespace, root)}  # the cell's defaults first
    check_parameter_types(notebook, declared, namespace, notebook_choices(notebook))
    for name in PATH_PARAMETERS:
        if isinstance(namespace.get(name), (str, Path)):
            namespace[name] = str(project_path(namespace[name]))
    if "figures_dir" in namespace:
        try:
            Path(namespace["figures_dir"]).mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file on the way, no permission, a read-only disk: one sentence naming it
            from .errors import ConfigError, shorten

            what = (exc.strerror or type(exc).__name__).lower()
            raise ConfigError(f"notebook parameter 'figures_dir' = {shorten(namespace['figures_dir'])} is not a "
                              f"folder figures can be written to ({what}"
                              + (f": {exc.filename}" if exc.filename else "") + ").") from None
    where = ", ".join(f"{what} in {namespace[n]}" for n, what in (("output_dir", "results"), ("figures_dir", "figures"))
                      if n in namespace)
    changes = preset_changes(chosen, smoke, namespace, given) if preset != "smoke" else {}
    records.set_notebook(notebook, preset, train=namespace.get("train") is True, changes=changes)  # paper: records
    from .analysis.palette import install  # here, not at the top: the process that runs notebooks never draws

    install()  # the notebook's own plots get pflcore's colour-blind-safe colours too
    log(f"preset {preset!r} (params/{notebook}/{preset}.yaml)" + (f"; kept your {', '.join(kept)}" if kept else "")
        + (f": {where}" if where else ""))
    return {n: namespace.get(n) for n in chosen}


def notebook_choices(notebook: str) -> dict:
    """The allowed values of a paper notebook's parameters that name rows of a table
    (``{"variants": [...]}`` for ``fedpac/t2_ablation``): the paper module's
    ``NOTEBOOK_CHOICES[name]`` (``pflcore/papers/<paper>.py``); empty where it declares none."""
    import importlib

    paper, _, name = notebook.rpartition("/")
    if not paper or not re.fullmatch(r"[a-z0-9_]+", paper):
        return {}
    try:
        module = importlib.import_module(f"pflcore.papers.{paper}")
    except ImportError:
        return {}
    return dict(getattr(module, "NOTEBOOK_CHOICES", {}).get(name, {}))


def papermill_parameters(namespace: dict) -> set[str]:
    """The names papermill assigned in this kernel: its injected cell (the one whose source
    starts with ``# Parameters``) is in IPython's input history ``In``. A value set there is
    the caller's choice even where it equals the smoke value (``-p seeds "[0]"`` with the
    paper preset runs seed 0 alone, not the preset's five seeds)."""
    names: set[str] = set()
    for source in namespace.get("In") or ():
        if isinstance(source, str) and source.startswith("# Parameters\n"):
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            names |= {target.id for node in tree.body if isinstance(node, ast.Assign)
                      for target in node.targets if isinstance(target, ast.Name)}
    return names


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
        from .spec import did_you_mean

        raise PresetError(f"there is no preset {preset!r} under {root / 'params'}{did_you_mean(preset, presets)}; "
                          f"the presets are: {known}.")


def discover(root: Path, only: list[str] | None = None) -> list[Path]:
    """All notebooks of the collection in order, or (``only``) those whose path contains one of
    the names; an empty name, or one that matches no notebook, is refused in one sentence."""
    found = sorted(p for p in (root / "notebooks").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    if only is None:
        return found
    if not only or any(not pattern.strip() for pattern in only):
        raise ValueError("--only needs part of a notebook's path (e.g. --only t1_main), and an empty name "
                         "would select every notebook.")
    unmatched = [p for p in only if not any(p in str(nb.relative_to(root)) for nb in found)]
    if unmatched:
        from .spec import did_you_mean

        names = sorted({re.sub(r"^\d+_", "", nb.stem) for nb in found} | {nb.stem for nb in found})
        raise FileNotFoundError(f"no notebook under {root / 'notebooks'} has {', '.join(map(repr, unmatched))} "
                                f"in its path{did_you_mean(unmatched[0], names)}.")
    return [p for p in found if any(pattern in str(p.relative_to(root)) for pattern in only)]


def takes_preset(notebook: Path) -> bool:
    """Whether a notebook's parameters cell has a ``preset`` (every paper notebook does,
    :func:`use_preset`; the teaching walkthroughs do not)."""
    cells = json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])
    return any("parameters" in c.get("metadata", {}).get("tags", [])
               and re.search(r"^preset\s*=", "".join(c.get("source", "")), re.M) for c in cells)


def lab_metadata(python_version: str | None = None) -> dict:
    """The notebook metadata JupyterLab 4 writes for the project's kernel (the ``python3``
    ipykernel of the environment pflcore runs in): its kernelspec, and the language_info
    the kernel reports once it starts, with ``python_version`` (default: this Python's; a
    project notebook keeps its own, see :func:`pflcore.lab.keep_python_version`)."""
    return {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                          "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                          "pygments_lexer": "ipython3", "version": python_version or platform.python_version()},
    }


def canonical_notebook(text: str) -> str:
    """A notebook as JupyterLab saves it after opening it, without outputs: nbformat 4.5
    JSON (indent 1, sorted keys, a final newline), the kernel's metadata
    (:func:`lab_metadata`; the Python version the notebook records is kept, so tidying on
    another Python changes nothing), no outputs or execution counts, and cells keeping only
    their tags as metadata (papermill's and the execution timings go)."""
    import nbformat

    nb = nbformat.reads(text, as_version=4)
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags")
        cell["metadata"] = nbformat.NotebookNode({"tags": tags} if tags else {})
        if cell.cell_type == "code":
            cell["outputs"], cell["execution_count"] = [], None
    version = nb.metadata.get("language_info", {}).get("version")
    nb.metadata = nbformat.NotebookNode(lab_metadata(version if isinstance(version, str) else None))
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


#: Each notebook's seconds in the last full run of each preset (``{preset: {notebook: seconds}}``),
#: committed: ``pflcore notebooks`` estimates the time left from it and a full run updates it.
DURATIONS = Path("params") / "durations.json"

#: Messages of papermill and the kernel that say nothing a user can act on: papermill cannot
#: infer a parameter's type from a line like ``x = f(a=1)`` (the value is still set), and the
#: kernel listens on 127.0.0.1 over TCP, as every Jupyter kernel does.
QUIET_MESSAGES = ("Unable to parse line", "Passed unknown parameter")


class _DropMessages(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(QUIET_MESSAGES)


@contextmanager
def _quiet_papermill():
    """Papermill's harmless warnings (:data:`QUIET_MESSAGES`) filtered out while notebooks run;
    every other warning still reaches the user."""
    loggers = [logging.getLogger(name) for name in ("papermill", "papermill.translators", "papermill.execute")]
    quiet = _DropMessages()
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)


@contextmanager
def _environment(**values: str):
    """Environment variables set for the kernels started inside the block, restored after."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def read_durations(root: Path) -> dict[str, dict[str, float]]:
    """The recorded seconds per preset and notebook (:data:`DURATIONS`); empty when there is none."""
    try:
        data = json.loads((root / DURATIONS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {preset: {nb: float(s) for nb, s in per.items()} for preset, per in data.items() if isinstance(per, dict)} \
        if isinstance(data, dict) else {}


def record_durations(root: Path, runs: list[NotebookRun]) -> Path:
    """Merge the seconds of the notebooks that ran without error into :data:`DURATIONS`."""
    durations = read_durations(root)
    for run in runs:
        if run.status == "ok":
            durations.setdefault(run.preset, {})[run.notebook] = round(run.seconds, 1)
    path = root / DURATIONS
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({p: dict(sorted(d.items())) for p, d in sorted(durations.items())}, indent=1) + "\n")
    tmp.replace(path)
    return path


def time_left(remaining: list[str], finished: list[NotebookRun], recorded: dict[str, float]) -> float | None:
    """Seconds the ``remaining`` notebooks should take: their recorded seconds, scaled by how
    this run's finished notebooks compare with theirs (a busy or a faster machine); a notebook
    without a record counts as the median record, or as this run's mean without any record.
    None before anything can be said."""
    if not remaining:
        return 0.0
    done = [r for r in finished if r.status != "no preset"]
    paired = [(r.seconds, recorded[r.notebook]) for r in done if recorded.get(r.notebook)]
    pace = sum(s for s, _ in paired) / sum(rec for _, rec in paired) if paired else 1.0
    if recorded:
        typical = statistics.median(recorded.values())
        return pace * sum(recorded.get(nb, typical) for nb in remaining)
    if done:
        return len(remaining) * sum(r.seconds for r in done) / len(done)
    return None


def clock(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 02 min``: a duration for a person."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def merge_summary(path: Path, runs: list[NotebookRun]) -> list[dict]:
    """``summary.json`` with this run's notebooks replaced and every other notebook's last
    entry kept (a partial run never loses an earlier run's record; two runs ending at once
    take turns through a lock file beside it); returns what was written."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            earlier = json.loads(path.read_text(encoding="utf-8"))
            earlier = [e for e in earlier if isinstance(e, dict) and "notebook" in e] \
                if isinstance(earlier, list) else []
        except (OSError, ValueError):
            earlier = []
        ran = {r.notebook for r in runs}
        merged = sorted([e for e in earlier if e["notebook"] not in ran] + [asdict(r) for r in runs],
                        key=lambda e: e["notebook"])
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(merged, indent=1) + "\n")
        tmp.replace(path)
    return merged


def notebook_parameters(notebook: Path) -> set[str]:
    """The names a notebook's ``parameters`` cell defines (papermill's own reading)."""
    import papermill

    with _quiet_papermill():
        return set(papermill.inspect_notebook(str(notebook)))


def _kernel_manager(stderr):
    """A kernel manager class whose kernels write their own stderr to ``stderr`` (a file) and
    talk to it over CurveZMQ-encrypted TCP where the kernel supports it (jupyter_client's
    ``transport_encryption = "auto"``: the manager provisions the keys when the kernelspec
    declares ``supported_encryption: curve``, as ipykernel 7's does), so ipykernel has no
    "running over TCP without encryption" warning to give."""
    import zmq
    from jupyter_client.manager import AsyncKernelManager

    class KernelManager(AsyncKernelManager):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            if zmq.has("curve") and "transport_encryption" in self.trait_names():
                self.transport_encryption = "auto"

        async def start_kernel(self, **kw):
            kw.setdefault("stderr", stderr)
            return await super().start_kernel(**kw)

    return KernelManager


def execute(notebook: Path, target: Path, parameters: dict, cwd: Path, kernel: str = "python3") -> None:
    """Execute ``notebook`` with papermill into ``target``, working directory ``cwd``.

    What a cell prints goes into the executed copy, as always. The kernel's connection is
    encrypted (:func:`_kernel_manager`), so it does not warn about plain TCP. Its own stderr
    (its log, 'KeyboardInterrupt caught' as it shuts down) goes to a temporary file rather than the
    user's terminal, because a kernel can write there after the notebook has run (libzmq's
    'Assertion failed: pfd.revents & POLLIN' as its sockets close). A cell's error still fails the
    notebook. If the kernel itself fails (it dies, or does not start), the last line it wrote is
    added to the error."""
    import tempfile

    import papermill

    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as stderr:
        try:
            papermill.execute_notebook(str(notebook), str(target), parameters=parameters, cwd=str(cwd),
                                       kernel_name=kernel, progress_bar=False,
                                       kernel_manager_class=_kernel_manager(stderr))
        except papermill.PapermillExecutionError:
            raise
        except Exception as exc:
            stderr.seek(0)
            said = [line.strip() for line in stderr.read().splitlines() if line.strip()]
            if not said:
                raise
            message = str(exc).strip().splitlines()
            raise RuntimeError(f"{message[-1] if message else type(exc).__name__} (the kernel's last line on "
                               f"stderr: {said[-1]})") from exc


def run_notebooks(preset: str = "smoke", out: str | Path = "outputs", only: list[str] | None = None,
                  root: str | Path | None = None, kernel: str = "python3",
                  overrides: dict | None = None, parameters: dict | None = None, train: bool = False,
                  record: bool = False, log=print, running=None) -> list[NotebookRun]:
    """Execute every notebook that has ``preset``; returns one :class:`NotebookRun` each.

    ``parameters`` (``pflcore notebooks -p NAME VALUE``) replace preset values in the notebooks
    whose parameters cell defines them (a name no selected notebook defines is refused before
    anything runs); ``overrides`` replace preset values in every notebook (tests: ``output_dir``).
    ``train`` sets ``PFLCORE_TRAIN=1`` for the kernels (train even where run records exist).

    ``log`` gets one line per notebook as it ends, ``[k/N] status notebook seconds``, with the
    time left estimated from :data:`DURATIONS` (:func:`time_left`), then a closing line;
    ``running`` (if given) a line as each notebook starts. The run's entries are merged into
    ``<out>/<preset>/summary.json`` (:func:`merge_summary`); ``record`` also merges the
    seconds into :data:`DURATIONS` (``pflcore notebooks`` does on a full run)."""
    root = project_root(root)
    check_preset(preset, root)  # before anything runs or is written
    out_dir = Path(out).resolve() / preset
    notebooks = discover(root, only)
    if not notebooks:
        raise FileNotFoundError(f"no notebook under {root / 'notebooks'} matches {only}.")
    selected = [nb for nb in notebooks if params_path(nb, root, preset).exists()]
    if not selected:
        raise PresetError(f"none of the {len(notebooks)} selected notebook(s) has a {preset!r} preset; "
                          f"the presets are: {', '.join(available_presets(root))}.")
    defined = {nb: notebook_parameters(nb) for nb in selected} if parameters else {}
    unknown = sorted(set(parameters or {}) - set().union(*defined.values())) if parameters else []
    if unknown:
        from .spec import did_you_mean

        raise ValueError(f"no selected notebook has a parameter {', '.join(map(repr, unknown))} in its "
                         f"parameters cell{did_you_mean(unknown[0], sorted(set().union(*defined.values())))}, so "
                         f"-p {unknown[0]} would change nothing.")
    for nb in selected:  # -p values of the wrong kind: one sentence before any notebook runs
        chosen = {n: v for n, v in (parameters or {}).items() if n in defined.get(nb, ())}
        if chosen:
            key = str(params_path(nb, root, preset).parent.relative_to(root / "params"))
            check_parameter_types(key, declared_parameters(key, root=root), chosen, notebook_choices(key))
    recorded = read_durations(root).get(preset, {})
    todo = [str(nb.relative_to(root)) for nb in selected]
    total = len(selected)
    estimate = time_left(todo, [], recorded)
    log(f"running {total} notebook(s) at preset {preset!r}" + (f", about {clock(estimate)} going by the seconds "
        f"recorded in {DURATIONS}" if estimate and recorded else "") + f"; executed copies go to {out_dir}")
    runs: list[NotebookRun] = []
    env = {"PFLCORE_TRAIN": "1"} if train else {}
    with _quiet_papermill(), _environment(**env):
        for nb in notebooks:
            rel = nb.relative_to(root)
            preset_file = params_path(nb, root, preset)
            if not preset_file.exists():
                runs.append(NotebookRun(str(rel), preset, "no preset", 0.0))
                log(f"skip   {rel}: no {preset_file.relative_to(root)}")
                continue
            k = total - len(todo) + 1  # this notebook's place among those that run
            todo.remove(str(rel))
            if running is not None:
                expected = recorded.get(str(rel))
                running(f"[{k}/{total}] running {rel}" + (f" (about {clock(expected)} last time)" if expected else "")
                        + " ...")
            named = {"preset": preset} if takes_preset(nb) else {}  # walkthroughs have no preset parameter
            chosen = {n: v for n, v in (parameters or {}).items() if n in defined.get(nb, ())}
            values = {**named, **(read_yaml_file(preset_file, 'preset') or {}), **chosen, **(overrides or {})}
            target = out_dir / rel.relative_to("notebooks")
            target.parent.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            try:
                execute(nb, target, values, root, kernel)
                run = NotebookRun(str(rel), preset, "ok", time.perf_counter() - t0, str(target))
            except Exception as exc:  # papermill raises PapermillExecutionError with the cell's traceback
                message = str(exc).strip().splitlines()
                run = NotebookRun(str(rel), preset, "failed", time.perf_counter() - t0, str(target),
                                  message[-1] if message else repr(exc))
            run.finished = datetime.now(timezone.utc).isoformat(timespec="seconds")
            runs.append(run)
            left = time_left(todo, runs, recorded)
            log(f"[{k}/{total}] {run.status:6s} {rel}  {run.seconds:6.1f} s"
                + (f"  ({run.error})" if run.error else "")
                + (f"  about {clock(left)} left" if todo and left is not None else ""))
    merge_summary(out_dir / "summary.json", runs)
    if record:
        record_durations(root, runs)
    seconds = sum(r.seconds for r in runs)
    ran = [r for r in runs if r.status != "no preset"]
    failed = sum(r.status == "failed" for r in ran)
    skipped = len(runs) - len(ran)
    log(f"{len(ran) - failed} of {len(ran)} notebooks ran without error in {clock(seconds)} (preset {preset!r}"
        + (f"; {skipped} skipped, without this preset" if skipped else "") + f"); executed copies in {out_dir}, "
        f"each notebook's last run in {out_dir / 'summary.json'}")
    return runs
