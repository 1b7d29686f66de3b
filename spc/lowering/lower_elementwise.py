"""Element-wise ONNX ops lowered one by one: unary ops and activations, Identity, Dropout, Cast,
binary and variadic ops, Pow, Clip, PRelu, Where, and spc.FakeQuant.

They stay in the form of their operands: in the conv form ``[1, 1, N*H*W, C]`` right after a
convolution (a per-channel constant becomes a ``[1, 1, 1, C]`` operand), in the plain form
elsewhere, where ttnn broadcasts numpy-style. An op ttnn has no call for is spelled out as a chain
of calls.
"""

from __future__ import annotations

import math

import numpy as np

from spc.ir.graph import Node
from spc.ir.types import DType
from spc.lowering.emitter import Emitter
from spc.lowering.operands import Ins, alias, elementwise_check, operands, out_layout, scalar_of
from spc.lowering.registry import lowers
from spc.ttnn.formats import DataFormat
from spc.ttnn.layout import Form
from spc.ttnn.memory import DRAM_INTERLEAVED


# -- unary ops ----------------------------------------------------------------------------------
def _unary(em: Emitter, n: Node, ins: Ins, op: str, **args: object) -> str:
    x = n.inputs[0]
    name = ins[0]
    assert x is not None and name is not None
    form = em.form(name)
    t = em.tiled(name, n.name)
    return em.emit(op, [t], n.output.name, out_layout(form, x if form is Form.NHWC else n.output), n.name, **args)


_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log", "Sqrt": "sqrt",
          "Reciprocal": "reciprocal", "Neg": "neg", "Abs": "abs", "Floor": "floor", "Ceil": "ceil", "Round": "round",
          "Sign": "sign", "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan",
          "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh", "Erf": "erf",
          "Softsign": "softsign", "Softplus": "softplus", "HardSwish": "hardswish", "Mish": "mish", "IsNaN": "isnan",
          "Not": "logical_not"}


def _register_unary(onnx: str, ttnn: str) -> None:
    lowers(f"onnx.{onnx}", check=elementwise_check)(lambda em, n, ins: _unary(em, n, ins, f"ttnn.{ttnn}"))


for _onnx, _ttnn in _UNARY.items():
    _register_unary(_onnx, _ttnn)


@lowers("onnx.IsInf", check=lambda n: None if (n.attrs.get("detect_negative", 1) and n.attrs.get("detect_positive", 1))
        else "ttnn.isinf detects both signs")
def _isinf(em: Emitter, n: Node, ins: Ins) -> str:
    return _unary(em, n, ins, "ttnn.isinf")


@lowers("onnx.Elu", check=elementwise_check)
def _elu(em: Emitter, n: Node, ins: Ins) -> str:
    return _unary(em, n, ins, "ttnn.elu", alpha=float(n.attrs.get("alpha", 1.0)))


@lowers("onnx.Celu", check=elementwise_check)
def _celu(em: Emitter, n: Node, ins: Ins) -> str:
    return _unary(em, n, ins, "ttnn.celu", alpha=float(n.attrs.get("alpha", 1.0)))


@lowers("onnx.Selu", check=elementwise_check)
def _selu(em: Emitter, n: Node, ins: Ins) -> str:
    return _unary(em, n, ins, "ttnn.selu", scale=float(n.attrs.get("gamma", 1.0507009873554805)),
                  alpha=float(n.attrs.get("alpha", 1.6732631921768188)))


@lowers("onnx.LeakyRelu", check=elementwise_check)
def _leaky_relu(em: Emitter, n: Node, ins: Ins) -> str:
    return _unary(em, n, ins, "ttnn.leaky_relu", negative_slope=float(n.attrs.get("alpha", 0.01)))


def _chain(em: Emitter, n: Node, ins: Ins, steps: list[tuple[str, list[str | float], dict]]) -> str:
    """Calls in order; ``"x"`` is the node's input, ``"$k"`` the k-th step's result; the last step
    takes the node's output name."""
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    form = em.form(ins[0])
    lay = out_layout(form, x if form is Form.NHWC else n.output)
    made: list[str] = []
    for i, (op, args, kwargs) in enumerate(steps):
        tensors = [em.tiled(ins[0], n.name) if a == "x" else made[int(a[1:])] if isinstance(a, str) else a
                   for a in args]
        names = [t for t in tensors if isinstance(t, str)]
        scalar = [t for t in tensors if not isinstance(t, str)]
        extra = {"scalar": scalar[0]} if scalar else {}
        out = n.output.name if i == len(steps) - 1 else f"{n.output.name}/{op.removeprefix('ttnn.')}{i}"
        made.append(em.emit(op, names, out, lay, n.name, **extra, **kwargs))
    return made[-1]


