"""conv1d on tiny graphs: a pointwise 1-D Conv as MatMul + Add, any other as the 2-D Conv over a
unit height; both equal to the Conv they replace, and a 2-D Conv untouched."""

from __future__ import annotations

import numpy as np

from spc.ir.interpreter import evaluate_graph
from spc.passes.conv1d import Conv1d
from spc.passes.manager import PassContext
from tests.conftest import ir

RNG = np.random.default_rng(11)


def _graph(k: int, attrs: str, out_len: int, bias: bool = True):
    w = RNG.normal(size=(5, 3, k)).astype(np.float32)
    b = RNG.normal(size=(5,)).astype(np.float32)
    text = f"""graph @t(%x: f32[2,3,12]) {{
  %w: f32[5,3,{k}] = const @"w"
  %b: f32[5] = const @"b"
  %y: f32[2,5,{out_len}] = onnx.Conv(%x, %w{', %b' if bias else ''}) {{{attrs}}} #conv
  return %y
}}
"""
    return ir(text, w=w, b=b)


def test_pointwise_conv1d_is_a_matmul() -> None:
    for bias in (True, False):
        g = _graph(1, "kernel_shape = [1]", 12, bias)
        x = RNG.normal(size=(2, 3, 12)).astype(np.float32)
        want = evaluate_graph(g, {"x": x})[0]
        assert Conv1d().run(g, PassContext()).stats == {"conv1d": 1}
        assert [n.op.name for n in g.nodes] == ["onnx.MatMul", *(["onnx.Add"] if bias else [])]
        np.testing.assert_allclose(evaluate_graph(g, {"x": x})[0], want, rtol=1e-5, atol=1e-5)


def test_windowed_conv1d_is_the_2d_conv_over_a_unit_height() -> None:
    g = _graph(3, "kernel_shape = [3], strides = [2], pads = [1, 2], dilations = [1]", 7)
    x = RNG.normal(size=(2, 3, 12)).astype(np.float32)
    want = evaluate_graph(g, {"x": x})[0]
    assert Conv1d().run(g, PassContext()).stats == {"conv1d": 1}
    assert [n.op.name for n in g.nodes] == ["onnx.Unsqueeze", "onnx.Conv", "onnx.Squeeze"]
    conv = g.nodes[1]
    assert conv.attrs["kernel_shape"] == [1, 3] and conv.attrs["pads"] == [0, 1, 0, 2]
    np.testing.assert_allclose(evaluate_graph(g, {"x": x})[0], want, rtol=1e-5, atol=1e-5)


def test_2d_conv_is_left_alone() -> None:
    w = RNG.normal(size=(4, 2, 3, 3)).astype(np.float32)
    g = ir("""graph @t(%x: f32[1,2,6,7]) {
  %w: f32[4,2,3,3] = const @"w"
  %y: f32[1,4,6,7] = onnx.Conv(%x, %w) {pads = [1, 1, 1, 1]} #c
  return %y
}
""", w=w)
    assert not Conv1d().run(g, PassContext()).modified
