"""The ten image corruptions of pFedFDA's CIFAR-S (pFedFDA appendix C.1.1 / Hendrycks &
Dietterich 2019), at severities 1..5, on batches of images in [0, 1].

``corrupt(x, name, severity, seed)`` takes a float tensor ``(n, C, H, W)`` with C = 1
(grey) or 3 (RGB) and returns one of the same shape, dtype and device, clipped to [0, 1].
Everything is vectorised over the batch (convolutions, gathers, one DCT over all 8x8
blocks). Random draws come from a CPU ``torch.Generator`` (``seed`` is an int or a
generator), so a seed gives the same draws on any device.

Parameters (:data:`PARAMETERS`, severity 1..5) are those of Hendrycks & Dietterich's
CIFAR corruptions, as pFedFDA uses them. Grey images are corrupted per channel the same
way; brightness works on HSV's V, which for grey is the value itself. Frost's textures
are photographs in the original; here they are synthesised (:func:`frost_textures`).

Severity is the paper's scale, not a distance: with these parameters motion blur's
severities 3 (radius 6, sigma 2) and 4 (radius 8, sigma 2) coincide to float precision
(the Gaussian weight of the taps past 6 pixels is below 1e-9), and frost's mean squared
change can fall from severity 3 to 5 because the image is dimmed as the texture grows
(its texture share c1 / (c0 + c1) does rise: the correlation with the clean image falls).

:func:`cached_corrupt` adds a disk cache under ``sources.cache_dir() / "corruptions"``.
"""
from __future__ import annotations

import functools
import hashlib
import math
import numbers
import os
import uuid
from pathlib import Path

import torch
import torch.nn.functional as F

from . import sources

CORRUPTIONS = ("motion_blur", "defocus_blur", "gaussian_noise", "shot_noise", "impulse_noise",
               "frost", "fog", "jpeg_compression", "brightness", "contrast")
SEVERITIES = (1, 2, 3, 4, 5)
RANDOM_CORRUPTIONS = ("motion_blur", "gaussian_noise", "shot_noise", "impulse_noise", "frost", "fog")

PARAMETERS = {
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),                          # noise sigma
    "shot_noise": (500, 250, 100, 75, 50),                                     # Poisson photons c
    "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),                           # salt & pepper amount
    "defocus_blur": ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)),   # disk radius, alias sigma
    "motion_blur": ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)),               # radius, sigma
    "fog": ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)),             # strength, fractal decay
    "frost": ((1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45)),      # image, texture weights
    "brightness": (0.05, 0.1, 0.15, 0.2, 0.3),                                 # added to HSV V
    "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),                                   # contrast factor
    "jpeg_compression": (80, 65, 58, 50, 40),                                  # JPEG quality
}


class CorruptionError(ValueError):
    """A corruption request is not valid; the message is one sentence."""


def corrupt(x: torch.Tensor, name: str, severity: int, seed: int | torch.Generator = 0) -> torch.Tensor:
    """Corrupt a batch ``x`` (n, C, H, W) in [0, 1] with corruption ``name`` at ``severity``
    (pFedFDA appendix C.1.1 / Hendrycks & Dietterich 2019); deterministic in ``seed``."""
    if name not in CORRUPTIONS:
        raise CorruptionError(f"corruption {name!r} is not known: use one of {list(CORRUPTIONS)}.")
    if isinstance(severity, bool) or not isinstance(severity, numbers.Integral) or severity not in SEVERITIES:
        raise CorruptionError(f"corruption severity {severity!r} is not allowed: it must be an integer 1..5.")
    if not (torch.is_tensor(x) and x.is_floating_point() and x.dim() == 4 and x.shape[1] in (1, 3)):
        raise CorruptionError("corruptions take float images (n, C, H, W) in [0, 1] with C = 1 or 3, "
                              f"not {getattr(x, 'dtype', type(x))} of shape {tuple(getattr(x, 'shape', ()))}.")
    generator = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(int(seed))
    param = PARAMETERS[name][severity - 1]
    images = x.float()
    if name in RANDOM_CORRUPTIONS:
        out = _RANDOM[name](images, param, generator)
    else:
        out = _DETERMINISTIC[name](images, param)
    return out.clamp_(0.0, 1.0).to(x.dtype)


