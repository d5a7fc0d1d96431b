"""pFedFDA (McLaughlin & Su, NeurIPS 2024): its settings and its reported numbers.

Settings (section 5.1 and appendix C, with the authors' code for what the paper leaves
out): 100 clients, each joining a round independently with probability q = 0.3
(``sampling: bernoulli``), the last round with every client, 200 rounds, E = 5, batch 50,
SGD lr 0.01, momentum 0.5, weight decay 5e-4; the data of train and test pooled, split by
PFLlib's Dirichlet generator with a minimum of 63 samples per client (the authors' code:
batch 50 / 0.8), each client's samples split 80/20 without stratification; 75/50/25% of
each client's training samples kept for the scarcity columns (the test split untouched).
"-S" (covariate shift): the first half of the clients corrupted, client i with corruption
i % 10 at severity i // 10 + 1 (``shift: {kind: corruption}``). The model is FedPAC's CNN
(LeakyReLU, d = 128): ``fedpac_cnn``.

The paper has no MNIST-family setting: :func:`pfedfda_config` builds the same protocol on
any image dataset here (Fashion-MNIST by default), and the tables below are the paper's
CIFAR / EMNIST / TinyImageNet / DIGIT-5 numbers, shown as references beside ours. In
FedPAC's Table 1 setting pFedFDA is ``pflcore.papers.fedpac.fedpac_config("pfedfda")``.

Differences that remain: the authors scale inputs to [-1, 1]; pflcore normalises every
dataset with its own exact statistics. The authors' frost corruption blends photographs of
frost; pflcore synthesises a frost texture (:mod:`pflcore.data.corruptions`).

Reported numbers (top-1 %, mean over clients at round 200; the paper's std over clients in
the ``*_STD`` twins), keyed by row label (``"method name=value"``,
:func:`pflcore.papers.split_label`): :data:`PFEDFDA_TABLE1` (column ``"cifar10-s 25"``
etc. -> method), :data:`PFEDFDA_TABLE2` (``"cifar10 dir0.1"`` ...), :data:`PFEDFDA_TABLE3`
(one batch per client), :data:`PFEDFDA_TABLE4` (new clients: ``"original"``, ``"clean"``,
then one column per corruption), :data:`PFEDFDA_TABLE5` (beta strategies),
:data:`PFEDFDA_TABLE6` (runtime), :data:`PFEDFDA_TABLE7` (DIGIT-5), :data:`PFEDFDA_TABLE8`
(communication, as printed), :data:`PFEDFDA_TABLE9` (share of local training time per step).

The notebooks' settings beyond :func:`pfedfda_config`: :func:`pfedfda_setting_config` (a
column label such as ``"dir0.5 -S 25%"``), :func:`pfedfda_digit5_config` (Table 7); and their
helpers: :func:`beside_paper`, :func:`lead`, :func:`new_client_scores`,
:func:`round_seconds`, :func:`beta_overhead`, :func:`with_gains`, :func:`parameter_counts`.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..analysis import results_table
from ..config import ExperimentConfig
from ..data.sources.multidomain import MEMBERS
from ..engine import RunResult
from ..engine.revisit import new_client_accuracy
from ..models import build_model
from . import split_label

#: The methods of pFedFDA's tables, in the paper's order (pflcore names).
PFEDFDA_METHODS = ("local", "fedavg", "fedavg_ft", "apfl", "ditto", "fedbabu", "fedpac", "fedrep", "fedrod",
                   "lg_fedavg", "pfedme", "pfedfda")

#: The baselines' hyperparameters in pFedFDA's experiments (appendix C.2): APFL alpha 0.25,
#: pFedMe lambda 5, Ditto mu 1 with 5 personal epochs, FedRep / FedBABU 5 head epochs,
#: FedPAC lambda 1 with one head epoch at lr 0.1 (FedPAC's own defaults).
PFEDFDA_METHOD_PARAMS: dict[str, dict[str, Any]] = {
    "apfl": {"alpha": 0.25},
    "pfedme": {"lam": 5.0},
    "ditto": {"lam": 1.0, "personal_epochs": 5},
    "fedrep": {"head_epochs": 5},
    "fedbabu": {"ft_epochs": 5},
    "fedavg_ft": {"ft_epochs": 5},
    "fedpac": {"lam": 1.0, "head_epochs": 1, "head_lr": 0.1},
}

#: The covariate-shift setting: the first half of the clients corrupted, unique pairs.
PFEDFDA_SHIFT: dict[str, Any] = {"kind": "corruption", "fraction": 0.5}


def pfedfda_config(method: str, dataset: str = "fmnist", alpha: float = 0.5, *, corrupted: bool = False,
                   samples: float = 1.0, **changes: Any) -> ExperimentConfig:
    """A run in pFedFDA's setting: ``dataset`` split Dir(``alpha``) over 100 clients (q = 0.3,
    the last round full), ``corrupted`` adds the "-S" covariate shift, ``samples`` keeps that
    fraction of each client's training data (Table 1's 100/75/50/25%). ``method`` may be a
    row label such as ``"pfedfda beta=multi"``; the baselines get pFedFDA's hyperparameters
    (:data:`PFEDFDA_METHOD_PARAMS`). ``changes`` override any field."""
    method, label_params = split_label(method)
    partition: dict[str, Any] = {"kind": "pfllib_dirichlet", "alpha": alpha, "least_samples": 63,
                                 "train_fraction": 0.8}
    if samples < 1.0:
        partition["subsample"] = samples
    values: dict[str, Any] = dict(
        method=method, dataset=dataset, model="fedpac_cnn", num_clients=100, participation=0.3,
        sampling="bernoulli", full_last_round=True, rounds=200, local_epochs=5, batch_size=50, lr=0.01,
        momentum=0.5, weight_decay=5e-4, eval_every=10, seed=0, partition=partition,
        shift=dict(PFEDFDA_SHIFT) if corrupted else None,
    )
    given = changes.pop("method_params", None)
    params = {**(PFEDFDA_METHOD_PARAMS.get(method, {}) if given is None else given), **label_params}
    if params:
        values["method_params"] = params
    values.update(changes)
    return ExperimentConfig.from_dict(values)


def parse_setting(setting: str) -> tuple[float, float, bool]:
    """A column label such as ``"dir0.1"``, ``"dir0.1 25%"``, ``"dir0.5 -S"`` or ``"dir0.5 -S
    25%"`` -> (alpha, percent of the training samples kept, corrupted)."""
    words = setting.split()
    alpha = float(words[0].removeprefix("dir"))
    percent = next((float(w[:-1]) for w in words[1:] if w.endswith("%")), 100.0)
    return alpha, percent, "-S" in words[1:]


