"""A matcher plan's inputs and outputs by what they hold, and one pair's features fed to it.

A matcher (LightGlue, SuperGlue, a mutual nearest neighbour) takes each image's keypoints and
descriptors, and perhaps their scores and the image's size, and returns for each keypoint of image
0 the index of its match in image 1 (-1: none) and the match's score. Which input is which is read
from the plan's declared shapes and types and their order, never from the names the model chose:

    kpts0, kpts1     [1, K, 2] or [K, 2] float         keypoints (x, y), image 0's first
    desc0, desc1     [1, K, D] or [1, D, K]             descriptors (LightGlue's / SuperGlue's layout)
    scores0, scores1 [1, K] or [K] float                keypoint scores (SuperGlue)
    size0, size1     [1, 2] or [2]                      the image's (width, height)

    matches0         [1, K0] or [K0] integer            the first integer output of image 0's length
    scores0          [1, K0] or [K0] float              the first float output of that shape (optional)

or, as LightGlue-ONNX's exports return them, the matches as pairs:

    matches          [M, 2] integer, M data-dependent   (i in image 0, j in image 1) per match
    mscores          [M] float                          (optional)

A matcher compiled for K keypoints per image gets each image's K best by score (kept in the
extractor's order); an image with fewer is padded (keypoints at the image's centre, zero
descriptors and scores), and matches to or from the padding are dropped. The padding takes part
in the matcher's attention, so a matcher compiled for the extractor's own K (`--max-keypoints`)
is the exact pipeline.
"""

from __future__ import annotations

import numpy as np
from msgspec import Struct

from spc.errors import SpcError
from spc.ir.types import DType
from spc.plan.program import Program, TensorSpec

COORDS = ("pixels", "normalized")


class Side(Struct, frozen=True):
    """One image's inputs of the matcher, by name, and its keypoint count."""

    keypoints: str
    descriptors: str
    channels_first: bool  # descriptors [1, D, K] (SuperGlue) instead of [1, K, D]
    count: int
    dim: int
    scores: str | None = None
    size: str | None = None


class MatcherRoles(Struct, frozen=True):
    sides: tuple[Side, Side]
    matches: str
    match_scores: str | None
    pairs: bool = False  # matches as an [M, 2] list of (i, j), not matches0


def _dims(spec: TensorSpec) -> list[int] | None:
    return [int(d) for d in spec.shape] if all(isinstance(d, int) for d in spec.shape) else None


def _lead_one(shape: list[int], rank: int) -> list[int] | None:
    """The shape without a leading 1 when it has ``rank`` axes after it, else as is if it has ``rank``."""
    if len(shape) == rank + 1 and shape[0] == 1:
        return shape[1:]
    return shape if len(shape) == rank else None


def matcher_roles(program: Program) -> MatcherRoles | str:
    """The matcher's roles, or why its inputs and outputs are not a matcher's (a reason to print)."""
    floats = {s.name for s in program.inputs if DType(s.dtype).is_float}
    keypoints, rest = [], []
    for spec in program.inputs:
        shape = _dims(spec)
        if shape is None:
            return f"input {spec.name} has a dynamic shape {spec.shape}"
        two = _lead_one(shape, 2)
        if spec.name in floats and two is not None and two[1] == 2 and len(keypoints) < 2:
            keypoints.append((spec, two[0]))
        else:
            rest.append((spec, shape))
    if len(keypoints) != 2:
        return (f"a matcher takes two keypoint inputs, [1, K, 2] floats, one per image; this plan has "
                f"{len(keypoints)} ({', '.join(s.name for s in program.inputs)})")
    counts = [k for _, k in keypoints]
    desc: list[tuple[str, bool, int]] = []
    scores: list[str] = []
    sizes: list[str] = []
    for spec, shape in rest:
        if len(shape) == 3 and shape[0] == 1 and len(desc) < 2 and spec.name in floats:
            k = counts[len(desc)]
            if shape[1] == k:  # [1, K, D]; also where D == K, LightGlue's layout
                desc.append((spec.name, False, shape[2]))
                continue
            if shape[2] == k:
                desc.append((spec.name, True, shape[1]))
                continue
        one = _lead_one(shape, 1)
        if one == [2] and len(sizes) < 2:
            sizes.append(spec.name)
        elif one is not None and spec.name in floats and one[0] in counts and len(scores) < 2:
            scores.append(spec.name)
        else:
            return (f"input {spec.name} {spec.shape} is none of a matcher's inputs (keypoints [1, K, 2], "
                    "descriptors [1, K, D] or [1, D, K], scores [1, K], image size [1, 2])")
    if len(desc) != 2:
        return f"a matcher takes two descriptor inputs, [1, K, D] or [1, D, K]; this plan has {len(desc)}"
    if len(scores) not in (0, 2) or len(sizes) not in (0, 2):
        return "a matcher's score and image-size inputs come in pairs, one per image"
    if desc[0][2] != desc[1][2]:
        return f"the two descriptor inputs differ in dimension ({desc[0][2]} and {desc[1][2]})"
    sides = tuple(Side(kp.name, d[0], d[1], k, d[2], scores[i] if scores else None, sizes[i] if sizes else None)
                  for i, ((kp, k), d) in enumerate(zip(keypoints, desc)))
    matches = scores_out = None
    for spec in program.outputs:
        shape = _dims(spec)
        if shape is None or _lead_one(shape, 1) != [counts[0]]:
            continue
        if matches is None and DType(spec.dtype).is_int:
            matches = spec.name
        elif scores_out is None and DType(spec.dtype).is_float:
            scores_out = spec.name
    if matches is None:
        return _pair_roles(program, (sides[0], sides[1])) or (
            f"a matcher returns its matches as an integer output [1, {counts[0]}] (matches0: for each keypoint of "
            "image 0, its match in image 1 or -1) or [M, 2] (pairs); this plan's outputs are "
            + ", ".join(f"{s.name} {s.shape}" for s in program.outputs))
    return MatcherRoles((sides[0], sides[1]), matches, scores_out)


