"""The ten image corruptions of pFedFDA's CIFAR-S (appendix C.1.1 / Hendrycks & Dietterich
2019) and the ``corruption`` shift that builds "-S" datasets from them."""
from __future__ import annotations

import colorsys
import math
import warnings

import pytest
import torch

from pflcore.config import ExperimentConfig
from pflcore.data import corruptions as C
from pflcore.data import sources
from pflcore.data.corruptions import (CORRUPTIONS, PARAMETERS, RANDOM_CORRUPTIONS, cached_corrupt, corrupt,
                                      disk_kernel, jpeg_round_trip, motion_offsets, quantisation_table)
from pflcore.data.federated import FederatedData
from pflcore.data.partition import make_partition
from pflcore.data.shifts import ShiftError, corruption_assignment, make_shift
from pflcore.engine import build_data
from pflcore.errors import ConfigError


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Every cache file of these tests goes to tmp (the corruption cache sits under cache_dir())."""
    monkeypatch.setattr(sources, "cache_dir", lambda: tmp_path / "cache")
    return tmp_path / "cache" / "corruptions"


def scene(channels: int, n: int = 4, side: int = 24) -> torch.Tensor:
    """A natural-ish batch in [0, 1]: smooth colour gradients, a red disk, a dark square."""
    yy, xx = torch.meshgrid(torch.linspace(0, 1, side), torch.linspace(0, 1, side), indexing="ij")
    images = []
    for i in range(n):
        base = torch.stack([0.25 + 0.5 * xx, 0.2 + 0.6 * yy, 0.5 + 0.3 * torch.sin(6 * xx + i)])
        disk = (((xx - 0.3 - 0.1 * i) ** 2 + (yy - 0.55) ** 2) < 0.04).float()
        square = ((xx > 0.6) & (xx < 0.85) & (yy > 0.15) & (yy < 0.4)).float()
        image = base * (1 - disk) + disk * torch.tensor([0.9, 0.2, 0.1]).view(3, 1, 1)
        images.append(image * (1 - square) + 0.05 * square)
    x = torch.stack(images)
    return x if channels == 3 else x.mean(1, keepdim=True)


def one_sentence(message: str) -> None:
    assert message.endswith(".") and ". " not in message and "\n" not in message, message


# ------------------------------------------------------------------------- the corruptions


def decorrelation(a: torch.Tensor, b: torch.Tensor) -> float:
    """1 - Pearson correlation per image, averaged."""
    a = a.flatten(1) - a.flatten(1).mean(1, keepdim=True)
    b = b.flatten(1) - b.flatten(1).mean(1, keepdim=True)
    return float((1 - (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))).mean())


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("name", CORRUPTIONS)
def test_distortion_grows_with_severity(name, channels):
    x = scene(channels)
    if name == "frost":  # the image is dimmed as the texture grows: its share, not the MSE, rises
        distortion = [decorrelation(corrupt(x, name, s, seed=1), x) for s in range(1, 6)]
    else:
        distortion = [float(((corrupt(x, name, s, seed=1) - x) ** 2).mean()) for s in range(1, 6)]
    for severity, (low, high) in enumerate(zip(distortion, distortion[1:]), start=1):
        if name == "motion_blur" and severity == 3:  # radius 6 vs 8 at sigma 2: the extra taps weigh < 1e-9
            assert high == pytest.approx(low, rel=1e-6), distortion
        else:
            assert high > low, (severity, distortion)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("channels", [1, 3])
def test_shape_dtype_and_range_are_kept(channels, dtype):
    x = scene(channels, n=3, side=20).to(dtype)  # 20: not a multiple of JPEG's blocks
    for name in CORRUPTIONS:
        for severity in (1, 5):
            out = corrupt(x, name, severity, seed=0)
            assert out.shape == x.shape and out.dtype == dtype and out.device == x.device, name
            assert out.min() >= 0 and out.max() <= 1, name
            assert not torch.equal(out, x), name


def test_tiny_images_are_corrupted_too():  # 8x8 (scikit-learn digits): kernels and textures larger than the image
    x = scene(1, n=2, side=8)
    for name in CORRUPTIONS:
        assert corrupt(x, name, 5, seed=0).shape == x.shape


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_seeded(name):
    x = scene(3, n=2, side=16)
    a = corrupt(x, name, 3, seed=4)
    assert torch.equal(a, corrupt(x, name, 3, seed=4))
    assert torch.equal(a, corrupt(x, name, 3, seed=torch.Generator().manual_seed(4)))
    if name in RANDOM_CORRUPTIONS:
        assert not torch.equal(a, corrupt(x, name, 3, seed=5))
    else:
        assert torch.equal(a, corrupt(x, name, 3, seed=5))


def test_bad_requests_are_refused():
    x = scene(1, n=1, side=8)
    for args in [("blur", 1), ("fog", 0), ("fog", 6), ("fog", 2.0), ("fog", True)]:
        with pytest.raises(C.CorruptionError) as info:
            corrupt(x, *args)
        one_sentence(str(info.value))
    with pytest.raises(C.CorruptionError):
        corrupt(torch.zeros(2, 5, dtype=torch.int64), "fog", 1)
    with pytest.raises(C.CorruptionError):
        corrupt(torch.zeros(1, 2, 8, 8), "fog", 1)


def test_noises_have_their_parameters():
    x = torch.full((20, 1, 32, 32), 0.5)
    for severity, sigma in enumerate(PARAMETERS["gaussian_noise"], start=1):
        assert float((corrupt(x, "gaussian_noise", severity, seed=0) - x).std()) == pytest.approx(sigma, rel=0.03)
    photons = PARAMETERS["shot_noise"][0]  # Poisson(0.5 c) / c: variance 0.5 / c
    assert float(corrupt(x, "shot_noise", 1, seed=0).var()) == pytest.approx(0.5 / photons, rel=0.05)
    out = corrupt(x, "impulse_noise", 5, seed=0)
    assert float((out == 0).float().mean()) == pytest.approx(0.035, abs=0.005)
    assert float((out == 1).float().mean()) == pytest.approx(0.035, abs=0.005)
    assert torch.all((out == 0) | (out == 1) | (out == 0.5))


def test_defocus_kernels():
    for radius, alias in PARAMETERS["defocus_blur"]:
        k = disk_kernel(radius, alias)
        assert k.sum() == pytest.approx(1.0, abs=1e-6)
        assert torch.allclose(k, k.flip(0)) and torch.allclose(k, k.T)
    # radius < 1: a single pixel smoothed by the 3x3 Gaussian; radius 1.5: the 3x3 square
    g = torch.exp(-torch.tensor([1.0, 0.0, 1.0]) / (2 * 0.4 ** 2))
    assert torch.allclose(disk_kernel(0.3, 0.4), torch.outer(g, g) / torch.outer(g, g).sum(), atol=1e-6)
    assert torch.allclose(disk_kernel(1.5, 0.1)[1:-1, 1:-1], torch.full((3, 3), 1 / 9), atol=1e-3)


def test_motion_blur_matches_a_pixel_by_pixel_reference():
    x = scene(3, n=3, side=12)
    radius, sigma = PARAMETERS["motion_blur"][4]
    out = corrupt(x, "motion_blur", 5, seed=9)
    angles = torch.empty(3, dtype=torch.float64).uniform_(-45, 45, generator=torch.Generator().manual_seed(9))
    dy, dx = motion_offsets(radius, angles)
    weights = torch.exp(-torch.arange(dy.shape[1], dtype=torch.float64) ** 2 / (2 * sigma ** 2))
    weights /= weights.sum()
    reference = torch.zeros_like(x)
    for n in range(3):
        for r in range(12):
            for c in range(12):
                for i, w in enumerate(weights):
                    rr = min(max(r + int(dy[n, i]), 0), 11)
                    cc = min(max(c + int(dx[n, i]), 0), 11)
                    reference[n, :, r, c] += float(w) * x[n, :, rr, cc]
    assert torch.allclose(out, reference, atol=1e-5)
    assert (dx >= 0).all() and (dy[:, 1:].abs() <= dx[:, 1:]).all()  # |angle| <= 45 degrees


def test_photometric_corruptions():
    grey = scene(1)
    assert torch.allclose(corrupt(grey, "brightness", 2, seed=0), (grey + 0.1).clamp(0, 1))
    rgb = scene(3, n=1, side=6)
    out = corrupt(rgb, "brightness", 3, seed=0)
    for r in range(6):  # hue and saturation kept, V raised by 0.15 (colorsys as the reference)
        h, s, v = colorsys.rgb_to_hsv(*rgb[0, :, r, r].tolist())
        assert out[0, :, r, r].tolist() == pytest.approx(list(colorsys.hsv_to_rgb(h, s, min(v + 0.15, 1))), abs=1e-6)
    low = corrupt(rgb, "contrast", 5, seed=0)
    assert torch.allclose(low.mean((2, 3)), rgb.mean((2, 3)), atol=1e-6)
    assert torch.allclose(low - low.mean((2, 3), keepdim=True), 0.15 * (rgb - rgb.mean((2, 3), keepdim=True)),
                          atol=1e-6)


def test_fog_and_frost_textures():
    fractal = C.plasma_fractal(3, 32, 2.0, torch.Generator().manual_seed(0))
    assert fractal.shape == (3, 32, 32) and fractal.amin((1, 2)).eq(0).all() and fractal.amax((1, 2)).eq(1).all()
    rough = C.plasma_fractal(3, 32, 1.75, torch.Generator().manual_seed(0))
    smooth = C.plasma_fractal(3, 32, 3.0, torch.Generator().manual_seed(0))
    step = lambda f: float((f - f.roll(1, 2)).abs().mean())  # noqa: E731 - fine detail of a fractal
    assert step(rough) > step(smooth)  # a smaller decay keeps more fine detail
    bank = C.frost_textures(48, 3)
    assert bank.shape == (5, 3, 48, 48) and bank.min() >= 0 and bank.max() <= 1
    assert (bank[:, 2] >= bank[:, 0]).all()  # bluish white
    assert torch.equal(C.frost_textures.__wrapped__(48, 1), C.frost_textures(48, 1))  # deterministic


def test_jpeg():
    assert torch.equal(quantisation_table(C.LUMINANCE_TABLE, 50), C.LUMINANCE_TABLE)
    assert torch.equal(quantisation_table(C.LUMINANCE_TABLE, 100), torch.ones(8, 8))
    assert int(quantisation_table(C.LUMINANCE_TABLE, 10).max()) == 255
    grey = (scene(1, side=20) * 255).round() / 255
    rgb = (scene(3, side=20) * 255).round() / 255
    mse = lambda a, b: float(((a - b) ** 2).mean())  # noqa: E731
    for x in (grey, grey.expand(-1, 3, -1, -1)):  # grey as RGB: constant chroma, nothing lost to 4:2:0
        assert (jpeg_round_trip(x, 100) - x).abs().max() <= 2 / 255 + 1e-6  # near identity
        assert mse(jpeg_round_trip(x, 40), x) > 50 * mse(jpeg_round_trip(x, 100), x)
    # colour keeps PIL's 4:2:0 chroma subsampling even at quality 100
    assert mse(jpeg_round_trip(rgb, 40), rgb) > 2 * mse(jpeg_round_trip(rgb, 100), rgb)
    for x in (grey, rgb):
        assert (jpeg_round_trip(x, 40) - x).abs().max() > 0.05  # visibly lossy
    out = jpeg_round_trip(rgb, 40)
    assert torch.equal(out, (out * 255).round() / 255)  # decoded 8-bit samples


@pytest.mark.parametrize("channels", [1, 3])
def test_jpeg_agrees_with_pil(channels):
    """PIL's encoder (libjpeg) differs only by its integer DCT's roundings."""
    Image = pytest.importorskip("PIL.Image")
    import io

    import numpy as np

    x = (scene(channels, n=2, side=20) * 255).round() / 255
    for quality in PARAMETERS["jpeg_compression"]:
        decoded = []
        for image in x:
            pixels = (image.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
            buffer = io.BytesIO()
            Image.fromarray(pixels[:, :, 0] if channels == 1 else pixels).save(buffer, "JPEG", quality=quality)
            back = np.asarray(Image.open(buffer), dtype=np.float32) / 255
            decoded.append(torch.from_numpy(back.reshape(20, 20, channels)).permute(2, 0, 1))
        reference = torch.stack(decoded)
        ours = jpeg_round_trip(x, quality)
        assert float((ours - reference).abs().mean()) < 0.01
        assert float(((ours - x) ** 2).mean()) == pytest.approx(float(((reference - x) ** 2).mean()), rel=0.05)


def test_jpeg_dct_is_orthonormal():
    d = C._dct_matrix()
    assert torch.allclose(d @ d.T, torch.eye(8), atol=1e-6)
    block = torch.full((1, 8, 8), 200.0)  # a flat block: one DC coefficient (200 - 128) * 8
    table = torch.ones(8, 8)
    assert torch.equal(C._jpeg_plane(block, table), block)


# ------------------------------------------------------------------------------ the cache


def test_cache_returns_identical_tensors(private_cache, monkeypatch):
    x = scene(3, n=2, side=16)
    first = cached_corrupt(x, "fog", 2, seed=3)
    assert torch.equal(first, corrupt(x, "fog", 2, seed=3))
    files = list(private_cache.glob("*.pt"))
    assert len(files) == 1 and not list(private_cache.glob(".*"))  # no temporary left behind
    monkeypatch.setattr(C, "corrupt", lambda *a: pytest.fail("recomputed although cached"))
    assert torch.equal(cached_corrupt(x, "fog", 2, seed=3), first)


def test_cache_keys_and_damaged_files(private_cache):
    x = scene(1, n=2, side=16)
    a = cached_corrupt(x, "fog", 2, seed=3)
    for other in [(x, "fog", 2, 4), (x, "fog", 3, 3), (x, "frost", 2, 3), (x.flip(3), "fog", 2, 3)]:
        cached_corrupt(*other)
    assert len(list(private_cache.glob("*.pt"))) == 5
    path = next(iter(sorted(private_cache.glob("*.pt"), key=lambda p: p.stat().st_mtime)))
    path.write_bytes(b"not a tensor")
    assert torch.equal(cached_corrupt(x, "fog", 2, seed=3), a)  # the damaged file is ignored, rewritten
    assert torch.equal(torch.load(path, weights_only=True), a)


def test_cache_keeps_to_its_limit(private_cache, monkeypatch):
    monkeypatch.setattr(C, "CACHE_LIMIT_BYTES", 1)
    x = scene(1, n=2, side=16)
    cached_corrupt(x, "fog", 1, seed=0)
    cached_corrupt(x, "fog", 2, seed=0)
    assert len(list(private_cache.glob("*.pt"))) == 0  # everything past the limit goes, oldest first


# ------------------------------------------------------------------------------ the shift


def test_default_assignment_gives_unique_pairs():
    pairs = corruption_assignment(100, {})
    assert pairs[50:] == [None] * 50
    assert len(set(pairs[:50])) == 50
    assert pairs[0] == ("motion_blur", 1) and pairs[13] == ("shot_noise", 2) and pairs[49] == ("contrast", 5)
    assert all(p == (CORRUPTIONS[i % 10], i // 10 + 1) for i, p in enumerate(pairs[:50]))


def test_upstream_assignment_gives_ten_pairs():
    pairs = corruption_assignment(100, {"assignment": "upstream"})
    assert len(set(pairs[:50])) == 10 and pairs[50:] == [None] * 50
    assert all(p == (CORRUPTIONS[i % 10], i % 5 + 1) for i, p in enumerate(pairs[:50]))


def test_assignment_options():
    assert corruption_assignment(10, {"severity": 3}) == [(CORRUPTIONS[i], 3) for i in range(5)] + [None] * 5
    assert corruption_assignment(5, {"fraction": 0.5}) == [("motion_blur", 1), ("defocus_blur", 1),
                                                          ("gaussian_noise", 1), None, None]  # i < 2.5
    assert corruption_assignment(10, {"fraction": 0.3})[2:4] == [("gaussian_noise", 1), None]
    assert corruption_assignment(4, {"fraction": 0}) == [None] * 4
    only = corruption_assignment(6, {"fraction": 1, "corruptions": ["fog", "contrast"]})
    assert only == [("fog", 1), ("contrast", 1), ("fog", 2), ("contrast", 2), ("fog", 3), ("contrast", 3)]
    with pytest.warns(UserWarning, match="clipped to 5"):
        many = corruption_assignment(120, {"fraction": 0.5})
    assert many[59] == ("contrast", 5) and many[50] == ("motion_blur", 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        corruption_assignment(120, {"fraction": 0.5, "assignment": "upstream"})


def digits_federation(shift: dict | None) -> FederatedData:
    """conftest's tiny federation (digits, 4 clients, seed 7), built from its pieces."""
    dataset = sources.load_dataset("digits")
    partition = make_partition("dominant", dataset.train_y.numpy(), dataset.test_y.numpy(), 4, seed=7,
                               num_classes=10, s=0.2, samples_per_client=80)
    transforms = [make_shift(shift, 10, 7, num_clients=4)] if shift else []
    return FederatedData(dataset, partition, transforms=transforms)


