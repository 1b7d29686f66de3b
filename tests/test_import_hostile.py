"""Hostile ONNX files (issue 12, item 3): each is ONE SpcError naming the file, the node and what to
do; never a crash of onnx's C++ code, a petabyte allocation, a traceback or ``spc: internal error``.

Models are built small with onnx.helper and imported in-process (import_onnx runs onnx's shape
inference in a child process, so even the case that segfaults onnx is safe here); a few go
through ``spc compile`` to check the exit code, the one line and that no plan is written.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from spc.cli import main
from spc.errors import SpcError
from spc.frontend import shape_inference, validate
from spc.frontend.onnx_import import import_onnx

F32 = TensorProto.FLOAT
# 888 PiB of float32: 222 * 2**50 elements, the size the issue measured
HUGE = [222, 2**25, 2**25]


def vi(name: str, shape: list[int | str] | None, elem: int = F32) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def const(name: str, value: object) -> TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
          outputs: Sequence[onnx.ValueInfoProto], inits: Sequence[TensorProto] = (),
          value_info: Sequence[onnx.ValueInfoProto] = ()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits), value_info=list(value_info))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def relu(name: str = "r") -> onnx.ModelProto:
    return model([helper.make_node("Relu", ["x"], ["y"], name=name)], [vi("x", [1, 4])], [vi("y", None)])


def conv(**attrs: object) -> onnx.ModelProto:
    w = const("w", np.ones((2, 1, 3, 3), np.float32))
    return model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)],
                 [vi("x", [1, 1, 8, 8])], [vi("y", None)], [w])


def add_weight(w: TensorProto, n: int = 4) -> onnx.ModelProto:
    """x + w, with ``w`` an initializer of the caller's making."""
    return model([helper.make_node("Add", ["x", w.name], ["y"], name="add")], [vi("x", [n])], [vi("y", None)], [w])


def gathernd(batch_dims: int) -> onnx.ModelProto:
    """onnx's GatherND shape inference segfaults on batch_dims=-2**31 (onnx 1.23)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("GatherND", ["r", "idx"], ["y"], name="gather", batch_dims=batch_dims)]
    return model(nodes, [vi("x", [2, 3])], [vi("y", None)], [const("idx", np.zeros((2, 1), np.int64))])


def write(tmp_path: Path, m: onnx.ModelProto | bytes, name: str = "m.onnx") -> Path:
    path = tmp_path / name
    path.write_bytes(m if isinstance(m, bytes) else m.SerializeToString())
    return path


def with_bad_utf8(m: onnx.ModelProto, placeholder: str) -> bytes:
    """``m`` serialised with the 2-character string ``placeholder`` (everywhere it is used) replaced
    by bytes that are not UTF-8: onnx.helper refuses to build such a model, a file can hold one."""
    data = m.SerializeToString()
    token = b"\x02" + placeholder.encode()  # the length prefix keeps the match on whole strings
    assert len(placeholder) == 2 and token in data, placeholder
    return data.replace(token, b"\x02\xff\xfe")


def refused(path: Path) -> str:
    """import_onnx's SpcError for ``path``: one line that starts with the file's name."""
    with pytest.raises(SpcError) as info:
        import_onnx(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}:"), message
    return message


def spc_compile(path: Path, out: Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["compile", str(path), "-o", str(out)])
    return result.exit_code, result.stderr


def assert_one_line_error(code: int, err: str, *contains: str) -> None:
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith("spc: error:"), err
    assert "internal error" not in err and "Traceback" not in err
    for text in contains:
        assert text in lines[0], err


# -- models that must still import ----------------------------------------------------------------
def test_a_valid_model_imports_with_its_weights(tmp_path: Path) -> None:
    """Shape inference sees the model without its large float weights (shape_inference.shape_view): the
    weights come back intact, and a shape chain still resolves."""
    weights = np.arange(8 * 9, dtype=np.float32).reshape(8, 1, 3, 3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Shape", ["c"], ["s"]), helper.make_node("Gather", ["s", "i"], ["n"], axis=0),
             helper.make_node("Concat", ["n", "m1"], ["ns"], axis=0), helper.make_node("Reshape", ["c", "ns"], ["y"])]
    inits = [const("w", weights), const("i", np.array([0], np.int64)), const("m1", np.array([-1], np.int64))]
    g = import_onnx(write(tmp_path, model(nodes, [vi("x", [1, 1, 8, 8])], [vi("y", None)], inits)))
    (w,) = [v for v in g.values() if v.name == "w"]
    np.testing.assert_array_equal(w.data, weights)
    assert str(g.outputs[0].type) == "f32[1,512]"


def test_without_a_child_process_inference_runs_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shape_inference.sys, "executable", str(tmp_path / "no-python"))
    assert str(import_onnx(write(tmp_path, conv())).outputs[0].type) == "f32[1,2,6,6]"


def test_external_data_inside_the_folder_is_read(tmp_path: Path) -> None:
    weights = np.arange(4, dtype=np.float32)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "w.bin").write_bytes(b"pad!" + weights.tobytes())
    g = import_onnx(write(tmp_path, add_weight(external("data/../data/w.bin", offset=4, length=16))))
    (w,) = [v for v in g.values() if v.name == "w"]
    np.testing.assert_array_equal(w.data, weights)


# -- attributes -----------------------------------------------------------------------------------
def test_gathernd_batch_dims_that_segfaults_onnx_is_refused_before_inference(tmp_path: Path) -> None:
    message = refused(write(tmp_path, gathernd(-2**31)))
    assert "node gather (GatherND): attribute batch_dims=-2147483648 is out of range" in message
    assert "fix the attribute" in message


def test_a_crash_in_onnx_shape_inference_names_the_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the rule that catches it, the GatherND segfault happens, in the child process:
    one error naming the node (found by bisection), and this process lives on."""
    monkeypatch.setattr(validate, "_OP_ATTR_RULES", {})
    message = refused(write(tmp_path, gathernd(-2**31)))
    assert "onnx's shape inference crashed (SIG" in message and "at node gather (GatherND)" in message, message
    assert "re-export" in message


