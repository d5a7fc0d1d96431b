"""The text path (FedCP section 6.1, Table 2's AG News column): ``dataset: agnews`` with
``model: fasttext`` end to end, on small CSV files in AG News's format written here; the
token Dataset and FederatedData; the model/dataset refusals; PFLlib's text format."""
from __future__ import annotations

import csv
import dataclasses
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from pflcore.config import ExperimentConfig
from pflcore.data import sources
from pflcore.data.federated import FederatedData
from pflcore.data.partition import make_partition
from pflcore.data.sources import Dataset, DatasetCorruptError, TextShape, load_dataset
from pflcore.data.sources.agnews import CLASSES, MAX_LEN, load_agnews
from pflcore.engine import build_data, run
from pflcore.engine.simulation import initial_model
from pflcore.errors import ConfigError
from pflcore.models import INPUTS, build_model
from pflcore.models.text import FastTextBody

#: A few words per class, so that fastText can learn something in two rounds.
WORDS = {
    1: ["minister", "election", "troops", "president", "talks", "iraq"],
    2: ["team", "season", "coach", "game", "league", "cup"],
    3: ["stocks", "profit", "shares", "oil", "market", "quarter"],
    4: ["software", "internet", "computer", "space", "chip", "web"],
}


def one_sentence(message: str) -> None:
    assert message.endswith(".") and ". " not in message and "\n" not in message, message


def write_csv(path: Path, rows: int, seed: int) -> None:
    """``rows`` AG News rows: "class","title","description", every field quoted, with
    commas inside fields and quotes escaped as "" (as in the real files)."""
    rng = random.Random(seed)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\n")
        for i in range(rows):
            label = i % 4 + 1
            words = WORDS[label]
            title = f'{rng.choice(words).title()}, "{rng.choice(words)}" {rng.choice(words)}'
            body = " ".join(rng.choices(words, k=4)) + f", it's {rng.choice(words)} (AP)"
            writer.writerow([str(label), title, body])


@pytest.fixture
def agnews_root(iso: Path) -> Path:
    """200 train rows and 80 test rows in ``<tmp>/data/ag_news_csv/``."""
    folder = iso / "data" / "ag_news_csv"
    folder.mkdir(parents=True)
    write_csv(folder / "train.csv", 200, seed=1)
    write_csv(folder / "test.csv", 80, seed=2)
    return iso / "data"


def text_config(root: Path, out: Path, **changes) -> dict:
    values = dict(method="fedavg", dataset="agnews", data_root=str(root), model="fasttext", num_clients=4,
                  rounds=2, local_epochs=1, batch_size=10, lr=0.1, partition={"kind": "dirichlet", "alpha": 0.5},
                  workers=0, output_dir=str(out), quiet=True, seed=3)
    values.update(changes)
    return values


# --------------------------------------------------------------------------- the dataset


def test_agnews_is_a_registered_token_dataset(agnews_root: Path) -> None:
    ds = load_dataset("AG News", root=agnews_root, download=False)  # alias, found in ag_news_csv/
    assert ds.name == "agnews" and ds.inputs == "tokens" and ds.num_classes == 4 and ds.classes == CLASSES
    assert ds.train_x.shape == (200, MAX_LEN) and ds.test_x.shape == (80, MAX_LEN)
    assert ds.train_x.dtype == ds.test_x.dtype == torch.int64
    assert ds.mean == ds.std == () and ds.in_channels is None and ds.image_size is None
    assert ds.seq_len == MAX_LEN and ds.shape == TextShape(MAX_LEN, ds.vocab_size, 4)
    assert ds.train_y.tolist()[:8] == [0, 1, 2, 3] * 2
    # the standalone parser gives the same ids; the vocabulary is the training split's
    standalone = load_agnews(agnews_root)
    assert torch.equal(ds.train_x, standalone.train_tokens) and torch.equal(ds.test_x, standalone.test_tokens)
    assert ds.vocab_size == len(standalone.vocab) == 2 + 24 + 2  # <pad>, <unk>, the words, "it's", "ap"
    assert int(ds.train_x.max()) < ds.vocab_size and int(ds.test_x.max()) < ds.vocab_size
    assert load_dataset("agnews", root=agnews_root) is ds  # cached on the files' stamps
    assert sources.SHAPES["agnews"] == sources.dataset_shape("agnews") == TextShape(200, None, 4)
    assert "tokens=200" in repr(ds)


