"""fold-constants, simplify-shapes, remove-identity, eliminate-dead-code on tiny graphs."""

from __future__ import annotations

import numpy as np

from spc.ir.interpreter import evaluate_graph
from spc.ir.printer import print_graph
from spc.passes.eliminate_dead_code import EliminateDeadCode
from spc.passes.explain import Explainer
from spc.passes.fold_constants import MAX_FOLD_ELEMENTS, FoldConstants
from spc.passes.manager import PassContext
from spc.passes.remove_identity import RemoveIdentity
from spc.passes.simplify_shapes import SimplifyShapes
from tests.conftest import assert_ir, ir
from tests.passes.builder import Builder


def ops_of(g) -> list[str]:
    return [n.op.name for n in g.nodes]


def test_fold_constants_folds_shape_chains() -> None:
    g = ir("""graph @t(%x: f32[1,64,15,20]) {
  %two: i64[] = const dense<2>
  %s: i64[4] = onnx.Shape(%x) #shape
  %h: i64[] = onnx.Gather(%s, %two) {axis = 0} #h
  %n: f32[1,64,15,20] = onnx.Relu(%x) #relu
  return %h, %n
}
""")
    result = FoldConstants().run(g, PassContext())
    assert result.modified and result.stats["folded"] == 2
    assert ops_of(g) == ["onnx.Relu"]
    assert g.outputs[0].is_const and int(g.outputs[0].data) == 15


def test_fold_constants_keeps_large_results() -> None:
    g = ir("""graph @t(%x: f32[1]) {
  %z: f32[] = const dense<0.0>
  %shape: i64[2] = const dense<[480, 640]>
  %big: f32[480,640] = onnx.Expand(%z, %shape) #big
  return %big
}
""")
    assert not FoldConstants().run(g, PassContext()).modified
    assert ops_of(g) == ["onnx.Expand"]


def test_fold_constants_folds_a_large_weights_transpose() -> None:
    # no larger than the weight it reads, so folding cannot bloat the plan (LightGlue's projections)
    b = Builder((1, 256))
    w = b.const(np.arange(MAX_FOLD_ELEMENTS * 2, dtype=np.float32).reshape(256, -1))
    wt = b.op("Transpose", w, perm=[1, 0])
    g = b.done(b.op("MatMul", b.x, b.op("Transpose", wt, perm=[1, 0])))
    expected = evaluate_graph(g, {"x": np.ones((1, 256), np.float32)})
    assert FoldConstants().run(g, PassContext()).modified
    assert ops_of(g) == ["onnx.MatMul"]
    np.testing.assert_array_equal(evaluate_graph(g, {"x": np.ones((1, 256), np.float32)}), expected)


SHAPES = """graph @t(%x: f32[1,3,4,5]) {
  %zero: i64[1] = const dense<[0]>
  %one: i64[1] = const dense<[1]>
  %idx: i64[] = const dense<0>
  %shape6: i64[2] = const dense<[3, 20]>
  %shape3: i64[3] = const dense<[3, 4, 5]>
  %sq: f32[3,4,5] = onnx.Squeeze(%x, %zero) #sq
  %un: f32[1,3,4,5] = onnx.Unsqueeze(%sq, %zero) #un
  %g: f32[1,4,5] = onnx.Gather(%un, %idx) {axis = 1} #g
  %pick: f32[1,1,4,5] = onnx.Unsqueeze(%g, %one) #pick
  %r1: f32[3,20] = onnx.Reshape(%x, %shape6) #r1
  %r2: f32[3,4,5] = onnx.Reshape(%r1, %shape3) #r2
  %t1: f32[5,4,3] = onnx.Transpose(%r2) {perm = [2, 1, 0]} #t1
  %t2: f32[3,4,5] = onnx.Transpose(%t1) {perm = [2, 1, 0]} #t2
  return %pick, %t2
}
"""


def test_simplify_shapes_rules_and_semantics() -> None:
    g = ir(SHAPES)
    x = np.random.default_rng(0).normal(size=(1, 3, 4, 5)).astype(np.float32)
    before = evaluate_graph(g, {"x": x})
    result = SimplifyShapes().run(g, PassContext())
    assert result.stats == {"unsqueeze-squeeze": 1, "gather-to-slice": 1, "reshape-reshape": 1,
                            "transpose-transpose": 1}
    RemoveIdentity().run(g, PassContext())
    # the unit gather a slice, squeeze-unsqueeze gone, the reshapes one, the transposes the identity
    assert_ir(g, """graph @t(%x: f32[1,3,4,5]) {
  %g_start: i64[1] = const dense<[0]>
  %g_end: i64[1] = const dense<[1]>
  %g_axis: i64[1] = const dense<[1]>
  %r2_shape: i64[3] = const dense<[3, 4, 5]>
  %pick: f32[1,1,4,5] = onnx.Slice(%x, %g_start, %g_end, %g_axis) #g
  %t2: f32[3,4,5] = onnx.Reshape(%x, %r2_shape) #r2
  return %pick, %t2
}""")
    after = evaluate_graph(g, {"x": x})
    for a, b in zip(before, after):
        assert np.array_equal(a, b)


