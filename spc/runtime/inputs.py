"""Turn user files into the plan's input tensor.

Images (JPEG, PNG, ... in any mode: grey, RGB, RGBA, palette, CMYK, 16-bit; the first frame of
an animation) are read as the plan's image input takes them (plan/program.py ImageInput: NCHW
or NHWC; grey in [0, 1] repeated over the channels, as SuperPoint's image processor prepares
them, or red, green and blue for a model whose first convolutions read colour), resized to the
plan's H x W. A ``.npy`` array must already have the input's exact shape and a numeric dtype,
and is used as is.

Every file is hostile until checked: an image's size is read from its header before anything is
decoded (at most :data:`MAX_IMAGE_PIXELS`), a ``.npy``'s shape and dtype from its header before
its data is read (so a header declaring a huge array allocates nothing), and values that are not
finite, or beyond float32's range, are refused unless the caller allows them.
"""

from __future__ import annotations

import math
import os
import stat
import struct
import warnings
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.lib.format as npy
from msgspec import Struct, field
from PIL import Image, ImageFile, UnidentifiedImageError

from spc.errors import SpcError
from spc.plan.program import MAX_IMAGE_CHANNELS, ImageInput
from spc.text import one_line

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".gif", ".pgm", ".ppm"}

# The largest image spc decodes: 64 megapixels (8192 x 8192). Decoded as RGBA that is 256 MB, and
# the grey float32 copy another 256 MB, so a hostile or mistaken file cannot take more than about
# 1 GB (a colour model's float32 copy is three times that: about 2.1 GB measured at the cap);
# SuperPoint runs at VGA-like sizes, so a bigger photo should be downscaled first anyway.
# PIL's own guard (Image.MAX_IMAGE_PIXELS) is set to the same value, its warning made an error.
MAX_IMAGE_PIXELS = 64 * 1024 * 1024

_FLOAT32_MAX = float(np.finfo(np.float32).max)
_NONFINITE_HINT = "fix the input, or pass --allow-nonfinite to run on it anyway"


class Skipped(Struct):
    """What a folder walk left out, by reason (said in the run's summary)."""

    other: int = 0  # files that are neither images nor .npy
    hidden: int = 0  # names starting with a dot (files and folders)
    loops: int = 0  # symlinked folders already walked
    unreadable: int = 0  # folders that could not be listed
    examples: list[str] = field(default_factory=list)  # the first few files left out

    def __bool__(self) -> bool:
        return bool(self.other or self.hidden or self.loops or self.unreadable)

    def __str__(self) -> str:
        parts = []
        if self.other:
            e = f" ({', '.join(self.examples[:3])}{', ...' if self.other > 3 else ''})" if self.examples else ""
            parts.append(f"{self.other} file(s) that are not images or .npy{e}")
        if self.hidden:
            parts.append(f"{self.hidden} hidden")
        if self.loops:
            parts.append(f"{self.loops} symlinked folder(s) already walked (a loop)")
        if self.unreadable:
            parts.append(f"{self.unreadable} folder(s) that cannot be listed")
        return "skipped " + ", ".join(parts)


def walk_tree(root: Path, suffixes: set[str], skipped: Skipped | None = None) -> Iterator[Path]:
    """A folder tree's files with one of ``suffixes``, folder by folder in name order, lazily
    (one folder listed at a time); symlinked folders followed once each, hidden names left out;
    what is left out counted in ``skipped``."""
    skipped = skipped if skipped is not None else Skipped()
    seen: set[tuple[int, int]] = set()

    def unreadable(_: OSError) -> None:
        skipped.unreadable += 1

    for folder, dirs, names in os.walk(root, onerror=unreadable, followlinks=True):
        try:
            st = os.stat(folder)
        except OSError:
            skipped.unreadable += 1
            dirs[:] = []
            continue
        if (st.st_dev, st.st_ino) in seen:
            skipped.loops += 1
            dirs[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        skipped.hidden += sum(d.startswith(".") for d in dirs)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                skipped.hidden += 1
            elif os.path.splitext(name)[1].lower() in suffixes:
                yield Path(folder) / name
            else:
                skipped.other += 1
                if len(skipped.examples) < 3:
                    skipped.examples.append(name)


def expand_paths(paths: list[Path], skipped: Skipped | None = None) -> list[Path]:
    """Files as given; folders contribute the images and .npy files of their whole tree, sorted
    (:func:`walk_tree`; what it leaves out is counted in ``skipped``)."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            left = Skipped()
            found = list(walk_tree(p, IMAGE_SUFFIXES | {".npy"}, left))
            if left.unreadable and not found:
                raise SpcError(f"{p}: cannot list the folder")
            if not found:
                raise SpcError(f"{p}: the folder's tree has no images or .npy files"
                               + (f" ({left})" if left else ""))
            out.extend(found)
            if skipped is not None:
                for f in ("other", "hidden", "loops", "unreadable"):
                    setattr(skipped, f, getattr(skipped, f) + getattr(left, f))
                skipped.examples.extend(left.examples[:3 - len(skipped.examples)])
        else:
            out.append(p)
    return out


def _check_file(path: Path) -> int:
    """The size of ``path``, a regular file (not a folder, a pipe or a device)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise SpcError(f"{path}: no such file") from None
    except OSError as exc:
        raise SpcError(f"{path}: cannot read ({exc.strerror or type(exc).__name__})") from None
    if not stat.S_ISREG(st.st_mode):
        raise SpcError(f"{path}: not a regular file; give an image or a .npy file")
    return st.st_size


def _check_values(path: Path, a: np.ndarray, allow_nonfinite: bool) -> None:
    """Refuse NaN, inf and values float32 cannot hold (which would become inf), unless allowed."""
    if allow_nonfinite or not np.issubdtype(a.dtype, np.floating):
        return
    bad = ~np.isfinite(a)
    if a.dtype.itemsize > 4:
        with np.errstate(invalid="ignore"):
            bad |= np.abs(a) > _FLOAT32_MAX
    count = int(np.count_nonzero(bad))
    if count:
        where = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), a.shape))
        first = float(a[where])
        raise SpcError(f"{path}: {count} value(s) are NaN, infinite or beyond float32's range "
                       f"(the first, {first:g}, at index {list(where)}); {_NONFINITE_HINT}")


