"""ONNX ops whose result at an entry depends on its position along axes: CumSum (a running sum),
ReverseSequence (each batch entry's first steps reversed) and Trilu (a triangle of the last two
axes).

Every evaluator is vectorised numpy and returns exactly ONNX's element type and shape.
"""

from __future__ import annotations

import numpy as np

from spc.ir.ops import register
from spc.ir.ops.infer import norm_axis
from spc.ir.ops.operands import A, D, _arr, _in, _scalar, _type

# conformance cases spc refuses on purpose (frontend/conformance.py): case name -> why
CONFORMANCE_EXCEPTIONS: dict[str, str] = {}


@register("onnx.CumSum", lambda ins, attrs: [_type(ins, 0)], arity=(2, 2))
def _cumsum(ins: A, attrs: D) -> list[np.ndarray]:
    """Running sum along the (input) axis; exclusive leaves the current entry out, reverse runs backwards."""
    x = _arr(ins[0])
    axis = norm_axis(int(_scalar(ins[1])), x.ndim)
    v = np.moveaxis(x, axis, -1)
    if attrs.get("reverse", 0):
        v = v[..., ::-1]
    s = np.cumsum(v, axis=-1, dtype=x.dtype)  # in the input's type, as ONNX accumulates
    if attrs.get("exclusive", 0):
        s = np.concatenate([np.zeros_like(s[..., :1]), s[..., :-1]], axis=-1)
    if attrs.get("reverse", 0):
        s = s[..., ::-1]
    return [np.ascontiguousarray(np.moveaxis(s, -1, axis))]


@register("onnx.Trilu", lambda ins, attrs: [_type(ins, 0)], arity=(1, 2))
def _trilu(ins: A, attrs: D) -> list[np.ndarray]:
    """Upper (upper=1) or lower triangle of the last two axes from diagonal k; the rest zero."""
    x = _arr(ins[0])
    k = _in(ins, 1)
    k = 0 if k is None else int(_scalar(k))
    return [np.triu(x, k) if attrs.get("upper", 1) else np.tril(x, k)]


@register("onnx.ReverseSequence", lambda ins, attrs: [_type(ins, 0)], arity=(2, 2))
def _reverse_sequence(ins: A, attrs: D) -> list[np.ndarray]:
    """Reverse the first seq_lens[b] steps along time_axis of each batch entry b; later steps stay."""
    x, lens = _arr(ins[0]), _arr(ins[1]).astype(np.int64, copy=False)
    ta, ba = int(attrs.get("time_axis", 0)), int(attrs.get("batch_axis", 1))
    if {ta, ba} != {0, 1}:
        raise ValueError(f"ReverseSequence: time_axis={ta}, batch_axis={ba} (must be 0 and 1)")
    v = np.moveaxis(x, (ba, ta), (0, 1))  # (batch, time, ...)
    t = np.arange(v.shape[1])
    src = np.where(t < lens[:, None], lens[:, None] - 1 - t, t)
    out = np.take_along_axis(v, src.reshape(src.shape + (1,) * (v.ndim - 2)), axis=1)
    return [np.ascontiguousarray(np.moveaxis(out, (0, 1), (ba, ta)))]
