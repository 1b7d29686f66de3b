"""The plan's schema: what manifest.json and program.json may hold, checked (msgspec) before
anything reads them.

Closed sets everywhere the runtime branches: call names and their arguments (ttnn/calls), host
op names (the IR's registry), data formats, layouts, memory configurations, targets. Names are
bounded printable strings; shapes are positive and bounded, per dimension and in elements; lists
and nesting are bounded. What a plan's parts say about each other (every tensor read is made
first, weights match what the calls declare, shapes agree) is checked after this, by
plan/verify.py.

msgspec rather than pydantic: the same typed structs, strict by default (an int is never a bool),
and it imports in ~7 ms where pydantic and this schema took ~110 ms of every `spc compile`.
"""

# no `from __future__ import annotations`: msgspec then reads these structs' annotations as types,
# not as strings it evaluates on a process's first check (~3 ms of every compile)

import functools
import math
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from spc.errors import SpcError
from spc.ir import ops
from spc.kernels import KERNELS
from spc.ttnn.calls import CALLS
from spc.ttnn.calls.definition import MAX_DIM, MAX_RANK, Format, MemoryConfigKey, PageLayoutName
from spc.ttnn.targets import TARGETS

MAX_NAME = 512
MAX_CALLS = 20_000
MAX_HOST_NODES = 20_000
MAX_ELEMENTS = 1 << 28  # per tensor (1 GiB of float32); 1080x1920 SuperPoint needs 1.3e8
MAX_INPUTS = 16  # a model's inputs: an image, or a matcher's keypoints, descriptors and sizes of two images
MAX_ATTR_DEPTH = 4


# names: printable (no C0/C1 controls, no line or paragraph separators, no lone UTF-16 surrogates:
# JSON's \\ud800 escapes decode to them, and they cannot be printed or encoded), as a pattern msgspec
# checks with Python's re.search: \Z, as $ would let a final newline through
_NAME_PATTERN = "^[^\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029\\ud800-\\udfff]*\\Z"
_SHA_PATTERN = "^[0-9a-f]{64}\\Z"
# how an error names a pattern (msgspec prints the regex itself)
_PATTERNS = {_NAME_PATTERN: "a name without control characters", _SHA_PATTERN: "a sha256 (64 lowercase hex digits)"}

Name = Annotated[str, Meta(min_length=1, max_length=MAX_NAME, pattern=_NAME_PATTERN)]
Text = Annotated[str, Meta(max_length=4096)]
Dim = Annotated[int, Meta(ge=1, le=MAX_DIM)]
# a size the IR does not know is a name (ir/types.py): checked to be an identifier by its struct
SymbolicDim = Annotated[int, Meta(ge=0, le=MAX_DIM)] | Annotated[str, Meta(min_length=1, max_length=64)]
IRType = Literal["f32", "f64", "f16", "bf16", "i64", "i32", "i16", "i8", "u64", "u32", "u16", "u8", "i1"]
Sha256 = Annotated[str, Meta(pattern=_SHA_PATTERN)]
Target = Literal[tuple(TARGETS)]  # type: ignore[valid-type]  # the targets table (ttnn/targets.py)
# the source model's metadata_props as the manifest keeps them (model_metadata): data, never read
# as settings; the compiler keeps the first entries by key and truncates longer keys and values
MAX_METADATA_ENTRIES = 64
MAX_METADATA_KEY = 128
MAX_METADATA_VALUE = 1024
DeviceShape = Annotated[list[Dim], Meta(min_length=1, max_length=MAX_RANK)]
# a nested validation's error carries its place relative to the struct that ran it: "@.args.k: ..."
_REL = "@"


def _bounded(what: str, shape: list[int]) -> None:
    if math.prod(shape) > MAX_ELEMENTS:
        raise ValueError(f"{what}: {math.prod(shape)} elements is more than spc allows for one tensor "
                         f"({MAX_ELEMENTS})")


