"""Each device op's lowering, run by the emu backend, against the op's reference semantics."""

from __future__ import annotations

import numpy as np
import pytest

from spc.emulator.device import EMULATIONS
from spc.ir.interpreter import evaluate_graph
from spc.lowering.lower import LOWERINGS, find_probes, lower
from spc.passes.manager import PassContext
from spc.passes.partition_host_device import PartitionHostDevice
from spc.plan.io import Plan
from spc.runtime.runner import Runner
from tests.conftest import ir

RNG = np.random.default_rng(7)


def bf16_exact(a: np.ndarray) -> np.ndarray:
    """Values the device stores exactly, so that only the op's own rounding is compared."""
    import torch

    return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16).to(torch.float32).numpy()


def run_lowered(text: str, x: np.ndarray, **weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    g = ir(text, **weights)
    want = evaluate_graph(g, {"x": x})[0]
    PartitionHostDevice().run(g, PassContext())
    program, tensors = lower(g, find_probes(g))
    with Runner(Plan({}, program, tensors, "")) as runner:
        got = runner.run(x).outputs[g.outputs[0].name]
    return got, want, [op.op for op in program.device_ops]


CONV = """graph @t(%x: f32[1,3,9,11]) {{
  %w: f32[5,3,3,3] = const @"w"
  %b: f32[5] = const @"b"
  %y: f32[1,5,{oh},{ow}] = spc.Conv2d(%x, %w, %b) {{activation = "{act}", dilations = [1, 1], group = 1, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [{s}, {s}]}} #conv
  return %y
}}
"""


@pytest.mark.parametrize(("act", "s", "oh", "ow"), [("relu", 1, 9, 11), ("none", 2, 5, 6)])
def test_conv2d(act: str, s: int, oh: int, ow: int) -> None:
    x = bf16_exact(RNG.normal(size=(1, 3, 9, 11)))
    w, b = bf16_exact(RNG.normal(size=(5, 3, 3, 3))), bf16_exact(RNG.normal(size=5))
    got, want, calls = run_lowered(CONV.format(act=act, s=s, oh=oh, ow=ow), x, w=w, b=b)
    assert calls == ["ttnn.conv2d"]
    # exact products, fp32 accumulation within a kernel row, bf16 packs between rows and around
    # the bias add (emulator/numerics.py): a few bf16 ulps of the partial sums
    np.testing.assert_allclose(got, want, rtol=0, atol=2**-6 * float(np.abs(want).max()))


def test_max_pool() -> None:
    x = bf16_exact(RNG.normal(size=(1, 4, 8, 10)))
    got, want, calls = run_lowered("""graph @t(%x: f32[1,4,8,10]) {
  %y: f32[1,4,4,5] = onnx.MaxPool(%x) {kernel_shape = [2, 2], pads = [0, 0, 0, 0], strides = [2, 2]} #pool
  return %y
}
""", x)
    assert calls == ["ttnn.max_pool2d"] and np.array_equal(got, want)


def test_score_fold() -> None:
    x = bf16_exact(RNG.normal(0, 3, size=(1, 65, 2, 3)))
    got, want, calls = run_lowered("""graph @t(%x: f32[1,65,2,3]) {
  %y: f32[1,16,24] = spc.ScoreFold(%x) {cell = 8, out_shape = [1, 16, 24]} #fold
  return %y
}
""", x)
    assert calls == ["ttnn.softmax", "ttnn.slice", "ttnn.to_layout", "ttnn.reshape", "ttnn.permute", "ttnn.reshape"]
    np.testing.assert_allclose(got, want, rtol=2**-8, atol=1e-7)


def test_nms_is_exact_on_device_values() -> None:
    x = bf16_exact(RNG.integers(0, 5, size=(1, 17, 23)) / 4.0 * (RNG.random((1, 17, 23)) < 0.5))
    got, want, calls = run_lowered("""graph @t(%x: f32[1,17,23]) {
  %y: f32[1,17,23] = spc.Nms(%x) {iterations = 2, radius = 3} #nms
  return %y
}
""", x)
    assert calls.count("ttnn.max_pool2d") == 5
    assert np.array_equal(got, want)


def test_l2norm() -> None:
    x = bf16_exact(RNG.normal(size=(1, 32, 3, 4)))
    got, want, calls = run_lowered("""graph @t(%x: f32[1,32,3,4]) {
  %y: f32[1,32,3,4] = spc.L2Norm(%x) {axis = 1, eps = 1e-12} #norm
  return %y
}
""", x)
    assert calls == ["ttnn.multiply", "ttnn.sum", "ttnn.clamp", "ttnn.rsqrt", "ttnn.multiply"]
    np.testing.assert_allclose(got, want, rtol=2**-6, atol=1e-6)


def test_device_view_keeps_element_order() -> None:
    x = bf16_exact(RNG.random((1, 65, 2, 3)))
    got, want, calls = run_lowered("""graph @t(%x: f32[1,65,2,3]) {
  %shape: i64[4] = const dense<[1, 1, 16, 24]>
  %s: f32[1,16,24] = spc.ScoreFold(%x) {cell = 8, out_shape = [1, 16, 24]} #fold
  %v: f32[1,1,16,24] = onnx.Reshape(%s, %shape) #view
  %n: f32[1,1,16,24] = spc.Nms(%v) {iterations = 1, radius = 2} #nms
  return %n
}
""", x)
    assert calls[6] == "ttnn.reshape" and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2**-8, atol=1e-7)


