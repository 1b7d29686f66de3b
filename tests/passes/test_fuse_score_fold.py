"""fuse-score-fold: the HF spelling, a DepthToSpace spelling, and near misses that must not fuse."""

from __future__ import annotations

import numpy as np
import pytest

from spc.ir.interpreter import evaluate_graph
from spc.passes.fuse_score_fold import FuseScoreFold
from spc.passes.manager import PassContext
from tests.conftest import assert_ir
from tests.passes.builder import Builder

H, W = 3, 4


def hf_fold(perm: tuple[int, ...] = (0, 1, 3, 2, 4), keep: slice = slice(0, 64)) -> Builder:
    b = Builder((1, 65, H, W))
    sm = b.op("Softmax", b.x, axis=1)
    sl = b.op("Slice", sm, b.const([keep.start]), b.const([keep.stop]), b.const([1]))
    p = b.op("Transpose", sl, perm=[0, 2, 3, 1])
    v = b.op("Reshape", p, b.const([1, H, W, 8, 8]))
    q = b.op("Transpose", v, perm=list(perm))
    out = b.op("Reshape", q, b.const([1, H * 8, W * 8]))
    b.done(out)
    return b


def d2s_fold() -> Builder:
    b = Builder((1, 65, H, W))
    sm = b.op("Softmax", b.x, axis=1)
    sl = b.op("Slice", sm, b.const([0]), b.const([-1]), b.const([1]))
    d = b.op("DepthToSpace", sl, blocksize=8, mode="DCR")
    b.done(b.op("Squeeze", d, b.const([1])))
    return b


@pytest.mark.parametrize("make", [hf_fold, d2s_fold], ids=["hf-transpose-reshape", "depth-to-space"])
def test_fuses_spellings(make) -> None:
    b = make()
    x = np.random.default_rng(5).normal(0, 3, (1, 65, H, W)).astype(np.float32)
    before = evaluate_graph(b.g, {"x": x})[0]
    name = b.g.outputs[0].name
    assert FuseScoreFold().run(b.g, PassContext()).stats == {"fused": 1}
    assert [n.op.name for n in b.g.nodes] == ["spc.ScoreFold"]
    node = b.g.nodes[0]
    assert node.attrs == {"cell": 8, "out_shape": [1, H * 8, W * 8]}
    assert b.g.outputs[0].name == name  # the source's name survives, for `spc check`
    np.testing.assert_allclose(evaluate_graph(b.g, {"x": x})[0], before, rtol=1e-6, atol=1e-7)


def test_the_fused_ir() -> None:
    """HF's softmax, dustbin drop, transpose and reshape: one op named after the fold's exit."""
    b = hf_fold()
    FuseScoreFold().run(b.g, PassContext())
    assert_ir(b.g, """graph @t(%x: f32[1,65,3,4]) {
  %reshape_1: f32[1,24,32] = spc.ScoreFold(%x) {cell = 8, out_shape = [1, 24, 32]} #score_fold
  return %reshape_1
}""")


@pytest.mark.parametrize("make", [lambda: hf_fold(perm=(0, 1, 2, 3, 4)), lambda: hf_fold(keep=slice(1, 65))],
                         ids=["no-interleave", "drops-first-channel"])
def test_near_misses_do_not_fuse(make) -> None:
    b = make()
    assert not FuseScoreFold().run(b.g, PassContext()).modified
    assert "spc.ScoreFold" not in [n.op.name for n in b.g.nodes]


def test_a_rank5_exit_read_by_reshapes_leaves_the_fold_itself() -> None:
    """onnxsim's HF export: the fold's rank-5 exit read by a reshape to (N, H, W) and one to
    (N, 1, H, W): both read the map, the second is the map (and names it), no view is left."""
    b = Builder((1, 65, H, W))
    sm = b.op("Softmax", b.x, axis=1)
    sl = b.op("Slice", sm, b.const([0]), b.const([64]), b.const([1]))
    p = b.op("Transpose", sl, perm=[0, 2, 3, 1])
    v = b.op("Reshape", p, b.const([1, H, W, 8, 8]))
    q = b.op("Transpose", v, perm=[0, 1, 3, 2, 4])
    flat = b.op("Reshape", q, b.const([1, H * 8, W * 8]))
    pooled_in = b.op("Reshape", q, b.const([1, 1, H * 8, W * 8]))
    pooled = b.op("MaxPool", pooled_in, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    b.done(flat, pooled)
    map_name = pooled_in.name
    x = np.random.default_rng(6).normal(0, 3, (1, 65, H, W)).astype(np.float32)
    before = evaluate_graph(b.g, {"x": x})
    assert FuseScoreFold().run(b.g, PassContext()).stats == {"fused": 1}
    ops_ = [n.op.name for n in b.g.nodes]
    assert ops_.count("onnx.Reshape") == 1 and "spc.ScoreFold" in ops_, ops_
    fold = next(n for n in b.g.nodes if n.op.name == "spc.ScoreFold")
    assert fold.output.name == map_name and fold.attrs["out_shape"] == [1, 1, H * 8, W * 8]
    assert {u.op.name for u in fold.output.consumers()} == {"onnx.Reshape", "onnx.MaxPool"}
    for got, want in zip(evaluate_graph(b.g, {"x": x}), before):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
