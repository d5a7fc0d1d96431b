"""The pflcore command: pflcore run (one experiment), pflcore list (the methods, datasets,
partitions and parameters a config may name), pflcore notebooks (the notebook collection under
papermill), pflcore lab (JupyterLab in the project) and pflcore report (the reproduction report,
built from the run records).

A user's mistake or a known condition (a bad config, a missing file, a damaged result
file, a diverging run, Ctrl-C) is reported in one line and a non-zero exit code, never a
Python traceback; ``--debug`` (or ``PFLCORE_DEBUG=1``) shows the traceback instead.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pflcore", description=__doc__.split("\n\n")[0],
                                     epilog="First steps: pflcore run experiment.yaml (about half a minute); "
                                            "pflcore list methods; pflcore notebooks --only quickstart (about two "
                                            "minutes); pflcore lab. Each command's options: pflcore COMMAND --help.")
    parser.add_argument("--debug", action="store_true",
                        help="show Python tracebacks instead of one-line errors (also: PFLCORE_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run one experiment and write its results directory",
                         description="Run one experiment (or resume it from its last checkpoint, or load it if it "
                                     "finished before) and write its results directory.",
                         epilog="Example: pflcore run experiment.yaml --set partition.s=0.5 --set "
                                "method_params.mu=0.1 (experiment.yaml ships with pflcore). What a config may name: "
                                "pflcore list methods|datasets|partitions|shifts|fields, pflcore list params METHOD.")
    run.add_argument("config", nargs="?", help="YAML file of config fields (NAME: VALUE lines; pflcore list fields), "
                                               "e.g. experiment.yaml")
    run.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE",
                     help="override a field (dotted keys reach into mappings, e.g. partition.s=0.5, "
                     "method_params.mu=0.1); repeatable")
    for flag, kind in (("method", str), ("dataset", str), ("rounds", int), ("num-clients", int),
                       ("seed", int), ("output-dir", str), ("name", str), ("workers", _workers)):
        run.add_argument(f"--{flag}", type=kind, metavar=flag.replace("-", "_").upper(),
                         help=field_help(flag.replace("-", "_")))
    run.add_argument("--plugin", action="append", default=[], metavar="FILE_OR_MODULE",
                     help="load your own method first: a Python file (mymethod.py) or a module path "
                          "(mypackage.mymethod) defining a subclass of pflcore.algorithms.Algorithm; repeatable "
                          "(docs/your_method.md)")
    run.add_argument("--quiet", action="store_true",
                     help=_field_doc("quiet") + " (otherwise a bar in a terminal, one line per round into a file or a "
                                                "pipe)")
    run.add_argument("--json", action="store_true",
                     help="end with the run's summary as JSON (for programs) instead of the lines for a person")
    run.add_argument("--overwrite", action="store_true", help="replace an existing results directory")
    run.add_argument("--debug", dest="debug_here", action="store_true", help=argparse.SUPPRESS)

    listing = sub.add_parser("list", help="list the methods, datasets, partition kinds, shifts or config fields, "
                             "or the parameters of one method (or partition kind or shift)",
                             description="What a config may name. `pflcore list methods`, `pflcore list params "
                                         "fedprox`, `pflcore list params dominant` (a partition kind's parameters).")
    listing.add_argument("what", choices=LISTS, help="what to list; 'params' needs a NAME")
    listing.add_argument("name", nargs="?", help="with 'params': a method, a partition kind or a shift")
    listing.add_argument("--plugin", action="append", default=[], metavar="FILE_OR_MODULE",
                         help="load your own method first (as for pflcore run), so that it is listed too")
    listing.add_argument("--debug", dest="debug_here", action="store_true", help=argparse.SUPPRESS)

    nbs = sub.add_parser("notebooks", help="execute the notebooks with papermill for a preset")
    nbs.add_argument("--preset", default="smoke", help="parameter preset: smoke (CI-sized) or paper")
    nbs.add_argument("--out", default="outputs", help="folder for executed notebooks (default: outputs)")
    nbs.add_argument("--only", nargs="+", action="extend", metavar="NAME",
                     help="run only notebooks whose path contains one of these names (--only t1_main t2_ablation; "
                          "repeatable)")
    nbs.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                     help="set a notebook parameter over the preset's value (VALUE is read as YAML: 5, 0.1, "
                          "[0, 1], true); repeatable")
    nbs.add_argument("--train", action="store_true",
                     help="train every run again even where shipped run records exist (sets PFLCORE_TRAIN=1 "
                          "for the notebooks)")
    nbs.add_argument("--tidy", action="store_true",
                     help="run nothing: rewrite the notebooks in the form JupyterLab saves, without outputs "
                          "(do this before committing a notebook)")
    nbs.add_argument("--debug", dest="debug_here", action="store_true", help=argparse.SUPPRESS)

    lab = sub.add_parser("lab", allow_abbrev=False, help="start JupyterLab in the project (other options go to "
                         "`jupyter lab`, e.g. --no-browser --port 8889)",
                         description="Start this environment's JupyterLab in the project root (--allow-root when run "
                                     "as root), with no news pop-up and notebooks that never dirty the git clone. "
                                     "Options other than --setup go to `jupyter lab` (e.g. --no-browser --port 8889).")
    lab.add_argument("--setup", action="store_true",
                     help="start nothing: write the no-news default and the save hooks into this environment and "
                          "install the nbstripout git filter in the clone (what .ci/setup does)")
    lab.add_argument("--debug", dest="debug_here", action="store_true", help=argparse.SUPPRESS)

    report = sub.add_parser("report", help="build the reproduction report (static HTML) from the run records")
    report.add_argument("--out", default="outputs/report", help="folder for the site (default: outputs/report)")
    drawn = report.add_mutually_exclusive_group()  # committed figures include the notebooks' own
    drawn.add_argument("--no-notebooks", action="store_true",
                       help="only the pages drawn from the records, without executing the paper notebooks")
    drawn.add_argument("--figures", action="store_true",
                       help="also replace the committed figures under figures/ by those drawn from the records, "
                            "with figures/MANIFEST.json naming the records each one rests on")
    report.add_argument("--debug", dest="debug_here", action="store_true", help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, args.lab_options = parser.parse_known_args(argv)  # only `pflcore lab` passes options on (to Lab)
    if args.lab_options and args.command != "lab":
        parser.error(f"unrecognized arguments: {' '.join(args.lab_options)}")
    debug = args.debug or args.debug_here or os.environ.get("PFLCORE_DEBUG", "") not in ("", "0")
    command: Callable[[argparse.Namespace], int] = {"run": _run, "list": _list, "notebooks": _notebooks,
                                                   "lab": _lab, "report": _report}[args.command]
    try:
        return command(args)
    except BrokenPipeError:  # `pflcore list methods | head`: the reader has all it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error as Python flushes stdout at exit
        return 0
    except (Interrupted, KeyboardInterrupt) as exc:
        if debug:
            raise
        print(f"pflcore {args.command}: {str(exc) or 'interrupted.'}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if debug:
            raise
        print(f"pflcore {args.command}: {describe(exc)}", file=sys.stderr)
        return EXIT_USER_ERROR if isinstance(exc, _known_errors()) else 1


class Interrupted(Exception):
    """Ctrl-C stopped a run; the message says where it can resume."""


class RunStopped(OSError):
    """The system stopped a run (disk full, a permission); the message names the path and
    where the same command resumes."""


def describe(exc: BaseException) -> str:
    """One line for the user: the message of a known error, or the kind and message of an
    unexpected one with a pointer to ``--debug``."""
    text = shorten_line(" ".join(str(exc).split()) or type(exc).__name__)
    if isinstance(exc, OSError) and exc.errno is not None and exc.strerror:
        return os_problem(exc)
    if isinstance(exc, _known_errors()):
        return text
    return f"unexpected {type(exc).__name__}: {text} (run with --debug to see the traceback)"


def os_problem(exc: OSError) -> str:
    """An operating-system error (disk full, a file where a folder should be, no permission)
    as a sentence naming the path: ``/dev/null/x: not a directory.``"""
    paths = [str(p) for p in (exc.filename, exc.filename2) if p is not None]
    what = exc.strerror[0].lower() + exc.strerror[1:] if exc.strerror else type(exc).__name__
    where = " -> ".join(shorten_line(p, 200) for p in paths)
    return f"{where}: {what}." if where else f"{what}."


def shorten_line(text: str, limit: int = 2000) -> str:
    """``text`` cut to ``limit`` characters (an error quoting an enormous value stays one readable line)."""
    return text if len(text) <= limit else f"{text[:limit // 2]} ... {text[-limit // 4:]}"


def _known_errors() -> tuple[type[BaseException], ...]:
    """Errors that describe a user's mistake or a known condition in their message."""
    from .engine.simulation import DivergenceError, RunParked, RunTooSlow

    return (ValueError, OSError, DivergenceError, RunParked, RunTooSlow)


