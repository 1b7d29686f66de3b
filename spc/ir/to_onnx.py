"""The IR as an ONNX model, for a viewer (Netron) and for onnxruntime: ``--dump-dir``'s
``NN-<pass>.onnx``.

* ``onnx.*`` nodes keep their op type and attributes, at the opset the graph was imported at
  (:data:`DEFAULT_OPSET` for a graph parsed from text). The attributes the importer adds to make a
  version's meaning explicit (``ir/ops``' canonicalizers: MaxPool's ``with_indices``, Softmax-11's
  ``coerce_2d`` ...) are left out where that version's schema has no such attribute, and ``axes``
  or ``split`` move between attribute and input where a pass wrote the other version's form;
* ``spc.*`` nodes (the fused ops) are in the :data:`SPC_DOMAIN` domain, with their attributes;
* every value's type is in ``value_info`` (a symbolic size as ``dim_param``), the constants are
  initializers (weights included: the file stands alone and passes ``onnx.checker``);
* the compiler's decisions (placement, block, precision; ``printer.decision_fields``) and any
  further notes (the memory planner's choices) are each node's ``metadata_props``; a value the
  device computes keeps its ONNX type (the host reads and writes it so), with the format the
  device stores it in as its own ``metadata_props`` (``device_dtype``).

A graph of ONNX ops only (the dumps before the first fusion) runs in onnxruntime and computes what
the source model does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from spc.ir.graph import Attr, Graph, Node, Value
from spc.ir.printer import decision_fields, stored_format
from spc.ir.types import TensorType
from spc.version import __version__

SPC_DOMAIN = "ai.spc"
SPC_DOMAIN_VERSION = 1
DEFAULT_OPSET = 18
MIN_IR_VERSION = 10  # the first with metadata_props on nodes (onnx 1.16)
# the attributes a pass may write as inputs at one opset and as attributes at another
_MOVABLE = ("axes", "split")


def value_info(name: str, t: TensorType) -> onnx.ValueInfoProto:
    """A typed value: static sizes as ``dim_value``, symbolic ones as ``dim_param``."""
    return helper.make_tensor_value_info(name, t.dtype.onnx, list(t.shape))


def attribute(key: str, value: Any, where: str) -> onnx.AttributeProto:
    """An IR or call attribute as ONNX's (ints, floats, strings, lists of one kind, a tensor)."""
    if isinstance(value, np.ndarray):
        return helper.make_attribute(key, numpy_helper.from_array(value))
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, (list, tuple)):
        items = [int(x) if isinstance(x, (bool, np.bool_)) else x.item() if isinstance(x, np.generic) else x
                 for x in value]
        if not items:  # no element to say the kind: ONNX's list attributes are mostly ints
            return helper.make_attribute(key, [], attr_type=AttributeProto.INTS)
        if all(isinstance(x, str) for x in items) or all(isinstance(x, (int, float)) for x in items):
            return helper.make_attribute(key, items)
    elif isinstance(value, (int, float, str)):
        return helper.make_attribute(key, value)
    raise ValueError(f"{where}: attribute {key} = {value!r} has no ONNX attribute type")


def set_metadata(proto: Any, fields: Mapping[str, str]) -> None:
    """Append ``fields`` to a node's, value's or tensor's ``metadata_props``."""
    for k, v in fields.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = k, v


