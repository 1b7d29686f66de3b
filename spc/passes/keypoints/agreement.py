"""Questions 5 and 6: the keypoint limit, and agreement with spc.Keypoints on random maps."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spc.ir.ops.keypoints import OutputSpec, extract, format_outputs, select
from spc.passes.keypoints.trial import SEED, Trial, random_map
from spc.passes.trial_values import TrialValues


def max_keypoints(trial: Trial, specs: list[str], attrs: dict, dense: np.ndarray,
                  selected: list[np.ndarray | None]) -> int:
    """The keypoint limit of a threshold export: how many keypoints the region returned for the
    dense map (``selected``, :func:`selection`) when that is fewer than the map has above the
    threshold in the window; -1 (no limit below that many) otherwise. The same run is then
    compared with spc.Keypoints (:func:`agrees`)."""
    b, ly, lx = int(attrs["border"]), int(attrs["limit_y"]), int(attrs["limit_x"])
    i = [OutputSpec.parse(s).role for s in specs].index("scores")
    a = selected[i]
    assert a is not None
    got = int(a.shape[1] if OutputSpec.parse(specs[i]).batch else a.shape[0])
    above = int(np.count_nonzero(dense[b:ly, b:lx] > np.float32(attrs["threshold"])))
    return got if got < above else -1




def _window_edges(trial: Trial, attrs: dict) -> list[tuple[int, int]]:
    """The kept window's corners and a few pixels along each of its edges, and the pixels just
    outside them: where sampling the descriptors meets the map's edge and the window cuts."""
    b, ly, lx = int(attrs["border"]), int(attrs["limit_y"]), int(attrs["limit_x"])
    ys = sorted({y for y in (b - 1, b, b + 1, (b + ly) // 2, ly - 2, ly - 1, ly) if 0 <= y < trial.h})
    xs = sorted({x for x in (b - 1, b, b + 1, (b + lx) // 3, 2 * (b + lx) // 3, lx - 2, lx - 1, lx)
                 if 0 <= x < trial.w})
    return [(y, x) for y in ys for x in xs if y in (ys[0], ys[-1]) or x in (xs[0], xs[-1]) or
            y in (b, ly - 1) or x in (b, lx - 1)]


def selection(trial: Trial, attrs: dict) -> tuple[np.ndarray, tuple[int, ...] | None, list[np.ndarray | None]]:
    """The denser random map (more peaks in the window than a limit is looked for up to: one per
    80 pixels, at least 4096 where the map has room; each above the threshold but those set exactly to it), the
    outputs a question about the selection reads, and the region's answer for them. Those are
    all but the descriptors in threshold mode; a fixed-K export samples K descriptors whatever the
    map, so there it is every output, with peaks above the others along the window's edges too
    (:func:`_window_edges`)."""
    rng = TrialValues(SEED + 1)
    threshold = attrs["mode"] == "threshold"
    # at least 4096 peaks (a quarter of a small map): a limit such as HF's max_keypoints=300 shows
    # at 120x160 too, where one per 80 pixels is 240
    count = max(int(0.0125 * trial.h * trial.w), min(trial.h * trial.w // 4, 4096))
    s = random_map(trial, rng, count, attrs["threshold"] if threshold else 0.0)
    only: tuple[int, ...] | None = None
    if threshold:
        s[:: max(1, trial.h // 7), ::13] = np.float32(attrs["threshold"])  # exactly at the threshold: dropped
        only = tuple(i for i, spec in enumerate(attrs["outputs"]) if OutputSpec.parse(spec).role != "descriptors")
    else:
        edges = _window_edges(trial, attrs)
        if edges:
            s[tuple(np.array(edges).T)] = rng.random(len(edges), dtype=np.float32) + 1
    return s, only, trial(s, only)


def agrees(trial: Trial, attrs: dict,
           selection: tuple[np.ndarray, tuple[int, ...] | None, list[np.ndarray | None]] | None = None
            ) -> str | None:
    """None if the region and spc.Keypoints agree on random maps, else what differs. The denser map
    (:func:`selection`, given when it already ran) tests the selection (thousands of keypoints, a
    limit's cut); in threshold mode on every output but the descriptors: a descriptor depends on
    its keypoint alone, and a sparser map tests those, at random pixels and along the kept
    window's edges."""
    dense, only, got = selection if selection is not None else selection(trial, attrs)
    maps: list[tuple[str, np.ndarray, Callable[[], list[np.ndarray | None]]]] = [
        ("a dense random map", dense, lambda: got)]
    if only is not None:
        rng = TrialValues(SEED + 3)
        sparse = random_map(trial, rng, min(int(0.002 * trial.h * trial.w), 64))
        edges = _window_edges(trial, attrs)
        if edges:
            sparse[tuple(np.array(edges).T)] = rng.random(len(edges), dtype=np.float32) * 0.5 + 0.5
        sparse[:: max(1, trial.h // 7), ::13] = np.float32(attrs["threshold"])
        maps.append(("a sparse random map", sparse, lambda: trial(sparse)))
    for what, s, outputs in maps:
        if s is dense and only is not None:  # what extract returns but for the descriptors (none sampled)
            xy, scores = select(s, attrs)
            want = format_outputs(xy, scores, np.zeros((len(xy), 0), np.float32), attrs["outputs"], trial.h, trial.w)
        else:
            want = extract(s.reshape(trial.shape), trial.desc_map, attrs)
        for v, a, b in zip(trial.outputs, outputs(), want):
            if a is None:
                continue
            if a.shape != b.shape or not np.allclose(a.astype(np.float64), b.astype(np.float64), atol=1e-5):
                return f"on {what}, output %{v.name} differs"
    return None
