"""What the op-by-op lowerings share (lower_elementwise.py, lower_reduce.py, lower_norm.py,
lower_movement.py, lower_matmul.py: every ONNX op ttnn can compute, lowered on its own where no
fusion recognised a region): shapes and layouts of IR values, the form an element-wise op computes
in and its operands in that form, and the check most of them make.

Each lowering picks the form it computes in (ttnn/layout.py). Booleans are held as 0/1 in the float
storage format, as ttnn's comparisons return them; integer tensors stay on the host. Scalar
constants are passed to ttnn as numbers, others go on the device once (Emitter.constant). ``check``
functions say why a node cannot be lowered; the node then runs on the host (partition-host-device),
never an error.
"""

from __future__ import annotations

import numpy as np

from spc.ir.graph import Node, Value
from spc.lowering.emitter import Emitter
from spc.ttnn.layout import DeviceLayout, Form, Layout, PlainLayout

Ins = list[str | None]


def shape_of(v: Value) -> tuple[int, ...]:
    return tuple(int(d) for d in v.type.static_shape)


def plain_of(v: Value) -> PlainLayout:
    return PlainLayout(shape_of(v))


def scalar_of(v: Value | None) -> float | None:
    """The value of a one-element constant, as a Python number."""
    if v is None or not v.is_const or v.type.numel != 1:
        return None
    x = np.asarray(v.data).reshape(-1)[0]
    return bool(x) if x.dtype == np.bool_ else float(x)


def live_inputs(n: Node, ins: Ins) -> list[tuple[Value, str]]:
    return [(v, name) for v, name in zip(n.inputs, ins) if v is not None and name is not None]


def out_layout(form: Form, v: Value) -> Layout:
    return DeviceLayout.of(shape_of(v)) if form is Form.NHWC else plain_of(v)


# -- operands of element-wise ops ---------------------------------------------------------------
def _nhwc_operand_ok(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    """Whether an operand of ``shape`` broadcasts to ``out`` in the conv form: the same map, the
    map without its channels ([1,1,NHW,1]) or a per-channel vector ([1,1,1,C])."""
    if shape == out:
        return True
    if len(out) != 4:
        return False
    s = (1,) * (4 - len(shape)) + shape
    return ((s[0], s[2], s[3]) == (out[0], out[2], out[3]) and s[1] == 1) or s[0] == s[2] == s[3] == 1


def _form(em: Emitter, n: Node, ins: Ins) -> Form:
    """nhwc when every non-constant operand is held in the conv form and broadcasts there."""
    out = shape_of(n.outputs[0])
    live = live_inputs(n, ins)
    if live and DeviceLayout.fits(out) and all(em.form(name) is Form.NHWC and _nhwc_operand_ok(shape_of(v), out)
                                                for v, name in live):
        return Form.NHWC
    return Form.PLAIN


def _const_operand(em: Emitter, v: Value, form: Form, out: tuple[int, ...], source: str) -> str:
    data = np.asarray(v.data, np.float32)
    if form is Form.PLAIN:
        return em.constant(v, data, [1] * (len(out) - data.ndim) + list(data.shape), source)
    if len(out) != 4:  # a 3-D or 2-D map in the conv form is [1, 1, N*H*W, 1]
        full = np.broadcast_to(data, out)
        return em.constant(v, full, DeviceLayout.of(out).device_shape, source)
    d4 = data.reshape((1,) * (4 - data.ndim) + data.shape)
    if d4.shape[0] == d4.shape[2] == d4.shape[3] == 1:
        return em.constant(v, d4, [1, 1, 1, d4.shape[1]], source)
    full = np.broadcast_to(d4, (out[0], d4.shape[1], out[2], out[3]))
    return em.constant(v, full.transpose(0, 2, 3, 1), [1, 1, out[0] * out[2] * out[3], d4.shape[1]], source)


def tensor_operand(em: Emitter, v: Value, name: str, form: Form, out: tuple[int, ...], source: str) -> str:
    if form is Form.NHWC:
        return em.tiled(name, source)
    t = em.tiled(em.to_plain(name, v, source), source)
    shape = shape_of(v)
    if len(shape) < len(out):  # ttnn broadcasts between operands of one rank
        full = (1,) * (len(out) - len(shape)) + shape
        ranked = f"{name}/rank{len(out)}"
        if ranked in em.layouts:  # another node already brought this operand to that rank
            return ranked
        t = em.emit("ttnn.reshape", [t], ranked, PlainLayout(full), source, shape=list(full))
    return t


def operands(em: Emitter, n: Node, ins: Ins, scalars: bool = True) -> tuple[Form, list[str | float]]:
    """The form to compute in and each input as a device tensor or, for a one-element constant,
    a number (when ``scalars``)."""
    form = _form(em, n, ins)
    out = shape_of(n.outputs[0])
    got: list[str | float] = []
    for v, name in zip(n.inputs, ins):
        if v is None:
            continue
        s = scalar_of(v) if scalars else None
        if s is not None:
            got.append(s)
        elif name is None:
            got.append(_const_operand(em, v, form, out, n.name))
        else:
            got.append(tensor_operand(em, v, name, form, out, n.name))
    return form, got


def elementwise_check(n: Node) -> str | None:
    """Why ttnn cannot take this node's operands: none is computed, or one has over 8 dimensions."""
    live = [v for v in n.inputs if v is not None and not v.is_const]
    if not live:
        return "every operand is a constant (fold-constants leaves this to the host)"
    if any(v.type.rank > 8 for v in live) or n.outputs[0].type.rank > 8:
        return "ttnn tensors have at most 8 dimensions"
    return None


def alias(em: Emitter, n: Node, ins: Ins) -> str:
    """The same device tensor under another IR name: no call."""
    assert ins[0] is not None
    return ins[0]
