"""``keypoint_corners``: from the top-K positions to the descriptor cells and bilinear weights.

The compact read-back (lowering/readback.py) turns each position p (a flat index into the map's
kept window, as float32: exact below 2^24) into HF's grid_sample sample on the coarse descriptor
map: y = floor((p + 0.5) / w'), x = p - y * w', u = (x + border - 3.5) * sx, v likewise; the
four corners' cell numbers (row * wc + column, the far ones clamped: a clamped corner has
weight 0) and weights. Stock ttnn spells that as 29 float32 element-wise calls; the kernel is one.

Outputs, in order: cell00, cell01, cell10, cell11, w00, w01, w10, w11 (corner "rc": row r,
column c). Parameters: ``inner`` (w'), ``border``, ``sx``, ``sy``, ``wc``, ``hc``, ``half_cell``
(cell / 2 - 0.5, the grid_sample offset).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spc.kernels.registry import Kernel, register

if TYPE_CHECKING:
    import torch

CORNERS = ("00", "01", "10", "11")


def corner_calls(inputs: list[str], outputs: list[str], q: dict[str, Any]) -> list[dict[str, Any]]:
    """The stock calls, in the order the reference computes (names under the first output)."""
    base = outputs[0].rsplit("/", 1)[0] + "/corners"
    calls: list[dict[str, Any]] = []

    def call(op: str, ins: list[str], out: str, **args: Any) -> str:
        calls.append({"op": op, "inputs": ins, "output": out, "args": args, "dtype": "float32"})
        return out

    p = inputs[0]
    y = call("ttnn.floor", [call("ttnn.multiply", [call("ttnn.add", [p], f"{base}/p_mid", scalar=0.5)],
                                 f"{base}/rows", scalar=1.0 / q["inner"])], f"{base}/y")
    x = call("ttnn.subtract", [p, call("ttnn.multiply", [y], f"{base}/row_start", scalar=float(q["inner"]))],
             f"{base}/x")
    offset = float(q["border"]) - q["half_cell"]
    u = call("ttnn.multiply", [call("ttnn.add", [x], f"{base}/x_px", scalar=offset)], f"{base}/u", scalar=q["sx"])
    v = call("ttnn.multiply", [call("ttnn.add", [y], f"{base}/y_px", scalar=offset)], f"{base}/v", scalar=q["sy"])
    u0, v0 = call("ttnn.floor", [u], f"{base}/u0"), call("ttnn.floor", [v], f"{base}/v0")
    fu, fv = call("ttnn.subtract", [u, u0], f"{base}/fu"), call("ttnn.subtract", [v, v0], f"{base}/fv")
    u1 = call("ttnn.clamp", [call("ttnn.add", [u0], f"{base}/u0_next", scalar=1.0)], f"{base}/u1",
              max=float(q["wc"] - 1))
    v1 = call("ttnn.clamp", [call("ttnn.add", [v0], f"{base}/v0_next", scalar=1.0)], f"{base}/v1",
              max=float(q["hc"] - 1))
    r0 = call("ttnn.multiply", [v0], f"{base}/row0", scalar=float(q["wc"]))
    r1 = call("ttnn.multiply", [v1], f"{base}/row1", scalar=float(q["wc"]))
    gu, gv = call("ttnn.rsub", [fu], f"{base}/gu", scalar=1.0), call("ttnn.rsub", [fv], f"{base}/gv", scalar=1.0)
    cells = dict(zip(CORNERS, outputs[:4]))
    weights = dict(zip(CORNERS, outputs[4:]))
    for tag, row, col in (("00", r0, u0), ("01", r0, u1), ("10", r1, u0), ("11", r1, u1)):
        call("ttnn.add", [row, col], cells[tag])
    for tag, wy, wx in (("00", gv, gu), ("01", gv, fu), ("10", fv, gu), ("11", fv, fu)):
        call("ttnn.multiply", [wy, wx], weights[tag])
    return calls


def corners(p: torch.Tensor, inner: int, border: int, sx: float, sy: float, wc: int, hc: int,
            half_cell: float) -> tuple[torch.Tensor, ...]:
    """The reference: :func:`corner_calls`' arithmetic in float32, in the same order."""
    f32 = p.dtype

    def c(v: float) -> torch.Tensor:
        return p.new_tensor(v, dtype=f32)  # a float32 scalar, as the device's operand

    y = ((p + c(0.5)) * c(1.0 / inner)).floor()
    x = p - y * c(float(inner))
    offset = float(border) - half_cell
    u, v = (x + c(offset)) * c(sx), (y + c(offset)) * c(sy)
    u0, v0 = u.floor(), v.floor()
    fu, fv = u - u0, v - v0
    u1 = (u0 + c(1.0)).clamp(max=float(wc - 1))
    v1 = (v0 + c(1.0)).clamp(max=float(hc - 1))
    r0, r1 = v0 * c(float(wc)), v1 * c(float(wc))
    gu, gv = c(1.0) - fu, c(1.0) - fv
    return r0 + u0, r0 + u1, r1 + u0, r1 + u1, gv * gu, gv * fu, fv * gu, fv * fu


register(Kernel("keypoint_corners", 1, corners, corner_calls,
                "descriptor cells and bilinear weights of top-K positions"))
