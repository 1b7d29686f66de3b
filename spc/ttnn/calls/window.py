"""Calls that slide a window over an NHWC map: ``ttnn.conv2d``, ``ttnn.max_pool2d``,
``ttnn.avg_pool2d``, and ``ttnn.upsample``, which scales one. Their input is the flat
[1, 1, N*H*W, C] device form (upsample's [N, H, W, C], the same values); the arguments name N, H,
W and C."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from msgspec import Meta

from spc.ttnn.calls.definition import (
    ARCH,
    DEVICE,
    F32,
    Call,
    CallSpec,
    Count,
    F,
    Format,
    JsonObject,
    MemoryConfigKey,
    Pad,
    PadPair,
    Pair,
    Ref,
    ShapeError,
    Weight,
    define,
    memory_kwargs,
    numel,
    spell,
)
from spc.ttnn.configs import Activation, ComputeConfig, Conv2dConfig

_POOL = {"batch_size": Count, "input_h": Count, "input_w": Count, "channels": Count, "kernel_size": Pair,
         "stride": Pair, "padding": PadPair, "ceil_mode": bool}


def out_size(size: int, k: int, s: int, lo: int, hi: int, d: int = 1, ceil: bool = False) -> int:
    """Windows of ``k`` (stride ``s``, dilation ``d``) over ``size`` padded ``lo`` and ``hi``; with
    ``ceil``, the last window may not start in the right padding (ONNX, torch)."""
    span = size + lo + hi - d * (k - 1) - 1
    if span < 0:
        raise ShapeError(f"a window of {k} (dilation {d}) does not fit {size} + {lo + hi} padding")
    out = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= size + lo:
        out -= 1
    return out


def _nchw(x: np.ndarray, n: int, h: int, w: int) -> np.ndarray:
    return x.reshape(n, h, w, -1).transpose(0, 3, 1, 2)


def _flat(y: np.ndarray) -> np.ndarray:
    n, c, h, w = y.shape
    return np.ascontiguousarray(y.transpose(0, 2, 3, 1)).reshape(1, 1, n * h * w, c)


def _views(x: np.ndarray, k: tuple[int, int], s: tuple[int, int], d: tuple[int, int],
           out: tuple[int, int]) -> list[np.ndarray]:
    """The k[0] * k[1] shifted views of padded NCHW ``x`` that a window op combines."""
    rows = [slice(i * d[0], i * d[0] + s[0] * (out[0] - 1) + 1, s[0]) for i in range(k[0])]
    cols = [slice(j * d[1], j * d[1] + s[1] * (out[1] - 1) + 1, s[1]) for j in range(k[1])]
    return [x[:, :, r, c] for r in rows for c in cols]


# -- ttnn.conv2d ----------------------------------------------------------------------------------

def _conv_values(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    n, h, w, c, o, g = (a[k] for k in ("batch_size", "input_height", "input_width", "in_channels", "out_channels",
                                       "groups"))
    if numel(ins[0]) != n * h * w * c:
        raise ShapeError(f"reads {numel(ins[0])} values, not {n}x{h}x{w}x{c}")
    if c % g or o % g:
        raise ShapeError(f"{c} -> {o} channels in {g} groups")
    if not isinstance(a["conv_config"], Conv2dConfig):
        raise ShapeError("conv_config is not a Conv2dConfig")
    (kh, kw), (sh, sw), (pt, pb, pl, pr), (dh, dw) = a["kernel_size"], a["stride"], a["padding"], a["dilation"]
    want = (o, c // g, kh, kw)
    for key, (tensor, got) in weights.items():
        if key == "weight_tensor" and tuple(got.shape) != want:
            raise ShapeError(f"weight {tensor} is {list(got.shape)}, not {list(want)}")
        if key == "bias_tensor" and got.size != o:
            raise ShapeError(f"bias {tensor} holds {got.size} values for {o} channels")
    return n * out_size(h, kh, sh, pt, pb, dh) * out_size(w, kw, sw, pl, pr, dw) * o


def _conv_meaning(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    x = _nchw(ins[0], a["batch_size"], a["input_height"], a["input_width"])
    wt = np.asarray(weights["weight_tensor"], F32)
    top, bottom, left, right = a["padding"]
    (sh, sw), (dh, dw), groups = a["stride"], a["dilation"], int(a["groups"])
    o, ig, kh, kw = wt.shape
    n, _, h, w = x.shape
    oh, ow = out_size(h, kh, sh, top, bottom, dh), out_size(w, kw, sw, left, right, dw)
    xp = np.pad(x, [(0, 0), (0, 0), (top, bottom), (left, right)])
    cols = np.stack(_views(xp, (kh, kw), (sh, sw), (dh, dw), (oh, ow)), axis=2)  # [n, c, kh*kw, oh, ow]
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


def _conv_spelling(op: CallSpec) -> Call:
    a = op.args
    conv: Conv2dConfig = a["conv_config"]
    cc: ComputeConfig = a["compute_config"]
    config = {k: spell(v) for k, v in conv.ttnn_kwargs().items() if v is not None}
    compute = Call("ttnn.init_device_compute_kernel_config", (ARCH,),
                   {k: spell(v) for k, v in cc.ttnn_kwargs().items()})
    kwargs: dict[str, Any] = {"input_tensor": Ref(op.inputs[0]), "weight_tensor": Weight(op.weights["weight_tensor"])}
    if "bias_tensor" in op.weights:
        kwargs["bias_tensor"] = Weight(op.weights["bias_tensor"], bias=True)
    kwargs["device"] = DEVICE
    kwargs.update({k: v for k, v in a.items() if k not in ("conv_config", "compute_config", "slice_config", "dtype")})
    kwargs.update(dtype=spell(a["dtype"]), conv_config=Call("ttnn.Conv2dConfig", (), config),
                  compute_config=compute, return_weights_and_bias=True)
    if "slice_config" in a:
        kwargs["slice_config"] = spell(a["slice_config"])
    return Call("ttnn.conv2d", (), kwargs)


define(
    "ttnn.conv2d", _conv_spelling, _conv_meaning, _conv_values,
    args={"batch_size": Count, "input_height": Count, "input_width": Count, "in_channels": Count,
          "out_channels": Count, "kernel_size": Pair, "stride": Pair,
          "padding": Annotated[list[Pad], Meta(min_length=4, max_length=4)], "dilation": Pair,
          "groups": Count, "dtype": Format, "conv_config": JsonObject, "compute_config": JsonObject,
          "slice_config": JsonObject, "memory_config": MemoryConfigKey},
    required=frozenset({"batch_size", "input_height", "input_width", "in_channels", "out_channels",
                        "kernel_size", "stride", "padding", "dilation", "groups", "dtype", "conv_config",
                        "compute_config"}),
    weights=frozenset({"weight_tensor", "bias_tensor"}),
    tiled=True, stores=True, takes_bf16=True)


# -- ttnn.max_pool2d, ttnn.avg_pool2d -------------------------------------------------------------

def _pool_values(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    n, h, w, c = a["batch_size"], a["input_h"], a["input_w"], a["channels"]
    if numel(ins[0]) != n * h * w * c:
        raise ShapeError(f"reads {numel(ins[0])} values, not {n}x{h}x{w}x{c}")
    (kh, kw), (sh, sw), (ph, pw) = a["kernel_size"], a["stride"], a["padding"]
    dh, dw = a.get("dilation", [1, 1])
    if 2 * ph > kh or 2 * pw > kw:
        raise ShapeError(f"padding {a['padding']} is more than half the window {a['kernel_size']}")
    ceil = a["ceil_mode"]
    return n * out_size(h, kh, sh, ph, ph, dh, ceil) * out_size(w, kw, sw, pw, pw, dw, ceil) * c


def _pool(x: np.ndarray, a: dict[str, Any], fill: float) -> tuple[list[np.ndarray], tuple[int, int]]:
    (kh, kw), (sh, sw), (ph, pw) = a["kernel_size"], a["stride"], a["padding"]
    dh, dw = a.get("dilation", [1, 1])
    h, w = x.shape[2:]
    oh = out_size(h, kh, sh, ph, ph, dh, a["ceil_mode"])
    ow = out_size(w, kw, sw, pw, pw, dw, a["ceil_mode"])
    # the right edge pads as far as ceil_mode's last window reaches
    extra_h = max(0, (oh - 1) * sh + (kh - 1) * dh + 1 - (h + 2 * ph))
    extra_w = max(0, (ow - 1) * sw + (kw - 1) * dw + 1 - (w + 2 * pw))
    xp = np.pad(x, [(0, 0), (0, 0), (ph, ph + extra_h), (pw, pw + extra_w)], constant_values=fill)
    return _views(xp, (kh, kw), (sh, sw), (dh, dw), (oh, ow)), (oh, ow)


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


def _max_pool_meaning(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    x = _nchw(ins[0], a["batch_size"], a["input_h"], a["input_w"])
    (kh, kw), (ph, pw) = a["kernel_size"], a["padding"]
    if list(a["stride"]) == [1, 1] and list(a.get("dilation", [1, 1])) == [1, 1] and not a["ceil_mode"]:
        # a stride-1 window max is separable, and a window of k is two overlapping ones of 2^j <= k
        return _flat(_window_max(_window_max(x, 3, kw, pw), 2, kh, ph))
    views, _ = _pool(x, a, -np.inf)
    return _flat(np.maximum.reduce(views))


def _avg_pool_meaning(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
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


def _max_pool_spelling(op: CallSpec) -> Call:
    a = op.args
    keys = ("batch_size", "input_h", "input_w", "channels", "kernel_size", "stride", "padding", "dilation", "ceil_mode")
    slices = {"dram_slice_config": spell(a["slice_config"])} if "slice_config" in a else {}
    return Call(op.op, (Ref(op.inputs[0]),), {k: a[k] for k in keys} | memory_kwargs(a) | slices)


def _avg_pool_spelling(op: CallSpec) -> Call:
    keys = ("batch_size", "input_h", "input_w", "channels", "kernel_size", "stride", "padding", "ceil_mode",
            "count_include_pad")
    return Call(op.op, (Ref(op.inputs[0]),), {k: op.args[k] for k in keys})


define("ttnn.max_pool2d", _max_pool_spelling, _max_pool_meaning, _pool_values,
       args={**_POOL, "dilation": Pair, "slice_config": JsonObject, "memory_config": MemoryConfigKey},
       required=frozenset({*_POOL, "dilation"}), tiled=False, moves_values=True, takes_bf16=True)
define("ttnn.avg_pool2d", _avg_pool_spelling, _avg_pool_meaning, _pool_values,
       args={**_POOL, "count_include_pad": bool}, required=frozenset({*_POOL, "count_include_pad"}), tiled=False)


# -- ttnn.upsample ----------------------------------------------------------------------------------

_UPSAMPLE = {"batch_size": Count, "input_h": Count, "input_w": Count, "channels": Count, "scale_factor": Pair,
             "mode": Literal["nearest", "bilinear"]}


def _upsample_values(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    n, h, w, c = a["batch_size"], a["input_h"], a["input_w"], a["channels"]
    if numel(ins[0]) != n * h * w * c:
        raise ShapeError(f"reads {numel(ins[0])} values, not {n}x{h}x{w}x{c}")
    sh, sw = a["scale_factor"]
    return n * h * sh * w * sw * c


def _linear_taps(size: int, scale: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Half-pixel linear interpolation along one axis (torch's align_corners=False, ONNX's
    half_pixel): each output's two source indices and the second's weight."""
    src = np.maximum((np.arange(size * scale) + 0.5) / scale - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), size - 1)
    return i0, np.minimum(i0 + 1, size - 1), (src - i0).astype(F32)


