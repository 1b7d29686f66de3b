"""ONNX neural-network ops: convolution, pooling, normalisation, softmax, sampling."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from spc.ir.graph import Value
from spc.ir.ops import register
from spc.ir.ops.infer import axes_from, norm_axis, same_type
from spc.ir.types import TensorType

A = list[Any]
D = dict[str, Any]


def _spatial(attrs: D, kernel: tuple[int, int]) -> tuple[list[int], list[int], list[int]]:
    if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise NotImplementedError(f"auto_pad={attrs['auto_pad']}")
    pads = list(attrs.get("pads", [0, 0, 0, 0]))
    return list(attrs.get("strides", [1, 1])), pads, list(attrs.get("dilations", [1, 1]))


def _out_size(n: int, k: int, s: int, p0: int, p1: int, d: int, ceil: bool = False) -> int:
    span = n + p0 + p1 - d * (k - 1) - 1
    return (-(-span // s) if ceil else span // s) + 1


def pool_out_hw(h: int, w: int, attrs: D) -> tuple[int, int]:
    k = attrs["kernel_shape"]
    strides, pads, dil = _spatial(attrs, tuple(k))
    ceil = bool(attrs.get("ceil_mode", 0))
    return (_out_size(h, k[0], strides[0], pads[0], pads[2], dil[0], ceil),
            _out_size(w, k[1], strides[1], pads[1], pads[3], dil[1], ceil))


def _conv_infer(ins: list[Value | None], attrs: D) -> list[TensorType] | None:
    x, w = ins[0], ins[1]
    assert x is not None and w is not None
    if not x.type.is_static or x.type.rank != 4:
        return None
    n, _, h, wd = x.type.static_shape
    kh, kw = w.type.static_shape[2:]
    strides, pads, dil = _spatial(attrs, (kh, kw))
    oh = _out_size(h, kh, strides[0], pads[0], pads[2], dil[0])
    ow = _out_size(wd, kw, strides[1], pads[1], pads[3], dil[1])
    return [x.type.with_shape((n, w.type.static_shape[0], oh, ow))]


def conv2d_nchw(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides, pads, dil, group: int) -> np.ndarray:
    """Reference NCHW convolution in float64 (im2col); slow, for tests and folding only."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    o, cg, kh, kw = w.shape
    eh, ew = dil[0] * (kh - 1) + 1, dil[1] * (kw - 1) + 1
    win = sliding_window_view(xp, (eh, ew), axis=(2, 3))[:, :, ::strides[0], ::strides[1], ::dil[0], ::dil[1]]
    outs = []
    og = o // group
    for g in range(group):
        wg = w[g * og:(g + 1) * og].astype(np.float64)
        outs.append(np.einsum("nchwij,ocij->nohw", win[:, g * cg:(g + 1) * cg], wg, optimize=True))
    y = np.concatenate(outs, axis=1)
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return y.astype(x.dtype)


