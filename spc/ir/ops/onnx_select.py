"""ONNX ops whose output shape depends on the input values (data-dependent, they and all they
feed run on the host): NonZero, TopK, Compress and Unique.

Every evaluator is vectorised numpy and returns exactly ONNX's element type and shape; inference
is exact when every input is known, and otherwise None (left to ONNX's).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spc.ir.ops import register
from spc.ir.ops.infer import const, norm_axis
from spc.ir.ops.operands import A, D, Ins, Types, _arr, _in, _scalar, _type
from spc.ir.types import DType, TensorType

# conformance cases spc refuses on purpose (frontend/conformance.py): case name -> why
CONFORMANCE_EXCEPTIONS: dict[str, str] = {}


def _by_evaluation(fn: Callable[[A, D], list[np.ndarray]]) -> Callable[[Ins, D], Types]:
    """Inference for data-dependent ops: exact when every input is known, else left to ONNX."""

    def infer(ins: Ins, attrs: D) -> Types:
        if not all(v is None or v.is_const for v in ins):
            return None
        return [TensorType.of(np.asarray(r)) for r in fn([const(v) for v in ins], attrs)]

    return infer


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
    k = const(_in(ins, 1))
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
