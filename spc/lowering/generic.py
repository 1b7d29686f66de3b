"""Every ONNX op ttnn can compute, lowered on its own: what runs when no fusion recognised a region.

Each lowering picks the form it computes in (ttnn/layout.py). Element-wise ops stay in the
form of their operands: in the conv form ``[1, 1, N*H*W, C]`` right after a convolution (a
per-channel constant becomes a ``[1, 1, 1, C]`` operand), in the plain form elsewhere, where
ttnn broadcasts numpy-style. Reductions and softmax over the channel axis of an NCHW map are
the last axis of the conv form; over any other axis they run in the plain form. Data movement
(transpose, slice, concat, pad, depth-to-space) runs in the plain form, in tiles (pad in row
major, as ttnn.pad requires for front padding: measured on the mock p150).

Booleans are held as 0/1 in the float storage format, as ttnn's comparisons return them; integer
tensors stay on the host. Scalar constants are passed to ttnn as numbers, others go on the device
once (Emitter.constant). ``check`` functions say why a node cannot be lowered; the node then runs
on the host (partition-host-device), never an error.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from spc.ir.graph import Node, Value
from spc.ir.ops.infer import axes_from, norm_axis
from spc.ir.types import DType
from spc.lowering.emitter import Emitter
from spc.lowering.fused import pool2d_check
from spc.lowering.registry import lowers
from spc.ttnn.configs import PageLayout
from spc.ttnn.formats import DataFormat
from spc.ttnn.layout import DeviceLayout, Form, Layout, PlainLayout
from spc.ttnn.memory import DRAM_INTERLEAVED

Ins = list[str | None]


def _shape(v: Value) -> tuple[int, ...]:
    return tuple(int(d) for d in v.type.static_shape)


def _plain(v: Value) -> PlainLayout:
    return PlainLayout(_shape(v))


def _scalar(v: Value | None) -> float | None:
    """The value of a one-element constant, as a Python number."""
    if v is None or not v.is_const or v.type.numel != 1:
        return None
    x = np.asarray(v.data).reshape(-1)[0]
    return bool(x) if x.dtype == np.bool_ else float(x)


def _live(n: Node, ins: Ins) -> list[tuple[Value, str]]:
    return [(v, name) for v, name in zip(n.inputs, ins) if v is not None and name is not None]


def _out_layout(form: Form, v: Value) -> Layout:
    return DeviceLayout.of(_shape(v)) if form is Form.NHWC else _plain(v)


# -- operands of element-wise ops ---------------------------------------------------------------
def _nhwc_operand_ok(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    """Whether an operand of ``shape`` broadcasts to ``out`` in the conv form: the same map, the
    map without its channels ([1,1,NHW,1]) or a per-channel vector ([1,1,1,C])."""
    if shape == out:
        return True
    if len(out) != 4:
        return False
    s = (1,) * (4 - len(shape)) + shape
    return ((s[0], s[2], s[3]) == (out[0], out[2], out[3]) and s[1] == 1) or s[0] == s[2] == s[3] == 1


def _form(em: Emitter, n: Node, ins: Ins) -> Form:
    """nhwc when every non-constant operand is held in the conv form and broadcasts there."""
    out = _shape(n.outputs[0])
    live = _live(n, ins)
    if live and DeviceLayout.fits(out) and all(em.form(name) is Form.NHWC and _nhwc_operand_ok(_shape(v), out)
                                                for v, name in live):
        return Form.NHWC
    return Form.PLAIN


def _const_operand(em: Emitter, v: Value, form: Form, out: tuple[int, ...], source: str) -> str:
    data = np.asarray(v.data, np.float32)
    if form is Form.PLAIN:
        return em.constant(v, data, [1] * (len(out) - data.ndim) + list(data.shape), source)
    if len(out) != 4:  # a 3-D or 2-D map in the conv form is [1, 1, N*H*W, 1]
        full = np.broadcast_to(data, out)
        return em.constant(v, full, DeviceLayout.of(out).device_shape, source)
    d4 = data.reshape((1,) * (4 - data.ndim) + data.shape)
    if d4.shape[0] == d4.shape[2] == d4.shape[3] == 1:
        return em.constant(v, d4, [1, 1, 1, d4.shape[1]], source)
    full = np.broadcast_to(d4, (out[0], d4.shape[1], out[2], out[3]))
    return em.constant(v, full.transpose(0, 2, 3, 1), [1, 1, out[0] * out[2] * out[3], d4.shape[1]], source)


def _tensor_operand(em: Emitter, v: Value, name: str, form: Form, out: tuple[int, ...], source: str) -> str:
    if form is Form.NHWC:
        return em.tiled(name, source)
    t = em.tiled(em.to_plain(name, v, source), source)
    shape = _shape(v)
    if len(shape) < len(out):  # ttnn broadcasts between operands of one rank
        full = (1,) * (len(out) - len(shape)) + shape
        ranked = f"{name}/rank{len(out)}"
        if ranked in em.layouts:  # another node already brought this operand to that rank
            return ranked
        t = em.emit("ttnn.reshape", [t], ranked, PlainLayout(full), source, shape=list(full))
    return t


def operands(em: Emitter, n: Node, ins: Ins, scalars: bool = True) -> tuple[Form, list[str | float]]:
    """The form to compute in and each input as a device tensor or, for a one-element constant,
    a number (when ``scalars``)."""
    form = _form(em, n, ins)
    out = _shape(n.outputs[0])
    got: list[str | float] = []
    for v, name in zip(n.inputs, ins):
        if v is None:
            continue
        s = _scalar(v) if scalars else None
        if s is not None:
            got.append(s)
        elif name is None:
            got.append(_const_operand(em, v, form, out, n.name))
        else:
            got.append(_tensor_operand(em, v, name, form, out, n.name))
    return form, got


def _elementwise_check(n: Node) -> str | None:
    live = [v for v in n.inputs if v is not None and not v.is_const]
    if not live:
        return "every operand is a constant (fold-constants leaves this to the host)"
    if any(v.type.rank > 8 for v in live) or n.outputs[0].type.rank > 8:
        return "ttnn tensors have at most 8 dimensions"
    return None


# -- unary ops ----------------------------------------------------------------------------------
def _unary(em: Emitter, n: Node, ins: Ins, op: str, **args: object) -> str:
    x = n.inputs[0]
    name = ins[0]
    assert x is not None and name is not None
    form = em.form(name)
    t = em.tiled(name, n.name)
    return em.emit(op, [t], n.output.name, _out_layout(form, x if form is Form.NHWC else n.output), n.name, **args)


_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log", "Sqrt": "sqrt",
          "Reciprocal": "reciprocal", "Neg": "neg", "Abs": "abs", "Floor": "floor", "Ceil": "ceil", "Round": "round",
          "Sign": "sign", "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan",
          "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh", "Erf": "erf",
          "Softsign": "softsign", "Softplus": "softplus", "HardSwish": "hardswish", "Mish": "mish", "IsNaN": "isnan",
          "Not": "logical_not"}


def _register_unary(onnx: str, ttnn: str) -> None:
    lowers(f"onnx.{onnx}", check=_elementwise_check)(lambda em, n, ins: _unary(em, n, ins, f"ttnn.{ttnn}"))


for _onnx, _ttnn in _UNARY.items():
    _register_unary(_onnx, _ttnn)


@lowers("onnx.IsInf", check=lambda n: None if (n.attrs.get("detect_negative", 1) and n.attrs.get("detect_positive", 1))
        else "ttnn.isinf detects both signs")
def _isinf(em: Emitter, n: Node, ins: Ins) -> str:
    return _unary(em, n, ins, "ttnn.isinf")


@lowers("onnx.Elu", check=_elementwise_check)
def _elu(em: Emitter, n: Node, ins: Ins) -> str:
    return _unary(em, n, ins, "ttnn.elu", alpha=float(n.attrs.get("alpha", 1.0)))


@lowers("onnx.Celu", check=_elementwise_check)
def _celu(em: Emitter, n: Node, ins: Ins) -> str:
    return _unary(em, n, ins, "ttnn.celu", alpha=float(n.attrs.get("alpha", 1.0)))


@lowers("onnx.Selu", check=_elementwise_check)
def _selu(em: Emitter, n: Node, ins: Ins) -> str:
    return _unary(em, n, ins, "ttnn.selu", scale=float(n.attrs.get("gamma", 1.0507009873554805)),
                  alpha=float(n.attrs.get("alpha", 1.6732631921768188)))


@lowers("onnx.LeakyRelu", check=_elementwise_check)
def _leaky_relu(em: Emitter, n: Node, ins: Ins) -> str:
    return _unary(em, n, ins, "ttnn.leaky_relu", negative_slope=float(n.attrs.get("alpha", 0.01)))


def _chain(em: Emitter, n: Node, ins: Ins, steps: list[tuple[str, list[str | float], dict]]) -> str:
    """Calls in order; ``"x"`` is the node's input, ``"$k"`` the k-th step's result; the last step
    takes the node's output name."""
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    form = em.form(ins[0])
    lay = _out_layout(form, x if form is Form.NHWC else n.output)
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


