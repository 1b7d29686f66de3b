"""The plan's call vocabulary: every ttnn call a program may hold, its inputs, weights and
keyword arguments with their types and ranges, as data.

This is the contract's closed set (plan/schema.py validates a plan's JSON against it before
anything reads the plan): the lowering emits only these calls, the backends and `spc emit-py`
execute or print only these, and a plan naming anything else is refused. A new call is a row
here, a lowering, an emulation (emulator/device.py) and a spelling (ttnn/calls.py);
the compiler checks every plan it writes against the schema (compiler.py _check_plan), so every
call the lowering emits over ONNX's conformance cases and the corpus is checked in their tests;
tests/test_plan_schema.py edits a real plan's calls one field at a time.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct, field

from spc.ttnn.elementwise import BINARY, UNARY

# bounds: wider than any SuperPoint plan needs, narrow enough that nothing they allow allocates
# without limit (a dimension, a count of slices, a window)
MAX_DIM = 1 << 24
MAX_RANK = 8
MAX_WINDOW = 1 << 12

# msgspec types: an int is never a bool, nor a float an int (strict); a Number keeps its JSON type
Count = Annotated[int, Meta(ge=1, le=MAX_DIM)]
NonNegative = Annotated[int, Meta(ge=0, le=MAX_DIM)]
Axis = Annotated[int, Meta(ge=-MAX_RANK, le=MAX_RANK - 1)]
Index = Annotated[int, Meta(ge=-MAX_DIM, le=MAX_DIM)]
Window = Annotated[int, Meta(ge=1, le=MAX_WINDOW)]
Pad = Annotated[int, Meta(ge=0, le=MAX_WINDOW)]
Number = float | int  # inf and nan are allowed: masks and clamps use them
Pair = Annotated[list[Window], Meta(min_length=2, max_length=2)]
PadPair = Annotated[list[Pad], Meta(min_length=2, max_length=2)]
Shape = Annotated[list[Count], Meta(min_length=1, max_length=MAX_RANK)]
Axes = Annotated[list[Axis], Meta(min_length=1, max_length=MAX_RANK)]
Indices = Annotated[list[Index], Meta(min_length=1, max_length=MAX_RANK)]
# the typed arguments are checked by the types that read them (plan/program.py decode_args): here
# only their JSON shape
Format = Literal["float32", "bfloat16", "bfloat8_b", "bfloat4_b", "uint32", "uint16"]
PageLayoutName = Literal["TILE_LAYOUT", "ROW_MAJOR_LAYOUT"]
MemoryConfigKey = Literal["DRAM_INTERLEAVED", "L1_INTERLEAVED"]
JsonObject = dict[str, Any]


class CallSig(Struct, frozen=True):
    """What a call may hold. ``inputs``: how many device tensors it reads (min, max)."""

    inputs: tuple[int, int] = (1, 1)
    args: dict[str, Any] = field(default_factory=dict)  # keyword -> type (msgspec)
    required: frozenset[str] = frozenset()
    weights: frozenset[str] = frozenset()  # weight keywords (plan tensors)
    extra_outputs: int = 0


_POOL = {"batch_size": Count, "input_h": Count, "input_w": Count, "channels": Count, "kernel_size": Pair,
         "stride": Pair, "padding": PadPair, "ceil_mode": bool}
_REDUCE = CallSig(args={"dim": Axis | Axes, "keepdim": bool}, required=frozenset({"dim", "keepdim"}))
_SCALAR = CallSig(inputs=(1, 2), args={"scalar": Number, "memory_config": MemoryConfigKey})
_UNARY = CallSig(args={"memory_config": MemoryConfigKey})

CALLS: dict[str, CallSig] = {
    "ttnn.conv2d": CallSig(
        args={"batch_size": Count, "input_height": Count, "input_width": Count, "in_channels": Count,
              "out_channels": Count, "kernel_size": Pair, "stride": Pair,
              "padding": Annotated[list[Pad], Meta(min_length=4, max_length=4)], "dilation": Pair,
              "groups": Count, "dtype": Format, "conv_config": JsonObject, "compute_config": JsonObject,
              "slice_config": JsonObject, "memory_config": MemoryConfigKey},
        required=frozenset({"batch_size", "input_height", "input_width", "in_channels", "out_channels",
                            "kernel_size", "stride", "padding", "dilation", "groups", "dtype", "conv_config",
                            "compute_config"}),
        weights=frozenset({"weight_tensor", "bias_tensor"})),
    "ttnn.max_pool2d": CallSig(args={**_POOL, "dilation": Pair, "slice_config": JsonObject,
                                     "memory_config": MemoryConfigKey},
                               required=frozenset({*_POOL, "dilation"})),
    "ttnn.avg_pool2d": CallSig(args={**_POOL, "count_include_pad": bool},
                               required=frozenset({*_POOL, "count_include_pad"})),
    "ttnn.softmax": CallSig(args={"dim": Axis, "numeric_stable": bool}, required=frozenset({"dim"})),
    "ttnn.sum": _REDUCE, "ttnn.mean": _REDUCE, "ttnn.max": _REDUCE, "ttnn.min": _REDUCE,
    "ttnn.concat": CallSig(inputs=(1, 64), args={"dim": Axis}, required=frozenset({"dim"})),
    "ttnn.pad": CallSig(args={"padding": Annotated[list[PadPair], Meta(min_length=1, max_length=MAX_RANK)],
                              "value": Number}, required=frozenset({"padding", "value"})),
    "ttnn.expand": CallSig(args={"output_shape": Shape}, required=frozenset({"output_shape"})),
    "ttnn.repeat": CallSig(args={"repeat_dims": Shape}, required=frozenset({"repeat_dims"})),
    "ttnn.transpose": CallSig(args={"dim1": Axis, "dim2": Axis}, required=frozenset({"dim1", "dim2"})),
    "ttnn.permute": CallSig(args={"dims": Axes}, required=frozenset({"dims"})),
    "ttnn.reshape": CallSig(args={"shape": Shape, "memory_config": MemoryConfigKey}, required=frozenset({"shape"})),
    "ttnn.slice": CallSig(args={"starts": Indices, "ends": Indices, "steps": Indices},
                          required=frozenset({"starts", "ends", "steps"})),
    "ttnn.matmul": CallSig(inputs=(2, 2)),
    "ttnn.where": CallSig(inputs=(1, 3), args={"true_value": Number, "false_value": Number}),
    "ttnn.topk": CallSig(args={"dim": Axis, "k": Count, "largest": bool, "sorted": bool},
                         required=frozenset({"dim", "k", "largest", "sorted"}), extra_outputs=1),
    "ttnn.embedding": CallSig(inputs=(2, 2), args={"layout": PageLayoutName}),
    "ttnn.clamp": CallSig(args={"min": Number, "max": Number}),
    "ttnn.typecast": CallSig(args={"dtype": Format}, required=frozenset({"dtype"})),
    "ttnn.to_layout": CallSig(args={"layout": PageLayoutName}, required=frozenset({"layout"})),
    "ttnn.to_memory_config": CallSig(args={"memory_config": MemoryConfigKey}, required=frozenset({"memory_config"})),
    "ttnn.leaky_relu": CallSig(args={"negative_slope": Number}, required=frozenset({"negative_slope"})),
    "ttnn.pow": CallSig(args={"exponent": Number}, required=frozenset({"exponent"})),
    "ttnn.elu": CallSig(args={"alpha": Number}, required=frozenset({"alpha"})),
    "ttnn.celu": CallSig(args={"alpha": Number}, required=frozenset({"alpha"})),
    "ttnn.selu": CallSig(args={"scale": Number, "alpha": Number}, required=frozenset({"scale", "alpha"})),
    "spc.kernel": CallSig(inputs=(1, 8), args={"kernel": str, "params": JsonObject, "composed": list[JsonObject]},
                          required=frozenset({"kernel", "composed"}), extra_outputs=8),
}
# element-wise calls (as ttnn/calls.py spells them): one input and an optional scalar, or two inputs
CALLS.update({f"ttnn.{name}": _SCALAR for name in BINARY})
CALLS.update({f"ttnn.{name}": _UNARY for name in UNARY})
ELEMENTWISE = frozenset({f"ttnn.{n}" for n in (*BINARY, *UNARY, "leaky_relu", "pow", "elu", "celu", "selu", "clamp",
                                               "typecast", "to_layout", "to_memory_config")})
