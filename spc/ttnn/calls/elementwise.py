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
    F,
    Format,
    MemoryConfigKey,
    Number,
    broadcast,
    define,
    refs,
    spell,
    torch,
)
from spc.ttnn.formats import DataFormat


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0, x)


def _t(name: str, module: Any = torch) -> Callable[..., Any]:
    """torch's function ``name`` (looked up when it runs: torch is imported on first use)."""
    return lambda *xs: getattr(module, name)(*xs)


def _bounded(name: str) -> Callable[..., Any]:
    """torch.maximum/minimum with a scalar other side as a tensor of the input's type."""
    return lambda x, y: getattr(torch, name)(x, torch.as_tensor(y, dtype=x.dtype))


# spelled fn(input[, other or scalar]): (numpy meaning, torch emulation)
BINARY: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "eq": (np.equal, lambda x, y: x == y), "ne": (np.not_equal, lambda x, y: x != y),
    "gt": (np.greater, lambda x, y: x > y), "ge": (np.greater_equal, lambda x, y: x >= y),
    "lt": (np.less, lambda x, y: x < y), "le": (np.less_equal, lambda x, y: x <= y),
    "logical_and": (lambda x, y: (x != 0) & (y != 0),) * 2, "logical_or": (lambda x, y: (x != 0) | (y != 0),) * 2,
    "logical_xor": (lambda x, y: (x != 0) ^ (y != 0),) * 2, "multiply": (np.multiply, _t("mul")),
    "add": (np.add, _t("add")), "subtract": (np.subtract, _t("sub")), "divide": (np.divide, _t("div")),
    "rsub": (lambda x, y: y - x,) * 2, "maximum": (np.maximum, _bounded("maximum")),
    "minimum": (np.minimum, _bounded("minimum"))}
# spelled fn(input). The emulations are exact float32 functions, stored in the call's format (the
# device's SFPU approximations are not modelled: docs/precision.md)
UNARY: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "gtz": (lambda x: x > 0,) * 2, "logical_not": (lambda x: x == 0,) * 2,
    "rsqrt": (lambda x: 1 / np.sqrt(x), _t("rsqrt")), "floor": (np.floor, _t("floor")),
    "relu": (lambda x: np.maximum(x, 0), _t("relu")), "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), _t("sigmoid")),
    "tanh": (np.tanh, _t("tanh")), "exp": (np.exp, _t("exp")), "log": (np.log, _t("log")),
    "sqrt": (np.sqrt, _t("sqrt")), "reciprocal": (lambda x: 1 / x, _t("reciprocal")), "neg": (np.negative, _t("neg")),
    "abs": (np.abs, _t("abs")), "ceil": (np.ceil, _t("ceil")), "round": (np.round, _t("round")),
    "sign": (np.sign, _t("sign")), "sin": (np.sin, _t("sin")), "cos": (np.cos, _t("cos")), "tan": (np.tan, _t("tan")),
    "asin": (np.arcsin, _t("asin")), "acos": (np.arccos, _t("acos")), "atan": (np.arctan, _t("atan")),
    "sinh": (np.sinh, _t("sinh")), "cosh": (np.cosh, _t("cosh")), "asinh": (np.arcsinh, _t("asinh")),
    "acosh": (np.arccosh, _t("acosh")), "atanh": (np.arctanh, _t("atanh")), "erf": (_erf, _t("erf")),
    "softsign": (lambda x: x / (1 + np.abs(x)), _t("softsign", F)), "softplus": (_softplus, _t("softplus", F)),
    "hardswish": (lambda x: x * np.clip(x + 3, 0, 6) / 6, _t("hardswish", F)),
    "hardsigmoid": (lambda x: np.clip(x / 6 + 0.5, 0, 1), _t("hardsigmoid", F)),
    "mish": (lambda x: x * np.tanh(_softplus(x)), _t("mish", F)),
    "silu": (lambda x: x / (1 + np.exp(-x)), _t("silu", F)), "isnan": (np.isnan, _t("isnan")),
    "isinf": (np.isinf, _t("isinf"))}
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