@register("onnx.Conv", _conv_infer, arity=(2, 3))
def _conv(ins: A, attrs: D) -> list[np.ndarray]:
    x, w = np.asarray(ins[0]), np.asarray(ins[1])
    b = np.asarray(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    strides, pads, dil = _spatial(attrs, w.shape[2:])
    return [conv2d_nchw(x, w, b, strides, pads, dil, int(attrs.get("group", 1)))]


def _pool_infer(ins: list[Value | None], attrs: D) -> list[TensorType] | None:
    x = ins[0]
    assert x is not None
    if x.type.rank != len(attrs["kernel_shape"]) + 2:
        raise ValueError(f"a {len(attrs['kernel_shape'])}-D kernel needs a rank-"
                         f"{len(attrs['kernel_shape']) + 2} input, got {x.type}")
    if x.type.rank != 4 or not all(isinstance(d, int) for d in x.type.shape[2:]):
        return None
    h, w = pool_out_hw(int(x.type.shape[2]), int(x.type.shape[3]), attrs)
    return [x.type.with_shape((*x.type.shape[:2], h, w))]


def max_pool_nchw(x: np.ndarray, kernel, strides, pads, dil=(1, 1), ceil: bool = False) -> np.ndarray:
    """Max pooling with -inf padding, as ONNX and torch define it; separable (rows, then
    columns) so that a 9x9 window costs 18 comparisons per pixel, not 81."""
    h, w = x.shape[-2:]
    oh = _out_size(h, kernel[0], strides[0], pads[0], pads[2], dil[0], ceil)
    ow = _out_size(w, kernel[1], strides[1], pads[1], pads[3], dil[1], ceil)
    eh, ew = dil[0] * (kernel[0] - 1) + 1, dil[1] * (kernel[1] - 1) + 1
    need_h = (oh - 1) * strides[0] + eh - (h + pads[0])
    need_w = (ow - 1) * strides[1] + ew - (w + pads[1])
    fill = -np.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min
    xp = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(pads[0], max(need_h, 0)), (pads[1], max(need_w, 0))],
                constant_values=fill)

    def along(a: np.ndarray, axis: int, span: int, stride: int, d: int, n: int) -> np.ndarray:
        # a running maximum over the window's taps: contiguous work, no strided reductions
        def tap(k: int) -> np.ndarray:
            sel = [slice(None)] * a.ndim
            sel[axis] = slice(k * d, k * d + (n - 1) * stride + 1, stride)
            return a[tuple(sel)]

        out = tap(0).copy()
        for k in range(1, (span - 1) // d + 1):
            np.maximum(out, tap(k), out=out)
        return out

    y = along(xp, x.ndim - 1, ew, strides[1], dil[1], ow)
    return along(y, x.ndim - 2, eh, strides[0], dil[0], oh)


@register("onnx.MaxPool", _pool_infer, arity=(1, 1))
def _maxpool(ins: A, attrs: D) -> list[np.ndarray]:
    if attrs.get("storage_order", 0):
        raise NotImplementedError("MaxPool storage_order=1")
    x = np.asarray(ins[0])
    strides, pads, dil = _spatial(attrs, tuple(attrs["kernel_shape"]))
    return [max_pool_nchw(x, attrs["kernel_shape"], strides, pads, dil, bool(attrs.get("ceil_mode", 0)))]


@register("onnx.BatchNormalization", same_type, arity=(5, 5))
def _batchnorm(ins: A, attrs: D) -> list[np.ndarray]:
    x, scale, bias, mean, var = (np.asarray(a) for a in ins[:5])
    eps = attrs.get("epsilon", 1e-5)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    a = scale / np.sqrt(var + eps)
    return [(x * a.reshape(shape) + (bias - mean * a).reshape(shape)).astype(x.dtype)]


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@register("onnx.Softmax", same_type, arity=(1, 1))
def _softmax(ins: A, attrs: D) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    return [softmax(x, attrs.get("axis", -1)).astype(x.dtype)]


def _reduce_infer(ins: list[Value | None], attrs: D) -> list[TensorType] | None:
    x = ins[0]
    assert x is not None
    axes = axes_from(ins, attrs, 1)
    if axes is None:
        return None
    rank = x.type.rank
    axes = [norm_axis(a, rank) for a in axes] or ([] if attrs.get("noop_with_empty_axes") else list(range(rank)))
    keep = attrs.get("keepdims", 1)
    shape = tuple((1 if i in axes else d) for i, d in enumerate(x.type.shape) if keep or i not in axes)
    return [x.type.with_shape(shape)]


def _reduce(name: str, fn) -> None:
    def run(ins: A, attrs: D) -> list[np.ndarray]:
        x = np.asarray(ins[0])
        axes = attrs.get("axes")
        if axes is None and len(ins) > 1 and ins[1] is not None:
            axes = list(np.atleast_1d(ins[1]))
        if not axes:
            if attrs.get("noop_with_empty_axes"):
                return [x]
            axes = list(range(x.ndim))
        out = fn(x, axis=tuple(int(a) for a in axes), keepdims=bool(attrs.get("keepdims", 1)))
        return [np.asarray(out).astype(x.dtype)]

    register(f"onnx.{name}", _reduce_infer, arity=(1, 2))(run)


_reduce("ReduceL2", lambda x, axis, keepdims: np.sqrt(np.sum(np.square(x.astype(np.float64)), axis=axis,
                                                                keepdims=keepdims)))
_reduce("ReduceSum", np.sum)
_reduce("ReduceMax", np.max)
_reduce("ReduceMean", np.mean)
_reduce("ReduceSumSquare", lambda x, axis, keepdims: np.sum(np.square(x), axis=axis, keepdims=keepdims))


def depth_to_space(x: np.ndarray, block: int, mode: str) -> np.ndarray:
    n, c, h, w = x.shape
    if mode == "DCR":
        y = x.reshape(n, block, block, c // block**2, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // block**2, block, block, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // block**2, h * block, w * block)


def _d2s_infer(ins: list[Value | None], attrs: D) -> list[TensorType] | None:
    x = ins[0]
    assert x is not None
    if not x.type.is_static:
        return None
    n, c, h, w = x.type.static_shape
    b = int(attrs["blocksize"])
    return [x.type.with_shape((n, c // (b * b), h * b, w * b))]


@register("onnx.DepthToSpace", _d2s_infer, arity=(1, 1))
def _depth_to_space(ins: A, attrs: D) -> list[np.ndarray]:
    return [depth_to_space(np.asarray(ins[0]), int(attrs["blocksize"]), attrs.get("mode", "DCR"))]


def _grid_sample_infer(ins: list[Value | None], attrs: D) -> list[TensorType] | None:
    x, g = ins[0], ins[1]
    assert x is not None and g is not None
    return [x.type.with_shape((x.type.shape[0], x.type.shape[1], g.type.shape[1], g.type.shape[2]))]


def grid_sample_bilinear(x: np.ndarray, grid: np.ndarray, align_corners: bool) -> np.ndarray:
    """ONNX GridSample, bilinear, zero padding, NCHW input, grid (N, Ho, Wo, 2) as (x, y)."""
    n, c, h, w = x.shape
    gx, gy = grid[..., 0].astype(np.float64), grid[..., 1].astype(np.float64)
    if align_corners:
        fx, fy = (gx + 1) / 2 * (w - 1), (gy + 1) / 2 * (h - 1)
    else:
        fx, fy = ((gx + 1) * w - 1) / 2, ((gy + 1) * h - 1) / 2
    x0, y0 = np.floor(fx).astype(np.int64), np.floor(fy).astype(np.int64)
    out = np.zeros((n, c) + gx.shape[1:], np.float64)
    for dy in (0, 1):
        for dx in (0, 1):
            xi, yi = x0 + dx, y0 + dy
            wgt = (1 - np.abs(fx - xi)) * (1 - np.abs(fy - yi))
            valid = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h)
            xc, yc = np.clip(xi, 0, w - 1), np.clip(yi, 0, h - 1)
            for b in range(n):
                vals = x[b][:, yc[b], xc[b]]  # (c, Ho, Wo)
                out[b] += vals * (wgt[b] * valid[b])[None]
    return out.astype(x.dtype)


@register("onnx.GridSample", _grid_sample_infer, arity=(2, 2))
def _grid_sample(ins: A, attrs: D) -> list[np.ndarray]:
    mode = attrs.get("mode", "linear")
    if mode not in ("bilinear", "linear") or attrs.get("padding_mode", "zeros") != "zeros":
        raise NotImplementedError(f"GridSample mode={mode} padding={attrs.get('padding_mode')}")
    return [grid_sample_bilinear(np.asarray(ins[0]), np.asarray(ins[1]), bool(attrs.get("align_corners", 0)))]
