"""How ttnn 0.81.1 sizes the L1 of one core for conv2d and max_pool2d: a port of its own rules.

Sources (tt-metal, read for docs/notes/ttnn-l1-sizing.md): conv2d_utils.cpp
(determine_parallel_config, get_conv_configs), conv2d_op_program_factory_common.cpp (get_cb_info),
sliding_window.cpp (halo sticks), pool_multi_core_program_factory.cpp, conv2d.cpp (DRAM slicing).
Checked against ttnn's own allocator on the mock p150 (tests/memory/test_l1_model.py,
scripts/l1_agreement.py): circular buffers agree to the byte for the convs; see docs/memory.md for
what is approximate.

Everything is bytes per core on the busiest core. A core's L1 holds the circular buffers, growing
up from a fixed base, and L1 tensors, allocated down from the top; ttnn refuses a program whose
buffers reach its tensors. So an op fits when ``cb + live tensors <= target.l1_budget``.
"""

from __future__ import annotations

import functools

import numpy as np
from msgspec import Struct

from spc.ttnn.formats import DataFormat
from spc.ttnn.memory import L1_FULL, BlockMemory, BufferType

F32, BF16 = DataFormat.FLOAT32, DataFormat.BFLOAT16
L1_ALIGN = 16


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def nhw_cores(units: int, cores: int, mult: int = 1) -> int:
    """ttnn's core count for ``units`` rows (tiles, or sticks for row-major outputs), each core's
    share a multiple of ``mult``: the largest count <= ``cores`` whose padding wastes less than
    one core's share (find_closest_largest_divisor_with_num_padding_and_mult)."""
    d = min(cores, units)
    while d > 1:
        padded = round_up(units, d * mult)
        if padded - units < padded // d:
            return d
        d -= 1
    return 1


class Window(Struct, frozen=True):
    """A sliding-window op on an N x H x W x C input."""

    n: int
    h: int
    w: int
    c: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, bottom, left, right
    dilation: tuple[int, int] = (1, 1)

    @property
    def out_h(self) -> int:
        kh = (self.kernel[0] - 1) * self.dilation[0] + 1
        return (self.h + self.pads[0] + self.pads[1] - kh) // self.stride[0] + 1

    @property
    def out_w(self) -> int:
        kw = (self.kernel[1] - 1) * self.dilation[1] + 1
        return (self.w + self.pads[2] + self.pads[3] - kw) // self.stride[1] + 1

    @property
    def out_nhw(self) -> int:
        return self.n * self.out_h * self.out_w

    @functools.lru_cache(maxsize=4096)  # noqa: B019  (windows are few, frozen and small)
    def halo_sticks(self, per_core: int) -> int:
        """Most padded-input rows ("sticks") one core's halo holds when each core owns
        ``per_core`` consecutive output pixels (sliding_window.cpp)."""
        wp, hp = self.w + self.pads[2] + self.pads[3], self.h + self.pads[0] + self.pads[1]
        kh = (self.kernel[0] - 1) * self.dilation[0] + 1
        kw = (self.kernel[1] - 1) * self.dilation[1] + 1
        ohw, ow = self.out_h * self.out_w, self.out_w
        # every core's span, in one vectorised pass: its first and last output pixel's padded-input
        # row (a core whose pixels run on into the next image also holds the padding rows between
        # the two: 2 x 322 sticks more at 240x320, measured on the mock p150)
        total = self.out_nhw
        first = np.arange(0, total, per_core, dtype=np.int64)
        if not len(first):
            return 0
        last = np.minimum(first + per_core, total) - 1
        spans = self._stick(last, ohw, ow, hp, wp) - self._stick(first, ohw, ow, hp, wp)
        return int(spans.max()) + (kh - 1) * wp + kw

    def _stick(self, p: np.ndarray, ohw: int, ow: int, hp: int, wp: int) -> np.ndarray:
        """The padded-input row where output pixels ``p`` start reading."""
        b, r = np.divmod(p, ohw)
        ho, wo = np.divmod(r, ow)
        return b * (hp * wp) + ho * (self.stride[0] * wp) + wo * self.stride[1]


