"""fuse-l2norm: x / max(||x||_2, eps) along one axis becomes one spc.L2Norm.

Before (torch.nn.functional.normalize as torch.onnx exports it)::

    %n: f32[1,1,60,80]   = onnx.ReduceL2(%d, %axes1) {keepdims = 1}
    %c: f32[1,1,60,80]   = onnx.Clip(%n, %eps)
    %e: f32[1,256,60,80] = onnx.Expand(%c, %shape)
    %y: f32[1,256,60,80] = onnx.Div(%d, %e)

After::

    %y: f32[1,256,60,80] = spc.L2Norm(%d) {axis = 1, eps = 1e-12}

Recognised by value: other spellings (Pow/ReduceSum/Sqrt/Max, multiplication by a reciprocal)
fuse too. eps is read from the region's clamp constant (0 without one: x / ||x||, as MagicLeap's network
divides); a trial with norms below eps checks it.
Only static shapes are fused (the device's descriptor map); the host's per-keypoint
normalisation stays as it is.
"""

from __future__ import annotations

import numpy as np

from spc.ir.graph import Graph, Node, Value
from spc.ir.ops.infer import axes_from, norm_axis
from spc.ir.ops.spc_ops import l2_normalize
from spc.passes.manager import PassContext
from spc.passes.region_fusion import RegionFusion
from spc.passes.semantic_match import (
    Region,
    confirm,
    confirm_small,
    describe_region,
    evaluate,
    evaluate_small,
    find_exit,
    fuse_region,
    small_probe,
)
from spc.passes.trial_values import TrialValues

NORM_OPS = {"onnx.ReduceL2", "onnx.ReduceSum", "onnx.ReduceSumSquare", "onnx.Pow", "onnx.Mul", "onnx.Sqrt",
            "onnx.Clip", "onnx.Max", "onnx.Expand", "onnx.Div", "onnx.Reciprocal", "onnx.Add", "onnx.Unsqueeze",
            "onnx.Squeeze", "onnx.Reshape", "onnx.Identity"}
SMALL = (5, 7)  # the last two dims of the maps searched on: a few vectors of every length
SECOND = (4, 6)  # and of the map a match is confirmed on
_STARTS = {"onnx.ReduceL2", "onnx.ReduceSumSquare", "onnx.Pow", "onnx.Mul"}


def region_eps(region: Region) -> float:
    """The clamp constant of the norm (Clip min / Max operand); 0 without one (x / ||x||, as
    MagicLeap's SuperPointNet divides). The trials check it either way."""
    for n in region.nodes:
        if n.op.name in ("onnx.Clip", "onnx.Max"):
            for v in n.inputs[1:]:
                if v is not None and v.is_const and v.type.numel == 1:
                    return float(np.asarray(v.data).reshape(-1)[0])
    return 0.0


def reduced_axes(region: Region, rank: int) -> list[int]:
    """The axes the region reduces over first (the likely norm axis), then the others."""
    first = []
    for n in region.nodes:
        if n.op.name.startswith("onnx.Reduce"):
            axes = axes_from(n.inputs, n.attrs, 1) or []
            first += [norm_axis(a, rank) for a in axes if norm_axis(a, rank) not in first]
    return first + [a for a in range(rank) if a not in first]


def trials(shape: tuple[int, ...], eps: float) -> list[np.ndarray]:
    """A normal map, and one whose norms are well below eps (they tell max(||x||, eps) from ||x||;
    without eps, small norms still divide)."""
    rng = TrialValues(2)
    x = rng.standard_normal(shape, dtype=np.float32)
    return [x, x * np.float32(eps * 1e-2 if eps > 0 else 1e-3)]


def _search(g: Graph, region: Region, entry: Value, eps: float,
            misses: list[str] | None) -> tuple[Value, list[Node], int] | None:
    """The region's normalised value, its nodes and the axis: searched on small maps
    (:func:`small_probe`) and confirmed on a fresh map of a second small size when the small runs
    are the model's re-sized (:func:`confirm_small`), else on one map of the model's size; at full
    size when the region does not run small."""
    full = tuple(int(d) for d in entry.type.static_shape)
    probe = small_probe(region, SMALL)
    maps = trials(probe.shape if probe else full, eps)
    envs = evaluate_small(region, probe, maps) if probe else None
    if envs is None:
        probe, maps = None, trials(full, eps)
        envs = [evaluate(region, p) for p in maps]
    for axis in reduced_axes(region, entry.type.rank):
        wants = [l2_normalize(p, axis, eps) for p in maps]
        if misses is not None:
            misses.append(f"axis {axis}{' (small maps)' if probe else ''}:")
        found = find_exit(g, region, envs, wants, last=False, rtol=1e-5, atol=1e-6, misses=misses)
        if found is None or found[0].type.shape != entry.type.shape:
            continue
        exit, nodes = found
        if probe is not None:
            def trial(shape: tuple[int, ...], axis: int = axis) -> tuple[np.ndarray, np.ndarray]:
                # uniform, not normal: a map of another size, drawn fast
                x = TrialValues(3).random(shape, dtype=np.float32) - np.float32(0.5)
                return x, l2_normalize(x, axis, eps)

            if not confirm_small(region, nodes, exit, probe, envs[0], small_probe(region, SECOND), trial,
                                 rtol=1e-5, atol=1e-6) and \
                    not confirm(region, nodes, exit, *trial(full), rtol=1e-5, atol=1e-6):
                if misses is not None:
                    misses.append(f"%{exit.name} normalises small maps, not maps of the model's size;")
                continue
        return exit, nodes, axis
    return None


class FuseL2Norm(RegionFusion):
    name = "fuse-l2norm"
    summary = "x / max(||x||, eps) -> spc.L2Norm"
    requires = ("simplify-shapes",)
    explains = (name,)
    creates = ("spc.L2Norm",)
    ops = NORM_OPS

    def candidate(self, g: Graph, entry: Value) -> tuple[str, None] | None:
        if not (entry.type.dtype.is_float and entry.type.is_static) or entry.type.rank < 2:
            return None
        return (f"%{entry.name}", None) if any(u.op.name in _STARTS for u in entry.consumers()) else None

    def describe(self, region: Region, found: None) -> list[str]:
        eps = region_eps(region)
        return [describe_region(region), f"eps {eps:g} (from the region's Clip/Max)" if eps else "no eps in the region"]

    def search(self, g: Graph, region: Region, entry: Value, found: None,
               misses: list[str] | None) -> tuple[Value, list[Node], int] | None:
        return _search(g, region, entry, region_eps(region), misses)

    def stopped(self, found: None, misses: list[str]) -> str:
        return "no region value equals x / max(||x||, eps) along an axis: " + " ".join(misses)

    def fuse(self, g: Graph, ctx: PassContext, region: Region, entry: Value, found: None,
             match: tuple[Value, list[Node], int], stats: dict) -> str:
        exit, nodes, axis = match
        fuse_region(g, nodes, exit, "spc.L2Norm", [entry], {"axis": axis, "eps": region_eps(region)}, "l2norm")
        return f"%{exit.name} = spc.L2Norm(axis {axis}) over {len(nodes)} node(s)"

    def why_not(self, g: Graph, tried: list[str]) -> str:
        return (f"no value after {', '.join(tried[:3])}{' ...' if len(tried) > 3 else ''} equals "
                "x / max(||x||, eps) along an axis" if tried
                else "no value feeds a norm (ReduceL2, ReduceSumSquare, Pow or Mul)")
