"""--dump-dir's Netron views: the IR after every pass as ONNX (ir/to_onnx.py), the device program as
a graph of ttnn calls (plan/to_onnx.py), and .dot labels that show the compiler's choices."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from spc.compiler import compile_onnx
from spc.ir.to_onnx import SPC_DOMAIN, to_onnx
from spc.passes.manager import DumpDir
from spc.passes.pipeline import PASS_NAMES
from spc.plan.io import read_plan
from spc.plan.program import encode
from spc.plan.to_onnx import TTNN_DOMAIN
from spc.ttnn.memory import MemoryOverrides
from spc.ttnn.precision import PrecisionPlan
from tests.conftest import SMALL, ir
from tests.corpus.exports import CORPUS, cached

pytestmark = pytest.mark.xdist_group("onnx-dumps")  # one worker: the compiles below happen once

STAGE = len(PASS_NAMES) + 1  # choose-memory-config, after the graph passes
KEYPOINTS, PRECISION = (f"{PASS_NAMES.index(n) + 1:02d}-{n}" for n in ("fuse-keypoints", "choose-precision"))
FIRST_CONV = "encoder.conv_blocks.0.conv_a"


@pytest.fixture(scope="module")
def dumps(small_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the dump folder, the plan) of the small export, compiled with the defaults."""
    folder = tmp_path_factory.mktemp("onnx_dumps")
    plan = folder / "sp.ttplan"
    compile_onnx(small_onnx, plan, dump_dir=folder / "dumps")
    return folder / "dumps", plan


@pytest.fixture(scope="module")
def other_dumps(small_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same model with other choices: the fast preset, the first conv forced to DRAM slices."""
    folder = tmp_path_factory.mktemp("onnx_dumps_fast")
    compile_onnx(small_onnx, folder / "sp.ttplan", dump_dir=folder / "dumps", precision=PrecisionPlan("fast"),
                 memory=MemoryOverrides.from_cli([f"{FIRST_CONV}=dram:height=2"]))
    return folder / "dumps"


def meta(node: onnx.NodeProto) -> dict[str, str]:
    return {p.key: p.value for p in node.metadata_props}


def node_named(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.name == name)


def conv_named(model: onnx.ModelProto, block: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if meta(n).get("block") == block)


def test_every_dump_has_an_onnx_view_that_passes_the_checker(small_onnx: Path, dumps: tuple[Path, Path]) -> None:
    folder, _ = dumps
    names = sorted(p.name for p in folder.glob("*.onnx"))
    expected = [f"{i:02d}-{n}.onnx" for i, n in enumerate(["input", *PASS_NAMES])]
    expected += [f"{STAGE:02d}-choose-memory-config.onnx", f"{STAGE:02d}-device-program.onnx"]
    assert names == sorted(expected)
    source_opset = {o.domain: o.version for o in onnx.load(small_onnx, load_external_data=False).opset_import}[""]
    for name in names:
        model = onnx.load(folder / name)
        onnx.checker.check_model(model, full_check=True)
        domains = {o.domain: o.version for o in model.opset_import}
        if name.endswith("device-program.onnx"):
            assert domains == {TTNN_DOMAIN: 1}
        else:
            assert domains[""] == source_opset  # the IR's attributes are the source's version
            assert (SPC_DOMAIN in domains) == any(n.domain == SPC_DOMAIN for n in model.graph.node)


def standard_dumps_match(src: Path, folder: Path, shape: tuple[int, ...]) -> list[str]:
    """Every dump of ONNX ops only runs in onnxruntime and gives the source's outputs: their names."""
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    source = ort.InferenceSession(str(src))
    want = source.run(None, {source.get_inputs()[0].name: x})
    standard = []
    for path in sorted(folder.glob("[0-9][0-9]-*.onnx")):
        model = onnx.load(path)
        if any(n.domain not in ("", "ai.onnx") for n in model.graph.node):
            continue
        standard.append(path.name)
        session = ort.InferenceSession(str(path))
        got = session.run(None, {session.get_inputs()[0].name: x})
        assert [o.name for o in session.get_outputs()] == [o.name for o in source.get_outputs()]
        for a, b in zip(want, got):
            assert a.shape == b.shape, path.name
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=path.name)
    return standard


def test_the_dumps_of_onnx_ops_compute_what_the_source_does(small_onnx: Path, dumps: tuple[Path, Path]) -> None:
    standard = standard_dumps_match(small_onnx, dumps[0], (1, 3, *SMALL))
    assert "02-fold-constants.onnx" in standard and "06-fold-batchnorm.onnx" in standard


