"""Views and data movement lowered one by one: Reshape, Flatten, Squeeze, Unsqueeze, Transpose,
Slice, Gather, Concat, Split, Pad, DepthToSpace, SpaceToDepth, Expand and Tile.

They run in the plain form, in tiles (pad in row major, as ttnn.pad requires for front padding:
measured on the mock p150). A map in the conv form is taken as it is where the op keeps its
element order: a view, NCHW -> NHWC (the conv form read as ``[N, H, W, C]``), a slice or concat
along the channels.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spc.ir.graph import Node
from spc.ir.ops.infer import norm_axis
from spc.ir.ops.onnx_index import slice_params
from spc.lowering.emitter import Emitter
from spc.lowering.operands import Ins, elementwise_check, live_inputs, plain_of, scalar_of, shape_of, tensor_operand
from spc.lowering.registry import lowers
from spc.ttnn.configs import PageLayout
from spc.ttnn.layout import DeviceLayout, Form, Layout, PlainLayout


def _keeps_nhwc_order(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """A reshape between these IR shapes keeps the conv form's [N*H*W, C] element order."""
    if not (DeviceLayout.fits(a) and DeviceLayout.fits(b)):
        return False
    la, lb = DeviceLayout.of(a), DeviceLayout.of(b)
    return la.c == lb.c and (la.c == 1 or (la.n, la.h, la.w) == (lb.n, lb.h, lb.w))


def _view(em: Emitter, n: Node, ins: Ins) -> str:
    """Reshape, Flatten, Squeeze, Unsqueeze: free in the conv form when the element order holds,
    else a reshape of the plain form."""
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    a, b = shape_of(x), shape_of(n.output)
    if em.form(ins[0]) is Form.NHWC and _keeps_nhwc_order(a, b):
        out: Layout = DeviceLayout.of(b)
        return em.emit("ttnn.reshape", [ins[0]], n.output.name, out, n.name, shape=out.device_shape)
    t = em.to_plain(ins[0], x, n.name)
    return em.emit("ttnn.reshape", [t], n.output.name, plain_of(n.output), n.name,
                   shape=plain_of(n.output).device_shape)


for _name in ("onnx.Reshape", "onnx.Unsqueeze", "onnx.Squeeze", "onnx.Flatten"):
    lowers(_name, check=elementwise_check)(_view)


@lowers("onnx.Transpose", check=elementwise_check)
def _transpose(em: Emitter, n: Node, ins: Ins) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    perm = [int(p) for p in n.attrs.get("perm") or range(x.type.rank - 1, -1, -1)]
    if em.form(ins[0]) is Form.NHWC and x.type.rank == 4 and perm == [0, 2, 3, 1]:
        # NCHW -> NHWC is the conv form read as [N, H, W, C]
        return em.emit("ttnn.reshape", [ins[0]], n.output.name, plain_of(n.output), n.name,
                       shape=plain_of(n.output).device_shape)
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    return em.emit("ttnn.permute", [t], n.output.name, plain_of(n.output), n.name, dims=perm)


def _slice_bounds(n: Node) -> tuple[list[int], list[int], list[int]] | None:
    """Per-axis start, end, step of a Slice with constant parameters (None if not constant)."""
    x = n.inputs[0]
    assert x is not None
    params = []
    for v in n.inputs[1:5]:
        if v is not None and not v.is_const:
            return None
        params.append(None if v is None else np.asarray(v.data))
    while len(params) < 4:
        params.append(None)
    shape = shape_of(x)
    idx = slice_params(len(shape), *params)
    starts, ends, steps = [], [], []
    for d, sl in zip(shape, idx):
        s, e, st = sl.indices(d)
        if st < 0:
            return None
        starts.append(s)
        ends.append(max(e, s))
        steps.append(st)
    return starts, ends, steps


def _slice_check(n: Node) -> str | None:
    if "starts" in n.attrs:
        return "opset < 10 Slice stays on the host"
    bounds = _slice_bounds(n)
    if bounds is None:
        return "ttnn.slice takes constant, forward slices"
    return elementwise_check(n)


