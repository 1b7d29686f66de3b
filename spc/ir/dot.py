"""Graphviz text for a graph: one box per node, coloured by placement, edges labelled by type.

A node's label carries the compiler's decisions (placement, block, precision: the IR text's
``@device <"block" ...>``) and, when the memory planner's view of the program is given, its
memory choices; an edge out of a device node is labelled with the format the device stores it in
(``bfloat16[1,64,120,160]``), not the IR's host type (``f32``), so the dumps of passes that only
change such choices differ where the choices do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from spc.ir.graph import Graph, Node, Placement, Value
from spc.ir.printer import MATRIX_OPS, stored_format

_COLOURS = {Placement.UNASSIGNED: "white", Placement.HOST_PRE: "lightyellow",
            Placement.DEVICE: "lightblue", Placement.HOST_POST: "moccasin"}


def node_label(n: Node, notes: Mapping[str, str] | None = None) -> str:
    """``op``, ``name``, then ``@placement "block"``, the precision and ``key: value`` per note."""
    lines = [n.op.name, n.name]
    decided = [] if n.placement is Placement.UNASSIGNED else [f"@{n.placement.value}"]
    if n.block is not None:
        decided.append(json.dumps(n.block))
    if decided:
        lines.append(" ".join(decided))
    if n.precision is not None:
        lines.append(n.precision.spell(compute=n.op.name in MATRIX_OPS))
    lines += [f"{k}: {v}" for k, v in (notes or {}).items()]
    return "\n".join(lines)


def edge_label(v: Value, stored: Mapping[str, str] | None = None) -> str:
    """The value's type, in the format the device stores it in when a device node produces it."""
    fmt = stored_format(v, stored)
    if fmt is None:
        return str(v.type)
    return f"{fmt}[{','.join(str(d) for d in v.type.shape)}]"


def to_dot(g: Graph, notes: Mapping[str, Mapping[str, str]] | None = None,
           stored: Mapping[str, str] | None = None) -> str:
    """``notes``: more ``key: value`` lines per node name (the memory planner's choices);
    ``stored``: the device format per value name where the lowered program says it."""
    q = json.dumps
    notes = notes or {}
    lines = [f"digraph {q(g.name)} {{", "  rankdir=TB;", '  node [shape=box, style=filled, fontname="monospace"];']
    for v in g.inputs:
        lines.append(f"  {q('in:' + v.name)} [label={q(v.name + chr(10) + str(v.type))}, shape=oval];")
    for n in g.nodes:
        lines.append(f"  {q(n.name)} [label={q(node_label(n, notes.get(n.name)))}, fillcolor={_COLOURS[n.placement]}];")
    for n in g.nodes:
        for v in n.inputs:
            if v is None or v.is_const:
                continue
            src = v.producer.name if v.producer is not None else "in:" + v.name
            lines.append(f"  {q(src)} -> {q(n.name)} [label={q(edge_label(v, stored))}];")
    for v in g.outputs:
        lines.append(f"  {q('out:' + v.name)} [label={q(v.name)}, shape=oval];")
        if v.producer is not None:
            lines.append(f"  {q(v.producer.name)} -> {q('out:' + v.name)} [label={q(edge_label(v, stored))}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
