"""Parse the text form written by :mod:`spc.ir.printer` back into a :class:`Graph`.

``parse_graph(print_graph(g), weight_store(g))`` rebuilds ``g``: tests are written as IR text
in, IR text out, and a dump from a bug report can be fed back to a single pass.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from spc.errors import SpcError
from spc.ir import ops
from spc.ir.graph import Graph, Placement, Value
from spc.ir.types import TensorType
from spc.ttnn.precision import BlockPrecision

_NAME = r'%(?:"(?:[^"\\]|\\.)*"|[A-Za-z0-9_./\-]+)'
_TYPE = r"[a-z0-9]+\[[^\]]*\]"
_DECODER = json.JSONDecoder()


class ParseError(ValueError):
    pass


def _unname(tok: str) -> str:
    body = tok[1:]
    return json.loads(body) if body.startswith('"') else body


class _Scanner:
    def __init__(self, text: str, lineno: int) -> None:
        self.text, self.pos, self.lineno = text, 0, lineno

    def fail(self, what: str) -> ParseError:
        return ParseError(f"line {self.lineno}: expected {what} at {self.text[self.pos:self.pos + 30]!r}")

    def ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] == " ":
            self.pos += 1

    def eat(self, s: str) -> bool:
        self.ws()
        if self.text.startswith(s, self.pos):
            self.pos += len(s)
            return True
        return False

    def expect(self, s: str) -> None:
        if not self.eat(s):
            raise self.fail(repr(s))

    def match(self, pattern: str, what: str) -> str:
        self.ws()
        m = re.compile(pattern).match(self.text, self.pos)
        if not m:
            raise self.fail(what)
        self.pos = m.end()
        return m.group(0)

    def json_value(self) -> Any:
        self.ws()
        try:
            value, self.pos = _DECODER.raw_decode(self.text, self.pos)
        except json.JSONDecodeError:
            raise self.fail("a value") from None
        return value

    def dense(self, ttype: TensorType) -> np.ndarray:
        self.expect("dense<")
        value = self.json_value()
        self.expect(">")
        return np.asarray(value, dtype=ttype.dtype.host_numpy).reshape(ttype.static_shape)

    def attr_value(self) -> Any:
        if self.eat("tensor<"):
            ttype = TensorType.parse(self.match(_TYPE, "a tensor type"))
            value = self.json_value()
            self.expect(">")
            return np.asarray(value, dtype=ttype.dtype.numpy).reshape(ttype.static_shape)
        value = self.json_value()
        return value


def parse_graph(text: str, weights: Mapping[str, np.ndarray] | None = None) -> Graph:
    weights = weights or {}
    lines = [(i + 1, ln.strip()) for i, ln in enumerate(text.splitlines()) if ln.strip()]
    if not lines:
        raise ParseError("empty IR text")
    env: dict[str, Value] = {}
    lineno, head = lines[0]
    m = re.match(r"^graph @([A-Za-z0-9_.\-]+)\((.*)\) \{$", head)
    if not m:
        raise ParseError(f"line {lineno}: expected 'graph @name(...) {{'")
    g = Graph(m.group(1))
    if m.group(2):
        sc = _Scanner(m.group(2), lineno)
        while True:
            name = _unname(sc.match(_NAME, "an argument name"))
            sc.expect(":")
            env[name] = g.add_input(name, TensorType.parse(sc.match(_TYPE, "a type")))
            if not sc.eat(","):
                break
    for lineno, line in lines[1:]:
        sc = _Scanner(line, lineno)
        if line == "}":
            break
        if sc.eat("return"):
            names = re.findall(_NAME, line[sc.pos:])
            g.outputs = [_lookup(env, _unname(n), lineno) for n in names]
            continue
        outs: list[tuple[str, TensorType]] = []
        while True:
            name = _unname(sc.match(_NAME, "a value name"))
            sc.expect(":")
            outs.append((name, TensorType.parse(sc.match(_TYPE, "a type"))))
            if not sc.eat(","):
                break
        sc.expect("=")
        if sc.eat("const"):
            (name, ttype), = outs
            if sc.eat("@"):
                ref = sc.json_value()
                if ref not in weights:
                    raise ParseError(f"line {lineno}: weight {ref!r} is not in the weight store")
                env[name] = g.add_const(name, type=ttype, loader=lambda r=ref: np.asarray(weights[r]),
                                        weight_ref=ref)
            else:
                env[name] = g.add_const(name, sc.dense(ttype))
            continue
        op_name = sc.match(r"[a-z]+\.[A-Za-z0-9]+", "an op name")
        try:
            op = ops.get(op_name)
        except KeyError:
            raise ParseError(f"line {lineno}: unknown op {op_name}") from None
        sc.expect("(")
        inputs: list[Value | None] = []
        while not sc.eat(")"):
            if sc.eat("_"):
                inputs.append(None)
            else:
                inputs.append(_lookup(env, _unname(sc.match(_NAME, "an operand")), lineno))
            sc.eat(",")
        attrs: dict[str, Any] = {}
        if sc.eat("{"):
            while not sc.eat("}"):
                key = sc.match(r"[A-Za-z_][A-Za-z0-9_]*", "an attribute name")
                sc.expect("=")
                attrs[key] = sc.attr_value()
                sc.eat(",")
        node_name = sc.match(r"#[A-Za-z0-9_./\-]+", "#node_name")[1:]
        sc.ws()
        placement = Placement.UNASSIGNED
        if sc.pos < len(sc.text) and sc.text[sc.pos] == "@":
            placement = Placement(sc.match(r"@[a-z\-]+", "@placement")[1:])
        sc.ws()
        block, precision = None, None
        if sc.eat("<"):
            block = sc.json_value()
            if not isinstance(block, str):
                raise ParseError(f"line {lineno}: expected a block name in quotes after '<'")
            spelled = sc.match(r"[^>]*", "a precision")
            sc.expect(">")
            if spelled.strip():
                try:
                    precision = BlockPrecision.parse(spelled)
                except SpcError as exc:
                    raise ParseError(f"line {lineno}: {exc}") from None
        sc.ws()
        if sc.pos < len(sc.text):
            raise ParseError(f"line {lineno}: unexpected {sc.text[sc.pos:][:20]!r} after the node")
        node = g.make_node(op, inputs, attrs, [t for _, t in outs], name=node_name,
                           out_names=[n for n, _ in outs])
        node.placement, node.block, node.precision = placement, block, precision
        for (name, _), v in zip(outs, node.outputs):
            if v.name != name:
                raise ParseError(f"line {lineno}: value %{name} defined twice")
            env[name] = v
    return g


def _lookup(env: dict[str, Value], name: str, lineno: int) -> Value:
    try:
        return env[name]
    except KeyError:
        raise ParseError(f"line {lineno}: %{name} is used before it is defined") from None
