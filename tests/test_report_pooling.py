"""The report's columns whose runs change the paper preset in their own way (FedPAC Table 1's
100 clients, FedCP Table 2's pathological setting), and its pooling rule for runs of one setting
on different numeric paths (CPUs, GPUs with TF32 off or on, bfloat16): which record of a (row,
seed) counts in the row's mean, and how the others are shown with their difference."""
from __future__ import annotations

import json
from html import unescape
from pathlib import Path

import pytest

from pflcore import campaign, numerics, records
from pflcore.papers.fedpac import FEDPAC_TABLE1
from pflcore.report import (build, build_info, cell_counts, cells_of, hosts_and_replications, other_settings,
                            pooling_words, verdict)
from pflcore.report.catalogue import TABLES, config_values, fill
from pflcore.report.pages import Page, render_index, render_paper
from test_report import record

ROOT = Path(__file__).resolve().parents[1]
T1 = next(t for t in TABLES if t.notebook == "fedpac/t1_main")
CP = next(t for t in TABLES if t.notebook == "fedcp/t2_main")
PATHOLOGICAL = {"kind": "pfllib_pathological", "classes_per_client": 2}


def hundred(method: str, seed: int, acc: float, changes: dict | None = None) -> dict:
    """A record of FedPAC Table 1's 100-client column, as the campaign's entries will write it."""
    rec = record(T1.notebook, method, seed, acc, num_clients=100, participation=0.3)
    rec["preset_changes"] = {"num_clients": 100} if changes is None else changes
    return rec


def pathological(method: str, seed: int, acc: float, changes: dict | None = None) -> dict:
    """A record of FedCP Table 2's pathological MNIST column, as the campaign's entries will write it."""
    rec = record(CP.notebook, method, seed, acc, dataset="pfllib", rounds=300, partition=PATHOLOGICAL)
    rec["preset_changes"] = {"setting": "pathological", "rounds": 300} if changes is None else changes
    return rec


# ---------------------------------------------------------------- columns with their own changes
def test_each_campaign_run_of_a_table_changes_the_preset_as_its_column_does():
    """The catalogue's per-column changes are what the plan's runs will carry: every campaign entry
    of a table's notebook changes the paper preset exactly as one of the table's columns does, and
    the entries of the two new columns as those columns do."""
    new = {"FedPAC T1 (100 clients)": (T1, "fmnist 100"), "FedCP T2 pathological MNIST": (CP, "pathological mnist")}
    seen = set()
    for entry in campaign.CAMPAIGN:
        spec = next((t for t in TABLES if t.notebook == entry.notebook), None)
        if spec is None:
            continue
        changes = campaign.expected_changes(entry, ROOT)
        assert changes in [spec.changes_of(c) for c in spec.columns], (entry.key, changes)
        if entry.group in new:
            table, column = new[entry.group]
            assert table is spec and changes == spec.changes_of(column) != spec.preset_changes, entry.key
            seen.add(entry.group)
    assert seen == set(new)
    assert T1.changes_of("fmnist 100") == {"num_clients": 100} and T1.changes_of("fmnist 20") == {}
    assert CP.changes_of("pathological mnist") == {"setting": "pathological", "rounds": 300}