@lowers("onnx.HardSigmoid", check=_elementwise_check)
def _hard_sigmoid(em: Emitter, n: Node, ins: Ins) -> str:
    """max(0, min(1, alpha * x + beta)): ttnn.hardsigmoid where alpha is 1/6 and beta 0.5 (as
    torch.onnx writes nn.Hardsigmoid), else spelled out (ONNX's default alpha is 0.2)."""
    a, b = float(n.attrs.get("alpha", 0.2)), float(n.attrs.get("beta", 0.5))
    if np.float32(a) == np.float32(1 / 6) and b == 0.5:
        return _unary(em, n, ins, "ttnn.hardsigmoid")
    return _chain(em, n, ins, [("ttnn.multiply", ["x", a], {}), ("ttnn.add", ["$0", b], {}),
                               ("ttnn.clamp", ["$1"], {"min": 0.0, "max": 1.0})])


@lowers("onnx.ThresholdedRelu", check=_elementwise_check)
def _thresholded_relu(em: Emitter, n: Node, ins: Ins) -> str:
    return _chain(em, n, ins, [("ttnn.gt", ["x", float(n.attrs.get("alpha", 1.0))], {}),
                               ("ttnn.multiply", ["x", "$0"], {})])


@lowers("onnx.Gelu", check=_elementwise_check)
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


def _alias(em: Emitter, n: Node, ins: Ins) -> str:
    """The same device tensor under another IR name: no call."""
    assert ins[0] is not None
    return ins[0]