def test_shift_corrupts_the_first_clients_only():
    plain = digits_federation(None)
    shifted = digits_federation({"kind": "corruption"})
    for cid in range(4):
        for split in ("train", "test"):
            a, b = getattr(plain, split)[cid], getattr(shifted, split)[cid]
            assert torch.equal(a.y, b.y)
            assert torch.equal(a.x, b.x) == (cid >= 2), (cid, split)
    again = digits_federation({"kind": "corruption"})
    assert torch.equal(again.train_x, shifted.train_x) and torch.equal(again.test_x, shifted.test_x)


def test_shift_transform_is_repeatable_and_seeded():
    x = scene(1, n=5, side=8)
    y = torch.arange(5)
    transform = make_shift({"kind": "corruption", "fraction": 1, "corruptions": ["gaussian_noise"]}, 10, 0,
                           num_clients=3)
    a = transform(0, x, y)[0]
    assert torch.equal(a, transform(0, x, y)[0])
    assert torch.equal(transform(0, x, y)[1], y)
    assert not torch.equal(a, transform(1, x, y)[0])  # another client, other draws (severity 1 too)
    other = make_shift({"kind": "corruption", "fraction": 1, "corruptions": ["gaussian_noise"]}, 10, 1,
                       num_clients=3)
    assert not torch.equal(a, other(0, x, y)[0])
    noise = a - x  # train and test of a client differ in data, so their noise is drawn apart
    assert not torch.equal(transform(0, x.flip(0), y)[0] - x.flip(0), noise)
    with pytest.raises(ShiftError, match="not images"):
        transform(0, torch.zeros(5, 12, dtype=torch.int64), y)
    with pytest.raises(ShiftError, match="number of clients"):
        make_shift({"kind": "corruption"}, 10, 0)


