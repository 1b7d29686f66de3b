"""Calls that move values without computing new ones: views and copies (``ttnn.reshape``,
``permute``, ``transpose``, ``slice``, ``concat``, ``expand``, ``repeat``), padding (``ttnn.pad``)
and the changes of page layout or memory (``ttnn.to_layout``, ``ttnn.to_memory_config``). Their
values are their inputs' (stored values in, the same stored values out), padding aside."""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from msgspec import Meta

from spc.ttnn.calls.definition import (
    F32,
    MAX_RANK,
    Axes,
    Axis,
    Call,
    F,
    Indices,
    MemoryConfigKey,
    Number,
    PadPair,
    PageLayoutName,
    Shape,
    ShapeError,
    axis,
    broadcast,
    define,
    memory_kwargs,
    numel,
    refs,
    spell,
    torch,
)

MOVES = {"moves_values": True, "stores": True, "takes_bf16": True}


def _same(ins: list[np.ndarray], weights: dict[str, np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return ins[0]


def _as_many(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    return broadcast(*ins)


def _reshape_values(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    if numel(ins[0]) != numel(a["shape"]):
        raise ShapeError(f"reshapes {numel(ins[0])} values to {a['shape']}")
    return numel(a["shape"])


def _permute_values(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    if sorted(axis(d, len(ins[0])) for d in a["dims"]) != list(range(len(ins[0]))):
        raise ShapeError(f"{a['dims']} is not a permutation of a rank-{len(ins[0])} tensor's axes")
    return numel(ins[0])


def _transpose_values(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    axis(a["dim1"], len(ins[0]))
    axis(a["dim2"], len(ins[0]))
    return numel(ins[0])


def _slice_values(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    rank = len(ins[0])
    if not len(a["starts"]) == len(a["ends"]) == len(a["steps"]) == rank or 0 in a["steps"]:
        raise ShapeError(f"starts/ends/steps {a['starts']}/{a['ends']}/{a['steps']} for a rank-{rank} tensor")
    return numel([len(range(*slice(s, e, st).indices(d))) for d, s, e, st in
                  zip(ins[0], a["starts"], a["ends"], a["steps"])])


def _concat_values(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    rank = len(ins[0])
    at = axis(a["dim"], rank)
    if any(len(s) != rank or [d for i, d in enumerate(s) if i != at] != [d for i, d in enumerate(ins[0]) if i != at]
           for s in ins):
        raise ShapeError(f"inputs of shapes {ins} do not concatenate on axis {a['dim']}")
    return sum(numel(s) for s in ins)


def _pad_values(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    if len(a["padding"]) != len(ins[0]):
        raise ShapeError(f"{len(a['padding'])} pad pairs for a rank-{len(ins[0])} tensor")
    return numel([d + lo + hi for d, (lo, hi) in zip(ins[0], a["padding"])])


def _expand_values(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    try:
        return numel(np.broadcast_shapes(tuple(ins[0]), tuple(a["output_shape"])))
    except ValueError:
        raise ShapeError(f"{ins[0]} does not expand to {a['output_shape']}") from None


def _repeat_values(ins: list[list[int]], a: dict[str, Any], weights: dict[str, Any]) -> int:
    if len(a["repeat_dims"]) < len(ins[0]):
        raise ShapeError(f"repeat_dims {a['repeat_dims']} for a rank-{len(ins[0])} tensor")
    return numel(ins[0]) * numel(a["repeat_dims"])


def _pad_emulated(ins: list[Any], w: dict[str, Any], a: dict[str, Any]) -> Any:
    flat = [p for before, after in reversed(a["padding"]) for p in (before, after)]  # F.pad: last axis first
    return F.pad(ins[0], flat, value=float(a["value"]))


def _positional(*keys: str) -> Any:
    """Spelled fn(input, *the arguments ``keys``, in order)."""
    return lambda op: Call(op.op, (refs(op)[0], *(op.args[k] for k in keys)))


define("ttnn.reshape", lambda op: Call(op.op, (refs(op)[0], op.args["shape"]), memory_kwargs(op.args)),
       lambda ins, w, a: ins[0].reshape(a["shape"]), _reshape_values,
       args={"shape": Shape, "memory_config": MemoryConfigKey}, required=frozenset({"shape"}), **MOVES,
       emulate=lambda ins, w, a: ins[0].reshape(a["shape"]))
define("ttnn.permute", _positional("dims"), lambda ins, w, a: np.ascontiguousarray(ins[0].transpose(a["dims"])),
       _permute_values, args={"dims": Axes}, required=frozenset({"dims"}), **MOVES,
       emulate=lambda ins, w, a: ins[0].permute(*a["dims"]).contiguous())
define("ttnn.transpose", _positional("dim1", "dim2"),
       lambda ins, w, a: np.ascontiguousarray(np.swapaxes(ins[0], a["dim1"], a["dim2"])), _transpose_values,
       args={"dim1": Axis, "dim2": Axis}, required=frozenset({"dim1", "dim2"}), **MOVES,
       emulate=lambda ins, w, a: ins[0].transpose(a["dim1"], a["dim2"]).contiguous())
# positional: ttnn's keyword overload (starts/ends/steps) takes exactly 4 dimensions
define("ttnn.slice", _positional("starts", "ends", "steps"),
       lambda ins, w, a: np.ascontiguousarray(ins[0][tuple(slice(s, e, st) for s, e, st in
                                                            zip(a["starts"], a["ends"], a["steps"]))]),
       _slice_values, args={"starts": Indices, "ends": Indices, "steps": Indices},
       required=frozenset({"starts", "ends", "steps"}), **MOVES,
       emulate=lambda ins, w, a: ins[0][tuple(slice(s, e, st) for s, e, st in
                                              zip(a["starts"], a["ends"], a["steps"]))].contiguous())
define("ttnn.concat", lambda op: Call(op.op, (refs(op),), {"dim": op.args["dim"]}),
       lambda ins, w, a: np.concatenate(ins, axis=a["dim"]), _concat_values, inputs=(1, 64), args={"dim": Axis},
       required=frozenset({"dim"}), **MOVES, emulate=lambda ins, w, a: torch.cat(ins, dim=a["dim"]))
define("ttnn.expand", _positional("output_shape"),
       lambda ins, w, a: np.ascontiguousarray(np.broadcast_to(ins[0], a["output_shape"])), _expand_values,
       args={"output_shape": Shape}, required=frozenset({"output_shape"}), **MOVES,
       emulate=lambda ins, w, a: ins[0].expand(*a["output_shape"]).contiguous())
define("ttnn.repeat", _positional("repeat_dims"), lambda ins, w, a: np.tile(ins[0], a["repeat_dims"]),
       _repeat_values, args={"repeat_dims": Shape}, required=frozenset({"repeat_dims"}), **MOVES,
       emulate=lambda ins, w, a: ins[0].repeat(*a["repeat_dims"]))
define("ttnn.pad", lambda op: Call(op.op, (refs(op)[0], [list(p) for p in op.args["padding"]], op.args["value"])),
       lambda ins, w, a: np.pad(ins[0], [tuple(p) for p in a["padding"]], constant_values=F32(a["value"])),
       _pad_values, args={"padding": Annotated[list[PadPair], Meta(min_length=1, max_length=MAX_RANK)],
                          "value": Number}, required=frozenset({"padding", "value"}), stores=True, takes_bf16=False,
       emulate=_pad_emulated)
# the page layout it names is its result's (lowering/emitter.py)
define("ttnn.to_layout", lambda op: Call(op.op, (refs(op)[0], spell(op.args["layout"]))), _same, _as_many,
       args={"layout": PageLayoutName}, required=frozenset({"layout"}), **MOVES, emulate=_same)
define("ttnn.to_memory_config", lambda op: Call(op.op, (refs(op)[0], spell(op.args["memory_config"]))), _same,
       _as_many, args={"memory_config": MemoryConfigKey}, required=frozenset({"memory_config"}), **MOVES,
       emulate=_same)
