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
        limit_x = 640, limit_y = 480, max_keypoints = -1, threshold = 0.004999999888241291} @host-post

The region is every host node after the device stage; its inputs must be the NMS map and the
descriptor map. It is recognised by what it computes, not by its spelling: the threshold is
found by bisection over float32 values of one peak, the kept window by moving a peak across
the middle row and column, the keypoint limit by offering more peaks than the outputs return; then the region and
:func:`~spc.ir.ops.spc_ops.superpoint_keypoints` must agree on random probes. (Probing found
that the HF model removes only the near borders: it compares with 8x the map's size.) Anything else
leaves the graph as it was, with a note. A single op is what lets the lowering compute the
keypoints' top-K and descriptors on the device and read back only those (lowering/lower.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spc.ir.graph import Graph, Node, Placement, Value
from spc.ir.ops import get
from spc.ir.ops.spc_ops import superpoint_keypoints
from spc.passes.manager import Pass, PassContext, PassResult

CELL = 8
SEED = 20261129
EDGE = 16  # how deep a border is looked for


def _run(nodes: list[Node], feeds: dict[int, np.ndarray], outputs: list[Value]) -> list[np.ndarray]:
    env = dict(feeds)
    for n in nodes:
        args = [None if v is None else (v.data if v.is_const else env[id(v)]) for v in n.inputs]
        for o, r in zip(n.outputs, n.op.evaluate(args, n.attrs)):
            env[id(o)] = np.asarray(r)
    return [env[id(v)] for v in outputs]


class _Probe:
    def __init__(self, nodes: list[Node], score: Value, desc: Value, outputs: list[Value]) -> None:
        self.nodes, self.score, self.desc, self.outputs = nodes, score, desc, outputs
        self.h, self.w = (int(d) for d in score.type.static_shape[1:])
        rng = np.random.default_rng(SEED)
        self.desc_map = rng.standard_normal(tuple(int(d) for d in desc.type.static_shape)).astype(np.float32)

    def __call__(self, score_map: np.ndarray) -> list[np.ndarray]:
        return _run(self.nodes, {id(self.score): score_map, id(self.desc): self.desc_map}, self.outputs)

    def peaks(self, points: list[tuple[int, int]], value: float | np.ndarray) -> np.ndarray:
        s = np.zeros((1, self.h, self.w), np.float32)
        for i, (y, x) in enumerate(points):
            s[0, y, x] = value if np.isscalar(value) else value[i]
        return s

    def count(self, score_map: np.ndarray) -> int:
        return int(self(score_map)[1].size)

    def scalars(self) -> list[np.float32]:
        """Float constants of one value used in the region: where a threshold would be."""
        found = {np.float32(v.data.reshape(-1)[0]) for n in self.nodes for v in n.inputs
                 if v is not None and v.is_const and v.data.size == 1 and v.data.dtype.kind == "f"}
        return sorted(found)


def _threshold(probe: _Probe) -> float | None:
    """The largest float32 score that is dropped (a score is kept iff it is above it). The
    region's scalar constants are tried first, each confirmed on two peaks; otherwise bisection
    on the float32 bits of one peak between 0 (dropped) and 1 (kept)."""
    at = [(probe.h // 2, probe.w // 2)]

    def kept(value: np.float32) -> bool:
        return probe.count(probe.peaks(at, float(value))) == 1

    if not kept(np.float32(1)) or kept(np.float32(0)):
        return None
    for c in probe.scalars():
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


def _borders(probe: _Probe) -> tuple[int, int, int] | None:
    """(border, limit_y, limit_x): a peak is kept iff border <= y < limit_y and border <= x < limit_x.
    Found along the middle row and column; checked on the other axis."""
    mid_y, mid_x = probe.h // 2, probe.w // 2

    def kept(y: int, x: int) -> bool:
        return probe.count(probe.peaks([(y, x)], 1.0)) == 1

    def first_kept(positions: list[int], at: Callable[[int], bool]) -> int | None:
        """How many positions are dropped before the first kept one (the next two kept too)."""
        for i, p in enumerate(positions):
            if at(p):
                return i if all(at(q) for q in positions[i + 1:i + 3]) else None
        return None

    def edges(size: int, at: Callable[[int], bool]) -> tuple[int, int] | None:
        """The kept range along one line, looking EDGE deep from each end; the middle must be kept."""
        depth = min(EDGE, size // 2)
        lo = first_kept(list(range(depth)), at)
        far = first_kept([size - 1 - i for i in range(depth)], at)
        if lo is None or far is None or not at(size // 2):
            return None
        return lo, size - far

    xs = edges(probe.w, lambda x: kept(mid_y, x))
    ys = edges(probe.h, lambda y: kept(y, mid_x))
    if xs is None or ys is None or xs[0] != ys[0]:
        return None  # not a window with one near border (checked on random probes after)
    return xs[0], ys[1], xs[1]


def _max_keypoints(probe: _Probe, border: int, limit_y: int, limit_x: int) -> int:
    grid = [(y, x) for y in range(border, limit_y, 9) for x in range(border, limit_x, 9)]
    got = probe.count(probe.peaks(grid, np.linspace(0.5, 1.0, len(grid), dtype=np.float32)))
    return got if got < len(grid) else -1


def _agrees(probe: _Probe, threshold: float, borders: tuple[int, int, int], max_keypoints: int) -> bool:
    rng = np.random.default_rng(SEED + 1)
    for density in (0.002, 0.01):
        s = np.where(rng.random((1, probe.h, probe.w)) < density, rng.random((1, probe.h, probe.w)), 0)
        s = s.astype(np.float32)
        s[0, :: max(1, probe.h // 7), ::13] = np.float32(threshold)  # exactly at the threshold: dropped
        want = superpoint_keypoints(s, probe.desc_map, threshold, *borders, max_keypoints, CELL)
        got = probe(s)
        if any(a.shape != b.shape or not np.allclose(a, b, atol=1e-5) for a, b in zip(got, want)):
            return False
    return True


class FuseKeypoints(Pass):
    name = "fuse-keypoints"
    summary = "recognise the host post-processing as SuperPoint keypoint extraction (one op)"
    requires = ("partition-host-device",)

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        post = [n for n in g.nodes if n.placement is Placement.HOST_POST]
        if not post:
            return PassResult(False)
        entering = {id(v): v for n in post for v in n.inputs
                    if v is not None and v.producer is not None and v.producer.placement is Placement.DEVICE}
        by_op = {v.producer.op.name: v for v in entering.values() if v.producer is not None}
        score, desc = by_op.get("spc.Nms"), by_op.get("spc.L2Norm")
        if len(entering) != 2 or score is None or desc is None or len(g.outputs) != 4 or score.type.rank != 3 \
                or desc.type.rank != 4 or any(v.producer is None or v.producer.placement is not Placement.HOST_POST
                                              for v in g.outputs):
            ctx.note("fuse-keypoints: the host post-processing is not SuperPoint's (inputs or outputs differ); "
                     "the device maps are read densely")
            return PassResult(False)
        probe = _Probe(post, score, desc, list(g.outputs))
        threshold = borders = limit = None
        try:
            threshold = _threshold(probe)
            borders = _borders(probe) if threshold is not None else None
            limit = _max_keypoints(probe, *borders) if borders is not None else None
            recognised = threshold is not None and borders is not None and limit is not None and \
                _agrees(probe, threshold, borders, limit)
        except (ValueError, IndexError, KeyError):
            recognised = False
        if not recognised:
            ctx.note("fuse-keypoints: the host post-processing computes something other than SuperPoint's keypoint "
                     "extraction; the device maps are read densely")
            return PassResult(False)
        assert borders is not None
        attrs = {"threshold": threshold, "border": borders[0], "limit_y": borders[1], "limit_x": borders[2],
                 "max_keypoints": limit, "cell": CELL}
        outputs = list(g.outputs)
        node = g.make_node(get("spc.Keypoints"), [score, desc], attrs, out_types=[v.type for v in outputs],
                           name="keypoints", out_names=[v.name + "_fused" for v in outputs])
        node.placement = Placement.HOST_POST
        for old, new in zip(outputs, node.outputs):
            g.replace_all_uses(old, new)
        for n in reversed(post):  # consumers first
            g.remove_node(n)
        g.remove_unused_constants()
        return PassResult(True, {"replaced": len(post), **attrs})
