"""Hostile inputs to `spc run` / `spc check`: every .npy and image is checked before it is read
whole (headers first: a file declaring a huge array or image allocates nothing), values that are
not finite are refused, and each refusal is one `spc: error:` line, exit 1, the input untouched
and nothing written."""

from __future__ import annotations

import io
import os
import pickle
import resource
import struct
import subprocess
import sys
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import numpy.lib.format as npy
import pytest

from spc.errors import SpcError
from spc.plan.program import DEFAULT_IMAGE
from spc.runtime.inputs import MAX_IMAGE_PIXELS, grey_image, load_input, read_npy
from tests.conftest import one_line_error, spc

ROOT = Path(__file__).resolve().parents[1]
SHAPE = [1, 3, 120, 160]  # the small plan's input


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file below ``folder`` with its bytes and mtime: what a refused command must leave."""
    return {p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else b"", p.lstat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))}


def refused(*args: object, contains: str, folder: Path) -> str:
    """Run spc; it must fail with one `spc: error:` line containing ``contains`` and leave every
    file below ``folder`` as it was (no output, no .part file, inputs unchanged)."""
    before = snapshot(folder)
    code, _, err = spc(*args)
    one_line_error(code, err, contains=contains)
    assert snapshot(folder) == before
    return err


def npy_header(shape: tuple[int, ...], descr: object = "<f4", fortran: bool = False) -> bytes:
    buf = io.BytesIO()
    npy.write_array_header_1_0(buf, {"descr": descr, "fortran_order": fortran, "shape": shape})
    return buf.getvalue()


def png_header(w: int, h: int, color: int = 6, complete: bool = False) -> bytes:
    """A PNG that declares w x h (RGBA by default) and holds a few bytes of pixel data, or with
    ``complete`` all of them (black, compressed row by row: a few MB at most)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    if complete:
        z, row = zlib.compressobj(1), bytes(1 + 4 * w)
        pixels = b"".join([*(z.compress(row) for _ in range(h)), z.flush()])
    else:
        pixels = zlib.compress(b"\0" * 64)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
            + chunk(b"IDAT", pixels) + chunk(b"IEND", b""))


# --- .npy ------------------------------------------------------------------------------------

class Pwn:
    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return os.mkdir, (str(self.target),)


def _bad_npy(tmp_path: Path) -> dict[str, tuple[bytes, str]]:
    good = io.BytesIO()
    np.save(good, np.zeros(SHAPE, np.float32))
    n = int(np.prod(SHAPE))
    pickled = npy_header(tuple(SHAPE), "|O") + pickle.dumps(np.array([Pwn(tmp_path / "pwned")] * n, object))
    return {
        "huge-header": (npy_header((1, 3, 200000, 200000)) + b"\0" * 64, "array shape [1, 3, 200000, 200000] does not "
                        "match the plan input [1, 3, 120, 160]"),
        "wrong-shape": (npy_header((1, 1, 120, 160)) + bytes(4 * 19200), "does not match the plan input"),
        "truncated": (good.getvalue()[:-1000], "truncated or padded .npy: 229400 bytes of data where its header "
                      "declares 230400"),
        "padded": (good.getvalue() + b"\0" * 8, "truncated or padded .npy"),
        "header-only": (npy_header(tuple(SHAPE)), "0 bytes of data"),
        "wrong-magic": (b"hello, this is text\n" * 10, "not a .npy file (no NumPy magic"),
        "short": (b"\x93NUM", "not a .npy file"),
        "damaged-header": (npy.magic(1, 0) + struct.pack("<H", 20) + b"{'descr': nonsense  ", "damaged .npy header"),
        "version-3": (npy.magic(3, 0) + b"\0" * 64, ".npy format version 3.0 is not supported"),
        "object": (pickled, "array dtype object is not an integer or floating-point number"),
        "strings": (npy_header(tuple(SHAPE), "<U1") + bytes(4 * n), "dtype <U1 is not an integer or floating"),
        "bool": (npy_header(tuple(SHAPE), "|b1") + bytes(n), "dtype bool is not an integer or floating"),
        "complex": (npy_header(tuple(SHAPE), "<c8") + bytes(8 * n), "dtype complex64 is not an integer or floating"),
        "structured": (npy_header(tuple(SHAPE), [("a", "<f4")]) + bytes(4 * n), "is not an integer or floating"),
        "subarray": (npy_header(tuple(SHAPE), ("<f4", (2,))) + bytes(8 * n), "dtype ('<f4', (2,)) is not an integer"),
    }


