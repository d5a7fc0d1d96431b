"""The device campaign (issue 77) end to end on the CPU at toy scale: a tiny plan of a toy
notebook in a temporary project, its entries run by ``python -m pflcore.campaign device`` with
``--device cpu`` (each run's config moved to that device and to the vectorised executor where it
stacks the method, by PFLCORE_DEVICE and PFLCORE_WORKERS), and their records brought in by ``adopt``,
a record of a run the project has recorded already kept as a replication beside it."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from pflcore import campaign, device_campaign as dc, numerics, records
from pflcore.engine.vectorised import CLIENT_BY_CLIENT

from conftest import alive

NOTEBOOK = "toy/nb"
#: The toy notebook's one code cell after its parameters: each method's run on digits.
CELL = """\
from pflcore.config import ExperimentConfig
from pflcore.engine import run
from pflcore.notebooks import use_preset

use_preset("toy/nb", preset, globals())
for method in methods:
    run(ExperimentConfig.from_dict(dict(
        method=method, dataset="digits", model="mlp", num_clients=4, rounds=rounds, local_epochs=1, batch_size=16,
        lr=0.05, partition={"kind": "dominant", "s": 0.2, "samples_per_client": 80}, output_dir=output_dir,
        quiet=quiet, seed=seed, workers=0, eval_every=1)))
"""


def _entry(method: str, seed: int, estimate: float = 10.0, **more) -> campaign.Entry:
    return campaign.Entry(NOTEBOOK, method, seed, {"methods": [method], "seed": seed, **more}, estimate)


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def toy(project, monkeypatch):
    """The temporary project with the toy notebook, its presets, a plan of toy entries (the
    campaign's CAMPAIGN replaced) and a git repository holding it all."""
    import nbformat

    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell('preset = "smoke"\nmethods = ["fedavg"]\nseed = 0\nrounds = 2\n'
                                          'quiet = True\noutput_dir = "results/smoke/toy"\n'
                                          'figures_dir = "figures/smoke/toy"', metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell(CELL)]
    (project / "notebooks" / "toy").mkdir()
    nbformat.write(nb, project / "notebooks" / "toy" / "nb.ipynb")
    (project / "params" / "toy" / "nb").mkdir(parents=True)
    (project / "params" / "toy" / "nb" / "smoke.yaml").write_text(
        'methods: ["fedavg"]\nrounds: 2\noutput_dir: "results/smoke/toy"\nfigures_dir: "figures/smoke/toy"\n')
    (project / "params" / "toy" / "nb" / "paper.yaml").write_text(
        'methods: ["fedavg"]\nrounds: 2\noutput_dir: "results/paper/toy"\nfigures_dir: "figures/paper/toy"\n')
    (project / records.RECORDS_FOLDER).mkdir()
    (project / ".gitignore").write_text("outputs/\nresults/\nfigures/\n")
    _git(project, "init", "-q")
    _git(project, "config", "user.email", "t@example.org")
    _git(project, "config", "user.name", "t")
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "-m", "start")
    monkeypatch.setattr(campaign, "CAMPAIGN", [_entry("fedavg", 0, 5.0), _entry("fedrod", 0, 6.0),
                                               _entry("fedavg", 1, 10_000.0)])
    monkeypatch.setattr(campaign, "redraw_figures", lambda *a, **k: False)  # no report notebooks here
    return project


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_bad_input_is_one_sentence_before_any_run(toy, capsys, monkeypatch):
    started = []
    monkeypatch.setattr(dc, "_start", lambda *a, **k: started.append(a) or pytest.fail("a run started"))
    (toy / "a-file").write_text("x")
    (toy / "full").mkdir()
    (toy / "full" / "x").write_text("x")
    cases = {
        ("--budget", "0"): "--budget is the seconds the campaign may use, more than 0",
        ("--budget", "-5"): "more than 0",
        ("--budget", "nan"): "more than 0",
        ("--budget", "ten"): "--budget is a number; got 'ten'",
        ("--budget", "1e12"): "more than a week",
        ("--out", "a-file"): "is a file",
        ("--out", "reproductions"): "is the project's reproductions/",
        ("--out", "reproductions/x"): "is the project's reproductions/",
        ("--out", "full"): "is not empty",
        ("--table", "no such table"): "--table 'no such table' is no table of the plan; its tables are: toy/nb.",
        ("--first", "no such run"): "the campaign has no entry, table or notebook 'no such run'",
        ("--concurrent", "0"): "--concurrent is 'auto' or a whole number from 1",
        ("--concurrent", "many"): "--concurrent is 'auto' or a whole number; got 'many'",
        ("--speedup", "-1"): "--speedup is a positive number",
    }
    for (flag, value), said in cases.items():
        args = {"--budget": "60", "--out": str(toy / "new"), "--device": "cpu", "--concurrent": "1", flag: value}
        assert campaign.main(["device", *[x for kv in args.items() for x in kv]]) == 2, (flag, value)
        assert said in _one_line_error(capsys), (flag, value)
    assert campaign.main(["device", "--budget", "60", "--out", str(toy / "new"), "--device", "cuda:7"]) == 2
    assert "--device cuda:7:" in _one_line_error(capsys)
    for source, said in (("nowhere", "does not exist"), ("a-file", "neither a folder nor a tar"),
                         ("reproductions", "is the project's reproductions/"), ("full", "has no readable manifest")):
        assert campaign.main(["adopt", str(toy / source)]) == 2
        assert said in _one_line_error(capsys), source
    assert started == [] and not (toy / "new").exists()


