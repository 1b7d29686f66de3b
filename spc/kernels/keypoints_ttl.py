"""``keypoint_corners`` in TT-Lang (kernels/keypoints.py has the reference and the stock calls):
float32 element-wise arithmetic on [1, K] blocks; constants are filled blocks (TT-Lang takes no
scalar operands). Simulated in the test suite by emulator/kernel_sim.py, against the reference."""

from __future__ import annotations

from typing import Any

import ttl  # tt-lang, or tt-lang-sim's namespace once set up


def corners_body(q: dict[str, Any]):
    def body(p: Any) -> tuple[Any, ...]:
        def c(v: float) -> Any:
            return ttl.block.fill(float(v), p.shape)

        y = ttl.math.floor((p + c(0.5)) * c(1.0 / q["inner"]))
        x = p - y * c(q["inner"])
        offset = float(q["border"]) - q["half_cell"]
        u, v = (x + c(offset)) * c(q["sx"]), (y + c(offset)) * c(q["sy"])
        u0, v0 = ttl.math.floor(u), ttl.math.floor(v)
        fu, fv = u - u0, v - v0
        u1 = ttl.math.min(u0 + c(1.0), c(q["wc"] - 1))
        v1 = ttl.math.min(v0 + c(1.0), c(q["hc"] - 1))
        r0, r1 = v0 * c(q["wc"]), v1 * c(q["wc"])
        gu, gv = c(1.0) - fu, c(1.0) - fv
        return r0 + u0, r0 + u1, r1 + u0, r1 + u1, gv * gu, gv * fu, fv * gu, fv * fu

    return body


