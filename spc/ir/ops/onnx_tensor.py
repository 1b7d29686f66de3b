"""ONNX shape and data-movement ops: numpy semantics and type inference.

Every evaluator is vectorised numpy and returns exactly ONNX's element type and shape; it is the
op's one meaning in spc (constant folding, semantic matching, the host stages). Inference returns
None only where the answer depends on a value that is not known here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from spc.ir.graph import Value
from spc.ir.ops import register
from spc.ir.ops.infer import axes_from, broadcast, const, norm_axis
from spc.ir.types import Dim, DType, TensorType

A = list[Any]
D = dict[str, Any]
Types = list[TensorType] | None
Ins = list[Value | None]

# conformance cases spc refuses on purpose (frontend/conformance.py): case name -> why
CONFORMANCE_EXCEPTIONS: dict[str, str] = {}


def _arr(x: Any) -> np.ndarray:
    return np.asarray(x)


def _opt(ins: A, i: int) -> Any:
    """Optional input ``i`` (missing, or given as an empty name)."""
    return ins[i] if i < len(ins) else None


def _ints(x: Any) -> list[int]:
    return [int(v) for v in np.asarray(x).reshape(-1)]


def _scalar(x: Any) -> Any:
    return np.asarray(x).reshape(-1)[0]


def _type(ins: Ins, i: int) -> TensorType:
    v = ins[i] if i < len(ins) else None
    if v is None:
        raise ValueError(f"input {i} is missing")
    return v.type


def _prod(dims: list[Dim] | tuple[Dim, ...]) -> Dim | None:
    """Product of dimensions: an int, the symbol itself when it is the only non-1 factor, else None."""
    syms = [d for d in dims if isinstance(d, str)]
    n = 1
    for d in dims:
        if isinstance(d, int):
            n *= d
    if not syms:
        return n
    return syms[0] if len(syms) == 1 and n == 1 else None


def _by_evaluation(fn: Callable[[A, D], list[np.ndarray]]) -> Callable[[Ins, D], Types]:
    """Inference for data-dependent ops: exact when every input is known, else left to ONNX."""

    def infer(ins: Ins, attrs: D) -> Types:
        if not all(v is None or v.is_const for v in ins):
            return None
        return [TensorType.of(np.asarray(r)) for r in fn([const(v) for v in ins], attrs)]

    return infer


def _onnx_dtype(code: int) -> np.dtype:
    try:
        return DType.from_onnx(int(code)).numpy
    except TypeError as exc:
        raise ValueError(str(exc)) from None


# -- constants and shapes ---------------------------------------------------------------------
_CONSTANT_KEYS = {"value": None, "value_float": np.float32, "value_int": np.int64, "value_floats": np.float32,
                  "value_ints": np.int64}


def _constant_value(attrs: D) -> np.ndarray:
    for key, dtype in _CONSTANT_KEYS.items():
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    raise ValueError(f"Constant without a supported value attribute: {sorted(attrs)}")


def _constant_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    for key in ("value_string", "value_strings", "sparse_value"):
        if key in attrs:
            raise ValueError(f"a Constant with {key} is not supported (strings and sparse tensors)")
    value = _constant_value(attrs)
    try:
        DType.from_numpy(value.dtype)
    except TypeError:
        raise ValueError(f"a Constant of element type {value.dtype} is not supported") from None
    return attrs


@register("onnx.Constant", lambda ins, attrs: [TensorType.of(_constant_value(attrs))], arity=(0, 0),
          canonicalize=_constant_canon)
def _constant(ins: A, attrs: D) -> list[np.ndarray]:
    """The value of whichever value* attribute is set (tensor, float(s), int(s))."""
    return [_constant_value(attrs)]


def _constant_of_shape_fill(attrs: D) -> np.ndarray:
    value = attrs.get("value")
    return np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)[:1]


def _cos_infer(ins: Ins, attrs: D) -> Types:
    shape = const(ins[0])
    if shape is None:
        return None
    return [TensorType(DType.from_numpy(_constant_of_shape_fill(attrs).dtype), tuple(_ints(shape)))]


@register("onnx.ConstantOfShape", _cos_infer, arity=(1, 1))
def _constant_of_shape(ins: A, attrs: D) -> list[np.ndarray]:
    """A tensor of the given shape (empty: a scalar) filled with ``value`` (default float 0)."""
    fill = _constant_of_shape_fill(attrs)
    return [np.full(tuple(_ints(ins[0])), fill[0], dtype=fill.dtype)]


def _shape_infer(ins: Ins, attrs: D) -> Types:
    rank = _type(ins, 0).rank
    # python slicing clamps start/end exactly as Shape-15 does
    n = len(range(rank)[slice(attrs.get("start", 0), attrs.get("end", rank))])
    return [TensorType(DType.I64, (n,))]


@register("onnx.Shape", _shape_infer, arity=(1, 1))
def _shape(ins: A, attrs: D) -> list[np.ndarray]:
    """The input's shape as int64, dimensions start..end (negative from the end, clamped)."""
    shape = _arr(ins[0]).shape
    return [np.asarray(shape[slice(attrs.get("start", 0), attrs.get("end", len(shape)))], np.int64)]


