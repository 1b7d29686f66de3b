"""Lowerings of the ops spc's passes create (conv with its activation, the score fold, NMS, the
L2 norm) and of max pooling: the calls that keep their values in ttnn's conv layout
``[1, 1, N*H*W, C]``. An input held in the plain form is converted first (Emitter.to_nhwc).
"""

from __future__ import annotations

from spc.ir.graph import Node, Value
from spc.lowering import shifted
from spc.lowering.emitter import Emitter
from spc.lowering.registry import lowers
from spc.ttnn.configs import Activation, ComputeConfig, Conv2dConfig, PageLayout
from spc.ttnn.formats import DataFormat
from spc.ttnn.layout import DeviceLayout, PlainLayout
from spc.ttnn.memory import DRAM_INTERLEAVED, L1_FULL
from spc.ttnn.precision import BlockPrecision

# Convs and pools are lowered in their default memory configuration (L1, ttnn's activation blocks);
# the memory planner (memory/planner.py) chooses each block's and rewrites its calls.


def _layout(v: Value) -> DeviceLayout:
    return DeviceLayout.of(v.type.static_shape)


def _conv_check(n: Node) -> str | None:
    w, b = n.inputs[1], n.input(2)
    if w is None or not w.is_const or (b is not None and not b.is_const):
        return "ttnn.conv2d takes constant weights and bias"
    if n.inputs[0] is None or n.inputs[0].type.rank != 4:
        return "ttnn.conv2d is 2-D"
    return None


def pool2d_check(n: Node, call: str) -> str | None:
    """Why ttnn's 2-D pools (``call``) cannot take this ONNX pool, or None."""
    x = n.inputs[0]
    if x is None or x.type.rank != 4 or len(n.attrs.get("kernel_shape", [])) != 2:
        return f"{call} is 2-D"
    if n.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return f"auto_pad={n.attrs['auto_pad']}"
    pads = n.attrs.get("pads", [0, 0, 0, 0])
    if pads[0] != pads[2] or pads[1] != pads[3]:
        return f"{call} pads symmetrically, got pads {list(pads)}"
    k = n.attrs["kernel_shape"]
    if pads[0] > k[0] // 2 or pads[1] > k[1] // 2:
        return f"{call} pads at most half the window, got pads {list(pads)} for {list(k)}"
    return None


def _pair(values) -> tuple[int, int]:
    return int(values[0]), int(values[1])


def pool_window(n: Node) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """An ONNX 2-D pool's kernel, strides and (symmetric: pool2d_check) pads, by rows and columns."""
    pads = n.attrs.get("pads", [0, 0, 0, 0])
    return _pair(n.attrs["kernel_shape"]), _pair(n.attrs.get("strides", [1, 1])), (int(pads[0]), int(pads[1]))


def _pool_check(n: Node) -> str | None:
    if len(n.outputs) > 1:
        return "ttnn.max_pool2d does not return ONNX's Indices output"
    return pool2d_check(n, "ttnn.max_pool2d")


@lowers("spc.Conv2d", check=_conv_check, conv_form=True)
def _conv2d(em: Emitter, n: Node, ins: list[str]) -> str:
    x, w, b = n.inputs[0], n.inputs[1], n.input(2)
    assert x is not None and w is not None
    src = _layout(x)
    ins = [em.to_nhwc(ins[0], x, n.name)]
    pads = n.attrs["pads"]
    scale = n.input(3)
    p = n.precision or BlockPrecision()
    if scale is None and p.output_dtype is not DataFormat.FLOAT32:
        # ttnn tilizes a float32 input in the output's format (tilize_helpers: fast tilize unless the
        # output is float32, which rounds it to bf16): a conv stored in float32 reads float32 (the
        # matrix engine takes it as TF32), any other reads bf16, cast here as the L1 model sizes it
        ins = [em.stored_as(ins[0], DataFormat.BFLOAT16, n.name)]
    weights = {"weight_tensor": em.weight(w)}
    if b is not None and scale is None:
        weights["bias_tensor"] = em.weight(b)
    conv_config = Conv2dConfig(p.weights_dtype, Activation.RELU if n.attrs["activation"] == "relu" else None)
    compute_config = ComputeConfig(p.math_fidelity, p.fp32_dest_acc_en, p.packer_l1_acc)
    # a scaled conv: the integers' sum in float32 (exact to 2^24), then times the scale and plus the
    # bias, both float32 (a bias in the weights' bf16 would move the sum by up to 1/512 of itself);
    # relu(a) * s = relu(a * s) for s > 0, and a bias comes only with a rectifying conv fused after it
    out, store = (n.output.name + "/integers", DataFormat.FLOAT32) if scale is not None else (n.output.name,
                                                                                                  p.output_dtype)
    relu_late = scale is not None and b is not None and conv_config.activation is not None
    if relu_late:
        conv_config = Conv2dConfig(p.weights_dtype, None)
    y = em.emit("ttnn.conv2d", [ins[0]], out, _layout(n.output), n.name, weights,
                store=store, in_channels=src.c, out_channels=int(w.type.static_shape[0]), batch_size=src.n,
                input_height=src.h, input_width=src.w, kernel_size=list(n.attrs["kernel_shape"]),
                stride=list(n.attrs["strides"]), padding=[pads[0], pads[2], pads[1], pads[3]],
                dilation=list(n.attrs["dilations"]), groups=int(n.attrs["group"]), dtype=store,
                conv_config=conv_config, compute_config=compute_config, slice_config=L1_FULL)
    if scale is None:
        return y
    c, f32, lay = int(scale.type.numel), DataFormat.FLOAT32, _layout(n.output)
    k = em.constant(scale, scale.data, [1, 1, 1, c], n.name, dtype=f32)
    last = b is None and not relu_late
    y = em.emit("ttnn.multiply", [y, k], n.output.name if last else n.output.name + "/scaled", lay, n.name,
                store=p.output_dtype if last else f32)
    if b is not None:
        kb = em.constant(b, b.data, [1, 1, 1, c], n.name, dtype=f32)
        y = em.emit("ttnn.add", [y, kb], n.output.name + "/biased" if relu_late else n.output.name, lay, n.name,
                    store=f32 if relu_late else p.output_dtype)
    if relu_late:
        y = em.emit("ttnn.relu", [y], n.output.name, lay, n.name, store=p.output_dtype)
    return y