def test_agnews_download_is_pinned_and_damage_is_one_sentence(iso: Path) -> None:
    spec = sources._DOWNLOADS["agnews"]
    assert [name for name, _ in spec.files] == ["train.csv", "test.csv"]
    assert all(len(md5) == 32 for _, md5 in spec.files) and spec.mirrors[0].startswith("https://")
    folder = iso / "bad"
    folder.mkdir()
    write_csv(folder / "train.csv", 8, seed=0)
    (folder / "test.csv").write_text('"1","title","body"\n"7","bad","class"\n')
    with pytest.raises(DatasetCorruptError) as info:
        load_dataset("agnews", root=folder, download=False)
    assert "test.csv" in str(info.value) and "class '7'" in str(info.value)


def test_token_dataset_validates_its_fields() -> None:
    x, y = torch.tensor([[2, 3, 0], [4, 0, 0]]), torch.tensor([0, 1])
    ds = Dataset("toy", x, y, x, y, 2, (), (), vocab_size=5)
    assert ds.inputs == "tokens" and ds.seq_len == 3
    for kwargs, needle in [(dict(vocab_size=None), "vocab_size"), (dict(vocab_size=4), r"outside \[0, 4\)"),
                           (dict(vocab_size=5, mean=(0.5,), std=(0.5,)), "no mean and std")]:
        values = dict(name="toy", train_x=x, train_y=y, test_x=x, test_y=y, num_classes=2, mean=(), std=())
        values.update(kwargs)
        with pytest.raises(ValueError, match=needle):
            Dataset(**values)
    images = torch.zeros(2, 1, 4, 4, dtype=torch.uint8)
    with pytest.raises(ValueError, match="token ids"):  # images and ids do not mix
        Dataset("toy", x, y, images, y, 2, (), (), vocab_size=5)
    with pytest.raises(ValueError, match="vocab_size is for token datasets"):
        Dataset("toy", images, y, images, y, 2, (0.0,), (1.0,), vocab_size=5)


@pytest.mark.parametrize("kind,params", [("dirichlet", {"alpha": 0.1}), ("pfllib_dirichlet", {"least_samples": 10}),
                                         ("pathological", {"classes_per_client": 2, "samples_per_client": 16}), ("iid", {})])
def test_federated_data_passes_token_ids_through(agnews_root: Path, kind: str, params: dict) -> None:
    ds = load_dataset("agnews", root=agnews_root)
    partition = make_partition(kind, ds.train_y.numpy(), ds.test_y.numpy(), 4, seed=0, num_classes=4, **params)
    data = FederatedData(ds, partition)
    assert data.inputs == "tokens" and data.vocab_size == ds.vocab_size and data.seq_len == MAX_LEN
    assert data.in_channels is None and data.image_size is None
    pooled_x, pooled_y = torch.cat([ds.train_x, ds.test_x]), torch.cat([ds.train_y, ds.test_y])
    for split, packed, indices in (("train", data.train_x, partition.train), ("test", data.test_x, partition.test)):
        assert packed.dtype == torch.int64 and packed.shape == (sum(len(i) for i in indices), MAX_LEN)
        start = 0
        for cid, idx in enumerate(indices):
            client = getattr(data, split)[cid]
            index = torch.tensor(np.asarray(idx), dtype=torch.int64)
            assert torch.equal(client.x, pooled_x[index]) and torch.equal(client.y, pooled_y[index])
            if len(idx):
                assert client.x.data_ptr() == packed[start].data_ptr()
            start += len(idx)
    assert int(data.class_counts().sum()) == sum(len(i) for i in partition.train)


# --------------------------------------------------------------------------- end to end