for _name in ("onnx.Identity", "onnx.Dropout"):
    lowers(_name, check=lambda n: None if len(n.outputs) == 1 else "the mask output stays on the host")(_alias)


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
    lay = _out_layout(form, n.output)
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
    lowers(f"onnx.{onnx}", check=_elementwise_check)(lambda em, n, ins: _binary(em, n, ins, onnx))


for _onnx in _BINARY:
    if _onnx not in ("Max", "Min"):
        _register_binary(_onnx)


def _variadic(em: Emitter, n: Node, ins: Ins, op: str, mean: bool = False) -> str:
    form, xs = operands(em, n, ins)
    if len(xs) == 1 and not mean:
        assert isinstance(xs[0], str)
        return em.emit("ttnn.reshape", [xs[0]], n.output.name, _out_layout(form, n.output), n.name,
                       shape=_out_layout(form, n.output).device_shape)
    acc = xs[0]
    for i, x in enumerate(xs[1:], 1):
        last = i == len(xs) - 1 and not mean
        acc = _binary_call(em, n, form, acc, x, op, op, n.output.name if last else f"{n.output.name}/acc{i}")
    if mean:
        assert isinstance(acc, str)
        acc = em.emit("ttnn.multiply", [acc], n.output.name, _out_layout(form, n.output), n.name, scalar=1 / len(xs))
    assert isinstance(acc, str)
    return acc


lowers("onnx.Max", check=_elementwise_check)(lambda em, n, ins: _variadic(em, n, ins, "maximum"))
lowers("onnx.Min", check=_elementwise_check)(lambda em, n, ins: _variadic(em, n, ins, "minimum"))
lowers("onnx.Sum", check=_elementwise_check)(lambda em, n, ins: _variadic(em, n, ins, "add"))
lowers("onnx.Mean", check=_elementwise_check)(lambda em, n, ins: _variadic(em, n, ins, "add", mean=True))


def _pow_check(n: Node) -> str | None:
    e = _scalar(n.input(1))
    if e is None:
        return "ttnn.pow takes a constant exponent"
    if e not in (0.5, -0.5) and e != int(e):
        return f"exponent {e}: ttnn.pow takes integer exponents"
    return _elementwise_check(n)


@lowers("onnx.Pow", check=_pow_check)
def _pow(em: Emitter, n: Node, ins: Ins) -> str:
    e = _scalar(n.input(1))
    assert e is not None
    if e == 2:
        return _chain(em, n, ins, [("ttnn.multiply", ["x", "x"], {})])
    if e in (0.5, -0.5):
        return _chain(em, n, ins, [("ttnn.sqrt" if e > 0 else "ttnn.rsqrt", ["x"], {})])
    return _chain(em, n, ins, [("ttnn.pow", ["x"], {"exponent": int(e)})])


def _clip_check(n: Node) -> str | None:
    for v in n.inputs[1:]:
        if v is not None and _scalar(v) is None:
            return "ttnn.clamp takes constant bounds"
    return _elementwise_check(n)


@lowers("onnx.Clip", check=_clip_check)
def _clip(em: Emitter, n: Node, ins: Ins) -> str:
    lo, hi = _scalar(n.input(1)), _scalar(n.input(2))
    bounds = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
    if not bounds:
        return _alias(em, n, ins)
    return _chain(em, n, ins, [("ttnn.clamp", ["x"], bounds)])


@lowers("spc.FakeQuant", check=_elementwise_check)
def _fake_quant(em: Emitter, n: Node, ins: Ins) -> str:
    """x * (1 / s) (ttnn.divide takes tensors only), rounded, clamped, times the unit (s, or 1 for
    the integers a convolution reads). The steps before the last are kept in float32: bf16 holds
    x / s to half a step from 64 steps up, so rounding it there would round twice."""
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    s, lo, hi = float(n.attrs["scale"]), float(n.attrs["lo"]), float(n.attrs["hi"])
    form = em.form(ins[0])
    lay, base = _out_layout(form, x if form is Form.NHWC else n.output), n.output.name
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


@lowers("onnx.PRelu", check=_elementwise_check)
def _prelu(em: Emitter, n: Node, ins: Ins) -> str:
    """relu(x) + slope * min(x, 0)."""
    form, (x, slope) = operands(em, n, ins)
    assert isinstance(x, str)
    lay, base = _out_layout(form, n.output), n.output.name
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
    return _elementwise_check(n)


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
    return em.emit("ttnn.where", [c, *tensors], n.output.name, _out_layout(form, n.output), n.name, **args)


# -- softmax and reductions ---------------------------------------------------------------------
def _softmax_check(n: Node) -> str | None:
    if n.attrs.get("coerce_2d"):
        return "opset < 13 softmax over the flattened trailing axes stays on the host"
    return _elementwise_check(n)


def _softmax(em: Emitter, n: Node, ins: Ins, log: bool) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    axis = norm_axis(int(n.attrs.get("axis", -1)), x.type.rank)
    if em.form(ins[0]) is Form.NHWC and x.type.rank == 4 and axis == 1:
        t, dim, lay = em.tiled(ins[0], n.name), -1, DeviceLayout.of(_shape(x))
    else:
        t, dim, lay = em.tiled(em.to_plain(ins[0], x, n.name), n.name), axis, _plain(x)
    base = n.output.name
    s = em.emit("ttnn.softmax", [t], base + "/softmax" if log else base, lay, n.name, dim=dim, numeric_stable=True)
    return em.emit("ttnn.log", [s], base, lay, n.name) if log else s


