"""ttnn calls emulated on the CPU with torch.

An emulation is ``fn(inputs, weights, args) -> tensor`` and returns the op's result before
storage; the emu program then stores it in the call's ``dtype`` (runtime/numerics.py:
round_storage), as the device packs outputs. conv2d models the matrix engine itself (fidelity
phases, accumulation, packing between K blocks: numerics.conv2d_device). Masks are 0/1 tensors,
as ttnn's comparison ops return them. Weights are converted once by ``prepare_weight``, as ttnn
prepares conv weights once before tracing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from spc.runtime.numerics import conv2d_device, conv_weight_storage, round_storage

Emulation = Callable[[list[torch.Tensor], dict[str, torch.Tensor], dict[str, Any]], torch.Tensor]
EMULATIONS: dict[str, Emulation] = {}


def emulates(name: str) -> Callable[[Emulation], Emulation]:
    def wrap(fn: Emulation) -> Emulation:
        EMULATIONS[name] = fn
        return fn

    return wrap


# calls whose emulation already returns stored values: data movement, and conv2d (which models
# its own packing, numerics.conv2d_device)
STORED_BY_EMULATION = {"ttnn.reshape", "ttnn.permute", "ttnn.slice", "ttnn.to_layout", "ttnn.to_memory_config",
                       "ttnn.topk", "ttnn.embedding", "ttnn.conv2d"}


def prepare_weight(array: np.ndarray, dtype: str) -> torch.Tensor:
    """A conv weight [O, I, kh, kw] or bias [O] as the device stores it in ``dtype``."""
    t = torch.from_numpy(np.array(array, dtype=np.float32))  # a writable copy, made once
    if t.ndim == 4:
        # NHWC activations are channels_last tensors; matching weights keep torch off the slow path
        return conv_weight_storage(t, dtype).to(memory_format=torch.channels_last)
    return round_storage(t, dtype)


def _nchw(x: torch.Tensor, n: int, h: int, w: int) -> torch.Tensor:
    return x.reshape(n, h, w, -1).permute(0, 3, 1, 2)


def _flat(y: torch.Tensor) -> torch.Tensor:
    n, c, h, w = y.shape
    return y.permute(0, 2, 3, 1).contiguous().reshape(1, 1, n * h * w, c)


@emulates("ttnn.conv2d")
def conv2d(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    x = _nchw(ins[0], a["batch_size"], a["input_height"], a["input_width"])
    top, bottom, left, right = a["padding"]
    cc = a["compute_config"]
    y = conv2d_device(x, weights["weight_tensor"], weights.get("bias_tensor"), tuple(a["stride"]),
                      (left, right, top, bottom), tuple(a["dilation"]), a["groups"], cc["math_fidelity"],
                      cc["fp32_dest_acc_en"], a["dtype"], cc.get("packer_l1_acc", False))
    if a["conv_config"].get("activation") == "relu":
        y = torch.relu(y)
    return _flat(y)


@emulates("ttnn.max_pool2d")
def max_pool2d(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    x = _nchw(ins[0], a["batch_size"], a["input_h"], a["input_w"])
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = a["kernel_size"], a["stride"], a["padding"], a["dilation"]
    if (sh, sw, dh, dw) == (1, 1, 1, 1) and not a["ceil_mode"]:
        # a window max is separable: rows then columns gives the same values in O(k), not O(k²)
        y = F.max_pool2d(F.max_pool2d(x, (1, kw), 1, (0, pw)), (kh, 1), 1, (ph, 0))
    else:
        y = F.max_pool2d(x, (kh, kw), (sh, sw), (ph, pw), (dh, dw), ceil_mode=a["ceil_mode"])
    return _flat(y)


@emulates("ttnn.softmax")
def softmax(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    # over the logical channels only: the tile padding never takes part
    return torch.softmax(ins[0], dim=a["dim"])


@emulates("ttnn.slice")
def slice_(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    idx = tuple(slice(s, e, st) for s, e, st in zip(a["starts"], a["ends"], a["steps"]))
    return ins[0][idx]


@emulates("ttnn.to_layout")
def to_layout(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    return ins[0]


@emulates("ttnn.to_memory_config")
def to_memory_config(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    return ins[0]


@emulates("ttnn.reshape")
def reshape(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    return ins[0].reshape(a["shape"])


@emulates("ttnn.permute")
def permute(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    return ins[0].permute(*a["dims"]).contiguous()


def _elementwise(name: str, fn: Callable[..., torch.Tensor]) -> None:
    """``fn`` on the inputs, or on the input and the call's ``scalar``."""
    EMULATIONS[name] = lambda ins, weights, a: fn(*ins, *([a["scalar"]] if "scalar" in a else [])).to(torch.float32)


_elementwise("ttnn.typecast", lambda x: x)


_elementwise("ttnn.eq", lambda x, y: x == y)
_elementwise("ttnn.gtz", lambda x: x > 0)
_elementwise("ttnn.logical_not", lambda x: x == 0)
_elementwise("ttnn.logical_and", lambda x, y: (x != 0) & (y != 0))
_elementwise("ttnn.logical_or", lambda x, y: (x != 0) | (y != 0))
_elementwise("ttnn.multiply", torch.mul)
_elementwise("ttnn.add", torch.add)
_elementwise("ttnn.subtract", torch.sub)
_elementwise("ttnn.rsub", lambda x, y: y - x)
_elementwise("ttnn.rsqrt", torch.rsqrt)
_elementwise("ttnn.floor", torch.floor)


@emulates("ttnn.topk")
def topk(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    """Values and positions (as exact float32 integers); ties by position, as a stable sort."""
    x = ins[0]
    order = torch.sort(x, dim=a["dim"], descending=a["largest"], stable=True).indices.narrow(a["dim"], 0, a["k"])
    return torch.gather(x, a["dim"], order), order.to(torch.float32)


@emulates("spc.kernel")
def kernel(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    """A fused kernel: its reference (kernels/), bit-exact with the TT-Lang kernel and with the
    stock calls it replaces."""
    from spc.kernels import KERNELS

    return KERNELS[a["kernel"]].reference(*ins, **a.get("params", {}))


@emulates("ttnn.embedding")
def embedding(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    return F.embedding(ins[0].to(torch.int64), ins[1])


@emulates("ttnn.sum")
def sum_(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    return ins[0].sum(dim=a["dim"], keepdim=a["keepdim"])


@emulates("ttnn.clamp")
def clamp(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    return torch.clamp(ins[0], min=a.get("min"), max=a.get("max"))
