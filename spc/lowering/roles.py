"""What each graph output is, read from the graph, never from its name.

* the outputs of a recognised keypoint extraction (spc.Keypoints) are its keypoints, scores,
  descriptors and mask, with the layout the op records (a batch plan's, each image's stacked);
* a dense output is a role when the op that computes it says so (through views): the score map
  of spc.ScoreFold, the NMS map of spc.Nms, the descriptor map of spc.L2Norm, or the detector's
  raw logits — a convolution with cell^2 + 1 output channels whose values feed nothing else;
* anything else has no role and is reported by name and shape.

The plan records them (Program.roles); ``spc run`` and ``spc check`` use them.
"""

from __future__ import annotations

import math
from typing import Any

from spc.ir.graph import Graph, Node, Value
from spc.ir.ops.keypoints import HF_OUTPUTS, OutputSpec

_VIEWS = ("onnx.Reshape", "onnx.Squeeze", "onnx.Unsqueeze", "onnx.Identity", "onnx.Flatten")
_DENSE = {"spc.ScoreFold": "score_map", "spc.Nms": "nms_map", "spc.L2Norm": "descriptor_map"}


def _passes_through(n: Node) -> bool:
    """A view, a cast from float to float (a float16 model's edges, converted with its inputs and
    outputs kept float32) or a quantization (a QDQ model's): the value is the same map."""
    if n.op.name in _VIEWS or n.op.name == "spc.FakeQuant":
        return True
    x = n.inputs[0] if n.inputs else None
    return n.op.name == "onnx.Cast" and x is not None and x.type.dtype.is_float and n.outputs[0].type.dtype.is_float


def _producer(v: Value) -> Node | None:
    n = v.producer
    while n is not None and n.inputs and n.inputs[0] is not None and _passes_through(n):
        n = n.inputs[0].producer
    return n


def _logit_cell(n: Node) -> int | None:
    """c when ``n`` is a convolution with c*c + 1 output channels (SuperPoint's detector head)."""
    if n.op.name not in ("spc.Conv2d", "onnx.Conv", "onnx.BatchNormalization") or not n.outputs[0].type.is_static:
        return None
    shape = n.outputs[0].type.static_shape
    if len(shape) != 4:
        return None
    c = math.isqrt(int(shape[1]) - 1) if shape[1] > 1 else 0
    return c if c >= 2 and c * c + 1 == shape[1] else None


def _keypoint_spec(v: Value) -> OutputSpec | None:
    """What a keypoint op's output ``v`` is, or the one thing the images' outputs stacked in ``v``
    are (a batch plan: Concat on axis 0 of each image's, padded: passes/batch_images.py)."""
    n = v.producer
    if n is None:
        return None
    if n.op.name in ("spc.Keypoints", "spc.KeypointsFromTopK"):
        return OutputSpec.parse(list(n.attrs.get("outputs", HF_OUTPUTS))[n.outputs.index(v)])
    if n.op.name != "onnx.Concat" or int(n.attrs.get("axis", 0)) != 0 or not n.inputs:
        return None
    parts = [p.producer.inputs[0] if p is not None and p.producer is not None and p.producer.op.name == "onnx.Pad"
             else p for p in n.inputs]
    if any(p is None or p.producer is None or p.producer.op.name not in ("spc.Keypoints", "spc.KeypointsFromTopK")
           for p in parts):
        return None
    specs = {_keypoint_spec(p).spell() for p in parts}  # type: ignore[union-attr]
    return OutputSpec.parse(specs.pop()) if len(specs) == 1 else None


def output_roles(g: Graph) -> dict[str, dict[str, Any]]:
    roles: dict[str, dict[str, Any]] = {}
    for v in g.outputs:
        n = v.producer
        if n is None:
            continue
        spec = _keypoint_spec(v)
        if spec is not None:
            roles[v.name] = {"role": spec.role, "spec": spec.spell()}
            continue
        p = _producer(v)
        if p is None:
            continue
        if p.op.name in _DENSE:
            roles[v.name] = {"role": _DENSE[p.op.name]}
            if p.op.name == "spc.ScoreFold":
                roles[v.name]["cell"] = int(p.attrs["cell"])
        elif (cell := _logit_cell(p)) is not None:
            roles[v.name] = {"role": "score_logits", "cell": cell}
    return roles