def test_device_reshape_that_reorders_goes_through_the_plain_form() -> None:
    """(1,4,1,1) -> (1,2,2,1) moves channels into space: not a view of [N*H*W, C], so the map is
    held as its own shape for the reshape and put back in the conv layout for the pool."""
    x = bf16_exact(RNG.random((1, 4, 2, 3)))
    got, want, calls = run_lowered("""graph @t(%x: f32[1,4,2,3]) {
  %shape: i64[4] = const dense<[1, 2, 2, 1]>
  %p: f32[1,4,1,1] = onnx.MaxPool(%x) {kernel_shape = [2, 3], pads = [0, 0, 0, 0], strides = [2, 3]} #pool
  %r: f32[1,2,2,1] = onnx.Reshape(%p, %shape) #view
  %q: f32[1,2,1,1] = onnx.MaxPool(%r) {kernel_shape = [2, 1], pads = [0, 0, 0, 0], strides = [2, 1]} #pool2
  return %q
}
""", x)
    assert "ttnn.permute" in calls and calls.count("ttnn.max_pool2d") == 2
    assert np.array_equal(got, want)


def test_every_lowered_call_is_emulated() -> None:
    """The emu backend knows every ttnn call the lowering can emit (checked on the real plan in e2e)."""
    emitted = {"ttnn.conv2d", "ttnn.max_pool2d", "ttnn.softmax", "ttnn.slice", "ttnn.to_layout", "ttnn.reshape",
               "ttnn.permute", "ttnn.eq", "ttnn.gtz", "ttnn.logical_not", "ttnn.logical_and", "ttnn.logical_or",
               "ttnn.multiply", "ttnn.sum", "ttnn.clamp", "ttnn.rsqrt"}
    assert emitted <= set(EMULATIONS)
    assert {"spc.Conv2d", "onnx.MaxPool", "spc.ScoreFold", "spc.Nms", "spc.L2Norm"} <= set(LOWERINGS)


@pytest.mark.parametrize(("alpha", "calls"), [(0.16666667, ["ttnn.to_layout", "ttnn.hardsigmoid"]),
                                              (0.2, ["ttnn.to_layout", "ttnn.multiply", "ttnn.add", "ttnn.clamp"])])
def test_hard_sigmoid_is_one_call_as_torch_exports_it(alpha: float, calls: list[str]) -> None:
    """nn.Hardsigmoid (alpha 1/6, beta 0.5) is ttnn.hardsigmoid; ONNX's default alpha is spelled out."""
    x = bf16_exact(RNG.normal(0, 4, size=(1, 4, 8, 8)))
    got, want, emitted = run_lowered(f"""graph @t(%x: f32[1,4,8,8]) {{
  %y: f32[1,4,8,8] = onnx.HardSigmoid(%x) {{alpha = {alpha}, beta = 0.5}} #hs
  return %y
}}
""", x)
    assert emitted == calls, emitted
    np.testing.assert_allclose(got, want, rtol=2**-7, atol=2**-8)


def test_every_device_output_comes_back_in_one_read() -> None:
    """Three device outputs (a map, a mask, a reduction: other shapes, forms and types) are packed
    into one tensor on the device and cut back on the host (lowering/read_once.py), value for value."""
    x = bf16_exact(RNG.normal(size=(1, 4, 8, 10)))
    text = """graph @t(%x: f32[1,4,8,10]) {
  %zero: f32[] = const @"zero"
  %axis: i64[1] = const @"axis"
  %p: f32[1,4,4,5] = onnx.MaxPool(%x) {kernel_shape = [2, 2], pads = [0, 0, 0, 0], strides = [2, 2]} #pool
  %m: i1[1,4,4,5] = onnx.Greater(%p, %zero) #gt
  %s: f32[1,1,4,5] = onnx.ReduceSum(%p, %axis) {keepdims = 1} #sum
  return %p, %m, %s
}
"""
    g = ir(text, zero=np.zeros((), np.float32), axis=np.array([1], np.int64))
    want = evaluate_graph(g, {"x": x})
    PartitionHostDevice().run(g, PassContext())
    program, tensors = lower(g, find_probes(g))
    assert [t.name for t in program.device_outputs] == ["readback"]
    assert [h.op for h in program.host_post] == ["spc.Unpack"] and program.host_post[0].outputs == ["p", "m", "s"]
    with Runner(Plan({}, program, tensors, "")) as runner:
        got = runner.run(x).outputs
    assert got["m"].dtype == np.bool_ and np.array_equal(got["m"], want[1])
    assert np.array_equal(got["p"], want[0])
    np.testing.assert_allclose(got["s"], want[2], rtol=2**-7)


