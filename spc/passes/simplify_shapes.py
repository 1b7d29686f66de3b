"""simplify-shapes: collapse chains of layout ops on static shapes.

Before (the HF model's per-image loop, batch 1)::

    %a: f32[1,128,15,20] = onnx.Slice(%x, %zero, %one, %zero)
    %b: f32[128,15,20] = onnx.Squeeze(%a, %zero)
    %c: f32[1,128,15,20] = onnx.Unsqueeze(%b, %zero)

After (with remove-identity dropping the full Slice)::

    uses of %c read %a

Rules: Unsqueeze∘Squeeze and Squeeze∘Unsqueeze on the same axes cancel; Reshape∘Reshape is
one Reshape; Transpose∘Transpose is one Transpose; Unsqueeze(Gather(x, i, axis=a), a) is a
Slice of x (a channel pick that the device reads as a narrower tensor); Gather(x, 0, axis=a) on
a size-1 axis is Squeeze(x, a) (the legacy exporter's spelling), so later passes see one form.
Each rule's check says why it declines a match (``spc compile --explain RULE``).
"""

from __future__ import annotations

import numpy as np

from spc.ir import ops
from spc.ir.graph import Graph, Node
from spc.ir.ops.infer import axes_from, norm_axis
from spc.passes.rewrite import ANY, Match, P, Rule, RulePass


def _axes(n: Node, rank: int) -> list[int] | None:
    axes = axes_from(n.inputs, n.attrs, 1)
    return None if axes is None else sorted(norm_axis(a, rank) for a in axes)


def _cancel_check(g: Graph, m: Match) -> str | None:
    outer, inner = m.node("outer"), m.node("inner")
    x = inner.inputs[0]
    assert x is not None
    if outer.output.type != x.type:
        return f"%{outer.output.name} is {outer.output.type}, not {x.type} as %{x.name}"
    outer_rank = inner.output.type.rank if outer.op.name == "onnx.Squeeze" else outer.output.type.rank
    inner_rank = x.type.rank if inner.op.name == "onnx.Squeeze" else inner.output.type.rank
    a, b = _axes(outer, outer_rank), _axes(inner, inner_rank)
    if a is None or b is None:
        return f"the axes of #{(outer if a is None else inner).name} are not constant"
    if a != b:
        return f"#{outer.name} works on axes {a}, #{inner.name} on {b}"
    return None


def _cancel_squeeze_unsqueeze(g: Graph, m: Match):
    return m.node("inner").inputs[0]


def _reshapes_check(g: Graph, m: Match) -> str | None:
    outer = m.node("outer")
    return None if outer.output.type.is_static else f"%{outer.output.name} is {outer.output.type}, not static"


def _merge_reshapes(g: Graph, m: Match):
    outer, inner = m.node("outer"), m.node("inner")
    shape = g.add_const(outer.name + "_shape", np.asarray(outer.output.type.static_shape, np.int64))
    return g.make_node(ops.get("onnx.Reshape"), [inner.inputs[0], shape], {}, name=outer.name, take_name=True,
                       before=outer).output


def _transposes_check(g: Graph, m: Match) -> str | None:
    for key in ("inner", "outer"):
        if m.node(key).attrs.get("perm") is None:
            return f"#{m.node(key).name} has no perm (it reverses the axes)"
    return None


def _merge_transposes(g: Graph, m: Match):
    outer, inner = m.node("outer"), m.node("inner")
    p1, p2 = inner.attrs["perm"], outer.attrs["perm"]
    perm = [int(p1[i]) for i in p2]
    return g.make_node(ops.get("onnx.Transpose"), [inner.inputs[0]], {"perm": perm}, name=outer.name, take_name=True,
                       before=outer).output


def _scalar_index_check(gather: Node) -> str | None:
    x, idx = gather.inputs[0], gather.inputs[1]
    assert x is not None and idx is not None
    if idx.type.rank != 0:
        return f"the index %{idx.name} is {idx.type}, not a scalar"
    if not x.type.is_static:
        return f"%{x.name} is {x.type}, not static"
    return None


