"""Turn user files into the plan's input tensor.

Images (JPEG, PNG, ... in any mode: grey, RGB, RGBA, palette, 16-bit) become grey in [0, 1],
resized to the plan's H x W and repeated over its channels, as SuperPoint's image processor
prepares them. A ``.npy`` array must already have the input's exact shape and is used as is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from spc.errors import SpcError

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".gif", ".pgm", ".ppm"}


def expand_paths(paths: list[Path]) -> list[Path]:
    """Files as given; folders contribute their images and .npy files, sorted."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES | {".npy"})
            if not found:
                raise SpcError(f"{p}: folder has no images or .npy files")
            out.extend(found)
        else:
            out.append(p)
    return out


def grey_image(path: Path) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    if not path.exists():
        raise SpcError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise SpcError(f"{path}: empty file, not an image")
    try:
        with Image.open(path) as im:
            im.load()
            if im.width == 0 or im.height == 0:
                raise SpcError(f"{path}: image has no pixels")
            if im.mode in ("I;16", "I;16B", "I;16L", "I"):
                a = np.asarray(im, dtype=np.float64)
                return (a / (65535.0 if a.max() > 255 or im.mode.startswith("I;16") else 255.0)).astype(np.float32)
            if im.mode == "F":
                return np.clip(np.asarray(im, dtype=np.float32), 0.0, 1.0)
            if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
                im = im.convert("RGBA")
                bg = Image.new("RGBA", im.size, (255, 255, 255, 255))  # transparent reads as white paper
                im = Image.alpha_composite(bg, im)
            grey = im.convert("L")
            return np.asarray(grey, dtype=np.float32) / 255.0
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise SpcError(f"{path}: not a readable image ({type(exc).__name__})") from None


def resize(a: np.ndarray, h: int, w: int) -> np.ndarray:
    from PIL import Image

    if a.shape == (h, w):
        return a
    return np.asarray(Image.fromarray(a, mode="F").resize((w, h), Image.BILINEAR), dtype=np.float32)


def load_input(path: Path, shape: list[int]) -> np.ndarray:
    """The plan input for ``path``, float32: a .npy of exactly ``shape``, or an image for a
    (1, C, H, W) input."""
    if path.suffix.lower() == ".npy":
        try:
            a = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise SpcError(f"{path}: not a readable .npy array ({exc})") from None
        if list(a.shape) != shape:
            raise SpcError(f"{path}: array shape {list(a.shape)} does not match the plan input {shape}")
        if not np.issubdtype(a.dtype, np.number):
            raise SpcError(f"{path}: array dtype {a.dtype} is not numeric")
        return a.astype(np.float32)
    if len(shape) != 4 or shape[0] != 1:
        raise SpcError(f"{path}: the plan's input is {shape}, not an image (1, C, H, W); give a .npy of that shape")
    n, c, h, w = shape
    grey = resize(grey_image(path), h, w)
    return np.broadcast_to(grey[None, None], (n, c, h, w)).astype(np.float32)