@lowers("onnx.Slice", check=_slice_check)
def _slice(em: Emitter, n: Node, ins: Ins) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    bounds = _slice_bounds(n)
    assert bounds is not None
    starts, ends, steps = bounds
    shape = shape_of(x)
    only_channels = all((s, e, st) == (0, d, 1) for i, (s, e, st, d) in enumerate(zip(starts, ends, steps, shape))
                        if i != 1)
    if em.form(ins[0]) is Form.NHWC and x.type.rank == 4 and only_channels and steps[1] == 1:
        lay = DeviceLayout.of(shape)
        out: Layout = DeviceLayout.of(shape_of(n.output))
        t = em.tiled(ins[0], n.name)
        return em.emit("ttnn.slice", [t], n.output.name, out, n.name, starts=[0, 0, 0, starts[1]],
                       ends=[1, 1, lay.n * lay.h * lay.w, ends[1]], steps=[1, 1, 1, 1])
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    return em.emit("ttnn.slice", [t], n.output.name, plain_of(n.output), n.name, starts=starts, ends=ends, steps=steps)


def _gather_check(n: Node) -> str | None:
    idx = n.inputs[1]
    if idx is None or not idx.is_const:
        return "a gather by computed indices stays on the host"
    i = np.asarray(idx.data).reshape(-1)
    if i.ndim > 1 or len(i) == 0 or (len(i) > 1 and not np.all(np.diff(i) == 1)) or idx.type.rank > 1:
        return "ttnn.slice takes a constant index or a contiguous range of them"
    return elementwise_check(n)


@lowers("onnx.Gather", check=_gather_check)
def _gather(em: Emitter, n: Node, ins: Ins) -> str:
    """A constant index (or contiguous range) along one axis: a slice, then a reshape that drops
    the axis for a scalar index."""
    x, idx = n.inputs[0], n.inputs[1]
    assert x is not None and idx is not None and ins[0] is not None
    shape = shape_of(x)
    axis = norm_axis(int(n.attrs.get("axis", 0)), len(shape))
    i = np.asarray(idx.data).reshape(-1).astype(np.int64)
    first = int(i[0]) % shape[axis]
    starts = [0] * len(shape)
    ends = list(shape)
    starts[axis], ends[axis] = first, first + len(i)
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    kept = tuple(e - s for s, e in zip(starts, ends))
    s = em.emit("ttnn.slice", [t], n.output.name + "/slice", PlainLayout(kept), n.name, starts=starts, ends=ends,
                steps=[1] * len(shape))
    return em.emit("ttnn.reshape", [s], n.output.name, plain_of(n.output), n.name,
                   shape=plain_of(n.output).device_shape)


@lowers("onnx.Concat", check=elementwise_check)
def _concat(em: Emitter, n: Node, ins: Ins) -> str:
    out = n.output
    axis = norm_axis(int(n.attrs["axis"]), out.type.rank)
    live = live_inputs(n, ins)
    nhwc = out.type.rank == 4 and axis == 1 and all(em.form(name) is Form.NHWC for _, name in live)
    parts = []
    for v, name in zip(n.inputs, ins):
        if v is None:
            continue
        if name is None:
            data = np.asarray(v.data, np.float32)
            if nhwc:
                lay = DeviceLayout.of(shape_of(v))
                parts.append(em.constant(v, lay.to_device(data), lay.device_shape, n.name))
            else:
                parts.append(em.constant(v, data, list(data.shape) or [1], n.name))
        elif nhwc:
            parts.append(em.tiled(em.interleaved(name, n.name), n.name))
        else:
            parts.append(em.tiled(em.to_plain(name, v, n.name), n.name))
    lay_out: Layout = DeviceLayout.of(shape_of(out)) if nhwc else plain_of(out)
    parts = [em.stored_as(t, em.dtypes[parts[0]], n.name) for t in parts]  # one format: the first's, as stored
    return em.emit("ttnn.concat", parts, out.name, lay_out, n.name, dim=-1 if nhwc else axis)


def _split_sizes(n: Node) -> list[int] | None:
    x = n.inputs[0]
    assert x is not None
    axis = norm_axis(int(n.attrs.get("axis", 0)), x.type.rank)
    return [int(o.type.static_shape[axis]) for o in n.outputs] if all(o.type.is_static for o in n.outputs) else None


@lowers("onnx.Split", check=elementwise_check)
def _split(em: Emitter, n: Node, ins: Ins) -> list[str]:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    shape = shape_of(x)
    axis = norm_axis(int(n.attrs.get("axis", 0)), len(shape))
    sizes = _split_sizes(n)
    assert sizes is not None
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    outs, at = [], 0
    for o, size in zip(n.outputs, sizes):
        starts, ends = [0] * len(shape), list(shape)
        starts[axis], ends[axis] = at, at + size
        outs.append(em.emit("ttnn.slice", [t], o.name, plain_of(o), n.name, starts=starts, ends=ends,
                            steps=[1] * len(shape)))
        at += size
    return outs