def test_the_packed_read_back_takes_no_name_of_the_model() -> None:
    """A model value named as the packed tensor would be: the packed tensor takes another name."""
    x = bf16_exact(RNG.normal(size=(1, 4, 8, 10)))
    g = ir("""graph @t(%x: f32[1,4,8,10]) {
  %zero: f32[] = const @"zero"
  %readback: f32[1,4,4,5] = onnx.MaxPool(%x) {kernel_shape = [2, 2], pads = [0, 0, 0, 0], strides = [2, 2]} #pool
  %m: i1[1,4,4,5] = onnx.Greater(%readback, %zero) #gt
  return %readback, %m
}
""", zero=np.zeros((), np.float32))
    want = evaluate_graph(g, {"x": x})
    PartitionHostDevice().run(g, PassContext())
    program, tensors = lower(g, find_probes(g))
    assert [t.name for t in program.device_outputs] == ["readback_"]
    with Runner(Plan({}, program, tensors, "")) as runner:
        got = runner.run(x).outputs
    assert np.array_equal(got["readback"], want[0]) and np.array_equal(got["m"], want[1])


def test_the_packed_read_back_takes_no_name_a_lowering_made() -> None:
    """A conv's result that a pool reads (converted to row major under ``c/row_major``) and that is
    an output: the packing's own row-major copy of it takes another name (the same name made twice
    crashed the validation of kornia's DISK)."""
    x = bf16_exact(RNG.normal(size=(1, 4, 8, 10)))
    g = ir("""graph @t(%x: f32[1,4,8,10]) {
  %w: f32[4,4,3,3] = const @"w"
  %c: f32[1,4,8,10] = spc.Conv2d(%x, %w) {activation = "none", dilations = [1, 1], group = 1, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [1, 1]} #conv
  %p: f32[1,4,4,5] = onnx.AveragePool(%c) {kernel_shape = [2, 2], pads = [0, 0, 0, 0], strides = [2, 2]} #pool
  return %c, %p
}
""", w=bf16_exact(RNG.normal(size=(4, 4, 3, 3))))
    PartitionHostDevice().run(g, PassContext())
    program, tensors = lower(g, find_probes(g))
    made = [r for op in program.device_ops for r in op.results]
    assert "c/row_major" in made and len(made) == len(set(made))
    assert [t.name for t in program.device_outputs] == ["readback"]
    want = evaluate_graph(g, {"x": x})
    with Runner(Plan({}, program, tensors, "")) as runner:
        got = runner.run(x).outputs
    np.testing.assert_allclose(got["p"], want[1], rtol=2**-6, atol=2**-6 * float(np.abs(want[1]).max()))


@pytest.mark.parametrize("keep", [0, 1])
def test_reduce_log_sum_exp_is_the_stable_chain(keep: int) -> None:
    """SuperGlue's Sinkhorn iterations: logsumexp as max + log(sum(exp(x - max))), on large
    logits too (exp alone overflows there)."""
    out = "f32[2,5]" if not keep else "f32[2,5,1]"
    x = bf16_exact(RNG.normal(size=(2, 5, 9)) * 40)
    got, want, calls = run_lowered(f"""graph @t(%x: f32[2,5,9]) {{
  %axes: i64[1] = const dense<[2]>
  %y: {out} = onnx.ReduceLogSumExp(%x, %axes) {{keepdims = {keep}}} #lse
  return %y
}}
""", x)
    assert {"ttnn.max", "ttnn.exp", "ttnn.sum", "ttnn.log"} <= set(calls)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=0.5)


RESIZE = """graph @t(%x: f32[1,32,5,7]) {{
  %scales: f32[4] = const dense<[1.0, 1.0, {sh}, {sw}]>
  %y: f32[1,32,{oh},{ow}] = onnx.Resize(%x, _, %scales) {{mode = "{mode}", coordinate_transformation_mode = "{coords}", nearest_mode = "{nearest}"}} #resize
  return %y
}}
"""


@pytest.mark.parametrize(("mode", "coords", "nearest", "sh", "sw"), [
    ("nearest", "asymmetric", "floor", 2, 2), ("nearest", "half_pixel", "round_prefer_floor", 3, 2),
    ("linear", "half_pixel", "round_prefer_floor", 2, 2), ("linear", "pytorch_half_pixel", "floor", 2, 3)])