def pfedfda_setting_config(method: str, dataset: str, setting: str, *, subsample: float = 1.0,
                           **changes: Any) -> ExperimentConfig:
    """:func:`pfedfda_config` for a column label (:func:`parse_setting`), keeping ``subsample``
    times the column's share of the training samples (1 in the paper presets)."""
    alpha, percent, corrupted = parse_setting(setting)
    return pfedfda_config(method, dataset, alpha, corrupted=corrupted, samples=subsample * percent / 100, **changes)


def pfedfda_digit5_config(method: str, percent: float, *, clients_per_domain: int, alpha: float,
                          subsample: float = 1.0, data_root: str | None = None, **changes: Any) -> ExperimentConfig:
    """Table 7's run: DIGIT-5, ``clients_per_domain`` clients per digit dataset split
    Dir(``alpha``) within it, 80/20 train/test, every client in every round, ``percent``% of
    the training samples kept (times ``subsample``)."""
    partition: dict[str, Any] = {"kind": "domains", "clients_per_domain": clients_per_domain, "alpha": alpha,
                                 "on": "union", "train_fraction": 0.8}
    if subsample * percent / 100 < 1:
        partition["subsample"] = subsample * percent / 100
    return pfedfda_config(method, "digit5", data_root=data_root, num_clients=clients_per_domain * len(MEMBERS["digit5"]),
                          participation=1.0, sampling="uniform", partition=partition, **changes)


