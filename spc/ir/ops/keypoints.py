"""SuperPoint's keypoint extraction as one op, in whatever layout the source model returns it.

``spc.Keypoints(nms_map, descriptor_map)`` is what fuse-keypoints recognises: the source's host
post-processing, whatever its spelling. It selects keypoints from the (1, H, W) NMS score map,
samples their descriptors from the (1, C, H/cell, W/cell) normalised map and returns them in
the source's conventions, one output per ``outputs`` entry.

Selection (``mode``):

* ``threshold`` (HF's ``SuperPointForKeypointDetection``): every pixel of the kept window whose
  score is above ``threshold``, in raster order (NonZero's); with ``max_keypoints >= 0`` and
  more than that many, the best ``max_keypoints`` by score, best first (ties: raster order).
  The count depends on the data.
* ``fixed`` (fixed-K extractors for matching pipelines): the map with every pixel outside the
  window set to ``fill``, and its top ``max_keypoints`` over the flattened map, best first (ties:
  the lower flat index first, as ONNX TopK). Exactly ``max_keypoints`` keypoints, always.

The kept window is rows ``border <= y < limit_y`` and columns ``border <= x < limit_x``. (HF
compares with 8x the map's size, so its far borders never apply: the limits are then H and W.)

Each entry of ``outputs`` is a role and its conventions, as words:

* ``keypoints xy|yx pixel|norm f32|i64 batch|flat``: positions (x, y) or (y, x), in pixels or
  divided by (W, H) (in the same order), as float32 or int64, with or without the leading batch
  axis;
* ``scores batch|flat``; ``descriptors nd|dn batch|flat`` ((N, D) or (D, N)); ``mask i32|i64|bool
  batch|flat`` (all ones: every returned keypoint is valid).

Descriptors are HF's ``_sample_descriptors``: bilinear (align_corners) samples at the pixel
centre mapped to the coarse map, L2-normalised.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from msgspec import Struct

from spc.ir.ops import register
from spc.ir.ops.spc_ops import l2_normalize

A = list[Any]
D = dict[str, Any]

HF_OUTPUTS = ["keypoints xy norm f32 batch", "scores batch", "descriptors nd batch", "mask i32 batch"]
ROLES = ("keypoints", "scores", "descriptors", "mask")


class OutputSpec(Struct, frozen=True):
    """One output of spc.Keypoints: its role and conventions (the words of its ``outputs`` entry)."""

    role: str
    order: str = "xy"  # keypoints: "xy" | "yx"
    scale: str = "pixel"  # keypoints: "pixel" | "norm"
    dtype: str = "f32"  # keypoints: "f32" | "i64"; mask: "i32" | "i64" | "bool"
    layout: str = "nd"  # descriptors: "nd" | "dn"
    batch: bool = True

    @staticmethod
    def parse(text: str) -> OutputSpec:
        words = text.split()
        if not words or words[0] not in ROLES:
            raise ValueError(f"unknown keypoint output {text!r}")
        role, rest = words[0], set(words[1:])
        known = {"xy", "yx", "pixel", "norm", "f32", "i64", "i32", "bool", "nd", "dn", "batch", "flat"}
        if rest - known:
            raise ValueError(f"keypoint output {text!r}: unknown words {sorted(rest - known)}")
        return OutputSpec(role, "yx" if "yx" in rest else "xy", "norm" if "norm" in rest else "pixel",
                          next((d for d in ("i64", "i32", "bool") if d in rest), "f32" if role != "mask" else "i32"),
                          "dn" if "dn" in rest else "nd", "flat" not in rest)

    def spell(self) -> str:
        words = [self.role]
        if self.role == "keypoints":
            words += [self.order, self.scale, self.dtype]
        elif self.role == "descriptors":
            words.append(self.layout)
        elif self.role == "mask":
            words.append(self.dtype)
        return " ".join([*words, "batch" if self.batch else "flat"])


def sample_descriptors(xy: np.ndarray, desc: np.ndarray, cell: int) -> np.ndarray:
    """HF SuperPoint ``_sample_descriptors``: bilinear (align_corners, zero padding) samples of the
    coarse map ``desc`` (C, hc, wc) at full-resolution pixels ``xy`` (N, 2), L2-normalised."""
    c, hc, wc = desc.shape
    divisor = np.array([wc * cell - cell / 2 - 0.5, hc * cell - cell / 2 - 0.5], np.float32)
    g = ((xy.astype(np.float32) - cell / 2 + 0.5) / divisor) * 2 - 1
    ix, iy = (g[:, 0] + 1) / 2 * (wc - 1), (g[:, 1] + 1) / 2 * (hc - 1)
    x0, y0 = np.floor(ix).astype(np.int64), np.floor(iy).astype(np.int64)
    out = np.zeros((len(xy), c), np.float32)
    plane = desc.reshape(c, hc * wc)
    pixels = plane.T
    if pixels.flags.c_contiguous:  # a channels-last map (a device read-back's view): a row per pixel
        def at(flat: np.ndarray) -> np.ndarray:
            return np.take(pixels, flat, axis=0)
    else:  # np.take copies a strided array whole first: gather along the contiguous axis
        def at(flat: np.ndarray) -> np.ndarray:
            return np.take(plane, flat, axis=1).T
    for dx, dy in ((0, 0), (1, 0), (0, 1), (1, 1)):
        xs, ys = x0 + dx, y0 + dy
        weight = (1 - np.abs(ix - xs)) * (1 - np.abs(iy - ys))
        inside = (xs >= 0) & (xs < wc) & (ys >= 0) & (ys < hc)
        if inside.all():  # the usual case: no masked copies (the same sums)
            out += weight[:, None] * at(ys * wc + xs)
        else:
            out[inside] += weight[inside, None] * at(ys[inside] * wc + xs[inside])
    return l2_normalize(out, 1, 1e-12)


def select(score: np.ndarray, attrs: D) -> tuple[np.ndarray, np.ndarray]:
    """Selected pixels (N, 2) as (x, y) and their scores, in output order (see the module doc)."""
    s = np.asarray(score, np.float32).reshape(score.shape[-2:])
    w = s.shape[1]
    b, ly, lx, k = (int(attrs[a]) for a in ("border", "limit_y", "limit_x", "max_keypoints"))
    if attrs.get("mode", "threshold") == "fixed":
        masked = np.full_like(s, np.float32(attrs["fill"]))
        masked[b:ly, b:lx] = s[b:ly, b:lx]
        flat = masked.reshape(-1)
        order = np.argsort(-flat, kind="stable")[:k]
        ys, xs = np.divmod(order, w)
        return np.stack([xs, ys], -1), flat[order]
    ys, xs = np.divmod(np.flatnonzero(s > np.float32(attrs["threshold"])), w)  # np.nonzero's order, faster
    inside = (ys >= b) & (ys < ly) & (xs >= b) & (xs < lx)
    ys, xs = ys[inside], xs[inside]
    scores = s[ys, xs]
    if 0 <= k < len(scores):
        order = np.argsort(-scores, kind="stable")[:k]
        ys, xs, scores = ys[order], xs[order], scores[order]
    return np.stack([xs, ys], -1), scores


def format_outputs(xy: np.ndarray, scores: np.ndarray, desc: np.ndarray, specs: list[str], height: int,
                   width: int) -> list[np.ndarray]:
    """The source's outputs from the canonical keypoints: pixels (N, 2) as (x, y), scores (N,),
    descriptors (N, D)."""
    out = []
    for text in specs:
        spec = OutputSpec.parse(text)
        if spec.role == "keypoints":
            k = xy[:, ::-1] if spec.order == "yx" else xy
            if spec.scale == "norm":
                size = np.array([height, width] if spec.order == "yx" else [width, height], np.float32)
                a = k.astype(np.float32) / size
            else:
                a = k.astype(np.int64 if spec.dtype == "i64" else np.float32)
        elif spec.role == "scores":
            a = scores.astype(np.float32)
        elif spec.role == "descriptors":
            a = (desc.T if spec.layout == "dn" else desc).astype(np.float32)
        else:
            a = np.ones(len(scores), {"i32": np.int32, "i64": np.int64, "bool": np.bool_}[spec.dtype])
        out.append(np.ascontiguousarray(a[None] if spec.batch else a))
    return out


def canonical(outputs: dict[str, np.ndarray], roles: dict[str, dict[str, Any]], height: int,
              width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Keypoints in pixels (N, 2) as (x, y), scores (N,) and descriptors (N, D) from a model's
    outputs, by the roles the plan records (None when the outputs hold no keypoints)."""
    got: dict[str, np.ndarray] = {}
    for name, role in roles.items():
        if role.get("role") not in ROLES or name not in outputs:
            continue
        spec = OutputSpec.parse(role["spec"])
        a = np.asarray(outputs[name])
        a = a[0] if spec.batch else a
        if spec.role == "keypoints":
            a = a.astype(np.float32)
            if spec.scale == "norm":
                a = a * np.array([height, width] if spec.order == "yx" else [width, height], np.float32)
            a = a[:, ::-1] if spec.order == "yx" else a
        elif spec.role == "descriptors" and spec.layout == "dn":
            a = a.T
        got[spec.role] = np.ascontiguousarray(a)
    if "keypoints" not in got or "scores" not in got:
        return None
    n = len(got["scores"])
    desc = got.get("descriptors", np.zeros((n, 0), np.float32))
    if "mask" in got:
        keep = got["mask"].astype(bool)
        return got["keypoints"][keep], got["scores"][keep], desc[keep]
    return got["keypoints"], got["scores"], desc


