"""fuse-conv-bias-relu: Conv (+ bias) (+ Relu) becomes one spc.Conv2d, as ttnn.conv2d takes it.

Before::

    %c: f32[1,64,120,160] = onnx.Conv(%x, %w, %b) {pads = [1, 1, 1, 1], ...}
    %r: f32[1,64,120,160] = onnx.Relu(%c)

After::

    %r: f32[1,64,120,160] = spc.Conv2d(%x, %w, %b) {activation = "relu", pads = [1, 1, 1, 1], ...}

A Conv whose output has other users keeps its Relu separate (fusing would change what they see);
it still becomes an spc.Conv2d with ``activation = "none"``. A positive per-channel Mul after a
Conv without bias (a quantized model's scale of its integer convolution: passes/fold_qdq.py)
becomes the spc.Conv2d's fourth operand, so that the weights stay what they are; a per-channel
Add after a conv without bias is its bias, and a Relu after one without activation its activation::

    %a = onnx.Conv(%k, %w_int)  %s = onnx.Mul(%a, %m)  %c = onnx.Add(%s, %b)  %r = onnx.Relu(%c)
    ->  %r = spc.Conv2d(%k, %w_int, %b, %m) {activation = "relu"}     // relu(conv(k, w) * m + b)
"""

from __future__ import annotations

import numpy as np

from spc.ir import ops
from spc.ir.graph import Graph, Node, Value
from spc.ir.ops.onnx_conv import explicit_pads
from spc.passes.rewrite import Match, P, Rule, RulePass, single_use


def _conv_attrs(conv: Node, activation: str) -> dict:
    w = conv.inputs[1]
    assert w is not None
    pads = list(conv.attrs.get("pads", [0, 0, 0, 0]))
    if conv.attrs.get("auto_pad", "NOTSET") != "NOTSET":  # SAME_UPPER/LOWER, VALID: on the input's size
        pads = explicit_pads(conv.inputs[0].type.static_shape[2:], w.type.static_shape[2:], conv.attrs)
    return {"strides": list(conv.attrs.get("strides", [1, 1])), "pads": pads,
            "dilations": list(conv.attrs.get("dilations", [1, 1])), "group": int(conv.attrs.get("group", 1)),
            "kernel_shape": list(w.type.static_shape[2:]), "activation": activation}


def _unsupported(conv: Node) -> str | None:
    """Why spc.Conv2d cannot take this Conv (it stays onnx.Conv, which runs on the host)."""
    x, w = conv.inputs[0], conv.inputs[1]
    if x.type.rank != 4:
        return f"a {x.type.rank}-D convolution (spc.Conv2d is 2-D)"
    if conv.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID") and not (
            x.type.is_static and w is not None and w.type.is_static):
        return f"auto_pad {conv.attrs['auto_pad']} on a dynamic size (spc.Conv2d takes explicit pads: --input-shape)"
    return None


def _fused(g: Graph, conv: Node, activation: str, before: Node):
    return g.make_node(ops.get("spc.Conv2d"), list(conv.inputs), _conv_attrs(conv, activation),
                       name=conv.name, take_name=True, before=before).output


def _per_channel(conv: Node, v: Value | None, what: str, positive: bool = False) -> str | None:
    """Why ``v`` is not a constant per output channel of ``conv`` (positive, if asked), or None."""
    c = int(conv.output.type.static_shape[1]) if conv.output.type.is_static and conv.output.type.rank == 4 else -1
    if v is None or not v.is_const or tuple(v.type.static_shape) not in ((1, c, 1, 1), (c, 1, 1)):
        return f"the {what}'s second operand is not a constant per output channel"
    if not np.isfinite(v.data).all() or (positive and not (v.data > 0).all()):
        return f"a {what} that is not {'positive' if positive else 'finite'} (a Relu would not commute with it)"
    if v.type.dtype is not conv.output.type.dtype:
        return f"a {v.type.dtype.value} {what} of a {conv.output.type.dtype.value} conv"
    return None


def _scaled(g: Graph, m: Match) -> Value:
    conv = m.node("conv")
    x, w = conv.inputs[0], conv.inputs[1]
    return g.make_node(ops.get("spc.Conv2d"), [x, w, None, m.node("mul").inputs[1]], _conv_attrs(conv, "none"),
                       name=conv.name, take_name=True, before=m.node("mul")).output


def _scale_check(g: Graph, m: Match) -> str | None:
    conv = m.node("conv")
    if conv.input(2) is not None:
        return "the conv has a bias: the scale would scale it"
    return _per_channel(conv, m.node("mul").inputs[1], "Mul", positive=True) or _unsupported(conv)


def _with(g: Graph, m: Match, root: str, activation: str | None = None, bias: Value | None = None) -> Value:
    """The spc.Conv2d bound to "conv2d" with its activation or its bias given."""
    n = m.node("conv2d")
    inputs = list(n.inputs) + [None] * (4 - len(n.inputs))
    if bias is not None:
        inputs[2] = bias
    attrs = dict(n.attrs, activation=activation or n.attrs["activation"])
    return g.make_node(ops.get("spc.Conv2d"), inputs, attrs, name=n.name, take_name=True, before=m.node(root)).output


def _bias_check(g: Graph, m: Match) -> str | None:
    n = m.node("conv2d")
    if n.attrs["activation"] != "none" or n.input(2) is not None:
        return "the conv already has its bias or its activation"
    return _per_channel(n, m.node("add").inputs[1], "Add")


def _relu_follows(g: Graph, n: Node) -> bool:
    return single_use(g, n.output) and n.output.uses[0][0].op.name == "onnx.Relu"


def _taken(g: Graph, conv: Node) -> str | None:
    """The rule that will take ``conv`` with what follows it, if one will."""
    if not single_use(g, conv.output):
        return None
    user = conv.output.uses[0][0]
    if _relu_follows(g, conv):
        return "conv-relu will take it"
    if user.op.name == "onnx.Mul" and user.inputs[0] is conv.output \
            and _scale_check(g, Match(conv=conv, mul=user)) is None:
        return "conv-scale will take it"
    return None


_CONV2D = P("spc.Conv2d", name="conv2d", single_use=True)

RULES = [
    Rule("conv-relu", P("onnx.Relu", P("onnx.Conv", name="conv", single_use=True), name="relu"),
         lambda g, m: _fused(g, m.node("conv"), "relu", m.node("relu")),
         check=lambda g, m: _unsupported(m.node("conv"))),
    Rule("conv", P("onnx.Conv", name="conv"), lambda g, m: _fused(g, m.node("conv"), "none", m.node("conv")),
         check=lambda g, m: _unsupported(m.node("conv")) or _taken(g, m.node("conv"))),
    Rule("conv-scale", P("onnx.Mul", P("onnx.Conv", name="conv", single_use=True), P(const=True), name="mul"),
         _scaled, check=_scale_check),
    Rule("conv-bias", P("onnx.Add", _CONV2D, P(const=True), name="add"),
         lambda g, m: _with(g, m, "add", bias=m.node("add").inputs[1]), check=_bias_check),
    Rule("conv2d-relu", P("onnx.Relu", _CONV2D, name="relu"), lambda g, m: _with(g, m, "relu", "relu"),
         check=lambda g, m: None if m.node("conv2d").attrs["activation"] == "none" else "already rectified"),
]


class FuseConvBiasRelu(RulePass):
    name = "fuse-conv-bias-relu"
    summary = "Conv + bias + Relu -> spc.Conv2d"
    requires = ("fold-batchnorm",)
    rules = RULES
    creates = ("spc.Conv2d",)
