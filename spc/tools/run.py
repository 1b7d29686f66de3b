"""`spc run` over files: inputs streamed frame by frame, a progress bar, results as one .npz per
frame or as groups of an hloc-style features.h5, optional overlay PNGs.

The conventions (docs/outputs.md): ``.npz`` files hold the model's outputs under their ONNX names,
as the model returns them for the plan-sized frame (a drop-in for onnxruntime), plus
``image_size``; an ``.h5`` holds, per frame, what hloc's ``extract_features`` writes: the valid
keypoints in the original image's pixels (``spc.runtime.frames.Geometry``), their scores, their
descriptors as (D, N) and the original (width, height).
"""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from msgspec import Struct
from PIL import Image, ImageDraw
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from spc import console
from spc.errors import SpcError
from spc.files import atomic_write, check_outputs, file_sha256, os_errors
from spc.plan.io import Plan
from spc.runtime.batches import fill, groups, image_of, image_shape
from spc.runtime.extraction import STANDARD, Extraction, by_shape, frame_keypoints, has_keypoints, raw_heads
from spc.runtime.frames import (
    PREFETCH,
    VIDEO_SUFFIXES,
    Frame,
    Geometry,
    Source,
    frames,
    prefetched,
    probe,
    probe_video,
)
from spc.runtime.inputs import Skipped
from spc.runtime.runner import Runner, RunResult
from spc.tools.h5_store import H5Store, h5py_module

FORMATS = ("npz", "h5")
H5_SUFFIXES = (".h5", ".hdf5")
# hloc's SuperPoint wrapper: detection noise 2 px, times the mean scale to the original image
# (hloc/extract_features.py writes it as the keypoints' "uncertainty" attribute)
DETECTION_NOISE = 2.0
PLAN_KEY = "spc_plan_sha256"  # the .npz member naming the plan that made it


def relative_names(files: list[Path], root: Path | None = None) -> list[str]:
    """Each input's path relative to ``root`` (the one folder given, whose tree they are: an
    hloc-style tree's db/1.png, query/2.png even when one subfolder has them all), else to the
    folder that holds all the inputs (one input: its name)."""
    absolute = [Path(os.path.abspath(f)) for f in files]
    base = Path(os.path.abspath(root)) if root is not None else None
    if base is not None and all(a.is_relative_to(base) for a in absolute):
        return [a.relative_to(base).as_posix() for a in absolute]
    try:
        common = Path(os.path.commonpath([str(a.parent) for a in absolute]))
    except ValueError:  # different drives: keep every path whole
        common = Path(absolute[0].anchor)
    return [a.relative_to(common).as_posix() for a in absolute]


def output_paths(files: list[Path], output: Path | None, suffix: str, root: Path | None = None) -> list[Path]:
    """Where each input's output goes (the naming scheme `spc run --help` states):

    * one input and ``output`` a file name (it has a suffix and is no folder): ``output`` itself;
    * one input and no ``output``: beside the input, its whole name plus ``suffix``
      (``x.png`` -> ``x.png.npz``);
    * otherwise ``output`` (default: the current folder) is a folder, and each input's output is
      its path relative to the folder that holds all the inputs, plus ``suffix``:
      ``imgs/x.png imgs/x.jpg`` -> ``OUT/x.png.npz OUT/x.jpg.npz``, ``a/y.png b/y.png`` ->
      ``OUT/a/y.png.npz OUT/b/y.png.npz``.

    Distinct input files thus always get distinct outputs, whatever the other inputs are called.
    A video's frames get its output with ``.frame_NNNNNN`` before the suffix (:func:`frame_path`).
    """
    if len(files) == 1 and output is not None and output.suffix and not output.is_dir():
        return [output]
    if len(files) == 1 and output is None:
        return [files[0].with_name(files[0].name + suffix)]
    folder = output or Path(".")
    if (os.path.lexists(folder) and not folder.is_dir()) or folder.suffix == suffix:
        raise SpcError(f"{folder}: {len(files)} inputs need a folder for -o/--viz, not a {suffix} file")
    return [folder / (name + suffix) for name in relative_names(files, root)]


def frame_path(path: Path, index: int | None) -> Path:
    """A video frame's output: ``clip.mp4.npz`` -> ``clip.mp4.frame_000001.npz`` (frames from 1)."""
    return path if index is None else path.with_name(f"{path.stem}.frame_{index:06d}{path.suffix}")


