"""insert-device-nms: HF simple_nms as exported, another spelling, round counts, near misses."""

from __future__ import annotations

import numpy as np
import pytest

from spc.ir.graph import Value
from spc.ir.interpreter import evaluate_graph
from spc.ir.ops.spc_ops import nms
from spc.passes.insert_device_nms import InsertDeviceNms
from spc.passes.manager import PassContext, PipelineOptions
from tests.conftest import assert_ir
from tests.passes.builder import Builder

SHAPE = (1, 20, 24)
R = 2


def hf_nms(rounds: int = 2, compare: str = "Equal", keep_maxima: bool = True) -> Builder:
    """simple_nms on a (1, H, W) map, as torch.onnx spells it (Unsqueeze/MaxPool/Squeeze)."""
    b = Builder(SHAPE)
    k = 2 * R + 1

    def pool(v: Value) -> Value:
        u = b.op("Unsqueeze", v, b.const([0]))
        p = b.op("MaxPool", u, kernel_shape=[k, k], pads=[R] * 4, strides=[1, 1])
        return b.op("Squeeze", p, b.const([0]))

    zeros = b.const(np.zeros(SHAPE, np.float32))
    s = b.x
    mask = b.op(compare, s, pool(s))
    for _ in range(rounds):
        supp = b.op("Greater", pool(b.op("Cast", mask, to=1)), b.const(np.float32(0)))
        rest = b.op("Where", supp, zeros, s)
        new = b.op("Equal", rest, pool(rest))
        mask = b.op("Or", mask, b.op("And", new, b.op("Not", supp)))
    b.done(b.op("Where", mask, s, zeros) if keep_maxima else b.op("Where", mask, zeros, s))
    return b


def mul_nms_4d(rounds: int = 2) -> Builder:
    """The same algorithm on a (1, 1, H, W) map with multiplications instead of Where."""
    b = Builder((1, 1) + SHAPE[1:])
    k = 2 * R + 1
    pool = lambda v: b.op("MaxPool", v, kernel_shape=[k, k], pads=[R] * 4, strides=[1, 1])
    as_f = lambda m: b.op("Cast", m, to=1)
    s = b.x
    mask = b.op("Equal", s, pool(s))
    for _ in range(rounds):
        supp = b.op("Greater", pool(as_f(mask)), b.const(np.float32(0)))
        free = as_f(b.op("Not", supp))
        rest = b.op("Mul", s, free)
        new = b.op("And", b.op("Equal", rest, pool(rest)), b.op("Not", supp))
        mask = b.op("Or", mask, new)
    b.done(b.op("Mul", s, as_f(mask)))
    return b


def tie_heavy(shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 4, shape) / 3.0 * (rng.random(shape) < 0.5)).astype(np.float32)


def hf_nms_ge(rounds: int) -> Builder:
    """s >= maxpool(s) is s == maxpool(s), since the window contains s: same algorithm."""
    return hf_nms(rounds, compare="GreaterOrEqual")


@pytest.mark.parametrize(("make", "rounds"),
                         [(hf_nms, 2), (hf_nms, 1), (hf_nms, 0), (mul_nms_4d, 2), (hf_nms_ge, 2)],
                         ids=["hf-2-rounds", "hf-1-round", "hf-single-pass", "mul-4d", "greater-or-equal"])
def test_replaces_nms_with_one_op(make, rounds: int) -> None:
    b = make(rounds)
    x = tie_heavy(b.x.type.static_shape, seed=42)
    before = evaluate_graph(b.g, {"x": x})[0]
    result = InsertDeviceNms().run(b.g, PassContext())
    assert result.stats == {"fused": 1, "source_rounds": [rounds]}
    assert [n.op.name for n in b.g.nodes] == ["spc.Nms"]
    assert b.g.nodes[0].attrs == {"radius": R, "iterations": rounds}
    after = evaluate_graph(b.g, {"x": x})[0]
    assert np.array_equal(after, before)
    assert np.array_equal(after, nms(x, R, rounds))


def test_the_fused_ir() -> None:
    b = hf_nms()
    InsertDeviceNms().run(b.g, PassContext())
    assert_ir(b.g, """graph @t(%x: f32[1,20,24]) {
  %where_2: f32[1,20,24] = spc.Nms(%x) {iterations = 2, radius = 2} #nms
  return %where_2
}""")


def test_single_pass_option_changes_rounds_and_says_so() -> None:
    b = hf_nms(2)
    ctx = PassContext(PipelineOptions(nms_single_pass=True))
    InsertDeviceNms().run(b.g, ctx)
    assert b.g.nodes[0].attrs["iterations"] == 0
    assert any("single-pass" in note for note in ctx.notes)


def test_empty_first_mask_is_one_round_fewer() -> None:
    """With s > maxpool(s) the first mask is empty, so round one rebuilds NMS's initial mask:
    the subgraph is exactly NMS with one round, and is fused as such."""
    b = hf_nms(2, compare="Greater")
    assert InsertDeviceNms().run(b.g, PassContext()).stats == {"fused": 1, "source_rounds": [1]}


@pytest.mark.parametrize("make", [lambda: hf_nms(compare="Less"), lambda: hf_nms(keep_maxima=False)],
                         ids=["selects-non-maxima", "keeps-non-maxima"])
def test_near_misses_do_not_fuse(make) -> None:
    b = make()
    assert not InsertDeviceNms().run(b.g, PassContext()).modified


def test_nms_on_a_pooled_map_with_a_squeezed_exit_keeps_a_view() -> None:
    """onnxsim's HF export: the pools read the (1, 1, H, W) map, the rest works on a (1, H, W)
    reshape of it: spc.Nms keeps the map's shape and a view gives the exit's."""
    b = Builder((1, 1) + SHAPE[1:])
    k = 2 * R + 1

    def pool(v: Value) -> Value:
        return b.op("Squeeze", b.op("MaxPool", v, kernel_shape=[k, k], pads=[R] * 4, strides=[1, 1]), b.const([1]))

    flat = b.op("Reshape", b.x, b.const(list(SHAPE)))
    zeros = b.const(np.zeros(SHAPE, np.float32))
    mask = b.op("Equal", flat, pool(b.x))
    for _ in range(2):
        supp = b.op("Greater", pool(b.op("Unsqueeze", b.op("Cast", mask, to=1), b.const([1]))), b.const(np.float32(0)))
        rest = b.op("Where", supp, zeros, flat)
        new = b.op("Equal", rest, pool(b.op("Unsqueeze", rest, b.const([1]))))
        mask = b.op("Or", mask, b.op("And", new, b.op("Not", supp)))
    b.done(b.op("Where", mask, flat, zeros))
    name = b.g.outputs[0].name
    x = tie_heavy(b.x.type.static_shape, seed=43)
    before = evaluate_graph(b.g, {"x": x})[0]
    assert InsertDeviceNms().run(b.g, PassContext()).stats == {"fused": 1, "source_rounds": [2]}
    assert [n.op.name for n in b.g.nodes] == ["spc.Nms", "onnx.Reshape"]
    assert b.g.outputs[0].name == name and list(b.g.outputs[0].type.static_shape) == list(SHAPE)
    assert np.array_equal(evaluate_graph(b.g, {"x": x})[0], before)
