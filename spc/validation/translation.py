"""Translation validation: before a plan is written, its program is run and compared with the
source graph's own meaning, at the model's own shapes.

Two runs on one seeded image, both numpy, side by side in two threads:

* the source: the imported graph as the frontend made it, before any pass (:func:`snapshot`),
  by the IR's interpreter (ir/interpreter.py: each op's one meaning), keeping only the values
  compared;
* the plan: its host stages by the same interpreter and its device calls by what ttnn defines
  them to compute (runtime/reference.py, each call's meaning in ttnn/calls), float32 without storage rounding:
  the exact configuration, so that any difference is the translation's, not the device's.

The convolutions, nearly all of the arithmetic, are cut: each convolution's result is a seeded
map given to both runs under its IR value's name (the source graph's name: the fused conv keeps
the value it replaced), and only what the compared tensors need is computed. What is compared is
every tensor the device stage holds for a source value (``Program.values``), in program order,
then the plan's outputs after its host stage. The first tensor that differs is the departure;
the compiler drops the fusion that made it (compiler.py) or, with none to drop, refuses.

Before::

    source:  %l = Conv(...); %p = Softmax(%l); ... %s = Reshape(...)   (what the model computes)
    plan:    ttnn.conv2d -> %l; ttnn.softmax; ttnn.slice; ...; %s      (what the plan computes)

After: a :class:`Verdict`, e.g. ``departed at %s (spc.ScoreFold score_fold): max |diff| 0.98``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Collection, Mapping

import numpy as np
from msgspec import Struct, field
from msgspec.structs import replace

from spc.errors import SpcError
from spc.ir.graph import Graph, Node
from spc.ir.interpreter import MissingValue, NodeFailed, Step, demanded, run
from spc.ir.ops.keypoints import KeypointOverflow
from spc.ir.types import DType
from spc.passes.trial_values import TrialValues, hashed_uniform
from spc.plan.program import DeviceTensor, Program, TtOp
from spc.runtime.host import run_host
from spc.runtime.reference import flat_ops, needed, run_device
from spc.ttnn.calls import MEANINGS
from spc.ttnn.configs import Activation
from spc.ttnn.layout import DeviceLayout

RTOL, ATOL = 1e-3, 1e-4  # on values scaled to their largest magnitude: summation order, not translation
DISCRETE_SLACK = 0.01  # masks, indices, keypoints: the share of elements that may differ (near-ties)


class Source(Struct):
    """The imported graph's meaning, taken before the passes change the graph: its nodes as the
    interpreter runs them, keyed by value name (unique in an imported graph)."""

    steps: tuple[Step, ...]
    constants: dict[str, np.ndarray]
    inputs: list[str]
    outputs: list[str]
    shapes: dict[str, tuple[int, ...] | None]

    def with_meanings(self, steps: list[Step]) -> Source:
        """This source with ``steps`` computing their outputs in place of the source's nodes: an
        approximation the user chose (``--nms-single-pass``) is held to its op's own meaning."""
        by_output = {o: s for s in steps for o in s.outputs}
        placed = [by_output.get(s.outputs[0], s) if s.outputs else s for s in self.steps]
        return replace(self, steps=tuple(placed))

    def needed(self, given: Collection[str], also: Collection[str] = ()) -> list[Step]:
        """The steps the outputs (and ``also``) need, in order, not looking past ``given``."""
        return demanded(self.steps, (*self.outputs, *also), given)

    def reads(self, given: Collection[str], also: Collection[str] = ()) -> set[str]:
        """Which of ``given`` the outputs (and ``also``) need."""
        return ({x for s in self.needed(given, also) for x in s.inputs if x in given}
                | set((*self.outputs, *also)) & set(given))

    def run(self, feeds: Mapping[str, np.ndarray], given: Mapping[str, np.ndarray],
            also: Collection[str] = (), keep: Collection[str] | None = None,
            stop: Callable[[], bool] | None = None) -> dict[str, np.ndarray]:
        """Every value the outputs (and ``also``) need, not looking past ``given`` (cut values);
        with ``keep``, only those of them (and the outputs, ``also`` and what was given);
        ``stop``: the interpreter's (asked between nodes)."""
        kept = None if keep is None else {*keep, *self.outputs, *also}
        return run(self.needed(given, also), {**feeds, **given}, self.constants, quiet=True, keep=kept, stop=stop)