# ------------------------------------------------------------------------------------ noise


def _draw(draw, shape, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """Random numbers drawn on the CPU (reproducible across devices), moved to ``device``."""
    return draw(shape, generator=generator).to(device)


def gaussian_noise(x: torch.Tensor, sigma: float, generator: torch.Generator) -> torch.Tensor:
    """x + N(0, sigma^2), independently per pixel and channel."""
    return x + sigma * _draw(torch.randn, x.shape, generator, x.device)


def shot_noise(x: torch.Tensor, photons: float, generator: torch.Generator) -> torch.Tensor:
    """Poisson(x * c) / c: photon noise with ``c`` photons at full brightness."""
    rates = (x * photons).cpu()
    return (torch.poisson(rates, generator=generator) / photons).to(x.device)


def impulse_noise(x: torch.Tensor, amount: float, generator: torch.Generator) -> torch.Tensor:
    """Salt and pepper: each pixel and channel is replaced with probability ``amount``,
    half of those by 0 and half by 1."""
    u = _draw(torch.rand, x.shape, generator, x.device)
    out = x.masked_fill(u < amount / 2, 0.0)
    return out.masked_fill_((u >= amount / 2) & (u < amount), 1.0)


# ------------------------------------------------------------------------------------ blurs


def _reflect_pad(x: torch.Tensor, pad: int) -> torch.Tensor:
    """Mirror padding without repeating the edge (OpenCV's default border); edge
    replication where the image is too small to mirror ``pad`` pixels."""
    mode = "reflect" if pad < min(x.shape[-2:]) else "replicate"
    return F.pad(x, (pad, pad, pad, pad), mode=mode)


def _gaussian_1d(size: int, sigma: float) -> torch.Tensor:
    t = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    k = torch.exp(-t ** 2 / (2 * sigma ** 2))
    return k / k.sum()


@functools.lru_cache(maxsize=None)
def disk_kernel(radius: float, alias_sigma: float) -> torch.Tensor:
    """Defocus kernel: the pixels within ``radius`` of the centre (a disk), normalised, then
    smoothed by a 3x3 Gaussian of ``alias_sigma`` (5x5 past radius 8) against aliasing;
    cropped to its non-zero support."""
    half = max(8, math.ceil(radius))
    grid = torch.arange(-half, half + 1, dtype=torch.float64)
    disk = ((grid[:, None] ** 2 + grid[None, :] ** 2) <= radius ** 2).double()
    disk /= disk.sum()
    g = _gaussian_1d(3 if radius <= 8 else 5, alias_sigma)
    kernel = F.conv2d(disk[None, None], (g[:, None] * g[None, :])[None, None], padding=len(g) // 2)[0, 0]
    rows = kernel.abs().sum(1).nonzero()
    r = int(max(half - rows.min(), rows.max() - half))  # symmetric support
    return kernel[half - r:half + r + 1, half - r:half + r + 1].float()


def defocus_blur(x: torch.Tensor, param: tuple[float, float]) -> torch.Tensor:
    """Convolution of every channel with :func:`disk_kernel` (mirrored borders)."""
    kernel = disk_kernel(*param).to(x.device)
    n, c, h, w = x.shape
    pad = kernel.shape[0] // 2
    planes = _reflect_pad(x.reshape(n * c, 1, h, w), pad)
    return F.conv2d(planes, kernel[None, None]).reshape(n, c, h, w)


def motion_offsets(radius: float, angles_deg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer (dy, dx) of the motion-blur taps i = 0 .. 2 ceil(radius): i pixels along the
    angle, rounded; each of shape (n, taps)."""
    taps = torch.arange(2 * math.ceil(radius) + 1, dtype=torch.float64)
    theta = torch.deg2rad(angles_deg.double())[:, None]
    dx = torch.ceil(taps * torch.cos(theta) - 0.5).long()
    dy = torch.ceil(taps * torch.sin(theta) - 0.5).long()
    return dy, dx


def motion_blur(x: torch.Tensor, param: tuple[float, float], generator: torch.Generator) -> torch.Tensor:
    """One-sided line blur: pixel p becomes sum_i w_i x(p + i u), u the unit vector at an
    angle ~ U(-45, 45) degrees drawn per image, w_i proportional to exp(-i^2 / 2 sigma^2),
    i = 0 .. 2 ceil(radius) (edges replicated)."""
    radius, sigma = param
    n, c, h, w = x.shape
    angles = torch.empty(n, dtype=torch.float64).uniform_(-45, 45, generator=generator)
    dy, dx = motion_offsets(radius, angles)
    weights = torch.exp(-torch.arange(dy.shape[1], dtype=torch.float64) ** 2 / (2 * sigma ** 2))
    weights = (weights / weights.sum()).tolist()
    pad = dy.shape[1] - 1
    padded = F.pad(x, (pad, pad, pad, pad), mode="replicate").flatten(2)  # (n, c, (h+2p)(w+2p))
    stride = w + 2 * pad
    window = ((torch.arange(h)[:, None] + pad) * stride + torch.arange(w) + pad).flatten().to(x.device)
    shifts = (dy * stride + dx).to(x.device)  # (n, taps): flat offset of each tap, per image
    out = torch.zeros_like(x).flatten(2)
    for i, weight in enumerate(weights):
        index = (window + shifts[:, i, None]).unsqueeze(1).expand(n, c, h * w)
        out.add_(padded.gather(2, index), alpha=weight)
    return out.reshape(n, c, h, w)


# -------------------------------------------------------------------------------- weather


def plasma_fractal(n: int, size: int, decay: float, generator: torch.Generator) -> torch.Tensor:
    """``n`` independent plasma fractals (n, size, size), size a power of two, in [0, 1]:
    diamond-square midpoint displacement on a torus. At each level the new points are the
    mean of their four neighbours plus U(-w^2, w^2), w = 100 at the first level and divided
    by ``decay`` at each finer one (Hendrycks & Dietterich's generator)."""
    fractal = torch.zeros(size, size, n)  # batch last: the strided slices below move whole rows of n
    step, wibble = size, 100.0

    def displaced(neighbour_sum: torch.Tensor) -> torch.Tensor:
        noise = torch.rand(neighbour_sum.shape, generator=generator) * 2 - 1
        return neighbour_sum / 4 + wibble ** 2 * noise

    while step >= 2:
        half = step // 2
        corners = fractal[::step, ::step]
        square = corners + corners.roll(-1, 0)
        fractal[half::step, half::step] = displaced(square + square.roll(-1, 1))
        centres = fractal[half::step, half::step]
        fractal[::step, half::step] = displaced(corners + corners.roll(-1, 1) + centres + centres.roll(1, 0))
        fractal[half::step, ::step] = displaced(corners + corners.roll(-1, 0) + centres + centres.roll(1, 1))
        step, wibble = half, wibble / decay
    low = fractal.amin((0, 1))
    high = fractal.amax((0, 1))
    return ((fractal - low) / (high - low).clamp_min(1e-12)).permute(2, 0, 1)


def fog(x: torch.Tensor, param: tuple[float, float], generator: torch.Generator) -> torch.Tensor:
    """(x + c0 * plasma fractal) * max / (max + c0), max the image's largest value, one
    fractal (of decay c1) per image shared by its channels."""
    strength, decay = param
    n, _, h, w = x.shape
    size = 1 << max(1, math.ceil(math.log2(max(h, w))))
    haze = plasma_fractal(n, size, decay, generator)[:, None, :h, :w].to(x.device)
    peak = x.amax((1, 2, 3), keepdim=True)
    return (x + strength * haze) * peak / (peak + strength)


FROST_TEXTURES = 5       # the original has five frost photographs
FROST_TEXTURE_SEED = 0   # fixed: the textures play the part of the fixed image files
FROST_TINT = (0.86, 0.93, 1.0)  # bluish white, as the photographs are


@functools.lru_cache(maxsize=8)
def frost_textures(side: int, channels: int) -> torch.Tensor:
    """Five synthetic frost textures (5, channels, side, side) in [0, 1].

    The original frost corruption crops photographs of frost; we do not have them, so
    these are synthesised, deterministically: a faint multi-scale haze plus ice crystals,
    straight needles at random angles carrying side branches at +-60 degrees (dendrites),
    rasterised, softly saturated and lightly blurred. RGB textures are tinted bluish
    white (:data:`FROST_TINT`); grey ones are the luminance of that."""
    g = torch.Generator().manual_seed(FROST_TEXTURE_SEED)
    textures = []
    for _ in range(FROST_TEXTURES):
        haze = torch.zeros(1, 1, side, side)
        for octave, cells in enumerate((4, 8, 16, 32)):
            coarse = torch.rand(1, 1, cells, cells, generator=g)
            haze += F.interpolate(coarse, size=(side, side), mode="bicubic", align_corners=False) / 2 ** octave
        haze = (haze - haze.min()) / (haze.max() - haze.min())

        needles = side * side // 150
        start = torch.rand(needles, 2, generator=g) * side
        angle = torch.rand(needles, generator=g) * math.pi
        length = side * (0.04 + 0.22 * torch.rand(needles, generator=g) ** 2)
        bright = 0.4 + 0.6 * torch.rand(needles, generator=g)
        # side branches from points along each needle, at +-60 degrees, a third as long
        per = 4
        where = torch.rand(needles, per, generator=g) * length[:, None]
        side_sign = torch.where(torch.rand(needles, per, generator=g) < 0.5, -1.0, 1.0)
        b_angle = angle[:, None] + side_sign * math.pi / 3
        b_start = start[:, None, :] + where[..., None] * torch.stack([angle.sin(), angle.cos()], 1)[:, None, :]
        b_length = length[:, None] * (0.15 + 0.25 * torch.rand(needles, per, generator=g))
        seg_start = torch.cat([start, b_start.reshape(-1, 2)])
        seg_angle = torch.cat([angle, b_angle.reshape(-1)])
        seg_length = torch.cat([length, b_length.reshape(-1)])
        seg_bright = torch.cat([bright, (0.7 * bright[:, None]).expand(-1, per).reshape(-1)])

        steps = torch.arange(0, float(seg_length.max()) + 0.5, 0.5)
        on = steps[None, :] <= seg_length[:, None]
        rows = (seg_start[:, :1] + steps * seg_angle.sin()[:, None]).round().long() % side
        cols = (seg_start[:, 1:] + steps * seg_angle.cos()[:, None]).round().long() % side
        ice = torch.zeros(side * side)
        ice.scatter_reduce_(0, (rows * side + cols)[on], seg_bright[:, None].expand_as(on)[on], reduce="amax")
        blur = _gaussian_1d(5, 0.7).float()
        ice = F.conv2d(F.pad(ice.view(1, 1, side, side), (2, 2, 2, 2), mode="circular"),
                       (blur[:, None] * blur[None, :])[None, None])
        texture = 0.1 + 0.25 * haze + 0.8 * (1 - torch.exp(-2 * ice))
        textures.append(texture.clamp(0, 1)[0, 0])
    bank = torch.stack(textures)[:, None]
    tint = torch.tensor(FROST_TINT).view(1, 3, 1, 1)
    if channels == 3:
        return bank * tint
    luminance = float(torch.tensor([0.299, 0.587, 0.114]) @ tint.flatten())
    return bank * luminance


def frost(x: torch.Tensor, param: tuple[float, float], generator: torch.Generator) -> torch.Tensor:
    """c0 x + c1 F, F a random crop (of a texture drawn per image) of :func:`frost_textures`,
    which are about 6x the image's side as the original's resized photographs are."""
    image_weight, frost_weight = param
    n, c, h, w = x.shape
    side = max(48, 6 * max(h, w))
    bank = frost_textures(side, c)
    which = torch.randint(FROST_TEXTURES, (n,), generator=generator)
    top = torch.randint(side - h + 1, (n,), generator=generator)
    left = torch.randint(side - w + 1, (n,), generator=generator)
    rows = (top[:, None] + torch.arange(h))[:, :, None]
    cols = (left[:, None] + torch.arange(w))[:, None, :]
    crops = bank[which[:, None, None], :, rows, cols].permute(0, 3, 1, 2)  # (n, c, h, w)
    return image_weight * x + frost_weight * crops.to(x.device)


# ---------------------------------------------------------------------------- photometric


def brightness(x: torch.Tensor, shift: float) -> torch.Tensor:
    """HSV V += shift (clipped to 1) with hue and saturation kept: every channel scales by
    V'/V (a black pixel becomes grey V'). For grey images V is the value itself."""
    value = x.amax(1, keepdim=True)
    brighter = (value + shift).clamp(max=1.0)
    scale = brighter / value.clamp_min(1e-12)
    return torch.where(value > 0, x * scale, brighter)


def contrast(x: torch.Tensor, factor: float) -> torch.Tensor:
    """(x - mean) * factor + mean, the mean per image and channel."""
    mean = x.mean((2, 3), keepdim=True)
    return (x - mean) * factor + mean


# ----------------------------------------------------------------------------------- JPEG

LUMINANCE_TABLE = torch.tensor([
    [16, 11, 10, 16, 24, 40, 51, 61], [12, 12, 14, 19, 26, 58, 60, 55],
    [14, 13, 16, 24, 40, 57, 69, 56], [14, 17, 22, 29, 51, 87, 80, 62],
    [18, 22, 37, 56, 68, 109, 103, 77], [24, 35, 55, 64, 81, 104, 113, 92],
    [49, 64, 78, 87, 103, 121, 120, 101], [72, 92, 95, 98, 112, 100, 103, 99]], dtype=torch.float32)
CHROMINANCE_TABLE = torch.full((8, 8), 99.0)
CHROMINANCE_TABLE[:4, :4] = torch.tensor([
    [17, 18, 24, 47], [18, 21, 26, 66], [24, 26, 56, 99], [47, 66, 99, 99]], dtype=torch.float32)


def quantisation_table(base: torch.Tensor, quality: int) -> torch.Tensor:
    """libjpeg's scaling of a standard table (JPEG Annex K) to ``quality`` 1..100:
    scale = 5000 / q below 50, else 200 - 2 q; entry = (base * scale + 50) // 100 in 1..255."""
    scale = 5000 // quality if quality < 50 else 200 - 2 * quality
    return ((base * scale + 50) // 100).clamp(1, 255)


@functools.lru_cache(maxsize=None)
def _dct_matrix() -> torch.Tensor:
    """Orthonormal 8-point DCT-II: D[u, x] = c(u) cos((2x + 1) u pi / 16), c(0) = sqrt(1/8),
    c(u > 0) = sqrt(2/8); the 2D JPEG DCT of a block B is D B D^T."""
    u = torch.arange(8, dtype=torch.float64)[:, None]
    t = torch.arange(8, dtype=torch.float64)[None, :]
    d = torch.cos((2 * t + 1) * u * math.pi / 16) * math.sqrt(2 / 8)
    d[0] /= math.sqrt(2)
    return d.float()


def _jpeg_plane(plane: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Encode and decode 8-bit planes (m, H, W), H and W multiples of 8: level shift, 8x8
    DCT, quantisation by ``table`` (rounding), dequantisation, inverse DCT, rounding to 0..255."""
    m, h, w = plane.shape
    blocks = (plane - 128).reshape(m, h // 8, 8, w // 8, 8).transpose(2, 3)  # (m, bh, bw, 8, 8)
    d = _dct_matrix().to(plane.device)
    table = table.to(plane.device)
    coefficients = torch.round(d @ blocks @ d.T / table) * table
    decoded = (d.T @ coefficients @ d).transpose(2, 3).reshape(m, h, w)
    return torch.round(decoded + 128).clamp(0, 255)


def jpeg_round_trip(x: torch.Tensor, quality: int) -> torch.Tensor:
    """Baseline JPEG at ``quality`` and back, as PIL's default encoder does it: 8-bit
    samples; RGB to JFIF YCbCr with 4:2:0 chroma subsampling (2x2 means, decoded with
    libjpeg's triangular "fancy" upsampling); grey is one luminance plane; edges padded by
    replication to whole blocks (16x16 macroblocks for RGB); Annex K tables scaled by
    :func:`quantisation_table`."""
    n, c, h, w = x.shape
    block = 16 if c == 3 else 8
    pixels = torch.round(x * 255)
    pixels = F.pad(pixels, (0, -w % block, 0, -h % block), mode="replicate")
    hp, wp = pixels.shape[-2:]
    luma_table = quantisation_table(LUMINANCE_TABLE, quality)
    if c == 1:
        out = _jpeg_plane(pixels[:, 0], luma_table)[:, None]
    else:
        r, g, b = pixels.unbind(1)
        y = torch.round(0.299 * r + 0.587 * g + 0.114 * b)
        cb = torch.round(-0.168736 * r - 0.331264 * g + 0.5 * b + 128).clamp(0, 255)
        cr = torch.round(0.5 * r - 0.418688 * g - 0.081312 * b + 128).clamp(0, 255)
        chroma = torch.round(F.avg_pool2d(torch.stack([cb, cr], 1), 2))          # (n, 2, hp/2, wp/2)
        y = _jpeg_plane(y, luma_table)
        chroma = _jpeg_plane(chroma.flatten(0, 1), quantisation_table(CHROMINANCE_TABLE, quality))
        chroma = F.interpolate(chroma.view(n, 2, hp // 2, wp // 2), scale_factor=2, mode="bilinear",
                               align_corners=False)
        cb, cr = torch.round(chroma).unbind(1)
        out = torch.stack([y + 1.402 * (cr - 128),
                           y - 0.344136 * (cb - 128) - 0.714136 * (cr - 128),
                           y + 1.772 * (cb - 128)], 1)
        out = torch.round(out).clamp(0, 255)
    return out[:, :, :h, :w] / 255


_RANDOM = {"gaussian_noise": gaussian_noise, "shot_noise": shot_noise, "impulse_noise": impulse_noise,
           "motion_blur": motion_blur, "fog": fog, "frost": frost}
_DETERMINISTIC = {"defocus_blur": defocus_blur, "brightness": brightness, "contrast": contrast,
                  "jpeg_compression": jpeg_round_trip}


# ---------------------------------------------------------------------------------- cache

CACHE_VERSION = 1                 # part of every key: bump it when a corruption's output changes
CACHE_LIMIT_BYTES = 2 * 1024 ** 3  # least recently used files go past this


def corruption_cache_dir() -> Path:
    """Where :func:`cached_corrupt` keeps its files: ``sources.cache_dir() / "corruptions"``."""
    return sources.cache_dir() / "corruptions"


def data_digest(x: torch.Tensor) -> str:
    """Hex BLAKE2b digest of a tensor's dtype, shape and bytes."""
    data = x.detach().contiguous().cpu()
    h = hashlib.blake2b(f"{data.dtype}{tuple(data.shape)}".encode(), digest_size=20)
    h.update(data.view(torch.uint8).numpy() if data.numel() else b"")
    return h.hexdigest()


def cached_corrupt(x: torch.Tensor, name: str, severity: int, seed: int, digest: str | None = None) -> torch.Tensor:
    """:func:`corrupt` through a disk cache: one ``.pt`` file per (input bytes, name,
    severity, seed, :data:`CACHE_VERSION`) under :func:`corruption_cache_dir` (``digest``:
    :func:`data_digest` of ``x`` where the caller has it already). Files are
    written to a temporary name and renamed (atomic); an unreadable or mismatched file is
    ignored and rewritten; a hit refreshes the file's time and, past
    :data:`CACHE_LIMIT_BYTES`, the least recently used files are removed. If the folder
    cannot be written the result is simply not kept."""
    key = hashlib.blake2b(f"v{CACHE_VERSION}|{name}|{severity}|{int(seed)}|{digest or data_digest(x)}".encode(),
                          digest_size=20).hexdigest()
    folder = corruption_cache_dir()
    path = folder / f"{key}.pt"
    try:
        out = torch.load(path, map_location="cpu", weights_only=True)
        if torch.is_tensor(out) and out.shape == x.shape and out.dtype == x.dtype:
            os.utime(path)
            return out.to(x.device)
    except Exception:  # noqa: BLE001 - missing, truncated or foreign file: recompute
        pass
    out = corrupt(x, name, severity, int(seed))
    temporary = folder / f".{key}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(out.detach().cpu(), temporary)  # corrupt returns a fresh tensor, never a view
        os.replace(temporary, path)
        _evict(folder, CACHE_LIMIT_BYTES)
    except OSError:
        temporary.unlink(missing_ok=True)
    return out


def _evict(folder: Path, limit: int) -> None:
    """Remove the least recently used cache files until the folder holds at most ``limit`` bytes."""
    files = []
    for path in folder.glob("*.pt"):
        try:
            stat = path.stat()
        except OSError:
            continue
        files.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files):
        if total <= limit:
            break
        path.unlink(missing_ok=True)
        total -= size
