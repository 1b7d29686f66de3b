"""Einsum equations that are one batched matrix product lower to ttnn.matmul (with permutes for
the operands' and the product's orders); the others stay on the host, with the reason."""

from __future__ import annotations

import numpy as np
import pytest

from spc.ir.graph import Placement
from spc.lowering.registry import device_support
from spc.passes.manager import PassContext
from spc.passes.partition_host_device import PartitionHostDevice
from tests.conftest import ir
from tests.test_lowering import bf16_exact, run_lowered

RNG = np.random.default_rng(11)


def graph(equation: str, a: list[int], b: list[int], out: list[int], b_const: bool = False) -> str:
    f = lambda s: ",".join(map(str, s))
    second = f'%b: f32[{f(b)}] = const @"b"\n  ' if b_const else ""
    params = f"%x: f32[{f(a)}]" + ("" if b_const else f", %b: f32[{f(b)}]")
    return f"""graph @t({params}) {{
  {second}%y: f32[{f(out)}] = onnx.Einsum(%x, %b) {{equation = "{equation}"}} #e
  return %y
}}
"""


# LightGlue's four equations, and the transposed product both ways round. A constant B is
# permuted on the host; a rank-4 device input arrives channels-last, so its first permute is the
# conversion to the plain layout, not the Einsum's.
P, M = "ttnn.permute", "ttnn.matmul"
CASES = [
    ("bhid, bhjd -> bhij", [1, 2, 8, 16], [1, 2, 12, 16], [1, 2, 8, 12], [P, M]),
    ("bhij, bhjd -> bhid", [1, 2, 8, 12], [1, 2, 12, 16], [1, 2, 8, 16], [P, M]),
    ("bhji, bhjd -> bhid", [1, 2, 12, 8], [1, 2, 12, 16], [1, 2, 8, 16], [P, P, M]),
    ("bmd,bnd->bmn", [1, 8, 16], [1, 12, 16], [1, 8, 12], [M]),
    ("bmd,bnd->bnm", [1, 8, 16], [1, 12, 16], [1, 12, 8], [M, P]),
    ("ik,kj->ij", [8, 16], [16, 12], [8, 12], [M]),
]


@pytest.mark.parametrize(("equation", "a", "b", "out", "calls"), CASES)
def test_batched_products_lower_to_matmul(equation: str, a: list[int], b: list[int], out: list[int],
                                          calls: list[str]) -> None:
    x, y = bf16_exact(RNG.normal(size=a)), bf16_exact(RNG.normal(size=b))
    got, want, made = run_lowered(graph(equation, a, b, out, b_const=True), x, b=y)
    assert [c for c in made if c in ("ttnn.permute", "ttnn.matmul")] == calls
    # exact bf16 operands, float32 accumulation, one bf16 rounding of the result
    np.testing.assert_allclose(got, want, rtol=2**-7, atol=2**-7 * float(np.abs(want).max()))


@pytest.mark.parametrize(("equation", "a", "b", "out", "why"), [
    ("...id,...jd->...ij", [2, 8, 16], [2, 12, 16], [2, 8, 12], "ellipsis"),
    ("bii,bij->bj", [1, 8, 8], [1, 8, 12], [1, 12], "repeated index"),
    ("bmd,bnd->bm", [1, 8, 16], [1, 12, 16], [1, 8], "not one batched matrix product"),
    ("bmd,bnd->bmn", [1, 8, 16], [2, 12, 16], [2, 8, 12], "broadcasts a size-1 axis"),
])
def test_other_equations_stay_on_the_host(equation: str, a: list[int], b: list[int], out: list[int],
                                          why: str) -> None:
    g = ir(graph(equation, a, b, out))
    PartitionHostDevice().run(g, PassContext())
    (node,) = g.nodes
    assert node.placement is Placement.HOST_PRE
    assert why in (device_support(node) or "")  # the reason is said