@lowers("onnx.MaxPool", check=_pool_check, conv_form=True)
def _max_pool(em: Emitter, n: Node, ins: list[str]) -> str:
    x = n.inputs[0]
    assert x is not None
    src = _layout(x)
    pads = n.attrs.get("pads", [0, 0, 0, 0])
    ins = [em.to_nhwc(ins[0], x, n.name)]
    if (em.dtypes.get(ins[0]) is DataFormat.FLOAT32 and _pair(n.attrs.get("dilations", [1, 1])) == (1, 1)
            and not n.attrs.get("ceil_mode", 0)):
        # ttnn's pools take bf16 only, and an NMS compares the map with its pool: a pool of the rounded
        # map is not the map's maximum (DISK: no keypoint left). float32 keeps float32, exactly
        return shifted.window_max(em, ins[0], src, *pool_window(n), _layout(n.output), n.output.name, n.name)
    # read by anything but convs and pools (an NMS spelled op by op): interleaved, as spc.Nms keeps
    # its pools, since ttnn's element-wise calls reject the default height shards (not tile-sized)
    windowed = {"spc.Conv2d", "onnx.MaxPool"}
    memory = {} if all(u.op.name in windowed for u, _ in n.output.uses) else {"memory_config": DRAM_INTERLEAVED}
    return em.emit("ttnn.max_pool2d", [ins[0]], n.output.name, _layout(n.output), n.name,
                   batch_size=src.n, input_h=src.h, input_w=src.w, channels=src.c,
                   kernel_size=list(n.attrs["kernel_shape"]), stride=list(n.attrs.get("strides", [1, 1])),
                   padding=[pads[0], pads[1]], dilation=list(n.attrs.get("dilations", [1, 1])),
                   ceil_mode=bool(n.attrs.get("ceil_mode", 0)), slice_config=L1_FULL, **memory)


@lowers("spc.ScoreFold", conv_form=True)
def _score_fold(em: Emitter, n: Node, ins: list[str]) -> str:
    """softmax over the channel (last) axis of [1,1,hw,c²+1], keep c² channels, then depth-to-space
    as a row-major reshape/permute: [1,h,w,c,c] -> [1,h,c,w,c] -> [1,1,N*H*W,1]."""
    x = n.inputs[0]
    assert x is not None
    src, out = _layout(x), _layout(n.output)
    cell = int(n.attrs["cell"])
    base = n.output.name
    ins = [em.to_nhwc(ins[0], x, n.name)]  # ttnn.softmax over the last axis takes row major too (mock p150)
    # ttnn pads 65 channels to 96 in tiles; softmax must see only the logical 65, which
    # ttnn.softmax does on a logical shape (verified by the emulator's masking test)
    t = em.emit("ttnn.softmax", [ins[0]], base + "/softmax", src, n.name, dim=-1, numeric_stable=True)
    kept = DeviceLayout(src.n, src.h, src.w, cell * cell)
    t = em.emit("ttnn.slice", [t], base + "/keep", kept, n.name, starts=[0, 0, 0, 0],
                ends=[1, 1, src.n * src.h * src.w, cell * cell], steps=[1, 1, 1, 1])
    t = em.emit("ttnn.to_layout", [t], base + "/row_major", kept, n.name, layout=PageLayout.ROW_MAJOR)
    t = em.emit("ttnn.reshape", [t], base + "/cells", kept, n.name, shape=[src.n, src.h, src.w, cell, cell])
    t = em.emit("ttnn.permute", [t], base + "/interleave", kept, n.name, dims=[0, 1, 3, 2, 4])
    # one channel per page is not L1-aligned as a shard: ttnn needs this view interleaved
    # (interleaved_to_sharded_op.cpp "Shard page size must currently have L1 aligned page size")
    return em.emit("ttnn.reshape", [t], base, out, n.name, shape=out.device_shape, memory_config=DRAM_INTERLEAVED)


