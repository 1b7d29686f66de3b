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
A value a quantization reads (spc.FakeQuant: a QDQ model's convolutions, batch norms; not a max
pool's, one of its inputs) is stored in float32, and so is a scaled convolution's (a quantized
model's integer convolution): bf16 holds a value to 1/256 of itself, coarser than a step of
the integers from 128 steps up.
A convolution summing fewer than 32 products per output (the image's first) starts from float32
weights under every preset (:meth:`~spc.ttnn.precision.PrecisionPlan.for_block`).
A quantization's own result, k * s, is stored in float32 too, unless only max pools and other
quantizations read it (they recover k from its bf16 exactly).
"""

from __future__ import annotations

from msgspec.structs import replace

from spc.ir.graph import Graph, Node, Placement
from spc.passes.manager import Pass, PassContext, PassResult
from spc.ttnn.formats import DataFormat
from spc.ttnn.precision import SHORT_REDUCTION, BlockPrecision, PrecisionPlan


def block_name(n: Node) -> str:
    """A stable, readable name: a conv by its weight (HF names survive export), others by node."""
    if n.op.name == "spc.Conv2d" and n.inputs[1] is not None:
        w = n.inputs[1]
        name = w.name
        for prefix in ("inner.", "model."):
            name = name.removeprefix(prefix)
        return name.removesuffix("_int").removesuffix("_quantized").removesuffix("_bn").removesuffix(".weight")
    return n.name


def scaled(n: Node) -> bool:
    """A convolution with its scale per output channel (fuse-conv-bias-relu's fourth operand)."""
    return n.op.name == "spc.Conv2d" and len(n.inputs) > 3 and n.inputs[3] is not None


def _reduction(n: Node) -> int:
    """Products summed per output value of a convolution (input channels per group x kernel taps);
    a large number for anything else."""
    w = n.inputs[1] if n.op.name == "spc.Conv2d" and len(n.inputs) > 1 else None
    if w is None or not w.type.is_static:
        return 1 << 30
    _, cin, kh, kw = w.type.static_shape
    return int(cin) * int(kh) * int(kw)


_RECOVER_STEPS = {"onnx.MaxPool", "spc.FakeQuant"}


def _grid_read(n: Node) -> bool:
    """A quantization's grid values read by an op that computes with them (a batch norm, the host)."""
    uses = n.output.uses
    return n.op.name == "spc.FakeQuant" and float(n.attrs["unit"]) != 1.0 and (
        not uses or any(u.op.name not in _RECOVER_STEPS for u, _ in uses))


class ChoosePrecision(Pass):
    name = "choose-precision"
    summary = "per-block weight/activation formats, math fidelity and accumulation"
    requires = ("partition-host-device",)

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        plan: PrecisionPlan = ctx.options.precision
        counts: dict[str, int] = {}
        changed = False
        # (a max pool returns one of its inputs, which their format already holds)
        quantized = {id(v.producer) for n in g.nodes if n.op.name == "spc.FakeQuant"
                     for v in n.inputs if v is not None and v.producer is not None
                     and v.producer.op.name not in _RECOVER_STEPS}
        for n in g.nodes:
            if n.placement is not Placement.DEVICE:
                continue
            block = block_name(n)
            p = plan.for_block(block, short_reduction=_reduction(n) < SHORT_REDUCTION)
            if n.op.name != "spc.Conv2d":
                p = BlockPrecision(output_dtype=p.output_dtype)  # only the stored format applies
            if (scaled(n) or id(n) in quantized or _grid_read(n)) and p.output_dtype is not DataFormat.FLOAT32:
                p = replace(p, output_dtype=DataFormat.FLOAT32)
            if n.op.name == "spc.Conv2d":
                counts[p.spell()] = counts.get(p.spell(), 0) + 1
            changed |= (n.block, n.precision) != (block, p)
            n.block, n.precision = block, p
        return PassResult(changed, {"preset": plan.preset, **counts})
