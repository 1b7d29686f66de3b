"""ONNX neural-network ops: convolution, pooling, normalisation, softmax, reductions, matrix
products and resampling (numpy semantics and type inference).

Windowed ops (Conv, ConvTranspose, the pools, Col2Im, MaxUnpool) are N-D on (N, C, D1..Dn)
inputs. Their evaluators also run on full-size feature maps (fusion checks, host stages), so they
work per kernel tap on whole arrays: im2col in bands of output rows for Conv, separable running
reductions for the pools, separable gather-and-weight passes for Resize and GridSample.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from spc.ir.graph import Value
from spc.ir.ops import register
from spc.ir.ops.infer import broadcast, const, norm_axis, same_type
from spc.ir.types import Dim, DType, TensorType

A = list[Any]
D = dict[str, Any]
Types = list[TensorType] | None

# conformance cases spc refuses on purpose (frontend/conformance.py): case name -> why
_RUNTIME_AXES = ("the reduction axes are a run-time graph input, so the intermediate ReduceSum result has no shape "
                 "at import (ONNX infers none) and spc types every value when it compiles; a model's reduction axes "
                 "are constants (the single-node cases, whose output is typed by the graph, pass)")
CONFORMANCE_EXCEPTIONS: dict[str, str] = {
    **{f"test_reduce_l2_{v}_expanded": _RUNTIME_AXES for v in (
        "do_not_keepdims_example", "do_not_keepdims_random", "empty_set", "keep_dims_example", "keep_dims_random",
        "negative_axes_keep_dims_example", "negative_axes_keep_dims_random")},
    **{f"test_reduce_log_sum_{v}_expanded": _RUNTIME_AXES for v in ("asc_axes", "desc_axes", "empty_set",
                                                                      "negative_axes")},
}

_AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")
# elements (float64) of one im2col band: few, large matmuls (a threaded BLAS synchronises per call),
# yet bounded memory (64 MB) on full-size maps
_BAND = 1 << 23


# -- helpers ----------------------------------------------------------------------------------
def _opt(ins: A, i: int) -> np.ndarray | None:
    """Optional input ``i`` (absent or given as an empty name)."""
    return None if i >= len(ins) or ins[i] is None else np.asarray(ins[i])


def _in(ins: list[Value | None], i: int) -> Value | None:
    return ins[i] if i < len(ins) else None


def _x(ins: list[Value | None]) -> Value:
    x = ins[0]
    assert x is not None
    return x


def _work(dtype: np.dtype) -> np.dtype:
    """The float type to compute in: float16 widens to float32, integers to float64."""
    dtype = np.dtype(dtype)
    return np.result_type(dtype, np.float32) if dtype.kind == "f" else np.dtype(np.float64)


def _np(dt: DType) -> np.dtype:
    return dt.host_numpy


def _stash(attrs: D) -> DType:
    return DType.from_onnx(int(attrs.get("stash_type", 1)))


def _ints(attrs: D, key: str, n: int, default: int) -> tuple[int, ...]:
    v = attrs.get(key)
    if v is None or len(v) == 0:
        return (default,) * n
    if len(v) != n:
        raise ValueError(f"{key}={list(v)} needs {n} values")
    return tuple(int(a) for a in v)


def _static(dims: Sequence[Dim]) -> tuple[int, ...] | None:
    return tuple(int(d) for d in dims) if all(isinstance(d, int) for d in dims) else None


def _bshape(rank: int, axis: int, n: int) -> tuple[int, ...]:
    """Shape that broadcasts a length-n vector along ``axis`` of a rank-``rank`` array."""
    return tuple(n if i == axis else 1 for i in range(rank))


# -- window geometry (Conv, pools) ------------------------------------------------------------
class _Window(NamedTuple):
    out: tuple[int, ...]
    lo: tuple[int, ...]  # padding before each spatial axis
    hi: tuple[int, ...]  # explicit padding after (a ceil_mode overhang is not padding)
    strides: tuple[int, ...]
    dil: tuple[int, ...]
    kernel: tuple[int, ...]

    @property
    def extent(self) -> tuple[int, ...]:
        return tuple(d * (k - 1) + 1 for d, k in zip(self.dil, self.kernel))


def _out_len(n: int, e: int, s: int, lo: int, hi: int, ceil: bool) -> int:
    span = n + lo + hi - e
    if span < 0:
        return 0
    o = (-(-span // s) if ceil else span // s) + 1
    if ceil and (o - 1) * s >= n + lo:  # ceil_mode: the last window must start inside the input or its left pad
        o -= 1
    return o


def _window(in_sp: Sequence[int], kernel: Sequence[int], attrs: D, ceil: bool = False) -> _Window:
    nd = len(in_sp)
    kernel = tuple(int(k) for k in kernel)
    if len(kernel) != nd:
        raise ValueError(f"a {len(kernel)}-D kernel on an input with {nd} spatial axes")
    strides, dil = _ints(attrs, "strides", nd, 1), _ints(attrs, "dilations", nd, 1)
    if min(strides + dil + kernel, default=1) < 1:
        raise ValueError(f"kernel {list(kernel)}, strides {list(strides)}, dilations {list(dil)} must be positive")
    ext = [d * (k - 1) + 1 for d, k in zip(dil, kernel)]
    mode = attrs.get("auto_pad", "NOTSET")
    if mode in ("SAME_UPPER", "SAME_LOWER"):  # ceil_mode plays no part: the output is ceil(in / stride)
        out = tuple(-(-n // s) for n, s in zip(in_sp, strides))
        total = [max(0, (o - 1) * s + e - n) for o, s, e, n in zip(out, strides, ext, in_sp)]
        lo = tuple(t // 2 if mode == "SAME_UPPER" else t - t // 2 for t in total)
        hi = tuple(t - p for t, p in zip(total, lo))
    elif mode in ("NOTSET", "VALID"):  # VALID: no padding (ceil_mode still applies, as ONNX infers it)
        pads = _ints(attrs, "pads", 2 * nd, 0) if mode == "NOTSET" else (0,) * (2 * nd)
        lo, hi = pads[:nd], pads[nd:]
        out = tuple(_out_len(n, e, s, a, b, ceil) for n, e, s, a, b in zip(in_sp, ext, strides, lo, hi))
    else:
        raise ValueError(f"auto_pad={mode!r} is not one of {', '.join(_AUTO_PADS)}")
    if any(o < 1 for o in out):
        raise ValueError(f"kernel {list(kernel)} (strides {list(strides)}, dilations {list(dil)}, pads "
                         f"{list(lo + hi)}) leaves no output on spatial shape {list(in_sp)}")
    return _Window(out, lo, hi, strides, dil, kernel)


def explicit_pads(in_sp: Sequence[int], kernel: Sequence[int], attrs: D) -> list[int]:
    """A window op's padding as ONNX defines it (auto_pad included) on a spatial size ``in_sp``:
    ``pads`` [begin..., end...]."""
    win = _window(in_sp, kernel, attrs)
    return [*win.lo, *win.hi]


def _canonical_window(attrs: D) -> D:
    """auto_pad made explicit where that needs no input size: VALID, and SAME at stride 1 (the
    padding is then the kernel extent - 1 whatever the input). Others keep auto_pad, which the
    evaluators and inference honour."""
    mode = attrs.get("auto_pad", "NOTSET")
    if mode not in _AUTO_PADS:
        raise ValueError(f"auto_pad={mode!r} is not one of {', '.join(_AUTO_PADS)}")
    kernel = attrs.get("kernel_shape")
    if mode == "NOTSET" or not kernel:
        return attrs
    nd = len(kernel)
    if mode == "VALID":
        pads = [0] * (2 * nd)
    elif all(s == 1 for s in _ints(attrs, "strides", nd, 1)):
        ext = [d * (k - 1) + 1 for d, k in zip(_ints(attrs, "dilations", nd, 1), kernel)]
        lo = [(e - 1) // 2 if mode == "SAME_UPPER" else e - 1 - (e - 1) // 2 for e in ext]
        pads = lo + [e - 1 - p for e, p in zip(ext, lo)]
    else:
        return attrs
    out = {k: v for k, v in attrs.items() if k != "auto_pad"}
    out["pads"] = pads
    return out


# -- Conv -------------------------------------------------------------------------------------
def _conv_sizes(ins: list[Value | None], attrs: D) -> tuple[Value, tuple[int, ...], tuple[int, ...], list] | None:
    """The input, its static spatial size, the weight shape and the kernel, when all are known."""
    x, w = _x(ins), ins[1]
    assert w is not None
    sp = _static(x.type.shape[2:])
    if sp is None or not w.type.is_static:
        return None
    ws = w.type.static_shape
    return x, sp, ws, attrs.get("kernel_shape") or ws[2:]


def _conv_infer(ins: list[Value | None], attrs: D) -> Types:
    known = _conv_sizes(ins, attrs)
    if known is None:
        return None
    x, sp, ws, kernel = known
    win = _window(sp, kernel, attrs)
    return [x.type.with_shape((x.type.shape[0], ws[0], *win.out))]


def _convolve(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides: Sequence[int], lo: Sequence[int],
              hi: Sequence[int], dil: Sequence[int], group: int) -> np.ndarray:
    nd = x.ndim - 2
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    kernel = w.shape[2:]
    if cg * group != c or m % group or len(kernel) != nd:
        raise ValueError(f"Conv: input {x.shape}, weights {w.shape} and group={group} do not match")
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *zip(lo, hi)])
    out = [(xp.shape[2 + i] - dil[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
    if min(out) < 1:
        raise ValueError(f"Conv: kernel {list(kernel)} does not fit input {x.shape}")
    og, taps = m // group, list(np.ndindex(*kernel))
    xg = xp.reshape(n, group, cg, *xp.shape[2:])
    wt = w.astype(np.float64).reshape(group, og, cg, len(taps))
    y = np.empty((n, group, og, *out))
    rows = max(1, _BAND // max(1, n * c * len(taps) * math.prod(out[1:])))
    depthwise = cg == 1 and og == 1
    wm = wt.transpose(0, 1, 3, 2).reshape(group, og, len(taps) * cg)
    for r0 in range(0, out[0], rows):
        r1 = min(out[0], r0 + rows)

        def patch(tap: tuple[int, ...], r0: int = r0, r1: int = r1) -> np.ndarray:
            first = tap[0] * dil[0] + r0 * strides[0]
            sl = [slice(first, first + (r1 - r0 - 1) * strides[0] + 1, strides[0])]
            sl += [slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in
                   zip(tap[1:], dil[1:], out[1:], strides[1:])]
            return xg[(slice(None),) * 3 + tuple(sl)]

        if depthwise:  # one weight per channel and tap: multiply-accumulate, no matmul
            acc = np.zeros((n, group, 1, r1 - r0, *out[1:]))
            for ti, tap in enumerate(taps):
                acc += wt[:, 0, 0, ti].reshape(1, group, 1, *(1,) * nd) * patch(tap)
            y[:, :, :, r0:r1] = acc
        else:  # im2col of the band: (taps, channels) rows against the (out, taps*channels) weights
            col = np.empty((n, group, len(taps), cg, r1 - r0, *out[1:]))
            for ti, tap in enumerate(taps):
                col[:, :, ti] = patch(tap)
            band = wm @ col.reshape(n, group, len(taps) * cg, -1)
            y[:, :, :, r0:r1] = band.reshape(n, group, og, r1 - r0, *out[1:])
    y = y.reshape(n, m, *out)
    if b is not None:
        y += np.asarray(b, np.float64).reshape(1, m, *(1,) * nd)
    return y.astype(x.dtype, copy=False)


def conv2d_nchw(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides, pads, dil, group: int) -> np.ndarray:
    """Convolution of an (N, C, D1..Dn) input, accumulated in float64 and cast back to the input
    type; ``pads`` lists the begins then the ends (the name is historical: any number of axes)."""
    nd = np.ndim(x) - 2
    pads = list(pads)
    return _convolve(np.asarray(x), np.asarray(w), b, list(strides), pads[:nd], pads[nd:2 * nd], list(dil), int(group))


@register("onnx.Conv", _conv_infer, arity=(2, 3), canonicalize=lambda a, i, o, v: _canonical_window(a))
def _conv(ins: A, attrs: D) -> list[np.ndarray]:
    x, w = np.asarray(ins[0]), np.asarray(ins[1])
    win = _window(x.shape[2:], w.shape[2:], attrs)
    return [_convolve(x, w, _opt(ins, 2), win.strides, win.lo, win.hi, win.dil, int(attrs.get("group", 1)))]


# -- ConvTranspose ----------------------------------------------------------------------------
def _convt_geometry(in_sp: Sequence[int], kernel: Sequence[int], attrs: D) -> tuple[list[int], list[int]]:
    """(output sizes, padding before) of a transposed convolution."""
    nd = len(in_sp)
    if len(kernel) != nd:
        raise ValueError(f"a {len(kernel)}-D kernel on an input with {nd} spatial axes")
    s, d = _ints(attrs, "strides", nd, 1), _ints(attrs, "dilations", nd, 1)
    opad = _ints(attrs, "output_padding", nd, 0)
    natural = [si * (n - 1) + di * (k - 1) + 1 + op for si, n, di, k, op in zip(s, in_sp, d, kernel, opad)]
    mode = attrs.get("auto_pad", "NOTSET")
    if mode not in _AUTO_PADS:
        raise ValueError(f"auto_pad={mode!r} is not one of {', '.join(_AUTO_PADS)}")
    target = [int(t) for t in attrs.get("output_shape") or []][-nd:] if attrs.get("output_shape") else None
    if target is None and mode in ("SAME_UPPER", "SAME_LOWER"):
        # in * stride, but never larger than the natural output (ONNX's inference and onnxruntime agree)
        target = [min(n * si, f) for n, si, f in zip(in_sp, s, natural)]
    if target is not None:
        total = [f - t for f, t in zip(natural, target)]
        # the spec's split of the total padding: SAME_UPPER pads more at the end, others at the start
        # (floor division: a negative total, an output larger than the natural one, grows at the end)
        lo = [t // 2 if mode == "SAME_UPPER" else t - t // 2 for t in total]
        return target, lo
    if mode == "VALID":
        return natural, [0] * nd
    pads = _ints(attrs, "pads", 2 * nd, 0)
    return [f - a - b for f, a, b in zip(natural, pads[:nd], pads[nd:])], list(pads[:nd])


def _convt_infer(ins: list[Value | None], attrs: D) -> Types:
    known = _conv_sizes(ins, attrs)
    if known is None:
        return None
    x, sp, ws, kernel = known
    out, _ = _convt_geometry(sp, kernel, attrs)
    if min(out) < 1:
        raise ValueError(f"ConvTranspose output {out} is empty")
    return [x.type.with_shape((x.type.shape[0], ws[1] * int(attrs.get("group", 1)), *out))]


@register("onnx.ConvTranspose", _convt_infer, arity=(2, 3))
def _conv_transpose(ins: A, attrs: D) -> list[np.ndarray]:
    x, w, b = np.asarray(ins[0]), np.asarray(ins[1]), _opt(ins, 2)
    nd, group = x.ndim - 2, int(attrs.get("group", 1))
    n, c = x.shape[:2]
    in_sp, kernel, og = x.shape[2:], w.shape[2:], w.shape[1]
    if w.shape[0] != c or c % group:
        raise ValueError(f"ConvTranspose: input {x.shape}, weights {w.shape} and group={group} do not match")
    out, lo = _convt_geometry(in_sp, kernel, attrs)
    s, d = _ints(attrs, "strides", nd, 1), _ints(attrs, "dilations", nd, 1)
    full = [si * (k - 1) + 1 for si, k in zip(s, in_sp)]
    # scatter into a buffer holding both the natural result and the requested window of it
    base = [max(0, -p) for p in lo]
    size = [bs + max(di * (k - 1) + f, p + o) for bs, di, k, f, p, o in zip(base, d, kernel, full, lo, out)]
    buf = np.zeros((n, group, og, *size))
    cin = c // group
    xg = x.astype(np.float64).reshape(n, group, cin, -1)
    wt = w.astype(np.float64).reshape(group, cin, og, -1).transpose(3, 0, 2, 1)  # (taps, group, og, cin)
    for ti, tap in enumerate(np.ndindex(*kernel)):
        sl = tuple(slice(bs + t * di, bs + t * di + f, si) for bs, t, di, f, si in zip(base, tap, d, full, s))
        buf[(slice(None),) * 3 + sl] += (wt[ti] @ xg).reshape(n, group, og, *in_sp)
    y = buf[(slice(None),) * 3 + tuple(slice(bs + p, bs + p + o) for bs, p, o in zip(base, lo, out))]
    y = y.reshape(n, group * og, *out)
    if b is not None:
        y = y + b.astype(np.float64).reshape(1, -1, *(1,) * nd)
    return [y.astype(x.dtype)]


# -- pooling ----------------------------------------------------------------------------------
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
    s, pads = _ints(attrs, "strides", nd, 1), _ints(attrs, "pads", 2 * nd, 0)
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


# -- Col2Im -----------------------------------------------------------------------------------
def _col2im_infer(ins: list[Value | None], attrs: D) -> Types:
    x = _x(ins)
    image, block = const(_in(ins, 1)), const(_in(ins, 2))
    if image is None or block is None or not isinstance(x.type.shape[1], int):
        return None
    return [x.type.with_shape((x.type.shape[0], x.type.shape[1] // int(np.prod(block)),
                               *(int(d) for d in image)))]


@register("onnx.Col2Im", _col2im_infer, arity=(3, 3))
def _col2im(ins: A, attrs: D) -> list[np.ndarray]:
    """Sum the column blocks of (N, C * prod(block), L) back into (N, C, *image) (a transposed im2col)."""
    x = np.asarray(ins[0])
    image = [int(d) for d in np.asarray(ins[1])]
    block = [int(d) for d in np.asarray(ins[2])]
    n, c = x.shape[0], x.shape[1] // math.prod(block)
    win = _window(image, block, {k: attrs[k] for k in ("strides", "dilations", "pads") if k in attrs})
    if math.prod(win.out) != x.shape[2]:
        raise ValueError(f"Col2Im: {x.shape[2]} blocks, the geometry gives {list(win.out)}")
    padded = [a + i + b for a, i, b in zip(win.lo, image, win.hi)]
    buf = np.zeros((n, c, *padded), _work(x.dtype))
    cols = x.reshape(n, c, math.prod(block), *win.out)
    for ti, tap in enumerate(np.ndindex(*block)):
        sl = tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(tap, win.dil, win.out, win.strides))
        buf[(slice(None), slice(None), *sl)] += cols[:, :, ti]
    y = buf[(slice(None), slice(None), *(slice(a, a + i) for a, i in zip(win.lo, image)))]
    return [y.astype(x.dtype)]


# -- normalisation ----------------------------------------------------------------------------
def _bn_infer(ins: list[Value | None], attrs: D) -> Types:
    x = _x(ins)
    if attrs.get("training_mode", 0):
        mean, var = ins[3], ins[4]
        assert mean is not None and var is not None
        return [x.type, mean.type, var.type]
    return [x.type]


def _bn_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    if since < 14 and n_out > 1:
        raise ValueError(f"BatchNormalization-{since} with {n_out} outputs is its training mode (running and saved "
                         "statistics), which spc does not implement; export the model in inference mode (eval())")
    if n_out > 1 and not attrs.get("training_mode", 0):
        raise ValueError("BatchNormalization outputs running_mean and running_var only with training_mode=1")
    return attrs


@register("onnx.BatchNormalization", _bn_infer, arity=(5, 5), canonicalize=_bn_canon)
def _batchnorm(ins: A, attrs: D) -> list[np.ndarray]:
    """Inference: the stored statistics. ``training_mode = 1``: the batch's statistics, plus the
    running mean and variance updated with ``momentum``."""
    x, scale, bias, mean, var = (np.asarray(a) for a in ins[:5])
    eps = float(attrs.get("epsilon", 1e-5))
    work = _work(x.dtype)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    xw = x.astype(work, copy=False)
    if attrs.get("training_mode", 0):
        axes = (0, *range(2, x.ndim))
        bm, bv = xw.mean(axes), xw.var(axes)
        mom = float(attrs.get("momentum", 0.9))
        y = (xw - bm.reshape(shape)) / np.sqrt(bv.reshape(shape) + eps) * scale.reshape(shape) + bias.reshape(shape)
        return [y.astype(x.dtype), (mean * mom + bm * (1 - mom)).astype(mean.dtype),
                (var * mom + bv * (1 - mom)).astype(var.dtype)]
    a = scale.astype(work) / np.sqrt(var.astype(work) + eps)
    return [(xw * a.reshape(shape) + (bias - mean * a).reshape(shape)).astype(x.dtype)]


def _instance_norm_infer(ins: list[Value | None], attrs: D) -> Types:
    x = _x(ins)
    if x.type.rank < 3:
        raise ValueError(f"InstanceNormalization needs an (N, C, ...) input, not rank {x.type.rank}")
    c = x.type.shape[1]
    for what, v in (("scale", ins[1]), ("B", ins[2])):
        assert v is not None
        size = v.type.shape[0] if v.type.rank == 1 else None
        if v.type.rank != 1 or (isinstance(c, int) and isinstance(size, int) and size != c):
            raise ValueError(f"InstanceNormalization's {what} is {list(v.type.shape)}; it takes one value per "
                             f"channel ({c})")
    return same_type(ins, attrs)


@register("onnx.InstanceNormalization", _instance_norm_infer, arity=(3, 3))
def _instance_norm(ins: A, attrs: D) -> list[np.ndarray]:
    x, scale, bias = (np.asarray(a) for a in ins[:3])
    xw = x.astype(_work(x.dtype))
    axes = tuple(range(2, x.ndim))
    mean = xw.mean(axes, keepdims=True)
    d = xw - mean
    inv = 1.0 / np.sqrt((d * d).mean(axes, keepdims=True) + float(attrs.get("epsilon", 1e-5)))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return [(d * inv * scale.reshape(shape) + bias.reshape(shape)).astype(x.dtype)]


def _norm_stats(xu: np.ndarray, axes: tuple[int, ...], eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, deviation, 1 / std) over ``axes`` of an array already in the compute type."""
    mean = xu.mean(axes, keepdims=True)
    d = xu - mean
    return mean, d, 1.0 / np.sqrt((d * d).mean(axes, keepdims=True) + eps)


