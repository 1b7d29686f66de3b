"""Window ops on float32 maps, exact, from shifted views: what ttnn's pools and bilinear upsample
cannot hold (they take bf16 only: pool_op.cpp "Only BFLOAT16 supported for now", upsample "Bilinear
upsample requires BFLOAT16 input"). A block the precision plan stores in float32 keeps float32
through them instead of being rounded to bf16 at each one: DISK's U-Net (four average pools, four
bilinear upsamplings, its NMS max pool) in float32 gives keypoints F1 0.99 against onnxruntime
where the bf16 roundings there gave 0.96 (docs/matchers.md).

Each axis in turn is the third of a 4-D row-major view (the columns of ``[1, N*H, W, C]``, then the
rows of ``[1, N, H, W'*C]``): padded (``ttnn.pad``) or edge-extended (``ttnn.concat`` of slices),
cut into its k shifted, strided views (``ttnn.slice``), which element-wise calls in tiles combine
(``ttnn.maximum``; ``ttnn.add`` then ``ttnn.multiply``); an upsampling's phases are interleaved by
a concat on a unit axis and a reshape. Before and after::

    %p = onnx.MaxPool(%x) {kernel_shape = [5, 5], pads = [2, 2, 2, 2]}     (%x stored in float32)
    ->  view, pad -inf, 5 slices, 4 x ttnn.maximum (columns); the same on the rows; reshape
"""

from __future__ import annotations

from collections.abc import Callable

from spc.lowering.emitter import Emitter
from spc.ttnn.layout import DeviceLayout, PlainLayout


def _view(view: list[int], axis_len: int) -> list[int]:
    return [view[0], view[1], axis_len, view[3]]


def _axis_view(src: DeviceLayout, h: int, w: int, axis: int) -> list[int]:
    """The row-major 4-D view of an N x h x w x C map that puts ``axis`` (1: columns, 0: rows) third."""
    return [1, src.n * h, w, src.c] if axis == 1 else [1, src.n, h, w * src.c]


class _Axis:
    """One spatial axis of a map being rewritten: its current 4-D row-major tensor and view."""

    def __init__(self, em: Emitter, source: str, out: str) -> None:
        self.em, self.source, self.out = em, source, out

    def name(self, what: str) -> str:
        return self.em.unused(f"{self.out}/{what}")

    def emit(self, op: str, ins: list[str], what: str, dims: list[int], **args) -> str:
        """``op`` making a ``dims`` tensor named ``what`` under the op's output (``args``: the call's)."""
        return self.em.emit(op, ins, self.name(what), PlainLayout(tuple(dims)), self.source, **args)

    def slice(self, t: str, view: list[int], start: int, stop: int, step: int, what: str) -> str:
        count = len(range(start, stop, step))
        return self.emit("ttnn.slice", [t], what, _view(view, count), starts=[0, 0, start, 0],
                         ends=[view[0], view[1], stop, view[3]], steps=[1, 1, step, 1])


def _windows(em: Emitter, x: str, src: DeviceLayout, kernel: tuple[int, int], stride: tuple[int, int],
             pads: tuple[int, int], fill: float, combine: Callable[[_Axis, list[str], list[int]], str],
             out: DeviceLayout, name: str, source: str) -> str:
    """Each axis padded by ``pads`` with ``fill`` and cut into its ``kernel`` shifted views of step
    ``stride``, which ``combine`` reduces to one (tiled inputs, a tiled result)."""
    ax = _Axis(em, source, name)
    t = em.row_major(em.interleaved(x, source), source)
    h, w = src.h, src.w
    for axis in (1, 0):  # the columns, then the rows
        view = _axis_view(src, h, w, axis)
        t = ax.emit("ttnn.reshape", [t], f"view{axis}", view, shape=view)
        p, k, s, n_out = pads[axis], kernel[axis], stride[axis], (out.h, out.w)[axis]
        if p:
            view = _view(view, view[2] + 2 * p)
            t = ax.emit("ttnn.pad", [t], f"pad{axis}", view, padding=[[0, 0], [0, 0], [p, p], [0, 0]], value=fill)
        shifted = [em.tiled(ax.slice(t, view, d, d + s * (n_out - 1) + 1, s, f"shift{axis}_{d}"), source)
                   for d in range(k)]
        t = em.row_major(combine(ax, shifted, _view(view, n_out)), source)
        if axis == 1:
            w = n_out
        else:
            h = n_out
    return em.emit("ttnn.reshape", [t], name, out, source, shape=out.device_shape)


