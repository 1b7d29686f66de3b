"""Softmax, LogSoftmax and ReduceLogSumExp (as x - logsumexp and the max-shifted chain), the other
Reduce* ops and pooling (GlobalAveragePool, GlobalMaxPool, AveragePool) lowered one by one.

Reductions and softmax over the channel axis of an NCHW map are the last axis of the conv form
(and the spatial axes of one image its third); over any other axis they run in the plain form.
AveragePool runs in the conv form, as ttnn.avg_pool2d takes it.
"""

from __future__ import annotations

from spc.ir.graph import Node
from spc.ir.ops.infer import axes_from, norm_axis
from spc.lowering.emitter import Emitter
from spc.lowering.fused import pool2d_check, pool_window
from spc.lowering.operands import Ins, alias, elementwise_check, plain_of, shape_of
from spc.lowering.registry import lowers
from spc.lowering.shifted import window_mean
from spc.ttnn.formats import DataFormat
from spc.ttnn.layout import DeviceLayout, Form, PlainLayout


# -- softmax and reductions ---------------------------------------------------------------------
def _softmax_check(n: Node) -> str | None:
    if n.attrs.get("coerce_2d"):
        return "opset < 13 softmax over the flattened trailing axes stays on the host"
    return elementwise_check(n)


@lowers("onnx.Softmax", check=_softmax_check)
def _softmax(em: Emitter, n: Node, ins: Ins) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    axis = norm_axis(int(n.attrs.get("axis", -1)), x.type.rank)
    if em.form(ins[0]) is Form.NHWC and x.type.rank == 4 and axis == 1:
        t, dim, lay = em.tiled(ins[0], n.name), -1, DeviceLayout.of(shape_of(x))
    else:
        t, dim, lay = em.tiled(em.to_plain(ins[0], x, n.name), n.name), axis, plain_of(x)
    return em.emit("ttnn.softmax", [t], n.output.name, lay, n.name, dim=dim, numeric_stable=True)


def _log_sum_exp(em: Emitter, n: Node, t: str, axes: list[int], out: str) -> str:
    """log(sum(exp(x))) over ``axes`` of the plain tensor ``t`` (the axes kept, as size 1), as
    m + log(sum(exp(x - m))), m the maximum: the same value, without exp's overflow on large
    logits nor log's -inf where a softmax underflows."""
    x = n.inputs[0]
    assert x is not None
    shape = shape_of(x)
    kept = PlainLayout(tuple(1 if i in axes else d for i, d in enumerate(shape)))
    dims = axes if len(axes) > 1 else axes[0]
    src, base = plain_of(x), n.output.name
    m = em.emit("ttnn.max", [t], base + "/max", kept, n.name, dim=dims, keepdim=True)
    e = em.emit("ttnn.exp", [em.emit("ttnn.subtract", [t, m], base + "/shifted", src, n.name)], base + "/exp", src,
                n.name)
    s = em.emit("ttnn.sum", [e], base + "/sum", kept, n.name, dim=dims, keepdim=True)
    return em.emit("ttnn.add", [em.emit("ttnn.log", [s], base + "/log", kept, n.name), m], out, kept, n.name)


@lowers("onnx.LogSoftmax", check=_softmax_check)
def _log_softmax(em: Emitter, n: Node, ins: Ins) -> str:
    """x - logsumexp(x): log(softmax(x)) is -inf wherever the softmax underflows bf16 (LightGlue's
    assignment, -305 in the source; the translation validation caught it)."""
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    axis = norm_axis(int(n.attrs.get("axis", -1)), x.type.rank)
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    lse = _log_sum_exp(em, n, t, [axis], n.output.name + "/lse")
    return em.emit("ttnn.subtract", [t, lse], n.output.name, plain_of(x), n.name)


def _axes(n: Node) -> list[int] | None:
    x = n.inputs[0]
    assert x is not None
    axes = axes_from(n.inputs, n.attrs, 1)
    if axes is None:
        return None
    if not axes:
        return [] if n.attrs.get("noop_with_empty_axes") else list(range(x.type.rank))
    return sorted(norm_axis(a, x.type.rank) for a in axes)


def _reduce_check(n: Node) -> str | None:
    if _axes(n) is None:
        return "the reduced axes are not constant"
    return elementwise_check(n)


# ONNX reduction -> (element-wise call before, ttnn reduction, element-wise call after)
_REDUCE = {"ReduceSum": (None, "sum", None), "ReduceMean": (None, "mean", None), "ReduceMax": (None, "max", None),
           "ReduceMin": (None, "min", None), "ReduceL2": ("square", "sum", "sqrt"),
           "ReduceSumSquare": ("square", "sum", None), "ReduceL1": ("abs", "sum", None)}