def _upsample_meaning(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    n, h, w = a["batch_size"], a["input_h"], a["input_w"]
    x = ins[0].reshape(n, h, w, -1).astype(F32)
    sh, sw = a["scale_factor"]
    if a["mode"] == "nearest":
        y = np.repeat(np.repeat(x, sh, axis=1), sw, axis=2)
    else:
        for axis, size, s in ((1, h, sh), (2, w, sw)):
            i0, i1, t = _linear_taps(size, s)
            shape = [1, 1, 1, 1]
            shape[axis] = -1
            t = t.reshape(shape)
            x = np.take(x, i0, axis=axis) * (1 - t) + np.take(x, i1, axis=axis) * t
        y = x
    return np.ascontiguousarray(y, dtype=F32)


def _upsample_emulation(ins: list[Any], weights: dict[str, Any], a: dict[str, Any]) -> Any:
    x = ins[0].reshape(a["batch_size"], a["input_h"], a["input_w"], -1).permute(0, 3, 1, 2)
    y = F.interpolate(x, scale_factor=tuple(a["scale_factor"]), mode=a["mode"])
    return y.permute(0, 2, 3, 1).contiguous()


define("ttnn.upsample",
       lambda op: Call(op.op, (Ref(op.inputs[0]), list(op.args["scale_factor"])),
                       {"mode": op.args["mode"]} | memory_kwargs(op.args)),
       _upsample_meaning, _upsample_values, args={**_UPSAMPLE, "memory_config": MemoryConfigKey},
       required=frozenset(_UPSAMPLE), tiled=False, emulate=_upsample_emulation)