KEYPOINT_ATTRS = ("mode", "threshold", "fill", "border", "limit_y", "limit_x", "max_keypoints", "cell", "outputs")


def extract(score: np.ndarray, desc: np.ndarray, attrs: D, skip_descriptors: bool = False) -> list[np.ndarray]:
    """:func:`select`, descriptors sampled there, formatted as ``attrs["outputs"]`` says.
    ``skip_descriptors``: zeros in their place (a question about the selection alone)."""
    xy, scores = select(score, attrs)
    d = np.asarray(desc, np.float32)
    if skip_descriptors:
        sampled = np.zeros((len(xy), d.shape[-3]), np.float32)
    else:
        sampled = sample_descriptors(xy.astype(np.float32), d.reshape(d.shape[-3:]), int(attrs["cell"]))
    h, w = np.asarray(score).shape[-2:]
    return format_outputs(xy, scores, sampled, list(attrs.get("outputs", HF_OUTPUTS)), h, w)


@register("spc.Keypoints", None, data_dependent=True, arity=(2, 2))
def _keypoints(ins: A, attrs: D) -> list[np.ndarray]:
    """SuperPoint keypoints from the NMS score map and the normalised descriptor map: :func:`extract`."""
    return extract(np.asarray(ins[0]), np.asarray(ins[1]), attrs)


