"""The IR: types, text form round trip, verifier, editing invariants, networkx view."""

from __future__ import annotations

import numpy as np
import pytest

from spc.ir import ops
from spc.ir.graph import Graph
from spc.ir.parser import ParseError, parse_graph
from spc.ir.printer import print_graph, weight_store
from spc.ir.types import DType, TensorType
from spc.ir.verify import VerifyError, verify
from tests.conftest import ir

TEXT = """graph @t(%x: f32[1,4,8,8]) {
  %w: f32[4,4,3,3] = const @"w"
  %"odd:name": f32[1] = const dense<[Infinity]>
  %axes: i64[1] = const dense<[0]>
  %conv: f32[1,4,8,8] = onnx.Conv(%x, %w, _) {pads = [1, 1, 1, 1], strides = [1, 1]} #conv @device
  %relu: f32[1,4,8,8] = onnx.Relu(%conv) #relu @device
  %sq: f32[4,8,8] = onnx.Squeeze(%relu, %axes) #sq @host-post
  %min: f32[4,8,8] = onnx.Min(%sq, %"odd:name") #min @host-post
  return %min
}
"""


def test_tensor_type_text() -> None:
    t = TensorType(DType.F32, (1, "d3", 2))
    assert str(t) == "f32[1,d3,2]"
    assert TensorType.parse(str(t)) == t
    assert not t.is_static
    assert TensorType.parse("i1[]") == TensorType(DType.BOOL, ())
    with pytest.raises(ValueError):
        TensorType(DType.F32, (-1,))


def test_text_round_trip_is_exact() -> None:
    w = np.arange(144, dtype=np.float32).reshape(4, 4, 3, 3)
    g = ir(TEXT, w=w)
    assert print_graph(g) == TEXT
    again = parse_graph(print_graph(g), weight_store(g))
    assert print_graph(again) == TEXT
    assert np.array_equal(again.value("w").data, w)


def test_parse_errors_name_the_line() -> None:
    with pytest.raises(ParseError, match="line 2"):
        parse_graph("graph @t(%x: f32[1]) {\n  %y: f32[1] = onnx.Nope(%x) #n\n  return %y\n}\n")
    with pytest.raises(ParseError, match="used before it is defined"):
        parse_graph("graph @t(%x: f32[1]) {\n  %y: f32[1] = onnx.Relu(%z) #n\n  return %y\n}\n")


def test_verifier_catches_type_mismatch() -> None:
    g = Graph("t")
    x = g.add_input("x", TensorType(DType.F32, (2, 3)))
    n = g.make_node(ops.get("onnx.Relu"), [x], out_types=[TensorType(DType.F32, (3, 2))])
    g.outputs = [n.output]
    with pytest.raises(VerifyError, match="inferred f32\\[2,3\\]"):
        verify(g)


def test_verifier_catches_use_before_def() -> None:
    g = Graph("t")
    x = g.add_input("x", TensorType(DType.F32, (2,)))
    a = g.make_node(ops.get("onnx.Relu"), [x])
    b = g.make_node(ops.get("onnx.Neg"), [a.output])
    g.nodes = [b, a]
    g.outputs = [b.output]
    with pytest.raises(VerifyError, match="not defined before"):
        verify(g)
    g.toposort()
    verify(g)


def test_replace_all_uses_keeps_output_names() -> None:
    g = Graph("t")
    x = g.add_input("x", TensorType(DType.F32, (2,)))
    a = g.make_node(ops.get("onnx.Relu"), [x], name="out")
    g.outputs = [a.output]
    b = g.make_node(ops.get("onnx.Neg"), [x], name="other")
    g.replace_all_uses(a.output, b.output)
    g.remove_node(a)
    assert g.outputs[0] is b.output and b.output.name == "out"
    verify(g)


def test_remove_node_refuses_when_used() -> None:
    g = ir(TEXT, w=np.zeros((4, 4, 3, 3), np.float32))
    with pytest.raises(ValueError, match="still used"):
        g.remove_node(g.nodes[0])


def test_networkx_view() -> None:
    g = ir(TEXT, w=np.zeros((4, 4, 3, 3), np.float32))
    nx_graph = g.to_networkx()
    assert set(nx_graph.nodes) == {"conv", "relu", "sq", "min"}
    assert nx_graph.nodes["conv"]["placement"] == "device"
    assert list(nx_graph.successors("conv")) == ["relu"]


def test_op_evaluators_match_onnxruntime() -> None:
    """The numpy semantics that folding and the host stage rely on, against onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 2, 7, 9)).astype(np.float32)
    grid = rng.uniform(-1.1, 1.1, size=(1, 1, 5, 2)).astype(np.float32)
    cases = [
        ("MaxPool", [x], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
        ("Softmax", [x], {"axis": 1}),
        ("DepthToSpace", [rng.normal(size=(1, 8, 2, 3)).astype(np.float32)], {"blocksize": 2, "mode": "DCR"}),
        ("DepthToSpace", [rng.normal(size=(1, 8, 2, 3)).astype(np.float32)], {"blocksize": 2, "mode": "CRD"}),
        ("GridSample", [x, grid], {"align_corners": 1, "mode": "bilinear"}),
        ("GridSample", [x, grid], {"align_corners": 0, "mode": "bilinear"}),
        ("Conv", [x, rng.normal(size=(3, 2, 3, 3)).astype(np.float32)], {"pads": [1, 0, 1, 2], "strides": [1, 2]}),
        ("ReduceL2", [x, np.array([1], np.int64)], {"keepdims": 1}),
    ]
    for op_type, inputs, attrs in cases:
        names = [f"i{k}" for k in range(len(inputs))]
        node = helper.make_node(op_type, names, ["y"], **attrs)
        graph = helper.make_graph(
            [node], "t",
            [helper.make_tensor_value_info(n, TensorProto.INT64 if a.dtype == np.int64 else TensorProto.FLOAT,
                                           a.shape) for n, a in zip(names, inputs)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = sess.run(None, dict(zip(names, inputs)))[0]
        got = ops.get(f"onnx.{op_type}").evaluate(inputs, attrs)[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{op_type} {attrs}")