def _emulated(fn: Callable[..., Any]) -> Callable[[list[Any], dict[str, Any], dict[str, Any]], Any]:
    """``fn`` on the inputs, or on the input and the call's ``scalar``, as float32."""
    return lambda ins, w, a: fn(*ins, *([a["scalar"]] if "scalar" in a else [])).to(torch.float32)


def _positional(op: CallSpec) -> Call:
    return Call(op.op, tuple(refs(op)) + ((op.args["scalar"],) if "scalar" in op.args else ()))


def _one_argument(key: str) -> Callable[[CallSpec], Call]:
    return lambda op: Call(op.op, (refs(op)[0], op.args[key]))


def _keywords(*keys: str) -> Callable[[CallSpec], Call]:
    return lambda op: Call(op.op, (refs(op)[0],), {k: op.args[k] for k in keys if k in op.args})


for _name, (_fn, _emu) in BINARY.items():
    define(f"ttnn.{_name}", _positional, _of(_fn), _values, inputs=(1, 2),
           args={"scalar": Number, "memory_config": MemoryConfigKey}, mask=_name in MASKS, emulate=_emulated(_emu))
for _name, (_fn, _emu) in UNARY.items():
    define(f"ttnn.{_name}", _positional, _of(_fn), _values, args={"memory_config": MemoryConfigKey},
           mask=_name in MASKS, emulate=_emulated(_emu))


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


def _where_emulated(ins: list[Any], w: dict[str, Any], a: dict[str, Any]) -> Any:
    t, f = _branches(ins, a)
    return torch.where(ins[0] != 0, torch.as_tensor(t, dtype=torch.float32), torch.as_tensor(f, dtype=torch.float32))


define("ttnn.elu", _keywords("alpha"), _elu, _values, args={"alpha": Number}, required=frozenset({"alpha"}),
       emulate=lambda ins, w, a: F.elu(ins[0], alpha=a["alpha"]))
define("ttnn.celu", _keywords("alpha"), _celu, _values, args={"alpha": Number}, required=frozenset({"alpha"}),
       emulate=lambda ins, w, a: F.celu(ins[0], alpha=a["alpha"]))
define("ttnn.selu", _keywords("scale", "alpha"), _selu, _values, args={"scale": Number, "alpha": Number},
       required=frozenset({"scale", "alpha"}),
       emulate=lambda ins, w, a: a["scale"] * torch.where(ins[0] > 0, ins[0], a["alpha"] * torch.expm1(ins[0])))
define("ttnn.leaky_relu", _one_argument("negative_slope"), _leaky_relu, _values, args={"negative_slope": Number},
       required=frozenset({"negative_slope"}), emulate=lambda ins, w, a: F.leaky_relu(ins[0], a["negative_slope"]))
define("ttnn.pow", _one_argument("exponent"), _pow, _values, args={"exponent": Number},
       required=frozenset({"exponent"}), emulate=lambda ins, w, a: torch.pow(ins[0], a["exponent"]))
define("ttnn.clamp", _keywords("min", "max"), _clamp, _values, args={"min": Number, "max": Number},
       emulate=lambda ins, w, a: torch.clamp(ins[0], min=a.get("min"), max=a.get("max")))
define("ttnn.typecast", lambda op: Call(op.op, (refs(op)[0], spell(op.args["dtype"]))), _typecast, _values,
       args={"dtype": Format}, required=frozenset({"dtype"}), emulate=_emulated(lambda x: x))
# the shape is the condition's: the branches broadcast to it (the runtime checks the result)
define("ttnn.where", _where_spelling, _where, None, inputs=(1, 3),
       args={"true_value": Number, "false_value": Number}, emulate=_where_emulated)