def snapshot(g: Graph) -> Source:
    steps, consts = [], {}
    for n in g.nodes:
        for v in n.inputs:
            if v is not None and v.is_const:
                consts[v.name] = v.data
        steps.append(Step(n.name, n.op, tuple(None if v is None else v.name for v in n.inputs), dict(n.attrs),
                          tuple(o.name for o in n.outputs)))
    shapes = {v.name: tuple(int(d) for d in v.type.static_shape) if v.type.is_static else None for v in g.values()}
    return Source(tuple(steps), consts, [v.name for v in g.inputs], [v.name for v in g.outputs], shapes)


class Departure(Struct):
    """Where the plan first computes something else than the source."""

    tensor: str  # the IR value (the source's name)
    node: str  # the compiled graph's node that makes it
    op: str
    detail: str  # how far it is

    def __str__(self) -> str:
        return f"%{self.tensor} ({self.op} {self.node}): {self.detail}"


class Verdict(Struct):
    departure: Departure | None
    compared: list[str] = field(default_factory=list)  # tensors found equal, in program order
    cut: int = 0  # convolution results given to both runs
    cut_values: list[str] = field(default_factory=list)  # their IR values
    between_skipped: int = 0  # convolutions' inputs not computed: what they need is over BETWEEN_CAP
    paths: list[str] = field(default_factory=list)  # the read-backs run: "compact", "dense"
    seconds: float = 0.0

    def manifest(self) -> dict:
        return {"compared": len(self.compared), "convolutions_cut": self.cut, "read_backs": self.paths,
                "conv_inputs_not_compared": self.between_skipped}


def _difference(got: np.ndarray, want: np.ndarray, selecting: bool = True, rounded: bool = False) -> str | None:
    """None when ``got`` is ``want`` up to summation order (floats) or, where a selection decided
    them (``selecting``: after a comparison, NMS, top-K), up to near-ties it flipped: the rest
    exactly equal, or (``rounded``: after a rounding to integers) the rest within the tolerance."""
    if got.shape != want.shape:
        if got.size != want.size:
            return f"shape {list(got.shape)}, the source's {list(want.shape)}"
        got = got.reshape(want.shape)
    if want.size == 0:
        return None
    if want.dtype.kind == "f" and got.dtype.kind == "f":
        scale = float(max(want.max(), -want.min()))  # NaN when the source has one: the slow path
        if np.isfinite(scale) and float(np.abs(got - want).max()) <= ATOL * scale:
            return None  # the common case, in the tensors' own precision, two passes
    elif np.array_equal(got, want):
        return None
    if want.dtype.kind in "biu" or got.dtype.kind in "biu":
        wrong = int(np.count_nonzero(got.astype(np.float64) != want.astype(np.float64)))
        if selecting and wrong <= DISCRETE_SLACK * want.size:
            return None
        return f"{wrong} of {want.size} elements differ"
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(w64)
    if not np.array_equal(nan, np.isnan(g64)):
        return "NaN where the source has none, or none where it has"
    g64, w64 = g64[~nan], w64[~nan]
    if not w64.size:
        return None
    finite = np.isfinite(w64)
    if not np.array_equal(g64[~finite], w64[~finite]):
        return "an infinity the source does not have"
    g64, w64 = g64[finite], w64[finite]
    scale = float(np.max(np.abs(w64))) if w64.size else 0.0
    diff = np.abs(g64 - w64)
    bad = diff > ATOL * max(scale, 1e-30) + RTOL * np.abs(w64)
    if not bad.any():
        return None
    share = bad.mean()
    if selecting and share <= DISCRETE_SLACK and (rounded or _mostly_exact(g64, w64)):  # flipped at a near-tie
        return None
    pcc = np.corrcoef(g64, w64)[0, 1] if g64.size > 1 and g64.std() > 0 and w64.std() > 0 else float("nan")
    return f"max |diff| {float(diff.max()):.3g} (source's largest {scale:.3g}), PCC {pcc:.4f}, {bad.sum()} elements off"


def _mostly_exact(got: np.ndarray, want: np.ndarray) -> bool:
    return bool(np.mean(got == want) >= 0.5)


