"""Pinned numbers: every registered method's numbers and every paper preset's config
fingerprint, hashed and compared with the values in ``tests/pinned_numbers.json``.

Records of finished runs are keyed by config fingerprint, so a change that moves any
method's numbers for the same config (or any paper config's fingerprint) would make a
shipped record lie. A method's pin is the SHA-256 of its per-round records (minus timings),
its per-client accuracy history and its final server and client states after 2 rounds of a
tiny federation (digits and an MLP, 4 clients x 40 samples, 1 local epoch; and, so that
oneDNN's convolutions are covered as in the records, each paper model family on
Fashion-MNIST), run in this process and again with 2 worker processes: both must give it.

The last bits follow the CPU's *numeric path* (``pflcore.numerics``: ATen's CPU capability,
oneDNN's instruction set, MKL's code path, the threads), not its vendor, so the exact pins are
kept per numeric path. On a path that has pins, the hash must match exactly. On a path with
none yet, the same runs are checked against the reference metrics stored beside the pins
(training losses and the final state's RMS and random projections within a relative 2e-6,
accuracies within one test sample of one client: see :data:`RTOL` for the measurements), and
the session says so in one line; a change that moves numbers beyond ten times what a change of
path does fails on every host, a smaller one only where the path has exact pins. The test
never goes red for a mere change of host, and never skips.

Regenerate only for a change meant to move numbers, in its own commit, with the reason in
the message (once so far: per-client accuracies became percent, issue 32)::

    OMP_NUM_THREADS=1 python tests/test_pinned_numbers.py --write NAME [NAME ...]  # one method's pin
    OMP_NUM_THREADS=1 python tests/test_pinned_numbers.py --write                   # this path's pins

The first adds or replaces the named runs' pins on this path and their reference metrics;
the second adds exact pins for this host's numeric path, and refuses if any run is outside
the tolerance of the reference metrics (a host never pins moved numbers).
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PINS = Path(__file__).with_name("pinned_numbers.json")
sys.path.insert(0, str(Path(__file__).parent))

from conftest import FEDCP_MNIST  # noqa: E402
from pflcore.algorithms import ALGORITHMS  # noqa: E402
from pflcore.config import ExperimentConfig  # noqa: E402
from pflcore import numerics  # noqa: E402

#: Runs on top of the plain tiny MLP runs: the paper presets' model families (CNNs, whose
#: convolutions run in oneDNN, on Fashion-MNIST), FedFA's feature probe (Fig. 4) and
#: pFedFDA's new-client evaluation (Table 4).
FEATURE_RUNS: dict[str, tuple[str, dict[str, Any]]] = {
    "fedpac+fedpac_cnn": ("fedpac", {"dataset": "fmnist", "model": "fedpac_cnn"}),  # FedPAC, pFedFDA presets
    "fedcp+fedcp_cnn": ("fedcp", {"dataset": "fmnist", "model": "fedcp_cnn"}),  # FedCP presets
    "fedfa+fedfa_cnn": ("fedfa", {"dataset": "fmnist", "model": "fedfa_cnn"}),  # FedFA presets
    "fedfa+feature_probe": ("fedfa", {"feature_probe": 3}),
    "fedavg+feature_probe": ("fedavg", {"feature_probe": 3}),
    "pfedfda+new_clients": ("pfedfda", {"num_clients": 6, "new_clients": 0.34}),
    "fedavg_ft+new_clients": ("fedavg_ft", {"num_clients": 6, "new_clients": 0.34}),
}


def pinned_config(out: Path, method: str, **changes: Any) -> ExperimentConfig:
    values = dict(method=method, dataset="digits", model="mlp", num_clients=4, rounds=2, local_epochs=1,
                  batch_size=16, lr=0.05, partition={"kind": "dominant", "s": 0.2, "samples_per_client": 40},
                  eval_every=1, output_dir=str(out), quiet=True, seed=7, workers=0)
    values.update(changes)
    return ExperimentConfig.from_dict(values)


def _feed(h: "hashlib._Hash", value: Any) -> None:
    """Feed ``value`` into ``h`` canonically (dict keys sorted; tensors by dtype, shape, bytes)."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(value, np.ndarray):
        a = np.ascontiguousarray(value)
        h.update(f"A{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    elif isinstance(value, dict):
        h.update(b"{")
        for k in sorted(value, key=str):
            h.update(repr(k).encode())
            _feed(h, value[k])
        h.update(b"}")
    elif isinstance(value, (list, tuple)):
        h.update(b"[")
        for v in value:
            _feed(h, v)
        h.update(b"]")
    elif isinstance(value, float):
        h.update(("nan" if math.isnan(value) else float.hex(value)).encode())
    else:
        h.update(f"{type(value).__name__}:{value!r}".encode())


def run_numbers(config: ExperimentConfig) -> tuple[str, dict[str, Any]]:
    """The pin of one run (its records minus timings, accuracy history and final states,
    hashed) and its metrics for the tolerance check on a numeric path without pins."""
    from pflcore.engine.simulation import run

    result = run(config)
    h = hashlib.sha256()
    _feed(h, [{k: v for k, v in rec.items() if k != "seconds"} for rec in result.history])
    _feed(h, np.asarray(result.acc_history))
    state = result.final_state()
    _feed(h, state)
    vector = torch.cat([t.detach().double().reshape(-1) for t in _tensors(state) if t.is_floating_point()])
    nans = int(vector.isnan().sum())  # e.g. the states of clients never trained
    vector = torch.nan_to_num(vector, nan=0.0)
    rms = float(vector.norm() / math.sqrt(vector.numel()))
    metrics = {"train_loss": [float(rec["train_loss"]) for rec in result.history],
               "acc_history": np.asarray(result.acc_history, dtype=float).round(9).tolist(),
               "test_sizes": [int(n) for n in result.clients["test_sizes"]],
               "state_rms": rms, "state_projections": _projections(vector), "state_nans": nans}
    return h.hexdigest(), metrics


def _projections(vector: torch.Tensor, count: int = 4) -> list[float]:
    """The final state (flattened, float64) on ``count`` fixed random directions, each scaled
    like its RMS: unlike a sum, a projection does not let changes cancel or dilute."""
    out = []
    for k in range(count):
        direction = torch.randn(vector.numel(), generator=torch.Generator().manual_seed(1000 + k), dtype=torch.float64)
        out.append(float(direction @ vector / math.sqrt(vector.numel())))
    return out


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for k in sorted(value, key=str):
            yield from _tensors(value[k])
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


#: The relative tolerance of a run's losses and final state on a path without pins: ten times the
#: largest change of numeric path measured on the 38 pinned runs. On an AMD EPYC (Zen 4) host, six
#: paths against its default (ATen AVX2 and DEFAULT, oneDNN AVX2 and SSE41, MKL COMPATIBLE, all
#: three pinned) moved a loss by at most 1.7e-7 and the state by 2.0e-7; an Intel Xeon (AVX-512,
#: AMX) host's default path moved them by 1.0e-7 and 1.2e-7. Against it, FedProx with its
#: proximal weight 10 % heavier moves the loss by 8.4e-6 and the state by 3.1e-6 (fails here);
#: 1 % heavier moves them by 8.8e-7 and 3.1e-7, within the tolerance: only exact pins catch that.
RTOL = 2e-6


def outside_tolerance(ours: dict, ref: dict) -> list[str]:
    """What of a run's metrics moved beyond what a change of numeric path explains (empty: none)."""
    moved = []
    if len(ours["train_loss"]) != len(ref["train_loss"]):
        return [f"{len(ours['train_loss'])} rounds, not {len(ref['train_loss'])}"]
    for i, (a, b) in enumerate(zip(ours["train_loss"], ref["train_loss"])):
        if not math.isclose(a, b, rel_tol=RTOL, abs_tol=1e-7):
            moved.append(f"round {i + 1}'s train loss {a:.9g} (pinned {b:.9g})")
    scale = ref["state_rms"]
    for i, (a, b) in enumerate(zip([ours["state_rms"], *ours["state_projections"]],
                                   [ref["state_rms"], *ref["state_projections"]])):
        if not abs(a - b) <= RTOL * scale + 1e-12:
            what = "RMS" if i == 0 else f"projection {i}"
            moved.append(f"the final state's {what} {a:.9g} (pinned {b:.9g})")
    if ours["state_nans"] != ref["state_nans"]:
        moved.append(f"{ours['state_nans']} NaN entries in the final state (pinned {ref['state_nans']})")
    a, b = np.asarray(ours["acc_history"], dtype=float), np.asarray(ref["acc_history"], dtype=float)
    one_sample = 100 / np.asarray(ref["test_sizes"], dtype=float) + 1e-6
    if a.shape != b.shape:
        moved.append("the accuracy history's shape")
    else:
        off = np.abs(np.nan_to_num(a - b, nan=0.0)) > 1e-9
        if off.sum() > 1 or (off.any() and np.any(np.abs(a - b)[off] > np.broadcast_to(one_sample, a.shape)[off])):
            moved.append(f"{int(off.sum())} per-client accuracies")
    return moved


def host_path(workers: int = 0) -> dict:
    """This process's numeric path for a pinned run (one thread, like the tests)."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return numerics.numeric_path("cpu", workers)
    finally:
        torch.set_num_threads(saved)


def method_runs() -> dict[str, tuple[str, dict[str, Any]]]:
    return {**{m: (m, {}) for m in sorted(ALGORITHMS)}, **FEATURE_RUNS}


# ---------------------------------------------------------------- paper presets
def _preset(paper: str, notebook: str) -> dict:
    import yaml

    return yaml.safe_load((ROOT / "params" / paper / notebook / "paper.yaml").read_text()) or {}


def _lists(preset: dict, *names: str, default: list) -> list:
    for name in names:
        if name in preset:
            value = preset[name]
            return list(value) if isinstance(value, list) else [value]
    return default


def paper_configs() -> Iterator[tuple[str, ExperimentConfig]]:
    """The configs the paper modules build for each notebook's paper preset: the preset's
    methods x settings (x datasets, seeds), with the preset's scalar config fields."""
    from pflcore.papers.fedcp import fedcp_config
    from pflcore.papers.fedfa import fedfa_config, fedfa_validation_config
    from pflcore.papers.fedpac import fedpac_config
    from pflcore.papers.pfedfda import pfedfda_config

    fields = {f for f in ExperimentConfig.__dataclass_fields__} - {"output_dir", "name", "method", "partition",
                                                                    "dataset", "seed", "data_root"}
    for nb_dir in sorted((ROOT / "params").glob("*/*/paper.yaml")):
        paper, notebook = nb_dir.parent.parent.name, nb_dir.parent.name
        if paper not in ("fedcp", "fedfa", "fedpac", "pfedfda"):
            continue
        preset = _preset(paper, notebook)
        scalars = {k: v for k, v in preset.items() if k in fields and not isinstance(v, list) and v is not None}
        seeds = _lists(preset, "seeds", default=[None])
        if paper == "fedcp":
            methods = _lists(preset, "methods", default=["fedcp", "fedavg"])
            scalars.pop("eval_every", None)
            combos = itertools.product(methods, _lists(preset, "setting", default=["practical", "pathological"]),
                                       seeds)
            for method, setting, seed in combos:
                extra = {} if seed is None else {"seed": seed}
                dataset = "cifar10" if setting == "pathological" else "mnist"
                if dataset == "mnist" and not (FEDCP_MNIST / "config.json").is_file():
                    continue  # the authors' partition is not on this machine (see the test)
                yield (f"fedcp/{notebook}/{method}/{setting}/{seed}",
                       _built(fedcp_config, method, dataset=dataset, setting=setting, **scalars, **extra,
                                    data_root=str(FEDCP_MNIST) if dataset == "mnist" else None))
        elif paper == "fedfa":
            methods = _lists(preset, "methods", "init_rows", default=["fedfa", "fedavg"])
            if notebook == "f2_tsne":
                for method in methods:
                    yield (f"fedfa/{notebook}/{method}",
                           _built(fedfa_validation_config, method, preset.get("samples_per_client", 1000),
                                                   **{k: v for k, v in scalars.items() if k != "num_clients"}))
                continue
            settings = [s for s in _lists(preset, "settings", "setting", default=["c2"]) if s != "feature"]
            dataset = preset.get("dataset", "fmnist")
            if dataset == "digit5":
                dataset = "fmnist"
            for method, setting, seed in itertools.product(methods, settings, seeds):
                extra = {} if seed is None else {"seed": seed}
                yield (f"fedfa/{notebook}/{method}/{setting}/{seed}",
                       _built(fedfa_config, method, dataset, setting, **scalars, **extra))
        elif paper == "fedpac":
            methods = _lists(preset, "methods", default=["fedpac", "fedavg"])
            dataset = preset.get("dataset", "fmnist")
            num_clients = scalars.pop("num_clients", 20)
            for method in methods:
                yield (f"fedpac/{notebook}/{method}",
                       _built(fedpac_config, method, dataset, num_clients, **scalars))
        else:
            methods = _lists(preset, "methods", default=["pfedfda", "fedavg"])
            dataset = preset.get("dataset", "fmnist")
            alphas = [preset.get("alpha", 0.5)]
            for method, alpha, corrupted in itertools.product(methods, alphas, (False, True)):
                yield (f"pfedfda/{notebook}/{method}/{alpha}/{corrupted}",
                       _built(pfedfda_config, method, dataset, alpha, corrupted=corrupted, **scalars))


def _built(make, *args, **kwargs) -> ExperimentConfig | None:
    """The config, or None where the preset alone does not make one (e.g. FedFA's
    ``initialization=from_run`` row, which the notebook completes with a finished run)."""
    from pflcore.errors import ConfigError

    try:
        return make(*args, **kwargs)
    except ConfigError:
        return None


def paper_fingerprints() -> dict[str, str]:
    return {label: config.fingerprint() for label, config in paper_configs() if config is not None}


# ---------------------------------------------------------------- tests
def _pins() -> dict:
    return json.loads(PINS.read_text())


def _path_pins(key: str) -> dict[str, str]:
    return _pins()["paths"].get(key, {}).get("methods", {})


def test_every_registered_method_and_feature_run_is_pinned():
    pins = _pins()
    for label in sorted(method_runs()):
        assert label in pins["reference"], (
            f"{label!r} has no pin: add it with `OMP_NUM_THREADS=1 python tests/test_pinned_numbers.py --write {label}`")
        assert pins["reference"][label]["path_key"] in pins["paths"], f"{label!r}'s reference path has no pins"
    for key, entry in pins["paths"].items():
        stale = sorted(set(entry["methods"]) - set(method_runs()))
        assert not stale, f"pins of runs that no longer exist on path {key}: {stale}; remove them"
        assert numerics.path_key(entry["path"]) == key, f"pins path {key} does not describe its own path"


def test_a_path_without_pins_is_checked_within_tolerance_and_a_moved_number_still_fails():
    ref = _pins()["reference"]["fedavg"]["metrics"]
    assert outside_tolerance(ref, ref) == []
    nudged = {**ref, "train_loss": [v * (1 + 1e-7) for v in ref["train_loss"]],  # a change of path's size
              "state_projections": [v + 1e-7 * ref["state_rms"] for v in ref["state_projections"]]}
    assert outside_tolerance(nudged, ref) == []
    pushed = {**ref, "state_projections": [v + 3e-5 * ref["state_rms"] for v in ref["state_projections"]]}
    assert "projection" in outside_tolerance(pushed, ref)[0]  # FedProx's doubled proximal term moves it so far
    tenth = {**ref, "state_projections": [v + 3.1e-6 * ref["state_rms"] for v in ref["state_projections"]]}
    assert outside_tolerance(tenth, ref)  # FedProx's proximal term 10 % heavier moves it so far
    path_sized = {**ref, "train_loss": [v * (1 + 1.7e-7) for v in ref["train_loss"]],  # the largest measured
                  "state_projections": [v + 2.0e-7 * ref["state_rms"] for v in ref["state_projections"]]}
    assert outside_tolerance(path_sized, ref) == []
    moved = {**ref, "train_loss": [v * (1 + 1e-4) for v in ref["train_loss"]]}  # a change that moves numbers
    assert outside_tolerance(moved, ref) and "train loss" in outside_tolerance(moved, ref)[0]
    flipped = json.loads(json.dumps(ref))
    flipped["acc_history"][0][0] += 100 / ref["test_sizes"][0]  # one test sample of one client: a path's flip
    assert outside_tolerance(flipped, ref) == []
    flipped["acc_history"][1][1] += 100 / ref["test_sizes"][1]  # two clients: moved
    assert outside_tolerance(flipped, ref)


def test_write_name_adds_one_pin_without_rewriting_the_others(tmp_path, monkeypatch, one_thread):
    module = sys.modules[__name__]
    copy = tmp_path / "pins.json"
    copy.write_text(PINS.read_text())
    before = json.loads(copy.read_text())
    monkeypatch.setattr(module, "PINS", copy)
    registered = method_runs()
    monkeypatch.setattr(module, "method_runs", lambda: {**registered, "my_method": ("fedprox", {})})
    _write(["my_method"])
    after = json.loads(copy.read_text())
    key = numerics.path_key(host_path(0))  # this host's path, whether or not it had pins before
    assert after["paths"][key]["methods"]["my_method"] and after["reference"]["my_method"]["path_key"] == key
    assert before["paths"], "the shipped pins file has no path to leave alone"
    for path_key, entry in before["paths"].items():  # every other pin, on every path, as it was
        assert {k: v for k, v in after["paths"][path_key]["methods"].items() if k != "my_method"} == entry["methods"]
    assert {label: ref for label, ref in after["reference"].items() if label != "my_method"} == before["reference"]
    with pytest.raises(SystemExit, match="no pinned run is called nope"):
        _write(["nope"])


@pytest.mark.parametrize("label", sorted(method_runs()))
@pytest.mark.parametrize("workers", [0, 2])
def test_method_numbers_are_pinned(tmp_path, one_thread, label, workers):
    method, changes = method_runs()[label]
    config = pinned_config(tmp_path / "results", method, workers=workers, **changes)
    key = numerics.path_key(host_path(workers))
    digest, metrics = run_numbers(config)
    pinned = _path_pins(key).get(label)
    if pinned is not None:
        assert digest == pinned, f"{label} (workers={workers}) no longer gives its pinned numbers: a change moved them"
        return
    reference = _pins()["reference"][label]
    moved = outside_tolerance(metrics, reference["metrics"])
    assert not moved, (f"{label} (workers={workers}) moved beyond what a change of numeric path explains (pins made "
                       f"on {reference['path_key']}, this host {key}): {'; '.join(moved[:3])}")


def test_paper_preset_fingerprints_are_pinned():
    pinned = _pins()["paper_fingerprints"]
    now = paper_fingerprints()
    missing = set(pinned) - set(now)
    # FedCP's MNIST configs need the authors' partition folder (its config.json enters the fingerprint)
    assert all(label.endswith(("/practical/0", "/practical/1", "/practical/2", "/practical/3", "/practical/4",
                               "/practical/None")) and label.startswith("fedcp/") for label in missing), missing
    assert not set(now) - set(pinned), sorted(set(now) - set(pinned))[:5]
    changed = [label for label in now if now[label] != pinned[label]]
    assert not changed, f"{len(changed)} paper configs changed fingerprint, e.g. {changed[:3]}"


def _write(names: list[str]) -> None:
    import tempfile

    torch.set_num_threads(1)
    pins = _pins() if PINS.exists() else {"paths": {}, "reference": {}}
    path = host_path(0)
    key = numerics.path_key(path)
    runs = method_runs()
    unknown = [n for n in names if n not in runs]
    if unknown:
        sys.exit(f"no pinned run is called {', '.join(unknown)}; the runs are: {', '.join(sorted(runs))}")
    chosen = names or sorted(runs)
    numbers = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label in chosen:
            method, changes = runs[label]
            numbers[label] = run_numbers(pinned_config(Path(tmp) / label, method, **changes))
    if not names:  # a new path's pins: only for numbers that are the reference's within tolerance
        moved = {label: outside_tolerance(m, pins["reference"][label]["metrics"])
                 for label, (_, m) in numbers.items() if label in pins["reference"]}
        moved = {label: m for label, m in moved.items() if m}
        if moved:
            sys.exit(f"not written: {len(moved)} runs moved beyond a change of numeric path, e.g. "
                     f"{next(iter(moved))}: {next(iter(moved.values()))[0]}; pin them by name if that is meant")
    entry = pins["paths"].setdefault(key, {"path": path, "methods": {}})
    entry["path"] = path
    for label, (digest, metrics) in numbers.items():
        entry["methods"][label] = digest
        if names or label not in pins["reference"]:
            pins["reference"][label] = {"path_key": key, "metrics": metrics}
            for other_key, other in pins["paths"].items():  # a deliberate change: other paths' pins are stale
                if other_key != key and names:
                    other["methods"].pop(label, None)
    pins["paper_fingerprints"] = paper_fingerprints()
    pins["about"] = ("Exact pins per numeric path (pflcore.numerics.path_key) and, per run, the reference metrics a "
                     "path without pins is checked against; see tests/test_pinned_numbers.py.")
    PINS.write_text(json.dumps(pins, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(numbers)} pins for numeric path {key} ({numerics.in_words(path)}) and the paper "
          f"fingerprints to {PINS}")


def pinless_summary() -> str | None:
    """One line for the end of a test session on a host whose numeric path has no pins."""
    if not PINS.exists():
        return None
    key = numerics.path_key(host_path(0))
    if _path_pins(key):
        return None
    made_on = sorted({r["path_key"] for r in _pins()["reference"].values()})
    return (f"pinned numbers: this host's numeric path {key} ({numerics.in_words(host_path(0))}) has no exact pins; "
            f"its method runs were checked within tolerance of the pins made on {', '.join(made_on)} instead "
            "(add this path's: OMP_NUM_THREADS=1 python tests/test_pinned_numbers.py --write)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        _write(sys.argv[2:])
    else:
        sys.exit("usage: python tests/test_pinned_numbers.py --write [NAME ...]")