@pytest.mark.parametrize("name", ["magicleap_legacy_op11", "hf_legacy"])
def test_older_opsets_and_the_legacy_exporter_export_back(name: str, tmp_path: Path) -> None:
    """Opset 11 (Squeeze's axes an attribute, where simplify-shapes writes an input) and opset 17
    from the TorchScript exporter (Constant, Split, ScatterND, Range): checked and run."""
    src = cached(name, *SMALL)
    compile_onnx(src, None, dump_dir=tmp_path, stop_after="fold-batchnorm")
    for path in tmp_path.glob("*.onnx"):
        onnx.checker.check_model(onnx.load(path), full_check=True)
    channels = CORPUS[name].channels
    assert len(standard_dumps_match(src, tmp_path, (1, channels, *SMALL))) == 7  # input .. fold-batchnorm


def test_fused_ops_keep_their_domain_attributes_and_the_decisions_as_metadata(dumps: tuple[Path, Path]) -> None:
    folder, _ = dumps
    before = onnx.load(folder / f"{KEYPOINTS}.onnx")
    chosen = onnx.load(folder / f"{PRECISION}.onnx")
    planned = onnx.load(folder / f"{STAGE:02d}-choose-memory-config.onnx")
    nms = node_named(chosen, "nms")
    assert (nms.domain, nms.op_type) == (SPC_DOMAIN, "Nms")
    assert {a.name: onnx.helper.get_attribute_value(a) for a in nms.attribute} == {"iterations": 2, "radius": 4}
    assert meta(node_named(before, "nms")) == {"placement": "device"}
    assert meta(nms) == {"placement": "device", "block": "nms", "output_dtype": "bfloat16"}
    conv = conv_named(chosen, FIRST_CONV)
    assert (conv.domain, conv.op_type) == (SPC_DOMAIN, "Conv2d")
    # the first conv sums 9 products per output: float32 weights under every preset (ttnn/precision.py)
    assert meta(conv) == {"placement": "device", "block": FIRST_CONV, "weights_dtype": "float32",
                          "math_fidelity": "HiFi4", "fp32_dest_acc_en": "true", "packer_l1_acc": "true",
                          "output_dtype": "bfloat16"}
    # after the memory planner: the block's configuration as --memory-config spells it, its calls
    assert meta(conv_named(planned, FIRST_CONV)) == {**meta(conv), "ttnn_calls": "1", "memory": "l1"}
    assert meta(node_named(planned, "nms"))["memory_config"] == "DRAM_INTERLEAVED"
    # a device value keeps its ONNX type, with the format the device stores it in beside it
    info = next(v for v in chosen.graph.value_info if v.name == conv.output[0])
    assert info.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert {p.key: p.value for p in info.metadata_props} == {"device_dtype": "bfloat16"}
    # the host stage's nodes are ONNX's own, placed
    host = node_named(chosen, "node_select")
    assert (host.domain, host.op_type, meta(host)) == ("", "Slice", {"placement": "host-pre"})


def test_the_device_program_is_a_graph_of_ttnn_calls(dumps: tuple[Path, Path]) -> None:
    folder, plan_path = dumps
    program = read_plan(plan_path).program
    model = onnx.load(folder / f"{STAGE:02d}-device-program.onnx")
    onnx.checker.check_model(model, full_check=True)
    assert [n.op_type for n in model.graph.node] == [op.op.removeprefix("ttnn.") for op in program.device_ops]
    assert {n.domain for n in model.graph.node} == {TTNN_DOMAIN}
    for node, op in zip(model.graph.node, program.device_ops):
        attrs = {a.name: json.loads(a.s) for a in node.attribute}
        assert attrs == {**encode(op.args), **op.weights}, op.output
        assert list(node.input[:len(op.inputs)]) == op.inputs and list(node.output) == op.results
        assert sorted(node.input[len(op.inputs):]) == sorted(op.weights.values())  # named by the attributes
        assert meta(node)["source"] == op.source and meta(node)["dtype"] == op.dtype.value
    conv = next(n for n in model.graph.node if n.op_type == "conv2d")
    attrs = {a.name: json.loads(a.s) for a in conv.attribute}
    assert attrs["slice_config"] == {"type": "l1_full"} and attrs["compute_config"]["math_fidelity"] == "HiFi4"
    weights = {i.name for i in model.graph.initializer}
    assert {w for op in program.device_ops for w in op.weights.values()} <= weights
    assert [i.name for i in model.graph.input] == [t.name for t in program.device_inputs]
    outputs = {o.name: o for o in model.graph.output}
    assert {t.name for t in program.device_outputs} <= set(outputs)
    for t in program.device_outputs:
        shape = [d.dim_value for d in outputs[t.name].type.tensor_type.shape.dim]
        producer = next(op for op in program.device_ops if t.name in op.results)
        assert shape == producer.shape
    # a call told where to write says so in its argument's JSON spelling
    assert any(json.loads(a.s) == "DRAM_INTERLEAVED" for n in model.graph.node for a in n.attribute
               if a.name == "memory_config")


