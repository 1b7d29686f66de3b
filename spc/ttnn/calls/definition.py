"""A ttnn call, defined once: what a plan may write of it, what it makes, what it computes, how
it is spelled, and the traits the lowering, the emulator and the memory model read.

A :class:`CallDef` is to a ttnn call what an ``OpDef`` (ir/ops) is to an IR op. Each family of
calls is one file of this package (window.py, elementwise.py, reduce.py, movement.py, select.py,
kernel.py); ``CALLS`` holds them all. Who reads which part:

* ``inputs``, ``args``, ``required``, ``weights``, ``extra_outputs``: the plan schema
  (plan/schema.py), the contract a plan's JSON is checked against before anything reads it;
* ``shape``: the plan verifier (plan/verify.py): the number of values the call makes from its
  inputs' shapes and its arguments;
* ``meaning``: what the call computes, in numpy, float32 without storage rounding (the
  translation validation runs programs with it, validation/translation.py);
* ``spell``: the ttnn call that executes it (runtime/ttnn_backend.py evaluates it, `spc emit-py`
  prints it), built from the markers below;
* ``golden``: the ttnn function whose golden function (``ttnn.get_golden_function``) is ttnn's
  own reference for it (scripts/golden.py);
* ``buffers``: the L1 its circular buffers take (the memory model, memory/residency.py);
* traits: ``tiled`` (the page layout of its result, lowering/emitter.py), ``moves_values``,
  ``mask``, ``stores`` and ``takes_bf16`` (the emulator, emulator/device.py and runtime/emu.py).

* ``emulate``: what the emulator runs for it, in torch, before storage (emulator/device.py adds
  the calls whose emulation is a model of the device's own arithmetic: conv2d's matrix engine,
  the pools, topk's fast path, the fused kernels). torch is imported when an emulation first runs
  (:data:`torch`): ``spc compile`` imports none.

tests/test_calls.py holds every call to an emulation, a meaning and a spelling. Needs numpy
(the meanings), neither ttnn nor torch to import.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, Protocol

import numpy as np
from msgspec import Meta, Struct, field

from spc.ttnn.configs import Activation, PageLayout
from spc.ttnn.formats import DataFormat, MathFidelity
from spc.ttnn.memory import MemoryConfig, SliceConfig, SliceType, TensorLayout

# bounds: wider than any SuperPoint plan needs, narrow enough that nothing they allow allocates
# without limit (a dimension, a count of slices, a window)
MAX_DIM = 1 << 24
MAX_RANK = 8
MAX_WINDOW = 1 << 12

# msgspec types: an int is never a bool, nor a float an int (strict); a Number keeps its JSON type
Count = Annotated[int, Meta(ge=1, le=MAX_DIM)]
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
F32 = np.float32  # what the meanings compute in


class _OnFirstUse:
    """A module imported when one of its attributes is first read."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


# the emulations' torch: imported by the first emulation that runs (~1.5 s; `spc compile` runs none)
torch = _OnFirstUse("torch")
F = _OnFirstUse("torch.nn.functional")


# -- what a spelling is made of ---------------------------------------------------------------

class CallSpec(Protocol):
    """What describes a call: a plan's TtOp (plan/program.py)."""

    op: str
    inputs: list[str]
    output: str
    args: dict[str, Any]
    weights: dict[str, str]
    source: str


class Ref(Struct, frozen=True):
    """A device tensor of the program, by name."""

    name: str


class Attr(Struct, frozen=True):
    """A ttnn attribute by its dotted path (dtypes, layouts, memory configs, enums)."""

    path: str


class Weight(Struct, frozen=True):
    """A conv weight (or bias, as [1, 1, 1, O]) of the plan, prepared by ttnn on first use and
    reused after (``return_weights_and_bias=True``)."""

    key: str
    bias: bool = False


class _Marker(Struct, frozen=True):
    """A value the runtime supplies: the open device, its architecture."""

    name: str


DEVICE = _Marker("device")
ARCH = _Marker("arch")


class Call(Struct, frozen=True):
    """A ttnn call: the function's dotted name, positional and keyword arguments."""

    fn: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def spell(value: Any) -> Any:
    """A typed argument as the ttnn attribute it stands for; anything else as it is."""
    if isinstance(value, (DataFormat, MathFidelity, PageLayout, TensorLayout, MemoryConfig)):
        return Attr(value.ttnn)
    if isinstance(value, SliceConfig):
        if value.type is SliceType.L1_FULL:
            return Attr("ttnn.Conv2dL1FullSliceConfig")  # an instance, not a class
        kind = {SliceType.DRAM_HEIGHT: "ttnn.Conv2dDRAMSliceHeight", SliceType.DRAM_WIDTH: "ttnn.Conv2dDRAMSliceWidth"}
        return Call("ttnn.Conv2dSliceConfig", (), {"slice_type": Attr(kind[value.type]),
                                                   "num_slices": value.num_slices})
    if isinstance(value, Activation):
        return Call("ttnn.UnaryWithParam", (Attr(f"ttnn.UnaryOpType.{value.name}"),))
    return value


def attribute(ttnn: Any, path: str) -> Any:
    """``ttnn.a.b`` of the ttnn module given, by its dotted path."""
    value = ttnn
    for part in path.split(".")[1:]:
        value = getattr(value, part)
    return value


