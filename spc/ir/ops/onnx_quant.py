"""ONNX's linear quantization: QuantizeLinear and DequantizeLinear (per tensor, per axis, blocked).

Integer targets only (int8, uint8, int16, uint16; DequantizeLinear also reads int32 biases):
float8/int4 element types are refused at import like any tensor of those types. A statically
quantized (QDQ) model carries its integers as constants and each activation as a
QuantizeLinear -> DequantizeLinear pair; passes/fold_qdq.py turns the pairs into float math the
device runs, and fold-constants dequantizes the weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spc.ir.graph import Value
from spc.ir.ops import register
from spc.ir.types import DType, TensorType

A = list[Any]
D = dict[str, Any]

RANGES: dict[DType, tuple[int, int]] = {DType.U8: (0, 255), DType.I8: (-128, 127), DType.U16: (0, 65535),
                                         DType.I16: (-32768, 32767)}
_DEQUANTIZABLE = (*RANGES, DType.I32)

CONFORMANCE_EXCEPTIONS: dict[str, str] = {}


def spread(p: np.ndarray, shape: tuple[int, ...], axis: int, block: int) -> np.ndarray:
    """A scale or zero point broadcastable to ``shape``: a scalar, one per index of ``axis``, or one
    per ``block`` consecutive indices of ``axis`` (the last block may be short)."""
    if p.ndim == 0 or (p.size == 1 and not block):
        return p.reshape(())
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis < len(shape):
        raise ValueError(f"axis {axis} is outside a rank-{len(shape)} input")
    if not block:
        if p.ndim != 1 or p.size != shape[axis]:
            raise ValueError(f"a per-axis scale of shape {list(p.shape)} for axis {axis} of {list(shape)}")
        dims = [1] * len(shape)
        dims[axis] = p.size
        return p.reshape(dims)
    if p.ndim != len(shape) or -(-shape[axis] // block) != p.shape[axis] or any(
            a != b for i, (a, b) in enumerate(zip(p.shape, shape)) if i != axis):
        raise ValueError(f"a blocked scale of shape {list(p.shape)} for {list(shape)}, block {block} on axis {axis}")
    return np.repeat(p, block, axis=axis).take(range(shape[axis]), axis=axis)


def _canon(defaults: D) -> Any:
    def canon(attrs: D, n_inputs: int, n_outputs: int, since: int) -> D:
        out = {**defaults, **attrs}
        if int(out.get("block_size", 0)) < 0:
            raise ValueError("block_size must not be negative")
        for key in ("output_dtype", "precision"):
            if out.get(key):
                DType.from_onnx(int(out[key]))  # TypeError naming an element type spc does not take
        return out

    return canon


def _quant_dtype(ins: list[Any], attrs: D, of_zero: DType | None) -> DType:
    given = int(attrs.get("output_dtype", 0))
    if of_zero is not None:
        if given and DType.from_onnx(given) is not of_zero:
            raise ValueError(f"output_dtype {DType.from_onnx(given).value} differs from the zero point's "
                             f"{of_zero.value}")
        out = of_zero
    else:
        out = DType.from_onnx(given) if given else DType.U8
    if out not in RANGES:
        raise TypeError(f"quantizing to {out.value} is not supported (int8, uint8, int16, uint16)")
    return out


def _check_params(ins: list[Value | None], attrs: D) -> None:
    """The scale's (and zero point's) shape against the input's, when both are known: a ValueError
    the importer reports with the node."""
    x = ins[0]
    assert x is not None
    for p in ins[1:3]:
        if p is not None and p.type.is_static and x.type.is_static:
            spread(np.zeros(p.type.static_shape, np.float32), tuple(x.type.static_shape), int(attrs.get("axis", 1)),
                   int(attrs.get("block_size", 0)))


def _quantize_infer(ins: list[Value | None], attrs: D) -> list[TensorType]:
    assert ins[0] is not None
    _check_params(ins, attrs)
    zero = ins[2] if len(ins) > 2 else None
    return [ins[0].type.with_dtype(_quant_dtype(ins, attrs, zero.type.dtype if zero is not None else None))]


@register("onnx.QuantizeLinear", _quantize_infer, arity=(2, 3),
          canonicalize=_canon({"axis": 1, "block_size": 0, "output_dtype": 0}))
def _quantize(ins: A, attrs: D) -> list[np.ndarray]:
    """saturate(rint(x / scale) + zero_point): halves round to even, the result clamped to the type's
    range; ``precision`` (opset 23) is the type the division runs in."""
    x, scale = np.asarray(ins[0]), np.asarray(ins[1])
    zero = np.asarray(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    out = _quant_dtype(ins, attrs, DType.from_numpy(zero.dtype) if zero is not None else None)
    axis, block = int(attrs.get("axis", 1)), int(attrs.get("block_size", 0))
    s = spread(scale, x.shape, axis, block)
    precision = int(attrs.get("precision", 0))
    with np.errstate(all="ignore"):
        if precision:
            work = DType.from_onnx(precision).host_numpy
            q = x.astype(work) / s.astype(work)
        else:
            q = x / s
        q = np.rint(q).astype(np.float64)
        if zero is not None:
            q = q + spread(zero, x.shape, axis, block).astype(np.float64)
    lo, hi = RANGES[out]
    return [np.clip(np.nan_to_num(q, nan=0.0), lo, hi).astype(out.numpy)]


def _dequantize_dtype(ins: list[Any], attrs: D, scale: DType) -> DType:
    given = int(attrs.get("output_dtype", 0))
    return DType.from_onnx(given) if given else scale


def _dequantize_infer(ins: list[Value | None], attrs: D) -> list[TensorType]:
    assert ins[0] is not None and ins[1] is not None
    _check_params(ins, attrs)
    return [ins[0].type.with_dtype(_dequantize_dtype(ins, attrs, ins[1].type.dtype))]


@register("onnx.DequantizeLinear", _dequantize_infer, arity=(2, 3),
          canonicalize=_canon({"axis": 1, "block_size": 0, "output_dtype": 0}))
def _dequantize(ins: A, attrs: D) -> list[np.ndarray]:
    """(x - zero_point) * scale, in float32, then to the scale's type (or ``output_dtype``)."""
    x, scale = np.asarray(ins[0]), np.asarray(ins[1])
    if DType.from_numpy(x.dtype) not in _DEQUANTIZABLE:
        raise TypeError(f"dequantizing {x.dtype} is not supported (int8, uint8, int16, uint16, int32)")
    axis, block = int(attrs.get("axis", 1)), int(attrs.get("block_size", 0))
    dx = x.astype(np.float32)
    if len(ins) > 2 and ins[2] is not None:
        zero = np.asarray(ins[2])
        if zero.dtype != x.dtype:
            raise TypeError(f"the zero point is {zero.dtype}, the input {x.dtype}")
        dx = dx - spread(zero, x.shape, axis, block).astype(np.float32)
    y = dx * spread(scale, x.shape, axis, block).astype(np.float32)
    out = _dequantize_dtype(ins, attrs, DType.from_numpy(scale.dtype))
    return [y.astype(out.host_numpy)]