def test_the_budget_stops_starting_runs_that_do_not_fit(toy, tmp_path):
    """With 30 s and no speed-up, only the entries whose estimate fits with a tenth to spare
    may start; here none does (K runs at once do not change a run's own estimate), so nothing
    runs and the manifest says why of each."""
    campaign.CAMPAIGN[:] = [_entry("fedavg", 0, 28.0), _entry("fedavg", 1, 10_000.0)]
    out = tmp_path / "out"
    manifest = dc.device_campaign(30, out, root=toy, device="cpu", concurrent=2, speedup=1.0, log=lambda *a, **k: None)
    assert manifest["runs"] == [] and [r["key"] for r in manifest["not_started"]] == [e.key for e in campaign.CAMPAIGN]
    assert all("does not fit" in r["why"] for r in manifest["not_started"])
    assert json.loads((out / dc.MANIFEST).read_text()) == manifest
    assert not (toy / "outputs" / "device-campaign").exists(), "a runner was started"


def test_a_run_cut_off_by_the_budget_is_killed_with_its_kernel_and_leaves_nothing(toy, tmp_path):
    campaign.CAMPAIGN[:] = [_entry("fedavg", 3, 1.0, rounds=100_000)]  # estimated at 1 s, runs for hours
    out = tmp_path / "out"
    manifest = dc.device_campaign(8, out, root=toy, device="cpu", concurrent=1, speedup=1.0, tar=tmp_path / "c.tar",
                                  log=lambda *a, **k: None)
    [run] = manifest["runs"]
    assert run["status"] == "cut_off" and run["records"] == [] and 7 < run["seconds"] < 40
    assert len(run["killed_processes"]) >= 2, "the runner and its kernel"
    deadline = time.monotonic() + 10  # SIGKILL is delivered at once; a loaded machine takes a moment to end them
    while any(alive(pid) for pid in run["killed_processes"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in run["killed_processes"])
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == [dc.MANIFEST]  # no record, no temporary file
    assert not list((toy / records.RECORDS_FOLDER).rglob("*.json"))
    import tarfile

    with tarfile.open(tmp_path / "c.tar") as bundle:
        assert bundle.getnames() == [dc.MANIFEST]
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_k_runs_at_once_each_write_their_record_and_adopt_checks_refuses_and_commits(toy, capsys):
    tmp_path = toy / "outputs" / "side"  # beside the project's files, ignored by its git
    out = tmp_path / "out"
    manifest = dc.device_campaign(240, out, root=toy, device="cpu", concurrent=2, speedup=1.0,
                                  tar=tmp_path / "c.tar", log=lambda *a, **k: None)
    fedavg, fedrod, big = campaign.CAMPAIGN
    runs = {r["key"]: r for r in manifest["runs"]}
    assert set(runs) == {fedavg.key, fedrod.key} and all(r["status"] == "finished" for r in runs.values())
    assert [r["key"] for r in manifest["not_started"]] == [big.key]
    assert manifest["concurrent"] == 2 and manifest["concurrent_from"] == "--concurrent"
    first, second = sorted(runs.values(), key=lambda r: r["started_s"])
    assert second["started_s"] < first["ended_s"], "the two runs did not run at once"
    for key, run in runs.items():
        [rel] = run["records"]
        record = records.read(out / rel, root=out)
        method = record["config"]["method"]
        workers = "vectorised" if dc.stacks(method) else 0
        assert record["config"]["device"] == "cpu" and record["config"]["workers"] == workers
        assert record["provenance"]["numeric_path"]["executor"] == ("vectorised" if workers else "sequential")
        assert run["executors"] == {method: "vectorised" if workers else "sequential"}
        assert run["seconds_per_round"][rel] > 0 and run["numeric_paths"][rel]["key"].startswith("cpu-")
    assert not list((toy / records.RECORDS_FOLDER).rglob("*.json")), "the tree's reproductions/ was changed"

    # a forged record (its accuracy raised) is refused in one sentence, nothing adopted
    forged = tmp_path / "forged"
    shutil.copytree(out, forged)
    rel = runs[fedavg.key]["records"][0]
    record = json.loads((forged / rel).read_text())
    record["summary"]["acc_mean"] = min(100.0, record["summary"]["acc_mean"] + 5)
    (forged / rel).write_text(json.dumps(record))
    assert campaign.main(["adopt", str(forged)]) == 2
    err = _one_line_error(capsys)
    assert err.startswith("error: refused, nothing adopted: ") and rel in err and "acc_mean" in err
    # a record that is no entry's (seed 7) is refused, however the manifest lists it
    stray = tmp_path / "stray"
    shutil.copytree(out, stray)
    record = records.read(out / rel, root=out)
    from pflcore.config import ExperimentConfig

    moved = ExperimentConfig.from_dict({**record["config"], "seed": 7, "device": "cpu", "workers": 0})
    record.update(seed=7, fingerprint=moved.fingerprint(), config={**record["config"], "seed": 7})
    name = records.record_name(record)
    other = json.loads((stray / rel).read_text())
    other.update(seed=7, fingerprint=record["fingerprint"], config=record["config"])
    (stray / rel).unlink()
    (stray / records.RECORDS_FOLDER / NOTEBOOK / name).write_text(json.dumps(other))
    listed = json.loads((stray / dc.MANIFEST).read_text())
    for run in listed["runs"]:
        run["records"] = [f"{records.RECORDS_FOLDER}/{NOTEBOOK}/{name}" if r == rel else r for r in run["records"]]
    (stray / dc.MANIFEST).write_text(json.dumps(listed))
    assert campaign.main(["adopt", str(stray)]) == 2
    assert "is a record of no entry of the plan" in _one_line_error(capsys)
    assert _git(toy, "status", "--short") == "" and not list((toy / records.RECORDS_FOLDER).rglob("*.json"))

    # the tar as it came back: adopted, the plan notes both entries, one commit
    assert campaign.main(["adopt", str(tmp_path / "c.tar")]) == 0
    capsys.readouterr()
    plan = campaign.read_plan(toy)
    done = {r["key"]: r["records"] for r in plan["runs"] if r["records"]}
    assert done == {key: run["records"] for key, run in runs.items()}
    assert _git(toy, "log", "--format=%s").splitlines()[0].startswith("Records: 2 entries from a device campaign on ")
    assert _git(toy, "status", "--short") == ""
    _, problems = campaign.believed(campaign.current_plan(toy), toy)
    assert problems == {}
    # status counts them done and says they ran elsewhere than the CPU plan's estimates assume
    assert campaign.gpu_entries(campaign.current_plan(toy), toy) == set()  # they ran on the CPU here
    # adopting the same folder again keeps nothing: its records are the project's, bit for bit, on the same path
    commits = _git(toy, "rev-list", "--count", "HEAD")
    assert campaign.main(["adopt", str(out)]) == 0
    assert capsys.readouterr().out.count("not kept: it is the project's record bit for bit") == 2
    assert _git(toy, "rev-list", "--count", "HEAD") == commits and _git(toy, "status", "--short") == ""

    # a GPU ran the same (row, seed) while the CPU recorded it: kept as a replication beside the record
    gpu = tmp_path / "gpu"
    shutil.copytree(out, gpu)
    record = json.loads((gpu / rel).read_text())
    on = {"device": "cuda", "gpu": "NVIDIA H100 80GB HBM3", "cuda": "13.0"}
    record["provenance"].update(on)
    record["provenance"]["numeric_path"].update(on, cudnn=91900, tf32_matmul=False, tf32_cudnn=False)
    (gpu / rel).write_text(json.dumps(record))
    counted = [p for p, _ in records.all_records(toy / records.RECORDS_FOLDER)]
    assert campaign.main(["adopt", str(gpu)]) == 0
    said = capsys.readouterr().out
    key = numerics.path_key(record["provenance"]["numeric_path"])
    kept = toy / records.RECORDS_FOLDER / NOTEBOOK / records.REPLICATIONS / f"{Path(rel).stem}.on-{key}.json"
    assert f"kept as the replication {kept.relative_to(toy)}" in said
    replication = records.read(kept)
    of = replication["replication_of"]
    assert of["record"] == Path(rel).name and of["fingerprint"] == record["fingerprint"] and of["same_path"] is False
    assert of["spread"]["n"] == 1 and set(of["metrics"]) >= {"acc_mean"} and of["verdict"]
    assert replication["provenance"]["numeric_path"]["device"] == "cuda"
    assert [p for p, _ in records.all_records(toy / records.RECORDS_FOLDER)] == counted  # never in a row's mean
    assert [p for p, _ in records.all_replications(toy / records.RECORDS_FOLDER)] == [kept]
    assert _git(toy, "log", "--format=%s").splitlines()[0] == \
        "Records: 0 entries and 1 replication(s) from a device campaign on NVIDIA H100 80GB HBM3"
    assert _git(toy, "status", "--short") == ""
    assert [r["records"] for r in campaign.read_plan(toy)["runs"]] == [r["records"] for r in plan["runs"]]
    # again: refused in one sentence, the replication is kept already
    assert campaign.main(["adopt", str(gpu)]) == 2
    assert "would replace the replication" in _one_line_error(capsys)


def test_methods_run_client_by_client_get_the_sequential_executor_and_its_speed_up(toy):
    """FedCP and the other methods with their own inner loop get exactly the sequential numbers
    under the vectorised executor and no speed-up: they run with workers 0, and an entry with one
    of them is estimated with the sequential speed-up."""
    assert not any(dc.stacks(m) for m in CLIENT_BY_CLIENT) and dc.stacks("fedavg") and not dc.stacks("fedem")
    mixed = campaign.Entry(NOTEBOOK, "fedavg", 0, {"methods": ["fedavg", "fedcp"], "seed": 0}, 5.0)
    assert dc.executors_of(mixed) == {"fedavg": "vectorised", "fedcp": "sequential"}


def test_first_takes_keys_tables_and_notebooks():
    rows = [{"key": "a | x | seed 0", "table": "T1", "notebook": "p/t1"},
            {"key": "b | y | seed 0", "table": "T2 practical", "notebook": "p/t2"},
            {"key": "b | z | seed 0", "table": "T2 pathological", "notebook": "p/t2"}]
    ordered = sorted(rows, key=lambda r: dc.first_order(r, ("p/t2",)))
    assert [r["key"] for r in ordered] == ["b | y | seed 0", "b | z | seed 0", "a | x | seed 0"]
    ordered = sorted(rows, key=lambda r: dc.first_order(r, ("T2 pathological", "a | x | seed 0")))
    assert [r["table"] for r in ordered] == ["T2 pathological", "T1", "T2 practical"]
    plan = {"runs": rows}
    dc.check_selection(plan, [], ["p/t2", "T1", "b | y | seed 0"])
    with pytest.raises(dc.DeviceCampaignError, match="has no entry, table or notebook 'T9'"):
        dc.check_selection(plan, [], ["T9"])


def test_k_is_the_count_after_which_doubling_gains_less_than_a_quarter():
    assert dc.choose_concurrency({1: 1.0, 2: 1.1, 4: 1.5, 8: 4.0}) == (4, 1.5)  # 1.82x, then 1.45x, then 0.75x
    assert dc.choose_concurrency({1: 1.0, 2: 1.8}) == (1, 1.0)  # two at once 1.11x: not worth a process
    assert dc.choose_concurrency({1: 0.5}) == (1, 1.0)
    assert dc.choose_concurrency({1: 0.4, 2: 0.2}) == (2, 1.0)  # a noisy probe: never estimated faster than alone


def test_measured_speedups_come_from_the_committed_records_and_device_check():
    """The default speed-ups: FedPAC Table 1's committed 2-core FedAvg and FedPAC records over a
    committed device check's GPU rounds, the smaller of the two methods'."""
    root = Path(__file__).resolve().parents[1]
    gpu = {m: {"vectorised": {"median_round_s": 0.5, "eval_s": 0.1}, "sequential": {"median_round_s": 2.0}}
           for m in ("fedavg", "fedpac")}
    speed = dc.measured_speedups(root, gpu)
    cpu = {}
    for _, record in records.all_records(root / records.RECORDS_FOLDER):
        if record["notebook"] == "fedpac/t1_main" and record["config"]["method"] in ("fedavg", "fedpac") \
                and record["config"]["num_clients"] == 20:
            cpu.setdefault(record["config"]["method"], []).append(record["provenance"]["seconds_per_round"])
    import statistics

    assert speed["vectorised"]["speedup"] == min(round(statistics.median(v) / 0.51, 2) for v in cpu.values())
    assert speed["sequential"]["speedup"] == min(round(statistics.median(v) / 2.0, 2) for v in cpu.values())
    committed = dc.measured_speedups(root)
    assert "benchmarks/records/device-check-" in committed["vectorised"]["from"]
    assert committed["vectorised"]["speedup"] > committed["sequential"]["speedup"] > 0


def test_gpu_records_count_as_their_entry_s_and_leave_the_cpu_estimates_alone(tmp_path):
    """A GPU run has its entry's fingerprint (device and workers are not in it): the plan counts
    it done, status marks it, and the row's other seeds keep estimates from CPU records only."""
    from conftest import tiny_config

    cpu = tiny_config(tmp_path)
    gpu_like = cpu.to_dict() | {"workers": "vectorised"}
    assert cpu.fingerprint() == type(cpu).from_dict(gpu_like).fingerprint()
    on_gpu = {"provenance": {"device": "cuda", "numeric_path": {"device": "cuda"}}}
    assert campaign._on_gpu(on_gpu) and not campaign._on_gpu({"provenance": {"numeric_path": {"device": "cpu"}}})