def _gather_slice_check(g: Graph, m: Match) -> str | None:
    unsq, gather = m.node("unsq"), m.node("gather")
    why = _scalar_index_check(gather)
    if why is not None:
        return why
    x = gather.inputs[0]
    assert x is not None
    axis = norm_axis(gather.attrs.get("axis", 0), x.type.rank)
    axes = _axes(unsq, unsq.output.type.rank)
    if axes != [axis]:
        return (f"#{unsq.name} unsqueezes axes {axes}, not the gathered axis {axis}" if axes is not None
                else f"the axes of #{unsq.name} are not constant")
    return None


def _gather_to_slice(g: Graph, m: Match):
    unsq, gather = m.node("unsq"), m.node("gather")
    x, idx = gather.inputs[0], gather.inputs[1]
    assert x is not None and idx is not None
    axis = norm_axis(gather.attrs.get("axis", 0), x.type.rank)
    i = int(idx.data)
    i = i + x.type.static_shape[axis] if i < 0 else i
    consts = [g.add_const(f"{gather.name}_{k}", np.asarray([v], np.int64))
              for k, v in (("start", i), ("end", i + 1), ("axis", axis))]
    return g.make_node(ops.get("onnx.Slice"), [x, *consts], {}, name=gather.name, take_name=True, before=unsq).output


def _unit_gather_check(g: Graph, m: Match) -> str | None:
    gather = m.node("gather")
    why = _scalar_index_check(gather)
    if why is not None:
        return why
    x, idx = gather.inputs[0], gather.inputs[1]
    assert x is not None and idx is not None
    axis = norm_axis(gather.attrs.get("axis", 0), x.type.rank)
    if x.type.static_shape[axis] != 1:
        return f"axis {axis} of %{x.name} has size {x.type.static_shape[axis]}, not 1"
    if int(idx.data) not in (0, -1):
        return f"the index is {int(idx.data)}, out of a size-1 axis"
    return None


def _unit_gather_to_squeeze(g: Graph, m: Match):
    """Gather(x, 0, axis=a) on a size-1 axis drops that axis: the canonical spelling is Squeeze."""
    gather = m.node("gather")
    x = gather.inputs[0]
    assert x is not None
    axis = norm_axis(gather.attrs.get("axis", 0), x.type.rank)
    axes = g.add_const(f"{gather.name}_axes", np.asarray([axis], np.int64))
    return g.make_node(ops.get("onnx.Squeeze"), [x, axes], {}, name=gather.name, take_name=True,
                       before=gather).output


SQ, UNSQ = "onnx.Squeeze", "onnx.Unsqueeze"
RULES = [
    Rule("unsqueeze-squeeze", P(UNSQ, P(SQ, name="inner", single_use=True), name="outer"), _cancel_squeeze_unsqueeze,
         check=_cancel_check),
    Rule("squeeze-unsqueeze", P(SQ, P(UNSQ, name="inner", single_use=True), name="outer"), _cancel_squeeze_unsqueeze,
         check=_cancel_check),
    Rule("reshape-reshape", P("onnx.Reshape", P("onnx.Reshape", name="inner", single_use=True), ANY, name="outer"),
         _merge_reshapes, check=_reshapes_check),
    Rule("transpose-transpose", P("onnx.Transpose", P("onnx.Transpose", name="inner", single_use=True),
                                  name="outer"), _merge_transposes, check=_transposes_check),
    Rule("gather-to-slice", P(UNSQ, P("onnx.Gather", ANY, P(const=True), name="gather", single_use=True),
                              name="unsq"), _gather_to_slice, check=_gather_slice_check),
    Rule("unit-gather-to-squeeze", P("onnx.Gather", ANY, P(const=True), name="gather"), _unit_gather_to_squeeze,
         check=_unit_gather_check),
]


class SimplifyShapes(RulePass):
    name = "simplify-shapes"
    summary = "collapse chains of layout ops (squeeze/unsqueeze, reshape, transpose, channel picks)"
    requires = ("fold-constants",)
    rules = RULES
