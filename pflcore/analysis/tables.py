"""Result tables: our numbers beside the paper's, with the difference."""
from __future__ import annotations

from typing import Mapping, Sequence

from ..algorithms import ALGORITHMS
from ..engine.results import RunResult
from ..engine.revisit import global_test_accuracy
from ..papers import split_label

#: The global-model papers' metric (FedFA): the final global model on the dataset's whole
#: test set. Not in ``summary.json``; computed from the run's final state when a table asks
#: for it (:func:`pflcore.engine.revisit.global_test_accuracy`).
GLOBAL_TEST_ACC = "global_test_acc"


def metric_value(result: RunResult, metric: str) -> float:
    """A run's number for ``metric``: a key of its ``summary.json``, or ``"global_test_acc"``
    (computed once per loaded run, then kept in its in-memory summary)."""
    if metric == GLOBAL_TEST_ACC and metric not in result.summary:
        result.summary[metric] = global_test_accuracy(result)
    return result.summary[metric]


def results_table(results: Mapping[str, RunResult], paper: Mapping[str, float] | None = None,
                  metric: str = "acc_mean"):
    """A pandas DataFrame, one row per run: final mean +- std over clients, weighted mean,
    best evaluated round's mean and pooled accuracy, seconds. With ``paper`` (label ->
    reported accuracy, e.g. ``pflcore.papers.fedpac.FEDPAC_TABLE2["fmnist"]``) also the
    paper's number and ``metric`` (the summary number the paper reports: ``acc_mean`` for
    FedPAC's final mean over clients, ``best_acc_weighted`` for FedCP's best-round pooled
    accuracy) minus the paper's; the paper's rows we did not run are listed too, marked
    "not implemented yet" or "not run", never silently dropped."""
    import pandas as pd

    rows = []
    for label, res in results.items():
        s = res.summary
        row = {"method": label, "acc_mean": s["acc_mean"], "acc_std": s["acc_std"],
               "acc_weighted": s["acc_weighted"], "best_acc_mean": s["best_acc_mean"],
               "best_acc_weighted": s.get("best_acc_weighted", float("nan")),
               "rounds": s["rounds"], "seconds": s["seconds"], "status": "ok"}
        if metric not in row:
            row[metric] = metric_value(res, metric)
        if paper is not None:
            row["paper"] = paper.get(label, float("nan"))
            row["diff"] = row[metric] - row["paper"]
        rows.append(row)
    rows += _missing_rows(results, paper)
    return pd.DataFrame(rows).set_index("method")


def sweep_table(results: Mapping[str, Mapping[float, RunResult]], xname: str, metric: str = "acc_mean"):
    """``metric`` (default: final mean accuracy, %) of each method (rows) at each swept value
    (columns); FedCP's tables use ``best_acc_weighted``."""
    import pandas as pd

    table = pd.DataFrame({label: {x: metric_value(r, metric) for x, r in by_x.items()}
                          for label, by_x in results.items()}).T
    table.columns.name = xname
    return table


def seeds_table(results: Mapping[str, Sequence[RunResult]], paper: Mapping[str, float] | None = None,
                metric: str = "best_acc_weighted"):
    """Mean +- std over seeds, one row per method: ``metric`` (the number the paper reports,
    e.g. FedCP's best-round pooled accuracy ``best_acc_weighted``, FedFA's
    ``"global_test_acc"``) beside pflcore's one
    evaluation (final round, unweighted mean over clients); with ``paper`` also the paper's
    number and ours minus it. The paper's rows not run are listed ("not run" or "not
    implemented yet"), never dropped."""
    import numpy as np
    import pandas as pd

    rows = []
    for label, runs in results.items():
        values = np.array([metric_value(r, metric) for r in runs], dtype=float)
        final = np.array([r.summary["acc_mean"] for r in runs], dtype=float)
        row = {"method": label, metric: values.mean(), f"{metric}_std": values.std(), "acc_mean": final.mean(),
               "acc_mean_std": final.std(), "seeds": len(runs),
               "rounds": runs[0].summary["rounds"] if runs else 0, "status": "ok"}
        if paper is not None:
            row["paper"] = paper.get(label, float("nan"))
            row["diff"] = row[metric] - row["paper"]
        rows.append(row)
    rows += _missing_rows(results, paper)
    return pd.DataFrame(rows).set_index("method")


def _missing_rows(results: Mapping[str, object], paper: Mapping[str, float] | None) -> list[dict]:
    """The paper's rows that were not run: "not run" for a method pflcore has, else "not
    implemented yet" (tables list them, never drop them)."""
    from ..papers import runnable_rows

    variants = runnable_rows()  # an ablation's rows ("w FA", "w.o. cs"): pflcore runs them

    def implemented(label: str) -> bool:  # a "method name=value" label of a registered method
        if label in variants:
            return True
        try:
            return split_label(label)[0] in ALGORITHMS
        except ValueError:  # a free-text row not among them
            return False

    return [{"method": label, "paper": value, "status": "not run" if implemented(label) else "not implemented yet"}
            for label, value in (paper or {}).items() if label not in results]