lowers("onnx.Softmax", check=_softmax_check)(lambda em, n, ins: _softmax(em, n, ins, False))
lowers("onnx.LogSoftmax", check=_softmax_check)(lambda em, n, ins: _softmax(em, n, ins, True))


def _axes(n: Node) -> list[int] | None:
    x = n.inputs[0]
    assert x is not None
    axes = axes_from(n.inputs, n.attrs, 1)
    if axes is None:
        return None
    if not axes:
        return [] if n.attrs.get("noop_with_empty_axes") else list(range(x.type.rank))
    return sorted(norm_axis(a, x.type.rank) for a in axes)


def _reduce_check(n: Node) -> str | None:
    if _axes(n) is None:
        return "the reduced axes are not constant"
    return _elementwise_check(n)


# ONNX reduction -> (element-wise call before, ttnn reduction, element-wise call after)
_REDUCE = {"ReduceSum": (None, "sum", None), "ReduceMean": (None, "mean", None), "ReduceMax": (None, "max", None),
           "ReduceMin": (None, "min", None), "ReduceL2": ("square", "sum", "sqrt"),
           "ReduceSumSquare": ("square", "sum", None), "ReduceL1": ("abs", "sum", None)}


def _reduce(em: Emitter, n: Node, ins: Ins, kind: str) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    axes = _axes(n)
    assert axes is not None
    if not axes:
        return _alias(em, n, ins)
    keep = bool(n.attrs.get("keepdims", 1))
    shape = _shape(x)
    before, op, after = _REDUCE[kind]
    conv_axes = axes == [1] or (axes == [2, 3] and shape[0] == 1 and keep)
    if em.form(ins[0]) is Form.NHWC and x.type.rank == 4 and conv_axes:
        # the channel axis is the conv form's last; the spatial axes of one image are its third
        t, dims, lay = em.tiled(ins[0], n.name), [-1] if axes == [1] else [2], DeviceLayout.of(_shape(n.output))
        keep_device, src = True, DeviceLayout.of(shape)
    else:
        t, dims, lay = em.tiled(em.to_plain(ins[0], x, n.name), n.name), axes, _plain(n.output)
        keep_device, src = keep, _plain(x)
    base = n.output.name
    if before == "square":
        t = em.emit("ttnn.multiply", [t, t], base + "/square", src, n.name)
    elif before == "abs":
        t = em.emit("ttnn.abs", [t], base + "/abs", src, n.name)
    r = em.emit(f"ttnn.{op}", [t], base + ("/" + op if after else ""), lay, n.name,
                dim=dims if len(dims) > 1 else dims[0], keepdim=keep_device)
    return em.emit(f"ttnn.{after}", [r], base, lay, n.name) if after else r


def _register_reduce(kind: str) -> None:
    lowers(f"onnx.{kind}", check=_reduce_check)(lambda em, n, ins: _reduce(em, n, ins, kind))


for _kind in _REDUCE:
    _register_reduce(_kind)


def _global_pool(em: Emitter, n: Node, ins: Ins, op: str) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    axes = list(range(2, x.type.rank))
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    return em.emit(f"ttnn.{op}", [t], n.output.name, _plain(n.output), n.name, dim=axes, keepdim=True)


lowers("onnx.GlobalAveragePool", check=_elementwise_check)(lambda em, n, ins: _global_pool(em, n, ins, "mean"))
lowers("onnx.GlobalMaxPool", check=_elementwise_check)(lambda em, n, ins: _global_pool(em, n, ins, "max"))


# -- normalisation --------------------------------------------------------------------------------
def _bn_check(n: Node) -> str | None:
    if any(v is None or not v.is_const for v in n.inputs[1:5]):
        return "batch normalisation with non-constant statistics stays on the host"
    if len(n.outputs) > 1 or n.attrs.get("training_mode"):
        return "training-mode batch normalisation stays on the host"
    return _elementwise_check(n)


@lowers("onnx.BatchNormalization", check=_bn_check)
def _batch_norm(em: Emitter, n: Node, ins: Ins) -> str:
    """(x - mean) / sqrt(var + eps) * scale + bias as x * a + b, with a and b per channel."""
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    scale, bias, mean, var = (np.asarray(v.data, np.float64) for v in n.inputs[1:5])  # type: ignore[union-attr]
    a = scale / np.sqrt(var + float(n.attrs.get("epsilon", 1e-5)))
    b = bias - mean * a
    c = a.shape[0]
    if em.form(ins[0]) is Form.NHWC and x.type.rank == 4:
        t, shape, lay = em.tiled(ins[0], n.name), [1, 1, 1, c], DeviceLayout.of(_shape(x))
    else:
        t, shape, lay = em.tiled(em.to_plain(ins[0], x, n.name), n.name), [1, c] + [1] * (x.type.rank - 2), _plain(x)
    w = n.inputs[1]
    assert w is not None
    # the per-channel factors in float32: in bf16 each would move its channel by up to 1/512
    ka = em.constant(w, a, shape, n.name, dtype=DataFormat.FLOAT32)
    kb = em.constant(n.inputs[2], b, shape, n.name, dtype=DataFormat.FLOAT32)  # type: ignore[arg-type]
    # x * a kept in float32: a batch norm after a ReLU (SuperPoint-Open) then rounds once, not twice
    # (measured on its 480x640 export: min score-map PCC 0.9952 -> 0.9976 against onnxruntime)
    store = n.precision.output_dtype if n.precision is not None else em.dtypes.get(t, DataFormat.BFLOAT16)
    y = em.emit("ttnn.multiply", [t, ka], n.output.name + "/scaled", lay, n.name, store=DataFormat.FLOAT32)
    return em.emit("ttnn.add", [y, kb], n.output.name, lay, n.name, store=store)