def test_simplify_shapes_leaves_different_axes() -> None:
    g = ir("""graph @t(%x: f32[1,1,5]) {
  %zero: i64[1] = const dense<[0]>
  %one: i64[1] = const dense<[1]>
  %sq: f32[1,5] = onnx.Squeeze(%x, %zero) #sq
  %un: f32[1,1,5] = onnx.Unsqueeze(%sq, %one) #un
  return %un
}
""")
    assert not SimplifyShapes().run(g, PassContext()).modified


def test_simplify_shapes_says_why_it_declines() -> None:
    g = ir("""graph @t(%x: f32[1,1,5]) {
  %zero: i64[1] = const dense<[0]>
  %one: i64[1] = const dense<[1]>
  %two: i64[] = const dense<2>
  %sq: f32[1,5] = onnx.Squeeze(%x, %zero) #sq
  %un: f32[1,1,5] = onnx.Unsqueeze(%sq, %one) #un
  %g: f32[1,1] = onnx.Gather(%un, %two) {axis = 2} #g
  return %g
}
""")
    ctx = PassContext(explainer=Explainer(frozenset({"simplify-shapes"})))
    SimplifyShapes().run(g, ctx)
    text = ctx.explainer.format()
    assert "unsqueeze-squeeze  #un (onnx.Unsqueeze)" in text
    assert "stopped: the check: #un works on axes [1], #sq on [0]" in text
    assert "unit-gather-to-squeeze  #g (onnx.Gather)" in text
    assert "stopped: the check: axis 2 of %un has size 5, not 1" in text


def test_unit_gather_becomes_squeeze() -> None:
    g = ir("""graph @t(%x: f32[1,1,4,5]) {
  %zero: i64[] = const dense<0>
  %two: i64[] = const dense<2>
  %a: f32[1,4,5] = onnx.Gather(%x, %zero) {axis = 1} #a
  %b: f32[1,5] = onnx.Gather(%a, %two) {axis = 1} #b
  return %b
}
""")
    x = np.random.default_rng(1).normal(size=(1, 1, 4, 5)).astype(np.float32)
    before = evaluate_graph(g, {"x": x})[0]
    assert SimplifyShapes().run(g, PassContext()).stats == {"unit-gather-to-squeeze": 1}
    assert ops_of(g) == ["onnx.Squeeze", "onnx.Gather"]  # index 2 of a size-4 axis stays a Gather
    assert np.array_equal(evaluate_graph(g, {"x": x})[0], before)


def test_remove_identity() -> None:
    g = ir("""graph @t(%x: f32[2,3]) {
  %shape: i64[2] = const dense<[2, 3]>
  %other: i64[2] = const dense<[3, 2]>
  %a: f32[2,3] = onnx.Identity(%x) #a
  %b: f32[2,3] = onnx.Dropout(%a) #b
  %c: f32[2,3] = onnx.Reshape(%b, %shape) #c
  %d: f32[2,3] = onnx.Transpose(%c) {perm = [0, 1]} #d
  %parts: i64[1] = const dense<[2]>
  %f: f32[2,3] = onnx.Split(%d, %parts) {axis = 0} #f
  %e: f32[3,2] = onnx.Reshape(%f, %other) #e
  return %e
}
""")
    result = RemoveIdentity().run(g, PassContext())
    assert result.stats["removed"] == 5
    assert ops_of(g) == ["onnx.Reshape"] and g.nodes[0].inputs[0] is g.inputs[0]


def test_a_reversing_slice_is_not_an_identity() -> None:
    """torch's flip exports as a Slice with step -1: same shape, other order (a fixed-K export's
    (y, x) -> (x, y) before sampling descriptors)."""
    g = ir("""graph @t(%x: f32[4,2]) {
  %s: i64[1] = const dense<[-1]>
  %e: i64[1] = const dense<[-9223372036854775807]>
  %a: i64[1] = const dense<[1]>
  %fwd: i64[1] = const dense<[1]>
  %z: i64[1] = const dense<[0]>
  %big: i64[1] = const dense<[9223372036854775807]>
  %flip: f32[4,2] = onnx.Slice(%x, %s, %e, %a, %s) #flip
  %same: f32[4,2] = onnx.Slice(%flip, %z, %big, %a, %fwd) #same
  return %same
}
""")
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    assert RemoveIdentity().run(g, PassContext()).stats["removed"] == 1
    assert ops_of(g) == ["onnx.Slice"] and np.array_equal(evaluate_graph(g, {"x": x})[0], x[:, ::-1])


def test_eliminate_dead_code() -> None:
    g = ir("""graph @t(%x: f32[4]) {
  %unused: f32[4] = const dense<[1.0, 2.0, 3.0, 4.0]>
  %a: f32[4] = onnx.Relu(%x) #a
  %dead: f32[4] = onnx.Add(%a, %unused) #dead
  %b: f32[4] = onnx.Neg(%x) #b
  return %b
}
""")
    assert EliminateDeadCode().run(g, PassContext()).stats["removed"] == 2
    assert print_graph(g) == """graph @t(%x: f32[4]) {
  %b: f32[4] = onnx.Neg(%x) #b
  return %b
}
"""
