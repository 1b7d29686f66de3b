"""Read an ONNX file into the IR.

Types come from ONNX shape inference (with data propagation, so shape chains resolve), then from
our own op inference; dimensions nobody can know statically (the keypoint count) become
symbols. Constant nodes and initializers become IR constants; initializers stay lazy, by
reference. Anything we cannot represent is reported in ONE error listing every offending node.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
from msgspec import Struct, field

from spc.errors import SpcError
from spc.frontend import onnx_proto, onnx_schemas, validate
from spc.frontend.reading import Reading, begin
from spc.frontend.validate import MAX_ELEMENTS, MAX_RANK, node_label, show
from spc.ir import ops
from spc.ir.graph import Graph, Value
from spc.ir.types import Dim, DType, TensorType

KNOWN_MAX = 64
_NODE_NAME_BAD = re.compile(r"[^A-Za-z0-9_./\-]")


def load_onnx(path: Path):
    """Parse the file (and its external data); every failure is one SpcError line naming the file."""
    return validate.read_model(path)


def import_onnx(path: Path, name: str = "superpoint", input_shape: list[int] | None = None) -> Graph:
    """A model from a file: untrusted, so onnx's shape inference runs in a child process (the graph
    of :func:`read_source`, the compiler's one way in)."""
    return read_source(path, name, input_shape).graph


class Source(Struct):
    """A model as the compiler takes it from its file: the IR, and what the plan's manifest says
    of the file (the sha256 of the bytes imported, their metadata_props as data)."""

    graph: Graph
    sha256: str
    metadata: list[tuple[str, str]] = field(default_factory=list)


def read_source(path: Path, name: str = "superpoint", input_shape: list[int] | None = None,
                reading: Reading | None = None) -> Source:
    """:func:`import_onnx`, with the file's hash and metadata_props from the same bytes.
    ``reading``: the file's read, begun already (frontend/reading.py; its input shape is the one)."""
    if reading is None:
        reading = begin(path, input_shape)
    elif (reading.path, reading.input_shape) != (path, input_shape):
        raise ValueError(f"the read begun is of {reading.path} {reading.input_shape}, not {path} {input_shape}")
    g = _import(reading, name)
    # not UTF-8: the importer refused the model (validate.check_strings)
    props = [(e.key, e.value) for e in reading.model.metadata_props
             if isinstance(e.key, str) and isinstance(e.value, str)]
    return Source(g, reading.sha256(), props)


def import_model(model, path: Path, name: str = "superpoint", input_shape: list[int] | None = None,
                 isolate: bool = False) -> Graph:
    """An in-memory ModelProto into the IR; ``path`` names it in messages (and is where external
    data was read from). ``input_shape`` fixes a dynamic input's size before shape inference.

    The model is validated (frontend/validate.py) before onnx's C++ code sees it in this process,
    then annotated in place with onnx's inferred types. ``isolate`` runs onnx's shape inference in a
    child process, so that a crash our checks did not foresee is an error line, not a dead
    process: import_onnx does; in-process is for models one trusts not to be hostile (onnx's
    own test cases, frontend/conformance.py), ~0.1 s faster."""
    return _import(Reading.of_model(model, path, input_shape, isolate), name)


def _import(reading: Reading, name: str) -> Graph:
    path, opset = reading.path, reading.opset
    return _Importer(reading.inferred(lambda model: _check_supported(model, opset, path)), name, path, opset).run()


def unsupported_reason(op_type: str, domain: str, opset: int) -> str | None:
    """Why spc cannot import an ``op_type`` node at ``opset``, or None when it can."""
    if domain not in ("", "ai.onnx"):
        return f"domain {domain} is not supported"
    op = ops.onnx_op(op_type)
    if op is None:
        return "no such op in spc"
    schema = onnx_schemas.schema(op_type, opset)
    if schema is None:
        return f"ONNX has no {op_type} at opset {opset}"
    since = schema.since_version
    if op.schemas is not None and since not in op.schemas:
        return f"{op_type}-{since} is not supported (spc implements {op_type} " \
               + ", ".join(f"{op_type}-{v}" for v in op.schemas) + ")"
    return None


