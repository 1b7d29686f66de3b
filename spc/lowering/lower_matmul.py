"""Matrix products lowered one by one: MatMul, Gemm and the Einsum equations that are one batched
matrix product (``bhid,bhjd->bhij``) as ttnn.matmul in the plain form (constant operands on the
device once, batch dimensions repeated to match).
"""

from __future__ import annotations

import numpy as np

from spc.ir.graph import Node, Value
from spc.ir.ops.onnx_matmul import einsum_terms
from spc.lowering.emitter import Emitter
from spc.lowering.operands import Ins, elementwise_check, plain_of, shape_of, tensor_operand
from spc.lowering.registry import lowers
from spc.ttnn.layout import Form, PlainLayout


def _matmul_check(n: Node) -> str | None:
    if any(v is not None and v.type.rank < 2 for v in n.inputs[:2]):
        return "1-D matrix products stay on the host"
    return elementwise_check(n)


def _matrix(em: Emitter, n: Node, v: Value, name: str | None, rank: int, transpose: bool = False) -> str:
    if name is None:
        data = np.asarray(v.data, np.float32)
        if transpose:
            data = np.swapaxes(data, -1, -2)
        return em.constant(v, data, [1] * (rank - data.ndim) + list(data.shape), n.name)
    t = tensor_operand(em, v, name, Form.PLAIN, (1,) * rank, n.name)
    if transpose:
        shape = list(shape_of(v))
        shape[-1], shape[-2] = shape[-2], shape[-1]
        t = em.emit("ttnn.transpose", [t], name + "/T", PlainLayout(tuple(shape)), n.name, dim1=-2, dim2=-1)
    return t


