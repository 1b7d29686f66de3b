"""The L1 model at batch > 1 (`spc compile --batch B`) against what ttnn 0.81.1 allocated on the mock p150.

Each figure was measured with scripts/l1_agreement.py (and the graph capture's buffer addresses) on
plans of `spc compile --batch`; docs/memory.md ("Batches") says what batch changes and how it was
found. tests/test_memory_on_mock.py runs a batch-4 plan on the mock on every CI run.
"""

from __future__ import annotations

import pytest

from spc.memory.call_specs import DRAM_RM
from spc.memory.l1 import ConvSpec, PoolSpec, Window, conv_l1, pool_l1
from spc.memory.ledger import Ledger
from spc.memory.residency import op_use, place
from spc.plan.program import TtOp
from spc.ttnn.configs import PageLayout
from spc.ttnn.formats import DataFormat
from spc.ttnn.memory import BlockMemory
from spc.ttnn.targets import get_target

P150_CORES = 110
BF16 = DataFormat.BFLOAT16


def conv(n: int, h: int, w: int, cin: int, cout: int, tiled: bool, k: int = 3) -> ConvSpec:
    r = k // 2
    win = Window(n, h, w, cin, (k, k), (1, 1), (r, r, r, r))
    return ConvSpec(win, cout, 1, True, BF16, BF16, True, True, tiled)


def pool(n: int, h: int, w: int, c: int, k: int, tiled: bool, in_l1: bool, out_l1: bool) -> PoolSpec:
    r = k // 2 if k > 2 else 0
    win = Window(n, h, w, c, (k, k), (1, 1) if k > 2 else (2, 2), (r, r, r, r))
    return PoolSpec(win, tiled, in_l1, out_l1)


# (what, model call, ttnn's circular buffers, ttnn's L1 buffers): bytes on the busiest core
MEASURED = [
    # the call `spc run --batch 4` at 240x320 was refused at: the model said 805,888 B of tensors
    ("conv 64->64 on 4x240x320 after a conv on 110 cores, act_block_h 2",
     lambda: conv_l1(conv(4, 240, 320, 64, 64, True), BlockMemory(act_block_h=2), P150_CORES, input_cores=110),
     143424, 889024),
    # ttnn's shard is ceil(19,200 tiles / 110) = 175 tiles in blocks of 7 (the model said 176 in blocks of 16)
    ("conv 1->64 on 2x480x640, L1, act_block_h 16",
     lambda: conv_l1(conv(2, 480, 640, 1, 64, False), BlockMemory(act_block_h=16), P150_CORES, input_in_dram=True),
     102464, 848240),
    ("2x2 pool on 4x240x320x64 from DRAM",
     lambda: pool_l1(pool(4, 240, 320, 64, 2, True, False, True), BlockMemory(), P150_CORES), 16640, 786016),
    # one DRAM slice is the L1 path: no doubled untilize buffers (the model said 32,896)
    ("2x2 pool on 3x240x320x64, DRAM, 1 row slice",
     lambda: pool_l1(pool(3, 240, 320, 64, 2, True, False, True), BlockMemory.dram("height", 1), P150_CORES),
     16640, 609984),
    # one image's NMS, sliced out of a batch's tiled score map: 32 channels per halo stick
    ("9x9 NMS window max on a tiled 240x320x1 from DRAM",
     lambda: pool_l1(pool(1, 240, 320, 1, 9, True, False, False), BlockMemory(), P150_CORES), 14336, 261120),
    # a 1x1 conv after a DRAM-sliced conv: its input sharded into L1 beside the output (the model said 104,448)
    ("1x1 conv 256->65 on 4x90x160 from DRAM",
     lambda: conv_l1(conv(4, 90, 160, 256, 65, True, k=1), BlockMemory(), P150_CORES, input_in_dram=True),
     0, 382976),
]


@pytest.mark.parametrize(("what", "model", "cb", "l1"), MEASURED, ids=[m[0] for m in MEASURED])
def test_agrees_with_ttnn_at_batch(what: str, model, cb: int, l1: int) -> None:
    use = model()
    assert use.cb == cb
    assert abs(use.l1 - l1) <= 0.015 * l1


def test_a_core_across_two_images_holds_the_padding_rows_between_them() -> None:
    """4 x 240 x 320 on 110 cores: 2,816 pixels each, so core 27 runs from image 0 into image 1
    and its halo holds 4,124 sticks (ttnn: 527,872 B of 64 channels), 644 = 2 x 322 more than a
    core inside one image."""
    batch = Window(4, 240, 320, 64, (3, 3), (1, 1), (1, 1, 1, 1))
    one = Window(1, 240, 320, 64, (3, 3), (1, 1), (1, 1, 1, 1))
    assert batch.halo_sticks(2816) == 4124
    assert one.halo_sticks(2816) == 3480
    assert conv_l1(conv(4, 240, 320, 64, 64, True), BlockMemory(), P150_CORES, input_cores=110).halo == 527872


def test_act_block_override_sets_the_core_count_not_the_shard() -> None:
    use = conv_l1(conv(2, 480, 640, 1, 64, False), BlockMemory(act_block_h=16), P150_CORES, input_in_dram=True)
    assert (use.cores, use.shard_rows) == (110, 5600)  # 175 tiles: ttnn's blocks are 7 tiles, not 16


def test_the_output_goes_below_the_moved_halo() -> None:
    """ttnn's addresses for the first pool of 480x640 --batch 4 (an empty L1): input staged at
    1,179,648, halo at 754,944 and moved to 1,115,392 once the input is freed, output at 1,025,920
    -- not into the input's hole, where the model put it before, 88 KiB too high for the next conv."""
    use = pool_l1(pool(4, 240, 320, 64, 2, True, False, True), BlockMemory(), P150_CORES)
    ledger = Ledger(get_target("p150"))
    place(ledger, "pool", use)
    assert ledger.blocks["pool"] == (1025920, 89472)


def test_a_conversion_to_tiles_makes_a_tiled_tensor() -> None:
    op = TtOp("ttnn.to_layout", ["score"], "score/tiled", {"layout": PageLayout.TILE}, shape=[1, 1, 307200, 1])
    _, out = op_use(op, DRAM_RM, get_target("p150"))
    assert out.tiled
