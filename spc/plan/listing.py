"""The device program as text, one call per line (the dump after the memory planner)::

    %relu_1 = ttnn.conv2d(%relu/dram) {slice_config = {"num_slices":3,"type":"dram_width"}, ...}
        -> bfloat16[1,1,307200,64]  #encoder.conv_blocks.0.conv_b

Arguments print as the plan stores them (plan/program.py's codec), sorted, so two listings diff
line by line.
"""

from __future__ import annotations

import json
from collections import Counter

from spc.plan.program import Program, TtOp, encode


def _arg(value: object) -> str:
    return json.dumps(encode(value), sort_keys=True, separators=(",", ":"))


def format_call(op: TtOp) -> str:
    args = ", ".join(f"{k} = {_arg(v)}" for k, v in sorted(op.args.items()))
    weights = ", ".join(f"{k} = @{v}" for k, v in sorted(op.weights.items()))
    body = ", ".join(x for x in (weights, args) if x)
    outs = ", ".join(f"%{o}" for o in (op.output, *op.extra_outputs))
    ins = ", ".join(f"%{i}" for i in op.inputs)
    shape = ",".join(str(d) for d in op.shape)
    return f"  {outs} = {op.op}({ins}) {{{body}}} -> {op.dtype.value}[{shape}]  #{op.block or op.source}"


def format_program(program: Program) -> str:
    ins = ", ".join(f"%{t.name}: {t.device_shape}" for t in program.device_inputs)
    outs = ", ".join(f"%{t.name}" for t in program.device_outputs)
    lines = [f"device program ({len(program.device_ops)} calls) ({ins}) {{"]
    lines += [format_call(op) for op in program.device_ops]
    lines += [f"  return {outs}", "}"]
    return "\n".join(lines) + "\n"


def call_counts(program: Program) -> dict[str, int]:
    return dict(Counter(op.op for op in program.device_ops))
