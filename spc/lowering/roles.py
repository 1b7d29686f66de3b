"""What each graph output is, read from the graph, never from its name.

* the outputs of a recognised keypoint extraction (spc.Keypoints) are its keypoints, scores,
  descriptors and mask, with the layout the op records (a batch plan's, each image's stacked);
* a dense output is a role when the op that computes it says so (through views): the score map
  of spc.ScoreFold, the NMS map of spc.Nms, the descriptor map of spc.L2Norm, or the detector's
  raw logits — a convolution with cell^2 + 1 output channels whose values feed nothing else;
* where neither is there, outputs shaped as a fixed-K extractor's (DISK's, a TF top-K export's):
  the first [1, K, 2] or [K, 2] is keypoints, taken as (x, y) pixels of the input (the order
  LightGlue-ONNX, hloc and kornia write), then the first float [1, K] or [K] the scores and
  [1, K, D] or [K, D] the descriptors (:func:`fixed_k_roles`);
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
    if not any(r.get("role") in ("keypoints", "score_logits") for r in roles.values()):
        roles.update(fixed_k_roles(g))
    return roles


def _static_shape(v: Value) -> list[int] | None:
    return [int(d) for d in v.type.static_shape] if v.type.is_static else None


def fixed_k_roles(g: Graph) -> dict[str, dict[str, Any]]:
    """Keypoints, scores and descriptors of a fixed-K extractor read by the outputs' shapes, or {}."""
    def lead(shape: list[int], rank: int) -> tuple[list[int], bool] | None:
        if len(shape) == rank + 1 and shape[0] == 1:
            return shape[1:], True
        return (shape, False) if len(shape) == rank else None

    shapes = [(v, sh) for v in g.outputs if (sh := _static_shape(v)) is not None]
    kp = next(((v, got) for v, sh in shapes if (got := lead(sh, 2)) is not None and got[0][1] == 2), None)
    if kp is None:
        return {}
    k = kp[1][0][0]
    floats = [(v, sh) for v, sh in shapes if v is not kp[0] and v.type.dtype.is_float]
    sc = next(((v, got) for v, sh in floats if (got := lead(sh, 1)) is not None and got[0] == [k]), None)
    de = next(((v, got) for v, sh in floats if sc is not None and v is not sc[0]
               and (got := lead(sh, 2)) is not None and got[0][0] == k and got[0][1] > 2), None)
    if sc is None or de is None:
        return {}
    dtype = "f32" if kp[0].type.dtype.is_float else "i64"
    batch = {True: "batch", False: "flat"}
    return {kp[0].name: {"role": "keypoints", "spec": f"keypoints xy pixel {dtype} {batch[kp[1][1]]}", "by": "shape"},
            sc[0].name: {"role": "scores", "spec": f"scores {batch[sc[1][1]]}", "by": "shape"},
            de[0].name: {"role": "descriptors", "spec": f"descriptors nd {batch[de[1][1]]}", "by": "shape"}}