def _normalize(em: Emitter, n: Node, t: str, dims: list[int], lay: Layout, stat: Layout, eps: float) -> str:
    """(x - mean) * rsqrt(mean((x - mean)^2) + eps) over ``dims``."""
    base = n.output.name
    mu = em.emit("ttnn.mean", [t], base + "/mean", stat, n.name, dim=dims if len(dims) > 1 else dims[0], keepdim=True)
    d = em.emit("ttnn.subtract", [t, mu], base + "/centred", lay, n.name)
    sq = em.emit("ttnn.multiply", [d, d], base + "/sq", lay, n.name)
    var = em.emit("ttnn.mean", [sq], base + "/var", stat, n.name, dim=dims if len(dims) > 1 else dims[0], keepdim=True)
    var = em.emit("ttnn.add", [var], base + "/var_eps", stat, n.name, scalar=eps)
    inv = em.emit("ttnn.rsqrt", [var], base + "/inv_std", stat, n.name)
    return em.emit("ttnn.multiply", [d, inv], base + "/normalised", lay, n.name)


def _affine(em: Emitter, n: Node, y: str, lay: Layout, scale: Value | None, bias: Value | None,
            shape: list[int]) -> str:
    base = n.output.name
    if scale is not None:
        y = em.emit("ttnn.multiply", [y, em.constant(scale, np.asarray(scale.data).reshape(shape), shape, n.name)],
                    base if bias is None else base + "/scaled", lay, n.name)
    if bias is not None:
        y = em.emit("ttnn.add", [y, em.constant(bias, np.asarray(bias.data).reshape(shape), shape, n.name)], base,
                    lay, n.name)
    if y != base:
        y = em.emit("ttnn.reshape", [y], base, lay, n.name, shape=lay.device_shape)
    return y


def _const_inputs_check(n: Node) -> str | None:
    if any(v is not None and not v.is_const for v in n.inputs[1:]):
        return "scale and bias must be constants"
    if len(n.outputs) > 1:
        return "the statistics outputs stay on the host"
    return _elementwise_check(n)


@lowers("onnx.InstanceNormalization", check=_const_inputs_check)
def _instance_norm(em: Emitter, n: Node, ins: Ins) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    r = x.type.rank
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    stat = PlainLayout(tuple(d if i < 2 else 1 for i, d in enumerate(_shape(x))))
    y = _normalize(em, n, t, list(range(2, r)), _plain(x), stat, float(n.attrs.get("epsilon", 1e-5)))
    c = _shape(x)[1]
    return _affine(em, n, y, _plain(x), n.input(1), n.input(2), [1, c] + [1] * (r - 2))


@lowers("onnx.LayerNormalization", check=_const_inputs_check)
def _layer_norm(em: Emitter, n: Node, ins: Ins) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    r = x.type.rank
    axis = norm_axis(int(n.attrs.get("axis", -1)), r)
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    shape = _shape(x)
    stat = PlainLayout(tuple(d if i < axis else 1 for i, d in enumerate(shape)))
    y = _normalize(em, n, t, list(range(axis, r)), _plain(x), stat, float(n.attrs.get("epsilon", 1e-5)))
    param = [1] * axis + list(shape[axis:])
    return _affine(em, n, y, _plain(x), n.input(1), n.input(2), param)


