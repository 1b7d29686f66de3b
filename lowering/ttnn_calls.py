"""Each program call as a ttnn call, described once.

The ttnn backend (runtime/ttnn_backend.py) evaluates these descriptions against the installed
ttnn; `spc emit-py` (lowering/emit_py.py) prints them as Python source. Keeping one description
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

from dataclasses import dataclass, field
from typing import Any

from spc.errors import SpcError
from spc.lowering.program import TtOp


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Attr:
    path: str


@dataclass(frozen=True)
class Weight:
    key: str
    bias: bool = False


@dataclass(frozen=True)
class _Marker:
    name: str


DEVICE = _Marker("device")
ARCH = _Marker("arch")


@dataclass(frozen=True)
class Call:
    fn: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


ENUMS = {"bfloat16": "ttnn.bfloat16", "float32": "ttnn.float32", "bfloat8_b": "ttnn.bfloat8_b",
         "bfloat4_b": "ttnn.bfloat4_b", "TILE": "ttnn.TILE_LAYOUT", "TILE_LAYOUT": "ttnn.TILE_LAYOUT",
         "ROW_MAJOR_LAYOUT": "ttnn.ROW_MAJOR_LAYOUT", "HEIGHT_SHARDED": "ttnn.TensorMemoryLayout.HEIGHT_SHARDED",
         "WIDTH_SHARDED": "ttnn.TensorMemoryLayout.WIDTH_SHARDED",
         "BLOCK_SHARDED": "ttnn.TensorMemoryLayout.BLOCK_SHARDED",
         "DRAM_INTERLEAVED": "ttnn.DRAM_MEMORY_CONFIG", "L1_INTERLEAVED": "ttnn.L1_MEMORY_CONFIG"}


def enum(value: str) -> Attr:
    try:
        return Attr(ENUMS[value])
    except KeyError:
        raise SpcError(f"no ttnn spelling for {value!r}") from None


def _memory(a: dict[str, Any]) -> dict[str, Any]:
    return {"memory_config": enum(a["memory_config"])} if a.get("memory_config") else {}


def _conv(op: TtOp) -> Call:
    a = op.args
    conv, cc = dict(a["conv_config"]), a["compute_config"]
    activation = conv.pop("activation", None)
    config = {"weights_dtype": enum(conv["weights_dtype"]), "shard_layout": enum(conv["shard_layout"]),
              "output_layout": enum(conv["output_layout"]), "deallocate_activation": conv["deallocate_activation"]}
    if activation == "relu":
        config["activation"] = Call("ttnn.UnaryWithParam", (Attr("ttnn.UnaryOpType.RELU"),))
    elif activation is not None:
        raise SpcError(f"no ttnn spelling for activation {activation!r}")
    compute = Call("ttnn.init_device_compute_kernel_config", (ARCH,),
                   {"math_fidelity": Attr(f"ttnn.MathFidelity.{cc['math_fidelity']}"),
                    "fp32_dest_acc_en": cc["fp32_dest_acc_en"], "packer_l1_acc": cc["packer_l1_acc"]})
    kwargs: dict[str, Any] = {"input_tensor": Ref(op.inputs[0]), "weight_tensor": Weight(op.weights["weight_tensor"])}
    if "bias_tensor" in op.weights:
        kwargs["bias_tensor"] = Weight(op.weights["bias_tensor"], bias=True)
    kwargs["device"] = DEVICE
    for key in ("in_channels", "out_channels", "batch_size", "input_height", "input_width", "kernel_size",
                "stride", "padding", "dilation", "groups"):
        kwargs[key] = a[key]
    kwargs.update(dtype=enum(a["dtype"]), conv_config=Call("ttnn.Conv2dConfig", (), config),
                  compute_config=compute, return_weights_and_bias=True)
    return Call("ttnn.conv2d", (), kwargs)


def describe(op: TtOp) -> Call:
    """The ttnn call that executes ``op``."""
    a, x = op.args, [Ref(i) for i in op.inputs]
    name = op.op.removeprefix("ttnn.")
    if name == "conv2d":
        return _conv(op)
    if name == "max_pool2d":
        keys = ("batch_size", "input_h", "input_w", "channels", "kernel_size", "stride", "padding", "dilation",
                "ceil_mode")
        return Call(op.op, (x[0],), {k: a[k] for k in keys} | _memory(a))
    if name == "softmax":
        return Call(op.op, (x[0],), {"dim": a["dim"], "numeric_stable": a["numeric_stable"]})
    if name == "slice":
        return Call(op.op, (x[0],), {"starts": a["starts"], "ends": a["ends"], "steps": a["steps"]})
    if name == "to_layout":
        return Call(op.op, (x[0], enum(a["layout"])))
    if name == "reshape":
        return Call(op.op, (x[0], a["shape"]), _memory(a))
    if name == "permute":
        return Call(op.op, (x[0], a["dims"]))
    if name in ("eq", "logical_and", "logical_or", "multiply", "gtz", "logical_not", "rsqrt"):
        return Call(op.op, tuple(x))
    if name == "sum":
        return Call(op.op, (x[0],), {"dim": a["dim"], "keepdim": a["keepdim"]})
    if name == "clamp":
        return Call(op.op, (x[0],), {"min": a.get("min"), "max": a.get("max")})
    if name == "typecast":
        return Call(op.op, (x[0], enum(a["dtype"])))
    raise SpcError(f"no ttnn spelling for {op.op} (from {op.source})")
