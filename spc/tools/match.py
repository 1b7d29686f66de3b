"""`spc match`: an extractor plan and a matcher plan over images -> hloc's features.h5 and matches.h5.

    spc match sp.ttplan lg.ttplan images/ --pairs pairs.txt -o out/     # out/matches.h5, out/features.h5

Every image named by a pair is extracted once (its K best keypoints by score, K the matcher's;
runtime/matching.py), written to features.h5 as `spc run --format h5` writes it, then every pair
is matched and written to matches.h5 as hloc's match_features writes it: a group
``names_to_pair(name0, name1)`` (each name's "/" as "-", joined by "/") holding ``matches0``
(N0,) int16, for each keypoint of image 0 its match in image 1 or -1, and ``matching_scores0``
(N0,) float16. The indices are those of the keypoints in features.h5.

Both files are written through a journal (tools/h5_store.py): a kill loses nothing, and a rerun
with --skip-existing goes on from what these plans made (the features it reads back, so the
indices stay those of the file).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
from pathlib import Path

import numpy as np
from msgspec import Struct
from PIL import Image, ImageDraw

from spc import console
from spc.errors import SpcError
from spc.files import atomic_write, check_outputs, file_sha256, os_errors
from spc.plan.io import Plan
from spc.runtime.extraction import Extraction, by_shape, has_keypoints
from spc.runtime.frames import frames, probe
from spc.runtime.matching import COORDS, MatcherRoles, hloc_matches, kept_keypoints, matcher_roles, pair_feeds
from spc.runtime.runner import Runner
from spc.tools.h5_store import H5Store, h5py_module
from spc.tools.run import H5_SUFFIXES, check_h5, h5_arrays, h5_output, in_original, keypoints_of, relative_names

MAX_PAIRS_BYTES = 64 << 20  # a pairs file larger than this is not a list of image pairs


class ImageFeatures(Struct):
    """One image's features as the matcher gets them (the file's, in features.h5)."""

    keypoints: np.ndarray  # (N, 2) original pixels
    scores: np.ndarray
    descriptors: np.ndarray  # (N, D)
    size: tuple[int, int]  # (width, height)
    grey: np.ndarray | None = None  # uint8, for --viz


def pair_name(name0: str, name1: str) -> str:
    """hloc's ``names_to_pair``: the group of a pair in matches.h5."""
    return "/".join((name0.replace("/", "-"), name1.replace("/", "-")))


def exhaustive(names: list[str]) -> list[tuple[str, str]]:
    """Every pair of the images, each once (hloc's pairs_from_exhaustive)."""
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]


def read_pairs(path: Path, names: list[str]) -> list[tuple[str, str]]:
    """hloc's pairs file: a line "name0 name1" per pair, names as the inputs' relative names
    (blank lines and "#" comments skipped, a pair given twice kept once)."""
    with os_errors(path, "cannot read"):
        if path.stat().st_size > MAX_PAIRS_BYTES:
            raise SpcError(f"{path}: larger than {MAX_PAIRS_BYTES >> 20} MiB; not a pairs file")
        data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpcError(f"{path}: not UTF-8 text (byte {exc.start}); a pairs file has a line 'name0 name1' per "
                       "pair") from None
    known = set(names)
    out: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise SpcError(f"{path}:{number}: expected two image names, found {len(parts)}")
        for name in parts:
            if name not in known:
                shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
                raise SpcError(f"{path}:{number}: {name[:200]!r} is not one of the input images (named relative to "
                               f"the folder given: {shown})")
        if parts[0] == parts[1]:
            raise SpcError(f"{path}:{number}: pairs {parts[0]!r} with itself")
        pair = (parts[0], parts[1])
        if pair not in seen:
            seen.add(pair)
            out.append(pair)
    if not out:
        raise SpcError(f"{path}: holds no pair")
    return out


