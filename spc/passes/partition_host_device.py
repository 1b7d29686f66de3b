"""partition-host-device: place every node on the host (before or after) or on the device.

Where an op can run is decided by one table, the lowerings (lowering/registry.py:
``device_support``): a node runs on the device when it has a lowering that accepts it, else on
the host, with its reason. There is one device stage:

* host-pre: what reads only the graph inputs and either only rearranges them (a channel pick of
  the image), quantizes them to integers (a QDQ model's first spc.FakeQuant, with the cheap
  arithmetic before it, an RGB-to-grey sum: the device's bf16 input holds the integers exactly,
  the float image not) or cannot run on the device, so the device receives the tensor it computes on;
* host-post: every node the device cannot run and everything after it (data-dependent shapes such
  as NonZero's, integer index arithmetic), and then, repeatedly, a cheap device node (element-wise,
  a view) whose results only the host reads: computing it on the host costs nothing and reads
  back no more;
* device: the rest.

Before::

    %x1: f32[1,1,480,640]  = onnx.Slice(%pixel_values, ...)
    %c:  f32[1,64,480,640] = spc.Conv2d(%x1, %w, %b) {...}
    ...
    %nz: i64[2,d7]         = onnx.NonZero(%mask)

After::

    %x1: ... = onnx.Slice(...) #select @host-pre
    %c:  ... = spc.Conv2d(...) #conv2d @device
    %nz: ... = onnx.NonZero(%mask) #nonzero @host-post

The stats count the nodes per stage and the multiply-adds each side computes; a note names the
first host nodes (those the device's results flow into) that run there for a reason other than
a data-dependent shape.
"""

from __future__ import annotations

from spc.ir.graph import Graph, Node, Placement
from spc.ir.macs import macs
from spc.lowering.registry import device_support
from spc.passes.manager import Pass, PassContext, PassResult

PRE_OPS = {"onnx.Slice", "onnx.Gather", "onnx.Unsqueeze", "onnx.Squeeze", "onnx.Reshape", "onnx.Cast",
           "onnx.Transpose", "onnx.Identity"}
# ops that are no cheaper on the device than on the host and do not shrink what is read back
CHEAP = {"onnx.Identity", "onnx.Reshape", "onnx.Squeeze", "onnx.Unsqueeze", "onnx.Flatten", "onnx.Cast",
         "onnx.Greater", "onnx.GreaterOrEqual", "onnx.Less", "onnx.LessOrEqual", "onnx.Equal", "onnx.Not",
         "onnx.And", "onnx.Or", "onnx.Xor", "onnx.Where", "onnx.Add", "onnx.Sub", "onnx.Mul", "onnx.Div",
         "onnx.Neg", "onnx.Abs", "onnx.Clip", "onnx.Max", "onnx.Min", "onnx.Expand", "onnx.Tile", "onnx.Slice",
         "onnx.Gather", "onnx.Transpose", "onnx.Concat", "onnx.Pad", "onnx.Dropout", "onnx.Floor", "onnx.Ceil",
         "onnx.Round", "onnx.Sign"}
MAX_NOTED = 4
_REDUCTIONS = {"onnx.ReduceSum", "onnx.ReduceMean", "spc.FakeQuant"}  # (and quantizations between)


def _before_integers(g: Graph) -> set[int]:
    """The quantizations to integers of the graph's inputs and the cheap arithmetic between them."""
    out: set[int] = set()
    for n in g.nodes:
        if n.op.name != "spc.FakeQuant" or float(n.attrs["unit"]) != 1.0:
            continue
        chain, todo, ok = {id(n)}, [v for v in n.inputs if v is not None], True
        while todo and ok:
            v = todo.pop()
            p = v.producer
            if v.is_const or v in g.inputs:
                continue
            ok = p is not None and (p.op.name in CHEAP or p.op.name in _REDUCTIONS) and all(
                u in chain for o in p.outputs for u in map(id, o.consumers()))
            if ok and p is not None:
                chain.add(id(p))
                todo.extend(x for x in p.inputs if x is not None)
        if ok:
            out |= chain
    return out


def _feeds_only_host(n: Node, g: Graph, host: set[int]) -> bool:
    outs = list(n.outputs)
    return all(o not in g.outputs for o in outs) and all(id(u) in host for o in outs for u in o.consumers()) \
        and any(o.uses for o in outs)


class PartitionHostDevice(Pass):
    name = "partition-host-device"
    summary = "place nodes on the host (pre/post) or the device, by what the lowerings accept"
    requires = ("insert-device-nms",)

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        why = {id(n): device_support(n) for n in g.nodes}
        quantized_input = _before_integers(g)
        pre: set[int] = set()
        post: set[int] = set()
        for n in g.nodes:
            fed = [v for v in n.inputs if v is not None and not v.is_const]
            from_inputs = all(v in g.inputs or (v.producer is not None and id(v.producer) in pre) for v in fed)
            if fed and from_inputs and (n.op.name in PRE_OPS or why[id(n)] is not None or id(n) in quantized_input):
                pre.add(id(n))
            elif why[id(n)] is not None or any(v.producer is not None and id(v.producer) in post for v in fed):
                post.add(id(n))
        roots = [n for n in g.nodes if id(n) in post and why[id(n)] is not None
                 and not any(v is not None and v.producer is not None and id(v.producer) in post for v in n.inputs)]
        trimmed = 0
        changed = True
        while changed:  # the device's cheap tail moves to the host, last nodes first
            changed = False
            for n in reversed(g.nodes):
                if id(n) in pre or id(n) in post or n.op.name not in CHEAP:
                    continue
                if _feeds_only_host(n, g, post):
                    post.add(id(n))
                    trimmed += 1
                    changed = True
        for n in g.nodes:
            n.placement = (Placement.HOST_PRE if id(n) in pre else Placement.HOST_POST if id(n) in post
                           else Placement.DEVICE)
        noted = [n for n in roots if not n.op.data_dependent]
        host_reasons = [f"{n.name} ({n.op.name}): {why[id(n)]}" for n in roots]
        for n in noted[:MAX_NOTED]:
            ctx.note(f"partition-host-device: {n.name} ({n.op.name}) and what follows it run on the host: "
                     f"{why[id(n)]}")
        if len(noted) > MAX_NOTED:
            ctx.note(f"partition-host-device: {len(noted) - MAX_NOTED} more host node(s) like these "
                     "(spc compile --dump-dir shows the placement)")
        stats: dict[str, object] = {p.value: sum(1 for n in g.nodes if n.placement is p) for p in Placement
                                    if p is not Placement.UNASSIGNED}
        device_macs = sum(macs(n) for n in g.nodes if n.placement is Placement.DEVICE)
        host_macs = sum(macs(n) for n in g.nodes if n.placement is not Placement.DEVICE)
        stats.update(device_macs=device_macs, host_macs=host_macs)
        if trimmed:
            stats["tail_to_host"] = trimmed
        if host_reasons:
            stats["host_reasons"] = host_reasons
        return PassResult(True, stats)
