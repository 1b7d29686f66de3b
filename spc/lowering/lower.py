"""Lower a partitioned IR graph to a :class:`Program` of ttnn calls and host nodes.

Every device node is lowered by the function registered for its op (lowering/registry.py: the
fused ops in lowering/fused.py, every other ONNX op in lowering/lower_<family>.py), which appends
ttnn calls to the :class:`~spc.lowering.emitter.Emitter`; intermediate tensors are named after the IR
value they come from.
"""

from __future__ import annotations

import math

import numpy as np

from spc.errors import SpcError
from spc.ir.graph import Graph, Node, Placement, Value
from spc.lowering import readback
from spc.lowering.emitter import INPUT_DTYPE, Emitter
from spc.lowering.read_once import read_once
from spc.lowering.registry import LOWERINGS, device_support, lowering_for
from spc.lowering.upload_once import upload_once
from spc.plan.program import DeviceTensor, HostNode, Program, TensorSpec
from spc.ttnn.formats import DataFormat
from spc.ttnn.layout import DeviceLayout, Form, PlainLayout, layout_of

__all__ = ["LOWERINGS", "Emitter", "find_probes", "lower"]


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


def input_storage(g: Graph) -> DataFormat:
    """The format an upload writes: a model of one input takes an image (compiler.check_input),
    uploaded in bf16, which holds its pixels to 1/256; a model of several takes tensors
    (positions, sizes, descriptors), uploaded in float32: bf16 would move a 640-pixel coordinate
    by up to 2 pixels and an index above 256."""
    return DataFormat.BFLOAT16 if len(g.inputs) == 1 else DataFormat.FLOAT32


