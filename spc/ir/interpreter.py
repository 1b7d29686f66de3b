"""The interpreter: nodes run in order with their ops' numpy semantics (``OpDef.evaluate``, the
one meaning of each op).

One loop serves every caller: checking that a pass preserves what a graph computes
(:func:`evaluate_graph`), the recognisers that run a candidate region on chosen inputs
(passes/semantic_match.py, passes/fuse_keypoints.py: :func:`run_nodes`, keyed by IR value), the
runtime's host stages (runtime/host.py: :func:`run_named`, keyed by the plan's tensor names) and
the conformance runs (frontend/conformance.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from msgspec import Struct

from spc.ir import ops
from spc.ir.graph import Graph, Node
from spc.ir.ops import OpDef


class MissingValue(KeyError):
    """A node reads a value that nothing before it produced."""

    def __init__(self, node: str, key: str) -> None:
        super().__init__(f"node {node} reads {key}, which nothing before it produced")
        self.node, self.key = node, key

    def __str__(self) -> str:
        return str(self.args[0])


class Stopped(Exception):
    """A run stopped before the node it names, as its ``stop`` asked."""


class NodeFailed(ValueError):
    """An op's semantics refused its arguments (shapes, values)."""

    def __init__(self, node: str, op: str, error: Exception) -> None:
        super().__init__(f"node {node} ({op}) failed: {error}")
        self.node, self.op, self.error = node, op, error


class Step(Struct, frozen=True):
    """One node as the interpreter sees it: an op, the keys it reads and writes."""

    name: str
    op: OpDef
    inputs: tuple[Hashable | None, ...]
    attrs: Mapping[str, Any]
    outputs: tuple[Hashable, ...]


def run(steps: Iterable[Step], env: dict[Hashable, np.ndarray], constants: Mapping[Hashable, np.ndarray] | None = None,
        *, quiet: bool = False, label=str, keep: Collection[Hashable] | None = None,
        stop: Callable[[], bool] | None = None) -> dict[Hashable, np.ndarray]:
    """Run ``steps`` in order, reading ``env`` then ``constants`` and adding each output to
    ``env``. ``quiet`` silences numpy's floating-point warnings (trial inputs with extreme values);
    ``label`` names a key in errors; ``keep``: with it, a computed value not in it leaves ``env``
    after its last reader (the next results reuse its memory: fresh pages cost); ``stop``: asked
    before each step, :class:`Stopped` when it says so (a run in a thread its caller gave up on)."""
    constants = constants or {}
    steps = list(steps)
    drops = dropped_after(steps, {*keep, *env}, lambda s: (*s.inputs, *s.outputs)) if keep is not None else None
    with np.errstate(all="ignore") if quiet else contextlib.nullcontext():
        for i, s in enumerate(steps):
            if stop is not None and stop():
                raise Stopped(s.name)
            args = []
            for k in s.inputs:
                if k is None:
                    args.append(None)
                elif k in env:
                    args.append(env[k])
                elif k in constants:
                    args.append(constants[k])
                else:
                    raise MissingValue(s.name, label(k))
            try:
                results = s.op.evaluate(args, dict(s.attrs))
            except (ValueError, IndexError, TypeError, ZeroDivisionError, OverflowError, MemoryError) as exc:
                raise NodeFailed(s.name, s.op.name, exc) from exc
            for k, r in zip(s.outputs, results):
                env[k] = np.asarray(r)
            for k in drops[i] if drops else ():
                env.pop(k, None)  # a constant is read from constants, never held in env
    return env


def dropped_after(steps: Sequence[Any], kept: Collection[Hashable],
                  names: Callable[[Any], Iterable[Hashable | None]]) -> list[list[Hashable]]:
    """For each step, the values (of those ``names`` gives: what it reads and makes) that no later
    step names and that are not ``kept``: what a run may let go of once the step is done."""
    last: dict[Hashable, int] = {}
    for i, s in enumerate(steps):
        for k in names(s):
            if k is not None and k not in kept:
                last[k] = i
    out: list[list[Hashable]] = [[] for _ in steps]
    for k, i in last.items():
        out[i].append(k)
    return out


def demanded(nodes: Sequence[Any], wanted: Iterable[Hashable], given: Collection[Hashable],
             outputs: Callable[[Any], Iterable[Hashable]] = lambda n: n.outputs) -> list[Any]:
    """The ``nodes`` (anything with ``inputs``, and ``outputs`` by the function given) that the
    keys ``wanted`` depend on, in their order, not looking past the keys in ``given``: what a
    run needs to compute (the compile's validation runs the source and the plan so)."""
    maker = {k: i for i, n in enumerate(nodes) for k in outputs(n)}
    keep: set[int] = set()
    stack = [maker[w] for w in wanted if w in maker and w not in given]
    while stack:
        i = stack.pop()
        if i in keep:
            continue
        keep.add(i)
        stack.extend(maker[x] for x in nodes[i].inputs if x in maker and x not in given)
    return [n for i, n in enumerate(nodes) if i in keep]


class NodeSteps(Struct, frozen=True):
    """IR nodes as the interpreter runs them (:func:`node_steps`): made once, run many times (a
    recogniser's trials)."""

    nodes: tuple[Node, ...]
    steps: tuple[Step, ...]
    constants: Mapping[int, np.ndarray]

    def label(self, key: Hashable) -> str:
        """A value's name, for an error: looked up only then."""
        for n in self.nodes:
            for v in (*n.inputs, *n.outputs):
                if v is not None and id(v) == key:
                    return "%" + v.name
        return "%?"


def node_steps(nodes: Iterable[Node]) -> NodeSteps:
    nodes = tuple(nodes)
    steps, consts = [], {}
    for n in nodes:
        for v in n.inputs:
            if v is not None and v.is_const:
                consts[id(v)] = v.data
        steps.append(Step(n.name, n.op, tuple(None if v is None else id(v) for v in n.inputs), n.attrs,
                          tuple(id(o) for o in n.outputs)))
    return NodeSteps(nodes, tuple(steps), consts)


def run_nodes(nodes: Iterable[Node] | NodeSteps, env: dict[int, np.ndarray], *, quiet: bool = False,
              constants: Mapping[int, np.ndarray] | None = None) -> dict[int, np.ndarray]:
    """IR nodes (or their :func:`node_steps`) over values keyed by ``id(value)``; constants are
    read from the graph, or from ``constants`` where it has them (a region probed at another size:
    passes/semantic_match.py)."""
    prog = nodes if isinstance(nodes, NodeSteps) else node_steps(nodes)
    consts = prog.constants
    if constants:
        consts = {**consts, **{k: v for k, v in constants.items() if k in consts}}
    return run(prog.steps, env, consts, quiet=quiet, label=prog.label)


def evaluate_graph(g: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The graph's outputs for ``feeds`` (one array per graph input, by name)."""
    env: dict[int, np.ndarray] = {}
    for v in g.inputs:
        if v.name not in feeds:
            raise KeyError(f"no value fed for input %{v.name}")
        env[id(v)] = np.asarray(feeds[v.name])
    run_nodes(g.nodes, env)
    return [v.data if v.is_const else env[id(v)] for v in g.outputs]


def run_named(nodes: Iterable[tuple[str, str, list[str | None], dict[str, Any], list[str]]],
              env: dict[str, np.ndarray], constants: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Nodes given as (name, op name, input names, attributes, output names), over tensors keyed
    by name: a plan's host stages."""
    steps = [Step(name, ops.get(op), tuple(inputs), attrs, tuple(outputs))
             for name, op, inputs, attrs, outputs in nodes]
    return run(steps, env, constants)  # type: ignore[arg-type]
