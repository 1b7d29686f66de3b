"""Normalisation lowered one by one: BatchNormalization as a per-channel ``x * a + b`` in the form
of its input, InstanceNormalization and LayerNormalization as mean and variance spelled out in the
plain form, then their constant scale and bias.
"""

from __future__ import annotations

import numpy as np

from spc.ir.graph import Node, Value
from spc.ir.ops.infer import norm_axis
from spc.lowering.emitter import Emitter
from spc.lowering.operands import Ins, elementwise_check, plain_of, shape_of
from spc.lowering.registry import lowers
from spc.ttnn.formats import DataFormat
from spc.ttnn.layout import DeviceLayout, Form, Layout, PlainLayout


def _bn_check(n: Node) -> str | None:
    if any(v is None or not v.is_const for v in n.inputs[1:5]):
        return "batch normalisation with non-constant statistics stays on the host"
    if len(n.outputs) > 1 or n.attrs.get("training_mode"):
        return "training-mode batch normalisation stays on the host"
    return elementwise_check(n)


@lowers("onnx.BatchNormalization", check=_bn_check)
def _batch_norm(em: Emitter, n: Node, ins: Ins) -> str:
    """(x - mean) / sqrt(var + eps) * scale + bias as x * a + b, with a and b per channel."""
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    scale, bias, mean, var = (np.asarray(v.data, np.float64) for v in n.inputs[1:5])  # type: ignore[union-attr]
    a = scale / np.sqrt(var + float(n.attrs.get("epsilon", 1e-5)))
    b = bias - mean * a
    c = a.shape[0]
    if em.form(ins[0]) is Form.NHWC and x.type.rank == 4:
        t, shape, lay = em.tiled(ins[0], n.name), [1, 1, 1, c], DeviceLayout.of(shape_of(x))
    else:
        t, shape, lay = em.tiled(em.to_plain(ins[0], x, n.name), n.name), [1, c] + [1] * (x.type.rank - 2), plain_of(x)
    w = n.inputs[1]
    assert w is not None
    # the per-channel factors in float32: in bf16 each would move its channel by up to 1/512
    ka = em.constant(w, a, shape, n.name, dtype=DataFormat.FLOAT32)
    kb = em.constant(n.inputs[2], b, shape, n.name, dtype=DataFormat.FLOAT32)  # type: ignore[arg-type]
    # x * a kept in float32: a batch norm after a ReLU (SuperPoint-Open) then rounds once, not twice
    # (measured on its 480x640 export: min score-map PCC 0.9952 -> 0.9976 against onnxruntime)
    store = n.precision.output_dtype if n.precision is not None else em.dtypes.get(t, DataFormat.BFLOAT16)
    y = em.emit("ttnn.multiply", [t, ka], n.output.name + "/scaled", lay, n.name, store=DataFormat.FLOAT32)
    return em.emit("ttnn.add", [y, kb], n.output.name, lay, n.name, store=store)


def _normalize(em: Emitter, n: Node, t: str, dims: list[int], lay: Layout, stat: Layout, eps: float) -> str:
    """(x - mean) * rsqrt(mean((x - mean)^2) + eps) over ``dims``."""
    base = n.output.name
    mu = em.emit("ttnn.mean", [t], base + "/mean", stat, n.name, dim=dims if len(dims) > 1 else dims[0], keepdim=True)
    d = em.emit("ttnn.subtract", [t, mu], base + "/centred", lay, n.name)
    sq = em.emit("ttnn.multiply", [d, d], base + "/sq", lay, n.name)
    var = em.emit("ttnn.mean", [sq], base + "/var", stat, n.name, dim=dims if len(dims) > 1 else dims[0], keepdim=True)
    var = em.emit("ttnn.add", [var], base + "/var_eps", stat, n.name, scalar=eps)
    inv = em.emit("ttnn.rsqrt", [var], base + "/inv_std", stat, n.name)
    return em.emit("ttnn.multiply", [d, inv], base + "/normalised", lay, n.name)


def _affine(em: Emitter, n: Node, y: str, lay: Layout, scale: Value | None, bias: Value | None,
            shape: list[int]) -> str:
    base = n.output.name
    if scale is not None:
        y = em.emit("ttnn.multiply", [y, em.constant(scale, np.asarray(scale.data).reshape(shape), shape, n.name)],
                    base if bias is None else base + "/scaled", lay, n.name)
    if bias is not None:
        y = em.emit("ttnn.add", [y, em.constant(bias, np.asarray(bias.data).reshape(shape), shape, n.name)], base,
                    lay, n.name)
    if y != base:
        y = em.emit("ttnn.reshape", [y], base, lay, n.name, shape=lay.device_shape)
    return y


def _const_inputs_check(n: Node) -> str | None:
    if any(v is not None and not v.is_const for v in n.inputs[1:]):
        return "scale and bias must be constants"
    if len(n.outputs) > 1:
        return "the statistics outputs stay on the host"
    return elementwise_check(n)


@lowers("onnx.InstanceNormalization", check=_const_inputs_check)
def _instance_norm(em: Emitter, n: Node, ins: Ins) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    r = x.type.rank
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    stat = PlainLayout(tuple(d if i < 2 else 1 for i, d in enumerate(shape_of(x))))
    y = _normalize(em, n, t, list(range(2, r)), plain_of(x), stat, float(n.attrs.get("epsilon", 1e-5)))
    c = shape_of(x)[1]
    return _affine(em, n, y, plain_of(x), n.input(1), n.input(2), [1, c] + [1] * (r - 2))


@lowers("onnx.LayerNormalization", check=_const_inputs_check)
def _layer_norm(em: Emitter, n: Node, ins: Ins) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    r = x.type.rank
    axis = norm_axis(int(n.attrs.get("axis", -1)), r)
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    shape = shape_of(x)
    stat = PlainLayout(tuple(d if i < axis else 1 for i, d in enumerate(shape)))
    y = _normalize(em, n, t, list(range(axis, r)), plain_of(x), stat, float(n.attrs.get("epsilon", 1e-5)))
    param = [1] * axis + list(shape[axis:])
    return _affine(em, n, y, plain_of(x), n.input(1), n.input(2), param)
