"""Pinned numbers: every registered method's numbers and every paper preset's config
fingerprint, hashed and compared with the values in ``tests/pinned_numbers.json``.

Records of finished runs are keyed by config fingerprint, so a change that moves any
method's numbers for the same config (or any paper config's fingerprint) would make a
shipped record lie. The pins were generated from the code before the engine refactor of
issue 31 and must never change; regenerate them only for a change that is meant to move
numbers, in its own commit, with the reason in the message (once so far: per-client
accuracies became percent, issue 32, every accuracy array exactly 100 times the one before,
per-round records and final states unchanged)::

    OMP_NUM_THREADS=1 python tests/test_pinned_numbers.py --write

A method's pin is the SHA-256 of its per-round records (minus timings), its per-client
accuracy history and its final server and client states after 2 rounds of a tiny
federation (digits, 4 clients x 40 samples, 1 local epoch), run in this process and again
with 2 worker processes: both must give the pinned hash. The bits depend on the CPU's float
kernels (an Intel Xeon's AVX-512 paths give other last bits than an AMD EPYC's), so the method
pins are kept per CPU vendor; the paper fingerprints are machine-independent. On a vendor with no
pins yet, ``--write`` adds them from code whose pins pass on another vendor.
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
from pflcore.records import cpu_vendor  # noqa: E402

#: Runs that exercise an engine feature on top of the plain tiny run: FedFA's feature probe
#: (Fig. 4) and pFedFDA's new-client evaluation (Table 4).
FEATURE_RUNS: dict[str, tuple[str, dict[str, Any]]] = {
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


def run_hash(config: ExperimentConfig) -> str:
    """The pin of one run: its records (minus timings), accuracy history and final states."""
    from pflcore.engine.simulation import run

    result = run(config)
    h = hashlib.sha256()
    _feed(h, [{k: v for k, v in rec.items() if k != "seconds"} for rec in result.history])
    _feed(h, np.asarray(result.acc_history))
    _feed(h, result.final_state())
    return h.hexdigest()


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


def _method_pins() -> dict[str, str]:
    pins = _pins()["methods"].get(cpu_vendor())
    if pins is None:
        pytest.skip(f"no method pins for this CPU vendor ({cpu_vendor()}): its float kernels give other bits; "
                    "add them with `python tests/test_pinned_numbers.py --write` from code that passes elsewhere")
    return pins


def test_every_registered_method_and_feature_run_is_pinned():
    for vendor, pins in _pins()["methods"].items():
        assert sorted(pins) == sorted(method_runs()), vendor


def test_a_cpu_vendor_without_pins_skips_and_says_how_to_add_them(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "cpu_vendor", lambda: "NoSuchVendor")
    with pytest.raises(pytest.skip.Exception, match=r"NoSuchVendor.*--write"):
        _method_pins()


@pytest.mark.parametrize("label", sorted(method_runs()))
@pytest.mark.parametrize("workers", [0, 2])
def test_method_numbers_are_pinned(tmp_path, one_thread, label, workers):
    method, changes = method_runs()[label]
    config = pinned_config(tmp_path / "results", method, workers=workers, **changes)
    pinned = _method_pins()[label]  # before the run: a vendor without pins skips without running it
    assert run_hash(config) == pinned, (
        f"{label} (workers={workers}) no longer gives its pinned numbers: a change moved them")


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


def _write() -> None:
    import tempfile

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        methods = {label: run_hash(pinned_config(Path(tmp) / label, method, **changes))
                   for label, (method, changes) in method_runs().items()}
    by_vendor = {**_pins()["methods"], cpu_vendor(): methods}
    PINS.write_text(json.dumps({"methods": by_vendor, "paper_fingerprints": paper_fingerprints()},
                               indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(methods)} method pins for {cpu_vendor()} and the paper fingerprints to {PINS}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        _write()
    else:
        sys.exit("usage: python tests/test_pinned_numbers.py --write")
