"""partition-host-device: input preparation on the host, compute on the device, data-dependent
post-processing (and everything after it) on the host."""

from __future__ import annotations

import numpy as np

from spc.passes.manager import PassContext
from spc.passes.partition_host_device import PartitionHostDevice
from tests.conftest import ir


def test_partition() -> None:
    g = ir("""graph @t(%img: f32[1,3,8,8]) {
  %w: f32[4,1,3,3] = const @"w"
  %s0: i64[1] = const dense<[0]>
  %s1: i64[1] = const dense<[1]>
  %thr: f32[] = const dense<0.5>
  %grey: f32[1,1,8,8] = onnx.Slice(%img, %s0, %s1, %s1) #grey
  %c: f32[1,4,8,8] = spc.Conv2d(%grey, %w) {activation = "relu", dilations = [1, 1], group = 1, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [1, 1]} #conv
  %m: i1[1,4,8,8] = onnx.Greater(%c, %thr) #thr
  %nz: i64[4,d1] = onnx.NonZero(%m) #nz
  %t: i64[d1,4] = onnx.Transpose(%nz) {perm = [1, 0]} #t
  return %t, %c
}
""", w=np.ones((4, 1, 3, 3), np.float32))
    result = PartitionHostDevice().run(g, PassContext())
    assert {n.name: n.placement.value for n in g.nodes} == {
        "grey": "host-pre", "conv": "device", "thr": "host-post", "nz": "host-post", "t": "host-post"}
    # the threshold only feeds the host: it moves there with the NonZero (nothing more is read back)
    assert result.stats == {"host-pre": 1, "device": 1, "host-post": 3, "device_macs": 4 * 64 * 9, "host_macs": 0,
                            "tail_to_host": 1, "host_reasons": ["nz (onnx.NonZero): its output shape depends on the data"]}


def test_every_op_with_a_lowering_runs_on_the_device() -> None:
    """BatchNormalization after ReLU (SuperPoint-Open), a transpose and a softmax on another axis:
    no fused op, each lowers on its own."""
    g = ir("""graph @t(%img: f32[1,1,8,8]) {
  %w: f32[4,1,3,3] = const @"w"
  %s: f32[4] = const @"s"
  %m: f32[4] = const @"m"
  %c: f32[1,4,8,8] = spc.Conv2d(%img, %w) {activation = "relu", dilations = [1, 1], group = 1, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [1, 1]} #conv
  %bn: f32[1,4,8,8] = onnx.BatchNormalization(%c, %s, %m, %m, %s) {epsilon = 0.001} #bn
  %t: f32[1,8,8,4] = onnx.Transpose(%bn) {perm = [0, 2, 3, 1]} #t
  %sm: f32[1,8,8,4] = onnx.Softmax(%t) {axis = 2} #sm
  return %sm
}
""", w=np.ones((4, 1, 3, 3), np.float32), s=np.ones(4, np.float32), m=np.zeros(4, np.float32))
    ctx = PassContext()
    PartitionHostDevice().run(g, ctx)
    assert {n.placement.value for n in g.nodes} == {"device"} and not ctx.notes


def test_an_op_the_device_cannot_run_goes_to_the_host_with_its_reason() -> None:
    g = ir("""graph @t(%img: f32[1,1,8,8]) {
  %w: f32[4,1,3,3] = const @"w"
  %c: f32[1,4,8,8] = spc.Conv2d(%img, %w) {activation = "relu", dilations = [1, 1], group = 1, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [1, 1]} #conv
  %h: f32[1,4,8,8] = onnx.Hardmax(%c) {axis = 1} #hardmax
  %r: f32[1,4,8,8] = onnx.Relu(%h) #after
  return %r
}
""", w=np.ones((4, 1, 3, 3), np.float32))
    ctx = PassContext()
    result = PartitionHostDevice().run(g, ctx)
    assert {n.name: n.placement.value for n in g.nodes} == {"conv": "device", "hardmax": "host-post",
                                                            "after": "host-post"}
    assert result.stats["host_macs"] == 0
    assert ctx.notes == ["partition-host-device: hardmax (onnx.Hardmax) and what follows it run on the host: "
                         "no ttnn lowering for onnx.Hardmax"]
