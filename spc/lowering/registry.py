"""Which IR ops lower to ttnn, and how: the one table that decides what can run on the device.

A lowering is registered with ``@lowers("onnx.Add", check=...)``: ``fn(em, node, ins)`` appends
ttnn calls to the :class:`~spc.lowering.emitter.Emitter` and returns the device tensor(s) holding
the node's outputs; ``check(node)`` returns why this node cannot be lowered (an attribute value,
a non-constant operand ttnn cannot take), or None. ``ins`` is aligned with ``node.inputs``: the
device tensor of each non-constant input, None for constants and absent inputs.

:func:`device_support` is what partition-host-device asks: an op with no lowering, or whose check
fails, runs on the host — never an error.
"""

from __future__ import annotations

from collections.abc import Callable

from msgspec import Struct

from spc.ir.graph import Node
from spc.ir.types import DType
from spc.lowering.emitter import Emitter
from spc.ttnn.layout import DeviceLayout

LowerFn = Callable[[Emitter, Node, list[str | None]], "str | list[str]"]
Check = Callable[[Node], "str | None"]


class Lowering(Struct, frozen=True):
    """How one IR op becomes ttnn calls, and the check that says when it cannot."""

    fn: LowerFn
    check: Check | None = None
    # takes integer tensors (computes them in float32, exact below 2^24): index arithmetic
    integers: bool = False
    # holds its operands and result in ttnn's conv layout [1, 1, N*H*W, C] (ttnn/layout.py): only
    # values of rank 2 to 4 have one, so placement asks it of every operand
    conv_form: bool = False


LOWERINGS: dict[str, Lowering] = {}


def lowers(op_name: str, check: Check | None = None, integers: bool = False,
           conv_form: bool = False) -> Callable[[LowerFn], LowerFn]:
    def wrap(fn: LowerFn) -> LowerFn:
        if op_name in LOWERINGS:
            raise ValueError(f"{op_name} lowered twice")
        LOWERINGS[op_name] = Lowering(fn, check, integers, conv_form)
        return fn

    return wrap


def _load() -> None:
    # a cycle: the lowering modules import this one to register their lowerings
    from spc.lowering import (  # noqa: F401
        fused,
        lower_elementwise,
        lower_matmul,
        lower_movement,
        lower_norm,
        lower_reduce,
        lower_resample,
    )


def lowering_for(op_name: str) -> Lowering | None:
    _load()
    return LOWERINGS.get(op_name)


def _device_type(t, integers: bool) -> str | None:
    if not t.is_static:
        return f"its shape {t} is not static"
    if t.numel == 0:
        return "it is empty"
    if t.dtype.is_float or t.dtype is DType.BOOL:
        return None
    if integers and t.dtype.is_int:
        return None
    return f"{t.dtype.value} tensors stay on the host (the device computes in floating point)"


def device_support(n: Node) -> str | None:
    """Why ``n`` cannot run on the device, or None when it can."""
    if n.op.data_dependent:
        return "its output shape depends on the data"
    low = lowering_for(n.op.name)
    if low is None:
        return f"no ttnn lowering for {n.op.name}"
    for o in n.outputs:
        why = _device_type(o.type, low.integers)
        if why:
            return f"output %{o.name}: {why}"
    for v in n.inputs:
        if v is not None and not v.is_const:
            why = _device_type(v.type, low.integers)
            if why:
                return f"input %{v.name}: {why}"
    if low.conv_form:
        for v in [n.inputs[0], *n.outputs] if n.inputs else n.outputs:
            if v is not None and not DeviceLayout.fits(v.type.static_shape):
                return f"%{v.name} is rank {v.type.rank}: ttnn's conv layout holds ranks 2 to 4"
    return low.check(n) if low.check else None
