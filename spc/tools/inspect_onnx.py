"""`spc inspect MODEL.onnx`: what an ONNX file holds, like Polygraphy's ``inspect model``.

The file, its opsets and producer, its inputs and outputs (names, element types, declared
shapes), its initializers (count and bytes), its nodes counted by op type, and its
metadata_props (``spc export`` records there where the weights came from: spc.weights.*).

The model is untrusted: it is read by the importer's own reader (frontend/validate.py: bounded
file, external data only from the model's folder, every string UTF-8), and then only its protobuf
fields are read, in Python. No onnx C++ code (checker, shape inference) runs, nothing needs torch,
and no name the model chose is looked up anywhere: op types are counted as strings. Every string
is printed escaped and cut (tools/inspect.py ``clean``); lists are bounded.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from msgspec import Struct, field

from spc.files import file_sha256
from spc.frontend import validate
from spc.frontend.onnx_import import load_onnx
from spc.records import asdict
from spc.text import byte_size
from spc.tools.inspect import clean

# ONNX element types: name and bits per element (strings have no fixed size)
_TYPES: dict[int, tuple[str, int]] = {
    1: ("float32", 32), 2: ("uint8", 8), 3: ("int8", 8), 4: ("uint16", 16), 5: ("int16", 16), 6: ("int32", 32),
    7: ("int64", 64), 8: ("string", 0), 9: ("bool", 8), 10: ("float16", 16), 11: ("float64", 64),
    12: ("uint32", 32), 13: ("uint64", 64), 14: ("complex64", 64), 15: ("complex128", 128),
    16: ("bfloat16", 16), 17: ("float8e4m3fn", 8), 18: ("float8e4m3fnuz", 8), 19: ("float8e5m2", 8),
    20: ("float8e5m2fnuz", 8), 21: ("uint4", 4), 22: ("int4", 4), 23: ("float4e2m1", 4), 24: ("float8e8m0", 8),
    25: ("uint2", 2), 26: ("int2", 2),
}
MAX_LISTED = 1000  # inputs, outputs, op types, metadata entries kept in the report
MAX_RANK_SHOWN = 32
MAX_TEXT = 1024  # characters of any one string kept in the report


class ModelReport(Struct):
    file: str
    bytes: int
    sha256: str
    ir_version: int
    opsets: dict[str, int]
    producer: str
    graph_name: str
    doc_string: str
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    initializers: int
    initializer_bytes: int
    nodes: int
    op_types: dict[str, int]  # by count, most first, then by name
    metadata_props: dict[str, str]
    functions: int = 0
    left_off: dict[str, int] = field(default_factory=dict)  # what the bounded lists left off, by list

    def as_dict(self) -> dict:
        return asdict(self)


def _type_name(code: int) -> str:
    return _TYPES[code][0] if code in _TYPES else f"type {code}"


def _value(vi: Any) -> dict[str, Any]:
    """A graph input or output: name, element type, declared shape (None: not declared)."""
    out: dict[str, Any] = {"name": clean(vi.name, MAX_TEXT)}
    kind = vi.type.WhichOneof("value")
    if kind != "tensor_type":
        out.update(dtype=kind or "no type", shape=None)
        return out
    tt = vi.type.tensor_type
    out["dtype"] = _type_name(tt.elem_type)
    if not tt.HasField("shape"):
        out["shape"] = None
        return out
    dims: list[int | str] = []
    for d in tt.shape.dim[:MAX_RANK_SHOWN]:
        dims.append(d.dim_value if d.HasField("dim_value") else clean(d.dim_param, 64) if d.dim_param else "?")
    if len(tt.shape.dim) > MAX_RANK_SHOWN:
        dims.append(f"... {len(tt.shape.dim) - MAX_RANK_SHOWN} more")
    out["shape"] = dims
    return out


def _tensor_bytes(t: Any) -> int:
    """The bytes an initializer holds (its raw data, else what its dims declare)."""
    if t.raw_data:
        return len(t.raw_data)
    if t.data_type == 8:
        return sum(len(s) for s in t.string_data)
    if any(d < 0 for d in t.dims):
        return 0
    return math.ceil(math.prod(t.dims) * _TYPES.get(t.data_type, ("", 0))[1] / 8)


def model_report(path: Path) -> ModelReport:
    """Read ``path`` through the importer's validation (one SpcError line if it is not a model
    spc can read) and summarise it."""
    model = load_onnx(path)
    validate.check_strings(model, path)
    g = model.graph
    left_off: dict[str, int] = {}

    def bounded(name: str, items: list[Any]) -> list[Any]:
        if len(items) > MAX_LISTED:
            left_off[name] = len(items) - MAX_LISTED
        return items[:MAX_LISTED]

    inits = {i.name for i in g.initializer}
    inputs = bounded("inputs", [vi for vi in g.input if vi.name not in inits])
    outputs = bounded("outputs", list(g.output))
    ops = Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}" for n in g.node)
    by_count = sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))
    metadata: dict[str, str] = {}
    for e in model.metadata_props:
        metadata.setdefault(clean(e.key, MAX_TEXT), clean(e.value, MAX_TEXT))
    meta_items = bounded("metadata_props", list(metadata.items()))
    opsets: dict[str, int] = {}
    for o in model.opset_import[:MAX_LISTED]:
        opsets.setdefault(clean(o.domain or "ai.onnx", 200), int(o.version))
    producer = " ".join(p for p in (model.producer_name, model.producer_version) if p)
    doc = model.doc_string.strip().splitlines()[0] if model.doc_string.strip() else ""
    return ModelReport(
        file=str(path), bytes=path.stat().st_size, sha256=file_sha256(path), ir_version=int(model.ir_version),
        opsets=opsets, producer=clean(producer, MAX_TEXT), graph_name=clean(g.name, MAX_TEXT),
        doc_string=clean(doc, MAX_TEXT), inputs=[_value(v) for v in inputs], outputs=[_value(v) for v in outputs],
        initializers=len(g.initializer), initializer_bytes=sum(_tensor_bytes(t) for t in g.initializer),
        nodes=len(g.node), op_types={clean(k, 200): v for k, v in bounded("op_types", by_count)},
        metadata_props=dict(meta_items), functions=len(model.functions), left_off=left_off)


def _shape(v: dict[str, Any]) -> str:
    return "shape not declared" if v["shape"] is None else "[" + ", ".join(str(d) for d in v["shape"]) + "]"


def report_lines(r: ModelReport) -> list[str]:
    """``spc inspect MODEL.onnx`` as text, one plain line each."""
    opsets = ", ".join(f"{d} {v}" for d, v in r.opsets.items()) or "none"
    lines = [f"model: {clean(r.file)} ({byte_size(r.bytes)}, sha256 {r.sha256})",
             f"  ir_version {r.ir_version}; opset {opsets}; producer {r.producer or '(none)'}; "
             f"graph {r.graph_name or '(unnamed)'}"]
    if r.doc_string:
        lines.append(f"  doc: {clean(r.doc_string, 200)}")
    more = lambda name: f"  ... {r.left_off[name]} more" if name in r.left_off else None
    for title, values in (("inputs", r.inputs), ("outputs", r.outputs)):
        lines.append(f"{title} ({len(values) + r.left_off.get(title, 0)}):")
        width = min(max((len(v["name"]) for v in values), default=0), 40)
        lines += [f"  {v['name']:<{width}}  {v['dtype']:<8} {_shape(v)}" for v in values]
        lines += [m for m in [more(title)] if m]
    lines.append(f"initializers: {r.initializers}, {byte_size(r.initializer_bytes)}"
                 + (f"; functions: {r.functions}" if r.functions else ""))
    lines.append(f"nodes: {r.nodes} ({len(r.op_types) + r.left_off.get('op_types', 0)} op types)")
    width = min(max((len(k) for k in r.op_types), default=0), 40)
    lines += [f"  {k:<{width}}  {v}" for k, v in r.op_types.items()]
    lines += [m for m in [more("op_types")] if m]
    lines.append(f"metadata_props ({len(r.metadata_props) + r.left_off.get('metadata_props', 0)}):"
                 + ("" if r.metadata_props else " none"))
    lines += [f"  {k} = {clean(v, 300)}" for k, v in r.metadata_props.items()]
    lines += [m for m in [more("metadata_props")] if m]
    return lines
