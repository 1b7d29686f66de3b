"""The DRAM fit check (memory/dram.py): the peak of live bytes, and the error past a chip's DRAM."""

from __future__ import annotations

from pathlib import Path

import pytest
from msgspec.structs import replace

from spc.errors import SpcError
from spc.memory.dram import check_dram, dram_peak
from spc.plan.io import read_plan
from spc.plan.program import numel
from spc.ttnn.targets import TARGETS


def test_the_peak_counts_what_is_alive_together(small_plan: Path) -> None:
    p = read_plan(small_plan).program
    peak, at = dram_peak(p)
    weights = sum(numel(c.device_shape) * c.dtype.bytes_per_value for c in p.constants)
    biggest = max(numel(op.shape) * op.dtype.bytes_per_value for op in p.device_ops)
    everything = weights + sum(numel(op.shape) * op.dtype.bytes_per_value for op in p.device_ops)
    assert weights + biggest <= peak < everything  # a call's result beside the weights; not all at once
    assert 0 <= at < len(p.device_ops)


def test_a_program_past_the_chips_dram_is_refused_naming_the_call(small_plan: Path) -> None:
    p = read_plan(small_plan).program
    peak, at = dram_peak(p)
    assert check_dram(p, TARGETS["p150"], "sp.onnx") == peak
    small = replace(TARGETS["p150"], dram_bytes=peak - 1)
    with pytest.raises(SpcError, match=rf"sp.onnx: .* DRAM at its peak after call {at} .*smaller --batch"):
        check_dram(p, small, "sp.onnx")