def test_dot_labels_show_the_choices_and_the_stored_formats(dumps: tuple[Path, Path], other_dumps: Path) -> None:
    folder, _ = dumps
    placed, chosen, planned = (
        (folder / f"{name}.dot").read_text() for name in (KEYPOINTS, PRECISION, f"{STAGE:02d}-choose-memory-config"))
    assert len({placed, chosen, planned}) == 3
    assert "bfloat16[" not in placed and "f32[1,64,120,160]" in placed  # no format chosen yet
    assert "bfloat16[1,64,120,160]" in chosen and "w:bfloat16 HiFi4 fp32acc l1acc out:bfloat16" in chosen
    assert f'@device \\"{FIRST_CONV}\\"' in chosen
    assert "memory: l1" in planned and "memory_config: DRAM_INTERLEAVED" in planned
    # other choices, other labels: the fast preset and a block forced to DRAM
    fast = (other_dumps / f"{PRECISION}.dot").read_text()
    assert fast != chosen and "w:bfloat8_b LoFi fp32acc out:bfloat16" in fast
    assert (other_dumps / f"{KEYPOINTS}.dot").read_text() == placed
    forced = (other_dumps / f"{STAGE:02d}-choose-memory-config.dot").read_text()
    assert "memory: dram:height=2" in forced and "memory: dram:height=2" not in planned
    forced_onnx = onnx.load(other_dumps / f"{STAGE:02d}-choose-memory-config.onnx")
    assert meta(conv_named(forced_onnx, FIRST_CONV))["memory"] == "dram:height=2"
    assert meta(conv_named(forced_onnx, FIRST_CONV))["math_fidelity"] == "LoFi"


def test_attributes_take_the_export_opsets_form() -> None:
    """What the importer or a pass writes in another version's form: Squeeze's axes as an input at
    opset 11 (an attribute there), Split-11's implied num_outputs (no such attribute before 18)."""
    g = ir("""graph @t(%x: f32[1,4,1,6]) {
  %axes: i64[1] = const dense<[2]>
  %s: f32[1,4,6] = onnx.Squeeze(%x, %axes) #squeeze
  %a: f32[1,2,6], %b: f32[1,2,6] = onnx.Split(%s) {axis = 1, num_outputs = 2} #split
  %y: f32[1,2,6] = onnx.Softmax(%a) {axis = 1, coerce_2d = 1} #softmax
  return %y, %b
}
""")
    model = to_onnx(g, opset=11)
    onnx.checker.check_model(model, full_check=True)
    squeeze, split, softmax = model.graph.node
    assert list(squeeze.input) == ["x"] and onnx.helper.get_attribute_value(squeeze.attribute[0]) == [2]
    assert [a.name for a in split.attribute] == ["axis"] and meta(split)["ir_attributes"] == "num_outputs=2"
    assert [a.name for a in softmax.attribute] == ["axis"]
    x = np.random.default_rng(1).random((1, 4, 1, 6), dtype=np.float32)
    y, b = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    e = np.exp(x[:, :2, 0] - x[:, :2, 0].max(axis=(1, 2), keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=(1, 2), keepdims=True), rtol=1e-6)  # Softmax-11: over axes 1..
    np.testing.assert_array_equal(b, x[:, 2:, 0])
    # at 18 the same IR keeps Squeeze's input, Split's num_outputs (a graph parsed from text: 18)
    model = to_onnx(g)
    onnx.checker.check_model(model, full_check=True)
    assert [len(n.input) for n in model.graph.node[:1]] == [2] and model.opset_import[0].version == 18
    assert {a.name for a in model.graph.node[1].attribute} == {"axis", "num_outputs"}


def test_a_view_that_cannot_be_built_warns_and_the_other_dumps_are_written(tmp_path: Path, capsys) -> None:
    g = ir("""graph @t(%x: f32[1,4,2,2]) {
  %y: f32[1,4,2,2] = spc.L2Norm(%x) {axis = 1, eps = 1e-12} #l2norm
  return %y
}
""")
    g.nodes[0].attrs["odd"] = ["a", 1]  # a list of two kinds: no ONNX attribute holds it
    DumpDir(tmp_path).before_all(g)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00-input.dot", "00-input.ir"]
    err = capsys.readouterr().err
    assert "00-input.onnx: not written" in err and "node l2norm (spc.L2Norm): attribute odd" in err
