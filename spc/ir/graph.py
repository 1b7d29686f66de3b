"""The IR: a mutable SSA graph of typed values and nodes, in the spirit of torch.fx and onnx_ir.

* A :class:`Value` has a name, a :class:`TensorType`, at most one producer and a list of uses.
  Constants are values whose data is known: small ones print inline, weights by reference.
* A :class:`Node` applies an :class:`~spc.ir.ops.OpDef` (not a string) to input values, with a
  dict of plain attributes (int, float, str, lists of those, or a numpy array), and the
  compiler's decisions as typed fields: a :class:`Placement` once the partition pass has run, a
  block and a :class:`~spc.ttnn.precision.BlockPrecision` once choose-precision has.
* :class:`Graph` keeps producers and uses consistent through its editing methods; passes never
  assign ``node.inputs`` directly.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from spc.ir.types import TensorType

if TYPE_CHECKING:
    import networkx as nx

    from spc.ir.ops import OpDef
    from spc.ttnn.precision import BlockPrecision

Attr = Any  # int | float | str | list[int] | list[float] | list[str] | np.ndarray


class Placement(enum.Enum):
    UNASSIGNED = "unassigned"
    HOST_PRE = "host-pre"  # host, before the device stage (input preparation)
    DEVICE = "device"
    HOST_POST = "host-post"  # host, after the device stage (data-dependent post-processing)


class Value:
    __slots__ = ("_data", "_loader", "name", "producer", "type", "uses", "weight_ref")

    def __init__(self, name: str, type: TensorType, producer: Node | None = None) -> None:
        self.name = name
        self.type = type
        self.producer = producer
        self.uses: list[tuple[Node, int]] = []
        self._data: np.ndarray | None = None
        self._loader: Callable[[], np.ndarray] | None = None
        self.weight_ref: str | None = None  # key in the weight store, for large constants

    @property
    def is_const(self) -> bool:
        return self._data is not None or self._loader is not None

    @property
    def data(self) -> np.ndarray:
        """The constant's array, loaded on first use (weights stay lazy until needed)."""
        if self._data is None:
            if self._loader is None:
                raise ValueError(f"%{self.name} is not a constant")
            self._data = self._loader()
            self._loader = None
        return self._data

    def set_const(self, data: np.ndarray | None = None, loader: Callable[[], np.ndarray] | None = None,
                  weight_ref: str | None = None) -> None:
        self._data, self._loader, self.weight_ref = data, loader, weight_ref

    def consumers(self) -> list[Node]:
        seen: dict[int, Node] = {}
        for node, _ in self.uses:
            seen.setdefault(id(node), node)
        return list(seen.values())

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