@lowers("onnx.HardSigmoid", check=elementwise_check)
def _hard_sigmoid(em: Emitter, n: Node, ins: Ins) -> str:
    """max(0, min(1, alpha * x + beta)): ttnn.hardsigmoid where alpha is 1/6 and beta 0.5 (as
    torch.onnx writes nn.Hardsigmoid), else spelled out (ONNX's default alpha is 0.2)."""
    a, b = float(n.attrs.get("alpha", 0.2)), float(n.attrs.get("beta", 0.5))
    if np.float32(a) == np.float32(1 / 6) and b == 0.5:
        return _unary(em, n, ins, "ttnn.hardsigmoid")
    return _chain(em, n, ins, [("ttnn.multiply", ["x", a], {}), ("ttnn.add", ["$0", b], {}),
                               ("ttnn.clamp", ["$1"], {"min": 0.0, "max": 1.0})])


@lowers("onnx.ThresholdedRelu", check=elementwise_check)
def _thresholded_relu(em: Emitter, n: Node, ins: Ins) -> str:
    return _chain(em, n, ins, [("ttnn.gt", ["x", float(n.attrs.get("alpha", 1.0))], {}),
                               ("ttnn.multiply", ["x", "$0"], {})])


@lowers("onnx.Gelu", check=elementwise_check)
def _gelu(em: Emitter, n: Node, ins: Ins) -> str:
    """0.5 x (1 + erf(x / sqrt 2)), or the tanh approximation, spelled out: what ttnn.gelu's
    variants compute is not documented for 0.81.1."""
    if n.attrs.get("approximate", "none") == "tanh":
        k = math.sqrt(2 / math.pi)
        return _chain(em, n, ins, [("ttnn.multiply", ["x", "x"], {}), ("ttnn.multiply", ["$0", "x"], {}),
                                   ("ttnn.multiply", ["$1", 0.044715], {}), ("ttnn.add", ["$2", "x"], {}),
                                   ("ttnn.multiply", ["$3", k], {}), ("ttnn.tanh", ["$4"], {}),
                                   ("ttnn.add", ["$5", 1.0], {}), ("ttnn.multiply", ["$6", "x"], {}),
                                   ("ttnn.multiply", ["$7", 0.5], {})])
    return _chain(em, n, ins, [("ttnn.multiply", ["x", 1 / math.sqrt(2)], {}), ("ttnn.erf", ["$0"], {}),
                               ("ttnn.add", ["$1", 1.0], {}), ("ttnn.multiply", ["$2", "x"], {}),
                               ("ttnn.multiply", ["$3", 0.5], {})])



for _name in ("onnx.Identity", "onnx.Dropout"):
    lowers(_name, check=lambda n: None if len(n.outputs) == 1 else "the mask output stays on the host")(alias)


def _cast_check(n: Node) -> str | None:
    src, dst = n.inputs[0], n.outputs[0]
    assert src is not None
    if dst.type.dtype.is_float or (dst.type.dtype is DType.BOOL and src.type.dtype.is_float):
        return None
    return f"a cast to {dst.type.dtype.value} stays on the host"


@lowers("onnx.Cast", check=_cast_check)
def _cast(em: Emitter, n: Node, ins: Ins) -> str:
    """Floats and 0/1 booleans share the device's storage format: a cast between them is free,
    except float -> bool (x != 0)."""
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    if n.output.type.dtype is DType.BOOL and x.type.dtype.is_float:
        return _chain(em, n, ins, [("ttnn.ne", ["x", 0.0], {})])
    return ins[0]