def _reduce(em: Emitter, n: Node, ins: Ins, kind: str) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    axes = _axes(n)
    assert axes is not None
    if not axes:
        return alias(em, n, ins)
    keep = bool(n.attrs.get("keepdims", 1))
    shape = shape_of(x)
    before, op, after = _REDUCE[kind]
    conv_axes = axes == [1] or (axes == [2, 3] and shape[0] == 1 and keep)
    if em.form(ins[0]) is Form.NHWC and x.type.rank == 4 and conv_axes:
        # the channel axis is the conv form's last; the spatial axes of one image are its third
        t, dims, lay = em.tiled(ins[0], n.name), [-1] if axes == [1] else [2], DeviceLayout.of(shape_of(n.output))
        keep_device, src = True, DeviceLayout.of(shape)
    else:
        t, dims, lay = em.tiled(em.to_plain(ins[0], x, n.name), n.name), axes, plain_of(n.output)
        keep_device, src = keep, plain_of(x)
    base = n.output.name
    if before == "square":
        t = em.emit("ttnn.multiply", [t, t], base + "/square", src, n.name)
    elif before == "abs":
        t = em.emit("ttnn.abs", [t], base + "/abs", src, n.name)
    r = em.emit(f"ttnn.{op}", [t], base + ("/" + op if after else ""), lay, n.name,
                dim=dims if len(dims) > 1 else dims[0], keepdim=keep_device)
    return em.emit(f"ttnn.{after}", [r], base, lay, n.name) if after else r


def _register_reduce(kind: str) -> None:
    lowers(f"onnx.{kind}", check=_reduce_check)(lambda em, n, ins: _reduce(em, n, ins, kind))


for _kind in _REDUCE:
    _register_reduce(_kind)


@lowers("onnx.ReduceLogSumExp", check=_reduce_check)
def _reduce_log_sum_exp(em: Emitter, n: Node, ins: Ins) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    axes = _axes(n)
    assert axes is not None
    if not axes:
        return alias(em, n, ins)
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    if n.attrs.get("keepdims", 1):
        return _log_sum_exp(em, n, t, axes, n.output.name)
    lse = _log_sum_exp(em, n, t, axes, n.output.name + "/kept")
    out = plain_of(n.output)
    return em.emit("ttnn.reshape", [lse], n.output.name, out, n.name, shape=out.device_shape)


# -- pooling ----------------------------------------------------------------------------------------
def _global_pool(em: Emitter, n: Node, ins: Ins, op: str) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    axes = list(range(2, x.type.rank))
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    return em.emit(f"ttnn.{op}", [t], n.output.name, plain_of(n.output), n.name, dim=axes, keepdim=True)


lowers("onnx.GlobalAveragePool", check=elementwise_check)(lambda em, n, ins: _global_pool(em, n, ins, "mean"))
lowers("onnx.GlobalMaxPool", check=elementwise_check)(lambda em, n, ins: _global_pool(em, n, ins, "max"))


def _avg_pool_check(n: Node) -> str | None:
    if any(d != 1 for d in n.attrs.get("dilations", [1, 1])):
        return "ttnn.avg_pool2d has no dilation"
    return pool2d_check(n, "ttnn.avg_pool2d")


@lowers("onnx.AveragePool", check=_avg_pool_check)
def _avg_pool(em: Emitter, n: Node, ins: Ins) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    src = DeviceLayout.of(shape_of(x))
    pads = n.attrs.get("pads", [0, 0, 0, 0])
    t = em.to_nhwc(ins[0], x, n.name)
    if (em.dtypes.get(t) is DataFormat.FLOAT32 and not n.attrs.get("ceil_mode", 0)
            and (not any(pads) or n.attrs.get("count_include_pad", 0))):
        # ttnn.avg_pool2d takes bf16 only: a map stored in float32 keeps float32 (lowering/shifted.py)
        return window_mean(em, t, src, *pool_window(n), DeviceLayout.of(shape_of(n.output)), n.output.name, n.name)
    t = em.row_major(em.stored_as(t, DataFormat.BFLOAT16, n.name), n.name)  # bf16 only
    return em.emit("ttnn.avg_pool2d", [t], n.output.name, DeviceLayout.of(shape_of(n.output)), n.name,
                   batch_size=src.n, input_h=src.h, input_w=src.w, channels=src.c,
                   kernel_size=list(n.attrs["kernel_shape"]), stride=list(n.attrs.get("strides", [1, 1])),
                   padding=[pads[0], pads[1]], ceil_mode=bool(n.attrs.get("ceil_mode", 0)),
                   count_include_pad=bool(n.attrs.get("count_include_pad", 0)))
