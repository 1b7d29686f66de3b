"""fuse-conv-bias-relu: Conv (+ bias) (+ Relu) becomes one spc.Conv2d, as ttnn.conv2d takes it.

Before::

    %c: f32[1,64,120,160] = onnx.Conv(%x, %w, %b) {pads = [1, 1, 1, 1], ...}
    %r: f32[1,64,120,160] = onnx.Relu(%c)

After::

    %r: f32[1,64,120,160] = spc.Conv2d(%x, %w, %b) {activation = "relu", pads = [1, 1, 1, 1], ...}

A Conv whose output has other users keeps its Relu separate (fusing would change what they see);
it still becomes an spc.Conv2d with ``activation = "none"``.
"""

from __future__ import annotations

from spc.ir import ops
from spc.ir.graph import Graph, Node
from spc.passes.manager import Pass, PassContext, PassResult
from spc.passes.rewrite import P, Rule, apply_rules, single_use


def _conv_attrs(conv: Node, activation: str) -> dict:
    w = conv.inputs[1]
    assert w is not None
    return {"strides": list(conv.attrs.get("strides", [1, 1])), "pads": list(conv.attrs.get("pads", [0, 0, 0, 0])),
            "dilations": list(conv.attrs.get("dilations", [1, 1])), "group": int(conv.attrs.get("group", 1)),
            "kernel_shape": list(w.type.static_shape[2:]), "activation": activation}


def _unsupported(conv: Node) -> str | None:
    """Why spc.Conv2d cannot take this Conv (it stays onnx.Conv, which runs on the host)."""
    if conv.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return f"auto_pad {conv.attrs['auto_pad']} (spc.Conv2d takes explicit pads)"
    if conv.inputs[0].type.rank != 4:
        return f"a {conv.inputs[0].type.rank}-D convolution (spc.Conv2d is 2-D)"
    return None


def _fused(g: Graph, conv: Node, activation: str, before: Node):
    return g.make_node(ops.get("spc.Conv2d"), list(conv.inputs), _conv_attrs(conv, activation),
                       name=conv.name, take_name=True, before=before).output


def _relu_follows(g: Graph, conv: Node) -> bool:
    return single_use(g, conv.output) and conv.output.uses[0][0].op.name == "onnx.Relu"


RULES = [
    Rule("conv-relu", P("onnx.Relu", P("onnx.Conv", name="conv", single_use=True), name="relu"),
         lambda g, m: _fused(g, m.node("conv"), "relu", m.node("relu")),
         check=lambda g, m: _unsupported(m.node("conv"))),
    Rule("conv", P("onnx.Conv", name="conv"), lambda g, m: _fused(g, m.node("conv"), "none", m.node("conv")),
         check=lambda g, m: _unsupported(m.node("conv")) or ("conv-relu will take it"
                                                              if _relu_follows(g, m.node("conv")) else None)),
]


class FuseConvBiasRelu(Pass):
    name = "fuse-conv-bias-relu"
    summary = "Conv + bias + Relu -> spc.Conv2d"
    requires = ("fold-batchnorm",)
    explains = (name, *(r.name for r in RULES))
    creates = ("spc.Conv2d",)

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        counts = apply_rules(g, RULES, explain=ctx.explainer, pass_name=self.name)
        return PassResult(bool(counts), counts)
