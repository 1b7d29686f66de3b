"""The memory planner (choose-memory-config): per conv and pool block, the cheapest memory configuration that fits.

It works on the lowered program, as tt-mlir's optimizer works on TTNN ops: the lowering emits
every ``ttnn.conv2d`` and ``ttnn.max_pool2d`` in the default configuration (L1, ttnn's activation
blocks); the planner walks the calls in order on one core's ledger (memory/residency.py: the same
walk the fit check, the predicted time and `spc inspect` read) and, at each block's first conv or
pool, tries its candidates:

* L1 with ttnn's or a 16/8/4/2/1-tile activation block (convs), or DRAM slicing by output rows or
  columns in 1..64 slices (memory/l1.py sizes each, memory/cost.py costs it);
* a candidate fits when every conv or pool call of the block keeps MARGIN bytes free on the
  busiest core, the calls between them placed as they run; the cheapest fitting one is kept.
  A trial rewrites and walks only that window, from the block's first conv or pool to its last:
  the calls after it cannot change whether the block fits, only which tensors the window frees
  (those they read are kept), so the program is rewritten whole once per block, for the choice.

Choosing one is rewriting the block's calls (:func:`apply`)::

    %relu: ttnn.conv2d(%relu_a) {slice_config = l1_full, ...}
    ->  %relu_a/dram = ttnn.to_memory_config(%relu_a) {memory_config = DRAM_INTERLEAVED}
        %relu: ttnn.conv2d(%relu_a/dram) {slice_config = dram_width x 3, ...}

(the DRAM path reads its input from DRAM: conv2d.cpp "Conv DRAM expects the input tensor to be in
DRAM"; a DRAM-sliced pool that writes an interleaved [N, H, W, C] result gets a reshape back to
[1, 1, N*H*W, C] for the element-wise calls that read it: mock p150, a 143 GB broadcast otherwise).

Choosing block by block is greedy: when a later block finds nothing that fits, the largest output
still in L1 goes to DRAM and the walk starts again (with a note). ``--memory-config`` forces a
block's choice; a forced choice the model says does not fit is kept, with a note, so that ttnn's
verdict on it can be seen. When nothing fits: one error naming the block, its sizes and the
nearest miss. After the last block, every call must fit (a forced misfit ends the check: ttnn
stops there).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from msgspec import Struct
from msgspec.structs import replace

from spc.errors import SpcError
from spc.memory.call_specs import conv_spec, pool_spec, result_in_dram
from spc.memory.l1 import Window
from spc.memory.residency import CallRecord, Placed, Walk
from spc.plan.program import Program, TtOp
from spc.ttnn.formats import DataFormat
from spc.ttnn.memory import DRAM_INTERLEAVED, BlockMemory, BufferType, MemoryOverrides
from spc.ttnn.targets import Target

ACT_BLOCKS = (0, 16, 8, 4, 2, 1)  # tiles; 0 = ttnn's default
MAX_SLICES = 64
KEEP_FITTING = 4  # per slicing direction, how many fitting slice counts are ranked
# bytes per core kept free beyond the model: small buffers it does not size (allocator alignment,
# the halo's own buffers)
MARGIN = 16384
CONFIGURABLE = ("ttnn.conv2d", "ttnn.max_pool2d")


def candidates(w: Window, conv: bool) -> list[BlockMemory]:
    out = [BlockMemory(act_block_h=abh) for abh in (ACT_BLOCKS if conv else (0,))]
    for dim, size in (("height", w.out_h), ("width", -(-w.out_w // 32))):
        out += [BlockMemory.dram(dim, n) for n in range(1, min(MAX_SLICES, size) + 1)]
    return out


class Choice(Struct):
    """A block's memory configuration as tried: its tightest call and its predicted time."""

    mem: BlockMemory
    placed: Placed  # the block's tightest conv or pool call
    seconds: float

    @property
    def short(self) -> int:
        """Bytes per core missing for this choice to fit with the margin."""
        return max(0, MARGIN - self.placed.headroom)


