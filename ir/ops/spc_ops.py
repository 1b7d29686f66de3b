"""The spc dialect: the fused ops that the passes create and the lowering knows.

Each evaluator is the op's reference semantics in float32 numpy. The fusion passes prove a
candidate subgraph equal to these references before rewriting (see passes/semantic_match.py),
and the emulator's device numerics are tested against them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spc.ir.graph import Value
from spc.ir.ops import register
from spc.ir.ops.infer import same_type
from spc.ir.ops.onnx_nn import conv2d_nchw, depth_to_space, max_pool_nchw, softmax
from spc.ir.types import TensorType

A = list[Any]
D = dict[str, Any]


def _conv2d_infer(ins: list[Value | None], attrs: D) -> list[TensorType] | None:
    from spc.ir.ops import get

    return get("onnx.Conv").infer_types(ins, attrs)


@register("spc.Conv2d", _conv2d_infer, arity=(2, 3))
def _conv2d(ins: A, attrs: D) -> list[np.ndarray]:
    """Convolution + bias + optional activation (``activation = "relu" | "none"``)."""
    x, w = np.asarray(ins[0]), np.asarray(ins[1])
    b = np.asarray(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    y = conv2d_nchw(x, w, b, attrs["strides"], attrs["pads"], attrs["dilations"], attrs["group"])
    if attrs["activation"] == "relu":
        y = np.maximum(y, 0)
    return [y]


def score_fold(logits: np.ndarray, cell: int) -> np.ndarray:
    """softmax over channels, drop the last ("dustbin") channel, depth-to-space by ``cell``.

    ``logits`` is (N, cell*cell + 1, h, w); the result is (N, 1, h*cell, w*cell) where pixel
    (y*cell + i, x*cell + j) takes channel i*cell + j (DCR order, as the HF model folds).
    """
    probs = softmax(logits.astype(np.float32), axis=1)[:, :-1]
    return depth_to_space(probs, cell, "DCR")


def _score_fold_infer(ins: list[Value | None], attrs: D) -> list[TensorType]:
    x = ins[0]
    assert x is not None
    return [x.type.with_shape(tuple(attrs["out_shape"]))]


@register("spc.ScoreFold", _score_fold_infer, arity=(1, 1))
def _score_fold(ins: A, attrs: D) -> list[np.ndarray]:
    """Keypoint score map at full resolution from the detector logits; ``out_shape`` keeps the
    source model's spelling of the result ((N, H, W) for the HF model)."""
    return [score_fold(np.asarray(ins[0]), int(attrs["cell"])).reshape(attrs["out_shape"])]


def window_max(x: np.ndarray, radius: int) -> np.ndarray:
    """Max over a (2r+1)^2 window, stride 1, -inf padding, on the last two axes."""
    k = 2 * radius + 1
    return max_pool_nchw(x, (k, k), (1, 1), (radius,) * 4)


def nms(scores: np.ndarray, radius: int, iterations: int) -> np.ndarray:
    """Non-maximum suppression as SuperPoint defines it (HF ``simple_nms`` has iterations=2).

    A pixel survives if it equals its window maximum; each further iteration suppresses the
    windows of the survivors and admits new local maxima among what is left.
    """
    zeros = np.zeros_like(scores)
    max_mask = scores == window_max(scores, radius)
    for _ in range(iterations):
        supp_mask = window_max(max_mask.astype(scores.dtype), radius) > 0
        supp_scores = np.where(supp_mask, zeros, scores)
        new_max = supp_scores == window_max(supp_scores, radius)
        max_mask = max_mask | (new_max & ~supp_mask)
    return np.where(max_mask, scores, zeros)


@register("spc.Nms", same_type, arity=(1, 1))
def _nms(ins: A, attrs: D) -> list[np.ndarray]:
    """Keep a score where it is the maximum of its window (``radius``), else 0."""
    return [nms(np.asarray(ins[0]), int(attrs["radius"]), int(attrs["iterations"]))]


def l2_normalize(x: np.ndarray, axis: int, eps: float) -> np.ndarray:
    norm = np.sqrt(np.sum(np.square(x.astype(np.float64)), axis=axis, keepdims=True))
    return (x / np.maximum(norm, eps)).astype(x.dtype)


@register("spc.L2Norm", same_type, arity=(1, 1))
def _l2norm(ins: A, attrs: D) -> list[np.ndarray]:
    """x / max(||x||_2 over ``axis``, ``eps``), as torch.nn.functional.normalize."""
    return [l2_normalize(np.asarray(ins[0]), int(attrs["axis"]), float(attrs["eps"]))]