def _located(text: str) -> tuple[str, str]:
    """(where, message) of a msgspec error text: ``msg - at `$.a[0].b``` -> (".a[0].b", msg), a
    nested error's relative place appended."""
    key = " - at `key` in `$" in text  # a mapping's key: msgspec says "... - at `key` in `$.members`"
    msg, sep, where = text.rpartition(" - at `key` in `$" if key else " - at `$")
    if not sep:
        msg, where = text, ""
    where = where.removesuffix("`") + (" (a key)" if key else "")
    if msg.startswith(_REL):
        rel, _, msg = msg[len(_REL):].partition(": ")
        where += rel
    for pattern, meaning in _PATTERNS.items():
        msg = msg.replace(f"`str` matching regex {pattern!r}", meaning)
    return where, msg


def _nested(value: Any, kind: type, prefix: str) -> Any:
    """``value`` converted to ``kind`` inside a struct's check; an error names its place under
    ``prefix`` (msgspec would otherwise name it from the nested value's root)."""
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        where, msg = _located(str(exc))
        raise ValueError(f"{_REL}{prefix}{where}: {msg}") from None


class _Strict(Struct, forbid_unknown_fields=True, frozen=True):
    pass


class TensorSpecJSON(_Strict):
    name: Name
    dtype: IRType
    shape: Annotated[list[SymbolicDim], Meta(max_length=MAX_RANK)]

    def __post_init__(self) -> None:
        for d in self.shape:
            if isinstance(d, str) and not d.isidentifier():
                raise ValueError(f"shape: a symbolic size is a name (letters, digits, _), not {d[:20]!r}")


class DeviceTensorJSON(_Strict):
    name: Name
    shape: Annotated[list[Dim], Meta(max_length=MAX_RANK)]
    device_shape: DeviceShape
    form: Literal["nhwc", "plain"]
    dtype: IRType

    def __post_init__(self) -> None:
        _bounded("shape", self.shape)
        _bounded("device_shape", self.device_shape)


class DeviceConstantJSON(_Strict):
    name: Name
    weight: Name
    device_shape: DeviceShape
    dtype: Format

    def __post_init__(self) -> None:
        _bounded("device_shape", self.device_shape)


def _attr_depth(value: Any, depth: int = 0) -> None:
    if depth > MAX_ATTR_DEPTH:
        raise ValueError(f"attribute nested deeper than {MAX_ATTR_DEPTH}")
    if isinstance(value, dict):
        if "__array__" in value:
            return
        for v in value.values():
            _attr_depth(v, depth + 1)
    elif isinstance(value, list):
        if len(value) > MAX_DIM:
            raise ValueError("attribute list too long")
        for v in value:
            _attr_depth(v, depth + 1)


class ArrayJSON(_Strict):
    """A numpy array inside an attribute (plan/program.py encode)."""

    array: Literal["float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "uint16", "uint32",
                   "uint64", "bool"] = msgspec.field(name="__array__")
    shape: Annotated[list[Annotated[int, Meta(ge=0, le=MAX_DIM)]], Meta(max_length=MAX_RANK)]
    data: list[float | int | bool]

    def __post_init__(self) -> None:
        if math.prod(self.shape) != len(self.data):
            raise ValueError(f"array of shape {self.shape} holds {len(self.data)} values")


Scalar = bool | int | float | Text | None


class HostNodeJSON(_Strict):
    op: Name
    name: Name
    inputs: Annotated[list[Name | None], Meta(max_length=64)]
    outputs: Annotated[list[Name], Meta(min_length=1, max_length=64)]
    attrs: dict[Annotated[str, Meta(max_length=64)], Any] = {}

    def __post_init__(self) -> None:
        try:
            ops.get(self.op)
        except KeyError:
            raise ValueError(f"op: {self.op!r} is not an op this spc knows") from None
        for k, v in self.attrs.items():
            _attr_depth(v)
            _check_attr(k, v)


