"""Every ONNX input is hostile until checked here.

The importer hands a model to onnx's C++ code (the checker, shape inference) and to numpy; both
trust what they are given. A bad attribute can crash the process (GatherND ``batch_dims=-2**31``
segfaults onnx's shape inference), a declared size can ask for petabytes (a 1-D value of 2**62
elements makes onnx's data propagation allocate without end), and bytes that are not UTF-8 or a
tensor whose data does not match its dims end as Python exceptions deep inside. So, before any of
that code sees the model, this module checks in plain Python, with the protobuf fields only (in the
compiler's process, or, for ``spc compile``, first in the child that then infers the shapes:
frontend/reading.py):

* the file: it exists, is a file, fits a protobuf, parses; external data stays in the model's
  folder, exists and covers the bytes it claims (read here, not by onnx's loader);
* every string is UTF-8; every value is defined once, before it is read;
* every tensor: a supported element type, dims >= 0 within :data:`MAX_RANK`, a size within the
  caps below, data that matches its dims exactly;
* every attribute: known to the op's schema, of the schema's type, and, where a value can crash
  onnx or spc, within its meaning (:data:`_ATTR_RULES`); the model's IR and opset versions fit
  the C ints onnx keeps them in.

Then onnx's checker runs node by node, and onnx's shape inference runs without the data of large
float weights (shape_inference.py). For a file (``import_onnx``) inference runs in a child process
with memory and time limits, started while the checks run (``shape_inference.Inference``; a refusal
ends it), or running them first (frontend/reading.py):
a crash that our checks did not foresee ends as one error line naming the node (found by
bisection), never as a dead compiler. Every failure is one :class:`SpcError` naming the file, the
node and what to do.
"""

from __future__ import annotations

import functools
import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from spc.errors import SpcError
from spc.frontend import onnx_proto, onnx_schemas
from spc.frontend.onnx_schemas import SINGLE
from spc.text import byte_size, one_line


def onnx_type_name(code: int) -> str:
    """An element type's name for a message (spc.ir.types': imported on a refusal only, as it
    brings numpy, which reading a model does not need)."""
    from spc.ir.types import onnx_type_name as name

    return name(code)


# -- caps -------------------------------------------------------------------------------------
# protobuf's own limit: a larger file cannot be one ModelProto (big weights go in external data)
MAX_FILE_BYTES = 2**31 - 1
# any tensor, declared or inferred: 2**31 elements is 8 GiB of float32, 4x SuperPoint's largest
# tensor (64 channels at full resolution) at 4K
MAX_ELEMENTS = 2**31
# weights (initializers, Constant values): per tensor and in total, bytes held in memory
MAX_CONST_BYTES = 2**31
MAX_TOTAL_CONST_BYTES = 2**32
# numpy handles at most 64 axes; a vision graph uses at most 6; no axis attribute may go beyond
MAX_RANK = 32

# bytes per element and the TensorProto field that holds typed (non-raw) data, per element type
# spc takes; the rest are refused by name (spc.ir.types.onnx_type_name)
_ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8}
_TYPED_FIELD = {1: "float_data", 2: "int32_data", 3: "int32_data", 4: "int32_data", 5: "int32_data",
                6: "int32_data", 7: "int64_data", 9: "int32_data", 10: "int32_data", 11: "double_data",
                12: "uint64_data", 13: "uint64_data"}
# the range a narrow type's values must fit where they are stored widened (int32_data, uint64_data)
_TYPED_RANGE = {2: (0, 255), 3: (-128, 127), 4: (0, 65535), 5: (-32768, 32767), 9: (0, 1),
                10: (0, 65535), 12: (0, 2**32 - 1)}
_NAMES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
          10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}
_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data",
                "string_data")
_ATTR_TYPES = {1: "FLOAT", 2: "INT", 3: "STRING", 4: "TENSOR", 5: "GRAPH", 6: "FLOATS", 7: "INTS",
               8: "STRINGS", 9: "TENSORS", 10: "GRAPHS", 11: "SPARSE_TENSOR", 12: "SPARSE_TENSORS",
               13: "TYPE_PROTO", 14: "TYPE_PROTOS"}
