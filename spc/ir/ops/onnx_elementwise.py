"""ONNX element-wise ops: arithmetic, comparisons, logic, bitwise, activations, math, casts.

Each evaluator is the numpy meaning of the op (constant folding, semantic matching and the host
stage all run it), so it returns exactly ONNX's output dtype: numpy's promotion rules are never
trusted (a python float attribute is weak, a numpy float64 constant would widen a float32
tensor), integers wrap like the two's complement hardware ONNX describes, and float16 math runs
in float32 and rounds once at the end, as runtimes do.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import reduce
from typing import Any

import numpy as np

from spc.ir.graph import Value
from spc.ir.ops import Canonicalize, Infer, register
from spc.ir.ops.infer import broadcast, same_type
from spc.ir.types import DType, TensorType

A = list[Any]
D = dict[str, Any]
Fn = Callable[..., Any]

_TRAINING_DROPOUT = ("training-mode Dropout draws a random mask at every run; spc compiles inference graphs, where "
                     "Dropout is the identity, so a Dropout with a training_mode input is refused at import")
_NOT_TENSOR = "optional and sequence values are not tensors; spc graphs carry tensors only"

# conformance cases spc refuses on purpose (frontend/conformance.py): case name -> why
CONFORMANCE_EXCEPTIONS: dict[str, str] = {
    "test_training_dropout*": _TRAINING_DROPOUT,
    "test_identity_opt": _NOT_TENSOR,
    "test_identity_sequence": _NOT_TENSOR,
}


def _arr(x: Any) -> np.ndarray:
    return np.asarray(x)


def _f32(v: float) -> float:
    # ONNX float attributes are float32; defaults must be the same numbers a model would carry
    return float(np.float32(v))


def _work(x: np.ndarray) -> np.ndarray:
    """``x`` in the type its math runs in: float16 in float32, everything else as is."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


# -- type inference ---------------------------------------------------------------------------
def _bcast(dtype_of: int = 0, out: DType | None = None) -> Infer:
    """Multidirectional broadcast of all inputs; element type of input ``dtype_of`` (or ``out``)."""

    def infer(ins: list[Value | None], attrs: D) -> list[TensorType]:
        vals = [v for v in ins if v is not None]
        src = ins[dtype_of]
        assert src is not None
        return [TensorType(out or src.type.dtype, broadcast(*(v.type.shape for v in vals)))]

    return infer


def _bool_like(ins: list[Value | None], attrs: D) -> list[TensorType]:
    assert ins[0] is not None
    return [ins[0].type.with_dtype(DType.BOOL)]


def _defaults(defaults: D, check: Callable[[D], None] | None = None) -> Canonicalize:
    """Canonicalizer writing the attribute defaults into the node (and validating the values)."""

    def canon(attrs: D, n_inputs: int, n_outputs: int, since: int) -> D:
        out = {**defaults, **attrs}
        if check is not None:
            check(out)
        return out

    return canon


def _one_of(attr: str, allowed: tuple[Any, ...]) -> Callable[[D], None]:
    def check(attrs: D) -> None:
        if attr not in attrs:
            raise ValueError(f"attribute {attr} is required")
        if attrs[attr] not in allowed:
            raise ValueError(f"{attr}={attrs[attr]!r} is not supported (one of {', '.join(map(repr, allowed))})")

    return check


# -- arithmetic -------------------------------------------------------------------------------
def _binary(name: str, fn: Fn) -> None:
    def run(ins: A, attrs: D) -> list[np.ndarray]:
        a, b = _arr(ins[0]), _arr(ins[1])
        with np.errstate(all="ignore"):  # wrap-around and inf/nan are the defined results
            out = fn(a, b)
        return [_arr(out).astype(a.dtype, copy=False)]

    register(f"onnx.{name}", _bcast(), arity=(2, 2))(run)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "u":
        return np.floor_divide(a, b)  # floor is truncation for unsigned; x / 0 gives 0
    if a.dtype.kind == "i":
        # ONNX integer Div truncates toward zero (C), numpy floors: step back up when the
        # division was inexact and the signs differ
        q, r = np.divmod(a, b)
        return q + ((r != 0) & ((a < 0) != (b < 0)))
    return np.true_divide(a, b)