@pytest.mark.parametrize("value", ["BOGUS", "", "same_upper", "x" * 10_000])
def test_bad_auto_pad(tmp_path: Path, value: str) -> None:
    message = refused(write(tmp_path, conv(auto_pad=value)))
    assert f"node conv (Conv): auto_pad={validate.show(value)} is not an ONNX value" in message
    assert "use one of NOTSET, SAME_UPPER, SAME_LOWER, VALID" in message


@pytest.mark.parametrize(("attrs", "expected"), [
    ({}, "a Constant takes exactly one value attribute (value, value_float(s), value_int(s)) and this one has none"),
    ({"value_float": 1.0, "value_int": 2}, "and this one sets value_float, value_int"),
    ({"value_string": "hi"}, "a Constant with value_string is not supported"),
    ({"value_strings": ["a"]}, "a Constant with value_strings is not supported"),
])
def test_constant_without_a_supported_value(tmp_path: Path, attrs: dict[str, object], expected: str) -> None:
    nodes = [helper.make_node("Constant", [], ["c"], name="k", **attrs), helper.make_node("Add", ["x", "c"], ["y"])]
    message = refused(write(tmp_path, model(nodes, [vi("x", [1])], [vi("y", None)])))
    assert "node k (Constant)" in message and expected in message, message


def test_a_sparse_constant_is_refused_before_onnx_checks_its_indices(tmp_path: Path) -> None:
    sparse = helper.make_sparse_tensor(const("v", np.array([1.0], np.float32)),
                                       const("i", np.array([2**40], np.int64)), [3])
    nodes = [helper.make_node("Constant", [], ["c"], name="k", sparse_value=sparse),
             helper.make_node("Add", ["x", "c"], ["y"])]
    assert "node k (Constant): a Constant with sparse_value is not supported" in \
        refused(write(tmp_path, model(nodes, [vi("x", [3])], [vi("y", None)])))


@pytest.mark.parametrize(("node", "expected"), [
    (helper.make_node("Softmax", ["x"], ["y"], name="n", axis=1.5), "attribute axis is FLOAT; ONNX's Softmax takes INT"),
    (helper.make_node("Relu", ["x"], ["y"], name="n", foo=1), "ONNX's Relu-14 has no attribute foo; remove it"),
    (helper.make_node("Softmax", ["x"], ["y"], name="n", axis=2**40), "attribute axis=1099511627776 is out of range"),
    (helper.make_node("Cast", ["x"], ["y"], name="n", to=0), "attribute to: unsupported ONNX element type UNDEFINED (0)"),
    (helper.make_node("Cast", ["x"], ["y"], name="n", to=99), "unsupported ONNX element type unknown (99)"),
    (helper.make_node("LRN", ["x"], ["y"], name="n", size=0), "attribute size=0 is out of range (each value must lie in 1.."),
    (helper.make_node("Transpose", ["x"], ["y"], name="n", perm=[0, 0]), "perm [0, 0] is not a permutation of rank 2"),
    # in range for onnx's lenient inference, wrong for the input: spc's own inference refuses them
    (helper.make_node("Softmax", ["x"], ["y"], name="n", axis=5), "axis 5 out of range for rank 2"),
    (helper.make_node("DepthToSpace", ["x"], ["y"], name="n", blocksize=3),
     "4 channels are not a multiple of blocksize**2 = 9"),
])
def test_bad_attribute(tmp_path: Path, node: onnx.NodeProto, expected: str) -> None:
    four_d = node.op_type in ("LRN", "DepthToSpace")
    message = refused(write(tmp_path, model([node], [vi("x", [1, 4, 2, 2] if four_d else [1, 4])],
                                            [vi("y", None)])))
    assert f"node n ({node.op_type})" in message and expected in message, message


