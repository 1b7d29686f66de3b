"""fuse-score-fold: softmax over the 65 detector channels, drop the dustbin, depth-to-space by 8.

Before (HF SuperPoint as torch.onnx exports it)::

    %sm: f32[1,65,60,80]   = onnx.Softmax(%logits) {axis = 1}
    %sl: f32[1,64,60,80]   = onnx.Slice(%sm, %c0, %c64, %c1, %c1)
    %p:  f32[1,60,80,64]   = onnx.Transpose(%sl) {perm = [0, 2, 3, 1]}
    %v:  f32[1,60,80,8,8]  = onnx.Reshape(%p, %shape5)
    %q:  f32[1,60,8,80,8]  = onnx.Transpose(%v) {perm = [0, 1, 3, 2, 4]}
    %s:  f32[1,480,640]    = onnx.Reshape(%q, %shape3)

After::

    %s: f32[1,480,640] = spc.ScoreFold(%logits) {cell = 8, out_shape = [1, 480, 640]}

Recognised by value (passes/semantic_match.py): any value with c*c+1 channels whose downstream
softmax/slice/transpose/reshape/depth-to-space chain equals the reference fold on random
logits, whatever the spelling. The fused op keeps the source value's name, so `spc check` can
compare it with onnxruntime's tensor of the same name.
"""

from __future__ import annotations

import math

import numpy as np

from spc.ir.graph import Graph, Node, Value
from spc.ir.ops.spc_ops import score_fold
from spc.passes.manager import PassContext
from spc.passes.region_fusion import RegionFusion
from spc.passes.semantic_match import (
    Region,
    confirm,
    confirm_small,
    evaluate,
    evaluate_small,
    find_exit,
    fuse_region,
    small_probe,
)
from spc.passes.trial_values import TrialValues
from spc.ttnn.layout import DeviceLayout

FOLD_OPS = {"onnx.Softmax", "onnx.Exp", "onnx.ReduceSum", "onnx.ReduceMax", "onnx.Sub", "onnx.Div",
            "onnx.Slice", "onnx.Gather", "onnx.Split", "onnx.Transpose", "onnx.Reshape", "onnx.Squeeze",
            "onnx.Unsqueeze", "onnx.DepthToSpace", "onnx.Flatten", "onnx.Identity"}


SMALL = (3, 5)  # the logits' spatial size while searching
SECOND = (4, 6)  # and while confirming a match


def fold_cell(v: Value) -> int | None:
    """c when ``v`` is a static float (N, c*c+1, h, w) map with c >= 2, else None."""
    t = v.type
    if not (t.dtype.is_float and t.is_static and t.rank == 4):
        return None
    c = math.isqrt(t.static_shape[1] - 1)
    return c if c >= 2 and c * c + 1 == t.static_shape[1] else None


def trials(shape: tuple[int, ...], count: int = 2) -> list[np.ndarray]:
    rng = TrialValues(0)
    return [rng.standard_normal(shape, dtype=np.float32) * np.float32(4) for _ in range(count)]


