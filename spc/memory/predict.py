"""Predicted device time of a lowered program, call by call, on its target.

Convolutions and max pools are costed as the memory planner costs their configuration
(memory/cost.py: compute at the block's fidelity on the cores its sharding uses, DRAM traffic of
its path and slices, launch costs); the other calls move their bytes through DRAM, or L1 when
their input is there (memory/residency.py says where each tensor lives), plus one launch each.
Good for ranking plans; the absolute figure is an estimate (docs/memory.md compares it with the
hand port's measured time).
"""

from __future__ import annotations

from dataclasses import dataclass

from spc.memory.cost import PROGRAM_S, conv_seconds, pool_seconds
from spc.memory.residency import DRAM_RM, Resident, conv_spec, op_memory, op_use, pool_spec
from spc.plan.program import Program, TtOp, numel
from spc.ttnn.targets import TARGETS, Target

BYTES_PER_VALUE = {"float32": 4.0, "bfloat16": 2.0, "bfloat8_b": 1088 / 1024, "bfloat4_b": 576 / 1024,
                   "uint32": 4.0, "uint16": 2.0}
L1_BYTES_PER_CYCLE = 64  # per core, read or write (NoC-free, local)


@dataclass
class OpCost:
    op: TtOp
    seconds: float
    values: int  # elements in the output


def _other_seconds(op: TtOp, read: float, src: Resident, target: Target) -> float:
    moved = read + numel(op.shape) * BYTES_PER_VALUE[op.dtype]
    if src.bytes:
        return moved / (L1_BYTES_PER_CYCLE * (src.cores or target.cores) * target.clock_hz) + PROGRAM_S
    return moved / target.dram_bytes_per_s + PROGRAM_S


def estimate(program: Program, weights: dict, target: Target = TARGETS["p150"]) -> list[OpCost]:
    where: dict[str, Resident] = {t.name: DRAM_RM for t in program.device_inputs}
    sizes = {t.name: numel(t.device_shape) * 2.0 for t in program.device_inputs}
    costs = []
    for op in program.device_ops:
        src = where.get(op.inputs[0], DRAM_RM) if op.inputs else DRAM_RM
        use, where[op.output] = op_use(op, src, target)
        mem = op_memory(op.args)
        if op.op == "ttnn.conv2d":
            fidelity = op.args["compute_config"]["math_fidelity"]
            seconds = conv_seconds(conv_spec(op, src.tiled), mem, use, fidelity, target, not src.bytes)
        elif op.op == "ttnn.max_pool2d":
            spec = pool_spec(op, src)
            seconds = pool_seconds(spec.window, mem, use, target, not src.bytes, not spec.output_in_l1)
        else:
            seconds = _other_seconds(op, sum(sizes.get(i, 0.0) for i in op.inputs), src, target)
        sizes[op.output] = numel(op.shape) * BYTES_PER_VALUE[op.dtype]
        costs.append(OpCost(op, seconds, numel(op.shape)))
    return costs


def predicted_ms(program: Program, weights: dict, target: Target = TARGETS["p150"]) -> float:
    return 1e3 * sum(c.seconds for c in estimate(program, weights, target))