def image_size(path: Path) -> tuple[int, int]:
    """An image's (width, height) from its header, checked as :func:`grey_image` checks it (a
    regular, non-empty file PIL recognises, within :data:`MAX_IMAGE_PIXELS`); nothing decoded."""
    return _open_image(path, None)


def grey_image(path: Path, allow_nonfinite: bool = False) -> np.ndarray:
    return _open_image(path, allow_nonfinite)


def read_picture(path: Path, colour: str, allow_nonfinite: bool = False) -> np.ndarray:
    """The image as a plan reads it (:class:`~spc.plan.program.ImageInput`): grey (H, W), or for
    ``colour == "rgb"`` its red, green and blue (H, W, 3), in [0, 1]."""
    return _open_image(path, allow_nonfinite, colour)


def _open_image(path: Path, allow_nonfinite: bool | None, colour: str = "grey"):
    """The grey (or colour) image, or with ``allow_nonfinite`` None its (width, height) from the
    header only."""
    if _check_file(path) == 0:
        raise SpcError(f"{path}: empty file, not an image")
    Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS  # deliberately: see MAX_IMAGE_PIXELS above
    ImageFile.LOAD_TRUNCATED_IMAGES = False  # a truncated image is an error, never a grey-filled one
    too_big = (f"{path}: image is larger than spc's cap of {MAX_IMAGE_PIXELS // (1024 * 1024)} megapixels "
               "({size}); downscale it first")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PIL's notes on odd metadata are no business of the user's
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as im:  # lazy: reads the header only
                w, h = im.size
                if w * h > MAX_IMAGE_PIXELS:
                    raise SpcError(too_big.format(size=f"{w} x {h}"))
                if w == 0 or h == 0:
                    raise SpcError(f"{path}: image has no pixels")
                if allow_nonfinite is None:
                    return w, h
                im.seek(0)  # an animation's first frame
                im.load()
                return _decoded(path, im, allow_nonfinite, colour)
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as exc:
        raise SpcError(too_big.format(size=str(exc).split(" exceeds")[0].removeprefix("Image size ").strip("()")
                                      or "too many pixels")) from None
    except (UnidentifiedImageError, OSError, ValueError, EOFError, SyntaxError, IndexError, struct.error) as exc:
        detail = one_line(exc, 160)
        raise SpcError(f"{path}: not a readable image ({type(exc).__name__}{': ' + detail if detail else ''}); "
                       "give a JPEG, PNG, ... or a .npy file") from None
    except MemoryError:
        raise SpcError(f"{path}: not enough memory to decode this image; downscale it first") from None


