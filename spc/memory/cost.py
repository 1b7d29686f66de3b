"""What a call costs in device time: the ranking behind the memory planner, and the plan's
predicted time (the same function for both).

A roofline per configuration, on the target (targets.py):

* compute: the conv's multiply-adds at its fidelity (phases) on the cores its sharding uses,
  counting the rows ttnn pads each core's shard to;
* DRAM: bytes a configuration moves through DRAM at the measured bandwidth — the input read
  and output written by the DRAM path, plus the halo rows each slice reads twice;
* fixed costs (assumed, not measured here: no hardware): each ttnn program launched — a DRAM
  slice is four (slice read, halo, conv, slice write) — and each activation block a core runs.

Convolutions and max pools are costed by their configuration; the other calls move their bytes
through DRAM, or L1 when their input is there (memory/residency.py says where each tensor
lives), plus one launch each. Comparisons between configurations of one block are what it is
for; the absolute figure is an estimate (docs/memory.md says how far to trust it).
"""

from __future__ import annotations

from spc.memory.call_specs import Resident, conv_spec, op_memory, pool_spec
from spc.memory.l1 import ConvSpec, L1Use, Window, act_block_tiles, round_up, slice_windows
from spc.plan.program import TtOp, numel
from spc.ttnn.formats import MathFidelity
from spc.ttnn.memory import BlockMemory, BufferType
from spc.ttnn.targets import Target

PROGRAM_S = 4e-6  # one ttnn program under trace: dispatch and launch (assumed)
ACT_BLOCK_S = 0.3e-6  # one activation block on a core: its reader/writer handshake (assumed)
PROGRAMS_PER_SLICE = 4


def _fixed(mem: BlockMemory) -> float:
    return PROGRAM_S * (PROGRAMS_PER_SLICE * mem.slices if mem.path is BufferType.DRAM else 2)


def _dram_seconds(w: Window, mem: BlockMemory, in_bytes_per_value: int, out_values: int, target: Target,
                  input_in_dram: bool) -> float:
    """DRAM traffic: each slice reads its input rows (halo rows twice), writes its output."""
    if mem.path is BufferType.DRAM:
        windows = slice_windows(w, mem.slicing.type.dim, mem.slices)
        read = sum(s.n * s.h * s.w * s.c for s in windows) * in_bytes_per_value
        return (read + out_values * 2) / target.dram_bytes_per_s
    return w.n * w.h * w.w * w.c * in_bytes_per_value / target.dram_bytes_per_s if input_in_dram else 0.0


def pool_seconds(w: Window, mem: BlockMemory, use: L1Use, target: Target, input_in_dram: bool,
                 output_to_dram: bool) -> float:
    """A max pool is data movement: its DRAM traffic, or its L1 reads at one value per core-cycle."""
    n_slices = mem.slices if mem.path is BufferType.DRAM else 1
    window = w.kernel[0] * w.kernel[1]
    local = use.shard_rows * round_up(w.c, 16) * window * n_slices / (32 * target.clock_hz)
    out_values = w.out_nhw * w.c if output_to_dram and mem.path is BufferType.L1 else 0
    dram = _dram_seconds(w, mem, 2, w.out_nhw * w.c, target, input_in_dram) + out_values * 2 / target.dram_bytes_per_s
    return max(local, dram) + _fixed(mem)


def conv_seconds(spec: ConvSpec, mem: BlockMemory, use: L1Use, fidelity: MathFidelity, target: Target,
                 input_in_dram: bool) -> float:
    w = spec.window
    kh, kw = w.kernel
    per_row = 2.0 * round_up(w.c, 8) * kh * kw * round_up(spec.cout, 32) / spec.groups
    n_slices = mem.slices if mem.path is BufferType.DRAM else 1
    per_core_s = target.flop_per_cycle_per_core * target.clock_hz
    compute = per_row * use.shard_rows * n_slices * fidelity.phases / per_core_s
    dram = _dram_seconds(w, mem, 2, w.out_nhw * spec.cout, target, input_in_dram)
    mt = use.shard_rows // 32
    blocks = mt // act_block_tiles(mt, mem.act_block_h) if mt else 1
    return max(compute, dram) + _fixed(mem) + ACT_BLOCK_S * blocks * n_slices


L1_BYTES_PER_CYCLE = 64  # per core, read or write (NoC-free, local)


def call_seconds(op: TtOp, src: Resident, use: L1Use, read_bytes: float, target: Target) -> float:
    """One call's predicted time: ``src`` is where its first input lives, ``use`` its L1 model,
    ``read_bytes`` what it reads."""
    if op.op == "ttnn.conv2d":
        fidelity = op.args["compute_config"].math_fidelity
        return conv_seconds(conv_spec(op, src), op_memory(op), use, fidelity, target, not src.bytes)
    if op.op == "ttnn.max_pool2d":
        spec = pool_spec(op, src)
        return pool_seconds(spec.window, op_memory(op), use, target, not src.bytes, not spec.output_in_l1)
    moved = read_bytes + output_bytes(op)
    if src.bytes:
        return moved / (L1_BYTES_PER_CYCLE * (src.cores or target.cores) * target.clock_hz) + PROGRAM_S
    return moved / target.dram_bytes_per_s + PROGRAM_S


def output_bytes(op: TtOp) -> float:
    return numel(op.shape) * op.dtype.bytes_per_value