# -- element types, sizes, data -------------------------------------------------------------------
def test_undefined_element_type_on_an_input(tmp_path: Path) -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [1, 4], elem=TensorProto.UNDEFINED)], [vi("y", None)])
    message = refused(write(tmp_path, m))
    assert "input x: unsupported ONNX element type UNDEFINED (0); give the input an element type" in message


def test_undefined_element_type_on_an_initializer(tmp_path: Path) -> None:
    w = TensorProto(name="w", data_type=TensorProto.UNDEFINED, dims=[4], raw_data=bytes(16))
    assert "initializer w: unsupported ONNX element type UNDEFINED (0)" in refused(write(tmp_path, add_weight(w)))


def test_undefined_element_type_on_a_constant(tmp_path: Path) -> None:
    value = TensorProto(name="v", data_type=TensorProto.UNDEFINED, dims=[4], raw_data=bytes(16))
    nodes = [helper.make_node("Constant", [], ["c"], name="k", value=value), helper.make_node("Add", ["x", "c"], ["y"])]
    message = refused(write(tmp_path, model(nodes, [vi("x", [4])], [vi("y", None)])))
    assert "node k (Constant): attribute value: unsupported ONNX element type UNDEFINED (0)" in message


def _declared_only(dims: list[int]) -> TensorProto:
    """A float tensor whose dims declare a size and which holds no data."""
    return TensorProto(name="w", data_type=F32, dims=dims)


