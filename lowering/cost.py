"""A first predicted device time: compute at the block's fidelity plus bytes moved.

Placeholder until the memory-planning issue's cost model (which knows L1 residency, sharding and
reshards). It is a roofline on one Blackhole p150 (shared/reference/tenstorrent-facts.md):
4096 FLOP/cycle/core x 110 cores x 1.35 GHz per fidelity phase, 500 GB/s DRAM, and every
tensor read and written once from DRAM. Good for ranking precision choices, which change the
phase count and the bytes; not for absolute milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from spc.lowering.program import Program, TtOp

PEAK_FLOPS_PER_PHASE = 4096 * 110 * 1.35e9
DRAM_BYTES_PER_S = 500e9
BYTES_PER_VALUE = {"float32": 4.0, "bfloat16": 2.0, "bfloat8_b": 1088 / 1024, "bfloat4_b": 576 / 1024}
PHASES = {"LoFi": 1, "HiFi2": 2, "HiFi3": 3, "HiFi4": 4}


@dataclass
class OpCost:
    op: TtOp
    flops: float
    bytes: float

    @property
    def seconds(self) -> float:
        a = self.op.args
        phases = PHASES[a["compute_config"]["math_fidelity"]] if "compute_config" in a else 1
        return self.flops * phases / PEAK_FLOPS_PER_PHASE + self.bytes / DRAM_BYTES_PER_S


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def estimate(program: Program, weights: dict) -> list[OpCost]:
    sizes: dict[str, tuple[int, str]] = {t.name: (_numel(t.device_shape), "bfloat16") for t in program.device_inputs}
    costs = []
    for op in program.device_ops:
        a = op.args
        read = sum(sizes.get(i, (0, "bfloat16"))[0] * BYTES_PER_VALUE[sizes.get(i, (0, "bfloat16"))[1]]
                   for i in op.inputs)
        if op.op == "ttnn.conv2d":
            kh, kw = a["kernel_size"]
            oh = (a["input_height"] + a["padding"][0] + a["padding"][1] - a["dilation"][0] * (kh - 1) - 1) \
                // a["stride"][0] + 1
            ow = (a["input_width"] + a["padding"][2] + a["padding"][3] - a["dilation"][1] * (kw - 1) - 1) \
                // a["stride"][1] + 1
            out = a["batch_size"] * oh * ow * a["out_channels"]
            flops = 2.0 * out * a["in_channels"] * kh * kw / a["groups"]
            w_bytes = weights[op.weights["weight_tensor"]].size * BYTES_PER_VALUE[a["conv_config"]["weights_dtype"]]
        else:
            out = sizes.get(op.inputs[0], (0, ""))[0] if op.inputs else 0
            if op.op == "ttnn.slice":
                out = _numel([(e - s) for s, e in zip(a["starts"], a["ends"])])
            elif op.op == "ttnn.sum":
                out = out // max(1, sizes.get(op.inputs[0], (1, ""))[0] // max(out, 1))
            flops, w_bytes = 0.0, 0.0
        sizes[op.output] = (out, op.dtype)
        costs.append(OpCost(op, flops, read + w_bytes + out * BYTES_PER_VALUE[op.dtype]))
    return costs


def predicted_ms(program: Program, weights: dict) -> float:
    return 1e3 * sum(c.seconds for c in estimate(program, weights))
