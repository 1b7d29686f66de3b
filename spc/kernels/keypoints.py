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
from spc.ttnn.formats import DataFormat

if TYPE_CHECKING:
    import torch

CORNERS = ("00", "01", "10", "11")


def corner_calls(inputs: list[str], outputs: list[str], q: dict[str, Any]) -> list[dict[str, Any]]:
    """The stock calls, in the order the reference computes (names under the first output), as the
    plan writes calls (formats by their JSON spelling: TtOp.from_step reads them back)."""
    base = outputs[0].rsplit("/", 1)[0] + "/corners"
    calls: list[dict[str, Any]] = []

    def call(op: str, ins: list[str], out: str, **args: Any) -> str:
        calls.append({"op": op, "inputs": ins, "output": out, "args": args, "dtype": DataFormat.FLOAT32.value})
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


def blend_calls(inputs: list[str], outputs: list[str], q: dict[str, Any]) -> list[dict[str, Any]]:
    """``descriptor_blend``'s stock calls: the four gathered corner descriptors (bfloat16, [1, K, C])
    weighted by their bilinear weights (float32), summed, L2-normalised (F.normalize's eps), stored
    in bfloat16. Inputs: g00, g01, g10, g11, w00, w01, w10, w11."""
    base = outputs[0].rsplit("/", 1)[0] + "/blend"
    k, c = int(q["k"]), int(q["c"])
    calls: list[dict[str, Any]] = []

    def call(op: str, ins: list[str], out: str, out_shape: list[int], dtype: DataFormat = DataFormat.FLOAT32,
             **args: Any) -> str:
        if op == "ttnn.typecast":
            args["dtype"] = dtype.value  # the call's argument, and the result's format
        calls.append({"op": op, "inputs": ins, "output": out, "args": args, "dtype": dtype.value, "shape": out_shape})
        return out

    acc = None
    for tag, g, w in zip(CORNERS, inputs[:4], inputs[4:]):
        g32 = call("ttnn.typecast", [g], f"{base}/desc{tag}_f32", [1, k, c], dtype=DataFormat.FLOAT32)
        col = call("ttnn.reshape", [w], f"{base}/w{tag}_col", [1, k, 1], shape=[1, k, 1])
        term = call("ttnn.multiply", [g32, col], f"{base}/term{tag}", [1, k, c])
        acc = term if acc is None else call("ttnn.add", [acc, term], f"{base}/sum{tag}", [1, k, c])
    assert acc is not None
    sq = call("ttnn.multiply", [acc, acc], f"{base}/sq", [1, k, c])
    ss = call("ttnn.sum", [sq], f"{base}/sumsq", [1, k, 1], dim=-1, keepdim=True)
    ss = call("ttnn.clamp", [ss], f"{base}/sumsq_clamped", [1, k, 1], min=1e-24)  # F.normalize's eps, squared
    inv = call("ttnn.rsqrt", [ss], f"{base}/inv_norm", [1, k, 1])
    out = call("ttnn.multiply", [acc, inv], f"{base}/descriptors_f32", [1, k, c])
    call("ttnn.typecast", [out], outputs[0], [1, k, c], dtype=DataFormat.BFLOAT16)
    return calls


def blend(g00: torch.Tensor, g01: torch.Tensor, g10: torch.Tensor, g11: torch.Tensor, w00: torch.Tensor,
          w01: torch.Tensor, w10: torch.Tensor, w11: torch.Tensor, k: int, c: int) -> torch.Tensor:
    """The reference: :func:`blend_calls`' arithmetic in float32, in the same order (before the
    result is stored in bfloat16, which the caller does)."""
    acc = None
    for g, w in ((g00, w00), (g01, w01), (g10, w10), (g11, w11)):
        term = g.float().reshape(1, k, c) * w.reshape(1, k, 1)
        acc = term if acc is None else acc + term
    assert acc is not None
    ss = (acc * acc).sum(dim=-1, keepdim=True).clamp(min=1e-24)
    return acc * ss.rsqrt()


register(Kernel("descriptor_blend", 8, blend, blend_calls,
                "bilinear blend of four gathered descriptors, L2-normalised, bfloat16"))