def _ln_infer(ins: list[Value | None], attrs: D) -> Types:
    x = _x(ins)
    axis = norm_axis(int(attrs.get("axis", -1)), x.type.rank)
    u = _stash(attrs)
    stat = (*x.type.shape[:axis], *(1,) * (x.type.rank - axis))
    return [x.type, TensorType(u, stat), TensorType(u, stat)]


@register("onnx.LayerNormalization", _ln_infer, arity=(2, 3))
def _layer_norm(ins: A, attrs: D) -> list[np.ndarray]:
    """As the ONNX function: statistics in ``stash_type``, scale and bias in the input type;
    outputs Y, Mean, InvStdDev."""
    x, scale, bias = np.asarray(ins[0]), np.asarray(ins[1]), _opt(ins, 2)
    axis = norm_axis(int(attrs.get("axis", -1)), x.ndim)
    u = _np(_stash(attrs))
    mean, d, inv = _norm_stats(x.astype(u), tuple(range(axis, x.ndim)), float(attrs.get("epsilon", 1e-5)))
    y = (d * inv).astype(x.dtype) * scale
    if bias is not None:
        y = y + bias
    return [y.astype(x.dtype), mean.astype(u), inv.astype(u)]


@register("onnx.RMSNormalization", same_type, arity=(2, 2))
def _rms_norm(ins: A, attrs: D) -> list[np.ndarray]:
    x, scale = np.asarray(ins[0]), np.asarray(ins[1])
    axis = norm_axis(int(attrs.get("axis", -1)), x.ndim)
    xu = x.astype(_np(_stash(attrs)))
    ms = (xu * xu).mean(tuple(range(axis, x.ndim)), keepdims=True)
    return [((xu / np.sqrt(ms + float(attrs.get("epsilon", 1e-5)))).astype(x.dtype) * scale).astype(x.dtype)]