@pytest.mark.parametrize("method", ["fedavg", "fedcp"])
def test_agnews_fasttext_runs_end_to_end_and_repeats(agnews_root: Path, tmp_path: Path, method: str) -> None:
    first = run(text_config(agnews_root, tmp_path / "a", method=method))
    again = run(text_config(agnews_root, tmp_path / "b", method=method))
    assert first.summary["rounds"] == 2 and first.summary["dataset"] == "agnews"
    for key in ("acc_mean", "acc_weighted", "best_acc_weighted", "final_train_loss"):
        assert math.isfinite(first.summary[key]), key
    assert 0 <= first.summary["acc_weighted"] <= 100
    assert np.array_equal(first.acc_history, again.acc_history)  # same seed, same numbers
    assert [h["train_loss"] for h in first.history] == [h["train_loss"] for h in again.history]
    other = run(text_config(agnews_root, tmp_path / "c", method=method, seed=4))
    assert other.history[-1]["train_loss"] != first.history[-1]["train_loss"]


def test_model_is_built_for_the_vocabulary(agnews_root: Path, tmp_path: Path) -> None:
    config = ExperimentConfig.from_dict(text_config(agnews_root, tmp_path))
    data = build_data(config)
    model = initial_model(config, data)
    assert isinstance(model.body, FastTextBody) and model.body.embedding.num_embeddings == data.vocab_size
    assert model.head.out_features == 4 and model(data.test_x[:3]).shape == (3, 4)
    assert INPUTS["fasttext"] == "tokens" and INPUTS["fedcp_cnn"] == "images"
    with pytest.raises(ValueError, match="vocab_size"):
        build_model("fasttext", None, 4)
    with pytest.raises(ValueError, match="takes images"):
        build_model("mlp", 1, 10, 8, vocab_size=30)


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("changes,needles", [
    ({"model": "fasttext", "dataset": "fmnist", "data_root": None},
     ["'model' = 'fasttext'", "token ids (text)", "'fmnist' holds 1x28x28 images", "'fedcp_cnn'"]),
    ({"model": "fedcp_cnn"}, ["'model' = 'fedcp_cnn'", "reads images", "'agnews' holds token ids", "['fasttext']"]),
    ({"model": "mlp"}, ["'model' = 'mlp'", "'agnews' holds token ids"]),
    ({"shift": {"kind": "rotation"}}, ["'shift'", "rotation turns images"]),
])
def test_mismatched_model_and_dataset_are_refused_in_one_sentence(agnews_root: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch, changes: dict,
                                                                  needles: list[str]) -> None:
    def no_loading(found):
        raise AssertionError("the config was checked by loading data")

    for name in ("agnews", "fmnist"):  # refused before any work: no dataset is parsed
        monkeypatch.setitem(sources._SOURCES, name, dataclasses.replace(sources._SOURCES[name], load=no_loading))
    with pytest.raises(ConfigError) as info:
        ExperimentConfig.from_dict(text_config(agnews_root, tmp_path, **changes))
    message = str(info.value)
    one_sentence(message)
    assert all(n in message for n in needles), message


def test_label_permutation_shift_works_on_text(agnews_root: Path, tmp_path: Path) -> None:
    config = ExperimentConfig.from_dict(text_config(agnews_root, tmp_path, shift={"kind": "label_permutation",
                                                                                  "groups": 2}))
    plain = build_data(config.replace(shift=None))
    shifted = build_data(config)
    assert torch.equal(plain.train_x, shifted.train_x)
    assert not torch.equal(plain.train_y, shifted.train_y)


# --------------------------------------------------------------------------- PFLlib's text format


