"""ONNX shape and layout ops: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Transpose
and SpaceToDepth.

Every evaluator is vectorised numpy and returns exactly ONNX's element type and shape. Inference
returns None only where the answer depends on a value that is not known here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spc.ir.ops import register
from spc.ir.ops.infer import axes_from, const, norm_axis
from spc.ir.ops.operands import A, D, Ins, Types, _arr, _in, _ints, _type
from spc.ir.types import Dim, DType, TensorType

# conformance cases spc refuses on purpose (frontend/conformance.py): case name -> why
CONFORMANCE_EXCEPTIONS: dict[str, str] = {}


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


# -- shapes -----------------------------------------------------------------------------------
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
    target = const(_in(ins, 1))
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
    a = _in(ins, 1)
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


# -- space to depth ---------------------------------------------------------------------------
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
