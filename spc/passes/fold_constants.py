"""fold-constants: evaluate nodes whose inputs are all known, and Shape/Size of static tensors.

Before::

    %s: i64[4] = onnx.Shape(%x)              // %x: f32[1,64,15,20]
    %h: i64[] = onnx.Gather(%s, %two) {axis = 0}

After::

    %h: i64[] = const dense<15>

Results larger than MAX_FOLD_ELEMENTS and than their constant operands stay as nodes: folding
them would bloat the plan with data the device can compute cheaply (an Expand of zeros to a
full-resolution map, say); a weight's Transpose folds whatever its size.
"""

from __future__ import annotations

import numpy as np

from spc.ir.graph import Graph, Node
from spc.ir.interpreter import Step, run
from spc.passes.manager import Pass, PassContext, PassResult
from spc.passes.rewrite import remove_dead

MAX_FOLD_ELEMENTS = 1 << 16


def evaluate_node(node: Node, args: list[np.ndarray | None]) -> list[np.ndarray]:
    """``node``'s results on ``args`` (one per input, None for an omitted one), by the interpreter."""
    keys = tuple(None if a is None else i for i, a in enumerate(args))
    outs = tuple(("out", i) for i in range(len(node.outputs)))
    env = run([Step(node.name, node.op, keys, node.attrs, outs)], {i: a for i, a in enumerate(args) if a is not None})
    return [env[k] for k in outs]


class FoldConstants(Pass):
    name = "fold-constants"
    summary = "evaluate constant subgraphs and shapes of static tensors"

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        folded = 0
        for node in list(g.nodes):
            if node.op.data_dependent or not all(o.type.is_static for o in node.outputs):
                continue
            made = sum(o.type.numel for o in node.outputs)
            # a result no larger than its constant operands (a weight's Transpose) cannot bloat the plan
            read = sum(v.type.numel for v in node.inputs if v is not None and v.is_const and v.type.is_static)
            if made > MAX_FOLD_ELEMENTS and made > read:
                continue
            src = node.inputs[0] if node.inputs else None
            if node.op.name in ("onnx.Shape", "onnx.Size") and src is not None and src.type.is_static:
                args: list = [np.zeros(src.type.static_shape, np.uint8)]
            elif all(v is None or v.is_const for v in node.inputs):
                args = [None if v is None else v.data for v in node.inputs]
            else:
                continue
            results = evaluate_node(node, args)
            for o, r in zip(node.outputs, results):
                r = r.astype(o.type.dtype.host_numpy)
                if r.shape != o.type.static_shape:
                    raise ValueError(f"node {node.name}: folded shape {r.shape} != declared {o.type}")
                g.replace_all_uses(o, g.add_const(o.name + "_c", r))
            folded += 1
        removed = remove_dead(g)
        return PassResult(bool(folded or removed), {"folded": folded})