def beside_paper(runs: Mapping[str, RunResult], paper: Mapping[str, float], paper_std: Mapping[str, float],
                 reference: str):
    """Our runs (final round: mean and std over clients) beside a column of the paper's, a
    reference (its dataset is not ours), with the paper's std over clients."""
    table = results_table(runs, paper=paper)
    table["paper_std"] = [paper_std.get(m, np.nan) for m in table.index]
    table = table[["acc_mean", "acc_std", "acc_weighted", "seconds", "status", "paper", "paper_std"]]
    return table.rename(columns={"paper": f"{reference} (paper)", "paper_std": f"{reference} std (paper)"})


def lead(scores: Mapping[str, float]) -> float:
    """pFedFDA minus the best other method (NaN without pFedFDA or without another method)."""
    others = [v for m, v in scores.items() if m != "pfedfda" and np.isfinite(v)]
    return scores.get("pfedfda", np.nan) - max(others) if others else np.nan


def mean_std_cell(values: Sequence[float]) -> str:
    """``"mean (std)"`` over the clients scored, as the paper prints Table 4."""
    return f"{np.nanmean(values):.2f} ({np.nanstd(values):.2f})"


def new_client_scores(result: RunResult, corruption: str | None, severity: int,
                      params: dict | None = None) -> np.ndarray:
    """Table 4: per-client accuracy (%) of the new clients (NaN for the training clients),
    clean (``corruption`` None) or under ``corruption`` at ``severity``; ``params`` changes
    the method's adaptation (e.g. FedBABU's ``{"ft_body": True}``)."""
    if corruption is None and params is None:
        return result.clients["new_final"]
    return new_client_accuracy(result, corruption, severity, method_params=params)


def round_seconds(result: RunResult) -> tuple[float, float]:
    """Tables 5 and 6: (seconds per round, seconds per round and participating client),
    medians over the rounds without an evaluation (all rounds if every round was evaluated);
    the run records cumulative seconds."""
    per_round = np.diff([0.0] + [h["seconds"] for h in result.history])
    clients = np.array([max(len(h["participants"]), 1) for h in result.history])
    plain = np.array(["acc_mean" not in h for h in result.history])
    keep = plain if plain.any() else np.ones_like(plain)
    return float(np.median(per_round[keep])), float(np.median(per_round[keep] / clients[keep]))


def beta_overhead(results: Mapping[str, Mapping[str, RunResult]], strategy: str, settings: Sequence[str]) -> float:
    """Table 5's overhead (%) of a beta strategy over ``"none"`` (strategy -> setting ->
    result): the mean over settings of the ratio of seconds per client-round, minus 1."""
    if "none" not in results:
        return np.nan
    return 100 * np.mean([round_seconds(results[strategy][s])[1] / round_seconds(results["none"][s])[1] - 1
                          for s in settings])


def fit_to_data(ax, values: Sequence[float]) -> None:
    """The value axis over the data with a margin (as :func:`pflcore.analysis.plot_bars`
    does), not from 0, so that differences of a point or two stay visible."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if values.size:
        low, high = values.min(), values.max()
        span = max(high - low, 1e-9)
        ax.set_ylim(low - 0.25 * span - 0.5, high + 0.3 * span + 0.5)  # room for the legend


def with_gains(table, base: str = "local"):
    """Each column's gain over the row ``base`` beside it, and the average gain, as Table 7
    prints them (the table unchanged without that row)."""
    out = table.copy()
    if base in table.index:
        gains = table - table.loc[base]
        for c in table.columns:
            out[f"{c} (+)"] = gains[c]
        out["avg. improvement"] = gains.mean(axis=1)
        out.loc[base, "avg. improvement"] = np.nan
    return out[[*[x for c in table.columns for x in (c, f"{c} (+)") if x in out], "avg. improvement"]
               if base in table.index else list(table.columns)]


def upload(backbone: int, linear: int, gaussian: int) -> dict[str, float]:
    """Table 8: a client's upload per round with a linear head and with pFedFDA's Gaussian
    head (class means and one shared covariance), and the Gaussian head's overhead (%)."""
    return {"backbone": backbone, "linear C(d+1)": linear, "Gaussian Cd+d(d+1)/2": gaussian,
            "overhead %": 100 * (gaussian - linear) / (backbone + linear),
            "upload, linear head": backbone + linear, "upload, pFedFDA": backbone + gaussian}


