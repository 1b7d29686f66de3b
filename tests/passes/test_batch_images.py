"""batch-images on tiny graphs: the batched model computes, image by image, what the batch-1 model
computes (outputs stacked, padded with zeros where the images' sizes differ); it says where the
model stops being image-wise and refuses outputs without a batch axis."""

from __future__ import annotations

import numpy as np
import pytest

from spc.errors import SpcError
from spc.ir.interpreter import evaluate_graph
from spc.ir.verify import verify
from spc.passes.batch_images import BatchImages
from spc.passes.manager import PassContext
from tests.conftest import assert_ir, ir

RNG = np.random.default_rng(7)

# image-wise all the way: a conv, a channel softmax, a reshape that keeps the batch axis
DENSE = """graph @t(%x: f32[1,2,6,8]) {
  %w: f32[5,2,3,3] = const @"w"
  %shape: i64[3] = const dense<[1, 5, 48]>
  %c: f32[1,5,6,8] = onnx.Conv(%x, %w) {pads = [1, 1, 1, 1]} #conv
  %s: f32[1,5,6,8] = onnx.Softmax(%c) {axis = 1} #softmax
  %r: f32[1,5,48] = onnx.Reshape(%s, %shape) #flat
  return %r
}
"""

# HF's shape: a dense head, then per image a data-dependent selection (NonZero) whose count differs
SELECT = """graph @t(%x: f32[1,1,4,5]) {
  %w: f32[3,1,1,1] = const @"w"
  %zero: i64[1] = const dense<[0]>
  %one: i64[1] = const dense<[1]>
  %half: f32[] = const dense<0.5>
  %c: f32[1,3,4,5] = onnx.Conv(%x, %w) #conv
  %m: f32[1,4,5] = onnx.ReduceMax(%c, %one) {keepdims = 0} #reduce
  %sq: f32[4,5] = onnx.Squeeze(%m, %zero) #per_image
  %gt: i1[4,5] = onnx.Greater(%sq, %half) #gt
  %nz: i64[2,n] = onnx.NonZero(%gt) #nonzero
  %t: i64[n,2] = onnx.Transpose(%nz) {perm = [1, 0]} #t
  %k: i64[1,n,2] = onnx.Unsqueeze(%t, %zero) #batch_axis
  return %k, %c
}
"""


# the batch in the first dimension, the reshape's target says it
DENSE_BATCHED = """graph @t(%x: f32[3,2,6,8]) {
  %w: f32[5,2,3,3] = const @"w"
  %flat_batch_shape: i64[3] = const dense<[3, 5, 48]>
  %c: f32[3,5,6,8] = onnx.Conv(%x, %w) {pads = [1, 1, 1, 1]} #conv
  %s: f32[3,5,6,8] = onnx.Softmax(%c) {axis = 1} #softmax
  %r: f32[3,5,48] = onnx.Reshape(%s, %flat_batch_shape) #flat
  return %r
}
"""

# the selection copied per image on its slice of the batched prefix, the copies padded and stacked
SELECT_BATCHED = """graph @t(%x: f32[2,1,4,5]) {
  %w: f32[3,1,1,1] = const @"w"
  %zero: i64[1] = const dense<[0]>
  %one: i64[1] = const dense<[1]>
  %half: f32[] = const dense<0.5>
  %m/image0_start: i64[1] = const dense<[0]>
  %m/image0_end: i64[1] = const dense<[1]>
  %m/image0_axis: i64[1] = const dense<[0]>
  %m/image1_start: i64[1] = const dense<[1]>
  %m/image1_end: i64[1] = const dense<[2]>
  %m/image1_axis: i64[1] = const dense<[0]>
  %k/pad_before: i64[3] = const dense<[0, 0, 0]>
  %c: f32[2,3,4,5] = onnx.Conv(%x, %w) #conv
  %m: f32[2,4,5] = onnx.ReduceMax(%c, %one) {keepdims = 0} #reduce
  %m/image0: f32[1,4,5] = onnx.Slice(%m, %m/image0_start, %m/image0_end, %m/image0_axis) #m/image0
  %sq/image0: f32[4,5] = onnx.Squeeze(%m/image0, %zero) #per_image/image0
  %gt/image0: i1[4,5] = onnx.Greater(%sq/image0, %half) #gt/image0
  %nz/image0: i64[2,n_image0] = onnx.NonZero(%gt/image0) #nonzero/image0
  %t/image0: i64[n_image0,2] = onnx.Transpose(%nz/image0) {perm = [1, 0]} #t/image0
  %k/image0: i64[1,n_image0,2] = onnx.Unsqueeze(%t/image0, %zero) #batch_axis/image0
  %m/image1: f32[1,4,5] = onnx.Slice(%m, %m/image1_start, %m/image1_end, %m/image1_axis) #m/image1
  %sq/image1: f32[4,5] = onnx.Squeeze(%m/image1, %zero) #per_image/image1
  %gt/image1: i1[4,5] = onnx.Greater(%sq/image1, %half) #gt/image1
  %nz/image1: i64[2,n_image1] = onnx.NonZero(%gt/image1) #nonzero/image1
  %t/image1: i64[n_image1,2] = onnx.Transpose(%nz/image1) {perm = [1, 0]} #t/image1
  %k/image1: i64[1,n_image1,2] = onnx.Unsqueeze(%t/image1, %zero) #batch_axis/image1
  %k/image0/shape: i64[3] = onnx.Shape(%k/image0) #k/image0/shape
  %k/image1/shape: i64[3] = onnx.Shape(%k/image1) #k/image1/shape
  %k/largest: i64[3] = onnx.Max(%k/image0/shape, %k/image1/shape) #k/largest
  %k/image0/grow: i64[3] = onnx.Sub(%k/largest, %k/image0/shape) #k/image0/grow
  %k/image0/pads: i64[6] = onnx.Concat(%k/pad_before, %k/image0/grow) {axis = 0} #k/image0/pads
  %k/image0/padded: i64[1,n,2] = onnx.Pad(%k/image0, %k/image0/pads) {mode = "constant"} #k/image0/padded
  %k/image1/grow: i64[3] = onnx.Sub(%k/largest, %k/image1/shape) #k/image1/grow
  %k/image1/pads: i64[6] = onnx.Concat(%k/pad_before, %k/image1/grow) {axis = 0} #k/image1/pads
  %k/image1/padded: i64[1,n,2] = onnx.Pad(%k/image1, %k/image1/pads) {mode = "constant"} #k/image1/padded
  %k: i64[2,n,2] = onnx.Concat(%k/image0/padded, %k/image1/padded) {axis = 0} #k/images
  return %k, %c
}
"""