# -- views and data movement ----------------------------------------------------------------------
def _keeps_nhwc_order(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """A reshape between these IR shapes keeps the conv form's [N*H*W, C] element order."""
    if not (DeviceLayout.fits(a) and DeviceLayout.fits(b)):
        return False
    la, lb = DeviceLayout.of(a), DeviceLayout.of(b)
    return la.c == lb.c and (la.c == 1 or (la.n, la.h, la.w) == (lb.n, lb.h, lb.w))


def _view(em: Emitter, n: Node, ins: Ins) -> str:
    """Reshape, Flatten, Squeeze, Unsqueeze: free in the conv form when the element order holds,
    else a reshape of the plain form."""
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    a, b = _shape(x), _shape(n.output)
    if em.form(ins[0]) is Form.NHWC and _keeps_nhwc_order(a, b):
        out: Layout = DeviceLayout.of(b)
        return em.emit("ttnn.reshape", [ins[0]], n.output.name, out, n.name, shape=out.device_shape)
    t = em.to_plain(ins[0], x, n.name)
    return em.emit("ttnn.reshape", [t], n.output.name, _plain(n.output), n.name, shape=_plain(n.output).device_shape)


for _name in ("onnx.Reshape", "onnx.Unsqueeze", "onnx.Squeeze", "onnx.Flatten"):
    lowers(_name, check=_elementwise_check)(_view)


@lowers("onnx.Transpose", check=_elementwise_check)
def _transpose(em: Emitter, n: Node, ins: Ins) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    perm = [int(p) for p in n.attrs.get("perm") or range(x.type.rank - 1, -1, -1)]
    if em.form(ins[0]) is Form.NHWC and x.type.rank == 4 and perm == [0, 2, 3, 1]:
        # NCHW -> NHWC is the conv form read as [N, H, W, C]
        return em.emit("ttnn.reshape", [ins[0]], n.output.name, _plain(n.output), n.name,
                       shape=_plain(n.output).device_shape)
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    return em.emit("ttnn.permute", [t], n.output.name, _plain(n.output), n.name, dims=perm)


def _slice_bounds(n: Node) -> tuple[list[int], list[int], list[int]] | None:
    """Per-axis start, end, step of a Slice with constant parameters (None if not constant)."""
    from spc.ir.ops.onnx_index import slice_params

    x = n.inputs[0]
    assert x is not None
    params = []
    for v in n.inputs[1:5]:
        if v is not None and not v.is_const:
            return None
        params.append(None if v is None else np.asarray(v.data))
    while len(params) < 4:
        params.append(None)
    shape = _shape(x)
    idx = slice_params(len(shape), *params)
    starts, ends, steps = [], [], []
    for d, sl in zip(shape, idx):
        s, e, st = sl.indices(d)
        if st < 0:
            return None
        starts.append(s)
        ends.append(max(e, s))
        steps.append(st)
    return starts, ends, steps


def _slice_check(n: Node) -> str | None:
    if "starts" in n.attrs:
        return "opset < 10 Slice stays on the host"
    bounds = _slice_bounds(n)
    if bounds is None:
        return "ttnn.slice takes constant, forward slices"
    return _elementwise_check(n)


@lowers("onnx.Slice", check=_slice_check)
def _slice(em: Emitter, n: Node, ins: Ins) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    bounds = _slice_bounds(n)
    assert bounds is not None
    starts, ends, steps = bounds
    shape = _shape(x)
    only_channels = all((s, e, st) == (0, d, 1) for i, (s, e, st, d) in enumerate(zip(starts, ends, steps, shape))
                        if i != 1)
    if em.form(ins[0]) is Form.NHWC and x.type.rank == 4 and only_channels and steps[1] == 1:
        lay = DeviceLayout.of(shape)
        out: Layout = DeviceLayout.of(_shape(n.output))
        t = em.tiled(ins[0], n.name)
        return em.emit("ttnn.slice", [t], n.output.name, out, n.name, starts=[0, 0, 0, starts[1]],
                       ends=[1, 1, lay.n * lay.h * lay.w, ends[1]], steps=[1, 1, 1, 1])
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    return em.emit("ttnn.slice", [t], n.output.name, _plain(n.output), n.name, starts=starts, ends=ends, steps=steps)


def _gather_check(n: Node) -> str | None:
    idx = n.inputs[1]
    if idx is None or not idx.is_const:
        return "a gather by computed indices stays on the host"
    i = np.asarray(idx.data).reshape(-1)
    if i.ndim > 1 or len(i) == 0 or (len(i) > 1 and not np.all(np.diff(i) == 1)) or idx.type.rank > 1:
        return "ttnn.slice takes a constant index or a contiguous range of them"
    return _elementwise_check(n)


@lowers("onnx.Gather", check=_gather_check)
def _gather(em: Emitter, n: Node, ins: Ins) -> str:
    """A constant index (or contiguous range) along one axis: a slice, then a reshape that drops
    the axis for a scalar index."""
    x, idx = n.inputs[0], n.inputs[1]
    assert x is not None and idx is not None and ins[0] is not None
    shape = _shape(x)
    axis = norm_axis(int(n.attrs.get("axis", 0)), len(shape))
    i = np.asarray(idx.data).reshape(-1).astype(np.int64)
    first = int(i[0]) % shape[axis]
    starts = [0] * len(shape)
    ends = list(shape)
    starts[axis], ends[axis] = first, first + len(i)
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    kept = tuple(e - s for s, e in zip(starts, ends))
    s = em.emit("ttnn.slice", [t], n.output.name + "/slice", PlainLayout(kept), n.name, starts=starts, ends=ends,
                steps=[1] * len(shape))
    return em.emit("ttnn.reshape", [s], n.output.name, _plain(n.output), n.name, shape=_plain(n.output).device_shape)


@lowers("onnx.Concat", check=_elementwise_check)
def _concat(em: Emitter, n: Node, ins: Ins) -> str:
    out = n.output
    axis = norm_axis(int(n.attrs["axis"]), out.type.rank)
    live = _live(n, ins)
    nhwc = out.type.rank == 4 and axis == 1 and all(em.form(name) is Form.NHWC for _, name in live)
    parts = []
    for v, name in zip(n.inputs, ins):
        if v is None:
            continue
        if name is None:
            data = np.asarray(v.data, np.float32)
            if nhwc:
                lay = DeviceLayout.of(_shape(v))
                parts.append(em.constant(v, lay.to_device(data), lay.device_shape, n.name))
            else:
                parts.append(em.constant(v, data, list(data.shape) or [1], n.name))
        elif nhwc:
            parts.append(em.tiled(em.interleaved(name, n.name), n.name))
        else:
            parts.append(em.tiled(em.to_plain(name, v, n.name), n.name))
    lay_out: Layout = DeviceLayout.of(_shape(out)) if nhwc else _plain(out)
    return em.emit("ttnn.concat", parts, out.name, lay_out, n.name, dim=-1 if nhwc else axis)


def _split_sizes(n: Node) -> list[int] | None:
    x = n.inputs[0]
    assert x is not None
    axis = norm_axis(int(n.attrs.get("axis", 0)), x.type.rank)
    return [int(o.type.static_shape[axis]) for o in n.outputs] if all(o.type.is_static for o in n.outputs) else None


@lowers("onnx.Split", check=_elementwise_check)
def _split(em: Emitter, n: Node, ins: Ins) -> list[str]:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    shape = _shape(x)
    axis = norm_axis(int(n.attrs.get("axis", 0)), len(shape))
    sizes = _split_sizes(n)
    assert sizes is not None
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    outs, at = [], 0
    for o, size in zip(n.outputs, sizes):
        starts, ends = [0] * len(shape), list(shape)
        starts[axis], ends[axis] = at, at + size
        outs.append(em.emit("ttnn.slice", [t], o.name, _plain(o), n.name, starts=starts, ends=ends,
                            steps=[1] * len(shape)))
        at += size
    return outs


def _pad_params(n: Node) -> tuple[list[tuple[int, int]], float] | None:
    x = n.inputs[0]
    assert x is not None
    r = x.type.rank
    pads_v, value_v, axes_v = n.input(1), n.input(2), n.input(3)
    if pads_v is None or not pads_v.is_const or (value_v is not None and _scalar(value_v) is None):
        return None
    if axes_v is not None and not axes_v.is_const:
        return None
    pads = [int(p) for p in np.asarray(pads_v.data).reshape(-1)]
    axes = list(range(r)) if axes_v is None else [norm_axis(int(a), r) for a in np.asarray(axes_v.data).reshape(-1)]
    k = len(axes)
    out = [(0, 0)] * r
    for j, a in enumerate(axes):
        out[a] = (pads[j], pads[j + k])
    value = _scalar(value_v) if value_v is not None else 0.0
    return out, float(value or 0.0)


def _pad_check(n: Node) -> str | None:
    if n.attrs.get("mode", "constant") != "constant":
        return f"Pad mode={n.attrs.get('mode')} stays on the host (ttnn.pad fills a constant)"
    params = _pad_params(n)
    if params is None:
        return "ttnn.pad takes constant pads and value"
    if any(b < 0 or a < 0 for b, a in params[0]):
        return "negative pads (crops) stay on the host"
    return _elementwise_check(n)


@lowers("onnx.Pad", check=_pad_check)
def _pad(em: Emitter, n: Node, ins: Ins) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    params = _pad_params(n)
    assert params is not None
    padding, value = params
    t = em.row_major(em.to_plain(ins[0], x, n.name), n.name)
    p = em.emit("ttnn.pad", [t], n.output.name + "/padded", _plain(n.output), n.name,
                padding=[list(pair) for pair in padding], value=value)
    return em.emit("ttnn.to_layout", [p], n.output.name, _plain(n.output), n.name, layout=PageLayout.TILE)


def _space_depth(em: Emitter, n: Node, ins: Ins, to_space: bool) -> str:
    """DepthToSpace / SpaceToDepth as reshape -> permute -> reshape in the plain form."""
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    b = int(n.attrs["blocksize"])
    nn, c, h, w = _shape(x)
    if to_space:
        crd = n.attrs.get("mode", "DCR") == "CRD"
        six = [nn, c // (b * b), b, b, h, w] if crd else [nn, b, b, c // (b * b), h, w]
        perm = [0, 1, 4, 2, 5, 3] if crd else [0, 3, 4, 1, 5, 2]
    else:
        six, perm = [nn, c, h // b, b, w // b, b], [0, 3, 5, 1, 2, 4]
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    base = n.output.name
    t = em.emit("ttnn.reshape", [t], base + "/blocks", PlainLayout(tuple(six)), n.name, shape=six)
    moved = [six[p] for p in perm]
    t = em.emit("ttnn.permute", [t], base + "/moved", PlainLayout(tuple(moved)), n.name, dims=perm)
    return em.emit("ttnn.reshape", [t], base, _plain(n.output), n.name, shape=_plain(n.output).device_shape)


def _rank4_check(n: Node) -> str | None:
    x = n.inputs[0]
    if x is None or x.type.rank != 4:
        return "4-D inputs only"
    return _elementwise_check(n)


lowers("onnx.DepthToSpace", check=_rank4_check)(lambda em, n, ins: _space_depth(em, n, ins, True))
lowers("onnx.SpaceToDepth", check=_rank4_check)(lambda em, n, ins: _space_depth(em, n, ins, False))


def _const_shape_check(index: int) -> Callable[[Node], str | None]:
    def check(n: Node) -> str | None:
        v = n.input(index)
        if v is None or not v.is_const:
            return "the target shape is not constant"
        return _elementwise_check(n)

    return check


@lowers("onnx.Expand", check=_const_shape_check(1))
def _expand(em: Emitter, n: Node, ins: Ins) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    out = _shape(n.output)
    t = _tensor_operand(em, x, ins[0], Form.PLAIN, out, n.name)
    return em.emit("ttnn.expand", [t], n.output.name, _plain(n.output), n.name, output_shape=list(out))


@lowers("onnx.Tile", check=_const_shape_check(1))
def _tile(em: Emitter, n: Node, ins: Ins) -> str:
    x, reps = n.inputs[0], n.inputs[1]
    assert x is not None and reps is not None and ins[0] is not None
    t = em.tiled(em.to_plain(ins[0], x, n.name), n.name)
    return em.emit("ttnn.repeat", [t], n.output.name, _plain(n.output), n.name,
                   repeat_dims=[int(r) for r in np.asarray(reps.data).reshape(-1)])


# -- matrix products --------------------------------------------------------------------------------
def _matmul_check(n: Node) -> str | None:
    if any(v is not None and v.type.rank < 2 for v in n.inputs[:2]):
        return "1-D matrix products stay on the host"
    return _elementwise_check(n)


def _matrix(em: Emitter, n: Node, v: Value, name: str | None, rank: int, transpose: bool = False) -> str:
    if name is None:
        data = np.asarray(v.data, np.float32)
        if transpose:
            data = np.swapaxes(data, -1, -2)
        return em.constant(v, data, [1] * (rank - data.ndim) + list(data.shape), n.name)
    t = _tensor_operand(em, v, name, Form.PLAIN, (1,) * rank, n.name)
    if transpose:
        shape = list(_shape(v))
        shape[-1], shape[-2] = shape[-2], shape[-1]
        t = em.emit("ttnn.transpose", [t], name + "/T", PlainLayout(tuple(shape)), n.name, dim1=-2, dim2=-1)
    return t


def _batched(em: Emitter, n: Node, t: str, shape: tuple[int, ...], batch: tuple[int, ...]) -> str:
    """``t`` repeated over the batch dimensions ttnn.matmul needs equal on both sides (mock p150:
    "bmm expects input tensors of shapes BCMK*BCKN=BCMN")."""
    have = shape[:-2]
    if have == batch:
        return t
    reps = [b // h for b, h in zip(batch, have)] + [1, 1]
    return em.emit("ttnn.repeat", [t], t + "/batched", PlainLayout((*batch, *shape[-2:])), n.name, repeat_dims=reps)


@lowers("onnx.MatMul", check=_matmul_check)
def _matmul(em: Emitter, n: Node, ins: Ins) -> str:
    a, b = n.inputs[0], n.inputs[1]
    assert a is not None and b is not None
    r = n.output.type.rank
    batch = _shape(n.output)[:-2]
    sides = []
    for v, name in ((a, ins[0]), (b, ins[1])):
        shape = (1,) * (r - v.type.rank) + _shape(v)
        sides.append(_batched(em, n, _matrix(em, n, v, name, r), shape, batch))
    return em.emit("ttnn.matmul", sides, n.output.name, _plain(n.output), n.name)


@lowers("onnx.Gemm", check=_matmul_check)
def _gemm(em: Emitter, n: Node, ins: Ins) -> str:
    a, b, c = n.inputs[0], n.inputs[1], n.input(2)
    assert a is not None and b is not None
    alpha, beta = float(n.attrs.get("alpha", 1.0)), float(n.attrs.get("beta", 1.0))
    base, lay = n.output.name, _plain(n.output)
    y = em.emit("ttnn.matmul", [_matrix(em, n, a, ins[0], 2, bool(n.attrs.get("transA"))),
                                _matrix(em, n, b, ins[1], 2, bool(n.attrs.get("transB")))], base + "/ab", lay, n.name)
    if alpha != 1.0:
        y = em.emit("ttnn.multiply", [y], base + "/alpha", lay, n.name, scalar=alpha)
    if c is not None and beta != 0.0:
        shape = _shape(n.output)
        bias = (em.constant(c, np.asarray(c.data, np.float32) * beta,
                            [1] * (2 - c.type.rank) + list(_shape(c)), n.name) if c.is_const
                else _tensor_operand(em, c, ins[2], Form.PLAIN, shape, n.name))  # type: ignore[arg-type]
        if not c.is_const and beta != 1.0:
            bias = em.emit("ttnn.multiply", [bias], base + "/beta", em.layouts[bias], n.name, scalar=beta)
        y = em.emit("ttnn.add", [y, bias], base + "/c", lay, n.name)
    return em.emit("ttnn.reshape", [y], base, lay, n.name, shape=lay.device_shape)


# -- pooling ----------------------------------------------------------------------------------------
def _avg_pool_check(n: Node) -> str | None:
    if any(d != 1 for d in n.attrs.get("dilations", [1, 1])):
        return "ttnn.avg_pool2d has no dilation"
    return pool2d_check(n, "ttnn.avg_pool2d")


@lowers("onnx.AveragePool", check=_avg_pool_check)
def _avg_pool(em: Emitter, n: Node, ins: Ins) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    src = DeviceLayout.of(_shape(x))
    pads = n.attrs.get("pads", [0, 0, 0, 0])
    t = em.row_major(em.to_nhwc(ins[0], x, n.name), n.name)
    return em.emit("ttnn.avg_pool2d", [t], n.output.name, DeviceLayout.of(_shape(n.output)), n.name,
                   batch_size=src.n, input_h=src.h, input_w=src.w, channels=src.c,
                   kernel_size=list(n.attrs["kernel_shape"]), stride=list(n.attrs.get("strides", [1, 1])),
                   padding=[pads[0], pads[1]], ceil_mode=bool(n.attrs.get("ceil_mode", 0)),
                   count_include_pad=bool(n.attrs.get("count_include_pad", 0)))

