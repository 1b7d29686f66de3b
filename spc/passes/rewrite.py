"""Local rewrite rules as data: a pattern, a check that can say why it failed, a rewrite.

    CONV_RELU = Rule(
        "conv-relu",
        P("onnx.Relu", P("onnx.Conv", name="conv", single_use=True), name="relu"),
        rewrite=lambda g, m: ...,          # returns the value that replaces the root's output
    )

A pattern P matches the producer of a value: ``op`` (one name or a tuple), ``inputs`` (a tuple
of sub-patterns, ``ANY`` for don't-care), ``name`` to bind the matched node (or, for leaf
patterns, the value), ``const`` for constants and ``single_use`` for values that must have no
other user (so that fusing them away is safe). ``apply_rules`` runs a rule set to a fixed point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from msgspec import Struct, field

from spc.ir.graph import Graph, Node, Value
from spc.passes.explain import Explainer
from spc.passes.manager import Pass, PassContext, PassResult


class Pattern(Struct, frozen=True):
    """A pattern: an op (or any), its operand patterns, a capture name and conditions (made with
    :func:`P`)."""

    op: str | tuple[str, ...] | None = None
    inputs: tuple[Pattern | None, ...] | None = None
    name: str | None = None
    const: bool = False
    single_use: bool = False


def P(op: str | tuple[str, ...] | None = None, *inputs: Pattern | None, name: str | None = None,
      const: bool = False, single_use: bool = False) -> Pattern:
    """A pattern with its operand patterns given in order: ``P("onnx.Relu", P("onnx.Conv"))``."""
    return Pattern(op, tuple(inputs) if inputs else None, name, const, single_use)


ANY = P()


class Match(dict):
    """Bindings from pattern names to nodes (op patterns) or values (leaf patterns)."""

    def node(self, key: str) -> Node:
        return self[key]

    def value(self, key: str) -> Value:
        return self[key]


def single_use(g: Graph, v: Value) -> bool:
    """Exactly one node reads ``v`` and it is not a graph output: fusing it away is invisible."""
    return len(v.uses) == 1 and v not in g.outputs


def _ops(pat: Pattern) -> tuple[str, ...]:
    return (pat.op,) if isinstance(pat.op, str) else tuple(pat.op or ())


def match(pat: Pattern | None, v: Value | None, g: Graph, m: Match | None = None, trace: list[str] | None = None,
          at: str = "root") -> Match | None:
    """The bindings of ``pat`` matched at ``v``, or None. ``trace`` collects what matched, and
    last, where and why the match stopped (``spc compile --explain``)."""
    m = Match() if m is None else m

    def stop(why: str) -> None:
        if trace is not None:
            trace.append(f"stopped at {at}: {why}")

    if pat is None or (pat.op is None and not pat.const and pat.inputs is None):
        if pat is not None and pat.name:
            m[pat.name] = v
        return m
    if v is None:
        stop("no value (an omitted optional input)")
        return None
    if pat.const:
        if not v.is_const:
            stop(f"%{v.name} is not a constant")
            return None
        if pat.name:
            m[pat.name] = v
        return m
    node = v.producer
    if node is None:
        stop(f"%{v.name} is a graph input, not the result of {' or '.join(_ops(pat))}")
        return None
    if pat.op is not None and node.op.name not in _ops(pat):
        stop(f"%{v.name} comes from {node.op.name} #{node.name}, not {' or '.join(_ops(pat))}")
        return None
    if pat.single_use and not single_use(g, v):
        stop(f"%{v.name} has {len(v.uses)} user(s){' and is a graph output' if v in g.outputs else ''}; "
             "fusing it away needs exactly one")
        return None
    if trace is not None:
        trace.append(f"{at}: {node.op.name} #{node.name}")
    if pat.inputs is not None:
        if len(pat.inputs) > len(node.inputs):
            stop(f"#{node.name} has {len(node.inputs)} input(s), the pattern {len(pat.inputs)}")
            return None
        for i, (sub, inp) in enumerate(zip(pat.inputs, node.inputs)):
            if match(sub, inp, g, m, trace, f"{at}.input[{i}]") is None:
                return None
    if pat.name:
        m[pat.name] = node
    return m


class Rule(Struct, frozen=True):
    """A rewrite as data: a pattern, the rewrite, and the check that may refuse a match."""

    name: str
    pattern: Pattern
    rewrite: Callable[[Graph, Match], Value | None]
    # returns None when the match may be rewritten, else the reason it may not
    check: Callable[[Graph, Match], str | None] = field(default=lambda g, m: None)


def apply_rules(g: Graph, rules: Sequence[Rule], max_rounds: int = 50, explain: Explainer | None = None,
                pass_name: str = "") -> dict[str, Any]:
    """Apply rules until none fires; returns {rule name: count} (rules that fired only).

    A value created by a rewrite takes the name of the value it replaces, and its node the name
    of the node it replaces, so names keep pointing back to the source model. With ``explain``,
    every node whose op is a rule's root is an attempt of that rule (``pass_name`` explains them all).
    """
    counts: dict[str, int] = {}
    for _ in range(max_rounds):
        fired = False
        for node in list(g.nodes):
            if node not in g.nodes or len(node.outputs) != 1:
                continue
            for rule in rules:
                attempt = None
                if explain is not None and node.op.name in _ops(rule.pattern):
                    attempt = explain.begin(rule.name, f"#{node.name} ({node.op.name})", also=pass_name)
                trace: list[str] | None = [] if attempt is not None else None
                m = match(rule.pattern, node.output, g, trace=trace)
                if attempt is not None:
                    for line in trace or []:
                        if line.startswith("stopped "):
                            attempt.stopped(line.removeprefix("stopped "))
                        else:
                            attempt.step(line)
                if m is None:
                    continue
                why = rule.check(g, m)
                if why is not None:
                    if attempt is not None:
                        attempt.stopped(f"the check: {why}")
                    continue
                before = {id(n) for n in g.nodes}
                new = rule.rewrite(g, m)
                if new is None:
                    if attempt is not None:
                        attempt.stopped("the rewrite declined")
                    continue
                _replace(g, node, new, created=new.producer is not None and id(new.producer) not in before)
                counts[rule.name] = counts.get(rule.name, 0) + 1
                if attempt is not None:
                    attempt.fired(f"%{new.name} from {new.producer.op.name}" if new.producer else f"%{new.name}")
                fired = True
                break
        if not fired:
            break
        g.toposort()
    else:
        raise RuntimeError(f"rules did not reach a fixed point in {max_rounds} rounds: {counts}")
    return counts


def _replace(g: Graph, root: Node, new: Value, created: bool) -> None:
    value_name = root.output.name
    g.replace_all_uses(root.output, new)
    if root.output.uses or root.output in g.outputs:
        return
    g.remove_node(root)
    remove_dead(g)
    if created and new.producer is not None and new not in g.outputs:
        g.rename(new, value_name)


def remove_dead(g: Graph) -> int:
    """Remove nodes whose outputs nobody uses (reverse order, so chains go in one sweep)."""
    removed = 0
    for node in reversed(list(g.nodes)):
        if all(not o.uses and o not in g.outputs for o in node.outputs):
            g.remove_node(node)
            removed += 1
    g.remove_unused_constants()
    return removed


class RulePass(Pass):
    """A pass that is a rule set run to a fixed point (:func:`apply_rules`); ``--explain`` can
    name the pass and each of its rules."""

    rules: ClassVar[Sequence[Rule]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "explains" not in cls.__dict__:
            cls.explains = (cls.name, *(r.name for r in cls.rules))

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        counts = apply_rules(g, self.rules, explain=ctx.explainer, pass_name=self.name)
        return PassResult(bool(counts), counts)