def corners_op(k: int, q: dict[str, Any], grid: tuple[int, int] = (1, 1)):
    """(positions [1, K] float32, then the 8 outputs [1, K]): see kernels/keypoints.py. The
    outputs are named one by one: the simulator loses writes to tensors it reaches through a
    list in a data-movement kernel (tt-lang-sim 1.1.6, seen here)."""
    wt = -(-k // 32)
    bc = max(d for d in range(1, min(8, wt) + 1) if wt % d == 0)
    nblocks = wt // bc
    body = corners_body(q)

    @ttl.operation(grid=grid)
    def op(P, C00, C01, C10, C11, W00, W01, W10, W11):
        p_dfb = ttl.make_dataflow_buffer_like(P, shape=(1, bc), block_count=2)
        dfbs = [ttl.make_dataflow_buffer_like(t, shape=(1, bc), block_count=2)
                for t in (C00, C01, C10, C11, W00, W01, W10, W11)]

        @ttl.compute()
        def compute():
            for _ in range(ttl.node(dims=1), nblocks, ttl.grid_size(dims=1)):
                with p_dfb.wait() as p:
                    for d, value in zip(dfbs, body(p)):
                        with d.reserve() as o:
                            o.store(value)

        @ttl.datamovement()
        def reader():
            for b in range(ttl.node(dims=1), nblocks, ttl.grid_size(dims=1)):
                with p_dfb.reserve() as p:
                    ttl.copy(P[0:1, b * bc:(b + 1) * bc], p).wait()

        def write(d: Any, t: Any, cols: slice) -> None:
            with d.wait() as o:
                ttl.copy(o, t[0:1, cols]).wait()

        @ttl.datamovement()
        def writer():
            for b in range(ttl.node(dims=1), nblocks, ttl.grid_size(dims=1)):
                cols = slice(b * bc, (b + 1) * bc)
                write(dfbs[0], C00, cols)
                write(dfbs[1], C01, cols)
                write(dfbs[2], C10, cols)
                write(dfbs[3], C11, cols)
                write(dfbs[4], W00, cols)
                write(dfbs[5], W01, cols)
                write(dfbs[6], W10, cols)
                write(dfbs[7], W11, cols)

    return op


def blend_op(k: int, c: int, grid: tuple[int, int] = (1, 1)):
    """``descriptor_blend`` (kernels/keypoints.py): (g00, g01, g10, g11 [1, K, C] bfloat16, w00, w01,
    w10, w11 [1, K] float32, out [1, K, C] bfloat16). Per 32 keypoints: each weight row is turned
    into a column (tile transpose) and broadcast across the C channels; the float32 sum of the four
    weighted corners is normalised by the row's reduce_sum of squares."""
    kt, ct = -(-k // 32), -(-c // 32)

    @ttl.operation(grid=grid)
    def op(G00, G01, G10, G11, W00, W01, W10, W11, OUT):
        g_dfbs = [ttl.make_dataflow_buffer_like(t, shape=(1, 1, ct), block_count=2) for t in (G00, G01, G10, G11)]
        w_dfbs = [ttl.make_dataflow_buffer_like(t, shape=(1, 1), block_count=2) for t in (W00, W01, W10, W11)]
        o_dfb = ttl.make_dataflow_buffer_like(OUT, shape=(1, 1, ct), block_count=2)

        def column(w: Any) -> Any:
            return ttl.block.broadcast(ttl.block.unsqueeze(ttl.block.transpose(w), dims=[0]), dims=[-1],
                                       shape=(1, 1, ct))

        @ttl.compute()
        def compute():
            for _ in range(ttl.node(dims=1), kt, ttl.grid_size(dims=1)):
                with g_dfbs[0].wait() as a0, g_dfbs[1].wait() as a1, g_dfbs[2].wait() as a2, \
                        g_dfbs[3].wait() as a3, w_dfbs[0].wait() as b0, w_dfbs[1].wait() as b1, \
                        w_dfbs[2].wait() as b2, w_dfbs[3].wait() as b3, o_dfb.reserve() as o:
                    acc = a0 * column(b0) + a1 * column(b1) + a2 * column(b2) + a3 * column(b3)
                    ss = ttl.math.reduce_sum(acc * acc, dims=[-1], shape=(1, 1, 1))
                    ss = ttl.math.max(ss, ttl.block.fill(1e-24, (1, 1, 1)))  # F.normalize's eps, squared
                    o.store(acc * ttl.block.broadcast(ttl.math.rsqrt(ss), dims=[-1], shape=(1, 1, ct)))

        @ttl.datamovement()
        def reader():
            for r in range(ttl.node(dims=1), kt, ttl.grid_size(dims=1)):
                with g_dfbs[0].reserve() as a0, g_dfbs[1].reserve() as a1, g_dfbs[2].reserve() as a2, \
                        g_dfbs[3].reserve() as a3:
                    t0 = ttl.copy(G00[0:1, r:r + 1, 0:ct], a0)
                    t1 = ttl.copy(G01[0:1, r:r + 1, 0:ct], a1)
                    t2 = ttl.copy(G10[0:1, r:r + 1, 0:ct], a2)
                    t3 = ttl.copy(G11[0:1, r:r + 1, 0:ct], a3)
                    t0.wait()
                    t1.wait()
                    t2.wait()
                    t3.wait()
                with w_dfbs[0].reserve() as b0, w_dfbs[1].reserve() as b1, w_dfbs[2].reserve() as b2, \
                        w_dfbs[3].reserve() as b3:
                    u0 = ttl.copy(W00[0:1, r:r + 1], b0)
                    u1 = ttl.copy(W01[0:1, r:r + 1], b1)
                    u2 = ttl.copy(W10[0:1, r:r + 1], b2)
                    u3 = ttl.copy(W11[0:1, r:r + 1], b3)
                    u0.wait()
                    u1.wait()
                    u2.wait()
                    u3.wait()

        @ttl.datamovement()
        def writer():
            for r in range(ttl.node(dims=1), kt, ttl.grid_size(dims=1)):
                with o_dfb.wait() as o:
                    ttl.copy(o, OUT[0:1, r:r + 1, 0:ct]).wait()

    return op
