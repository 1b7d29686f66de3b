"""The ONNX importer on real exports and on another SuperPoint-family spelling; weights loading."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from spc.compiler import compile_onnx
from spc.errors import SpcError
from spc.frontend.onnx_import import import_onnx
from spc.frontend.weights import convert_superpoint_open, load_state_file, to_hf_layout
from spc.plan.io import read_plan
from spc.runtime.runner import Runner

RNG = np.random.default_rng(11)


def test_imports_the_real_export(small_onnx: Path) -> None:
    g = import_onnx(small_onnx)
    assert [str(v.type) for v in g.inputs] == ["f32[1,3,120,160]"]
    assert [v.name for v in g.outputs] == ["keypoints", "scores", "descriptors", "mask"]
    counts = g.op_counts()
    assert counts["onnx.Conv"] == 12 and counts["onnx.MaxPool"] == 8 and counts["onnx.NonZero"] == 2
    # the keypoint count is data dependent: a symbol, not a guess
    assert isinstance(g.outputs[0].type.shape[1], str)


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def test_unsupported_nodes_are_listed_in_one_error(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])
    model = _model([helper.make_node("Det", ["x"], ["a"], name="det_1"),
                    helper.make_node("Relu", ["a"], ["b"], name="ok"),
                    helper.make_node("Det", ["b"], ["y"], name="det_2")], [x], [y])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    with pytest.raises(SpcError) as err:
        import_onnx(path)
    msg = str(err.value)
    assert "2 unsupported node(s)" in msg and "det_1 (ai.onnx::Det, opset 17: no such op in spc)" in msg
    assert "det_2 (ai.onnx::Det, opset 17: no such op in spc)" in msg and "\n" not in msg


@pytest.mark.parametrize("content", [b"", b"not a protobuf at all", None], ids=["empty", "garbage", "truncated"])
def test_corrupt_files(tmp_path: Path, small_onnx: Path, content: bytes | None) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(small_onnx.read_bytes()[:3000] if content is None else content)
    with pytest.raises(SpcError, match=r"bad\.onnx"):
        import_onnx(path)


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def superpoint_family_model(size: int = 32) -> onnx.ModelProto:
    """A miniature SuperPoint in another exporter's spelling: 1-channel input, Conv+BN+Relu
    blocks, Constant nodes, Identity, Softmax+Slice+DepthToSpace, NMS spelled with Mul on a
    4-D map (radius 2, one round), and a Pow/ReduceSum/Sqrt/Max/Div descriptor norm."""
    nodes, inits = [], []
    c_prev, h = 1, "x"
    for i, c in enumerate((8, 8, 16)):
        w = RNG.normal(0, 0.5, (c, c_prev, 3, 3)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}")]
        bn = [RNG.uniform(0.5, 1.5, c), RNG.normal(0, 0.1, c), RNG.normal(0, 0.1, c), RNG.uniform(0.5, 1.5, c)]
        inits += [numpy_helper.from_array(a.astype(np.float32), f"bn{i}_{k}") for k, a in enumerate(bn)]
        nodes += [helper.make_node("Conv", [h, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1], name=f"conv{i}"),
                  helper.make_node("BatchNormalization", [f"c{i}"] + [f"bn{i}_{k}" for k in range(4)], [f"n{i}"],
                                   epsilon=1e-3, name=f"bn{i}"),
                  helper.make_node("Relu", [f"n{i}"], [f"r{i}"]),
                  helper.make_node("MaxPool", [f"r{i}"], [f"p{i}"], kernel_shape=[2, 2], strides=[2, 2])]
        h, c_prev = f"p{i}", c
    inits += [numpy_helper.from_array(RNG.normal(0, 1, (65, c_prev, 1, 1)).astype(np.float32), "wd"),
              numpy_helper.from_array(RNG.normal(0, 0.3, (24, c_prev, 1, 1)).astype(np.float32), "wdesc")]
    nodes += [helper.make_node("Identity", [h], ["feat"]),
              helper.make_node("Conv", ["feat", "wd"], ["logits"]),
              helper.make_node("Softmax", ["logits"], ["prob"], axis=1),
              _const("s0", np.array([0])), _const("s64", np.array([64])), _const("ax1", np.array([1])),
              helper.make_node("Slice", ["prob", "s0", "s64", "ax1"], ["nodust"]),
              helper.make_node("DepthToSpace", ["nodust"], ["heat"], blocksize=8, mode="DCR"),
              helper.make_node("MaxPool", ["heat"], ["m0"], kernel_shape=[5, 5], pads=[2] * 4),
              helper.make_node("Equal", ["heat", "m0"], ["mask0"]),
              helper.make_node("Cast", ["mask0"], ["mask0f"], to=TensorProto.FLOAT),
              helper.make_node("MaxPool", ["mask0f"], ["near"], kernel_shape=[5, 5], pads=[2] * 4),
              _const("zero", np.array(0, np.float32)),
              helper.make_node("Greater", ["near", "zero"], ["supp"]),
              helper.make_node("Not", ["supp"], ["free"]),
              helper.make_node("Cast", ["free"], ["freef"], to=TensorProto.FLOAT),
              helper.make_node("Mul", ["heat", "freef"], ["rest"]),
              helper.make_node("MaxPool", ["rest"], ["m1"], kernel_shape=[5, 5], pads=[2] * 4),
              helper.make_node("Equal", ["rest", "m1"], ["new"]),
              helper.make_node("And", ["new", "free"], ["newfree"]),
              helper.make_node("Or", ["mask0", "newfree"], ["mask1"]),
              helper.make_node("Cast", ["mask1"], ["mask1f"], to=TensorProto.FLOAT),
              helper.make_node("Mul", ["heat", "mask1f"], ["scores"]),
              helper.make_node("Conv", ["feat", "wdesc"], ["draw"]),
              _const("two", np.array(2.0, np.float32)), _const("eps", np.array(1e-12, np.float32)),
              helper.make_node("Pow", ["draw", "two"], ["dsq"]),
              helper.make_node("ReduceSum", ["dsq", "ax1"], ["dss"], keepdims=1),
              helper.make_node("Sqrt", ["dss"], ["dn"]),
              helper.make_node("Max", ["dn", "eps"], ["dnc"]),
              helper.make_node("Div", ["draw", "dnc"], ["descriptors"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, size, size])
    outs = [helper.make_tensor_value_info("scores", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("descriptors", TensorProto.FLOAT, None)]
    return _model(nodes, [x], outs, inits)


def test_superpoint_family_spelling_compiles_and_matches_onnxruntime(tmp_path: Path) -> None:
    import onnxruntime as ort

    src = tmp_path / "family.onnx"
    onnx.save(superpoint_family_model(), src)
    result = compile_onnx(src, tmp_path / "family.ttplan")
    counts = result.graph.op_counts()
    assert counts == {"onnx.MaxPool": 3, "spc.Conv2d": 5, "spc.L2Norm": 1, "spc.Nms": 1, "spc.ScoreFold": 1}
    assert all(n.placement.value == "device" for n in result.graph.nodes)
    x = RNG.random((1, 1, 32, 32)).astype(np.float32)
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with Runner(read_plan(tmp_path / "family.ttplan")) as runner:
        ours = runner.run(x).outputs
    assert ours["scores"].shape == ref[0].shape and ours["descriptors"].shape == ref[1].shape
    assert np.corrcoef(ours["descriptors"].ravel(), ref[1].ravel())[0, 1] > 0.999
    assert np.corrcoef(ours["scores"].ravel(), ref[0].ravel())[0, 1] > 0.99


def test_weights_layouts() -> None:
    ml = {"conv1a.weight": np.zeros((64, 1, 3, 3)), "convDb.bias": np.zeros(256)}
    assert set(to_hf_layout(ml, "x")) == {"encoder.conv_blocks.0.conv_a.weight", "descriptor_decoder.conv_descriptor_b.bias"}
    hf = {"superpoint.encoder.conv_blocks.0.conv_a.weight": np.zeros(1)}
    assert set(to_hf_layout(hf, "x")) == {"encoder.conv_blocks.0.conv_a.weight"}
    with pytest.raises(SpcError, match="not a SuperPoint state dict"):
        to_hf_layout({"fc.weight": np.zeros(1)}, "x")


def test_superpoint_open_conversion_folds_bn_into_next_conv() -> None:
    """conv -> ReLU -> BN -> conv equals conv -> ReLU -> conv' away from the border."""
    from spc.ir.ops.onnx_conv import conv2d_nchw

    state = {}
    shapes = [(64, 2), (64, 64), (64, 64), (64, 64), (128, 64), (128, 128), (128, 128), (128, 128)]
    for i, (o, c) in enumerate(shapes):
        p = f"backbone.{i // 2}.{i % 2}"
        state[f"{p}.conv.weight"] = RNG.normal(0, 0.1, (o, c, 3, 3)).astype(np.float32)
        state[f"{p}.conv.bias"] = RNG.normal(0, 0.1, o).astype(np.float32)
        for k, v in (("weight", RNG.uniform(0.5, 1.5, o)), ("bias", RNG.normal(0, 0.1, o)),
                     ("running_mean", RNG.normal(0, 0.1, o)), ("running_var", RNG.uniform(0.5, 1.5, o))):
            state[f"{p}.bn.{k}"] = v.astype(np.float32)
    for head, out in (("detector", 65), ("descriptor", 256)):
        for j, (o, c, k) in enumerate(((256, 128, 3), (out, 256, 1))):
            state[f"{head}.{j}.conv.weight"] = RNG.normal(0, 0.1, (o, c, k, k)).astype(np.float32)
            state[f"{head}.{j}.conv.bias"] = np.zeros(o, np.float32)
            for key, v in (("weight", np.ones(o)), ("bias", np.zeros(o)), ("running_mean", np.zeros(o)),
                           ("running_var", np.ones(o))):
                state[f"{head}.{j}.bn.{key}"] = v.astype(np.float32)
    hf = convert_superpoint_open(state)
    grey = RNG.random((1, 1, 12, 12)).astype(np.float32)
    # the original: 2-channel input (grey twice), conv -> relu -> bn -> conv
    x2 = np.concatenate([grey, grey], axis=1)
    a = np.maximum(conv2d_nchw(x2, state["backbone.0.0.conv.weight"], state["backbone.0.0.conv.bias"],
                               [1, 1], [1] * 4, [1, 1], 1), 0)
    g, b, m, v = (state[f"backbone.0.0.bn.{k}"] for k in ("weight", "bias", "running_mean", "running_var"))
    scale = g / np.sqrt(v + 1e-3)
    bn = a * scale[None, :, None, None] + (b - m * scale)[None, :, None, None]
    want = conv2d_nchw(bn, state["backbone.0.1.conv.weight"], state["backbone.0.1.conv.bias"], [1, 1], [1] * 4,
                       [1, 1], 1)
    h = np.maximum(conv2d_nchw(grey, hf["encoder.conv_blocks.0.conv_a.weight"],
                               hf["encoder.conv_blocks.0.conv_a.bias"], [1, 1], [1] * 4, [1, 1], 1), 0)
    got = conv2d_nchw(h, hf["encoder.conv_blocks.0.conv_b.weight"], hf["encoder.conv_blocks.0.conv_b.bias"],
                      [1, 1], [1] * 4, [1, 1], 1)
    np.testing.assert_allclose(got[..., 1:-1, 1:-1], want[..., 1:-1, 1:-1], rtol=1e-4, atol=1e-4)


def test_pickled_code_is_refused(tmp_path: Path) -> None:
    import pickle

    path = tmp_path / "evil.pth"
    path.write_bytes(pickle.dumps(Path("x"), protocol=2))  # a non-tensor object: weights_only refuses it
    with pytest.raises(SpcError, match="not a weights-only torch state dict"):
        load_state_file(path)
