"""What each ttnn call computes, in numpy, exactly: float32 values, no storage rounding.

This is a program's meaning as ttnn defines it (ttnn's own golden functions compute the same,
in torch), not the device's numerics (emulator/device.py models those). ``spc compile`` runs
the lowered program with it to check that the program computes what the source graph computes
(validation/translation.py), so it needs numpy only: the compile imports no torch.

A meaning is ``fn(inputs, weights, args) -> array`` (a tuple for calls with several results);
inputs are float32 arrays in the call's device shape, masks are 0/1, integers exact float32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from spc.ttnn.configs import Activation
from spc.ttnn.formats import DataFormat

Meaning = Callable[[list[np.ndarray], dict[str, np.ndarray], dict[str, Any]], Any]
MEANINGS: dict[str, Meaning] = {}
F32 = np.float32


def means(name: str) -> Callable[[Meaning], Meaning]:
    def wrap(fn: Meaning) -> Meaning:
        MEANINGS[name] = fn
        return fn

    return wrap


def _nchw(x: np.ndarray, n: int, h: int, w: int) -> np.ndarray:
    return x.reshape(n, h, w, -1).transpose(0, 3, 1, 2)


def _flat(y: np.ndarray) -> np.ndarray:
    n, c, h, w = y.shape
    return np.ascontiguousarray(y.transpose(0, 2, 3, 1)).reshape(1, 1, n * h * w, c)


def _windows(x: np.ndarray, k: tuple[int, int], s: tuple[int, int], d: tuple[int, int],
             out: tuple[int, int]) -> list[np.ndarray]:
    """The k[0] * k[1] shifted views of padded NCHW ``x`` that a window op combines."""
    rows = [slice(i * d[0], i * d[0] + s[0] * (out[0] - 1) + 1, s[0]) for i in range(k[0])]
    cols = [slice(j * d[1], j * d[1] + s[1] * (out[1] - 1) + 1, s[1]) for j in range(k[1])]
    return [x[:, :, r, c] for r in rows for c in cols]


def _out_size(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    span = size + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= size + p:  # the last window must start inside the input or its left padding
        out -= 1
    return out


def _pool(x: np.ndarray, a: dict[str, Any], fill: float) -> tuple[list[np.ndarray], tuple[int, int]]:
    (kh, kw), (sh, sw), (ph, pw) = a["kernel_size"], a["stride"], a["padding"]
    dh, dw = a.get("dilation", [1, 1])
    h, w = x.shape[2:]
    oh = _out_size(h, kh, sh, ph, dh, a["ceil_mode"])
    ow = _out_size(w, kw, sw, pw, dw, a["ceil_mode"])
    # the right edge pads as far as ceil_mode's last window reaches
    extra_h = max(0, (oh - 1) * sh + (kh - 1) * dh + 1 - (h + 2 * ph))
    extra_w = max(0, (ow - 1) * sw + (kw - 1) * dw + 1 - (w + 2 * pw))
    xp = np.pad(x, [(0, 0), (0, 0), (ph, ph + extra_h), (pw, pw + extra_w)], constant_values=fill)
    return _windows(xp, (kh, kw), (sh, sw), (dh, dw), (oh, ow)), (oh, ow)


@means("ttnn.conv2d")
def conv2d(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    x = _nchw(ins[0], a["batch_size"], a["input_height"], a["input_width"])
    wt = np.asarray(weights["weight_tensor"], F32)
    top, bottom, left, right = a["padding"]
    (sh, sw), (dh, dw), groups = a["stride"], a["dilation"], int(a["groups"])
    o, ig, kh, kw = wt.shape
    n, _, h, w = x.shape
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (w + left + right - dw * (kw - 1) - 1) // sw + 1
    xp = np.pad(x, [(0, 0), (0, 0), (top, bottom), (left, right)])
    views = _windows(xp, (kh, kw), (sh, sw), (dh, dw), (oh, ow))  # each [n, c, oh, ow]
    cols = np.stack(views, axis=2)  # [n, c, kh*kw, oh, ow]
    og = o // groups
    parts = []
    for gi in range(groups):
        xs = cols[:, gi * ig:(gi + 1) * ig].reshape(n, ig * kh * kw, oh * ow)
        ws = wt[gi * og:(gi + 1) * og].reshape(og, ig * kh * kw)
        parts.append(np.matmul(ws, xs).reshape(n, og, oh, ow))
    y = np.concatenate(parts, axis=1)
    if "bias_tensor" in weights:
        y = y + np.asarray(weights["bias_tensor"], F32).reshape(1, -1, 1, 1)
    if a["conv_config"].activation is Activation.RELU:
        y = np.maximum(y, 0)
    return _flat(y.astype(F32))


@means("ttnn.max_pool2d")
def max_pool2d(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    x = _nchw(ins[0], a["batch_size"], a["input_h"], a["input_w"])
    (kh, kw), (ph, pw) = a["kernel_size"], a["padding"]
    if list(a["stride"]) == [1, 1] and list(a.get("dilation", [1, 1])) == [1, 1] and not a["ceil_mode"]:
        # a stride-1 window max is separable, and a window of k is two overlapping ones of 2^j <= k
        return _flat(_window_max(_window_max(x, 3, kw, pw), 2, kh, ph))
    views, _ = _pool(x, a, -np.inf)
    return _flat(np.maximum.reduce(views))


def _window_max(x: np.ndarray, axis: int, k: int, pad: int) -> np.ndarray:
    """Maxima of the stride-1 windows of ``k`` along ``axis``, ``pad`` -inf each side: O(log k) passes."""
    if pad:
        fill = np.full([pad if d == axis else n for d, n in enumerate(x.shape)], -np.inf, x.dtype)
        x = np.concatenate([fill, x, fill], axis)
    out, width = x.shape[axis] - k + 1, 1

    def part(y: np.ndarray, start: int, size: int) -> np.ndarray:
        return y[(slice(None),) * axis + (slice(start, start + size),)]

    while 2 * width <= k:
        size = x.shape[axis] - width
        x = np.maximum(part(x, 0, size), part(x, width, size))
        width *= 2
    return x if width == k else np.maximum(part(x, 0, out), part(x, k - width, out))


@means("ttnn.avg_pool2d")
def avg_pool2d(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    x = _nchw(ins[0], a["batch_size"], a["input_h"], a["input_w"]).astype(np.float64)
    views, _ = _pool(x, a, 0.0)
    total = np.add.reduce(views)
    # the taps inside the input, or inside it and its explicit padding: never the part of a
    # ceil_mode window past both (as torch and ONNX count)
    out = total.shape[2:]
    counts = []
    for size, k, st, p, o in zip(x.shape[2:], a["kernel_size"], a["stride"], a["padding"], out):
        start = np.arange(o) * st - p
        lo, hi = (-p, size + p) if a["count_include_pad"] else (0, size)
        counts.append(np.minimum(start + k, hi) - np.maximum(start, lo))
    count = np.outer(*counts).astype(np.float64)
    return _flat((total / count).astype(F32))


@means("ttnn.softmax")
def softmax(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    x = ins[0].astype(np.float64)
    e = np.exp(x - x.max(axis=a["dim"], keepdims=True))
    return (e / e.sum(axis=a["dim"], keepdims=True)).astype(F32)


def _dims(a: dict[str, Any]) -> tuple[int, ...]:
    d = a["dim"]
    return tuple(int(x) for x in d) if isinstance(d, list) else (int(d),)


def _reduce(fn: Callable[..., np.ndarray], accumulate: bool) -> Meaning:
    """``accumulate``: in float64 (a sum, a mean), cast as numpy reads the input, not as a copy."""
    extra = {"dtype": np.float64} if accumulate else {}
    return lambda ins, w, a: np.asarray(fn(ins[0], axis=_dims(a), keepdims=a["keepdim"], **extra)).astype(F32)


MEANINGS.update({"ttnn.sum": _reduce(np.sum, True), "ttnn.mean": _reduce(np.mean, True),
                 "ttnn.max": _reduce(np.max, False), "ttnn.min": _reduce(np.min, False)})


@means("ttnn.concat")
def concat(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return np.concatenate(ins, axis=a["dim"])


@means("ttnn.pad")
def pad(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return np.pad(ins[0], [tuple(p) for p in a["padding"]], constant_values=F32(a["value"]))


@means("ttnn.expand")
def expand(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return np.ascontiguousarray(np.broadcast_to(ins[0], a["output_shape"]))


@means("ttnn.repeat")
def repeat(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return np.tile(ins[0], a["repeat_dims"])


@means("ttnn.transpose")
def transpose(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return np.ascontiguousarray(np.swapaxes(ins[0], a["dim1"], a["dim2"]))


@means("ttnn.matmul")
def matmul(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return np.matmul(ins[0].astype(np.float64), ins[1].astype(np.float64)).astype(F32)


@means("ttnn.where")
def where(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    rest = iter(ins[1:])
    t = a["true_value"] if "true_value" in a else next(rest)
    f = a["false_value"] if "false_value" in a else next(rest)
    return np.where(ins[0] != 0, np.asarray(t, F32), np.asarray(f, F32)).astype(F32)


@means("ttnn.slice")
def slice_(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return np.ascontiguousarray(ins[0][tuple(slice(s, e, st) for s, e, st in zip(a["starts"], a["ends"], a["steps"]))])


@means("ttnn.reshape")
def reshape(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return ins[0].reshape(a["shape"])


@means("ttnn.permute")
def permute(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return np.ascontiguousarray(ins[0].transpose(a["dims"]))


def _same(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return ins[0]


MEANINGS.update({"ttnn.to_layout": _same, "ttnn.to_memory_config": _same})


@means("ttnn.typecast")
def typecast(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    """Float formats hold the value exactly here; integer formats truncate toward zero, as ttnn's."""
    if a.get("dtype") in (DataFormat.UINT32, DataFormat.UINT16):
        return np.trunc(ins[0]).astype(F32)
    return ins[0]


