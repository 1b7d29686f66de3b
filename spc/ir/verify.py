"""The verifier: structural invariants that every pass must preserve.

Run after every pass by the pass manager. It raises :class:`VerifyError` on the first broken
invariant, naming the node.
"""

from __future__ import annotations

from spc.ir.graph import Graph, Placement


class VerifyError(ValueError):
    pass


def verify(g: Graph) -> None:
    defined: set[int] = {id(v) for v in g.inputs} | {id(v) for v in g.constants.values()}
    names: set[str] = set()
    for v in g.values():
        if v.name in names:
            raise VerifyError(f"value name %{v.name} is defined twice")
        names.add(v.name)
    for n in g.nodes:
        lo, hi = n.op.arity
        if not lo <= len(n.inputs) <= hi:
            raise VerifyError(f"node {n.name}: {n.op.name} takes {lo}..{hi} inputs, has {len(n.inputs)}")
        for i, v in enumerate(n.inputs):
            if v is None:
                continue
            if id(v) not in defined:
                raise VerifyError(f"node {n.name}: input {i} %{v.name} is not defined before it")
            if (n, i) not in v.uses:
                raise VerifyError(f"node {n.name}: use list of %{v.name} misses input {i}")
        for o in n.outputs:
            if o.producer is not n:
                raise VerifyError(f"node {n.name}: output %{o.name} names another producer")
            defined.add(id(o))
        _check_types(n)
        if n.placement is Placement.DEVICE and not all(o.type.is_static for o in n.outputs):
            raise VerifyError(f"node {n.name}: placed on the device with a symbolic shape")
    for v in g.values():
        for user, i in v.uses:
            if user.inputs[i] is not v:
                raise VerifyError(f"%{v.name}: stale use by {user.name}")
    for o in g.outputs:
        if id(o) not in defined:
            raise VerifyError(f"graph output %{o.name} is not defined")


def _check_types(n) -> None:
    if n.op.infer is None or not all(v is None or v.type.is_static for v in n.inputs):
        return
    try:
        inferred = n.op.infer(n.inputs, n.attrs)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise VerifyError(f"node {n.name} ({n.op.name}): {exc}") from None
    if inferred is None:
        return
    for o, t in zip(n.outputs, inferred):
        if t.is_static and o.type != t:
            raise VerifyError(f"node {n.name} ({n.op.name}): %{o.name} has type {o.type}, inferred {t}")