def _seeded(shape: tuple[int, ...], relu: bool, seed: int, detector: bool = False) -> np.ndarray:
    """A map without structure, in the range a trained SuperPoint's activations have, from
    ``seed`` (and ``seed + 1``). The ``detector``'s logits (what a score fold reads: its last
    channel the dustbin) have the dustbin winning in all but one cell in 16, as a natural image's
    do: a few hundred keypoints rather than the thousands that uniform logits leave after NMS, each
    of them extracted twice. A 4-D map is drawn in the device's NHWC order (an NCHW view): the
    device run reads it without a copy."""
    if len(shape) == 4:
        n, c, h, w = shape
        u = hashed_uniform((n, h, w, c), seed).transpose(0, 3, 1, 2)
    else:
        u = hashed_uniform(tuple(shape), seed)
    x = u  # in place: fresh memory is what costs here
    if relu:
        x *= np.float32(4)
    else:
        x *= np.float32(16)
        x -= np.float32(8)
    if detector:
        live = hashed_uniform((shape[0], 1, *shape[2:]), seed + 1) < np.float32(1 / 16)
        x[:, -1:] = np.where(live, np.float32(-8), np.float32(16))
    return x


def _seeded_array(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    """A seeded input: floats uniform in [0, 1) (an image's range), and integers and booleans zero
    (an index or a count whose meaning the graph alone knows: zero is in range for every one)."""
    kind = np.dtype(dtype)
    if np.issubdtype(kind, np.floating):
        return hashed_uniform(shape, seed).astype(kind, copy=False)
    return np.zeros(shape, kind)


def validate(source: Source, g: Graph, program: Program, tensors: Mapping[str, np.ndarray],
             approximated: Collection[str] = (), seed: int = 0) -> Verdict:
    """Run the plan and its source on one seeded image and report where they first differ.
    ``approximated``: values the compiled graph computes otherwise on purpose (an option that
    changes results), compared with its own node's meaning there, on the source's inputs."""
    return start(source, g, program, tensors, approximated, seed).verdict()


class _Cut(Struct):
    """What a validation of ``program`` runs: the source (with the meanings an option changed),
    the convolutions cut, the values given, computed and compared, and the seeded values by their
    recipes (:func:`_seeded_array` and :func:`_seeded`'s arguments, per image)."""

    source: Source
    batch: int
    calls: list[TtOp]
    convs: dict[str, tuple[str, tuple[int, ...], bool]]
    wanted: list[str]
    used: set[str]
    cut: list[str]
    skipped: int
    values: dict[str, DeviceTensor]
    inputs: list[tuple[tuple[str, tuple[int, ...], str, int], ...]]  # (input, shape, numpy dtype, seed)
    maps: list[tuple[tuple[str, tuple], ...]]  # (IR value, _seeded's arguments)
    also: tuple[str, ...]  # what the source computes beside its outputs (a convolution's input)
    keep: frozenset[str]  # what the source's side hands back: what is compared

    def drawn(self) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]]]:
        """The seeded inputs and cut maps, per image, read-only: both runs read them (one that wrote
        into one would fail, not pass it on to the other)."""
        inputs = [{name: _seeded_array(shape, dtype, seed) for name, shape, dtype, seed in image}
                  for image in self.inputs]
        maps = [{name: _seeded(*args) for name, args in image} for image in self.maps]
        for x in (x for d in (*inputs, *maps) for x in d.values()):
            x.flags.writeable = False
        return inputs, maps


