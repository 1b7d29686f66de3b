"""The interpreter: one loop for graphs, regions, probes and the plan's host stages."""

from __future__ import annotations

import numpy as np
import pytest

from spc.ir.interpreter import MissingValue, NodeFailed, evaluate_graph, run_named, run_nodes
from tests.conftest import ir

NET = """graph @t(%x: f32[2,3]) {
  %w: f32[3] = const @"w"
  %y: f32[2,3] = onnx.Mul(%x, %w) #mul
  %z: f32[2,3] = onnx.Relu(%y) #relu
  return %z
}
"""


def test_a_graph_runs_with_its_constants() -> None:
    g = ir(NET, w=np.array([1.0, -2.0, 3.0], np.float32))
    x = np.ones((2, 3), np.float32)
    (z,) = evaluate_graph(g, {"x": x})
    np.testing.assert_array_equal(z, [[1, 0, 3], [1, 0, 3]])


def test_a_region_from_an_inner_value_and_what_it_reads_outside() -> None:
    g = ir(NET, w=np.array([1.0, -2.0, 3.0], np.float32))
    mul, relu = g.nodes
    y = np.array([[-1.0, 2.0, 0.5]] * 2, np.float32)
    env = run_nodes([relu], {id(mul.outputs[0]): y})
    np.testing.assert_array_equal(env[id(relu.outputs[0])], [[0, 2, 0.5]] * 2)
    with pytest.raises(MissingValue, match=r"node relu reads %y, which nothing before it produced"):
        run_nodes([relu], {})


def test_named_nodes_as_the_host_stages_run_them() -> None:
    env = {"a": np.array([4.0, 9.0], np.float32)}
    run_named([("sq", "onnx.Sqrt", ["a"], {}, ["b"]), ("add", "onnx.Add", ["b", "one"], {}, ["c"])], env,
              {"one": np.float32(1.0)})
    np.testing.assert_array_equal(env["c"], [3.0, 4.0])


def test_an_op_that_refuses_its_arguments_is_named() -> None:
    env = {"a": np.zeros((2, 3), np.float32), "b": np.zeros((4, 5), np.float32)}
    with pytest.raises(NodeFailed, match=r"node bad \(onnx.Add\) failed"):
        run_named([("bad", "onnx.Add", ["a", "b"], {}, ["c"])], env, {})


def test_keep_drops_what_nothing_reads_later_and_the_results_are_the_same() -> None:
    from spc.ir.interpreter import Step, run
    from spc.ir.ops import onnx_op

    steps = [Step("a", onnx_op("Relu"), ("x",), {}, ("r",)), Step("b", onnx_op("Neg"), ("r",), {}, ("n",)),
             Step("c", onnx_op("Add"), ("n", "x"), {}, ("s",))]
    x = np.array([-1.0, 2.0], np.float32)
    whole = run(steps, {"x": x})
    kept = run(steps, {"x": x}, keep={"s"})
    assert set(whole) == {"x", "r", "n", "s"} and set(kept) == {"x", "s"}  # what was given stays
    np.testing.assert_array_equal(kept["s"], whole["s"])
    assert set(run(steps, {"x": x}, keep={"r", "s"})) == {"x", "r", "s"}


def test_the_device_reference_keeps_what_it_is_asked_for_and_what_is_wanted() -> None:
    from spc.plan.program import DeviceTensor, Program, TtOp
    from spc.runtime.reference import run_device

    ops = [TtOp("ttnn.relu", ["x"], "r"), TtOp("ttnn.neg", ["r"], "n"), TtOp("ttnn.add", ["n", "x"], "s")]
    prog = Program([], [], [], [DeviceTensor("x", [2], [2])], ops, [DeviceTensor("s", [2], [2])], [])
    x = np.array([-1.0, 2.0], np.float32)
    whole = run_device(prog, {}, {"x": x}, ["s"])
    kept = run_device(prog, {}, {"x": x}, ["s"], keep={"r"})
    assert set(whole) == {"x", "r", "n", "s"} and set(kept) == {"x", "r", "s"}
    np.testing.assert_array_equal(kept["s"], whole["s"])
    np.testing.assert_array_equal(kept["s"], [-1.0, 0.0])


def test_descriptors_sampled_from_a_channels_last_view_are_the_same_bits() -> None:
    """keypoints.sample_descriptors gathers a pixel's channels along the map's contiguous axis: a
    device read-back's channels-last map, seen as NCHW without a copy, gives the same bits as the
    NCHW copy (pixels at the borders included)."""
    from spc.ir.ops.keypoints import sample_descriptors

    rng = np.random.default_rng(5)
    nhwc = rng.standard_normal((6, 7, 32)).astype(np.float32)
    view = nhwc.transpose(2, 0, 1)
    xy = np.array([[0, 0], [55, 47], [13, 21], [3, 40], [50, 2]], np.float32)
    assert not view.flags.c_contiguous
    got = sample_descriptors(xy, view, 8)
    assert np.array_equal(got, sample_descriptors(xy, np.ascontiguousarray(view), 8))
    assert got.shape == (5, 32) and np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)


def test_a_run_asked_to_stop_stops_before_its_next_node() -> None:
    from spc.ir import ops
    from spc.ir.interpreter import Step, Stopped, run

    steps = [Step("r", ops.get("onnx.Relu"), ("x",), {}, ("y",))]
    with pytest.raises(Stopped):
        run(steps, {"x": np.ones(2, np.float32)}, stop=lambda: True)
    assert "y" in run(steps, {"x": np.ones(2, np.float32)}, stop=lambda: False)
