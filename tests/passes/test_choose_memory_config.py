"""choose-memory-config on small graphs: L1 when it fits, DRAM slicing when it does not, overrides,
and the error when nothing fits."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from spc.errors import SpcError
from spc.lowering.lower import lower
from spc.passes.choose_memory_config import ChooseMemoryConfig
from spc.passes.choose_precision import ChoosePrecision
from spc.passes.manager import PassContext
from spc.passes.partition_host_device import PartitionHostDevice
from spc.ttnn.memory import MemoryOverrides, parse
from spc.ttnn.precision import PrecisionPlan
from spc.ttnn.targets import TARGETS
from tests.conftest import ir

CONV = ('{{activation = "relu", dilations = [1, 1], group = 1, kernel_shape = [3, 3], pads = [1, 1, 1, 1], '
        'strides = [1, 1]}}')


def two_convs(h: int, w: int) -> str:
    return f"""graph @t(%x: f32[1,1,{h},{w}]) {{
  %inner.encoder.conv_blocks.0.conv_a.weight: f32[64,1,3,3] = const @"a"
  %inner.encoder.conv_blocks.0.conv_b.weight: f32[64,64,3,3] = const @"b"
  %y: f32[1,64,{h},{w}] = spc.Conv2d(%x, %inner.encoder.conv_blocks.0.conv_a.weight) {CONV.format()} #ca
  %z: f32[1,64,{h},{w}] = spc.Conv2d(%y, %inner.encoder.conv_blocks.0.conv_b.weight) {CONV.format()} #cb
  %n: f32[1,64,{h},{w}] = spc.L2Norm(%z) {{axis = 1, eps = 1e-12}} #l2norm
  return %n
}}
"""


def chosen(h: int, w: int, target=TARGETS["p150"], memory: MemoryOverrides | None = None):
    g = ir(two_convs(h, w), a=np.ones((64, 1, 3, 3), np.float32), b=np.ones((64, 64, 3, 3), np.float32))
    PartitionHostDevice().run(g, PassContext())
    ChoosePrecision().run(g, PassContext(options={"precision": PrecisionPlan()}))
    ctx = PassContext(options={"target": target, "memory": memory or MemoryOverrides()})
    result = ChooseMemoryConfig().run(g, ctx)
    return g, result, ctx


def test_small_maps_stay_in_l1() -> None:
    g, result, _ = chosen(32, 32)
    a, b, _ = g.nodes
    assert a.attrs["memory"] == "l1" and b.attrs["memory"] == "l1"
    assert 0 < a.attrs["l1_peak"] < TARGETS["p150"].l1_budget_bytes
    assert result.stats == {"target": "p150", "l1": 2}
    program, _ = lower(g)
    assert [op.args["slice_config"] for op in program.device_ops if op.op == "ttnn.conv2d"] == [{"type": "l1_full"}] * 2


def test_full_resolution_needs_dram_slicing_and_a_copy_to_dram() -> None:
    """At 480x640 the second conv's whole-shard buffers do not fit (the mock p150 agrees:
    tests/memory); it is sliced, and its input, left in L1 by the first conv, is copied to DRAM."""
    g, _, _ = chosen(480, 640)
    a, b, _ = g.nodes
    assert a.attrs["memory"].startswith("l1") and b.attrs["memory"].startswith("dram:")
    program, _ = lower(g)
    calls = [op.op for op in program.device_ops]
    assert calls[:3] == ["ttnn.conv2d", "ttnn.to_memory_config", "ttnn.conv2d"]
    assert program.device_ops[2].args["slice_config"]["num_slices"] >= 2


def test_a_forced_configuration_is_kept_with_a_note_when_it_does_not_fit() -> None:
    forced = MemoryOverrides.from_cli(["encoder.conv_blocks.0.conv_b=l1", "nothing.*=l1"])
    g, _, ctx = chosen(480, 640, memory=forced)
    assert g.nodes[1].attrs["memory"] == "l1"
    assert any("forced to l1, which the L1 model says does not fit" in n for n in ctx.notes)
    assert any("nothing.*: matches no device block" in n for n in ctx.notes)


def test_nothing_fits_names_the_block_and_the_nearest_miss() -> None:
    tiny = replace(TARGETS["p150"], l1_bytes=TARGETS["p150"].cb_base + 200_000)
    with pytest.raises(SpcError, match=r"block encoder.conv_blocks.0.conv_b \(conv 64->64 3x3 on 480x640\): "
                                       r"no memory configuration fits in L1 on p150 .* nearest: "):
        chosen(480, 640, target=tiny)


def test_only_convs_and_pools_take_a_configuration() -> None:
    with pytest.raises(SpcError, match="only convolutions and max pools"):
        chosen(32, 32, memory=MemoryOverrides.from_cli(["l2norm=l1"]))


@pytest.mark.parametrize("bad", ["l2", "dram:depth=2", "l1:abh=x", "dram:height=0"])
def test_spelling_errors(bad: str) -> None:
    with pytest.raises(SpcError, match="memory configuration"):
        parse(bad)


def test_spelling_round_trips() -> None:
    for text in ("l1", "l1:abh=4", "dram:height=3", "dram:width=2"):
        assert parse(text).spell() == text