def frame_group(name: str, index: int | None) -> str:
    """A frame's group in the .h5: the input's relative name, a video's frames below it."""
    return name if index is None else f"{name}/frame_{index:06d}"


def h5_output(output: Path | None, name: str = "features.h5",
              writes: str = "--format h5 writes one HDF5 file for all inputs") -> Path:
    """The one .h5 file of a run: ``-o`` (a .h5 name, or a folder for its ``name``), default
    ./``name``; ``writes`` says what, where ``-o`` names something else."""
    if output is None:
        return Path(name)
    if output.is_dir() or not output.suffix:
        return output / name
    if output.suffix.lower() not in H5_SUFFIXES:
        raise SpcError(f"{output}: {writes}: give -o NAME.h5 (or a folder)")
    return output


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def overlay_png(grey: np.ndarray, keypoints: np.ndarray, scores: np.ndarray, scale: float = 1.0) -> bytes:
    """Keypoints (pixel x, y) as circles whose radius grows with the score (and with ``scale``, the
    image's size over the frame's), on the grey image."""
    im = Image.fromarray((np.clip(grey, 0, 1) * 255).astype(np.uint8), mode="L").convert("RGB")
    draw = ImageDraw.Draw(im)
    top = float(scores.max()) if len(scores) else 1.0
    for (x, y), s in zip(keypoints, scores):
        r = (1.5 + 3.0 * float(s) / max(top, 1e-6)) * max(1.0, scale)
        draw.ellipse([x - r, y - r, x + r, y + r], outline=(0, 255, 0))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def keypoints_of(result: RunResult, roles: dict[str, dict], height: int, width: int,
                 extraction: Extraction | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The frame's keypoints (plan pixels, (N, 2) as x, y), scores (N,) and descriptors (N, D):
    by the plan's output roles (no batch axis, the mask applied), or for a raw-heads plan by
    SuperPoint's standard extraction (runtime/extraction.py); None: the outputs hold neither."""
    try:
        found = frame_keypoints(result.outputs, roles, height, width, extraction or Extraction())
    except (ValueError, IndexError, TypeError, KeyError) as exc:  # roles that do not fit the values made
        raise SpcError(f"the plan's output roles do not fit its outputs ({type(exc).__name__}: {str(exc)[:120]}); "
                       "recompile the plan") from None
    return None if found is None else found[0]


def in_original(found: tuple[np.ndarray, np.ndarray, np.ndarray],
                geometry: Geometry | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keypoints mapped to the original image's pixels (Geometry's convention), those outside it
    (under --resize fit, in the padding) dropped, with their scores and descriptors."""
    xy, scores, desc = found
    if geometry is None:  # a .npy: the frame is the image
        return np.asarray(xy, np.float32), scores, desc
    xy0, keep = geometry.to_original(xy)
    return xy0[keep], scores[keep], desc[keep]


def summary(result: RunResult, roles: dict[str, dict], height: int, width: int) -> str:
    """What a frame gave: its keypoints when the model has them (by role), else its outputs."""
    got = keypoints_of(result, roles, height, width)
    if got is not None:
        return f"{len(got[0])} keypoints"
    return ", ".join(f"{name} {list(a.shape)}" for name, a in result.outputs.items())


class Target(Struct):
    """Where one frame's results go."""

    npz: Path | None = None
    viz: Path | None = None
    group: str | None = None


def check_h5(path: Path, inputs: list[Path]) -> None:
    """The .h5 may be new, or an HDF5 file that gets new groups; never an input, a folder or a file
    in a read-only folder."""
    h5py = h5py_module()
    check_outputs([path], inputs, overwrite=True)
    if os.path.lexists(path):
        with os_errors(path, "cannot read"):
            if not h5py.is_hdf5(path):
                raise SpcError(f"{path}: exists and is not an HDF5 file; choose another -o")


def h5_arrays(kept: tuple[np.ndarray, np.ndarray, np.ndarray], frame: Frame,
              width: int, height: int) -> tuple[dict[str, np.ndarray], float]:
    """A frame's hloc group (its keypoints already in the original image, :func:`in_original`) and
    the keypoints' uncertainty."""
    xy, scores, desc = kept
    size = frame.geometry.original if frame.geometry is not None else (width, height)
    scale = float(frame.geometry.scale.mean()) if frame.geometry is not None else 1.0
    return {"keypoints": np.ascontiguousarray(xy, np.float32),
            "scores": np.ascontiguousarray(scores, np.float32),
            "descriptors": np.ascontiguousarray(np.asarray(desc, np.float32).T),
            "image_size": np.array(size, np.int64)}, DETECTION_NOISE * scale


def _aspect_note(sources: list[Source], height: int, width: int, mode: str) -> str | None:
    changed = [s for s in sources if s.size is not None and Geometry.of(s.size, (width, height), mode).aspect_changed]
    if not changed:
        return None
    first = changed[0]
    w0, h0 = first.size  # type: ignore[misc]
    more = f"; so are {len(changed) - 1} more input(s)" if len(changed) > 1 else ""
    return (f"{first.path} resized {h0}x{w0} -> {height}x{width} (height x width; aspect changed; "
            f"--resize fit keeps it){more}")


def _progress(total: int):
    class Rate(ProgressColumn):
        def render(self, task) -> Text:
            return Text(f"{task.speed:.1f} frames/s" if task.speed else "- frames/s")

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), Rate(),
                    TimeElapsedColumn(), TimeRemainingColumn(), transient=True,
                    disable=total < 2 or not Console().is_terminal)  # a pipe or a file: the lines only


