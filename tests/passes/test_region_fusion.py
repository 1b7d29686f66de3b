"""passes/region_fusion.py: the one driver of the region recognisers, on a toy fusion."""

from __future__ import annotations

import numpy as np

from spc.ir.interpreter import evaluate_graph
from spc.passes.explain import Explainer
from spc.passes.manager import PassContext
from spc.passes.region_fusion import RegionFusion
from spc.passes.semantic_match import evaluate, find_exit, fuse_region
from tests.conftest import assert_ir, ir

X = np.array([[-2.0, 0.5, 3.0]], np.float32)


class FuseAbs(RegionFusion):
    """max(x, -x) -> onnx.Abs: what a declaration holds, the driver does the rest."""

    name = "toy-abs"
    explains = (name,)
    ops = frozenset({"onnx.Neg", "onnx.Max"})

    def candidate(self, g, entry):
        return (f"%{entry.name}", None) if any(u.op.name == "onnx.Neg" for u in entry.consumers()) else None

    def search(self, g, region, entry, found, misses):
        return find_exit(g, region, [evaluate(region, X)], [np.abs(X)], last=False, misses=misses)

    def stopped(self, found, misses):
        return "no value is |x|"

    def fuse(self, g, ctx, region, entry, found, match, stats):
        exit, nodes = match
        fuse_region(g, nodes, exit, "onnx.Abs", [entry], {}, "abs")
        return f"%{exit.name} = onnx.Abs over {len(nodes)} node(s)"

    def why_not(self, g, tried):
        return f"nothing after {', '.join(tried)} is |x|" if tried else "no value feeds a Neg"


def _graph(second: str) -> str:
    return f"""graph @t(%x: f32[1,3]) {{
  %n: f32[1,3] = onnx.Neg(%x) #neg
  %m: f32[1,3] = {second}(%x, %n) #m
  %r: f32[1,3] = onnx.Relu(%m) #relu
  return %r
}}
"""


def test_the_driver_fuses_what_the_declaration_finds_and_tells_explain() -> None:
    g = ir(_graph("onnx.Max"))
    before = evaluate_graph(g, {"x": X})[0]
    ctx = PassContext(explainer=Explainer(frozenset({"toy-abs"})))
    result = FuseAbs().run(g, ctx)
    assert result.modified and result.stats == {"fused": 1}
    assert_ir(g, """graph @t(%x: f32[1,3]) {
  %m: f32[1,3] = onnx.Abs(%x) #abs
  %r: f32[1,3] = onnx.Relu(%m) #relu
  return %r
}""")
    np.testing.assert_array_equal(evaluate_graph(g, {"x": X})[0], before)
    assert "%m = onnx.Abs over 2 node(s)" in ctx.explainer.format()


def test_the_driver_says_why_not() -> None:
    g = ir(_graph("onnx.Min"))
    ctx = PassContext(explainer=Explainer(frozenset({"toy-abs"})))
    result = FuseAbs().run(g, ctx)
    assert not result.modified and result.stats == {"fused": 0, "why_not": "nothing after %x is |x|"}
    assert "no value is |x|" in ctx.explainer.format()
    plain = ir("""graph @t(%x: f32[1,3]) {
  %r: f32[1,3] = onnx.Relu(%x) #relu
  return %r
}
""")
    assert FuseAbs().run(plain, PassContext()).stats["why_not"] == "no value feeds a Neg"