def _decoded(path: Path, im, allow_nonfinite: bool, colour: str = "grey") -> np.ndarray:
    """``im`` decoded: grey (H, W), or (H, W, 3) for ``colour == "rgb"`` (a grey image's three
    channels equal), in [0, 1]."""
    if im.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        a = np.asarray(im, dtype=np.float32)  # exact up to 2**24, more than 16 bits need
        top = a.max(initial=0.0)
        return _as(np.clip(a / (65535.0 if top > 255 or im.mode.startswith("I;16") else 255.0), 0.0, 1.0), colour)
    if im.mode == "F":
        a = np.asarray(im, dtype=np.float32)
        _check_values(path, a, allow_nonfinite)
        return _as(np.clip(np.nan_to_num(a, nan=0.0), 0.0, 1.0), colour)
    if im.mode in ("RGBA", "LA", "PA", "La", "RGBa") or (im.mode == "P" and "transparency" in im.info):
        im = im.convert("RGBA")
        bg = Image.new("RGBA", im.size, (255, 255, 255, 255))  # transparent reads as white paper
        im = Image.alpha_composite(bg, im)
    try:
        out = im.convert("RGB" if colour == "rgb" else "L")
    except ValueError:
        raise SpcError(f"{path}: image mode {im.mode} is not supported; save it as RGB or grey") from None
    return np.asarray(out, dtype=np.float32) / 255.0


def _as(grey: np.ndarray, colour: str) -> np.ndarray:
    """A grey (H, W) image as ``colour`` asks: itself, or its three equal channels."""
    return np.repeat(grey[..., None], 3, axis=2) if colour == "rgb" else grey


# for spc/runtime/frames.py, which checks inputs as this module does
check_file, check_values = _check_file, _check_values


def resize(a: np.ndarray, h: int, w: int) -> np.ndarray:
    """A grey (H0, W0) or colour (H0, W0, 3) float32 picture at (h, w), bilinear (each channel)."""
    if a.shape[:2] == (h, w):
        return a
    if a.ndim == 3:
        return np.stack([resize(np.ascontiguousarray(a[..., k]), h, w) for k in range(a.shape[2])], axis=2)
    return np.asarray(Image.fromarray(a, mode="F").resize((w, h), Image.BILINEAR), dtype=np.float32)


def _npy_header(f: BinaryIO, label: str, shape: list[int]) -> tuple[bool, np.dtype]:
    """A .npy header read from ``f`` (left at the data) and checked: ``shape`` exactly, a plain
    integer or floating-point dtype; (Fortran order, dtype). ``label`` names the array in errors."""
    try:
        version = npy.read_magic(f)
    except (ValueError, EOFError):
        raise SpcError(f"{label}: not a .npy file (no NumPy magic at its start); "
                       "save the array with numpy.save") from None
    try:
        if version == (1, 0):
            got, fortran, dtype = npy.read_array_header_1_0(f)
        elif version == (2, 0):
            got, fortran, dtype = npy.read_array_header_2_0(f)
        else:
            raise SpcError(f"{label}: .npy format version {version[0]}.{version[1]} is not supported "
                           "(only 1.0 and 2.0: a plain numeric array); save it with numpy.save")
    except SpcError:
        raise
    except Exception as exc:  # numpy parses the header as a Python literal: any error can come out
        raise SpcError(f"{label}: damaged .npy header ({type(exc).__name__}: {one_line(exc, 160)}); "
                       "save the array again with numpy.save") from None
    if list(got) != shape:
        raise SpcError(f"{label}: array shape {list(got)} does not match the plan input {shape}")
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None or not (
            np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.integer)):
        raise SpcError(f"{label}: array dtype {dtype} is not an integer or floating-point number; "
                       "save a numeric array (e.g. float32)")
    return bool(fortran), dtype


def _npy_data(f: BinaryIO, label: str, shape: list[int], fortran: bool, dtype: np.dtype, have: int) -> np.ndarray:
    """The array after its header: exactly the bytes the header declares (``have`` are left)."""
    want = math.prod(shape) * dtype.itemsize
    if have != want:
        raise SpcError(f"{label}: truncated or padded .npy: {have} bytes of data where its header "
                       f"declares {want}; save the array again with numpy.save")
    raw = f.read(want)
    if len(raw) != want:
        raise SpcError(f"{label}: truncated .npy (the file changed while it was read)")
    return np.frombuffer(raw, dtype=dtype).reshape(shape, order="F" if fortran else "C")


def read_npy(path: Path, shape: list[int]) -> np.ndarray:
    """A .npy of exactly ``shape``, numeric (integer or floating), checked from its header before
    any data is read; no pickles."""
    size = _check_file(path)
    try:
        with open(path, "rb") as f:
            fortran, dtype = _npy_header(f, str(path), shape)
            return _npy_data(f, str(path), shape, fortran, dtype, size - f.tell())
    except OSError as exc:
        raise SpcError(f"{path}: cannot read ({exc.strerror or type(exc).__name__})") from None