def parameter_counts(model_name: str, channels: int, size: int, classes: int) -> dict[str, float]:
    """Table 8 for one of pflcore's models: its feature size d, classes C and :func:`upload`."""
    model = build_model(model_name, channels, classes, size)
    d = model.head.in_features
    linear = classes * (d + 1)
    assert linear == sum(p.numel() for p in model.head.parameters())  # a linear head: C x d weights, C biases
    return {"d": d, "C": classes, **upload(sum(p.numel() for p in model.body.parameters()), linear,
                                           classes * d + d * (d + 1) // 2)}


# ---------------------------------------------------------------- reported numbers
_NAMES = {"Local Only": "local", "Local": "local", "FedAvg": "fedavg", "FedAvgFT": "fedavg_ft", "APFL": "apfl",
          "Ditto": "ditto", "FedBABU": "fedbabu", "FedPAC": "fedpac", "FedRep": "fedrep", "FedRoD": "fedrod",
          "LG-FedAvg": "lg_fedavg", "pFedMe": "pfedme", "pFedFDA": "pfedfda"}


def _parse(columns: list[str], text: str) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Rows 'Method .586(.12) ...' as printed -> (column -> method -> %, the stds likewise)."""
    means: dict[str, dict[str, float]] = {c: {} for c in columns}
    stds: dict[str, dict[str, float]] = {c: {} for c in columns}
    for line in text.strip().splitlines():
        name = next(n for n in sorted(_NAMES, key=len, reverse=True) if line.startswith(n + " "))
        cells = line[len(name):].split()
        assert len(cells) == len(columns), line
        for column, cell in zip(columns, cells):
            mean, std = cell.rstrip(")").split("(")
            means[column][_NAMES[name]] = round(100 * float(mean), 2)
            stds[column][_NAMES[name]] = round(100 * float(std), 2)
    return means, stds


PFEDFDA_TABLE1, PFEDFDA_TABLE1_STD = _parse(
    [f"{d}-s {p}" for d in ("cifar10", "cifar100") for p in (100, 75, 50, 25)], """
Local Only .586(.12) .476(.16) .461(.15) .435(.14) .157(.05) .136(.05) .123(.04) .093(.04)
FedAvg .464(.13) .410(.19) .389(.17) .321(.14) .233(.06) .212(.06) .187(.05) .114(.04)
FedAvgFT .682(.10) .579(.19) .561(.17) .526(.16) .302(.06) .273(.05) .241(.06) .160(.05)
APFL .611(.12) .520(.17) .508(.16) .504(.16) .164(.05) .148(.04) .131(.05) .105(.04)
Ditto .668(.10) .578(.18) .558(.17) .527(.16) .295(.05) .274(.06) .239(.05) .141(.05)
FedBABU .602(.12) .522(.17) .495(.16) .467(.15) .187(.05) .170(.05) .148(.05) .107(.04)
FedPAC .679(.09) .642(.19) .594(.16) .533(.18) .360(.07) .330(.07) .283(.07) .162(.05)
FedRep .612(.10) .541(.17) .510(.16) .486(.16) .176(.05) .158(.05) .131(.04) .100(.04)
FedRoD .655(.11) .554(.18) .537(.18) .499(.14) .218(.05) .186(.05) .150(.04) .115(.04)
LG-FedAvg .584(.13) .483(.16) .466(.15) .433(.14) .166(.05) .153(.05) .127(.05) .091(.04)
pFedMe .679(.10) .583(.18) .549(.17) .523(.16) .289(.06) .268(.06) .237(.06) .153(.05)
pFedFDA .724(.09) .706(.10) .661(.11) .595(.12) .361(.08) .342(.08) .326(.08) .227(.07)""")

PFEDFDA_TABLE2, PFEDFDA_TABLE2_STD = _parse(
    ["emnist writers", "cifar10 dir0.1", "cifar10 dir0.5", "cifar100 dir0.1", "cifar100 dir0.5",
     "tinyimagenet dir0.1", "tinyimagenet dir0.5"], """
Local .242(.23) .865(.13) .585(.13) .368(.09) .150(.05) .270(.07) .099(.03)
FedAvg .790(.14) .545(.12) .625(.07) .245(.06) .252(.05) .155(.04) .150(.04)
FedAvgFT .844(.10) .902(.10) .742(.08) .499(.09) .314(.06) .384(.07) .213(.04)
APFL .841(.10) .882(.11) .656(.11) .388(.09) .169(.05) .350(.09) .177(.05)
Ditto .843(.10) .898(.10) .736(.08) .504(.08) .308(.06) .386(.07) .211(.04)
FedBABU .728(.13) .887(.11) .678(.11) .395(.09) .193(.04) .365(.07) .179(.04)
FedPAC .856(.09) .908(.09) .767(.07) .560(.08) .378(.06) .366(.07) .180(.04)
FedRep .735(.12) .889(.10) .668(.10) .398(.09) .182(.05) .359(.07) .145(.04)
FedRoD .747(.15) .885(.11) .713(.09) .424(.08) .224(.05) .382(.07) .209(.05)
LG-FedAvg .666(.13) .866(.13) .599(.12) .381(.09) .162(.05) .280(.07) .105(.03)
pFedMe .842(.10) .900(.10) .740(.09) .493(.08) .311(.06) .388(.07) .218(.04)
pFedFDA .844(.10) .902(.09) .763(.07) .523(.08) .385(.07) .384(.07) .214(.04)""")

_T3 = dict(zip(("fedavg_ft", "ditto", "apfl", "fedbabu", "pfedme", "fedrod", "fedpac", "pfedfda"), zip(
    ".692(.17) .708(.17) .698(.17) .684(.19) .683(.16) .631(.19) .710(.16) .725(.16)".split(),
    ".324(.14) .308(.14) .405(.15) .369(.15) .305(.14) .306(.14) .407(.15) .499(.16)".split())))
#: Table 3, one mini-batch (50 samples) of training data per client, Dir(0.5).
PFEDFDA_TABLE3: dict[str, dict[str, float]] = {
    d: {m: round(100 * float(cells[i].split("(")[0]), 2) for m, cells in _T3.items()}
    for i, d in enumerate(("cifar10", "cifar100"))}

#: Table 4's columns: the original (training) clients, then the new clients' clean data and
#: each corruption at severity 3 (pflcore's corruption names).
PFEDFDA_TABLE4_COLUMNS = ("original", "clean", "motion_blur", "defocus_blur", "gaussian_noise", "shot_noise",
                          "impulse_noise", "frost", "fog", "jpeg_compression", "brightness", "contrast")
PFEDFDA_TABLE4, PFEDFDA_TABLE4_STD = _parse(list(PFEDFDA_TABLE4_COLUMNS), """
FedAvg .592(.07) .584(.08) .512(.09) .554(.08) .568(.07) .575(.07) .569(.07) .465(.08) .467(.08) .580(.07) .557(.08) .359(.10)
FedAvgFT .716(.08) .709(.08) .689(.08) .704(.09) .695(.09) .699(.09) .696(.09) .680(.09) .672(.09) .711(.08) .707(.08) .688(.09)
FedBABU .703(.10) .691(.09) .682(.08) .685(.09) .683(.09) .680(.09) .679(.09) .651(.10) .661(.09) .690(.08) .689(.09) .670(.09)
FedPAC .727(.09) .724(.09) .695(.09) .708(.09) .714(.09) .712(.09) .705(.09) .682(.10) .683(.09) .716(.09) .718(.09) .667(.09)
pFedFDA .738(.08) .738(.08) .702(.09) .719(.09) .729(.08) .739(.07) .725(.08) .695(.09) .684(.09) .738(.08) .733(.08) .689(.09)""")

#: Table 5 (CIFAR-100): beta strategy -> column -> %, and the strategy's extra seconds per
#: round (% over NB).
PFEDFDA_TABLE5: dict[str, dict[str, float]] = {
    label: dict(zip(("dir0.1", "dir0.1 25%", "dir0.1 -S", "dir0.5", "dir0.5 25%", "dir0.5 -S", "overhead %"),
                    values))
    for label, values in {
        "pfedfda beta=none": (45.8, 38.2, 43.6, 32.0, 21.6, 29.6, 0.0),
        "pfedfda beta=single": (52.3, 39.6, 48.7, 38.5, 26.6, 36.1, 22.35),
        "pfedfda beta=multi": (51.4, 42.3, 48.0, 37.9, 27.5, 37.3, 36.11),
    }.items()}

#: Table 6 (CIFAR-10): local training seconds per round and total minutes.
PFEDFDA_TABLE6: dict[str, dict[str, float]] = {
    m: {"local_seconds": s, "total_minutes": t} for m, s, t in (
        ("fedavg", 18.42, 61.41), ("apfl", 21.41, 71.35), ("ditto", 19.97, 66.87), ("fedbabu", 17.41, 58.11),
        ("fedrep", 34.82, 116.95), ("fedpac", 33.60, 146.3), ("pfedfda", 22.58, 77.71))}

#: Table 7 (DIGIT-5, 20 clients, 4 per domain, Dir(0.5) within a domain): % of samples -> method -> %.
PFEDFDA_TABLE7: dict[int, dict[str, float]] = {
    p: {m: row[i] for m, row in {
        "local": (76.84, 83.11, 86.97, 88.51), "fedavg": (81.75, 85.09, 87.41, 88.19),
        "fedavg_ft": (85.61, 88.72, 90.75, 91.73), "ditto": (83.85, 85.53, 87.43, 88.80),
        "fedpac": (82.78, 87.94, 91.12, 91.04), "pfedfda": (86.54, 90.05, 90.75, 91.56)}.items()}
    for i, p in enumerate((25, 50, 75, 100))}

#: Table 8 as printed: model (dataset, classes) -> (backbone, linear classifier, Gaussian
#: parameters, overhead %).
PFEDFDA_TABLE8: dict[str, tuple[int, int, int, float]] = {
    "EMNIST-CNN (EMNIST, C=62)": (115776, 7998, 16192, 6.620),
    "CIFAR-CNN (CIFAR100, C=100)": (106400, 12900, 21056, 6.837),
    "ResNet18 (TinyImageNet, C=200)": (11167212, 102600, 233728, 1.164),
    "MobileNetV3-Small (ImageNet, C=1000)": (927008, 1615848, 1548800, -2.637),
}

#: Table 9: % of pFedFDA's local training time per step of Algorithm 1 (mean over clients).
PFEDFDA_TABLE9: dict[str, dict[str, float]] = {
    "cifar10": {"network passes": 84.88, "statistics": 0.765, "beta": 14.36},
    "cifar100": {"network passes": 77.70, "statistics": 2.861, "beta": 19.43},
    "tinyimagenet": {"network passes": 87.41, "statistics": 2.701, "beta": 9.886},
}

__all__ = ["PFEDFDA_METHODS", "PFEDFDA_METHOD_PARAMS", "PFEDFDA_SHIFT", "PFEDFDA_TABLE1", "PFEDFDA_TABLE1_STD",
           "PFEDFDA_TABLE2", "PFEDFDA_TABLE2_STD", "PFEDFDA_TABLE3", "PFEDFDA_TABLE4", "PFEDFDA_TABLE4_COLUMNS",
           "PFEDFDA_TABLE4_STD", "PFEDFDA_TABLE5", "PFEDFDA_TABLE6", "PFEDFDA_TABLE7", "PFEDFDA_TABLE8",
           "PFEDFDA_TABLE9", "beside_paper", "beta_overhead", "fit_to_data", "lead", "mean_std_cell",
           "new_client_scores", "parameter_counts", "parse_setting", "pfedfda_config", "pfedfda_digit5_config",
           "pfedfda_setting_config", "round_seconds", "upload", "with_gains"]
