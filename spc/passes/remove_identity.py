"""remove-identity: drop ops that return their input unchanged.

Before::

    %y: f32[1,64,60,80] = onnx.Identity(%x)
    %z: f32[1,64,60,80] = onnx.Relu(%y)

After::

    %z: f32[1,64,60,80] = onnx.Relu(%x)

Covers Identity, inference-mode Dropout, and ops that are no-ops for their static types:
Reshape/Expand to the same shape, Cast to the same type, Transpose by the identity permutation,
a forward Slice that keeps every element (a reversing one, step -1, keeps the shape but not the
order: torch's flip), and a Split, Concat or Tile with one part (the legacy exporter's spelling
of the HF model's per-image loop at batch 1).
"""

from __future__ import annotations

from spc.ir.graph import Graph, Node, Value
from spc.passes.manager import Pass, PassContext, PassResult
from spc.passes.rewrite import remove_dead

_SHAPE_PRESERVING = ("onnx.Reshape", "onnx.Expand", "onnx.Cast", "onnx.Squeeze", "onnx.Unsqueeze",
                     "onnx.Flatten", "onnx.Slice", "onnx.Split", "onnx.Concat", "onnx.Tile")


def identity_source(n: Node) -> Value | None:
    """The input that ``n`` returns unchanged, if it is a no-op."""
    x = n.inputs[0] if n.inputs else None
    if x is None or len(n.outputs) != 1:
        return None
    out = n.output
    if n.op.name in ("onnx.Identity", "onnx.Dropout"):
        return x
    if n.op.name == "onnx.Transpose":
        perm = n.attrs.get("perm")
        return x if perm is not None and list(perm) == list(range(len(perm))) else None
    if n.op.name == "onnx.Concat" and len([v for v in n.inputs if v is not None]) != 1:
        return None
    if n.op.name == "onnx.Slice":  # of the same shape, a slice is the input only when it runs forwards
        steps = n.input(4)
        if steps is not None and (not steps.is_const or (steps.data <= 0).any()):
            return None
    if n.op.name in _SHAPE_PRESERVING and x.type == out.type and x.type.is_static:
        return x
    return None


class RemoveIdentity(Pass):
    name = "remove-identity"
    summary = "drop Identity, Dropout and ops that are no-ops for their static types"

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        removed = 0
        for n in list(g.nodes):
            src = identity_source(n)
            if src is not None:
                g.replace_all_uses(n.output, src)
                removed += 1
        remove_dead(g)
        return PassResult(removed > 0, {"removed": removed})
