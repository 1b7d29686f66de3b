"""A compact read-back for ``spc.Keypoints``: top-K keypoints and their descriptors on the device.

Instead of the NMS score map and the descriptor map (3.1 MB per frame at 480x640), the device
returns K scores, their positions and their sampled, normalised descriptors (0.26 MB for the
top 500). The host finishes with ``spc.KeypointsFromTopK`` (ir/ops/spc_ops.py: threshold,
raster order or best-first, scaling). Where the model keeps every keypoint above the threshold
(HF ``max_keypoints = -1``), K is sized for natural images at this resolution; a frame whose K-th
score is still above the threshold is read densely instead (runtime/runner.py), never cut.

Device calls, on the [1, 1, H*W, 1] NMS map and the [1, 1, hc*wc, C] descriptor map:

1. the kept window of the map (rows ``border..limit_y``, columns ``border..limit_x``), flattened;
   ``ttnn.topk`` gives K' values and flat positions p (K' = max_keypoints + 1, to tell "exactly
   N" from "more than N", or the capacity);
2. in float32 (exact for integers below 2^24): y = floor((p + 0.5) / w'), x = p - y * w',
   then HF's grid_sample coordinates u = (x - 3.5) * (wc - 1) / (W - 4.5) (align_corners) and the
   same for v; corners, weights, and cell numbers v*wc + u (clamped: a clamped corner has weight 0)
   — 29 calls, or the ``keypoint_corners`` kernel with ``--kernels on``;
3. ``ttnn.embedding`` gathers the four corner descriptors (the descriptor map moves to DRAM first,
   leaving L1 to ttnn.topk); weighted sum, L2 normalisation, bfloat16 for the read — 21 calls, or
   the ``descriptor_blend`` kernel (kernels/keypoints.py).

Exact only when no sample reaches outside the coarse map (zero padding): border >= cell/2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spc.ir.graph import Node
from spc.ir.ops.keypoints import KEYPOINT_ATTRS
from spc.kernels import KERNELS
from spc.kernels.keypoints import CORNERS
from spc.plan.program import DeviceTensor, HostNode, decode_args
from spc.ttnn.configs import PageLayout
from spc.ttnn.formats import DataFormat
from spc.ttnn.layout import DeviceLayout, PlainLayout
from spc.ttnn.memory import DRAM_INTERLEAVED

if TYPE_CHECKING:
    from spc.lowering.emitter import Emitter

# capacity when every keypoint is kept: the densest natural images measured hold one per 227 pixels at
# 240x320, one per 338 at 720x1280 (docs/memory.md); 1/128 would give 2,400 slots at 480x640, capped below
KEYPOINTS_PER_PIXEL = 1 / 128
# the largest k ttnn 0.81.1's topk takes: 2464 on maps of 0.9 to 2 million values, 3712 on 17 thousand
# (bisected on the mock p150: "Not enough cores or cache size available to run TopK operation")
TOPK_MAX_K = 2048


def capacity(n: Node) -> int:
    """K' for the device's top-K."""
    if n.attrs.get("mode") == "fixed":
        return int(n.attrs["max_keypoints"])
    if int(n.attrs["max_keypoints"]) >= 0:
        return int(n.attrs["max_keypoints"]) + 1
    h, w = (int(d) for d in n.inputs[0].type.static_shape[-2:])  # type: ignore[union-attr]
    return min(TOPK_MAX_K, max(32, -(-int(h * w * KEYPOINTS_PER_PIXEL) // 32) * 32))


def unsupported(n: Node, k: int, desc_dtype: DataFormat) -> str | None:
    """Why the device cannot produce this node's keypoints exactly, if it cannot."""
    if desc_dtype is not DataFormat.BFLOAT16:
        return f"the descriptor map is {desc_dtype.value} and ttnn.embedding gathers from bfloat16 tables only"
    if int(n.attrs["border"]) * 2 < int(n.attrs["cell"]):
        return f"a border of {n.attrs['border']} px lets descriptor samples reach the zero padding"
    if k > TOPK_MAX_K:
        return f"{k} keypoint slots exceed what ttnn.topk takes ({TOPK_MAX_K})"
    b, ly, lx = (int(n.attrs[a]) for a in ("border", "limit_y", "limit_x"))
    if n.attrs.get("mode") == "fixed":
        if float(n.attrs["fill"]) >= 0:
            return f"the cut border holds {n.attrs['fill']}, which ties with the map's zeros"
        if k > (ly - b) * (lx - b):
            return f"{k} keypoints are more than the {(ly - b) * (lx - b)} pixels inside the border"
    return None


