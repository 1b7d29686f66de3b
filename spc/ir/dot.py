"""Graphviz text for a graph: one box per node, coloured by placement, edges labelled by type."""

from __future__ import annotations

import json

from spc.ir.graph import Graph, Placement

_COLOURS = {Placement.UNASSIGNED: "white", Placement.HOST_PRE: "lightyellow",
            Placement.DEVICE: "lightblue", Placement.HOST_POST: "moccasin"}


def to_dot(g: Graph) -> str:
    q = json.dumps
    lines = [f"digraph {q(g.name)} {{", "  rankdir=TB;", '  node [shape=box, style=filled, fontname="monospace"];']
    for v in g.inputs:
        lines.append(f"  {q('in:' + v.name)} [label={q(v.name + chr(10) + str(v.type))}, shape=oval];")
    for n in g.nodes:
        label = f"{n.op.name}\n{n.name}"
        lines.append(f"  {q(n.name)} [label={q(label)}, fillcolor={_COLOURS[n.placement]}];")
    for n in g.nodes:
        for v in n.inputs:
            if v is None or v.is_const:
                continue
            src = v.producer.name if v.producer is not None else "in:" + v.name
            lines.append(f"  {q(src)} -> {q(n.name)} [label={q(str(v.type))}];")
    for v in g.outputs:
        lines.append(f"  {q('out:' + v.name)} [label={q(v.name)}, shape=oval];")
        if v.producer is not None:
            lines.append(f"  {q(v.producer.name)} -> {q('out:' + v.name)} [label={q(str(v.type))}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
