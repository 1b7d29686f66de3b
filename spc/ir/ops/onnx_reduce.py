"""ONNX ops that reduce along axes: the softmax family (Softmax, LogSoftmax, Hardmax), the
reductions (ReduceSum, ReduceMean, ..., ReduceLogSumExp) and ArgMax, ArgMin.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from spc.ir.graph import Value
from spc.ir.ops import register
from spc.ir.ops.infer import const, norm_axis, same_type
from spc.ir.ops.operands import A, D, Types, _in, _opt, _work, _x
from spc.ir.types import DType, TensorType

# conformance cases spc refuses on purpose (frontend/conformance.py): case name -> why
_RUNTIME_AXES = ("the reduction axes are a run-time graph input, so the intermediate ReduceSum result has no shape "
                 "at import (ONNX infers none) and spc types every value when it compiles; a model's reduction axes "
                 "are constants (the single-node cases, whose output is typed by the graph, pass)")
CONFORMANCE_EXCEPTIONS: dict[str, str] = {
    **{f"test_reduce_l2_{v}_expanded": _RUNTIME_AXES for v in (
        "do_not_keepdims_example", "do_not_keepdims_random", "empty_set", "keep_dims_example", "keep_dims_random",
        "negative_axes_keep_dims_example", "negative_axes_keep_dims_random")},
    **{f"test_reduce_log_sum_{v}_expanded": _RUNTIME_AXES for v in ("asc_axes", "desc_axes", "empty_set",
                                                                      "negative_axes")},
}


# -- softmax family ---------------------------------------------------------------------------
# the softmax family computes in the input's float type (float16 too: ONNX's own results round each step there)
def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    x = np.asarray(x)
    e = x - x.max(axis=axis, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=axis, keepdims=True)
    return e


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def _hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    y = np.zeros_like(x)
    if x.size:
        np.put_along_axis(y, np.expand_dims(np.argmax(x, axis=axis), axis), 1, axis=axis)
    return y


def _softmax_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    if since < 13:  # opset < 13 coerces the input to 2-D at ``axis`` (default 1) and runs over the flattened tail
        return {**attrs, "axis": int(attrs.get("axis", 1)), "coerce_2d": 1}
    return attrs


def _softmax_like(name: str, fn: Callable[[np.ndarray, int], np.ndarray]) -> None:
    def run(ins: A, attrs: D) -> list[np.ndarray]:
        """Over ``axis`` (default -1); with ``coerce_2d = 1`` (opset < 13) over all axes from ``axis`` on."""
        x = np.asarray(ins[0])
        axis = norm_axis(int(attrs.get("axis", -1)), x.ndim)
        if attrs.get("coerce_2d"):
            flat = x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
            return [fn(flat, 1).reshape(x.shape).astype(x.dtype)]
        return [fn(x, axis).astype(x.dtype)]

    def infer(ins: list[Value | None], attrs: D) -> Types:
        norm_axis(int(attrs.get("axis", -1)), _x(ins).type.rank)  # an axis beyond the rank: refused here
        return same_type(ins, attrs)

    register(f"onnx.{name}", infer, arity=(1, 1), canonicalize=_softmax_canon)(run)


_softmax_like("Softmax", softmax)
_softmax_like("LogSoftmax", _log_softmax)
_softmax_like("Hardmax", _hardmax)


# -- reductions -------------------------------------------------------------------------------
def _axes_value(ins: list[Value | None], attrs: D) -> list[int] | None:
    """Reduction axes from the attribute (older opsets) or the input; None when not known here."""
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    v = _in(ins, 1)
    if v is None:
        return []
    data = const(v)
    if data is None:  # an input typed [0] is empty whatever its value
        return [] if v.type.shape == (0,) else None
    return [int(a) for a in np.atleast_1d(data)]


def _reduce_axes(axes: list[int], rank: int, attrs: D) -> tuple[int, ...]:
    """Normalised axes. Empty axes with noop_with_empty_axes reduce over no axis: each element
    alone, so ReduceSumSquare still squares (as onnxruntime does)."""
    if not axes:
        return () if attrs.get("noop_with_empty_axes", 0) else tuple(range(rank))
    return tuple(sorted({norm_axis(a, rank) for a in axes}))


def _reduce_infer(ins: list[Value | None], attrs: D) -> Types:
    x = _x(ins)
    axes = _axes_value(ins, attrs)
    if axes is None:
        return None
    red = _reduce_axes(axes, x.type.rank, attrs)
    keep = attrs.get("keepdims", 1)
    return [x.type.with_shape(tuple(1 if i in red else d for i, d in enumerate(x.type.shape) if keep or i not in red))]


def _fsum(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    return x.sum(axes, keepdims=keep, dtype=_work(x.dtype) if x.dtype.kind == "f" else None)


def _mean(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    # ONNX leaves the mean of an empty set undefined; 0 as onnxruntime gives, not numpy's nan
    n = math.prod(x.shape[a] for a in axes)
    return _fsum(x.astype(_work(x.dtype)), axes, keep) / max(n, 1)


def _logsumexp(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    xw = x.astype(_work(x.dtype))
    m = xw.max(axes, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)  # an empty or all -inf set: no shift
    y = np.log(np.exp(xw - m).sum(axes, keepdims=True)) + m
    return y if keep else np.squeeze(y, axes)


def _extreme(fn: Callable[..., np.ndarray], lowest: bool) -> Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]:
    def run(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
        # the identity of an empty set: the type's lowest value for max, highest for min
        if x.dtype.kind == "b":
            ident: Any = not lowest
        elif x.dtype.kind == "f":
            ident = -np.inf if lowest else np.inf
        else:
            ident = np.iinfo(x.dtype).min if lowest else np.iinfo(x.dtype).max
        return fn(x, axes, keepdims=keep, initial=ident)

    return run


_REDUCTIONS: dict[str, Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]] = {
    "ReduceSum": _fsum,
    "ReduceMean": lambda x, axes, keep: _mean(x, axes, keep),
    "ReduceMax": _extreme(np.max, True),
    "ReduceMin": _extreme(np.min, False),
    "ReduceProd": lambda x, axes, keep: x.prod(axes, keepdims=keep,
                                                dtype=_work(x.dtype) if x.dtype.kind == "f" else None),
    "ReduceL1": lambda x, axes, keep: _fsum(np.abs(x), axes, keep),
    "ReduceL2": lambda x, axes, keep: np.sqrt(_fsum(np.square(x.astype(_work(x.dtype))), axes, keep)),
    "ReduceSumSquare": lambda x, axes, keep: _fsum(x * x, axes, keep),
    "ReduceLogSum": lambda x, axes, keep: np.log(_fsum(x.astype(_work(x.dtype)), axes, keep)),
    "ReduceLogSumExp": _logsumexp,
}


def _reduction(name: str, fn: Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]) -> None:
    def run(ins: A, attrs: D) -> list[np.ndarray]:
        """Over ``axes`` (attribute, or input 1 from opset 13/18); none given: all axes, or the
        identity with noop_with_empty_axes. An empty set gives the reduction's identity."""
        x = np.asarray(ins[0])
        if "axes" in attrs:
            axes = [int(a) for a in attrs["axes"]]
        else:
            a = _opt(ins, 1)
            axes = [] if a is None else [int(v) for v in a.ravel()]
        red = _reduce_axes(axes, x.ndim, attrs)
        with np.errstate(divide="ignore", invalid="ignore"):
            y = fn(x, red, bool(attrs.get("keepdims", 1)))
        return [np.asarray(y).astype(x.dtype)]

    register(f"onnx.{name}", _reduce_infer, arity=(1, 2))(run)


for _name, _fn in _REDUCTIONS.items():
    _reduction(_name, _fn)


def _arg_infer(ins: list[Value | None], attrs: D) -> Types:
    x = _x(ins)
    axis = norm_axis(int(attrs.get("axis", 0)), x.type.rank)
    keep = attrs.get("keepdims", 1)
    return [TensorType(DType.I64, tuple(1 if i == axis else d for i, d in enumerate(x.type.shape)
                                        if keep or i != axis))]


def _arg(name: str, fn: Callable[..., np.ndarray]) -> None:
    def run(ins: A, attrs: D) -> list[np.ndarray]:
        x = np.asarray(ins[0])
        axis = norm_axis(int(attrs.get("axis", 0)), x.ndim)
        if attrs.get("select_last_index", 0):
            idx = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis)
        else:
            idx = fn(x, axis=axis)
        if attrs.get("keepdims", 1):
            idx = np.expand_dims(idx, axis)
        return [np.asarray(idx, np.int64)]

    register(f"onnx.{name}", _arg_infer, arity=(1, 1))(run)


_arg("ArgMax", np.argmax)
_arg("ArgMin", np.argmin)