def lower_keypoints(em: Emitter, n: Node, score: str, desc: str, k: int) -> tuple[list[DeviceTensor], HostNode]:
    """Emit the device calls; return the compact device outputs and the host node that finishes."""
    s, d = n.inputs[0], n.inputs[1]
    assert s is not None and d is not None
    h, w = (int(v) for v in s.type.static_shape[-2:])
    _, c, hc, wc = (int(v) for v in d.type.static_shape)
    b, ly, lx, cell = (int(n.attrs[a]) for a in ("border", "limit_y", "limit_x", "cell"))
    inner = lx - b
    name = n.name
    one = DeviceLayout(1, 1, k, 1)

    F32, BF16, U32 = DataFormat.FLOAT32, DataFormat.BFLOAT16, DataFormat.UINT32
    desc_format = em.dtypes.get(desc, BF16)

    def call(op: str, ins: list[str], out: str, store: DataFormat = F32, **args: object) -> str:
        shape = args.pop("out_shape", one.device_shape)
        return em.emit(op, ins, f"{name}/{out}", one, name, store=store, out_shape=shape, **args)

    # the descriptor map leaves L1 first: ttnn.topk needs much of one core's L1 (measured on the mock
    # p150 at 1080x1920: its buffers clashed with the map's shards)
    table = call("ttnn.to_memory_config", [desc], "table_dram", desc_format,
                 out_shape=[1, 1, hc * wc, c], memory_config=DRAM_INTERLEAVED)
    m = call("ttnn.to_layout", [score], "map_rm", BF16, out_shape=[1, 1, h * w, 1], layout=PageLayout.ROW_MAJOR)
    m = call("ttnn.reshape", [m], "map_2d", BF16, out_shape=[1, 1, h, w], shape=[1, 1, h, w])
    m = call("ttnn.slice", [m], "window", BF16, out_shape=[1, 1, ly - b, inner], starts=[0, 0, b, b],
             ends=[1, 1, ly, lx], steps=[1, 1, 1, 1])
    # flattened as tiles: a row-major [1, N] page is the whole map, which the reshape stages in L1
    # (measured on the mock p150: 3.7 MB asked for at 720x1280)
    m = call("ttnn.to_layout", [m], "window_tiled", BF16, out_shape=[1, 1, ly - b, inner], layout=PageLayout.TILE)
    flat = [1, 1, 1, (ly - b) * inner]
    m = call("ttnn.reshape", [m], "window_flat", BF16, out_shape=flat, shape=flat)
    index_dtype = U32 if flat[-1] > 65536 else DataFormat.UINT16  # as ttnn.topk chooses
    values = call("ttnn.topk", [m], "values", BF16, out_shape=[1, 1, 1, k], k=k, dim=-1, largest=True,
                  sorted=True, extra_outputs=[f"{name}/positions"], extra_dtypes=[index_dtype])
    positions = f"{name}/positions"
    p = call("ttnn.typecast", [positions], "p", dtype=F32)
    # cells and bilinear weights of the four corners (kernels/keypoints.py): one kernel, or its calls
    cells = [f"{name}/cell{t}" for t in CORNERS]
    weights = [f"{name}/w{t}" for t in CORNERS]
    params = {"inner": inner, "border": b, "wc": wc, "hc": hc, "half_cell": cell / 2 - 0.5,
              "sx": (wc - 1) / (wc * cell - cell / 2 - 0.5), "sy": (hc - 1) / (hc * cell - cell / 2 - 0.5)}
    if em.kernels:
        em.kernel("keypoint_corners", [p], cells + weights, one, name, store=F32, **params)
    else:
        for step in KERNELS["keypoint_corners"].composed([p], cells + weights, params):
            em.emit(step["op"], step["inputs"], step["output"], one, name, store=F32,
                    out_shape=one.device_shape, **decode_args(step["args"]))
    table = call("ttnn.to_layout", [table], "table_rm", desc_format, out_shape=[1, 1, hc * wc, c],
                 layout=PageLayout.ROW_MAJOR)
    table = call("ttnn.reshape", [table], "table", desc_format, out_shape=[hc * wc, c],
                 shape=[hc * wc, c])
    gathered = []
    for tag, cell_no in zip(CORNERS, cells):
        ids = call("ttnn.typecast", [cell_no], f"ids{tag}", U32, dtype=U32)
        ids = call("ttnn.to_layout", [ids], f"ids{tag}_rm", U32, layout=PageLayout.ROW_MAJOR)
        ids = call("ttnn.reshape", [ids], f"ids{tag}_row", U32, out_shape=[1, k], shape=[1, k])
        gathered.append(call("ttnn.embedding", [ids, table], f"desc{tag}", desc_format,
                             out_shape=[1, k, c], layout=PageLayout.TILE))
    # weighted sum and L2 norm, stored in bfloat16 (kernels/keypoints.py): one kernel, or its calls
    out = f"{name}/descriptors"
    if em.kernels:
        em.kernel("descriptor_blend", gathered + weights, [out], PlainLayout((1, k, c)), name, store=BF16, k=k, c=c)
    else:
        for step in KERNELS["descriptor_blend"].composed(gathered + weights, [out], {"k": k, "c": c}):
            em.emit(step["op"], step["inputs"], step["output"], one, name, store=DataFormat.parse(step["dtype"]),
                    out_shape=step["shape"], **decode_args(step["args"]))
    outputs = [DeviceTensor(values, [1, k], [1, 1, 1, k]), DeviceTensor(positions, [1, k], [1, 1, 1, k]),
               DeviceTensor(out, [1, k, c], [1, k, c])]
    attrs = {k: v for k, v in n.attrs.items() if k in KEYPOINT_ATTRS} | {"height": h, "width": w}
    tail = HostNode("spc.KeypointsFromTopK", n.name, [values, positions, out], [o.name for o in n.outputs], attrs)
    return outputs, tail
