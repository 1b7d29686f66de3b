"""ONNX convolutions: Conv, ConvTranspose, DeformConv and Col2Im, with the window
geometry (kernel, strides, dilations, pads, auto_pad) they share with the pools (onnx_pool.py).

Conv, ConvTranspose and Col2Im are N-D on (N, C, D1..Dn) inputs (DeformConv is 2-D). Their
evaluators also run on full-size feature maps (fusion checks, host stages), so they work per
kernel tap on whole arrays: Conv as an im2col in bands of output rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from spc.ir.graph import Value
from spc.ir.ops import register
from spc.ir.ops.infer import const
from spc.ir.ops.operands import A, D, Types, _attr_ints, _in, _opt, _static, _work, _x

# conformance cases spc refuses on purpose (frontend/conformance.py): case name -> why
CONFORMANCE_EXCEPTIONS: dict[str, str] = {}

_AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")
# elements (float64) of one im2col band: few, large matmuls (a threaded BLAS synchronises per call),
# yet bounded memory (64 MB) on full-size maps
_BAND = 1 << 23


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
    strides, dil = _attr_ints(attrs, "strides", nd, 1), _attr_ints(attrs, "dilations", nd, 1)
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
        pads = _attr_ints(attrs, "pads", 2 * nd, 0) if mode == "NOTSET" else (0,) * (2 * nd)
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
    elif all(s == 1 for s in _attr_ints(attrs, "strides", nd, 1)):
        ext = [d * (k - 1) + 1 for d, k in zip(_attr_ints(attrs, "dilations", nd, 1), kernel)]
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
    s, d = _attr_ints(attrs, "strides", nd, 1), _attr_ints(attrs, "dilations", nd, 1)
    opad = _attr_ints(attrs, "output_padding", nd, 0)
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
    pads = _attr_ints(attrs, "pads", 2 * nd, 0)
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
    s, d = _attr_ints(attrs, "strides", nd, 1), _attr_ints(attrs, "dilations", nd, 1)
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
    s, d = _attr_ints(attrs, "strides", 2, 1), _attr_ints(attrs, "dilations", 2, 1)
    pads = _attr_ints(attrs, "pads", 4, 0)
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