@means("ttnn.topk")
def topk(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Values and positions (exact float32 integers); ties by position, as a stable sort."""
    x, dim, k = ins[0], a["dim"], a["k"]
    key = -x if a["largest"] else x
    n = x.shape[dim]
    if x.size == n and 0 < k < n and not np.isnan(x).any():
        # one row (the keypoint window): the k-th key splits it into the positions before it (all
        # kept) and the ties at it (the first ones kept); only those k are sorted, stably
        row = key.reshape(n)
        kth = np.partition(row, k - 1)[k - 1]
        below = np.flatnonzero(row < kth)
        ties = np.flatnonzero(row == kth)[: k - below.size]
        pos = np.sort(np.concatenate([below, ties]))
        order = pos[np.argsort(row[pos], kind="stable")].reshape([k if d == dim % x.ndim else 1
                                                                  for d in range(x.ndim)])
    else:
        order = np.take(np.argsort(key, axis=dim, kind="stable"), np.arange(k), axis=dim)
    return np.take_along_axis(x, order, axis=dim), order.astype(F32)


@means("ttnn.embedding")
def embedding(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return ins[1][ins[0].astype(np.int64)]


@means("ttnn.clamp")
def clamp(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return np.clip(ins[0], a.get("min"), a.get("max")).astype(F32)


def _elementwise(name: str, fn: Callable[..., np.ndarray]) -> None:
    """``fn`` on the float32 inputs, or on the input and the call's ``scalar``, as float32."""
    def meaning(ins: list[np.ndarray], w: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
        args = [*ins, *([F32(a["scalar"])] if "scalar" in a else [])]
        with np.errstate(all="ignore"):
            return np.asarray(fn(*args)).astype(F32, copy=False)

    MEANINGS[name] = meaning


def _erf(x: np.ndarray) -> np.ndarray:
    import math

    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0, x)


for _name, _fn in {
        "eq": np.equal, "ne": np.not_equal, "gt": np.greater, "ge": np.greater_equal, "lt": np.less,
        "le": np.less_equal, "gtz": lambda x: x > 0, "logical_not": lambda x: x == 0,
        "logical_and": lambda x, y: (x != 0) & (y != 0), "logical_or": lambda x, y: (x != 0) | (y != 0),
        "logical_xor": lambda x, y: (x != 0) ^ (y != 0), "multiply": np.multiply, "add": np.add,
        "subtract": np.subtract, "divide": np.divide, "maximum": np.maximum, "minimum": np.minimum,
        "rsub": lambda x, y: y - x, "rsqrt": lambda x: 1 / np.sqrt(x), "floor": np.floor,
        "relu": lambda x: np.maximum(x, 0),
        "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "tanh": np.tanh, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
        "reciprocal": lambda x: 1 / x, "neg": np.negative, "abs": np.abs, "ceil": np.ceil, "round": np.round,
        "sign": np.sign, "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
        "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
        "atanh": np.arctanh, "erf": _erf, "softsign": lambda x: x / (1 + np.abs(x)), "softplus": _softplus,
        "hardswish": lambda x: x * np.clip(x + 3, 0, 6) / 6, "mish": lambda x: x * np.tanh(_softplus(x)),
        "isnan": np.isnan, "isinf": np.isinf}.items():
    _elementwise(f"ttnn.{_name}", _fn)
MEANINGS["ttnn.elu"] = lambda ins, w, a: np.where(ins[0] > 0, ins[0], a["alpha"] * np.expm1(ins[0])).astype(F32)
MEANINGS["ttnn.celu"] = lambda ins, w, a: (np.maximum(ins[0], 0) + np.minimum(
    0, a["alpha"] * np.expm1(ins[0] / a["alpha"]))).astype(F32)
MEANINGS["ttnn.selu"] = lambda ins, w, a: (a["scale"] * np.where(ins[0] > 0, ins[0], a["alpha"] * np.expm1(ins[0]))
                                           ).astype(F32)
MEANINGS["ttnn.leaky_relu"] = lambda ins, w, a: np.where(ins[0] >= 0, ins[0], ins[0] * a["negative_slope"]).astype(F32)
MEANINGS["ttnn.pow"] = lambda ins, w, a: np.power(ins[0].astype(np.float64), a["exponent"]).astype(F32)
