"""ONNX matrix products: MatMul, Gemm and Einsum."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from spc.ir.graph import Value
from spc.ir.ops import register
from spc.ir.ops.infer import broadcast
from spc.ir.ops.operands import A, D, Types, _opt, _x
from spc.ir.types import Dim

# conformance cases spc refuses on purpose (frontend/conformance.py): case name -> why
CONFORMANCE_EXCEPTIONS: dict[str, str] = {}


def _matmul_shape(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, ...]:
    if not a or not b:
        raise ValueError("MatMul of a scalar")
    aa = (1, *a) if len(a) == 1 else a
    bb = (*b, 1) if len(b) == 1 else b
    if isinstance(aa[-1], int) and isinstance(bb[-2], int) and aa[-1] != bb[-2]:
        raise ValueError(f"MatMul of {a} and {b}: inner dimensions differ")
    batch = broadcast(aa[:-2], bb[:-2])
    return (*batch, *(() if len(a) == 1 else (aa[-2],)), *(() if len(b) == 1 else (bb[-1],)))


def _matmul_infer(ins: list[Value | None], attrs: D) -> Types:
    a, b = _x(ins), ins[1]
    assert b is not None
    return [a.type.with_shape(_matmul_shape(a.type.shape, b.type.shape))]


def _mm_type(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float32) if dtype == np.float16 else dtype  # half precision products lose too much


@register("onnx.MatMul", _matmul_infer, arity=(2, 2))
def _matmul(ins: A, attrs: D) -> list[np.ndarray]:
    a, b = np.asarray(ins[0]), np.asarray(ins[1])
    work = _mm_type(a.dtype)
    return [np.asarray(np.matmul(a.astype(work, copy=False), b.astype(work, copy=False))).astype(a.dtype, copy=False)]


def _gemm_infer(ins: list[Value | None], attrs: D) -> Types:
    a, b = _x(ins), ins[1]
    assert b is not None
    sa, sb = a.type.shape, b.type.shape
    if len(sa) != 2 or len(sb) != 2:
        raise ValueError(f"Gemm takes matrices, got {a.type} and {b.type}")
    m = sa[1] if attrs.get("transA", 0) else sa[0]
    n = sb[0] if attrs.get("transB", 0) else sb[1]
    return [a.type.with_shape((m, n))]


@register("onnx.Gemm", _gemm_infer, arity=(2, 3))
def _gemm(ins: A, attrs: D) -> list[np.ndarray]:
    """alpha * A' @ B' + beta * C, C broadcast to (M, N)."""
    a, b, c = np.asarray(ins[0]), np.asarray(ins[1]), _opt(ins, 2)
    work = _mm_type(a.dtype) if a.dtype.kind == "f" else np.dtype(np.float64)
    a = a.T if attrs.get("transA", 0) else a
    b = b.T if attrs.get("transB", 0) else b
    y = a.astype(work) @ b.astype(work)
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    if alpha != 1.0:
        y = y * work.type(alpha)
    if c is not None:
        y = y + (c.astype(work) if beta == 1.0 else c.astype(work) * work.type(beta))
    return [y.astype(np.asarray(ins[0]).dtype)]


def einsum_terms(equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """Input terms and the output term (implicit mode: the letters used once, sorted, after the
    broadcast axes), spaces removed."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"Einsum {equation!r} names {len(terms)} operands, got {len(ranks)}")
    if not arrow:
        counts = Counter(ch for t in terms for ch in t.replace("...", ""))
        rhs = ("..." if "..." in lhs else "") + "".join(sorted(ch for ch, k in counts.items() if k == 1))
    return terms, rhs


def _einsum_infer(ins: list[Value | None], attrs: D) -> Types:
    vals = [v for v in ins if v is not None]
    terms, rhs = einsum_terms(attrs["equation"], [v.type.rank for v in vals])
    dims: dict[str, Dim] = {}
    ell: list[tuple[Dim, ...]] = []
    for term, v in zip(terms, vals):
        shape = v.type.shape
        pre, has, post = term.partition("...")
        n_ell = len(shape) - len(pre) - len(post)
        if n_ell < 0 or (n_ell and not has):
            raise ValueError(f"Einsum term {term!r} does not fit {v.type}")
        if has:
            ell.append(shape[len(pre):len(pre) + n_ell])
        for ch, d in zip(pre + post, shape[:len(pre)] + shape[len(pre) + n_ell:]):
            if dims.get(ch) in (None, 1):  # a size-1 axis broadcasts against the same letter elsewhere
                dims[ch] = d
    pre, has, post = rhs.partition("...")
    shape = (*(dims[c] for c in pre), *(broadcast(*ell) if has and ell else ()), *(dims[c] for c in post))
    return [vals[0].type.with_shape(shape)]


@register("onnx.Einsum", _einsum_infer, arity=(1, 99))
def _einsum(ins: A, attrs: D) -> list[np.ndarray]:
    xs = [np.asarray(a) for a in ins]
    work = _mm_type(xs[0].dtype)
    y = np.einsum(attrs["equation"].replace(" ", ""), *(x.astype(work, copy=False) for x in xs))
    return [np.asarray(y).astype(xs[0].dtype)]