class L1Use(Struct, frozen=True):
    """One op on its busiest core, in the order ttnn allocates: an input staged into L1 for the
    op (freed after the halo), the halo (padded input windows), the output, then the program's
    circular buffers. ``output_in_l1=False``: the output is written on to DRAM."""

    cb: int
    output: int
    halo: int
    cores: int
    shard_rows: int
    output_in_l1: bool = True
    staged_input: int = 0
    # ttnn re-allocates the halo output once the staged input is freed (reallocate_halo_output,
    # on by default), so the output goes below the halo, not into the staged input's hole. It does
    # so at every batch size; the model says so only for batches (n > 1): at batch 1 it would
    # change the 720x1280 plan, which the mock accepts as it is (docs/memory.md)
    halo_moves: bool = False

    @property
    def l1(self) -> int:
        """Peak of the op's own L1 tensors."""
        return max(self.staged_input + self.halo, self.halo + self.output)

    @property
    def peak(self) -> int:
        return self.cb + self.l1


class ConvSpec(Struct, frozen=True):
    """A ttnn.conv2d as the L1 model sizes it: window, channels and formats."""

    window: Window
    cout: int
    groups: int
    bias: bool
    weights_dtype: DataFormat
    output_dtype: DataFormat
    fp32_dest_acc: bool
    packer_l1_acc: bool
    input_tiled: bool  # the input is a TILE tensor (a conv output), not row-major (the host image, a pool)
    # the format the input is stored in: a float32 one stays float32 through the halo and the
    # activation buffers (conv2d's get_cb_info: input_datum_size 4)
    input_dtype: DataFormat = DataFormat.BFLOAT16

    @property
    def is_matmul(self) -> bool:
        w = self.window
        return w.kernel == (1, 1) and w.stride == (1, 1) and not any(w.pads) and self.groups == 1


def _held(dtype: DataFormat) -> DataFormat:
    """The format a conv's input is held in through its halo and activation buffers: float32 as it
    is, anything else as bf16 (the halo untilizes a block-float input to bf16)."""
    return F32 if dtype is F32 else BF16


def _conv_cbs(spec: ConvSpec, w: Window, cin_p: int, mt: int, abh: int) -> int:
    """get_cb_info for a height-sharded, non-depthwise conv."""
    kh, kw = w.kernel
    abw = round_up(cin_p * kw, 32) // 32
    wbw = round_up(spec.cout, 32) // 32
    nbh = mt // abh
    w_tile, out_tile = spec.weights_dtype.tile_bytes, spec.output_dtype.tile_bytes
    in_tile = _held(spec.input_dtype).tile_bytes
    weights = w_tile * wbw * abw * (kh if nbh > 1 else 1)
    act = in_tile * abh * abw
    tilized = out_tile * abh * abw
    bias = w_tile * wbw if spec.bias else 0
    k_blocks = kh  # K is read one kernel row at a time
    l1_acc = spec.packer_l1_acc and ((spec.bias and k_blocks > 1) or k_blocks > 2)
    partial = (F32 if spec.fp32_dest_acc else BF16) if l1_acc else spec.output_dtype
    # partials (one activation block's) share the output buffer when they are in its format
    partials = 0 if partial is spec.output_dtype else partial.tile_bytes * abh * wbw
    return weights + act + tilized + bias + partials + 64


def act_block_tiles(mt: int, override: int) -> int:
    """The activation block height ttnn uses: the whole shard, or the largest divisor of it <= the override."""
    if not override or override >= mt:
        return mt
    return max(d for d in range(1, override + 1) if mt % d == 0)