# -- binary and variadic element-wise ops -------------------------------------------------------
# ONNX op -> (ttnn op, ttnn op with the operands swapped: for a constant first operand)
_BINARY = {"Add": ("add", "add"), "Sub": ("subtract", "rsub"), "Mul": ("multiply", "multiply"),
           "Div": ("divide", None), "Max": ("maximum", "maximum"), "Min": ("minimum", "minimum"),
           "Equal": ("eq", "eq"), "Greater": ("gt", "lt"), "GreaterOrEqual": ("ge", "le"), "Less": ("lt", "gt"),
           "LessOrEqual": ("le", "ge"), "And": ("logical_and", "logical_and"), "Or": ("logical_or", "logical_or"),
           "Xor": ("logical_xor", "logical_xor")}


def _binary_call(em: Emitter, n: Node, form: Form, a: str | float, b: str | float, op: str, swapped: str | None,
                 out: str) -> str:
    lay = out_layout(form, n.output)
    if isinstance(a, str) and isinstance(b, str):
        return em.emit(f"ttnn.{op}", [a, b], out, lay, n.name)
    if isinstance(a, str):
        assert not isinstance(b, str)
        if op == "divide":  # x / c as x * (1 / c): ttnn.divide takes tensors only
            return em.emit("ttnn.multiply", [a], out, lay, n.name, scalar=1.0 / b if b else math.inf)
        return em.emit(f"ttnn.{op}", [a], out, lay, n.name, scalar=b)
    assert isinstance(b, str)
    if swapped is None:  # c / x = c * (1 / x)
        r = em.emit("ttnn.reciprocal", [b], out + "/reciprocal", lay, n.name)
        return em.emit("ttnn.multiply", [r], out, lay, n.name, scalar=a)
    return em.emit(f"ttnn.{swapped}", [b], out, lay, n.name, scalar=a)


def _binary(em: Emitter, n: Node, ins: Ins, onnx: str) -> str:
    op, swapped = _BINARY[onnx]
    form, (a, b) = operands(em, n, ins)
    return _binary_call(em, n, form, a, b, op, swapped, n.output.name)


def _register_binary(onnx: str) -> None:
    lowers(f"onnx.{onnx}", check=elementwise_check)(lambda em, n, ins: _binary(em, n, ins, onnx))


for _onnx in _BINARY:
    if _onnx not in ("Max", "Min"):
        _register_binary(_onnx)


def _variadic(em: Emitter, n: Node, ins: Ins, op: str, mean: bool = False) -> str:
    form, xs = operands(em, n, ins)
    if len(xs) == 1 and not mean:
        assert isinstance(xs[0], str)
        return em.emit("ttnn.reshape", [xs[0]], n.output.name, out_layout(form, n.output), n.name,
                       shape=out_layout(form, n.output).device_shape)
    acc = xs[0]
    for i, x in enumerate(xs[1:], 1):
        last = i == len(xs) - 1 and not mean
        acc = _binary_call(em, n, form, acc, x, op, op, n.output.name if last else f"{n.output.name}/acc{i}")
    if mean:
        assert isinstance(acc, str)
        acc = em.emit("ttnn.multiply", [acc], n.output.name, out_layout(form, n.output), n.name, scalar=1 / len(xs))
    assert isinstance(acc, str)
    return acc


lowers("onnx.Max", check=elementwise_check)(lambda em, n, ins: _variadic(em, n, ins, "maximum"))
lowers("onnx.Min", check=elementwise_check)(lambda em, n, ins: _variadic(em, n, ins, "minimum"))
lowers("onnx.Sum", check=elementwise_check)(lambda em, n, ins: _variadic(em, n, ins, "add"))
lowers("onnx.Mean", check=elementwise_check)(lambda em, n, ins: _variadic(em, n, ins, "add", mean=True))


def _pow_check(n: Node) -> str | None:
    e = scalar_of(n.input(1))
    if e is None:
        return "ttnn.pow takes a constant exponent"
    if e not in (0.5, -0.5) and e != int(e):
        return f"exponent {e}: ttnn.pow takes integer exponents"
    return elementwise_check(n)


@lowers("onnx.Pow", check=_pow_check)
def _pow(em: Emitter, n: Node, ins: Ins) -> str:
    e = scalar_of(n.input(1))
    assert e is not None
    if e == 2:
        return _chain(em, n, ins, [("ttnn.multiply", ["x", "x"], {})])
    if e in (0.5, -0.5):
        return _chain(em, n, ins, [("ttnn.sqrt" if e > 0 else "ttnn.rsqrt", ["x"], {})])
    return _chain(em, n, ins, [("ttnn.pow", ["x"], {"exponent": int(e)})])


