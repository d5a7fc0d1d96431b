"""Replications: a shipped run record retrained here, to show whether its evidence holds on
this machine's numeric path (:mod:`pflcore.numerics`).

``python -m pflcore.replicate RECORD`` trains the record's exact config (same code, config and
seed) and sets the result beside the record (:func:`pflcore.records.compare`): on the same numeric
path the numbers must be bit-identical, on another one the run is judged against the seed spread
of its setting. With ``--keep`` (what the project does to ship one) the result is written as a
*replication record* in ``replications/`` beside the record: a full run record with
``replication_of`` (the record's file, both numeric paths, the verdict and the differences). A
replication never enters a row's mean (:func:`pflcore.records.all_records` skips it); the report
shows it beside the row.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from . import numerics, record_schema, records
from .errors import ConfigError


def replication_path(record_path: Path, record: dict) -> Path:
    """Where the replication of ``record_path`` on this run's numeric path is kept."""
    key = numerics.path_key(record["provenance"]["numeric_path"])
    return record_path.parent / records.REPLICATIONS / f"{record_path.stem}.on-{key}.json"


def replicate(record_path: str | Path, keep: bool = False, out: str | Path | None = None, log=print) -> dict:
    """Retrain the record at ``record_path`` and compare; returns the comparison (with ``verdict``
    and, where kept, ``written``: the replication record's path)."""
    from .config import ExperimentConfig, placed
    from .engine.simulation import record_of, run

    record_path = Path(record_path).resolve()
    record = records.read(record_path)
    if record.get("replication_of"):
        raise records.RecordError(f"{record_path} is itself a replication; replicate the record it names.")
    with tempfile.TemporaryDirectory(prefix="pflcore-replicate-", dir=out) as tmp:
        values = {**record["config"], "output_dir": str(Path(tmp) / "results"), "quiet": True}
        config = ExperimentConfig.from_dict(values)
        if config.fingerprint() != record["fingerprint"]:
            raise records.RecordError(f"{record_path}: its config gives fingerprint {config.fingerprint()}, not the "
                                      f"recorded {record['fingerprint']}; this pflcore cannot retrain it as it ran.")
        from .engine.executors import resolve_workers

        config = placed(config)  # where PFLCORE_DEVICE / PFLCORE_WORKERS move it, as run() will
        processes = resolve_workers(config.workers, device=config.device, num_clients=config.num_clients)
        here = numerics.numeric_path(config.device, config.workers, worker_processes=processes)
        log(f"retraining {record_path.name} ({config.rounds} rounds) on {numerics.in_words(here)}")
        with records.recording(record["notebook"], train=True, changes=record.get("preset_changes") or {}):
            result = run(config)
            comparison = records.compare(result, record_path)
            comparison["verdict"] = records.verdict(comparison)  # the engine has printed its line
            if keep:
                if comparison["verdict"] == "identical" and comparison["same_path"]:
                    log("not kept: it ran on the record's own numeric path, so it replicates nothing new.")
                    return comparison
                mine = record_of(result, record["notebook"])
                mine["replication_of"] = replication_of(record_path, record, comparison)
                target = replication_path(record_path, mine)
                record_schema.validate(mine, target)
                records._dump(mine, target)
                comparison["written"] = str(target)
                log(f"replication record written: {target}")
    return comparison


def replication_of(record_path: Path, record: dict, comparison: dict) -> dict:
    """The ``replication_of`` block of a replication record: what it replicates and the verdict."""
    return {"record": record_path.name, "fingerprint": record["fingerprint"],
            "record_numeric_path": record["provenance"].get("numeric_path"),
            "record_cpu_model": record["provenance"].get("cpu_model"),
            "same_path": comparison["same_path"], "verdict": comparison["verdict"],
            "metrics": comparison["metrics"], "largest_client_diff": comparison["largest_client_diff"],
            "clients_differing": comparison["clients_differing"], "clients": comparison["clients"],
            "spread": comparison["spread"], "rule": f"{records.PREDICTION:.0%} prediction interval of the seeds"}


def rejudge(replication: str | Path) -> dict:
    """A kept replication judged again from its own numbers and its record (no training): after
    the rule or the setting's recorded seeds change. Rewrites only ``replication_of``."""
    from .config import ExperimentConfig
    from .engine.results import RunResult

    path = Path(replication).resolve()
    mine = records.read(path)
    of = mine.get("replication_of")
    if not isinstance(of, dict):
        raise records.RecordError(f"{path} is not a replication record (no 'replication_of').")
    record_path = path.parent.parent / of["record"]
    record = records.read(record_path)
    result = RunResult.from_record(mine, ExperimentConfig(**{**mine["config"], "data_root": None}), path)
    comparison = records.compare(result, record_path)
    comparison["verdict"] = records.verdict(comparison)
    comparison["record_path"] = record_path
    mine["replication_of"] = replication_of(record_path, record, comparison)
    record_schema.validate(mine, path)
    records._dump(mine, path)
    return comparison


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pflcore.replicate", description=__doc__.split("\n\n")[0])
    parser.add_argument("record", help="a run record under reproductions/ (a .json file)")
    parser.add_argument("--keep", action="store_true",
                        help="write the result as a replication record in replications/ beside the record")
    parser.add_argument("--rejudge", action="store_true",
                        help="RECORD is a kept replication: judge it again from its numbers (no training)")
    args = parser.parse_args(argv)
    try:
        if args.rejudge:
            comparison = rejudge(args.record)
            print(records.comparison_line(comparison, comparison["record_path"]))
            return 1 if comparison["verdict"] in ("defect", "outside_spread") else 0
        comparison = replicate(args.record, keep=args.keep)
    except (records.RecordError, ConfigError, FileNotFoundError) as error:
        print(f"pflcore.replicate: {error}", file=sys.stderr)
        return 2
    return 1 if comparison["verdict"] in ("defect", "outside_spread") else 0


if __name__ == "__main__":
    sys.exit(main())
