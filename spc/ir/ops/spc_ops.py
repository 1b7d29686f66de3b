"""The spc dialect: the fused ops that the passes create and the lowering knows.

Each evaluator is the op's reference semantics in float32 numpy. The fusion passes prove a
candidate subgraph equal to these references before rewriting (see passes/semantic_match.py),
and the emulator's device numerics are tested against them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from spc.ir.graph import Value
from spc.ir.ops import register
from spc.ir.ops.infer import same_type
from spc.ir.ops.onnx_conv import conv2d_nchw
from spc.ir.ops.onnx_pool import max_pool_nchw
from spc.ir.ops.onnx_reduce import softmax
from spc.ir.ops.onnx_resample import depth_to_space
from spc.ir.types import DType, TensorType
from spc.ttnn.layout import Form, layout_of

A = list[Any]
D = dict[str, Any]


def _conv2d_infer(ins: list[Value | None], attrs: D) -> list[TensorType] | None:
    from spc.ir.ops import get  # the registry imports this module to register its ops

    return get("onnx.Conv").infer_types(ins[:3], attrs)


@register("spc.Conv2d", _conv2d_infer, arity=(2, 4))
def _conv2d(ins: A, attrs: D) -> list[np.ndarray]:
    """conv(x, w) * scale + bias, then the activation (``"relu" | "none"``): the scale per output
    channel is optional (a quantized model's, with integer weights), 1 when absent."""
    x, w = np.asarray(ins[0]), np.asarray(ins[1])
    b = np.asarray(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    scale = np.asarray(ins[3]) if len(ins) > 3 and ins[3] is not None else None
    a = attrs
    if scale is None:
        y = conv2d_nchw(x, w, b, a["strides"], a["pads"], a["dilations"], a["group"])
    else:
        y = conv2d_nchw(x, w, None, a["strides"], a["pads"], a["dilations"], a["group"])
        y = (y * scale.reshape(1, -1, 1, 1)).astype(y.dtype)
        if b is not None:
            y = (y + b.reshape(1, -1, 1, 1)).astype(y.dtype)
    if attrs["activation"] == "relu":
        y = np.maximum(y, 0)
    return [y]


def score_fold(logits: np.ndarray, cell: int) -> np.ndarray:
    """softmax over channels, drop the last ("dustbin") channel, depth-to-space by ``cell``.

    ``logits`` is (N, cell*cell + 1, h, w); the result is (N, 1, h*cell, w*cell) where pixel
    (y*cell + i, x*cell + j) takes channel i*cell + j (DCR order, as the HF model folds).
    """
    probs = softmax(logits.astype(np.float32), axis=1)[:, :-1]
    return depth_to_space(probs, cell, "DCR")


def _score_fold_infer(ins: list[Value | None], attrs: D) -> list[TensorType]:
    x = ins[0]
    assert x is not None
    return [x.type.with_shape(tuple(attrs["out_shape"]))]


@register("spc.ScoreFold", _score_fold_infer, arity=(1, 1))
def _score_fold(ins: A, attrs: D) -> list[np.ndarray]:
    """Keypoint score map at full resolution from the detector logits; ``out_shape`` keeps the
    source model's spelling of the result ((N, H, W) for the HF model)."""
    return [score_fold(np.asarray(ins[0]), int(attrs["cell"])).reshape(attrs["out_shape"])]


def window_max(x: np.ndarray, radius: int) -> np.ndarray:
    """Max over a (2r+1)^2 window, stride 1, -inf padding, on the last two axes."""
    k = 2 * radius + 1
    return max_pool_nchw(x, (k, k), (1, 1), (radius,) * 4)


def nms(scores: np.ndarray, radius: int, iterations: int) -> np.ndarray:
    """Non-maximum suppression as SuperPoint defines it (HF ``simple_nms`` has iterations=2).

    A pixel survives if it equals its window maximum; each further iteration suppresses the
    windows of the survivors and admits new local maxima among what is left.
    """
    return nms_rounds(scores, radius, iterations)[-1]


def nms_rounds(scores: np.ndarray, radius: int, iterations: int) -> list[np.ndarray]:
    """:func:`nms` after 0, 1, ... ``iterations`` rounds: each round continues the one before."""
    zeros = np.zeros_like(scores)
    max_mask = scores == window_max(scores, radius)
    out = [np.where(max_mask, scores, zeros)]
    for _ in range(iterations):
        supp_mask = window_max(max_mask.astype(scores.dtype), radius) > 0
        supp_scores = np.where(supp_mask, zeros, scores)
        new_max = supp_scores == window_max(supp_scores, radius)
        max_mask = max_mask | (new_max & ~supp_mask)
        out.append(np.where(max_mask, scores, zeros))
    return out


@register("spc.Nms", same_type, arity=(1, 1))
def _nms(ins: A, attrs: D) -> list[np.ndarray]:
    """Keep a score where it is the maximum of its window (``radius``), else 0."""
    return [nms(np.asarray(ins[0]), int(attrs["radius"]), int(attrs["iterations"]))]


def l2_normalize(x: np.ndarray, axis: int, eps: float) -> np.ndarray:
    """x / max(||x||, eps); with eps = 0 a zero vector gives NaN, as x / ||x|| does."""
    norm = np.sqrt(np.sum(np.square(x.astype(np.float64)), axis=axis, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (x / np.maximum(norm, eps)).astype(x.dtype)


@register("spc.L2Norm", same_type, arity=(1, 1))
def _l2norm(ins: A, attrs: D) -> list[np.ndarray]:
    """x / max(||x||_2 over ``axis``, ``eps``), as torch.nn.functional.normalize."""
    return [l2_normalize(np.asarray(ins[0]), int(attrs["axis"]), float(attrs["eps"]))]


def fake_quantize(x: np.ndarray, scale: float, lo: float, hi: float, unit: float) -> np.ndarray:
    """clip(rint(x / scale), lo, hi) * unit in ``x``'s type: the integer steps (``unit`` 1) or the
    value on its quantization grid (``unit`` = ``scale``)."""
    s = np.asarray(scale, x.dtype)
    with np.errstate(all="ignore"):
        steps = np.clip(np.rint(x / s), np.asarray(lo, x.dtype), np.asarray(hi, x.dtype))
        return (steps * np.asarray(unit, x.dtype)).astype(x.dtype)


@register("spc.FakeQuant", same_type, arity=(1, 1))
def _fake_quant(ins: A, attrs: D) -> list[np.ndarray]:
    """QuantizeLinear then DequantizeLinear with one scale and zero point z, in float: ``lo`` and
    ``hi`` are the integer type's bounds less z (passes/fold_qdq.py)."""
    a = attrs
    return [fake_quantize(np.asarray(ins[0]), float(a["scale"]), float(a["lo"]), float(a["hi"]), float(a["unit"]))]


def as_ir_value(y: np.ndarray, form: str, shape: list[int], dtype: str, copy: bool = True) -> np.ndarray:
    """A tensor the device handed back (``y``, in its device shape and ``form``) as the IR value of
    ``shape`` and element type ``dtype`` it holds: 0/1 as booleans, bfloat16 as float32; without
    ``copy`` possibly a strided view of ``y``."""
    return ir_typed(layout_of(Form(form), shape).from_device(y, shape, copy), dtype)


def ir_typed(x: np.ndarray, dtype: str) -> np.ndarray:
    """Device values as the IR element type ``dtype``: 0/1 as booleans, bfloat16 as float32."""
    t = DType(dtype)
    if t is DType.BOOL:
        return x != 0
    return x.astype(np.float32 if t is DType.BF16 else t.numpy, copy=False)


def _parts(attrs: D) -> list[tuple[int, int, list[int], list[int], str, str]]:
    """spc.Unpack's parts, one per output: its rows (a, b), device shape, IR shape, form, type."""
    keys = ("rows", "device_shapes", "shapes", "forms", "dtypes")
    table = [list(attrs[k]) for k in keys]
    if len({len(c) for c in table}) != 1:
        raise ValueError(f"spc.Unpack: {', '.join(keys)} differ in length")
    return [(int(r[0]), int(r[1]), [int(d) for d in ds], [int(d) for d in s], str(f), str(t))
            for r, ds, s, f, t in zip(*table)]


def _unpack_infer(ins: list[Value | None], attrs: D) -> list[TensorType]:
    parts = _parts(attrs)
    x = ins[0]
    if x is not None and x.type.is_static:
        _width(int(np.prod(x.type.static_shape)), parts)
    return [TensorType(DType(dtype), tuple(shape)) for *_, shape, _, dtype in parts]


def _width(size: int, parts: list[tuple[int, int, list[int], list[int], str, str]]) -> int:
    """The width of the rows a read of ``size`` values holds, cut into ``parts`` (ValueError where
    they do not cut it: rows out of order, past the end, or not holding their tensor)."""
    total = max((b for _, b, *_ in parts), default=0)
    if total == 0 or size % total or any(not 0 <= a < b for a, b, *_ in parts):
        raise ValueError(f"rows {[[a, b] for a, b, *_ in parts]} do not cut {size} values")
    width = size // total
    for a, b, device_shape, *_ in parts:
        if (b - a) * width != math.prod(device_shape):
            raise ValueError(f"rows {a}..{b} of {width} values do not hold a {device_shape} tensor")
    return width


@register("spc.Unpack", _unpack_infer, arity=(1, 1))
def _unpack(ins: A, attrs: D) -> list[np.ndarray]:
    """The tensors one device read-back carries, one after another (lowering/read_once.py): each
    its rows of the read, in its device shape and form, as the IR value it holds (views, no copy)."""
    parts = _parts(attrs)
    x = np.asarray(ins[0]).reshape(-1)
    width = _width(x.size, parts)
    return [as_ir_value(x[a * width:b * width].reshape(device_shape), form, shape, dtype)
            for a, b, device_shape, shape, form, dtype in parts]


def _pack_infer(ins: list[Value | None], attrs: D) -> list[TensorType]:
    parts, width = _parts(attrs), int(attrs["width"])
    if len(parts) != len(ins) or width < 1:
        raise ValueError(f"spc.Pack: {len(ins)} inputs, {len(parts)} parts, width {width}")
    for (a, b, device_shape, *_), x in zip(parts, ins):
        held = x is None or not x.type.is_static or math.prod(x.type.static_shape) == math.prod(device_shape)
        if (b - a) * width < math.prod(device_shape) or not held:
            raise ValueError(f"spc.Pack: rows {a}..{b} of {width} values do not hold a {device_shape} tensor")
    return [TensorType(DType.F32, (1, 1, max(b for _, b, *_ in parts), width))]


@register("spc.Pack", _pack_infer, arity=(1, 64))
def _pack(ins: A, attrs: D) -> list[np.ndarray]:
    """The device inputs one upload carries (lowering/upload_once.py): each in its device layout,
    flattened, from its first row (``rows``) of ``width`` values, the rest of its last row zeros."""
    parts, width = _parts(attrs), int(attrs["width"])
    out = np.zeros((1, 1, max(b for _, b, *_ in parts), width), np.float32)
    flat = out.reshape(-1)
    for (a, _, _, shape, form, _), x in zip(parts, ins):
        y = layout_of(Form(form), shape).to_device(np.asarray(x, np.float32))
        flat[a * width:a * width + y.size] = y.reshape(-1)
    return [out]
