"""fold-qdq: a statically quantized (QDQ) model as the float math its pairs compute.

Before::

    %w: f32[64,1,3,3] = onnx.DequantizeLinear(%w_q, %w_scale, %w_zero) {axis = 0}   // i8 constants
    %q: u8[1,1,60,80] = onnx.QuantizeLinear(%x, %s, %z)                             // %s = 1/255, %z = 0
    %d: f32[1,1,60,80] = onnx.DequantizeLinear(%q, %s, %z)
    %c: f32[1,64,60,80] = onnx.Conv(%d, %w, %b)
    %p: f32[1,64,30,40] = onnx.MaxPool(%e)                                           // %e = DQ(Q(%c2))

After::

    %k: f32[1,1,60,80] = spc.FakeQuant(%x) {scale = 1/255, lo = 0, hi = 255, unit = 1}   // the integers
    %a: f32[1,64,60,80] = onnx.Conv(%k, %w_int)           // w_q - w_zero
    %t: f32[1,64,60,80] = onnx.Mul(%a, %m)                // m = s * w_scale per output channel
    %c: f32[1,64,60,80] = onnx.Add(%t, %b)                // the bias after the scale, in float
    %e: f32[1,64,60,80] = spc.FakeQuant(%c2) {scale = s2, lo = 0, hi = 255, unit = s2}

A pair is exact as spc.FakeQuant: rint(x / s) is an integer, so adding the zero point z,
saturating and subtracting z again is the clip by the type's bounds less z, and the product with
s is the one DequantizeLinear rounds. A convolution of a dequantized pair by dequantized weights
is the convolution of the integers, scaled per output channel (fuse-conv-bias-relu keeps the
scale beside the conv): integers that bf16 and bfloat8_b hold exactly, summed exactly in fp32 up
to 2^24, as onnxruntime's integer kernels sum them in int32. The float model computes the same
up to the order of its roundings.

A pair is rewritten when the QuantizeLinear's integers are read by that DequantizeLinear only,
both take the same constant per-tensor scale and zero point, and the scale has the input's float
type. Anything else (an integer output, a requantization to another scale, per-axis activations)
stays as ONNX's nodes, on the host. The remaining dequantized constants (weights of other ops)
are folded whatever their size: fold-constants leaves results over its size cap as nodes.
"""

from __future__ import annotations

import numpy as np

from spc.ir import ops
from spc.ir.graph import Graph, Node, Value
from spc.ir.ops.onnx_quant import RANGES
from spc.passes.fold_constants import evaluate_node
from spc.passes.manager import Pass, PassContext, PassResult
from spc.passes.rewrite import Match, P, Rule, apply_rules, remove_dead

_PAIR = P("onnx.DequantizeLinear", P("onnx.QuantizeLinear", name="q", single_use=True), name="dq")
_CONV = P("onnx.Conv", P("spc.FakeQuant", name="fq"), P("onnx.DequantizeLinear", name="wdq"), name="conv")


def _same_const(a: Value | None, b: Value | None) -> bool:
    if a is None or b is None:
        return a is b
    return a is b or (a.is_const and b.is_const and a.data.dtype == b.data.dtype and np.array_equal(a.data, b.data))


def _pair_check(g: Graph, m: Match) -> str | None:
    q, dq = m.node("q"), m.node("dq")
    x, scale, zero = q.inputs[0], q.inputs[1], q.input(2)
    assert x is not None and scale is not None
    if not all(v is None or v.is_const for v in (*q.inputs[1:], *dq.inputs[1:])):
        return "the scale or zero point is computed, not a constant"
    if not (_same_const(scale, dq.input(1)) and _same_const(zero, dq.input(2))):
        return "the DequantizeLinear takes another scale or zero point than its QuantizeLinear (a requantization)"
    if scale.type.numel != 1 or (zero is not None and zero.type.numel != 1):
        return "per-axis activation quantization (one scale per channel) runs on the host"
    if q.attrs.get("precision") or dq.attrs.get("output_dtype"):
        return "a division precision or output type of its own"
    if not x.type.dtype.is_float or scale.type.dtype is not x.type.dtype or dq.output.type.dtype is not x.type.dtype:
        return f"the scale is {scale.type.dtype.value} and the input {x.type.dtype.value}"
    if q.output.type.dtype not in RANGES:
        return f"quantizes to {q.output.type.dtype.value}"
    s = float(scale.data.reshape(()))
    if not np.isfinite(s) or s <= 0:
        return f"scale {s} (ONNX asks for a positive one)"
    return None