_INT32_MAX = 2**31 - 1

# (low, high) for integer attributes, by name, whatever the op: values outside cannot mean
# anything (an axis beyond any rank spc takes, a kernel of size 0) and some crash onnx's inference
# or divide by zero in spc's; an INTS list holds at most 2 * MAX_RANK of them (pads). Rank-dependent
# checks (axis < rank) follow in spc's own inference, once ranks are known.
_ATTR_RULES: dict[str, tuple[int, int]] = {
    "axis": (-MAX_RANK, MAX_RANK), "axes": (-MAX_RANK, MAX_RANK), "perm": (0, MAX_RANK - 1),
    "kernel_shape": (1, _INT32_MAX), "strides": (1, _INT32_MAX), "dilations": (1, _INT32_MAX),
    "pads": (0, _INT32_MAX), "output_padding": (0, _INT32_MAX), "output_shape": (0, _INT32_MAX),
    "group": (1, _INT32_MAX), "offset_group": (1, _INT32_MAX), "num_groups": (1, _INT32_MAX),
    "blocksize": (1, _INT32_MAX), "size": (1, _INT32_MAX), "num_outputs": (1, _INT32_MAX),
    "split": (0, _INT32_MAX), "output_height": (0, _INT32_MAX), "output_width": (0, _INT32_MAX),
    "sampling_ratio": (0, _INT32_MAX), "p": (1, _INT32_MAX), "batch_axis": (0, 1), "time_axis": (0, 1),
}
# per op, where the spec is narrower than the name's rule (GatherND's batch_dims counts leading
# axes; a negative one segfaults onnx's GatherND inference)
_OP_ATTR_RULES: dict[tuple[str, str], tuple[int, int]] = {
    ("GatherND", "batch_dims"): (0, MAX_RANK),
}
# STRING attributes with a closed set of values that spc's own code and onnx's branch on
_ATTR_CHOICES: dict[str, tuple[str, ...]] = {"auto_pad": ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")}
_CONSTANT_VALUES = ("value", "value_float", "value_floats", "value_int", "value_ints", "value_string",
                    "value_strings", "sparse_value")
# the Constant values onnx knows and spc does not take (strings, sparse tensors): refused before
# onnx's checker walks a sparse tensor's (hostile) indices
_CONSTANT_REFUSED = ("value_string", "value_strings", "sparse_value")
# INT attributes holding an element type code
_DTYPE_ATTRS = {("Cast", "to"), ("EyeLike", "dtype")}


def show(name: Any, limit: int = 60) -> str:
    """A name as it can appear in a one-line message: printable, short, quoted when odd."""
    if isinstance(name, bytes):
        return repr(name[:limit])
    text = str(name)
    if not text:
        return "''"
    if len(text) > limit:
        text = text[:limit] + "..."
    return text if text.isprintable() and " " not in text else repr(text)


def node_label(node: Any, index: int) -> str:
    """How messages name a node: its name, else its position (``#3``)."""
    return show(node.name) if isinstance(node.name, str) and node.name else f"#{index}"


# -- the file ---------------------------------------------------------------------------------
def read_model(path: Path) -> Any:
    """Parse ``path`` into a ModelProto with its external data read in; every failure is one
    SpcError naming the file."""
    return parse_model(read_file(path), path)


def read_file(path: Path) -> bytes:
    """The bytes of the model file ``path``: a regular file, not empty, of a size one protobuf can hold."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise SpcError(f"{path}: no such file") from None
    except OSError as exc:
        raise SpcError(f"{path}: cannot read it ({exc.strerror})") from None
    if path.is_dir():
        raise SpcError(f"{path}: is a folder, expected an .onnx file")
    if not path.is_file():
        raise SpcError(f"{path}: not a regular file; pass the .onnx file itself")
    if st.st_size == 0:
        raise SpcError(f"{path}: the file is empty (0 bytes); re-export the model")
    if st.st_size > MAX_FILE_BYTES:
        raise SpcError(f"{path}: {byte_size(st.st_size)}, more than one ONNX protobuf can hold (2 GiB); "
                       "re-save the model with its weights as external data")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SpcError(f"{path}: cannot read it ({exc.strerror})") from None


def parse_model(data: bytes, path: Path) -> Any:
    """``data``, the bytes of ``path``, as a ModelProto with its external data read in."""
    model = onnx_proto.messages().ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:  # upb raises DecodeError; be generous
        raise SpcError(f"{path}: not an ONNX model: the protobuf does not parse ({one_line(exc)}); "
                       "the file is truncated or of another kind: re-export it with `spc export`") from None
    if not model.HasField("graph") or not model.graph.node:
        raise SpcError(f"{path}: the ONNX graph has no nodes (a truncated file or not an ONNX model); "
                       "re-export it")
    _load_external_data(model, path)
    return model


def _graph_tensors(model: Any) -> Iterator[tuple[str, Any]]:
    """The top graph's tensors that can hold data: initializers and node attribute tensors (a
    subgraph's belong to an op spc refuses before anyone reads them)."""
    for init in model.graph.initializer:
        yield f"initializer {show(init.name)}", init
    for i, node in enumerate(model.graph.node):
        for attr in node.attribute:
            where = f"node {node_label(node, i)} ({show(node.op_type)}): attribute {show(attr.name)}"
            if attr.HasField("t"):
                yield where, attr.t
            for t in attr.tensors:
                yield where, t


def _external_file(location: str, base: Path, what: str, path: Path) -> tuple[Path, int]:
    """The file an external-data ``location`` names, and its size: a regular file inside the
    model's folder ``base`` (resolved), else an SpcError saying why it is refused."""
    if "\0" in location:
        why = "contains a NUL character"
    elif Path(location).is_absolute():
        why = "is an absolute path"
    elif not Path(os.path.normpath(base / location)).is_relative_to(base):
        why = "climbs out of it with '..'"
    else:
        try:
            target = (base / location).resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop (RuntimeError before Python 3.13)
            raise SpcError(f"{path}: {what}: its external data {show(location)} cannot be resolved "
                           f"({getattr(exc, 'strerror', None) or exc}); put the data file beside the model") from None
        why = "" if target.is_relative_to(base) else "leads out of it through a symlink"
    if why:
        raise SpcError(f"{path}: {what}: its external data {show(location)} lies outside the model's folder "
                       f"{base}: the location {why}; spc reads weights only from the model's folder: put the "
                       "data file beside the model and re-save it with a plain relative location")
    try:
        st = target.stat()
    except FileNotFoundError:
        raise SpcError(f"{path}: {what}: its external data file {show(location)} is missing (looked for "
                       f"{show(str(target), 200)}); copy it next to the model") from None
    except OSError as exc:  # a name too long, a component that is a file, no permission
        raise SpcError(f"{path}: {what}: cannot open its external data file {show(location)} "
                       f"({exc.strerror}); put the data file beside the model") from None
    if not stat.S_ISREG(st.st_mode):
        raise SpcError(f"{path}: {what}: its external data {show(location)} is not a regular file; "
                       "put the data file beside the model")
    return target, st.st_size


def _load_external_data(model: Any, path: Path) -> None:
    """Read every tensor's external data, refusing (and saying why) a location outside the
    model's folder, a missing file, or a range beyond the file's end. onnx's own loader is not
    used: it follows the location wherever it points."""
    TensorProto = onnx_proto.messages().TensorProto

    base = path.parent.resolve()
    total = 0
    for what, t in _graph_tensors(model):
        if t.data_location != TensorProto.EXTERNAL:
            continue
        need = _checked_numel(t, what, path) * _ITEMSIZE[t.data_type]
        entries = {e.key: e.value for e in t.external_data}
        location = entries.get("location", "")
        if not location:
            raise SpcError(f"{path}: {what}: its data is external but names no file; re-save the model")
        target, file_size = _external_file(location, base, what, path)
        try:
            # int() refuses more than 4300 digits: no number of that size is a file offset anyway
            offset = int(entries.get("offset", "0"))
            length = int(entries["length"]) if "length" in entries else max(0, file_size - offset)
        except ValueError:
            raise SpcError(f"{path}: {what}: external data offset {show(entries.get('offset', '0'))} or length "
                           f"{show(entries.get('length', ''))} is not a number; re-save the model") from None
        if offset < 0 or length < 0:
            raise SpcError(f"{path}: {what}: external data offset {offset} or length {length} is negative; "
                           "re-save the model")
        if offset + length > file_size:
            raise SpcError(f"{path}: {what}: its external data asks for bytes {offset}..{offset + length} of "
                           f"{show(location)}, which has {file_size} bytes; the data file is truncated or "
                           "belongs to another model: re-save them together")
        if length != need:
            raise SpcError(f"{path}: {what}: its external data {show(location)} holds {length} bytes (from offset "
                           f"{offset}) where its dims {list(t.dims)} need {need}; the data file is truncated or "
                           "belongs to another model: re-save them together")
        total += need
        if total > MAX_TOTAL_CONST_BYTES:
            raise SpcError(f"{path}: the weights exceed spc's cap of {byte_size(MAX_TOTAL_CONST_BYTES)} in total; "
                           "this is not a SuperPoint-sized model")
        try:
            with open(target, "rb") as f:
                f.seek(offset)
                data = f.read(length)
        except OSError as exc:
            raise SpcError(f"{path}: {what}: cannot read its external data {show(location)} "
                           f"({exc.strerror})") from None
        if len(data) != length:  # the file shrank since we looked
            raise SpcError(f"{path}: {what}: {show(location)} ended early (read {len(data)} of {length} bytes)")
        t.raw_data = data
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT


# -- the model --------------------------------------------------------------------------------
def _is_repeated(field: Any) -> bool:
    # protobuf 7 dropped FieldDescriptor.label for is_repeated
    repeated = getattr(field, "is_repeated", None)
    return bool(repeated) if repeated is not None else field.label == field.LABEL_REPEATED


@functools.cache
def _text_fields(descriptor: Any) -> tuple[tuple[tuple[str, bool], ...], tuple[tuple[str, bool], ...]]:
    """A message type's string fields and message fields, as (name, repeated)."""
    strings = tuple((f.name, _is_repeated(f)) for f in descriptor.fields if f.type == f.TYPE_STRING)
    messages = tuple((f.name, _is_repeated(f)) for f in descriptor.fields if f.type == f.TYPE_MESSAGE)
    return strings, messages


def _all_text(model: Any) -> bool:
    """Whether every string field in the model is text: a walk that reads only string and message
    fields (not a tensor's bytes) and names nothing, for the common case (~1 ms, not ~6)."""
    stack = [model]
    while stack:
        msg = stack.pop()
        strings, messages = _text_fields(msg.DESCRIPTOR)
        for name, repeated in strings:
            value = getattr(msg, name)
            if not (all(isinstance(v, str) for v in value) if repeated else isinstance(value, str)):
                return False
        for name, repeated in messages:
            if repeated:
                stack.extend(getattr(msg, name))
            elif msg.HasField(name):
                stack.append(getattr(msg, name))
    return True


def check_strings(model: Any, path: Path) -> None:
    """Every string field UTF-8 and every STRING attribute decodable: upb hands back ``bytes`` for
    a string field that is not UTF-8, and spc's code (and messages) expect text."""

    def walk(msg: Any, where: str, node: str | None) -> None:
        for field, value in msg.ListFields():
            name = f"{where}.{field.name}"
            repeated = _is_repeated(field)
            if field.type == field.TYPE_STRING:
                items = value if repeated else [value]
                for k, item in enumerate(items):
                    if not isinstance(item, str):
                        at = f"{name}[{k}]" if repeated else name
                        raise SpcError(f"{path}: {node or 'the model'}: {at} is not valid UTF-8 ({show(item)}); "
                                       "ONNX names are UTF-8 text: rename it and re-export the model")
            elif field.type == field.TYPE_MESSAGE:
                items = value if repeated else [value]
                for k, item in enumerate(items):
                    sub = f"{name}[{k}]" if repeated else name
                    here = node
                    if field.name == "node":
                        here = f"node #{k}" + (f" ({item.op_type})" if isinstance(item.op_type, str) else "")
                    walk(item, sub, here)

    if not _all_text(model):
        walk(model, "model", None)  # again, naming where: it raises
    for i, node in enumerate(model.graph.node):
        for attr in node.attribute:
            for s in ([attr.s] if attr.HasField("s") else []) + list(attr.strings):
                try:
                    s.decode()
                except UnicodeDecodeError:
                    raise SpcError(f"{path}: node {node_label(node, i)} ({node.op_type}): attribute "
                                   f"{show(attr.name)} is not valid UTF-8 text ({show(s)}); fix the attribute "
                                   "and re-export the model") from None


def check_model(model: Any, path: Path, opset: int) -> None:
    """The checks that need no C++: values defined once and before use, graph inputs and
    declared types, every tensor, every attribute against its op's schema."""
    ir_version = onnx_proto.messages().IR_VERSION
    # onnx's checker keeps these versions in C ints: a larger one is a TypeError, not a message
    if not 0 <= model.ir_version <= ir_version:
        raise SpcError(f"{path}: the model's IR version {model.ir_version} is not one this spc's onnx "
                       f"{onnx_proto.onnx_version()} reads (1..{ir_version}); re-export it (opset 18)")
    for o in model.opset_import:
        if not 0 <= o.version <= _INT32_MAX:
            raise SpcError(f"{path}: the model imports opset {o.version} of domain {show(o.domain or 'ai.onnx')}, "
                           "which is not a version number; re-export it (opset 18)")
    g = model.graph
    defined: dict[str, str] = {}
    for inp in g.input:
        if inp.name in defined:
            raise SpcError(f"{path}: the graph declares input {show(inp.name)} twice; re-export the model")
        defined[inp.name] = "a graph input"
    seen_inits: set[str] = set()
    total = 0
    for init in g.initializer:
        what = f"initializer {show(init.name)}"
        if init.name in seen_inits:
            raise SpcError(f"{path}: {what} is defined twice; re-export the model")
        seen_inits.add(init.name)
        defined.setdefault(init.name, "an initializer")
        total += check_tensor(init, what, path)
    for vi, kind in [(v, "input") for v in g.input] + [(v, "output") for v in g.output] + \
                    [(v, "value") for v in g.value_info]:
        check_value_type(vi, kind, path, required=kind == "input" and vi.name not in seen_inits)
    for i, node in enumerate(g.node):
        label = f"node {node_label(node, i)} ({node.op_type})"
        total += _check_node(node, label, path, opset)
        for name in node.input:
            if name and name not in defined:
                raise SpcError(f"{path}: {label} reads {show(name)}, which nothing before it defines (a missing "
                               "input, or a graph that is not topologically sorted); re-export the model")
        for name in node.output:
            if not name:
                continue
            if name in defined:
                raise SpcError(f"{path}: {label} writes {show(name)}, which {defined[name]} already defines; "
                               "an ONNX value is assigned once: re-export the model")
            defined[name] = f"node {node_label(node, i)}"
        if total > MAX_TOTAL_CONST_BYTES:
            raise SpcError(f"{path}: the weights exceed spc's cap of {byte_size(MAX_TOTAL_CONST_BYTES)} in total; "
                           "this is not a SuperPoint-sized model")
    missing = [show(o.name) for o in g.output if o.name not in defined]
    if missing:
        raise SpcError(f"{path}: graph output(s) {', '.join(missing)} are never produced; re-export the model")
    if total > MAX_TOTAL_CONST_BYTES:
        raise SpcError(f"{path}: the weights exceed spc's cap of {byte_size(MAX_TOTAL_CONST_BYTES)} in total; "
                       "this is not a SuperPoint-sized model")


def check_value_type(vi: Any, kind: str, path: Path, required: bool = False) -> None:
    """A declared type (graph input, output, value_info): a tensor, dims >= 0, within the caps.
    ``required``: a graph input, which must be a tensor of a known element type."""
    what = f"{kind} {show(vi.name)}"
    if not vi.type.HasField("tensor_type"):
        if required:
            kinds = vi.type.WhichOneof("value") or "no type"
            raise SpcError(f"{path}: {what} is not a tensor ({kinds}); spc compiles models that take tensors")
        return
    tt = vi.type.tensor_type
    if required and tt.elem_type == 0:
        raise SpcError(f"{path}: {what}: unsupported ONNX element type {onnx_type_name(0)}; "
                       "give the input an element type (float32) and re-export")
    if not tt.HasField("shape"):
        return
    dims = tt.shape.dim
    if len(dims) > MAX_RANK:
        raise SpcError(f"{path}: {what} has rank {len(dims)}; spc takes tensors of rank at most {MAX_RANK}")
    numel = 1
    for k, d in enumerate(dims):
        if d.HasField("dim_value"):
            if d.dim_value < 0:
                raise SpcError(f"{path}: {what}: dimension {k} is {d.dim_value}; a size is >= 0 (a dynamic size "
                               "is a dim_param name): fix the export, or pass --input-shape")
            numel *= d.dim_value
    check_numel(numel, [d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in dims],
                f"{path}: {what}", tt.elem_type)


def check_numel(numel: int, shape: list[Any], where: str, elem_type: int = 1) -> None:
    """A tensor's element count within :data:`MAX_ELEMENTS` (``where`` names it)."""
    if numel > MAX_ELEMENTS:
        size = byte_size(numel * _ITEMSIZE.get(elem_type, 4))
        raise SpcError(f"{where}: shape {shape} holds {numel:.3g} elements ({size}), more than spc's cap of "
                       f"2**31 elements per tensor; the shape is corrupt: fix it and re-export the model")


def _checked_numel(t: Any, what: str, path: Path) -> int:
    """A tensor's element type, dims and element count, checked; returns the count."""
    if t.data_type == 16:  # numpy has no bfloat16: spc uses it on the device only
        raise SpcError(f"{path}: {what}: unsupported ONNX element type BFLOAT16 (16); export it in float32")
    if t.data_type not in _ITEMSIZE:
        raise SpcError(f"{path}: {what}: unsupported ONNX element type {onnx_type_name(t.data_type)}; spc takes "
                       "numeric tensors (float, int, bool)")
    if len(t.dims) > MAX_RANK:
        raise SpcError(f"{path}: {what} has rank {len(t.dims)}; spc takes tensors of rank at most {MAX_RANK}")
    if any(d < 0 for d in t.dims):
        raise SpcError(f"{path}: {what}: negative dimension in dims {list(t.dims)}; the tensor is corrupt: "
                       "re-export the model")
    numel = math.prod(t.dims)
    if numel * _ITEMSIZE[t.data_type] > MAX_CONST_BYTES:
        raise SpcError(f"{path}: {what}: dims {list(t.dims)} declare {byte_size(numel * _ITEMSIZE[t.data_type])}, "
                       f"more than spc's cap of {byte_size(MAX_CONST_BYTES)} per constant; the tensor is corrupt "
                       "(or not a SuperPoint weight): re-export the model")
    if t.HasField("segment"):
        raise SpcError(f"{path}: {what} is a segmented tensor, which spc does not read; re-save the model")
    return numel


def check_tensor(t: Any, what: str, path: Path) -> int:
    """An initializer or attribute tensor: type, dims, caps, and data that matches them exactly
    (numpy_helper would raise on a mismatch, or read garbage). Returns its size in bytes."""
    numel = _checked_numel(t, what, path)
    nbytes = numel * _ITEMSIZE[t.data_type]
    tname = _NAMES[t.data_type]
    if t.data_location == onnx_proto.messages().TensorProto.EXTERNAL:
        raise SpcError(f"{path}: {what}: its data is external and was not read; import the model from its "
                       "file (spc compile FILE), with the data file beside it")
    held = [f for f in _DATA_FIELDS if len(getattr(t, f))]
    if not held and numel == 0:
        return 0
    if not held:
        raise SpcError(f"{path}: {what}: dims {list(t.dims)} declare {numel} {tname} elements ({byte_size(nbytes)}) "
                       "but the tensor holds no data; re-export the model with its weights")
    if len(held) > 1:
        raise SpcError(f"{path}: {what} holds data in several fields ({', '.join(held)}); re-export the model")
    if held == ["raw_data"]:
        if len(t.raw_data) != nbytes:
            raise SpcError(f"{path}: {what}: raw_data holds {len(t.raw_data)} bytes where dims {list(t.dims)} of "
                           f"{tname} need {nbytes}; the tensor is corrupt: re-export the model")
        return nbytes
    field = _TYPED_FIELD[t.data_type]
    if held != [field] or len(getattr(t, field)) != numel:
        got = f"{len(getattr(t, held[0]))} values in {held[0]}"
        raise SpcError(f"{path}: {what}: holds {got} where dims {list(t.dims)} of {tname} need {numel} values in "
                       f"{field}; the tensor is corrupt: re-export the model")
    if t.data_type in _TYPED_RANGE:
        lo, hi = _TYPED_RANGE[t.data_type]
        values = getattr(t, field)
        if min(values) < lo or max(values) > hi:
            raise SpcError(f"{path}: {what}: {field} holds values outside {tname}'s range {lo}..{hi}; "
                           "re-export the model")
    return nbytes


def _check_node(node: Any, label: str, path: Path, opset: int) -> int:
    """A (supported) node's input/output counts and attributes against its schema; returns the
    bytes its attribute tensors hold."""
    schema = onnx_schemas.schema(node.op_type, opset)
    if schema is None:  # _check_supported has refused such a node already
        return 0
    n_in = len(node.input)
    while n_in and not node.input[n_in - 1]:
        n_in -= 1
    if not schema.min_input <= n_in <= schema.max_input:
        raise SpcError(f"{path}: {label} has {n_in} input(s); ONNX's {node.op_type}-{schema.since_version} takes "
                       f"{schema.min_input}..{schema.max_input}: re-export the model")
    if not schema.min_output <= len(node.output) <= schema.max_output:
        raise SpcError(f"{path}: {label} has {len(node.output)} output(s); ONNX's {node.op_type}-"
                       f"{schema.since_version} gives {schema.min_output}..{schema.max_output}: re-export the model")
    for k, formal in enumerate(schema.inputs[:n_in]):
        if formal.option == SINGLE and not node.input[k]:
            raise SpcError(f"{path}: {label}: its required input {k} ({formal.name}) is empty; re-export the model")
    nbytes = 0
    seen: set[str] = set()
    for attr in node.attribute:
        name = attr.name
        if name in seen:
            raise SpcError(f"{path}: {label} sets attribute {show(name)} twice; re-export the model")
        seen.add(name)
        spec = schema.attributes.get(name)
        if spec is None:
            raise SpcError(f"{path}: {label}: ONNX's {node.op_type}-{schema.since_version} has no attribute "
                           f"{show(name)}; remove it and re-export the model")
        if attr.ref_attr_name:
            raise SpcError(f"{path}: {label}: attribute {show(name)} refers to a function's attribute; "
                           "spc imports graphs, not function bodies: inline the function")
        if int(attr.type) != int(spec.type):
            got = _ATTR_TYPES.get(int(attr.type), f"type {int(attr.type)}")
            raise SpcError(f"{path}: {label}: attribute {name} is {got}; ONNX's {node.op_type} takes "
                           f"{_ATTR_TYPES.get(int(spec.type), spec.type)}: fix it and re-export the model")
        if attr.HasField("t"):
            nbytes += check_tensor(attr.t, f"{label}: attribute {name}", path)
        for t in attr.tensors:
            nbytes += check_tensor(t, f"{label}: attribute {name}", path)
        _check_attr_value(node, attr, label, path)
    for name, spec in schema.attributes.items():
        if spec.required and name not in seen:
            raise SpcError(f"{path}: {label} lacks the required attribute {name!r}; re-export the model")
    if node.op_type == "Constant":
        given = [a.name for a in node.attribute if a.name in _CONSTANT_VALUES]
        if len(given) != 1:
            has = f"sets {', '.join(given)}" if given else "has none"
            raise SpcError(f"{path}: {label}: a Constant takes exactly one value attribute (value, value_float(s), "
                           f"value_int(s)) and this one {has}; fix it and re-export the model")
        if given[0] in _CONSTANT_REFUSED:
            raise SpcError(f"{path}: {label}: a Constant with {given[0]} is not supported (spc takes dense numeric "
                           "constants: value, value_float(s), value_int(s)); store it as a dense tensor and re-export")
    if node.op_type == "ConstantOfShape":
        for attr in node.attribute:
            if attr.name == "value" and math.prod(attr.t.dims) != 1:
                raise SpcError(f"{path}: {label}: attribute value must hold one element (it has dims "
                               f"{list(attr.t.dims)}); re-export the model")
    return nbytes


def _check_attr_value(node: Any, attr: Any, label: str, path: Path) -> None:
    pb = onnx_proto.messages()
    key = (node.op_type, attr.name)
    choices = _ATTR_CHOICES.get(attr.name)
    if choices is not None and attr.type == pb.AttributeProto.STRING and attr.s.decode() not in choices:
        raise SpcError(f"{path}: {label}: {attr.name}={show(attr.s.decode())} is not an ONNX value for it; use one "
                       f"of {', '.join(choices)} (or explicit pads) and re-export the model")
    if key in _DTYPE_ATTRS and attr.type == pb.AttributeProto.INT:
        if attr.i == 0 or attr.i not in pb.TensorProto.DataType.values():
            raise SpcError(f"{path}: {label}: attribute {attr.name}: unsupported ONNX element type "
                           f"{onnx_type_name(attr.i)}; use a real element type (1 = float32) and re-export")
        return
    rule = _OP_ATTR_RULES.get(key) or _ATTR_RULES.get(attr.name)
    if rule is None:
        return
    if attr.type == pb.AttributeProto.INT:
        values = [attr.i]
    elif attr.type == pb.AttributeProto.INTS:
        values = list(attr.ints)
        if len(values) > 2 * MAX_RANK:
            raise SpcError(f"{path}: {label}: attribute {attr.name} lists {len(values)} values; no tensor spc "
                           f"takes has that many axes (rank <= {MAX_RANK}): fix it and re-export")
    else:
        return
    lo, hi = rule
    bad = [v for v in values if not lo <= v <= hi]
    if bad:
        raise SpcError(f"{path}: {label}: attribute {attr.name}={values if len(values) > 1 else values[0]} is out "
                       f"of range (each value must lie in {lo}..{hi}); fix the attribute and re-export the model")


def onnx_check_nodes(model: Any, path: Path) -> None:
    """onnx's checker, node by node, on what our checks passed: its graph-level check also wants
    output shapes, which valid models (and spc's own tests) leave out."""
    checker = onnx_proto.cpp().checker
    ctx = checker.CheckerContext()
    ctx.ir_version = model.ir_version or onnx_proto.messages().IR_VERSION
    ctx.opset_imports = {o.domain: o.version for o in model.opset_import}
    lexical = checker.LexicalScopeContext()
    for i, node in enumerate(model.graph.node):
        try:
            checker.check_node(node.SerializeToString(), ctx, lexical)
        except Exception as exc:  # ValidationError, and whatever else the C++ side raises
            raise SpcError(f"{path}: node {node_label(node, i)} ({node.op_type}) fails onnx's checker: "
                           f"{one_line(exc)}; fix the node and re-export the model") from None