_binary("Add", np.add)
_binary("Sub", np.subtract)
_binary("Mul", np.multiply)
_binary("Div", _div)


def _int_pow(x: np.ndarray, e: np.ndarray) -> np.ndarray:
    """x ** e for integer x and e, wrapping; a negative e gives 1/x**|e| truncated (0 unless |x| = 1)."""
    e = e.astype(np.int64, copy=False)
    neg = e < 0
    out = np.power(x, np.where(neg, 0, e).astype(x.dtype, copy=False))
    if neg.any():
        one = np.ones((), x.dtype)
        odd_minus = np.where(e % 2 == 0, one, -one) if x.dtype.kind == "i" else one
        out = np.where(neg, np.where(x == 1, one, np.where(x == -1, odd_minus, 0)), out)
    return out


@register("onnx.Pow", _bcast(), arity=(2, 2))
def _pow(ins: A, attrs: D) -> list[np.ndarray]:
    """Output has the base's type; the exponent may be any numeric type (Pow-12+)."""
    x, y = _arr(ins[0]), _arr(ins[1])
    with np.errstate(all="ignore"):
        if x.dtype.kind in "iu" and y.dtype.kind in "iub":
            out = _int_pow(x, y)
        else:
            # float math in the wider of the two float types (at least float32), integer
            # bases through float64: C's pow(double, double) then a truncating cast
            work = np.result_type(np.float32, *(d for d in (x.dtype, y.dtype) if d.kind == "f"))
            if x.dtype.kind != "f":
                work = np.dtype(np.float64)
            out = np.power(x.astype(work, copy=False), y.astype(work, copy=False))
    return [_arr(out).astype(x.dtype, copy=False)]


@register("onnx.Mod", _bcast(), arity=(2, 2), canonicalize=_defaults({"fmod": 0}, _one_of("fmod", (0, 1))))
def _mod(ins: A, attrs: D) -> list[np.ndarray]:
    """fmod=0: sign of the divisor (Python %, floor); fmod=1: sign of the dividend (C fmod).

    Integer x mod 0 is 0 (numpy's answer; ONNX leaves it undefined); float x mod 0 is NaN.
    """
    a, b = _arr(ins[0]), _arr(ins[1])
    fn = np.fmod if int(attrs.get("fmod", 0)) else np.remainder
    with np.errstate(all="ignore"):
        out = fn(_work(a), _work(b))
    return [_arr(out).astype(a.dtype, copy=False)]


def _variadic(name: str, fn: Fn, mean: bool = False) -> None:
    def run(ins: A, attrs: D) -> list[np.ndarray]:
        xs = [_arr(x) for x in ins if x is not None]
        dtype = xs[0].dtype
        with np.errstate(all="ignore"):
            out = reduce(fn, [_work(x) for x in xs])
            if mean:
                out = out / len(xs)
        return [_arr(out).astype(dtype, copy=False)]

    register(f"onnx.{name}", _bcast(), arity=(1, 99))(run)


_variadic("Max", np.maximum)
_variadic("Min", np.minimum)
_variadic("Sum", np.add)
_variadic("Mean", np.add, mean=True)


# -- comparisons and logic --------------------------------------------------------------------
def _compare(name: str, fn: Fn) -> None:
    register(f"onnx.{name}", _bcast(out=DType.BOOL), arity=(2, 2))(
        lambda ins, attrs: [_arr(fn(_arr(ins[0]), _arr(ins[1])))])


_compare("Equal", np.equal)
_compare("Greater", np.greater)
_compare("GreaterOrEqual", np.greater_equal)
_compare("Less", np.less)
_compare("LessOrEqual", np.less_equal)
_compare("And", np.logical_and)
_compare("Or", np.logical_or)
_compare("Xor", np.logical_xor)


@register("onnx.Not", same_type, arity=(1, 1))
def _not(ins: A, attrs: D) -> list[np.ndarray]:
    return [np.logical_not(ins[0])]


# -- bitwise ----------------------------------------------------------------------------------
_binary("BitwiseAnd", np.bitwise_and)
_binary("BitwiseOr", np.bitwise_or)
_binary("BitwiseXor", np.bitwise_xor)


