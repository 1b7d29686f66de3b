"""fold-qdq (and the scaled conv it leaves to fuse-conv-bias-relu) on tiny graphs."""

from __future__ import annotations

import re

import numpy as np

from spc.ir import ops
from spc.ir.interpreter import evaluate_graph
from spc.ir.printer import print_graph
from spc.passes.fold_qdq import FoldQdq
from spc.passes.fuse_conv_bias_relu import FuseConvBiasRelu
from spc.passes.manager import PassContext
from tests.conftest import ir

RNG = np.random.default_rng(0)
W_Q = RNG.integers(-127, 128, size=(4, 2, 3, 3)).astype(np.int8)
W_SCALE = RNG.uniform(0.001, 0.01, 4).astype(np.float32)
X = RNG.uniform(0, 1, size=(1, 2, 6, 7)).astype(np.float32)
S_X, S_Y = 1 / 255, 0.02


def _conv_graph(out_scale: float = S_Y, bias: bool = True):
    b_q = RNG.integers(-3000, 3000, 4).astype(np.int32)
    b_scale = (np.float32(S_X) * W_SCALE).astype(np.float32)
    text = """graph @t(%x: f32[1,2,6,7]) {
  %s: f32[] = const dense<""" + repr(float(np.float32(S_X))) + """>
  %z: u8[] = const dense<0>
  %sy: f32[] = const dense<""" + repr(float(np.float32(S_Y))) + """>
  %sy2: f32[] = const dense<""" + repr(float(np.float32(out_scale))) + """>
  %zy: u8[] = const dense<128>
  %wq: i8[4,2,3,3] = const @"wq"
  %ws: f32[4] = const @"ws"
  %wz: i8[4] = const @"wz"
  %bq: i32[4] = const @"bq"
  %bs: f32[4] = const @"bs"
  %bz: i32[4] = const @"bz"
  %q: u8[1,2,6,7] = onnx.QuantizeLinear(%x, %s, %z) #q
  %d: f32[1,2,6,7] = onnx.DequantizeLinear(%q, %s, %z) #dq
  %w: f32[4,2,3,3] = onnx.DequantizeLinear(%wq, %ws, %wz) {axis = 0} #wdq
  %b: f32[4] = onnx.DequantizeLinear(%bq, %bs, %bz) {axis = 0} #bdq
  %c: f32[1,4,6,7] = onnx.Conv(%d, %w""" + (", %b" if bias else "") + """) {pads = [1, 1, 1, 1]} #conv
  %qy: u8[1,4,6,7] = onnx.QuantizeLinear(%c, %sy, %zy) #qy
  %y: f32[1,4,6,7] = onnx.DequantizeLinear(%qy, %sy2, %zy) #dqy
  return %y
}
"""
    return ir(text, wq=W_Q, ws=W_SCALE, wz=np.zeros(4, np.int8), bq=b_q, bs=b_scale, bz=np.zeros(4, np.int32))


def test_fake_quant_is_quantize_then_dequantize() -> None:
    q, dq, fq = ops.get("onnx.QuantizeLinear"), ops.get("onnx.DequantizeLinear"), ops.get("spc.FakeQuant")
    x = RNG.normal(0, 3, size=(1, 3, 50, 40)).astype(np.float32)
    x.flat[:4] = [0.25, 0.75, -0.25, 1e9]  # halves round to even; saturation
    for zero in (np.uint8(0), np.uint8(119), np.int8(-5), np.int8(0)):
        s = np.float32(0.0137)
        want = dq.evaluate([q.evaluate([x, s, zero], {"axis": 1})[0], s, zero], {"axis": 1})[0]
        lo, hi = (0, 255) if zero.dtype == np.uint8 else (-128, 127)
        got = fq.evaluate([x], {"scale": float(s), "lo": float(lo - int(zero)), "hi": float(hi - int(zero)),
                                "unit": float(s)})[0]
        np.testing.assert_array_equal(got, want)


def test_pairs_and_integer_conv() -> None:
    g = _conv_graph()
    before = evaluate_graph(g, {"x": X})[0]
    stats = FoldQdq().run(g, PassContext()).stats
    assert stats == {"qdq-pair": 2, "qdq-conv": 1}  # the conv rule dequantizes the weights and the bias
    # the integer conv, its scale per channel and the bias as the docstring draws them (the
    # constants' values are the module RNG's, which the tests before this one draw from)
    got = re.sub(r"dense<\[[^\]]*\]>", "dense<...>", print_graph(g))
    assert got.strip() == """graph @t(%x: f32[1,2,6,7]) {
  %wq_int: f32[4,2,3,3] = const @"wq_int"
  %conv_scale: f32[1,4,1,1] = const dense<...>
  %b_f: f32[1,4,1,1] = const dense<...>
  %dq/steps: f32[1,2,6,7] = spc.FakeQuant(%x) {hi = 255.0, lo = 0.0, scale = 0.003921568859368563, unit = 1.0} #dq/steps
  %conv/integers: f32[1,4,6,7] = onnx.Conv(%dq/steps, %wq_int) {pads = [1, 1, 1, 1]} #conv/integers
  %conv/scaled: f32[1,4,6,7] = onnx.Mul(%conv/integers, %conv_scale) #conv/scaled
  %c: f32[1,4,6,7] = onnx.Add(%conv/scaled, %b_f) #conv
  %y: f32[1,4,6,7] = spc.FakeQuant(%c) {hi = 127.0, lo = -128.0, scale = 0.019999999552965164, unit = 0.019999999552965164} #dqy
  return %y
}"""
    assert FuseConvBiasRelu().run(g, PassContext()).stats == {"conv-scale": 1, "conv-bias": 1}
    assert [n.op.name for n in g.nodes] == ["spc.FakeQuant", "spc.Conv2d", "spc.FakeQuant"]
    k, conv, _ = g.nodes
    assert k.attrs["unit"] == 1.0 and conv.input(3) is not None
    w = conv.inputs[1].data
    np.testing.assert_array_equal(w, W_Q.astype(np.float32))  # the integers, not w_q * scale
    after = evaluate_graph(g, {"x": X})[0]
    # the same steps but where float rounding puts a value on the other side of a half-step
    steps = np.abs(after - before) / S_Y
    assert steps.max() <= 1 + 1e-6 and np.mean(steps > 0.5) < 0.01


def test_conv_without_bias() -> None:
    g = _conv_graph(bias=False)
    before = evaluate_graph(g, {"x": X})[0]
    FoldQdq().run(g, PassContext())
    FuseConvBiasRelu().run(g, PassContext())
    assert [n.op.name for n in g.nodes] == ["spc.FakeQuant", "spc.Conv2d", "spc.FakeQuant"]
    assert np.mean(np.abs(evaluate_graph(g, {"x": X})[0] - before) > S_Y / 2) < 0.01


def test_requantization_stays_onnx() -> None:
    g = _conv_graph(out_scale=0.05)  # the output pair dequantizes with another scale
    FoldQdq().run(g, PassContext())
    names = [n.op.name for n in g.nodes]
    assert names.count("onnx.QuantizeLinear") == 1 and names.count("onnx.DequantizeLinear") == 1
    assert "spc.FakeQuant" in names  # the input pair and the conv are still rewritten
