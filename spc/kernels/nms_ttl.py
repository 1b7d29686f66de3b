"""The NMS kernels in TT-Lang (``ttl``), on the score map as an [H, W] tensor of 32x32 tiles.

Runs in tt-lang-sim (emulator/kernel_sim.py, in the test suite) and is written for tt-lang's compiler:
TILE layout only (the compiler rejects row-major operands: tt-lang issue #173), whole-tile copies,
one compute and two data-movement kernels per operation. Each output tile row is one block of
``bc`` tiles, spread round-robin over the grid's nodes.

* ``nms_select`` (kernels/nms.py's reference: ``s * (s == m)``), ``nms_suppress`` and
  ``nms_admit``: element-wise bodies on blocks;
* ``window_max_select``: the 9x9 window maximum fused with the select, on a single-channel map.
  TT-Lang has no sub-tile shift (copies move whole tiles; ``ttl.block`` has no roll or slice), so
  a shift within a tile is a product with a constant 0/1 shift matrix: exact, since every output
  is 1*x plus zeros. The map comes padded by one tile of a finite sentinel (bf16's lowest value,
  not -inf: 0 * -inf is NaN); each output tile reads its 3x3 tile neighbourhood, takes the row
  maximum over 9 horizontal shifts, then the column maximum over 9 vertical ones. Equal to
  max_pool2d with -inf padding for inputs above the sentinel, not NaN, not -0.0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ttl  # tt-lang, or tt-lang-sim's namespace once ttl.sim.ttlang_sim.setup_simulator_imports() ran

TILE = 32
WINDOW, RADIUS = 9, 4


def _blocks(width_tiles: int) -> int:
    return max(d for d in range(1, min(8, width_tiles) + 1) if width_tiles % d == 0)


def elementwise(body: Callable[..., Any], arity: int, height: int, width: int, grid: tuple[int, int] = (1, 1)):
    """An operation applying ``body`` to ``arity`` [H, W] inputs block by block; its last
    argument is the output."""
    ht, wt = -(-height // TILE), -(-width // TILE)
    bc = _blocks(wt)
    per_row = wt // bc
    nblocks = ht * per_row

    @ttl.operation(grid=grid)
    def op(*tensors):
        ins, out = tensors[:arity], tensors[arity]
        in_dfbs = [ttl.make_dataflow_buffer_like(t, shape=(1, bc), block_count=2) for t in ins]
        out_dfb = ttl.make_dataflow_buffer_like(out, shape=(1, bc), block_count=2)

        @ttl.compute()
        def compute():
            for _ in range(ttl.node(dims=1), nblocks, ttl.grid_size(dims=1)):
                blocks = [d.wait() for d in in_dfbs]
                with out_dfb.reserve() as o:
                    o.store(body(*blocks))
                for b in blocks:
                    b.pop()

        @ttl.datamovement()
        def reader():
            for b in range(ttl.node(dims=1), nblocks, ttl.grid_size(dims=1)):
                r, c = b // per_row, (b % per_row) * bc
                blocks = [d.reserve() for d in in_dfbs]
                for t, blk in zip(ins, blocks):
                    tx = ttl.copy(t[r:r + 1, c:c + bc], blk)
                    tx.wait()
                for blk in blocks:
                    blk.push()

        @ttl.datamovement()
        def writer():
            for b in range(ttl.node(dims=1), nblocks, ttl.grid_size(dims=1)):
                r, c = b // per_row, (b % per_row) * bc
                with out_dfb.wait() as o:
                    ttl.copy(o, out[r:r + 1, c:c + bc]).wait()

    return op


def _zeros_like(block: Any) -> Any:
    return ttl.block.fill(0.0, block.shape)


def select_body(s: Any, m: Any) -> Any:
    return s * ttl.math.eq(s, m)


def suppress_body(s: Any, near: Any) -> Any:
    free = ttl.math.rsub(ttl.math.gt(near, _zeros_like(near)), 1)  # near <= 0, as 0/1
    return s * free


def admit_body(mask: Any, rest: Any, rmax: Any, near: Any) -> Any:
    free = ttl.math.rsub(ttl.math.gt(near, _zeros_like(near)), 1)
    return ttl.math.max(mask, ttl.math.eq(rest, rmax) * free)  # 0/1 masks: max is "or"


BODIES: dict[str, tuple[Callable[..., Any], int]] = {
    "nms_select": (select_body, 2),
    "nms_suppress": (suppress_body, 2),
    "nms_admit": (admit_body, 4),
}


def window_max_select(height: int, width: int, grid: tuple[int, int] = (1, 1)):
    """(padded, S, PH, PV, M, out): the map inside a one-tile sentinel border, the map, the shift
    matrices of :func:`shift_matrices`; writes M (the 9x9 window maxima) and out (the select)."""
    ht, wt = -(-height // TILE), -(-width // TILE)
    ntiles = ht * wt

    @ttl.operation(grid=grid)
    def op(padded, S, PH, PV, M, out):
        nb_dfb = ttl.make_dataflow_buffer_like(padded, shape=(3, 3), block_count=2)
        s_dfb = ttl.make_dataflow_buffer_like(S, shape=(1, 1), block_count=2)
        ph_dfb = ttl.make_dataflow_buffer_like(PH, shape=(WINDOW, 3, 1), block_count=1)
        pv_dfb = ttl.make_dataflow_buffer_like(PV, shape=(WINDOW, 1, 3), block_count=1)
        m_dfb = ttl.make_dataflow_buffer_like(M, shape=(1, 1), block_count=2)
        o_dfb = ttl.make_dataflow_buffer_like(out, shape=(1, 1), block_count=2)

        @ttl.compute()
        def compute():
            mine = range(ttl.node(dims=1), ntiles, ttl.grid_size(dims=1))
            if len(mine) == 0:  # an idle node must not wait on constants it never uses
                return
            ph, pv = ph_dfb.wait(), pv_dfb.wait()
            for _ in mine:
                with nb_dfb.wait() as nb, s_dfb.wait() as s, m_dfb.reserve() as m, o_dfb.reserve() as o:
                    rows = ttl.math.reduce_max(nb @ ph, dims=[0], shape=(1, 3, 1))  # 1x9 maxima
                    cols = ttl.math.reduce_max(pv @ ttl.block.squeeze(rows, dims=[0]), dims=[0], shape=(1, 1, 1))
                    wmax = ttl.block.squeeze(cols, dims=[0])  # 9x1 of 1x9: the 9x9 maxima
                    m.store(wmax)
                    o.store(s * ttl.math.eq(s, wmax))
            ph.pop()
            pv.pop()

        @ttl.datamovement()
        def reader():
            mine = range(ttl.node(dims=1), ntiles, ttl.grid_size(dims=1))
            if len(mine) == 0:
                return
            with ph_dfb.reserve() as ph, pv_dfb.reserve() as pv:
                tx_h = ttl.copy(PH[0:WINDOW, 0:3, 0:1], ph)  # the batch dimension counts elements
                tx_v = ttl.copy(PV[0:WINDOW, 0:1, 0:3], pv)
                tx_h.wait()
                tx_v.wait()
            for t in mine:
                r, c = t // wt, t % wt
                with nb_dfb.reserve() as nb, s_dfb.reserve() as s:
                    tx_nb = ttl.copy(padded[r:r + 3, c:c + 3], nb)  # a one-tile border around the map
                    tx_s = ttl.copy(S[r:r + 1, c:c + 1], s)
                    tx_nb.wait()
                    tx_s.wait()

        @ttl.datamovement()
        def writer():
            for t in range(ttl.node(dims=1), ntiles, ttl.grid_size(dims=1)):
                r, c = t // wt, t % wt
                with m_dfb.wait() as m:
                    ttl.copy(m, M[r:r + 1, c:c + 1]).wait()
                with o_dfb.wait() as o:
                    ttl.copy(o, out[r:r + 1, c:c + 1]).wait()

    return op


def shift_matrices(torch: Any) -> tuple[Any, Any]:
    """PH[d] (96x32) moves column j + d - 4 of a 3-tile row band to column j; PV[d] (32x96) moves
    row i + d - 4 of a 3-tile column band to row i."""
    ph = torch.zeros(WINDOW, 3 * TILE, TILE)
    pv = torch.zeros(WINDOW, TILE, 3 * TILE)
    j = torch.arange(TILE)
    for d in range(WINDOW):
        ph[d, TILE + j + d - RADIUS, j] = 1.0
        pv[d, j, TILE + j + d - RADIUS] = 1.0
    return ph, pv