@register("onnx.BitwiseNot", same_type, arity=(1, 1))
def _bitwise_not(ins: A, attrs: D) -> list[np.ndarray]:
    return [np.invert(_arr(ins[0]))]


@register("onnx.BitShift", _bcast(), arity=(2, 2),
          canonicalize=_defaults({}, _one_of("direction", ("LEFT", "RIGHT"))))
def _bitshift(ins: A, attrs: D) -> list[np.ndarray]:
    """Shift counts outside [0, bits) give what the sign fill alone leaves (BitShift-28 spells this
    out; BitShift-11 takes unsigned types only, where it is 0): defined here rather than left to C."""
    x, y = _arr(ins[0]), _arr(ins[1])
    bits = x.dtype.itemsize * 8
    ok = (y >= 0) & (y < bits)
    s = np.where(ok, y, 0).astype(x.dtype, copy=False)
    if attrs["direction"] == "LEFT":
        out = np.where(ok, np.left_shift(x, s), 0)
    else:
        fill = np.where(x < 0, -1, 0) if x.dtype.kind == "i" else 0
        out = np.where(ok, np.right_shift(x, s), fill)
    return [_arr(out).astype(x.dtype, copy=False)]


# -- unary math and activations ---------------------------------------------------------------
def _unary(name: str, fn: Fn, defaults: D | None = None, check: Callable[[D], None] | None = None,
           predicate: bool = False) -> None:
    """A one-input op; ``fn(x, attrs)`` sees float16 as float32 and every attribute (defaults filled).
    The output has the input's type, or bool for a ``predicate``."""
    base = dict(defaults or {})

    def run(ins: A, attrs: D) -> list[np.ndarray]:
        x = _arr(ins[0])
        with np.errstate(all="ignore"):  # log(0), sqrt(-1), exp overflow: inf/nan are the answers
            out = fn(_work(x), {**base, **attrs})
        return [_arr(out).astype(np.bool_ if predicate else x.dtype, copy=False)]

    canon = _defaults(base, check) if base else None
    register(f"onnx.{name}", _bool_like if predicate else same_type, arity=(1, 1), canonicalize=canon)(run)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))  # never overflows: exp of a non-positive number
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0, x)  # log(1 + exp(x)) without overflow for large x


