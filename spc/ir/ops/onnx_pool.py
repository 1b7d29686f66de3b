"""ONNX pooling: MaxPool, AveragePool, LpPool, their Global forms, and MaxUnpool.

N-D on (N, C, D1..Dn) inputs, with the window geometry of onnx_conv.py. The evaluators also run
on full-size feature maps (fusion checks, host stages), so they reduce per kernel tap on whole
arrays: separable running reductions, one spatial axis at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from spc.ir.graph import Value
from spc.ir.ops import register
from spc.ir.ops.infer import const
from spc.ir.ops.onnx_conv import _canonical_window, _Window, _window
from spc.ir.ops.operands import A, D, Types, _attr_ints, _bshape, _in, _opt, _static, _work, _x
from spc.ir.types import Dim, DType, TensorType

# conformance cases spc refuses on purpose (frontend/conformance.py): case name -> why
CONFORMANCE_EXCEPTIONS: dict[str, str] = {}


def _pool_infer(ins: list[Value | None], attrs: D) -> Types:
    x = _x(ins)
    k = attrs["kernel_shape"]
    if x.type.rank != len(k) + 2:
        raise ValueError(f"a {len(k)}-D kernel needs a rank-{len(k) + 2} input, got {x.type}")
    sp = _static(x.type.shape[2:])
    if sp is None:
        return None
    win = _window(sp, k, attrs, bool(attrs.get("ceil_mode", 0)))
    shape = (*x.type.shape[:2], *win.out)
    types = [x.type.with_shape(shape)]
    if attrs.get("with_indices"):
        types.append(TensorType(DType.I64, shape))
    return types


def _pool_pad(x: np.ndarray, win: _Window, fill: Any) -> np.ndarray:
    """``x`` padded so that every window of ``win`` (on its trailing axes) lies inside."""
    nd = len(win.out)
    lead = x.ndim - nd
    need = [(o - 1) * s + e - (n + p)
            for o, s, e, n, p in zip(win.out, win.strides, win.extent, x.shape[lead:], win.lo)]
    widths = [(0, 0)] * lead + [(p, max(0, q)) for p, q in zip(win.lo, need)]
    return np.pad(x, widths, constant_values=fill) if any(a or b for a, b in widths) else x


def _tap(a: np.ndarray, axis: int, j: int, win: _Window, i: int) -> np.ndarray:
    """The j-th tap of every window along ``axis`` (spatial axis i of ``win``)."""
    sel = [slice(None)] * a.ndim
    start = j * win.dil[i]
    sel[axis] = slice(start, start + (win.out[i] - 1) * win.strides[i] + 1, win.strides[i])
    return a[tuple(sel)]


def _separable(x: np.ndarray, win: _Window, op: Callable[..., Any]) -> np.ndarray:
    """Reduce every window with the binary ufunc ``op``, one spatial axis at a time (a k1 x k2
    window costs k1 + k2 operations per output, not k1 * k2), as running passes over whole taps."""
    nd = len(win.out)
    y = x
    for i in reversed(range(nd)):
        axis = x.ndim - nd + i
        out = _tap(y, axis, 0, win, i).copy()
        for j in range(1, win.kernel[i]):
            op(out, _tap(y, axis, j, win, i), out=out)
        y = out
    return y


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else (False if dtype.kind == "b" else np.iinfo(dtype).min)


def _max_pool(x: np.ndarray, win: _Window) -> np.ndarray:
    return _separable(_pool_pad(x, win, _lowest(x.dtype)), win, np.maximum)


def max_pool_nchw(x: np.ndarray, kernel, strides, pads, dil=None, ceil: bool = False) -> np.ndarray:
    """Max pooling over the trailing ``len(kernel)`` axes with -inf padding, as ONNX and torch
    define it; ``pads`` lists the begins then the ends."""
    nd = len(kernel)
    attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dil) if dil else [1] * nd}
    x = np.asarray(x)
    return _max_pool(x, _window(x.shape[x.ndim - nd:], kernel, attrs, ceil))


def _max_pool_indices(x: np.ndarray, win: _Window, storage_order: int) -> tuple[np.ndarray, np.ndarray]:
    """Values and ONNX indices: flat offsets into x, spatial axes row major (storage_order 0) or
    column major (1) within each (n, c) plane, as onnxruntime counts them. Ties keep the first
    tap in row-major order (passes from the last axis to the first, strict comparisons)."""
    nd = len(win.out)
    lead = x.ndim - nd
    sp = x.shape[lead:]
    flat = np.arange(math.prod(sp), dtype=np.int64)
    within = flat.reshape(sp) if storage_order == 0 else flat.reshape(sp[::-1]).T
    planes = np.arange(math.prod(x.shape[:lead]), dtype=np.int64).reshape(x.shape[:lead] + (1,) * nd)
    v = _pool_pad(x, win, _lowest(x.dtype))
    idx = _pool_pad(planes * math.prod(sp) + within, win, -1)
    for i in reversed(range(nd)):
        axis = lead + i
        bv, bi = _tap(v, axis, 0, win, i).copy(), _tap(idx, axis, 0, win, i).copy()
        for j in range(1, win.kernel[i]):
            cand = _tap(v, axis, j, win, i)
            better = cand > bv
            np.copyto(bv, cand, where=better)
            np.copyto(bi, _tap(idx, axis, j, win, i), where=better)
        v, idx = bv, bi
    return v, idx


def _pool_window(x: np.ndarray, attrs: D) -> _Window:
    return _window(x.shape[2:], attrs["kernel_shape"], attrs, bool(attrs.get("ceil_mode", 0)))


def _canon_maxpool(attrs: D, n_in: int, n_out: int, since: int) -> D:
    attrs = _canonical_window(attrs)
    if n_out > 1:  # the optional Indices output costs a second pass: computed only when the node has it
        attrs = {**attrs, "with_indices": 1}
    return attrs


@register("onnx.MaxPool", _pool_infer, arity=(1, 1), canonicalize=_canon_maxpool)
def _maxpool(ins: A, attrs: D) -> list[np.ndarray]:
    """``with_indices = 1`` (set at import when the node has two outputs) adds the Indices output."""
    x = np.asarray(ins[0])
    win = _pool_window(x, attrs)
    if attrs.get("with_indices"):
        return list(_max_pool_indices(x, win, int(attrs.get("storage_order", 0))))
    return [_max_pool(x, win)]


def _tap_counts(n: int, win: _Window, i: int, include_pad: bool) -> np.ndarray:
    """Per output position along spatial axis i: how many window taps fall on the input (or, with
    ``include_pad``, on the input or its explicit padding; never on a ceil_mode overhang)."""
    pos = np.arange(win.out[i])[:, None] * win.strides[i] + np.arange(win.kernel[i])[None] * win.dil[i] - win.lo[i]
    lo, hi = (-win.lo[i], n + win.hi[i]) if include_pad else (0, n)
    return ((pos >= lo) & (pos < hi)).sum(1)


@register("onnx.AveragePool", _pool_infer, arity=(1, 1), canonicalize=lambda a, i, o, v: _canonical_window(a))
def _avgpool(ins: A, attrs: D) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    win = _pool_window(x, attrs)
    y = _separable(_pool_pad(x.astype(_work(x.dtype)), win, 0), win, np.add)
    include = bool(attrs.get("count_include_pad", 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        for i, n in enumerate(x.shape[2:]):
            y /= _tap_counts(n, win, i, include).reshape(_bshape(x.ndim, 2 + i, win.out[i]))
    return [y.astype(x.dtype)]


@register("onnx.LpPool", _pool_infer, arity=(1, 1), canonicalize=lambda a, i, o, v: _canonical_window(a))
def _lppool(ins: A, attrs: D) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    p = float(attrs.get("p", 2))
    win = _pool_window(x, attrs)
    y = _separable(_pool_pad(np.abs(x.astype(_work(x.dtype))) ** p, win, 0), win, np.add)
    return [(y ** (1.0 / p)).astype(x.dtype)]


def _global_infer(ins: list[Value | None], attrs: D) -> Types:
    x = _x(ins)
    return [x.type.with_shape((*x.type.shape[:2], *(1,) * (x.type.rank - 2)))]


def _global(name: str, fn: Callable[[np.ndarray, tuple[int, ...], D], np.ndarray]) -> None:
    def run(ins: A, attrs: D) -> list[np.ndarray]:
        x = np.asarray(ins[0])
        return [np.asarray(fn(x, tuple(range(2, x.ndim)), attrs)).astype(x.dtype)]

    register(f"onnx.{name}", _global_infer, arity=(1, 1))(run)


def _global_lp(x: np.ndarray, axes: tuple[int, ...], attrs: D) -> np.ndarray:
    p = float(attrs.get("p", 2))
    return (np.abs(x.astype(_work(x.dtype))) ** p).sum(axes, keepdims=True) ** (1.0 / p)


_global("GlobalAveragePool", lambda x, axes, attrs: x.mean(axes, dtype=_work(x.dtype), keepdims=True))
_global("GlobalMaxPool", lambda x, axes, attrs: x.max(axes, keepdims=True))
_global("GlobalLpPool", _global_lp)


def _maxunpool_shape(x: TensorType | np.ndarray, attrs: D, out_shape: np.ndarray | None) -> tuple[Dim, ...] | None:
    shape = x.shape
    if out_shape is not None:
        return tuple(int(d) for d in out_shape)
    sp = _static(shape[2:])
    if sp is None:
        return None
    k = [int(a) for a in attrs["kernel_shape"]]
    nd = len(k)
    s, pads = _attr_ints(attrs, "strides", nd, 1), _attr_ints(attrs, "pads", 2 * nd, 0)
    return (*shape[:2], *((n - 1) * si + ki - a - b for n, si, ki, a, b in zip(sp, s, k, pads[:nd], pads[nd:])))


def _maxunpool_infer(ins: list[Value | None], attrs: D) -> Types:
    x, shape_in = _x(ins), _in(ins, 2)
    data = const(shape_in)
    if shape_in is not None and data is None:
        return None
    shape = _maxunpool_shape(x.type, attrs, data)
    return None if shape is None else [x.type.with_shape(shape)]


@register("onnx.MaxUnpool", _maxunpool_infer, arity=(2, 3))
def _maxunpool(ins: A, attrs: D) -> list[np.ndarray]:
    """Scatter the pooled values to their flat indices in the unpooled shape the kernel implies; an
    ``output_shape`` input then pads (or crops) that at the end. This is ONNX's conformance case
    semantics; onnxruntime instead indexes the output_shape tensor (they agree when the shapes do)."""
    x, idx = np.asarray(ins[0]), np.asarray(ins[1], np.int64)
    shape = _maxunpool_shape(x, attrs, None)
    assert shape is not None
    natural = tuple(int(d) for d in shape)
    y = np.zeros(math.prod(natural), x.dtype)
    if idx.size and (idx.min() < 0 or idx.max() >= y.size):
        raise ValueError(f"MaxUnpool: indices {int(idx.min())}..{int(idx.max())} outside the unpooled shape {natural}")
    y[idx.ravel()] = x.ravel()
    y = y.reshape(natural)
    target = _opt(ins, 2)
    if target is None or tuple(int(d) for d in target) == natural:
        return [y]
    out = np.zeros(tuple(int(d) for d in target), x.dtype)
    common = tuple(slice(0, min(a, b)) for a, b in zip(natural, out.shape))
    out[common] = y[common]
    return [out]
