"""ONNX resampling: DepthToSpace, Resize, GridSample, AffineGrid and RoiAlign.

The evaluators also run on full-size feature maps (fusion checks, host stages), so Resize and
GridSample are separable gather-and-weight passes on whole arrays, and RoiAlign works in chunks
of ROIs of bounded size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from spc.ir.graph import Value
from spc.ir.ops import register
from spc.ir.ops.infer import const, norm_axis
from spc.ir.ops.operands import A, D, Types, _bshape, _in, _opt, _static, _work, _x
from spc.ir.types import Dim

# conformance cases spc refuses on purpose (frontend/conformance.py): case name -> why
CONFORMANCE_EXCEPTIONS: dict[str, str] = {}


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