_SQRT_PI = math.sqrt(math.pi)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf in float64 to ~1e-15 relative, vectorised (numpy has none, scipy is not a dependency).

    |x| < 2: the all-positive series erf(t) = 2t/sqrt(pi) exp(-t^2) sum (2t^2)^n / (2n+1)!!, which
    does not cancel. 2 <= |x| < 6: the continued fraction of erfc, evaluated from a fixed depth.
    Beyond 6, erf is 1 to double precision.
    """
    a = np.abs(x.astype(np.float64))
    out = a.copy()  # NaN stays NaN
    small = a < 2.0
    t = a[small]
    t2, term, total = 2 * t * t, np.ones_like(t), np.ones_like(t)
    for n in range(1, 40):  # in place: no temporaries on full-size maps
        term *= t2
        term *= 1 / (2 * n + 1)
        total += term
    out[small] = 2 / _SQRT_PI * t * np.exp(-t * t) * total
    mid = (a >= 2.0) & (a < 6.0)
    u = a[mid]
    f = u.copy()
    for k in range(50, 0, -1):  # erfc(u) = exp(-u^2)/sqrt(pi) / (u + (1/2)/(u + 1/(u + (3/2)/(u + ...))))
        np.divide(k / 2, f, out=f)
        f += u
    out[mid] = 1 - np.exp(-u * u) / (_SQRT_PI * f)
    out[a >= 6.0] = 1.0
    return np.copysign(out, x)


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def _gelu(x: np.ndarray, a: D) -> np.ndarray:
    if a["approximate"] == "tanh":
        return 0.5 * x * (1 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _shrink(x: np.ndarray, a: D) -> np.ndarray:
    lambd, bias = a["lambd"], a["bias"]
    if x.dtype.kind in "iu":
        # integer inputs: compare against the float threshold, shift in float64, cast back
        xf = x.astype(np.float64)
        return np.where(xf < -lambd, xf + bias, np.where(xf > lambd, xf - bias, 0))
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))


_SELU_ALPHA, _SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875  # float32 values

_unary("Relu", lambda x, a: np.maximum(x, 0))
_unary("LeakyRelu", lambda x, a: np.where(x < 0, a["alpha"] * x, x), {"alpha": _f32(0.01)})
_unary("Elu", lambda x, a: np.where(x < 0, a["alpha"] * np.expm1(np.minimum(x, 0)), x), {"alpha": 1.0})
_unary("Selu", lambda x, a: a["gamma"] * np.where(x <= 0, a["alpha"] * np.expm1(np.minimum(x, 0)), x),
       {"alpha": _SELU_ALPHA, "gamma": _SELU_GAMMA})
_unary("Celu", lambda x, a: np.maximum(x, 0) + np.minimum(0, a["alpha"] * np.expm1(x / a["alpha"])), {"alpha": 1.0})
_unary("Sigmoid", lambda x, a: _sigmoid(x))
_unary("HardSigmoid", lambda x, a: np.clip(a["alpha"] * x + a["beta"], 0, 1), {"alpha": _f32(0.2), "beta": 0.5})
_unary("HardSwish", lambda x, a: x * np.clip(x / 6 + 0.5, 0, 1))
_unary("Softplus", lambda x, a: _softplus(x))
_unary("Softsign", lambda x, a: x / (1 + np.abs(x)))
_unary("Tanh", lambda x, a: np.tanh(x))
_unary("Mish", lambda x, a: x * np.tanh(_softplus(x)))
_unary("ThresholdedRelu", lambda x, a: np.where(x > a["alpha"], x, 0), {"alpha": 1.0})
_unary("Shrink", _shrink, {"bias": 0.0, "lambd": 0.5})
_unary("Erf", lambda x, a: _erf(x))
_unary("Gelu", _gelu, {"approximate": "none"}, _one_of("approximate", ("none", "tanh")))

_unary("Exp", lambda x, a: np.exp(x))
_unary("Log", lambda x, a: np.log(x))
_unary("Sqrt", lambda x, a: np.sqrt(x))
_unary("Reciprocal", lambda x, a: np.reciprocal(x))
_unary("Neg", lambda x, a: np.negative(x))
_unary("Abs", lambda x, a: np.abs(x))
_unary("Floor", lambda x, a: np.floor(x))
_unary("Ceil", lambda x, a: np.ceil(x))
_unary("Round", lambda x, a: np.round(x))  # numpy rounds halves to even, as ONNX does
_unary("Sign", lambda x, a: np.sign(x))
_unary("Sin", lambda x, a: np.sin(x))
_unary("Cos", lambda x, a: np.cos(x))
_unary("Tan", lambda x, a: np.tan(x))
_unary("Asin", lambda x, a: np.arcsin(x))
_unary("Acos", lambda x, a: np.arccos(x))
_unary("Atan", lambda x, a: np.arctan(x))
_unary("Sinh", lambda x, a: np.sinh(x))
_unary("Cosh", lambda x, a: np.cosh(x))
_unary("Asinh", lambda x, a: np.arcsinh(x))
_unary("Acosh", lambda x, a: np.arccosh(x))
_unary("Atanh", lambda x, a: np.arctanh(x))

_unary("IsNaN", lambda x, a: np.isnan(x), predicate=True)
_unary("IsInf", lambda x, a: np.isinf(x) & (((x > 0) & bool(a["detect_positive"]))
                                            | ((x < 0) & bool(a["detect_negative"]))),
       {"detect_negative": 1, "detect_positive": 1}, predicate=True)


@register("onnx.PRelu", same_type, arity=(2, 2))
def _prelu(ins: A, attrs: D) -> list[np.ndarray]:
    """slope broadcasts to x (unidirectionally): the output has x's shape and type."""
    x, slope = _arr(ins[0]), _arr(ins[1])
    with np.errstate(all="ignore"):
        out = np.where(x < 0, _work(x) * _work(slope), x)
    return [_arr(out).astype(x.dtype, copy=False)]