def test_a_record_of_a_column_with_its_own_changes_lands_in_its_column_and_is_counted():
    """A 100-client record and a pathological one land in their columns: the cell shows it, the
    status matrix counts it, the claim compares it, the hosts and the deviations count its seed;
    a record of those columns with any other changes is left out and named, as today."""
    found = [(Path(f"h{m}.json"), hundred(m, 0, a)) for m, a in (("fedpac", 90.0), ("fedavg", 80.0))]
    found += [(Path("h20.json"), {**record(T1.notebook, "fedpac", 0, 92.0), "preset_changes": {}})]
    found += [(Path("x1.json"), hundred("fedpac", 1, 50.0, changes={})),  # 100 clients, but read as the preset's
              (Path("x2.json"), hundred("fedpac", 2, 50.0, changes={"num_clients": 100, "local_epochs": 1}))]
    cells = cells_of(T1, found)
    cell = cells[("fmnist 100", "fedpac")]
    assert cell.seeds() == [0] and cell.mean("acc_mean") == pytest.approx(90.0)
    assert cell.paper == FEDPAC_TABLE1["fmnist"][100]["fedpac"]
    assert cells[("fmnist 20", "fedpac")].seeds() == [0] and cells[("fmnist 20", "fedpac")].mean("acc_mean") == 92.0
    assert other_settings(T1, found) == ["FedPAC seed 1 (changed: none)",
                                         "FedPAC seed 2 (changed: local_epochs = 1, num_clients = 100)"]

    counts = cell_counts(T1, cells)
    assert counts["recorded"] == 3 and counts["columns_recorded"] == 2 and counts["by_status"]["preliminary"] == 3
    claim = T1.claim(cells)
    assert "Fashion-MNIST, 100 clients: FedPAC 90.00 (n = 1) against the best other, FedAvg 80.00" in claim["text"]
    hosts = hosts_and_replications(T1, cells, [])
    assert [h["row"] for h in hosts] == ["FedPAC, Fashion-MNIST, 20 clients", "FedAvg, Fashion-MNIST, 100 clients",
                                         "FedPAC, Fashion-MNIST, 100 clients"]
    values = config_values(T1, found, ROOT)
    assert values["seeds_recorded"] == 1
    assert "the unweighted mean over the 20 (100 in Fashion-MNIST, 100 clients) clients" in fill(T1.protocol, values)

    html = unescape(render_paper(Page("fedpac", "FedPAC", tables=[(T1, cells, [], T1.claim(cells), [],
                                                                   other_settings(T1, found), {}, values, hosts)]),
                                 verdict))
    whole = html[html.index('id="fedpac-T1-whole"'):].split("</table>")[0]
    assert "its runs change the paper preset: num_clients = 100" in whole
    fedpac_row = whole[whole.index('<td class="l">FedPAC</td>'):].split("</tr>")[0]
    assert "ours 90.00 (n = 1 seed, std ddof 1)" in fedpac_row and "ours 92.00 (n = 1 seed" in fedpac_row
    assert 'id="fedpac-T1-fmnist-100"' in html  # its own table of ours beside the paper's


def test_the_pathological_column_takes_its_records_and_leaves_out_other_changes():
    found = [(Path(f"p{m}{s}.json"), pathological(m, s, 99.0 + s / 10)) for m in ("fedcp", "fedavg") for s in (0, 1, 2)]
    practical = {**record(CP.notebook, "fedcp", 0, 98.0, rounds=300), "preset_changes": {"rounds": 300}}
    found += [(Path("q.json"), practical)]
    left_out = [pathological("fedcp", 3, 10.0, changes={"setting": "pathological"}),
                pathological("fedcp", 4, 10.0, changes={"setting": "pathological", "rounds": 300, "subsample": 0.5}),
                pathological("fedcp", 5, 10.0, changes={"rounds": 300})]
    found += [(Path(f"o{i}.json"), r) for i, r in enumerate(left_out)]
    cells = cells_of(CP, found)
    cell = cells[("pathological mnist", "fedcp")]
    assert cell.seeds() == [0, 1, 2] and cell.mean("best_acc_weighted") == pytest.approx(99.1)
    assert cells[("practical mnist", "fedcp")].seeds() == [0]
    assert len(other_settings(CP, found)) == 3
    counts = cell_counts(CP, cells)
    assert counts["recorded"] == 3 and counts["columns_recorded"] == 2
    judged = sum(counts["by_status"].get(s, 0) for s in ("reproduced", "differs", "inconclusive"))
    assert judged == 2 and counts["by_status"]["preliminary"] == 1  # three seeds each in pathological, one in practical
    claim = CP.claim(cells)
    assert "MNIST, pathological setting, 20 clients: FedCP 99.10 (n = 3) against the best other, FedAvg 99.10" \
        in claim["text"]


