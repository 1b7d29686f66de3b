"""Calls that pick values by value or by index: ``ttnn.topk`` (the k largest or smallest along an
axis and their positions) and ``ttnn.embedding`` (rows of a table by index); and
``ttnn.matmul``, the one contraction a plan holds. Positions and indices travel as exact float32
integers."""

from __future__ import annotations

from typing import Any

import numpy as np

from spc.ttnn.calls.definition import (
    F32,
    Axis,
    Call,
    CallSpec,
    Count,
    F,
    PageLayoutName,
    ShapeError,
    axis,
    define,
    numel,
    refs,
    spell,
    torch,
)


def _topk(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Values and positions (exact float32 integers); ties by position, as a stable sort."""
    x, dim, k = ins[0], a["dim"], a["k"]
    key = -x if a["largest"] else x
    n = x.shape[dim]
    if x.size == n and 0 < k < n and not np.isnan(x).any():
        # one row (the keypoint window): the k-th key splits it into the positions before it (all
        # kept) and the ties at it (the first ones kept); only those k are sorted, stably
        row = key.reshape(n)
        kth = np.partition(row, k - 1)[k - 1]
        below = np.flatnonzero(row < kth)
        ties = np.flatnonzero(row == kth)[: k - below.size]
        pos = np.sort(np.concatenate([below, ties]))
        order = pos[np.argsort(row[pos], kind="stable")].reshape([k if d == dim % x.ndim else 1
                                                                  for d in range(x.ndim)])
    else:
        order = np.take(np.argsort(key, axis=dim, kind="stable"), np.arange(k), axis=dim)
    return np.take_along_axis(x, order, axis=dim), order.astype(F32)


def _topk_values(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    at = axis(a["dim"], len(ins[0]))
    if a["k"] > ins[0][at]:
        raise ShapeError(f"k = {a['k']} of {ins[0][at]} values")
    return numel(ins[0]) // ins[0][at] * a["k"]


def _topk_spelling(op: CallSpec) -> Call:
    a = op.args
    return Call(op.op, (refs(op)[0], a["k"]), {"dim": a["dim"], "largest": a["largest"], "sorted": a["sorted"]})


def topk_buffers(args: dict[str, Any], inputs: int) -> int:
    """Its dataflow buffers on its busiest core: 36 KiB + 576 B per slot (k rounded up to 32),
    fitted exactly to six sizes measured on the mock p150 (k 64 to 2400 on 0.3 to 2 million
    values; smaller inputs took 64 KiB, less than this). Not read from the source."""
    return 36864 + 576 * (-(-int(args["k"]) // 32) * 32)


define("ttnn.topk", _topk_spelling, _topk, _topk_values, buffers=topk_buffers,
       args={"dim": Axis, "k": Count, "largest": bool, "sorted": bool},
       required=frozenset({"dim", "k", "largest", "sorted"}), extra_outputs=1, tiled=True, stores=True)


def _embedding_values(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    index, table = ins
    return numel(index) * table[-1]


define("ttnn.embedding", lambda op: Call(op.op, tuple(refs(op)[:2]), {"layout": spell(op.args["layout"])}),
       lambda ins, w, a: ins[1][ins[0].astype(np.int64)], _embedding_values, inputs=(2, 2),
       args={"layout": PageLayoutName}, stores=True,
       emulate=lambda ins, w, a: F.embedding(ins[0].to(torch.int64), ins[1]))


def _matmul_values(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    x, y = ins
    if len(x) < 2 or len(y) < 2 or x[-1] != y[-2]:
        raise ShapeError(f"cannot multiply {x} by {y}")
    try:
        batch = np.broadcast_shapes(tuple(x[:-2]), tuple(y[:-2]))
    except ValueError:
        raise ShapeError(f"batch dimensions of {x} and {y} do not broadcast") from None
    return numel(batch) * x[-2] * y[-1]


define("ttnn.matmul", lambda op: Call(op.op, tuple(refs(op)[:2])),
       lambda ins, w, a: np.matmul(ins[0].astype(np.float64), ins[1].astype(np.float64)).astype(F32),
       _matmul_values, inputs=(2, 2), tiled=True,
       # bf16 operands, fp32 accumulation: HiFi4 with fp32 accumulation computes this up to summation order
       emulate=lambda ins, w, a: torch.matmul(ins[0], ins[1]))
