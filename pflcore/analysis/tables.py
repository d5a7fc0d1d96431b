"""Result tables: our numbers beside the paper's, with the difference."""
from __future__ import annotations

from typing import Mapping

from ..engine.results import RunResult


def results_table(results: Mapping[str, RunResult], paper: Mapping[str, float] | None = None):
    """A pandas DataFrame, one row per run: final mean +- std over clients, weighted mean,
    best evaluated round's mean, seconds. With ``paper`` (label -> reported accuracy, e.g.
    ``pflcore.papers.fedpac.FEDPAC_TABLE2["fmnist"]``) also the paper's number and ours
    minus the paper's; the paper's rows we did not run are listed too, marked "not
    implemented yet" or "not run", never silently dropped."""
    import pandas as pd

    from ..algorithms import ALGORITHMS

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
    for label, value in (paper or {}).items():
        if label not in results:
            status = "not run" if label in ALGORITHMS else "not implemented yet"
            rows.append({"method": label, "paper": value, "status": status})
    return pd.DataFrame(rows).set_index("method")


def sweep_table(results: Mapping[str, Mapping[float, RunResult]], xname: str):
    """Final mean accuracy (%) of each method (rows) at each swept value (columns)."""
    import pandas as pd

    table = pd.DataFrame({label: {x: r.summary["acc_mean"] for x, r in by_x.items()}
                          for label, by_x in results.items()}).T
    table.columns.name = xname
    return table