def _check_supported(model, opset: int, path: Path) -> None:
    bad = []
    for i, node in enumerate(model.graph.node):
        why = unsupported_reason(node.op_type, node.domain, opset)
        if why is not None:
            dom = show(node.domain or "ai.onnx")
            bad.append(f"{node_label(node, i)} ({dom}::{show(node.op_type)}, opset {opset}: {why})")
    if bad:
        raise SpcError(f"{path}: {len(bad)} unsupported node(s): " + "; ".join(bad))


def _model_dtype(code: int) -> DType:
    """An element type a model's tensors may have in spc: bfloat16 is a device storage format here,
    not a host one (numpy has none)."""
    dtype = DType.from_onnx(code)
    if dtype is DType.BF16:
        raise TypeError("unsupported ONNX element type BFLOAT16 (16) in the model; export it in float32")
    return dtype


def _attr_value(attr) -> Any:
    """An attribute as Python/numpy; validate.check_model has checked its type and tensors."""
    v = onnx_proto.attribute_value(attr)
    if isinstance(v, bytes):
        return v.decode()
    if hasattr(v, "dims") and hasattr(v, "data_type"):
        return onnx_proto.to_array(v)
    if isinstance(v, list):
        return [x.decode() if isinstance(x, bytes) else x for x in v]
    if isinstance(v, (int, float, str)):
        return v
    raise ValueError(f"attribute {attr.name} has an unsupported kind ({type(v).__name__})")


def _static_numel(shape: tuple[Dim, ...]) -> int:
    """The product of a shape's known sizes (symbols count as 1): what the caps bound."""
    n = 1
    for d in shape:
        if isinstance(d, int):
            n *= d
    return n


