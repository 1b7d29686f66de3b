"""Agreement between two runs of the model: dense-map PCC and keypoint-set matching."""

from __future__ import annotations

import numpy as np
from msgspec import Struct


def pcc(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two arrays of the same size (1.0 for identical constant arrays)."""
    x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    x, y = x - x.mean(), y - y.mean()
    den = np.sqrt((x * x).sum() * (y * y).sum())
    if den == 0:
        return 1.0 if np.array_equal(a, b) else 0.0
    return float((x * y).sum() / den)


def index_set_f1(a: np.ndarray, b: np.ndarray) -> float:
    """F1 of the (position, value) pairs of two index maps where the value is >= 0 (-1: none): a
    matcher's matches0 as a set of matches; 1 when neither has any."""
    ours = {(i, int(v)) for i, v in enumerate(np.asarray(a).ravel()) if v >= 0}
    theirs = {(i, int(v)) for i, v in enumerate(np.asarray(b).ravel()) if v >= 0}
    if not ours and not theirs:
        return 1.0
    return 2 * len(ours & theirs) / (len(ours) + len(theirs))


def pair_set_f1(a: np.ndarray, b: np.ndarray) -> float:
    """F1 of two lists of (i, j) rows (a matcher's matches as pairs, each side's own count); 1
    when neither has any."""
    ours = {(int(i), int(j)) for i, j in np.asarray(a).reshape(-1, 2)}
    theirs = {(int(i), int(j)) for i, j in np.asarray(b).reshape(-1, 2)}
    if not ours and not theirs:
        return 1.0
    return 2 * len(ours & theirs) / (len(ours) + len(theirs))


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best scores (stable: ties keep their order)."""
    order = np.argsort(-scores, kind="stable")
    return order[:k]


def match_points(a: np.ndarray, b: np.ndarray, radius: float) -> list[tuple[int, int]]:
    """One-to-one matches within ``radius`` pixels, closest pairs first."""
    if len(a) == 0 or len(b) == 0:
        return []
    d = np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))
    ia, ib = np.nonzero(d <= radius)
    order = np.argsort(d[ia, ib], kind="stable")
    used_a, used_b, pairs = set(), set(), []
    for i in order:
        x, y = int(ia[i]), int(ib[i])
        if x not in used_a and y not in used_b:
            used_a.add(x)
            used_b.add(y)
            pairs.append((x, y))
    return pairs


class KeypointAgreement(Struct):
    precision: float
    recall: float
    f1: float
    descriptor_cosine: float
    n_ours: int
    n_ref: int


def keypoint_agreement(kp: np.ndarray, sc: np.ndarray, desc: np.ndarray, ref_kp: np.ndarray, ref_sc: np.ndarray,
                       ref_desc: np.ndarray, k: int = 500, radius: float = 2.0) -> KeypointAgreement:
    """Top-k keypoints of each side (pixel coordinates), matched within ``radius``."""
    ia, ib = top_k(sc, k), top_k(ref_sc, k)
    pairs = match_points(kp[ia], ref_kp[ib], radius)
    p = len(pairs) / len(ia) if len(ia) else 1.0
    r = len(pairs) / len(ib) if len(ib) else 1.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    cos = float(np.mean([np.dot(desc[ia[i]], ref_desc[ib[j]]) /
                         max(np.linalg.norm(desc[ia[i]]) * np.linalg.norm(ref_desc[ib[j]]), 1e-12)
                         for i, j in pairs])) if pairs else float("nan")
    return KeypointAgreement(p, r, f1, cos, len(ia), len(ib))