class _Window(Struct):
    """What every trial of one block shares: the calls from its first conv or pool (``start``) to
    its last (``stop`` - 1), each tensor's home before them, the names the program makes, the
    names the calls after the window read, and the names no call frees (outputs, constants)."""

    start: int
    stop: int
    homes: Callable[[], Homes]
    made: Callable[[], set[str]]
    later: set[str]
    kept: set[str]


class _NoFit(Exception):
    def __init__(self, error: SpcError, holders: list[str]) -> None:
        super().__init__(str(error))
        self.error, self.holders = error, holders


# -- rewriting a block's calls --------------------------------------------------------------------
Homes = dict[str, tuple[bool, DataFormat, list[int]]]


def _home(homes: Homes, ops: list[TtOp]) -> None:
    """Add where ``ops`` leave their results (the conv/pool configurations as they are in ``ops``)."""
    for op in ops:
        dram = result_in_dram(op, homes[op.inputs[0]][0] if op.inputs and op.inputs[0] in homes else True)
        homes[op.output] = (dram, op.dtype, list(op.shape))
        for extra, dtype in zip(op.extra_outputs, op.extra_dtypes):
            homes[extra] = (True, dtype, list(op.shape))


def _homes(ops: list[TtOp], program: Program) -> Homes:
    """Each tensor: (whether it lives in DRAM, its format, its device shape), as its producer
    leaves it (the conv/pool configurations as they are in ``ops``)."""
    homes: Homes = {t.name: (True, program.input_format(t.name), list(t.device_shape)) for t in program.device_inputs}
    for c in program.constants:
        homes[c.name] = (True, c.dtype, list(c.device_shape))
    _home(homes, ops)
    return homes


def _reading(op: TtOp, renamed: dict[str, str]) -> TtOp:
    """``op`` reading the renamed tensors; a fused kernel's composed calls too (plan/verify.py holds
    them to what the kernel composes from its inputs)."""
    op = replace(op, inputs=[renamed.get(i, i) for i in op.inputs])
    if op.op == "spc.kernel":
        steps = [dict(step, inputs=[renamed.get(i, i) for i in step["inputs"]]) for step in op.args["composed"]]
        op = replace(op, args=dict(op.args, composed=steps))
    return op


def _configured(op: TtOp, mem: BlockMemory) -> TtOp:
    args = dict(op.args, slice_config=mem.slicing)
    if op.op == "ttnn.conv2d":
        args["conv_config"] = args["conv_config"].with_act_block_tiles(mem.act_block_h)
    return replace(op, args=args)


def _rewrite(ops: list[TtOp], start: int, stop: int, block: str, mem: BlockMemory, homes: Callable[[], Homes],
             made: Callable[[], set[str]], renamed: dict[str, str]) -> list[TtOp]:
    """``ops[start:stop]`` with ``block``'s convs and pools in ``mem``. ``homes()``: each tensor's
    home as ops[:start] leave it (asked only by a DRAM path, and updated here as calls are added);
    ``made()``: every name the program makes (a copy's name must be new); ``renamed``: the reads
    that go to another name from here on (a DRAM-sliced pool's reshaped result), filled in."""
    out: list[TtOp] = []
    known: Homes | None = None
    seen = 0  # the calls of ``out`` already in ``known``
    names: set[str] | None = None
    for op in ops[start:stop]:
        if renamed and any(i in renamed for i in op.inputs):
            op = _reading(op, renamed)
        if op.block != block or op.op not in CONFIGURABLE:
            out.append(op)
            continue
        op = _configured(op, mem)
        dram_path = mem.path is BufferType.DRAM
        writes_dram = op.args.get("memory_config") is not None
        if dram_path and not writes_dram:
            x = op.inputs[0]
            known = homes() if known is None else known
            _home(known, out[seen:])
            seen = len(out)
            in_dram, dtype, shape = known[x]
            if not in_dram:
                # a copy of its own, also when another block copied the same tensor: reading that
                # copy would end the tensor's life at an earlier call, which the walk has passed
                names = made() if names is None else names
                moved, k = x + "/dram", 0
                while moved in names:
                    k += 1
                    moved = f"{x}/dram_{k}"
                out.append(TtOp("ttnn.to_memory_config", [x], moved, {"memory_config": DRAM_INTERLEAVED},
                                source=op.source, dtype=dtype, block=op.block, shape=shape))
                names.add(moved)
                op = replace(op, inputs=[moved, *op.inputs[1:]])
        out.append(op)
        if dram_path and writes_dram:
            flat = op.output + "/flat"
            out.append(TtOp("ttnn.reshape", [op.output], flat, {"shape": list(op.shape)}, source=op.source,
                            dtype=op.dtype, block=op.block, shape=list(op.shape)))
            renamed[op.output] = flat
    return out