def window_max(em: Emitter, x: str, src: DeviceLayout, kernel: tuple[int, int], stride: tuple[int, int],
               pads: tuple[int, int], out: DeviceLayout, name: str, source: str) -> str:
    """ONNX MaxPool (no dilation, no ceil mode) of a float32 map: the maximum of its shifted views,
    the padding -inf (never a window's maximum: every window holds one element of the map)."""

    def combine(ax: _Axis, views: list[str], shape: list[int]) -> str:
        best = views[0]
        for i, v in enumerate(views[1:], 1):
            best = ax.emit("ttnn.maximum", [best, v], f"max{i}", shape)
        return best

    return _windows(em, x, src, kernel, stride, pads, float("-inf"), combine, out, name, source)


def window_mean(em: Emitter, x: str, src: DeviceLayout, kernel: tuple[int, int], stride: tuple[int, int],
                pads: tuple[int, int], out: DeviceLayout, name: str, source: str) -> str:
    """ONNX AveragePool counting the padding (count_include_pad, or none) of a float32 map: the sum
    of its shifted views (the padding zeros) over the window's size, an axis at a time."""

    def combine(ax: _Axis, views: list[str], shape: list[int]) -> str:
        total = views[0]
        for i, v in enumerate(views[1:], 1):
            total = ax.emit("ttnn.add", [total, v], f"sum{i}", shape)
        return ax.emit("ttnn.multiply", [total], "mean", shape, scalar=1.0 / len(views)) if len(views) > 1 else total

    return _windows(em, x, src, kernel, stride, pads, 0.0, combine, out, name, source)


def upsample_linear(em: Emitter, x: str, src: DeviceLayout, scales: tuple[int, int], out: DeviceLayout, name: str,
                    source: str) -> str:
    """ONNX Resize, linear, half-pixel, by whole numbers, of a float32 map. Output j = s i + r of an
    axis sits at i + f, f = (r + 1/2) / s - 1/2: (1 - |f|) x[i] + |f| x[i -+ 1], the neighbour
    clamped at the edge (ONNX's and torch's rule). Each axis: the map and its neighbours (edge
    views concatenated), the s phases, interleaved on a unit axis and reshaped."""
    ax = _Axis(em, source, name)
    t = em.row_major(em.interleaved(x, source), source)
    h, w = src.h, src.w
    for axis in (1, 0):
        s = scales[axis]
        view = _axis_view(src, h, w, axis)
        t = ax.emit("ttnn.reshape", [t], f"view{axis}", view, shape=view)
        length = view[2]
        if s > 1:
            if length == 1:  # its own neighbour on both sides (an image-pooling branch's 1x1 map)
                before = after = t
            else:
                first, last = ax.slice(t, view, 0, 1, 1, f"first{axis}"), ax.slice(t, view, length - 1, length, 1,
                                                                                        f"last{axis}")
                body_lo, body_hi = (ax.slice(t, view, 0, length - 1, 1, f"lo{axis}"),
                                    ax.slice(t, view, 1, length, 1, f"hi{axis}"))
                before = ax.emit("ttnn.concat", [first, body_lo], f"before{axis}", view, dim=2)  # x[i - 1]
                after = ax.emit("ttnn.concat", [body_hi, last], f"after{axis}", view, dim=2)  # x[i + 1]
            here = em.tiled(t, source)
            phases = []
            for r in range(s):
                f = (r + 0.5) / s - 0.5
                if f == 0:  # the sample itself (an odd scale's middle phase)
                    phases.append(here)
                    continue
                near = em.tiled(before if f < 0 else after, source)
                a = ax.emit("ttnn.multiply", [here], f"own{axis}_{r}", view, scalar=1.0 - abs(f))
                b = ax.emit("ttnn.multiply", [near], f"near{axis}_{r}", view, scalar=abs(f))
                phases.append(ax.emit("ttnn.add", [a, b], f"phase{axis}_{r}", view))
            unit = [1, view[1] * length, 1, view[3]]
            parts = [ax.emit("ttnn.reshape", [em.row_major(p, source)], f"unit{axis}_{r}", unit, shape=unit)
                     for r, p in enumerate(phases)]
            t = ax.emit("ttnn.concat", parts, f"interleaved{axis}", [1, view[1] * length, s, view[3]], dim=2)
        if axis == 1:
            w *= s
        else:
            h *= s
    return em.emit("ttnn.reshape", [t], name, out, source, shape=out.device_shape)
