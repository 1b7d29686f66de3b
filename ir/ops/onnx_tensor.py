"""ONNX element-wise, logical and shape ops: numpy semantics and type inference."""

from __future__ import annotations

from typing import Any

import numpy as np

from spc.ir.graph import Value
from spc.ir.ops import register
from spc.ir.ops.infer import axes_from, broadcast, const, elementwise, norm_axis, same_type
from spc.ir.types import DType, TensorType

A = list[Any]
D = dict[str, Any]


def _arr(x: Any) -> np.ndarray:
    return np.asarray(x)


# -- element-wise arithmetic ------------------------------------------------------------------
def _binary(name: str, fn) -> None:
    register(f"onnx.{name}", elementwise(), arity=(2, 2))(
        lambda ins, attrs: [_arr(fn(_arr(ins[0]), _arr(ins[1]))).astype(_arr(ins[0]).dtype, copy=False)])


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        return np.trunc(a / b).astype(a.dtype)  # ONNX integer Div truncates toward zero
    return a / b


_binary("Add", np.add)
_binary("Sub", np.subtract)
_binary("Mul", np.multiply)
_binary("Div", _int_div)
_binary("Pow", np.power)


@register("onnx.Max", elementwise(), arity=(1, 99))
def _max(ins: A, attrs: D) -> list[np.ndarray]:
    out = _arr(ins[0])
    for x in ins[1:]:
        out = np.maximum(out, x)
    return [out]


@register("onnx.Min", elementwise(), arity=(1, 99))
def _min(ins: A, attrs: D) -> list[np.ndarray]:
    out = _arr(ins[0])
    for x in ins[1:]:
        out = np.minimum(out, x)
    return [out]


def _compare(name: str, fn) -> None:
    register(f"onnx.{name}", elementwise(DType.BOOL), arity=(2, 2))(
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


def _unary(name: str, fn) -> None:
    register(f"onnx.{name}", same_type, arity=(1, 1))(
        lambda ins, attrs: [_arr(fn(_arr(ins[0]))).astype(_arr(ins[0]).dtype, copy=False)])


_unary("Relu", lambda x: np.maximum(x, 0))
_unary("Neg", np.negative)
_unary("Abs", np.abs)
_unary("Sqrt", np.sqrt)
_unary("Exp", np.exp)
_unary("Log", np.log)
_unary("Reciprocal", np.reciprocal)
_unary("Floor", np.floor)
_unary("Ceil", np.ceil)
_unary("Sigmoid", lambda x: 1.0 / (1.0 + np.exp(-x)))
_unary("Identity", lambda x: x)


@register("onnx.Dropout", lambda ins, attrs: [ins[0].type], arity=(1, 3))
def _dropout(ins: A, attrs: D) -> list[np.ndarray]:
    """Inference mode: identity."""
    return [_arr(ins[0])]


@register("onnx.Where", elementwise(), arity=(3, 3))
def _where(ins: A, attrs: D) -> list[np.ndarray]:
    return [np.where(ins[0], ins[1], ins[2]).astype(_arr(ins[1]).dtype, copy=False)]


@register("onnx.Clip", same_type, arity=(1, 3))
def _clip(ins: A, attrs: D) -> list[np.ndarray]:
    x = _arr(ins[0])
    lo = ins[1] if len(ins) > 1 and ins[1] is not None else attrs.get("min")
    hi = ins[2] if len(ins) > 2 and ins[2] is not None else attrs.get("max")
    if lo is not None:
        x = np.maximum(x, lo)
    if hi is not None:
        x = np.minimum(x, hi)
    return [x.astype(_arr(ins[0]).dtype, copy=False)]


def _cast_infer(ins: list[Value | None], attrs: D) -> list[TensorType]:
    assert ins[0] is not None
    return [ins[0].type.with_dtype(DType.from_onnx(int(attrs["to"])))]


@register("onnx.Cast", _cast_infer, arity=(1, 1))
def _cast(ins: A, attrs: D) -> list[np.ndarray]:
    to = DType.from_onnx(int(attrs["to"]))
    return [_arr(ins[0]).astype(np.float32 if to is DType.BF16 else to.numpy)]


# -- constants and shapes ---------------------------------------------------------------------
def _constant_value(attrs: D) -> np.ndarray:
    for key, dtype in (("value", None), ("value_float", np.float32), ("value_int", np.int64),
                       ("value_floats", np.float32), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    raise ValueError(f"Constant without a supported value attribute: {sorted(attrs)}")


@register("onnx.Constant", lambda ins, attrs: [TensorType.of(_constant_value(attrs))], arity=(0, 0))
def _constant(ins: A, attrs: D) -> list[np.ndarray]:
    return [_constant_value(attrs)]


def _shape_infer(ins: list[Value | None], attrs: D) -> list[TensorType]:
    assert ins[0] is not None
    rank = ins[0].type.rank
    start, end = attrs.get("start", 0), attrs.get("end", rank)
    n = len(range(rank)[slice(start, end)])
    return [TensorType(DType.I64, (n,))]


@register("onnx.Shape", _shape_infer, arity=(1, 1))
def _shape(ins: A, attrs: D) -> list[np.ndarray]:
    shape = _arr(ins[0]).shape
    return [np.asarray(shape[slice(attrs.get("start", 0), attrs.get("end", len(shape)))], np.int64)]


@register("onnx.Size", lambda ins, attrs: [TensorType(DType.I64, ())], arity=(1, 1))
def _size(ins: A, attrs: D) -> list[np.ndarray]:
    return [np.asarray(_arr(ins[0]).size, np.int64)]


def _reshape_target(shape_in: tuple, target: np.ndarray, allowzero: int) -> tuple:
    out = [shape_in[i] if (d == 0 and not allowzero) else int(d) for i, d in enumerate(target)]
    if -1 in out:
        known = [d for d in out if d != -1]
        if not all(isinstance(d, int) for d in shape_in) or not all(isinstance(d, int) for d in known):
            return tuple(out)
        total = int(np.prod(shape_in))
        out[out.index(-1)] = total // max(int(np.prod(known)), 1)
    return tuple(out)


def _reshape_infer(ins: list[Value | None], attrs: D) -> list[TensorType] | None:
    assert ins[0] is not None
    target = const(ins[1])
    if target is None:
        return None
    shape = _reshape_target(ins[0].type.shape, target, attrs.get("allowzero", 0))
    if -1 in shape:
        return None
    return [ins[0].type.with_shape(shape)]


@register("onnx.Reshape", _reshape_infer, arity=(2, 2))
def _reshape(ins: A, attrs: D) -> list[np.ndarray]:
    x = _arr(ins[0])
    return [x.reshape(_reshape_target(x.shape, _arr(ins[1]), attrs.get("allowzero", 0)))]


def _flatten_infer(ins: list[Value | None], attrs: D) -> list[TensorType] | None:
    assert ins[0] is not None
    t = ins[0].type
    if not t.is_static:
        return None
    axis = _flatten_axis(attrs.get("axis", 1), t.rank)
    s = t.static_shape
    return [t.with_shape((int(np.prod(s[:axis])), int(np.prod(s[axis:]))))]


@register("onnx.Flatten", _flatten_infer, arity=(1, 1))
def _flatten(ins: A, attrs: D) -> list[np.ndarray]:
    x = _arr(ins[0])
    axis = _flatten_axis(attrs.get("axis", 1), x.ndim)
    return [x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))]