def apply(ops: list[TtOp], program: Program, block: str, mem: BlockMemory) -> list[TtOp]:
    """The calls with ``block``'s convs and pools in ``mem``: their slicing and activation block,
    a copy of an L1 input to DRAM before a DRAM path, a reshape after a DRAM-sliced pool that
    writes to DRAM for the element-wise calls."""
    # the calls before the block's first conv or pool are kept as they are (nothing is renamed yet)
    first = next((k for k, op in enumerate(ops) if op.block == block and op.op in CONFIGURABLE), len(ops))
    return ops[:first] + _rewrite(ops, first, len(ops), block, mem, lambda: _homes(ops[:first], program),
                                  lambda: {o.output for o in ops}, {})


# -- choosing ----------------------------------------------------------------------------------
def _describe(op: TtOp, walk: Walk) -> tuple[Window, bool, str]:
    src = walk.source(op)
    if op.op == "ttnn.conv2d":
        spec = conv_spec(op, src)
        w = spec.window
        return w, not spec.is_matmul, f"conv {w.c}->{spec.cout} {w.kernel[0]}x{w.kernel[1]} on {w.h}x{w.w}"
    w = pool_spec(op, src).window
    return w, False, f"{w.kernel[0]}x{w.kernel[1]} max pool on {w.h}x{w.w}x{w.c}"


