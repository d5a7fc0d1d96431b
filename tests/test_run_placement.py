"""PFLCORE_DEVICE and PFLCORE_WORKERS: where this process's runs train, whatever their configs say
(pflcore.config.placed, applied where a run takes its config). Neither enters a fingerprint; a run's
record says where it ran; a bad value is one sentence naming the variable."""
from __future__ import annotations

import pytest

from pflcore.config import DEVICE_ENV, WORKERS_ENV, as_config, placed
from pflcore.engine.vectorised import CLIENT_BY_CLIENT, COVERED
from pflcore.errors import ConfigError

from conftest import tiny_config


@pytest.fixture(autouse=True)
def unset(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    monkeypatch.delenv(WORKERS_ENV, raising=False)


def test_unset_or_empty_leaves_the_config_as_it_is(tmp_path, monkeypatch):
    config = tiny_config(tmp_path, workers=2)
    assert as_config(config) is config
    monkeypatch.setenv(DEVICE_ENV, "")
    monkeypatch.setenv(WORKERS_ENV, " ")
    assert placed(config) is config


def test_vectorised_where_it_stacks_the_method_else_in_this_process(tmp_path, monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    monkeypatch.setenv(WORKERS_ENV, "vectorised")
    base = tiny_config(tmp_path)
    stacked = placed(base.replace(method="fedavg", workers="auto"))
    assert (stacked.device, stacked.workers) == ("cpu", "vectorised")
    for method in ("fedcp", "pfedme", "fedem"):  # run client by client, or not covered at all
        assert method in CLIENT_BY_CLIENT or method not in COVERED
        config = base.replace(method=method, workers="auto")
        moved = placed(config)
        assert moved.workers == 0 and moved.fingerprint() == config.fingerprint(), method
    monkeypatch.setenv(WORKERS_ENV, "3")
    assert placed(base).workers == 3
    monkeypatch.setenv(WORKERS_ENV, "auto")
    assert placed(base).workers == "auto"


def test_bad_values_are_one_sentence_naming_the_variable(tmp_path, monkeypatch):
    config = tiny_config(tmp_path)
    cases = [(DEVICE_ENV, "gpu", "PFLCORE_DEVICE='gpu' cannot be used: use 'cpu', 'cuda' or 'cuda:N'"),
             (WORKERS_ENV, "-1", "PFLCORE_WORKERS='-1' cannot be used: it takes what the field workers takes"),
             (WORKERS_ENV, "many", "PFLCORE_WORKERS='many' cannot be used"),
             (WORKERS_ENV, "99999", "a whole number from 0 to 1024")]
    import torch

    if not torch.cuda.is_available():
        cases.append((DEVICE_ENV, "cuda", "PFLCORE_DEVICE='cuda' cannot be used: this PyTorch"))
    for name, value, said in cases:
        monkeypatch.setenv(name, value)
        with pytest.raises(ConfigError) as caught:
            as_config(config)
        text = str(caught.value)
        assert said in text and text.count("\n") == 0 and text.endswith("."), (name, value, text)
        monkeypatch.delenv(name)


def test_a_gpu_with_worker_processes_says_which_variable_to_set(tmp_path, monkeypatch):
    """The config asks for 2 worker processes, PFLCORE_DEVICE a GPU: refused, naming the fix
    (checked with a stand-in device check, so that it holds on a machine without a GPU)."""
    import pflcore.config as config_module

    monkeypatch.setattr(config_module, "device_problem", lambda device: None)
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    with pytest.raises(ConfigError, match=r"^PFLCORE_DEVICE=cuda cannot place this fedavg run: .*worker processes "
                                          r"are for CPU runs.*; set PFLCORE_WORKERS too \(0, 'auto' or 'vectorised'\)"
                                          r"\.$"):
        as_config(tiny_config(tmp_path, workers=2))
    monkeypatch.setenv(WORKERS_ENV, "vectorised")
    moved = as_config(tiny_config(tmp_path, workers=2))
    assert (moved.device, moved.workers) == ("cuda", "vectorised")


def test_a_run_s_record_says_where_it_ran_and_keeps_its_fingerprint(tmp_path, monkeypatch):
    from pflcore.engine import run

    config = tiny_config(tmp_path, rounds=1)
    monkeypatch.setenv(WORKERS_ENV, "vectorised")
    result = run(config.to_dict())
    assert result.config.workers == "vectorised" and result.config.fingerprint() == config.fingerprint()
    assert result.path.name == config.run_name()
    assert result.summary["provenance"]["numeric_path"]["executor"] == "vectorised"
