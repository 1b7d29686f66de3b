"""ONNX ops that read or write by index: Slice, Gather, GatherElements, GatherND,
ScatterElements and ScatterND.

Every evaluator is vectorised numpy and returns exactly ONNX's element type and shape. Inference
returns None only where the answer depends on a value that is not known here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spc.ir.graph import Value
from spc.ir.ops import register
from spc.ir.ops.infer import const, norm_axis
from spc.ir.ops.operands import A, D, Ins, Types, _arr, _in, _ints, _type
from spc.ir.types import Dim

# conformance cases spc refuses on purpose (frontend/conformance.py): case name -> why
CONFORMANCE_EXCEPTIONS: dict[str, str] = {}


# -- slicing and gathering ------------------------------------------------------------------------
def slice_params(rank: int, starts: Any, ends: Any, axes: Any, steps: Any) -> list[slice]:
    """Python slices for ONNX Slice: python's own clamping of start/end (negative from the end, to
    [0, dim] going forward and [-1, dim-1] going backward) is exactly ONNX's."""
    starts, ends = _ints(starts), _ints(ends)
    axes = list(range(len(starts))) if axes is None else _ints(axes)
    steps = [1] * len(starts) if steps is None else _ints(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError("Slice: starts, ends, axes and steps differ in length")
    idx = [slice(None)] * rank
    seen: set[int] = set()
    for s, e, a, st in zip(starts, ends, axes, steps):
        ax = norm_axis(a, rank)
        if st == 0 or ax in seen:
            raise ValueError("Slice: a step is 0" if st == 0 else f"Slice: axis {a} repeated")
        seen.add(ax)
        idx[ax] = slice(s, e, st)
    return idx


def _slice_inputs(ins: A, attrs: D) -> tuple:
    if "starts" in attrs:  # the attribute form of opset < 10, for hand-written graphs
        return attrs["starts"], attrs["ends"], attrs.get("axes"), None
    return _in(ins, 1), _in(ins, 2), _in(ins, 3), _in(ins, 4)


def _slice_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    raw = _slice_inputs(ins, attrs)
    if any(isinstance(r, Value) and not r.is_const for r in raw) or raw[0] is None or raw[1] is None:
        return None
    params = [const(r) if isinstance(r, Value) else r for r in raw]
    shape: list[Dim] = []
    for d, sl in zip(t.shape, slice_params(t.rank, *params)):
        if isinstance(d, int):
            shape.append(len(range(d)[sl]))
        elif sl.step in (None, 1) and sl.start in (None, 0) and (sl.stop is None or sl.stop >= 2**31 - 1):
            shape.append(d)  # the whole of a symbolic dimension
        else:
            return None
    return [t.with_shape(tuple(shape))]


@register("onnx.Slice", _slice_infer, arity=(1, 5))
def _slice(ins: A, attrs: D) -> list[np.ndarray]:
    """Strided slice over the given axes (negative steps run backwards; bounds clamp)."""
    x = _arr(ins[0])
    return [x[tuple(slice_params(x.ndim, *_slice_inputs(ins, attrs)))]]


def _gather_infer(ins: Ins, attrs: D) -> Types:
    t, ind = _type(ins, 0), _type(ins, 1)
    axis = norm_axis(attrs.get("axis", 0), t.rank)
    return [t.with_shape(t.shape[:axis] + ind.shape + t.shape[axis + 1:])]


@register("onnx.Gather", _gather_infer, arity=(2, 2))
def _gather(ins: A, attrs: D) -> list[np.ndarray]:
    """Pick entries along ``axis`` by (possibly negative) indices of any shape."""
    x = _arr(ins[0])
    return [np.take(x, _arr(ins[1]).astype(np.int64, copy=False), axis=norm_axis(attrs.get("axis", 0), x.ndim))]


def _gather_elements_infer(ins: Ins, attrs: D) -> Types:
    t, ind = _type(ins, 0), _type(ins, 1)
    norm_axis(attrs.get("axis", 0), t.rank)
    return [t.with_shape(ind.shape)]


def _positive(idx: np.ndarray, dim: int) -> np.ndarray:
    """Indices in [-dim, dim) made non-negative."""
    idx = idx.astype(np.int64, copy=False)
    if idx.size == 0:
        return idx
    lo, hi = int(idx.min()), int(idx.max())
    if lo < -dim or hi >= dim:
        raise IndexError(f"index out of range: {lo}..{hi} for a dimension of {dim}")
    return np.where(idx < 0, idx + dim, idx) if lo < 0 else idx


@register("onnx.GatherElements", _gather_elements_infer, arity=(2, 2))
def _gather_elements(ins: A, attrs: D) -> list[np.ndarray]:
    """out[i][j][k] = x[idx[i][j][k]][j][k] for axis 0, and so on (indices as large as x or smaller)."""
    x = _arr(ins[0])
    axis = norm_axis(attrs.get("axis", 0), x.ndim)
    idx = _positive(_arr(ins[1]), x.shape[axis])
    if idx.ndim != x.ndim:
        raise ValueError("GatherElements: indices and data differ in rank")
    # take_along_axis broadcasts; ONNX indexes the other axes by position, so cut x to idx's extent
    cut = tuple(slice(None) if a == axis else slice(0, n) for a, n in enumerate(idx.shape))
    return [np.take_along_axis(x[cut], idx, axis=axis)]


def _gather_nd_infer(ins: Ins, attrs: D) -> Types:
    t, ind = _type(ins, 0), _type(ins, 1)
    b, k = int(attrs.get("batch_dims", 0)), ind.shape[-1] if ind.rank else None
    if not isinstance(k, int):
        return None
    return [t.with_shape(ind.shape[:-1] + t.shape[b + k:])]


def _nd_offsets(idx: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    """Row-major offsets into ``dims`` of ND indices (last axis: one index per dimension, negative
    from the end); one flat index array is several times faster to gather and scatter with than
    a tuple of them."""
    if not dims:
        return np.zeros(idx.shape[:-1], np.int64)
    cols = np.ascontiguousarray(np.moveaxis(idx, -1, 0))  # one copy makes every later pass contiguous
    return np.ravel_multi_index(tuple(_positive(c, d) for c, d in zip(cols, dims)), dims)


@register("onnx.GatherND", _gather_nd_infer, arity=(2, 2))
def _gather_nd(ins: A, attrs: D) -> list[np.ndarray]:
    """out[b..., i...] = x[b..., idx[b..., i..., :]...]: slices at ND indices, after batch_dims shared axes."""
    x, idx = _arr(ins[0]), _arr(ins[1]).astype(np.int64, copy=False)
    b, k = int(attrs.get("batch_dims", 0)), idx.shape[-1]
    if b + k > x.ndim or idx.shape[:b] != x.shape[:b]:
        raise ValueError(f"GatherND: indices {idx.shape} do not fit data {x.shape} with batch_dims={b}")
    nb = int(np.prod(x.shape[:b], dtype=np.int64))
    flat = idx.reshape(nb, int(np.prod(idx.shape[b:-1], dtype=np.int64)), k)
    # the batch axes merge into one: each row is offset by its own batch's block
    block = int(np.prod(x.shape[b:b + k], dtype=np.int64))
    offsets = _nd_offsets(flat, x.shape[b:b + k]) + np.arange(nb).reshape(-1, 1) * block
    rest = x.shape[b + k:]
    return [x.reshape((-1,) + rest)[offsets].reshape(idx.shape[:-1] + rest)]


# -- scattering ---------------------------------------------------------------------------------
_REDUCE: dict[str, np.ufunc] = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    reduction = attrs.get("reduction", "none")
    allowed = ["none"] + (["add", "mul"] if since >= 16 else []) + (["max", "min"] if since >= 18 else [])
    if reduction not in allowed:
        raise ValueError(f"reduction={reduction!r} is not in this schema's {allowed}")
    return {**attrs, "reduction": reduction}


def _scatter(data: np.ndarray, offsets: np.ndarray, rows: np.ndarray, lead: int, reduction: str) -> np.ndarray:
    """data with ``rows`` written (or reduced) at flat ``offsets`` over its first ``lead`` axes."""
    out = data.copy()
    view = out.reshape((-1,) + data.shape[lead:])
    rows = rows.astype(data.dtype, copy=False)
    if reduction == "none":
        view[offsets] = rows  # duplicate indices: the last update wins (ONNX leaves it undefined)
    elif reduction in _REDUCE:
        _REDUCE[reduction].at(view, offsets, rows)  # unbuffered: every duplicate takes part
    else:
        raise ValueError(f"unknown reduction {reduction!r}")
    return out


@register("onnx.ScatterElements", lambda ins, attrs: [_type(ins, 0)], arity=(3, 3), canonicalize=_scatter_canon)
def _scatter_elements(ins: A, attrs: D) -> list[np.ndarray]:
    """GatherElements' inverse: data with updates written (or reduced) at idx along ``axis``."""
    data, upd = _arr(ins[0]), _arr(ins[2])
    axis = norm_axis(attrs.get("axis", 0), data.ndim)
    idx = _positive(_arr(ins[1]), data.shape[axis])
    if idx.shape != upd.shape or idx.ndim != data.ndim or any(
            i > d for a, (i, d) in enumerate(zip(idx.shape, data.shape)) if a != axis):
        raise ValueError(f"ScatterElements: indices {idx.shape}, updates {upd.shape}, data {data.shape}")
    if attrs.get("reduction", "none") == "none":
        # numpy's own scatter along an axis (duplicates: the last in index order wins, as below)
        out = data.copy()
        np.put_along_axis(out, idx, upd.astype(data.dtype, copy=False), axis)
        return [out]
    # every other axis indexes itself: broadcast aranges, the axis itself from idx
    r = idx.ndim
    key: list[np.ndarray] = [np.arange(n).reshape((-1,) + (1,) * (r - 1 - i)) for i, n in enumerate(idx.shape)]
    key[axis] = idx
    offsets = np.ravel_multi_index(tuple(key), data.shape).reshape(-1)
    return [_scatter(data, offsets, upd.reshape(-1), data.ndim, attrs.get("reduction", "none"))]


@register("onnx.ScatterND", lambda ins, attrs: [_type(ins, 0)], arity=(3, 3), canonicalize=_scatter_canon)
def _scatter_nd(ins: A, attrs: D) -> list[np.ndarray]:
    """GatherND's inverse: data with update slices written (or reduced) at ND indices."""
    data, idx, upd = _arr(ins[0]), _arr(ins[1]).astype(np.int64, copy=False), _arr(ins[2])
    k = idx.shape[-1]
    if k > data.ndim or upd.shape != idx.shape[:-1] + data.shape[k:]:
        raise ValueError(f"ScatterND: indices {idx.shape}, updates {upd.shape}, data {data.shape}")
    flat = idx.reshape(-1, k)
    offsets = _nd_offsets(flat, data.shape[:k])  # k = 0: every row replaces the whole tensor
    rows = upd.reshape((flat.shape[0],) + data.shape[k:])
    return [_scatter(data, offsets, rows, k, attrs.get("reduction", "none"))]