def save_text_client(path: Path, ids: list[list[int]], labels: list[int]) -> None:
    """As PFLlib's AG News generator saves a client: ``x`` an object array of rows
    (token id list padded to L, length), ``y`` the labels, in ``np.savez_compressed``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    x = np.array([(row, len(row)) for row in ids], dtype=object)
    with open(path, "wb") as f:
        np.savez_compressed(f, data={"x": x, "y": np.array(labels)})


def write_text_folder(root: Path, names: str = "plain", seq_len: int = 6, clients: int = 3) -> list:
    rng = np.random.default_rng(0)
    data, stats = [], []
    for i in range(clients):
        parts = []
        for split, n in (("train", 9 + i), ("test", 3)):
            ids = rng.integers(1, 40, (n, seq_len))
            ids[:, seq_len - 2:] = 0  # padding at the end
            labels = rng.integers(0, 4, n)
            name = f"{i}.npz" if names == "plain" else f"{split}{i}_.npz"
            save_text_client(root / split / name, ids.tolist(), labels.tolist())
            parts += [ids, labels]
        data.append(parts)
        y = np.concatenate([parts[1], parts[3]])
        stats.append([[int(k), int((y == k).sum())] for k in np.unique(y)])
    config = {"num_clients": clients, "num_classes": 4, "non_iid": True, "balance": False, "partition": "dir",
              "Size of samples for labels in clients": stats, "alpha": 0.1, "batch_size": 10}
    (root / "config.json").write_text(json.dumps(config))
    return data


@pytest.mark.parametrize("names", ["plain", "fedcp"])
def test_pfllib_text_folder(iso: Path, tmp_path: Path, names: str) -> None:
    root = iso / "AGNews"
    clients = write_text_folder(root, names)
    assert sources.dataset_shape("pfllib", root) == TextShape(6, None, 4)
    ds = load_dataset("pfllib", root=root, download=False)
    assert ds.inputs == "tokens" and ds.mean == ()
    assert torch.equal(ds.train_x, torch.from_numpy(np.concatenate([c[0] for c in clients])))
    assert torch.equal(ds.test_y, torch.from_numpy(np.concatenate([c[3] for c in clients])))
    assert ds.vocab_size == 1 + max(int(c[k].max()) for c in clients for k in (0, 2))
    assert ds.owners is not None and ds.owners[1].tolist() == [0] * 3 + [1] * 3 + [2] * 3
    result = run(dict(method="fedavg", dataset="pfllib", data_root=str(root), model="fasttext",
                      partition={"kind": "given"}, num_clients=3, rounds=1, local_epochs=1, batch_size=4, lr=0.1,
                      workers=0, output_dir=str(tmp_path / "out"), quiet=True))
    assert math.isfinite(result.summary["acc_weighted"])
    with pytest.raises(ConfigError) as info:
        ExperimentConfig.from_dict(dict(method="fedavg", dataset="pfllib", data_root=str(root), model="mlp",
                                        partition={"kind": "given"}, num_clients=3))
    one_sentence(str(info.value))
    assert "'pfllib' holds token ids" in str(info.value)


@pytest.mark.parametrize("damage,needle", [
    ("ragged", "not all of one length"),
    ("negative", "token id -3 is negative"),
    ("length", "outside 0..6"),
    ("mixed", "holds 1x6x6 images but"),
])
def test_pfllib_text_damage_is_one_sentence(iso: Path, damage: str, needle: str) -> None:
    root = iso / "AGNews"
    clients = write_text_folder(root)
    target = root / "test" / "2.npz"
    ids, labels = clients[2][2].tolist(), clients[2][3].tolist()
    if damage == "ragged":
        ids[1] = ids[1][:4]
    elif damage == "negative":
        ids[0][0] = -3
    if damage == "length":
        x = np.array([(row, 9) for row in ids], dtype=object)
        with open(target, "wb") as f:
            np.savez_compressed(f, data={"x": x, "y": np.array(labels)})
    elif damage == "mixed":
        with open(target, "wb") as f:
            np.savez_compressed(f, data={"x": np.zeros((3, 1, 6, 6), np.float32), "y": np.array(labels)})
    else:
        save_text_client(target, ids, labels)
    with pytest.raises(DatasetCorruptError) as info:
        load_dataset("pfllib", root=root, download=False)
    one_sentence(str(info.value))
    assert needle in str(info.value) and "2.npz" in str(info.value)
