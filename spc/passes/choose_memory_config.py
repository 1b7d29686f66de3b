"""choose-memory-config: per device block, the cheapest memory configuration that fits in L1.

Before::

    %relu_1: f32[1,64,480,640] = spc.Conv2d(%relu, %w, %b) {block = "encoder.conv_blocks.0.conv_b", ...} @device

After (p150)::

    %relu_1: f32[1,64,480,640] = spc.Conv2d(%relu, %w, %b) {block = "encoder.conv_blocks.0.conv_b",
        l1_peak = 1358400, memory = "dram:width=3", ...} @device

Walks the device nodes in order, keeping one core's L1 as ttnn would (memory/ledger.py): what
earlier blocks left in L1 stays until its last reader. For each convolution and max pool (the
NMS window maxima included) it enumerates the candidates (memory/config.py: L1, for a conv also
with smaller activation blocks; DRAM slicing by rows or columns in 1..64 slices), sizes each
with the L1 model (memory/l1.py), drops those that do not fit, and keeps the cheapest by the
cost model (memory/cost.py). Choosing block by block is greedy: when a later block finds nothing
that fits, the largest output still in L1 goes to DRAM and the walk starts again (with a note).
``--memory-config`` (``ctx.options["memory"]``) forces a block's choice; a forced choice the
model says does not fit is kept, with a note, so that ttnn's verdict on it can be seen. When
nothing fits: one error naming the block, its sizes and the nearest miss.
"""

from __future__ import annotations

from dataclasses import dataclass

from spc.errors import SpcError
from spc.ir.graph import Graph, Node, Placement, Value
from spc.memory.cost import conv_seconds, pool_seconds
from spc.memory.l1 import ConvSpec, L1Use, PoolSpec, Window, conv_l1, pool_l1, tensor_per_core
from spc.memory.ledger import Ledger
from spc.memory.residency import DRAM_RM, Placed, Resident, place, try_place
from spc.passes.manager import Pass, PassContext, PassResult
from spc.ttnn.memory import MemoryConfig, MemoryOverrides
from spc.ttnn.targets import Target, get_target

ACT_BLOCKS = (0, 16, 8, 4, 2, 1)  # tiles; 0 = ttnn's default
MAX_SLICES = 64
KEEP_FITTING = 4  # per slicing direction, how many fitting slice counts are ranked
# bytes per core kept free beyond the model: small buffers it does not size (element-wise ops'
# circular buffers, allocator alignment)
MARGIN = 16384