class Node:
    """An op applied to values. ``attrs`` are the op's own (what it computes); the compiler's
    decisions are typed fields beside them: ``placement`` (partition-host-device), ``block`` and
    ``precision`` (choose-precision: the block a device op belongs to and its formats)."""

    __slots__ = ("attrs", "block", "inputs", "name", "op", "outputs", "placement", "precision")

    def __init__(self, op: OpDef, name: str, inputs: list[Value | None], outputs: list[Value],
                 attrs: dict[str, Attr] | None = None) -> None:
        self.op = op
        self.name = name
        self.inputs = inputs
        self.outputs = outputs
        self.attrs: dict[str, Attr] = dict(attrs or {})
        self.placement = Placement.UNASSIGNED
        self.block: str | None = None
        self.precision: BlockPrecision | None = None

    @property
    def output(self) -> Value:
        if len(self.outputs) != 1:
            raise ValueError(f"node {self.name} ({self.op.name}) has {len(self.outputs)} outputs")
        return self.outputs[0]

    def input(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def __repr__(self) -> str:
        return f"<{self.op.name} {self.name}>"


class Graph:
    """Nodes in topological order, graph inputs and outputs, and the constants."""

    def __init__(self, name: str = "main") -> None:
        self.name = name
        self.nodes: list[Node] = []
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.constants: dict[str, Value] = {}
        # the ONNX opset the graph was imported at: its onnx.* attributes are that version's
        # (what ir/to_onnx.py exports them as); None for a graph parsed from text or built by hand
        self.opset: int | None = None
        self._names: set[str] = set()
        self._node_names: set[str] = set()

    # -- naming ----------------------------------------------------------------------------
    def fresh_name(self, base: str) -> str:
        """A value name not yet used; derived names keep their source name as a prefix."""
        name, i = base, 0
        while name in self._names:
            i += 1
            name = f"{base}_{i}"
        self._names.add(name)
        return name

    def _fresh_node_name(self, base: str) -> str:
        name, i = base, 0
        while name in self._node_names:
            i += 1
            name = f"{base}_{i}"
        self._node_names.add(name)
        return name

    # -- building --------------------------------------------------------------------------
    def add_input(self, name: str, type: TensorType) -> Value:
        v = Value(self.fresh_name(name), type)
        self.inputs.append(v)
        return v

    def add_const(self, name: str, data: np.ndarray | None = None, *, type: TensorType | None = None,
                  loader: Callable[[], np.ndarray] | None = None, weight_ref: str | None = None) -> Value:
        if data is not None:
            data = np.asarray(data)
            type = TensorType.of(data)
        if type is None:
            raise ValueError("a lazy constant needs its type")
        v = Value(self.fresh_name(name), type)
        v.set_const(data, loader, weight_ref)
        self.constants[v.name] = v
        return v

    def make_node(self, op: OpDef, inputs: Iterable[Value | None], attrs: dict[str, Attr] | None = None,
                  out_types: list[TensorType] | None = None, name: str | None = None,
                  out_names: list[str] | None = None, before: Node | None = None,
                  take_name: bool = False) -> Node:
        """Create a node, infer its output types unless given, and insert it.

        Inserted before ``before`` if given, else at the end; callers that insert out of
        order call :meth:`toposort` afterwards. With ``take_name``, a node that already holds
        ``name`` (the one this node is about to replace) gives it up.
        """
        inputs = list(inputs)
        attrs = dict(attrs or {})
        if out_types is None:
            out_types = op.infer_types(inputs, attrs)
        base = name or op.short_name.lower()
        if take_name and base in self._node_names:
            holder = next(n for n in self.nodes if n.name == base)
            self._node_names.discard(base)
            holder.name = self._fresh_node_name(base + "_replaced")
        node = Node(op, self._fresh_node_name(base), inputs, [], attrs)
        names = out_names or [base if len(out_types) == 1 else f"{base}_out{i}" for i in range(len(out_types))]
        node.outputs = [Value(self.fresh_name(n), t, node) for n, t in zip(names, out_types)]
        for i, v in enumerate(inputs):
            if v is not None:
                v.uses.append((node, i))
        if before is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(self.nodes.index(before), node)
        return node

    # -- editing ---------------------------------------------------------------------------
    def set_input(self, node: Node, i: int, value: Value | None) -> None:
        old = node.inputs[i]
        if old is not None:
            old.uses.remove((node, i))
        node.inputs[i] = value
        if value is not None:
            value.uses.append((node, i))

    def replace_all_uses(self, old: Value, new: Value) -> None:
        """Point every use of ``old`` (graph outputs included) at ``new``.

        ``new`` takes over ``old``'s name when ``old`` is a graph output, so that output
        names stay stable across rewrites.
        """
        for node, i in list(old.uses):
            self.set_input(node, i, new)
        if old in self.outputs:
            self.outputs = [new if o is old else o for o in self.outputs]
            if not new.is_const and new not in self.inputs:
                self._names.discard(new.name)
                new.name, old.name = old.name, self.fresh_name(old.name + "_dead")
            self._names.add(new.name)

    def rename(self, v: Value, name: str) -> None:
        """Give ``v`` a name that a removed value held (fused ops keep their source's name)."""
        if name != v.name and name in self._names and any(x.name == name for x in self.values()):
            raise ValueError(f"%{name} is still defined")
        self._names.discard(v.name)
        v.name = name
        self._names.add(name)

    def remove_node(self, node: Node) -> None:
        for o in node.outputs:
            if o.uses or o in self.outputs:
                raise ValueError(f"cannot remove {node.name}: %{o.name} is still used")
        for i, v in enumerate(node.inputs):
            if v is not None:
                v.uses.remove((node, i))
        self.nodes.remove(node)
        self._node_names.discard(node.name)
        for o in node.outputs:
            self._names.discard(o.name)

    def remove_unused_constants(self) -> int:
        dead = [k for k, v in self.constants.items() if not v.uses and v not in self.outputs]
        for k in dead:
            del self.constants[k]
        return len(dead)

    def toposort(self) -> None:
        """Stable topological sort: keeps the current order where it is already valid."""
        order: list[Node] = []
        placed: set[int] = set()
        index = {id(n): i for i, n in enumerate(self.nodes)}
        visiting: set[int] = set()

        def visit(n: Node) -> None:
            if id(n) in placed:
                return
            if id(n) in visiting:
                raise ValueError(f"cycle through node {n.name}")
            visiting.add(id(n))
            deps = [v.producer for v in n.inputs if v is not None and v.producer is not None]
            for d in sorted(deps, key=lambda d: index.get(id(d), -1)):
                visit(d)
            visiting.discard(id(n))
            placed.add(id(n))
            order.append(n)

        for n in list(self.nodes):
            visit(n)
        self.nodes = order

    # -- queries ---------------------------------------------------------------------------
    def values(self) -> Iterator[Value]:
        yield from self.inputs
        yield from self.constants.values()
        for n in self.nodes:
            yield from n.outputs

    def value(self, name: str) -> Value:
        for v in self.values():
            if v.name == name:
                return v
        raise KeyError(name)

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op.name] = counts.get(n.op.name, 0) + 1
        return dict(sorted(counts.items()))

    def to_networkx(self) -> nx.MultiDiGraph:
        """A read-only networkx view: one vertex per node, an edge per use of a value."""
        import networkx as nx  # ~80 ms: only this view needs it

        g = nx.MultiDiGraph(name=self.name)
        for n in self.nodes:
            g.add_node(n.name, op=n.op.name, placement=n.placement.value)
        for n in self.nodes:
            for v in n.inputs:
                if v is not None and v.producer is not None:
                    g.add_edge(v.producer.name, n.name, value=v.name, type=str(v.type))
        return g

    def __str__(self) -> str:
        from spc.ir.printer import print_graph  # a cycle: ir/printer.py imports this module

        return print_graph(self)