# the planner asks again for what it asked before (the chosen configuration, equal slices, a pool's
# trials): a third of the conv questions and two thirds of the pool ones of a 480x640 compile
@functools.lru_cache(maxsize=4096)
def conv_l1(spec: ConvSpec, mem: BlockMemory, grid_cores: int, input_cores: int | None = None,
            input_in_dram: bool = False) -> L1Use:
    """One core's L1 for ``ttnn.conv2d`` under ``mem``. ``input_cores``: the core count of an
    input already height-sharded in L1 (ttnn keeps it); otherwise ttnn's own choice. An input in
    DRAM on the L1 path is staged into L1 shards first."""
    w = spec.window
    if mem.path is BufferType.DRAM:
        return _conv_dram(spec, mem, grid_cores)
    align = 32 if spec.input_tiled else 8
    cin_p = round_up(w.c, align)
    # an act_block_h override enters the core search (its padding is counted in whole blocks); each
    # core's share is still ceil(tiles / cores), cut into the largest blocks that divide it (2 x 480 x
    # 640, override 16: 175-tile shards in blocks of 7, measured on the mock p150)
    mult = mem.act_block_h or 1
    ncores = input_cores or nhw_cores(-(-w.out_nhw // 32), grid_cores, mult)
    rows = round_up(w.out_nhw, ncores * 32) // ncores
    mt = rows // 32
    wbw = round_up(spec.cout, 32) // 32
    output = mt * wbw * spec.output_dtype.tile_bytes
    if spec.is_matmul:
        # ttnn.linear on the sharded input: buffers are the output and the weights block. An input
        # in DRAM is first sharded into L1 (tiled, channels in whole tiles) and lives beside the
        # output until the call ends, as a halo would (4 x 90 x 160 x 256 after a DRAM-sliced conv
        # at 720x1280: 278,528 B per core on 106 cores, measured on the mock p150)
        staged = mt * (round_up(w.c, 32) // 32) * _held(spec.input_dtype).tile_bytes if input_in_dram else 0
        return L1Use(0, output, staged, ncores, rows)
    cb = _conv_cbs(spec, w, cin_p, mt, act_block_tiles(mt, mem.act_block_h))
    datum = int(_held(spec.input_dtype).bytes_per_value)
    halo = w.halo_sticks(rows) * cin_p * datum
    staged = round_up(w.n * w.h * w.w, ncores) // ncores * cin_p * datum if input_in_dram else 0
    return L1Use(cb, output, halo, ncores, rows, staged_input=staged, halo_moves=w.n > 1)


def slice_windows(w: Window, dim: str, n: int, tiled_output: bool = True) -> list[Window]:
    """The input window of each slice of the output rows (or columns), as conv2d.cpp cuts them:
    near-equal slices, the first ones one unit longer; a width slice of a tiled output is cut in
    units of 32 columns."""
    unit = 32 if dim == "width" and tiled_output else 1
    out = w.out_h if dim == "height" else w.out_w
    s, k, p0 = (w.stride[0], (w.kernel[0] - 1) * w.dilation[0] + 1, w.pads[0]) if dim == "height" else \
        (w.stride[1], (w.kernel[1] - 1) * w.dilation[1] + 1, w.pads[2])
    size = w.h if dim == "height" else w.w
    base, rem = divmod(-(-out // unit), n)
    windows, start = [], 0
    for i in range(n):
        length = min((base + (1 if i < rem else 0)) * unit, out - start)
        if length <= 0:
            continue
        lo, hi = start * s - p0, (start + length - 1) * s - p0 + k  # input rows [lo, hi)
        pad_lo, pad_hi = max(0, -lo), max(0, hi - size)
        rows = min(hi, size) - max(lo, 0)
        if dim == "height":
            windows.append(Window(w.n, rows, w.w, w.c, w.kernel, w.stride, (pad_lo, pad_hi, w.pads[2], w.pads[3]),
                                  w.dilation))
        else:
            windows.append(Window(w.n, w.h, rows, w.c, w.kernel, w.stride, (w.pads[0], w.pads[1], pad_lo, pad_hi),
                                  w.dilation))
        start += length
    return windows


def _conv_dram(spec: ConvSpec, mem: BlockMemory, grid_cores: int) -> L1Use:
    """DRAM slicing: each slice is read into an L1 shard (channels aligned to 8), convolved as
    above, written back; the slice's input is freed after its halo (conv2d.cpp Conv2dSliceAttr)."""
    worst: L1Use | None = None
    worst_peak = -1
    for sw in slice_windows(spec.window, mem.slicing.type.dim, mem.slices):
        s = ConvSpec(sw, spec.cout, spec.groups, spec.bias, spec.weights_dtype, spec.output_dtype,
                     spec.fp32_dest_acc, spec.packer_l1_acc, input_tiled=False, input_dtype=spec.input_dtype)
        use = conv_l1(s, BlockMemory(L1_FULL, mem.act_block_h), grid_cores)
        cin_p = round_up(sw.c, 8)
        in_rows = round_up(sw.n * sw.h * sw.w, use.cores * 32) // use.cores
        datum = int(_held(spec.input_dtype).bytes_per_value)
        sliced = L1Use(use.cb, use.output, use.halo, use.cores, use.shard_rows, False, in_rows * cin_p * datum,
                       use.halo_moves)
        if sliced.peak > worst_peak:
            worst, worst_peak = sliced, sliced.peak
    assert worst is not None
    return worst


class PoolSpec(Struct, frozen=True):
    """A ttnn.max_pool2d as the L1 model sizes it: window and where its input and output live."""

    window: Window
    input_tiled: bool
    input_in_l1: bool  # already height-sharded in L1 (then ttnn keeps its cores)
    output_in_l1: bool  # the L1 path's output stays in L1 (else it is written to DRAM)


@functools.lru_cache(maxsize=4096)
def pool_l1(spec: PoolSpec, mem: BlockMemory, grid_cores: int, input_cores: int | None = None,
            _sliced: bool = False) -> L1Use:
    """One core's L1 for ``ttnn.max_pool2d`` (height-sharded, row-major output) and the halo op
    before it (pool_multi_core_program_factory.cpp); on the DRAM path, its worst slice."""
    if mem.path is BufferType.DRAM:
        worst: L1Use | None = None
        for sw in slice_windows(spec.window, mem.slicing.type.dim, mem.slices, tiled_output=False):
            use = pool_l1(PoolSpec(sw, spec.input_tiled, False, False), BlockMemory(), grid_cores,
                          _sliced=mem.slices > 1)
            if worst is None or use.peak > worst.peak:
                worst = use
        assert worst is not None
        return worst
    w = spec.window
    ncores = (input_cores if spec.input_in_l1 and input_cores else nhw_cores(w.out_nhw, grid_cores))
    rows = round_up(w.out_nhw, ncores) // ncores
    c_in = round_up(w.c, 32 if spec.input_tiled else 8)
    out = rows * round_up(w.c, 16) * 2
    halo = w.halo_sticks(rows) * c_in * 2
    ct = -(-w.c // 32)
    r = w.kernel[0] * w.kernel[1]
    r = r if r <= 16 else 32
    in_cb = 2 * round_up(min(ct, 8) * 32 * r, 1024) * 2
    pool_cbs = 2 * 2048 + 2048 + 2 * in_cb
    pads, untilize = 2 * round_up(c_in * 2, L1_ALIGN), 2 * 2 * ct * 2048 if spec.input_tiled else 0
    if _sliced and spec.input_tiled:
        # a DRAM slice of a tiled input: untilize buffers twice as deep, one pad buffer (measured on
        # the mock p150 for 64 and 128 channels; not found in the source read)
        pads, untilize = pads // 2, 2 * untilize
    halo_cbs = pads + untilize
    in_rows = round_up(w.n * w.h * w.w, ncores * (32 if spec.input_tiled else 1)) // ncores
    staged = 0 if spec.input_in_l1 else in_rows * c_in * 2
    return L1Use(max(pool_cbs, halo_cbs), out, halo, ncores, rows, spec.output_in_l1, staged, w.n > 1)


def tensor_per_core(values: int, channels: int, dtype: DataFormat, cores: int) -> int:
    """An L1 tensor sharded over ``cores`` by rows, tiled: bytes on one core."""
    rows = round_up(values // max(channels, 1), cores * 32) // cores
    return rows // 32 * (round_up(channels, 32) // 32) * dtype.tile_bytes

