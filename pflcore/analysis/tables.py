"""Result tables: our numbers beside the paper's, with the difference."""
from __future__ import annotations

from typing import Mapping, Sequence

from ..engine.results import RunResult


def results_table(results: Mapping[str, RunResult], paper: Mapping[str, float] | None = None,
                  missing: Sequence[str] = ()):
    """A pandas DataFrame, one row per method: final mean +- std over clients, weighted
    mean, best round's mean, seconds; with ``paper`` also the paper's number and ours
    minus the paper's. Methods in ``missing`` (not implemented yet) get a row marked so,
    never silently dropped."""
    import pandas as pd

    rows = []
    for label, res in results.items():
        s = res.summary
        row = {"method": label, "acc_mean": s["acc_mean"], "acc_std": s["acc_std"],
               "acc_weighted": s["acc_weighted"], "best_acc_mean": s["best_acc_mean"],
               "rounds": s["rounds"], "seconds": s["seconds"], "status": "ok"}
        if paper is not None:
            row["paper"] = paper.get(label, float("nan"))
            row["diff"] = row["acc_mean"] - row["paper"]
        rows.append(row)
    for label in missing:
        row = {"method": label, "status": "not implemented yet"}
        if paper is not None:
            row["paper"] = paper.get(label, float("nan"))
        rows.append(row)
    return pd.DataFrame(rows).set_index("method")