@pytest.mark.parametrize("where", ["initializer", "constant"])
def test_a_2gb_tensor_declared_by_dims_without_data_allocates_nothing(tmp_path: Path, where: str) -> None:
    if where == "initializer":
        m = add_weight(_declared_only([2**29]), n=1)
    else:
        nodes = [helper.make_node("Constant", [], ["c"], name="k", value=_declared_only([2**29])),
                 helper.make_node("Add", ["x", "c"], ["y"])]
        m = model(nodes, [vi("x", [1])], [vi("y", None)])
    path = write(tmp_path, m)
    tracemalloc.start()
    try:
        message = refused(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"{peak} bytes allocated to refuse it"
    assert "dims [536870912] declare 536870912 float32 elements (2.0 GiB) but the tensor holds no data" in message
    assert ("initializer w" if where == "initializer" else "node k (Constant): attribute value") in message


def test_a_tensor_beyond_the_cap_is_refused_by_its_dims(tmp_path: Path) -> None:
    message = refused(write(tmp_path, add_weight(_declared_only([2**40]), n=1)))
    assert "initializer w: dims [1099511627776] declare 4.0 TiB, more than spc's cap of 2.0 GiB per constant" in message


def _huge_output(op: str) -> onnx.ModelProto:
    shape = const("s", np.array(HUGE, np.int64))
    if op == "Expand":
        node = helper.make_node("Expand", ["x", "s"], ["y"], name="big")
    elif op == "Reshape":
        node = helper.make_node("Reshape", ["x", "s"], ["y"], name="big")
    else:
        node = helper.make_node("ConstantOfShape", ["s"], ["c"], name="big")
    nodes = [node] if op != "ConstantOfShape" else [node, helper.make_node("Add", ["x", "c"], ["y"])]
    return model(nodes, [vi("x", [1])], [vi("y", None)], [shape])


@pytest.mark.parametrize("op", ["Expand", "ConstantOfShape", "Reshape"])
def test_an_inferred_output_of_888_pib(tmp_path: Path, op: str) -> None:
    message = refused(write(tmp_path, _huge_output(op)))
    assert f"(from node big ({op})): shape [222, 33554432, 33554432]" in message, message
    assert "(888.0 PiB), more than spc's cap of 2**31 elements per tensor" in message


@pytest.mark.parametrize("kind", ["value_info", "output"])
def test_a_declared_shape_of_888_pib(tmp_path: Path, kind: str) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    if kind == "value_info":
        m = model(nodes, [vi("x", [1])], [vi("y", None)], value_info=[vi("r", HUGE)])
    else:
        m = model(nodes, [vi("x", [1])], [vi("y", HUGE)])
    message = refused(write(tmp_path, m))
    assert f"{'value r' if kind == 'value_info' else 'output y'}: shape [222, 33554432, 33554432] holds" in message
    assert "888.0 PiB" in message


def test_data_propagation_that_exhausts_memory_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Range of 2**62 elements makes onnx's data propagation allocate until the child's memory
    limit (lowered here to keep the test quick); inference runs again without it and spc's
    caps name the node."""
    monkeypatch.setattr(shape_inference, "INFER_MEMORY_BYTES", 256 << 20)
    nodes = [helper.make_node("Range", ["a", "b", "c"], ["q"], name="range"),
             helper.make_node("Cast", ["q"], ["qf"], to=F32), helper.make_node("Add", ["x", "qf"], ["y"])]
    inits = [const("a", np.int64(0)), const("b", np.int64(2**62)), const("c", np.int64(1))]
    message = refused(write(tmp_path, model(nodes, [vi("x", [1])], [vi("y", None)], inits)))
    assert "value q (from node range (Range)): shape [4611686018427387904]" in message


# the forked-inference tests run in a new interpreter: a test worker may hold threads, where spc
# does not fork. _REAPED prints "reaped" when the child ``pid`` is gone, not a zombie.
_REAPED = """
try:
    os.waitpid(pid, os.WNOHANG)
except ChildProcessError:
    print("reaped")
"""


def in_fresh_process(code: str) -> str:
    """What ``code`` prints, run by a new interpreter; it must exit cleanly."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_refusal_ends_the_inference_started_beside_the_checks(tmp_path: Path) -> None:
    """The importer starts onnx's inference in a forked child before its own checks
    (shape_inference.Inference); when a check refuses the model, its refusal is the error and the child
    is ended and reaped."""
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Relu", ["x"], ["y"], name="b")]
    path = write(tmp_path, model(nodes, [vi("x", [4])], [vi("y", None)]))
    code = f"""
import os, sys
from spc.errors import SpcError
from spc.frontend import shape_inference
from spc.frontend.onnx_import import import_onnx
ended = []
cancel = shape_inference.Inference.cancel
def watched(self):
    ended.append(self.child.pid)
    cancel(self)
shape_inference.Inference.cancel = watched
try:
    import_onnx(__import__("pathlib").Path({str(path)!r}))
except SpcError as exc:
    assert "node b (Relu) writes y, which node a already defines" in str(exc), exc
else:
    sys.exit("not refused")
assert len(ended) == 1, ended
pid = ended[0]
"""
    assert in_fresh_process(code + _REAPED) == "reaped"


def test_an_inference_that_finished_during_slow_checks_is_not_taken_for_a_slow_one(tmp_path: Path) -> None:
    """The inference's time limit counts from when the importer waits for it, not from the fork:
    checks that take longer than the limit do not turn a finished inference into a timeout (and a
    second inference without data propagation)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["y"])]
    path = write(tmp_path, model(nodes, [vi("x", [2, 3])], [vi("y", None)]))
    code = f"""
import time
from spc.frontend import onnx_import, shape_inference, validate
shape_inference.INFER_TIMEOUT_S = 1.0
checks = validate.check_model
validate.check_model = lambda *a: (time.sleep(1.5), checks(*a))
again = []
infer = shape_inference._infer_in_child
shape_inference._infer_in_child = lambda *a: (again.append(a[2]), infer(*a))[1]
g = onnx_import.import_onnx(__import__("pathlib").Path({str(path)!r}))
assert not again, again
print(g.outputs[0].type)
"""
    assert in_fresh_process(code) == "f32[2,3]"


def test_an_interrupted_wait_ends_the_inference_child(tmp_path: Path) -> None:
    """Ctrl-C while the importer waits for the inference: the child is ended and reaped, its pipes
    closed."""
    path = write(tmp_path, conv())
    code = f"""
import os, selectors
from spc.frontend import onnx_import, shape_inference
def interrupted(self, timeout=None):
    raise KeyboardInterrupt
selectors.DefaultSelector.select = interrupted
pids = []
fork = shape_inference._fork_inference
shape_inference._fork_inference = lambda *a: (lambda c: (pids.append(c.pid), c)[1])(fork(*a))
before = set(os.listdir("/proc/self/fd"))
try:
    onnx_import.import_onnx(__import__("pathlib").Path({str(path)!r}))
except KeyboardInterrupt:
    pass
assert len(pids) == 1 and set(os.listdir("/proc/self/fd")) <= before, (pids, os.listdir("/proc/self/fd"))
pid = pids[0]
"""
    assert in_fresh_process(code + _REAPED) == "reaped"


def test_a_read_begun_ahead_ends_as_the_importers_own(tmp_path: Path) -> None:
    """``spc compile`` begins its read before it imports the compiler, and a forked child runs the
    checks there (frontend/reading.py, ``ahead``): every model ends as when the checks run here,
    word for word, whichever check refuses it first (the strings' before the ops', the ops' before
    the rest), onnx crashing in the child, or data propagation exhausting its memory. Each read
    ahead did fork its child, and none is left behind."""
    unsupported = model([helper.make_node("NotAnOp", ["x"], ["y"], name="a"),
                         helper.make_node("Relu", ["x"], ["y"], name="b")], [vi("x", [4])], [vi("y", None)])
    strange = model([helper.make_node("NotAnOp", ["x"], ["y"], name="N!")], [vi("x", [4])], [vi("y", None)])
    dynamic = model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", ["n", 4])], [vi("y", None)])
    chain = model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["s"]),
                   helper.make_node("Reshape", ["r", "s"], ["y"])], [vi("x", ["n", 4])], [vi("y", None)])
    negative = model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [-1, 4])], [vi("y", None)])
    huge = [helper.make_node("Range", ["a", "b", "c"], ["q"], name="range"),
            helper.make_node("Cast", ["q"], ["qf"], to=F32), helper.make_node("Add", ["x", "qf"], ["y"])]
    cases = {  # name: (model, input shape)
        "valid": (conv(), None),
        "valid, a shape chain": (model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["y"])],
                                       [vi("x", [2, 3])], [vi("y", None)]), None),
        "an attribute onnx segfaults on": (gathernd(-2**31), None),
        "onnx segfaults (the rule removed)": (gathernd(-2**31), None),
        "defined twice": (model([helper.make_node("Relu", ["x"], ["y"], name="a"),
                                 helper.make_node("Relu", ["x"], ["y"], name="b")], [vi("x", [4])], [vi("y", None)]), None),
        "an unknown op, defined twice": (unsupported, None),
        "not UTF-8, an unknown op": (with_bad_utf8(strange, "N!"), None),
        "an attribute of the wrong type": (model([helper.make_node("Softmax", ["x"], ["y"], name="n", axis=1.5)],
                                                 [vi("x", [1, 4])], [vi("y", None)]), None),
        "data not matching its dims": (add_weight(TensorProto(name="w", data_type=F32, dims=[4], raw_data=bytes(12))),
                                       None),
        "a declared 888 PiB": (model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [1])], [vi("y", HUGE)]), None),
        "data propagation out of memory": (model(huge, [vi("x", [1])], [vi("y", None)],
                                                 [const("a", np.int64(0)), const("b", np.int64(2**62)),
                                                  const("c", np.int64(1))]), None),
        "a dynamic input fixed": (dynamic, [2, 4]),
        "a dynamic input fixed, a shape chain": (chain, [2, 4]),
        "a dynamic input fixed wrongly": (dynamic, [2, 5]),
        "a fixed shape of another rank": (dynamic, [1, 2, 4]),
        "a fixed shape past the caps": (dynamic, [2**20, 2**20]),
        "an input of size -1 fixed": (negative, [2, 4]),
        "the child killed in its checks": (add_weight(TensorProto(name="w", data_type=F32, dims=[4],
                                                                raw_data=bytes(12))), None),
    }
    paths = {name: (str(write(tmp_path, m, f"{i}.onnx")), shape) for i, (name, (m, shape)) in enumerate(cases.items())}
    code = f"""
import os
from pathlib import Path
from spc.errors import SpcError
from spc.frontend import onnx_import, reading, shape_inference, validate
from spc.frontend.onnx_import import read_source
shape_inference.INFER_MEMORY_BYTES = 256 << 20
me, rules, check_model, here, inferred = os.getpid(), validate._OP_ATTR_RULES, validate.check_model, [], []
def checking(model, path, opset):
    if os.getpid() != me and path.name == {paths["the child killed in its checks"][0].rsplit("/", 1)[1]!r}:
        os.kill(os.getpid(), 9)  # as a memory limit would, before its checks end
    here.append(1)
    return check_model(model, path, opset)
validate.check_model = checking
imported = onnx_import._Importer.__init__
def importing(self, model, *a):
    inferred.append(sorted(v.SerializeToString() for v in model.graph.value_info))
    imported(self, model, *a)
onnx_import._Importer.__init__ = importing
def ends(path, shape, ahead):
    begun = reading.begin(Path(path), shape, ahead=True) if ahead else None
    assert begun is None or begun.ahead, "no child forked"
    here.clear(), inferred.clear()
    try:
        g = read_source(Path(path), input_shape=shape, reading=begun).graph
    except SpcError as exc:
        return "refused: " + str(exc), None
    assert not (ahead and here), "checked here, not in the child"
    return "imported: " + ", ".join(str(v.type) for v in g.outputs), inferred[0]
for name, (path, shape) in {paths!r}.items():
    validate._OP_ATTR_RULES = {{}} if "rule removed" in name else rules
    plain, ahead = ends(path, shape, False), ends(path, shape, True)
    assert plain == ahead, (name, plain, ahead)  # onnx's inferred types too
    print(name, "|", plain[0])
try:
    os.waitpid(-1, os.WNOHANG)
except ChildProcessError:
    print("none left")
"""
    *lines, left = in_fresh_process(code).splitlines()
    out = dict(line.split(" | ", 1) for line in lines)
    assert left == "none left" and len(out) == len(cases)
    assert out["valid"] == "imported: f32[1,2,6,6]" and out["a dynamic input fixed"] == "imported: f32[2,4]"
    assert "onnx's shape inference crashed (SIG" in out["onnx segfaults (the rule removed)"]
    assert "batch_dims=-2147483648 is out of range" in out["an attribute onnx segfaults on"]
    assert "unsupported node(s)" in out["an unknown op, defined twice"]
    assert "is not valid UTF-8" in out["not UTF-8, an unknown op"]
    assert "shape [4611686018427387904]" in out["data propagation out of memory"]
    assert "has a fixed size 4 where 5 was asked" in out["a dynamic input fixed wrongly"]
    assert out["a dynamic input fixed, a shape chain"] == "imported: f32[2,4]"
    assert "raw_data holds 12 bytes where dims [4] of float32 need 16" in out["the child killed in its checks"]
    assert all(v.startswith("refused: ") for k, v in out.items()
               if not k.startswith(("valid", "a dynamic input fixed"))), out


def test_a_node_reading_a_missing_input(tmp_path: Path) -> None:
    m = model([helper.make_node("Add", ["x", "nope"], ["y"], name="add")], [vi("x", [4])], [vi("y", None)])
    message = refused(write(tmp_path, m))
    assert "node add (Add) reads nope, which nothing before it defines (a missing input" in message


def test_a_value_assigned_twice(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Relu", ["x"], ["y"], name="b")]
    message = refused(write(tmp_path, model(nodes, [vi("x", [4])], [vi("y", None)])))
    assert "node b (Relu) writes y, which node a already defines" in message


@pytest.mark.parametrize(("where", "expected"), [
    ("node name", "node #0 (Relu): model.graph.node[0].name is not valid UTF-8 (b'\\xff\\xfe')"),
    ("value name", "node #0 (Relu): model.graph.node[0].output[0] is not valid UTF-8"),
    ("graph input name", "node #0 (Relu): model.graph.node[0].input[0] is not valid UTF-8"),
    ("attribute", "node conv (Conv): attribute auto_pad is not valid UTF-8 text (b'\\xff\\xfe')"),
])
def test_text_that_is_not_utf8(tmp_path: Path, where: str, expected: str) -> None:
    if where == "node name":
        data = with_bad_utf8(relu("N!"), "N!")
    elif where == "value name":
        m = relu()
        m.graph.node[0].output[0] = m.graph.output[0].name = "V!"
        data = with_bad_utf8(m, "V!")
    elif where == "graph input name":
        m = model([helper.make_node("Relu", ["I!"], ["y"])], [vi("I!", [4])], [vi("y", None)])
        data = with_bad_utf8(m, "I!")
    else:
        data = with_bad_utf8(conv(auto_pad="A!"), "A!")
    message = refused(write(tmp_path, data))
    assert expected in message and "re-export" in message, message


@pytest.mark.parametrize(("tensor", "expected"), [
    (TensorProto(name="w", data_type=F32, dims=[4], raw_data=bytes(12)),
     "raw_data holds 12 bytes where dims [4] of float32 need 16"),
    (TensorProto(name="w", data_type=F32, dims=[4], float_data=[1.0, 2.0]),
     "holds 2 values in float_data where dims [4] of float32 need 4 values in float_data"),
    (TensorProto(name="w", data_type=F32, dims=[4], int64_data=[1, 2, 3, 4]),
     "holds 4 values in int64_data where dims [4] of float32 need 4 values in float_data"),
    (TensorProto(name="w", data_type=TensorProto.UINT8, dims=[4], int32_data=[1, 2, 3, 300]),
     "int32_data holds values outside uint8's range 0..255"),
    (TensorProto(name="w", data_type=F32, dims=[4, 0], raw_data=bytes(4)),
     "raw_data holds 4 bytes where dims [4, 0] of float32 need 0"),
    (TensorProto(name="w", data_type=F32, dims=[4], raw_data=bytes(16), float_data=[1.0] * 4),
     "holds data in several fields (raw_data, float_data)"),
    (TensorProto(name="w", data_type=F32, dims=[-4], raw_data=bytes(16)), "negative dimension in dims [-4]"),
    (TensorProto(name="w", data_type=TensorProto.BFLOAT16, dims=[4], raw_data=bytes(8)),
     "unsupported ONNX element type BFLOAT16 (16); export it in float32"),
])
def test_tensor_data_that_does_not_match_its_dims(tmp_path: Path, tensor: TensorProto, expected: str) -> None:
    message = refused(write(tmp_path, add_weight(tensor)))
    assert f"initializer w: {expected}" in message or f"initializer w {expected}" in message, message


@pytest.mark.parametrize("where", ["input", "initializer", "value_info", "inferred"])
def test_a_rank_too_large(tmp_path: Path, where: str) -> None:
    if where == "input":
        m, expected = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [1] * 40)], [vi("y", None)]), \
            "input x has rank 40"
    elif where == "initializer":
        m, expected = add_weight(const("w", np.ones([1] * 33, np.float32))), "initializer w has rank 33"
    elif where == "value_info":
        nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
        m, expected = model(nodes, [vi("x", [1])], [vi("y", None)], value_info=[vi("r", [1] * 33)]), \
            "value r has rank 33"
    else:
        nodes = [helper.make_node("Unsqueeze", ["x", "axes"], ["y"], name="unsq")]
        m = model(nodes, [vi("x", [1])], [vi("y", None)], [const("axes", np.arange(1, 41, dtype=np.int64))])
        expected = "value y (from node unsq (Unsqueeze)) has rank 41"
    message = refused(write(tmp_path, m))
    assert expected in message and "spc takes tensors of rank at most 32" in message, message


def test_versions_beyond_what_onnx_reads(tmp_path: Path) -> None:
    m = relu()
    del m.opset_import[:]
    assert "imports no default-domain (ai.onnx) opset; re-export it with opset 18" in refused(write(tmp_path, m))
    m = relu()
    m.ir_version = 2**62
    assert "the model's IR version 4611686018427387904 is not one this spc's onnx" in refused(write(tmp_path, m))
    m = relu()
    m.opset_import.add(domain="com.other", version=2**40)
    assert "imports opset 1099511627776 of domain com.other, which is not a version number" in \
        refused(write(tmp_path, m))


# -- external data --------------------------------------------------------------------------------
def external(location: str, offset: int | str | None = None, length: int | str | None = None) -> TensorProto:
    """A float32 [4] initializer whose data is external, at ``location``."""
    t = TensorProto(name="w", data_type=F32, dims=[4], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            t.external_data.add(key=key, value=str(value))
    return t


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A model's folder, beside a folder with a data file it must not read."""
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "secret.bin").write_bytes(bytes(16))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "short.bin").write_bytes(bytes(8))
    (tmp_path / "model" / "w.bin").write_bytes(bytes(16))
    os.symlink(tmp_path / "other" / "secret.bin", tmp_path / "model" / "link.bin")
    return tmp_path / "model"