def _gn_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    # GroupNormalization-18 has one scale and bias per group; -21 one per channel, statistics in stash_type
    return {**attrs, "scale_per": "group" if since < 21 else "channel"}


@register("onnx.GroupNormalization", same_type, arity=(3, 3), canonicalize=_gn_canon)
def _group_norm(ins: A, attrs: D) -> list[np.ndarray]:
    """``scale_per``: "channel" (GroupNormalization-21, the default) or "group" (-18)."""
    x, scale, bias = (np.asarray(a) for a in ins[:3])
    g = int(attrs["num_groups"])
    n, c = x.shape[:2]
    if g < 1 or c % g:
        raise ValueError(f"GroupNormalization: {c} channels do not split into {g} groups")
    per_group = attrs.get("scale_per", "channel") == "group"
    work = _work(x.dtype) if per_group else _np(_stash(attrs))
    _, d, inv = _norm_stats(x.reshape(n, g, -1).astype(work), (2,), float(attrs.get("epsilon", 1e-5)))
    norm = (d * inv).astype(x.dtype)
    if per_group:
        y = norm * scale.reshape(1, g, 1) + bias.reshape(1, g, 1)
        return [y.reshape(x.shape).astype(x.dtype)]
    shape = (1, c) + (1,) * (x.ndim - 2)
    return [(norm.reshape(x.shape) * scale.reshape(shape) + bias.reshape(shape)).astype(x.dtype)]