def match_png(a: ImageFeatures, b: ImageFeatures, matches: np.ndarray, scores: np.ndarray) -> bytes:
    """The two images side by side, each match a line coloured from red (low score) to green."""
    assert a.grey is not None and b.grey is not None
    h = max(a.grey.shape[0], b.grey.shape[0])
    canvas = np.zeros((h, a.grey.shape[1] + b.grey.shape[1]), np.uint8)
    canvas[:a.grey.shape[0], :a.grey.shape[1]] = a.grey
    canvas[:b.grey.shape[0], a.grey.shape[1]:] = b.grey
    im = Image.fromarray(canvas, mode="L").convert("RGB")
    draw = ImageDraw.Draw(im)
    dx = a.grey.shape[1]
    for i in np.flatnonzero(matches >= 0):
        (x0, y0), (x1, y1) = a.keypoints[i], b.keypoints[int(matches[i])]
        s = float(np.clip(scores[i], 0, 1))
        draw.line([x0, y0, x1 + dx, y1], fill=(int(255 * (1 - s)), int(255 * s), 0), width=1)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def _roles(matcher: Plan, path: Path | None) -> MatcherRoles:
    roles = matcher_roles(matcher.program)
    if isinstance(roles, str):
        raise SpcError(f"{path or 'the matcher plan'}: not a matcher's plan: {roles}")
    return roles


def _check_extractor(extractor: Plan, path: Path | None) -> None:
    where = path or "the extractor plan"
    if len(extractor.program.inputs) != 1 or not has_keypoints(extractor.program.roles):
        raise SpcError(f"{where}: not an extractor's plan (one image in, keypoints out); give the extractor first, "
                       "then the matcher")
    if extractor.images_per_run != 1:
        raise SpcError(f"{where}: a batch plan ({extractor.images_per_run} images a run); spc match takes a plan "
                       "compiled with --batch 1")


def outputs_of(output: Path | None, features: Path | None) -> tuple[Path, Path]:
    """matches.h5 (``-o``: a .h5 name, or a folder for its matches.h5; default ./matches.h5) and
    features.h5 (default: beside it)."""
    matches = h5_output(output, "matches.h5", "spc match writes hloc's matches.h5")
    feats = features if features is not None else matches.with_name("features.h5")
    if feats.suffix.lower() not in H5_SUFFIXES:
        raise SpcError(f"{feats}: --features names an HDF5 file (.h5)")
    if os.path.abspath(feats) == os.path.abspath(matches):
        raise SpcError(f"{matches}: the features and the matches need two files; give --features another name")
    return matches, feats


def _read_back(store: H5Store, names: list[str]) -> dict[str, ImageFeatures]:
    """Features these plans wrote in an earlier run (--skip-existing), as the matcher gets them."""
    if not names:
        return {}
    h5py = h5py_module()
    out: dict[str, ImageFeatures] = {}
    with os_errors(store.path, "cannot read"), h5py.File(store.path, "r") as fd:
        for name in names:
            try:  # a file of ours, but a file: it may have been edited since
                g = fd[name]
                w, h = (int(v) for v in np.asarray(g["image_size"]).reshape(2))
                xy = np.asarray(g["keypoints"], np.float32).reshape(-1, 2)
                scores = np.asarray(g["scores"], np.float32).reshape(len(xy))
                desc = np.asarray(g["descriptors"], np.float32).T.reshape(len(xy), -1)
            except (KeyError, ValueError, TypeError) as exc:
                raise SpcError(f"{store.path}: group {name} cannot be read back as features ({type(exc).__name__}); "
                               "rerun with --overwrite to make it again") from None
            out[name] = ImageFeatures(xy, scores, desc, (w, h))
    return out


