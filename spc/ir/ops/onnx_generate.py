"""ONNX ops that make a tensor from attributes, a shape, scalars or indices: Constant,
ConstantOfShape, Range, EyeLike and OneHot.

Every evaluator is vectorised numpy and returns exactly ONNX's element type and shape. Inference
returns None only where the answer depends on a value that is not known here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spc.ir.ops import register
from spc.ir.ops.infer import const, norm_axis
from spc.ir.ops.operands import A, D, Ins, Types, _arr, _in, _ints, _scalar, _type
from spc.ir.types import DType, TensorType

# conformance cases spc refuses on purpose (frontend/conformance.py): case name -> why
CONFORMANCE_EXCEPTIONS: dict[str, str] = {}


def _onnx_dtype(code: int) -> np.dtype:
    try:
        return DType.from_onnx(int(code)).numpy
    except TypeError as exc:
        raise ValueError(str(exc)) from None


# -- constants --------------------------------------------------------------------------------
_CONSTANT_KEYS = {"value": None, "value_float": np.float32, "value_int": np.int64, "value_floats": np.float32,
                  "value_ints": np.int64}


def _constant_value(attrs: D) -> np.ndarray:
    for key, dtype in _CONSTANT_KEYS.items():
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    raise ValueError(f"Constant without a supported value attribute: {sorted(attrs)}")


def _constant_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    for key in ("value_string", "value_strings", "sparse_value"):
        if key in attrs:
            raise ValueError(f"a Constant with {key} is not supported (strings and sparse tensors)")
    value = _constant_value(attrs)
    try:
        DType.from_numpy(value.dtype)
    except TypeError:
        raise ValueError(f"a Constant of element type {value.dtype} is not supported") from None
    return attrs


@register("onnx.Constant", lambda ins, attrs: [TensorType.of(_constant_value(attrs))], arity=(0, 0),
          canonicalize=_constant_canon)
def _constant(ins: A, attrs: D) -> list[np.ndarray]:
    """The value of whichever value* attribute is set (tensor, float(s), int(s))."""
    return [_constant_value(attrs)]


def _constant_of_shape_fill(attrs: D) -> np.ndarray:
    value = attrs.get("value")
    return np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)[:1]


def _cos_infer(ins: Ins, attrs: D) -> Types:
    shape = const(ins[0])
    if shape is None:
        return None
    return [TensorType(DType.from_numpy(_constant_of_shape_fill(attrs).dtype), tuple(_ints(shape)))]


@register("onnx.ConstantOfShape", _cos_infer, arity=(1, 1))
def _constant_of_shape(ins: A, attrs: D) -> list[np.ndarray]:
    """A tensor of the given shape (empty: a scalar) filled with ``value`` (default float 0)."""
    fill = _constant_of_shape_fill(attrs)
    return [np.full(tuple(_ints(ins[0])), fill[0], dtype=fill.dtype)]


# -- ranges -----------------------------------------------------------------------------------
def _range_len(start: Any, limit: Any, delta: Any) -> int:
    start, limit, delta = _scalar(start), _scalar(limit), _scalar(delta)
    if delta == 0:
        raise ValueError("Range: delta is 0")
    if np.issubdtype(np.asarray(start).dtype, np.integer):
        return max(-(-(int(limit) - int(start)) // int(delta)), 0)  # exact for any int64
    return max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)


def _range_infer(ins: Ins, attrs: D) -> Types:
    vals = [const(_in(ins, i)) for i in range(3)]
    if any(v is None for v in vals):
        return None
    return [TensorType(_type(ins, 0).dtype, (_range_len(*vals),))]


@register("onnx.Range", _range_infer, arity=(3, 3))
def _range(ins: A, attrs: D) -> list[np.ndarray]:
    """start, start + delta, ... : max(ceil((limit - start) / delta), 0) values in start's type."""
    start = _arr(ins[0])
    n = _range_len(start, ins[1], ins[2])
    if np.issubdtype(start.dtype, np.integer):
        return [(int(_scalar(start)) + np.arange(n, dtype=np.int64) * int(_scalar(ins[2]))).astype(start.dtype)]
    # ONNX defines the values by repeated addition in the element type (its function body is a
    # loop), which differs from start + i * delta in the last bits
    steps = np.full(n, _scalar(ins[2]), start.dtype)
    steps[:1] = _scalar(start)
    return [np.cumsum(steps, dtype=start.dtype)]


# -- one-hot and identity matrices ------------------------------------------------------------
def _onehot_infer(ins: Ins, attrs: D) -> Types:
    ind, values = _type(ins, 0), _type(ins, 2)
    depth = const(_in(ins, 1))
    if depth is None:
        return None
    shape = list(ind.shape)
    shape.insert(norm_axis(attrs.get("axis", -1), ind.rank + 1), int(_scalar(depth)))
    return [TensorType(values.dtype, tuple(shape))]


@register("onnx.OneHot", _onehot_infer, arity=(3, 3))
def _onehot(ins: A, attrs: D) -> list[np.ndarray]:
    """values[1] where the (new) ``axis`` position equals the index (negative from depth), values[0] elsewhere."""
    idx, values = _arr(ins[0]), _arr(ins[2]).reshape(-1)
    depth = int(_scalar(ins[1]))
    axis = norm_axis(attrs.get("axis", -1), idx.ndim + 1)
    idx = idx.astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)  # out of range after this: an all-off row
    hot = idx[..., None] == np.arange(depth)
    return [np.moveaxis(np.where(hot, values[1], values[0]).astype(values.dtype), -1, axis)]


def _eyelike_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    if "dtype" in attrs:
        _onnx_dtype(attrs["dtype"])
    return attrs


def _eyelike_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    if t.rank != 2:
        raise ValueError("EyeLike needs a 2-D input")
    return [TensorType(DType.from_onnx(int(attrs["dtype"])) if "dtype" in attrs else t.dtype, t.shape)]


@register("onnx.EyeLike", _eyelike_infer, arity=(1, 1), canonicalize=_eyelike_canon)
def _eyelike(ins: A, attrs: D) -> list[np.ndarray]:
    """Ones on diagonal k of a matrix shaped like the input (of type ``dtype``, default the input's)."""
    x = _arr(ins[0])
    dtype = _onnx_dtype(attrs["dtype"]) if "dtype" in attrs else x.dtype
    return [np.eye(x.shape[0], x.shape[1], int(attrs.get("k", 0)), dtype=dtype)]