def test_shift_through_build_data(make_config):
    config = make_config(shift={"kind": "corruption"})
    data = build_data(config)
    expected = digits_federation({"kind": "corruption"})
    assert torch.equal(data.train_x, expected.train_x) and torch.equal(data.test_x, expected.test_x)


@pytest.mark.parametrize("shift,needle", [
    ({"kind": "corruption", "corruptions": ["fog", "snow"]}, "'snow'"),
    ({"kind": "corruption", "corruptions": []}, "'shift.corruptions'"),
    ({"kind": "corruption", "corruptions": ["fog", "fog"]}, "'shift.corruptions'"),
    ({"kind": "corruption", "corruptions": "fog"}, "'shift.corruptions'"),
    ({"kind": "corruption", "severity": 0}, "'shift.severity'"),
    ({"kind": "corruption", "severity": 6}, "'shift.severity'"),
    ({"kind": "corruption", "severity": 2.5}, "'shift.severity'"),
    ({"kind": "corruption", "fraction": 1.5}, "'shift.fraction'"),
    ({"kind": "corruption", "fraction": -0.1}, "'shift.fraction'"),
    ({"kind": "corruption", "fraction": "half"}, "'shift.fraction'"),
    ({"kind": "corruption", "assignment": "random"}, "'shift.assignment'"),
    ({"kind": "corruption", "groups": 2}, "'groups'"),
])
def test_bad_corruption_specs_are_refused(make_config, shift, needle):
    with pytest.raises(ConfigError) as info:
        make_config(shift=shift)
    message = str(info.value)
    one_sentence(message)
    assert "shift" in message and needle in message, message


def test_text_data_is_refused(tmp_path):
    with pytest.raises(ConfigError) as info:
        ExperimentConfig.from_dict(dict(method="fedavg", dataset="agnews", model="fasttext", num_clients=4, rounds=1,
                                        partition={"kind": "dirichlet", "alpha": 0.5}, data_root=str(tmp_path),
                                        shift={"kind": "corruption"}))
    one_sentence(str(info.value))
    assert "corruption changes images" in str(info.value) and "token ids" in str(info.value)


def test_the_paper_parameters_are_listed():
    assert set(PARAMETERS) == set(CORRUPTIONS) and all(len(v) == 5 for v in PARAMETERS.values())
    assert PARAMETERS["jpeg_compression"] == (80, 65, 58, 50, 40)
    assert math.isclose(PARAMETERS["frost"][4][1], 0.45)