# ---------------------------------------------------------------------- help and pflcore list
#: Where the help of a field whose choices are known only at run time points to.
_LISTED = {"method": "pflcore list methods", "dataset": "pflcore list datasets"}


def field_help(name: str) -> str:
    """The help of ``pflcore run --NAME``, made from the config field's spec (the same one that
    validates it): what it means, what it allows and its default."""
    from .config import FIELDS
    from .spec import default_words

    spec = FIELDS[name]
    allowed = f"see `{_LISTED[name]}`" if name in _LISTED else spec.describe()
    return f"{spec.doc}: {allowed} (default: {default_words(spec)})".replace("%", "%%")


def _field_doc(name: str) -> str:
    from .config import FIELDS

    return FIELDS[name].doc


LISTS = ("methods", "datasets", "partitions", "shifts", "fields", "params")


def _list(args: argparse.Namespace) -> int:
    for plugin in args.plugin:
        load_plugins([plugin])
    print(listing(args.what, args.name))
    return 0


def load_plugins(plugins: Sequence[str]) -> list[str]:
    """``--plugin``: import each file or module and register the methods it defines."""
    from .algorithms import load_plugin

    names = []
    for plugin in plugins:
        names += load_plugin(plugin)
    return names


def _columns(rows: list[tuple[str, ...]]) -> str:
    """Rows of text as aligned columns (the last one left ragged)."""
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join([*(cell.ljust(w) for cell, w in zip(r, widths)), r[-1]]).rstrip() for r in rows)


