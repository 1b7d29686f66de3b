"""Recognise a multi-op computation by what it computes, not by how it is spelled.

Exporters spell the same algorithm many ways (Unsqueeze or Reshape around a pool, Where or Mul
for a mask, ReduceL2 or Pow/ReduceSum/Sqrt for a norm). A fusion pass here:

1. picks an *entry* value (e.g. a 4-D map with 65 channels),
2. grows the *region* of nodes reachable from it through an allowed set of ops (plus
   subgraphs that depend only on constants),
3. evaluates the region on trial inputs chosen to expose the differences that matter (ties,
   plateaus, tiny norms), recording every value, and
4. accepts an *exit* value whose trial results equal the reference semantics of the fused op,
   provided the region up to it is closed: nothing inside it is used from outside.

The trials are small: the region is re-sized for a map of a few windows (:func:`small_probe`
re-sizes its shape constants and uniform map-sized constants), so a region that cannot match
never runs at the model's size. A match found small holds at the model's size when the small run
is the model's run re-sized (:func:`faithful`: every value has the re-sized shape, and no node
mixes or picks positions along a re-sized axis) and a fresh trial at a second small size agrees
(:func:`confirm_small`); only where that cannot be shown does the match run once at the model's
size, on its own nodes (:func:`confirm`). A region that does not run small is tried at full size.

Trial inputs are a test, not a proof; the trials are chosen per op to break the plausible
near-misses, and each pass's unit tests include such near-misses as negative cases.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from msgspec import Struct, field

from spc.ir import ops
from spc.ir.graph import Graph, Node, Value
from spc.ir.interpreter import MissingValue, NodeFailed, run_nodes
from spc.ir.ops.infer import axes_from, norm_axis
from spc.ir.ops.onnx_index import _slice_inputs, slice_params


class Region(Struct):
    """A candidate subgraph grown from an entry value, in topological order."""

    entry: Value
    nodes: list[Node]  # topological order; includes constant-only helper nodes

    def values(self) -> list[Value]:
        return [o for n in self.nodes for o in n.outputs]


def grow_region(g: Graph, entry: Value, allowed: set[str]) -> Region:
    """Nodes reachable from ``entry`` through ``allowed`` ops, whose other inputs are constants,
    region values, or outputs of constant-only subgraphs."""
    inside: set[int] = set()
    order = {id(n): i for i, n in enumerate(g.nodes)}
    reach = {id(entry)}
    const_only: set[int] = set()
    for n in g.nodes:
        ins = [v for v in n.inputs if v is not None]
        if all(v.is_const or id(v) in const_only for v in ins) and ins and not n.op.data_dependent:
            const_only.update(id(o) for o in n.outputs)
    chosen: list[Node] = []
    for n in g.nodes:
        if n.op.name not in allowed or n.op.data_dependent:
            continue
        ins = [v for v in n.inputs if v is not None]
        if not any(id(v) in reach for v in ins):
            continue
        if not all(v.is_const or id(v) in reach or id(v) in const_only for v in ins):
            continue
        chosen.append(n)
        inside.add(id(n))
        reach.update(id(o) for o in n.outputs)
    # constant-only helpers that feed the region (e.g. an unfolded zeros_like), with the
    # constant-only nodes they read in turn (a Cast of a Not of a map-sized mask too large to fold)
    helpers: dict[int, Node] = {}
    stack = [n for n in g.nodes if n.outputs and id(n.outputs[0]) in const_only
             and any(id(u) in inside for o in n.outputs for u, _ in o.uses)]
    while stack:
        h = stack.pop()
        if id(h) in helpers or id(h) in inside:
            continue
        helpers[id(h)] = h
        stack.extend(v.producer for v in h.inputs if v is not None and v.producer is not None
                     and id(v) in const_only)
    nodes = sorted(chosen + list(helpers.values()), key=lambda n: order[id(n)])
    return Region(entry, nodes)


def evaluate(region: Region, entry_data: np.ndarray, constants: dict[int, np.ndarray] | None = None
             ) -> dict[int, np.ndarray]:
    """Run the region's nodes on ``entry_data`` (ir/interpreter.py), returning every value by id;
    ``constants`` replaces some of the region's constants (:func:`small_probe`)."""
    return run_nodes(region.nodes, {id(region.entry): entry_data}, constants=constants)


