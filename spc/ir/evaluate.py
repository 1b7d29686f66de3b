"""Evaluate a whole graph with the ops' numpy semantics: the IR's reference interpreter.

Used to check that a pass preserves what a graph computes, and to debug a dump by hand.
"""

from __future__ import annotations

import numpy as np

from spc.ir.graph import Graph


def evaluate_graph(g: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    env: dict[int, np.ndarray] = {}
    for v in g.inputs:
        if v.name not in feeds:
            raise KeyError(f"no value fed for input %{v.name}")
        env[id(v)] = np.asarray(feeds[v.name])
    for n in g.nodes:
        args = [None if v is None else (v.data if v.is_const else env[id(v)]) for v in n.inputs]
        for o, r in zip(n.outputs, n.op.evaluate(args, n.attrs)):
            env[id(o)] = np.asarray(r)
    return [v.data if v.is_const else env[id(v)] for v in g.outputs]
