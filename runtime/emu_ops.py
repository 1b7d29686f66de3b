"""ttnn calls emulated on the CPU with torch, with the device's storage numerics.

Every device tensor is held as float32 whose values are exactly representable in bfloat16
(round to nearest even after each op, as the device packs its outputs). Matmul-based ops
(conv2d) multiply bf16 operands exactly and accumulate in fp32 (``fp32_dest_acc_en``); math
fidelity and block-float formats are not modelled here yet (their own issue). Masks are bf16
0/1 tensors, as ttnn's comparison ops return them.

An emulation is ``fn(inputs, weights, args) -> tensor``; ``prepare`` functions convert a
call's weights once, as ttnn prepares conv weights once before tracing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

Emulation = Callable[[list[torch.Tensor], dict[str, torch.Tensor], dict[str, Any]], torch.Tensor]
EMULATIONS: dict[str, Emulation] = {}


def emulates(name: str) -> Callable[[Emulation], Emulation]:
    def wrap(fn: Emulation) -> Emulation:
        EMULATIONS[name] = fn
        return fn

    return wrap


def bf16(t: torch.Tensor) -> torch.Tensor:
    """Round to bfloat16 (nearest even) and hold as float32."""
    return t.to(torch.bfloat16).to(torch.float32)


def prepare_weight(name: str, array: np.ndarray, dtype: str) -> torch.Tensor:
    if dtype not in ("bfloat16", "float32"):
        raise ValueError(f"weights dtype {dtype} is not emulated yet")
    t = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
    t = bf16(t) if dtype == "bfloat16" else t
    # NHWC activations are channels_last tensors; matching weights keep torch off the slow path
    return t.to(memory_format=torch.channels_last) if t.ndim == 4 else t


def _nchw(x: torch.Tensor, n: int, h: int, w: int) -> torch.Tensor:
    return x.reshape(n, h, w, -1).permute(0, 3, 1, 2)


def _flat(y: torch.Tensor) -> torch.Tensor:
    n, c, h, w = y.shape
    return y.permute(0, 2, 3, 1).contiguous().reshape(1, 1, n * h * w, c)


@emulates("ttnn.conv2d")
def conv2d(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    x = _nchw(ins[0], a["batch_size"], a["input_height"], a["input_width"])
    top, bottom, left, right = a["padding"]
    if (top, left) != (bottom, right):
        x = F.pad(x, (left, right, top, bottom))
        top = left = 0
    y = F.conv2d(x, weights["weight_tensor"], weights.get("bias_tensor"), stride=tuple(a["stride"]),
                 padding=(top, left), dilation=tuple(a["dilation"]), groups=a["groups"])
    if a["conv_config"].get("activation") == "relu":
        y = torch.relu(y)
    return _flat(bf16(y))


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
    return bf16(torch.softmax(ins[0], dim=a["dim"]))


@emulates("ttnn.slice")
def slice_(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    idx = tuple(slice(s, e, st) for s, e, st in zip(a["starts"], a["ends"], a["steps"]))
    return ins[0][idx]


@emulates("ttnn.to_layout")
def to_layout(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    return ins[0]


@emulates("ttnn.reshape")
def reshape(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    return ins[0].reshape(a["shape"])


@emulates("ttnn.permute")
def permute(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    return ins[0].permute(*a["dims"]).contiguous()


def _elementwise(name: str, fn: Callable[..., torch.Tensor]) -> None:
    EMULATIONS[name] = lambda ins, weights, a: bf16(fn(*ins))


def _predicate(name: str, fn: Callable[..., torch.Tensor]) -> None:
    # 0/1 results are exact in bf16: no rounding needed
    EMULATIONS[name] = lambda ins, weights, a: fn(*ins).to(torch.float32)


_predicate("ttnn.eq", lambda x, y: x == y)
_predicate("ttnn.gtz", lambda x: x > 0)
_predicate("ttnn.logical_not", lambda x: x == 0)
_predicate("ttnn.logical_and", lambda x, y: (x != 0) & (y != 0))
_predicate("ttnn.logical_or", lambda x, y: (x != 0) | (y != 0))
_elementwise("ttnn.multiply", torch.mul)
_elementwise("ttnn.rsqrt", torch.rsqrt)


@emulates("ttnn.sum")
def sum_(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    return bf16(ins[0].sum(dim=a["dim"], keepdim=a["keepdim"]))


@emulates("ttnn.clamp")
def clamp(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    return bf16(torch.clamp(ins[0], min=a.get("min"), max=a.get("max")))
