"""Hostile ONNX models for `spc compile`: the small SuperPoint export mutated (op types, domains,
attributes, names, inputs and outputs, node order, initializers' dims, types and bytes, external
data, graph inputs and outputs, value_info that lies, opsets, functions, subgraphs), its bytes
flipped and cut, and small models made up op by op with crafted tensors and attributes. When
one compiles, the plan must read back (and, often, run)."""

from __future__ import annotations

import contextlib
import math
import random
from pathlib import Path
from typing import Any

import numpy as np

from tests.fuzz.harness import Case, Fixtures, plan_consistent
from tests.fuzz.mutate import INTS, NASTY_STRINGS, flip_bytes

_ATTRS = ["axis", "axes", "kernel_shape", "pads", "strides", "dilations", "group", "perm", "to", "mode", "keepdims",
          "batch_dims", "ceil_mode", "auto_pad", "alpha", "beta", "transA", "transB", "epsilon", "momentum",
          "blocksize", "sorted", "largest", "k", "split", "num_outputs", "align_corners", "padding_mode",
          "coordinate_transformation_mode", "exclude_outside", "noop_with_empty_axes", "value", "equation", "p",
          "select_last_index", "storage_order", "count_include_pad", "min", "max", "direction", "reduction"]
I64 = [v for v in INTS if -2**63 <= v < 2**63]
_ELEM_TYPES = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 21, 23, 99, -1]


def _load(data: bytes):
    import onnx

    return onnx.load_from_string(data)


def _values(model) -> list[str]:
    g = model.graph
    names = [i.name for i in g.input] + [i.name for i in g.initializer]
    for n in g.node:
        names += list(n.output)
    return [n for n in names if n]


def _nasty_name(rng: random.Random, model) -> str:
    r = rng.random()
    if r < 0.5 and _values(model):
        return rng.choice(_values(model))
    return rng.choice([*NASTY_STRINGS, "missing_value", "x" * 100000])


def _attr_value(rng: random.Random, attr) -> str:
    """Mutate one attribute in place (its value or its type)."""
    from onnx import AttributeProto

    t = attr.type
    r = rng.random()
    if r < 0.1:
        attr.type = rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 0, 13])
        return f"attribute {attr.name} retyped {attr.type}"
    if t == AttributeProto.INT:
        attr.i = rng.choice([*I64, attr.i + 1, attr.i - 1, -attr.i])
        attr.i = max(min(attr.i, 2**63 - 1), -2**63)
        return f"attribute {attr.name} = {attr.i}"
    if t == AttributeProto.INTS:
        vals = list(attr.ints)
        k = rng.random()
        if k < 0.3 and vals:
            vals[rng.randrange(len(vals))] = rng.choice(I64)
        elif k < 0.5:
            vals = vals[:-1]
        elif k < 0.7:
            vals = [*vals, rng.choice([0, 1, -1, 2])]
        elif k < 0.85:
            vals = [rng.choice(I64) for _ in range(rng.choice([0, 1, 2, 4, 9, 40]))]
        else:
            rng.shuffle(vals)
        del attr.ints[:]
        attr.ints.extend(vals)
        return f"attribute {attr.name} = {vals[:8]}"
    if t == AttributeProto.FLOAT:
        attr.f = rng.choice([math.nan, math.inf, -math.inf, 0.0, -1.0, 1e30, 1e-30, attr.f * 10])
        return f"attribute {attr.name} = {attr.f}"
    if t == AttributeProto.FLOATS:
        del attr.floats[:]
        attr.floats.extend(rng.choice([[], [math.nan], [1.0] * 9, [-1.0, 2.0]]))
        return f"attribute {attr.name} floats changed"
    if t == AttributeProto.STRING:
        attr.s = rng.choice([b"", b"bogus", b"\xff\xfe", b"NOTSET", b"SAME_UPPER", b"VALID", b"constant", b"reflect",
                             b"edge", b"nearest", b"linear", b"cubic", b"bilinear", b"zeros", b"border",
                             b"x" * 10000, b"ij,jk->ik", b"...", b"DCR", b"CRD"])
        return f"attribute {attr.name} = {attr.s[:20]!r}"
    if t == AttributeProto.TENSOR:
        _tensor(rng, attr.t)
        return f"attribute {attr.name}: tensor mutated"
    attr.type = AttributeProto.INT
    attr.i = rng.choice(I64)
    return f"attribute {attr.name} made an INT"


