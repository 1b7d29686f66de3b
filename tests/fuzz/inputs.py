"""Hostile inputs to `spc run`: .npy files (headers, dtypes, shapes, NaN and inf, truncation),
images (every mode and format PIL writes, odd sizes, animations, NaN in float TIFFs, truncated or
damaged PNG/JPEG, lying headers, wrong suffixes) and what is not a file (folders, FIFOs, devices,
dangling links)."""

from __future__ import annotations

import io
import math
import os
import random
import struct
import zlib
from pathlib import Path

import numpy as np

from tests.fuzz.harness import Case, Fixtures, npz_consistent, save_npy
from tests.fuzz.mutate import flip_bytes

_DESCRS = ["<f4", "<f8", "<f2", ">f4", ">f8", "<i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "|b1", "<c8",
           "<c16", "|O", "<U3", "|S2", "<M8[s]", "<m8[us]", "|V4", "f4", "<g", "<e", "<q", "float32", "xyz", ""]


def _header(d: dict | str, version: int = 1, pad: bool = True) -> bytes:
    text = d if isinstance(d, str) else repr(d)
    body = text.encode("latin1", errors="replace")
    if pad:
        total = 6 + 2 + (2 if version > 1 else 0) + len(body) + 1
        body += b" " * (-total % 64) + b"\n"
    size = struct.pack("<H" if version == 1 else "<I", len(body))
    return b"\x93NUMPY" + bytes([version, 0]) + size + body


def _values(rng: random.Random, shape: list[int], dtype: np.dtype) -> np.ndarray:
    g = np.random.default_rng(rng.randrange(1 << 30))
    if np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.complexfloating):
        a = g.random(shape).astype(dtype)
        if rng.random() < 0.35 and a.size:
            flat = a.reshape(-1)
            for _ in range(rng.choice([1, 1, 5, a.size])):
                bad = [math.nan, math.inf, -math.inf]
                if dtype.itemsize > 4 and not np.issubdtype(dtype, np.complexfloating):
                    bad += [1e39, -1e300]
                flat[rng.randrange(a.size)] = rng.choice(bad)
        return a
    if dtype == np.bool_:
        return g.random(shape) < 0.5
    info = np.iinfo(dtype)
    return g.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True).astype(dtype)


def npy_file(rng: random.Random, shape: list[int]) -> tuple[bytes, str]:
    """A .npy for an input of ``shape``: right, or wrong in its header, dtype, shape or bytes."""
    kind = rng.choices(["valid", "shape", "header", "bytes", "version", "fortran"], weights=[30, 15, 25, 15, 7, 8])[0]
    dtype = np.dtype(rng.choice(["<f4", "<f4", "<f8", "<f2", ">f4", "<i1", "|u1", "<i2", "<u2", "<i4", "<i8", "<u8",
                                 "|b1"]))
    if kind in ("valid", "fortran", "bytes"):
        a = _values(rng, shape, dtype)
        if kind == "fortran":
            a = np.asfortranarray(a)
        buf = io.BytesIO()
        np.save(buf, a, allow_pickle=False)
        data = buf.getvalue()
        if kind != "bytes":
            return data, f".npy {dtype} {list(a.shape)}{' fortran' if kind == 'fortran' else ''}"
        data, what = flip_bytes(rng, data, [(0, 128)])
        return data, f".npy {dtype}, {what}"
    if kind == "shape":
        wrong = rng.choice([[], [1], shape[1:], [*shape, 1], [2, *shape[1:]], [shape[0], 1, *shape[2:]],
                            [1, 3, shape[-1], shape[-2]], [1, 3, 1 << 20, 1 << 20], [0, *shape[1:]]])
        a_shape = tuple(wrong)
        n = math.prod(a_shape)
        data = _header({"descr": "<f4", "fortran_order": False, "shape": a_shape})
        return data + bytes(4 * n if n < 1 << 24 else 64), f".npy of shape {list(a_shape)}"
    if kind == "version":
        v = rng.choice([0, 2, 3, 255])
        d = {"descr": "<f4", "fortran_order": False, "shape": tuple(shape)}
        data = _header(d, version=2 if v == 2 else 1)
        if v != 2:
            data = data[:6] + bytes([v, 0]) + data[8:]
        return data + bytes(4 * math.prod(shape)), f".npy version {v}.0"
    descr = rng.choice(_DESCRS)
    d: dict | str = {"descr": descr, "fortran_order": rng.choice([False, True, 1, "no"]), "shape": tuple(shape)}
    r = rng.random()
    if r < 0.2:
        d = rng.choice(["{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 8, 8), }extra",
                        "{'descr': '<f4', 'shape': (1, 3)}", "[1, 2, 3]", "{", "", "{'descr': '<f4', " * 3000,
                        "(" * 200 + ")" * 200, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 3)}",
                        "{'descr': '<f4', 'fortran_order': False, 'shape': (1.5, 3)}",
                        "{'descr': '<f4', 'fortran_order': False, 'shape': (2**70,)}", "__import__('os')",
                        "{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (1,)}"])
    elif r < 0.35:
        d["extra"] = 1  # type: ignore[index]
    try:
        itemsize = np.dtype(descr).itemsize if descr not in ("", "xyz") else 4
    except TypeError:
        itemsize = 4
    n = math.prod(shape) * max(itemsize, 1)
    data = _header(d, pad=rng.random() < 0.85) + bytes(n if rng.random() < 0.8 else rng.randrange(n + 1))
    return data, f".npy header {str(d)[:60]}"


