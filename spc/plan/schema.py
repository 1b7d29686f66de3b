"""The plan's schema: what manifest.json and program.json may hold, checked (pydantic) before
anything reads them.

Closed sets everywhere the runtime branches: call names and their arguments (plan/calls.py), host
op names (the IR's registry), data formats, layouts, memory configurations, targets. Names are
bounded printable strings; shapes are positive and bounded, per dimension and in elements; lists
and nesting are bounded. What a plan's parts say about each other (every tensor read is made
first, weights match what the calls declare, shapes agree) is checked after this, by
plan/verify.py.
"""

from __future__ import annotations

import functools
import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from spc.errors import SpcError
from spc.plan.calls import CALLS, MAX_DIM, MAX_RANK, Format, MemoryConfigKey, PageLayoutName
from spc.ttnn.targets import TARGETS

MAX_NAME = 512
MAX_CALLS = 20_000
MAX_HOST_NODES = 20_000
MAX_ELEMENTS = 1 << 28  # per tensor (1 GiB of float32); 1080x1920 SuperPoint needs 1.3e8
MAX_ATTR_DEPTH = 4


def _printable(text: Any) -> Any:
    if not isinstance(text, str):  # not a name at all: StrictStr says so, as a validation error
        return text
    if any(ord(c) < 32 or ord(c) == 127 or 0x80 <= ord(c) < 0xA0 or c in "\u2028\u2029" for c in text):
        raise ValueError("control characters are not allowed in names")
    return text


Name = Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME), BeforeValidator(_printable)]
Text = Annotated[StrictStr, Field(max_length=4096)]
Dim = Annotated[StrictInt, Field(ge=1, le=MAX_DIM)]
def _symbol(text: str) -> str:
    if not text.isidentifier():  # what the IR takes for a size it does not know (ir/types.py)
        raise ValueError("a symbolic size is a name (letters, digits, _)")
    return text


SymbolicDim = Annotated[StrictInt, Field(ge=0, le=MAX_DIM)] | Annotated[StrictStr, Field(min_length=1, max_length=64),
                                                                         AfterValidator(_symbol)]
IRType = Literal["f32", "f64", "f16", "bf16", "i64", "i32", "i16", "i8", "u64", "u32", "u16", "u8", "i1"]
Sha256 = Annotated[StrictStr, Field(pattern=r"^[0-9a-f]{64}$")]
Target = Literal[tuple(TARGETS)]  # type: ignore[valid-type]  # the targets table (ttnn/targets.py)
# the source model's metadata_props as the manifest keeps them (model_metadata): data, never read
# as settings; the compiler keeps the first entries by key and truncates longer keys and values
MAX_METADATA_ENTRIES = 64
MAX_METADATA_KEY = 128
MAX_METADATA_VALUE = 1024


def _bounded(shape: list[int]) -> list[int]:
    if math.prod(shape) > MAX_ELEMENTS:
        raise ValueError(f"{math.prod(shape)} elements is more than spc allows for one tensor ({MAX_ELEMENTS})")
    return shape