def extract_images(extractor: Plan, files: dict[str, Path], store: H5Store, keep: int, backend: str, *,
                   trace: bool, resize: str, allow_nonfinite: bool, extraction: Extraction, viz: bool,
                   reuse: set[str]) -> dict[str, ImageFeatures]:
    """Each image's ``keep`` best keypoints (into ``store``, and returned by name); those in
    ``reuse`` read back from the file instead."""
    shape = [int(d) for d in extractor.program.inputs[0].shape]
    height, width = extractor.program.image.frame_size(shape)
    back = _read_back(store, [name for name in files if name in reuse])
    got: dict[str, ImageFeatures] = {} if viz else dict(back)  # --viz decodes every image again
    todo = [name for name in files if name not in got]
    image = extractor.program.image
    sources = [probe(files[name], shape, allow_nonfinite, image=image) for name in todo]  # headers before pixels
    by_source = {id(s): name for s, name in zip(sources, todo)}
    roles = extractor.program.roles
    with Runner(extractor, backend, trace) as runner:
        for frame in frames(sources, shape, resize, keep_original=viz, allow_nonfinite=allow_nonfinite,
                            image=image):
            name = by_source[id(frame.source)]
            found = keypoints_of(runner.run(frame.x), roles, height, width, extraction)
            assert found is not None
            xy, scores, desc = in_original(found, frame.geometry)
            if name in back:  # --viz on a rerun: the image is decoded again, the file's features kept
                kept = back[name]
            else:
                idx = kept_keypoints(scores, keep)
                arrays, uncertainty = h5_arrays((xy[idx], scores[idx], desc[idx]), frame, width, height)
                store.add(name, arrays, uncertainty)
                size = frame.geometry.original if frame.geometry is not None else (width, height)
                kept = ImageFeatures(xy[idx].astype(np.float32), scores[idx].astype(np.float32),
                              np.asarray(desc[idx], np.float32), (int(size[0]), int(size[1])))
            if viz and frame.original is not None:
                kept.grey = (np.clip(frame.original, 0, 1) * 255).astype(np.uint8)
            got[name] = kept
            console.detail(f"{files[name]}: {len(kept.keypoints)} keypoints kept of {len(xy)}")
    return got


def match_pair(runner: Runner, roles: MatcherRoles, a: ImageFeatures, b: ImageFeatures,
               coords: str = "pixels") -> tuple[np.ndarray, np.ndarray]:
    """One pair's hloc matches0 and matching_scores0 (runtime/matching.py)."""
    feeds = pair_feeds(roles, (a.keypoints, a.scores, a.descriptors, a.size),
                       (b.keypoints, b.scores, b.descriptors, b.size), coords)
    return hloc_matches(runner.run(feeds).outputs, roles, len(a.keypoints), len(b.keypoints))