def test_a_column_s_notebook_is_executed_with_its_own_changes(monkeypatch, tmp_path):
    """The report executes each column's notebook narrowed to its records, with the column's
    changes to the preset, so that the notebook reads the very records the cells show."""
    import pflcore.report as report

    calls = []
    monkeypatch.setattr(report, "_execute_from_records",
                        lambda notebook, overrides, where, *a, **k: calls.append((where, overrides)) or ("x.html", []))
    for spec, found in ((T1, [hundred("fedpac", 0, 90.0), {**record(T1.notebook, "fedpac", 1, 92.0),
                                                            "preset_changes": {}}]),
                        (CP, [pathological("fedcp", 0, 99.0)])):
        cells = cells_of(spec, [(Path(f"{i}.json"), r) for i, r in enumerate(found)])
        report.execute_notebooks(spec, cells, tmp_path, tmp_path, lambda *a: None, [])
    assert calls == [("fedpac/t1_main/fmnist-20", {"methods": ["fedpac"], "seed": 1}),
                     ("fedpac/t1_main/fmnist-100", {"methods": ["fedpac"], "seed": 0, "num_clients": 100}),
                     ("fedcp/t2_main/pathological-mnist",
                      {"methods": ["fedcp"], "seeds": [0], "rounds": 300, "setting": "pathological"})]


# ---------------------------------------------------------------- pooling across numeric paths
def gpu_path(tf32_matmul: bool = False, tf32_cudnn: bool = False) -> dict:
    path = {name: numerics.UNKNOWN for name in numerics.KEY_FIELDS}
    path.update(device="cuda", gpu="NVIDIA H100 80GB HBM3", cuda="12.4", cudnn=90100, tf32_matmul=tf32_matmul,
                tf32_cudnn=tf32_cudnn, cudnn_deterministic=True, cudnn_benchmark=False, executor="sequential")
    return path


def cpu_path() -> dict:
    path = {name: numerics.UNKNOWN for name in numerics.KEY_FIELDS}
    path.update(device="cpu", cpu_vendor="AuthenticAMD", cpu_family="25", cpu_model_number="17",
                torch_cpu_capability="AVX512", training_threads=1, executor="sequential")
    return path


def on(rec: dict, path: dict, finished: str, **config) -> dict:
    """``rec`` as run on ``path`` (its provenance says so), finished at ``finished``."""
    gpu = path["device"] == "cuda"
    rec["provenance"].update(numeric_path=path, finished=finished, device=path["device"],
                             cpu_model="AMD EPYC", **({"gpu": path["gpu"], "cuda": path["cuda"]} if gpu else {}))
    rec["config"].update(device=path["device"], workers=0 if gpu else "auto", **config)
    rec["clients"]["final"] = [rec["summary"]["acc_mean"] - 1, rec["summary"]["acc_mean"] + 1]
    return rec


def row(spec, found: list[dict], column: str, method: str):
    cells = cells_of(spec, [(Path(f"r{i}.json"), r) for i, r in enumerate(found)])
    [hosts] = [h for h in hosts_and_replications(spec, cells, []) if h["row"].startswith(spec.row_name(method))]
    return cells[(column, method)], hosts