def _batched(em: Emitter, n: Node, t: str, shape: tuple[int, ...], batch: tuple[int, ...]) -> str:
    """``t`` repeated over the batch dimensions ttnn.matmul needs equal on both sides (mock p150:
    "bmm expects input tensors of shapes BCMK*BCKN=BCMN")."""
    have = shape[:-2]
    if have == batch:
        return t
    reps = [b // h for b, h in zip(batch, have)] + [1, 1]
    return em.emit("ttnn.repeat", [t], t + "/batched", PlainLayout((*batch, *shape[-2:])), n.name, repeat_dims=reps)


@lowers("onnx.MatMul", check=_matmul_check)
def _matmul(em: Emitter, n: Node, ins: Ins) -> str:
    a, b = n.inputs[0], n.inputs[1]
    assert a is not None and b is not None
    r = n.output.type.rank
    batch = shape_of(n.output)[:-2]
    sides = []
    for v, name in ((a, ins[0]), (b, ins[1])):
        shape = (1,) * (r - v.type.rank) + shape_of(v)
        sides.append(_batched(em, n, _matrix(em, n, v, name, r), shape, batch))
    return em.emit("ttnn.matmul", sides, n.output.name, plain_of(n.output), n.name)


@lowers("onnx.Gemm", check=_matmul_check)
def _gemm(em: Emitter, n: Node, ins: Ins) -> str:
    a, b, c = n.inputs[0], n.inputs[1], n.input(2)
    assert a is not None and b is not None
    alpha, beta = float(n.attrs.get("alpha", 1.0)), float(n.attrs.get("beta", 1.0))
    base, lay = n.output.name, plain_of(n.output)
    y = em.emit("ttnn.matmul", [_matrix(em, n, a, ins[0], 2, bool(n.attrs.get("transA"))),
                                _matrix(em, n, b, ins[1], 2, bool(n.attrs.get("transB")))], base + "/ab", lay, n.name)
    if alpha != 1.0:
        y = em.emit("ttnn.multiply", [y], base + "/alpha", lay, n.name, scalar=alpha)
    if c is not None and beta != 0.0:
        shape = shape_of(n.output)
        bias = (em.constant(c, np.asarray(c.data, np.float32) * beta,
                            [1] * (2 - c.type.rank) + list(shape_of(c)), n.name) if c.is_const
                else tensor_operand(em, c, ins[2], Form.PLAIN, shape, n.name))  # type: ignore[arg-type]
        if not c.is_const and beta != 1.0:
            bias = em.emit("ttnn.multiply", [bias], base + "/beta", em.layouts[bias], n.name, scalar=beta)
        y = em.emit("ttnn.add", [y, bias], base + "/c", lay, n.name)
    return em.emit("ttnn.reshape", [y], base, lay, n.name, shape=lay.device_shape)


def _einsum_product(n: Node) -> tuple[list[int], list[int], list[int]] | str:
    """For an Einsum that is one batched matrix product: the permutations that bring A to
    ``[batch..., rows, k]``, B to ``[batch..., k, cols]`` and the product to the output's order;
    else why not."""
    vals = [v for v in n.inputs if v is not None]
    if len(vals) != 2:
        return f"an Einsum of {len(vals)} operand(s) stays on the host (the device takes products of two)"
    equation = str(n.attrs["equation"]).replace(" ", "")
    if "..." in equation:
        return "an Einsum with an ellipsis stays on the host"
    (ta, tb), out = einsum_terms(equation, [v.type.rank for v in vals])
    if any(len(set(t)) != len(t) for t in (ta, tb, out)):
        return "an Einsum with a repeated index (a diagonal) stays on the host"
    batch = [c for c in out if c in ta and c in tb]
    rows, cols = [c for c in out if c in ta and c not in tb], [c for c in out if c in tb and c not in ta]
    k = [c for c in ta if c in tb and c not in out]
    if len(rows) != 1 or len(cols) != 1 or len(k) != 1 or len(batch) + 2 != len(out) \
            or len(ta) != len(batch) + 2 or len(tb) != len(batch) + 2:
        return f"Einsum {equation!r} is not one batched matrix product (it stays on the host)"
    a, b = vals
    if any(dict(zip(ta, shape_of(a)))[c] != dict(zip(tb, shape_of(b)))[c] for c in [*batch, *k]):
        return f"Einsum {equation!r} broadcasts a size-1 axis (it stays on the host)"
    perm_a = [ta.index(c) for c in [*batch, rows[0], k[0]]]
    perm_b = [tb.index(c) for c in [*batch, k[0], cols[0]]]
    made = [*batch, rows[0], cols[0]]
    return perm_a, perm_b, [made.index(c) for c in out]


def _einsum_check(n: Node) -> str | None:
    why = _einsum_product(n)
    return why if isinstance(why, str) else elementwise_check(n)


def _permuted(em: Emitter, n: Node, v: Value, name: str | None, perm: list[int], tag: str) -> str:
    """``v`` with its axes in ``perm``'s order, on the device (a constant permuted on the host)."""
    shape = tuple(shape_of(v)[i] for i in perm)
    if name is None:
        return em.constant(v, np.ascontiguousarray(np.transpose(np.asarray(v.data, np.float32), perm)),
                           list(shape), n.name)
    t = tensor_operand(em, v, name, Form.PLAIN, shape, n.name)
    if perm == sorted(perm):
        return t
    return em.emit("ttnn.permute", [t], f"{n.output.name}/{tag}", PlainLayout(shape), n.name, dims=perm)


@lowers("onnx.Einsum", check=_einsum_check)
def _einsum(em: Emitter, n: Node, ins: Ins) -> str:
    product = _einsum_product(n)
    assert not isinstance(product, str)
    perm_a, perm_b, perm_out = product
    a, b = (v for v in n.inputs if v is not None)
    names = [x for v, x in zip(n.inputs, ins) if v is not None]
    sides = [_permuted(em, n, a, names[0], perm_a, "a"), _permuted(em, n, b, names[1], perm_b, "b")]
    out = shape_of(n.output)
    if perm_out == sorted(perm_out):
        return em.emit("ttnn.matmul", sides, n.output.name, plain_of(n.output), n.name)
    made = tuple(out[perm_out.index(i)] for i in range(len(out)))
    y = em.emit("ttnn.matmul", sides, f"{n.output.name}/product", PlainLayout(made), n.name)
    return em.emit("ttnn.permute", [em.tiled(y, n.name)], n.output.name, plain_of(n.output), n.name, dims=perm_out)
