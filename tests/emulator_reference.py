"""The emulator's device model spelled as the facts read (spc/emulator/numerics.py states them),
which the tests hold spc's emulator to bit for bit (docs/precision.md, "How the emulator is
fast"), and a run of a whole plan on it (:func:`reference_program`).

Only the cases spc computes in a second, faster way are spelled here; the rest (block-float and
integer storage, a bf16 destination's K block, top-k by sorting) have one implementation, spc's,
which these call.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from spc.emulator.device import EMULATIONS, conv2d_with, topk_by_sort
from spc.emulator.numerics import (
    bf16_destination_block,
    is_short,
    operand_phases,
    round_block_float,
    round_storage,
    taps_matmul,
)
from spc.plan.program import Program
from spc.runtime.emu import Emulations, EmuProgram
from spc.ttnn.formats import DataFormat, MathFidelity


def round_bf16_reference(x: torch.Tensor) -> torch.Tensor:
    """bf16 storage: round to nearest even, flush denormals; held as float32."""
    bits = x.to(torch.bfloat16).view(torch.int16)
    normal = (bits & 0x7F80) != 0  # a zero exponent field is zero or a denormal: stored as zero
    return (bits * normal).view(torch.bfloat16).to(torch.float32)


def round_storage_reference(x: torch.Tensor, fmt: DataFormat) -> torch.Tensor:
    """A tensor stored on the device in ``fmt``."""
    return round_bf16_reference(x) if fmt is DataFormat.BFLOAT16 else round_storage(x, fmt)


def conv2d_device_reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, stride: tuple[int, int],
                            padding: tuple[int, int, int, int], dilation: tuple[int, int], groups: int,
                            fidelity: MathFidelity, fp32_acc: bool, out_fmt: DataFormat, l1_acc: bool = False,
                            relu: bool = False) -> torch.Tensor:
    """numerics.conv2d_device's model (its docstring has the facts), step by step: the K blocks,
    each packed partial and the bias as new tensors, one conv per kernel row over every input row."""
    x = x.to(torch.float32)
    if out_fmt is DataFormat.FLOAT32:  # tilized in float32, read as TF32: its top 10 mantissa bits, toward zero
        x = (x.view(torch.int32) & ~((1 << 13) - 1)).view(torch.float32)
    if out_fmt.block_float_bits:
        x = round_block_float(x.permute(0, 2, 3, 1), out_fmt).permute(0, 3, 1, 2)
    kh = w.shape[2]
    l1_acc = l1_acc and (kh > 2 or (kh > 1 and b is not None))  # determine_packer_l1_acc
    partial_fmt = (DataFormat.FLOAT32 if fp32_acc else DataFormat.BFLOAT16) if l1_acc else out_fmt
    if fp32_acc and (partial_fmt is DataFormat.FLOAT32 or kh == 1):
        # nothing narrows the partial sums between kernel rows: one conv computes the same sums
        acc = _one_block_reference(x, w, stride, padding, dilation, groups, fidelity)
    else:
        acc = _row_blocks_reference(x, w, stride, padding, dilation, groups, fidelity, fp32_acc, partial_fmt)
    if b is None:
        y = round_storage_reference(acc, out_fmt)
    else:
        y = round_storage_reference(round_storage_reference(acc, partial_fmt) + b.reshape(1, -1, 1, 1), out_fmt)
    return torch.relu(y) if relu else y


def _one_block_reference(x: torch.Tensor, w: torch.Tensor, stride: tuple[int, int],
                         padding: tuple[int, int, int, int], dilation: tuple[int, int], groups: int,
                         fidelity: MathFidelity) -> torch.Tensor:
    left, right, top, bottom = padding
    same = (left, top) == (right, bottom)
    src = x if same else F.pad(x, (left, right, top, bottom)).contiguous(memory_format=torch.channels_last)
    pad = (top, left) if same else (0, 0)
    terms = [taps_matmul(xb, wa, stride, pad, dilation) if is_short(w, groups) else  # the model's sum order
             F.conv2d(xb, wa, stride=stride, padding=pad, dilation=dilation, groups=groups)
             for wa, xb in operand_phases(w, src, fidelity)]
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def _row_blocks_reference(x: torch.Tensor, w: torch.Tensor, stride: tuple[int, int],
                          padding: tuple[int, int, int, int], dilation: tuple[int, int], groups: int,
                          fidelity: MathFidelity, fp32_acc: bool, partial_fmt: DataFormat) -> torch.Tensor:
    """K blocks of one kernel row each, the partial packed in ``partial_fmt`` between blocks."""
    left, right, top, bottom = padding
    xp = F.pad(x, (left, right, top, bottom)).contiguous(memory_format=torch.channels_last)
    kh = w.shape[2]
    oh = (xp.shape[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    acc: torch.Tensor | None = None
    for r in range(kh):
        first = r * dilation[0]
        if fp32_acc or groups != 1:
            # the row's conv over every input row, then the output rows this kernel row feeds
            full = _one_block_reference(xp, w[:, :, r:r + 1], (1, stride[1]), (0, 0, 0, 0), dilation, groups,
                                        fidelity)
            block = full[:, :, first: first + (oh - 1) * stride[0] + 1: stride[0]]
            partial = block if acc is None else acc + block
        else:
            rows = xp[:, :, first: first + (oh - 1) * stride[0] + 1].contiguous(memory_format=torch.channels_last)
            partial = bf16_destination_block(rows, w[:, :, r:r + 1], stride, dilation, fidelity, acc)
        acc = partial if r == kh - 1 else round_storage_reference(partial, partial_fmt)
    assert acc is not None
    return acc


def conv2d_reference(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    return conv2d_with(ins, weights, a, conv2d_device_reference)


# every call as the model spells it, every result stored, nothing held in bf16
REFERENCE = Emulations({**EMULATIONS, "ttnn.conv2d": conv2d_reference, "ttnn.topk": topk_by_sort},
                       round_storage_reference, shortcuts=False)


def reference_program(program: Program, weights: dict[str, np.ndarray]) -> EmuProgram:
    """``program``'s calls bound to the reference emulations."""
    return EmuProgram(program, weights, REFERENCE)
