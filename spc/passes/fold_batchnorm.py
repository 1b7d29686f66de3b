"""fold-batchnorm: fold an inference BatchNormalization into the Conv that feeds it.

Before::

    %c: f32[1,64,60,80] = onnx.Conv(%x, %w, %b) {...}
    %y: f32[1,64,60,80] = onnx.BatchNormalization(%c, %gamma, %beta, %mean, %var) {epsilon = 0.001}

After::

    %y: f32[1,64,60,80] = onnx.Conv(%x, %w', %b') {...}

with w' = w * a, b' = (b - mean) * a + beta, a = gamma / sqrt(var + eps): exact, because the BN
is affine per output channel and nothing lies between. A BN before a conv is not folded: with
zero padding that is inexact at the border.
"""

from __future__ import annotations

import numpy as np

from spc.ir import ops
from spc.ir.graph import Graph
from spc.passes.rewrite import ANY, Match, P, Rule, RulePass


def _fold(g: Graph, m: Match):
    conv, bn = m.node("conv"), m.node("bn")
    w = conv.inputs[1]
    assert w is not None
    gamma, beta, mean, var = (v.data.astype(np.float64) for v in bn.inputs[1:5])  # type: ignore[union-attr]
    a = gamma / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
    b = conv.inputs[2].data.astype(np.float64) if conv.input(2) is not None else np.zeros_like(a)
    # per output channel, the weight's first axis, whatever its rank (Conv1d [O, I, k], Conv2d, Conv3d)
    w2 = (w.data.astype(np.float64) * a.reshape((-1,) + (1,) * (w.data.ndim - 1))).astype(w.data.dtype)
    b2 = ((b - mean) * a + beta).astype(w.data.dtype)
    new_w = g.add_const(w.name + "_bn", w2, weight_ref=(w.weight_ref or w.name) + "_bn")
    new_b = g.add_const(bn.name + "_bias", b2)
    return g.make_node(ops.get("onnx.Conv"), [conv.inputs[0], new_w, new_b], dict(conv.attrs),
                       name=conv.name, take_name=True, before=bn).output


RULES = [Rule("conv-batchnorm",
              P("onnx.BatchNormalization",
                P("onnx.Conv", ANY, P(const=True), name="conv", single_use=True),
                P(const=True), P(const=True), P(const=True), P(const=True), name="bn"),
              _fold,
              check=lambda g, m: _check(m))]


def _check(m) -> str | None:
    if not all(v is None or v.is_const for v in m.node("conv").inputs[1:]):
        return "conv bias is not constant"
    w = m.node("conv").inputs[1]
    if w is None or w.data.ndim < 3 or w.data.shape[0] != m.node("bn").inputs[1].data.size:  # type: ignore[union-attr]
        return "the batch norm's channels are not the conv's output channels"
    if m.node("bn").attrs.get("training_mode") or len(m.node("bn").outputs) > 1:
        return "training-mode batch norm uses the batch's statistics, not the stored ones"
    return None


class FoldBatchNorm(RulePass):
    name = "fold-batchnorm"
    summary = "fold inference BatchNormalization into the preceding Conv (exact)"
    rules = RULES
