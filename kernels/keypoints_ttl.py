"""``keypoint_corners`` in TT-Lang (kernels/keypoints.py has the reference and the stock calls):
float32 element-wise arithmetic on [1, K] blocks; constants are filled blocks (TT-Lang takes no
scalar operands). Simulated in the test suite by kernels/simulate.py, against the reference."""

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
