"""What the ONNX op modules share: the type aliases of their signatures and the small readers of
a node's inputs and attributes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from spc.ir.graph import Value
from spc.ir.types import Dim, TensorType

A = list[Any]  # an evaluator's inputs (numpy arrays, None for an absent optional one)
D = dict[str, Any]  # a node's attributes
Types = list[TensorType] | None  # inferred output types; None: not known here
Ins = list[Value | None]  # type inference's inputs

_T = TypeVar("_T")


# -- inputs -----------------------------------------------------------------------------------
def _in(ins: Sequence[_T], i: int) -> _T | None:
    """Optional input ``i`` (missing, or given as an empty name)."""
    return ins[i] if i < len(ins) else None


def _opt(ins: A, i: int) -> np.ndarray | None:
    """Optional input ``i`` (absent or given as an empty name)."""
    return None if i >= len(ins) or ins[i] is None else np.asarray(ins[i])


def _x(ins: list[Value | None]) -> Value:
    x = ins[0]
    assert x is not None
    return x


def _type(ins: Ins, i: int) -> TensorType:
    v = ins[i] if i < len(ins) else None
    if v is None:
        raise ValueError(f"input {i} is missing")
    return v.type


def _arr(x: Any) -> np.ndarray:
    return np.asarray(x)


def _ints(x: Any) -> list[int]:
    return [int(v) for v in np.asarray(x).reshape(-1)]


def _scalar(x: Any) -> Any:
    return np.asarray(x).reshape(-1)[0]


# -- attributes and shapes --------------------------------------------------------------------
def _attr_ints(attrs: D, key: str, n: int, default: int) -> tuple[int, ...]:
    v = attrs.get(key)
    if v is None or len(v) == 0:
        return (default,) * n
    if len(v) != n:
        raise ValueError(f"{key}={list(v)} needs {n} values")
    return tuple(int(a) for a in v)


def _static(dims: Sequence[Dim]) -> tuple[int, ...] | None:
    return tuple(int(d) for d in dims) if all(isinstance(d, int) for d in dims) else None


def _bshape(rank: int, axis: int, n: int) -> tuple[int, ...]:
    """Shape that broadcasts a length-n vector along ``axis`` of a rank-``rank`` array."""
    return tuple(n if i == axis else 1 for i in range(rank))


def _work(dtype: np.dtype) -> np.dtype:
    """The float type to compute in: float16 widens to float32, integers to float64."""
    dtype = np.dtype(dtype)
    return np.result_type(dtype, np.float32) if dtype.kind == "f" else np.dtype(np.float64)
