"""Lower a partitioned IR graph to a :class:`Program` of ttnn calls and host nodes.

One function per device op, registered with ``@lowers("spc.Conv2d")``. Each appends ttnn calls
to the :class:`Emitter`, which names intermediate tensors after the IR node they come from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spc.errors import SpcError
from spc.ir.graph import Graph, Node, Placement, Value
from spc.ir.precision import BlockPrecision
from spc.lowering import readback
from spc.lowering.layout import DeviceLayout
from spc.lowering.program import DeviceTensor, HostNode, Program, TensorSpec, TtOp
from spc.memory.config import parse as parse_memory

# Fixed for every conv; the per-block part (path, slicing, act_block_h) comes from the
# choose-memory-config pass (memory/config.py).
CONV_CONFIG = {"shard_layout": "HEIGHT_SHARDED", "output_layout": "TILE", "deallocate_activation": False}
INPUT_DTYPE = "bfloat16"


@dataclass
class Emitter:
    ops: list[TtOp] = field(default_factory=list)
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    layouts: dict[str, DeviceLayout] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    in_dram: dict[str, bool] = field(default_factory=dict)  # where each result lives (device inputs: DRAM)
    kernels: bool = False  # fused kernels (kernels/) instead of the stock calls they replace

    def emit(self, op: str, inputs: list[str], output: str, out_layout: DeviceLayout, source: str,
             weights: dict[str, str] | None = None, store: str | None = None, out_shape: list[int] | None = None,
             extra_outputs: list[str] | None = None, extra_dtypes: list[str] | None = None, **args: Any) -> str:
        """Append a call; its result is stored as ``store``, by default as its first input is."""
        store = store or (self.dtypes.get(inputs[0], INPUT_DTYPE) if inputs else INPUT_DTYPE)
        shape = out_shape or args.get("shape") or out_layout.device_shape  # a 5-D reshape keeps its own shape
        extra_dtypes = list(extra_dtypes or [store] * len(extra_outputs or []))
        self.ops.append(TtOp(op, inputs, output, args, weights or {}, source, store, shape=list(shape),
                             extra_outputs=list(extra_outputs or []), extra_dtypes=extra_dtypes))
        for extra, dtype in zip(extra_outputs or [], extra_dtypes):
            self.layouts[extra], self.dtypes[extra], self.in_dram[extra] = out_layout, dtype, True
        self.layouts[output] = out_layout
        self.dtypes[output] = store
        path = args.get("slice_config", {}).get("type", "")
        if args.get("memory_config") == "DRAM_INTERLEAVED" or path.startswith("dram"):
            self.in_dram[output] = True
        elif path == "l1_full":
            self.in_dram[output] = False
        else:  # element-wise and data-movement calls stay where their input is
            self.in_dram[output] = self.in_dram.get(inputs[0], True) if inputs else True
        return output

    def kernel(self, name: str, inputs: list[str], outputs: list[str], out_layout: DeviceLayout, source: str,
               store: str | None = None, **params: Any) -> str:
        """A fused kernel call; it records the stock calls it replaces for runtimes without tt-lang."""
        from spc.kernels import KERNELS

        composed = KERNELS[name].composed(inputs, outputs, params)
        return self.emit("spc.kernel", inputs, outputs[0], out_layout, source, store=store, kernel=name,
                         params=params, composed=composed, extra_outputs=outputs[1:])

    def into_dram(self, name: str, source: str) -> str:
        """The DRAM path of conv2d and max_pool2d reads its input from DRAM (conv2d.cpp:
        "Conv DRAM expects the input tensor to be in DRAM")."""
        if self.in_dram.get(name, True):
            return name
        return self.emit("ttnn.to_memory_config", [name], name + "/dram", self.layouts[name], source,
                         memory_config="DRAM_INTERLEAVED")

    def weight(self, v: Value) -> str:
        self.weights[v.name] = np.asarray(v.data)
        return v.name


Lowering = Callable[[Emitter, Node, list[str]], str]
LOWERINGS: dict[str, Lowering] = {}


def lowers(op_name: str) -> Callable[[Lowering], Lowering]:
    def wrap(fn: Lowering) -> Lowering:
        LOWERINGS[op_name] = fn
        return fn

    return wrap


def _layout(v: Value) -> DeviceLayout:
    return DeviceLayout.of(v.type.static_shape)


@lowers("spc.Conv2d")
def _conv2d(em: Emitter, n: Node, ins: list[str]) -> str:
    x, w, b = n.inputs[0], n.inputs[1], n.input(2)
    assert x is not None and w is not None
    if not w.is_const or (b is not None and not b.is_const):
        raise SpcError(f"node {n.name}: conv weights must be constants to run on the device")
    src = _layout(x)
    pads = n.attrs["pads"]
    weights = {"weight_tensor": em.weight(w)}
    if b is not None:
        weights["bias_tensor"] = em.weight(b)
    p = BlockPrecision.from_attrs(n.attrs)
    mem = parse_memory(n.attrs.get("memory", "l1"))
    x_in = em.into_dram(ins[0], n.name) if mem.path == "dram" else ins[0]
    conv_config = dict(CONV_CONFIG, weights_dtype=p.weights_dtype, act_block_h_override=32 * mem.act_block_h,
                       activation="relu" if n.attrs["activation"] == "relu" else None)
    compute_config = {"math_fidelity": p.math_fidelity, "fp32_dest_acc_en": p.fp32_dest_acc_en,
                      "packer_l1_acc": p.packer_l1_acc}
    return em.emit("ttnn.conv2d", [x_in], n.output.name, _layout(n.output), n.name, weights,
                   store=p.output_dtype, in_channels=src.c, out_channels=int(w.type.static_shape[0]), batch_size=src.n,
                   input_height=src.h, input_width=src.w, kernel_size=list(n.attrs["kernel_shape"]),
                   stride=list(n.attrs["strides"]), padding=[pads[0], pads[2], pads[1], pads[3]],
                   dilation=list(n.attrs["dilations"]), groups=int(n.attrs["group"]), dtype=p.output_dtype,
                   conv_config=conv_config, compute_config=compute_config, slice_config=mem.slice_config)


@lowers("onnx.MaxPool")
def _max_pool(em: Emitter, n: Node, ins: list[str]) -> str:
    x = n.inputs[0]
    assert x is not None
    src = _layout(x)
    pads = n.attrs.get("pads", [0, 0, 0, 0])
    if pads[0] != pads[2] or pads[1] != pads[3]:
        raise SpcError(f"node {n.name}: ttnn.max_pool2d needs symmetric padding, got {pads}")
    mem = parse_memory(n.attrs.get("memory", "l1"))
    x_in = em.into_dram(ins[0], n.name) if mem.path == "dram" else ins[0]
    return em.emit("ttnn.max_pool2d", [x_in], n.output.name, _layout(n.output), n.name,
                   batch_size=src.n, input_h=src.h, input_w=src.w, channels=src.c,
                   kernel_size=list(n.attrs["kernel_shape"]), stride=list(n.attrs.get("strides", [1, 1])),
                   padding=[pads[0], pads[1]], dilation=list(n.attrs.get("dilations", [1, 1])),
                   ceil_mode=bool(n.attrs.get("ceil_mode", 0)), slice_config=mem.slice_config)


@lowers("spc.ScoreFold")
def _score_fold(em: Emitter, n: Node, ins: list[str]) -> str:
    """softmax over the channel (last) axis of [1,1,hw,c²+1], keep c² channels, then depth-to-space
    as a row-major reshape/permute: [1,h,w,c,c] -> [1,h,c,w,c] -> [1,1,N*H*W,1]."""
    x = n.inputs[0]
    assert x is not None
    src, out = _layout(x), _layout(n.output)
    cell = int(n.attrs["cell"])
    base = n.output.name
    # ttnn pads 65 channels to 96 in tiles; softmax must see only the logical 65, which
    # ttnn.softmax does on a logical shape (verified by the emulator's masking test)
    t = em.emit("ttnn.softmax", [ins[0]], base + "/softmax", src, n.name, dim=-1, numeric_stable=True)
    kept = DeviceLayout(src.n, src.h, src.w, cell * cell)
    t = em.emit("ttnn.slice", [t], base + "/keep", kept, n.name, starts=[0, 0, 0, 0],
                ends=[1, 1, src.n * src.h * src.w, cell * cell], steps=[1, 1, 1, 1])
    t = em.emit("ttnn.to_layout", [t], base + "/row_major", kept, n.name, layout="ROW_MAJOR_LAYOUT")
    t = em.emit("ttnn.reshape", [t], base + "/cells", kept, n.name, shape=[src.n, src.h, src.w, cell, cell])
    t = em.emit("ttnn.permute", [t], base + "/interleave", kept, n.name, dims=[0, 1, 3, 2, 4])
    # one channel per page is not L1-aligned as a shard: ttnn needs this view interleaved
    # (interleaved_to_sharded_op.cpp "Shard page size must currently have L1 aligned page size")
    return em.emit("ttnn.reshape", [t], base, out, n.name, shape=out.device_shape, memory_config="DRAM_INTERLEAVED")


@lowers("spc.Nms")
def _nms(em: Emitter, n: Node, ins: list[str]) -> str:
    """SuperPoint NMS as ttnn calls on the [1,1,H*W,1] map: window max by max_pool2d, masks as
    bf16 0/1 tensors."""
    x = n.inputs[0]
    assert x is not None
    lay = _layout(x)
    r = int(n.attrs["radius"])
    base = n.output.name
    # max_pool2d's default output is height-sharded with non-tile shards, which the element-wise
    # ops after it reject (tensor_layout.cpp "Physical shard shape ... must be tile sized"): interleave
    mem = parse_memory(n.attrs.get("memory", "l1"))
    pool = dict(batch_size=lay.n, input_h=lay.h, input_w=lay.w, channels=lay.c, kernel_size=[2 * r + 1] * 2,
                stride=[1, 1], padding=[r, r], dilation=[1, 1], ceil_mode=False, memory_config="DRAM_INTERLEAVED",
                slice_config=mem.slice_config)

    def window_max(x: str, out: str) -> str:
        y = em.emit("ttnn.max_pool2d", [x], out, lay, n.name, **pool)
        if mem.path == "l1":
            return y
        # the DRAM path returns [N, H, W, C]; against the [1, 1, NHW, C] map an element-wise op
        # would broadcast it (measured on the mock p150: a 143 GB request at 1080x1920)
        return em.emit("ttnn.reshape", [y], out + "/flat", lay, n.name, shape=lay.device_shape)

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
    x = n.inputs[0]
    assert x is not None
    if int(n.attrs["axis"]) != 1 or x.type.rank != 4:
        raise SpcError(f"node {n.name}: device L2 normalisation is lowered for the channel axis of NCHW only")
    lay = _layout(x)
    eps = float(n.attrs["eps"])
    base = n.output.name
    one = DeviceLayout(lay.n, lay.h, lay.w, 1)
    sq = em.emit("ttnn.multiply", [ins[0], ins[0]], f"{base}/sq", lay, n.name)
    ss = em.emit("ttnn.sum", [sq], f"{base}/sumsq", one, n.name, dim=-1, keepdim=True)
    # x / max(||x||, eps) == x * rsqrt(max(||x||², eps²))
    ss = em.emit("ttnn.clamp", [ss], f"{base}/clamped", one, n.name, min=eps * eps)
    inv = em.emit("ttnn.rsqrt", [ss], f"{base}/inv_norm", one, n.name)
    return em.emit("ttnn.multiply", [ins[0], inv], base, lay, n.name)


def _view(em: Emitter, n: Node, ins: list[str]) -> str:
    """A reshape between device ops is free when it keeps the [N*H*W, C] element order."""
    x = n.inputs[0]
    assert x is not None
    a, b = _layout(x), _layout(n.output)
    if a.c != b.c or (a.c != 1 and (a.h, a.w, a.n) != (b.h, b.w, b.n)):
        raise SpcError(f"node {n.name} ({n.op.name}): reshape {x.type} -> {n.output.type} changes the "
                       "device element order; no ttnn lowering")
    return em.emit("ttnn.reshape", [ins[0]], n.output.name, b, n.name, shape=b.device_shape)


for _name in ("onnx.Reshape", "onnx.Unsqueeze", "onnx.Squeeze", "onnx.Flatten"):
    LOWERINGS[_name] = _view


def _host_nodes(g: Graph, placement: Placement, consts: dict[str, np.ndarray]) -> list[HostNode]:
    out = []
    for n in g.nodes:
        if n.placement is not placement:
            continue
        for v in n.inputs:
            if v is not None and v.is_const:
                consts[v.name] = np.asarray(v.data)
        out.append(HostNode(n.op.name, n.name, [None if v is None else v.name for v in n.inputs],
                            [o.name for o in n.outputs], dict(n.attrs)))
    return out


def _device_tensor(v: Value) -> DeviceTensor:
    shape = list(v.type.static_shape)
    return DeviceTensor(v.name, shape, DeviceLayout.of(shape).device_shape)


def lower(g: Graph, probes: dict[str, str] | None = None, compact: bool = True, capacity: int | None = None,
          notes: list[str] | None = None, kernels: bool = False) -> tuple[Program, dict[str, np.ndarray]]:
    """The program and every tensor it names (weights and host constants). With ``compact``,
    a recognised keypoint extraction reads back top-K keypoints (lowering/readback.py);
    ``capacity`` overrides K when every keypoint above the threshold is kept; ``notes`` collects
    what the user should know (a dense read-back, and why); ``kernels`` uses the fused kernels
    of kernels/ where they replace stock calls."""
    notes = notes if notes is not None else []
    if any(n.placement is Placement.UNASSIGNED for n in g.nodes):
        raise SpcError("lowering needs a partitioned graph (run partition-host-device)")
    consts: dict[str, np.ndarray] = {}
    em = Emitter(kernels=kernels)
    device = [n for n in g.nodes if n.placement is Placement.DEVICE]
    on_device = {id(o) for n in device for o in n.outputs}
    device_inputs: list[DeviceTensor] = []
    names: dict[int, str] = {}
    for n in device:
        ins: list[str] = []
        for v in n.inputs:
            if v is None or v.is_const:
                continue
            if id(v) not in on_device and id(v) not in names:
                device_inputs.append(_device_tensor(v))
                names[id(v)] = v.name
            ins.append(names.get(id(v), v.name))
        fn = LOWERINGS.get(n.op.name)
        if fn is None:
            raise SpcError(f"node {n.name} ({n.op.name}) is placed on the device but has no ttnn lowering; "
                           "report it with the dump from --dump-dir")
        first = len(em.ops)
        out = fn(em, n, ins)
        want = n.attrs.get("output_dtype")
        if want and n.op.name != "spc.Conv2d" and em.dtypes[out] != want:
            # the op computes in its input's format; the block asked to store the result otherwise.
            # The last call emitted produced `out`: it gets another name, the cast takes `out`.
            last = em.ops[-1]
            last.output = out + "/computed"
            em.layouts[last.output], em.dtypes[last.output] = em.layouts[out], em.dtypes[out]
            em.emit("ttnn.typecast", [last.output], out, em.layouts[out], n.name, store=want, dtype=want)
        for op in em.ops[first:]:
            op.block = n.attrs.get("block", n.name)
        names[id(n.output)] = out
    consts.update(em.weights)
    readers = [n for n in g.nodes if n.placement is Placement.HOST_POST]
    leaving = {id(v) for n in readers for v in n.inputs if v is not None} | {id(v) for v in g.outputs}
    device_outputs = [_device_tensor(o) for n in device for o in n.outputs if id(o) in leaving]
    by_name = {o.name: o for n in device for o in n.outputs}
    host_post = _host_nodes(g, Placement.HOST_POST, consts)
    fallback_outputs: list[DeviceTensor] = []
    fallback_post: list[HostNode] = []
    fused = [n for n in g.nodes if n.placement is Placement.HOST_POST and n.op.name == "spc.Keypoints"]
    if compact and len(fused) == 1 and len(host_post) == 1:
        n = fused[0]
        k = readback.capacity(n) if capacity is None or int(n.attrs["max_keypoints"]) >= 0 else capacity
        why = readback.unsupported(n, k, em.dtypes.get(names[id(n.inputs[1])], INPUT_DTYPE))
        if why:
            notes.append(f"keypoints are read back densely: {why}")
        else:
            compact_outputs, tail = readback.lower_keypoints(em, n, names[id(n.inputs[0])], names[id(n.inputs[1])], k)
            fallback_outputs, fallback_post = device_outputs, host_post
            device_outputs, host_post = compact_outputs, [tail]
    program = Program(
        inputs=[TensorSpec(v.name, v.type.dtype.value, list(v.type.shape)) for v in g.inputs],
        outputs=[TensorSpec(v.name, v.type.dtype.value, list(v.type.shape)) for v in g.outputs],
        host_pre=_host_nodes(g, Placement.HOST_PRE, consts),
        device_inputs=device_inputs,
        device_ops=em.ops,
        device_outputs=device_outputs,
        host_post=host_post,
        probes={role: _device_tensor(by_name[name]) for role, name in (probes or {}).items() if name in by_name},
        fallback_outputs=fallback_outputs,
        fallback_post=fallback_post,
    )
    return program, consts


def find_probes(g: Graph) -> dict[str, str]:
    """Device values worth comparing with the source: the dense maps, by role."""
    roles = {"spc.ScoreFold": "score_map", "spc.Nms": "nms_map", "spc.L2Norm": "descriptor_map"}
    return {roles[n.op.name]: n.output.name for n in g.nodes
            if n.op.name in roles and n.placement is Placement.DEVICE}