def _tensor(rng: random.Random, t) -> str:
    """Mutate a TensorProto in place: dims, type, data, location."""
    k = rng.choice(["dims", "dims", "type", "raw-cut", "raw-grow", "raw-empty", "typed", "nan", "external",
                    "segment", "string"])
    if k == "dims":
        dims = list(t.dims)
        choice = rng.random()
        if choice < 0.3 and dims:
            dims[rng.randrange(len(dims))] = rng.choice([0, 1, -1, 2**31, 2**40, dims[0] + 1])
        elif choice < 0.5 and dims:
            dims = dims[:-1]
        elif choice < 0.7:
            dims = [*dims, 1]
        elif choice < 0.85:
            dims = dims[::-1]
        else:
            dims = [1] * rng.choice([0, 9, 33, 70])
        del t.dims[:]
        t.dims.extend(dims)
        return f"tensor {t.name[:30]} dims {dims[:8]}"
    if k == "type":
        t.data_type = rng.choice(_ELEM_TYPES[1:])
        return f"tensor {t.name[:30]} type {t.data_type}"
    if k == "raw-cut" and t.raw_data:
        t.raw_data = t.raw_data[: rng.randrange(len(t.raw_data))]
        return f"tensor {t.name[:30]} raw data cut"
    if k == "raw-grow":
        t.raw_data = bytes(t.raw_data) + bytes(rng.choice([1, 4, 4096]))
        return f"tensor {t.name[:30]} raw data longer"
    if k == "raw-empty":
        t.raw_data = b""
        return f"tensor {t.name[:30]} raw data empty"
    if k == "typed":
        raw = bytes(t.raw_data)
        t.ClearField("raw_data")
        t.float_data.extend([1.0] * min(rng.choice([0, 1, len(raw) // 4, len(raw) // 4 + 1]), 1 << 16))
        return f"tensor {t.name[:30]} float_data instead of raw"
    if k == "nan" and t.raw_data and t.data_type == 1:
        a = np.frombuffer(bytes(t.raw_data), np.float32).copy()
        if a.size:
            a[rng.randrange(a.size)] = rng.choice([np.nan, np.inf, -np.inf, 3e38])
            t.raw_data = a.tobytes()
        return f"tensor {t.name[:30]} holds a non-finite value"
    if k == "external":
        t.data_location = 1
        del t.external_data[:]
        for key, value in rng.choice([[("location", "w.bin")], [("location", "../../etc/passwd")],
                                      [("location", "/etc/passwd")], [("location", "w.bin"), ("offset", "4096")],
                                      [("location", "w.bin"), ("length", "99999999999")], [("offset", "0")],
                                      [("location", "w.bin"), ("offset", "-1")], [("location", "")],
                                      [("location", "w.bin"), ("checksum", "x"), ("unknown", "y")],
                                      [("location", "dir")], [("location", "w.bin\x00x")],
                                      [("location", "w.bin"), ("offset", "1e3")]]):
            e = t.external_data.add()
            e.key, e.value = key, value
        return f"tensor {t.name[:30]} external: {[(e.key, e.value) for e in t.external_data]}"
    if k == "segment":
        t.segment.begin, t.segment.end = rng.choice([(0, 1), (5, 2), (-1, 10)])
        return f"tensor {t.name[:30]} segment"
    t.data_type = 8
    t.string_data.extend([b"a", b"\xff"])
    return f"tensor {t.name[:30]} strings"


def _value_type(rng: random.Random, vi) -> str:
    tt = vi.type.tensor_type
    k = rng.choice(["elem", "dim", "dim", "rank", "param", "no-shape", "no-type", "sequence"])
    if k == "elem":
        tt.elem_type = rng.choice(_ELEM_TYPES[:-1])
        return f"value {vi.name[:30]} elem_type {tt.elem_type}"
    if k == "dim" and tt.shape.dim:
        d = rng.choice(tt.shape.dim)
        d.dim_value = rng.choice([0, 1, -1, 2, 7, 2**31, 2**62, d.dim_value * 2 if d.HasField("dim_value") else 3])
        return f"value {vi.name[:30]} dim {d.dim_value}"
    if k == "rank":
        for _ in range(rng.choice([1, 5, 40])):
            tt.shape.dim.add().dim_value = 1
        return f"value {vi.name[:30]} rank {len(tt.shape.dim)}"
    if k == "param" and tt.shape.dim:
        d = rng.choice(tt.shape.dim)
        d.dim_param = rng.choice(["N", "", "height", "é"])
        return f"value {vi.name[:30]} dim symbolic {d.dim_param!r}"
    if k == "no-shape":
        tt.ClearField("shape")
        return f"value {vi.name[:30]} shape removed"
    if k == "no-type":
        vi.ClearField("type")
        return f"value {vi.name[:30]} type removed"
    vi.type.sequence_type.elem_type.tensor_type.elem_type = 1
    return f"value {vi.name[:30]} a sequence"


def mutate_model(rng: random.Random, model) -> str:
    """One structural mutation of ``model``, in place."""
    import onnx
    from onnx import helper

    g = model.graph
    nodes = g.node
    kind = rng.choices(["op-type", "domain", "node-name", "input", "output", "attr", "attr-add", "attr-drop",
                        "remove-node", "dup-node", "swap-nodes", "insert-node", "init", "init-drop", "init-add",
                        "graph-input", "graph-output", "value-info", "opset", "ir-version", "function", "subgraph",
                        "node-bytes", "sparse", "metadata"],
                       weights=[8, 3, 3, 8, 5, 14, 6, 4, 4, 3, 3, 5, 9, 3, 3, 6, 4, 5, 4, 2, 2, 2, 6, 1, 1])[0]
    i = rng.randrange(len(nodes)) if len(nodes) else 0
    node = nodes[i] if len(nodes) else None
    if kind == "op-type" and node is not None:
        ops = sorted({n.op_type for n in nodes})
        all_ops = sorted({s.name for s in onnx.defs.get_all_schemas()})
        node.op_type = rng.choice([rng.choice(ops), rng.choice(all_ops), rng.choice(all_ops),
                                   rng.choice(NASTY_STRINGS), node.op_type.lower()])
        return f"node {i} op_type {node.op_type[:30]!r}"
    if kind == "domain" and node is not None:
        node.domain = rng.choice(["ai.onnx", "com.microsoft", "ai.onnx.ml", "pkg.onnxscript.torch_lib", "x", "é"])
        return f"node {i} domain {node.domain}"
    if kind == "node-name" and node is not None:
        node.name = rng.choice([*NASTY_STRINGS, nodes[rng.randrange(len(nodes))].name])
        return f"node {i} name {node.name[:20]!r}"
    if kind == "input" and node is not None:
        r = rng.random()
        if r < 0.5 and node.input:
            k = rng.randrange(len(node.input))
            node.input[k] = rng.choice([_nasty_name(rng, model), "", rng.choice(_values(model))])
            return f"node {i} ({node.op_type}) input {k} = {node.input[k][:30]!r}"
        if r < 0.75:
            node.input.append(rng.choice(_values(model) or ["x"]))
            return f"node {i} ({node.op_type}) gains an input"
        if node.input:
            node.input.pop()
            return f"node {i} ({node.op_type}) loses an input"
    if kind == "output" and node is not None and node.output:
        k = rng.randrange(len(node.output))
        r = rng.random()
        if r < 0.7:
            node.output[k] = rng.choice([_nasty_name(rng, model), ""])
            return f"node {i} ({node.op_type}) output {k} = {node.output[k][:30]!r}"
        node.output.append(rng.choice(["extra_out", node.output[0]]))
        return f"node {i} ({node.op_type}) gains an output"
    with_attrs = [n for n in nodes if n.attribute]
    if kind == "attr" and with_attrs:
        n = rng.choice(with_attrs)
        return f"node {n.name[:30]} ({n.op_type}): " + _attr_value(rng, rng.choice(n.attribute))
    if kind == "attr-add" and node is not None:
        name = rng.choice(_ATTRS)
        value = rng.choice([rng.choice(I64), [rng.choice(I64) for _ in range(rng.randint(0, 5))],
                            rng.choice([1.5, math.nan, -1.0]), rng.choice([b"bogus", b"constant", b"SAME_LOWER"])])
        node.attribute.append(helper.make_attribute(name, value, attr_type=onnx.AttributeProto.INTS
                                                    if value == [] else None))
        return f"node {i} ({node.op_type}) gains attribute {name} = {str(value)[:30]}"
    if kind == "attr-drop" and with_attrs:
        n = rng.choice(with_attrs)
        a = rng.randrange(len(n.attribute))
        name = n.attribute[a].name
        del n.attribute[a]
        return f"node {n.name[:30]} ({n.op_type}) loses attribute {name}"
    if kind == "remove-node" and node is not None:
        del nodes[i]
        return f"node {i} ({node.op_type}) removed"
    if kind == "dup-node" and node is not None:
        nodes.insert(rng.randrange(len(nodes) + 1), node)
        return f"node {i} ({node.op_type}) twice"
    if kind == "swap-nodes" and len(nodes) > 1:
        j = rng.randrange(len(nodes))
        a, b = onnx.NodeProto(), onnx.NodeProto()
        a.CopyFrom(nodes[i])
        b.CopyFrom(nodes[j])
        nodes[i].CopyFrom(b)
        nodes[j].CopyFrom(a)
        return f"nodes {i} and {j} swapped"
    if kind == "insert-node":
        all_ops = sorted({s.name for s in onnx.defs.get_all_schemas()})
        op = rng.choice(all_ops)
        vals = _values(model) or ["x"]
        new = helper.make_node(op, [rng.choice(vals) for _ in range(rng.randint(0, 3))],
                               [f"fuzz_{k}" for k in range(rng.randint(1, 2))], name=f"fuzz_{op}")
        nodes.insert(rng.randrange(len(nodes) + 1), new)
        if rng.random() < 0.5 and g.output:
            g.output[rng.randrange(len(g.output))].name = "fuzz_0"
        return f"a {op} node inserted"
    if kind in ("init", "init-drop") and g.initializer:
        k = rng.randrange(len(g.initializer))
        t = g.initializer[k]
        if kind == "init-drop":
            name = t.name
            del g.initializer[k]
            return f"initializer {name[:30]} removed"
        return _tensor(rng, t)
    if kind == "init-add":
        t = onnx.TensorProto()
        t.name = rng.choice(["fuzz_init", *( _values(model)[:1] or ["x"])])
        t.data_type = rng.choice([1, 7, 6, 9, 11])
        t.dims.extend(rng.choice([[], [0], [3], [2**40], [1] * 40]))
        t.raw_data = bytes(rng.choice([0, 4, 12, 100]))
        g.initializer.append(t)
        return f"initializer {t.name[:30]} added (dims {list(t.dims)[:4]})"
    if kind == "graph-input" and g.input:
        r = rng.random()
        if r < 0.7:
            return "graph input: " + _value_type(rng, rng.choice(g.input))
        if r < 0.85:
            g.input.append(helper.make_tensor_value_info("extra_input", 1, [1, 3, 8, 8]))
            return "a second graph input"
        del g.input[:]
        return "no graph inputs"
    if kind == "graph-output" and g.output:
        r = rng.random()
        if r < 0.5:
            return "graph output: " + _value_type(rng, rng.choice(g.output))
        if r < 0.7:
            g.output[rng.randrange(len(g.output))].name = rng.choice([*NASTY_STRINGS[:4], "missing", g.input[0].name
                                                                       if g.input else "x"])
            return "a graph output renamed"
        if r < 0.85:
            g.output.append(g.output[0])
            return "a graph output twice"
        del g.output[:]
        return "no graph outputs"
    if kind == "value-info":
        vals = _values(model)
        if g.value_info and rng.random() < 0.6:
            return "value_info: " + _value_type(rng, rng.choice(g.value_info))
        name = rng.choice(vals or ["x"])
        shape = rng.choice([[1], [1, 3, 2**31, 2], [0], [2**62], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1], ["N", 3]])
        g.value_info.append(helper.make_tensor_value_info(name, rng.choice([1, 7, 9, 10]), shape))
        return f"value_info says {name[:30]} is {shape}"
    if kind == "opset":
        r = rng.random()
        if r < 0.6 and model.opset_import:
            model.opset_import[0].version = rng.choice([1, 7, 10, 11, 13, 17, 19, 21, 23, 24, 99, 0, -1])
            return f"opset {model.opset_import[0].version}"
        if r < 0.8:
            o = model.opset_import.add()
            o.domain, o.version = rng.choice([("", 13), ("com.microsoft", 1), ("ai.onnx", 18), ("x", 1)])
            return f"opset import {o.domain!r} {o.version} added"
        del model.opset_import[:]
        return "no opset imports"
    if kind == "ir-version":
        model.ir_version = rng.choice([0, 1, 3, 7, 11, 12, 100, 2**62])
        return f"ir_version {model.ir_version}"
    if kind == "function" and node is not None:
        f = onnx.FunctionProto()
        f.name, f.domain = "FuzzFn", "fuzz.domain"
        f.input.extend(["a"])
        f.output.extend(["b"])
        f.node.extend([helper.make_node(rng.choice(["Relu", "Identity", "FuzzFn"]), ["a"], ["b"],
                                        domain="fuzz.domain" if rng.random() < 0.2 else "")])
        f.opset_import.extend([helper.make_opsetid("", 18)])
        model.functions.append(f)
        model.opset_import.append(helper.make_opsetid("fuzz.domain", 1))
        node.op_type, node.domain = "FuzzFn", "fuzz.domain"
        return f"node {i} calls a local function"
    if kind == "subgraph" and node is not None:
        sub = helper.make_graph([helper.make_node("Identity", [node.input[0] if node.input else "x"], ["sub_out"])],
                                "sub", [], [helper.make_tensor_value_info("sub_out", 1, None)])
        node.attribute.append(helper.make_attribute(rng.choice(["then_branch", "body", "axis"]), sub))
        if rng.random() < 0.5:
            node.op_type = rng.choice(["If", "Loop", "Scan"])
        return f"node {i} gains a subgraph attribute"
    if kind == "node-bytes" and node is not None:
        data, what = flip_bytes(rng, node.SerializeToString())
        new = onnx.NodeProto()
        try:
            new.ParseFromString(data)
        except Exception:  # not a node any more: the next case will find another
            return f"node {i} bytes unparseable ({what}); unchanged"
        node.CopyFrom(new)
        return f"node {i} bytes: {what}"
    if kind == "sparse":
        st = onnx.SparseTensorProto()
        st.dims.extend([4, 4])
        st.values.CopyFrom(helper.make_tensor("sv", 1, [2], [1.0, 2.0]))
        st.indices.CopyFrom(helper.make_tensor("si", 7, [2], rng.choice([[0, 5], [99, -1], [3, 3]])))
        g.sparse_initializer.append(st)
        return "a sparse initializer"
    if kind == "metadata":
        p = model.metadata_props.add()
        p.key, p.value = "fuzz", "x" * rng.choice([10, 1 << 20])
        g.doc_string = rng.choice(["", "\x00", "é" * 1000])
        return "metadata and doc strings"
    return "no mutation applied"


# -- small models made up op by op --------------------------------------------------------------
def _tiny(rng: random.Random):
    """A small single-input float model of 1..5 ops with plausible, sometimes hostile, attributes."""
    from onnx import TensorProto, helper, numpy_helper

    c, h, w = rng.choice([1, 3]), rng.choice([8, 16, 24, 32]), rng.choice([8, 16, 24, 40])
    shape = [1, c, h, w]
    nodes, inits = [], []
    cur = "x"
    g = np.random.default_rng(rng.randrange(1 << 30))
    hostile = rng.random() < 0.3
    what = []

    def const(name: str, a: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(a, name))
        return name

    def pick(good: Any, bad: list[Any]) -> Any:
        return rng.choice(bad) if hostile and rng.random() < 0.4 else good

    for k in range(rng.randint(1, 5)):
        rank = len(shape)
        out = f"t{k}"
        op = rng.choice(["Conv", "Conv", "Relu", "Sigmoid", "MaxPool", "AveragePool", "Add", "Mul", "Softmax",
                         "Transpose", "Reshape", "Slice", "Concat", "Pad", "ReduceMean", "Clip", "LeakyRelu",
                         "Resize", "Cast", "Unsqueeze", "Squeeze", "BatchNormalization", "Div", "Sqrt", "Exp",
                         "Flatten", "DepthToSpace", "Gather", "TopK", "NonZero", "Where", "Expand", "Tile", "Split",
                         "MatMul", "ReduceL2", "ArgMax", "Identity", "GlobalAveragePool", "InstanceNormalization"])
        if op == "Conv" and rank == 4:
            o, kk = rng.choice([1, 4, 8, 65]), rng.choice([1, 3, 5])
            grp = pick(1, [0, 2, 3, -1])
            cin = shape[1] // grp if grp > 0 and shape[1] % grp == 0 else shape[1]
            wt = const(f"w{k}", (g.standard_normal((o, cin, kk, kk)) * 0.1).astype(np.float32))
            b = const(f"b{k}", g.standard_normal(o).astype(np.float32))
            pad = pick(kk // 2, [-1, kk, 100])
            stride = pick(rng.choice([1, 1, 2]), [0, -2, 1000])
            dil = pick(1, [0, 2, 50])
            nodes.append(helper.make_node("Conv", [cur, wt, b], [out], kernel_shape=pick([kk, kk], [[kk], [0, 0]]),
                                          pads=[pad] * 4, strides=[stride, stride], dilations=[dil, dil], group=grp))
            hh = (shape[2] + 2 * pad - dil * (kk - 1) - 1) // max(stride, 1) + 1
            ww = (shape[3] + 2 * pad - dil * (kk - 1) - 1) // max(stride, 1) + 1
            shape = [1, o, hh, ww]
        elif op in ("MaxPool", "AveragePool") and rank == 4:
            kk = pick(2, [0, 1000, -1])
            nodes.append(helper.make_node(op, [cur], [out], kernel_shape=[kk, kk], strides=[pick(2, [0, 3])] * 2,
                                          ceil_mode=pick(0, [1, 2])))
            shape = [1, shape[1], max(shape[2] // 2, 1), max(shape[3] // 2, 1)]
        elif op in ("Add", "Mul", "Div", "Where"):
            bshape = rng.choice([shape, [1], [shape[1], 1, 1] if rank == 4 else [1], [1, *shape[1:]], [2, 3]])
            cst = const(f"c{k}", g.standard_normal(bshape).astype(np.float32) + (2 if op == "Div" else 0))
            if op == "Where":
                cond = const(f"m{k}", g.random(bshape) < 0.5)
                nodes.append(helper.make_node(op, [cond, cur, cst], [out]))
            else:
                nodes.append(helper.make_node(op, [cur, cst], [out]))
            with contextlib.suppress(ValueError):
                shape = list(np.broadcast_shapes(tuple(shape), tuple(bshape)))
        elif op == "Softmax":
            nodes.append(helper.make_node(op, [cur], [out], axis=pick(rng.randrange(-rank, rank), [rank, -rank - 1,
                                                                                                 99])))
        elif op == "Transpose":
            perm = list(range(rank))
            rng.shuffle(perm)
            perm = pick(perm, [perm[:-1], [0] * rank, [*perm, rank]])
            nodes.append(helper.make_node(op, [cur], [out], perm=perm))
            if sorted(perm) == list(range(rank)):
                shape = [shape[p] for p in perm]
        elif op == "Reshape":
            n = math.prod(shape)
            new = pick(rng.choice([[1, -1], [n], [1, shape[1] if rank > 1 else 1, -1], [-1, 2] if n % 2 == 0 else [n]]),
                       [[0, -1], [-1, -1], [n + 1], [2**40], [0]])
            nodes.append(helper.make_node(op, [cur, const(f"s{k}", np.array(new, np.int64))], [out]))
            if -1 in new and new.count(-1) == 1 and 0 not in new:
                rest = math.prod(d for d in new if d != -1)
                shape = [d if d != -1 else n // max(rest, 1) for d in new]
            elif math.prod(new) == n and all(d > 0 for d in new):
                shape = new
        elif op == "Slice":
            ax = rng.randrange(rank)
            st, en = pick(0, [-100, 2**62]), pick(max(shape[ax] // 2, 1), [0, -2**63, 2**62])
            step = pick(1, [0, -1, 2**62])
            nodes.append(helper.make_node(op, [cur, const(f"st{k}", np.array([st], np.int64)),
                                               const(f"en{k}", np.array([en], np.int64)),
                                               const(f"ax{k}", np.array([pick(ax, [rank, -rank - 1])], np.int64)),
                                               const(f"sp{k}", np.array([step], np.int64))], [out]))
            if (st, step) == (0, 1) and en > 0:
                shape = [*shape[:ax], min(en, shape[ax]), *shape[ax + 1:]]
        elif op == "Concat":
            ax = pick(rng.randrange(rank), [rank, -rank - 1])
            nodes.append(helper.make_node(op, [cur, cur], [out], axis=ax))
            if 0 <= ax < rank:
                shape = [*shape[:ax], shape[ax] * 2, *shape[ax + 1:]]
        elif op == "Pad":
            pads = pick([0, 0, 1, 1] * (rank // 2) if rank % 2 == 0 else [0] * (2 * rank), [[-5] * (2 * rank),
                                                                                          [1, 2, 3], [2**40] * 2 * rank])
            mode = pick(rng.choice(["constant", "reflect", "edge"]), ["wrap", "bogus"])
            nodes.append(helper.make_node(op, [cur, const(f"p{k}", np.array(pads, np.int64))], [out], mode=mode))
            if len(pads) == 2 * rank and all(0 <= p < 100 for p in pads):
                shape = [d + pads[i] + pads[i + rank] for i, d in enumerate(shape)]
        elif op in ("ReduceMean", "ReduceL2"):
            axes = pick([rng.randrange(rank)], [[rank], [0, 0], []])
            nodes.append(helper.make_node(op, [cur, const(f"a{k}", np.array(axes, np.int64))], [out],
                                          keepdims=pick(1, [0, 2])))
            shape = [1 if i in axes else d for i, d in enumerate(shape)] if all(0 <= a < rank for a in axes) else shape
        elif op == "Clip":
            lo, hi = pick((0.0, 6.0), [(6.0, 0.0), (math.nan, 1.0), (-math.inf, math.inf)])
            nodes.append(helper.make_node(op, [cur, const(f"lo{k}", np.array(lo, np.float32)),
                                               const(f"hi{k}", np.array(hi, np.float32))], [out]))
        elif op == "LeakyRelu":
            nodes.append(helper.make_node(op, [cur], [out], alpha=pick(0.1, [math.nan, -1e30, 1e30])))
        elif op == "Resize" and rank == 4:
            scale = pick(2.0, [0.0, -1.0, 1e6, math.nan, 0.001])
            nodes.append(helper.make_node(op, [cur, "", const(f"sc{k}", np.array([1, 1, scale, scale], np.float32))],
                                          [out], mode=pick("nearest", ["cubic", "linear", "bogus"])))
            if scale == 2.0:
                shape = [*shape[:2], shape[2] * 2, shape[3] * 2]
        elif op == "Cast":
            to = pick(rng.choice([TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.BOOL,
                                  TensorProto.DOUBLE]), [0, 8, 16, 99, -1])
            nodes.append(helper.make_node(op, [cur], [out], to=to))
            nodes.append(helper.make_node("Cast", [out], [out + "f"], to=TensorProto.FLOAT))
            out += "f"
        elif op == "Unsqueeze":
            ax = pick(0, [rank + 1, -rank - 2, 40])
            nodes.append(helper.make_node(op, [cur, const(f"u{k}", np.array([ax], np.int64))], [out]))
            if ax == 0:
                shape = [1, *shape]
        elif op == "Squeeze":
            ones = [i for i, d in enumerate(shape) if d == 1]
            ax = pick(ones[:1] or [0], [[rank], [1] if shape[1:2] != [1] else [-1]])
            nodes.append(helper.make_node(op, [cur, const(f"q{k}", np.array(ax, np.int64))], [out]))
            if ax and ax[0] in ones:
                shape = [d for i, d in enumerate(shape) if i != ax[0]]
        elif op in ("BatchNormalization", "InstanceNormalization") and rank == 4:
            ch = pick(shape[1], [shape[1] + 1, 0])
            args = [const(f"{n}{k}", (g.random(ch) + (0.5 if n == "v" else 0)).astype(np.float32))
                    for n in ("g", "b", "m", "v")]
            if op == "InstanceNormalization":
                args = args[:2]
            nodes.append(helper.make_node(op, [cur, *args], [out], epsilon=pick(1e-5, [0.0, -1.0, math.nan])))
        elif op in ("Sqrt", "Exp", "Relu", "Sigmoid", "Identity"):
            nodes.append(helper.make_node(op, [cur], [out]))
        elif op == "Flatten":
            ax = pick(1, [rank + 1, -rank - 1])
            nodes.append(helper.make_node(op, [cur], [out], axis=ax))
            if 0 <= ax <= rank:
                shape = [math.prod(shape[:ax]), math.prod(shape[ax:])]
        elif op == "DepthToSpace" and rank == 4:
            bs = pick(2, [0, 3, 1000])
            nodes.append(helper.make_node(op, [cur], [out], blocksize=bs, mode=pick("DCR", ["CRD", "x"])))
            if bs == 2 and shape[1] % 4 == 0:
                shape = [1, shape[1] // 4, shape[2] * 2, shape[3] * 2]
        elif op == "Gather":
            ax = rng.randrange(rank)
            idx = pick(np.array([0, shape[ax] - 1], np.int64), [np.array([shape[ax]], np.int64),
                                                                np.array([-shape[ax] - 1], np.int64),
                                                                np.array([2**62], np.int64)])
            nodes.append(helper.make_node(op, [cur, const(f"i{k}", idx)], [out], axis=ax))
            shape = [*shape[:ax], len(idx), *shape[ax + 1:]]
        elif op == "TopK":
            kk = pick(1, [0, shape[-1] + 1, -1])
            nodes.append(helper.make_node(op, [cur, const(f"k{k}", np.array([kk], np.int64))], [out, out + "_i"]))
            shape = [*shape[:-1], kk]
        elif op == "NonZero":
            nodes.append(helper.make_node(op, [cur], [out + "_nz"]))
            nodes.append(helper.make_node("Cast", [out + "_nz"], [out], to=TensorProto.FLOAT))
            shape = [rank, -1]
        elif op == "Expand":
            nodes.append(helper.make_node(op, [cur, const(f"e{k}", np.array(pick([1] * rank, [[2**40], [3] * rank,
                                                                                             [0] * rank]),
                                                                                  np.int64))], [out]))
        elif op == "Tile":
            reps = pick([1] * (rank - 1) + [2], [[0] * rank, [-1] * rank, [2**31] * rank, [1]])
            nodes.append(helper.make_node(op, [cur, const(f"r{k}", np.array(reps, np.int64))], [out]))
            if len(reps) == rank and all(r > 0 for r in reps) and math.prod(reps) < 100:
                shape = [d * r for d, r in zip(shape, reps)]
        elif op == "Split":
            ax = rank - 1
            nodes.append(helper.make_node(op, [cur], [out, out + "_b"], axis=ax, num_outputs=pick(2, [0, 1, 99])))
            shape = [*shape[:-1], -(-shape[-1] // 2)]
        elif op == "MatMul":
            m = const(f"mm{k}", g.standard_normal((pick(shape[-1], [shape[-1] + 1, 1]), 5)).astype(np.float32))
            nodes.append(helper.make_node(op, [cur, m], [out]))
            shape = [*shape[:-1], 5]
        elif op == "ArgMax":
            ax = pick(rng.randrange(rank), [rank])
            nodes.append(helper.make_node(op, [cur], [out + "_a"], axis=ax, keepdims=1))
            nodes.append(helper.make_node("Cast", [out + "_a"], [out], to=TensorProto.FLOAT))
            if 0 <= ax < rank:
                shape = [1 if i == ax else d for i, d in enumerate(shape)]
        elif op == "GlobalAveragePool" and rank >= 3:
            nodes.append(helper.make_node(op, [cur], [out]))
            shape = [*shape[:2], *([1] * (rank - 2))]
        else:
            nodes.append(helper.make_node("Relu", [cur], [out]))
            op = "Relu"
        what.append(op)
        cur = out
        if any(type(d) is not int or d < 1 for d in shape) or math.prod(shape) > 1 << 22:
            break
    dims: list[Any] = [d if type(d) is int and d > 0 else None for d in shape]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
                              [helper.make_tensor_value_info(cur, TensorProto.FLOAT, dims if rng.random() < 0.7
                                                             else None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", rng.choice([13, 17, 18, 18, 18]))])
    model.ir_version = 10
    return model, f"a small model: {' -> '.join(what)}{' (hostile attributes)' if hostile else ''}"


def onnx_case(rng: random.Random, fx: Fixtures, work: Path) -> Case:
    kind = rng.choices(["mutate", "bytes", "tiny", "tiny-mutated", "odd-file"], weights=[55, 10, 25, 10, 3])[0]
    tiny = kind.startswith("tiny")
    if kind == "odd-file":
        from tests.fuzz.plans import odd_file

        what = odd_file(rng, work / "m.onnx")
        return Case(what, ["compile", "m.onnx", "-o", "m.ttplan"], check=lambda w: plan_consistent(w / "m.ttplan"))
    if kind == "bytes":
        data = fx.model_bytes()
        done = []
        for _ in range(rng.choice([1, 1, 2])):
            data, what = flip_bytes(rng, data, [(0, 2048), (max(0, len(data) - 8192), len(data))])
            done.append(what)
        what = "the export's bytes: " + "; ".join(done)
    else:
        if tiny:
            model, what = _tiny(rng)
        else:
            model, what = _load(fx.model_bytes()), "the export"
        if kind != "tiny":
            done = [mutate_model(rng, model) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
            what += ": " + "; ".join(done)
        try:
            data = model.SerializeToString()
        except Exception as exc:  # protobuf refuses what it cannot write: a case of the bytes kind instead
            data, what = flip_bytes(rng, fx.model_bytes())[0], f"{what} (unserialisable: {type(exc).__name__})"
    (work / "m.onnx").write_bytes(data)
    if "external" in what and rng.random() < 0.7:
        (work / "w.bin").write_bytes(bytes(rng.choice([0, 16, 4096, 1 << 20])))
    (work / "dir").mkdir()
    flags: list[str] = []
    r = rng.random()
    if r < 0.1:
        flags.append("--dense")
    elif r < 0.2:
        flags += ["--kernels", "on"]
    elif r < 0.25:
        flags += ["--precision", "fast"]
    elif r < 0.3:
        flags += ["--input-shape", rng.choice(["1,3,64,96", "1,1,64,96", "1,3,8,8", "2,3,64,96", "1,3,0,1"])]
    elif r < 0.33:
        flags.append("--nms-single-pass")
    elif r < 0.36:
        flags += ["--target", rng.choice(["n150", "n300"])]
    run = tiny or rng.random() < 0.3

    def check(w: Path) -> str | None:
        why = plan_consistent(w / "m.ttplan")
        if why or not run:
            return why
        return _runs(w / "m.ttplan")

    return Case(what + (f" [{' '.join(flags)}]" if flags else ""), ["compile", "m.onnx", "-o", "m.ttplan", *flags],
                check=check)


def _runs(plan: Path) -> str | None:
    """A plan spc compiled runs on the emulator (an input of zeros, then of noise)."""
    from spc.errors import SpcError
    from spc.plan.io import read_plan
    from spc.runtime.runner import Runner

    p = read_plan(plan)
    shape = [int(d) for d in p.program.inputs[0].shape]
    try:
        with Runner(p, "emu", True) as runner:
            for x in (np.zeros(shape, np.float32), np.random.default_rng(0).random(shape, dtype=np.float32)):
                runner.run(x)
    except SpcError as exc:  # the model's own failure (an index out of range) is an error line; not a plan's
        if "inconsistent" in str(exc) or "recompile" in str(exc):
            return f"the compiled plan does not run: {exc}"
    return None
