"""Question 4: the kept window (border and limits), and the cut border's fill of a fixed-K export."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spc.passes.keypoints.trial import EDGE, NoMatch, Trial, decoded, first, kept_many


def window_points(trial: Trial) -> list[tuple[int, int]]:
    """The pixels :func:`window` asks about: the middle row's and column's first and last EDGE, and
    their middles."""
    mid_y, mid_x = trial.h // 2, trial.w // 2

    def line(size: int) -> list[int]:
        depth = min(EDGE, size // 2)
        return sorted({*range(depth), *(size - 1 - i for i in range(depth)), size // 2})

    return sorted({(mid_y, x) for x in line(trial.w)} | {(y, mid_x) for y in line(trial.h)})


def window(trial: Trial, kept: Callable[[int, int], bool]) -> tuple[int, int, int]:
    """(border, limit_y, limit_x): a peak is kept iff border <= y < limit_y and border <= x < limit_x.
    Found along the middle row and column (:func:`window_points`); checked on random maps after."""
    mid_y, mid_x = trial.h // 2, trial.w // 2

    def first_kept(positions: list[int], at: Callable[[int], bool]) -> int | None:
        """How many positions are dropped before the first kept one (the next two kept too)."""
        for i, p in enumerate(positions):
            if at(p):
                return i if all(at(q) for q in positions[i + 1:i + 3]) else None
        return None

    def edges(size: int, at: Callable[[int], bool]) -> tuple[int, int] | None:
        depth = min(EDGE, size // 2)
        lo = first_kept(list(range(depth)), at)
        far = first_kept([size - 1 - i for i in range(depth)], at)
        if lo is None or far is None or not at(size // 2):
            return None
        return lo, size - far

    xs = edges(trial.w, lambda x: kept(mid_y, x))
    ys = edges(trial.h, lambda y: kept(y, mid_x))
    if xs is None or ys is None or xs[0] != ys[0]:
        raise NoMatch("the kept pixels are not a window with one border on its near sides")
    return xs[0], ys[1], xs[1]


def fill(trial: Trial, specs: list[str], window: tuple[int, int, int]) -> float:
    """What the cut border holds in a fixed-K export: with the window far below it, a border pixel
    comes first, with that score."""
    b, ly, lx = window
    s = np.zeros((trial.h, trial.w), np.float32)
    s[b:ly, b:lx] = -1e6
    _, score = first(trial, specs, s)
    if not score > -1e6:
        raise NoMatch("the border is not cut by a constant fill")
    return score


def window_and_fill(trial: Trial, specs: list[str], one: Callable[[int, int], bool],
                    capacity: int) -> tuple[tuple[int, int, int], float]:
    """The window and the fill of a fixed-K export from one run: a peak of 1 at each pixel
    :func:`window` asks about, on a map far below any fill (-1e6). The peaks kept show the
    window; the best of the rest is a cut border pixel, with the fill. Asked one question at a
    time (``one``, then :func:`fill`) where the run cannot tell: no peak kept, as many as K, or
    nothing after them."""
    points = window_points(trial)
    seen = decoded(trial, specs, trial.peaks(points, 1.0, base=-1e6))
    at = set(points)
    found = {(y, x) for (x, y), v in seen if (y, x) in at and np.float32(v) == 1}
    rest = [v for (x, y), v in seen if (y, x) not in found or np.float32(v) != 1]
    if not found or len(found) >= capacity or not rest:
        found_window = window(trial, one)
        return found_window, fill(trial, specs, found_window)
    found_window = window(trial, lambda y, x: (y, x) in found)
    if not rest[0] > -1e6:
        raise NoMatch("the border is not cut by a constant fill")
    return found_window, rest[0]


def asked_at_once(trial: Trial, specs: list[str], one: Callable[[int, int], bool],
                  capacity: int | None) -> Callable[[int, int], bool]:
    """``one`` (is a single peak at (y, x) kept?) for the window's pixels, from one run with a peak
    at each; ``one`` itself where one run cannot tell (:func:`kept_many`)."""
    points = window_points(trial)
    found = kept_many(trial, specs, points, np.ones(len(points), np.float32), capacity)
    if found is None:
        return one
    return lambda y, x: (y, x) in found
