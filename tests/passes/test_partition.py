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
    assert result.stats == {"host-pre": 1, "device": 1, "host-post": 3}
