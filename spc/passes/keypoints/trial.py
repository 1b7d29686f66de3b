"""The region as a function of the score map (:class:`Trial`), and the small questions every
other one is made of: how many keypoints a map gives, which, which peaks are kept."""

from __future__ import annotations

import numpy as np

from spc.ir.graph import Node, Value
from spc.ir.interpreter import NodeSteps, node_steps, run_nodes
from spc.ir.ops.keypoints import OutputSpec, sample_descriptors
from spc.passes.trial_values import TrialValues

SEED = 20261129
EDGE = 16  # how deep a border is looked for
PEAKS = 5


class NoMatch(Exception):
    """A question of the recognition found no answer: the message says which."""


def through_views(v: Value) -> Node | None:
    n = v.producer
    while n is not None and (n.op.name in ("onnx.Reshape", "onnx.Squeeze", "onnx.Unsqueeze", "onnx.Identity")
                             or image_row(n)):
        src = n.inputs[0]
        n = src.producer if src is not None else None
    return n


def image_row(n: Node) -> bool:
    """Whether ``n`` takes one image's row of a batched value (a batch plan's Slice on axis 0)."""
    x = n.inputs[0] if n.inputs else None
    return (n.op.name == "onnx.Slice" and x is not None and x.type.is_static and x.type.rank > 0
            and x.type.shape[0] != 1 and n.outputs[0].type.is_static and n.outputs[0].type.shape[0] == 1
            and n.outputs[0].type.shape[1:] == x.type.shape[1:])


class Trial:
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
        with spc.Keypoints (:func:`agrees`) keep their zeros: its sort is the faster on those."""
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


def count(trial: Trial, specs: list[str], score_map: np.ndarray) -> int:
    i = [OutputSpec.parse(s).role for s in specs].index("scores")
    a = trial(score_map, (i,))[i]
    assert a is not None
    return int(a.shape[1] if OutputSpec.parse(specs[i]).batch else a.shape[0])


def decoded(trial: Trial, specs: list[str], score_map: np.ndarray) -> list[tuple[tuple[int, int], float]]:
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


def first(trial: Trial, specs: list[str], score_map: np.ndarray) -> tuple[tuple[int, int], float]:
    """The first keypoint, as (x, y) pixels, and its score."""
    return decoded(trial, specs, score_map)[0]


def kept_many(trial: Trial, specs: list[str], points: list[tuple[int, int]], values: np.ndarray,
              capacity: int | None) -> set[tuple[int, int]] | None:
    """Which of the peaks ``points`` (y, x) with ``values`` the region keeps, from ONE run (the
    region comes after NMS: peaks do not suppress each other). None when the answer may be cut by
    a keypoint limit (as many kept as the fixed K, or every peak dropped): ask one peak at a time."""
    at = {(y, x): np.float32(v) for (y, x), v in zip(points, values)}
    found = {(y, x) for (x, y), v in decoded(trial, specs, trial.peaks(points, values))
             if (y, x) in at and np.float32(v) == at[(y, x)]}
    if not found or (capacity is not None and len(found) >= capacity):
        return None
    return found


def interior(trial: Trial, n: int) -> list[tuple[int, int]]:
    """``n`` distinct pixels well inside the map, for peaks asked about at once."""
    ys = np.linspace(trial.h // 4, 3 * trial.h // 4 - 1, max(1, int(np.sqrt(n))) + 1).astype(int)
    xs = np.linspace(trial.w // 4, 3 * trial.w // 4 - 1, n // max(1, len(ys)) + 2).astype(int)
    cells = sorted({(int(y), int(x)) for y in ys for x in xs})
    return cells[:n]


def anchor(trial: Trial) -> tuple[int, int]:
    """A peak of 1 kept in every threshold trial: some exports fail on an image without keypoints
    (the legacy exporter bakes a Reshape whose 0 then means "copy the input's dimension")."""
    return trial.h // 2 + 3, trial.w // 2 + 5


def kept_beside_anchor(trial: Trial, specs: list[str], y: int, x: int, value: float) -> bool:
    return count(trial, specs, trial.peaks([anchor(trial), (y, x)], np.array([1.0, value], np.float32))) == 2


def random_map(trial: Trial, rng: TrialValues, count: int, low: float = 0.0) -> np.ndarray:
    """A map of zeros with about ``count`` random scores in [low, 1) at random pixels: drawn as
    positions and values, not as a map of random numbers."""
    s = np.zeros((trial.h, trial.w), np.float32)
    values = np.float32(low) + np.float32(1 - low) * rng.random(count, dtype=np.float32)
    s.reshape(-1)[rng.integers(0, trial.h * trial.w, count)] = values
    return s
