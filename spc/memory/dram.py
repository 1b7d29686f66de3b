"""Whether a program's tensors fit one chip's DRAM: the peak, call by call, of the bytes alive.

Every tensor alive after a call is counted as if it were in DRAM (an upper bound: those in L1 take
no DRAM), with the program's constants and device inputs, freed after its last reader
(Program.frees) as the runtime frees them. A batch multiplies the activations; at 480x640 the
largest map is ~40 MB per image, so this binds only for large batches of large images.
"""

from __future__ import annotations

from spc.errors import SpcError
from spc.plan.program import Program, numel
from spc.ttnn.targets import Target


def dram_peak(program: Program) -> tuple[int, int]:
    """(the most bytes alive at once, the call after which they are)."""
    sizes = {c.name: numel(c.device_shape) * c.dtype.bytes_per_value for c in program.constants}
    sizes.update({t.name: numel(t.device_shape) * program.input_format(t.name).bytes_per_value
                  for t in program.device_inputs})
    alive = sum(sizes.values())
    peak, at = alive, -1
    frees = program.frees({t.name for t in program.device_outputs})
    for i, (op, dead) in enumerate(zip(program.device_ops, frees)):
        for name, dtype in zip(op.results, [op.dtype, *op.extra_dtypes]):
            sizes[name] = numel(op.shape) * dtype.bytes_per_value
            alive += sizes[name]
        if alive > peak:
            peak, at = alive, i
        alive -= sum(sizes.pop(name, 0) for name in dead)
    return peak, at


def check_dram(program: Program, target: Target, src: str) -> int:
    """The peak (:func:`dram_peak`), or an error naming the call where it does not fit."""
    peak, at = dram_peak(program)
    if peak > target.dram_bytes:
        op = program.device_ops[at] if at >= 0 else None
        where = f" after call {at} ({op.op}, block {op.block or op.source})" if op is not None else ""
        raise SpcError(f"{src}: the program needs {peak / 2**30:.1f} GiB of DRAM at its peak{where}, more than "
                       f"{target.name}'s {target.dram_bytes / 2**30:.0f} GiB per chip; use a smaller --batch or input")
    return peak
