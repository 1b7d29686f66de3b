"""Resize lowered to ``ttnn.upsample`` where it is one: an NCHW map scaled by whole numbers on its
height and width, nearest (torch's, or half-pixel rounding, the same samples at whole scales) or
half-pixel bilinear (torch's ``align_corners=False``, which ttnn's bilinear is: its golden
function is ``torch.nn.functional.interpolate``). Anything else stays on the host, with the reason.

The map goes in the conv form, viewed as [N, H, W, C] for the call, and comes back flat.
"""

from __future__ import annotations

from spc.ir.graph import Node
from spc.lowering.emitter import Emitter
from spc.lowering.operands import Ins, shape_of
from spc.lowering.registry import lowers
from spc.lowering.shifted import upsample_linear
from spc.ttnn.formats import DataFormat
from spc.ttnn.layout import DeviceLayout
from spc.ttnn.memory import DRAM_INTERLEAVED

_NEAREST = {("asymmetric", "floor"), ("half_pixel", "round_prefer_floor"), ("half_pixel", "round_prefer_ceil"),
            ("pytorch_half_pixel", "round_prefer_floor"), ("pytorch_half_pixel", "round_prefer_ceil")}


def _scales(n: Node) -> tuple[int, int] | None:
    x, y = n.inputs[0], n.output
    assert x is not None
    (xn, xc, xh, xw), (yn, yc, yh, yw) = shape_of(x), shape_of(y)
    if (xn, xc) != (yn, yc) or yh % xh or yw % xw:
        return None
    return yh // xh, yw // xw


def _resize_check(n: Node) -> str | None:
    x = n.inputs[0]
    if x is None or x.type.rank != 4:
        return "ttnn.upsample scales a 4-D map"
    if any(v is not None and not v.is_const for v in n.inputs[1:]):
        return "the scales or sizes are not constant"
    if n.attrs.get("antialias") or n.attrs.get("axes") not in (None, [], [0, 1, 2, 3]):
        return "antialias and axes are not ttnn.upsample's"
    scales = _scales(n)
    if scales is None or min(scales) < 1:
        return "the height and width are not scaled by whole numbers (ttnn.upsample's bilinear takes only those)"
    mode = n.attrs.get("mode", "nearest")
    coords = n.attrs.get("coordinate_transformation_mode", "half_pixel")
    if mode == "nearest" and (coords, n.attrs.get("nearest_mode", "round_prefer_floor")) not in _NEAREST:
        return f"nearest with {coords} and {n.attrs.get('nearest_mode', 'round_prefer_floor')} is not ttnn's nearest"
    if mode == "linear" and coords not in ("half_pixel", "pytorch_half_pixel"):
        return f"linear with {coords} is not ttnn's (half-pixel) bilinear"
    if mode == "linear" and x.type.static_shape[1] % 32:
        return "ttnn.upsample's bilinear takes channels in multiples of 32 (mock p150)"
    if mode not in ("nearest", "linear"):
        return f"mode {mode} has no ttnn.upsample"
    return None


@lowers("onnx.Resize", check=_resize_check, conv_form=True)
def _resize(em: Emitter, n: Node, ins: Ins) -> str:
    x = n.inputs[0]
    assert x is not None and ins[0] is not None
    src, out = DeviceLayout.of(shape_of(x)), DeviceLayout.of(shape_of(n.output))
    scales = _scales(n)
    assert scales is not None
    base = n.output.name
    mode = "nearest" if n.attrs.get("mode", "nearest") == "nearest" else "bilinear"
    t = em.to_nhwc(ins[0], x, n.name)
    if mode == "bilinear" and em.dtypes.get(t) is DataFormat.FLOAT32:
        # ttnn's bilinear takes bf16 only: a map stored in float32 keeps float32 (lowering/shifted.py)
        return upsample_linear(em, t, src, scales, out, n.output.name, n.name)
    t = em.interleaved(t, n.name)
    if mode == "bilinear":  # the mock p150: "Bilinear upsample requires BFLOAT16 input"
        t = em.stored_as(t, DataFormat.BFLOAT16, n.name)
    t = em.row_major(t, n.name)
    t = em.emit("ttnn.reshape", [t], base + "/nhwc", src, n.name, shape=[src.n, src.h, src.w, src.c])
    u = em.emit("ttnn.upsample", [t], base + "/upsampled", out, n.name, out_shape=[out.n, out.h, out.w, out.c],
                batch_size=src.n, input_h=src.h, input_w=src.w, channels=src.c, scale_factor=list(scales), mode=mode,
                memory_config=DRAM_INTERLEAVED)  # bilinear leaves its result sharded, in shards not tile-sized
    return em.emit("ttnn.reshape", [u], base, out, n.name, shape=out.device_shape)