def candidates(w: Window, conv: bool) -> list[MemoryConfig]:
    out = [MemoryConfig("l1", abh) for abh in (ACT_BLOCKS if conv else (0,))]
    for dim, size in (("height", w.out_h), ("width", -(-w.out_w // 32))):
        out += [MemoryConfig("dram", 0, dim, n) for n in range(1, min(MAX_SLICES, size) + 1)]
    return out


def _conv_spec(n: Node, src: Resident) -> ConvSpec:
    x, w = n.inputs[0], n.inputs[1]
    assert x is not None and w is not None
    _, c, h, wd = (int(d) for d in x.type.static_shape)
    p = n.attrs["pads"]
    kh, kw = (int(k) for k in n.attrs["kernel_shape"])
    win = Window(1, h, wd, c, (kh, kw), tuple(n.attrs["strides"]), (p[0], p[2], p[1], p[3]),
                 tuple(n.attrs["dilations"]))
    return ConvSpec(win, int(w.type.static_shape[0]), int(n.attrs["group"]), n.input(2) is not None,
                    n.attrs["weights_dtype"], n.attrs["output_dtype"], bool(n.attrs["fp32_dest_acc_en"]),
                    bool(n.attrs["packer_l1_acc"]), src.tiled)


def _pool_window(x: Value, kernel: list[int], stride: list[int], pads: list[int]) -> Window:
    s = [int(d) for d in x.type.static_shape]
    n, c, h, w = (s[0], s[1], s[2], s[3]) if len(s) == 4 else (s[0], 1, s[1], s[2])
    return Window(n, h, w, c, (kernel[0], kernel[1]), (stride[0], stride[1]), (pads[0], pads[2], pads[1], pads[3]))


class _NoFit(Exception):
    def __init__(self, error: SpcError, holders: list[str]) -> None:
        super().__init__(str(error))
        self.error, self.holders = error, holders


@dataclass
class Choice:
    mem: MemoryConfig
    placed: Placed
    seconds: float

    @property
    def short(self) -> int:
        """Bytes per core missing for this choice to fit with the margin."""
        return max(0, MARGIN - self.placed.headroom)


class ChooseMemoryConfig(Pass):
    name = "choose-memory-config"
    summary = "per block: the cheapest L1/DRAM-slicing configuration that fits the target's L1"
    requires = ("choose-precision",)

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        target: Target = ctx.options.get("target") or get_target("p150")
        overrides: MemoryOverrides = ctx.options.get("memory") or MemoryOverrides()
        device = [n for n in g.nodes if n.placement is Placement.DEVICE]
        to_dram: set[str] = set()  # blocks whose output must go to DRAM to make room later
        while True:
            try:
                stats = self._walk(device, target, overrides, to_dram, ctx)
                break
            except _NoFit as miss:
                # choosing block by block is greedy: a big L1 output can starve a later block.
                # Send the biggest such output to DRAM and choose again.
                if not miss.holders:
                    raise miss.error from None
                to_dram.add(miss.holders[0])
        if to_dram:
            ctx.note(f"memory: outputs of {', '.join(sorted(to_dram))} go to DRAM to leave L1 for later blocks")
        blocks = {str(n.attrs.get("block", n.name)) for n in device}
        for pattern in overrides.unused(blocks):
            ctx.note(f"--memory-config {pattern}: matches no device block")
        return PassResult(bool(stats), {"target": target.name, **stats})

    def _walk(self, device: list[Node], target: Target, overrides: MemoryOverrides, to_dram: set[str],
              ctx: PassContext) -> dict[str, int]:
        last: dict[int, int] = {}
        for i, n in enumerate(device):
            for v in n.inputs:
                if v is not None:
                    last[id(v)] = i
        ledger = Ledger(target)
        where: dict[int, Resident] = {}
        names: dict[int, str] = {}
        owner: dict[str, str] = {}  # L1 tensor -> the block that chose to leave it there
        stats: dict[str, int] = {}
        for i, n in enumerate(device):
            x = n.inputs[0]
            src = where.get(id(x), DRAM_RM) if x is not None else DRAM_RM
            dead = [names[id(v)] for v in n.inputs if v is not None and last.get(id(v)) == i and id(v) in names]
            # the DRAM path copies an L1 input to DRAM first, and frees it when nothing else reads it
            moved = ledger.copy()
            if src.bytes and x is not None and last.get(id(x)) == i:
                moved.free(names[id(x)])
            block = str(n.attrs.get("block", n.name))
            try:
                choice, res = self._choose(n, src, ledger, moved, target, overrides, ctx, block in to_dram)
            except SpcError as exc:
                holders = sorted(((ledger.blocks[t][1], b) for t, b in owner.items()
                                  if t in ledger.blocks and b not in to_dram), reverse=True)
                raise _NoFit(exc, [b for _, b in holders]) from None
            if choice.mem.path == "dram" and src.bytes:
                ledger = moved
            place(ledger, n.output.name, choice.placed.use, dead)
            where[id(n.output)], names[id(n.output)] = res, n.output.name
            if n.op.name in ("spc.Conv2d", "onnx.MaxPool", "spc.Nms"):
                n.attrs["memory"] = choice.mem.spell()
                n.attrs["l1_peak"] = int(choice.placed.total)
                stats[choice.mem.path] = stats.get(choice.mem.path, 0) + 1
                if res.bytes:
                    owner[n.output.name] = block
        return stats

    def _choose(self, n: Node, src: Resident, ledger: Ledger, moved: Ledger, target: Target,
                overrides: MemoryOverrides, ctx: PassContext, dram_only: bool) -> tuple[Choice, Resident]:
        """``moved``: the ledger once a DRAM path has copied the input out of L1."""
        block = str(n.attrs.get("block", n.name))
        forced = overrides.for_block(block)
        in_dram = not src.bytes
        x = n.inputs[0]
        assert x is not None
        if n.op.name == "spc.Conv2d":
            spec = _conv_spec(n, src)
            w = spec.window
            fidelity = str(n.attrs["math_fidelity"])
            what = f"conv {w.c}->{spec.cout} {w.kernel[0]}x{w.kernel[1]} on {w.h}x{w.w}"
            cands = candidates(w, conv=not spec.is_matmul)

            def size(m: MemoryConfig) -> L1Use:
                return conv_l1(spec, m, target.cores, src.cores if src.bytes else None, input_in_dram=in_dram)

            def cost(m: MemoryConfig, u: L1Use) -> float:
                return conv_seconds(spec, m, u, fidelity, target, in_dram)
        elif n.op.name in ("onnx.MaxPool", "spc.Nms"):
            nms = n.op.name == "spc.Nms"
            if nms:  # its window maxima, on the score map in DRAM; results go back to DRAM
                r = int(n.attrs["radius"])
                w = _pool_window(x, [2 * r + 1] * 2, [1, 1], [r] * 4)
            else:
                w = _pool_window(x, n.attrs["kernel_shape"], n.attrs.get("strides", [1, 1]),
                                 n.attrs.get("pads", [0] * 4))
            pool = PoolSpec(w, src.tiled, src.bytes > 0, not nms)
            what = f"{w.kernel[0]}x{w.kernel[1]} max pool on {w.h}x{w.w}x{w.c}"
            cands = candidates(w, conv=False)

            def size(m: MemoryConfig) -> L1Use:
                return pool_l1(pool, m, target.cores, src.cores)

            def cost(m: MemoryConfig, u: L1Use) -> float:
                return pool_seconds(w, m, u, target, in_dram, nms)
        else:
            if forced is not None:
                raise SpcError(f"--memory-config {block}={forced.spell()}: only convolutions and max pools take a "
                               "memory configuration")
            res = self._passive_resident(n, src, target)
            place_use = L1Use(0, res.bytes, 0, res.cores or target.cores, 0, res.bytes > 0)
            return Choice(MemoryConfig(), try_place(ledger, n.output.name, place_use), 0.0), res
        if dram_only:
            cands = [m for m in cands if m.path == "dram"]
        copy_out = w.n * w.h * w.w * w.c * 2 / target.dram_bytes_per_s if src.bytes else 0.0
        tried: list[Choice] = []
        fitting: dict[str, int] = {}
        for mem in [forced] if forced else cands:
            dram = mem.path == "dram"
            if dram and fitting.get(mem.slice_dim, 0) >= KEEP_FITTING:
                continue  # more slices only add launches and halo reads once these fit
            use = size(mem)
            placed = try_place(moved if dram else ledger, n.output.name, use)
            tried.append(Choice(mem, placed, cost(mem, use) + (copy_out if dram else 0.0)))
            if dram and tried[-1].short == 0:
                fitting[mem.slice_dim] = fitting.get(mem.slice_dim, 0) + 1
        choice = self._pick(block, what, forced, tried, target, ctx)
        use = choice.placed.use
        if not use.output_in_l1:
            return choice, Resident(0, None, n.op.name == "spc.Conv2d")
        return choice, Resident(use.output, use.cores, n.op.name == "spc.Conv2d")

    @staticmethod
    def _pick(block: str, what: str, forced: MemoryConfig | None, tried: list[Choice], target: Target,
              ctx: PassContext) -> Choice:
        ok = [c for c in tried if c.short == 0]
        if forced:
            if not ok:
                ctx.note(f"memory: {block} forced to {forced.spell()}, which the L1 model says does not fit "
                         f"({tried[0].short} B short per core on {target.name}); ttnn will refuse it")
            return tried[0]
        if not ok:
            best = min(tried, key=lambda c: c.short)
            u = best.placed.use
            raise SpcError(
                f"block {block} ({what}): no memory configuration fits in L1 on {target.name} "
                f"({target.l1_budget_bytes} B per core for buffers and tensors); nearest: {best.mem.spell()} needs "
                f"{u.cb} B of circular buffers + {u.l1} B of its tensors + {best.placed.live_before} B already "
                f"in L1 ({best.short} B short). Use a smaller input or another target, or force a configuration "
                "with --memory-config")
        return min(ok, key=lambda c: c.seconds)

    @staticmethod
    def _passive_resident(n: Node, src: Resident, target: Target) -> Resident:
        """Other ops keep their input's placement; the score map ends interleaved in DRAM."""
        if not src.bytes or n.op.name == "spc.ScoreFold":
            return DRAM_RM
        s = n.output.type.static_shape
        c = int(s[1]) if len(s) == 4 else 1
        cores = src.cores or target.cores
        return Resident(tensor_per_core(n.output.type.numel, c, "bfloat16", cores), cores, True)