@pytest.mark.parametrize(("location", "why"), [
    ("../other/secret.bin", "the location climbs out of it with '..'"),
    ("SECRET", "the location is an absolute path"),
    ("link.bin", "the location leads out of it through a symlink"),
    ("a\0b", "the location contains a NUL character"),
])
def test_external_data_outside_the_models_folder(model_dir: Path, location: str, why: str) -> None:
    location = location.replace("SECRET", str(model_dir.parent / "other" / "secret.bin"))
    message = refused(write(model_dir, add_weight(external(location))))
    assert f"initializer w: its external data {validate.show(location)} lies outside the model's folder " \
           f"{model_dir.resolve()}: {why}; spc reads weights only from the model's folder" in message, message


@pytest.mark.parametrize(("tensor", "expected"), [
    (external("none.bin"), "its external data file none.bin is missing (looked for"),
    (external("short.bin"), "its external data short.bin holds 8 bytes (from offset 0) where its dims [4] need 16"),
    (external("short.bin", length=16), "its external data asks for bytes 0..16 of short.bin, which has 8 bytes"),
    (external("w.bin", offset=12, length=16), "its external data asks for bytes 12..28 of w.bin, which has 16 bytes"),
    (external("w.bin", offset=2**70), "its external data asks for bytes 1180591620717411303424..1180591620717411303424 of w.bin"),
    (external("w.bin", offset="12x"), "external data offset 12x or length '' is not a number"),
    (external("w.bin", length=-1), "external data offset 0 or length -1 is negative"),
    (external("."), "its external data . is not a regular file"),
    (external("x" * 5000), "cannot open its external data file xxxx"),
    (external(""), "its data is external but names no file"),
])
def test_external_data_missing_or_too_short(model_dir: Path, tensor: TensorProto, expected: str) -> None:
    message = refused(write(model_dir, add_weight(tensor)))
    assert f"initializer w: {expected}" in message, message