# -- selection and clamping -------------------------------------------------------------------
@register("onnx.Where", _bcast(dtype_of=1), arity=(3, 3))
def _where(ins: A, attrs: D) -> list[np.ndarray]:
    x = _arr(ins[1])
    return [np.where(_arr(ins[0]).astype(bool, copy=False), x, ins[2]).astype(x.dtype, copy=False)]


def _bound(v: Any) -> np.ndarray | None:
    if v is None:
        return None
    b = _arr(v)
    return b.reshape(()) if b.size == 1 else b  # a [1]-shaped bound must not add a dimension


@register("onnx.Clip", same_type, arity=(1, 3))
def _clip(ins: A, attrs: D) -> list[np.ndarray]:
    """Min(max, Max(x, min)): a min above max yields max everywhere, as ONNX specifies."""
    x = _arr(ins[0])
    lo = _bound(ins[1] if len(ins) > 1 else None)
    hi = _bound(ins[2] if len(ins) > 2 else None)
    out = x
    if lo is not None:
        out = np.maximum(out, lo.astype(x.dtype, copy=False))
    if hi is not None:
        out = np.minimum(out, hi.astype(x.dtype, copy=False))
    return [_arr(out).astype(x.dtype, copy=False)]


# -- casts ------------------------------------------------------------------------------------
def _round_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round to the nearest bfloat16 (ties to even), kept in float32: how host arrays carry bf16."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    bits = f.view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(f), f, rounded)


def _cast_to(x: np.ndarray, to: DType) -> np.ndarray:
    # float -> int of an in-range value truncates toward zero (numpy and C agree); out of range
    # is undefined in ONNX, so numpy's answer (and its warning) is as good as any, silenced
    with np.errstate(all="ignore"):
        if to is DType.BF16:
            return _round_to_bf16(x)
        return x.astype(to.numpy, copy=False)


def _cast_check(attrs: D) -> None:
    DType.from_onnx(int(attrs["to"]))  # TypeError naming the element type spc does not take


def _cast_infer(ins: list[Value | None], attrs: D) -> list[TensorType]:
    assert ins[0] is not None
    return [ins[0].type.with_dtype(DType.from_onnx(int(attrs["to"])))]


@register("onnx.Cast", _cast_infer, arity=(1, 1), canonicalize=_defaults({}, _cast_check))
def _cast(ins: A, attrs: D) -> list[np.ndarray]:
    """saturate (and Cast-24's round_mode) only concern float8 targets, which spc refuses."""
    return [_cast_to(_arr(ins[0]), DType.from_onnx(int(attrs["to"])))]


def _castlike_infer(ins: list[Value | None], attrs: D) -> list[TensorType]:
    assert ins[0] is not None and ins[1] is not None
    return [ins[0].type.with_dtype(ins[1].type.dtype)]


@register("onnx.CastLike", _castlike_infer, arity=(2, 2))
def _castlike(ins: A, attrs: D) -> list[np.ndarray]:
    return [_cast_to(_arr(ins[0]), DType.from_numpy(_arr(ins[1]).dtype))]


# -- identities -------------------------------------------------------------------------------
@register("onnx.Identity", same_type, arity=(1, 1))
def _identity(ins: A, attrs: D) -> list[np.ndarray]:
    return [_arr(ins[0])]


def _dropout_canon(attrs: D, n_inputs: int, n_outputs: int, since: int) -> D:
    # canonicalize sees how many inputs are wired, not their values, so it cannot tell a constant
    # False training_mode from a live one: any wired training_mode is refused (eval-mode exports
    # never wire it)
    if n_inputs >= 3:
        raise ValueError("Dropout with a training_mode input is not supported: training-mode dropout is random "
                         "and spc compiles inference graphs; export the model in eval mode")
    return attrs


# the mask output's type is left to ONNX inference: a node built by a pass has the data output only
@register("onnx.Dropout", same_type, arity=(1, 3), canonicalize=_dropout_canon)
def _dropout(ins: A, attrs: D) -> list[np.ndarray]:
    """Inference mode: output = input; the optional mask output is all True."""
    x = _arr(ins[0])
    if len(ins) > 2 and ins[2] is not None and bool(_arr(ins[2])):
        raise ValueError("Dropout in training mode is random; spc evaluates inference graphs only")
    return [x, np.ones(x.shape, dtype=np.bool_)]
