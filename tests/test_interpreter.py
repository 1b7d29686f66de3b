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