def _prepare(source: Source, g: Graph, program: Program, approximated: Collection[str], seed: int) -> _Cut:
    """:class:`_Cut` for ``program``: what the outputs need, and what the convolutions read where
    that costs little (the tensors compared are those computed on the way)."""
    base = seed * 1_000_000  # image k's seed base + k; cut map i of image k's base + 1000 + 2 (k n + i)
    spec = program.inputs[0]
    plan_shape = tuple(int(d) for d in spec.shape)
    own = source.shapes.get(source.inputs[0]) or plan_shape
    # a --batch plan takes B images where its source takes one: B images, each its own cut values,
    # the source run on each; image k's results must be the source's on image k
    batch = plan_shape[0] // own[0] if own[0] and plan_shape[1:] == own[1:] and plan_shape[0] % own[0] == 0 else 1
    inputs = [((spec.name, own if batch > 1 else plan_shape, "float32", base + k),) for k in range(batch)]
    others = tuple((t.name, tuple(int(d) for d in t.shape), np.dtype(DType(t.dtype).host_numpy).name, base + 7919 * i)
                   for i, t in enumerate(program.inputs[1:], 1))  # a model of several inputs (no --batch)
    inputs[0] += others
    by_node = {n.name: n for n in g.nodes}
    chosen = [n for n in g.nodes if any(o.name in approximated for o in n.outputs)]
    if chosen:
        source = source.with_meanings([Step(n.name, n.op, tuple(None if v is None else v.name for v in n.inputs),
                                            dict(n.attrs), tuple(o.name for o in n.outputs)) for n in chosen])
    calls = flat_ops(program)
    convs = _cuts(calls, by_node, source, batch)
    wanted = [t.name for t in (*program.device_outputs, *program.fallback_outputs)]
    between, skipped = _between(calls, by_node, convs, source, {t.name for t in program.device_inputs})
    wanted += [d for d, _ in between]
    ops = needed(calls, wanted, convs.keys())
    used = {x for op in ops for x in op.inputs if x in convs} | {w for w in wanted if w in convs}
    also = tuple(s for _, s in between if s)
    read = source.reads({name for name, _, _ in convs.values()}, also)  # the source may read others than the plan
    # which cut feeds a score fold (the data chosen by it; the fold itself is still checked)
    folds = {n.inputs[0].name for n in g.nodes if n.op.name == "spc.ScoreFold" and n.inputs[0] is not None}
    seeds = {k: base + 1000 + 2 * i for i, k in enumerate(convs)}
    cut = [k for k in convs if k in used or convs[k][0] in read]
    maps = [tuple((convs[k][0], (convs[k][1], convs[k][2], seeds[k] + 2 * i * len(convs), convs[k][0] in folds))
                  for k in cut) for i in range(batch)]
    values = compared_values(program, g)
    keep = frozenset(values) | frozenset(source.outputs)  # what is compared: all the source side hands back
    return _Cut(source, batch, calls, convs, wanted, used, cut, skipped, values, inputs, maps, also, keep)


class _SourceRun:
    """The source's side, in a thread beside this one: numpy lets go of the interpreter's lock in
    its loops. (A forked child, which ran it before, shares this process's pages, and every page
    written while it lives is copied first: the thread's compile measured 0.97-0.98x of the
    child's, with 5-7 % less processor time.)"""

    def __init__(self, cut: _Cut, inputs: list[dict[str, np.ndarray]], maps: list[dict[str, np.ndarray]]) -> None:
        self._out: list[dict[str, np.ndarray]] | None = None
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(cut, inputs, maps), name="spc-validation-source")
        self._thread.start()

    def _run(self, cut: _Cut, inputs: list[dict[str, np.ndarray]], maps: list[dict[str, np.ndarray]]) -> None:
        keep = cut.keep
        try:
            try:
                srcs = [cut.source.run(x, v, cut.also, keep, self._stop.is_set) for x, v in zip(inputs, maps)]
            except (MissingValue, NodeFailed) as exc:
                raise SpcError(f"validation: the source graph does not run on a seeded image ({exc})") from None
            self._out = [{k: v for k, v in e.items() if k in keep} for e in srcs]
        except BaseException as exc:  # raised in the caller's thread, by result()
            self._error = exc

    def result(self) -> list[dict[str, np.ndarray]]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._out is not None
        return self._out

    def cancel(self) -> None:
        """Stopped at its next node and waited for (none may run beside a later fork): an error
        or Ctrl-C on this side does not wait for a whole source's run."""
        self._stop.set()
        self._thread.join()


def start(source: Source, g: Graph, program: Program, tensors: Mapping[str, np.ndarray],
          approximated: Collection[str] = (), seed: int = 0) -> Pending:
    """:func:`validate` begun: the source's run in a thread while this one runs the plan's device
    calls; :meth:`Pending.verdict` runs the window checks, then compares. Between the two the
    caller may do its own work (the compiler checks and serialises the plan)."""
    t0 = time.perf_counter()
    cut = _prepare(source, g, program, approximated, seed)
    inputs, drawn = cut.drawn()
    child = _SourceRun(cut, inputs, drawn)
    try:
        batch, convs, used = cut.batch, cut.convs, cut.used
        host: dict[str, np.ndarray] = {name: np.concatenate([x[name] for x in inputs]) if batch > 1 else x0
                                       for name, x0 in inputs[0].items()}
        try:
            run_host(program.host_pre, host, dict(tensors))
        except SpcError as exc:
            raise SpcError(f"validation: the plan's host stage fails on a seeded image ({exc})") from None
        dev_in = {t.name: t.layout.to_device(host[t.name]).astype(np.float32) for t in program.device_inputs}
        given = {k: DeviceLayout.of(_times(convs[k][1], batch)).to_device(
            np.concatenate([v[convs[k][0]] for v in drawn]) if batch > 1 else drawn[0][convs[k][0]]) for k in used}
        dev = run_device(program, tensors, dev_in, cut.wanted, given, cut.calls,
                         {t.name for t in cut.values.values()})
    except BaseException:
        child.cancel()
        raise
    verdict = Verdict(None, cut=len(used), cut_values=sorted(convs[k][0] for k in cut.cut),
                      between_skipped=cut.skipped)
    return Pending(verdict, cut.source, g, program, tensors, host, dev, {name for name, _, _ in convs.values()},
                   child, time.perf_counter() - t0)