def _lpnorm_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    if int(attrs.get("p", 2)) not in (1, 2):
        raise ValueError(f"LpNormalization p={attrs['p']}: ONNX defines p = 1 or 2 only")
    return attrs


@register("onnx.LpNormalization", same_type, arity=(1, 1), canonicalize=_lpnorm_canon)
def _lp_norm(ins: A, attrs: D) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    xw = x.astype(_work(x.dtype))
    axis = int(attrs.get("axis", -1))
    if int(attrs.get("p", 2)) == 1:
        norm = np.abs(xw).sum(axis, keepdims=True)
    else:
        norm = np.sqrt((xw * xw).sum(axis, keepdims=True))
    return [(xw / np.where(norm == 0, 1, norm)).astype(x.dtype)]  # a zero vector stays zero


@register("onnx.MeanVarianceNormalization", same_type, arity=(1, 1))
def _mvn(ins: A, attrs: D) -> list[np.ndarray]:
    """(x - E[x]) / (sqrt(E[x²] - E[x]²) + 1e-9) over ``axes`` (default N, H, W), as the ONNX function."""
    x = np.asarray(ins[0])
    xw = x.astype(_work(x.dtype))
    axes = tuple(norm_axis(int(a), x.ndim) for a in attrs.get("axes", [0, 2, 3]))
    mean = xw.mean(axes, keepdims=True)
    var = np.maximum((xw * xw).mean(axes, keepdims=True) - mean * mean, 0)  # rounding must not make it negative
    return [((xw - mean) / (np.sqrt(var) + 1e-9)).astype(x.dtype)]


@register("onnx.LRN", same_type, arity=(1, 1))
def _lrn(ins: A, attrs: D) -> list[np.ndarray]:
    """x / (bias + alpha / size * sum of x² over the ``size`` neighbouring channels) ** beta."""
    x = np.asarray(ins[0])
    size = int(attrs["size"])
    alpha, beta, bias = float(attrs.get("alpha", 1e-4)), float(attrs.get("beta", 0.75)), float(attrs.get("bias", 1.0))
    xw = x.astype(_work(x.dtype))
    lo = (size - 1) // 2
    sq = np.pad(xw * xw, [(0, 0), (lo, size - 1 - lo)] + [(0, 0)] * (x.ndim - 2))
    c = x.shape[1]
    acc = sq[:, :c].copy()
    for j in range(1, size):
        acc += sq[:, j:j + c]
    return [(xw / (bias + alpha / size * acc) ** beta).astype(x.dtype)]


# -- softmax family ---------------------------------------------------------------------------
# the softmax family computes in the input's float type (float16 too: ONNX's own results round each step there)
def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    x = np.asarray(x)
    e = x - x.max(axis=axis, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=axis, keepdims=True)
    return e


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def _hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    y = np.zeros_like(x)
    if x.size:
        np.put_along_axis(y, np.expand_dims(np.argmax(x, axis=axis), axis), 1, axis=axis)
    return y


def _softmax_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    if since < 13:  # opset < 13 coerces the input to 2-D at ``axis`` (default 1) and runs over the flattened tail
        return {**attrs, "axis": int(attrs.get("axis", 1)), "coerce_2d": 1}
    return attrs


def _softmax_like(name: str, fn: Callable[[np.ndarray, int], np.ndarray]) -> None:
    def run(ins: A, attrs: D) -> list[np.ndarray]:
        """Over ``axis`` (default -1); with ``coerce_2d = 1`` (opset < 13) over all axes from ``axis`` on."""
        x = np.asarray(ins[0])
        axis = norm_axis(int(attrs.get("axis", -1)), x.ndim)
        if attrs.get("coerce_2d"):
            flat = x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
            return [fn(flat, 1).reshape(x.shape).astype(x.dtype)]
        return [fn(x, axis).astype(x.dtype)]

    def infer(ins: list[Value | None], attrs: D) -> Types:
        norm_axis(int(attrs.get("axis", -1)), _x(ins).type.rank)  # an axis beyond the rank: refused here
        return same_type(ins, attrs)

    register(f"onnx.{name}", infer, arity=(1, 1), canonicalize=_softmax_canon)(run)


_softmax_like("Softmax", softmax)
_softmax_like("LogSoftmax", _log_softmax)
_softmax_like("Hardmax", _hardmax)


# -- reductions -------------------------------------------------------------------------------
def _axes_value(ins: list[Value | None], attrs: D) -> list[int] | None:
    """Reduction axes from the attribute (older opsets) or the input; None when not known here."""
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    v = _in(ins, 1)
    if v is None:
        return []
    data = const(v)
    if data is None:  # an input typed [0] is empty whatever its value
        return [] if v.type.shape == (0,) else None
    return [int(a) for a in np.atleast_1d(data)]


def _reduce_axes(axes: list[int], rank: int, attrs: D) -> tuple[int, ...]:
    """Normalised axes. Empty axes with noop_with_empty_axes reduce over no axis: each element
    alone, so ReduceSumSquare still squares (as onnxruntime does)."""
    if not axes:
        return () if attrs.get("noop_with_empty_axes", 0) else tuple(range(rank))
    return tuple(sorted({norm_axis(a, rank) for a in axes}))


def _reduce_infer(ins: list[Value | None], attrs: D) -> Types:
    x = _x(ins)
    axes = _axes_value(ins, attrs)
    if axes is None:
        return None
    red = _reduce_axes(axes, x.type.rank, attrs)
    keep = attrs.get("keepdims", 1)
    return [x.type.with_shape(tuple(1 if i in red else d for i, d in enumerate(x.type.shape) if keep or i not in red))]