def plan_targets(files: list[Path], counts: list[int | None], fmt: str, output: Path | None,
                 viz: Path | None, root: Path | None = None) -> tuple[list[list[Target]], Path | None]:
    """Each input's frames' outputs (``counts``: a video's frame count, None for one frame), and the
    .h5 of an h5 run (``root``: :func:`relative_names`')."""
    none: list = [None] * len(files)
    npz = output_paths(files, output, ".npz", root) if fmt == "npz" else none
    groups = relative_names(files, root) if fmt == "h5" else none
    pngs = output_paths(files, viz, ".png", root) if viz is not None else none
    targets = [[Target(frame_path(n, i) if n else None, frame_path(v, i) if v else None,
                       frame_group(g, i) if g else None)
                for i in ([None] if count is None else range(1, count + 1))]
               for count, n, v, g in zip(counts, npz, pngs, groups)]
    return targets, h5_output(output) if fmt == "h5" else None


def npz_arrays(result: RunResult, kept: tuple[np.ndarray, np.ndarray, np.ndarray] | None, roles: dict[str, dict],
               geometry: Geometry | None, sha: str = "", pixels: bool = False) -> dict[str, np.ndarray]:
    """A frame's .npz: the model's outputs as it returns them, the dense maps (--dense), the
    extracted ``keypoints`` (original pixels), ``scores`` and ``descriptors`` of a raw-heads plan
    (where no output has the name), ``image_size``, and the sha256 of the plan that made it
    (``spc_plan_sha256``: --skip-existing keeps what this plan made). ``pixels`` (--coords
    pixels): ``keypoints`` (N, 2), ``scores`` (N,) and ``descriptors`` (N, D) are those of h5 and
    the API, the valid keypoints in the original image's pixels, in place of the outputs so named."""
    arrays = dict(result.outputs)
    arrays.update(result.dense)
    if kept is not None and (pixels or raw_heads(roles) is not None):
        for name, a in zip(("keypoints", "scores", "descriptors"), kept):
            if pixels:
                arrays[name] = a
            else:
                arrays.setdefault(name, a)
    if geometry is not None and "image_size" not in arrays:
        arrays["image_size"] = np.array(geometry.original, np.int64)
    if sha:
        arrays[PLAN_KEY] = np.array(sha)
    return arrays


def write_results(result: RunResult, frame: Frame, t: Target, store: H5Store | None, roles: dict[str, dict],
                  height: int, width: int, extraction: Extraction | None = None, sha: str = "",
                  pixels: bool = False) -> int | None:
    """One frame's .npz, .h5 group and overlay, as ``t`` says; its keypoint count in the image
    (None: the plan has no keypoints). A raw-heads plan's .npz also holds the extracted
    ``keypoints`` (original pixels), ``scores`` and ``descriptors``, where no output has the name."""
    found = keypoints_of(result, roles, height, width, extraction) if has_keypoints(roles) else None
    kept = in_original(found, frame.geometry) if found is not None else None
    g = frame.geometry
    if t.npz is not None:
        atomic_write(t.npz, npz_bytes(npz_arrays(result, kept, roles, g, sha, pixels)))
    if t.group is not None:
        assert store is not None and kept is not None
        arrays, uncertainty = h5_arrays(kept, frame, width, height)
        store.add(t.group, arrays, uncertainty)
    if t.viz is not None:
        assert kept is not None and frame.original is not None
        atomic_write(t.viz, overlay_png(frame.original, kept[0], kept[1], float(g.scale.mean()) if g else 1.0))
    return len(kept[0]) if kept is not None else None


