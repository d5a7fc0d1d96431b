"""The papers, one module each: ``pflcore/papers/<paper>.py`` holds the paper's
experimental settings as configs and the numbers it reports, so notebooks, tables and
scripts share one source. Every setting and helper a paper notebook uses lives here: the
config functions take the notebook's scale parameters (``rounds``, ``subsample``, ...), so
notebooks sharing a setting build identical configs and share finished runs, and the
notebooks define no function of their own (``tests/test_notebook_sources.py``).

Now: :mod:`pflcore.papers.fedpac` (FedPAC, Xu, Tong, Huang, ICLR 2023),
:mod:`pflcore.papers.fedcp` (FedCP, Zhang et al., KDD 2023),
:mod:`pflcore.papers.fedfa` (FedFA, Zhou, Zhang, Tsang: feature anchors) and
:mod:`pflcore.papers.pfedfda` (pFedFDA, McLaughlin, Su, NeurIPS 2024).
"""
from __future__ import annotations

import json
from typing import Any

import yaml

from ..data import sources
from ..data.sources.multidomain import MEMBERS


def split_label(label: str) -> tuple[str, dict[str, Any]]:
    """A table row's label as (method, method_params): ``"hypcluster k=3"`` gives
    ``("hypcluster", {"k": 3})``, ``"fedavg"`` gives ``("fedavg", {})``. Papers key the rows
    of a method run with several settings (FedPAC Table 4's k = 3 and k = 5) this way."""
    method, *assignments = label.split()
    params = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"row label {label!r} is not 'method name=value ...'.")
        params[key] = yaml.safe_load(value)
    return method, params


def join_label(method: str, params: dict[str, Any]) -> str:
    """The row label of ``method`` run with ``params``, :func:`split_label`'s inverse:
    ``("fedbabu", {"ft_body": True})`` gives ``"fedbabu ft_body=true"``. Each value is one word
    that reads back as itself (a string YAML would read otherwise is quoted)."""
    def word(value: Any) -> str:
        if isinstance(value, str) and " " not in value:
            try:
                if yaml.safe_load(value) == value:
                    return value
            except yaml.YAMLError:  # "[x": not a word YAML reads back
                pass
        return json.dumps(value, separators=(",", ":"))

    return " ".join([method, *(f"{key}={word(value)}" for key, value in params.items())])


#: How tables and figures name each method (the papers' spelling), keyed by pflcore's id.
DISPLAY_NAMES = {
    "local": "Local", "fedavg": "FedAvg", "fedavg_ft": "FedAvg-FT", "fedper": "FedPer", "lg_fedavg": "LG-FedAvg",
    "fedrep": "FedRep", "fedbabu": "FedBABU", "fedrod": "Fed-RoD", "knn_per": "kNN-Per", "apfl": "APFL",
    "pfedme": "pFedMe", "ditto": "Ditto", "fedfomo": "FedFomo", "pfedhn": "pFedHN", "fedpac": "FedPAC",
    "fedcp": "FedCP", "fedfa": "FedFA", "pfedfda": "pFedFDA", "fedprox": "FedProx", "scaffold": "SCAFFOLD",
    "feddyn": "FedDyn", "moon": "MOON", "fedproc": "FedProc", "fedproto": "FedProto", "perfedavg": "Per-FedAvg",
    "fedamp": "FedAMP", "fedphp": "FedPHP", "ccvr": "CCVR", "hypcluster": "HypCluster", "fedem": "FedEM",
    "fedem_ft": "FedEM-FT",
}
#: How figures name each dataset, keyed by pflcore's id.
DATASET_NAMES = {
    "fmnist": "Fashion-MNIST", "mnist": "MNIST", "emnist": "EMNIST", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100",
    "cinic10": "CINIC-10", "tinyimagenet": "Tiny-ImageNet", "agnews": "AG News", "digits": "digits (scikit-learn)",
    "svhn": "SVHN", "usps": "USPS", "synthdigits": "SynthDigits", "mnistm": "MNIST-M", "digit5": "Digit-Five",
}


def display_name(label: str) -> str:
    """A row label or a dataset as a reader expects it: ``"fedavg_ft"`` -> ``"FedAvg-FT"``,
    ``"hypcluster k=3"`` -> ``"HypCluster k=3"``, ``"fmnist"`` -> ``"Fashion-MNIST"``. A method
    missing from :data:`DISPLAY_NAMES` (one of your own) is named by its class's
    ``display_name`` if it sets one, else by its class name (``class FedXYZ`` -> ``"FedXYZ"``)."""
    method, _, rest = label.partition(" ")
    name = DISPLAY_NAMES.get(method) or DATASET_NAMES.get(method) or _method_class_name(method) or method
    return f"{name} {rest}" if rest else name


def _method_class_name(method: str) -> str | None:
    from ..algorithms.registry import ALGORITHMS

    cls = ALGORITHMS.get(method)
    if cls is None:
        return None
    return getattr(cls, "display_name", None) or cls.__name__


def runnable_rows() -> set[str]:
    """The table rows pflcore runs that are not method labels (FedPAC Table 2's "w FA", FedCP
    Table 1's "w.o. cs"): every value a paper module's ``NOTEBOOK_CHOICES`` allows. A table
    marks such a row "not run", never "not implemented yet", when a notebook runs a subset."""
    import importlib

    rows: set[str] = set()
    for paper in ("fedpac", "fedcp", "fedfa", "pfedfda"):
        module = importlib.import_module(f"{__name__}.{paper}")
        for parameters in getattr(module, "NOTEBOOK_CHOICES", {}).values():
            for allowed in parameters.values():
                rows.update(a for a in allowed if isinstance(a, str))
    return rows


def missing_members(dataset: str, data_root: str | None = None, download: bool = False) -> list[str]:
    """The members of a multi-domain dataset (``"digit5"``: Mixed Digits' five) that load neither
    from ``data_root`` nor from the usual places (nor, with ``download``, from the web): the
    notebooks of FedFA Tables 1 and 3 and pFedFDA Table 7 run only where this is empty."""
    missing = []
    for member in MEMBERS[dataset]:
        try:
            sources.load_dataset(member, root=data_root, download=download)
        except sources.DatasetNotFoundError:
            missing.append(member)
    return missing


__all__ = ["DATASET_NAMES", "DISPLAY_NAMES", "display_name", "join_label", "missing_members", "runnable_rows",
           "split_label"]