def _pair_roles(program: Program, sides: tuple[Side, Side]) -> MatcherRoles | None:
    """Matches as pairs: the first integer [M, 2] output, and the first float [M] of the same M."""
    pairs = next((s for s in program.outputs if DType(s.dtype).is_int and len(s.shape) == 2 and s.shape[1] == 2),
                 None)
    if pairs is None:
        return None
    scores = next((s for s in program.outputs if DType(s.dtype).is_float and s.shape == [pairs.shape[0]]), None)
    return MatcherRoles(sides, pairs.name, scores.name if scores else None, pairs=True)


def kept_keypoints(scores: np.ndarray, k: int) -> np.ndarray:
    """The indices of the ``k`` best scores (ties: the first), in their original order."""
    if len(scores) <= k:
        return np.arange(len(scores))
    best = np.argsort(-np.asarray(scores, np.float64), kind="stable")[:k]
    return np.sort(best)


def normalized(xy: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """LightGlue's normalisation of pixel keypoints: centred, divided by half the larger side."""
    wh = np.asarray(size, np.float32)
    return ((xy - wh / 2) / (wh.max() / 2)).astype(np.float32)


def side_feeds(side: Side, xy: np.ndarray, scores: np.ndarray, desc: np.ndarray, size: tuple[int, int],
               coords: str = "pixels") -> dict[str, np.ndarray]:
    """One image's matcher inputs from its (at most K) keypoints (N, 2), scores (N,) and descriptors
    (N, D), padded to K; ``size`` its (width, height)."""
    n, k = len(xy), side.count
    if desc.shape[1:] != (side.dim,):
        raise SpcError(f"the extractor's descriptors are {desc.shape[1] if desc.ndim == 2 else '?'}-dimensional, "
                       f"the matcher's input {side.descriptors} takes {side.dim}: pair an extractor and a matcher "
                       "made for the same descriptors")
    assert n <= k
    pts = np.empty((k, 2), np.float32)
    pts[:n] = xy
    pts[n:] = np.asarray(size, np.float32) / 2
    if coords == "normalized":
        pts = normalized(pts, size)
    d = np.zeros((k, side.dim), np.float32)
    d[:n] = desc
    out = {side.keypoints: pts[None], side.descriptors: (d.T if side.channels_first else d)[None]}
    if side.scores is not None:
        s = np.zeros(k, np.float32)
        s[:n] = scores
        out[side.scores] = s[None]
    if side.size is not None:
        out[side.size] = np.asarray(size, np.float32)[None]
    return out


def hloc_matches(outputs: dict[str, np.ndarray], roles: MatcherRoles, n0: int,
                 n1: int) -> tuple[np.ndarray, np.ndarray]:
    """hloc's matches0 (N0,) int16 and matching_scores0 (N0,) float16 for the real keypoints
    (``n0``, ``n1``: each image's, before the padding): a match into the padding is none."""
    if roles.pairs:
        ij = np.asarray(outputs[roles.matches]).reshape(-1, 2).astype(np.int64)
        given = (np.asarray(outputs[roles.match_scores], np.float32).reshape(-1) if roles.match_scores is not None
                 else np.ones(len(ij), np.float32))
        keep = (ij[:, 0] >= 0) & (ij[:, 0] < n0) & (ij[:, 1] >= 0) & (ij[:, 1] < n1)
        m, s = np.full(n0, -1, np.int64), np.zeros(n0, np.float32)
        m[ij[keep, 0]], s[ij[keep, 0]] = ij[keep, 1], given[:len(ij)][keep]
        return m.astype(np.int16), s.astype(np.float16)
    m = np.asarray(outputs[roles.matches]).reshape(-1)[:n0].astype(np.int64)
    m = np.where((m >= 0) & (m < n1), m, -1)
    if roles.match_scores is not None:
        s = np.asarray(outputs[roles.match_scores], np.float32).reshape(-1)[:n0]
    else:
        s = (m >= 0).astype(np.float32)
    s = np.where(m >= 0, s, 0.0)
    return m.astype(np.int16), s.astype(np.float16)


Kept = tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int]]  # keypoints, scores, descriptors, (w, h)


def pair_feeds(roles: MatcherRoles, a: Kept, b: Kept, coords: str = "pixels") -> dict[str, np.ndarray]:
    """The matcher's inputs for a pair, each image's features at most its side's K (:func:`kept_keypoints`)."""
    return {**side_feeds(roles.sides[0], *a, coords=coords), **side_feeds(roles.sides[1], *b, coords=coords)}
