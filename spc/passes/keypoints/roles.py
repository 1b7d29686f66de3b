"""Question 2: each output's role and layout, from a few distinct peaks well inside the map."""

from __future__ import annotations

import numpy as np

from spc.ir.graph import Value
from spc.ir.ops.keypoints import OutputSpec
from spc.passes.keypoints.trial import PEAKS, SEED, NoMatch, Trial
from spc.passes.trial_values import TrialValues


def _keypoint_candidates(xy: np.ndarray, h: int, w: int) -> list[tuple[str, np.ndarray]]:
    out = []
    for order in ("xy", "yx"):
        k = xy if order == "xy" else xy[:, ::-1]
        size = np.array([w, h] if order == "xy" else [h, w], np.float32)
        out.append((f"{order} pixel", k.astype(np.float64)))
        out.append((f"{order} norm", k.astype(np.float32) / size))
    return out


def _role(value: np.ndarray, v: Value, xy: np.ndarray, scores: np.ndarray, desc: np.ndarray, m: int,
          h: int, w: int) -> str | None:
    """The spec of an output holding ``m`` keypoints first (the trial's peaks), or None."""
    a = np.asarray(value)
    for batch in (True, False):
        b = a[0] if batch and a.ndim >= 1 and a.shape[0] == 1 else (None if batch else a)
        if b is None or b.ndim == 0:
            continue
        word = "batch" if batch else "flat"
        if b.ndim == 1 and len(b) >= m and b.dtype.kind == "f" and np.allclose(b[:m], scores, atol=1e-6):
            return f"scores {word}"
        if b.ndim == 1 and len(b) >= m and b.dtype.kind in "iub" and np.all(b == 1):
            dtype = {"i": "i64" if b.dtype.itemsize == 8 else "i32", "b": "bool"}.get(b.dtype.kind, "i32")
            return f"mask {dtype} {word}"
        if b.ndim == 2 and b.shape[1] == 2 and len(b) >= m:
            dtype = "i64" if b.dtype.kind in "iu" else "f32"
            for name, want in _keypoint_candidates(xy, h, w):
                if np.allclose(b[:m].astype(np.float64), want, atol=1e-5) and ("pixel" in name or dtype == "f32"):
                    return f"keypoints {name} {dtype} {word}"
        if b.ndim == 2 and desc.shape[1] in b.shape:
            for layout, c in (("nd", b), ("dn", b.T)):
                if c.shape[1] == desc.shape[1] and len(c) >= m and np.allclose(c[:m], desc, atol=1e-4):
                    return f"descriptors {layout} {word}"
    return None


def roles(trial: Trial, fixed: bool) -> list[str]:
    """Each output's spec, from PEAKS distinct peaks well inside the map."""
    rng = TrialValues(SEED + 2)
    ys = rng.choice(np.arange(trial.h // 4, 3 * trial.h // 4), PEAKS)
    xs = rng.choice(np.arange(trial.w // 4, 3 * trial.w // 4), PEAKS)
    values = np.linspace(0.6, 0.95, PEAKS, dtype=np.float32)[rng.permutation(PEAKS)]
    got = trial(trial.peaks(list(zip(ys, xs)), values))
    order = np.argsort(-values, kind="stable") if fixed else np.lexsort((xs, ys))  # best first, or raster
    xy = np.stack([xs[order], ys[order]], -1)
    scores, desc = values[order], trial.sampled(xy)
    specs = []
    for v, a in zip(trial.outputs, got):
        spec = _role(a, v, xy, scores, desc, PEAKS, trial.h, trial.w)
        if spec is None:
            raise NoMatch(f"output %{v.name} {list(np.shape(a))} is none of keypoints, scores, descriptors, mask "
                          "in a layout spc knows")
        specs.append(spec)
    roles = [OutputSpec.parse(s).role for s in specs]
    if "keypoints" not in roles or "scores" not in roles or len(set(roles)) != len(roles):
        raise NoMatch(f"the outputs are {', '.join(roles)}: expected keypoints and scores, each once")
    return specs
