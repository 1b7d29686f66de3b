"""What the memory model reads off one ttnn call: the conv or pool it describes, the configuration it
runs in, where it leaves its result, and where a tensor lives while the program runs.

The L1 model (l1.py) sizes a :class:`~spc.memory.l1.ConvSpec` or :class:`~spc.memory.l1.PoolSpec`;
the cost model (cost.py) and the walk (residency.py) both build those from the call's arguments
here, and the lowering and the planner ask :func:`result_in_dram` where a call leaves its result.
"""

from __future__ import annotations

from msgspec import Struct

from spc.memory.l1 import ConvSpec, PoolSpec, Window
from spc.plan.program import TtOp
from spc.ttnn.formats import DataFormat
from spc.ttnn.memory import L1_FULL, BlockMemory


class Resident(Struct, frozen=True):
    """Where a device tensor lives: bytes on the busiest core (0 in DRAM), its cores, tiled or not,
    and the format it is stored in."""

    bytes: int
    cores: int | None
    tiled: bool
    dtype: DataFormat = DataFormat.BFLOAT16


DRAM_RM = Resident(0, None, False)


def op_memory(op: TtOp) -> BlockMemory:
    """The memory configuration a conv or pool call runs in (its slicing, its activation block)."""
    conv = op.args.get("conv_config")
    return BlockMemory(op.args.get("slice_config", L1_FULL), conv.act_block_tiles if conv is not None else 0)


def writes_dram(op: TtOp) -> bool:
    """The call is told to put its result in DRAM."""
    memory = op.args.get("memory_config")
    return memory is not None and memory.in_dram


def result_in_dram(op: TtOp, input_in_dram: bool) -> bool:
    """Whether the call leaves its result in DRAM: when told to, or on a DRAM-sliced path; a conv or
    pool that runs all at once keeps it in L1; element-wise and data-movement calls leave it where
    their first input is (``input_in_dram``)."""
    slicing = op.args.get("slice_config")
    if writes_dram(op) or (slicing is not None and slicing.in_dram):
        return True
    if slicing is not None:
        return False
    return input_in_dram


def conv_spec(op: TtOp, src: Resident) -> ConvSpec:
    """The conv call ``op`` reading ``src`` (its layout and format size its input buffers)."""
    a = op.args
    p = a["padding"]
    win = Window(a["batch_size"], a["input_height"], a["input_width"], a["in_channels"], tuple(a["kernel_size"]),
                 tuple(a["stride"]), (p[0], p[1], p[2], p[3]), tuple(a["dilation"]))
    cc = a["compute_config"]
    return ConvSpec(win, a["out_channels"], a["groups"], "bias_tensor" in op.weights, a["conv_config"].weights_dtype,
                    a["dtype"], cc.fp32_dest_acc_en, cc.packer_l1_acc, src.tiled, src.dtype)


def pool_spec(op: TtOp, src: Resident) -> PoolSpec:
    a = op.args
    p = a["padding"]
    win = Window(a["batch_size"], a["input_h"], a["input_w"], a["channels"], tuple(a["kernel_size"]),
                 tuple(a["stride"]), (p[0], p[0], p[1], p[1]), tuple(a["dilation"]))
    return PoolSpec(win, src.tiled, src.bytes > 0, not writes_dram(op))