@pytest.mark.parametrize("case", ["huge-header", "wrong-shape", "truncated", "padded", "header-only", "wrong-magic",
                                  "short", "damaged-header", "version-3", "object", "strings", "bool", "complex",
                                  "structured", "subarray"])
def test_bad_npy(case: str, small_plan: Path, tmp_path: Path) -> None:
    data, message = _bad_npy(tmp_path)[case]
    path = tmp_path / "x.npy"
    path.write_bytes(data)
    refused("run", small_plan, path, "-o", tmp_path / "out.npz", contains=message, folder=tmp_path)
    assert not (tmp_path / "pwned").exists()  # no pickle was ever loaded


def test_a_huge_npy_header_allocates_nothing(tmp_path: Path) -> None:
    """Even when the declared shape is the one asked for, the data's size is checked against the
    file before anything is allocated."""
    path = tmp_path / "huge.npy"
    path.write_bytes(npy_header((1, 3, 200000, 200000)) + b"\0" * 64)
    tracemalloc.start()
    try:
        with pytest.raises(SpcError, match=r"truncated or padded \.npy: 64 bytes of data where its header declares "
                                           r"480000000000"):
            read_npy(path, [1, 3, 200000, 200000])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


@pytest.mark.parametrize("case", ["fortran", "big-endian", "float64", "int16", "uint8", "float16"])
def test_npy_that_load(case: str, tmp_path: Path) -> None:
    a = np.random.default_rng(1).random(SHAPE)
    stored = {"fortran": np.asfortranarray(a.astype(np.float32)), "big-endian": a.astype(">f4"),
              "float64": a, "int16": (a * 1000).astype(np.int16), "uint8": (a * 255).astype(np.uint8),
              "float16": a.astype(np.float16)}[case]
    np.save(tmp_path / "x.npy", stored)
    got = load_input(tmp_path / "x.npy", SHAPE, DEFAULT_IMAGE)
    assert got.dtype == np.float32 and got.shape == tuple(SHAPE) and got.flags.c_contiguous
    np.testing.assert_array_equal(got, stored.astype(np.float32))


# --- values that are not finite ------------------------------------------------------------------

@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, 1e300])
def test_nonfinite_npy_is_refused(value: float, small_plan: Path, tmp_path: Path) -> None:
    a = np.random.default_rng(0).random(SHAPE)  # float64: 1e300 fits, float32 does not
    a[0, 1, 2, 3] = value
    np.save(tmp_path / "x.npy", a)
    err = refused("run", small_plan, tmp_path / "x.npy", "-o", tmp_path / "out.npz",
                  contains="1 value(s) are NaN, infinite or beyond float32's range", folder=tmp_path)
    assert "at index [0, 1, 2, 3]" in err and "pass --allow-nonfinite" in err and "x.npy" in err
    refused("check", small_plan, tmp_path / "x.npy", contains="pass --allow-nonfinite", folder=tmp_path)


def test_allow_nonfinite_runs(small_plan: Path, tmp_path: Path) -> None:
    a = np.random.default_rng(0).random(SHAPE).astype(np.float32)
    a[0, :, :10] = np.nan
    np.save(tmp_path / "x.npy", a)
    code, out, err = spc("run", small_plan, tmp_path / "x.npy", "-o", tmp_path / "out.npz", "--allow-nonfinite")
    assert code == 0, err
    assert "keypoints" in out and set(np.load(tmp_path / "out.npz").files) >= {"keypoints", "mask"}
    assert load_input(tmp_path / "x.npy", SHAPE, DEFAULT_IMAGE, allow_nonfinite=True).shape == tuple(SHAPE)


