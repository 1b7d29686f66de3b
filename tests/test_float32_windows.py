"""Window ops on maps stored in float32 (lowering/shifted.py; --precision-config output_dtype =
"float32"): max and average pools and the bilinear upsample keep float32 through shifted views
where ttnn's calls take bf16 only; a conv whose result is float32 reads its float32 input (as TF32,
emulator/numerics.py). Every plan is compiled with the translation validation, which holds each of
these lowerings to its ONNX node's meaning on the model's own shapes; the mock p150's verdict is in
tests/test_ttnn_mock.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from spc.compiler import compile_onnx
from spc.plan.io import read_plan
from spc.runtime.runner import Runner
from spc.ttnn.precision import PrecisionPlan, load_precision_config

RNG = np.random.default_rng(3)
C, H, W = 32, 24, 40
TTNN_WINDOWS = {"ttnn.max_pool2d", "ttnn.avg_pool2d", "ttnn.upsample"}


def float32_blocks(tmp_path: Path, extra: str = "") -> PrecisionPlan:
    path = tmp_path / "f32.toml"
    path.write_text('[blocks."*"]\noutput_dtype = "float32"\n' + extra)
    return load_precision_config(path)


def _model(window: onnx.NodeProto, out_shape: list[int], inits: list[onnx.TensorProto] = ()) -> onnx.ModelProto:
    """image -> Conv (3 -> C, 3x3) -> ReLU -> the window op."""
    w = numpy_helper.from_array(RNG.normal(0, 0.3, (C, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(RNG.normal(0, 0.1, C).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), window]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, H, W])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], [w, b, *inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def _out(size: int, k: int, s: int, p: int) -> int:
    return (size + 2 * p - k) // s + 1


CASES = {
    "maxpool_5x5_s1_p2": (lambda: helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
                          [1, C, H, W], []),
    "maxpool_3x3_s2_p1": (lambda: helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                                   pads=[1, 1, 1, 1]),
                          [1, C, _out(H, 3, 2, 1), _out(W, 3, 2, 1)], []),
    "avgpool_2x2_s2": (lambda: helper.make_node("AveragePool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
                       [1, C, H // 2, W // 2], []),
    "avgpool_3x3_s1_p1_with_pad": (lambda: helper.make_node("AveragePool", ["r"], ["y"], kernel_shape=[3, 3],
                                                            pads=[1, 1, 1, 1], count_include_pad=1),
                                   [1, C, H, W], []),
    "bilinear_x2": (lambda: helper.make_node("Resize", ["r", "", "s2"], ["y"], mode="linear",
                                             coordinate_transformation_mode="half_pixel"),
                    [1, C, 2 * H, 2 * W], [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s2")]),
    "bilinear_x3_by_x2": (lambda: helper.make_node("Resize", ["r", "", "s3"], ["y"], mode="linear",
                                                   coordinate_transformation_mode="pytorch_half_pixel"),
                          [1, C, 3 * H, 2 * W], [numpy_helper.from_array(np.array([1, 1, 3, 2], np.float32), "s3")]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_float32_map_keeps_float32_through_window_ops(tmp_path: Path, case: str) -> None:
    make, out_shape, inits = CASES[case]
    src = tmp_path / f"{case}.onnx"
    onnx.save(_model(make(), out_shape, inits), src)
    x = RNG.random((1, 3, H, W)).astype(np.float32)
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = {}
    for label, precision in (("bf16", PrecisionPlan("accurate")), ("f32", float32_blocks(tmp_path))):
        plan = tmp_path / f"{case}_{label}.ttplan"
        result = compile_onnx(src, plan, precision=precision)  # the validation holds the lowering to ONNX's meaning
        program = read_plan(plan).program
        calls = {op.op for op in program.device_ops}
        assert bool(calls & TTNN_WINDOWS) == (label == "bf16"), (label, sorted(calls))
        assert not [n for n in result.notes if n.startswith("validation:")], result.notes
        with Runner(read_plan(plan)) as runner:
            got[label] = runner.run(x).outputs["y"]
        assert got[label].shape == want.shape
    err = {k: float(np.abs(v - want).mean() / np.abs(want).mean()) for k, v in got.items()}
    # both read the image in bf16 (its upload) into a conv; the bf16 plan also rounds the map at the
    # window op (measured: f32 0.55-0.7 of bf16's error)
    assert err["f32"] < 2e-3 and err["f32"] < 0.8 * err["bf16"], err


def test_a_float32_result_conv_reads_its_float32_input(tmp_path: Path) -> None:
    """No typecast to bf16 before a conv stored in float32 (ttnn tilizes its input in float32
    then); a conv stored in bf16 reads a float32 input in bf16, cast first, as ttnn's fast tilize
    does."""
    w2 = numpy_helper.from_array(RNG.normal(0, 0.2, (8, C, 3, 3)).astype(np.float32), "w2")
    src = tmp_path / "two.onnx"
    onnx.save(_model(helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1]), [1, 8, H, W], [w2]), src)
    second_bf16 = '[blocks."w2"]\noutput_dtype = "bfloat16"\n'
    for label, precision, casts, second in (("all_f32", float32_blocks(tmp_path), 0, "float32"),
                                            ("second_bf16", float32_blocks(tmp_path, second_bf16), 1, "bfloat16")):
        plan = tmp_path / f"two_{label}.ttplan"
        compile_onnx(src, plan, precision=precision)
        ops = read_plan(plan).program.device_ops
        convs = [i for i, op in enumerate(ops) if op.op == "ttnn.conv2d"]
        between = [op.op for op in ops[convs[0] + 1:convs[1]]]
        assert between.count("ttnn.typecast") == casts, (label, between)
        assert [ops[i].dtype.value for i in convs] == ["float32", second], label


def test_a_float32_upsample_of_a_one_pixel_map(tmp_path: Path) -> None:
    """An image-pooling branch (ASPP's): the map's mean over the image, spread back bilinearly; a
    one-pixel axis is its own neighbour on both sides."""
    scales = numpy_helper.from_array(np.array([1, 1, H, W], np.float32), "s")
    model = _model(helper.make_node("Resize", ["m", "", "s"], ["y"], mode="linear"), [1, C, H, W], [scales])
    model.graph.node.insert(2, helper.make_node("GlobalAveragePool", ["r"], ["m"]))
    src = tmp_path / "aspp.onnx"
    onnx.save(model, src)
    plan = tmp_path / "aspp.ttplan"
    compile_onnx(src, plan, precision=float32_blocks(tmp_path))
    assert "ttnn.upsample" not in {op.op for op in read_plan(plan).program.device_ops}


def test_superpoint_s_nms_on_a_float32_map_never_calls_ttnn_s_pool(tmp_path: Path, small_onnx: Path) -> None:
    """spc.Nms's window maxima (and the encoder's 2x2 pools) on float32 maps are shifted views:
    ttnn's max_pool2d takes bf16 only."""
    plan = tmp_path / "sp.ttplan"
    compile_onnx(small_onnx, plan, precision=float32_blocks(tmp_path))
    assert "ttnn.max_pool2d" not in {op.op for op in read_plan(plan).program.device_ops}
