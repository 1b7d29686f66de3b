"""fuse-keypoints: recognise the host post-processing as SuperPoint's keypoint extraction.

Before (the HF export: about 80 host nodes)::

    %select_1 = onnx.Squeeze(%where_2, ...) @host-post
    %gt_2 = onnx.Greater(%select_1, %val_51) @host-post
    %val_52 = onnx.NonZero(%gt_2) @host-post
    ...
    %descriptors = onnx.ScatterElements(...) @host-post
    return %keypoints, %scores, %descriptors, %mask

After::

    %keypoints, %scores, %descriptors, %mask = spc.Keypoints(%where_2, %div) {border = 4, cell = 8,
        limit_x = 640, limit_y = 480, max_keypoints = -1, mode = "threshold", outputs = ["keypoints xy norm f32 batch",
        "scores batch", "descriptors nd batch", "mask i32 batch"], threshold = 0.004999999888241291} @host-post

The region is every host node after the device stage; what enters it from the device must be the
NMS map (spc.Nms) and a descriptor map 1/cell of its size. It is recognised by what it computes,
not by its spelling (ir/ops/keypoints.py says what the op computes), one question at a time, each
answered by running the region on trial maps:

1. the selection mode: a count that depends on the data (threshold) or a fixed K (top-K);
2. each output's role and layout, from a few distinct peaks well inside the map: keypoints as
   (x, y) or (y, x), in pixels or divided by the size, float or integer, with or without the batch
   axis; scores; descriptors (N, D) or (D, N); a mask of ones;
3. the threshold, by bisection over float32 values of one peak (threshold mode);
4. the kept window, by moving a peak across the middle row and column (HF keeps only the near
   borders: it compares with 8x the map's size; fixed-K exports usually cut all four);
5. the fill of the cut border (fixed mode) and the keypoint limit (threshold mode: how many of a
   dense random map's thousands of peaks it returns);
6. agreement with the op on random maps, every output exactly (the limit's map among them).

A batch plan (passes/batch_images.py) has one copy of the post-processing per image: when the whole
region is not one extraction and several NMS maps enter it, each map's region (the nodes that read
it and no other map, with what they read that reads no map: the image's slice of the batched
descriptors, which moves to the device) is recognised alone, one spc.Keypoints per image; the
stacking of the images' results stays as it is (lowering/roles.py reads the roles through it).

The first question that finds no answer is the reason the fusion did not fire (``why_not`` in the
pass summary); the graph is then left as it was and the device maps are read densely. A single
op is what lets the lowering compute the keypoints' top-K and descriptors on the device and read
back only those (lowering/readback.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spc.ir.graph import Graph, Node, Placement, Value
from spc.ir.interpreter import NodeSteps, node_steps, run_nodes
from spc.ir.ops import get
from spc.ir.ops.keypoints import OutputSpec, extract, format_outputs, sample_descriptors, select
from spc.passes.explain import Attempt
from spc.passes.manager import Pass, PassContext, PassResult
from spc.passes.trial_values import TrialValues

SEED = 20261129
EDGE = 16  # how deep a border is looked for
PEAKS = 5


class NoMatch(Exception):
    """A question of the recognition found no answer: the message says which."""


def _through_views(v: Value) -> Node | None:
    n = v.producer
    while n is not None and (n.op.name in ("onnx.Reshape", "onnx.Squeeze", "onnx.Unsqueeze", "onnx.Identity")
                             or _image_row(n)):
        src = n.inputs[0]
        n = src.producer if src is not None else None
    return n


def _image_row(n: Node) -> bool:
    """Whether ``n`` takes one image's row of a batched value (a batch plan's Slice on axis 0)."""
    x = n.inputs[0] if n.inputs else None
    return (n.op.name == "onnx.Slice" and x is not None and x.type.is_static and x.type.rank > 0
            and x.type.shape[0] != 1 and n.outputs[0].type.is_static and n.outputs[0].type.shape[0] == 1
            and n.outputs[0].type.shape[1:] == x.type.shape[1:])


class _Trial:
    """The region as a function of the score map, the descriptor map held fixed."""

    def __init__(self, nodes: list[Node], score: Value, desc: Value, outputs: list[Value]) -> None:
        self.nodes, self.score, self.desc, self.outputs = nodes, score, desc, outputs
        self.shape = tuple(int(d) for d in score.type.static_shape)
        self.h, self.w = self.shape[-2:]
        rng = TrialValues(SEED)
        # a random row profile times a random column profile, per channel: any two pixels, and any
        # two ways of interpolating between cells, give different descriptors, and 1/60th of the
        # random numbers of a map drawn whole (the largest trial input of the region)
        n, c, hc, wc = (int(d) for d in desc.type.static_shape)
        rows = rng.random((n, c, hc, 1), dtype=np.float32) * 2 - 1
        cols = rng.random((n, c, 1, wc), dtype=np.float32) * 2 - 1
        self.desc_map = rows * cols
        self.cell = self.h // int(desc.type.static_shape[-2])
        # set for a fixed-K export (:meth:`uneven`): what a question's map holds besides its peaks
        self.noise: np.ndarray | None = None
        self._slices: dict[tuple[int, ...] | None, NodeSteps] = {}

    def __call__(self, score_map: np.ndarray, only: tuple[int, ...] | None = None) -> list[np.ndarray | None]:
        """The outputs on ``score_map``; with ``only``, just those outputs (by index), running just
        the nodes they need: a question about keypoints and scores skips the descriptors."""
        env = {id(self.score): score_map.reshape(self.shape), id(self.desc): self.desc_map}
        run_nodes(self._needed(only), env, quiet=True)  # extreme trial values overflow on purpose
        return [env[id(v)] if only is None or i in only else None for i, v in enumerate(self.outputs)]

    def _needed(self, only: tuple[int, ...] | None) -> NodeSteps:
        """The nodes the outputs ``only`` need (all with None), made ready to run once."""
        if only in self._slices:
            return self._slices[only]
        if only is None:
            self._slices[only] = node_steps(self.nodes)
            return self._slices[only]
        members = {id(n) for n in self.nodes}
        keep: set[int] = set()
        stack = [self.outputs[i].producer for i in only]
        while stack:
            n = stack.pop()
            if n is None or id(n) in keep or id(n) not in members:
                continue
            keep.add(id(n))
            stack.extend(v.producer for v in n.inputs if v is not None)
        self._slices[only] = node_steps(n for n in self.nodes if id(n) in keep)
        return self._slices[only]

    def uneven(self) -> None:
        """Questions' maps below their peaks vary a little from pixel to pixel instead of being
        ``base`` everywhere: a fixed-K export's TopK over a map of one value (hundreds of
        thousands of ties) costs several times as much as over distinct values. The maps compared
        with spc.Keypoints (:func:`_agrees`) keep their zeros: its sort is the faster on those."""
        self.noise = TrialValues(SEED + 4).random((self.h, self.w), dtype=np.float32)

    def peaks(self, points: list[tuple[int, int]], value: float | np.ndarray, base: float = 0.0) -> np.ndarray:
        if self.noise is None:
            s = np.full((self.h, self.w), base, np.float32)
        else:  # just below base: base * (1 + u) for a negative base, -1e-3 u for 0
            s = np.float32(base) - np.float32(abs(base) or 1e-3) * self.noise
        if len(points):
            at = np.asarray(points, np.int64).reshape(-1, 2)
            s[at[:, 0], at[:, 1]] = value  # distinct points (every caller's)
        return s

    def sampled(self, xy: np.ndarray) -> np.ndarray:
        return sample_descriptors(xy.astype(np.float32), self.desc_map.reshape(self.desc_map.shape[-3:]), self.cell)


# -- 2. roles and layouts ---------------------------------------------------------------------------
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


def _roles(trial: _Trial, fixed: bool) -> list[str]:
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


# -- 3.-5. threshold, window, fill, limit ------------------------------------------------------------------
def _count(trial: _Trial, specs: list[str], score_map: np.ndarray) -> int:
    i = [OutputSpec.parse(s).role for s in specs].index("scores")
    a = trial(score_map, (i,))[i]
    assert a is not None
    return int(a.shape[1] if OutputSpec.parse(specs[i]).batch else a.shape[0])


def _decoded(trial: _Trial, specs: list[str], score_map: np.ndarray) -> list[tuple[tuple[int, int], float]]:
    """Every keypoint the region returns for ``score_map``, as ((x, y) pixels, score), in its order."""
    roles = [OutputSpec.parse(s).role for s in specs]
    got = trial(score_map, (roles.index("keypoints"), roles.index("scores")))
    at = {OutputSpec.parse(s).role: (OutputSpec.parse(s), a) for s, a in zip(specs, got)}
    spec, k = at["keypoints"]
    k = np.asarray(k[0] if spec.batch else k, np.float64).reshape(-1, 2)
    if spec.scale == "norm":
        k = k * (np.array([trial.h, trial.w]) if spec.order == "yx" else np.array([trial.w, trial.h]))
    if spec.order == "yx":
        k = k[:, ::-1]
    sspec, s = at["scores"]
    scores = np.asarray(s[0] if sspec.batch else s, np.float64).reshape(-1)
    return [((round(x), round(y)), float(v)) for (x, y), v in zip(k, scores)]


def _first(trial: _Trial, specs: list[str], score_map: np.ndarray) -> tuple[tuple[int, int], float]:
    """The first keypoint, as (x, y) pixels, and its score."""
    return _decoded(trial, specs, score_map)[0]


def _kept_many(trial: _Trial, specs: list[str], points: list[tuple[int, int]], values: np.ndarray,
               capacity: int | None) -> set[tuple[int, int]] | None:
    """Which of the peaks ``points`` (y, x) with ``values`` the region keeps, from ONE run (the
    region comes after NMS: peaks do not suppress each other). None when the answer may be cut by
    a keypoint limit (as many kept as the fixed K, or every peak dropped): ask one peak at a time."""
    at = {(y, x): np.float32(v) for (y, x), v in zip(points, values)}
    found = {(y, x) for (x, y), v in _decoded(trial, specs, trial.peaks(points, values))
             if (y, x) in at and np.float32(v) == at[(y, x)]}
    if not found or (capacity is not None and len(found) >= capacity):
        return None
    return found


def _interior(trial: _Trial, n: int) -> list[tuple[int, int]]:
    """``n`` distinct pixels well inside the map, for peaks asked about at once."""
    ys = np.linspace(trial.h // 4, 3 * trial.h // 4 - 1, max(1, int(np.sqrt(n))) + 1).astype(int)
    xs = np.linspace(trial.w // 4, 3 * trial.w // 4 - 1, n // max(1, len(ys)) + 2).astype(int)
    cells = sorted({(int(y), int(x)) for y in ys for x in xs})
    return cells[:n]


def _anchor(trial: _Trial) -> tuple[int, int]:
    """A peak of 1 kept in every threshold trial: some exports fail on an image without keypoints
    (the legacy exporter bakes a Reshape whose 0 then means "copy the input's dimension")."""
    return trial.h // 2 + 3, trial.w // 2 + 5


def _kept_beside_anchor(trial: _Trial, specs: list[str], y: int, x: int, value: float) -> bool:
    return _count(trial, specs, trial.peaks([_anchor(trial), (y, x)], np.array([1.0, value], np.float32))) == 2


def _threshold(trial: _Trial, specs: list[str], fast: bool,
               beside: list[tuple[int, int]] | None = None) -> tuple[float, set[tuple[int, int]] | None]:
    """The largest float32 score that is dropped (a score is kept iff it is above it). The region's
    scalar constants are tried first; otherwise a search on the float32 bits of the score between
    0 (dropped) and 1 (kept): many peaks per run (:func:`_threshold_many`), or one at a time.
    ``beside``: pixels whose peaks of 1 the first run asks about too (which are kept, or None)."""

    def kept(value: np.float32) -> bool:
        return _kept_beside_anchor(trial, specs, trial.h // 2, trial.w // 2, float(value))

    scalars = sorted({np.float32(v.data.reshape(-1)[0]) for n in trial.nodes for v in n.inputs
                      if v is not None and v.is_const and v.data.size == 1 and v.data.dtype.kind == "f"})
    found, beside_kept = _threshold_many(trial, specs, [c for c in scalars if 0 < c < 1], beside or []) \
        if fast else (None, None)
    if found is not None:
        return found, beside_kept
    return _threshold_one_at_a_time(trial, specs, scalars, kept), None


def _threshold_one_at_a_time(trial: _Trial, specs: list[str], scalars: list[np.float32],
                             kept: Callable[[np.float32], bool]) -> float:
    if not kept(np.float32(1)) or kept(np.float32(0)):
        raise NoMatch("no threshold: a peak of 1 beside another is not kept, or a peak of 0 is")
    for c in scalars:
        if 0 < c < 1 and not kept(c) and kept(np.nextafter(c, np.float32(1))):
            return float(c)
    lo, hi = np.float32(0).view(np.int32), np.float32(1).view(np.int32)
    while hi - lo > 1:  # invariant: value(lo) dropped, value(hi) kept
        mid = (lo + hi) // 2
        if kept(np.int32(mid).view(np.float32)):
            hi = mid
        else:
            lo = mid
    return float(np.int32(lo).view(np.float32))


def _threshold_many(trial: _Trial, specs: list[str], scalars: list[np.float32], beside: list[tuple[int, int]]
                    ) -> tuple[float | None, set[tuple[int, int]] | None]:
    """The threshold with many peaks per run: the scalar candidates and their successors in one
    run, then a 64-way search on the float32 bits. None when the answers are not those of one
    threshold (a limit cuts them, or the map is too small for the peaks): the caller asks one
    peak at a time. The first run also holds a peak of 1 at each pixel of ``beside`` (away from
    the candidates' pixels): which of those are kept is the second answer (None without them)."""
    spots = _interior(trial, 2 * len(scalars) + 2)
    if len(spots) < 2 * len(scalars) + 2:
        return None, None
    if set(spots) & set(beside):
        beside = []

    def dropped_kept(values: list[np.float32], extra: tuple[tuple[int, int], ...] = ()
                     ) -> tuple[tuple[int, int] | None, set[tuple[int, int]]]:
        """The last dropped and the first kept of ascending ``values``, if the kept are a suffix;
        and which of the peaks of 1 at ``extra`` are kept."""
        points = spots[:len(values)] if len(values) <= len(spots) else None
        if points is None:
            return None, set()
        heights = np.concatenate([np.array(values, np.float32), np.ones(len(extra), np.float32)])
        found = _kept_many(trial, specs, points + list(extra), heights, None)
        if found is None:
            return None, set()
        flags = [p in found for p in points]
        first = flags.index(True) if True in flags else len(flags)
        if first in (0, len(flags)) or not all(flags[first:]):
            return None, set()
        return (first - 1, first), {p for p in extra if p in found}

    values = [np.float32(0)] + [v for c in scalars for v in (c, np.nextafter(c, np.float32(1)))] + [np.float32(1)]
    at, beside_kept = dropped_kept(values, tuple(beside))
    if at is None:
        return None, None
    kept_beside = beside_kept if beside else None
    if 0 < at[0] < len(values) - 1 and at[0] % 2 == 1:  # a scalar dropped and its successor kept
        return float(values[at[0]]), kept_beside
    spots = _interior(trial, 64)
    lo, hi = int(np.float32(0).view(np.int32)), int(np.float32(1).view(np.int32))
    while hi - lo > 1:  # invariant: value(lo) dropped, value(hi) kept
        bits = sorted({int(b) for b in np.linspace(lo, hi, min(len(spots), hi - lo + 1)).round()})
        at, _ = dropped_kept([np.int32(b).view(np.float32) for b in bits])
        if at is None:
            return None, None
        lo, hi = bits[at[0]], bits[at[1]]
    return float(np.int32(lo).view(np.float32)), kept_beside


def _window_points(trial: _Trial) -> list[tuple[int, int]]:
    """The pixels :func:`_window` asks about: the middle row's and column's first and last EDGE, and
    their middles."""
    mid_y, mid_x = trial.h // 2, trial.w // 2

    def line(size: int) -> list[int]:
        depth = min(EDGE, size // 2)
        return sorted({*range(depth), *(size - 1 - i for i in range(depth)), size // 2})

    return sorted({(mid_y, x) for x in line(trial.w)} | {(y, mid_x) for y in line(trial.h)})


def _window(trial: _Trial, kept: Callable[[int, int], bool]) -> tuple[int, int, int]:
    """(border, limit_y, limit_x): a peak is kept iff border <= y < limit_y and border <= x < limit_x.
    Found along the middle row and column (:func:`_window_points`); checked on random maps after."""
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


def _fill(trial: _Trial, specs: list[str], window: tuple[int, int, int]) -> float:
    """What the cut border holds in a fixed-K export: with the window far below it, a border pixel
    comes first, with that score."""
    b, ly, lx = window
    s = np.zeros((trial.h, trial.w), np.float32)
    s[b:ly, b:lx] = -1e6
    _, score = _first(trial, specs, s)
    if not score > -1e6:
        raise NoMatch("the border is not cut by a constant fill")
    return score


def _window_and_fill(trial: _Trial, specs: list[str], one: Callable[[int, int], bool],
                     capacity: int) -> tuple[tuple[int, int, int], float]:
    """The window and the fill of a fixed-K export from one run: a peak of 1 at each pixel
    :func:`_window` asks about, on a map far below any fill (-1e6). The peaks kept show the
    window; the best of the rest is a cut border pixel, with the fill. Asked one question at a
    time (``one``, then :func:`_fill`) where the run cannot tell: no peak kept, as many as K, or
    nothing after them."""
    points = _window_points(trial)
    decoded = _decoded(trial, specs, trial.peaks(points, 1.0, base=-1e6))
    at = set(points)
    found = {(y, x) for (x, y), v in decoded if (y, x) in at and np.float32(v) == 1}
    rest = [v for (x, y), v in decoded if (y, x) not in found or np.float32(v) != 1]
    if not found or len(found) >= capacity or not rest:
        window = _window(trial, one)
        return window, _fill(trial, specs, window)
    window = _window(trial, lambda y, x: (y, x) in found)
    if not rest[0] > -1e6:
        raise NoMatch("the border is not cut by a constant fill")
    return window, rest[0]


def _asked_at_once(trial: _Trial, specs: list[str], one: Callable[[int, int], bool],
                   capacity: int | None) -> Callable[[int, int], bool]:
    """``one`` (is a single peak at (y, x) kept?) for the window's pixels, from one run with a peak
    at each; ``one`` itself where one run cannot tell (:func:`_kept_many`)."""
    points = _window_points(trial)
    found = _kept_many(trial, specs, points, np.ones(len(points), np.float32), capacity)
    if found is None:
        return one
    return lambda y, x: (y, x) in found


def _max_keypoints(trial: _Trial, specs: list[str], attrs: dict, dense: np.ndarray,
                   selected: list[np.ndarray | None]) -> int:
    """The keypoint limit of a threshold export: how many keypoints the region returned for the
    dense map (``selected``, :func:`_selection`) when that is fewer than the map has above the
    threshold in the window; -1 (no limit below that many) otherwise. The same run is then
    compared with spc.Keypoints (:func:`_agrees`)."""
    b, ly, lx = int(attrs["border"]), int(attrs["limit_y"]), int(attrs["limit_x"])
    i = [OutputSpec.parse(s).role for s in specs].index("scores")
    a = selected[i]
    assert a is not None
    got = int(a.shape[1] if OutputSpec.parse(specs[i]).batch else a.shape[0])
    above = int(np.count_nonzero(dense[b:ly, b:lx] > np.float32(attrs["threshold"])))
    return got if got < above else -1


def _random_map(trial: _Trial, rng: TrialValues, count: int, low: float = 0.0) -> np.ndarray:
    """A map of zeros with about ``count`` random scores in [low, 1) at random pixels: drawn as
    positions and values, not as a map of random numbers."""
    s = np.zeros((trial.h, trial.w), np.float32)
    values = np.float32(low) + np.float32(1 - low) * rng.random(count, dtype=np.float32)
    s.reshape(-1)[rng.integers(0, trial.h * trial.w, count)] = values
    return s


def _window_edges(trial: _Trial, attrs: dict) -> list[tuple[int, int]]:
    """The kept window's corners and a few pixels along each of its edges, and the pixels just
    outside them: where sampling the descriptors meets the map's edge and the window cuts."""
    b, ly, lx = int(attrs["border"]), int(attrs["limit_y"]), int(attrs["limit_x"])
    ys = sorted({y for y in (b - 1, b, b + 1, (b + ly) // 2, ly - 2, ly - 1, ly) if 0 <= y < trial.h})
    xs = sorted({x for x in (b - 1, b, b + 1, (b + lx) // 3, 2 * (b + lx) // 3, lx - 2, lx - 1, lx)
                 if 0 <= x < trial.w})
    return [(y, x) for y in ys for x in xs if y in (ys[0], ys[-1]) or x in (xs[0], xs[-1]) or
            y in (b, ly - 1) or x in (b, lx - 1)]


def _selection(trial: _Trial, attrs: dict) -> tuple[np.ndarray, tuple[int, ...] | None, list[np.ndarray | None]]:
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
    s = _random_map(trial, rng, count, attrs["threshold"] if threshold else 0.0)
    only: tuple[int, ...] | None = None
    if threshold:
        s[:: max(1, trial.h // 7), ::13] = np.float32(attrs["threshold"])  # exactly at the threshold: dropped
        only = tuple(i for i, spec in enumerate(attrs["outputs"]) if OutputSpec.parse(spec).role != "descriptors")
    else:
        edges = _window_edges(trial, attrs)
        if edges:
            s[tuple(np.array(edges).T)] = rng.random(len(edges), dtype=np.float32) + 1
    return s, only, trial(s, only)


def _agrees(trial: _Trial, attrs: dict,
            selection: tuple[np.ndarray, tuple[int, ...] | None, list[np.ndarray | None]] | None = None
            ) -> str | None:
    """None if the region and spc.Keypoints agree on random maps, else what differs. The denser map
    (:func:`_selection`, given when it already ran) tests the selection (thousands of keypoints, a
    limit's cut); in threshold mode on every output but the descriptors: a descriptor depends on
    its keypoint alone, and a sparser map tests those, at random pixels and along the kept
    window's edges."""
    dense, only, got = selection if selection is not None else _selection(trial, attrs)
    maps: list[tuple[str, np.ndarray, Callable[[], list[np.ndarray | None]]]] = [
        ("a dense random map", dense, lambda: got)]
    if only is not None:
        rng = TrialValues(SEED + 3)
        sparse = _random_map(trial, rng, min(int(0.002 * trial.h * trial.w), 64))
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


def recognise(post: list[Node], g: Graph, attempt: Attempt | None = None,
              outputs: list[Value] | None = None) -> tuple[Value, Value, list[Value], dict]:
    """The NMS map, the descriptor map, the outputs and the attributes of spc.Keypoints; NoMatch
    with the reason otherwise. ``attempt`` hears each finding (``--explain``).

    The questions are asked with many peaks per run first (a few runs in all); where that finds no
    answer - a keypoint limit can cut what many peaks show - they are asked again one peak at a
    time, and the reason given is that slower search's."""
    heard: list[str] = []
    try:
        found = _recognise(post, g, heard.append, True, outputs)
    except NoMatch:
        return _recognise(post, g, attempt.step if attempt is not None else None, False, outputs)
    for text in heard:
        if attempt is not None:
            attempt.step(text)
    return found


def _recognise(post: list[Node], g: Graph, hear: Callable[[str], None] | None,
               fast: bool, outputs: list[Value] | None = None) -> tuple[Value, Value, list[Value], dict]:

    def found(text: str) -> None:
        if hear is not None:
            hear(text)

    entering = {id(v): v for n in post for v in n.inputs
                if v is not None and v.producer is not None and v.producer.placement is Placement.DEVICE}
    if outputs is None:
        outputs = [v for v in g.outputs if v.producer is not None and v.producer.placement is Placement.HOST_POST]
    if not outputs:
        raise NoMatch("no graph output comes from the host post-processing")
    maps = [v for v in entering.values() if v.type.is_static and v.type.dtype.is_float]
    if len(entering) != 2 or len(maps) != 2:
        raise NoMatch(f"{len(entering)} device value(s) enter the host post-processing: expected the NMS map and the "
                      "descriptor map")
    score = next((v for v in maps if (p := _through_views(v)) is not None and p.op.name == "spc.Nms"), None)
    if score is None:
        raise NoMatch("no NMS map (spc.Nms) enters the host post-processing")
    desc = next(v for v in maps if v is not score)
    found(f"maps: %{score.name} (NMS) and %{desc.name} (descriptors)")
    sh, ds = score.type.static_shape, desc.type.static_shape
    if desc.type.rank != 4 or ds[0] != 1 or any(d != 1 for d in sh[:-2]) or sh[-2] % ds[-2] or \
            sh[-2] // ds[-2] != sh[-1] // ds[-1] or sh[-1] % ds[-1]:
        raise NoMatch(f"the maps {list(sh)} and {list(ds)} are not an image's scores and its descriptor cells")
    trial = _Trial(post, score, desc, outputs)
    fixed = all(v.type.is_static for v in outputs)
    if fixed:
        trial.uneven()
    specs = _roles(trial, fixed)
    found(f"outputs: {', '.join(specs)}")
    attrs: dict = {"cell": trial.cell, "outputs": specs, "mode": "fixed" if fixed else "threshold"}
    found(f"mode: {attrs['mode']} ({'static' if fixed else 'data-dependent'} output shapes), cell {trial.cell}")
    if fixed:
        kp = outputs[[OutputSpec.parse(s).role for s in specs].index("scores")]
        attrs["max_keypoints"] = int(kp.type.static_shape[-1])
        attrs["threshold"] = float("-inf")

        def kept(y: int, x: int) -> bool:
            return _first(trial, specs, trial.peaks([(y, x)], 1.0)) == ((x, y), 1.0)

        if fast:
            window, attrs["fill"] = _window_and_fill(trial, specs, kept, attrs["max_keypoints"])
        else:
            window = _window(trial, kept)
            attrs["fill"] = _fill(trial, specs, window)
    else:
        # the window's pixels are asked about in the threshold's first run (fast)
        attrs["threshold"], window_kept = _threshold(trial, specs, fast, _window_points(trial) if fast else None)

        def kept(y: int, x: int) -> bool:
            return _kept_beside_anchor(trial, specs, y, x, 1.0)

        if window_kept is not None:
            window = _window(trial, lambda y, x: (y, x) in window_kept)
        else:
            window = _window(trial, _asked_at_once(trial, specs, kept, None) if fast else kept)
        attrs.update(max_keypoints=-1, fill=0.0)
    attrs.update(border=window[0], limit_y=window[1], limit_x=window[2])
    selection = _selection(trial, attrs)
    if not fixed:
        attrs["max_keypoints"] = _max_keypoints(trial, specs, attrs, selection[0], selection[2])
    found(f"threshold {attrs['threshold']:g}, max keypoints {attrs['max_keypoints']}, border {window[0]}, "
          f"window {window[1]}x{window[2]}, fill {attrs['fill']:g}")
    why = _agrees(trial, attrs, selection)
    if why:
        raise NoMatch(why)
    return score, desc, outputs, attrs


# -- a batch: one extraction per image ----------------------------------------------------------
def image_regions(post: list[Node], g: Graph) -> list[tuple[list[Node], list[Value]]]:
    """The host post-processing of a batch plan, image by image (passes/batch_images.py copies it
    once per image): for each NMS map that enters it, the nodes that read it and no other map,
    with the nodes they read that read no map at all (the image's slice of the descriptors),
    and the values leaving those nodes. Empty when fewer than two NMS maps enter."""
    members = {id(n) for n in post}
    entering = {id(v): v for n in post for v in n.inputs
                if v is not None and v.producer is not None and v.producer.placement is Placement.DEVICE}
    maps = [v for v in entering.values() if (p := _through_views(v)) is not None and p.op.name == "spc.Nms"]
    if len(maps) == 1 and maps[0].type.shape[0] != 1:  # one batched NMS map: each image's row of it
        maps = [o for u in maps[0].consumers() if id(u) in members and _image_row(u) for o in u.outputs]
    if len(maps) < 2:
        return []
    below: list[set[int]] = []
    for m in maps:
        seen: set[int] = set()
        stack = [u for u in m.consumers() if id(u) in members]
        while stack:
            n = stack.pop()
            if id(n) not in seen:
                seen.add(id(n))
                stack.extend(u for o in n.outputs for u in o.consumers() if id(u) in members)
        below.append(seen)
    reached = [sum(id(n) in b for b in below) for n in post]
    regions = []
    for own in below:
        region = {id(n) for n, r in zip(post, reached) if r == 1 and id(n) in own}
        stack = [v.producer for n in post if id(n) in region for v in n.inputs if v is not None]
        while stack:
            p = stack.pop()
            if p is not None and id(p) in members and id(p) not in region and not any(id(p) in b for b in below):
                region.add(id(p))
                stack.extend(v.producer for v in p.inputs if v is not None)
        # the sizes of its results that the stacking reads (Shape) stay outside: they are no result
        region -= {id(n) for n in post if n.op.name in ("onnx.Shape", "onnx.Size") and
                   all(id(u) not in region for o in n.outputs for u in o.consumers())}
        nodes = [n for n in post if id(n) in region]
        outputs = [o for n in nodes for o in n.outputs
                   if o in g.outputs or any(id(u) not in region for u in o.consumers())]
        regions.append((nodes, outputs))
    return regions


def _image_slices_to_device(nodes: list[Node]) -> list[Node]:
    """An image's slice of a batched device map (its descriptors), computed on the device, so that
    the image's region reads its own maps; the slices moved (put back if the region is not
    recognised)."""
    from spc.lowering.registry import device_support

    moved = []
    for n in nodes:
        x = n.inputs[0] if n.inputs else None
        if n.op.name == "onnx.Slice" and x is not None and x.producer is not None and \
                x.producer.placement is Placement.DEVICE and x.type.rank and x.type.shape[0] != 1 and \
                n.output.type.is_static and n.output.type.shape[0] == 1 and device_support(n) is None:
            n.placement = Placement.DEVICE
            moved.append(n)
    return moved


class FuseKeypoints(Pass):
    name = "fuse-keypoints"
    summary = "recognise the host post-processing as SuperPoint keypoint extraction (one op)"
    requires = ("partition-host-device",)
    explains = (name,)
    creates = ("spc.Keypoints",)

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        post = [n for n in g.nodes if n.placement is Placement.HOST_POST]
        if not post:
            return PassResult(False, {"recognised": 0, "why_not": "no host post-processing (the device outputs are the "
                                                                  "model's)"})
        attempt = ctx.attempt(self.name, f"the host post-processing ({len(post)} node(s))")
        try:
            found = [recognise(post, g, attempt)]
        except (NoMatch, ValueError, IndexError, KeyError, TypeError) as exc:
            why = str(exc) if isinstance(exc, NoMatch) else f"trying the region failed ({type(exc).__name__}: {exc})"
            found = self._per_image(post, g)
            if isinstance(found, str):
                why += found
                if attempt:
                    attempt.stopped(why)
                ctx.note(f"fuse-keypoints: the host post-processing is not recognised as SuperPoint's keypoint "
                         f"extraction: {why}; the device maps are read densely")
                return PassResult(False, {"recognised": 0, "why_not": why})
        for i, (score, desc, outputs, attrs) in enumerate(found):
            node = g.make_node(get("spc.Keypoints"), [score, desc], attrs, out_types=[v.type for v in outputs],
                               name="keypoints" if len(found) == 1 else f"keypoints/image{i}",
                               out_names=[v.name + "_fused" for v in outputs])
            node.placement = Placement.HOST_POST
            for old, new in zip(outputs, node.outputs):
                g.replace_all_uses(old, new)
        if attempt:
            what = "spc.Keypoints replaces" if len(found) == 1 else f"{len(found)} spc.Keypoints (per image) replace"
            attempt.fired(f"{what} the post-processing's {len(post)} node(s)")
        for n in reversed(post):  # consumers first
            if n.placement is Placement.HOST_POST and all(not o.uses and o not in g.outputs for o in n.outputs):
                g.remove_node(n)
        g.toposort()  # an image's op reads its slice, now among the device nodes
        g.remove_unused_constants()
        shown = {k: v for k, v in found[0][3].items() if k != "outputs"}
        return PassResult(True, {"recognised": len(found), "replaced": len(post), **shown})

    @staticmethod
    def _per_image(post: list[Node], g: Graph) -> list[tuple[Value, Value, list[Value], dict]] | str:
        """Each image's extraction of a batch plan (image_regions), or why not (appended to the
        whole region's reason)."""
        regions = image_regions(post, g)
        if not regions:
            return ""
        found, moved = [], []
        try:
            for i, (nodes, outputs) in enumerate(regions):
                slices = _image_slices_to_device(nodes)
                moved += slices
                try:
                    found.append(recognise([n for n in nodes if n not in slices], g, None, outputs))
                except NoMatch as exc:
                    raise NoMatch(f"; image {i} of {len(regions)} alone: {exc}") from None
        except (NoMatch, ValueError, IndexError, KeyError, TypeError) as exc:
            for n in moved:
                n.placement = Placement.HOST_POST
            return str(exc) if isinstance(exc, NoMatch) else f"; image by image: {type(exc).__name__}: {exc}"
        return found