def _fsum(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    return x.sum(axes, keepdims=keep, dtype=_work(x.dtype) if x.dtype.kind == "f" else None)


def _mean(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    # ONNX leaves the mean of an empty set undefined; 0 as onnxruntime gives, not numpy's nan
    n = math.prod(x.shape[a] for a in axes)
    return _fsum(x.astype(_work(x.dtype)), axes, keep) / max(n, 1)


def _logsumexp(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    xw = x.astype(_work(x.dtype))
    m = xw.max(axes, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)  # an empty or all -inf set: no shift
    y = np.log(np.exp(xw - m).sum(axes, keepdims=True)) + m
    return y if keep else np.squeeze(y, axes)


def _extreme(fn: Callable[..., np.ndarray], lowest: bool) -> Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]:
    def run(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
        # the identity of an empty set: the type's lowest value for max, highest for min
        if x.dtype.kind == "b":
            ident: Any = not lowest
        elif x.dtype.kind == "f":
            ident = -np.inf if lowest else np.inf
        else:
            ident = np.iinfo(x.dtype).min if lowest else np.iinfo(x.dtype).max
        return fn(x, axes, keepdims=keep, initial=ident)

    return run


_REDUCTIONS: dict[str, Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]] = {
    "ReduceSum": _fsum,
    "ReduceMean": lambda x, axes, keep: _mean(x, axes, keep),
    "ReduceMax": _extreme(np.max, True),
    "ReduceMin": _extreme(np.min, False),
    "ReduceProd": lambda x, axes, keep: x.prod(axes, keepdims=keep,
                                                dtype=_work(x.dtype) if x.dtype.kind == "f" else None),
    "ReduceL1": lambda x, axes, keep: _fsum(np.abs(x), axes, keep),
    "ReduceL2": lambda x, axes, keep: np.sqrt(_fsum(np.square(x.astype(_work(x.dtype))), axes, keep)),
    "ReduceSumSquare": lambda x, axes, keep: _fsum(x * x, axes, keep),
    "ReduceLogSum": lambda x, axes, keep: np.log(_fsum(x.astype(_work(x.dtype)), axes, keep)),
    "ReduceLogSumExp": _logsumexp,
}


def _reduction(name: str, fn: Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]) -> None:
    def run(ins: A, attrs: D) -> list[np.ndarray]:
        """Over ``axes`` (attribute, or input 1 from opset 13/18); none given: all axes, or the
        identity with noop_with_empty_axes. An empty set gives the reduction's identity."""
        x = np.asarray(ins[0])
        if "axes" in attrs:
            axes = [int(a) for a in attrs["axes"]]
        else:
            a = _opt(ins, 1)
            axes = [] if a is None else [int(v) for v in a.ravel()]
        red = _reduce_axes(axes, x.ndim, attrs)
        with np.errstate(divide="ignore", invalid="ignore"):
            y = fn(x, red, bool(attrs.get("keepdims", 1)))
        return [np.asarray(y).astype(x.dtype)]

    register(f"onnx.{name}", _reduce_infer, arity=(1, 2))(run)


for _name, _fn in _REDUCTIONS.items():
    _reduction(_name, _fn)


def _arg_infer(ins: list[Value | None], attrs: D) -> Types:
    x = _x(ins)
    axis = norm_axis(int(attrs.get("axis", 0)), x.type.rank)
    keep = attrs.get("keepdims", 1)
    return [TensorType(DType.I64, tuple(1 if i == axis else d for i, d in enumerate(x.type.shape)
                                        if keep or i != axis))]


def _arg(name: str, fn: Callable[..., np.ndarray]) -> None:
    def run(ins: A, attrs: D) -> list[np.ndarray]:
        x = np.asarray(ins[0])
        axis = norm_axis(int(attrs.get("axis", 0)), x.ndim)
        if attrs.get("select_last_index", 0):
            idx = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis)
        else:
            idx = fn(x, axis=axis)
        if attrs.get("keepdims", 1):
            idx = np.expand_dims(idx, axis)
        return [np.asarray(idx, np.int64)]

    register(f"onnx.{name}", _arg_infer, arity=(1, 1))(run)


_arg("ArgMax", np.argmax)
_arg("ArgMin", np.argmin)


# -- matrix products --------------------------------------------------------------------------
def _matmul_shape(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, ...]:
    if not a or not b:
        raise ValueError("MatMul of a scalar")
    aa = (1, *a) if len(a) == 1 else a
    bb = (*b, 1) if len(b) == 1 else b
    if isinstance(aa[-1], int) and isinstance(bb[-2], int) and aa[-1] != bb[-2]:
        raise ValueError(f"MatMul of {a} and {b}: inner dimensions differ")
    batch = broadcast(aa[:-2], bb[:-2])
    return (*batch, *(() if len(a) == 1 else (aa[-2],)), *(() if len(b) == 1 else (bb[-1],)))


def _matmul_infer(ins: list[Value | None], attrs: D) -> Types:
    a, b = _x(ins), ins[1]
    assert b is not None
    return [a.type.with_shape(_matmul_shape(a.type.shape, b.type.shape))]


def _mm_type(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float32) if dtype == np.float16 else dtype  # half precision products lose too much


@register("onnx.MatMul", _matmul_infer, arity=(2, 2))
def _matmul(ins: A, attrs: D) -> list[np.ndarray]:
    a, b = np.asarray(ins[0]), np.asarray(ins[1])
    work = _mm_type(a.dtype)
    return [np.asarray(np.matmul(a.astype(work, copy=False), b.astype(work, copy=False))).astype(a.dtype, copy=False)]


def _gemm_infer(ins: list[Value | None], attrs: D) -> Types:
    a, b = _x(ins), ins[1]
    assert b is not None
    sa, sb = a.type.shape, b.type.shape
    if len(sa) != 2 or len(sb) != 2:
        raise ValueError(f"Gemm takes matrices, got {a.type} and {b.type}")
    m = sa[1] if attrs.get("transA", 0) else sa[0]
    n = sb[0] if attrs.get("transB", 0) else sb[1]
    return [a.type.with_shape((m, n))]


@register("onnx.Gemm", _gemm_infer, arity=(2, 3))
def _gemm(ins: A, attrs: D) -> list[np.ndarray]:
    """alpha * A' @ B' + beta * C, C broadcast to (M, N)."""
    a, b, c = np.asarray(ins[0]), np.asarray(ins[1]), _opt(ins, 2)
    work = _mm_type(a.dtype) if a.dtype.kind == "f" else np.dtype(np.float64)
    a = a.T if attrs.get("transA", 0) else a
    b = b.T if attrs.get("transB", 0) else b
    y = a.astype(work) @ b.astype(work)
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    if alpha != 1.0:
        y = y * work.type(alpha)
    if c is not None:
        y = y + (c.astype(work) if beta == 1.0 else c.astype(work) * work.type(beta))
    return [y.astype(np.asarray(ins[0]).dtype)]