def _check_attr(key: str, v: Any) -> None:
    if isinstance(v, dict):
        if "__array__" not in v:
            raise ValueError(f"attribute {key}: a mapping is not an attribute value")
        _nested(v, ArrayJSON, f".attrs.{key}")
    elif isinstance(v, list):
        for x in v:
            if isinstance(x, (dict, list)):
                _check_attr(key, x)
            elif not isinstance(x, (bool, int, float, str)) or (isinstance(x, str) and len(x) > 4096):
                raise ValueError(f"attribute {key}: {type(x).__name__} values are not allowed")
    elif not isinstance(v, (bool, int, float, str)) or (isinstance(v, str) and len(v) > 4096):
        raise ValueError(f"attribute {key}: {type(v).__name__} is not an attribute value")


@functools.cache
def _args_struct(op: str) -> type[Struct]:
    """One arguments struct per call, from the vocabulary (made when a plan first names the call):
    unknown keywords refused, types strict."""
    sig = CALLS[op]
    fields = [(k, t) if k in sig.required else (k, t, None) for k, t in sig.args.items()]
    return msgspec.defstruct(f"Args_{op.replace('.', '_')}", fields, kw_only=True, forbid_unknown_fields=True)


class CallJSON(_Strict):
    op: Literal[tuple(CALLS)]  # type: ignore[valid-type]
    inputs: Annotated[list[Name], Meta(max_length=64)]
    output: Name
    shape: DeviceShape
    args: dict[str, Any] = {}
    weights: dict[Literal["weight_tensor", "bias_tensor"], Name] = {}
    source: Annotated[str, Meta(max_length=MAX_NAME)] = ""
    dtype: Format = "bfloat16"
    block: Annotated[str, Meta(max_length=MAX_NAME)] = ""
    extra_outputs: Annotated[list[Name], Meta(max_length=8)] = []
    extra_dtypes: Annotated[list[Format], Meta(max_length=8)] = []

    def __post_init__(self) -> None:
        _bounded("shape", self.shape)
        sig = CALLS[self.op]
        lo, hi = sig.inputs
        if not lo <= len(self.inputs) <= hi:
            raise ValueError(f"{self.op} reads {lo}..{hi} tensors, not {len(self.inputs)}")
        if set(self.weights) - sig.weights:
            raise ValueError(f"{self.op} takes no weights {sorted(set(self.weights) - sig.weights)}")
        if self.op == "ttnn.conv2d" and "weight_tensor" not in self.weights:
            raise ValueError("ttnn.conv2d needs its weight_tensor")
        if len(self.extra_outputs) > sig.extra_outputs or len(self.extra_dtypes) != len(self.extra_outputs):
            raise ValueError(f"{self.op}: {len(self.extra_outputs)} further outputs with {len(self.extra_dtypes)} "
                             "formats")
        _nested(self.args, _args_struct(self.op), ".args")
        if self.op == "spc.kernel":
            if self.args["kernel"] not in KERNELS:
                raise ValueError(f"args.kernel: no kernel {self.args['kernel']!r} (kernels: "
                                 f"{', '.join(sorted(KERNELS))})")
            for i, step in enumerate(self.args["composed"]):
                if step.get("op") == "spc.kernel":
                    raise ValueError("args.composed: a kernel's composed calls cannot hold kernels")
                _nested({"shape": [1], **step}, CallJSON, f".args.composed[{i}]")


class ImageInputJSON(_Strict):
    layout: Literal["NCHW", "NHWC", "none"] = "NCHW"
    colour: Literal["grey", "rgb"] = "grey"


