"""Element-wise calls: each value of the result from the values at the same place of the inputs
(broadcast as numpy does), or of the input and a scalar. Comparisons and logic give 0/1 masks, as
ttnn's do."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from spc.ttnn.calls.definition import (
    F32,
    Call,
    CallSpec,
    Format,
    MemoryConfigKey,
    Number,
    broadcast,
    define,
    refs,
    spell,
)
from spc.ttnn.formats import DataFormat


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0, x)


# spelled fn(input[, other or scalar])
BINARY: dict[str, Callable[..., Any]] = {
    "eq": np.equal, "ne": np.not_equal, "gt": np.greater, "ge": np.greater_equal, "lt": np.less,
    "le": np.less_equal, "logical_and": lambda x, y: (x != 0) & (y != 0),
    "logical_or": lambda x, y: (x != 0) | (y != 0), "logical_xor": lambda x, y: (x != 0) ^ (y != 0),
    "multiply": np.multiply, "add": np.add, "subtract": np.subtract, "divide": np.divide, "rsub": lambda x, y: y - x,
    "maximum": np.maximum, "minimum": np.minimum}
# spelled fn(input)
UNARY: dict[str, Callable[..., Any]] = {
    "gtz": lambda x: x > 0, "logical_not": lambda x: x == 0, "rsqrt": lambda x: 1 / np.sqrt(x), "floor": np.floor,
    "relu": lambda x: np.maximum(x, 0), "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "tanh": np.tanh, "exp": np.exp,
    "log": np.log, "sqrt": np.sqrt, "reciprocal": lambda x: 1 / x, "neg": np.negative, "abs": np.abs,
    "ceil": np.ceil, "round": np.round, "sign": np.sign, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "erf": _erf, "softsign": lambda x: x / (1 + np.abs(x)),
    "softplus": _softplus, "hardswish": lambda x: x * np.clip(x + 3, 0, 6) / 6,
    "hardsigmoid": lambda x: np.clip(x / 6 + 0.5, 0, 1),
    "mish": lambda x: x * np.tanh(_softplus(x)), "isnan": np.isnan, "isinf": np.isinf}
MASKS = {"eq", "ne", "gt", "ge", "lt", "le", "gtz", "logical_not", "logical_and", "logical_or", "logical_xor"}


def _values(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    return broadcast(*ins)


def _of(fn: Callable[..., Any]) -> Callable[[list[np.ndarray], dict[str, np.ndarray], dict[str, Any]], np.ndarray]:
    """``fn`` on the float32 inputs, or on the input and the call's ``scalar``, as float32."""
    def meaning(ins: list[np.ndarray], w: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
        args = [*ins, *([F32(a["scalar"])] if "scalar" in a else [])]
        with np.errstate(all="ignore"):
            return np.asarray(fn(*args)).astype(F32, copy=False)

    return meaning


def _positional(op: CallSpec) -> Call:
    return Call(op.op, tuple(refs(op)) + ((op.args["scalar"],) if "scalar" in op.args else ()))


def _one_argument(key: str) -> Callable[[CallSpec], Call]:
    return lambda op: Call(op.op, (refs(op)[0], op.args[key]))


def _keywords(*keys: str) -> Callable[[CallSpec], Call]:
    return lambda op: Call(op.op, (refs(op)[0],), {k: op.args[k] for k in keys if k in op.args})


for _name, _fn in BINARY.items():
    define(f"ttnn.{_name}", _positional, _of(_fn), _values, inputs=(1, 2),
           args={"scalar": Number, "memory_config": MemoryConfigKey}, mask=_name in MASKS)
for _name, _fn in UNARY.items():
    define(f"ttnn.{_name}", _positional, _of(_fn), _values, args={"memory_config": MemoryConfigKey},
           mask=_name in MASKS)


def _elu(ins: list[np.ndarray], w: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return np.where(ins[0] > 0, ins[0], a["alpha"] * np.expm1(ins[0])).astype(F32)


def _celu(ins: list[np.ndarray], w: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return (np.maximum(ins[0], 0) + np.minimum(0, a["alpha"] * np.expm1(ins[0] / a["alpha"]))).astype(F32)


def _selu(ins: list[np.ndarray], w: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return (a["scale"] * np.where(ins[0] > 0, ins[0], a["alpha"] * np.expm1(ins[0]))).astype(F32)


def _leaky_relu(ins: list[np.ndarray], w: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return np.where(ins[0] >= 0, ins[0], ins[0] * a["negative_slope"]).astype(F32)


def _pow(ins: list[np.ndarray], w: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return np.power(ins[0].astype(np.float64), a["exponent"]).astype(F32)


def _clamp(ins: list[np.ndarray], w: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return np.clip(ins[0], a.get("min"), a.get("max")).astype(F32)


def _typecast(ins: list[np.ndarray], w: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    """Float formats hold the value exactly here; integer formats truncate toward zero, as ttnn's."""
    if a.get("dtype") in (DataFormat.UINT32, DataFormat.UINT16):
        return np.trunc(ins[0]).astype(F32)
    return ins[0]


def _where(ins: list[np.ndarray], w: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    t, f = _branches(ins, a)
    return np.where(ins[0] != 0, np.asarray(t, F32), np.asarray(f, F32)).astype(F32)


def _branches(ins: list[Any], a: dict[str, Any]) -> tuple[Any, Any]:
    """where's two branches: each a scalar argument or the next input."""
    rest = iter(ins[1:])
    t = a["true_value"] if "true_value" in a else next(rest)
    f = a["false_value"] if "false_value" in a else next(rest)
    return t, f


def _where_spelling(op: CallSpec) -> Call:
    x = refs(op)
    return Call(op.op, (x[0], *_branches(x, op.args)))


define("ttnn.elu", _keywords("alpha"), _elu, _values, args={"alpha": Number}, required=frozenset({"alpha"}))
define("ttnn.celu", _keywords("alpha"), _celu, _values, args={"alpha": Number}, required=frozenset({"alpha"}))
define("ttnn.selu", _keywords("scale", "alpha"), _selu, _values, args={"scale": Number, "alpha": Number},
       required=frozenset({"scale", "alpha"}))
define("ttnn.leaky_relu", _one_argument("negative_slope"), _leaky_relu, _values, args={"negative_slope": Number},
       required=frozenset({"negative_slope"}))
define("ttnn.pow", _one_argument("exponent"), _pow, _values, args={"exponent": Number},
       required=frozenset({"exponent"}))
define("ttnn.clamp", _keywords("min", "max"), _clamp, _values, args={"min": Number, "max": Number})
define("ttnn.typecast", lambda op: Call(op.op, (refs(op)[0], spell(op.args["dtype"]))), _typecast, _values,
       args={"dtype": Format}, required=frozenset({"dtype"}))
# the shape is the condition's: the branches broadcast to it (the runtime checks the result)
define("ttnn.where", _where_spelling, _where, None, inputs=(1, 3),
       args={"true_value": Number, "false_value": Number})
