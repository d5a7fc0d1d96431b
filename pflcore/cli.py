"""The ``pflcore`` command: ``pflcore run`` (one experiment) and ``pflcore notebooks``
(the notebook collection under papermill)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence


def _parse_assignment(text: str) -> tuple[list[str], Any]:
    import yaml

    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--set expects KEY=VALUE, got {text!r}.")
    key, value = text.split("=", 1)
    return key.strip().split("."), yaml.safe_load(value)


def _workers(text: str) -> int | str:
    """--workers: 'auto' (one process per core) or a number (0 = in this process)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--workers expects 'auto' or a number, got {text!r}.") from None


def _apply(values: dict, path: list[str], value: Any) -> None:
    for key in path[:-1]:
        values = values.setdefault(key, {})
    values[path[-1]] = value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pflcore", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run one experiment and write its results directory")
    run.add_argument("config", nargs="?", help="YAML file with ExperimentConfig fields")
    run.add_argument("--set", dest="assignments", action="append", default=[], type=_parse_assignment,
                     metavar="KEY=VALUE", help="override a field (dotted keys reach into mappings, "
                     "e.g. partition.s=0.5, method_params.mu=0.1); repeatable")
    for flag, kind in (("method", str), ("dataset", str), ("rounds", int), ("num-clients", int),
                       ("seed", int), ("output-dir", str), ("name", str), ("workers", _workers)):
        run.add_argument(f"--{flag}", type=kind)
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--overwrite", action="store_true", help="replace an existing results directory")

    nbs = sub.add_parser("notebooks", help="execute the notebooks with papermill for a preset")
    nbs.add_argument("--preset", default="smoke", help="parameter preset: smoke (CI-sized) or paper")
    nbs.add_argument("--out", default="outputs", help="folder for executed notebooks (default: outputs)")
    nbs.add_argument("--only", action="append", help="run only notebooks whose path contains this; repeatable")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        return _run(args)
    return _notebooks(args)


def _run(args: argparse.Namespace) -> int:
    import yaml

    from .config import ConfigError, ExperimentConfig
    from .engine import run

    values: dict = {}
    if args.config:
        with open(args.config) as f:
            values = yaml.safe_load(f) or {}
    for flag in ("method", "dataset", "rounds", "num_clients", "seed", "output_dir", "name", "workers"):
        if getattr(args, flag) is not None:
            values[flag] = getattr(args, flag)
    if args.quiet:
        values["quiet"] = True
    for path, value in args.assignments:
        _apply(values, path, value)
    try:
        config = ExperimentConfig.from_dict(values)
        result = run(config, overwrite=args.overwrite)
    except (ConfigError, FileNotFoundError, FileExistsError, ValueError) as exc:
        print(f"pflcore run: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result.summary, indent=1))
    print(f"results: {result.path}")
    return 0


def _notebooks(args: argparse.Namespace) -> int:
    from .notebooks import run_notebooks

    try:
        runs = run_notebooks(args.preset, args.out, args.only)
    except FileNotFoundError as exc:
        print(f"pflcore notebooks: {exc}", file=sys.stderr)
        return 2
    return 1 if any(r.status == "failed" for r in runs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
