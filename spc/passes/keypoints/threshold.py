"""Question 3: the threshold, on the float32 bits of a peak's score."""

from __future__ import annotations

import numpy as np

from spc.passes.keypoints.trial import NoMatch, Trial, interior, kept_beside_anchor, kept_many


def threshold(trial: Trial, specs: list[str], batched: bool,
              beside: list[tuple[int, int]] | None = None) -> tuple[float, set[tuple[int, int]] | None]:
    """The largest float32 score that is dropped (a score is kept iff it is above it): the
    region's scalar constants first, then a search on the float32 bits between 0 (dropped) and 1
    (kept). One search, asked in one of two ways (:class:`_Asked`): ``batched``, many peaks per
    run (a few runs in all), else one peak per run; a batched answer that is not one threshold's
    (a limit cut it, or the map is too small for the peaks) is asked again one peak at a time.
    ``beside`` (batched): pixels whose peaks of 1 the first run asks about too (which are kept, or
    None)."""
    scalars = sorted({np.float32(v.data.reshape(-1)[0]) for n in trial.nodes for v in n.inputs
                      if v is not None and v.is_const and v.data.size == 1 and v.data.dtype.kind == "f"})
    scalars = [c for c in scalars if 0 < c < 1]
    if batched:
        ask = _Asked(trial, specs, 2 * len(scalars) + 2, beside or [])
        if ask.spots is not None:
            found = _search(ask, scalars, 62)  # 64 peaks a run, the two ends known
            if found is not None:
                return found, ask.beside_kept
    found = _search(_Asked(trial, specs), scalars, 1)
    if found is None:
        raise NoMatch("no threshold: a peak of 1 beside another is not kept, or a peak of 0 is")
    return found, None


class _Asked:
    """Which of some ascending scores the region keeps. Batched (``room``: the peaks one run may
    hold): one run, a peak per score at well-inside pixels, and a peak of 1 at each pixel of
    ``beside`` (its answer kept in ``beside_kept``). Else one run per score: a peak of it beside
    another of 1 (:func:`kept_beside_anchor`)."""

    def __init__(self, trial: Trial, specs: list[str], room: int = 0, beside: list[tuple[int, int]] = ()) -> None:
        self.trial, self.specs = trial, specs
        self.spots: list[tuple[int, int]] | None = None
        self.beside, self.beside_kept = list(beside), None
        if room:
            spots = interior(trial, room)
            self.spots = spots if len(spots) >= room else None
            if self.spots is not None and set(self.spots) & set(self.beside):
                self.beside = []

    def __call__(self, values: list[np.float32]) -> int | None:
        """How many of ``values`` (ascending) are dropped, when the kept ones are all those after
        them; None otherwise (not one threshold's answer)."""
        if self.spots is None:
            flags = [kept_beside_anchor(self.trial, self.specs, self.trial.h // 2, self.trial.w // 2, float(v))
                     for v in values]
        else:
            if len(values) > len(self.spots):
                return None
            points, extra = self.spots[:len(values)], tuple(self.beside)
            heights = np.concatenate([np.array(values, np.float32), np.ones(len(extra), np.float32)])
            found = kept_many(self.trial, self.specs, points + list(extra), heights, None)
            if found is None:
                return None
            if extra:  # asked once, in the first run
                self.beside_kept, self.beside = {p for p in extra if p in found}, []
            self.spots = interior(self.trial, 64)  # the search's runs: up to 64 peaks each
            flags = [p in found for p in points]
        dropped = flags.index(True) if True in flags else len(flags)
        return dropped if all(flags[dropped:]) else None


def _search(ask: _Asked, scalars: list[np.float32], inner: int) -> float | None:
    """The threshold: 0 dropped and 1 kept, then a scalar dropped with its successor kept, else
    the float32 bits between 0 and 1 narrowed by ``inner`` scores a question (None where an answer
    is not one threshold's)."""
    values = [np.float32(0)] + [v for c in scalars for v in (c, np.nextafter(c, np.float32(1)))] + [np.float32(1)]
    dropped = ask(values)
    if dropped is None or dropped in (0, len(values)):
        return None
    if dropped % 2 == 0 and 0 < dropped < len(values) - 1:  # a scalar dropped and its successor kept
        return float(values[dropped - 1])
    lo, hi = int(np.float32(0).view(np.int32)), int(np.float32(1).view(np.int32))
    while hi - lo > 1:  # invariant: value(lo) dropped, value(hi) kept
        bits = sorted({int(b) for b in np.linspace(lo, hi, min(inner, hi - lo - 1) + 2).round()[1:-1]})
        dropped = ask([np.int32(b).view(np.float32) for b in bits])
        if dropped is None:
            return None
        lo, hi = (bits[dropped - 1] if dropped else lo), (bits[dropped] if dropped < len(bits) else hi)
    return float(np.int32(lo).view(np.float32))
