"""A first predicted device time: compute at the block's fidelity plus bytes moved.

Placeholder until the memory planner's cost model (which knows L1 residency, sharding and
reshards). It is a roofline on the target (targets.py): its matrix-engine FLOPs per fidelity
phase, its measured DRAM bandwidth, and every tensor read and written once from DRAM. Good for
ranking precision choices, which change the phase count and the bytes; not for absolute
milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spc.lowering.program import Program, TtOp
from spc.targets import TARGETS, Target

BYTES_PER_VALUE = {"float32": 4.0, "bfloat16": 2.0, "bfloat8_b": 1088 / 1024, "bfloat4_b": 576 / 1024}
PHASES = {"LoFi": 1, "HiFi2": 2, "HiFi3": 3, "HiFi4": 4}


@dataclass
class OpCost:
    op: TtOp
    flops: float
    bytes: float
    target: Target
    values: int  # elements in the output

    @property
    def seconds(self) -> float:
        a = self.op.args
        phases = PHASES[a["compute_config"]["math_fidelity"]] if "compute_config" in a else 1
        return self.flops * phases / self.target.peak_flops_per_phase + self.bytes / self.target.dram_bytes_per_s


def numel(shape: list[int]) -> int:
    return math.prod(int(d) for d in shape)


def estimate(program: Program, weights: dict, target: Target = TARGETS["p150"]) -> list[OpCost]:
    formats = {t.name: "bfloat16" for t in program.device_inputs}
    sizes = {t.name: numel(t.device_shape) for t in program.device_inputs}
    costs = []
    for op in program.device_ops:
        a = op.args
        read = sum(sizes.get(i, 0) * BYTES_PER_VALUE[formats.get(i, "bfloat16")] for i in op.inputs)
        out = numel(op.shape)
        flops, w_bytes = 0.0, 0.0
        if op.op == "ttnn.conv2d":
            kh, kw = a["kernel_size"]
            flops = 2.0 * out * a["in_channels"] * kh * kw / a["groups"]
            w_bytes = weights[op.weights["weight_tensor"]].size * BYTES_PER_VALUE[a["conv_config"]["weights_dtype"]]
        sizes[op.output], formats[op.output] = out, op.dtype
        costs.append(OpCost(op, flops, read + w_bytes + out * BYTES_PER_VALUE[op.dtype], target, out))
    return costs


def predicted_ms(program: Program, weights: dict, target: Target = TARGETS["p150"]) -> float:
    return 1e3 * sum(c.seconds for c in estimate(program, weights, target))
