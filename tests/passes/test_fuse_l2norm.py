"""fuse-l2norm: torch's normalize as exported, a Pow/Sqrt spelling, and a norm without eps."""

from __future__ import annotations

import numpy as np
import pytest

from spc.ir.evaluate import evaluate_graph
from spc.passes.fuse_l2norm import FuseL2Norm
from spc.passes.manager import PassContext
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


def test_norm_without_eps_is_not_fused() -> None:
    """x / ||x|| differs from normalize() on (near-)zero vectors, so it must stay as it is."""
    b = pow_sqrt(eps=False)
    assert not FuseL2Norm().run(b.g, PassContext()).modified
