"""The memory planner on small lowered programs: L1 when it fits, DRAM slicing when it does not,
forced choices, and the error when nothing fits."""

from __future__ import annotations

import numpy as np
import pytest
from msgspec.structs import replace

from spc.errors import SpcError
from spc.lowering.lower import lower
from spc.memory.planner import Planner, plan_memory
from spc.passes.choose_precision import ChoosePrecision
from spc.passes.manager import PassContext
from spc.passes.partition_host_device import PartitionHostDevice
from spc.plan.io import read_plan
from spc.plan.program import Program
from spc.ttnn.memory import L1_FULL, BlockMemory, BufferType, MemoryOverrides, SliceType, parse
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


def lowered(h: int, w: int) -> Program:
    g = ir(two_convs(h, w), a=np.ones((64, 1, 3, 3), np.float32), b=np.ones((64, 64, 3, 3), np.float32))
    PartitionHostDevice().run(g, PassContext())
    ChoosePrecision().run(g, PassContext())
    program, _ = lower(g)
    return program


def planned(h: int, w: int, target=TARGETS["p150"], memory: MemoryOverrides | None = None
            ) -> tuple[Program, Planner]:
    program = lowered(h, w)
    return program, plan_memory(program, target, memory)


def convs(program: Program):
    return [op for op in program.device_ops if op.op == "ttnn.conv2d"]


def test_the_lowering_emits_convs_in_the_default_configuration() -> None:
    assert [op.args["slice_config"] for op in convs(lowered(480, 640))] == [L1_FULL, L1_FULL]


def test_small_maps_stay_in_l1() -> None:
    program, planner = planned(32, 32)
    assert [op.args["slice_config"] for op in convs(program)] == [L1_FULL, L1_FULL]
    assert planner.stats == {"l1": 2}
    assert "ttnn.to_memory_config" not in [op.op for op in program.device_ops]
    peak = max(r.placed.use.cb + r.placed.live_before for r in planner.records)
    assert 0 < peak < TARGETS["p150"].l1_budget_bytes
    assert all(r.placed.fits for r in planner.records)


def test_full_resolution_needs_dram_slicing_and_a_copy_to_dram() -> None:
    """At 480x640 the second conv's whole-shard buffers do not fit (the mock p150 agrees:
    tests/memory); it is sliced, and its input, left in L1 by the first conv, is copied to DRAM."""
    program, planner = planned(480, 640)
    a, b = convs(program)
    assert a.args["slice_config"].type is SliceType.L1_FULL
    assert b.args["slice_config"].in_dram and b.args["slice_config"].num_slices >= 2
    calls = [op.op for op in program.device_ops]
    assert calls[:3] == ["ttnn.conv2d", "ttnn.to_memory_config", "ttnn.conv2d"]
    copy = program.device_ops[1]
    assert copy.inputs == [a.output] and b.inputs[0] == copy.output == a.output + "/dram"
    assert copy.args["memory_config"].buffer is BufferType.DRAM
    assert planner.stats == {"l1": 1, "dram": 1}
    assert all(r.placed.fits for r in planner.records)


def test_planning_is_deterministic() -> None:
    first, _ = planned(480, 640)
    second, _ = planned(480, 640)
    assert [op.to_json() for op in first.device_ops] == [op.to_json() for op in second.device_ops]


def test_a_forced_configuration_is_kept_with_a_note_when_it_does_not_fit() -> None:
    forced = MemoryOverrides.from_cli(["encoder.conv_blocks.0.conv_b=l1", "nothing.*=l1"])
    program, planner = planned(480, 640, memory=forced)
    assert convs(program)[1].args["slice_config"] == L1_FULL
    assert any("forced to l1, which the L1 model says does not fit" in n for n in planner.notes)
    assert any("nothing.*: matches no device block" in n for n in planner.notes)


def test_a_forced_dram_slicing_is_applied() -> None:
    forced = MemoryOverrides.from_cli(["encoder.conv_blocks.0.conv_a=dram:height=4"])
    program, _ = planned(64, 64, memory=forced)
    first = convs(program)[0]
    assert first.args["slice_config"].type is SliceType.DRAM_HEIGHT and first.args["slice_config"].num_slices == 4