def match_files(extractor: Plan, matcher: Plan, files: list[Path], pairs_file: Path | None, output: Path | None,
                features: Path | None, viz: Path | None, backend: str, *, extract_path: Path, match_path: Path,
                trace: bool = True, overwrite: bool = False, skip_existing: bool = False, as_json: bool = False,
                root: Path | None = None, resize: str = "stretch", coords: str = "pixels",
                allow_nonfinite: bool = False, extraction: Extraction | None = None) -> None:
    _check_extractor(extractor, extract_path)
    roles = _roles(matcher, match_path)
    if coords not in COORDS:
        raise SpcError(f"--keypoint-coords {coords!r}: expected one of {', '.join(COORDS)}")
    extraction = extraction or Extraction()
    if (why := extraction.check()) is not None:
        raise SpcError(f"the keypoint extraction: {why}")
    names = relative_names(files, root)
    by_name = dict(zip(names, files))
    if len(by_name) != len(files):
        raise SpcError("an image is given twice (a folder and a file in it?); give each once")
    pairs = read_pairs(pairs_file, names) if pairs_file is not None else exhaustive(names)
    if not pairs:
        raise SpcError("one image gives no pair: give two images or more, or --pairs")
    used = {n: by_name[n] for pair in pairs for n in pair}
    matches_path, features_path = outputs_of(output, features)
    protected = [*files, extract_path, match_path, *([pairs_file] if pairs_file else [])]
    check_h5(matches_path, protected)
    check_h5(features_path, protected)
    pngs = {p: viz / (pair_name(*p).replace("/", "__") + ".png") for p in pairs} if viz is not None else {}
    if viz is not None:
        with os_errors(viz):
            if os.path.lexists(viz) and not viz.is_dir():
                raise SpcError(f"{viz}: --viz names a folder for the pairs' PNGs")
    keep = min(side.count for side in roles.sides)
    # the features are the extractor's best ``keep``: another K's (or spc run's, all of them) are
    # another plan's, never read back as these
    x_sha = hashlib.sha256(f"{file_sha256(extract_path)} best {keep}".encode()).hexdigest()
    m_sha = hashlib.sha256(f"{x_sha} {file_sha256(match_path)} {coords}".encode()).hexdigest()
    if (said := by_shape(extractor.program.roles)) is not None and not as_json:
        console.note(said)
    if backend == "ttnn-mock" and not as_json:
        console.note("the mock p150 validates every call and allocates its memory but computes no values (zeros): the "
                     "keypoints and matches below mean nothing; --backend emu computes them")
    start = time.perf_counter()
    with H5Store(features_path, x_sha) as fstore, H5Store(matches_path, m_sha, marker="matches0") as mstore:
        have_f, have_m = fstore.groups(), mstore.groups()
        mine_f = {n for n in used if skip_existing and have_f.get(n) == x_sha}
        mine_m = {p for p in pairs if skip_existing and have_m.get(pair_name(*p)) == m_sha
                  and (viz is None or pngs[p].is_file())}
        taken = [n for n in used if n in have_f and n not in mine_f]
        taken += [pair_name(*p) for p in pairs if pair_name(*p) in have_m and p not in mine_m]
        if taken and not overwrite:
            more = f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""
            where = features_path if taken[0] in have_f else matches_path
            if skip_existing:
                raise SpcError(f"{taken[0]}{more} is in {where} already, made by another plan (or for a matcher of "
                               "another K); --overwrite replaces it, or choose another -o")
            raise SpcError(f"{taken[0]}{more} is in {where} already; --skip-existing keeps what these plans made, "
                           "--overwrite replaces it")
        todo = [p for p in pairs if p not in mine_m]
        check_outputs([pngs[p] for p in todo if p in pngs], protected, overwrite)
        need = {n: used[n] for p in todo for n in p}
        if viz is not None:
            with os_errors(viz):
                viz.mkdir(parents=True, exist_ok=True)
        images = extract_images(extractor, need, fstore, keep, backend, trace=trace, resize=resize,
                                allow_nonfinite=allow_nonfinite, extraction=extraction, viz=viz is not None,
                                reuse=mine_f)
        fstore.merge()  # the features are whole before the first match names their indices
        extracted = time.perf_counter()
        total = 0
        with Runner(matcher, backend, trace) as runner:
            for p in todo:
                a, b = images[p[0]], images[p[1]]
                m0, s0 = match_pair(runner, roles, a, b, coords)
                mstore.add(pair_name(*p), {"matches0": m0, "matching_scores0": s0})
                if p in pngs:
                    atomic_write(pngs[p], match_png(a, b, m0, s0))
                count = int((m0 >= 0).sum())
                total += count
                if as_json:
                    print(json.dumps({"pair": list(p), "group": pair_name(*p), "keypoints": [len(a.keypoints),
                                      len(b.keypoints)], "matches": count,
                                      "viz": str(pngs[p]) if p in pngs else None}), flush=True)
                else:
                    console.info(f"{p[0]} {p[1]}: {count} matches of {len(a.keypoints)} / {len(b.keypoints)} "
                                 f"keypoints -> {matches_path}:{pair_name(*p)}" + (f", {pngs[p]}" if p in pngs else ""))
    seconds = time.perf_counter() - start
    matched = time.perf_counter() - extracted
    most = max(side.count for side in roles.sides)
    short = sorted(n for n, f in images.items() if len(f.keypoints) < most)
    if short and not as_json and backend != "ttnn-mock":
        more = f" and {len(short) - 1} more" if len(short) > 1 else ""
        console.note(f"{short[0]}{more}: fewer keypoints than the matcher's {most} a side; padded, the padding's "
                     "matches dropped (a learned matcher's attention sees the padding: docs/matchers.md)")
    summary = {"pairs": len(pairs), "matched": len(todo), "kept": len(pairs) - len(todo), "images": len(need),
               "matches": total, "seconds": round(seconds, 3),
               "pairs_per_second": round(len(todo) / matched, 3) if todo and matched > 0 else None,
               "matches_file": str(matches_path), "features_file": str(features_path)}
    if as_json:
        print(json.dumps({"summary": summary}))
        return
    kept = (f"; {summary['kept']} pair(s) kept, these plans made them already (--skip-existing)"
            if summary["kept"] else "")
    console.info(f"done: {len(todo)} pair(s) of {len(need)} image(s), {total} matches in {seconds:.1f} s -> "
                 f"{matches_path}, {features_path}{kept}")
