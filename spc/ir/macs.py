"""Multiply-adds of a node: what "the share of the work on the device" counts.

Convolutions (ONNX and fused), their transposes and matrix products; every other op is counted
as zero (element-wise work is memory-bound and small beside SuperPoint's 26 GMAC).
"""

from __future__ import annotations

import math

from spc.ir.graph import Node


def macs(n: Node) -> int:
    """Multiply-adds ``n`` computes (0 when unknown or not a matrix-engine op)."""
    if not all(o.type.is_static for o in n.outputs) or not n.outputs:
        return 0
    name = n.op.name
    if name in ("onnx.Conv", "spc.Conv2d", "onnx.ConvTranspose"):
        w = n.inputs[1]
        if w is None or not w.type.is_static:
            return 0
        ws = w.type.static_shape
        out = math.prod(n.outputs[0].type.static_shape)
        if name == "onnx.ConvTranspose":  # every input value meets every tap of its group's filters
            x = n.inputs[0]
            return math.prod(x.type.static_shape) * math.prod(ws[1:]) if x is not None and x.type.is_static else 0
        return out * math.prod(ws[1:])
    if name in ("onnx.MatMul", "onnx.Gemm"):
        a = n.inputs[0]
        if a is None or not a.type.is_static:
            return 0
        k = a.type.static_shape[0 if n.attrs.get("transA") else -1]
        return math.prod(n.outputs[0].type.static_shape) * int(k)
    return 0
