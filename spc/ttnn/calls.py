"""Each program call as a ttnn call, described once.

The ttnn backend (runtime/ttnn_backend.py) evaluates these descriptions against the installed
ttnn; `spc emit-py` (tools/emit_py.py) prints them as Python source. Keeping one description
means the program a person reads is the program that ran. Needs neither ttnn nor numpy.

A description is made of plain values (ints, bools, lists, None) and these markers:

* ``Ref(name)``: a device tensor of the program;
* ``Attr("ttnn.bfloat16")``: a ttnn attribute (dtypes, layouts, memory configs, enums);
* ``DEVICE`` / ``ARCH``: the open device and ``device.arch()``;
* ``Weight(key, bias)``: a conv weight (or bias, as [1, 1, 1, O]) from the plan, prepared by ttnn
  on first use and reused after (``return_weights_and_bias=True``);
* ``Call(fn, args, kwargs)``: a call, e.g. ``ttnn.Conv2dConfig(...)`` nested in ``ttnn.conv2d``.
"""

from __future__ import annotations

from typing import Any, Protocol

from msgspec import Struct, field

from spc.errors import SpcError
from spc.ttnn.configs import Activation, ComputeConfig, Conv2dConfig, PageLayout
from spc.ttnn.elementwise import BINARY, UNARY, UNARY_KEYWORDS
from spc.ttnn.formats import DataFormat, MathFidelity
from spc.ttnn.memory import MemoryConfig, SliceConfig, SliceType, TensorLayout


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
    """A conv weight (or bias) of the plan, prepared by ttnn on first use."""

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


def _memory(a: dict[str, Any]) -> dict[str, Any]:
    return {"memory_config": spell(a["memory_config"])} if a.get("memory_config") else {}


def _conv(op: CallSpec) -> Call:
    a = op.args
    conv: Conv2dConfig = a["conv_config"]
    cc: ComputeConfig = a["compute_config"]
    config = {k: spell(v) for k, v in conv.ttnn_kwargs().items() if v is not None}
    compute = Call("ttnn.init_device_compute_kernel_config", (ARCH,),
                   {k: spell(v) for k, v in cc.ttnn_kwargs().items()})
    kwargs: dict[str, Any] = {"input_tensor": Ref(op.inputs[0]), "weight_tensor": Weight(op.weights["weight_tensor"])}
    if "bias_tensor" in op.weights:
        kwargs["bias_tensor"] = Weight(op.weights["bias_tensor"], bias=True)
    kwargs["device"] = DEVICE
    kwargs.update({k: v for k, v in a.items() if k not in ("conv_config", "compute_config", "slice_config", "dtype")})
    kwargs.update(dtype=spell(a["dtype"]), conv_config=Call("ttnn.Conv2dConfig", (), config),
                  compute_config=compute, return_weights_and_bias=True)
    if "slice_config" in a:
        kwargs["slice_config"] = spell(a["slice_config"])
    return Call("ttnn.conv2d", (), kwargs)


def describe(op: CallSpec) -> Call:
    """The ttnn call that executes ``op``."""
    a, x = op.args, [Ref(i) for i in op.inputs]
    name = op.op.removeprefix("ttnn.")
    if name == "conv2d":
        return _conv(op)
    if name == "max_pool2d":
        keys = ("batch_size", "input_h", "input_w", "channels", "kernel_size", "stride", "padding", "dilation",
                "ceil_mode")
        slices = {"dram_slice_config": spell(a["slice_config"])} if "slice_config" in a else {}
        return Call(op.op, (x[0],), {k: a[k] for k in keys} | _memory(a) | slices)
    if name == "softmax":
        return Call(op.op, (x[0],), {"dim": a["dim"], "numeric_stable": a["numeric_stable"]})
    if name == "slice":  # positional: ttnn's keyword overload (starts/ends/steps) takes exactly 4 dimensions
        return Call(op.op, (x[0], a["starts"], a["ends"], a["steps"]))
    if name == "to_layout":
        return Call(op.op, (x[0], spell(a["layout"])))
    if name == "to_memory_config":
        return Call(op.op, (x[0], spell(a["memory_config"])))
    if name == "reshape":
        return Call(op.op, (x[0], a["shape"]), _memory(a))
    if name == "permute":
        return Call(op.op, (x[0], a["dims"]))
    if name in BINARY or name in UNARY:
        return Call(op.op, tuple(x) + ((a["scalar"],) if "scalar" in a else ()))
    if name in UNARY_KEYWORDS:
        return Call(op.op, (x[0],), {k: a[k] for k in UNARY_KEYWORDS[name]})
    if name == "leaky_relu":
        return Call(op.op, (x[0], a["negative_slope"]))
    if name == "pow":
        return Call(op.op, (x[0], a["exponent"]))
    if name == "where":
        rest = iter(x[1:])
        t = a["true_value"] if "true_value" in a else next(rest)
        f = a["false_value"] if "false_value" in a else next(rest)
        return Call(op.op, (x[0], t, f))
    if name == "topk":
        return Call(op.op, (x[0], a["k"]), {"dim": a["dim"], "largest": a["largest"], "sorted": a["sorted"]})
    if name == "embedding":
        return Call(op.op, (x[0], x[1]), {"layout": spell(a["layout"])})
    if name in ("sum", "mean", "max", "min"):
        return Call(op.op, (x[0],), {"dim": a["dim"], "keepdim": a["keepdim"]})
    if name == "clamp":
        return Call(op.op, (x[0],), {k: a[k] for k in ("min", "max") if k in a})
    if name == "typecast":
        return Call(op.op, (x[0], spell(a["dtype"])))
    if name == "concat":
        return Call(op.op, (list(x),), {"dim": a["dim"]})
    if name == "pad":
        return Call(op.op, (x[0], [list(p) for p in a["padding"]], a["value"]))
    if name == "expand":
        return Call(op.op, (x[0], a["output_shape"]))
    if name == "repeat":
        return Call(op.op, (x[0], a["repeat_dims"]))
    if name == "transpose":
        return Call(op.op, (x[0], a["dim1"], a["dim2"]))
    if name == "matmul":
        return Call(op.op, (x[0], x[1]))
    if name == "avg_pool2d":
        keys = ("batch_size", "input_h", "input_w", "channels", "kernel_size", "stride", "padding", "ceil_mode",
                "count_include_pad")
        return Call(op.op, (x[0],), {k: a[k] for k in keys})
    raise SpcError(f"no ttnn spelling for {op.op} (from {op.source})")
