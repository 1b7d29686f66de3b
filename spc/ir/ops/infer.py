"""Shape-inference helpers shared by the op definitions.

Each returns ``None`` when the answer depends on a value that is not a constant here, in which
case the caller (the importer) supplies the type it got from ONNX shape inference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spc.ir.graph import Value
from spc.ir.types import Dim, DType, TensorType


def const(v: Value | None) -> np.ndarray | None:
    return v.data if v is not None and v.is_const else None


def broadcast(*shapes: tuple[Dim, ...]) -> tuple[Dim, ...]:
    rank = max(len(s) for s in shapes)
    out: list[Dim] = []
    for i in range(rank):
        dims = [s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0]
        ints = {d for d in dims if isinstance(d, int) and d != 1}
        syms = [d for d in dims if isinstance(d, str)]
        if len(ints) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(ints.pop() if ints else (syms[0] if syms else 1))
    return tuple(out)


def same_type(inputs: list[Value | None], attrs: dict[str, Any]) -> list[TensorType]:
    first = inputs[0]
    assert first is not None
    return [first.type]


def elementwise(out_dtype: DType | None = None):
    def infer(inputs: list[Value | None], attrs: dict[str, Any]) -> list[TensorType]:
        vals = [v for v in inputs if v is not None]
        shape = broadcast(*(v.type.shape for v in vals))
        # Where's first input is the condition; its data type is not the result's
        dtype = out_dtype or (vals[-1].type.dtype if len(vals) == 3 else vals[0].type.dtype)
        return [TensorType(dtype, shape)]

    return infer


def norm_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def axes_from(node_inputs: list[Value | None], attrs: dict[str, Any], index: int) -> list[int] | None:
    """Axes given as an attribute (old opsets) or as a constant input (opset >= 13)."""
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    v = node_inputs[index] if index < len(node_inputs) else None
    if v is None:
        return []
    data = const(v)
    return None if data is None else [int(a) for a in np.atleast_1d(data)]