@register("onnx.Size", lambda ins, attrs: [TensorType(DType.I64, ())], arity=(1, 1))
def _size(ins: A, attrs: D) -> list[np.ndarray]:
    """The input's element count, an int64 scalar."""
    return [np.asarray(_arr(ins[0]).size, np.int64)]


# -- reshaping ----------------------------------------------------------------------------------
def _reshape_target(shape_in: tuple, target: Any, allowzero: int) -> list[Dim]:
    """Reshape's target with 0 resolved (copy the input dimension unless allowzero); -1 stays."""
    out: list[Dim] = []
    for i, d in enumerate(_ints(target)):
        if d == 0 and not allowzero:
            if i >= len(shape_in):
                raise ValueError(f"Reshape: 0 at position {i} copies a dimension the rank-{len(shape_in)} input lacks")
            out.append(shape_in[i])
        else:
            out.append(d)
    return out


def _reshape_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    target = const(_opt(ins, 1))
    if target is None:
        return None
    out = _reshape_target(t.shape, target, attrs.get("allowzero", 0))
    holes = [i for i, d in enumerate(out) if d == -1]
    if len(holes) > 1:
        raise ValueError("Reshape: more than one -1 in the target shape")
    if holes:
        # symbols kept in place (a copied batch) cancel out of the element count
        num, den = list(t.shape), [d for i, d in enumerate(out) if i != holes[0]]
        for d in list(den):
            if isinstance(d, str) and d in num:
                num.remove(d)
                den.remove(d)
        n, m = _prod(num), _prod(den)
        if n is None or m is None or isinstance(m, str) or (isinstance(n, str) and m != 1):
            return None
        if isinstance(n, int):
            if m == 0 or n % m:
                raise ValueError(f"Reshape: cannot reshape {t.shape} into {out}")
            n //= m
        out[holes[0]] = n
    elif isinstance(_prod(t.shape), int) and isinstance(_prod(out), int) and _prod(t.shape) != _prod(out):
        raise ValueError(f"Reshape: cannot reshape {t.shape} into {out}")
    return [t.with_shape(tuple(out))]


@register("onnx.Reshape", _reshape_infer, arity=(2, 2))
def _reshape(ins: A, attrs: D) -> list[np.ndarray]:
    """Reshape; 0 copies the input dimension (unless allowzero=1), one -1 is inferred."""
    x = _arr(ins[0])
    return [x.reshape(tuple(int(d) for d in _reshape_target(x.shape, ins[1], attrs.get("allowzero", 0))))]


def _flatten_axis(axis: int, rank: int) -> int:
    """Flatten's axis may equal the rank (everything goes to the first dimension)."""
    if not -rank <= axis <= rank:
        raise ValueError(f"Flatten axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _flatten_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    axis = _flatten_axis(attrs.get("axis", 1), t.rank)
    a, b = _prod(t.shape[:axis]), _prod(t.shape[axis:])
    return None if a is None or b is None else [t.with_shape((a, b))]


@register("onnx.Flatten", _flatten_infer, arity=(1, 1))
def _flatten(ins: A, attrs: D) -> list[np.ndarray]:
    """2-D view: dimensions before ``axis`` times those after."""
    x = _arr(ins[0])
    axis = _flatten_axis(attrs.get("axis", 1), x.ndim)
    return [x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))]


def _squeeze_axes(ins: A, attrs: D) -> list[int] | None:
    """Squeeze/Unsqueeze axes: the attribute (opset 11) or the second input (opset 13)."""
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    a = _opt(ins, 1)
    return None if a is None else _ints(a)


def _squeeze_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    axes = axes_from(ins, attrs, 1)
    if axes is None:
        return None
    if not axes:
        if not t.is_static:
            return None  # whether a symbol is 1 is not known
        axes = [i for i, d in enumerate(t.shape) if d == 1]
    axes = [norm_axis(a, t.rank) for a in axes]
    for a in axes:
        if isinstance(t.shape[a], int) and t.shape[a] != 1:
            raise ValueError(f"Squeeze: dimension {a} of {t.shape} is not 1")
    return [t.with_shape(tuple(d for i, d in enumerate(t.shape) if i not in axes))]


@register("onnx.Squeeze", _squeeze_infer, arity=(1, 2))
def _squeeze(ins: A, attrs: D) -> list[np.ndarray]:
    """Drop the given size-1 axes (all size-1 axes when none are given)."""
    x = _arr(ins[0])
    axes = _squeeze_axes(ins, attrs)
    return [np.squeeze(x, axis=tuple(norm_axis(a, x.ndim) for a in axes) if axes else None)]


def _unsqueeze_shape(shape: tuple, axes: list[int]) -> tuple:
    rank = len(shape) + len(axes)
    norm = sorted(norm_axis(a, rank) for a in axes)
    if len(set(norm)) != len(norm):
        raise ValueError(f"Unsqueeze: repeated axes {axes}")
    out = list(shape)
    for a in norm:
        out.insert(a, 1)
    return tuple(out)