def _first_sentence(text: str | None, limit: int = 100) -> str:
    """The first sentence of a docstring, cut to ``limit`` characters (one line of a listing)."""
    text = " ".join((text or "").split())
    end = text.find(". ")
    text = text if end < 0 else text[:end + 1]
    return text if len(text) <= limit else text[:limit - 3].rstrip(" ,;:") + "..."


def _fields_table(fields: dict) -> str:
    from .spec import default_words

    return _columns([("name", "default", "allowed", "meaning")] + [
        (name, default_words(spec), spec.describe() + (f" ({spec.why})" if spec.why else ""), spec.doc)
        for name, spec in fields.items()])


def listing(what: str, name: str | None = None) -> str:
    """The text of ``pflcore list WHAT [NAME]``: one line per method, dataset, partition kind,
    shift or config field, or (``params NAME``) the parameters of a method, partition kind or
    shift with their defaults, what they allow and what they mean (from the specs that check them)."""
    import inspect

    from .errors import ConfigError
    from .spec import did_you_mean

    if what != "params" and name is not None:
        raise ConfigError(f"pflcore list {what} takes no name ({name!r}); for the parameters of one method, "
                          f"`pflcore list params {name}`.")
    if what == "methods":
        from .algorithms import ALGORITHMS
        from .papers import display_name

        rows = [(n, display_name(n), _first_sentence(inspect.getmodule(cls).__doc__ or cls.__doc__ or cls.paper))
                for n, cls in sorted(ALGORITHMS.items())]
        return (_columns([("method", "name", "what it is")] + rows)
                + "\n\nA method's parameters: pflcore list params METHOD (set them with --set "
                  "method_params.NAME=VALUE).")
    if what == "datasets":
        from .data.sources import DATASETS
        from .papers import display_name

        return (_columns([("dataset", "name")] + [(d, display_name(d) if d != "pfllib" else "a PFLlib folder "
                                                   "(data_root: clients already split)") for d in DATASETS])
                + "\n\nWhere each is found or downloaded from: docs/data.md.")
    if what == "partitions":
        from .data.partition import KINDS

        return (_columns([("kind", "parameters", "what it is")] + [
            (k, ", ".join(kind.params), kind.doc) for k, kind in KINDS.items()])
            + "\n\nA kind's parameters: pflcore list params KIND; in a config, partition: {kind: KIND, ...}.")
    if what == "shifts":
        from .data.shifts import PARAMETERS, SHIFTS

        return (_columns([("kind", "parameters", "what it is")] + [
            (k, ", ".join(PARAMETERS[k]), doc) for k, doc in SHIFTS.items()])
            + "\n\nA shift's parameters: pflcore list params KIND; in a config, shift: {kind: KIND, ...}.")
    if what == "fields":
        from .config import FIELDS

        return (_fields_table(dict(FIELDS))
                + "\n\nSet one with --set NAME=VALUE or a line NAME: VALUE in the config file.")
    # params NAME
    from .algorithms import ALGORITHMS
    from .data.partition import KINDS, SUBSAMPLE
    from .data.shifts import PARAMETERS

    if not name:
        raise ConfigError("pflcore list params needs a NAME: a method (pflcore list methods), a partition kind "
                          "(pflcore list partitions) or a shift (pflcore list shifts), e.g. pflcore list params "
                          "fedprox.")
    if name in ALGORITHMS:
        method = ALGORITHMS[name]
        head = f"{name} ({method.paper})" if method.paper else name
        if not method.hyperparams:
            return f"{head} has no parameters."
        return (f"{head}: set with --set method_params.NAME=VALUE, or method_params: {{NAME: VALUE}} in the config\n"
                + _fields_table(dict(method.hyperparams)))
    if name in KINDS:
        return (f"partition kind {name} ({KINDS[name].doc}): partition: {{kind: {name}, NAME: VALUE}} or "
                f"--set partition.NAME=VALUE\n" + _fields_table({**KINDS[name].params, "subsample": SUBSAMPLE}))
    if name in PARAMETERS:
        return f"shift {name}: shift: {{kind: {name}, NAME: VALUE}}\n" + _fields_table(dict(PARAMETERS[name]))
    known = sorted({*ALGORITHMS, *KINDS, *PARAMETERS})
    raise ConfigError(f"{name!r} is neither a method, a partition kind nor a shift{did_you_mean(name, known)}; "
                      f"pflcore list methods, partitions or shifts shows them.")