class KeypointOverflow(Exception):
    """More keypoints may exceed the threshold than the device's top-K holds: read densely."""


def from_top_k(values: np.ndarray, indices: np.ndarray, descriptors: np.ndarray, attrs: D) -> list[np.ndarray]:
    """:func:`extract` from the device's top-K of the NMS map's kept window (rows from ``border``,
    columns ``border`` to ``limit_x``): values, flat indices in that window, and descriptors
    already sampled there. Raises :class:`KeypointOverflow` when the K-th value is still above
    the threshold and every keypoint was asked for."""
    v = np.asarray(values, np.float32).reshape(-1)
    p = np.rint(np.asarray(indices, np.float64)).reshape(-1).astype(np.int64)
    d = np.asarray(descriptors, np.float32).reshape(len(v), -1)
    # best first, equal scores by position: ttnn's topk leaves the order of equal values open (its
    # golden is torch.topk's), the emulator keeps the lowest position first; either reads the same
    order = np.lexsort((p, -v))
    v, p = v[order], p[order]  # the descriptors are gathered once, the kept ones, below
    border, limit_x, k = int(attrs["border"]), int(attrs["limit_x"]), int(attrs["max_keypoints"])
    height, width = int(attrs["height"]), int(attrs["width"])
    inner = limit_x - border
    ys, xs = p // inner + border, p % inner + border
    if attrs.get("mode", "threshold") == "fixed":
        keep = np.arange(len(v))  # the device's top-K is the answer, best first
    else:
        above = v > np.float32(attrs["threshold"])
        if k >= 0 and len(v) > k and above[k]:
            keep = np.arange(k)  # more than asked for: the best, best first (as torch.topk)
        elif k < 0 and above[-1]:
            raise KeypointOverflow(f"all {len(v)} device keypoint slots are above the threshold")
        else:
            keep = np.flatnonzero(above)
            if k < 0 or len(keep) <= k:
                keep = keep[np.argsort(ys[keep] * width + xs[keep], kind="stable")]  # raster order, as NonZero
    xy = np.stack([xs[keep], ys[keep]], -1)
    return format_outputs(xy, v[keep], d[order[keep]], list(attrs.get("outputs", HF_OUTPUTS)), height, width)


@register("spc.KeypointsFromTopK", None, data_dependent=True, arity=(3, 3))
def _keypoints_from_top_k(ins: A, attrs: D) -> list[np.ndarray]:
    """The host tail of a compact read-back: :func:`from_top_k`."""
    return from_top_k(ins[0], ins[1], ins[2], attrs)