def sample_descriptors(xy: np.ndarray, desc: np.ndarray, cell: int) -> np.ndarray:
    """HF SuperPoint ``_sample_descriptors``: bilinear (align_corners, zero padding) samples of the
    coarse map ``desc`` (C, hc, wc) at full-resolution pixels ``xy`` (N, 2), L2-normalised."""
    c, hc, wc = desc.shape
    divisor = np.array([wc * cell - cell / 2 - 0.5, hc * cell - cell / 2 - 0.5], np.float32)
    g = ((xy.astype(np.float32) - cell / 2 + 0.5) / divisor) * 2 - 1
    ix, iy = (g[:, 0] + 1) / 2 * (wc - 1), (g[:, 1] + 1) / 2 * (hc - 1)
    x0, y0 = np.floor(ix).astype(np.int64), np.floor(iy).astype(np.int64)
    out = np.zeros((len(xy), c), np.float32)
    for dx, dy in ((0, 0), (1, 0), (0, 1), (1, 1)):
        xs, ys = x0 + dx, y0 + dy
        weight = (1 - np.abs(ix - xs)) * (1 - np.abs(iy - ys))
        inside = (xs >= 0) & (xs < wc) & (ys >= 0) & (ys < hc)
        out[inside] += weight[inside, None] * desc[:, ys[inside], xs[inside]].T
    return l2_normalize(out, 1, 1e-12)


def superpoint_keypoints(score: np.ndarray, desc: np.ndarray, threshold: float, border: int, limit_y: int,
                         limit_x: int, max_keypoints: int, cell: int) -> list[np.ndarray]:
    """HF SuperPoint's keypoint post-processing on one image: pixels of the (1, H, W) NMS map above
    ``threshold`` in raster order, with ``border <= y < limit_y`` and ``border <= x < limit_x``,
    the ``max_keypoints`` best (-1: all) by score, descriptors sampled at them; keypoints as
    (x / W, y / H). (HF compares with 8x the map's size, so its far borders never apply: the
    limits are then H and W.)"""
    s = np.asarray(score, np.float32)[0]
    h, w = s.shape
    ys, xs = np.nonzero(s > np.float32(threshold))
    inside = (ys >= border) & (ys < limit_y) & (xs >= border) & (xs < limit_x)
    ys, xs = ys[inside], xs[inside]
    scores = s[ys, xs]
    if 0 <= max_keypoints < len(scores):
        order = np.argsort(-scores, kind="stable")[:max_keypoints]
        ys, xs, scores = ys[order], xs[order], scores[order]
    xy = np.stack([xs, ys], -1).astype(np.float32)
    d = sample_descriptors(xy, np.asarray(desc, np.float32)[0], cell)
    n = len(scores)
    return [(xy / np.array([w, h], np.float32))[None], scores[None], d[None], np.ones((1, n), np.int32)]


KEYPOINT_ATTRS = ("threshold", "border", "limit_y", "limit_x", "max_keypoints", "cell")


@register("spc.Keypoints", None, data_dependent=True, arity=(2, 2))
def _keypoints(ins: A, attrs: D) -> list[np.ndarray]:
    """SuperPoint keypoints (keypoints, scores, descriptors, mask) from the NMS score map and the
    normalised descriptor map: :func:`superpoint_keypoints`."""
    return superpoint_keypoints(np.asarray(ins[0]), np.asarray(ins[1]), *(attrs[k] for k in KEYPOINT_ATTRS))


class KeypointOverflow(Exception):
    """More keypoints may exceed the threshold than the device's top-K holds: read densely."""


def keypoints_from_top_k(values: np.ndarray, indices: np.ndarray, descriptors: np.ndarray, threshold: float,
                         border: int, limit_x: int, max_keypoints: int, height: int, width: int) -> list[np.ndarray]:
    """:func:`superpoint_keypoints` from the device's top-K of the NMS map's kept window (rows
    from ``border``, columns ``border`` to ``limit_x``): values, flat indices in that window, and
    descriptors already sampled there. Raises :class:`KeypointOverflow` when the K-th value is
    still above the threshold and every keypoint was asked for."""
    v = np.asarray(values, np.float32).reshape(-1)
    p = np.rint(np.asarray(indices, np.float64)).reshape(-1).astype(np.int64)
    d = np.asarray(descriptors, np.float32).reshape(len(v), -1)
    inner = limit_x - border
    ys, xs = p // inner + border, p % inner + border
    above = v > np.float32(threshold)
    if max_keypoints >= 0 and len(v) > max_keypoints and above[max_keypoints]:
        keep = np.arange(max_keypoints)  # more than asked for: the best, best first (as torch.topk)
    elif max_keypoints < 0 and above[-1]:
        raise KeypointOverflow(f"all {len(v)} device keypoint slots are above the threshold")
    else:
        keep = np.flatnonzero(above)
        keep = keep[np.argsort(ys[keep] * width + xs[keep], kind="stable")]  # raster order, as NonZero
    xy = np.stack([xs[keep], ys[keep]], -1).astype(np.float32)
    n = len(keep)
    return [(xy / np.array([width, height], np.float32))[None], v[keep][None], d[keep][None],
            np.ones((1, n), np.int32)]


@register("spc.KeypointsFromTopK", None, data_dependent=True, arity=(3, 3))
def _keypoints_from_top_k(ins: A, attrs: D) -> list[np.ndarray]:
    """The host tail of a compact read-back: :func:`keypoints_from_top_k`."""
    return keypoints_from_top_k(*ins, attrs["threshold"], attrs["border"], attrs["limit_x"],
                                attrs["max_keypoints"], attrs["height"], attrs["width"])
