"""spc reads models with onnx's messages and C++ extension but not its Python package
(frontend/onnx_proto.py): its tensor and attribute decoding must be onnx's, and onnx's package
must still work when imported afterwards in the same process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from spc.frontend import onnx_proto
from spc.frontend.conformance import cases

CASES = list(cases())


def _tensors(model: onnx.ModelProto):
    yield from model.graph.initializer
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors


def _same(ours: np.ndarray, theirs: np.ndarray) -> None:
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert ours.tobytes() == theirs.tobytes()  # NaN payloads and -0.0 included


def test_the_conformance_tensors_decode_as_numpy_helper_decodes_them() -> None:
    seen: set[int] = set()
    for case in CASES:
        for t in _tensors(case.model):
            if t.data_type in onnx_proto._NUMPY:
                _same(onnx_proto.to_array(t), numpy_helper.to_array(t))
                seen.add(t.data_type)
    assert {1, 7} <= seen  # float32 and int64 at least: what the cases' Constants hold


@pytest.mark.parametrize("code", sorted(onnx_proto._NUMPY))
def test_every_element_type_decodes_from_raw_and_typed_fields(code: int) -> None:
    dtype = np.dtype(onnx_proto._NUMPY[code])
    rng = np.random.default_rng(code)
    if dtype.kind == "f":
        special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-8, -3.5], dtype)
        values = np.concatenate([special, rng.standard_normal(17).astype(dtype) * 1000])
    elif dtype.kind == "b":
        values = rng.random(24) < 0.5
    else:
        info = np.iinfo(dtype)
        values = np.concatenate([np.array([info.min, info.max, 0], dtype),
                                 rng.integers(info.min, info.max, 21, dtype=dtype, endpoint=True)])
    values = values.reshape(2, 3, 4)
    raw = numpy_helper.from_array(values, "raw")
    typed = helper.make_tensor("typed", code, values.shape, values.flatten().tolist(), raw=False)
    if code == 10:  # float16 in int32_data: bit patterns, as the ONNX spec stores them
        typed = helper.make_tensor("typed", code, values.shape, values.view(np.uint16).flatten().tolist(), raw=False)
    assert raw.HasField("raw_data") and not typed.HasField("raw_data")
    for t in (raw, typed):
        _same(onnx_proto.to_array(t), numpy_helper.to_array(t))


def test_a_type_spc_does_not_take_is_not_decoded() -> None:
    t = helper.make_tensor("s", onnx.TensorProto.STRING, [1], [b"x"])
    with pytest.raises(TypeError, match="not one spc decodes"):
        onnx_proto.to_array(t)


def test_attribute_values_are_helper_s() -> None:
    made = [helper.make_attribute(k, v) for k, v in [
        ("f", 0.5), ("i", -3), ("s", "edge"), ("t", numpy_helper.from_array(np.ones(2, np.float32))),
        ("floats", [1.5, -2.0]), ("ints", [1, 2]), ("strings", ["a", "b"]),
        ("tensors", [numpy_helper.from_array(np.zeros(1, np.int64))]),
        ("g", helper.make_graph([], "g", [], []))]]
    kinds: set[int] = set()
    for where, attr in [*((c.name, a) for c in CASES for n in c.model.graph.node for a in n.attribute),
                        *(("made", a) for a in made)]:
        assert onnx_proto.attribute_value(attr) == helper.get_attribute_value(attr), (where, attr.name)
        kinds.add(int(attr.type))
    assert set(range(1, 10)) <= kinds  # FLOAT .. TENSORS, GRAPH included
    ref = helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT)
    with pytest.raises(ValueError, match="refers to a function's attribute"):
        onnx_proto.attribute_value(ref)


def test_the_parts_are_onnx_s_own_modules_once_onnx_is_imported() -> None:
    assert onnx_proto.cpp() is onnx.onnx_cpp2py_export
    assert onnx_proto.messages().ModelProto is onnx.ModelProto
    assert onnx_proto.messages().IR_VERSION == onnx.IR_VERSION


def test_onnx_imported_after_the_parts_works_and_shares_them(tmp_path: Path) -> None:
    """A fresh process: the parts alone (onnx's package not run), a probe that finds onnx, then
    ``import onnx``: the same modules, bound to the package, and onnx's own checker, inference,
    schemas and helpers work."""
    code = """
import sys
from spc.frontend import onnx_proto
cpp, pb = onnx_proto.cpp(), onnx_proto.messages()
assert "onnx" not in sys.modules, "onnx's package ran"
assert cpp.defs.get_schema("Conv", 18, "").name == "Conv"
import importlib.util
assert importlib.util.find_spec("onnx") is not None  # a library probing for onnx imports nothing
import onnx
from onnx import helper, numpy_helper
assert onnx.onnx_cpp2py_export is cpp and onnx.onnx_ml_pb2 is pb and onnx.ModelProto is pb.ModelProto
x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2])
y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2])
nodes = [helper.make_node("Relu", ["x"], ["z"]), helper.make_node("Relu", ["z"], ["y"])]
model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 18)])
onnx.checker.check_model(model, full_check=True)
(z,) = onnx.shape_inference.infer_shapes(model).graph.value_info
assert [d.dim_value for d in z.type.tensor_type.shape.dim] == [1, 2]
assert onnx.defs.get_schema("Relu", 18).name == "Relu"
assert numpy_helper.to_array(numpy_helper.from_array(__import__("numpy").ones(3, "float32"))).sum() == 3
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
