"""Which tensors one core's L1 holds while each call runs, and whether the call fits.

:func:`place` replays one op's allocations on a :class:`~spc.memory.ledger.Ledger` in ttnn's
order (staged input, halo, output, then the program's circular buffers against the lowest live
tensor) and frees what is dead after it. :class:`Walk` does that call by call over a lowered
program (the planner steps it while it chooses; :func:`walk` runs it to the end for the fit
check, the predicted time and `spc inspect`).
"""

from __future__ import annotations

from msgspec import Struct

from spc.memory.call_specs import DRAM_RM, Resident, conv_spec, op_memory, pool_spec, writes_dram
from spc.memory.cost import call_seconds, output_bytes
from spc.memory.l1 import L1Use, conv_l1, pool_l1, tensor_per_core
from spc.memory.ledger import Ledger
from spc.memory.throughput import device_seconds
from spc.plan.program import Program, TtOp, numel
from spc.ttnn.calls import CALLS
from spc.ttnn.configs import PageLayout
from spc.ttnn.memory import BlockMemory
from spc.ttnn.targets import Target


class Placed(Struct, frozen=True):
    """One call placed on a core's L1: its use, what was live, the room to spare."""

    use: L1Use
    live_before: int  # bytes of other tensors on the core while the op runs
    headroom: int  # bytes to spare at the tightest moment; negative: ttnn refuses the op

    @property
    def fits(self) -> bool:
        return self.headroom >= 0

    @property
    def total(self) -> int:
        return self.live_before + self.use.peak


def place(ledger: Ledger, name: str, use: L1Use, dead: list[str] = ()) -> Placed:  # type: ignore[assignment]
    """Two moments count: the halo (staged input + halo output, whose own buffers are small) and
    the op's program (halo + output + its circular buffers against the lowest live tensor)."""
    live = ledger.in_use()
    missing = 0  # bytes no hole could hold: they come off the room left for circular buffers
    missing += 0 if ledger.alloc(name + "/staged", use.staged_input) else use.staged_input
    missing += 0 if ledger.alloc(name + "/halo", use.halo) else use.halo
    at_halo = ledger.cb_room() - missing
    ledger.free(name + "/staged")
    if use.halo_moves and use.staged_input and name + "/halo" in ledger.blocks:
        # reallocate_halo_output: ttnn moves the halo into the staged input's freed hole (best fit,
        # from the top), and the output then goes below it, not into that hole
        ledger.free(name + "/halo")
        ledger.alloc(name + "/halo", use.halo)
    missing = 0 if name + "/halo" in ledger.blocks else use.halo
    missing += 0 if ledger.alloc(name, use.output) else use.output
    at_program = ledger.cb_room() - missing - use.cb
    ledger.free(name + "/halo")
    if not use.output_in_l1:
        ledger.free(name)
    for d in dead:
        ledger.free(d)
    return Placed(use, live, min(at_halo, at_program))


def block_memory(program: Program) -> dict[str, BlockMemory]:
    """Each conv or pool block's configuration, as its first call runs."""
    out: dict[str, BlockMemory] = {}
    for op in program.device_ops:
        if op.op in ("ttnn.conv2d", "ttnn.max_pool2d") and op.block not in out:
            out[op.block] = op_memory(op)
    return out


