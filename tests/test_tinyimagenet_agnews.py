"""The Tiny-ImageNet and AG News loaders on small files written here (pflcore/data/sources/tinyimagenet.py, agnews.py)."""
from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
import torch

from pflcore.data import sources
from pflcore.data.sources import DatasetCorruptError, DatasetNotFoundError, load_dataset
from pflcore.data.sources.agnews import build_vocab, load_agnews, probe_agnews, tokenize
from pflcore.models.text import fasttext

Image = pytest.importorskip("PIL.Image")


def assert_one_sentence(message: str) -> None:
    assert "\n" not in message and message.count(". ") == 0, message


# ------------------------------------------------------------------------------ Tiny-ImageNet

WNIDS = ("n02", "n01", "n03")  # wnids.txt order, not sorted order, gives the labels


def _jpeg(path: Path, value: int, size: int = 64, mode: str = "RGB") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    colour = value if mode == "L" else (value, 255 - value, 7)
    Image.new(mode, (size, size), colour).save(path, format="JPEG", quality=95)


def write_tiny(root: Path, per_class: int = 2) -> Path:
    """A tiny-imagenet-200 tree: each class's images are one flat colour (value 40 * label + 10)."""
    top = root / "tiny-imagenet-200"
    (top / "wnids.txt").parent.mkdir(parents=True, exist_ok=True)
    (top / "wnids.txt").write_text("\n".join(WNIDS) + "\n")
    for label, wnid in enumerate(WNIDS):
        for j in range(per_class):
            _jpeg(top / "train" / wnid / "images" / f"{wnid}_{j}.JPEG", 40 * label + 10)
        (top / "train" / wnid / f"{wnid}_boxes.txt").write_text("")
    lines = []
    for i, wnid in enumerate(["n03", "n02", "n01", "n03"]):
        _jpeg(top / "val" / "images" / f"val_{i}.JPEG", 40 * WNIDS.index(wnid) + 10, mode="L" if i == 1 else "RGB")
        lines.append(f"val_{i}.JPEG\t{wnid}\t0\t1\t60\t62")
    (top / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    _jpeg(top / "test" / "images" / "test_0.JPEG", 0)  # unlabelled: ignored
    return top


def _check_tiny(ds) -> None:
    assert ds.name == "tinyimagenet" and ds.num_classes == 3 and ds.classes == WNIDS
    assert ds.train_x.shape == (6, 3, 64, 64) and ds.train_x.dtype == torch.uint8
    assert ds.train_y.tolist() == [0, 0, 1, 1, 2, 2]
    assert ds.test_x.shape == (4, 3, 64, 64)
    assert ds.test_y.tolist() == [2, 0, 1, 2]  # the annotation file's order, labels from wnids.txt
    red = ds.train_x[:, 0].float().mean(dim=(1, 2))
    assert torch.allclose(red, 40 * ds.train_y.float() + 10, atol=3)
    grey = ds.test_x[1].float()  # a greyscale JPEG becomes RGB with equal channels
    assert torch.allclose(grey[0], grey[1]) and abs(float(grey.mean()) - 10) < 3


def test_tinyimagenet_folder(iso: Path):
    write_tiny(iso / "data")
    assert sources.canonical_name("Tiny-ImageNet") == sources.canonical_name("tiny_imagenet") == "tinyimagenet"
    assert sources.SHAPES["tinyimagenet"] == (3, 64, 200)
    _check_tiny(load_dataset("tiny-imagenet", root=iso / "data", download=False))


def test_tinyimagenet_zip_and_download_spec(iso: Path):
    top = write_tiny(iso / "src")
    (iso / "data").mkdir()
    with zipfile.ZipFile(iso / "data" / "tiny-imagenet-200.zip", "w") as zf:
        for p in sorted(top.rglob("*")):
            zf.write(p, p.relative_to(iso / "src").as_posix())
    _check_tiny(load_dataset("tinyimagenet", root=iso / "data", download=False))
    spec = sources._DOWNLOADS["tinyimagenet"]
    assert spec.files == (("tiny-imagenet-200.zip", "90528d7ca1a48142e341f4ef8d21d0de"),)
    assert spec.mirrors == ("http://cs231n.stanford.edu/",)


def test_tinyimagenet_not_found(iso: Path):
    (iso / "empty").mkdir()
    with pytest.raises(DatasetNotFoundError) as info, pytest.warns(UserWarning, match="holds no tinyimagenet"):
        load_dataset("tinyimagenet", root=iso / "empty", download=False)
    assert "tiny-imagenet-200.zip" in str(info.value)


@pytest.mark.parametrize("damage,needle", [
    ("missing_class", "n01/images"),
    ("bad_line", "val_annotations.txt: line 2"),
    ("unknown_wnid", "val_annotations.txt: line 1"),
    ("missing_val_image", "val_annotations.txt: line 3"),
    ("not_jpeg", "n03_1.JPEG"),
    ("wrong_size", "val_0.JPEG"),
])
def test_tinyimagenet_corruption_names_the_file(iso: Path, damage: str, needle: str):
    top = write_tiny(iso / "data")
    ann = top / "val" / "val_annotations.txt"
    lines = ann.read_text().splitlines()
    if damage == "missing_class":
        for p in (top / "train" / "n01" / "images").iterdir():
            p.unlink()
        (top / "train" / "n01" / "images").rmdir()
    elif damage == "bad_line":
        lines[1] = "val_1.JPEG n02 0 1 60 62"  # spaces, not tabs
    elif damage == "unknown_wnid":
        lines[0] = lines[0].replace("n03", "n99")
    elif damage == "missing_val_image":
        (top / "val" / "images" / "val_2.JPEG").unlink()
    elif damage == "not_jpeg":
        (top / "train" / "n03" / "images" / "n03_1.JPEG").write_bytes(b"\xff\xd8 not really a jpeg")
    elif damage == "wrong_size":
        _jpeg(top / "val" / "images" / "val_0.JPEG", 10, size=32)
    ann.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetCorruptError) as info:
        load_dataset("tinyimagenet", root=iso / "data", download=False)
    assert needle in str(info.value)
    assert_one_sentence(str(info.value))