def read_npz(path: Path, specs: list[tuple[str, list[int]]], allow_nonfinite: bool = False,
             check_only: bool = False) -> dict[str, np.ndarray]:
    """A plan's inputs from an .npz (``numpy.savez``, compressed or not): one member per input,
    named as the input (``numpy.savez(f, kpts0=..., ...)``) or, positionally, ``arr_0`` ...; each
    checked from its header and its size in the archive's directory before anything is read (a
    declared or compressed size that does not fit is refused, so a zip bomb inflates nothing).
    ``check_only``: the checks alone, nothing read (an empty dict)."""
    _check_file(path)
    try:
        with zipfile.ZipFile(path) as z:
            members = {i.filename.removesuffix(".npy"): i for i in z.infolist()}
            names = [n for n, _ in specs]
            positional = [f"arr_{k}" for k in range(len(specs))]
            if set(members) == set(positional) and set(names) != set(positional):
                members = {n: members[a] for n, a in zip(names, positional)}
            missing = [n for n in names if n not in members]
            extra = sorted(set(members) - set(names))
            if missing or extra or len(z.infolist()) != len(names):
                raise SpcError(f"{path}: the plan's inputs are {', '.join(names)}"
                               + (f"; the file lacks {', '.join(missing)}" if missing else "")
                               + (f"; it has {', '.join(extra[:4])}, which the plan does not take" if extra else "")
                               + "; save them with numpy.savez(FILE, NAME=array, ...)")
            out: dict[str, np.ndarray] = {}
            for name, shape in specs:
                info = members[name]
                label = f"{path}:{info.filename}"
                if info.flag_bits & 0x1:
                    raise SpcError(f"{label}: encrypted; save the arrays with numpy.savez")
                with z.open(info) as f:
                    fortran, dtype = _npy_header(f, label, shape)  # type: ignore[arg-type]
                    have = info.file_size - f.tell()
                    if check_only:
                        want = math.prod(shape) * dtype.itemsize
                        if have != want:
                            raise SpcError(f"{label}: truncated or padded .npy: {have} bytes of data where its "
                                           f"header declares {want}; save the arrays again with numpy.savez")
                        continue
                    a = _npy_data(f, label, shape, fortran, dtype, have)  # type: ignore[arg-type]
                _check_values(Path(label), a, allow_nonfinite)
                out[name] = a
            return out
    except zipfile.BadZipFile as exc:
        raise SpcError(f"{path}: not an .npz (a zip archive): {one_line(exc, 120)}; save the arrays with "
                       "numpy.savez") from None
    except (OSError, EOFError, zlib.error, NotImplementedError) as exc:
        raise SpcError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or type(exc).__name__}: "
                       f"{one_line(exc, 120)})") from None


def load_input(path: Path, shape: list[int], image: ImageInput, allow_nonfinite: bool = False) -> np.ndarray:
    """The plan input for ``path``, float32: a .npy of exactly ``shape``, or an image read into an
    input of ``shape`` as ``image`` says (its layout and colour). NaN, inf and values beyond
    float32's range are refused unless ``allow_nonfinite``."""
    suffix = path.suffix.lower()
    if suffix == ".npy":
        a = read_npy(path, shape)
        _check_values(path, a, allow_nonfinite)
        with np.errstate(over="ignore", invalid="ignore"):  # allowed: beyond float32 becomes inf
            return np.ascontiguousarray(a, dtype=np.float32)
    if suffix == ".npz":
        raise SpcError(f"{path}: an .npz holds several arrays; give the input as a .npy of shape {shape}")
    c, h, w = picture_axes(shape, image, path)
    return fill_channels(image, resize(read_picture(path, image.colour, allow_nonfinite), h, w), c)


def picture_axes(shape: list[int], image: ImageInput, path: Path | str) -> tuple[int, int, int]:
    """(C, H, W) of a plan input of ``shape`` that a picture fills as ``image`` says, else one line
    saying why none does (``path`` names the picture)."""
    chw = image.axes(shape)
    if chw is None:
        hint = ""
        if image.layout == "none":
            why = "the model does not say which of its axes are the rows, the columns and the channels"
        elif len(shape) != 4 or shape[0] != 1:
            why = "not one image's (1, C, H, W) or (1, H, W, C)"
        elif image.colour == "rgb":
            why = f"a colour picture has 3 channels, and read as {image.layout} it has another number"
        else:
            why = f"read as {image.layout} it has more channels than a picture ({MAX_IMAGE_CHANNELS} at most)"
            hint = " (a plan made before plans said their image layout reads as NCHW: recompile it)"
        raise SpcError(f"{path}: the plan's input is {list(shape)}, which no picture fills ({why}); give a .npy of "
                       f"that shape{hint}")
    return chw


def fill_channels(image: ImageInput, picture: np.ndarray, channels: int) -> np.ndarray:
    """A frame-sized grey (H, W) or colour (H, W, 3) picture as the plan's input of ``channels``
    channels: colour as it is, grey repeated over them."""
    if picture.ndim == 2 and channels > 1:
        picture = np.repeat(picture[..., None], channels, axis=2)
    return image.arrange(picture)