def test_resize_is_ttnn_upsample(mode: str, coords: str, nearest: str, sh: int, sw: int) -> None:
    """DISK's bilinear x2 (torch's align_corners=False) and torch's nearest: ttnn.upsample, equal
    to ONNX's Resize up to bf16."""
    x = bf16_exact(RNG.normal(size=(1, 32, 5, 7)))
    got, want, calls = run_lowered(RESIZE.format(mode=mode, coords=coords, nearest=nearest, sh=float(sh),
                                                 sw=float(sw), oh=5 * sh, ow=7 * sw), x)
    assert "ttnn.upsample" in calls
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=3e-2)


@pytest.mark.parametrize(("mode", "coords", "sh", "why"), [
    ("linear", "align_corners", 2.0, "not ttnn's (half-pixel) bilinear"),
    ("nearest", "asymmetric", 1.5, "whole numbers"), ("cubic", "half_pixel", 2.0, "no ttnn.upsample")])
def test_resize_that_is_not_ttnn_upsample_stays_on_the_host(mode: str, coords: str, sh: float, why: str) -> None:
    from spc.lowering.registry import device_support

    oh = int(5 * sh)
    g = ir(RESIZE.format(mode=mode, coords=coords, nearest="floor", sh=sh, sw=2.0, oh=oh, ow=14))
    reason = device_support(next(n for n in g.nodes if n.op.name == "onnx.Resize"))
    assert reason is not None and why in reason, reason


def test_a_float32_block_is_read_in_float32_or_cast_where_ttnn_would(tmp_path) -> None:
    """Every block stored in float32: a convolution stored in float32 reads it as it is; the average
    pool, the bilinear upsample and the max pool, which ttnn takes in bf16 only, are float32 shifted
    views (lowering/shifted.py); a convolution stored in bf16 reads it cast to bf16 (ttnn's fast
    tilize)."""
    import onnx
    from click.testing import CliRunner
    from onnx import TensorProto, helper, numpy_helper

    from spc.cli import main
    from spc.plan.io import read_plan
    from spc.ttnn.formats import DataFormat

    w1 = numpy_helper.from_array(RNG.normal(size=(32, 4, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(RNG.normal(size=(32, 32, 3, 3)).astype(np.float32), "w2")
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("AveragePool", ["r1"], ["a"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["a", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c2", "", "scales"], ["u"], mode="linear"),
             helper.make_node("MaxPool", ["u"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    f = TensorProto.FLOAT
    g = helper.make_graph(nodes, "casts", [helper.make_tensor_value_info("x", f, [1, 4, 16, 16])],
                          [helper.make_tensor_value_info("y", f, [1, 32, 16, 16])], [w1, w2, scales])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9), tmp_path / "m.onnx")
    for extra, conv_reads in (("", DataFormat.FLOAT32), ('[blocks."w2"]\noutput_dtype = "bfloat16"\n',
                                                     DataFormat.BFLOAT16)):
        (tmp_path / "p.toml").write_text('[blocks."*"]\noutput_dtype = "float32"\n' + extra)
        result = CliRunner().invoke(main, ["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.ttplan"),
                                           "--precision-config", str(tmp_path / "p.toml"), "--overwrite"])
        assert result.exit_code == 0, result.output
        ops = read_plan(tmp_path / "m.ttplan").program.device_ops
        made = {op.output: op for op in ops}
        conv = next(o for o in ops if o.op == "ttnn.conv2d" and o.args["in_channels"] == 32)
        assert made[conv.inputs[0]].dtype is conv_reads
        calls = {o.op for o in ops}
        assert "ttnn.avg_pool2d" not in calls, sorted(calls)  # it reads the first conv's float32
        # the upsample reads w2's result: float32 in the first plan, bf16 (ttnn's own call) in the second
        assert ("ttnn.upsample" in calls) == (conv_reads is DataFormat.BFLOAT16), sorted(calls)
        if conv_reads is DataFormat.FLOAT32:
            assert "ttnn.max_pool2d" not in calls, sorted(calls)


def test_log_softmax_is_finite_where_the_softmax_underflows() -> None:
    """LightGlue's assignment: logits 300 apart. log(softmax) gave -inf there (the translation
    validation refused the plan); x - logsumexp(x) gives the source's -300."""
    x = bf16_exact(np.concatenate([RNG.normal(size=(2, 3, 7)), np.full((2, 3, 1), 300.0)], axis=2))
    got, want, calls = run_lowered("""graph @t(%x: f32[2,3,8]) {
  %y: f32[2,3,8] = onnx.LogSoftmax(%x) {axis = -1} #lsm
  return %y
}
""", x)
    assert "ttnn.softmax" not in calls and np.isfinite(got).all() and want.min() < -290
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2.0)