def _pair(g: Graph, m: Match) -> Value:
    q, dq = m.node("q"), m.node("dq")
    scale, zero = q.inputs[1], q.input(2)
    assert scale is not None
    z = int(zero.data.reshape(())) if zero is not None else 0
    lo, hi = RANGES[q.output.type.dtype]
    s = float(scale.data.reshape(()))
    attrs = {"scale": s, "lo": float(lo - z), "hi": float(hi - z), "unit": s}
    return g.make_node(ops.get("spc.FakeQuant"), [q.inputs[0]], attrs, name=dq.name, take_name=True,
                       before=dq).output


def _dequantized(node: Node | None) -> bool:
    return node is not None and node.op.name == "onnx.DequantizeLinear" and all(
        v is None or v.is_const for v in node.inputs)


def _conv_check(g: Graph, m: Match) -> str | None:
    conv, wdq = m.node("conv"), m.node("wdq")
    w, bias = conv.inputs[1], conv.input(2)
    if not _dequantized(wdq) or w is None or not w.type.is_static or w.type.rank != 4:
        return "the weights are not a dequantized constant"
    if float(m.node("fq").attrs["unit"]) == 1.0:
        return "the input is already the integers"
    scale = wdq.inputs[1]
    assert scale is not None
    if scale.type.numel not in (1, w.type.static_shape[0]) or (
            scale.type.numel > 1 and int(wdq.attrs.get("axis", 1)) % 4 != 0) or wdq.attrs.get("block_size"):
        return "the weights are not quantized per tensor or per output channel"
    if not (np.isfinite(scale.data).all() and (scale.data > 0).all()):
        return "a weight scale that is not positive"
    if bias is not None and not (bias.is_const or _dequantized(bias.producer)):
        return "the bias is computed"
    return None


def _conv(g: Graph, m: Match) -> Value:
    conv, fq, wdq = m.node("conv"), m.node("fq"), m.node("wdq")
    steps = dict(fq.attrs, unit=1.0)
    k = g.make_node(ops.get("spc.FakeQuant"), [fq.inputs[0]], steps, name=fq.name + "/steps", before=conv).output
    w_q, w_scale, w_zero = wdq.inputs[0], wdq.inputs[1], wdq.input(2)
    assert w_q is not None and w_scale is not None
    c = int(w_q.type.static_shape[0])
    ints = w_q.data.astype(np.float64)
    if w_zero is not None:
        ints = ints - np.broadcast_to(w_zero.data.astype(np.float64).reshape(-1, 1, 1, 1) if w_zero.type.numel > 1
                                      else w_zero.data.astype(np.float64), ints.shape)
    per = np.broadcast_to(w_scale.data.astype(np.float64).reshape(-1), (c,))
    mult = float(fq.attrs["scale"]) * per
    w_int = g.add_const(w_q.name + "_int", ints.astype(np.float32))
    acc = g.make_node(ops.get("onnx.Conv"), [k, w_int], dict(conv.attrs), name=conv.name + "/integers",
                      before=conv).output
    scale = g.add_const(conv.name + "_scale", mult.astype(np.float32).reshape(1, c, 1, 1))
    bias = conv.input(2)
    if bias is None:
        return g.make_node(ops.get("onnx.Mul"), [acc, scale], {}, name=conv.name, take_name=True, before=conv).output
    y = g.make_node(ops.get("onnx.Mul"), [acc, scale], {}, name=conv.name + "/scaled", before=conv).output
    data = bias.data if bias.is_const else evaluate_node(
        bias.producer, [None if v is None else v.data for v in bias.producer.inputs])[0]  # type: ignore[union-attr]
    b = g.add_const(bias.name + "_f", data.astype(np.float32).reshape(1, c, 1, 1))
    return g.make_node(ops.get("onnx.Add"), [y, b], {}, name=conv.name, take_name=True, before=conv).output


PAIRS = [Rule("qdq-pair", _PAIR, _pair, check=_pair_check)]
CONVS = [Rule("qdq-conv", _CONV, _conv, check=_conv_check)]


class FoldQdq(Pass):
    name = "fold-qdq"
    summary = "QuantizeLinear -> DequantizeLinear pairs as spc.FakeQuant, integer convolutions, weights folded"
    explains = (name, *(r.name for r in (*PAIRS, *CONVS)))

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        counts = apply_rules(g, PAIRS, explain=ctx.explainer, pass_name=self.name)
        counts.update(apply_rules(g, CONVS, explain=ctx.explainer, pass_name=self.name))
        weights = 0
        for n in list(g.nodes):
            if _dequantized(n) and n.output.type.is_static:
                data = evaluate_node(n, [None if v is None else v.data for v in n.inputs])[0]
                g.replace_all_uses(n.output, g.add_const(n.output.name, data))
                weights += 1
        remove_dead(g)
        stats = {**counts, **({"weights": weights} if weights else {})}
        return PassResult(bool(stats), stats)
