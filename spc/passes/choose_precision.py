"""choose-precision: give every device op its block name and precision.

Before::

    %relu: f32[1,64,480,640] = spc.Conv2d(%x, %w, %b) {activation = "relu", ...} #node_conv2d @device

After (``--precision balanced``)::

    %relu: f32[1,64,480,640] = spc.Conv2d(%x, %w, %b) {activation = "relu", block = "encoder.conv_blocks.0.conv_a",
        fp32_dest_acc_en = true, math_fidelity = "HiFi2", output_dtype = "bfloat16", weights_dtype = "bfloat16", ...}

Convolutions get the whole :class:`~spc.ttnn.precision.BlockPrecision`; other device ops store
their outputs in their block's ``output_dtype``. The plan comes from ``ctx.options["precision"]``
(a :class:`~spc.ttnn.precision.PrecisionPlan`: a preset plus per-block overrides).
"""

from __future__ import annotations

from spc.ir.graph import Graph, Node, Placement
from spc.passes.manager import Pass, PassContext, PassResult
from spc.ttnn.precision import PrecisionPlan


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
        plan: PrecisionPlan = ctx.options.get("precision") or PrecisionPlan()
        counts: dict[str, int] = {}
        for n in g.nodes:
            if n.placement is not Placement.DEVICE:
                continue
            block = block_name(n)
            p = plan.for_block(block)
            n.attrs["block"] = block
            if n.op.name == "spc.Conv2d":
                n.attrs.update(p.as_attrs())
                counts[p.short()] = counts.get(p.short(), 0) + 1
            else:
                n.attrs["output_dtype"] = p.output_dtype.value
        return PassResult(True, {"preset": plan.preset, **counts})
