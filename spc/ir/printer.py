"""The IR's text form: one SSA line per node, MLIR-like, parseable by :mod:`spc.ir.parser`.

    graph @superpoint(%pixel_values: f32[1,3,120,160]) {
      %w: f32[64,1,3,3] = const @"conv1.weight"
      %axes: i64[1] = const dense<[0]>
      %conv: f32[1,64,120,160] = spc.Conv2d(%x, %w, %b) {activation = "relu", ...} #conv2d @device
          <"conv1" w:bfloat16 HiFi4 fp32acc l1acc out:bfloat16>
      return %keypoints, %scores
    }

After ``#name`` come the compiler's decisions: ``@placement``, then ``<"block" precision>`` (on
the node's own line; wrapped here). Constants of up to INLINE_MAX elements print inline; larger
ones by reference to the weight store, so a dump of the whole network stays a few hundred lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from spc.ir.graph import Graph, Node, Placement, Value
from spc.ir.types import TensorType

INLINE_MAX = 16
# ops whose precision is the matrix engine's (weights format, fidelity, accumulation) as well
MATRIX_OPS = {"spc.Conv2d"}
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_./\-]+$")


def name_ref(name: str) -> str:
    return f"%{name}" if _PLAIN_NAME.match(name) else f"%{json.dumps(name)}"


def format_number(x: Any) -> str:
    if isinstance(x, (bool, np.bool_)):
        return "true" if x else "false"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return json.dumps(float(x))  # shortest repr; Infinity/NaN spelled as json accepts them


def format_dense(a: np.ndarray) -> str:
    flat = a.reshape(-1)
    if a.ndim == 0:
        return f"dense<{format_number(flat[0])}>"
    return "dense<[" + ", ".join(format_number(v) for v in flat) + "]>"


def format_attr(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"tensor<{TensorType.of(v)} {format_dense(v)[6:-1]}>"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(format_attr(x) for x in v) + "]"
    return format_number(v)


def format_attrs(attrs: dict[str, Any]) -> str:
    if not attrs:
        return ""
    return " {" + ", ".join(f"{k} = {format_attr(v)}" for k, v in sorted(attrs.items())) + "}"


def format_decisions(n: Node) -> str:
    """choose-precision's decisions: `` <"encoder.conv_blocks.0.conv_a" w:bfloat16 HiFi4 fp32acc l1acc
    out:bfloat16>`` (only the output format for ops without a matrix engine)."""
    if n.block is None:
        return ""
    spelled = "" if n.precision is None else " " + n.precision.spell(compute=n.op.name in MATRIX_OPS)
    return f" <{json.dumps(n.block)}{spelled}>"


def decision_fields(n: Node) -> dict[str, str]:
    """The same decisions by name, as the ONNX dumps' node metadata and the .dot labels show them:
    placement, block, and the precision fields the op uses (the matrix engine's for MATRIX_OPS,
    else only the stored format)."""
    out: dict[str, str] = {}
    if n.placement is not Placement.UNASSIGNED:
        out["placement"] = n.placement.value
    if n.block is not None:
        out["block"] = n.block
    p = n.precision
    if p is not None:
        if n.op.name in MATRIX_OPS:
            out.update(weights_dtype=p.weights_dtype.value, math_fidelity=p.math_fidelity.value,
                       fp32_dest_acc_en=format_number(p.fp32_dest_acc_en), packer_l1_acc=format_number(p.packer_l1_acc))
        out["output_dtype"] = p.output_dtype.value
    return out


def stored_format(v: Value, stored: Mapping[str, str] | None = None) -> str | None:
    """How the device stores ``v``: as the lowered program says (``stored``: format per device
    tensor, which keeps its IR value's name), else its producer's chosen output format; None for a
    value the host computes, or before choose-precision. The IR type stays the ONNX one (``f32``):
    the host reads and writes it so."""
    n = v.producer
    if n is None or n.placement is not Placement.DEVICE:
        return None
    if stored is not None and v.name in stored:
        return stored[v.name]
    return None if n.precision is None else n.precision.output_dtype.value


def const_line(v: Value) -> str:
    if v.weight_ref is not None or v.type.numel > INLINE_MAX:
        body = f"@{json.dumps(v.weight_ref or v.name)}"
    else:
        body = format_dense(v.data)
    return f"{name_ref(v.name)}: {v.type} = const {body}"


def print_graph(g: Graph) -> str:
    args = ", ".join(f"{name_ref(v.name)}: {v.type}" for v in g.inputs)
    lines = [f"graph @{g.name}({args}) {{"]
    used = {id(v) for n in g.nodes for v in n.inputs if v is not None} | {id(v) for v in g.outputs}
    for v in g.constants.values():
        if id(v) in used:
            lines.append("  " + const_line(v))
    for n in g.nodes:
        outs = ", ".join(f"{name_ref(o.name)}: {o.type}" for o in n.outputs)
        ins = ", ".join("_" if v is None else name_ref(v.name) for v in n.inputs)
        place = "" if n.placement is Placement.UNASSIGNED else f" @{n.placement.value}"
        lines.append(f"  {outs} = {n.op.name}({ins}){format_attrs(n.attrs)} #{n.name}{place}{format_decisions(n)}")
    lines.append("  return " + ", ".join(name_ref(v.name) for v in g.outputs))
    lines.append("}")
    return "\n".join(lines) + "\n"


def weight_store(g: Graph) -> dict[str, np.ndarray]:
    """The arrays that the text form refers to by name (the complement of inline constants)."""
    out = {}
    for v in g.constants.values():
        if v.weight_ref is not None or v.type.numel > INLINE_MAX:
            out[v.weight_ref or v.name] = v.data
    return out
