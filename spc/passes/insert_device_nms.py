"""insert-device-nms: recognise the source's NMS subgraph and replace it with ONE spc.Nms op.

Before (HF ``simple_nms``, radius 4: 5 max-pools, as torch.onnx spells it)::

    %u:  f32[1,1,480,640] = onnx.Unsqueeze(%s, %c0)
    %mp: f32[1,1,480,640] = onnx.MaxPool(%u) {kernel_shape = [9, 9], pads = [4, 4, 4, 4], strides = [1, 1]}
    %m:  i1[1,480,640]    = onnx.Equal(%s, %mp')
    ...  (two suppression rounds: Cast, MaxPool, Greater, Where, MaxPool, Equal, Not, And, Or)
    %n:  f32[1,480,640]   = onnx.Where(%mask, %s, %zeros)

After::

    %n: f32[1,480,640] = spc.Nms(%s) {iterations = 2, radius = 4}

The pass starts from each value that feeds a stride-1 "same" max-pool with an odd square window
and accepts the LARGEST closed region after it whose result equals the reference NMS
(spc_ops.nms) on trial maps full of ties, plateaus, zeros and border peaks, for some number of
suppression rounds. Semantics are identical to the source: rounds are kept as found.

Option ``nms_single_pass`` (``spc compile --nms-single-pass``) sets ``iterations = 0`` (keep a
pixel iff it equals its window maximum), the hand port's cheaper variant. It changes results on
ties; the note it leaves says so, and ``spc check`` measures the cost.
"""

from __future__ import annotations

import numpy as np

from spc.ir.graph import Graph, Node, Value
from spc.ir.ops.spc_ops import nms_rounds
from spc.passes.manager import PassContext
from spc.passes.region_fusion import RegionFusion
from spc.passes.semantic_match import (
    Region,
    SmallProbe,
    any_equal,
    confirm,
    confirm_small,
    evaluate,
    evaluate_small,
    find_exit,
    fuse_region,
    small_probe,
)
from spc.passes.trial_values import TrialValues

NMS_OPS = {"onnx.MaxPool", "onnx.Equal", "onnx.Cast", "onnx.Greater", "onnx.GreaterOrEqual", "onnx.Less",
           "onnx.LessOrEqual", "onnx.Where", "onnx.Not", "onnx.And", "onnx.Or", "onnx.Xor", "onnx.Unsqueeze",
           "onnx.Squeeze", "onnx.Reshape", "onnx.Mul", "onnx.Sub", "onnx.Add", "onnx.Identity", "onnx.Max",
           "onnx.Min", "onnx.Expand"}
_VIEW_OPS = {"onnx.Unsqueeze", "onnx.Reshape", "onnx.Squeeze", "onnx.Identity"}
MAX_ROUNDS = 3


def same_pool_radius(n: Node) -> int | None:
    """r for a MaxPool with a (2r+1)^2 window, stride 1 and padding r, else None."""
    k = n.attrs.get("kernel_shape")
    if n.op.name != "onnx.MaxPool" or k is None or len(k) != 2 or k[0] != k[1] or k[0] % 2 == 0:
        return None
    r = k[0] // 2
    if list(n.attrs.get("strides", [1, 1])) != [1, 1] or list(n.attrs.get("pads", [0] * 4)) != [r] * 4:
        return None
    if list(n.attrs.get("dilations", [1, 1])) != [1, 1] or n.attrs.get("ceil_mode", 0):
        return None
    return r


def pooled_radius(v: Value) -> int | None:
    """The radius of a same-size max-pool that reads ``v`` directly or through views."""
    frontier = [v]
    for _ in range(3):
        nxt = []
        for x in frontier:
            for user in x.consumers():
                r = same_pool_radius(user)
                if r is not None:
                    return r
                if user.op.name in _VIEW_OPS:
                    nxt.extend(user.outputs)
        frontier = nxt
    return None