class ProgramJSON(_Strict):
    inputs: Annotated[list[TensorSpecJSON], Meta(min_length=1, max_length=MAX_INPUTS)]
    outputs: Annotated[list[TensorSpecJSON], Meta(min_length=1, max_length=64)]
    host_pre: Annotated[list[HostNodeJSON], Meta(max_length=MAX_HOST_NODES)]
    device_inputs: Annotated[list[DeviceTensorJSON], Meta(max_length=64)]
    device_ops: Annotated[list[CallJSON], Meta(max_length=MAX_CALLS)]
    device_outputs: Annotated[list[DeviceTensorJSON], Meta(max_length=64)]
    host_post: Annotated[list[HostNodeJSON], Meta(max_length=MAX_HOST_NODES)]
    probes: dict[Name, DeviceTensorJSON] = {}
    fallback_outputs: Annotated[list[DeviceTensorJSON], Meta(max_length=64)] = []
    fallback_post: Annotated[list[HostNodeJSON], Meta(max_length=MAX_HOST_NODES)] = []
    constants: Annotated[list[DeviceConstantJSON], Meta(max_length=4096)] = []
    roles: dict[Name, dict[Annotated[str, Meta(max_length=64)], Scalar | list[Scalar]]] = {}
    values: Annotated[dict[Name, DeviceTensorJSON], Meta(max_length=MAX_CALLS + 64)] = {}
    input_storage: Annotated[dict[Name, Format], Meta(max_length=64)] = {}
    image: ImageInputJSON = ImageInputJSON()


class SourceJSON(_Strict):
    file: Name
    sha256: Sha256
    # where it was compiled from (absolute): check and report find it there if its hash still matches
    path: Annotated[str, Meta(max_length=4096, pattern=_NAME_PATTERN)] = ""


class ManifestJSON(Struct, frozen=True):
    """What spc reads of a manifest is typed; the rest (notes, the search's report) is kept as
    data and never executed or pasted (fields this spc does not name are let through)."""

    format: Literal["spc.ttplan"]
    format_version: int
    spc_version: Annotated[str, Meta(max_length=64)]
    target: Target
    source: SourceJSON
    members: dict[Literal["program.json", "weights.safetensors", "ir.txt"], Sha256]
    digest: Sha256
    inputs: list[TensorSpecJSON] = []
    outputs: list[TensorSpecJSON] = []
    options: dict[str, Any] = {}
    notes: list[Text] = []
    pipeline: list[Name] = []
    predicted_device_ms: float | int | None = None
    device_ops: int | None = None
    macs: dict[Literal["device", "host"], Annotated[int, Meta(ge=0)]] = {}
    recognised: list[Text] = []
    host_reasons: list[Text] = []
    precision_search: dict[str, Any] | None = None
    model_metadata: Annotated[dict[Annotated[str, Meta(max_length=MAX_METADATA_KEY)],
                                   Annotated[str, Meta(max_length=MAX_METADATA_VALUE)]],
                              Meta(max_length=MAX_METADATA_ENTRIES)] = {}

    def __post_init__(self) -> None:
        missing = sorted({"program.json", "weights.safetensors", "ir.txt"} - set(self.members))
        if missing:
            raise ValueError(f"members: no hash for {', '.join(missing)}")


def first_error(exc: msgspec.ValidationError) -> str:
    """A validation error with where it is: ``device_ops[12].args.k: Expected `int` >= 1``."""
    where, msg = _located(str(exc))
    return _shown(f"{where.lstrip('.') or 'the top level'}: {msg}")


def _shown(text: str) -> str:
    """An error as one printable line: the plan's own names and keys in it (an unknown field, a
    refused value) cannot put a control sequence on the user's terminal."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode() for c in text)


def validate_program(d: Any, where: str) -> None:
    try:
        msgspec.convert(d, ProgramJSON)
    except msgspec.ValidationError as exc:
        raise SpcError(f"{where}: program.json is not a valid program: {first_error(exc)}; recompile the plan") \
            from None


def validate_manifest(d: Any, where: str) -> ManifestJSON:
    try:
        return msgspec.convert(d, ManifestJSON)
    except msgspec.ValidationError as exc:
        raise SpcError(f"{where}: manifest.json is not a valid manifest: {first_error(exc)}; recompile the plan") \
            from None


__all__ = ["MAX_ELEMENTS", "MemoryConfigKey", "PageLayoutName", "validate_manifest", "validate_program"]
