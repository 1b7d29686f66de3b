"""A tiny graph builder for pass tests that are clearer as code than as IR text."""

from __future__ import annotations

from typing import Any

import numpy as np

from spc.ir import ops
from spc.ir.graph import Graph, Value
from spc.ir.types import DType, TensorType


class Builder:
    def __init__(self, shape: tuple[int, ...], name: str = "x") -> None:
        self.g = Graph("t")
        self.x = self.g.add_input(name, TensorType(DType.F32, shape))

    def const(self, data: Any, dtype: Any = None) -> Value:
        return self.g.add_const("c", np.asarray(data, dtype=dtype))

    def op(self, name: str, *inputs: Value | None, **attrs: Any) -> Value:
        return self.g.make_node(ops.get(f"onnx.{name}"), list(inputs), attrs).outputs[0]

    def done(self, *outputs: Value) -> Graph:
        self.g.outputs = list(outputs)
        return self.g