class _Importer:
    def __init__(self, model, name: str, path: Path, opset: int) -> None:
        self.model, self.path, self.opset = model, path, opset
        self.g = Graph(name)
        self.g.opset = opset
        self.env: dict[str, Value] = {}
        self.types: dict[str, TensorType] = {}
        # small values known at compile time (shape chains), used only to infer types; the
        # graph itself is folded later by the fold-constants pass, visibly
        self.known: dict[int, np.ndarray] = {}
        self._symbols = 0
        g = model.graph
        # who writes each value, so that a bad inferred type names the node to look at
        self.producer = {o: f"node {node_label(n, i)} ({n.op_type})" for i, n in enumerate(g.node) for o in n.output}
        for vi in list(g.value_info) + list(g.input) + list(g.output):
            t = self._onnx_type(vi)
            if t is not None:
                self.types[vi.name] = t
        # a graph output's declared sizes are the exporter's claim: where spc's own inference says
        # a size is known only at run time (a keypoint count), the claim is not trusted
        self.graph_outputs = {o.name for o in g.output}

    def fresh_symbol(self) -> str:
        self._symbols += 1
        return f"d{self._symbols}"

    def _onnx_type(self, vi) -> TensorType | None:
        """A declared or ONNX-inferred type. Inference computes sizes from attributes nobody
        bounded (a kernel larger than its input): such a size must not reach TensorType."""
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or tt.elem_type == 0:
            return None
        try:
            dtype = _model_dtype(tt.elem_type)
        except TypeError as exc:
            raise SpcError(f"{self.path}: value {show(vi.name)}: {exc}") from None
        if not tt.HasField("shape"):
            return None
        where = f"{self.path}: value {show(vi.name)}" + (f" (from {self.producer[vi.name]})"
                                                         if vi.name in self.producer else "")
        if len(tt.shape.dim) > MAX_RANK:
            raise SpcError(f"{where} has rank {len(tt.shape.dim)}; spc takes tensors of rank at most {MAX_RANK}")
        dims: list[Dim] = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                if d.dim_value < 0:
                    raise SpcError(f"{where}: ONNX's shape inference gives it the size {d.dim_value}; the node's "
                                   "attributes do not fit its inputs: fix them and re-export the model")
                dims.append(int(d.dim_value))
            else:
                dims.append(self.fresh_symbol())
        validate.check_numel(_static_numel(tuple(dims)), dims, where, tt.elem_type)
        return TensorType(dtype, tuple(dims))

    def run(self) -> Graph:
        g, model = self.g, self.model.graph
        init_names = set()
        for init in model.initializer:
            init_names.add(init.name)
            try:
                t = TensorType(_model_dtype(init.data_type), tuple(int(d) for d in init.dims))
            except TypeError as exc:
                raise SpcError(f"{self.path}: initializer {show(init.name)}: {exc}") from None
            self.env[init.name] = g.add_const(init.name, type=t, weight_ref=init.name,
                                              loader=lambda i=init: onnx_proto.to_array(i))
        for inp in model.input:
            if inp.name in init_names:
                continue
            t = self.types.get(inp.name)
            if t is None:
                raise SpcError(f"{self.path}: input {show(inp.name)} has no tensor type (element type and shape); "
                               "re-export the model with typed inputs")
            self.env[inp.name] = g.add_input(inp.name, t)
        for i, node in enumerate(model.node):
            self._node(i, node)
        missing = [show(o.name) for o in model.output if o.name not in self.env]
        if missing:
            raise SpcError(f"{self.path}: graph outputs {missing} are never produced")
        g.outputs = [self.env[o.name] for o in model.output]
        return g

    def _node(self, i: int, node) -> None:
        label = node_label(node, i)
        where = f"{self.path}: node {label} ({node.op_type})"
        op = ops.onnx_op(node.op_type)
        try:
            attrs = {a.name: _attr_value(a) for a in node.attribute}
        except (ValueError, TypeError, UnicodeDecodeError) as exc:  # validate.check_model ran: a safety net
            raise SpcError(f"{where}: {exc}; fix the attribute and re-export the model") from None
        if op is not None and op.canonicalize is not None:
            since = onnx_schemas.schema(node.op_type, self.opset).since_version
            try:
                given = len(node.input)
                while given and not node.input[given - 1]:  # trailing empty names: absent optional inputs
                    given -= 1
                attrs = op.canonicalize(attrs, given, len(node.output), since)
            except (ValueError, KeyError, TypeError, IndexError, ArithmeticError) as exc:
                raise SpcError(f"{where}: {exc}") from None
        if node.op_type == "Constant":
            try:
                data = np.asarray(ops.get("onnx.Constant").evaluate([], attrs)[0])
            except (ValueError, KeyError, TypeError, ArithmeticError) as exc:
                raise SpcError(f"{where}: {exc}; fix the Constant and re-export the model") from None
            self.env[node.output[0]] = self.g.add_const(node.output[0], data)
            return
        assert op is not None  # _check_supported ran
        inputs: list[Value | None] = []
        for name in node.input:
            if not name:
                inputs.append(None)
            elif name in self.env:
                inputs.append(self.env[name])
            else:
                raise SpcError(f"{where} reads {show(name)}, which is "
                               "not defined before it (is the graph topologically sorted?)")
        while inputs and inputs[-1] is None:
            inputs.pop()
        outs = [o for o in node.output]
        out_types: list[TensorType] = []
        ours, why = self._infer(op, inputs, attrs)
        if why:  # ONNX's inference, not strict, may still have typed a node that ours finds invalid
            raise SpcError(f"{where}: {why}; fix the node and re-export the model")
        for k, o in enumerate(outs):
            t = self.types.get(o) if o else None
            mine = ours[k] if ours is not None and k < len(ours) else None
            if t is not None and mine is not None and mine.dtype != t.dtype:
                raise SpcError(f"{where}: its output {show(o)} is declared {t.dtype.value}, but the node computes "
                               f"{mine.dtype.value}: the model is inconsistent (onnxruntime refuses it too); fix the "
                               "tool that wrote it (a float16 converter that retyped a Cast's output, not its 'to'?)")
            if t is None:
                t = mine
            elif mine is not None and mine.rank == t.rank and mine.dtype == t.dtype:
                # where ONNX's inference left a symbol (a Range's length), ours may know the number
                t = t.with_shape(tuple(b if isinstance(a, str) and isinstance(b, int) else a
                                       for a, b in zip(t.shape, mine.shape)))
                if o in self.graph_outputs:
                    t = t.with_shape(tuple(b if isinstance(b, str) else a for a, b in zip(t.shape, mine.shape)))
            if t is None and not o:  # an optional output nobody reads: any type will do
                t = TensorType(DType.F32, ())
            if t is None:
                raise SpcError(f"{self.path}: cannot infer the type of {show(o)} (node {label}, {node.op_type}); "
                               "is the model valid? check it with onnxruntime")
            if t.rank > MAX_RANK or _static_numel(t.shape) > MAX_ELEMENTS:
                raise SpcError(f"{where}: its output {show(o)} would be {t}, beyond spc's caps (rank {MAX_RANK}, "
                               "2**31 elements per tensor); check the node's attributes and inputs and re-export")
            out_types.append(t)
        safe = _NODE_NAME_BAD.sub("_", node.name) if node.name else op.short_name.lower()
        n = self.g.make_node(op, inputs, attrs, out_types, name=safe, out_names=[o or "unused" for o in outs])
        for o, v in zip(outs, n.outputs):
            if o:
                self.env[o] = v
        self._propagate_known(n, ours)

    def _known(self, v: Value | None) -> np.ndarray | None:
        if v is None:
            return None
        if v.is_const and v.type.numel <= KNOWN_MAX:
            return v.data
        return self.known.get(id(v))

    def _infer(self, op: ops.OpDef, inputs: list[Value | None],
               attrs: dict[str, Any]) -> tuple[list[TensorType] | None, str]:
        if op.infer is None:
            return None, ""
        shadow: list[Value | None] = []
        for v in inputs:
            data = self._known(v) if v is not None and not v.is_const else None
            if data is not None:
                tmp = Value(v.name, v.type)
                tmp.set_const(data)
                shadow.append(tmp)
            else:
                shadow.append(v)
        try:
            return op.infer(shadow, attrs), ""
        # ArithmeticError: a hostile attribute (a zero block size) divides by zero in our inference
        except (ValueError, KeyError, IndexError, TypeError, ArithmeticError) as exc:
            return None, str(exc)

    def _propagate_known(self, n, ours: list[TensorType] | None) -> None:
        if n.op.data_dependent:
            return
        if n.op.name == "onnx.Shape" and n.inputs[0] is not None and n.inputs[0].type.is_static:
            # a view of one byte: the input's shape without allocating it
            args: list[Any] = [np.broadcast_to(np.zeros((), np.uint8), n.inputs[0].type.static_shape)]
        else:
            args = [self._known(v) for v in n.inputs]
            if any(a is None for a, v in zip(args, n.inputs) if v is not None):
                return
        if not all(o.type.is_static and o.type.numel <= KNOWN_MAX for o in n.outputs):
            return
        # the output types may be declared (a value_info can lie: a Range said to give 5 elements
        # that gives 2**40); ours come from the known input values, so they bound what evaluate makes
        if ours is None or len(ours) < len(n.outputs) or \
                not all(t.is_static and t.numel <= KNOWN_MAX for t in ours[:len(n.outputs)]):
            return
        try:
            results = n.op.evaluate(args, n.attrs)
        except Exception:  # an op that cannot run here simply leaves its value unknown
            return
        for o, r in zip(n.outputs, results):
            self.known[id(o)] = np.asarray(r)