def _same_map(v: Value, entry: Value) -> bool:
    """(Both static) ``v`` has ``entry``'s axes but for ones of size 1."""
    if not (v.type.is_static and entry.type.is_static):
        return False
    return [d for d in v.type.static_shape if d != 1] == [d for d in entry.type.static_shape if d != 1]


def trial_maps(shape: tuple[int, ...], radius: int, count: int = 3, seed: int = 1) -> list[np.ndarray]:
    """Maps that separate NMS variants: many exact ties, flat plateaus, zeros, border peaks (the
    first ``count`` of them)."""
    rng = TrialValues(seed)
    ties = (rng.integers(0, 6, shape) / 5.0 * (rng.random(shape) < 0.35)).astype(np.float32)
    if count == 1:
        return [ties]
    h, w = shape[-2:]
    block = radius + 1
    small = rng.integers(0, 4, shape[:-2] + (h // block + 1, w // block + 1)).astype(np.float32)
    plateaus = np.kron(small, np.ones((block, block), np.float32))[..., :h, :w] / 3.0
    peaks = (rng.random(shape).astype(np.float32) ** 8)
    peaks[..., 0, :] = np.maximum(peaks[..., 0, :], 0.9)
    return [ties, plateaus, np.ascontiguousarray(peaks)][:count]


def quadrant_map(shape: tuple[int, ...], radius: int) -> np.ndarray:
    """The maps of :func:`trial_maps` in one: ties top left, border peaks top right (on the map's
    top and right borders), plateaus bottom left and more ties bottom right, each a map of its
    own of a quarter of the size. One run on it asks what three runs on the maps asked (a small
    map's cost is numpy's per-call cost, not its pixels)."""
    h, w = shape[-2:]
    top, left = h // 2, w // 2
    lead = tuple(shape[:-2])
    ties = trial_maps(lead + (top, left), radius, 1)[0]
    peaks = trial_maps(lead + (top, w - left), radius)[2]
    plateaus = trial_maps(lead + (h - top, left), radius, 2)[1]
    more = trial_maps(lead + (h - top, w - left), radius, 1, seed=2)[0]
    return np.concatenate([np.concatenate([ties, peaks], -1), np.concatenate([plateaus, more], -1)], -2)


def _search(g: Graph, region: Region, entry: Value, radius: int,
            misses: list[str] | None) -> tuple[Value, list[Node], int] | None:
    """The region's NMS value, its nodes and its rounds: searched on small trial maps
    (:func:`small_probe`) and confirmed on a fresh map of a second small size when the small runs
    are the model's re-sized (:func:`confirm_small`), else on one full-size map; at full size when
    the region does not run small. ``misses`` (``--explain``) gets why nothing matched."""
    full = tuple(int(d) for d in entry.type.static_shape)
    k = 2 * radius + 1  # small maps hold several windows each way, so ties, plateaus and borders all occur
    envs = None
    probe = small_probe(region, (10 * k, 12 * k + 2))  # one map of four quarters (quadrant_map)
    if probe is not None:
        trials = [quadrant_map(probe.shape, radius)]
        envs = evaluate_small(region, probe, trials)
    if envs is None and (probe := small_probe(region, (5 * k, 6 * k + 1))) is not None:  # three maps
        trials = trial_maps(probe.shape, radius)
        envs = evaluate_small(region, probe, trials)
    if envs is None:
        probe = None
        trials = trial_maps(full, radius)
        # the first trial alone rules most regions out: the others run only if a value equals NMS on it
        envs = [evaluate(region, trials[0])]
        if misses is None and not any_equal(region, envs[0], nms_rounds(trials[0], radius, MAX_ROUNDS)):
            return None
        envs += [evaluate(region, p) for p in trials[1:]]
    wants = [nms_rounds(p, radius, MAX_ROUNDS) for p in trials]
    for rounds in range(MAX_ROUNDS + 1):
        if misses is not None:
            misses.append(f"{rounds} round(s){' (small maps)' if probe else ''}:")
        # the fused op keeps its input's shape; only where no value has it, an exit that drops or
        # adds unit axes is a view of it (onnxsim's HF export pools the (N, 1, H, W) map and
        # suppresses in (N, H, W)). Views after the exact one stay outside.
        found = find_exit(g, region, envs, [w[rounds] for w in wants], last=True,
                          accept=lambda v: v.type.shape == entry.type.shape, misses=misses)
        if found is None:
            found = find_exit(g, region, envs, [w[rounds] for w in wants], last=False,
                              accept=lambda v: _same_map(v, entry), misses=misses)
        if found is None:
            continue
        exit, nodes = found
        if probe is not None and not _confirmed(region, nodes, exit, probe, envs[0], radius, rounds, full):
            if misses is not None:
                misses.append(f"%{exit.name} equals NMS on small maps, not at the model's size;")
            continue
        return exit, nodes, rounds
    return None


def _confirmed(region: Region, nodes: list[Node], exit: Value, probe: SmallProbe, env: dict[int, np.ndarray],
               radius: int, rounds: int, full: tuple[int, ...]) -> bool:
    """A match found on small maps, confirmed on a fresh map of a second small size (its quarters
    several windows still), or where that cannot show it, once at the model's size."""

    def trial(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        m = quadrant_map(shape, radius)
        return m, nms_rounds(m, radius, rounds)[-1]

    k = 2 * radius + 1
    if confirm_small(region, nodes, exit, probe, env, small_probe(region, (6 * k + 4, 8 * k + 6)), trial):
        return True
    (big,) = trial_maps(full, radius, 1)
    return confirm(region, nodes, exit, big, nms_rounds(big, radius, rounds)[-1])


class InsertDeviceNms(RegionFusion):
    name = "insert-device-nms"
    summary = "recognise the NMS subgraph by its semantics and replace it with spc.Nms"
    requires = ("fuse-score-fold",)
    explains = (name,)
    creates = ("spc.Nms",)
    ops = NMS_OPS

    def begin(self, stats: dict) -> None:
        stats["source_rounds"] = []

    def candidate(self, g: Graph, entry: Value) -> tuple[str, int] | None:
        if not (entry.type.dtype.is_float and entry.type.is_static) or entry.type.rank < 2 or not entry.uses:
            return None
        radius = pooled_radius(entry)
        return None if radius is None else (f"%{entry.name} (radius {radius})", radius)

    def search(self, g: Graph, region: Region, entry: Value, found: int,
               misses: list[str] | None) -> tuple[Value, list[Node], int] | None:
        return _search(g, region, entry, found, misses)

    def stopped(self, found: int, misses: list[str]) -> str:
        return f"no region value equals NMS (radius {found}) for 0..{MAX_ROUNDS} rounds: " + " ".join(misses)

    def fuse(self, g: Graph, ctx: PassContext, region: Region, entry: Value, found: int,
             match: tuple[Value, list[Node], int], stats: dict) -> str:
        exit, nodes, rounds = match
        radius = found
        rounds_used = 0 if ctx.options.nms_single_pass else rounds
        if rounds_used != rounds:
            ctx.note(f"insert-device-nms: single-pass NMS replaces the source's {rounds} suppression "
                     "round(s); results differ on ties and near-peaks: measure with `spc check`")
        node = fuse_region(g, nodes, exit, "spc.Nms", [entry], {"radius": radius, "iterations": rounds_used}, "nms")
        if rounds_used != rounds:  # what the compile's validation holds to this op's meaning, not the source's
            stats.setdefault("approximated", []).append(node.output.name)
        stats["source_rounds"].append(rounds)
        return f"%{exit.name} = spc.Nms(radius {radius}, {rounds} round(s)) over {len(nodes)} node(s)"

    def why_not(self, g: Graph, tried: list[str]) -> str:
        return (f"the region after {', '.join(tried)} equals NMS for no number of rounds up to {MAX_ROUNDS}" if tried
                else "no value feeds a stride-1 max pool with an odd square window")