def _unsqueeze_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    axes = axes_from(ins, attrs, 1)
    return None if axes is None else [t.with_shape(_unsqueeze_shape(t.shape, axes))]


@register("onnx.Unsqueeze", _unsqueeze_infer, arity=(1, 2))
def _unsqueeze(ins: A, attrs: D) -> list[np.ndarray]:
    """Insert size-1 axes at the given positions of the output (negative from its end)."""
    x = _arr(ins[0])
    return [x.reshape(_unsqueeze_shape(x.shape, _squeeze_axes(ins, attrs) or []))]


def _perm(attrs: D, rank: int) -> list[int]:
    perm = attrs.get("perm")
    return list(range(rank))[::-1] if perm is None or (len(perm) == 0 and rank) else [int(p) for p in perm]


def _transpose_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    perm = _perm(attrs, t.rank)
    if sorted(perm) != list(range(t.rank)):
        raise ValueError(f"Transpose: perm {perm} is not a permutation of rank {t.rank}")
    return [t.with_shape(tuple(t.shape[p] for p in perm))]


@register("onnx.Transpose", _transpose_infer, arity=(1, 1))
def _transpose(ins: A, attrs: D) -> list[np.ndarray]:
    """Permute the axes (default: reverse them)."""
    x = _arr(ins[0])
    return [np.transpose(x, _perm(attrs, x.ndim))]