DeviceShape = Annotated[list[Dim], Field(min_length=1, max_length=MAX_RANK)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TensorSpecJSON(_Strict):
    name: Name
    dtype: IRType
    shape: Annotated[list[SymbolicDim], Field(max_length=MAX_RANK)]


class DeviceTensorJSON(_Strict):
    name: Name
    shape: Annotated[list[Dim], Field(max_length=MAX_RANK)]
    device_shape: DeviceShape
    form: Literal["nhwc", "plain"]
    dtype: IRType

    @field_validator("device_shape", "shape")
    @classmethod
    def _size(cls, v: list[int]) -> list[int]:
        return _bounded(v)


class DeviceConstantJSON(_Strict):
    name: Name
    weight: Name
    device_shape: DeviceShape
    dtype: Format

    @field_validator("device_shape")
    @classmethod
    def _size(cls, v: list[int]) -> list[int]:
        return _bounded(v)


def _attr_depth(value: Any, depth: int = 0) -> Any:
    if depth > MAX_ATTR_DEPTH:
        raise ValueError(f"attribute nested deeper than {MAX_ATTR_DEPTH}")
    if isinstance(value, dict):
        if "__array__" in value:
            return value
        for v in value.values():
            _attr_depth(v, depth + 1)
    elif isinstance(value, list):
        if len(value) > MAX_DIM:
            raise ValueError("attribute list too long")
        for v in value:
            _attr_depth(v, depth + 1)
    return value


class ArrayJSON(_Strict):
    """A numpy array inside an attribute (plan/program.py encode)."""

    array: Literal["float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "uint16", "uint32",
                   "uint64", "bool"] = Field(alias="__array__")
    shape: Annotated[list[Annotated[StrictInt, Field(ge=0, le=MAX_DIM)]], Field(max_length=MAX_RANK)]
    data: list[StrictFloat | StrictInt | StrictBool]

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _count(self) -> ArrayJSON:
        if math.prod(self.shape) != len(self.data):
            raise ValueError(f"array of shape {self.shape} holds {len(self.data)} values")
        return self


Scalar = StrictBool | StrictInt | StrictFloat | Text | None
AttrValue = Annotated[Any, BeforeValidator(_attr_depth)]


class HostNodeJSON(_Strict):
    op: Name
    name: Name
    inputs: Annotated[list[Name | None], Field(max_length=64)]
    outputs: Annotated[list[Name], Field(min_length=1, max_length=64)]
    attrs: dict[Annotated[StrictStr, Field(max_length=64)], AttrValue] = {}

    @field_validator("op")
    @classmethod
    def _known(cls, op: str) -> str:
        from spc.ir import ops

        try:
            ops.get(op)
        except KeyError:
            raise ValueError(f"{op!r} is not an op this spc knows") from None
        return op

    @field_validator("attrs")
    @classmethod
    def _values(cls, attrs: dict[str, Any]) -> dict[str, Any]:
        for k, v in attrs.items():
            _check_attr(k, v)
        return attrs


def _check_attr(key: str, v: Any) -> None:
    if isinstance(v, dict):
        if "__array__" not in v:
            raise ValueError(f"attribute {key}: a mapping is not an attribute value")
        ArrayJSON.model_validate(v)
    elif isinstance(v, list):
        for x in v:
            if isinstance(x, (dict, list)):
                _check_attr(key, x)
            elif not isinstance(x, (bool, int, float, str)) or (isinstance(x, str) and len(x) > 4096):
                raise ValueError(f"attribute {key}: {type(x).__name__} values are not allowed")
    elif not isinstance(v, (bool, int, float, str)) or (isinstance(v, str) and len(v) > 4096):
        raise ValueError(f"attribute {key}: {type(v).__name__} is not an attribute value")


@functools.cache
def _args_model(op: str) -> type[BaseModel]:
    """One arguments model per call, from the vocabulary (made when a plan first names the call):
    unknown keywords refused, types strict."""
    sig = CALLS[op]
    return create_model(f"Args_{op.replace('.', '_')}", __config__=ConfigDict(extra="forbid"),
                        **{k: (t, ... if k in sig.required else None) for k, t in sig.args.items()})


class CallJSON(_Strict):
    op: Literal[tuple(CALLS)]  # type: ignore[valid-type]
    inputs: Annotated[list[Name], Field(max_length=64)]
    output: Name
    args: dict[str, Any] = {}
    weights: dict[Literal["weight_tensor", "bias_tensor"], Name] = {}
    source: Annotated[StrictStr, Field(max_length=MAX_NAME)] = ""
    dtype: Format = "bfloat16"
    block: Annotated[StrictStr, Field(max_length=MAX_NAME)] = ""
    shape: DeviceShape
    extra_outputs: Annotated[list[Name], Field(max_length=8)] = []
    extra_dtypes: Annotated[list[Format], Field(max_length=8)] = []

    @field_validator("shape")
    @classmethod
    def _size(cls, v: list[int]) -> list[int]:
        return _bounded(v)

    @model_validator(mode="after")
    def _signature(self) -> CallJSON:
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
        _args_model(self.op).model_validate(self.args)
        if self.op == "spc.kernel":
            from spc.kernels import KERNELS

            if self.args["kernel"] not in KERNELS:
                raise ValueError(f"no kernel {self.args['kernel']!r} (kernels: {', '.join(sorted(KERNELS))})")
            for step in self.args["composed"]:
                if step.get("op") == "spc.kernel":
                    raise ValueError("a kernel's composed calls cannot hold kernels")
                CallJSON.model_validate({"shape": [1], **step})
        return self


class ProgramJSON(_Strict):
    inputs: Annotated[list[TensorSpecJSON], Field(min_length=1, max_length=16)]
    outputs: Annotated[list[TensorSpecJSON], Field(min_length=1, max_length=64)]
    host_pre: Annotated[list[HostNodeJSON], Field(max_length=MAX_HOST_NODES)]
    device_inputs: Annotated[list[DeviceTensorJSON], Field(max_length=64)]
    device_ops: Annotated[list[CallJSON], Field(max_length=MAX_CALLS)]
    device_outputs: Annotated[list[DeviceTensorJSON], Field(max_length=64)]
    host_post: Annotated[list[HostNodeJSON], Field(max_length=MAX_HOST_NODES)]
    probes: dict[Name, DeviceTensorJSON] = {}
    fallback_outputs: Annotated[list[DeviceTensorJSON], Field(max_length=64)] = []
    fallback_post: Annotated[list[HostNodeJSON], Field(max_length=MAX_HOST_NODES)] = []
    constants: Annotated[list[DeviceConstantJSON], Field(max_length=4096)] = []
    roles: dict[Name, dict[Annotated[StrictStr, Field(max_length=64)], Scalar | list[Scalar]]] = {}
    values: Annotated[dict[Name, DeviceTensorJSON], Field(max_length=MAX_CALLS + 64)] = {}


class SourceJSON(_Strict):
    file: Name
    sha256: Sha256


class ManifestJSON(BaseModel):
    """What spc reads of a manifest is typed; the rest (notes, the search's report) is kept as
    data and never executed or pasted."""

    model_config = ConfigDict(extra="allow", frozen=True)

    format: Literal["spc.ttplan"]
    format_version: StrictInt
    spc_version: Annotated[StrictStr, Field(max_length=64)]
    target: Target
    source: SourceJSON
    members: dict[Literal["program.json", "weights.safetensors", "ir.txt"], Sha256]
    digest: Sha256
    inputs: list[TensorSpecJSON] = []
    outputs: list[TensorSpecJSON] = []
    options: dict[str, Any] = {}
    notes: list[Text] = []
    pipeline: list[Name] = []
    predicted_device_ms: StrictFloat | StrictInt | None = None
    device_ops: StrictInt | None = None
    macs: dict[Literal["device", "host"], Annotated[StrictInt, Field(ge=0)]] = {}
    recognised: list[Text] = []
    host_reasons: list[Text] = []
    precision_search: dict[str, Any] | None = None
    model_metadata: Annotated[dict[Annotated[StrictStr, Field(max_length=MAX_METADATA_KEY)],
                                   Annotated[StrictStr, Field(max_length=MAX_METADATA_VALUE)]],
                              Field(max_length=MAX_METADATA_ENTRIES)] = {}


def first_error(exc: ValidationError) -> str:
    """The first problem of a validation error, with where it is: ``device_ops.12.args.k: ...``."""
    e = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in e["loc"])
    value = repr(e.get("input"))[:60] if e["type"] != "missing" else ""
    return f"{where}: {e['msg']}" + (f" (got {value})" if value else "") + (
        f" and {exc.error_count() - 1} more problem(s)" if exc.error_count() > 1 else "")


def validate_program(d: Any, where: str) -> None:
    try:
        ProgramJSON.model_validate(d)
    except ValidationError as exc:
        raise SpcError(f"{where}: program.json is not a valid program: {first_error(exc)}; recompile the plan") \
            from None


def validate_manifest(d: Any, where: str) -> ManifestJSON:
    try:
        return ManifestJSON.model_validate(d)
    except ValidationError as exc:
        raise SpcError(f"{where}: manifest.json is not a valid manifest: {first_error(exc)}; recompile the plan") \
            from None


__all__ = ["MAX_ELEMENTS", "MemoryConfigKey", "PageLayoutName", "validate_manifest", "validate_program"]