def op_use(op: TtOp, src: Resident, target: Target) -> tuple[L1Use, Resident]:
    """The L1 model of one ttnn call, and where its output ends up."""
    if op.op == "ttnn.conv2d":
        use = conv_l1(conv_spec(op, src), op_memory(op), target.cores, src.cores if src.bytes else None,
                      input_in_dram=not src.bytes)
        return use, Resident(use.output, use.cores, True, op.dtype) if use.output_in_l1 else \
            Resident(0, None, True, op.dtype)
    if op.op == "ttnn.max_pool2d":
        use = pool_l1(pool_spec(op, src), op_memory(op), target.cores, src.cores)
        return use, Resident(use.output, use.cores, False, op.dtype) if use.output_in_l1 else \
            Resident(0, None, False, op.dtype)
    # element-wise, reductions, reshapes: stay where their input is
    in_l1 = src.bytes > 0 and not writes_dram(op)
    cb = CALLS[op.op].buffers(op.args, len(op.inputs))
    cores = src.cores or target.cores
    size = tensor_per_core(numel(op.shape), int(op.shape[-1]) if op.shape else 1, op.dtype, cores) if in_l1 else 0
    # a conversion makes the layout it names; everything else keeps its input's (a pool after a
    # to_layout(TILE) reads 32 channels per stick: 3,355 x 64 B of halo for the NMS of one image
    # sliced out of a batch at 240x320, measured on the mock p150)
    tiled = op.args["layout"] is PageLayout.TILE if op.op == "ttnn.to_layout" else src.tiled
    return L1Use(cb, size, 0, cores, 0, in_l1), Resident(size, src.cores if in_l1 else None, tiled, op.dtype)


class CallRecord(Struct, frozen=True):
    """One call as the device runs it: where its input was, its L1 at its peak, its time."""

    op: TtOp
    source: Resident
    placed: Placed
    seconds: float

    @property
    def values(self) -> int:
        return numel(self.op.shape)


class Walk:
    """Calls placed in order on one core's ledger, tensors freed after their last reader
    (Program.frees): the one model of a program's L1 and time, which the planner drives call by
    call, and which fit checking, the predicted time and `spc inspect` read."""

    def __init__(self, program: Program, target: Target, keep: set[str] | None = None,
                 frees: list[list[str]] | None = None) -> None:
        self.program, self.target = program, target
        self.ledger = Ledger(target)
        self.where: dict[str, Resident] = {t.name: Resident(0, None, False, program.input_format(t.name))
                                           for t in program.device_inputs}
        self.sizes: dict[str, float] = {t.name: numel(t.device_shape) * program.input_format(t.name).bytes_per_value
                                        for t in program.device_inputs}
        # ``frees``: program.frees(keep) when the caller knows it (the planner's trials share it)
        self.frees = frees if frees is not None else \
            program.frees(keep if keep is not None else {t.name for t in program.device_outputs})
        self.records: list[CallRecord] = []

    def fork(self) -> Walk:
        """A copy to try calls on (the planner's trials): its own ledger, homes and records."""
        other = Walk.__new__(Walk)
        other.program, other.target, other.frees = self.program, self.target, self.frees
        other.ledger, other.where, other.sizes = self.ledger.copy(), dict(self.where), dict(self.sizes)
        other.records = []
        return other

    def source(self, op: TtOp) -> Resident:
        return self.where.get(op.inputs[0], DRAM_RM) if op.inputs else DRAM_RM

    def step(self, op: TtOp, dead: list[str]) -> CallRecord:
        src = self.source(op)
        use, self.where[op.output] = op_use(op, src, self.target)
        seconds = call_seconds(op, src, use, sum(self.sizes.get(i, 0.0) for i in op.inputs), self.target)
        self.sizes[op.output] = output_bytes(op)
        record = CallRecord(op, src, place(self.ledger, op.output, use, dead), seconds)
        for name in dead:
            self.where.pop(name, None)
        self.records.append(record)
        return record

    def run(self) -> list[CallRecord]:
        for op, dead in zip(self.program.device_ops, self.frees):
            self.step(op, dead)
        return self.records


def walk(program: Program, target: Target, keep: set[str] | None = None) -> list[CallRecord]:
    """Every call of ``program``, placed in order (:class:`Walk`)."""
    return Walk(program, target, keep).run()


def predicted_ms(records: list[CallRecord]) -> float:
    """The run's predicted device time (memory/throughput.py: the model, calibrated)."""
    return 1e3 * device_seconds(sum(r.seconds for r in records))