@lowers("spc.Nms", conv_form=True)
def _nms(em: Emitter, n: Node, ins: list[str]) -> str:
    """SuperPoint NMS as ttnn calls on the [1,1,H*W,1] map: window max by max_pool2d, masks as
    bf16 0/1 tensors."""
    x = n.inputs[0]
    assert x is not None
    lay = _layout(x)
    r = int(n.attrs["radius"])
    base = n.output.name
    ins = [em.to_nhwc(ins[0], x, n.name)]
    # max_pool2d's default output is height-sharded with non-tile shards, which the element-wise
    # ops after it reject (tensor_layout.cpp "Physical shard shape ... must be tile sized"): interleave
    pool = dict(batch_size=lay.n, input_h=lay.h, input_w=lay.w, channels=lay.c, kernel_size=[2 * r + 1] * 2,
                stride=[1, 1], padding=[r, r], dilation=[1, 1], ceil_mode=False, memory_config=DRAM_INTERLEAVED,
                slice_config=L1_FULL)

    def window_max(x: str, out: str) -> str:
        if em.dtypes.get(x) is DataFormat.FLOAT32:  # ttnn's pools take bf16 only: float32 stays exact
            return shifted.window_max(em, x, lay, (2 * r + 1, 2 * r + 1), (1, 1), (r, r), lay, out, n.name)
        return em.emit("ttnn.max_pool2d", [x], out, lay, n.name, **pool)

    s = ins[0]
    wmax = window_max(s, f"{base}/max0")
    rounds = int(n.attrs["iterations"])
    if em.kernels and rounds == 0:
        return em.kernel("nms_select", [s, wmax], [base], _layout(n.output), n.name)
    mask = em.emit("ttnn.eq", [s, wmax], f"{base}/mask0", lay, n.name)
    for i in range(1, rounds + 1):
        near = window_max(mask, f"{base}/near{i}")
        if em.kernels:
            rest = em.kernel("nms_suppress", [s, near], [f"{base}/rest{i}"], lay, n.name)
            rmax = window_max(rest, f"{base}/rmax{i}")
            mask = em.kernel("nms_admit", [mask, rest, rmax, near], [f"{base}/mask{i}"], lay, n.name)
            continue
        supp = em.emit("ttnn.gtz", [near], f"{base}/supp{i}", lay, n.name)
        keep = em.emit("ttnn.logical_not", [supp], f"{base}/free{i}", lay, n.name)
        rest = em.emit("ttnn.multiply", [s, keep], f"{base}/rest{i}", lay, n.name)
        rmax = window_max(rest, f"{base}/rmax{i}")
        new = em.emit("ttnn.eq", [rest, rmax], f"{base}/new{i}", lay, n.name)
        new = em.emit("ttnn.logical_and", [new, keep], f"{base}/newfree{i}", lay, n.name)
        mask = em.emit("ttnn.logical_or", [mask, new], f"{base}/mask{i}", lay, n.name)
    return em.emit("ttnn.multiply", [s, mask], base, _layout(n.output), n.name)


@lowers("spc.L2Norm")
def _l2norm(em: Emitter, n: Node, ins: list[str]) -> str:
    """x * rsqrt(max(sum(x * x), eps * eps)) over the axis: x / max(||x||, eps). The channel axis of
    an NCHW map is the last axis of the conv layout; any other axis is reduced in the plain form."""
    x = n.inputs[0]
    assert x is not None
    axis = int(n.attrs["axis"]) % x.type.rank
    eps = float(n.attrs["eps"])
    base = n.output.name
    if axis == 1 and x.type.rank == 4:
        lay: DeviceLayout | PlainLayout = _layout(x)
        assert isinstance(lay, DeviceLayout)
        one: DeviceLayout | PlainLayout = DeviceLayout(lay.n, lay.h, lay.w, 1)
        t, dim = em.to_nhwc(ins[0], x, n.name), -1
    else:
        shape = tuple(int(d) for d in x.type.static_shape)
        lay, one = PlainLayout(shape), PlainLayout(tuple(1 if i == axis else d for i, d in enumerate(shape)))
        t, dim = em.to_plain(ins[0], x, n.name), axis
    sq = em.emit("ttnn.multiply", [t, t], f"{base}/sq", lay, n.name)
    ss = em.emit("ttnn.sum", [sq], f"{base}/sumsq", one, n.name, dim=dim, keepdim=True)
    if eps > 0:  # without eps (x / ||x||) a zero vector gives 0 * inf = NaN, as the source's 0 / 0
        ss = em.emit("ttnn.clamp", [ss], f"{base}/clamped", one, n.name, min=eps * eps)
    inv = em.emit("ttnn.rsqrt", [ss], f"{base}/inv_norm", one, n.name)
    return em.emit("ttnn.multiply", [t, inv], base, lay, n.name)