def _einsum_terms(equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """Input terms and the output term (implicit mode: the letters used once, sorted, after the
    broadcast axes), spaces removed."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"Einsum {equation!r} names {len(terms)} operands, got {len(ranks)}")
    if not arrow:
        counts = Counter(ch for t in terms for ch in t.replace("...", ""))
        rhs = ("..." if "..." in lhs else "") + "".join(sorted(ch for ch, k in counts.items() if k == 1))
    return terms, rhs


def _einsum_infer(ins: list[Value | None], attrs: D) -> Types:
    vals = [v for v in ins if v is not None]
    terms, rhs = _einsum_terms(attrs["equation"], [v.type.rank for v in vals])
    dims: dict[str, Dim] = {}
    ell: list[tuple[Dim, ...]] = []
    for term, v in zip(terms, vals):
        shape = v.type.shape
        pre, has, post = term.partition("...")
        n_ell = len(shape) - len(pre) - len(post)
        if n_ell < 0 or (n_ell and not has):
            raise ValueError(f"Einsum term {term!r} does not fit {v.type}")
        if has:
            ell.append(shape[len(pre):len(pre) + n_ell])
        for ch, d in zip(pre + post, shape[:len(pre)] + shape[len(pre) + n_ell:]):
            if dims.get(ch) in (None, 1):  # a size-1 axis broadcasts against the same letter elsewhere
                dims[ch] = d
    pre, has, post = rhs.partition("...")
    shape = (*(dims[c] for c in pre), *(broadcast(*ell) if has and ell else ()), *(dims[c] for c in post))
    return [vals[0].type.with_shape(shape)]


@register("onnx.Einsum", _einsum_infer, arity=(1, 99))
def _einsum(ins: A, attrs: D) -> list[np.ndarray]:
    xs = [np.asarray(a) for a in ins]
    work = _mm_type(xs[0].dtype)
    y = np.einsum(attrs["equation"].replace(" ", ""), *(x.astype(work, copy=False) for x in xs))
    return [np.asarray(y).astype(xs[0].dtype)]


# -- depth/space ------------------------------------------------------------------------------
def depth_to_space(x: np.ndarray, block: int, mode: str) -> np.ndarray:
    n, c, h, w = x.shape
    if mode == "DCR":
        y = x.reshape(n, block, block, c // block**2, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // block**2, block, block, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // block**2, h * block, w * block)


def _d2s_infer(ins: list[Value | None], attrs: D) -> Types:
    x = _x(ins)
    if x.type.rank != 4:
        raise ValueError("DepthToSpace needs a 4-D input")
    if not x.type.is_static:
        return None
    n, c, h, w = x.type.static_shape
    b = int(attrs["blocksize"])
    if c % (b * b):
        raise ValueError(f"DepthToSpace: {c} channels are not a multiple of blocksize**2 = {b * b}")
    return [x.type.with_shape((n, c // (b * b), h * b, w * b))]


@register("onnx.DepthToSpace", _d2s_infer, arity=(1, 1))
def _depth_to_space(ins: A, attrs: D) -> list[np.ndarray]:
    return [depth_to_space(np.asarray(ins[0]), int(attrs["blocksize"]), attrs.get("mode", "DCR"))]


# -- Resize -----------------------------------------------------------------------------------
_COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                "tf_half_pixel_for_nn", "tf_crop_and_resize")
_NEAREST = {"round_prefer_floor": lambda c: np.ceil(c - 0.5), "round_prefer_ceil": lambda c: np.floor(c + 0.5),
            "floor": np.floor, "ceil": np.ceil}


def _resize_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    checks = (("mode", "nearest", ("nearest", "linear", "cubic")),
              ("coordinate_transformation_mode", "half_pixel", _COORD_MODES),
              ("nearest_mode", "round_prefer_floor", tuple(_NEAREST)),
              ("keep_aspect_ratio_policy", "stretch", ("stretch", "not_larger", "not_smaller")))
    for key, default, allowed in checks:
        if attrs.get(key, default) not in allowed:
            raise ValueError(f"Resize {key}={attrs[key]!r} is not one of {', '.join(allowed)}")
    return attrs


def _resize_plan(shape: Sequence[Dim], attrs: D, roi: np.ndarray | None, scales: np.ndarray | None,
                 sizes: np.ndarray | None) -> tuple[list[Dim], list[float], list[tuple[float, float]]] | None:
    """Output shape, per-axis scale and crop box (tf_crop_and_resize); None when a needed input
    dimension is symbolic."""
    rank = len(shape)
    axes = [norm_axis(int(a), rank) for a in attrs["axes"]] if attrs.get("axes") else list(range(rank))
    out, scale = list(shape), [1.0] * rank
    if sizes is not None and sizes.size:
        want = [int(s) for s in sizes.ravel()]
        if len(want) != len(axes):
            raise ValueError(f"Resize sizes {want} for {len(axes)} axes")
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            for a, sz in zip(axes, want):
                out[a] = sz
                scale[a] = sz / shape[a] if isinstance(shape[a], int) and shape[a] else 1.0
        else:
            dims = _static([shape[a] for a in axes])
            if dims is None:
                return None
            ratios = [sz / d for sz, d in zip(want, dims)]
            r = min(ratios) if policy == "not_larger" else max(ratios)
            for a, d in zip(axes, dims):
                out[a], scale[a] = math.floor(r * d + 0.5), r
    elif scales is not None and scales.size:
        sc = [float(s) for s in scales.ravel()]
        if len(sc) != len(axes):
            raise ValueError(f"Resize scales {sc} for {len(axes)} axes")
        for a, s in zip(axes, sc):
            if not isinstance(shape[a], int):
                if s != 1.0:
                    return None
                continue
            out[a], scale[a] = math.floor(shape[a] * s), s
    else:
        raise ValueError("Resize needs scales or sizes")
    box = [(0.0, 1.0)] * rank
    if roi is not None and roi.size and attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        r = [float(v) for v in roi.ravel()]
        k = len(r) // 2
        box_axes = axes if k == len(axes) else list(range(rank))
        for i, a in enumerate(box_axes[:k]):
            box[a] = (r[i], r[k + i])
    return out, scale, box


def _resize_infer(ins: list[Value | None], attrs: D) -> Types:
    x = _x(ins)
    scales, sizes = const(_in(ins, 2)), const(_in(ins, 3))  # roi moves samples, never the shape
    if sizes is None or not sizes.size:
        if (_in(ins, 3) is not None and sizes is None) or scales is None:
            return None
        sizes = None
    plan = _resize_plan(x.type.shape, attrs, None, scales, sizes)
    return None if plan is None else [x.type.with_shape(tuple(plan[0]))]


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel at distances ``t`` >= 0."""
    return np.where(t <= 1, ((a + 2) * t - (a + 3)) * t * t + 1,
                    np.where(t < 2, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0))


def _resize_axis(n: int, o: int, scale: float, box: tuple[float, float],
                 attrs: D) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """One axis of a Resize: source indices (o, taps), their weights (None: nearest) and the
    positions that fall outside a tf_crop_and_resize box (None: no such mode)."""
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    x = np.arange(o, dtype=np.float64)
    of = scale * n  # the resized length before rounding: what ONNX's "length_resized" is
    if ctm in ("half_pixel", "pytorch_half_pixel"):
        c = (x + 0.5) / scale - 0.5 if of > 1 or ctm == "half_pixel" else np.zeros(o)
    elif ctm == "half_pixel_symmetric":
        c = n / 2 * (1 - o / of) + (x + 0.5) / scale - 0.5
    elif ctm == "align_corners":
        c = x * (n - 1) / (of - 1) if of > 1 else np.zeros(o)
    elif ctm == "asymmetric":
        c = x / scale
    elif ctm == "tf_half_pixel_for_nn":
        c = (x + 0.5) / scale
    else:
        s0, s1 = box
        c = s0 * (n - 1) + x * (s1 - s0) * (n - 1) / (of - 1) if of > 1 else np.full(o, 0.5 * (s0 + s1) * (n - 1))
    outside = ((c < 0) | (c > n - 1)) if ctm == "tf_crop_and_resize" else None
    mode = attrs.get("mode", "nearest")
    if mode == "nearest":
        idx = _NEAREST[attrs.get("nearest_mode", "round_prefer_floor")](c)
        return np.clip(idx, 0, n - 1).astype(np.intp)[:, None], None, outside
    # linear / cubic: the kernel widened by 1/scale when antialiasing a downscale
    support = 1.0 if mode == "linear" else 2.0
    se = min(scale, 1.0) if attrs.get("antialias", 0) else 1.0
    start = math.floor(-support / se) + 1
    j = np.arange(start, 2 - start)
    x0 = np.ceil(c) - 1  # the tap left of c, c - x0 in (0, 1]
    pos = x0[:, None] + j[None]
    t = np.abs(se * (pos - c[:, None]))
    w = np.maximum(1 - t, 0) if mode == "linear" else _cubic(t, float(attrs.get("cubic_coeff_a", -0.75)))
    if attrs.get("exclude_outside", 0):
        w = np.where((pos >= 0) & (pos <= n - 1), w, 0.0)
    total = w.sum(1, keepdims=True)
    w = w / np.where(total == 0, 1, total)
    return np.clip(pos, 0, n - 1).astype(np.intp), w, outside


def _is_identity(n: int, idx: np.ndarray, w: np.ndarray | None) -> bool:
    if idx.shape[0] != n:
        return False
    hit = idx == np.arange(n)[:, None]
    if w is None:
        return bool(hit.all())
    return bool(np.all(np.abs(np.where(hit, w, 0).sum(1) - 1) < 1e-12) and np.all(np.where(hit, 0, w) == 0))


@register("onnx.Resize", _resize_infer, arity=(1, 4), canonicalize=_resize_canon)
def _resize(ins: A, attrs: D) -> list[np.ndarray]:
    """Separable: each axis is one gather-and-weight pass (nearest: a gather)."""
    x = np.asarray(ins[0])
    plan = _resize_plan(x.shape, attrs, _opt(ins, 1), _opt(ins, 2), _opt(ins, 3))
    assert plan is not None
    out, scale, box = plan
    y: np.ndarray = x
    mask: np.ndarray | None = None
    for axis, n in enumerate(x.shape):
        idx, w, outside = _resize_axis(n, int(out[axis]), scale[axis], box[axis], attrs)
        if outside is not None and outside.any():
            m = outside.reshape(_bshape(x.ndim, axis, len(outside)))
            mask = m if mask is None else (mask | m)
        if _is_identity(n, idx, w):
            continue
        if w is None:
            y = np.take(y, idx[:, 0], axis=axis)
            continue
        yw = y.astype(_work(x.dtype), copy=False)
        acc: np.ndarray | None = None
        for t in range(idx.shape[1]):
            if not w[:, t].any():
                continue
            term = np.take(yw, idx[:, t], axis=axis) * w[:, t].astype(yw.dtype).reshape(_bshape(x.ndim, axis, len(w)))
            acc = term if acc is None else acc + term
        y = acc if acc is not None else np.zeros_like(np.take(yw, idx[:, 0], axis=axis))
    if mask is not None:
        y = np.where(mask, np.asarray(attrs.get("extrapolation_value", 0.0), y.dtype), y)
    if x.dtype.kind in "iu" and y.dtype.kind == "f":  # integers truncate, as onnxruntime's; cubic may overshoot
        info = np.iinfo(x.dtype)
        y = np.clip(y, info.min, info.max)
    return [np.asarray(y).astype(x.dtype)]


# -- GridSample, AffineGrid -------------------------------------------------------------------
def _grid_sample_infer(ins: list[Value | None], attrs: D) -> Types:
    x, g = _x(ins), ins[1]
    assert g is not None
    last = g.type.shape[-1] if g.type.rank else None
    if g.type.rank != x.type.rank or (isinstance(last, int) and last != x.type.rank - 2):
        raise ValueError(f"GridSample: grid {g.type} does not fit input {x.type}")
    return [x.type.with_shape((*x.type.shape[:2], *g.type.shape[1:-1]))]


def _gs_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(attrs.get("mode", "linear"), attrs.get("mode", "linear"))
    if mode not in ("linear", "nearest", "cubic"):
        raise ValueError(f"GridSample mode={attrs['mode']!r} is not one of linear, nearest, cubic")
    if attrs.get("padding_mode", "zeros") not in ("zeros", "border", "reflection"):
        raise ValueError(f"GridSample padding_mode={attrs['padding_mode']!r} is not one of zeros, border, reflection")
    return {**attrs, "mode": mode}  # GridSample-16 spells linear and cubic bilinear and bicubic


def _reflect(c: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Coordinates folded back into [lo, hi] by reflection at its ends."""
    span = hi - lo
    if span <= 0:
        return np.zeros_like(c)
    d = np.abs(c - lo)
    flips = np.floor(d / span)
    extra = d - flips * span
    return np.where(flips % 2 == 0, lo + extra, hi - extra)


def _gs_pad(c: np.ndarray, size: int, padding: str, align: bool) -> np.ndarray:
    """A source coordinate under border or reflection padding (zeros: unchanged)."""
    if padding == "border":
        return np.clip(c, 0, size - 1)
    if padding == "reflection":
        c = _reflect(c, 0, size - 1) if align else _reflect(c, -0.5, size - 0.5)
        return np.clip(c, 0, size - 1)
    return c


def _grid_sample(x: np.ndarray, grid: np.ndarray, mode: str, padding: str, align: bool) -> np.ndarray:
    nd = x.ndim - 2
    n, ch = x.shape[:2]
    sp = x.shape[2:]
    out = grid.shape[1:-1]
    if grid.shape[0] != n or grid.shape[-1] != nd:
        raise ValueError(f"GridSample: grid {grid.shape} does not fit input {x.shape}")
    g = grid.astype(np.float64).reshape(n, -1, nd)
    taps_per_axis: list[list[tuple[np.ndarray, np.ndarray]]] = []  # per spatial axis: (index, weight) per tap
    for a, size in enumerate(sp):
        gc = g[..., nd - 1 - a]  # grid components run (x, y[, z]): x indexes the last spatial axis
        c = (gc + 1) / 2 * (size - 1) if align else ((gc + 1) * size - 1) / 2
        if mode == "cubic":  # padding applies per tap (torch's bicubic): the taps keep their spacing
            x0 = np.floor(c)
            t = c - x0
            ws = [_cubic(np.abs(t - k), -0.75) for k in (-1, 0, 1, 2)]
            taps = []
            for k, wk in zip((-1, 0, 1, 2), ws):
                pos = x0 + k
                if padding != "zeros":
                    pos = _gs_pad(pos, size, padding, align)
                taps.append((pos, wk))
        else:
            c = _gs_pad(c, size, padding, align)
            if mode == "nearest":
                taps = [(np.rint(c), np.ones_like(c))]
            else:
                x0 = np.floor(c)
                t = c - x0
                taps = [(x0, 1 - t), (x0 + 1, t)]
        fixed = []
        for pos, wk in taps:
            valid = (pos >= 0) & (pos <= size - 1)  # outside taps read zeros
            fixed.append((np.clip(pos, 0, size - 1).astype(np.int64), np.where(valid, wk, 0.0)))
        taps_per_axis.append(fixed)
    flat = x.reshape(n, ch, -1)
    work = _work(x.dtype)
    acc = np.zeros((n, ch, g.shape[1]), work)
    strides = [math.prod(sp[a + 1:]) for a in range(nd)]
    for combo in np.ndindex(*(len(t) for t in taps_per_axis)):
        index = np.zeros(g.shape[:2], np.int64)
        weight = np.ones(g.shape[:2])
        for a, k in enumerate(combo):
            pos, wk = taps_per_axis[a][k]
            index += pos * strides[a]
            weight = weight * wk
        for b in range(n):  # one index row per image: no (channels x points) index array is built
            vals = np.take(flat[b], index[b], axis=1)
            acc[b] += (weight[b][None, :] * vals).astype(work, copy=False)
    return acc.reshape(n, ch, *out).astype(x.dtype)


@register("onnx.GridSample", _grid_sample_infer, arity=(2, 2), canonicalize=_gs_canon)
def _grid_sample_op(ins: A, attrs: D) -> list[np.ndarray]:
    """4-D and 5-D inputs; linear, nearest (ties to even) or cubic (a = -0.75) sampling; zeros,
    border or reflection padding."""
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(attrs.get("mode", "linear"), attrs.get("mode", "linear"))
    return [_grid_sample(np.asarray(ins[0]), np.asarray(ins[1]), mode, attrs.get("padding_mode", "zeros"),
                         bool(attrs.get("align_corners", 0)))]


def _affine_grid_infer(ins: list[Value | None], attrs: D) -> Types:
    theta = _x(ins)
    size = const(_in(ins, 1))
    if size is None:
        return None
    s = [int(d) for d in size]
    return [theta.type.with_shape((s[0], *s[2:], len(s) - 2))]


@register("onnx.AffineGrid", _affine_grid_infer, arity=(2, 2))
def _affine_grid(ins: A, attrs: D) -> list[np.ndarray]:
    """Sampling grid (N, *spatial, nd) in [-1, 1] from affine matrices theta (N, nd, nd + 1)."""
    theta = np.asarray(ins[0])
    size = [int(d) for d in np.asarray(ins[1])]
    sp = size[2:]
    nd = len(sp)
    align = bool(attrs.get("align_corners", 0))

    def lin(m: int) -> np.ndarray:
        if m <= 1:
            return np.zeros(m)
        r = np.linspace(-1.0, 1.0, m)
        return r if align else r * (m - 1) / m

    # base coordinates (x, y[, z], 1): x runs along the last spatial axis
    mesh = np.meshgrid(*(lin(m) for m in sp), indexing="ij")
    base = np.stack([*(mesh[nd - 1 - k] for k in range(nd)), np.ones(sp)], axis=-1).reshape(-1, nd + 1)
    grid = np.einsum("pk,njk->npj", base, theta.astype(np.float64))
    return [grid.reshape(theta.shape[0], *sp, nd).astype(theta.dtype)]


# -- RoiAlign ---------------------------------------------------------------------------------
def _roi_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    if attrs.get("mode", "avg") not in ("avg", "max"):
        raise ValueError(f"RoiAlign mode={attrs['mode']!r} is not one of avg, max")
    if since < 16:  # RoiAlign-10 has no attribute: it maps coordinates without the half-pixel shift
        return {**attrs, "coordinate_transformation_mode": "output_half_pixel"}
    if attrs.get("coordinate_transformation_mode", "half_pixel") not in ("half_pixel", "output_half_pixel"):
        raise ValueError(f"RoiAlign coordinate_transformation_mode={attrs['coordinate_transformation_mode']!r} "
                         "is not one of half_pixel, output_half_pixel")
    return attrs


def _roi_infer(ins: list[Value | None], attrs: D) -> Types:
    x, rois = _x(ins), ins[1]
    assert rois is not None
    return [x.type.with_shape((rois.type.shape[0], x.type.shape[1], int(attrs.get("output_height", 1)),
                               int(attrs.get("output_width", 1))))]


def _roi_axis(start: np.ndarray, size: np.ndarray, bins: int, grid: np.ndarray, g_max: int,
              n: int) -> tuple[np.ndarray, np.ndarray]:
    """One axis of RoiAlign's bilinear samples, as onnxruntime takes them: per ROI, bin and
    sample (padded to ``g_max`` samples, the padding weighted 0), the two source indices (r, bins,
    g_max, 2) and their weights; a sample more than one pixel outside the map reads 0."""
    k = np.arange(g_max)
    step = size / bins
    c = (start[:, None, None] + np.arange(bins)[None, :, None] * step[:, None, None]
         + (k[None, None, :] + 0.5) * (step / np.maximum(grid, 1))[:, None, None])
    inside = (c >= -1.0) & (c <= n) & (k[None, None, :] < grid[:, None, None])
    c = np.maximum(c, 0)
    low = np.floor(c).astype(np.int64)
    top = low >= n - 1
    low = np.where(top, n - 1, low)
    high = np.where(top, n - 1, low + 1)
    frac = np.where(top, 0.0, c - low)
    w = np.stack([1 - frac, frac], -1) * inside[..., None]
    return np.stack([low, high], -1), w


@register("onnx.RoiAlign", _roi_infer, arity=(3, 3), canonicalize=_roi_canon)
def _roi_align(ins: A, attrs: D) -> list[np.ndarray]:
    """avg: the mean of the bilinear samples of each bin; max: the largest weighted corner over the
    bin's samples (onnxruntime's definition). ROIs are done in chunks of bounded size."""
    x, rois, batch = np.asarray(ins[0]), np.asarray(ins[1]), np.asarray(ins[2], np.int64)
    # the ROI geometry in the ROIs' own float type, as onnxruntime: the adaptive sample counts
    # (ceil of the bin size) flip on the last bit
    ft = rois.dtype.type if rois.dtype.kind == "f" else np.float64
    oh, ow = int(attrs.get("output_height", 1)), int(attrs.get("output_width", 1))
    ratio, scale = int(attrs.get("sampling_ratio", 0)), ft(attrs.get("spatial_scale", 1.0))
    half = attrs.get("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    n_roi, c = rois.shape[0], x.shape[1]
    h, w = x.shape[2:]
    box = rois * scale - ft(0.5 if half else 0.0)
    bw, bh = box[:, 2] - box[:, 0], box[:, 3] - box[:, 1]
    if not half:  # legacy: every ROI at least one pixel
        bw, bh = np.maximum(bw, ft(1)), np.maximum(bh, ft(1))
    gh = np.full(n_roi, ratio) if ratio > 0 else np.ceil(bh / ft(oh)).astype(np.int64)
    gw = np.full(n_roi, ratio) if ratio > 0 else np.ceil(bw / ft(ow)).astype(np.int64)
    out = np.zeros((n_roi, c, oh, ow), x.dtype)
    work = _work(x.dtype)
    per_roi = c * oh * ow * 4 * max(1, int(gh.max(initial=1))) * max(1, int(gw.max(initial=1)))
    chunk = max(1, (1 << 22) // per_roi)
    for r0 in range(0, n_roi, chunk):
        sl = slice(r0, min(n_roi, r0 + chunk))
        g_h, g_w = max(1, int(gh[sl].max())), max(1, int(gw[sl].max()))
        yi, wy = _roi_axis(box[sl, 1], bh[sl], oh, gh[sl], g_h, h)
        xi, wx = _roi_axis(box[sl, 0], bw[sl], ow, gw[sl], g_w, w)
        r = batch[sl]
        # (rois, oh, g_h, 2, ow, g_w, 2, channels): every corner of every sample
        vals = x[r[:, None, None, None, None, None, None], :, yi[:, :, :, :, None, None, None],
                 xi[:, None, None, None, :, :, :]].astype(work)
        wgt = wy[:, :, :, :, None, None, None] * wx[:, None, None, None, :, :, :]
        if attrs.get("mode", "avg") == "avg":
            count = np.maximum(gh[sl] * gw[sl], 1).reshape(-1, 1, 1, 1)
            res = np.einsum("rpyaqxbc,rpyaqxb->rcpq", vals, wgt) / count
        else:
            corner = (vals * wgt[..., None]).max(axis=(3, 6))  # (rois, oh, g_h, ow, g_w, channels)
            real = ((np.arange(g_h)[None, :] < gh[sl, None])[:, None, :, None, None, None]
                    & (np.arange(g_w)[None, :] < gw[sl, None])[:, None, None, None, :, None])
            res = np.where(real, corner, -np.inf).max(axis=(2, 4))
            res = np.where(np.isfinite(res), res, 0).transpose(0, 3, 1, 2)
        out[sl] = res.astype(x.dtype)
    return [out]


# -- DeformConv -------------------------------------------------------------------------------
def _deform_infer(ins: list[Value | None], attrs: D) -> Types:
    x, w, off = _x(ins), ins[1], ins[2]
    assert w is not None and off is not None
    return [x.type.with_shape((x.type.shape[0], w.type.shape[0], *off.type.shape[2:]))]


@register("onnx.DeformConv", _deform_infer, arity=(3, 5))
def _deform_conv(ins: A, attrs: D) -> list[np.ndarray]:
    """2-D deformable convolution (torchvision's deform_conv2d): each kernel tap samples the
    input bilinearly (zeros outside) at its grid position plus a learnt offset, times the optional
    mask, then an ordinary grouped matmul with the weights."""
    x, w, off = np.asarray(ins[0]), np.asarray(ins[1]), np.asarray(ins[2])
    b, mask = _opt(ins, 3), _opt(ins, 4)
    if x.ndim != 4:
        raise ValueError(f"DeformConv: spc implements 2-D inputs, got {x.shape}")
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    group, og_off = int(attrs.get("group", 1)), int(attrs.get("offset_group", 1))
    s, d = _ints(attrs, "strides", 2, 1), _ints(attrs, "dilations", 2, 1)
    pads = _ints(attrs, "pads", 4, 0)
    oh, ow = off.shape[2:]
    k = kh * kw
    off = off.astype(np.float64).reshape(n, og_off, k, 2, oh * ow)
    msk = None if mask is None else mask.astype(np.float64).reshape(n, og_off, k, oh * ow)
    base_y = (np.arange(oh) * s[0] - pads[0])[:, None].repeat(ow, 1).ravel()
    base_x = (np.arange(ow) * s[1] - pads[1])[None, :].repeat(oh, 0).ravel()
    flat = x.reshape(n, c, h * wd).astype(np.float64)
    cpg = c // og_off
    col = np.zeros((n, c, k, oh * ow))
    for g in range(og_off):
        src = flat[:, g * cpg:(g + 1) * cpg]
        for t in range(k):
            py = base_y + (t // kw) * d[0] + off[:, g, t, 0]  # (n, P)
            px = base_x + (t % kw) * d[1] + off[:, g, t, 1]
            y0, x0 = np.floor(py), np.floor(px)
            acc = np.zeros((n, cpg, oh * ow))
            for dy in (0, 1):
                for dx in (0, 1):
                    yy, xx = y0 + dy, x0 + dx
                    wt = (1 - np.abs(py - yy)) * (1 - np.abs(px - xx))
                    ok = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < wd)
                    idx = (np.clip(yy, 0, h - 1) * wd + np.clip(xx, 0, wd - 1)).astype(np.int64)
                    acc += np.take_along_axis(src, idx[:, None, :], axis=2) * (wt * ok)[:, None, :]
            col[:, g * cpg:(g + 1) * cpg, t] = acc * (1.0 if msk is None else msk[:, g, t][:, None, :])
    og = m // group
    wm = w.astype(np.float64).reshape(group, og, cg * k)
    y = (wm @ col.reshape(n, group, cg * k, oh * ow)).reshape(n, m, oh, ow)
    if b is not None:
        y = y + b.astype(np.float64).reshape(1, m, 1, 1)
    return [y.astype(x.dtype)]