class Pending(Struct):
    """A validation begun (:func:`start`): the device side's results, the source side running."""

    state: Verdict
    source: Source
    g: Graph
    program: Program
    tensors: Mapping[str, np.ndarray]
    host: dict[str, np.ndarray]
    dev: dict[str, np.ndarray]
    cut_names: set[str]  # the cut convolutions' values: given to both runs, not compared
    child: _SourceRun
    seconds: float
    windows: Departure | Exception | None = None  # what the window checks found, once run
    windows_run: bool = False

    def cancel(self) -> None:
        self.child.cancel()

    def collect(self) -> list[dict[str, np.ndarray]]:
        """The window checks (once), then the source side's values (what it raised, raised here, as
        often as asked): its thread is done when this returns, and its core free for the caller's
        work while :meth:`verdict` compares."""
        t0 = time.perf_counter()
        if not self.windows_run:
            try:
                # here while the source runs beside: in a child they ran slower (its copy-on-write faults)
                self.windows = _windows(self.g, self.program, self.tensors, self.source)
            except BaseException:
                self.cancel()
                raise
            self.windows_run = True
        srcs = self.child.result()
        self.seconds += time.perf_counter() - t0
        return srcs

    def verdict(self) -> Verdict:
        """The first tensor that departs, in program order, then the outputs, then the windows."""
        srcs, windows = self.collect(), self.windows
        t0 = time.perf_counter()
        program, g, dev, host, verdict = self.program, self.g, self.dev, self.host, self.state
        src = srcs[0]
        selected, rounded = _after(g, SELECTIONS), _after(g, ROUNDINGS)
        for ir_name, t in program.values.items():
            if ir_name in self.cut_names or t.name not in dev or ir_name not in src:
                continue
            if t.name in host:  # a device input: the host stage's, checked with the host stage
                continue
            shape = tuple(int(d) for d in t.shape)
            want = _per_image([np.asarray(e[ir_name]) for e in srcs], shape)
            got, want = t.paired(dev[t.name], want) if want.shape == shape else (t.to_host(dev[t.name]), want)
            why = _difference(got, want, ir_name in selected, ir_name in rounded)
            if why is not None:
                verdict.departure = _departure(ir_name, g, why)
                break
            verdict.compared.append(ir_name)
        if verdict.departure is None:
            verdict.departure = _outputs(program, self.tensors, host, dev, srcs, self.source, g, verdict)
        if verdict.departure is None:
            if isinstance(windows, Exception):
                raise windows
            verdict.departure = windows
        verdict.seconds = self.seconds + time.perf_counter() - t0
        return verdict


# the bytes of the values each run keeps for the comparison, at most (each of the two sides): a
# matcher's attention grows with the square of its keypoints (LightGlue's compile at 512 / 1024 /
# 2048 per image: 2.7 / 6.5 GB resident, then killed for memory on a 24 GB machine)
KEEP_BYTES = 4 << 30


def compared_values(program: Program, g: Graph) -> dict[str, DeviceTensor]:
    """The IR values compared one by one: every one the device holds, or where they would take
    more than KEEP_BYTES, the fused ops' (where a fusion is dropped from) as long as they fit; the
    model's outputs are compared in every case."""
    size = {k: 4 * math.prod(int(d) for d in t.shape) for k, t in program.values.items()}
    if sum(size.values()) <= KEEP_BYTES:
        return dict(program.values)
    fused = {o.name for n in g.nodes if n.op.name.startswith("spc.") for o in n.outputs}
    out: dict[str, DeviceTensor] = {}
    total = 0
    for k, t in program.values.items():
        if k in fused and total + size[k] <= KEEP_BYTES:
            out[k], total = t, total + size[k]
    return out


BETWEEN_CAP = 1_500_000  # cut elements a convolution's input may need to be computed and compared