# ops whose integer input at this index is a shape (sizes, not positions or axes)
_SHAPE_INPUTS = {"onnx.Expand": 1, "onnx.Reshape": 1, "onnx.ConstantOfShape": 0, "onnx.Tile": 1}


class SmallProbe(Struct):
    """The region re-sized for an entry whose last two dims are ``hw`` instead of the model's:
    its shape constants and its uniform spatial constants (a folded zeros_like) re-sized. A match
    found on small trials is a candidate only, until :func:`confirm_small` (or, failing that,
    :func:`confirm` at the model's size) confirms it. ``sizes`` maps the model's sizes (the map's
    height, width, their product, times each scale) to the probe's."""

    shape: tuple[int, ...]
    constants: dict[int, np.ndarray]
    sizes: dict[int, int] = field(default_factory=dict)

    def resized(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A static shape at the model's size as it is at the probe's."""
        return tuple(self.sizes.get(int(d), int(d)) for d in shape)


def small_probe(region: Region, hw: tuple[int, int], scales: tuple[int, ...] = ()) -> SmallProbe | None:
    """A :class:`SmallProbe` for ``region``, or None when its constants cannot follow a smaller
    entry: a non-uniform spatial constant, or the model's map is already that small. The region
    may still not run at the small size (a size in a constant spc does not recognise): the
    caller then probes at full size. ``scales``: factors the region multiplies the map's sizes by
    (a depth-to-space by 8 reshapes 60 x 80 to 480 x 640), re-sized alike."""
    full = tuple(int(d) for d in region.entry.type.static_shape)
    if len(full) < 2 or full[-2] <= hw[0] or full[-1] <= hw[1]:
        return None
    (big_h, big_w), (h, w) = full[-2:], hw
    if big_h == big_w:  # a size in a shape constant does not say which axis it is: keep the map square
        w = h
    sizes = {}
    for f in (1, *scales):
        sizes.update({big_h * f: h * f, big_w * f: w * f, big_h * big_w * f * f: h * w * f * f})
    constants: dict[int, np.ndarray] = {}
    for n in region.nodes:
        for i, v in enumerate(n.inputs):
            if v is None or not v.is_const or id(v) in constants:
                continue
            data = np.asarray(v.data)
            if _SHAPE_INPUTS.get(n.op.name) == i and data.dtype.kind in "iu" and data.ndim == 1:
                constants[id(v)] = np.array([sizes.get(int(d), int(d)) for d in data], data.dtype)
            elif data.ndim >= 2 and data.shape[-2:] in ((big_h, big_w), (1, big_w), (big_h, 1)):
                flat = data.reshape(-1)
                if flat.size and not np.all(flat == flat[0]):
                    return None  # a map-sized constant with content: not re-sizable
                shape = data.shape[:-2] + tuple(sizes[d] if d != 1 else 1 for d in data.shape[-2:])
                constants[id(v)] = np.full(shape, flat[0] if flat.size else 0, data.dtype)
    return SmallProbe(full[:-2] + (h, w), constants, sizes)


def evaluate_small(region: Region, probe: SmallProbe, trials: list[np.ndarray]) -> list[dict[int, np.ndarray]] | None:
    """The region on small trials, or None when it does not run at that size."""
    try:
        with np.errstate(all="ignore"):
            return [evaluate(region, t, probe.constants) for t in trials]
    except (NodeFailed, MissingValue, ValueError, IndexError, TypeError):
        return None


def _equal(got: np.ndarray | None, want: np.ndarray, rtol: float, atol: float) -> bool:
    if got is None or got.size != want.size:
        return False
    got = got.reshape(want.shape)
    return bool(np.array_equal(got, want) if rtol == 0 and atol == 0 else np.allclose(got, want, rtol=rtol, atol=atol))


def confirm(region: Region, nodes: list[Node], exit: Value, entry_data: np.ndarray, want: np.ndarray,
            rtol: float = 0.0, atol: float = 0.0) -> bool:
    """Whether ``exit`` equals ``want`` when ``nodes`` (the match's closed prefix) run at the
    model's own size on ``entry_data``: the confirmation where :func:`confirm_small` cannot tell."""
    return _equal(run_nodes(nodes, {id(region.entry): entry_data}).get(id(exit)), want, rtol, atol)


# ops whose every output position reads the same neighbourhood of its inputs at any map size:
# element-wise ops, views (a re-sized shape is checked by :func:`faithful`), and fixed windows
_LOCAL_OPS = {f"onnx.{op}" for op in (
    "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Exp", "Log", "Abs", "Neg", "Max", "Min", "Clip",
    "Sum", "Mean", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Where", "Not", "And", "Or", "Xor",
    "Cast", "CastLike", "Identity", "Relu", "Sigmoid", "Tanh", "Sign", "Floor", "Ceil", "Round", "Erf", "IsNaN",
    "IsInf", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Transpose", "Expand", "Tile", "DepthToSpace",
    "SpaceToDepth", "ConstantOfShape", "MaxPool")}


def _mixed_axes(n: Node, rank: int) -> list[int] | None:
    """The axes of ``n``'s first input along which an output position reads other positions, or
    picks some (a reduction, a softmax, a gather, split or concatenation); None when unknown."""
    name = n.op.name
    if name in _LOCAL_OPS:
        return []
    if name.startswith("onnx.Reduce"):
        axes = axes_from(n.inputs, n.attrs, 1)
        if axes is None:
            return None
        if not axes:
            return [] if n.attrs.get("noop_with_empty_axes", 0) else list(range(rank))
        return [norm_axis(a, rank) for a in axes]
    if name in ("onnx.Softmax", "onnx.LogSoftmax", "onnx.Hardmax"):
        axis = norm_axis(int(n.attrs.get("axis", -1)), rank)
        return list(range(axis, rank)) if n.attrs.get("coerce_2d") else [axis]
    if name in ("onnx.Gather", "onnx.Split", "onnx.Concat"):
        return [norm_axis(int(n.attrs.get("axis", 0)), rank)]
    return None


def _whole_slices(n: Node, full: tuple[int, ...], small: tuple[int, ...]) -> bool:
    """Whether a Slice takes every axis that differs between ``full`` and ``small`` whole, at both."""
    raw = _slice_inputs(n.inputs, n.attrs)
    if any(isinstance(r, Value) and not r.is_const for r in raw) or raw[0] is None or raw[1] is None:
        return False
    params = [np.asarray(r.data) if isinstance(r, Value) else r for r in raw]
    try:
        cuts = slice_params(len(full), *params)
    except ValueError:
        return False
    return all(len(range(f)[c]) == f and len(range(s)[c]) == s and (c.step or 1) == 1
               for f, s, c in zip(full, small, cuts) if f != s)


def faithful(probe: SmallProbe, nodes: list[Node], env: dict[int, np.ndarray]) -> str | None:
    """None when ``env``, a run of ``nodes`` at ``probe``'s size, is the model's run re-sized;
    else why not. Two things make it so:

    1. every value the nodes compute has the shape its static shape re-sizes to
       (:meth:`SmallProbe.resized`): a size the probe did not follow (a Slice ending at 479, a
       Range of 480, a Tile's product) shows here, as does a channel count equal to a map size;
    2. no node mixes or picks positions along a re-sized axis (:func:`_mixed_axes`: a reduction,
       softmax, gather, split or concatenation over the map, a Slice that is not the whole axis):
       every other op is element-wise, a view or a fixed window, so each output position reads
       the same neighbourhood, with the same constants, at both sizes.

    The same function at both sizes then gives the same answer on maps alike; the fresh trial of
    :func:`confirm_small` checks it on one."""
    for n in nodes:
        for o in n.outputs:
            got = env.get(id(o))
            if got is None or not o.type.is_static:
                return f"%{o.name} has no static shape or no value"
            if got.shape != probe.resized(o.type.static_shape):
                return (f"%{o.name} ({n.op.name}) is {list(got.shape)} on the small map, not "
                        f"{list(probe.resized(o.type.static_shape))}")
        x = n.inputs[0] if n.inputs else None
        if x is None or not x.type.is_static:
            return f"{n.name} ({n.op.name}) reads no static first input"
        full = tuple(int(d) for d in x.type.static_shape)
        data = env.get(id(x), probe.constants.get(id(x), x.data if x.is_const else None))
        if data is None:
            return f"{n.name} ({n.op.name}): no value for %{x.name}"
        small = tuple(np.shape(data))
        if full == small:
            continue
        if n.op.name == "onnx.Slice":
            if not _whole_slices(n, full, small):
                return f"{n.name} (onnx.Slice) cuts a re-sized axis"
            continue
        axes = _mixed_axes(n, len(full))
        if axes is None or any(full[a] != small[a] for a in axes):
            return f"{n.name} ({n.op.name}) reads along a re-sized axis"
    return None


def confirm_small(region: Region, nodes: list[Node], exit: Value, probe: SmallProbe, env: dict[int, np.ndarray],
                  second: SmallProbe | None, trial: Callable[[tuple[int, ...]], tuple[np.ndarray, np.ndarray]],
                  rtol: float = 0.0, atol: float = 0.0) -> bool:
    """Whether a match found on small trials holds at the model's size, shown without running it
    there: the search's run ``env`` is :func:`faithful`, and so is a run of the match's ``nodes``
    on a fresh trial at a ``second`` small size (``trial(shape)`` gives the map and the wanted
    value), where ``exit`` equals the wanted value. False when that cannot be shown: the caller
    then confirms at the model's size (:func:`confirm`)."""
    if second is None or faithful(probe, nodes, env) is not None:
        return False
    data, want = trial(second.shape)
    try:
        with np.errstate(all="ignore"):
            got = run_nodes(nodes, {id(region.entry): data}, constants=second.constants)
    except (NodeFailed, MissingValue, ValueError, IndexError, TypeError):
        return False
    return faithful(second, nodes, got) is None and _equal(got.get(id(exit)), want, rtol, atol)


def any_equal(region: Region, env: dict[int, np.ndarray], wants: list[np.ndarray]) -> bool:
    """Whether some region value equals one of ``wants`` exactly on this trial: a cheap test that
    decides whether the region is worth the other trials."""
    for v in region.values():
        got = env.get(id(v))
        if got is None:
            continue
        for want in wants:
            if got.size == want.size and np.array_equal(got.reshape(want.shape), want):
                return True
    return False


def closed_prefix(region: Region, exit: Value, g: Graph) -> list[Node] | None:
    """The region's nodes that ``exit`` depends on, if no other value of theirs escapes."""
    members = {id(n): n for n in region.nodes}
    needed: dict[int, Node] = {}
    stack = [exit.producer]
    while stack:
        n = stack.pop()
        if n is None or id(n) in needed or id(n) not in members:
            continue
        needed[id(n)] = n
        stack.extend(v.producer for v in n.inputs if v is not None)
    for n in needed.values():
        for o in n.outputs:
            if o is exit:
                continue
            if o in g.outputs or any(id(u) not in needed for u, _ in o.uses):
                return None
    return [n for n in region.nodes if id(n) in needed]


def find_exit(g: Graph, region: Region, envs: list[dict[int, np.ndarray]], wants: list[np.ndarray],
              last: bool, rtol: float = 0.0, atol: float = 0.0, accept: Callable[[Value], bool] = lambda v: True,
              misses: list[str] | None = None) -> tuple[Value, list[Node]] | None:
    """The first (or last) closed region value equal to ``wants[i]`` on trial ``i``, for all i.

    ``envs`` are the region's values on the trials (:func:`evaluate`). A candidate of another
    shape but the same element order (a view) also matches, unless ``accept`` rejects it.
    ``misses`` collects why nothing did: the nearest value and how far it was, or the equal value
    whose other results escape the region.
    """
    candidates = [v for v in region.values() if v.type.is_static and accept(v)]
    if last:
        candidates.reverse()
    nearest: tuple[float, Value, int] | None = None
    for cand in candidates:
        ok = True
        for i, (env, want) in enumerate(zip(envs, wants)):
            got = env.get(id(cand))
            if got is None or got.size != want.size:
                ok = False
                break
            got = got.reshape(want.shape)
            exact = rtol == 0 and atol == 0
            if not (np.array_equal(got, want) if exact else np.allclose(got, want, rtol=rtol, atol=atol)):
                if misses is not None:
                    with np.errstate(all="ignore"):
                        diff = float(np.nanmax(np.abs(got.astype(np.float64) - want))) if got.size else 0.0
                    if nearest is None or diff < nearest[0]:
                        nearest = (diff, cand, i)
                ok = False
                break
        if not ok:
            continue
        nodes = closed_prefix(region, cand, g)
        if nodes:
            return cand, nodes
        if misses is not None:
            misses.append(f"%{cand.name} ({_maker(cand)}) is equal, but other results of the nodes computing it are "
                          "used outside the region")
    if misses is not None:
        sized = sum(1 for c in candidates if all(env.get(id(c)) is not None and env[id(c)].size == w.size
                                                 for env, w in zip(envs, wants)))
        misses.append(f"{len(candidates)} region value(s) compared, {sized} of the wanted size"
                      + (f"; nearest %{nearest[1].name} ({_maker(nearest[1])}): max |diff| {nearest[0]:.3g} on trial "
                         f"{nearest[2]}" if nearest else ""))
    return None


def _maker(v: Value) -> str:
    return v.producer.op.name if v.producer is not None else "input"


def describe_region(region: Region) -> str:
    counts: dict[str, int] = {}
    for n in region.nodes:
        counts[n.op.name] = counts.get(n.op.name, 0) + 1
    ops = ", ".join(f"{op} x{k}" if k > 1 else op for op, k in counts.items())
    return f"region: {len(region.nodes)} node(s) from %{region.entry.name} ({ops or 'none'})"


def replace_region(g: Graph, nodes: list[Node], exit: Value, new: Value) -> None:
    """Route users of ``exit`` to ``new`` and delete the region's nodes."""
    g.replace_all_uses(exit, new)
    for n in reversed(nodes):
        if all(not o.uses and o not in g.outputs for o in n.outputs):
            g.remove_node(n)


def fuse_region(g: Graph, nodes: list[Node], exit: Value, op_name: str, inputs: list[Value],
                attrs: dict, name: str) -> Node:
    """Replace the region computing ``exit`` by one ``op_name`` node that keeps ``exit``'s name
    (so the value can still be found in the source ONNX by that name). An ``exit`` of another
    static shape than the node's result (the same elements: the recogniser accepted it so) is a
    view of it, an onnx.Reshape that takes the name."""
    node = g.make_node(ops.get(op_name), inputs, attrs, name=name, out_names=[exit.name + "_fused"],
                       before=nodes[0])
    source_name = exit.name
    out = node.output
    if out.type.shape != exit.type.shape:
        target = g.add_const(g.fresh_name(name + "_shape"), np.array(exit.type.static_shape, np.int64))
        out = g.make_node(ops.get("onnx.Reshape"), [out, target], name=name + "_view",
                          out_names=[exit.name + "_view"], before=nodes[0]).output
    replace_region(g, nodes, exit, out)
    if out not in g.outputs:
        g.rename(out, source_name)
    g.toposort()
    return node
