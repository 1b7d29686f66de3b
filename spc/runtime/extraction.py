"""A frame's keypoints, from any SuperPoint form: by the roles the plan records, or by SuperPoint's
standard extraction for a model that returns raw heads.

* A model with its post-processing (HF's, a fixed-K export, tf2onnx's) returns keypoints, scores
  and descriptors: the plan's output roles (lowering/roles.py) say which is which and in what
  layout (``canonical``).
* A network exported without it (MagicLeap's SuperPointNet returns the 65-channel logits ``semi``
  and the descriptor map ``desc``) gets the extraction SuperPoint's authors and Hugging Face
  apply: softmax over the cell^2 + 1 channels, the dustbin dropped, folded to full resolution, NMS
  (two rounds), scores above a threshold, a border removed on every side, optionally the top K,
  descriptors sampled there from the L2-normalised map. Built from the ops' own reference
  semantics (ir/ops), the arithmetic the fused ops are checked against; `spc run`, `--viz`,
  `--format h5`, `spc check`, `spc report` and the Python API all use this one.
"""

from __future__ import annotations

import numpy as np
from msgspec import Struct

from spc.ir.ops.keypoints import canonical, sample_descriptors, select
from spc.ir.ops.spc_ops import l2_normalize, nms, score_fold

STANDARD = "SuperPoint's standard extraction of the raw heads"


class Extraction(Struct, frozen=True):
    """The standard extraction's parameters (SuperPoint's and Hugging Face's defaults)."""

    threshold: float = 0.005
    nms_radius: int = 4
    border: int = 4
    max_keypoints: int = -1  # the K highest scores; -1: every score above the threshold

    def describe(self) -> str:
        top = "all above it" if self.max_keypoints < 0 else f"the top {self.max_keypoints}"
        return (f"threshold {self.threshold:g} ({top}), NMS radius {self.nms_radius}, border {self.border} px")

    def check(self) -> str | None:
        """Why these parameters are not an extraction (None when they are)."""
        if not np.isfinite(self.threshold):
            return f"threshold {self.threshold} is not a number"
        if not 0 <= self.nms_radius <= 64:
            return f"NMS radius {self.nms_radius} is not in 0..64"
        if not 0 <= self.border <= 4096:
            return f"border {self.border} is not in 0..4096"
        if self.max_keypoints < -1 or self.max_keypoints == 0:
            return f"max keypoints {self.max_keypoints}: a positive count, or -1 for all"
        return None


DEFAULT = Extraction()


def score_map_from_logits(logits: np.ndarray, cell: int) -> np.ndarray:
    """(1, cell^2 + 1, h, w) logits -> the (1, 1, H, W) keypoint score map."""
    return score_fold(np.asarray(logits, np.float32), cell)


def standard_keypoints(logits: np.ndarray, desc: np.ndarray | None, cell: int,
                       extraction: Extraction = DEFAULT) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pixels (N, 2) as (x, y), scores (N,) and descriptors (N, D) (D = 0 without a descriptor map)."""
    s = nms(score_map_from_logits(logits, cell)[0], extraction.nms_radius, 2)
    h, w = s.shape[-2:]
    b = extraction.border
    attrs = {"mode": "threshold", "threshold": extraction.threshold, "border": b, "limit_y": h - b,
             "limit_x": w - b, "max_keypoints": extraction.max_keypoints}
    xy, scores = select(s, attrs)
    if desc is None:
        return xy.astype(np.float32), scores, np.zeros((len(scores), 0), np.float32)
    d = l2_normalize(np.asarray(desc, np.float32)[0], 0, 1e-12)
    return xy.astype(np.float32), scores, sample_descriptors(xy.astype(np.float32), d, cell)


def raw_heads(roles: dict[str, dict]) -> tuple[str, int, str | None] | None:
    """The logits output, its cell, and the descriptor map output (None: none) of a raw-heads
    plan; None when the plan has keypoint outputs or no logits."""
    if any(r.get("role") == "keypoints" for r in roles.values()):
        return None
    logits = next(((n, int(r["cell"])) for n, r in roles.items() if r.get("role") == "score_logits"), None)
    if logits is None:
        return None
    desc = next((n for n, r in roles.items() if r.get("role") == "descriptor_map"), None)
    return logits[0], logits[1], desc


def by_shape(roles: dict[str, dict]) -> str | None:
    """What to say when the keypoints are a fixed-K extractor's read by their outputs' shapes (the
    order of x and y is then taken, not known: lowering/roles.py), else None."""
    names = [n for n, r in roles.items() if r.get("by") == "shape"]
    if not names:
        return None
    return (f"keypoints read from {', '.join(names)} by their shapes, taken as (x, y) pixels of the input (no "
            "keypoint extraction recognised; a model writing (y, x) would be read swapped)")


def has_keypoints(roles: dict[str, dict]) -> bool:
    """Whether a frame's keypoints can be had from the plan's outputs (either way)."""
    return any(r.get("role") == "keypoints" for r in roles.values()) or raw_heads(roles) is not None


def frame_keypoints(outputs: dict[str, np.ndarray], roles: dict[str, dict], height: int, width: int,
                    extraction: Extraction = DEFAULT) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray],
                                                                      str] | None:
    """(keypoints (N, 2) x, y in the plan's pixels, scores (N,), descriptors (N, D)) and how they
    were had ("outputs", or :data:`STANDARD`); None when the outputs hold neither form."""
    got = canonical(outputs, roles, height, width)
    if got is not None:
        return got, "outputs"
    heads = raw_heads(roles)
    if heads is None or heads[0] not in outputs:
        return None
    logits, cell, desc = heads
    return standard_keypoints(outputs[logits], outputs.get(desc) if desc else None, cell, extraction), STANDARD