_MODES = ["1", "L", "P", "RGB", "RGBA", "CMYK", "YCbCr", "LA", "PA", "I", "I;16", "I;16B", "F", "HSV", "LAB", "RGBX"]
_FORMATS = {"PNG": ".png", "JPEG": ".jpg", "BMP": ".bmp", "TIFF": ".tif", "GIF": ".gif", "WEBP": ".webp",
            "PPM": ".ppm"}


def _picture(rng: random.Random, h: int, w: int) -> np.ndarray:
    g = np.random.default_rng(rng.randrange(1 << 30))
    kind = rng.choice(["noise", "checker", "gradient", "flat", "blobs"])
    if kind == "noise":
        return g.random((h, w), dtype=np.float32)
    if kind == "checker":
        s = rng.choice([2, 4, 8, 16])
        return ((np.indices((h, w)) // s).sum(0) % 2).astype(np.float32)
    if kind == "gradient":
        return np.linspace(0, 1, h * w, dtype=np.float32).reshape(h, w)
    if kind == "flat":
        return np.full((h, w), rng.random(), np.float32)
    a = np.zeros((h, w), np.float32)
    for _ in range(8):
        y, x = rng.randrange(h), rng.randrange(w)
        a[max(0, y - 2):y + 3, max(0, x - 2):x + 3] = 1
    return a


def image_file(rng: random.Random, shape: list[int]) -> tuple[bytes, str, str]:
    """An image (bytes, suffix, what): any mode and format, sometimes damaged or lying."""
    from PIL import Image

    h, w = rng.choice([(shape[-2], shape[-1]), (1, 1), (2, 3), (shape[-2] * 2, shape[-1] * 2), (17, 300), (480, 640),
                       (rng.randint(1, 200), rng.randint(1, 200))])
    grey = _picture(rng, h, w)
    mode = rng.choice(_MODES)
    fmt = rng.choice(list(_FORMATS))
    if mode == "F":
        im = Image.fromarray(grey, mode="F")
        if rng.random() < 0.5:
            a = grey.copy()
            a.reshape(-1)[rng.randrange(a.size)] = rng.choice([math.nan, math.inf, -math.inf, 1e30])
            im = Image.fromarray(a, mode="F")
        fmt = rng.choice(["TIFF", "TIFF", fmt])
    else:
        base = Image.fromarray((grey * 255).astype(np.uint8), mode="L").convert("RGB")
        try:
            im = base.convert(mode)
        except ValueError:
            im = base
    frames = rng.random() < 0.1
    buf = io.BytesIO()
    try:
        if frames and fmt in ("GIF", "PNG", "WEBP", "TIFF"):
            im.save(buf, format=fmt, save_all=True, append_images=[im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)])
        else:
            im.save(buf, format=fmt)
    except (OSError, ValueError, KeyError, TypeError):
        buf = io.BytesIO()
        fmt = "PNG"
        im.convert("RGB").save(buf, format=fmt)
    data = buf.getvalue()
    what = f"{fmt} {im.mode} {w}x{h}{' animated' if frames else ''}"
    r = rng.random()
    if r < 0.2:
        cut = rng.randrange(len(data))
        data, what = data[:cut], f"{what} truncated to {cut} of {len(data)} bytes"
    elif r < 0.35:
        data, how = flip_bytes(rng, data, [(0, min(len(data), 256))])
        what = f"{what}, {how}"
    elif r < 0.42:
        data, what = _lying_png(rng), "PNG whose header lies about its size"
        fmt = "PNG"
    suffix = _FORMATS[fmt]
    if rng.random() < 0.08:
        suffix = rng.choice([".jpg", ".png", ".gif", ".tiff", ".PNG", ".JPEG"])
        what += f" named {suffix}"
    return data, suffix, what


def _lying_png(rng: random.Random) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    w, h = rng.choice([(100000, 100000), (1 << 31, 1), (9000, 9000), (0, 10), (8193, 8192), (64, 64)])
    color, depth = rng.choice([(6, 8), (0, 16), (2, 8), (3, 8), (0, 1), (4, 8), (9, 8)])
    pixels = zlib.compress(b"\0" * rng.choice([0, 64, 4096]))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 0))
            + chunk(b"IDAT", pixels) + chunk(b"IEND", b""))