def _between(ops: list[TtOp], by_node: dict[str, Node], convs: dict, source: Source,
             inputs: set[str]) -> tuple[list[tuple[str, str | None]], int]:
    """The convolutions' inputs worth computing (device tensor, the source's name for it): what
    lies between two convolutions (a pool, a per-channel scale, a layout change), where the cut
    values it needs are at most BETWEEN_CAP elements; and how many were left out for their size.
    Near the image the maps are large (64 x 480 x 640 per value): those are the window checks'."""
    out, skipped = [], 0
    for op in ops:
        n = by_node.get(op.source)
        if op.op != "ttnn.conv2d" or n is None or not op.inputs or op.inputs[0] in convs or op.inputs[0] in inputs:
            continue
        cuts = {x for c in needed(ops, [op.inputs[0]], convs.keys()) for x in c.inputs if x in convs}
        if sum(math.prod(convs[c][1]) for c in cuts) > BETWEEN_CAP:
            skipped += 1
            continue
        x = n.inputs[0]
        out.append((op.inputs[0], x.name if x is not None and x.name in source.shapes else None))
    return out, skipped


def _times(shape: tuple[int, ...], batch: int) -> tuple[int, ...]:
    return (shape[0] * batch, *shape[1:])


def _per_image(wants: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """The source's values on each image as a batch plan holds them: stacked on a new first axis
    or concatenated on the first, as the plan's shape says, sizes that differ (keypoint counts)
    zero-padded at the end to the largest (passes/batch_images.py); one image's as it is."""
    if len(wants) == 1:
        return wants[0]
    if any(w.ndim != wants[0].ndim for w in wants) or wants[0].ndim == 0:
        return np.stack(wants) if wants[0].ndim == 0 else wants[0]
    size = [max(w.shape[i] for w in wants) for i in range(wants[0].ndim)]
    padded = [np.pad(w, [(0, n - m) for n, m in zip(size, w.shape)]) for w in wants]
    if tuple(shape) == (len(wants), *size):
        return np.stack(padded)
    if tuple(shape) == (size[0] * len(wants), *size[1:]):
        return np.concatenate(padded)
    return wants[0]


def _cuts(ops: list[TtOp], by_node: dict[str, Node], source: Source,
          batch: int = 1) -> dict[str, tuple[str, tuple[int, ...], bool]]:
    """For each convolution call whose IR value the source has, at the same shape (``batch``
    times the source's first axis for a batch plan): its result's name -> (the IR value's name,
    the source's shape, whether it is rectified). A typecast after the call (a block's stored
    format) keeps the call's result, so the given value is the call's; a scaled conv's (a quantized
    model's integers, then the scale per channel) is the scaled result's."""
    out = {}
    for op in ops:
        n = by_node.get(op.source)
        if op.op != "ttnn.conv2d" or n is None or not n.outputs:
            continue
        v = n.output
        own = source.shapes.get(v.name)
        if own is None or _times(own, batch) != tuple(int(d) for d in v.type.static_shape):
            continue
        at = v.name if n.input(3) is not None else op.output
        out[at] = (v.name, source.shapes[v.name], op.args["conv_config"].activation is Activation.RELU)
    return out


# rounding to integers (a QDQ model's quantization): x / s lowers as x * (1 / s), one ulp apart,
# which moves a value sitting on a half-step to the next integer, and what is computed from it then
# differs by that step's share, not only by a flip
ROUNDINGS = {"onnx.Round", "onnx.Floor", "onnx.Ceil", "onnx.QuantizeLinear", "spc.FakeQuant"}
SELECTIONS = {"onnx.Equal", "onnx.Greater", "onnx.GreaterOrEqual", "onnx.Less", "onnx.LessOrEqual", "onnx.TopK",
              "onnx.ArgMax", "onnx.ArgMin", "onnx.NonZero", "spc.Nms", "spc.Keypoints", "spc.KeypointsFromTopK",
              *ROUNDINGS}


def _after(g: Graph, ops: set[str]) -> set[str]:
    """The values ``ops`` decide (with :data:`SELECTIONS`: a comparison, NMS, top-K, a rounding, and
    what follows them): where summation order may flip a near-tie, so a few elements may differ."""
    out: set[str] = set()
    for n in g.nodes:  # topological order
        if n.op.name in ops or any(v is not None and v.name in out for v in n.inputs):
            out.update(o.name for o in n.outputs)
    return out


def _departure(name: str, g: Graph, why: str) -> Departure:
    try:
        v = g.value(name)
    except KeyError:
        return Departure(name, "?", "?", why)
    n = v.producer
    return Departure(name, n.name if n else "input", n.op.name if n else "input", why)


def _host_results(tensors: list[DeviceTensor], nodes: list, dev: dict[str, np.ndarray], host: dict[str, np.ndarray],
                  consts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    env = dict(host)
    for t in tensors:  # views: the host stage reads a channels-last map as it is (keypoints.sample_descriptors)
        env[t.name] = t.to_host(dev[t.name], copy=False)
    run_host(nodes, env, consts)
    return env


def _outputs(program: Program, tensors: Mapping[str, np.ndarray], host: dict[str, np.ndarray],
             dev: dict[str, np.ndarray], srcs: list[dict[str, np.ndarray]], source: Source, g: Graph,
             verdict: Verdict) -> Departure | None:
    """The plan's outputs, after its host stage, against the source's: the compact read-back and,
    where the plan has one, the dense one a frame with too many keypoints takes."""
    consts = dict(tensors)
    rounded = _after(g, ROUNDINGS)
    paths = [("compact" if program.fallback_outputs else "dense", program.device_outputs, program.host_post)]
    if program.fallback_outputs:
        paths.append(("dense", program.fallback_outputs, program.fallback_post))
    for label, outs, nodes in paths:
        try:
            env = _host_results(outs, nodes, dev, host, consts)
        except KeypointOverflow:  # more keypoints on this image than the compact read-back holds
            continue
        verdict.paths.append(label)
        for spec, want_name in zip(program.outputs, source.outputs):
            got = env.get(spec.name)
            if got is None or any(want_name not in e for e in srcs):
                continue
            wants = [np.asarray(e[want_name]) for e in srcs]
            if DType(spec.dtype) is DType.BOOL:
                wants = [w.astype(bool) for w in wants]
            got = np.asarray(got)
            why = _difference(got, _per_image(wants, got.shape), rounded=spec.name in rounded)
            if why is not None:
                d = _departure(spec.name, g, f"output {spec.name} ({label} read-back): {why}")
                d.tensor = spec.name
                return d
    return None


COMPACT = "compact-read-back"  # the culprit when only the compact read-back's outputs depart


def culprit(d: Departure, g: Graph, fusions: Mapping[str, str], verdict: Verdict) -> str | None:
    """The fusion to drop for departure ``d``: the one that made its node, else the nearest fused
    node upstream of it whose result was not compared (a view the comparison cannot read); the
    compact read-back when only its outputs depart; None when no fusion is involved (a bug)."""
    if "(compact read-back)" in d.detail:
        return COMPACT
    by_name = {n.name: n for n in g.nodes}
    start = by_name.get(d.node)
    seen: set[int] = set()
    frontier = [start] if start is not None else []
    while frontier:
        nxt = []
        for n in frontier:
            if id(n) in seen:
                continue
            seen.add(id(n))
            if n is not start and all(o.name in verdict.cut_values for o in n.outputs):
                continue  # a given value: not computed, so not where it went wrong
            if n.op.name in fusions and (n is start or not any(o.name in verdict.compared for o in n.outputs)):
                return fusions[n.op.name]
            nxt.extend(v.producer for v in n.inputs if v is not None and v.producer is not None)
        frontier = nxt
    return None


WINDOW_CALLS = {"ttnn.conv2d": ("input_height", "input_width"), "ttnn.max_pool2d": ("input_h", "input_w"),
                "ttnn.avg_pool2d": ("input_h", "input_w")}
SMALL_MAP = (5, 7)  # unequal: a lowering that swapped height and width shows


def _windows(g: Graph, program: Program, tensors: Mapping[str, np.ndarray],
             source: Source) -> Departure | Exception | None:
    """:func:`check_windows`'s finding, or what it raised: it counts only when nothing departed before."""
    try:
        return check_windows(g, program, tensors, source)
    except Exception as exc:
        return exc


def check_windows(g: Graph, program: Program, tensors: Mapping[str, np.ndarray], source: Source | None = None,
                  seed: int = 1) -> Departure | None:
    """Each convolution or pool that is its node's whole lowering, on a seeded map of a few windows:
    the call re-sized (its height and width arguments, and only those, at the small map's) against
    the source's own steps from the node's input to its value (a Conv, its BatchNormalization and
    Relu: what a conv fusion folded), or the node's meaning where the source has no such steps.
    What the call's other arguments say (channels, kernel, stride, padding, groups, weights, the
    layout it reads and writes) is what is checked; the convolutions the full-size run cuts are
    checked here."""
    draw = TrialValues(seed)
    by_node = {n.name: n for n in g.nodes}
    calls: dict[str, list[TtOp]] = {}
    for op in flat_ops(program):
        calls.setdefault(op.source, []).append(op)
    for name, ops in calls.items():
        n = by_node.get(name)
        window = [op for op in ops if op.op in WINDOW_CALLS]
        others = [op for op in ops if op.op not in WINDOW_CALLS and op.op not in _LAYOUT_CALLS]
        if n is None or len(window) != 1 or others or n.inputs[0] is None:
            continue
        op = window[0]
        x = n.inputs[0]
        if x.type.rank != 4 or not x.type.is_static:
            continue
        nb, c, big_h, big_w = (int(d) for d in x.type.static_shape)
        k = [int(d) for d in n.attrs.get("kernel_shape", [1, 1])]
        dil = [int(d) for d in n.attrs.get("dilations", [1, 1])]
        span = [d * (kk - 1) + 1 for d, kk in zip(dil, k)]  # a dilated window's reach
        h, w = max(SMALL_MAP[0], 2 * span[0] + 1), max(SMALL_MAP[1], 2 * span[1] + 3)
        if big_h <= h or big_w <= w:
            h, w = big_h, big_w  # already small: as it is
        elif big_h == big_w:
            w = h  # a square map stays square: a size in an argument cannot say which axis it is
        sizes = {big_h: h, big_w: w}
        hk, wk = WINDOW_CALLS[op.op]
        args = {**op.args, hk: sizes.get(int(op.args[hk]), -1), wk: sizes.get(int(op.args[wk]), -1)}
        if -1 in (args[hk], args[wk]):
            return Departure(n.output.name, n.name, n.op.name,
                             f"{op.op}'s {hk}/{wk} ({op.args[hk]}, {op.args[wk]}) are not the input's {big_h}, {big_w}")
        data = draw.random((nb, c, h, w), np.float32) * np.float32(4) - np.float32(2)
        consts = {v.name: v.data for v in n.inputs if v is not None and v.is_const}
        step = Step(n.name, n.op, tuple(None if v is None else v.name for v in n.inputs), dict(n.attrs),
                    tuple(o.name for o in n.outputs))
        try:
            want = _source_window(source, x.name, n.output.name, data)
            if want is None:
                want = run([step], {x.name: data}, consts, quiet=True)[n.output.name]
        except (NodeFailed, MissingValue):
            continue  # the map is too small for this node's window: the full-size run is the check
        want = np.asarray(want)
        weights = {kw: tensors[t] for kw, t in op.weights.items()}
        try:
            got = MEANINGS[op.op]([DeviceLayout(nb, h, w, c).to_device(data)], weights, args)
            got = DeviceLayout.of(want.shape).from_device(got, want.shape)
        except (ValueError, IndexError) as exc:
            return Departure(n.output.name, n.name, n.op.name, f"{op.op} on a {h}x{w} map fails: {exc}")
        why = _difference(got, want, selecting=False)
        if why is not None:
            return Departure(n.output.name, n.name, n.op.name, f"{op.op} on a {h}x{w} map: {why}")
    return None


_LAYOUT_CALLS = {"ttnn.reshape", "ttnn.permute", "ttnn.to_layout", "ttnn.to_memory_config", "ttnn.typecast"}
_WINDOW_SOURCE_OPS = {"onnx.Conv", "onnx.MaxPool", "onnx.AveragePool", "onnx.BatchNormalization", "onnx.Relu",
                      "onnx.Add", "onnx.Mul", "onnx.Clip", "onnx.LeakyRelu", "onnx.Identity"}


def _source_window(source: Source | None, entry: str, value: str, data: np.ndarray) -> np.ndarray | None:
    """The source's own steps from ``entry`` to ``value`` on ``data``, when the source has both
    values and only window and per-element steps between them (what a conv fusion folds); else None."""
    if source is None or entry not in source.shapes or value not in source.shapes:
        return None
    steps = demanded(source.steps, [value], {entry})
    if len(steps) > 8:
        return None
    if not steps or any(st.op.name not in _WINDOW_SOURCE_OPS for st in steps):
        return None
    made = {o for st in steps for o in st.outputs}
    if any(x is not None and x != entry and x not in source.constants and x not in made
           for st in steps for x in st.inputs):
        return None  # reads another input than the entry
    return run(steps, {entry: data}, source.constants, quiet=True).get(value)
