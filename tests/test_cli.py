"""The pflcore command line."""
from __future__ import annotations

import json

from pflcore.cli import main


def test_run_writes_results(tmp_path, capsys):
    config = tmp_path / "exp.yaml"
    config.write_text("method: fedper\ndataset: digits\nmodel: mlp\nnum_clients: 3\nrounds: 2\n"
                      "local_epochs: 1\nbatch_size: 16\nlr: 0.05\n"
                      "partition: {kind: dominant, s: 0.2, samples_per_client: 60}\n")
    code = main(["run", str(config), "--output-dir", str(tmp_path / "res"), "--name", "cli",
                 "--set", "partition.s=0.5", "--set", "seed=3", "--quiet"])
    assert code == 0
    out = capsys.readouterr().out
    summary = json.loads(out[: out.rindex("}") + 1])
    assert summary["rounds"] == 2 and summary["method"] == "fedper"
    recorded = json.loads((tmp_path / "res" / "cli" / "config.json").read_text())["config"]
    assert recorded["partition"]["s"] == 0.5 and recorded["seed"] == 3


def test_bad_value_gets_one_sentence_and_exit_2(tmp_path, capsys):
    code = main(["run", "--method", "fedfoo", "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "'method'" in err and "fedavg" in err
    assert not any(tmp_path.iterdir())