# ---------------------------------------------------------------------- pflcore run
def _workers(text: str) -> int | str:
    """--workers: 'auto' (one process per core), 'vectorised' or a number (0 = in this process)."""
    if text in ("auto", "vectorised"):
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--workers expects 'auto', 'vectorised' or a number, got {text!r}.") from None


def parse_assignment(text: str) -> tuple[list[str], Any]:
    """``KEY=VALUE`` of ``--set``: a dotted key and a YAML value (``5e-4`` is a number)."""
    from .errors import ConfigError
    from .yaml_io import load_yaml

    key, sep, value = text.partition("=")
    path = key.strip().split(".")
    if not sep or not all(part.strip() for part in path):
        raise ConfigError(f"--set expects KEY=VALUE with a field name as KEY (e.g. partition.s=0.5), got {text!r}.")
    return [part.strip() for part in path], load_yaml(value, f"the value of --set {key.strip()}")


def apply_assignment(values: dict, path: list[str], value: Any) -> None:
    """Set ``values[path[0]][path[1]]... = value``, creating mappings on the way; a step
    through a value that is not a mapping is one sentence."""
    from .errors import ConfigError

    here = values
    for depth, key in enumerate(path[:-1]):
        nxt = here.setdefault(key, {})
        if not isinstance(nxt, dict):
            where = ".".join(path[:depth + 1])
            raise ConfigError(f"--set {'.'.join(path)}: {where!r} is {nxt!r}, not a mapping, so it has no "
                              f"field {path[depth + 1]!r}.")
        here = nxt
    here[path[-1]] = value


