"""The numeric path (issue: reproducible on any machine): every record and summary names the
path that decides its bits, an older record's path is unknown (never guessed), and a retrained
record gets a verdict a user can act on: bit-identity on the same path (else a defect), the
seed spread on another path; a kept replication never enters a row's mean."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pflcore import numerics, records, replicate
from pflcore.engine import run


def _recorded(make_config, seeds=(7,)):
    paths = []
    for seed in seeds:
        config = make_config(rounds=2, seed=seed)
        with records.recording("paper_x/t1"):
            run(config)
        paths.append(records.find(config))
    return paths


def _elsewhere(path: Path, **changes) -> dict:
    """A record as if it ran on another machine's numeric path, written back as such where no
    number moves; ``changes`` move summary numbers in the returned copy only (a file with moved
    numbers no longer passes the record checks)."""
    record = json.loads(path.read_text())
    record["provenance"]["numeric_path"] = {**record["provenance"]["numeric_path"], "cpu_vendor": "OtherVendor",
                                            "torch_cpu_capability": "AVX2"}
    if not changes:
        path.write_text(json.dumps(record))
    for key, delta in changes.items():
        record["summary"][key] += delta
    if changes:  # and its last bits: another trajectory
        record["history"][0]["train_loss"] += 1e-7
    return record


def test_the_path_names_every_layer_that_decides_the_bits():
    path = numerics.numeric_path("cpu", 2)
    for key in numerics.CPU_KEY_FIELDS:
        assert key in path, key
    assert path["torch_cpu_capability"] in ("DEFAULT", "AVX2", "AVX512", "ZVECTOR", "VSX", "SVE256")
    assert path["executor"] == "sequential" and numerics.numeric_path("cpu", "vectorised")["executor"] == "vectorised"
    assert numerics.same_path(path, dict(path)) is True
    assert numerics.same_path(path, {**path, "torch_cpu_capability": "DEFAULT"}) is False
    assert numerics.same_path(path, numerics.unknown_path()) is None
    assert numerics.path_key(numerics.unknown_path()) == "unknown"


def test_records_and_summaries_carry_the_numeric_path(project, make_config):
    [path] = _recorded(make_config)
    record = records.read(path)
    assert record["schema_version"] == 3
    assert record["provenance"]["numeric_path"] == numerics.numeric_path("cpu", record["config"]["workers"])
    summary = json.loads((project / "results").glob("*/summary.json").__next__().read_text())
    assert summary["provenance"]["numeric_path"]["torch_cpu_capability"] == record["provenance"]["numeric_path"][
        "torch_cpu_capability"]


def test_an_older_record_gets_an_unknown_path_never_a_guessed_one(project, make_config):
    [path] = _recorded(make_config)
    raw = json.loads(path.read_text())
    raw["schema_version"] = 2
    del raw["provenance"]["numeric_path"], raw["provenance"]["cpu_vendor"]
    path.write_text(json.dumps(raw))
    read = records.read(path)
    assert read["upgraded_from"] == 2 and read["provenance"]["numeric_path"] == numerics.unknown_path()
    assert read["provenance"]["cpu_vendor"] == "unknown" and read["clients"] == raw["clients"]


def test_same_path_same_numbers_is_identical_and_other_numbers_are_a_defect(project, make_config):
    [path] = _recorded(make_config)
    config = make_config(rounds=2, output_dir=str(project / "again"))
    with records.recording("paper_x/t1", train=True):
        again = run(config)
    comparison = records.compare(again, path)
    assert comparison["identical"] and comparison["same_path"] and records.verdict(comparison) == "identical"
    assert "bit for bit" in records.comparison_line(comparison, path)
    moved = json.loads(path.read_text())
    moved["summary"]["acc_mean"] += 0.5
    moved["history"][0]["train_loss"] += 1e-6
    comparison = records.compare(again, moved, setting=[moved])
    assert records.verdict(comparison) == "defect"
    line = records.comparison_line(comparison, path)
    assert line.startswith("DEFECT") and "report it" in line and "same numeric path" in line


def test_another_path_is_judged_against_the_seed_spread(project, make_config):
    paths = _recorded(make_config, seeds=(7, 8, 9))
    spread = records.seed_spread([records.read(p) for p in paths])
    assert spread["n"] == 3 and spread["acc_mean"]["std"] > 0
    std = spread["acc_mean"]["std"]
    config = make_config(rounds=2, seed=7, output_dir=str(project / "again"))
    with records.recording("paper_x/t1", train=True):
        again = run(config)

    seeds = [records.read(p) for p in paths]
    moved = _elsewhere(paths[0], acc_mean=0.25 * std, best_acc_mean=0.0)  # the record 0.25 std off our run
    comparison = records.compare(again, moved, setting=seeds)
    assert comparison["same_path"] is False and comparison["spread"]["n"] == 3
    assert records.verdict(comparison) == "within_spread"  # our run is one of the setting's seeds
    line = records.comparison_line(comparison, paths[0])
    assert "is expected here" in line and "within the seed spread" in line and "0.25 of the std" in line
    low, high = records.prediction_interval(comparison["spread"], "acc_mean")
    mean = comparison["spread"]["acc_mean"]["mean"]  # t(0.975, 2) = 4.303, times sqrt(1 + 1/3)
    assert (high - mean) == pytest.approx(4.302653 * std * (4 / 3) ** 0.5, rel=1e-6) and low < mean < high

    far = [json.loads(json.dumps(r)) for r in seeds]  # a setting whose seeds all lie 10 stds above our run
    for r in far:
        r["summary"]["acc_mean"] += 10 * std
    comparison = records.compare(again, moved, setting=far)
    assert records.verdict(comparison) == "outside_spread"
    assert "report it" in records.comparison_line(comparison, paths[0])

    _elsewhere(paths[0])  # the file itself: another path, the same numbers, and its setting found on disk
    comparison = records.compare(again, paths[0])
    assert comparison["spread"]["n"] == 3 and records.verdict(comparison) == "identical"
    assert "bit for bit" in records.comparison_line(comparison, paths[0])
    lone = records.compare(again, moved, setting=seeds[:1])
    assert records.verdict(lone) == "spread_unknown" and "too few" in records.comparison_line(lone, paths[0])


def test_a_kept_replication_sits_beside_its_record_and_never_enters_a_mean(project, make_config, capsys):
    [path] = _recorded(make_config)
    _elsewhere(path)  # the record "ran elsewhere": this machine replicates it
    comparison = replicate.replicate(path, keep=True, log=lambda *_: None)
    written = Path(comparison["written"])
    assert written.parent == path.parent / records.REPLICATIONS
    assert comparison["same_path"] is False and comparison["verdict"] in ("identical", "spread_unknown")
    [(found, rep)] = records.all_replications(project / "reproductions")
    assert found == written and rep["replication_of"]["record"] == path.name
    assert rep["provenance"]["numeric_path"] == numerics.numeric_path("cpu", rep["config"]["workers"])
    assert [p for p, _ in records.all_records(project / "reproductions")] == [path]  # not in any mean
    assert records.find(make_config(rounds=2)) == path  # and never found as the record of its config
    again = replicate.rejudge(written)  # judged again from its own numbers, no training
    assert again["verdict"] == comparison["verdict"] and again["record_path"] == path.resolve()
    assert records.read(written)["replication_of"]["rule"].startswith("95% prediction interval")
    assert replicate.main([str(written)]) == 2  # a replication is not replicated again
    assert "itself a replication" in capsys.readouterr().err


def test_replicating_on_the_record_s_own_path_keeps_nothing(project, make_config):
    [path] = _recorded(make_config)
    comparison = replicate.replicate(path, keep=True, log=lambda *_: None)
    assert comparison["verdict"] == "identical" and "written" not in comparison
    assert records.all_replications(project / "reproductions") == []


def test_a_record_names_its_host_and_an_older_one_says_its_path_is_unknown(project, make_config):
    [path] = _recorded(make_config)
    record = records.read(path)
    assert numerics.numeric_path()["torch_cpu_capability"] in records.host_of(record)
    raw = json.loads(path.read_text())
    raw["schema_version"] = 2
    del raw["provenance"]["numeric_path"]
    assert records.host_of(records.upgrade(raw)).endswith("path unknown")


def test_a_gpu_run_turns_tf32_off_and_a_cpu_run_changes_nothing():
    """On a GPU pflcore computes in float32 as on the CPU (TF32 off for matrix products and
    cuDNN), so its records pool under the report's rule; the switches can be read without a GPU."""
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = True, True
        numerics.float32_on_gpu("cpu")
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (True, True)
        numerics.float32_on_gpu("cuda:0")
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (False, False)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