def test_the_pooling_rule_reads_the_numeric_path_and_the_precision():
    cpu = on(record(T1.notebook, "fedpac", 0, 90.0), cpu_path(), "2025-01-02T00:00:00")
    off = on(record(T1.notebook, "fedpac", 0, 90.0), gpu_path(), "2025-01-01T00:00:00")
    matmul = on(record(T1.notebook, "fedpac", 0, 90.0), gpu_path(tf32_matmul=True), "2025-01-01T00:00:00")
    cudnn = on(record(T1.notebook, "fedpac", 0, 90.0), gpu_path(tf32_cudnn=True), "2025-01-01T00:00:00")
    unknown = on(record(T1.notebook, "fedpac", 0, 90.0), {**gpu_path(), "tf32_cudnn": numerics.UNKNOWN}, "2025")
    bf16 = on(record(T1.notebook, "fedpac", 0, 90.0), cpu_path(), "2025", precision="bfloat16")
    assert [records.reduced_precision(r) for r in (cpu, off, matmul, cudnn, unknown, bf16)] == [
        None, None, "TF32 in matrix products", "TF32 in cuDNN convolutions", "TF32 settings not recorded",
        "bfloat16 autocast"]
    legacy = record(T1.notebook, "fedpac", 0, 90.0)  # a CPU record written before paths were kept
    assert records.pools(legacy) and records.pools(cpu) and records.pools(off) and not records.pools(cudnn)
    counted, others = records.pool([off, cudnn, cpu])
    assert counted is cpu and [o["record"] for o in others] == [off, cudnn]  # the CPU one, though finished last
    assert "never pooled" in others[1]["why"] and "never pooled" not in others[0]["why"]
    later = on(record(T1.notebook, "fedpac", 0, 90.0), gpu_path(), "2025-03-01T00:00:00")
    assert records.pool([later, off])[0] is off  # no CPU record: the one finished first
    assert records.pool([cudnn, matmul]) == (None, [{"record": cudnn, "why": "TF32 in cuDNN convolutions: never "
                                                     "pooled"}, {"record": matmul, "why": "TF32 in matrix products: "
                                                                                          "never pooled"}])
    assert records.same_setting(cpu, off) and records.same_setting(cpu, bf16)  # device, workers, precision aside
    assert not records.same_setting(cpu, on(record(T1.notebook, "fedpac", 0, 90.0, lr=0.5), cpu_path(), "2025"))
    assert records.host_of(off) == "NVIDIA H100 80GB HBM3, CUDA 12.4, float32 throughout"
    assert records.host_of(cudnn) == "NVIDIA H100 80GB HBM3, CUDA 12.4, TF32 in cuDNN convolutions"


def test_a_float32_gpu_seed_is_pooled_and_a_tf32_one_is_shown_beside_the_row_with_its_difference():
    """Seeds 0 and 2 on a CPU, seed 1 on a GPU in float32: one row of three seeds. Seed 3 on a GPU
    with TF32 on is never pooled: its line sets it against the row's mean and seed spread."""
    found = [on(record(T1.notebook, "fedpac", s, a), cpu_path(), f"2025-01-0{s + 1}")
             for s, a in ((0, 90.0), (2, 92.0))]
    found.append(on(record(T1.notebook, "fedpac", 1, 91.0), gpu_path(), "2025-01-05"))
    found.append(on(record(T1.notebook, "fedpac", 3, 95.0), gpu_path(tf32_matmul=True, tf32_cudnn=True), "2025-01-06"))
    cell, hosts = row(T1, found, "fmnist 20", "fedpac")
    assert cell.seeds() == [0, 1, 2] and cell.mean("acc_mean") == pytest.approx(91.0) and cell.std("acc_mean") == 1.0
    assert hosts["mixed"] and "seed 1: NVIDIA H100 80GB HBM3, CUDA 12.4, float32 throughout" in hosts["hosts"]
    [line] = hosts["not_counted"]
    # 95 against the mean 91 of seeds 0-2 (std 1): 4.00 of the std; the prediction interval 91 +- 4.303 * sqrt(4/3)
    # = 91 +- 4.97 holds 95, so within the spread
    assert line.startswith("seed 3 on NVIDIA H100 80GB HBM3, CUDA 12.4, TF32 in matrix products and cuDNN "
                           "convolutions (TF32 in matrix products and cuDNN convolutions: never pooled; not in the "
                           "mean, and no record of seed 3 counts)")
    assert ("within the seed spread of its row; final client mean 95.00 against the row's mean over its 3 counted "
            "seeds 91.00 (+4.000 points, 4.00 of the seed std)") in line
    found[-1]["summary"].update(acc_mean=97.0, best_acc_mean=97.0)  # beyond 91 + 4.97
    assert "outside the seed spread of its row" in row(T1, found, "fmnist 20", "fedpac")[1]["not_counted"][0]


