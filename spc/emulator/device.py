"""ttnn calls emulated on the CPU with torch.

An emulation is ``fn(inputs, weights, args) -> tensor`` and returns the op's result before
storage; the emu program then stores it in the call's ``dtype`` (emulator/numerics.py:
round_storage), as the device packs outputs. conv2d models the matrix engine itself (fidelity
phases, accumulation, packing between K blocks: numerics.conv2d_device). Masks are 0/1 tensors,
as ttnn's comparison ops return them. Weights are converted once by ``prepare_weight``, as ttnn
prepares conv weights once before tracing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from spc.emulator.numerics import conv2d_device, conv_weight_storage, round_storage
from spc.kernels import KERNELS
from spc.ttnn.calls import CALLS
from spc.ttnn.configs import Activation
from spc.ttnn.formats import DataFormat

Emulation = Callable[[list[torch.Tensor], dict[str, torch.Tensor], dict[str, Any]], torch.Tensor]
# each call's own emulation (ttnn/calls: the element-wise, reduction, movement and selection calls),
# then the ones below: models of the device's arithmetic (conv2d's matrix engine, the pools,
# topk) and the fused kernels
EMULATIONS: dict[str, Emulation] = {name: d.emulate for name, d in CALLS.items() if d.emulate is not None}


def emulates(name: str) -> Callable[[Emulation], Emulation]:
    def wrap(fn: Emulation) -> Emulation:
        EMULATIONS[name] = fn
        return fn

    return wrap


# the calls' traits the emu program reads (ttnn/calls: each call's definition): whose emulation
# already returns stored values (data movement; conv2d models its own packing), whose values are
# their inputs' (the emu program tracks formats by them: emu.py _result_format), whose results are
# 0/1 masks (exact in bfloat16 and float32: storing them changes nothing)
STORED_BY_EMULATION = frozenset(name for name, d in CALLS.items() if d.stores)
MOVES_VALUES = frozenset(name for name, d in CALLS.items() if d.moves_values)
MASKS = frozenset(name for name, d in CALLS.items() if d.mask)


def prepare_weight(array: np.ndarray, dtype: DataFormat) -> torch.Tensor:
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


def conv2d_with(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any],
                device: Callable[..., torch.Tensor]) -> torch.Tensor:
    """A ttnn.conv2d call computed by the conv model ``device`` (numerics.conv2d_device's
    arguments): the call's NHWC rows as NCHW, its arguments as the model's, the result as rows."""
    x = _nchw(ins[0], a["batch_size"], a["input_height"], a["input_width"])
    top, bottom, left, right = a["padding"]
    cc = a["compute_config"]
    y = device(x, weights["weight_tensor"], weights.get("bias_tensor"), tuple(a["stride"]), (left, right, top, bottom),
               tuple(a["dilation"]), a["groups"], cc.math_fidelity, cc.fp32_dest_acc_en, a["dtype"], cc.packer_l1_acc,
               relu=a["conv_config"].activation is Activation.RELU)
    return _flat(y)


@emulates("ttnn.conv2d")
def conv2d(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    return conv2d_with(ins, weights, a, conv2d_device)


def conv2d_held(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    """:func:`conv2d`, its result held in bf16 where the bf16 path computed it (emu.py)."""
    return conv2d_with(ins, weights, a, functools.partial(conv2d_device, keep_bf16=True))


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


def max_pool2d_of_stored(ins: list[torch.Tensor], weights: dict[str, torch.Tensor],
                         a: dict[str, Any]) -> torch.Tensor:
    """max_pool2d on stored values (no -0, whose choice against +0 is the kernel's; NaN bits are
    the store's to settle: emu.py), as element-wise maxima on the NHWC rows: non-overlapping
    windows as strided views, stride-1 windows by doubling (a window of 9 is two overlapping ones
    of 8, each two of 4, ...), so O(log k) passes and none of torch's pooling kernels, which are
    slow on the 1-channel maps NMS pools."""
    n, h, w = a["batch_size"], a["input_h"], a["input_w"]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = a["kernel_size"], a["stride"], a["padding"], a["dilation"]
    x = ins[0].reshape(n, h, w, -1)
    if (dh, dw) != (1, 1) or a["ceil_mode"]:
        return max_pool2d(ins, weights, a)
    if (sh, sw) == (1, 1):
        y = _window_max(_window_max(x, 2, kw, pw), 1, kh, ph)
    elif (sh, sw) == (kh, kw) and (ph, pw) == (0, 0) and h % kh == 0 and w % kw == 0:
        v = x.reshape(n, h // kh, kh, w // kw, kw, x.shape[-1])
        rows = functools.reduce(torch.maximum, v.unbind(2))
        y = functools.reduce(torch.maximum, rows.unbind(3))
    else:
        return max_pool2d(ins, weights, a)
    return y.reshape(1, 1, -1, y.shape[-1])


def _window_max(x: torch.Tensor, dim: int, k: int, pad: int) -> torch.Tensor:
    """Maxima of the k-wide windows along ``dim`` at stride 1, ``pad`` -inf each side (the padding
    max_pool2d never picks: every window holds an input)."""
    if pad:
        fill = x.new_full([pad if d == dim else size for d, size in enumerate(x.shape)], float("-inf"))
        x = torch.cat([fill, x, fill], dim)
    out = x.shape[dim] - k + 1
    width = 1
    while 2 * width <= k:
        size = x.shape[dim] - width
        x = torch.maximum(x.narrow(dim, 0, size), x.narrow(dim, width, size))
        width *= 2
    if width == k:
        return x
    return torch.maximum(x.narrow(dim, 0, out), x.narrow(dim, k - width, out))


# emulations that assume every input holds stored bf16 values (emu.py picks them where it knows so)
OF_STORED = {"ttnn.max_pool2d": max_pool2d_of_stored}

# Tensors held in bf16: a bf16-stored value is exactly a bfloat16, so the emulator may keep it in
# one instead of a float32 copy (half the memory traffic). The emulations that may return such
# tensors, and the calls whose emulations (and OF_STORED's) take them as they are: data movement,
# and max-pool on stored values, which selects; every other call is given float32 copies (emu.py).
HOLDING_BF16 = {"ttnn.conv2d": conv2d_held}
TAKES_HELD_BF16 = frozenset(name for name, d in CALLS.items() if d.takes_bf16)


@emulates("ttnn.avg_pool2d")
def avg_pool2d(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    x = _nchw(ins[0], a["batch_size"], a["input_h"], a["input_w"])
    y = F.avg_pool2d(x, tuple(a["kernel_size"]), tuple(a["stride"]), tuple(a["padding"]), ceil_mode=a["ceil_mode"],
                     count_include_pad=a["count_include_pad"])
    return _flat(y)


def topk_by_sort(ins: list[torch.Tensor], weights: dict[str, torch.Tensor],
                 a: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    """Values and positions (as exact float32 integers); ties by position, as a stable sort. For
    what :func:`topk` does not select by the k-th value: several rows, k of 0 or the whole row, NaN."""
    x = ins[0]
    order = torch.sort(x, dim=a["dim"], descending=a["largest"], stable=True).indices.narrow(a["dim"], 0, a["k"])
    return torch.gather(x, a["dim"], order), order.to(torch.float32)


@emulates("ttnn.topk")
def topk(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    """Values and positions, ties by position (:func:`topk_by_sort`'s result), without sorting the
    whole row: the k-th value splits the row into the positions above it (all kept) and the ties at
    it (the first ones kept, in position order), and only those k are sorted, stably. One row (the
    keypoint window) and no NaN, else :func:`topk_by_sort`."""
    x, dim, k, largest = ins[0], a["dim"], a["k"], a["largest"]
    n = x.shape[dim]
    if x.numel() != n or not 0 < k < n:
        return topk_by_sort(ins, weights, a)
    row = x.reshape(n)
    top = torch.topk(row, k, largest=largest, sorted=False).values
    kth = top.min() if largest else top.max()  # NaN, the largest to both sorts, propagates here
    if torch.isnan(kth):
        return topk_by_sort(ins, weights, a)
    above = ((row > kth) if largest else (row < kth)).nonzero().squeeze(1)
    ties = (row == kth).nonzero().squeeze(1)[: k - above.numel()]
    pos = torch.cat([above, ties]).sort().values  # in position order, so the stable sort keeps ties so
    order = pos[torch.sort(row[pos], descending=largest, stable=True).indices]
    shape = [1] * x.dim()
    shape[dim] = k
    order = order.reshape(shape)
    return torch.gather(x, dim, order), order.to(torch.float32)


@emulates("spc.kernel")
def kernel(ins: list[torch.Tensor], weights: dict[str, torch.Tensor], a: dict[str, Any]) -> torch.Tensor:
    """A fused kernel: its reference (kernels/), bit-exact with the TT-Lang kernel and with the
    stock calls it replaces."""
    return KERNELS[a["kernel"]].reference(*ins, **a.get("params", {}))