# -- files that are not models --------------------------------------------------------------------
def test_files_that_are_not_models(tmp_path: Path) -> None:
    assert refused(write(tmp_path, b"", "empty.onnx")).endswith(": the file is empty (0 bytes); re-export the model")
    (tmp_path / "folder.onnx").mkdir()
    assert "is a folder, expected an .onnx file" in refused(tmp_path / "folder.onnx")
    assert "no such file" in refused(tmp_path / "nope.onnx")
    rng = np.random.default_rng(0)
    for k in range(8):
        message = refused(write(tmp_path, rng.bytes(int(rng.integers(1, 4000))), f"random{k}.onnx"))
        assert "not an ONNX model" in message or "has no nodes" in message, message


def test_every_truncation_of_a_model_is_one_error(tmp_path: Path) -> None:
    """A file cut anywhere: the protobuf does not parse, or what parses lacks what follows."""
    data = conv(pads=[1, 1, 1, 1]).SerializeToString()
    for n in sorted({1, 2, 3, *range(0, len(data), 7), len(data) - 1}):
        if n:
            refused(write(tmp_path, data[:n], f"cut{n}.onnx"))


# -- through the command line ---------------------------------------------------------------------
CLI_CASES: dict[str, tuple[Callable[[Path], Path], tuple[str, ...]]] = {
    "gathernd": (lambda d: write(d, gathernd(-2**31)), ("node gather (GatherND)", "batch_dims")),
    "888-pib": (lambda d: write(d, _huge_output("Expand")), ("node big (Expand)", "888.0 PiB")),
    "not-utf8": (lambda d: write(d, with_bad_utf8(relu("N!"), "N!")), ("is not valid UTF-8",)),
    "truncated": (lambda d: write(d, conv().SerializeToString()[:-20]), ("not an ONNX model",)),
    "outside": (lambda d: write(d, add_weight(external("../w.bin"))), ("lies outside the model's folder",)),
}


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_compile_refuses_in_one_line(tmp_path: Path, case: str) -> None:
    build, contains = CLI_CASES[case]
    folder = tmp_path / "in"
    folder.mkdir()
    (tmp_path / "w.bin").write_bytes(bytes(16))
    out = tmp_path / "out.ttplan"
    code, err = spc_compile(build(folder), out)
    assert_one_line_error(code, err, *contains)
    assert not out.exists() and not list(tmp_path.glob("*.part"))


def test_compile_survives_the_onnx_segfault_as_a_process(tmp_path: Path) -> None:
    """The real executable, with the GatherND rule switched off (as if our checks missed it): the
    segfault stays in the child; spc exits 1 with one line naming the node, writes nothing."""
    path = write(tmp_path, gathernd(-2**31))
    out = tmp_path / "out.ttplan"
    code = ("import sys\nfrom spc.frontend import validate\nvalidate._OP_ATTR_RULES.clear()\n"
            "from spc.cli import main\nsys.argv = ['spc', 'compile', sys.argv[1], '-o', sys.argv[2]]\nmain()\n")
    proc = subprocess.run([sys.executable, "-c", code, str(path), str(out)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert_one_line_error(proc.returncode, proc.stderr, "crashed (SIGSEGV) at node gather (GatherND)")
    assert not out.exists()