def test_a_cpu_and_a_gpu_record_of_one_seed_count_once_the_cpu_one_and_the_gpu_one_is_a_replication():
    """Seed 0 on a GPU in float32 (finished first) and on a CPU: the CPU record counts; the GPU one
    is shown as a replication, set beside the CPU record against the seed spread; a bfloat16 run of
    seed 1 and a TF32 one of seed 2 likewise, each never pooled; the row keeps three seeds."""
    cpu = [on(record(T1.notebook, "fedpac", s, a), cpu_path(), "2025-02-01")
           for s, a in ((0, 90.0), (1, 91.0), (2, 92.0))]
    gpu = on(record(T1.notebook, "fedpac", 0, 90.5), gpu_path(), "2025-01-01")
    bf16 = on(record(T1.notebook, "fedpac", 1, 89.0), gpu_path(), "2025-01-01", precision="bfloat16")
    tf32 = on(record(T1.notebook, "fedpac", 2, 92.0), gpu_path(tf32_cudnn=True), "2025-01-01")
    cell, hosts = row(T1, [gpu, *cpu, bf16, tf32], "fmnist 20", "fedpac")
    assert cell.seeds() == [0, 1, 2] and cell.mean("acc_mean") == pytest.approx(91.0)
    assert all(r in cpu for r in cell.runs) and len(cell.others) == 3
    assert not hosts["mixed"] and hosts["hosts"].startswith("seeds 0, 1, 2: AMD EPYC")
    first, second, third = hosts["not_counted"]
    assert first.startswith("seed 0 on NVIDIA H100 80GB HBM3, CUDA 12.4, float32 throughout (another numeric path; "
                            "not in the mean: seed 0's record on AMD EPYC (family 25 model 17), AVX512, 1 training "
                            "thread(s) counts): ")
    assert ("within the seed spread of its row; final client mean 90.50 against the counted record's 90.00 "
            "(+0.500 points, 0.50 of the seed std), largest per-client difference 0.50 points (2 of 2 clients "
            "differ)") in first
    assert second.startswith("seed 1 on NVIDIA H100 80GB HBM3, CUDA 12.4, bfloat16 autocast (another numeric path, "
                             "bfloat16 autocast: never pooled;")
    assert "against the counted record's 91.00 (-2.000 points, 2.00 of the seed std)" in second
    assert "TF32 in cuDNN convolutions: never pooled" in third and "+0.000 points, 0.00 of the seed std" in third
    assert "bit for bit the record's numbers" in third  # the same numbers on another path: identical, said so

    with pytest.raises(records.RecordError, match="different configs"):  # another config is still refused
        cells_of(T1, [(Path("a.json"), cpu[0]),
                      (Path("b.json"), on(record(T1.notebook, "fedpac", 0, 90.0, lr=0.5), gpu_path(), "2025"))])