class Planner:
    def __init__(self, program: Program, target: Target, overrides: MemoryOverrides) -> None:
        self.program, self.target, self.overrides = program, target, overrides
        self.notes: list[str] = []
        self.stats: dict[str, int] = {}
        self._frees_seen: dict[tuple[tuple[str, ...], ...], list[list[str]]] = {}

    def run(self) -> list[CallRecord]:
        blocks = {op.block or op.source for op in self.program.device_ops}
        configurable = {op.block for op in self.program.device_ops if op.op in CONFIGURABLE}
        for block in sorted(blocks - configurable):
            forced = self.overrides.for_block(block)
            if forced is not None:
                raise SpcError(f"--memory-config {block}={forced.spell()}: only convolutions and max pools take a "
                               "memory configuration")
        to_dram: set[str] = set()  # blocks whose output must go to DRAM to make room later
        original = list(self.program.device_ops)
        while True:
            self.program.device_ops = list(original)
            try:
                records = self._walk(to_dram)
            except _NoFit as miss:
                # choosing block by block is greedy: a big L1 output can starve a later block.
                # Send the biggest such output to DRAM and choose again.
                if not miss.holders:
                    raise miss.error from None
                to_dram.add(miss.holders[0])
                continue
            # a call no block configures (an element-wise op on a batch's map) may find L1 full of
            # what blocks left there: the biggest such output goes to DRAM, as above; with none,
            # check_fits says which call does not fit
            holders = self._holding(records, to_dram)
            if not holders:
                break
            to_dram.add(holders[0])
        if to_dram:
            self.notes.append(f"memory: outputs of {', '.join(sorted(to_dram))} go to DRAM to leave L1 for later "
                              "blocks")
        for pattern in self.overrides.unused(blocks):
            self.notes.append(f"--memory-config {pattern}: matches no device block")
        return records

    def _walk(self, to_dram: set[str]) -> list[CallRecord]:
        ops = list(self.program.device_ops)
        decided: set[str] = set()
        owner: dict[str, str] = {}  # an L1 tensor -> the block that chose to leave it there
        self.stats = {}
        walk = Walk(self._with(ops), self.target)
        i = 0
        while i < len(ops):
            op = ops[i]
            if op.op in CONFIGURABLE and op.block not in decided:
                decided.add(op.block)
                try:
                    choice = self._choose(ops, i, walk, op.block in to_dram)
                except SpcError as exc:
                    holders = sorted(((walk.ledger.blocks[t][1], b) for t, b in owner.items()
                                      if t in walk.ledger.blocks and b not in to_dram), reverse=True)
                    raise _NoFit(exc, [b for _, b in holders]) from None
                ops = apply(ops, self.program, op.block, choice.mem)
                walk = self._resume(walk, ops)
                self.stats[choice.mem.path.value] = self.stats.get(choice.mem.path.value, 0) + 1
            record = walk.step(ops[i], walk.frees[i])
            if ops[i].op in CONFIGURABLE and record.placed.use.output_in_l1 and record.placed.use.output:
                owner[ops[i].output] = ops[i].block
            i += 1
        self.program.device_ops = ops
        return walk.records

    def _holding(self, records: list[CallRecord], to_dram: set[str]) -> list[str]:
        """At the first call that does not fit (not one the user forced), the blocks whose outputs
        are in L1 then, biggest first."""
        i = next((k for k, r in enumerate(records) if not r.placed.fits
                  and self.overrides.for_block(r.op.block or r.op.source) is None), None)
        if i is None:
            return []
        last: dict[str, int] = {}
        for k, r in enumerate(records):
            for name in r.op.inputs:
                last[name] = k
        held = [(records[k].placed.use.output, records[k].op.block) for k in range(i)
                if records[k].op.op in CONFIGURABLE and records[k].placed.use.output_in_l1
                and records[k].placed.use.output and last.get(records[k].op.output, -1) >= i
                and records[k].op.block not in to_dram]
        return [block for _, block in sorted(held, reverse=True)]

    def _with(self, ops: list[TtOp]) -> Program:
        return replace(self.program, device_ops=ops)

    def _frees(self, ops: list[TtOp]) -> list[list[str]]:
        """Program.frees for these calls; the trials of a block mostly share their calls' inputs."""
        key = tuple(tuple(op.inputs) for op in ops)
        if key not in self._frees_seen:
            self._frees_seen[key] = self._with(ops).frees({t.name for t in self.program.device_outputs})
        return self._frees_seen[key]

    def _resume(self, walk: Walk, ops: list[TtOp]) -> Walk:
        """The walk so far, over the rewritten calls (the calls before the block are unchanged)."""
        again = Walk(self._with(ops), self.target, frees=self._frees(ops))
        again.ledger, again.where, again.sizes, again.records = walk.ledger, walk.where, walk.sizes, walk.records
        return again

    def _try(self, ops: list[TtOp], walk: Walk, block: str, mem: BlockMemory, window: _Window) -> Choice:
        """The block's calls under ``mem``, placed on a copy of the walk: only the window from its
        first conv or pool to its last is rewritten and walked (what follows cannot change whether
        the block fits, only which tensors the window frees: those read after it are kept)."""
        renamed: dict[str, str] = {}
        calls = _rewrite(ops, window.start, window.stop, block, mem, window.homes, window.made, renamed)
        later = window.later if not renamed else {renamed.get(n, n) for n in window.later}
        last_read: dict[str, int] = {}
        for j, call in enumerate(calls):
            for name in call.inputs:
                last_read[name] = j
        frees: list[list[str]] = [[] for _ in calls]
        for name, j in last_read.items():
            if name not in later and name not in window.kept:
                frees[j].append(name)
        end = max(j for j, call in enumerate(calls) if call.block == block and call.op in CONFIGURABLE) + 1
        trial = walk.fork()
        worst: Placed | None = None
        seconds = 0.0
        for call, dead in zip(calls[:end], frees):
            record = trial.step(call, dead)
            if call.block == block and call.op in CONFIGURABLE:
                seconds += record.seconds
                if worst is None or record.placed.headroom < worst.headroom:
                    worst = record.placed
        assert worst is not None
        return Choice(mem, worst, seconds)

    def _window(self, ops: list[TtOp], i: int, block: str) -> _Window:
        stop = max(j for j in range(i, len(ops)) if ops[j].block == block and ops[j].op in CONFIGURABLE) + 1
        homes = functools.cache(lambda: _homes(ops[:i], self.program))
        made = functools.cache(lambda: {op.output for op in ops})
        # a trial adds to both: each gets its own copy
        return _Window(i, stop, lambda: dict(homes()), lambda: set(made()),
                       {name for op in ops[stop:] for name in op.inputs},
                       {t.name for t in self.program.device_outputs} | {c.name for c in self.program.constants})

    def _choose(self, ops: list[TtOp], i: int, walk: Walk, dram_only: bool) -> Choice:
        op = ops[i]
        block = op.block
        forced = self.overrides.for_block(block)
        w, conv, what = _describe(op, walk)
        src = walk.source(op)
        cands = candidates(w, conv)
        if dram_only:
            cands = [m for m in cands if m.path is BufferType.DRAM]
        # the DRAM path first copies an L1 input out: ranked at the bytes it moves
        copy_out = w.n * w.h * w.w * w.c * 2 / self.target.dram_bytes_per_s if src.bytes else 0.0
        window = self._window(ops, i, block)
        tried: list[Choice] = []
        fitting: dict[str, int] = {}
        for mem in [forced] if forced else cands:
            dram = mem.path is BufferType.DRAM
            dim = mem.slicing.type.dim
            if dram and fitting.get(dim, 0) >= KEEP_FITTING:
                continue  # more slices only add launches and halo reads once these fit
            choice = self._try(ops, walk, block, mem, window)
            tried.append(replace(choice, seconds=choice.seconds + (copy_out if dram else 0.0)))
            if dram and tried[-1].short == 0:
                fitting[dim] = fitting.get(dim, 0) + 1
        return self._pick(block, what, forced, tried)

    def _pick(self, block: str, what: str, forced: BlockMemory | None, tried: list[Choice]) -> Choice:
        ok = [c for c in tried if c.short == 0]
        t = self.target
        if forced:
            if not ok:
                self.notes.append(f"memory: {block} forced to {forced.spell()}, which the L1 model says does not fit "
                                  f"({tried[0].short} B short per core on {t.name}); ttnn will refuse it")
            return tried[0]
        if not ok:
            best = min(tried, key=lambda c: c.short)
            u = best.placed.use
            raise SpcError(
                f"block {block} ({what}): no memory configuration fits in L1 on {t.name} "
                f"({t.l1_budget_bytes} B per core for buffers and tensors); nearest: {best.mem.spell()} needs "
                f"{u.cb} B of circular buffers + {u.l1} B of its tensors + {best.placed.live_before} B already "
                f"in L1 ({best.short} B short). Use a smaller input or another target, or force a configuration "
                "with --memory-config")
        return min(ok, key=lambda c: c.seconds)