# -- slicing and gathering ------------------------------------------------------------------------
def slice_params(rank: int, starts: Any, ends: Any, axes: Any, steps: Any) -> list[slice]:
    """Python slices for ONNX Slice: python's own clamping of start/end (negative from the end, to
    [0, dim] going forward and [-1, dim-1] going backward) is exactly ONNX's."""
    starts, ends = _ints(starts), _ints(ends)
    axes = list(range(len(starts))) if axes is None else _ints(axes)
    steps = [1] * len(starts) if steps is None else _ints(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError("Slice: starts, ends, axes and steps differ in length")
    idx = [slice(None)] * rank
    seen: set[int] = set()
    for s, e, a, st in zip(starts, ends, axes, steps):
        ax = norm_axis(a, rank)
        if st == 0 or ax in seen:
            raise ValueError("Slice: a step is 0" if st == 0 else f"Slice: axis {a} repeated")
        seen.add(ax)
        idx[ax] = slice(s, e, st)
    return idx


def _slice_inputs(ins: A, attrs: D) -> tuple:
    if "starts" in attrs:  # the attribute form of opset < 10, for hand-written graphs
        return attrs["starts"], attrs["ends"], attrs.get("axes"), None
    return _opt(ins, 1), _opt(ins, 2), _opt(ins, 3), _opt(ins, 4)


def _slice_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    raw = _slice_inputs(ins, attrs)
    if any(isinstance(r, Value) and not r.is_const for r in raw) or raw[0] is None or raw[1] is None:
        return None
    params = [const(r) if isinstance(r, Value) else r for r in raw]
    shape: list[Dim] = []
    for d, sl in zip(t.shape, slice_params(t.rank, *params)):
        if isinstance(d, int):
            shape.append(len(range(d)[sl]))
        elif sl.step in (None, 1) and sl.start in (None, 0) and (sl.stop is None or sl.stop >= 2**31 - 1):
            shape.append(d)  # the whole of a symbolic dimension
        else:
            return None
    return [t.with_shape(tuple(shape))]


@register("onnx.Slice", _slice_infer, arity=(1, 5))
def _slice(ins: A, attrs: D) -> list[np.ndarray]:
    """Strided slice over the given axes (negative steps run backwards; bounds clamp)."""
    x = _arr(ins[0])
    return [x[tuple(slice_params(x.ndim, *_slice_inputs(ins, attrs)))]]


def _gather_infer(ins: Ins, attrs: D) -> Types:
    t, ind = _type(ins, 0), _type(ins, 1)
    axis = norm_axis(attrs.get("axis", 0), t.rank)
    return [t.with_shape(t.shape[:axis] + ind.shape + t.shape[axis + 1:])]


@register("onnx.Gather", _gather_infer, arity=(2, 2))
def _gather(ins: A, attrs: D) -> list[np.ndarray]:
    """Pick entries along ``axis`` by (possibly negative) indices of any shape."""
    x = _arr(ins[0])
    return [np.take(x, _arr(ins[1]).astype(np.int64, copy=False), axis=norm_axis(attrs.get("axis", 0), x.ndim))]


def _gather_elements_infer(ins: Ins, attrs: D) -> Types:
    t, ind = _type(ins, 0), _type(ins, 1)
    norm_axis(attrs.get("axis", 0), t.rank)
    return [t.with_shape(ind.shape)]


def _positive(idx: np.ndarray, dim: int) -> np.ndarray:
    """Indices in [-dim, dim) made non-negative."""
    idx = idx.astype(np.int64, copy=False)
    if idx.size == 0:
        return idx
    lo, hi = int(idx.min()), int(idx.max())
    if lo < -dim or hi >= dim:
        raise IndexError(f"index out of range: {lo}..{hi} for a dimension of {dim}")
    return np.where(idx < 0, idx + dim, idx) if lo < 0 else idx


@register("onnx.GatherElements", _gather_elements_infer, arity=(2, 2))
def _gather_elements(ins: A, attrs: D) -> list[np.ndarray]:
    """out[i][j][k] = x[idx[i][j][k]][j][k] for axis 0, and so on (indices as large as x or smaller)."""
    x = _arr(ins[0])
    axis = norm_axis(attrs.get("axis", 0), x.ndim)
    idx = _positive(_arr(ins[1]), x.shape[axis])
    if idx.ndim != x.ndim:
        raise ValueError("GatherElements: indices and data differ in rank")
    # take_along_axis broadcasts; ONNX indexes the other axes by position, so cut x to idx's extent
    cut = tuple(slice(None) if a == axis else slice(0, n) for a, n in enumerate(idx.shape))
    return [np.take_along_axis(x[cut], idx, axis=axis)]


def _gather_nd_infer(ins: Ins, attrs: D) -> Types:
    t, ind = _type(ins, 0), _type(ins, 1)
    b, k = int(attrs.get("batch_dims", 0)), ind.shape[-1] if ind.rank else None
    if not isinstance(k, int):
        return None
    return [t.with_shape(ind.shape[:-1] + t.shape[b + k:])]


def _nd_offsets(idx: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    """Row-major offsets into ``dims`` of ND indices (last axis: one index per dimension, negative
    from the end); one flat index array is several times faster to gather and scatter with than
    a tuple of them."""
    if not dims:
        return np.zeros(idx.shape[:-1], np.int64)
    cols = np.ascontiguousarray(np.moveaxis(idx, -1, 0))  # one copy makes every later pass contiguous
    return np.ravel_multi_index(tuple(_positive(c, d) for c, d in zip(cols, dims)), dims)


@register("onnx.GatherND", _gather_nd_infer, arity=(2, 2))
def _gather_nd(ins: A, attrs: D) -> list[np.ndarray]:
    """out[b..., i...] = x[b..., idx[b..., i..., :]...]: slices at ND indices, after batch_dims shared axes."""
    x, idx = _arr(ins[0]), _arr(ins[1]).astype(np.int64, copy=False)
    b, k = int(attrs.get("batch_dims", 0)), idx.shape[-1]
    if b + k > x.ndim or idx.shape[:b] != x.shape[:b]:
        raise ValueError(f"GatherND: indices {idx.shape} do not fit data {x.shape} with batch_dims={b}")
    nb = int(np.prod(x.shape[:b], dtype=np.int64))
    flat = idx.reshape(nb, int(np.prod(idx.shape[b:-1], dtype=np.int64)), k)
    # the batch axes merge into one: each row is offset by its own batch's block
    block = int(np.prod(x.shape[b:b + k], dtype=np.int64))
    offsets = _nd_offsets(flat, x.shape[b:b + k]) + np.arange(nb).reshape(-1, 1) * block
    rest = x.shape[b + k:]
    return [x.reshape((-1,) + rest)[offsets].reshape(idx.shape[:-1] + rest)]


# -- joining, splitting, repeating ------------------------------------------------------------
def _concat_infer(ins: Ins, attrs: D) -> Types:
    vals = [v for v in ins if v is not None]
    if not vals:
        raise ValueError("Concat without inputs")
    t = vals[0].type
    axis = norm_axis(attrs["axis"], t.rank)
    if any(v.type.rank != t.rank for v in vals):
        raise ValueError("Concat: inputs differ in rank")
    dims = [v.type.shape[axis] for v in vals]
    nonempty = [d for d in dims if d != 0]
    if all(isinstance(d, int) for d in dims):
        total: Dim = sum(int(d) for d in dims)
    elif len(nonempty) == 1:
        total = nonempty[0]  # a symbolic part joined with empty ones
    else:
        return None
    # other dimensions: a number known for any input is known for the result
    shape = [next((v.type.shape[i] for v in vals if isinstance(v.type.shape[i], int)), t.shape[i])
             for i in range(t.rank)]
    shape[axis] = total
    return [t.with_shape(tuple(shape))]


@register("onnx.Concat", _concat_infer, arity=(1, 99))
def _concat(ins: A, attrs: D) -> list[np.ndarray]:
    """Join along ``axis``."""
    xs = [_arr(x) for x in ins if x is not None]
    out = np.concatenate(xs, axis=norm_axis(attrs["axis"], xs[0].ndim))
    return [out.astype(xs[0].dtype, copy=False)]


def _split_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    # without explicit sizes, Split-11/13 cut into n_outputs equal parts, Split-18 says num_outputs
    if "split" not in attrs and "num_outputs" not in attrs:
        attrs = {**attrs, "num_outputs": n_out}
    elif "num_outputs" in attrs and int(attrs["num_outputs"]) != n_out:
        raise ValueError(f"num_outputs={attrs['num_outputs']} but the node has {n_out} outputs")
    return attrs


def _split_sizes(dim: int, sizes: Any, attrs: D) -> list[int]:
    if sizes is None:
        sizes = attrs.get("split")
    if sizes is not None:
        out = _ints(sizes)
        if sum(out) != dim or min(out, default=0) < 0:
            raise ValueError(f"Split: sizes {out} do not add up to {dim}")
        return out
    if "num_outputs" not in attrs:
        raise ValueError("Split: no split sizes and no num_outputs")
    n = int(attrs["num_outputs"])
    # ceil-sized parts, the last one smaller (equal when dim divides, as Split-11/13 require)
    step = -(-dim // n)
    return [max(0, min(step, dim - i * step)) for i in range(n)]


def _split_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    axis = norm_axis(attrs.get("axis", 0), t.rank)
    sv = _opt(ins, 1)
    sizes = const(sv) if sv is not None else None
    if sv is not None and sizes is None:
        return None
    d = t.shape[axis]
    if not isinstance(d, int):
        if sizes is None and attrs.get("split") is None and int(attrs.get("num_outputs", 0)) == 1:
            return [t]
        return None
    return [t.with_shape(t.shape[:axis] + (s,) + t.shape[axis + 1:]) for s in _split_sizes(d, sizes, attrs)]


@register("onnx.Split", _split_infer, arity=(1, 2), canonicalize=_split_canon)
def _split(ins: A, attrs: D) -> list[np.ndarray]:
    """Cut along ``axis`` by the ``split`` sizes (input or attribute), else into num_outputs parts."""
    x = _arr(ins[0])
    axis = norm_axis(attrs.get("axis", 0), x.ndim)
    sizes = _split_sizes(x.shape[axis], _opt(ins, 1), attrs)
    return list(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def _expand_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    shape = const(_opt(ins, 1))
    if shape is None:
        return None
    return [t.with_shape(broadcast(t.shape, tuple(_ints(shape))))]


@register("onnx.Expand", _expand_infer, arity=(2, 2))
def _expand(ins: A, attrs: D) -> list[np.ndarray]:
    """Broadcast to the shape (bidirectionally: a 1 in the shape keeps the input's dimension)."""
    x = _arr(ins[0])
    shape = np.broadcast_shapes(x.shape, tuple(_ints(ins[1])))
    return [np.array(np.broadcast_to(x, shape))]


def _tile_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    reps = const(_opt(ins, 1))
    if reps is None:
        return None
    r = _ints(reps)
    if len(r) != t.rank:
        raise ValueError(f"Tile: {len(r)} repeats for rank {t.rank}")
    if any(isinstance(d, str) and n != 1 for d, n in zip(t.shape, r)):
        return None
    return [t.with_shape(tuple(d * n if isinstance(d, int) else d for d, n in zip(t.shape, r)))]


@register("onnx.Tile", _tile_infer, arity=(2, 2))
def _tile(ins: A, attrs: D) -> list[np.ndarray]:
    """Repeat the whole tensor ``repeats[i]`` times along axis i."""
    x = _arr(ins[0])
    reps = _ints(ins[1])
    if len(reps) != x.ndim:
        raise ValueError(f"Tile: {len(reps)} repeats for rank {x.ndim}")
    return [np.tile(x, reps)]


def _range_len(start: Any, limit: Any, delta: Any) -> int:
    start, limit, delta = _scalar(start), _scalar(limit), _scalar(delta)
    if delta == 0:
        raise ValueError("Range: delta is 0")
    if np.issubdtype(np.asarray(start).dtype, np.integer):
        return max(-(-(int(limit) - int(start)) // int(delta)), 0)  # exact for any int64
    return max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)


def _range_infer(ins: Ins, attrs: D) -> Types:
    vals = [const(_opt(ins, i)) for i in range(3)]
    if any(v is None for v in vals):
        return None
    return [TensorType(_type(ins, 0).dtype, (_range_len(*vals),))]


@register("onnx.Range", _range_infer, arity=(3, 3))
def _range(ins: A, attrs: D) -> list[np.ndarray]:
    """start, start + delta, ... : max(ceil((limit - start) / delta), 0) values in start's type."""
    start = _arr(ins[0])
    n = _range_len(start, ins[1], ins[2])
    if np.issubdtype(start.dtype, np.integer):
        return [(int(_scalar(start)) + np.arange(n, dtype=np.int64) * int(_scalar(ins[2]))).astype(start.dtype)]
    # ONNX defines the values by repeated addition in the element type (its function body is a
    # loop), which differs from start + i * delta in the last bits
    steps = np.full(n, _scalar(ins[2]), start.dtype)
    steps[:1] = _scalar(start)
    return [np.cumsum(steps, dtype=start.dtype)]


# -- data-dependent selection ---------------------------------------------------------------------
def _nonzero_eval(ins: A, attrs: D) -> list[np.ndarray]:
    x = _arr(ins[0])
    if x.ndim == 0:  # numpy refuses a scalar: no coordinates, one column when it is set
        return [np.zeros((0, int(bool(x))), np.int64)]
    # np.nonzero on a map is ~25x slower than this, and gives the same row-major coordinates
    flat = np.flatnonzero(x)
    return [np.asarray(np.unravel_index(flat, x.shape), dtype=np.int64).reshape(x.ndim, -1)]


@register("onnx.NonZero", _by_evaluation(_nonzero_eval), data_dependent=True, arity=(1, 1))
def _nonzero(ins: A, attrs: D) -> list[np.ndarray]:
    """Coordinates of the non-zero entries, (rank, count) int64, in row-major order."""
    return _nonzero_eval(ins, attrs)


def _topk_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    k = const(_opt(ins, 1))
    if k is None:
        return None
    axis = norm_axis(attrs.get("axis", -1), t.rank)
    shape = t.shape[:axis] + (int(_scalar(k)),) + t.shape[axis + 1:]
    return [t.with_shape(shape), TensorType(DType.I64, shape)]


def _best_first(v: np.ndarray, largest: bool) -> np.ndarray:
    """Indices sorting the last axis best first, equal values by increasing index."""
    quick = np.argsort(v, axis=-1)  # introsort, several times faster than a stable sort
    s = np.take_along_axis(v, quick, axis=-1)
    if not (s[..., 1:] == s[..., :-1]).any() and not (v.dtype.kind == "f" and np.isnan(s[..., -1]).any()):
        return quick[..., ::-1] if largest else quick  # no ties (NaNs sort last): the order is unique
    if not largest:
        return np.argsort(v, axis=-1, kind="stable")
    # a stable sort of the reversed row, read backwards: no negation, so unsigned ints and bools work
    n = v.shape[-1]
    return n - 1 - np.argsort(v[..., ::-1], axis=-1, kind="stable")[..., ::-1]


def topk_indices(v: np.ndarray, k: int, largest: bool) -> np.ndarray:
    """Indices of the k largest (smallest) entries of each row of ``v`` (last axis), best first,
    ties by lower index first, as ONNX TopK specifies."""
    n = v.shape[-1]
    if not 0 <= k <= n:
        raise ValueError(f"TopK: k={k} for an axis of {n}")
    if k == 0:
        return np.zeros(v.shape[:-1] + (0,), np.int64)
    if k == n or (v.dtype.kind == "f" and np.isnan(v).any()):
        return _best_first(v, largest)[..., :k]
    # select in O(n), then sort only the k chosen (top-K over a score map): the k-th best value
    # bounds them, and of the values equal to it the lowest indices are taken
    at = n - k if largest else k - 1
    kth = np.partition(v, at, axis=-1)[..., at:at + 1]
    better = v > kth if largest else v < kth
    tie = v == kth
    room = k - better.sum(axis=-1, keepdims=True)
    if (tie.sum(axis=-1, keepdims=True) == room).all():
        chosen = better | tie
    else:
        chosen = better | (tie & (np.cumsum(tie, axis=-1) <= room))
    cand = np.nonzero(chosen.reshape(-1, n))[1].reshape(v.shape[:-1] + (k,))  # ascending per row
    return np.take_along_axis(cand, _best_first(np.take_along_axis(v, cand, axis=-1), largest), axis=-1)


@register("onnx.TopK", _topk_infer, data_dependent=True, arity=(2, 2))
def _topk(ins: A, attrs: D) -> list[np.ndarray]:
    """The k largest (largest=0: smallest) along ``axis``, sorted, ties lower index first; and their indices."""
    x, k = _arr(ins[0]), int(_scalar(ins[1]))
    axis = norm_axis(attrs.get("axis", -1), x.ndim)
    v = np.moveaxis(x, axis, -1)
    idx = topk_indices(v, k, bool(attrs.get("largest", 1)))
    vals = np.take_along_axis(v, idx, axis=-1)
    return [np.moveaxis(vals, -1, axis), np.moveaxis(idx, -1, axis).astype(np.int64)]


def _compress_eval(ins: A, attrs: D) -> list[np.ndarray]:
    x, cond = _arr(ins[0]), _arr(ins[1]).astype(bool).reshape(-1)
    axis = attrs.get("axis")
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = norm_axis(int(axis), x.ndim)
    cond = cond[:x.shape[axis]]  # entries past the axis select nothing (as onnxruntime does)
    return [np.compress(cond, x, axis=axis)]


@register("onnx.Compress", _by_evaluation(_compress_eval), data_dependent=True, arity=(2, 2))
def _compress(ins: A, attrs: D) -> list[np.ndarray]:
    """The slices along ``axis`` (flattened input when absent) where the condition holds; a shorter
    condition leaves the rest out."""
    return _compress_eval(ins, attrs)


def _unique_eval(ins: A, attrs: D) -> list[np.ndarray]:
    x = _arr(ins[0])
    axis = attrs.get("axis")
    ax = None if axis is None else norm_axis(int(axis), x.ndim)
    y, first, inverse, counts = np.unique(x if ax is not None else x.reshape(-1), return_index=True,
                                          return_inverse=True, return_counts=True, axis=ax)
    inverse = inverse.reshape(-1)
    if not attrs.get("sorted", 1):
        # order of first occurrence: renumber the sorted uniques by where they first appear
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y = np.take(y, order, axis=0 if ax is None else ax)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return [y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)]


@register("onnx.Unique", _by_evaluation(_unique_eval), data_dependent=True, arity=(1, 1))
def _unique(ins: A, attrs: D) -> list[np.ndarray]:
    """Unique values (or slices along ``axis``), sorted or in order of first occurrence; each one's
    first index, every input entry's position among them, and their counts."""
    return _unique_eval(ins, attrs)


# -- scattering ---------------------------------------------------------------------------------
_REDUCE: dict[str, np.ufunc] = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    reduction = attrs.get("reduction", "none")
    allowed = ["none"] + (["add", "mul"] if since >= 16 else []) + (["max", "min"] if since >= 18 else [])
    if reduction not in allowed:
        raise ValueError(f"reduction={reduction!r} is not in this schema's {allowed}")
    return {**attrs, "reduction": reduction}


def _scatter(data: np.ndarray, offsets: np.ndarray, rows: np.ndarray, lead: int, reduction: str) -> np.ndarray:
    """data with ``rows`` written (or reduced) at flat ``offsets`` over its first ``lead`` axes."""
    out = data.copy()
    view = out.reshape((-1,) + data.shape[lead:])
    rows = rows.astype(data.dtype, copy=False)
    if reduction == "none":
        view[offsets] = rows  # duplicate indices: the last update wins (ONNX leaves it undefined)
    elif reduction in _REDUCE:
        _REDUCE[reduction].at(view, offsets, rows)  # unbuffered: every duplicate takes part
    else:
        raise ValueError(f"unknown reduction {reduction!r}")
    return out


@register("onnx.ScatterElements", lambda ins, attrs: [_type(ins, 0)], arity=(3, 3), canonicalize=_scatter_canon)
def _scatter_elements(ins: A, attrs: D) -> list[np.ndarray]:
    """GatherElements' inverse: data with updates written (or reduced) at idx along ``axis``."""
    data, upd = _arr(ins[0]), _arr(ins[2])
    axis = norm_axis(attrs.get("axis", 0), data.ndim)
    idx = _positive(_arr(ins[1]), data.shape[axis])
    if idx.shape != upd.shape or idx.ndim != data.ndim or any(
            i > d for a, (i, d) in enumerate(zip(idx.shape, data.shape)) if a != axis):
        raise ValueError(f"ScatterElements: indices {idx.shape}, updates {upd.shape}, data {data.shape}")
    if attrs.get("reduction", "none") == "none":
        # numpy's own scatter along an axis (duplicates: the last in index order wins, as below)
        out = data.copy()
        np.put_along_axis(out, idx, upd.astype(data.dtype, copy=False), axis)
        return [out]
    # every other axis indexes itself: broadcast aranges, the axis itself from idx
    r = idx.ndim
    key: list[np.ndarray] = [np.arange(n).reshape((-1,) + (1,) * (r - 1 - i)) for i, n in enumerate(idx.shape)]
    key[axis] = idx
    offsets = np.ravel_multi_index(tuple(key), data.shape).reshape(-1)
    return [_scatter(data, offsets, upd.reshape(-1), data.ndim, attrs.get("reduction", "none"))]


@register("onnx.ScatterND", lambda ins, attrs: [_type(ins, 0)], arity=(3, 3), canonicalize=_scatter_canon)
def _scatter_nd(ins: A, attrs: D) -> list[np.ndarray]:
    """GatherND's inverse: data with update slices written (or reduced) at ND indices."""
    data, idx, upd = _arr(ins[0]), _arr(ins[1]).astype(np.int64, copy=False), _arr(ins[2])
    k = idx.shape[-1]
    if k > data.ndim or upd.shape != idx.shape[:-1] + data.shape[k:]:
        raise ValueError(f"ScatterND: indices {idx.shape}, updates {upd.shape}, data {data.shape}")
    flat = idx.reshape(-1, k)
    offsets = _nd_offsets(flat, data.shape[:k])  # k = 0: every row replaces the whole tensor
    rows = upd.reshape((flat.shape[0],) + data.shape[k:])
    return [_scatter(data, offsets, rows, k, attrs.get("reduction", "none"))]


# -- padding and block moves ----------------------------------------------------------------------
_PAD_MODES = ("constant", "reflect", "edge", "wrap")  # numpy's np.pad modes of the same names


def _pad_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    mode = attrs.get("mode", "constant")
    if mode not in _PAD_MODES or (mode == "wrap" and since < 19):
        raise ValueError(f"Pad mode {mode!r} is not in Pad-{since}")
    return {**attrs, "mode": mode}


def _pad_widths(rank: int, pads: Any, axes: Any) -> list[tuple[int, int]]:
    p = _ints(pads)
    ax = list(range(rank)) if axes is None else [norm_axis(a, rank) for a in _ints(axes)]
    if len(p) != 2 * len(ax):
        raise ValueError(f"Pad: {len(p)} pads for {len(ax)} axes")
    widths = [(0, 0)] * rank
    for i, a in enumerate(ax):
        widths[a] = (p[i], p[i + len(ax)])
    return widths


def _pad_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    pads, axes = const(_opt(ins, 1)), const(_opt(ins, 3))
    if pads is None or (_opt(ins, 3) is not None and axes is None):
        return None
    shape: list[Dim] = []
    for d, (b, e) in zip(t.shape, _pad_widths(t.rank, pads, axes)):
        if isinstance(d, int):
            if d + b + e < 0:
                raise ValueError(f"Pad: pads {b}, {e} remove more than the dimension {d}")
            shape.append(d + b + e)
        elif b == e == 0:
            shape.append(d)
        else:
            return None
    return [t.with_shape(tuple(shape))]


@register("onnx.Pad", _pad_infer, arity=(1, 4), canonicalize=_pad_canon)
def _pad(ins: A, attrs: D) -> list[np.ndarray]:
    """Pad (negative: crop) each axis, by a constant, reflection, the edge value or wrapping around."""
    x = _arr(ins[0])
    widths = _pad_widths(x.ndim, ins[1], _opt(ins, 3))
    # crop first, then pad what is left (onnxruntime bounds a reflection by the cropped size too)
    x = x[tuple(slice(max(-b, 0), n - max(-e, 0)) for n, (b, e) in zip(x.shape, widths))]
    widths = [(max(b, 0), max(e, 0)) for b, e in widths]
    mode = attrs.get("mode", "constant")
    if mode not in _PAD_MODES:
        raise ValueError(f"Pad mode {mode!r}")
    if mode == "constant":
        value = _opt(ins, 2)
        fill = x.dtype.type(0 if value is None or _arr(value).size == 0 else _scalar(value))
        return [np.pad(x, widths, mode="constant", constant_values=fill)]
    if x.size == 0 and any(w != (0, 0) for w in widths):
        raise ValueError(f"Pad mode {mode} of an empty tensor")
    return [np.pad(x, widths, mode=mode)]


def _s2d_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    b = int(attrs["blocksize"])
    if t.rank != 4:
        raise ValueError("SpaceToDepth needs a 4-D input")
    n, c, h, w = t.shape
    if not (isinstance(c, int) and isinstance(h, int) and isinstance(w, int)):
        return None
    if h % b or w % b:
        raise ValueError(f"SpaceToDepth: {h}x{w} is not a multiple of the block {b}")
    return [t.with_shape((n, c * b * b, h // b, w // b))]


@register("onnx.SpaceToDepth", _s2d_infer, arity=(1, 1))
def _space_to_depth(ins: A, attrs: D) -> list[np.ndarray]:
    """Move each b x b spatial block into channels: out channel = (dy * b + dx) * C + c (DCR)."""
    x = _arr(ins[0])
    b = int(attrs["blocksize"])
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b)
    perm = (0, 1, 3, 5, 2, 4) if attrs.get("mode", "DCR") == "CRD" else (0, 3, 5, 1, 2, 4)
    return [y.transpose(perm).reshape(n, c * b * b, h // b, w // b)]


# -- scans, masks, one-hot ------------------------------------------------------------------------
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
    k = _opt(ins, 1)
    k = 0 if k is None else int(_scalar(k))
    return [np.triu(x, k) if attrs.get("upper", 1) else np.tril(x, k)]


def _onehot_infer(ins: Ins, attrs: D) -> Types:
    ind, values = _type(ins, 0), _type(ins, 2)
    depth = const(_opt(ins, 1))
    if depth is None:
        return None
    shape = list(ind.shape)
    shape.insert(norm_axis(attrs.get("axis", -1), ind.rank + 1), int(_scalar(depth)))
    return [TensorType(values.dtype, tuple(shape))]


@register("onnx.OneHot", _onehot_infer, arity=(3, 3))
def _onehot(ins: A, attrs: D) -> list[np.ndarray]:
    """values[1] where the (new) ``axis`` position equals the index (negative from depth), values[0] elsewhere."""
    idx, values = _arr(ins[0]), _arr(ins[2]).reshape(-1)
    depth = int(_scalar(ins[1]))
    axis = norm_axis(attrs.get("axis", -1), idx.ndim + 1)
    idx = idx.astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)  # out of range after this: an all-off row
    hot = idx[..., None] == np.arange(depth)
    return [np.moveaxis(np.where(hot, values[1], values[0]).astype(values.dtype), -1, axis)]


def _eyelike_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    if "dtype" in attrs:
        _onnx_dtype(attrs["dtype"])
    return attrs


def _eyelike_infer(ins: Ins, attrs: D) -> Types:
    t = _type(ins, 0)
    if t.rank != 2:
        raise ValueError("EyeLike needs a 2-D input")
    return [TensorType(DType.from_onnx(int(attrs["dtype"])) if "dtype" in attrs else t.dtype, t.shape)]


@register("onnx.EyeLike", _eyelike_infer, arity=(1, 1), canonicalize=_eyelike_canon)
def _eyelike(ins: A, attrs: D) -> list[np.ndarray]:
    """Ones on diagonal k of a matrix shaped like the input (of type ``dtype``, default the input's)."""
    x = _arr(ins[0])
    dtype = _onnx_dtype(attrs["dtype"]) if "dtype" in attrs else x.dtype
    return [np.eye(x.shape[0], x.shape[1], int(attrs.get("k", 0)), dtype=dtype)]


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