def test_nothing_fits_names_the_block_and_the_nearest_miss() -> None:
    tiny = replace(TARGETS["p150"], l1_bytes=TARGETS["p150"].cb_base + 200_000)
    with pytest.raises(SpcError, match=r"block encoder.conv_blocks.0.conv_b \(conv 64->64 3x3 on 480x640\): "
                                       r"no memory configuration fits in L1 on p150 .* nearest: "):
        planned(480, 640, target=tiny)


def test_only_convs_and_pools_take_a_configuration() -> None:
    with pytest.raises(SpcError, match="only convolutions and max pools"):
        planned(32, 32, memory=MemoryOverrides.from_cli(["l2norm=l1"]))


@pytest.mark.parametrize("bad", ["l2", "dram:depth=2", "l1:abh=x", "dram:height=0"])
def test_spelling_errors(bad: str) -> None:
    with pytest.raises(SpcError, match="memory configuration"):
        parse(bad)


def test_spelling_round_trips() -> None:
    for text in ("l1", "l1:abh=4", "dram:height=3", "dram:width=2"):
        assert parse(text).spell() == text
    assert parse("dram:width=2") == BlockMemory.dram("width", 2)


def _whole_program_trial(planner: Planner, ops: list, walk, block: str, mem: BlockMemory, start: int):
    """A trial as the planner made one before it walked only the block's window: the whole
    program rewritten, its frees computed afresh, the block's calls placed on a copy of the walk."""
    from spc.memory.planner import CONFIGURABLE, Choice, apply
    from spc.memory.residency import Walk

    trial_ops = apply(ops, planner.program, block, mem)
    trial = Walk(replace(planner.program, device_ops=trial_ops), planner.target)
    trial.ledger, trial.where, trial.sizes = walk.ledger.copy(), dict(walk.where), dict(walk.sizes)
    last = max(j for j, op in enumerate(trial_ops) if op.block == block and op.op in CONFIGURABLE)
    worst, seconds = None, 0.0
    for j in range(start, last + 1):
        record = trial.step(trial_ops[j], trial.frees[j])
        if trial_ops[j].block == block and trial_ops[j].op in CONFIGURABLE:
            seconds += record.seconds
            worst = record.placed if worst is None or record.placed.headroom < worst.headroom else worst
    return Choice(mem, worst, seconds)


@pytest.mark.parametrize("forced, made", [
    ([], []),
    (["nms=dram:width=2", "encoder.conv_blocks.0.conv_b=dram:height=3"], ["ttnn.to_memory_config", "/flat"]),
    (["node_max_pool2d*=dram:height=2", "keypoint_decoder.*=dram:width=2"], ["ttnn.to_memory_config"])])
def test_a_trial_of_the_window_measures_what_the_whole_program_would(small_onnx, forced: list[str], made: list[str],
                                                                     tmp_path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Every trial (free choices and forced DRAM paths: copies to DRAM, pools whose results are
    reshaped and renamed for the calls after them) places the same calls with the same headroom
    and time as the whole rewritten program, walked with its own frees."""
    from spc.compiler import compile_onnx

    original, seen = Planner._try, []

    def checked(self, ops, walk, block, mem, window):
        got = original(self, ops, walk, block, mem, window)
        assert got == _whole_program_trial(self, ops, walk, block, mem, window.start), (block, mem)
        seen.append(mem.path)
        return got

    monkeypatch.setattr(Planner, "_try", checked)
    planned(480, 640)
    compile_onnx(small_onnx, tmp_path / "p.ttplan", memory=MemoryOverrides.from_cli(forced))
    assert BufferType.DRAM in seen and BufferType.L1 in seen
    # the forced paths were taken: a copy to DRAM, a DRAM-sliced pool's result reshaped and renamed
    calls = read_plan(tmp_path / "p.ttplan").program.device_ops
    for what in made:
        assert any(op.op == what or op.output.endswith(what) for op in calls), what