def _one_input(rng: random.Random, work: Path, shape: list[int], i: int) -> tuple[str, str]:
    """One input below ``work``: (relative path, what)."""
    r = rng.random()
    if r < 0.4:
        data, what = npy_file(rng, shape)
        name = f"in{i}.npy"
        (work / name).write_bytes(data)
        return name, what
    if r < 0.85:
        data, suffix, what = image_file(rng, shape)
        name = f"in{i}{suffix}"
        (work / name).write_bytes(data)
        return name, what
    kind = rng.choice(["empty", "text", "folder", "empty-folder", "fifo", "dev-zero", "dev-null", "dangling",
                       "link", "npy-as-png", "png-as-npy", "npz"])
    suffix = rng.choice([".npy", ".png", ".jpg"])
    name = f"in{i}{suffix}"
    p = work / name
    if kind == "empty":
        p.write_bytes(b"")
    elif kind == "text":
        p.write_text("this is not an image\n" * rng.randint(1, 50))
    elif kind == "folder":
        name = f"dir{i}"
        (work / name).mkdir()
        for j in range(rng.randint(1, 3)):
            data, suffix, _ = image_file(rng, shape) if rng.random() < 0.6 else (*npy_file(rng, shape)[:1], ".npy", "")
            (work / name / f"f{j}{suffix}").write_bytes(data)
        if rng.random() < 0.3:
            (work / name / "notes.txt").write_text("ignored")
    elif kind == "empty-folder":
        name = f"dir{i}"
        (work / name).mkdir()
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind in ("dev-zero", "dev-null"):
        os.symlink("/dev/zero" if kind == "dev-zero" else "/dev/null", p)
    elif kind == "dangling":
        os.symlink(f"missing{i}{suffix}", p)
    elif kind == "link":
        target = f"target{i}.npy"
        save_npy(work / target, np.zeros(shape, np.float32))
        name = f"in{i}.npy"
        os.symlink(target, work / name)
    elif kind == "npy-as-png":
        buf = io.BytesIO()
        np.save(buf, np.zeros(shape, np.float32))
        name = f"in{i}.png"
        (work / name).write_bytes(buf.getvalue())
    elif kind == "png-as-npy":
        data, _, _ = image_file(rng, shape)
        name = f"in{i}.npy"
        (work / name).write_bytes(data)
    else:
        buf = io.BytesIO()
        np.savez(buf, x=np.zeros(shape, np.float32))
        name = f"in{i}.npz"
        (work / name).write_bytes(buf.getvalue())
    return name, kind


def input_case(rng: random.Random, fx: Fixtures, work: Path) -> Case:
    variant = rng.choices(["default", "dense", "kernels"], weights=[6, 2, 1])[0]
    shape = fx.input_shape(variant)
    (work / "p.ttplan").write_bytes(fx.plan_bytes(variant))
    n = rng.choices([1, 2, 3], weights=[7, 2, 1])[0]
    made = [_one_input(rng, work, shape, i) for i in range(n)]
    names = [m[0] for m in made]
    if n > 1 and rng.random() < 0.1:
        names.append(names[0])  # the same input twice
    flags = []
    if rng.random() < 0.3:
        flags.append("--allow-nonfinite")
    dense = rng.random() < 0.15
    if dense:
        flags.append("--dense")
    viz = rng.random() < 0.15
    single = len(names) == 1 and not (work / names[0]).is_dir()
    out = "out.npz" if single else "outdir"
    if viz:
        flags += ["--viz", "viz.png" if single else "vizdir"]
    args = ["run", "p.ttplan", *names, "-o", out, *flags]

    files = expanded(work, names)  # before the run: its results may land among the inputs

    def check(w: Path) -> str | None:
        from spc.tools.run import output_paths

        with _in(w):
            npzs = output_paths(files, Path(out), ".npz")
            for npz in npzs:
                why = npz_consistent(w / npz, w / "p.ttplan", dense)
                if why:
                    return why
            if viz:
                from PIL import Image

                for png in output_paths(files, Path("viz.png" if single else "vizdir"), ".png"):
                    with Image.open(w / png) as im:
                        im.load()
        return None

    return Case(f"{variant} plan; " + "; ".join(f"{m[0]}: {m[1]}" for m in made) + (" (twice)" if len(names) > n
                                                                                     else ""), args, check=check)


def expanded(work: Path, names: list[str]) -> list[Path]:
    """The files `spc run` reads for ``names``; [] where it refuses them (the check then has none)."""
    from spc.errors import SpcError
    from spc.runtime.inputs import expand_paths

    with _in(work):
        try:
            return expand_paths([Path(x) for x in names])
        except (SpcError, OSError):
            return []


def _in(folder: Path):
    import contextlib

    return contextlib.chdir(folder)