def check_fits(records: list[CallRecord], target: Target, src: str, overrides: MemoryOverrides) -> None:
    """Every call fits one core's L1 by the model, including the calls no block configured
    (element-wise, the keypoint read-back). A block forced with --memory-config is the user's call
    (the planner has said so in a note): ttnn stops there, what follows cannot be judged."""
    for i, r in enumerate(records):
        op, placed = r.op, r.placed
        if not placed.fits and overrides.for_block(op.block or op.source) is not None:
            return
        if not placed.fits:
            hint = ("try --dense or a smaller --keypoint-capacity" if op.source == "keypoints"
                    else "force another configuration of a block before it with --memory-config, or use a "
                         "smaller input")
            raise SpcError(f"{src}: call {i} ({op.op}, block {op.block or op.source}) needs {placed.use.cb} B of "
                           f"buffers beside {placed.live_before} B of tensors on one core, {-placed.headroom} B more "
                           f"than {target.name} has; {hint}")


def plan_memory(program: Program, target: Target, overrides: MemoryOverrides | None = None) -> Planner:
    """Choose every block's configuration, rewriting ``program``'s calls; the planner keeps the
    final walk's records (``records``), its notes and stats."""
    planner = Planner(program, target, overrides or MemoryOverrides())
    planner.records = planner.run()
    return planner