class _Exporter:
    def __init__(self, g: Graph, opset: int) -> None:
        self.opset = opset
        self.names = {v.name for v in g.values()}
        self.extra_inits: list[onnx.TensorProto] = []

    def fresh(self, base: str) -> str:
        name, i = base, 0
        while name in self.names:
            i += 1
            name = f"{base}_{i}"
        self.names.add(name)
        return name

    def node(self, n: Node, notes: Mapping[str, str]) -> onnx.NodeProto:
        inputs = ["" if v is None else v.name for v in n.inputs]
        attrs = dict(n.attrs)
        meta = decision_fields(n)
        domain = ""
        if n.op.dialect == "spc":
            domain = SPC_DOMAIN
        elif n.op.dialect == "onnx":
            inputs, attrs, left_out = self._schema_form(n, inputs, attrs)
            if left_out:  # what the IR holds beyond the ONNX node, for whoever compares them
                meta["ir_attributes"] = ", ".join(f"{k}={v!r}" for k, v in sorted(left_out.items()))
        else:
            raise ValueError(f"node {n.name}: {n.op.name} is in no dialect the ONNX export knows")
        where = f"node {n.name} ({n.op.name})"
        proto = helper.make_node(n.op.short_name, inputs, [o.name for o in n.outputs], name=n.name, domain=domain)
        proto.attribute.extend(attribute(k, v, where) for k, v in sorted(attrs.items()))
        set_metadata(proto, {**meta, **notes})
        return proto

    def _schema_form(self, n: Node, inputs: list[str],
                     attrs: dict[str, Attr]) -> tuple[list[str], dict[str, Attr], dict[str, Attr]]:
        """The node as the export opset's schema has it: (inputs, attributes, attributes left out)."""
        try:
            schema = onnx.defs.get_schema(n.op.short_name, self.opset, "")
        except onnx.defs.SchemaError:  # a pass made an op this opset lacks: the checker will say so
            return inputs, attrs, {}
        allowed = set(schema.attributes)
        formal = [f.name for f in schema.inputs]
        for key in _MOVABLE:
            if key in attrs and key not in allowed and key in formal:  # an attribute this version takes as input
                at = formal.index(key)
                name = self.fresh(f"{n.name}.{key}")
                self.extra_inits.append(onnx.numpy_helper.from_array(np.asarray(attrs.pop(key), np.int64), name))
                inputs = inputs + [""] * max(0, at + 1 - len(inputs))
                inputs[at] = name
            elif key in allowed and len(formal) == 1 and len(n.inputs) == 2 and key not in attrs:
                v = n.inputs[1]  # the input this version takes as an attribute (Squeeze-11's axes)
                if v is not None and v.is_const:
                    attrs[key] = [int(x) for x in np.asarray(v.data).reshape(-1)]
                    inputs = inputs[:1]
        if n.op.short_name == "GridSample" and self.opset < 20:  # GridSample-16 spells them so
            mode = {"linear": "bilinear", "cubic": "bicubic"}.get(attrs.get("mode", ""))
            if mode is not None:
                attrs["mode"] = mode
        left_out = {k: v for k, v in attrs.items() if k not in allowed}
        return inputs, {k: v for k, v in attrs.items() if k in allowed}, left_out


def to_onnx(g: Graph, notes: Mapping[str, Mapping[str, str]] | None = None,
            stored: Mapping[str, str] | None = None, *, opset: int | None = None, doc: str = "") -> onnx.ModelProto:
    """``g`` as an ONNX model. ``notes``: more metadata per node name (the memory planner's choices);
    ``stored``: the device format per value name where the lowered program says it (else the
    producer's precision); ``opset``: the default domain's version (else the graph's, else
    DEFAULT_OPSET)."""
    opset = opset or g.opset or DEFAULT_OPSET
    ex = _Exporter(g, opset)
    notes = notes or {}
    nodes = [ex.node(n, notes.get(n.name, {})) for n in g.nodes]
    used = {id(v) for n in g.nodes for v in n.inputs if v is not None} | {id(v) for v in g.outputs}
    inits = [numpy_helper.from_array(np.asarray(v.data), v.name) for v in g.constants.values() if id(v) in used]
    outputs = {id(v) for v in g.outputs}

    def info(v: Value) -> onnx.ValueInfoProto:
        vi = value_info(v.name, v.type)
        fmt = stored_format(v, stored)
        if fmt is not None:
            set_metadata(vi, {"device_dtype": fmt})
        return vi

    infos = [info(o) for n in g.nodes for o in n.outputs if id(o) not in outputs]
    graph = helper.make_graph(nodes, g.name, [info(v) for v in g.inputs], [info(v) for v in g.outputs],
                              [*inits, *ex.extra_inits], doc_string=doc, value_info=infos)
    imports = [helper.make_opsetid("", opset)]
    ir_version = max(MIN_IR_VERSION, helper.find_min_ir_version_for(imports))
    if any(n.op.dialect == "spc" for n in g.nodes):
        imports.append(helper.make_opsetid(SPC_DOMAIN, SPC_DOMAIN_VERSION))
    return helper.make_model(graph, opset_imports=imports, ir_version=ir_version, producer_name="spc",
                             producer_version=__version__)