def _search(g: Graph, region: Region, entry: Value, cell: int,
            misses: list[str] | None) -> tuple[Value, list[Node]] | None:
    """The region's folded map and its nodes: searched on small logits (:func:`small_probe`, sizes
    scaled by the cell too) and confirmed on fresh logits of a second small size when the small
    runs are the model's re-sized (:func:`confirm_small`), else on logits of the model's size; at
    full size when the region does not run small."""
    full = tuple(int(d) for d in entry.type.static_shape)
    probe = small_probe(region, SMALL, (cell,))
    maps = trials(probe.shape if probe else full)
    envs = evaluate_small(region, probe, maps) if probe else None
    if envs is None:
        probe, maps = None, trials(full)
        envs = [evaluate(region, p) for p in maps]
    # the last matching view: the map as the source finally shapes it, e.g. (N, H, W); one the
    # map layout holds as the map first (a rank-5 or channels-last view then follows the fold)
    n, _, h, w = (int(d) for d in entry.type.static_shape)
    wants = [score_fold(p, cell) for p in maps]

    def held(v: Value) -> bool:
        return held_as_map(tuple(int(d) for d in v.type.static_shape), n, h * cell, w * cell)

    found = find_exit(g, region, envs, wants, last=True, rtol=1e-5, atol=1e-7, accept=held) \
        or find_exit(g, region, envs, wants, last=True, rtol=1e-5, atol=1e-7, misses=misses)
    if found is None or probe is None:
        return found
    exit, nodes = found

    def trial(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        (x,) = trials(shape, 1)
        return x, score_fold(x, cell)

    if confirm_small(region, nodes, exit, probe, envs[0], small_probe(region, SECOND, (cell,)), trial,
                     rtol=1e-5, atol=1e-7) or confirm(region, nodes, exit, *trial(full), rtol=1e-5, atol=1e-7):
        return found
    if misses is not None:
        misses.append(f"%{exit.name} folds small logits, not logits of the model's size")
    return None


def held_as_map(shape: tuple[int, ...], n: int, h: int, w: int) -> bool:
    """Whether the conv layout holds a value of ``shape`` as the (n, h, w) map the fold's lowering
    makes ([1, 1, n*h*w, 1]): (n, h, w), (n, 1, h, w), or (h, w) for one image. A channels-last
    (n, h, w, 1) has the same elements in the same order, but the layout would read its h as
    channels (lowering/fused.py: the fold's last call writes the map as DeviceLayout.of(shape))."""
    return len(shape) in (2, 3, 4) and DeviceLayout.of(shape) == DeviceLayout(n, h, w, 1)


def _fuse(g: Graph, nodes: list[Node], exit: Value, entry: Value, cell: int) -> bool:
    """Fuse the region into spc.ScoreFold; an exit the map layout does not hold as the map
    (:func:`held_as_map`) becomes a view (onnx.Reshape) of the fold in (N, 1, H, W). True when so.

    Before::  %s: f32[1,480,640,1] = onnx.Reshape(onnx.DepthToSpace(...))
    After::   %f: f32[1,1,480,640] = spc.ScoreFold(%logits); %s = onnx.Reshape(%f, [1, 480, 640, 1])

    A static reshape of the view is that reshape of the map (the same elements in the same order):
    it reads the map, and one to the map's own shape is the map (taking its name), so that what
    follows (NMS, the extraction) sees the fold itself; a view nothing reads is dropped (onnxsim
    leaves the HF export's map as one rank-5 value read by two reshapes).
    """
    n, _, h, w = (int(d) for d in entry.type.static_shape)
    shape = [int(d) for d in exit.type.static_shape]
    out_shape = shape if held_as_map(tuple(shape), n, h * cell, w * cell) else [n, 1, h * cell, w * cell]
    fold = fuse_region(g, nodes, exit, "spc.ScoreFold", [entry], {"cell": cell, "out_shape": out_shape}, "score_fold")
    if out_shape == shape:
        return False
    ((view, _),) = fold.output.uses  # fuse_region's: the exit's value, by the exit's name
    named = False
    for node, i in list(view.output.uses):
        out = node.outputs[0]
        if node.op.name != "onnx.Reshape" or i != 0 or not out.type.is_static or 0 in out.type.static_shape:
            continue
        if out.type == fold.output.type:
            name = out.name
            g.replace_all_uses(out, fold.output)
            g.remove_node(node)
            if not named and fold.output not in g.outputs:
                g.rename(fold.output, name)
                named = True
        else:
            g.set_input(node, 0, fold.output)
            g.set_input(node, 1, g.add_const(g.fresh_name("score_fold_shape"),
                                             np.array(out.type.static_shape, np.int64)))
    if view.output.uses or view.output in g.outputs:
        return True
    g.remove_node(view)
    return False


class FuseScoreFold(RegionFusion):
    name = "fuse-score-fold"
    summary = "softmax + dustbin drop + depth-to-space -> spc.ScoreFold"
    requires = ("simplify-shapes",)
    explains = (name,)
    creates = ("spc.ScoreFold",)
    ops = FOLD_OPS

    def candidate(self, g: Graph, entry: Value) -> tuple[str, int] | None:
        cell = None if entry.is_const else fold_cell(entry)
        if cell is None or not entry.uses:
            return None
        return f"%{entry.name} ({cell * cell + 1} channels)", cell

    def search(self, g: Graph, region: Region, entry: Value, found: int,
               misses: list[str] | None) -> tuple[Value, list[Node]] | None:
        return _search(g, region, entry, found, misses)

    def stopped(self, found: int, misses: list[str]) -> str:
        return ("no region value equals softmax over the channels, dustbin drop and depth-to-space "
                f"({'; '.join(misses)})")

    def fuse(self, g: Graph, ctx: PassContext, region: Region, entry: Value, found: int,
             match: tuple[Value, list[Node]], stats: dict) -> str:
        exit, nodes = match
        view = _fuse(g, nodes, exit, entry, found)
        return (f"%{exit.name} = spc.ScoreFold over {len(nodes)} node(s)"
                + (f", then a view to {list(exit.type.static_shape)}" if view else ""))

    def why_not(self, g: Graph, tried: list[str]) -> str:
        if tried:
            return (f"nothing after {', '.join(tried)} computes softmax over the channels, dustbin drop and "
                    "depth-to-space")
        returned = [f"%{v.name}" for v in g.values()
                    if not v.is_const and fold_cell(v) is not None and not v.uses and v in g.outputs]
        if returned:
            return f"the model returns the logits ({', '.join(returned)}): no fold in the graph"
        return "no value with c*c+1 channels (c >= 2)"