def batched(text: str, b: int, **weights: np.ndarray):
    g = ir(text, **weights)
    ctx = PassContext()
    result = BatchImages(b).run(g, ctx)
    verify(g)
    return g, result, ctx


def per_image(text: str, images: np.ndarray, **weights: np.ndarray) -> list[list[np.ndarray]]:
    one = ir(text, **weights)
    return [evaluate_graph(one, {one.inputs[0].name: images[i:i + 1]}) for i in range(len(images))]


def test_an_image_wise_model_is_batched_whole() -> None:
    w = RNG.standard_normal((5, 2, 3, 3)).astype(np.float32)
    g, result, ctx = batched(DENSE, 3, w=w)
    assert result.stats["copied_nodes"] == 0 and not ctx.notes
    assert [str(v.type) for v in g.outputs] == ["f32[3,5,48]"]
    assert_ir(g, DENSE_BATCHED)
    x = RNG.standard_normal((3, 2, 6, 8)).astype(np.float32)
    (got,) = evaluate_graph(g, {g.inputs[0].name: x})
    want = np.concatenate([o[0] for o in per_image(DENSE, x, w=w)])
    np.testing.assert_array_equal(got, want)


def test_per_image_selection_is_copied_and_stacked_with_padding() -> None:
    w = np.array([[[[1.0]]], [[[0.5]]], [[[-1.0]]]], np.float32)
    text = SELECT
    g, result, ctx = batched(text, 2, w=w)
    assert result.stats["copied_nodes"] == 5  # Squeeze at the batch axis on
    assert "per_image" in result.stats["copied_from"] and "batch" in ctx.notes[0]
    assert_ir(g, SELECT_BATCHED)
    x = np.zeros((2, 1, 4, 5), np.float32)
    x[0, 0, 1, 2] = x[0, 0, 3, 4] = 1.0  # two points in image 0, one in image 1
    x[1, 0, 2, 0] = 1.0
    k, c = evaluate_graph(g, {g.inputs[0].name: x})
    (k0, c0), (k1, c1) = per_image(text, x, w=w)
    assert k.shape == (2, 2, 2)
    np.testing.assert_array_equal(k[0], k0[0])
    np.testing.assert_array_equal(k[1, :1], k1[0])
    np.testing.assert_array_equal(k[1, 1:], 0)  # padded with zeros, as HF pads its keypoints
    np.testing.assert_array_equal(c, np.concatenate([c0, c1]))


def test_an_output_without_a_batch_axis_is_refused() -> None:
    text = SELECT.replace("return %k, %c", "return %t, %c")
    with pytest.raises(SpcError, match=r"output t .*cannot be told apart"):
        batched(text, 2, w=np.ones((3, 1, 1, 1), np.float32))


@pytest.mark.parametrize(("op", "why"), [
    ("onnx.Softmax(%c) {axis = 0}", "along the batch axis"),
    ("onnx.Transpose(%c) {perm = [1, 0, 2, 3]}", "moves the batch axis"),
])
def test_ops_that_mix_images_run_per_image(op: str, why: str) -> None:
    out = "f32[3,1,4,5]" if "Transpose" in op else "f32[1,3,4,5]"
    text = f"""graph @t(%x: f32[1,1,4,5]) {{
  %w: f32[3,1,1,1] = const @"w"
  %c: f32[1,3,4,5] = onnx.Conv(%x, %w) #conv
  %y: {out} = {op} #mix
  return %y
}}
"""
    w = RNG.standard_normal((3, 1, 1, 1)).astype(np.float32)
    if "Transpose" in op:  # its result has no batch axis of 1: refused, naming the output
        with pytest.raises(SpcError, match="output y"):
            batched(text, 2, w=w)
        return
    g, result, _ = batched(text, 2, w=w)
    assert why in result.stats["copied_from"]
    x = RNG.standard_normal((2, 1, 4, 5)).astype(np.float32)
    (got,) = evaluate_graph(g, {g.inputs[0].name: x})
    np.testing.assert_array_equal(got, np.concatenate([o[0] for o in per_image(text, x, w=w)]))


def test_batch_one_changes_nothing() -> None:
    g = ir(DENSE, w=np.ones((5, 2, 3, 3), np.float32))
    assert not BatchImages(1).run(g, PassContext()).modified
    assert g.inputs[0].type.shape[0] == 1


def test_a_model_that_is_not_batch_one_is_refused() -> None:
    g = ir(DENSE.replace("f32[1,2,6,8]", "f32[2,2,6,8]").replace("f32[1,5,6,8]", "f32[2,5,6,8]").replace(
        "dense<[1, 5, 48]>", "dense<[2, 5, 48]>").replace("f32[1,5,48]", "f32[2,5,48]"),
        w=np.ones((5, 2, 3, 3), np.float32))
    with pytest.raises(SpcError, match="batch-1 model"):
        BatchImages(4).run(g, PassContext())