def _device_input(v: Value) -> DeviceTensor:
    """A value the host hands to the device: in the conv form where it can be (an image), else as is."""
    shape = [int(d) for d in v.type.static_shape]
    if DeviceLayout.fits(shape):
        return DeviceTensor(v.name, shape, DeviceLayout.of(shape).device_shape, Form.NHWC, v.type.dtype.value)
    return DeviceTensor(v.name, shape, shape or [1], Form.PLAIN, v.type.dtype.value)


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
    names: dict[int, str] = {}  # IR value -> the device tensor holding it
    for n in device:
        ins: list[str | None] = []
        for v in n.inputs:
            if v is None or v.is_const:
                ins.append(None)
                continue
            if id(v) not in on_device and id(v) not in names:
                t = _device_input(v)
                device_inputs.append(t)
                names[id(v)] = v.name
                em.layouts[v.name], em.dtypes[v.name] = t.layout, input_storage(g)
                em.in_dram[v.name], em.tiles[v.name] = True, False
            ins.append(names.get(id(v), v.name))
        low = lowering_for(n.op.name)
        why = device_support(n)
        if low is None or why is not None:
            raise SpcError(f"node {n.name} ({n.op.name}) is placed on the device but cannot be lowered: {why}; "
                           "report it with the dump from --dump-dir")
        first = len(em.ops)
        try:
            result = low.fn(em, n, ins)
        except ValueError as exc:  # a layout the placement should have refused: a bug, named
            raise SpcError(f"node {n.name} ({n.op.name}) is placed on the device but its lowering fails: {exc}; "
                           "report it with the dump from --dump-dir") from None
        outs = [result] if isinstance(result, str) else list(result)
        want = n.precision.output_dtype if n.precision is not None else None
        if want and n.op.name != "spc.Conv2d" and len(em.ops) > first and em.ops[-1].output == outs[0] \
                and em.dtypes[outs[0]] is not want:
            # the op computes in its input's format; the block asked to store the result otherwise.
            # The last call emitted produced the output: it gets another name, the cast takes it.
            out = outs[0]
            last = em.ops[-1]
            last.output = out + "/computed"
            lay = em.layouts.pop(out)
            em.layouts[last.output], em.dtypes[last.output] = lay, em.dtypes.pop(out)
            em.tiles[last.output], em.in_dram[last.output] = em.tiles.pop(out, True), em.in_dram.pop(out, True)
            em.emit("ttnn.typecast", [last.output], out, lay, n.name, store=want, dtype=want)
        for op in em.ops[first:]:
            op.block = n.block or n.name
        for o, name in zip(n.outputs, outs):
            names[id(o)] = name
    consts.update(em.weights)
    uploaded, pack = upload_once(em, device_inputs)
    readers = [n for n in g.nodes if n.placement is Placement.HOST_POST]
    leaving = {id(v) for n in readers for v in n.inputs if v is not None} | {id(v) for v in g.outputs}
    device_outputs = [_device_output(em, o, names[id(o)]) for n in device for o in n.outputs if id(o) in leaving]
    by_name = {o.name: o for n in device for o in n.outputs}
    host_post = _host_nodes(g, Placement.HOST_POST, consts)
    fallback_outputs: list[DeviceTensor] = []
    fallback_post: list[HostNode] = []
    fused = [n for n in g.nodes if n.placement is Placement.HOST_POST and n.op.name == "spc.Keypoints"]
    if compact and ((len(fused) == 1 and len(host_post) == 1) or
                    (len(fused) > 1 and _only_keypoints_read_the_device(g, fused))):
        # one extraction, or a batch plan's one per image with their stacking after them
        whys = [why for n in fused if (why := readback.unsupported(
            n, _capacity(n, capacity), em.dtypes.get(names[id(n.inputs[1])], INPUT_DTYPE)))]
        if whys:
            notes.append(f"keypoints are read back densely: {whys[0]}")
        else:
            per_image, tails = [], {}
            for n in fused:
                s, d = n.inputs[0], n.inputs[1]
                assert s is not None and d is not None
                outs, tails[n.name] = readback.lower_keypoints(em, n, em.to_nhwc(names[id(s)], s, n.name),
                                                               em.to_nhwc(names[id(d)], d, n.name),
                                                               _capacity(n, capacity))
                per_image.append(outs)
            compact_outputs, split = _read_together(em, per_image, consts)
            fallback_outputs, fallback_post = device_outputs, host_post
            device_outputs, host_post = compact_outputs, [*split, *(tails.get(h.name, h) for h in host_post)]
    device_outputs, unpack = read_once(em, device_outputs)
    host_post = [*unpack, *host_post]
    # which device tensor holds each IR value, in which layout: what the per-layer comparison reads
    made = {name: op.shape for op in em.ops for name in op.results}
    values = {t.name: t for t in device_inputs}
    values.update({o.name: t for n in device for o in n.outputs if (t := _held_value(em, o, names[id(o)], made))})
    program = Program(
        inputs=[TensorSpec(v.name, v.type.dtype.value, list(v.type.shape)) for v in g.inputs],
        outputs=[TensorSpec(v.name, v.type.dtype.value, list(v.type.shape)) for v in g.outputs],
        host_pre=[*_host_nodes(g, Placement.HOST_PRE, consts), *pack],
        device_inputs=uploaded,
        device_ops=em.ops,
        device_outputs=device_outputs,
        host_post=host_post,
        probes={role: _device_output(em, by_name[name], names[id(by_name[name])])
                for role, name in (probes or {}).items() if name in by_name},
        fallback_outputs=fallback_outputs,
        fallback_post=fallback_post,
        input_storage={t.name: input_storage(g) for t in uploaded if input_storage(g) is not DataFormat.BFLOAT16},
        constants=em.constants,
        values=values,
    )
    return program, consts


