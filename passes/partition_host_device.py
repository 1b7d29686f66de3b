"""partition-host-device: place every node on the host (before or after) or on the device.

* host-post: data-dependent ops (NonZero, TopK, ...) and everything that reads their results;
* device: the compute anchors (convolutions, pooling, the fused SuperPoint ops) and whatever
  they need, except
* host-pre: layout-only ops that read only the graph inputs (a channel pick of the image), so
  the device receives exactly the tensor it computes on.

Before::

    %x1: f32[1,1,480,640]  = onnx.Slice(%pixel_values, ...)
    %c:  f32[1,64,480,640] = spc.Conv2d(%x1, %w, %b) {...}
    ...
    %nz: i64[2,d7]         = onnx.NonZero(%mask)

After::

    %x1: ... = onnx.Slice(...) #select @host-pre
    %c:  ... = spc.Conv2d(...) #conv2d @device
    %nz: ... = onnx.NonZero(%mask) #nonzero @host-post
"""

from __future__ import annotations

from spc.errors import SpcError
from spc.ir.graph import Graph, Node, Placement
from spc.passes.manager import Pass, PassContext, PassResult

DEVICE_ANCHORS = {"spc.Conv2d", "spc.ScoreFold", "spc.Nms", "spc.L2Norm", "onnx.MaxPool"}
PRE_OPS = {"onnx.Slice", "onnx.Gather", "onnx.Unsqueeze", "onnx.Squeeze", "onnx.Reshape", "onnx.Cast",
           "onnx.Transpose", "onnx.Identity"}


class PartitionHostDevice(Pass):
    name = "partition-host-device"
    summary = "place nodes on the host (pre/post) or the device"
    requires = ("insert-device-nms",)

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        post: set[int] = set()
        for n in g.nodes:
            if n.op.data_dependent or any(v is not None and v.producer is not None and id(v.producer) in post
                                          for v in n.inputs):
                post.add(id(n))
        needed: dict[int, Node] = {}
        stack = [n for n in g.nodes if n.op.name in DEVICE_ANCHORS and id(n) not in post]
        while stack:
            n = stack.pop()
            if id(n) in needed:
                continue
            needed[id(n)] = n
            stack.extend(v.producer for v in n.inputs if v is not None and v.producer is not None)
        pre: set[int] = set()
        for n in g.nodes:
            if id(n) in post:
                n.placement = Placement.HOST_POST
            elif id(n) in needed:
                host_fed = all(v is None or v.is_const or v in g.inputs or
                               (v.producer is not None and id(v.producer) in pre) for v in n.inputs)
                if n.op.name in PRE_OPS and host_fed:
                    pre.add(id(n))
                    n.placement = Placement.HOST_PRE
                else:
                    n.placement = Placement.DEVICE
                    if not all(o.type.is_static for o in n.outputs):
                        raise SpcError(f"node {n.name} ({n.op.name}) must run on the device but its shape "
                                       f"is not static ({n.outputs[0].type})")
            else:
                n.placement = Placement.HOST_POST
        counts = {p.value: sum(1 for n in g.nodes if n.placement is p) for p in Placement
                  if p is not Placement.UNASSIGNED}
        return PassResult(True, counts)