def _clip_check(n: Node) -> str | None:
    for v in n.inputs[1:]:
        if v is not None and scalar_of(v) is None:
            return "ttnn.clamp takes constant bounds"
    return elementwise_check(n)


@lowers("onnx.Clip", check=_clip_check)
def _clip(em: Emitter, n: Node, ins: Ins) -> str:
    lo, hi = scalar_of(n.input(1)), scalar_of(n.input(2))
    bounds = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
    if not bounds:
        return alias(em, n, ins)
    return _chain(em, n, ins, [("ttnn.clamp", ["x"], bounds)])


@lowers("spc.FakeQuant", check=elementwise_check)
def _fake_quant(em: Emitter, n: Node, ins: Ins) -> str:
    """x * (1 / s) (ttnn.divide takes tensors only), rounded, clamped, times the unit (s, or 1 for
    the integers a convolution reads). The steps before the last are kept in float32: bf16 holds
    x / s to half a step from 64 steps up, so rounding it there would round twice."""
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    s, lo, hi = float(n.attrs["scale"]), float(n.attrs["lo"]), float(n.attrs["hi"])
    form = em.form(ins[0])
    lay, base = out_layout(form, x if form is Form.NHWC else n.output), n.output.name
    t = em.tiled(ins[0], n.name)
    store = em.dtypes.get(t, DataFormat.BFLOAT16)  # the block's own format, if another, by a typecast after
    f32 = DataFormat.FLOAT32
    # in DRAM: float32 steps take twice the bytes of x, which need not fit beside it in L1
    t = em.emit("ttnn.to_memory_config", [t], base + "/dram", lay, n.name, memory_config=DRAM_INTERLEAVED)
    q = em.emit("ttnn.multiply", [t], base + "/steps", lay, n.name, store=f32, scalar=1.0 / s)
    q = em.emit("ttnn.round", [q], base + "/round", lay, n.name, store=f32)
    q = em.emit("ttnn.clamp", [q], base + "/clamp", lay, n.name, store=f32, min=lo, max=hi)
    unit = float(n.attrs["unit"])
    if unit == 1.0:  # the integers, for a convolution: exact in bf16 up to 256
        return em.emit("ttnn.typecast", [q], base, lay, n.name, store=DataFormat.BFLOAT16, dtype=DataFormat.BFLOAT16)
    return em.emit("ttnn.multiply", [q], base, lay, n.name, store=store, scalar=unit)


@lowers("onnx.PRelu", check=elementwise_check)
def _prelu(em: Emitter, n: Node, ins: Ins) -> str:
    """relu(x) + slope * min(x, 0)."""
    form, (x, slope) = operands(em, n, ins)
    assert isinstance(x, str)
    lay, base = out_layout(form, n.output), n.output.name
    pos = em.emit("ttnn.relu", [x], base + "/pos", lay, n.name)
    neg = em.emit("ttnn.minimum", [x], base + "/neg", lay, n.name, scalar=0.0)
    neg = _binary_call(em, n, form, neg, slope, "multiply", "multiply", base + "/scaled")
    return em.emit("ttnn.add", [pos, neg], base, lay, n.name)


def _where_check(n: Node) -> str | None:
    cond, *branches = n.inputs
    if cond is not None and cond.is_const and any(v is not None and v.is_const for v in branches):
        return "a constant condition with a constant branch is a constant: left to the host"
    out = n.outputs[0].type.shape
    for v in n.inputs:
        if v is not None and not v.is_const and v.type.shape != out:
            return "ttnn.where takes operands of the result's shape"
    return elementwise_check(n)


@lowers("onnx.Where", check=_where_check)
def _where(em: Emitter, n: Node, ins: Ins) -> str:
    form, (c, a, b) = operands(em, n, ins)
    if not isinstance(c, str):  # a constant condition on a live operand: one branch or the other
        pick = a if c else b
        assert isinstance(pick, str)
        return pick
    tensors = [t for t in (a, b) if isinstance(t, str)]
    # a scalar branch is passed as a number; the tensors are the inputs after the condition, in order
    args = {k: v for k, v in (("true_value", a), ("false_value", b)) if not isinstance(v, str)}
    return em.emit("ttnn.where", [c, *tensors], n.output.name, out_layout(form, n.output), n.name, **args)