def test_nonfinite_float_image_is_refused(small_plan: Path, tmp_path: Path) -> None:
    from PIL import Image

    a = np.random.default_rng(0).random((30, 40)).astype(np.float32)
    a[3, 4] = np.inf
    Image.fromarray(a, mode="F").save(tmp_path / "f.tif")
    refused("run", small_plan, tmp_path / "f.tif", "-o", tmp_path / "out.npz",
            contains="NaN, infinite or beyond float32's range (the first, inf, at index [3, 4])", folder=tmp_path)
    assert grey_image(tmp_path / "f.tif", allow_nonfinite=True)[3, 4] == 1.0


# --- images ------------------------------------------------------------------------------------

def _bad_images(tmp_path: Path, images: dict[str, Path]) -> dict[str, tuple[Path, str]]:
    from PIL import Image

    cap = f"larger than spc's cap of {MAX_IMAGE_PIXELS >> 20} megapixels"
    (tmp_path / "huge.png").write_bytes(png_header(12000, 12000))  # 144 MP: PIL's own error
    (tmp_path / "big.png").write_bytes(png_header(9000, 9000))  # 81 MP: over the cap, under twice it
    png = images["camera"].read_bytes()
    (tmp_path / "trunc.png").write_bytes(png[: len(png) // 2])
    jpg = io.BytesIO()
    Image.open(images["coffee"]).save(jpg, "JPEG")
    (tmp_path / "trunc.jpg").write_bytes(jpg.getvalue()[: len(jpg.getvalue()) // 2])
    (tmp_path / "text.png").write_text("not an image\n")
    (tmp_path / "empty.png").write_bytes(b"")
    (tmp_path / "noise.gif").write_bytes(os.urandom(2000))
    (tmp_path / "zero.png").write_bytes(png_header(0, 10))
    Image.new("LAB", (20, 10)).save(tmp_path / "lab.tif")
    os.mkfifo(tmp_path / "fifo.png")
    (tmp_path / "arrays.npz").write_bytes(b"PK")
    return {"huge": (tmp_path / "huge.png", cap + " (144000000 pixels)"),
            "big": (tmp_path / "big.png", cap),
            "truncated-png": (tmp_path / "trunc.png", "not a readable image"),
            "truncated-jpeg": (tmp_path / "trunc.jpg", "not a readable image (OSError: image file is truncated"),
            "text": (tmp_path / "text.png", "not a readable image (UnidentifiedImageError"),
            "empty": (tmp_path / "empty.png", "empty file, not an image"),
            "noise": (tmp_path / "noise.gif", "not a readable image"),
            "zero-size": (tmp_path / "zero.png", "not a readable image"),
            "lab": (tmp_path / "lab.tif", "image mode LAB is not supported"),
            "fifo": (tmp_path / "fifo.png", "not a regular file"),
            "npz": (tmp_path / "arrays.npz", "give the input as a .npy of shape [1, 3, 120, 160]"),
            "missing": (tmp_path / "nope.png", "no such file")}


@pytest.mark.parametrize("case", ["huge", "big", "truncated-png", "truncated-jpeg", "text", "empty", "noise",
                                  "zero-size", "lab", "fifo", "npz", "missing"])
def test_bad_images(case: str, small_plan: Path, tmp_path: Path, images: dict[str, Path]) -> None:
    path, message = _bad_images(tmp_path, images)[case]
    refused("run", small_plan, path, "-o", tmp_path / "out.npz", contains=message, folder=tmp_path)


def _rgb(images: dict[str, Path], size: tuple[int, int] = (80, 60)):
    from PIL import Image

    return Image.open(images["astronaut"]).convert("RGB").resize(size)


def test_odd_images_load(tmp_path: Path, images: dict[str, Path]) -> None:
    """An animated GIF (its first frame), a 16-bit PNG, palette images, a CMYK JPEG, a 1-bit
    image: each is read as the grey image it shows."""
    from PIL import Image

    rgb = _rgb(images)
    want = np.asarray(rgb.convert("L"), np.float32) / 255
    frames = [rgb.convert("P"), rgb.rotate(180).convert("P"), Image.new("RGB", rgb.size, (9, 99, 199)).convert("P")]
    frames[0].save(tmp_path / "anim.gif", save_all=True, append_images=frames[1:], duration=50, loop=0)
    first = np.asarray(Image.open(tmp_path / "anim.gif").convert("L"), np.float32) / 255
    Image.fromarray((want * 65535).round().astype(np.uint16)).save(tmp_path / "deep.png")
    rgb.convert("P", palette=Image.Palette.ADAPTIVE).save(tmp_path / "palette.png")
    rgb.convert("CMYK").save(tmp_path / "cmyk.jpg", quality=95)
    rgb.convert("1").save(tmp_path / "bits.png")
    got = {name: grey_image(tmp_path / name) for name in ("anim.gif", "deep.png", "palette.png", "cmyk.jpg",
                                                           "bits.png")}
    assert Image.open(tmp_path / "anim.gif").n_frames == 3 and Image.open(tmp_path / "cmyk.jpg").mode == "CMYK"
    assert Image.open(tmp_path / "deep.png").mode.startswith("I")
    np.testing.assert_array_equal(got["anim.gif"], first)
    np.testing.assert_allclose(got["deep.png"], want, atol=1e-4)
    for name, tol in (("palette.png", 0.08), ("cmyk.jpg", 0.05), ("bits.png", 0.6)):
        assert got[name].shape == want.shape and got[name].dtype == np.float32
        assert got[name].min() >= 0 and got[name].max() <= 1
        assert np.abs(got[name] - want).mean() < tol, name


def test_odd_images_run(small_plan: Path, tmp_path: Path, images: dict[str, Path]) -> None:
    """The same files through `spc run`, together (one folder -> one .npz each)."""
    from PIL import Image

    rgb = _rgb(images, (160, 120))
    rgb.convert("P").save(tmp_path / "anim.gif", save_all=True, append_images=[Image.new("P", rgb.size)])
    Image.fromarray(np.asarray(rgb.convert("L"), np.uint16) * 257).save(tmp_path / "deep.png")
    rgb.convert("CMYK").save(tmp_path / "cmyk.jpg")
    out = tmp_path / "out"
    code, _, err = spc("run", small_plan, tmp_path, "-o", out)
    assert code == 0, err
    for name in ("anim.gif", "deep.png", "cmyk.jpg"):
        assert int(np.load(out / f"{name}.npz")["mask"].sum()) > 5, name


CHILD = """import resource, sys
from spc.cli import main
try:
    main(sys.argv[1:])
finally:
    print("peak-kb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def test_huge_headers_stay_small_in_memory(small_plan: Path, tmp_path: Path) -> None:
    """The CLI itself, under a 2 GB address-space limit: a .npy declaring 480 GB, a PNG declaring
    144 megapixels and a complete 81-megapixel RGBA PNG (1.4 MB of file; 1.65 GB at the peak as
    spc used to decode and convert it) are refused from their headers: the process grows no more
    than for a tiny wrong input."""
    (tmp_path / "huge.npy").write_bytes(npy_header((1, 3, 200000, 200000)) + b"\0" * 64)
    (tmp_path / "huge.png").write_bytes(png_header(12000, 12000))
    (tmp_path / "big.png").write_bytes(png_header(9000, 9000, complete=True))
    (tmp_path / "tiny.npy").write_bytes(npy_header((1, 1, 2, 2)) + bytes(16))  # the baseline

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    names = ("tiny.npy", "huge.npy", "huge.png", "big.png")
    children = {name: subprocess.Popen([sys.executable, "-c", CHILD, "run", str(small_plan), str(tmp_path / name),
                                        "-o", str(tmp_path / f"{name}.npz")], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, preexec_fn=limit, env=env, cwd=tmp_path)
                for name in names}
    peak_mb = {}
    for name, child in children.items():
        out, err = child.communicate(timeout=120)
        one_line_error(child.returncode, err, contains=name)
        peak_mb[name] = int(out.split("peak-kb")[-1]) / 1024
    for name in names[1:]:
        assert peak_mb[name] < peak_mb["tiny.npy"] + 32, peak_mb
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