# ------------------------------------------------------------------------------ AG News

TRAIN_CSV = (
    '"3","Wall St. Bears Claw Back","Reuters - Short-sellers, Wall Street\'s dwindling band"\n'
    '"1","Rockets, hit ""Target""","The rocket hit the target, officials said."\n'
    '"2","Team wins","The team wins again"\n'
    '"4","New chip","Chip makers don\'t rest"\n'
)
TEST_CSV = (
    '"2","Team loses","The zebra team loses"\n'
    '"4","Chip, chip","quantum chip"\n'
)


def write_agnews(folder: Path, train: str = TRAIN_CSV, test: str = TEST_CSV) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.csv").write_text(train, encoding="utf-8")
    (folder / "test.csv").write_text(test, encoding="utf-8")
    return folder


def test_tokenize():
    assert tokenize('Wall Street\'s "Big" U.S. deal, 2004!') == ["wall", "street's", "big", "u", "s", "deal", "2004"]
    assert tokenize("'quoted' don't") == ["quoted", "don't"]


def test_load_agnews(tmp_path: Path):
    write_agnews(tmp_path / "ag_news_csv")
    assert probe_agnews(tmp_path) == tmp_path / "ag_news_csv"
    train_x, train_y, test_x, test_y, vocab = load_agnews(tmp_path, max_len=8)
    assert train_x.shape == (4, 8) and test_x.shape == (2, 8)
    assert train_x.dtype == test_x.dtype == train_y.dtype == torch.int64
    assert train_y.tolist() == [2, 0, 1, 3] and test_y.tolist() == [1, 3]
    assert vocab["<pad>"] == 0 and vocab["<unk>"] == 1
    inverse = {i: t for t, i in vocab.items()}
    # the quoted comma and the escaped quote: title "Rockets, hit "Target"" + description
    row = [inverse[int(i)] for i in train_x[1]]
    assert row == ["rockets", "hit", "target", "the", "rocket", "hit", "the", "target"]  # cut at max_len
    assert "street's" in vocab and "don't" in vocab
    # vocabulary from train only: test's new words are unknown (1); most frequent first
    assert "zebra" not in vocab and "quantum" not in vocab and "loses" not in vocab
    assert vocab["the"] == 2
    test_words = ["team", "loses", "the", "zebra", "team", "loses"]
    assert test_x[0].tolist() == [vocab.get(w, 1) for w in test_words] + [0, 0]
    assert test_x[0].tolist().count(1) == 3
    assert test_x[1].tolist() == [vocab["chip"]] * 2 + [1, vocab["chip"]] + [0] * 4
    # min_freq drops rare words; padding fills the end
    _, _, test_x2, _, vocab2 = load_agnews(tmp_path, max_len=200, min_freq=2)
    assert set(vocab2) == {"<pad>", "<unk>", "the", "hit", "target", "chip", "team", "wins", "wall"}
    assert test_x2.shape == (2, 200) and int((test_x2[0] != 0).sum()) == 6


def test_agnews_feeds_fasttext(tmp_path: Path):
    data = load_agnews(write_agnews(tmp_path), max_len=16)
    model = fasttext(vocab_size=len(data.vocab), num_classes=4)
    assert model(data.train_tokens).shape == (4, 4)


def test_build_vocab_is_deterministic():
    vocab = build_vocab([["b", "a", "c"], ["c", "b"]])
    assert vocab == {"<pad>": 0, "<unk>": 1, "b": 2, "c": 3, "a": 4}


@pytest.mark.parametrize("train,needle", [
    ('"5","t","d"\n', "line 1 has class '5'"),
    ('"1","t","d"\n"2","only two"\n', "line 2 has 2 fields"),
    ('"1","t","d"\n"2","bad "quote" here","d"\n', "malformed CSV"),
    ("", "holds no rows"),
])
def test_agnews_corruption(tmp_path: Path, train: str, needle: str):
    write_agnews(tmp_path, train=train)
    with pytest.raises(DatasetCorruptError) as info:
        load_agnews(tmp_path)
    assert needle in str(info.value) and "train.csv" in str(info.value)
    assert_one_sentence(str(info.value))


def test_agnews_not_found(tmp_path: Path):
    with pytest.raises(DatasetNotFoundError, match="train.csv and test.csv"):
        load_agnews(tmp_path)
    assert probe_agnews(tmp_path) is None