def _pad_params(n: Node) -> tuple[list[tuple[int, int]], float] | None:
    x = n.inputs[0]
    assert x is not None
    r = x.type.rank
    pads_v, value_v, axes_v = n.input(1), n.input(2), n.input(3)
    if pads_v is None or not pads_v.is_const or (value_v is not None and scalar_of(value_v) is None):
        return None
    if axes_v is not None and not axes_v.is_const:
        return None
    pads = [int(p) for p in np.asarray(pads_v.data).reshape(-1)]
    axes = list(range(r)) if axes_v is None else [norm_axis(int(a), r) for a in np.asarray(axes_v.data).reshape(-1)]
    k = len(axes)
    out = [(0, 0)] * r
    for j, a in enumerate(axes):
        out[a] = (pads[j], pads[j + k])
    value = scalar_of(value_v) if value_v is not None else 0.0
    return out, float(value or 0.0)


def _pad_check(n: Node) -> str | None:
    if n.attrs.get("mode", "constant") != "constant":
        return f"Pad mode={n.attrs.get('mode')} stays on the host (ttnn.pad fills a constant)"
    params = _pad_params(n)
    if params is None:
        return "ttnn.pad takes constant pads and value"
    if any(b < 0 or a < 0 for b, a in params[0]):
        return "negative pads (crops) stay on the host"
    return elementwise_check(n)


@lowers("onnx.Pad", check=_pad_check)
def _pad(em: Emitter, n: Node, ins: Ins) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    params = _pad_params(n)
    assert params is not None
    padding, value = params
    t = em.row_major(em.to_plain(ins[0], x, n.name), n.name)
    p = em.emit("ttnn.pad", [t], n.output.name + "/padded", plain_of(n.output), n.name,
                padding=[list(pair) for pair in padding], value=value)
    return em.emit("ttnn.to_layout", [p], n.output.name, plain_of(n.output), n.name, layout=PageLayout.TILE)


def _space_depth(em: Emitter, n: Node, ins: Ins, to_space: bool) -> str:
    """DepthToSpace / SpaceToDepth as reshape -> permute -> reshape in the plain form."""
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    b = int(n.attrs["blocksize"])
    nn, c, h, w = shape_of(x)
    if to_space:
        crd = n.attrs.get("mode", "DCR") == "CRD"
        six = [nn, c // (b * b), b, b, h, w] if crd else [nn, b, b, c // (b * b), h, w]
        perm = [0, 1, 4, 2, 5, 3] if crd else [0, 3, 4, 1, 5, 2]
    else:
        six, perm = [nn, c, h // b, b, w // b, b], [0, 3, 5, 1, 2, 4]
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    base = n.output.name
    t = em.emit("ttnn.reshape", [t], base + "/blocks", PlainLayout(tuple(six)), n.name, shape=six)
    moved = [six[p] for p in perm]
    t = em.emit("ttnn.permute", [t], base + "/moved", PlainLayout(tuple(moved)), n.name, dims=perm)
    return em.emit("ttnn.reshape", [t], base, plain_of(n.output), n.name, shape=plain_of(n.output).device_shape)


def _rank4_check(n: Node) -> str | None:
    x = n.inputs[0]
    if x is None or x.type.rank != 4:
        return "4-D inputs only"
    return elementwise_check(n)


lowers("onnx.DepthToSpace", check=_rank4_check)(lambda em, n, ins: _space_depth(em, n, ins, True))
lowers("onnx.SpaceToDepth", check=_rank4_check)(lambda em, n, ins: _space_depth(em, n, ins, False))


def _const_shape_check(index: int) -> Callable[[Node], str | None]:
    def check(n: Node) -> str | None:
        v = n.input(index)
        if v is None or not v.is_const:
            return "the target shape is not constant"
        return elementwise_check(n)

    return check


@lowers("onnx.Expand", check=_const_shape_check(1))
def _expand(em: Emitter, n: Node, ins: Ins) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    out = shape_of(n.output)
    t = tensor_operand(em, x, ins[0], Form.PLAIN, out, n.name)
    return em.emit("ttnn.expand", [t], n.output.name, plain_of(n.output), n.name, output_shape=list(out))


@lowers("onnx.Tile", check=_const_shape_check(1))
def _tile(em: Emitter, n: Node, ins: Ins) -> str:
    x, reps = n.inputs[0], n.inputs[1]
    assert x is not None and reps is not None and ins[0] is not None
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    return em.emit("ttnn.repeat", [t], n.output.name, plain_of(n.output), n.name,
                   repeat_dims=[int(r) for r in np.asarray(reps.data).reshape(-1)])
