"""`spc run`'s inputs as a stream of frames: every input checked from its header first, its pixels
decoded only when its frame is next, at most :data:`PREFETCH` frames ahead.

An input is a ``.npy`` (one frame, used as is), an image (one frame: its first, for an animation)
or a video (one frame per video frame, decoded by ffmpeg through imageio). :func:`probe` reads
what every input is from its header (an image's size, a video's size and frame count, a ``.npy``'s
shape, dtype and values), so that a bad input fails before anything is written; :func:`frames`
then decodes them one after the other, and :func:`prefetched` runs that on a thread a bounded
number of frames ahead of the device, so memory stays flat over a folder or a video of any length.

Geometry: how an image became the plan's frame and how a point goes back (:class:`Geometry`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

import numpy as np
from msgspec import Struct
from PIL import Image

from spc.errors import SpcError
from spc.plan.program import ImageInput
from spc.runtime.inputs import (
    MAX_IMAGE_PIXELS,
    check_file,
    check_values,
    fill_channels,
    image_size,
    load_input,
    picture_axes,
    read_npy,
    read_picture,
    resize,
)
from spc.text import one_line

VIDEO_SUFFIXES = {".mp4", ".m4v", ".mov", ".avi", ".mkv", ".webm", ".mpg", ".mpeg", ".wmv", ".flv"}
RESIZE_MODES = ("stretch", "fit")

# Frames decoded ahead of the one the device runs. At most PREFETCH + 2 frames are held at once:
# PREFETCH waiting, one being decoded, one running.
PREFETCH = 2

_VIDEO_EXTRA = "videos need imageio and imageio-ffmpeg: pip install 'spc[full]'"

T = TypeVar("T")


class Geometry(Struct, frozen=True):
    """How an image of ``original`` = (W0, H0) pixels became the plan's ``frame`` = (W, H), and how a
    point of the frame maps back to the image.

    Convention (hloc's, COLMAP's, kornia's and PIL's own resize): a pixel's centre has integer
    coordinates, (0, 0) being the centre of the top-left pixel, so an image of W0 x H0 pixels
    spans [-0.5, W0 - 0.5] x [-0.5, H0 - 0.5]. The image fills ``content`` = (w, h) pixels of the
    frame from its top-left corner, and a point (x, y) of the frame is, in the image,

        x0 = (x + 0.5) * W0 / w - 0.5,    y0 = (y + 0.5) * H0 / h - 0.5

    (hloc's ``(kp + 0.5) * scale - 0.5`` with ``scale = original / resized``).

    * ``stretch``: (w, h) = (W, H): the whole frame, the aspect ratio changed unless W0 / H0 = W / H;
    * ``fit``: s = min(W / W0, H / H0), (w, h) = (round(W0 s), round(H0 s)): the aspect ratio kept,
      the rest of the frame (columns from w on the right, or rows from h at the bottom) zeros, and
      a point there (x > w - 0.5 or y > h - 0.5) lies outside the image: :meth:`to_original`
      drops it.
    """

    original: tuple[int, int]
    frame: tuple[int, int]
    content: tuple[int, int]
    mode: str

    @staticmethod
    def fitted(original: tuple[int, int], frame: tuple[int, int]) -> tuple[int, int]:
        """The size an image of ``original`` takes in ``frame`` with its aspect ratio kept."""
        (w0, h0), (w, h) = original, frame
        s = min(w / w0, h / h0)
        return min(w, max(1, round(w0 * s))), min(h, max(1, round(h0 * s)))

    @staticmethod
    def of(original: tuple[int, int], frame: tuple[int, int], mode: str) -> Geometry:
        if mode not in RESIZE_MODES:
            raise SpcError(f"--resize {mode!r}: expected one of {', '.join(RESIZE_MODES)}")
        content = frame if mode == "stretch" else Geometry.fitted(original, frame)
        return Geometry(tuple(original), tuple(frame), tuple(content), mode)  # type: ignore[arg-type]

    @property
    def resized(self) -> bool:
        return self.original != self.content

    @property
    def aspect_changed(self) -> bool:
        """Stretching changes the image's aspect ratio (fitting it would leave part of the frame empty)."""
        return self.mode == "stretch" and Geometry.fitted(self.original, self.frame) != self.frame

    @property
    def scale(self) -> np.ndarray:
        """(W0 / w, H0 / h): image pixels per frame pixel, along x and y."""
        return (np.array(self.original, np.float64) / np.array(self.content, np.float64)).astype(np.float32)

    def prepare(self, picture: np.ndarray) -> np.ndarray:
        """The (H, W) frame of the (H0, W0) grey or (H0, W0, 3) colour picture: resized (bilinear),
        and for ``fit`` padded with zeros at the right or the bottom."""
        (w, h), (cw, ch) = self.frame, self.content
        if (cw, ch) == (w, h):
            return resize(picture, h, w)
        out = np.zeros((h, w, *picture.shape[2:]), np.float32)
        out[:ch, :cw] = resize(picture, ch, cw)
        return out

    def to_original(self, xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Frame points (N, 2) as (x, y) -> the same points in the original image's pixels
        (float32), and which of them lie in the image (a bool mask: under ``fit``, points in the
        padding are outside)."""
        xy = np.asarray(xy, np.float32).reshape(-1, 2)
        cw, ch = self.content
        keep = (xy[:, 0] < cw - 0.5) & (xy[:, 1] < ch - 0.5)
        scale = self.scale
        if np.all(scale == 1):
            return xy.copy(), keep
        return ((xy + np.float32(0.5)) * scale[None] - np.float32(0.5)).astype(np.float32), keep


class Source(Struct, frozen=True):
    """One input as its header describes it."""

    path: Path
    kind: str  # "npy" | "image" | "video"
    size: tuple[int, int] | None  # (width, height) of the image or the video's frames; None: a .npy
    frames: int = 1  # a video's frame count


class Frame(Struct):
    """One frame, ready to run."""

    source: Source
    index: int | None  # a video's frame number, from 1; None for an image or a .npy
    x: np.ndarray  # the plan input
    geometry: Geometry | None  # None: a .npy, used as is
    original: np.ndarray | None = None  # the image in grey at its own size (kept for --viz)


def _imageio(path: Path):
    try:
        import imageio.v3 as iio  # an extra (spc[full]), ~25 ms: only videos need it
        import imageio_ffmpeg
    except ModuleNotFoundError:
        raise SpcError(f"{path}: {_VIDEO_EXTRA}") from None
    return iio, imageio_ffmpeg


def probe_video(path: Path) -> Source:
    """A video's frame size and frame count, from ffmpeg (the count from its packets, no decoding)."""
    if check_file(path) == 0:
        raise SpcError(f"{path}: empty file, not a video")
    iio, imageio_ffmpeg = _imageio(path)
    try:
        meta = iio.immeta(path, plugin="FFMPEG")
        w, h = (int(v) for v in meta["size"])
        count = int(imageio_ffmpeg.count_frames_and_secs(str(path))[0])
    except SpcError:
        raise
    except Exception as exc:  # ffmpeg's answer on a file it cannot read: any error
        detail = one_line(exc, 160)
        raise SpcError(f"{path}: not a readable video ({type(exc).__name__}{': ' + detail if detail else ''})"
                       ) from None
    if w * h > MAX_IMAGE_PIXELS:
        raise SpcError(f"{path}: video frames are larger than spc's cap of {MAX_IMAGE_PIXELS >> 20} megapixels "
                       f"({w} x {h}); downscale it first")
    if w <= 0 or h <= 0 or count <= 0:
        raise SpcError(f"{path}: video has no frames")
    return Source(path, "video", (w, h), count)


def probe(path: Path, shape: list[int], allow_nonfinite: bool = False, *, image: ImageInput) -> Source:
    """What ``path`` is, checked as far as can be without decoding pixels: a .npy completely (shape,
    dtype and values: it costs one read), an image from its header, a video from ffmpeg's; a
    picture only where the plan's input takes one (``image``: the plan's convention)."""
    suffix = path.suffix.lower()
    if suffix == ".npy":
        check_values(path, read_npy(path, shape), allow_nonfinite)
        return Source(path, "npy", None)
    if suffix == ".npz":
        raise SpcError(f"{path}: an .npz holds several arrays; give the input as a .npy of shape {shape}")
    picture_axes(shape, image, path)
    if suffix in VIDEO_SUFFIXES:
        return probe_video(path)
    return Source(path, "image", image_size(path))


def _video_picture(rgb: np.ndarray, colour: str) -> np.ndarray:
    """A video frame (H, W, 3) uint8 -> in [0, 1], grey or colour, as an RGB image file is read."""
    rgb = np.ascontiguousarray(rgb[..., :3])
    if colour == "rgb":
        return rgb.astype(np.float32) / 255.0
    return np.asarray(Image.fromarray(rgb).convert("L"), np.float32) / 255.0


def grey_of(picture: np.ndarray) -> np.ndarray:
    """A picture in grey (what --viz draws on): itself, or a colour one's luminance (PIL's weights)."""
    if picture.ndim == 2:
        return picture
    return picture @ np.array([0.299, 0.587, 0.114], np.float32)


def _video_frames(source: Source, colour: str) -> Iterator[np.ndarray]:
    iio, _ = _imageio(source.path)
    got = 0
    try:
        for rgb in iio.imiter(source.path, plugin="FFMPEG"):
            got += 1
            yield _video_picture(rgb, colour)
            if got == source.frames:
                return
    except SpcError:
        raise
    except Exception as exc:
        detail = one_line(exc, 160)
        raise SpcError(f"{source.path}: frame {got + 1} is not readable ({type(exc).__name__}"
                       f"{': ' + detail if detail else ''})") from None
    if got < source.frames:
        raise SpcError(f"{source.path}: the video ended after {got} of the {source.frames} frames ffmpeg counted")


def frames(sources: Iterable[Source], shape: list[int], mode: str = "stretch", keep_original: bool = False,
           allow_nonfinite: bool = False,
           on_error: Callable[[Source, SpcError], None] | None = None, *, image: ImageInput) -> Iterator[Frame]:
    """Every source's frames, decoded in order, one at a time, read as the plan's ``image`` says.
    ``on_error``: a source that fails to decode is handed to it and skipped (--keep-going; a
    video's frames before the failure are kept), else the error is raised."""
    for s in sources:
        try:
            if s.kind == "npy":
                x = load_input(s.path, shape, image, allow_nonfinite)
                plane = _first_plane(x, image) if keep_original and x.ndim >= 2 else None
                yield Frame(s, None, x, None, plane)
                continue
            picture_axes(shape, image, s.path)
            pictures = (_video_frames(s, image.colour) if s.kind == "video"
                        else iter([read_picture(s.path, image.colour, allow_nonfinite)]))
            for i, picture in enumerate(pictures, 1):
                x, g = image_frame(picture, shape, mode, s.path, image)
                yield Frame(s, i if s.kind == "video" else None, x, g, grey_of(picture) if keep_original else None)
        except SpcError as exc:
            if on_error is None:
                raise
            on_error(s, exc)


def _first_plane(x: np.ndarray, image: ImageInput) -> np.ndarray:
    """A .npy input's first channel of its first image, (H, W): what --viz draws on."""
    if x.ndim == 4 and image.layout == "NHWC":
        return x[0, :, :, 0]
    return x.reshape(-1, *x.shape[-2:])[0]


def image_frame(picture: np.ndarray, shape: list[int], mode: str, where: Path | str,
                image: ImageInput) -> tuple[np.ndarray, Geometry]:
    """The plan input for a grey (H0, W0) or colour (H0, W0, 3) picture (resized by ``mode``, laid
    out as ``image`` says, grey repeated over the channels) and how its points map back; ``where``
    names the picture in errors."""
    c, h, w = picture_axes(shape, image, where)
    if picture.ndim == 3 and image.colour != "rgb":
        picture = grey_of(picture)
    elif picture.ndim == 2 and image.colour == "rgb":
        picture = np.repeat(picture[..., None], 3, axis=2)
    g = Geometry.of((picture.shape[1], picture.shape[0]), (w, h), mode)
    return fill_channels(image, g.prepare(picture), c), g


def prefetched(items: Iterator[T], depth: int = PREFETCH) -> Generator[T, None, None]:
    """``items``, made on a thread at most ``depth`` ahead of the consumer (decoding overlaps the
    run; PIL and ffmpeg release the GIL). An error making an item is raised where the consumer
    would have received it; a consumer that stops early stops the thread."""
    q: queue.Queue = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()
    end = object()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for item in items:
                if not put((True, item)):
                    return
            put((True, end))
        except BaseException as exc:
            put((False, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=work, name="spc-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            ok, item = q.get()
            if not ok:
                raise item
            if item is end:
                return
            yield item
    finally:
        stop.set()
        thread.join()