def _flatten_axis(axis: int, rank: int) -> int:
    """Flatten's axis may equal the rank (everything goes to the first dimension)."""
    if not -rank <= axis <= rank:
        raise ValueError(f"Flatten axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _squeeze_infer(ins: list[Value | None], attrs: D) -> list[TensorType] | None:
    assert ins[0] is not None
    t = ins[0].type
    axes = axes_from(ins, attrs, 1)
    if axes is None:
        return None
    axes = [norm_axis(a, t.rank) for a in axes] or [i for i, d in enumerate(t.shape) if d == 1]
    return [t.with_shape(tuple(d for i, d in enumerate(t.shape) if i not in axes))]


@register("onnx.Squeeze", _squeeze_infer, arity=(1, 2))
def _squeeze(ins: A, attrs: D) -> list[np.ndarray]:
    x = _arr(ins[0])
    axes = attrs.get("axes") or (list(np.atleast_1d(ins[1])) if len(ins) > 1 and ins[1] is not None else None)
    return [np.squeeze(x, axis=tuple(int(a) for a in axes) if axes else None)]


def _unsqueeze_infer(ins: list[Value | None], attrs: D) -> list[TensorType] | None:
    assert ins[0] is not None
    t = ins[0].type
    axes = axes_from(ins, attrs, 1)
    if axes is None:
        return None
    rank = t.rank + len(axes)
    axes = sorted(norm_axis(a, rank) for a in axes)
    shape = list(t.shape)
    for a in axes:
        shape.insert(a, 1)
    return [t.with_shape(tuple(shape))]


@register("onnx.Unsqueeze", _unsqueeze_infer, arity=(1, 2))
def _unsqueeze(ins: A, attrs: D) -> list[np.ndarray]:
    x = _arr(ins[0])
    axes = attrs.get("axes") or list(np.atleast_1d(ins[1]))
    rank = x.ndim + len(axes)
    for a in sorted(norm_axis(int(a), rank) for a in axes):
        x = np.expand_dims(x, a)
    return [x]


def _transpose_infer(ins: list[Value | None], attrs: D) -> list[TensorType]:
    assert ins[0] is not None
    t = ins[0].type
    perm = attrs.get("perm") or list(range(t.rank))[::-1]
    return [t.with_shape(tuple(t.shape[p] for p in perm))]


@register("onnx.Transpose", _transpose_infer, arity=(1, 1))
def _transpose(ins: A, attrs: D) -> list[np.ndarray]:
    x = _arr(ins[0])
    return [np.transpose(x, attrs.get("perm") or None)]


def slice_params(rank: int, starts, ends, axes, steps) -> list[slice]:
    """Normalised python slices for ONNX Slice semantics (clamped like numpy)."""
    idx = [slice(None)] * rank
    axes = list(range(len(starts))) if axes is None else [int(a) for a in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    big = np.iinfo(np.int64).max // 2
    for s, e, a, st in zip(starts, ends, axes, steps):
        s, e = int(s), int(e)
        e = None if (st > 0 and e >= big) or (st < 0 and e <= -big) else e
        idx[norm_axis(a, rank)] = slice(s, e, st)
    return idx


def _slice_inputs(ins: A, attrs: D) -> tuple:
    if "starts" in attrs:  # opset < 10
        return attrs["starts"], attrs["ends"], attrs.get("axes"), None
    get = lambda i: ins[i] if len(ins) > i else None
    return get(1), get(2), get(3), get(4)


def _slice_infer(ins: list[Value | None], attrs: D) -> list[TensorType] | None:
    assert ins[0] is not None
    t = ins[0].type
    raw = _slice_inputs(ins, attrs)
    params = [r if (r is None or not isinstance(r, Value)) else const(r) for r in raw]
    if any(p is None for p in params[:2]) or any(isinstance(r, Value) and not r.is_const for r in raw if r):
        return None
    idx = slice_params(t.rank, *params)
    shape = []
    for d, sl in zip(t.shape, idx):
        if sl == slice(None):
            shape.append(d)
        elif isinstance(d, int):
            shape.append(len(range(d)[sl]))
        else:
            return None
    return [t.with_shape(tuple(shape))]


@register("onnx.Slice", _slice_infer, arity=(1, 5))
def _slice(ins: A, attrs: D) -> list[np.ndarray]:
    x = _arr(ins[0])
    return [x[tuple(slice_params(x.ndim, *_slice_inputs(ins, attrs)))]]


def _gather_infer(ins: list[Value | None], attrs: D) -> list[TensorType] | None:
    assert ins[0] is not None and ins[1] is not None
    t, ind = ins[0].type, ins[1].type
    axis = norm_axis(attrs.get("axis", 0), t.rank)
    return [t.with_shape(t.shape[:axis] + ind.shape + t.shape[axis + 1:])]


@register("onnx.Gather", _gather_infer, arity=(2, 2))
def _gather(ins: A, attrs: D) -> list[np.ndarray]:
    x = _arr(ins[0])
    return [np.take(x, _arr(ins[1]).astype(np.int64), axis=attrs.get("axis", 0))]


@register("onnx.GatherElements", lambda ins, attrs: [ins[0].type.with_shape(ins[1].type.shape)], arity=(2, 2))
def _gather_elements(ins: A, attrs: D) -> list[np.ndarray]:
    x, idx = _arr(ins[0]), _arr(ins[1]).astype(np.int64)
    axis = norm_axis(attrs.get("axis", 0), x.ndim)
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    return [np.take_along_axis(x, idx, axis=axis)]


@register("onnx.GatherND", None, data_dependent=False, arity=(2, 2))
def _gather_nd(ins: A, attrs: D) -> list[np.ndarray]:
    x, idx = _arr(ins[0]), _arr(ins[1]).astype(np.int64)
    if attrs.get("batch_dims", 0):
        raise NotImplementedError("GatherND with batch_dims > 0")
    k = idx.shape[-1]
    flat = idx.reshape(-1, k)
    out = x[tuple(flat[:, i] for i in range(k))]
    return [out.reshape(idx.shape[:-1] + x.shape[k:])]


def _concat_infer(ins: list[Value | None], attrs: D) -> list[TensorType]:
    vals = [v for v in ins if v is not None]
    t = vals[0].type
    axis = norm_axis(attrs["axis"], t.rank)
    dims = [v.type.shape[axis] for v in vals]
    total = sum(d for d in dims if isinstance(d, int)) if all(isinstance(d, int) for d in dims) else None
    if total is None:
        return None  # type: ignore[return-value]
    return [t.with_shape(t.shape[:axis] + (total,) + t.shape[axis + 1:])]


@register("onnx.Concat", _concat_infer, arity=(1, 99))
def _concat(ins: A, attrs: D) -> list[np.ndarray]:
    return [np.concatenate([_arr(x) for x in ins], axis=attrs["axis"])]


@register("onnx.Split", None, arity=(1, 2))
def _split(ins: A, attrs: D) -> list[np.ndarray]:
    x = _arr(ins[0])
    axis = norm_axis(attrs.get("axis", 0), x.ndim)
    sizes = attrs.get("split")
    if sizes is None and len(ins) > 1 and ins[1] is not None:
        sizes = list(_arr(ins[1]))
    if sizes is None:
        n = int(attrs["num_outputs"])
        step = -(-x.shape[axis] // n)
        sizes = [min(step, x.shape[axis] - i * step) for i in range(n)]
    cuts = np.cumsum(sizes)[:-1]
    return list(np.split(x, cuts, axis=axis))


def _expand_infer(ins: list[Value | None], attrs: D) -> list[TensorType] | None:
    assert ins[0] is not None
    shape = const(ins[1])
    if shape is None:
        return None
    return [ins[0].type.with_shape(broadcast(ins[0].type.shape, tuple(int(d) for d in shape)))]


@register("onnx.Expand", _expand_infer, arity=(2, 2))
def _expand(ins: A, attrs: D) -> list[np.ndarray]:
    x = _arr(ins[0])
    shape = broadcast(x.shape, tuple(int(d) for d in _arr(ins[1])))
    return [np.broadcast_to(x, shape).copy()]


@register("onnx.Tile", None, arity=(2, 2))
def _tile(ins: A, attrs: D) -> list[np.ndarray]:
    return [np.tile(_arr(ins[0]), tuple(int(r) for r in _arr(ins[1])))]


def _constant_of_shape_fill(attrs: D) -> np.ndarray:
    value = attrs.get("value")
    return np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)[:1]


def _cos_infer(ins: list[Value | None], attrs: D) -> list[TensorType] | None:
    shape = const(ins[0])
    if shape is None:
        return None
    return [TensorType(DType.from_numpy(_constant_of_shape_fill(attrs).dtype), tuple(int(d) for d in shape))]


@register("onnx.ConstantOfShape", _cos_infer, arity=(1, 1))
def _constant_of_shape(ins: A, attrs: D) -> list[np.ndarray]:
    fill = _constant_of_shape_fill(attrs)
    return [np.full(tuple(int(d) for d in _arr(ins[0])), fill[0], dtype=fill.dtype)]


@register("onnx.Range", None, arity=(3, 3))
def _range(ins: A, attrs: D) -> list[np.ndarray]:
    start = _arr(ins[0])
    return [np.arange(start, _arr(ins[1]), _arr(ins[2])).astype(start.dtype)]


@register("onnx.NonZero", None, data_dependent=True, arity=(1, 1))
def _nonzero(ins: A, attrs: D) -> list[np.ndarray]:
    return [np.asarray(np.nonzero(_arr(ins[0])), dtype=np.int64).reshape(_arr(ins[0]).ndim, -1)]


@register("onnx.TopK", None, data_dependent=True, arity=(2, 2))
def _topk(ins: A, attrs: D) -> list[np.ndarray]:
    x, k = _arr(ins[0]), int(_arr(ins[1]).reshape(-1)[0])
    axis = norm_axis(attrs.get("axis", -1), x.ndim)
    largest = attrs.get("largest", 1)
    # stable sort so ties keep index order, as onnxruntime does
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return [np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)]


@register("onnx.ScatterElements", lambda ins, attrs: [ins[0].type], arity=(3, 3))
def _scatter_elements(ins: A, attrs: D) -> list[np.ndarray]:
    if attrs.get("reduction", "none") != "none":
        raise NotImplementedError("ScatterElements with a reduction")
    data, idx, upd = _arr(ins[0]).copy(), _arr(ins[1]).astype(np.int64), _arr(ins[2])
    axis = norm_axis(attrs.get("axis", 0), data.ndim)
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    np.put_along_axis(data, idx, upd.astype(data.dtype), axis=axis)
    return [data]


@register("onnx.ScatterND", lambda ins, attrs: [ins[0].type], arity=(3, 3))
def _scatter_nd(ins: A, attrs: D) -> list[np.ndarray]:
    if attrs.get("reduction", "none") != "none":
        raise NotImplementedError("ScatterND with a reduction")
    data, idx, upd = _arr(ins[0]).copy(), _arr(ins[1]).astype(np.int64), _arr(ins[2])
    k = idx.shape[-1]
    flat = idx.reshape(-1, k)
    data[tuple(flat[:, i] for i in range(k))] = upd.reshape((flat.shape[0],) + data.shape[k:])
    return [data]