def _run(args: argparse.Namespace) -> int:
    from .engine.results import OVERWRITE_FLAG_ENV

    saved = os.environ.get(OVERWRITE_FLAG_ENV)
    os.environ[OVERWRITE_FLAG_ENV] = "--overwrite"  # a results folder in the way: the sentence names the flag
    try:
        return _run_command(args)
    finally:
        if saved is None:
            os.environ.pop(OVERWRITE_FLAG_ENV, None)
        else:
            os.environ[OVERWRITE_FLAG_ENV] = saved


def _run_command(args: argparse.Namespace) -> int:
    from .config import ExperimentConfig, read_config_file
    from .engine import run
    from .errors import ConfigError

    load_plugins(args.plugin)  # before the config is checked: it may name their methods
    values: dict = read_config_file(args.config) if args.config else {}
    for flag in ("method", "dataset", "rounds", "num_clients", "seed", "output_dir", "name", "workers"):
        if getattr(args, flag) is not None:
            values[flag] = getattr(args, flag)
    if args.quiet:
        values["quiet"] = True
    for text in args.assignments:
        apply_assignment(values, *parse_assignment(text))
    if "method" not in values:
        where = f"config file {args.config!r} names" if args.config else "the command names"
        raise ConfigError(f"{where} no method: add 'method: NAME' to the file, --method NAME or --set method=NAME "
                          "(pflcore list methods shows them).")
    config = ExperimentConfig.from_dict(values)
    target = Path(config.output_dir) / config.run_name()
    print(f"pflcore run: {config.method} on {config.dataset}, {config.num_clients} clients, {config.rounds} rounds "
          f"-> {target}", file=sys.stderr)
    loaded = not args.overwrite and _finished(target)
    if loaded:
        print(f"pflcore run: {target} holds this run, finished: loading it, not training (--overwrite trains it "
              f"again)", file=sys.stderr)
    try:
        result = run(config, overwrite=args.overwrite)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted; {_resume_hint(target)}") from None
    except OSError as exc:
        if exc.errno is None or not exc.strerror:  # pflcore's own sentence (a results folder in the way)
            raise
        # the system refused a read or write (disk full, permissions): say where, and what happens next
        what = os_problem(exc).rstrip(".")
        where = what if exc.filename else f"{target}: {what} writing the run's files"
        raise RunStopped(f"{where}; once that is fixed, {_resume_hint(target)}") from exc
    print(json.dumps(result.summary, indent=1) if args.json else run_report(result.summary, result.path, loaded))
    return 0


