"""fuse-l2norm: torch's normalize as exported, a Pow/Sqrt spelling, and a norm without eps."""

from __future__ import annotations

import numpy as np
import pytest

from spc.ir.interpreter import evaluate_graph
from spc.passes.fuse_l2norm import FuseL2Norm
from spc.passes.manager import PassContext
from tests.conftest import assert_ir
from tests.passes.builder import Builder

SHAPE = (1, 16, 3, 5)


def reduce_l2() -> Builder:
    b = Builder(SHAPE)
    n = b.op("ReduceL2", b.x, b.const([1]), keepdims=1)
    c = b.op("Clip", n, b.const(np.float32(1e-12)))
    e = b.op("Expand", c, b.const(list(SHAPE)))
    b.done(b.op("Div", b.x, e))
    return b


def pow_sqrt(eps: bool = True) -> Builder:
    b = Builder(SHAPE)
    sq = b.op("Pow", b.x, b.const(np.float32(2)))
    n = b.op("Sqrt", b.op("ReduceSum", sq, b.const([1]), keepdims=1))
    if eps:
        n = b.op("Max", n, b.const(np.float32(1e-6)))
    b.done(b.op("Div", b.x, n))
    return b


@pytest.mark.parametrize(("make", "eps"), [(reduce_l2, 1e-12), (pow_sqrt, 1e-6)], ids=["reduce-l2", "pow-sqrt-max"])
def test_fuses(make, eps: float) -> None:
    b = make()
    x = np.random.default_rng(3).normal(size=SHAPE).astype(np.float32)
    before = evaluate_graph(b.g, {"x": x})[0]
    assert FuseL2Norm().run(b.g, PassContext()).stats == {"fused": 1}
    (node,) = b.g.nodes
    assert node.op.name == "spc.L2Norm" and node.attrs["axis"] == 1
    assert node.attrs["eps"] == pytest.approx(eps, rel=1e-6)
    np.testing.assert_allclose(evaluate_graph(b.g, {"x": x})[0], before, rtol=1e-5, atol=1e-6)


def test_the_fused_ir() -> None:
    b = reduce_l2()
    FuseL2Norm().run(b.g, PassContext())
    assert_ir(b.g, """graph @t(%x: f32[1,16,3,5]) {
  %div: f32[1,16,3,5] = spc.L2Norm(%x) {axis = 1, eps = 9.999999960041972e-13} #l2norm
  return %div
}""")


def test_norm_without_eps_fuses_with_eps_zero() -> None:
    """x / ||x|| (MagicLeap's SuperPointNet divides so) is L2Norm with eps = 0: a zero vector gives
    NaN, as the source does, and a tiny one is still divided by its own norm."""
    b = pow_sqrt(eps=False)
    x = np.random.default_rng(3).normal(size=SHAPE).astype(np.float32)
    x[0, :, 0, 0] = 0
    x[0, :, 0, 1] *= 1e-20
    with np.errstate(invalid="ignore"):
        before = evaluate_graph(b.g, {"x": x})[0]
        assert FuseL2Norm().run(b.g, PassContext()).stats == {"fused": 1}
        (node,) = b.g.nodes
        assert node.attrs["eps"] == 0.0
        after = evaluate_graph(b.g, {"x": x})[0]
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert np.isnan(after[0, :, 0, 0]).all() and np.isfinite(after[0, :, 0, 1]).all()
