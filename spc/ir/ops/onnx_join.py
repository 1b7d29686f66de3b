"""ONNX ops that join, split, repeat or pad tensors: Concat, Split, Expand, Tile and Pad.

Every evaluator is vectorised numpy and returns exactly ONNX's element type and shape. Inference
returns None only where the answer depends on a value that is not known here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spc.ir.ops import register
from spc.ir.ops.infer import broadcast, const, norm_axis
from spc.ir.ops.operands import A, D, Ins, Types, _arr, _in, _ints, _scalar, _type
from spc.ir.types import Dim

# conformance cases spc refuses on purpose (frontend/conformance.py): case name -> why
CONFORMANCE_EXCEPTIONS: dict[str, str] = {}


# -- joining, splitting, repeating ------------------------------------------------------------
def _concat_infer(ins: Ins, attrs: D) -> Types:
    vals = [v for v in ins if v is not None]
    if not vals:
        raise ValueError("Concat without inputs")
    t = vals[0].type
    axis = norm_axis(attrs["axis"], t.rank)
    if any(v.type.rank != t.rank for v in vals):
        raise ValueError("Concat: inputs differ in rank")
    dims = [v.type.shape[axis] for v in vals]
    nonempty = [d for d in dims if d != 0]
    if all(isinstance(d, int) for d in dims):
        total: Dim = sum(int(d) for d in dims)
    elif len(nonempty) == 1:
        total = nonempty[0]  # a symbolic part joined with empty ones
    else:
        return None
    # other dimensions: a number known for any input is known for the result
    shape = [next((v.type.shape[i] for v in vals if isinstance(v.type.shape[i], int)), t.shape[i])
             for i in range(t.rank)]
    shape[axis] = total
    return [t.with_shape(tuple(shape))]


@register("onnx.Concat", _concat_infer, arity=(1, 99))
def _concat(ins: A, attrs: D) -> list[np.ndarray]:
    """Join along ``axis``."""
    xs = [_arr(x) for x in ins if x is not None]
    out = np.concatenate(xs, axis=norm_axis(attrs["axis"], xs[0].ndim))
    return [out.astype(xs[0].dtype, copy=False)]


def _split_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    # without explicit sizes, Split-11/13 cut into n_outputs equal parts, Split-18 says num_outputs
    if "split" not in attrs and "num_outputs" not in attrs:
        attrs = {**attrs, "num_outputs": n_out}
    elif "num_outputs" in attrs and int(attrs["num_outputs"]) != n_out:
        raise ValueError(f"num_outputs={attrs['num_outputs']} but the node has {n_out} outputs")
    return attrs


def _split_sizes(dim: int, sizes: Any, attrs: D) -> list[int]:
    if sizes is None:
        sizes = attrs.get("split")
    if sizes is not None:
        out = _ints(sizes)
        if sum(out) != dim or min(out, default=0) < 0:
            raise ValueError(f"Split: sizes {out} do not add up to {dim}")
        return out
    if "num_outputs" not in attrs:
        raise ValueError("Split: no split sizes and no num_outputs")
    n = int(attrs["num_outputs"])
    # ceil-sized parts, the last one smaller (equal when dim divides, as Split-11/13 require)
    step = -(-dim // n)
    return [max(0, min(step, dim - i * step)) for i in range(n)]


def _split_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    axis = norm_axis(attrs.get("axis", 0), t.rank)
    sv = _in(ins, 1)
    sizes = const(sv) if sv is not None else None
    if sv is not None and sizes is None:
        return None
    d = t.shape[axis]
    if not isinstance(d, int):
        if sizes is None and attrs.get("split") is None and int(attrs.get("num_outputs", 0)) == 1:
            return [t]
        return None
    return [t.with_shape(t.shape[:axis] + (s,) + t.shape[axis + 1:]) for s in _split_sizes(d, sizes, attrs)]


@register("onnx.Split", _split_infer, arity=(1, 2), canonicalize=_split_canon)
def _split(ins: A, attrs: D) -> list[np.ndarray]:
    """Cut along ``axis`` by the ``split`` sizes (input or attribute), else into num_outputs parts."""
    x = _arr(ins[0])
    axis = norm_axis(attrs.get("axis", 0), x.ndim)
    sizes = _split_sizes(x.shape[axis], _in(ins, 1), attrs)
    return list(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def _expand_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    shape = const(_in(ins, 1))
    if shape is None:
        return None
    return [t.with_shape(broadcast(t.shape, tuple(_ints(shape))))]


@register("onnx.Expand", _expand_infer, arity=(2, 2))
def _expand(ins: A, attrs: D) -> list[np.ndarray]:
    """Broadcast to the shape (bidirectionally: a 1 in the shape keeps the input's dimension)."""
    x = _arr(ins[0])
    shape = np.broadcast_shapes(x.shape, tuple(_ints(ins[1])))
    return [np.array(np.broadcast_to(x, shape))]


def _tile_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    reps = const(_in(ins, 1))
    if reps is None:
        return None
    r = _ints(reps)
    if len(r) != t.rank:
        raise ValueError(f"Tile: {len(r)} repeats for rank {t.rank}")
    if any(isinstance(d, str) and n != 1 for d, n in zip(t.shape, r)):
        return None
    return [t.with_shape(tuple(d * n if isinstance(d, int) else d for d, n in zip(t.shape, r)))]


@register("onnx.Tile", _tile_infer, arity=(2, 2))
def _tile(ins: A, attrs: D) -> list[np.ndarray]:
    """Repeat the whole tensor ``repeats[i]`` times along axis i."""
    x = _arr(ins[0])
    reps = _ints(ins[1])
    if len(reps) != x.ndim:
        raise ValueError(f"Tile: {len(reps)} repeats for rank {x.ndim}")
    return [np.tile(x, reps)]


# -- padding ----------------------------------------------------------------------------------
_PAD_MODES = ("constant", "reflect", "edge", "wrap")  # numpy's np.pad modes of the same names


def _pad_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    mode = attrs.get("mode", "constant")
    if mode not in _PAD_MODES or (mode == "wrap" and since < 19):
        raise ValueError(f"Pad mode {mode!r} is not in Pad-{since}")
    return {**attrs, "mode": mode}


def _pad_widths(rank: int, pads: Any, axes: Any) -> list[tuple[int, int]]:
    p = _ints(pads)
    ax = list(range(rank)) if axes is None else [norm_axis(a, rank) for a in _ints(axes)]
    if len(p) != 2 * len(ax):
        raise ValueError(f"Pad: {len(p)} pads for {len(ax)} axes")
    widths = [(0, 0)] * rank
    for i, a in enumerate(ax):
        widths[a] = (p[i], p[i + len(ax)])
    return widths


def _pad_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    pads, axes = const(_in(ins, 1)), const(_in(ins, 3))
    if pads is None or (_in(ins, 3) is not None and axes is None):
        return None
    shape: list[Dim] = []
    for d, (b, e) in zip(t.shape, _pad_widths(t.rank, pads, axes)):
        if isinstance(d, int):
            if d + b + e < 0:
                raise ValueError(f"Pad: pads {b}, {e} remove more than the dimension {d}")
            shape.append(d + b + e)
        elif b == e == 0:
            shape.append(d)
        else:
            return None
    return [t.with_shape(tuple(shape))]


@register("onnx.Pad", _pad_infer, arity=(1, 4), canonicalize=_pad_canon)
def _pad(ins: A, attrs: D) -> list[np.ndarray]:
    """Pad (negative: crop) each axis, by a constant, reflection, the edge value or wrapping around."""
    x = _arr(ins[0])
    widths = _pad_widths(x.ndim, ins[1], _in(ins, 3))
    # crop first, then pad what is left (onnxruntime bounds a reflection by the cropped size too)
    x = x[tuple(slice(max(-b, 0), n - max(-e, 0)) for n, (b, e) in zip(x.shape, widths))]
    widths = [(max(b, 0), max(e, 0)) for b, e in widths]
    mode = attrs.get("mode", "constant")
    if mode not in _PAD_MODES:
        raise ValueError(f"Pad mode {mode!r}")
    if mode == "constant":
        value = _in(ins, 2)
        fill = x.dtype.type(0 if value is None or _arr(value).size == 0 else _scalar(value))
        return [np.pad(x, widths, mode="constant", constant_values=fill)]
    if x.size == 0 and any(w != (0, 0) for w in widths):
        raise ValueError(f"Pad mode {mode} of an empty tensor")
    return [np.pad(x, widths, mode=mode)]