def _results(runner: Runner, stream: Iterator[Frame], batch: int,
             dense: bool) -> Iterator[tuple[Frame, RunResult, bool]]:
    """Each frame with its result and whether it was read densely; a batch plan's frames B at a
    time, the last group padded (runtime/batches.py)."""
    for group in groups(stream, batch):
        overflows = runner.overflows
        if batch == 1:
            yield group[0], runner.run(group[0].x, dense=dense), runner.overflows > overflows
            continue
        result = runner.run(fill([f.x for f in group], batch), dense=dense)
        for k, frame in enumerate(group):
            yield frame, image_of(result, k, batch), runner.overflows > overflows


def run_files(plan: Plan, files: list[Path], output: Path | None, viz: Path | None, dense: bool,
              backend: str, trace: bool = True, *, plan_path: Path | None = None, overwrite: bool = False,
              allow_nonfinite: bool = False, fmt: str = "npz", resize: str = "stretch", as_json: bool = False,
              prefetch: int = PREFETCH, extraction: Extraction | None = None, root: Path | None = None,
              keep_going: bool = False, skip_existing: bool = False, skipped: Skipped | None = None,
              coords: str = "onnx") -> None:
    """Run the plan on every frame of ``files``: everything that can be checked before the first
    frame is (outputs, every input's header), then the inputs are decoded as the device needs them,
    ``prefetch`` frames ahead (memory does not grow with the number of inputs)."""
    spec = plan.program.inputs[0]
    batch = plan.images_per_run  # a batch plan runs B frames at once, N*B on N chips (runtime/batches.py)
    shape = image_shape([int(d) for d in spec.shape]) if batch > 1 else [int(d) for d in spec.shape]
    roles = plan.program.roles
    height, width = plan.program.image.frame_size(shape)
    keypoints = has_keypoints(roles)
    if fmt not in FORMATS:
        raise SpcError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if viz is not None and not keypoints:
        raise SpcError("--viz draws keypoints, and this plan's outputs hold none, neither as keypoints nor as "
                       "SuperPoint's raw heads (spc inspect lists its outputs)")
    if fmt == "h5" and not keypoints:
        raise SpcError("--format h5 writes keypoints, and this plan's outputs hold none, neither as keypoints nor "
                       "as SuperPoint's raw heads (spc inspect lists its outputs); use --format npz")
    extraction = extraction or Extraction()
    if (why := extraction.check()) is not None:
        raise SpcError(f"the keypoint extraction: {why}")
    if coords not in ("onnx", "pixels"):
        raise SpcError(f"--coords {coords!r}: expected onnx or pixels")
    if coords == "pixels" and not keypoints:
        raise SpcError("--coords pixels writes keypoints, and this plan's outputs hold none (spc inspect lists its "
                       "outputs)")
    if fmt == "h5" and dense:
        raise SpcError("--dense saves the device maps into the .npz files: use it with --format npz")
    if fmt == "npz" and output is not None and output.suffix.lower() in H5_SUFFIXES:
        raise SpcError(f"{output}: an HDF5 name; pass --format h5 to write one")
    given: dict[str, Path] = {}
    for f in files:
        if given.setdefault(os.path.abspath(f), f) is not f:
            raise SpcError(f"{f}: given twice (a folder and a file in it?); give each input once")

    sha = file_sha256(plan_path) if plan_path is not None else str(plan.manifest.get("digest", ""))
    # a video's frame count names its outputs: read it (from ffmpeg's packets) first
    failed: list[tuple[Path, str]] = []  # --keep-going: each input that failed, and why
    videos: dict[int, Source] = {}
    for i, f in enumerate(files):
        if f.suffix.lower() in VIDEO_SUFFIXES and len(shape) == 4:
            try:
                videos[i] = probe_video(f)
            except SpcError as exc:
                if not keep_going:
                    raise
                failed.append((f, failure_reason(exc, f)))
    bad = {f for f, _ in failed}
    targets, h5_path = plan_targets(files, [videos[i].frames if i in videos else None for i in range(len(files))],
                                    fmt, output, viz, root)
    protected = [*files, *([plan_path] if plan_path else [])]
    if h5_path is not None:
        check_h5(h5_path, protected)
    store = H5Store(h5_path, sha) if h5_path is not None else None  # a killed run's journal merged first
    try:
        there = store.groups() if store is not None else {}
        # --skip-existing: the results this plan made are kept; an input with all of them is not decoded,
        # a video stopped partway is decoded again to reach the rest
        made = {id(t) for ts in targets for t in ts if skip_existing and _made(t, sha, there)}
        complete = {i for i, ts in enumerate(targets) if ts and all(id(t) in made for t in ts)}
        live = [i for i in range(len(files)) if i not in complete and files[i] not in bad]
        flat = [t for i in live for t in targets[i]]
        todo = [t for t in flat if id(t) not in made]
        # nothing replaces an input (the plan included), another output of this run, or, without
        # --overwrite, an earlier result (an .h5: a group already in it)
        check_outputs([*(t.npz for t in todo if t.npz), *(t.viz for t in todo if t.viz)], protected, overwrite)
        taken = [t.group for t in todo if t.group in there]
        if taken and not overwrite:
            more = f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""
            other = " (made by another plan)" if skip_existing else ""
            raise SpcError(f"{h5_path}: already holds {taken[0]}{more}{other}; pass --overwrite to replace them, "
                           f"{'' if skip_existing else '--skip-existing to keep what this plan made, '}"
                           "or choose another -o")
        # every input checked from its header before anything is decoded or written
        sources: list[Source] = []
        where: dict[int, list[Target]] = {}
        for i in live:
            try:
                sources.append(videos[i] if i in videos else probe(files[i], shape, allow_nonfinite,
                                                                   image=plan.program.image))
            except SpcError as exc:
                if not keep_going:
                    raise
                failed.append((files[i], failure_reason(exc, files[i])))
                continue
            where[id(sources[-1])] = targets[i]
        note = _aspect_note(sources, height, width, resize) if len(shape) == 4 else None  # said once, at its frame
        flat = [t for s in sources for t in where[id(s)]]

        def undecodable(source: Source, exc: SpcError) -> None:  # --keep-going: on the decoding thread
            failed.append((source.path, failure_reason(exc, source.path)))

        stream = prefetched(frames(sources, shape, resize, keep_original=viz is not None,
                                   allow_nonfinite=allow_nonfinite, on_error=undecodable if keep_going else None,
                                   image=plan.program.image),
                            prefetch)
        tally = {"frames": 0, "keypoints": 0, "resized": 0, "aspect_changed": 0}
        heads_note = (f"keypoints by {STANDARD}: {extraction.describe()} (--threshold, --nms-radius, --border, "
                      "--max-keypoints)" if raw_heads(roles) is not None else by_shape(roles))
        heads_note = None if as_json else heads_note
        if backend == "ttnn-mock" and not as_json:  # said with the first result, like the notes above
            heads_note = ("the mock p150 validates every call and allocates its memory but computes no values "
                          "(zeros): the outputs and keypoint counts below mean nothing; --backend emu computes "
                          "them" + (f"; {heads_note}" if heads_note else ""))
        small = None  # an image upscaled more than 2x: said once
        start = time.perf_counter()
        try:
            with Runner(plan, backend, trace) as runner, _progress(len(flat)) as bar:
                console.detail(f"plan {plan_path or '(in memory)'} (sha256 {sha[:12]}), backend {backend}, input "
                               f"{shape}, {batch} frame(s) a run, {len(flat)} frame(s) to run"
                               + (f", {len(complete)} input(s) kept" if complete else ""))
                task = bar.add_task("running", total=len(flat))
                start = last = time.perf_counter()
                for frame, result, dense_read in _results(runner, stream, batch, dense):
                    got_at = time.perf_counter()
                    t = where[id(frame.source)][(frame.index or 1) - 1]
                    if id(t) in made:  # --skip-existing: this frame's results are this plan's already
                        bar.advance(task)
                        last = time.perf_counter()
                        continue
                    if heads_note:
                        console.note(heads_note)
                        heads_note = None
                    count = write_results(result, frame, t, store, roles, height, width, extraction, sha,
                                          coords == "pixels")
                    dims = f"{frame.geometry.original[0]}x{frame.geometry.original[1]}, " if frame.geometry else ""
                    console.detail(f"{frame.source.path}{'' if frame.index is None else f' frame {frame.index}'}: "
                                   f"{dims}decoded and run in {1000 * (got_at - last):.1f} ms, written in "
                                   f"{1000 * (time.perf_counter() - got_at):.1f} ms")
                    last = time.perf_counter()
                    g = frame.geometry
                    if note and g is not None and g.aspect_changed:  # with the first result it concerns
                        console.note(note)
                        note = None
                    if small is None and g is not None and float(np.max(g.scale)) < 0.5 and not as_json:
                        small = frame.source.path
                        w0, h0 = g.original
                        console.note(f"{small}: {w0}x{h0} upscaled {1 / float(np.max(g.scale)):.0f}x to the plan's "
                                     f"{width}x{height}; an upscaled image gives few keypoints: give larger images, "
                                     "or compile the model at their size (--input-shape)")
                    bar.advance(task)
                    tally["frames"] += 1
                    tally["keypoints"] += count or 0
                    tally["resized"] += bool(g is not None and g.resized)
                    tally["aspect_changed"] += bool(g is not None and g.aspect_changed)
                    if as_json:
                        print(json.dumps({"input": str(frame.source.path), "frame": frame.index,
                                          "output": str(t.npz or h5_path), "group": t.group,
                                          "viz": str(t.viz) if t.viz else None, "keypoints": count,
                                          "image_size": list(g.original) if g is not None else None,
                                          "resized": bool(g is not None and g.resized),
                                          "aspect_changed": bool(g is not None and g.aspect_changed),
                                          "read_densely": dense_read}), flush=True)
                    else:
                        label = str(frame.source.path) + (f" frame {frame.index}" if frame.index is not None else "")
                        what = f"{count} keypoints" if count is not None else summary(result, roles, height, width)
                        extra = " (more than the compact read-back holds: read densely)" if dense_read else ""
                        dest = str(t.npz) if t.npz is not None else f"{h5_path}:{t.group}"
                        console.info(f"{label}: {what}{extra} -> {dest}" + (f", {t.viz}" if t.viz else ""))
        except SpcError as exc:
            if tally["frames"]:
                raise SpcError(f"{exc} (stopped after {tally['frames']} of {len(flat)} frame(s); their results "
                               "are kept; rerun with --skip-existing to go on)") from None
            raise
        finally:
            stream.close()
    finally:
        if store is not None:
            store.close()  # the journal merged into the .h5: whatever ended the run
    seconds = time.perf_counter() - start  # from the first frame: the device's set-up is not counted
    kept = len(complete)
    done = tally["frames"]
    rate = done / seconds if seconds > 0 else 0.0
    if as_json:
        print(json.dumps({"summary": {"inputs": len(files), **tally, "seconds": round(seconds, 3),
                                      "frames_per_second": round(rate, 3), "format": fmt, "resize": resize,
                                      "output": str(h5_path) if h5_path else None, "kept": kept,
                                      "skipped": str(skipped) if skipped else None,
                                      "failed": [{"input": str(f), "reason": why} for f, why in failed]}}))
    elif done > 1 or kept or failed:
        kp = f", {tally['keypoints']} keypoints" if keypoints else ""
        size = (f"; {tally['resized']} resized ({tally['aspect_changed']} with a change of aspect ratio)"
                if tally["resized"] else "")
        into = f" -> {h5_path}" if h5_path else ""
        left = f"; {kept} input(s) kept, this plan made their results already (--skip-existing)" if kept else ""
        console.info(f"done: {done} frames from {len(files)} input(s) in {seconds:.1f} s ({rate:.2f} frames/s)"
                     f"{kp}{size}{into}{left}")
    if skipped and not as_json:
        console.note(f"the folders' {skipped}")
    for f, why in failed:
        console.note(f"{f}: {why} (skipped: --keep-going)")
    if failed:
        raise SpcError(f"{len(failed)} of {len(files)} input(s) failed and were skipped (listed above); the others' "
                       "results are written")


def _made(t: Target, sha: str, groups: dict[str, str]) -> bool:
    """Whether this plan made every result of target ``t`` (--skip-existing)."""
    if t.npz is not None and not done_for(t.npz, sha):
        return False
    if t.group is not None and groups.get(t.group) != sha:
        return False
    return t.viz is None or t.viz.is_file()


def done_for(npz: Path, sha: str) -> bool:
    """``npz`` exists and was made by the plan whose sha256 is ``sha``."""
    try:
        with np.load(npz, allow_pickle=False) as got:
            return PLAN_KEY in got.files and str(got[PLAN_KEY]) == sha
    except Exception:  # missing, unreadable, not an npz: to be made
        return False


def failure_reason(exc: BaseException, path: Path) -> str:
    """An input's failure in a line, without its path (the report names it)."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else ""
    line = line.removeprefix(f"{path}: ")
    return line if isinstance(exc, SpcError) else f"{type(exc).__name__}: {line}"
