"""fold-batchnorm and fuse-conv-bias-relu on tiny graphs."""

from __future__ import annotations

import numpy as np

from spc.ir.interpreter import evaluate_graph
from spc.passes.fold_batchnorm import FoldBatchNorm
from spc.passes.fuse_conv_bias_relu import FuseConvBiasRelu
from spc.passes.manager import PassContext
from tests.conftest import assert_ir, ir

RNG = np.random.default_rng(0)
W = RNG.normal(size=(4, 2, 3, 3)).astype(np.float32)
B = RNG.normal(size=(4,)).astype(np.float32)
BN = {"gamma": RNG.uniform(0.5, 2, 4).astype(np.float32), "beta": RNG.normal(size=4).astype(np.float32),
      "mean": RNG.normal(size=4).astype(np.float32), "var": RNG.uniform(0.5, 2, 4).astype(np.float32)}
X = RNG.normal(size=(1, 2, 6, 7)).astype(np.float32)

BN_PARAMS = """  %gamma: f32[4] = const dense<[{}]>
  %beta: f32[4] = const dense<[{}]>
  %mean: f32[4] = const dense<[{}]>
  %var: f32[4] = const dense<[{}]>
""".format(*(", ".join(repr(float(v)) for v in BN[k]) for k in ("gamma", "beta", "mean", "var")))


def test_fold_batchnorm_after_conv_is_exact() -> None:
    g = ir("""graph @t(%x: f32[1,2,6,7]) {
  %w: f32[4,2,3,3] = const @"w"
  %b: f32[4] = const @"b"
""" + BN_PARAMS + """  %c: f32[1,4,6,7] = onnx.Conv(%x, %w, %b) {pads = [1, 1, 1, 1]} #c
  %y: f32[1,4,6,7] = onnx.BatchNormalization(%c, %gamma, %beta, %mean, %var) {epsilon = 0.001} #bn
  return %y
}
""", w=W, b=B)
    before = evaluate_graph(g, {"x": X})[0]
    assert FoldBatchNorm().run(g, PassContext()).stats == {"conv-batchnorm": 1}
    assert [n.op.name for n in g.nodes] == ["onnx.Conv"]
    np.testing.assert_allclose(evaluate_graph(g, {"x": X})[0], before, rtol=1e-5, atol=1e-5)


def test_fold_batchnorm_after_conv1d_and_conv3d() -> None:
    """SuperGlue's MLPs are Conv1d + BatchNorm1d: the scale goes on the weight's first axis
    whatever its rank (it once broadcast a [4, 2, 3] weight to [4, 4, 2, 3])."""
    for spatial in ([7], [3, 4, 5]):
        shape = "x".join(map(str, spatial))
        k = [3] * len(spatial)
        pads = [1] * (2 * len(spatial))
        w = RNG.normal(size=(4, 2, *k)).astype(np.float32)
        g = ir(f"""graph @t(%x: f32[1,2,{','.join(map(str, spatial))}]) {{
  %w: f32[4,2,{','.join(map(str, k))}] = const @"w"
""" + BN_PARAMS + f"""  %c: f32[1,4,{','.join(map(str, spatial))}] = onnx.Conv(%x, %w) {{pads = {pads}}} #c
  %y: f32[1,4,{','.join(map(str, spatial))}] = onnx.BatchNormalization(%c, %gamma, %beta, %mean, %var) #bn
  return %y
}}
""", w=w)
        x = RNG.normal(size=(1, 2, *spatial)).astype(np.float32)
        before = evaluate_graph(g, {"x": x})[0]
        assert FoldBatchNorm().run(g, PassContext()).stats == {"conv-batchnorm": 1}, shape
        folded = next(n for n in g.nodes if n.op.name == "onnx.Conv").inputs[1]
        assert folded is not None and folded.data.shape == w.shape
        np.testing.assert_allclose(evaluate_graph(g, {"x": x})[0], before, rtol=1e-5, atol=1e-5)


