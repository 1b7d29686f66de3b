"""conv1d: a 1-D Conv (SuperGlue's MLPs and projections) as ops the device lowers.

A pointwise one (kernel 1, stride 1, no padding, one group) is a matrix product by its weight.
Before::

    %y: f32[1,64,512] = onnx.Conv(%x, %w, %b) {kernel_shape = [1]}      # %w: f32[64,32,1]

After::

    %y0: f32[1,64,512] = onnx.MatMul(%w2, %x)                           # %w2: f32[64,32]
    %y: f32[1,64,512] = onnx.Add(%y0, %b2)                               # %b2: f32[64,1]

Any other is the 2-D Conv over a unit height:

    %x2: f32[1,32,1,512] = onnx.Unsqueeze(%x, [2])
    %y2: f32[1,64,1,510] = onnx.Conv(%x2, %w4, %b) {kernel_shape = [1, 3], pads = [0, p0, 0, p1], ...}
    %y: f32[1,64,510] = onnx.Squeeze(%y2, [2])

Both are exact (the same sums in the same operands). It runs after fold-batchnorm, so a
BatchNorm1d is in the weight first.
"""

from __future__ import annotations

import numpy as np

from spc.ir import ops
from spc.ir.graph import Graph
from spc.passes.rewrite import ANY, Match, P, Rule, RulePass


def _ints(attrs: dict, key: str, default: list[int]) -> list[int]:
    return [int(v) for v in attrs.get(key) or default]


def _pointwise(m: Match) -> bool:
    a = m.node("conv").attrs
    w = m.node("conv").inputs[1]
    assert w is not None
    return (w.data.shape[2] == 1 and _ints(a, "strides", [1]) == [1] and _ints(a, "pads", [0, 0]) == [0, 0]
            and int(a.get("group", 1)) == 1)


def _check(g: Graph, m: Match) -> str | None:
    conv = m.node("conv")
    x, w = conv.inputs[0], conv.inputs[1]
    if x is None or w is None or x.type.rank != 3 or w.data.ndim != 3:
        return "not a 1-D convolution (an input [N, C, L] and a weight [O, I, k])"
    if conv.attrs.get("auto_pad", "NOTSET") != "NOTSET":
        return "auto_pad is not made explicit yet (a static length makes it so)"
    if len(conv.inputs) > 2 and conv.inputs[2] is not None and not conv.inputs[2].is_const:
        return "the bias is not a constant"
    return None


def _rewrite(g: Graph, m: Match):
    conv = m.node("conv")
    x, w = conv.inputs[0], conv.inputs[1]
    b = conv.inputs[2] if len(conv.inputs) > 2 else None
    assert x is not None and w is not None
    if _pointwise(m):
        w2 = g.add_const(w.name + "_2d", np.ascontiguousarray(w.data[:, :, 0]))
        y = g.make_node(ops.get("onnx.MatMul"), [w2, x], name=conv.name + "/matmul", before=conv).output
        if b is None:
            return y
        b2 = g.add_const(b.name + "_col", np.asarray(b.data).reshape(-1, 1))
        return g.make_node(ops.get("onnx.Add"), [y, b2], name=conv.name, take_name=True, before=conv).output
    a = conv.attrs
    axis = g.add_const(conv.name + "/axis", np.array([2], np.int64))
    x2 = g.make_node(ops.get("onnx.Unsqueeze"), [x, axis], name=conv.name + "/unsqueeze", before=conv).output
    w4 = g.add_const(w.name + "_2d", np.ascontiguousarray(w.data[:, :, None, :]))
    pads = _ints(a, "pads", [0, 0])
    attrs = {**{k: v for k, v in a.items() if k not in ("kernel_shape", "strides", "dilations", "pads")},
             "kernel_shape": [1, int(w.data.shape[2])], "strides": [1, *_ints(a, "strides", [1])],
             "dilations": [1, *_ints(a, "dilations", [1])], "pads": [0, pads[0], 0, pads[1]]}
    y2 = g.make_node(ops.get("onnx.Conv"), [x2, w4, *([b] if b is not None else [])], attrs,
                     name=conv.name + "/2d", before=conv).output
    return g.make_node(ops.get("onnx.Squeeze"), [y2, axis], name=conv.name, take_name=True, before=conv).output


RULES = [Rule("conv1d", P("onnx.Conv", ANY, P(const=True), name="conv"), _rewrite, check=_check)]


class Conv1d(RulePass):
    name = "conv1d"
    summary = "a 1-D Conv as a MatMul (pointwise) or as the 2-D Conv over a unit height"
    rules = RULES