def _finished(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a finished run (its summary says so)."""
    try:
        return json.loads((run_dir / "summary.json").read_text(encoding="utf-8")).get("status") == "finished"
    except (OSError, ValueError, AttributeError):
        return False


def run_report(summary: dict, path: str | Path, loaded: bool = False) -> str:
    """The lines ``pflcore run`` ends with, for a person: method and dataset, final and best
    accuracy (mean over clients, in percent), the time and where the run is (``--json``: the summary as JSON).
    ``loaded``: the run had finished before and was read from disk, not trained (the time is the first run's)."""
    def minutes(seconds: float) -> str:
        return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {seconds % 60:02.0f} s"

    status = summary.get("status", "finished")
    if loaded:
        status += "; loaded from disk, not trained again"
    lines = [f"{summary['method']} on {summary['dataset']}, {summary.get('num_clients', '?')} clients: "
             f"{summary['rounds']} rounds in {minutes(float(summary.get('seconds', 0.0)))} ({status})",
             f"accuracy, mean over clients: final {summary['acc_mean']:.2f}% (std {summary['acc_std']:.2f}), "
             f"best {summary['best_acc_mean']:.2f}% at round {summary['best_round']}",
             f"results in {path} (summary.json, metrics.json, clients.npz)"]
    return "\n".join(lines)


def _resume_hint(run_dir: Path) -> str:
    """Where the same command would pick up: the round after the last checkpoint."""
    import warnings

    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            next_round = int(torch.load(run_dir / "checkpoint.pt", weights_only=True)["next_round"])
    except Exception:  # no checkpoint yet, or not readable: the run starts over
        next_round = 0
    if next_round == 0:
        return "no checkpoint was written yet, so the same command starts again from round 1."
    return f"the same command resumes from round {next_round + 1} (the last checkpoint)."


# ---------------------------------------------------------------------- pflcore notebooks
def _notebooks(args: argparse.Namespace) -> int:
    from .notebooks import run_notebooks, tidy_notebooks
    from .yaml_io import load_yaml

    if args.tidy:
        tidy_notebooks(only=args.only)
        return 0
    parameters = {name: load_yaml(value, f"the value of -p {name}") for name, value in args.parameter}
    # each notebook's line reaches a log file or a pipe when the notebook ends
    getattr(sys.stdout, "reconfigure", lambda **_: None)(line_buffering=True)
    live = sys.stdout.isatty()  # in a terminal, a line saying which notebook runs now, replaced when it ends

    def log(line: str) -> None:
        print(("\r\033[K" if live else "") + line, flush=True)

    def running(line: str) -> None:
        sys.stdout.write("\r\033[K" + line)
        sys.stdout.flush()

    runs = run_notebooks(args.preset, args.out, args.only, parameters=parameters, train=args.train,
                         record=not (args.only or parameters or args.train),  # durations of full runs only
                         log=log, running=running if live else None)
    return 1 if any(r.status == "failed" for r in runs) else 0


# ---------------------------------------------------------------------- pflcore lab
def _lab(args: argparse.Namespace) -> int:
    from .lab import configure, start_lab
    from .notebooks import project_root

    root = project_root()
    if args.setup:
        if args.lab_options:
            raise ValueError(f"pflcore lab --setup starts nothing, so it takes no Lab options "
                             f"({' '.join(args.lab_options)}).")
        configure(root)
        return 0
    start_lab(root, args.lab_options)  # replaces this process by JupyterLab
    return 0


# ---------------------------------------------------------------------- pflcore report
def _report(args: argparse.Namespace) -> int:
    from .report import FAILED, build, commit_figures, failures

    index = build(args.out, execute=not args.no_notebooks)
    if args.figures:  # refused, figures/ untouched, when a notebook failed
        manifest = commit_figures(index.parent)
        print(f"figures drawn from the records: {manifest.parent} (which records each rests on: {manifest})")
    print(f"open {index} in a browser")
    failed = failures(index.parent)
    if failed:
        print(f"pflcore report: {len(failed)} notebook(s) failed to execute "
              f"({', '.join(f['notebook'] for f in failed)}), so the site lacks their pages and figures; "
              f"the errors are in {index.parent / FAILED}.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
