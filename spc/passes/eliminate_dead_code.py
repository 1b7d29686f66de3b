"""eliminate-dead-code: remove nodes and constants that no graph output depends on.

Before::

    %a: f32[4] = onnx.Relu(%x)      // %a is never used
    %b: f32[4] = onnx.Neg(%x)
    return %b

After::

    %b: f32[4] = onnx.Neg(%x)
    return %b
"""

from __future__ import annotations

from spc.ir.graph import Graph
from spc.passes.manager import Pass, PassContext, PassResult
from spc.passes.rewrite import remove_dead


class EliminateDeadCode(Pass):
    name = "eliminate-dead-code"
    summary = "remove nodes and constants that no output depends on"

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        nodes = remove_dead(g)
        return PassResult(nodes > 0, {"removed": nodes})