def test_fold_batchnorm_skips_shared_conv_and_bn_first() -> None:
    shared = ir("""graph @t(%x: f32[1,2,6,7]) {
  %w: f32[4,2,3,3] = const @"w"
""" + BN_PARAMS + """  %c: f32[1,4,6,7] = onnx.Conv(%x, %w) {pads = [1, 1, 1, 1]} #c
  %y: f32[1,4,6,7] = onnx.BatchNormalization(%c, %gamma, %beta, %mean, %var) #bn
  return %y, %c
}
""", w=W)
    assert not FoldBatchNorm().run(shared, PassContext()).modified
    bn_first = ir("""graph @t(%x: f32[1,4,6,7]) {
  %w: f32[4,4,3,3] = const @"w"
""" + BN_PARAMS + """  %n: f32[1,4,6,7] = onnx.BatchNormalization(%x, %gamma, %beta, %mean, %var) #bn
  %c: f32[1,4,6,7] = onnx.Conv(%n, %w) {pads = [1, 1, 1, 1]} #c
  return %c
}
""", w=np.zeros((4, 4, 3, 3), np.float32))
    assert not FoldBatchNorm().run(bn_first, PassContext()).modified


CONV_RELU = """graph @t(%x: f32[1,2,6,7]) {
  %w: f32[4,2,3,3] = const @"w"
  %b: f32[4] = const @"b"
  %c: f32[1,4,6,7] = onnx.Conv(%x, %w, %b) {pads = [1, 1, 1, 1], strides = [1, 1]} #c
  %r: f32[1,4,6,7] = onnx.Relu(%c) #r
  %c2: f32[1,4,3,4] = onnx.Conv(%r, %w2) {pads = [0, 0, 0, 0], strides = [2, 2]} #c2
  return %c2
}
"""


def test_fuse_conv_bias_relu() -> None:
    g = ir(CONV_RELU.replace('  %c: f32', '  %w2: f32[4,4,1,1] = const @"w2"\n  %c: f32'),
           w=W, b=B, w2=RNG.normal(size=(4, 4, 1, 1)).astype(np.float32))
    before = evaluate_graph(g, {"x": X})[0]
    assert FuseConvBiasRelu().run(g, PassContext()).stats == {"conv-relu": 1, "conv": 1}
    assert_ir(g, """graph @t(%x: f32[1,2,6,7]) {
  %w: f32[4,2,3,3] = const @"w"
  %b: f32[4] = const @"b"
  %w2: f32[4,4,1,1] = const @"w2"
  %r: f32[1,4,6,7] = spc.Conv2d(%x, %w, %b) {activation = "relu", dilations = [1, 1], group = 1, \
kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [1, 1]} #c
  %c2: f32[1,4,3,4] = spc.Conv2d(%r, %w2) {activation = "none", dilations = [1, 1], group = 1, \
kernel_shape = [1, 1], pads = [0, 0, 0, 0], strides = [2, 2]} #c2
  return %c2
}""")
    np.testing.assert_allclose(evaluate_graph(g, {"x": X})[0], before, rtol=1e-5, atol=1e-5)


def test_conv_with_other_users_keeps_its_relu() -> None:
    g = ir("""graph @t(%x: f32[1,2,6,7]) {
  %w: f32[4,2,3,3] = const @"w"
  %c: f32[1,4,6,7] = onnx.Conv(%x, %w) {pads = [1, 1, 1, 1]} #c
  %r: f32[1,4,6,7] = onnx.Relu(%c) #r
  return %r, %c
}
""", w=W)
    FuseConvBiasRelu().run(g, PassContext())
    assert [n.op.name for n in g.nodes] == ["spc.Conv2d", "onnx.Relu"]
    assert g.nodes[0].attrs["activation"] == "none"


def test_auto_pad_same_fuses_with_onnx_own_pads() -> None:
    """jax2onnx's Conv: auto_pad SAME_UPPER (and SAME_LOWER, VALID), no kernel_shape, stride 1 and
    2 on an odd size: the fused conv's explicit pads are ONNX's, so it computes what the Conv does."""
    for mode, strides, out in (("SAME_UPPER", 1, "6,7"), ("SAME_LOWER", 2, "3,4"), ("SAME_UPPER", 2, "3,4"),
                               ("VALID", 1, "4,5")):
        g = ir(f"""graph @t(%x: f32[1,2,6,7]) {{
  %w: f32[4,2,3,3] = const @"w"
  %c: f32[1,4,{out}] = onnx.Conv(%x, %w) {{auto_pad = "{mode}", strides = [{strides}, {strides}]}} #c
  return %c
}}
""", w=W)
        before = evaluate_graph(g, {"x": X})[0]
        assert FuseConvBiasRelu().run(g, PassContext()).stats == {"conv": 1}, mode
        assert [n.op.name for n in g.nodes] == ["spc.Conv2d"] and "auto_pad" not in g.nodes[0].attrs
        np.testing.assert_allclose(evaluate_graph(g, {"x": X})[0], before, rtol=1e-5, atol=1e-5, err_msg=mode)
