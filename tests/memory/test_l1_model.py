"""The L1 model against figures ttnn 0.81.1's own allocator reported on the mock p150.

Each case was measured with scripts/l1_agreement.py (graph capture around the call: peak circular
buffers and peak L1 buffers on the busiest core) on the 480x640 plan at the accurate preset;
tests/test_memory_on_mock.py re-measures a set of them on every CI run.
"""

from __future__ import annotations

import pytest

from spc.memory.l1 import ConvSpec, PoolSpec, Window, conv_l1, nhw_cores, pool_l1, slice_windows
from spc.ttnn.formats import DataFormat
from spc.ttnn.memory import BlockMemory

P150_CORES = 110


def conv(h: int, w: int, cin: int, cout: int, tiled: bool) -> ConvSpec:
    win = Window(1, h, w, cin, (3, 3), (1, 1), (1, 1, 1, 1))
    return ConvSpec(win, cout, 1, True, DataFormat.BFLOAT16, DataFormat.BFLOAT16, True, True, tiled)


def conv_f32(h: int, w: int, cin: int, cout: int) -> ConvSpec:
    win = Window(1, h, w, cin, (5, 5), (1, 1), (2, 2, 2, 2))
    return ConvSpec(win, cout, 1, True, DataFormat.BFLOAT16, DataFormat.FLOAT32, True, True, True,
                    input_dtype=DataFormat.FLOAT32)


def pool(h: int, w: int, c: int, k: int, tiled: bool, in_l1: bool, out_l1: bool) -> PoolSpec:
    r = k // 2 if k > 2 else 0
    return PoolSpec(Window(1, h, w, c, (k, k), (1, 1) if k > 2 else (2, 2), (r, r, r, r)), tiled, in_l1, out_l1)


# (what, model call, ttnn's circular buffers, ttnn's L1 buffers): bytes on the busiest core
MEASURED = [
    ("conv 1->64 on 480x640, L1, whole-shard blocks",
     lambda: conv_l1(conv(480, 640, 1, 64, False), BlockMemory(), P150_CORES, input_in_dram=True), 1089600, 426272),
    ("conv 1->64 on 480x640, L1, act_block_h 8",
     lambda: conv_l1(conv(480, 640, 1, 64, False), BlockMemory(act_block_h=8), P150_CORES, input_in_dram=True),
     114752, 426416),
    ("conv 64->64 on 240x320 after a pool on 110 cores",
     lambda: conv_l1(conv(240, 320, 64, 64, False), BlockMemory(), P150_CORES, input_cores=110), 749632, 263456),
    ("conv 64->64 on 480x640, DRAM, 3 row slices",
     lambda: conv_l1(conv(480, 640, 64, 64, True), BlockMemory.dram("height", 3), P150_CORES), 1011776, 414880),
    ("conv 64->64 on 480x640, DRAM, 3 column slices",
     lambda: conv_l1(conv(480, 640, 64, 64, True), BlockMemory.dram("width", 3), P150_CORES), 1044544, 317520),
    ("conv 128->128 on 120x160 after a conv",
     lambda: conv_l1(conv(120, 160, 128, 128, True), BlockMemory(), P150_CORES, input_cores=110), 499776, 182304),
    ("2x2 pool on 480x640x64 from DRAM",
     lambda: pool_l1(pool(480, 640, 64, 2, True, False, True), BlockMemory(), P150_CORES), 16640, 868128),
    ("2x2 pool on 240x320x64, DRAM, 3 column slices",
     lambda: pool_l1(pool(240, 320, 64, 2, True, False, True), BlockMemory.dram("width", 3), P150_CORES),
     32896, 89424),
    # DISK's blocks stored in float32 (docs/matchers.md): the input stays float32 through the halo
    # and the activation buffers (measured 2026-12-06, scripts/l1_agreement.py on its 480x640 plan)
    ("conv 16->32 5x5 on 240x320 from DRAM, float32 in and out",
     lambda: conv_l1(conv_f32(240, 320, 16, 32), BlockMemory(), P150_CORES, input_in_dram=True), 913472, 348496),
    ("conv 32->64 5x5 on 120x160 from DRAM, float32 in and out",
     lambda: conv_l1(conv_f32(120, 160, 32, 64), BlockMemory(), P150_CORES, input_in_dram=True), 270400, 158752),
    ("9x9 NMS window max on 480x640x1 from DRAM",
     lambda: pool_l1(pool(480, 640, 1, 9, False, False, False), BlockMemory(), P150_CORES), 14336, 217808),
]


@pytest.mark.parametrize(("what", "model", "cb", "l1"), MEASURED, ids=[m[0] for m in MEASURED])
def test_agrees_with_ttnn(what: str, model, cb: int, l1: int) -> None:
    use = model()
    assert use.cb == cb  # circular buffers: ttnn's own sizing, to the byte
    assert abs(use.l1 - l1) <= 0.015 * l1  # tensors: within 1.5 % (DRAM slices' staged input the worst)


def test_core_count_search() -> None:
    assert nhw_cores(150, 110) == 75  # 2 tiles on 75 cores wastes nothing
    assert nhw_cores(2400, 110) == 110  # 22 tiles each; 20 tiles of padding < one core's share
    assert nhw_cores(9600, 110, mult=16) == 100  # act_block_h 16: shares of 96 tiles


def test_width_slices_are_whole_tiles_of_columns() -> None:
    win = Window(1, 480, 640, 64, (3, 3), (1, 1), (1, 1, 1, 1))
    assert [s.out_w for s in slice_windows(win, "width", 3)] == [224, 224, 192]  # 20 tiles cut 7/7/6
    assert [s.w for s in slice_windows(win, "width", 3)] == [225, 226, 193]  # plus the halo columns
    assert [s.out_h for s in slice_windows(win, "height", 3)] == [160, 160, 160]
    assert [s.pads[:2] for s in slice_windows(win, "height", 3)] == [(1, 0), (0, 0), (0, 1)]  # edges keep padding


def _halo_by_core(win: Window, per_core: int) -> int:
    """halo_sticks by its definition: each core's first and last output pixel, walked one by one."""
    wp, hp = win.w + win.pads[2] + win.pads[3], win.h + win.pads[0] + win.pads[1]
    kh, kw = ((k - 1) * d + 1 for k, d in zip(win.kernel, win.dilation))

    def stick(p: int) -> int:
        b, r = divmod(p, win.out_h * win.out_w)
        ho, wo = divmod(r, win.out_w)
        return b * hp * wp + ho * win.stride[0] * wp + wo * win.stride[1]

    worst = 0
    for first in range(0, win.out_nhw, per_core):
        last = min(first + per_core, win.out_nhw) - 1
        worst = max(worst, stick(last) - stick(first) + (kh - 1) * wp + kw)
    return worst


@pytest.mark.parametrize("seed", range(4))
def test_the_halo_is_the_widest_cores_span(seed: int) -> None:
    import random

    rng = random.Random(seed)
    for _ in range(300):
        win = Window(rng.choice([1, 2, 3]), rng.randint(3, 70), rng.randint(3, 90), 32, (rng.choice([1, 3, 5]),) * 2,
                     (rng.choice([1, 2]), rng.choice([1, 2])), tuple(rng.randint(0, 2) for _ in range(4)),
                     (rng.choice([1, 2]), 1))
        if win.out_h < 1 or win.out_w < 1:
            continue
        per_core = rng.choice([1, 32, rng.randint(1, win.out_nhw + 3)])
        assert win.halo_sticks(per_core) == _halo_by_core(win, per_core), (win, per_core)