def markers(ttnn: Any, env: dict[str, Any], device: Any, arch: Callable[[], Any],
            weight: Callable[[Weight], Any]) -> Callable[[Any], Any]:
    """:func:`evaluate`'s ``leaf``: a program tensor from ``env``, a ttnn attribute of ``ttnn``, the
    device and its architecture (asked for when a call needs it), a weight as ``weight`` makes it."""
    def leaf(m: Any) -> Any:
        if isinstance(m, Ref):
            return env[m.name]
        if isinstance(m, Attr):
            return attribute(ttnn, m.path)
        if m is DEVICE:
            return device
        if m is ARCH:
            return arch()
        return weight(m)

    return leaf


def evaluate(x: Any, leaf: Callable[[Any], Any], call: Callable[[str, list[Any], dict[str, Any]], Any]) -> Any:
    """A description's value: each marker (Ref, Attr, Weight, DEVICE, ARCH) as ``leaf`` gives it,
    each Call as ``call(fn, args, kwargs)`` makes it from its arguments' values, lists element by
    element (the ttnn backend runs descriptions so, scripts/golden.py with ttnn's references)."""
    if isinstance(x, Call):
        return call(x.fn, [evaluate(a, leaf, call) for a in x.args],
                    {k: evaluate(v, leaf, call) for k, v in x.kwargs.items()})
    if isinstance(x, list):
        return [evaluate(v, leaf, call) for v in x]
    if isinstance(x, (Ref, Attr, Weight, _Marker)):
        return leaf(x)
    return x


def refs(op: CallSpec) -> list[Ref]:
    return [Ref(i) for i in op.inputs]


def memory_kwargs(a: dict[str, Any]) -> dict[str, Any]:
    return {"memory_config": spell(a["memory_config"])} if a.get("memory_config") else {}


# -- shape rules ----------------------------------------------------------------------------------

class ShapeError(Exception):
    """A call's inputs and arguments do not make a tensor (the verifier names the call)."""


def numel(shape: Sequence[int]) -> int:
    return math.prod(int(d) for d in shape)


def axis(a: int, rank: int) -> int:
    if not -rank <= a < rank:
        raise ShapeError(f"axis {a} is outside a rank-{rank} tensor")
    return a % rank


def broadcast(*shapes: Sequence[int]) -> int:
    """The number of values numpy's broadcasting of ``shapes`` makes."""
    try:
        return numel(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ShapeError(f"inputs of shapes {[list(s) for s in shapes]} do not broadcast") from None


# -- what a call takes of L1 --------------------------------------------------------------------

def stream_buffers(args: dict[str, Any], inputs: int) -> int:
    """The circular buffers of a call that streams its inputs through (element-wise, reductions,
    data movement): 12-16 KiB measured on the mock p150 for one reading two tensors, whatever
    their size; none counted for one. (Convolutions and pools have their own model: memory/l1.py.)"""
    return 16384 if inputs > 1 else 0


# (inputs' shapes, arguments, the call's weights by keyword) -> the number of values it makes
ShapeRule = Callable[[list[list[int]], dict[str, Any], dict[str, Any]], int]
Meaning = Callable[[list[Any], dict[str, Any], dict[str, Any]], Any]
Spelling = Callable[[CallSpec], Call]
Emulation = Callable[[list[Any], dict[str, Any], dict[str, Any]], Any]  # torch tensors in and out


class CallDef(Struct, frozen=True):
    """One ttnn call (the module docstring says who reads which field)."""

    name: str
    spell: Spelling | None  # None: the runtime runs it itself (spc.kernel)
    meaning: Meaning | None  # None: it is run as the calls it replaces (spc.kernel)
    shape: ShapeRule | None  # None: checked otherwise (a kernel against its own composition)
    inputs: tuple[int, int] = (1, 1)  # how many device tensors it reads (min, max)
    args: dict[str, Any] = field(default_factory=dict)  # keyword -> msgspec type
    required: frozenset[str] = frozenset()
    weights: frozenset[str] = frozenset()  # weight keywords (plan tensors)
    extra_outputs: int = 0
    golden: str | None = None  # the ttnn function holding ttnn's golden function for it
    # its result's page layout: tiled, row-major, or None: its first input's (measured on the mock
    # p150: conv2d is asked for TILE; max_pool2d gives ROW_MAJOR; reductions, softmax, matmul and
    # topk give TILE whatever they read)
    tiled: bool | None = None
    moves_values: bool = False  # its values are its inputs' (data movement, selection)
    mask: bool = False  # its results are 0/1
    stores: bool = False  # its emulation returns stored values (data movement; conv2d packs its own)
    takes_bf16: bool = False  # its emulation takes tensors held in bfloat16 as they are
    # its circular buffers on the busiest core, from its arguments and how many tensors it reads
    buffers: Callable[[dict[str, Any], int], int] = stream_buffers
    emulate: Emulation | None = None  # None: emulator/device.py models it


CALLS: dict[str, CallDef] = {}


def define(name: str, spell: Spelling | None, meaning: Meaning | None, shape: ShapeRule | None,
           **fields: Any) -> CallDef:
    """Add the call ``name`` to :data:`CALLS` (its golden function is ttnn's of the same name
    unless said otherwise)."""
    if name in CALLS:
        raise ValueError(f"{name} is defined twice")
    fields.setdefault("golden", name if name.startswith("ttnn.") else None)
    d = CallDef(name, spell, meaning, shape, **fields)
    CALLS[name] = d
    return d
