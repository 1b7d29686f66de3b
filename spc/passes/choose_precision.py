"""choose-precision: give every device op its block name and precision.

Before::

    %relu: f32[1,64,480,640] = spc.Conv2d(%x, %w, %b) {activation = "relu", ...} #node_conv2d @device

After (``--precision balanced``)::

    %relu: f32[1,64,480,640] = spc.Conv2d(%x, %w, %b) {activation = "relu", ...} #node_conv2d @device
        <"encoder.conv_blocks.0.conv_a" w:bfloat16 HiFi2 fp32acc l1acc out:bfloat16>

The decisions are typed fields of the node (``node.block``, ``node.precision``: a
:class:`~spc.ttnn.precision.BlockPrecision`), not attributes: convolutions use all of it, other
device ops the format their output is stored in. The plan comes from the pipeline's options
(``precision``: a :class:`~spc.ttnn.precision.PrecisionPlan`, a preset plus per-block overrides).
"""

from __future__ import annotations

from spc.ir.graph import Graph, Node, Placement
from spc.passes.manager import Pass, PassContext, PassResult
from spc.ttnn.precision import BlockPrecision, PrecisionPlan


def block_name(n: Node) -> str:
    """A stable, readable name: a conv by its weight (HF names survive export), others by node."""
    if n.op.name == "spc.Conv2d" and n.inputs[1] is not None:
        w = n.inputs[1]
        name = w.name
        for prefix in ("inner.", "model."):
            name = name.removeprefix(prefix)
        return name.removesuffix("_bn").removesuffix(".weight")
    return n.name


class ChoosePrecision(Pass):
    name = "choose-precision"
    summary = "per-block weight/activation formats, math fidelity and accumulation"
    requires = ("partition-host-device",)

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        plan: PrecisionPlan = ctx.options.precision
        counts: dict[str, int] = {}
        changed = False
        for n in g.nodes:
            if n.placement is not Placement.DEVICE:
                continue
            block = block_name(n)
            p = plan.for_block(block)
            if n.op.name != "spc.Conv2d":
                p = BlockPrecision(output_dtype=p.output_dtype)  # only the stored format applies
            else:
                counts[p.spell()] = counts.get(p.spell(), 0) + 1
            changed |= (n.block, n.precision) != (block, p)
            n.block, n.precision = block, p
        return PassResult(changed, {"preset": plan.preset, **counts})
