"""SuperPoint's standard keypoint extraction, for models that return raw heads.

A network exported without its post-processing (MagicLeap's SuperPointNet returns the 65-channel
logits and the descriptor map) has no keypoints to compare. ``spc check`` then extracts them the
way SuperPoint's authors and Hugging Face do, from both sides' outputs alike: softmax over the
cell^2 + 1 channels, dustbin dropped, folded to full resolution, NMS (radius 4, two rounds), scores
above 0.005, 4 pixels of border removed on every side, descriptors sampled there. Built from the
ops' own reference semantics (ir/ops), so it is the same arithmetic the fused ops are checked
against.
"""

from __future__ import annotations

import numpy as np

from spc.ir.ops.keypoints import sample_descriptors, select
from spc.ir.ops.spc_ops import l2_normalize, nms, score_fold

RADIUS, THRESHOLD, BORDER = 4, 0.005, 4


def score_map_from_logits(logits: np.ndarray, cell: int) -> np.ndarray:
    """(1, cell^2 + 1, h, w) logits -> the (1, 1, H, W) keypoint score map."""
    return score_fold(np.asarray(logits, np.float32), cell)


def standard_keypoints(logits: np.ndarray, desc: np.ndarray | None,
                       cell: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pixels (N, 2) as (x, y), scores (N,) and descriptors (N, D) (D = 0 without a descriptor map)."""
    s = nms(score_map_from_logits(logits, cell)[0], RADIUS, 2)
    h, w = s.shape[-2:]
    attrs = {"mode": "threshold", "threshold": THRESHOLD, "border": BORDER, "limit_y": h - BORDER,
             "limit_x": w - BORDER, "max_keypoints": -1}
    xy, scores = select(s, attrs)
    if desc is None:
        return xy.astype(np.float32), scores, np.zeros((len(scores), 0), np.float32)
    d = l2_normalize(np.asarray(desc, np.float32)[0], 0, 1e-12)
    return xy.astype(np.float32), scores, sample_descriptors(xy.astype(np.float32), d, cell)