def _read_together(em: Emitter, per_image: list[list[DeviceTensor]],
                   consts: dict[str, np.ndarray]) -> tuple[list[DeviceTensor], list[HostNode]]:
    """The compact results of a batch plan's images, each kind concatenated on the device, so that a
    run reads back one tensor per kind, not one per image (ttnn's host cost is per call:
    memory/throughput.py); the host slices that give each image its own back. One image: as is."""
    if len(per_image) == 1:
        return per_image[0], []
    together, split = [], []
    for parts in zip(*per_image):
        first = parts[0]
        dim = len(first.device_shape) - 2 if len(first.device_shape) == 4 else 0  # [1,1,1,k] by rows; [1,k,c]
        device_shape = list(first.device_shape)
        device_shape[dim] *= len(parts)
        name = f"{first.name}/images"
        em.emit("ttnn.concat", [t.name for t in parts], name, PlainLayout(tuple(device_shape)), first.name,
                store=em.dtypes.get(first.name), out_shape=device_shape, dim=dim)
        together.append(DeviceTensor(name, [len(parts), *first.shape[1:]], device_shape, first.form, first.dtype))
        for i, t in enumerate(parts):
            bounds = [f"{t.name}/{what}" for what in ("start", "end", "axis")]
            consts.update(zip(bounds, (np.array([i], np.int64), np.array([i + 1], np.int64), np.array([0], np.int64))))
            split.append(HostNode("onnx.Slice", f"{t.name}/own", [name, *bounds], [t.name]))
    return together, split


def _capacity(n: Node, capacity: int | None) -> int:
    """The device top-K of keypoint op ``n`` (``--keypoint-capacity`` where it keeps every keypoint)."""
    return readback.capacity(n) if capacity is None or int(n.attrs["max_keypoints"]) >= 0 else capacity


def _only_keypoints_read_the_device(g: Graph, fused: list[Node]) -> bool:
    """Whether the host post-processing reads the device only through the keypoint ops (a batch
    plan's: the rest of it, the stacking of each image's results, reads what they make)."""
    mine = {id(n) for n in fused}
    return all(id(n) in mine or all(v is None or v.producer is None or v.producer.placement is Placement.HOST_POST
                                    for v in n.inputs)
               for n in g.nodes if n.placement is Placement.HOST_POST)


def _held_value(em: Emitter, v: Value, held: str, made: dict[str, list[int]]) -> DeviceTensor | None:
    """The record of the device tensor ``held`` holding IR value ``v`` (``made``: each call result's
    shape); None unless the tensor is laid out exactly as ``v``'s shape is in its form: an alias
    of another shape (a reshape that moved no data) holds the values in another order, and a
    record that converted it back by ``v``'s shape would compare the wrong elements."""
    lay = em.layouts.get(held)
    if lay is None or not v.type.is_static:
        return None
    shape = list(v.type.static_shape)
    try:
        if layout_of(lay.form, shape) != lay:
            return None
    except ValueError:  # a shape the form cannot take
        return None
    if math.prod(made.get(held, lay.device_shape)) != math.prod(lay.device_shape):
        return None
    return DeviceTensor(held, shape, lay.device_shape, lay.form, v.type.dtype.value)


def _device_output(em: Emitter, v: Value, held: str) -> DeviceTensor:
    """The device tensor the host reads for ``v``, named as ``v`` (a free view when the tensor
    holding it has another name: an alias such as Identity)."""
    if held != v.name:
        if v.name not in em.layouts:
            em.emit("ttnn.reshape", [held], v.name, em.layouts[held], held, shape=em.layouts[held].device_shape)
        held = v.name
    lay = em.layouts[held]
    shape = [int(d) for d in v.type.static_shape]
    return DeviceTensor(v.name, shape, lay.device_shape, lay.form, v.type.dtype.value)


def find_probes(g: Graph) -> dict[str, str]:
    """Device values worth comparing with the source: the dense maps, by role."""
    roles = {"spc.ScoreFold": "score_map", "spc.Nms": "nms_map", "spc.L2Norm": "descriptor_map"}
    return {roles[n.op.name]: n.output.name for n in g.nodes
            if n.op.name in roles and n.placement is Placement.DEVICE}