def test_the_pooling_rule_is_stated_with_its_reason_from_the_replications(monkeypatch, tmp_path):
    """Every page that states the reproduction rule states the pooling rule, its reason computed
    from the kept replications (how far a change of path moved a run, in seed stds); a build of a
    project whose records include a GPU seed counts it, and shows a TF32 one under its table."""
    def replication(diff: float, best: float, std: float, verdict_: str) -> tuple[Path, dict]:
        rep = record(T1.notebook, "fedpac", 0, 90.0 + diff)
        rep["replication_of"] = {
            "fingerprint": "x", "same_path": False, "verdict": verdict_,
            "metrics": {"acc_mean": {"ours": 90.0 + diff, "record": 90.0, "diff": diff},
                        "best_acc_mean": {"ours": 90.0 + best, "record": 90.0, "diff": best}},
            "spread": {"n": 3, "acc_mean": {"mean": 90.0, "std": std}, "best_acc_mean": {"mean": 90.0, "std": std}}}
        return Path("rep.json"), rep

    tf32 = replication(5.0, 5.0, 0.5, "outside_spread")  # in TF32: no evidence for pooling float32 runs
    tf32[1]["provenance"].update(device="cuda", numeric_path=gpu_path(tf32_cudnn=True))
    words = pooling_words([replication(0.1, -0.05, 0.5, "within_spread"), replication(-0.3, 0.2, 1.0, "within_spread"),
                           replication(0.9, 0.1, 0.3, "outside_spread"), tf32])
    assert "In the 3 replication(s) kept in float32" in words
    assert ("a change of path moved the final client mean by at most 3.00 and the best round's by at most 0.33 of "
            "the std over its setting's seeds, and 2 of the 3 judged lie within the 95% prediction interval") in words
    assert "TF32 off for matrix products and for cuDNN" in words and "never pooled" in words
    assert "the CPU one, else the one finished first" in words
    assert "No replication is kept yet" in pooling_words([])

    shipped = records.all_replications(ROOT / "reproductions")
    if shipped:  # the shipped pages' statement, recomputed from the replication records themselves
        largest = max(abs(r["replication_of"]["metrics"]["acc_mean"]["diff"])
                      / r["replication_of"]["spread"]["acc_mean"]["std"] for _, r in shipped)
        assert f"final client mean by at most {largest:.2f} and" in pooling_words(shipped)

    built = build_info(ROOT, [], [replication(0.1, -0.05, 0.5, "within_spread")])
    for html in (render_paper(Page("fedpac", "FedPAC"), verdict, built), render_index([], {}, [], 1.0, built=built)):
        html = unescape(html)
        assert "The reproduction rule." in html and "Which runs a row's mean pools." in html
        assert "at most 0.20 and the best round's by at most 0.10" in html

    root = tmp_path / "proj"
    for folder in ("notebooks", "params", "reproductions/fedpac/t1_main"):
        (root / folder).mkdir(parents=True)
    found = [on(record(T1.notebook, "fedpac", 0, 90.0), cpu_path(), "2025-01-01"),
             on(record(T1.notebook, "fedpac", 1, 91.0), gpu_path(), "2025-01-02"),
             on(record(T1.notebook, "fedpac", 2, 96.0), gpu_path(tf32_cudnn=True), "2025-01-03"),
             hundred("fedavg", 0, 80.0)]
    folder = root / "reproductions" / "fedpac" / "t1_main"
    paths = [folder / f"{i}-{records.record_name(r)}" for i, r in enumerate(found)]
    for path, rec in zip(paths, found):
        path.write_text(json.dumps(rec))
    monkeypatch.setattr(records, "all_records", lambda folder: list(zip(paths, found)))  # read as they are
    monkeypatch.setattr(records, "all_replications", lambda folder: [replication(0.1, -0.05, 0.5, "within_spread")])
    index = build(tmp_path / "site", root=root, execute=False, log=lambda *a: None)
    status, page = unescape(index.read_text()), unescape((index.parent / "fedpac.html").read_text())
    for html in (status, page):
        assert "Which runs a row's mean pools." in html and "at most 0.20 and the best round's by at most 0.10" in html
    t1 = status[status.rindex("<tr", 0, status.index('fedpac.html#fedpac-T1">T1<')):].split("</tr>")[0]
    assert "2 of 15 rows, 2 of 8 columns, 2 of 120 cells recorded: 2 preliminary" in t1
    assert "ours 90.50 ± 0.71 (n = 2 seeds, std ddof 1)" in page  # the CPU and the float32 GPU seed
    assert "1 record(s) of a row's seed that do not count in its mean" in page
    assert "seed 2 on NVIDIA H100 80GB HBM3, CUDA 12.4, TF32 in cuDNN convolutions" in page
    assert "ours 80.00 (n = 1 seed, std ddof 1)" in page  # the 100-client column's record
