"""Calls that combine values along axes: ``ttnn.softmax`` (normalises along one) and the
reductions ``ttnn.sum``, ``ttnn.mean``, ``ttnn.max``, ``ttnn.min`` (keep the reduced axes as 1s
when ``keepdim``). Their results are tiled; sums and means (softmax's too) accumulate in float64 here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from spc.ttnn.calls.definition import F32, Axes, Axis, Call, CallSpec, ShapeError, axis, define, numel, refs, torch


def _softmax(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    # in float32, in place, the sum accumulated in float64: within 1e-7 (absolute) of a float64 softmax, and
    # no float64 copies of the map (a compile's validation: 2 ms, not 11, at 65 x 60 x 80)
    x = np.array(ins[0], dtype=F32)
    x -= x.max(axis=a["dim"], keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=a["dim"], keepdims=True, dtype=np.float64).astype(F32)
    return x


def _softmax_values(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    axis(a["dim"], len(ins[0]))
    return numel(ins[0])


define("ttnn.softmax", lambda op: Call(op.op, (refs(op)[0],), {"dim": op.args["dim"],
                                                               "numeric_stable": op.args["numeric_stable"]}),
       _softmax, _softmax_values, args={"dim": Axis, "numeric_stable": bool}, required=frozenset({"dim"}), tiled=True,
       # over the logical channels only: the tile padding never takes part
       emulate=lambda ins, w, a: torch.softmax(ins[0], dim=a["dim"]))


def _dims(a: dict[str, Any]) -> tuple[int, ...]:
    d = a["dim"]
    return tuple(int(x) for x in d) if isinstance(d, list) else (int(d),)


def _reduced_values(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    dims = a["dim"] if isinstance(a["dim"], list) else [a["dim"]]
    axes = {axis(d, len(ins[0])) for d in dims}
    if len(axes) != len(dims):
        raise ShapeError(f"dim {dims} names an axis twice")
    return numel([1 if i in axes else d for i, d in enumerate(ins[0])])


def _reduction(fn: Callable[..., np.ndarray], accumulate: bool) -> Callable[..., np.ndarray]:
    """``accumulate``: in float64 (a sum, a mean), cast as numpy reads the input, not as a copy."""
    extra = {"dtype": np.float64} if accumulate else {}
    return lambda ins, w, a: np.asarray(fn(ins[0], axis=_dims(a), keepdims=a["keepdim"], **extra)).astype(F32)


def _reduce_spelling(op: CallSpec) -> Call:
    return Call(op.op, (refs(op)[0],), {"dim": op.args["dim"], "keepdim": op.args["keepdim"]})


_EMULATED = {"sum": lambda ins, w, a: ins[0].sum(dim=a["dim"], keepdim=a["keepdim"]),
             "mean": lambda ins, w, a: ins[0].mean(dim=list(_dims(a)), keepdim=a["keepdim"]),
             "max": lambda ins, w, a: ins[0].amax(dim=list(_dims(a)), keepdim=a["keepdim"]),
             "min": lambda ins, w, a: ins[0].amin(dim=list(_dims(a)), keepdim=a["keepdim"])}
for _name, _fn, _accumulate in (("sum", np.sum, True), ("mean", np.mean, True), ("max", np.max, False),
                                ("min", np.min, False)):
    define(f"ttnn.{_name}", _reduce_spelling, _reduction(_fn, _accumulate), _reduced_values,
           args={"dim": Axis | Axes, "keepdim": bool}, required=frozenset({"dim", "keepdim"}), tiled=True,
           emulate=_EMULATED[_name])
