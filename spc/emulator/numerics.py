"""Tenstorrent number formats and the matrix engine's multiplier, bit for bit where known.

Facts (shared/reference/tenstorrent-facts.md, from tt-metal and the Tensix ISA docs):

* bf16 storage rounds to nearest even; denormals flush to zero.
* bfloat8_b / bfloat4_b: a 32x32 tile is four 16x16 faces; each row of 16 values inside a face
  shares one 8-bit exponent, the largest in the row. A value keeps its sign and a 7-bit (bfp8)
  or 3-bit (bfp4) magnitude: its explicit 1.mantissa shifted right by (shared - own exponent),
  rounded to nearest even and saturated. Zeros and denormals become 0
  (tt_metal/impl/data_format/blockfloat_common.cpp). In a row-major [..., C] tensor tiled over
  its last two dims, a face row is 16 consecutive elements of the last dim, 16-aligned.
* The multiplier truncates (not rounds) operands per fidelity phase: SrcA keeps the hidden bit
  and 4 mantissa bits in its "hi" phases and the next bits in its "lo" phases; SrcB keeps the
  hidden bit and 6 mantissa bits in "hi", the rest in "lo". Phases: A-hi x B-hi, A-lo x B-hi,
  A-hi x B-lo, A-lo x B-lo; LoFi runs the first, HiFi2 two, HiFi3 three, HiFi4 all four. In
  matmul (and conv), weights are SrcA and activations SrcB. SrcA and SrcB hold 19-bit values
  (TF32: fp32 loses its low 13 mantissa bits on the way in) and the multiplier takes at most 5 bits
  of SrcA per phase: float32 weights are read to 9 mantissa bits (conv_weight_storage).
* A conv's float32 input stays float32 only where its result is float32 (tilize_helpers.inl: the
  activations are tilized in the output's format, fast tilize unless that is float32); it then
  reaches SrcB as TF32, 10 mantissa bits, of which the hi phases read 6 (:func:`tf32`).

Choices where the facts stop (written down, not tuned): products of truncated operands are
exact in fp32 and summed in fp32 (the device's fp32 dest order is not modelled); block-float
rounding is nearest-even on the exact value (the packer's sticky-bit handling is not known);
the unpacker's float32 -> TF32 drops the low bits (toward zero), as for the weights.

One implementation of each case, which the emulator runs: fewer passes over memory than the
model's plain spelling (in-place updates of the tensors they make, no work a fidelity does not
use, the flush folded into one comparison); tests/emulator_reference.py spells the model as the
facts read and the tests hold these to it bit for bit (docs/precision.md, "How the emulator is
fast"). One exception: where the CPU has bf16 dot products, a conv stored in bf16 runs as oneDNN
bf16 convolutions (the bf16 path below), which is the same model up to the order of its fp32
sums; the tests bound it instead.
"""

from __future__ import annotations

import functools
import os

import torch
import torch.nn.functional as F
from torch.utils.weak import WeakIdKeyDictionary

from spc.ttnn.formats import DataFormat, MathFidelity
from spc.ttnn.precision import SHORT_REDUCTION

FACE_ROW = 16
_MIN_NORMAL = 2.0**-126
# The largest bf16 denormal (127 * 2^-133): a rounded value whose magnitude is at most this (or
# -0) has a zero exponent field, which bf16 storage flushes to +0.
_LARGEST_DENORMAL = 127 * 2.0**-133


def round_bf16(x: torch.Tensor) -> torch.Tensor:
    """bf16 storage: round to nearest even, flush denormals; held as float32 (a new tensor)."""
    v = x.to(torch.bfloat16, copy=True)  # torch's conversion rounds to nearest even
    return _flush_bf16_(v).to(torch.float32)


def store_bf16_(y: torch.Tensor, relu: bool = False) -> torch.Tensor:
    """:func:`round_bf16` of a float32 tensor the caller owns, in place; with ``relu``, then its
    ReLU (the conv's fused activation), in the same pass as the flush."""
    return y.copy_(_flush_bf16_(y.to(torch.bfloat16), relu))


def _flush_bf16_(v: torch.Tensor, relu: bool = False) -> torch.Tensor:
    """Flush a bfloat16 tensor's denormals and -0 to +0, in place, in one pass: hardshrink zeroes
    |v| <= the largest denormal, and NaN, which compares false, is kept, as the spec keeps it.
    With ``relu``, threshold zeroes v <= it: ReLU of the flushed value, since flushing keeps
    order and sign."""
    if relu:
        return F.threshold_(v, _LARGEST_DENORMAL, 0.0)
    return torch.hardshrink(v, _LARGEST_DENORMAL, out=v)


def round_block_float(x: torch.Tensor, fmt: DataFormat) -> torch.Tensor:
    """bfloat8_b / bfloat4_b storage of ``x`` (groups of 16 along the last dim); float32 out."""
    bits = fmt.block_float_bits
    c = x.shape[-1]
    pad = (-c) % FACE_ROW
    rows = F.pad(x.to(torch.float32), (0, pad)).reshape(*x.shape[:-1], -1, FACE_ROW)
    mag = rows.abs()
    normal = mag >= _MIN_NORMAL
    _, exp = torch.frexp(mag)  # mag = m * 2**exp with m in [0.5, 1): own exponent is exp - 1
    own = torch.where(normal, exp - 1, torch.full_like(exp, -1000))
    shared = own.amax(dim=-1, keepdim=True)
    lsb = torch.pow(2.0, (shared - (bits - 1)).to(torch.float32))  # value of the magnitude's last bit
    q = torch.round(mag / lsb).clamp(max=2**bits - 1)  # torch.round is half-to-even
    out = torch.where(normal, torch.sign(rows) * q * lsb, torch.zeros_like(rows))
    return out.reshape(*x.shape[:-1], c + pad)[..., :c]


def round_storage(x: torch.Tensor, fmt: DataFormat) -> torch.Tensor:
    """A tensor stored on the device in ``fmt``."""
    if fmt is DataFormat.BFLOAT16:
        return round_bf16(x)
    if fmt is DataFormat.FLOAT32:
        return x.to(torch.float32)  # fp32 denormals would flush too; values this small never occur here
    # indices, held exactly in float32 here. Blackhole's SFPU casts float32 to uint32 by shifting
    # the mantissa (toward zero; negatives give 0) and to uint16 by SFPSTOCHRND's round to nearest,
    # clamped to 0..65535 (ckernel_sfpu_typecast.h in ttnn 0.81.1's wheel)
    if fmt is DataFormat.UINT32:
        return torch.trunc(torch.clamp(x.to(torch.float32), min=0))
    if fmt is DataFormat.UINT16:
        return torch.round(torch.clamp(x.to(torch.float32), 0, 65535))
    if fmt.block_float_bits:
        return round_block_float(x, fmt)
    raise ValueError(f"unknown device data format {fmt!r}")


def _store_(y: torch.Tensor, fmt: DataFormat, relu: bool = False) -> torch.Tensor:
    """:func:`round_storage` (then ReLU) of a float32 tensor the caller owns: in place where it can be."""
    if fmt is DataFormat.BFLOAT16:
        return store_bf16_(y, relu)
    if fmt is DataFormat.FLOAT32:
        return y.relu_() if relu else y
    y = round_storage(y, fmt)
    return torch.relu(y) if relu else y


def truncate_mantissa(x: torch.Tensor, keep: int) -> torch.Tensor:
    """Keep the hidden bit and the top ``keep`` mantissa bits (toward zero), as the multiplier does."""
    bits = x.to(torch.float32).view(torch.int32)  # same-size view: keeps channels_last strides
    mask = ~((1 << (23 - keep)) - 1)
    return (bits & mask).view(torch.float32)


A_HI_BITS, B_HI_BITS = 4, 6
A_READ_BITS = A_HI_BITS + 5  # SrcA's mantissa bits the multiplier reads over its hi and lo phases
TF32_BITS = 10  # the mantissa bits of a float32 value in SrcA / SrcB


def tf32(x: torch.Tensor) -> torch.Tensor:
    """A float32 conv input as the unpacker puts it in SrcB: its top 10 mantissa bits (bf16 values,
    7 bits, pass unchanged)."""
    return truncate_mantissa(x, TF32_BITS)


def operand_phases(a: torch.Tensor, b: torch.Tensor, fidelity: MathFidelity, merged: bool = True,
                   b_hi: torch.Tensor | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The (SrcA part, SrcB part) pairs whose products the engine sums at ``fidelity``.

    With ``merged``, pairs that share an operand are combined (A-hi x B-hi + A-lo x B-hi =
    A x B-hi), so a linear op (matmul, conv) runs at most two; without, one pair per phase, in
    the engine's order, for when each phase's partial is rounded on its own. ``b_hi``: ``b``'s
    "hi" part if the caller has it (the same activations under several kernel rows).
    """
    phases = fidelity.phases
    if merged and phases == 4:
        return [(a, b)]  # every bit of both: no truncation to make
    b_hi = truncate_mantissa(b, B_HI_BITS) if b_hi is None else b_hi
    if merged and phases == 2:
        return [(a, b_hi)]
    a_hi = truncate_mantissa(a, A_HI_BITS)
    if not merged:
        a_lo, b_lo = a - a_hi, b - b_hi
        return [(a_hi, b_hi), (a_lo, b_hi), (a_hi, b_lo), (a_lo, b_lo)][:phases]
    if phases == 1:
        return [(a_hi, b_hi)]
    return [(a, b_hi), (a_hi, b - b_hi)]


def conv_weight_storage(w: torch.Tensor, fmt: DataFormat) -> torch.Tensor:
    """Conv weights [O, I, kh, kw] as the device stores them: ttnn tilises a [K, N] matrix with
    N = output channels, so a block-float face row is 16 consecutive output channels of one tap
    (prepare_conv2d_weights.cpp). float32 weights as the matrix engine reads them: SrcA holds
    TF32 (the unpacker drops the low 13 mantissa bits) and the multiplier takes the hidden bit and
    4 + 5 mantissa bits over its A phases, so 9 bits at most (bf16's 7 are all read)."""
    if fmt.block_float_bits:
        return round_block_float(w.permute(2, 3, 1, 0), fmt).permute(3, 2, 0, 1).contiguous()
    if fmt is DataFormat.FLOAT32:
        return truncate_mantissa(w, A_READ_BITS)
    return round_storage(w, fmt)


def conv2d_device(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, stride: tuple[int, int],
                  padding: tuple[int, int, int, int], dilation: tuple[int, int], groups: int, fidelity: MathFidelity,
                  fp32_acc: bool, out_fmt: DataFormat, l1_acc: bool = False, relu: bool = False, *,
                  bf16: bool | None = None, keep_bf16: bool = False) -> torch.Tensor:
    """A ttnn conv2d's result as the device computes it; with ``relu``, its fused ReLU on the
    stored result.

    From the program factory and compute kernel (conv_bmm_tilize.cpp): the reduction runs in
    K blocks of one kernel row each (K order kh, kw, cin); between blocks the partial sum is
    packed and reloaded into the partials buffer: in the output format, or with ``l1_acc``
    (packer_l1_acc, which ttnn enables only with more than two K blocks, or two and a bias) in
    fp32 when the destination is fp32, else bf16; the matmul result goes to that buffer too,
    then the bias is added and the sum packed in the output format. Inside a block the
    destination accumulates in fp32 (``fp32_acc``) or in bf16 (:func:`bf16_destination_block`).
    A block-float output tilises the activations in that format too (ACT_TILIZED uses
    output_df). ``x`` is NCHW holding device values; ``w`` holds stored weights
    (conv_weight_storage).

    With an fp32 destination, where nothing narrows the partials between kernel rows, one conv;
    else one conv per kernel row over the rows it reads. The activations are padded and truncated
    in one pass, once for every kernel row, and what follows each conv (the partial added, packed,
    the bias added, the result stored, its ReLU) is done in place where the format allows.

    With ``bf16`` (default :func:`bf16_convs`), a bf16 result with an fp32 destination is computed
    by bf16 convolutions instead (:func:`_conv2d_bf16`): the same model up to the order of the
    fp32 sums, so not bit for bit (tests/test_emu_fast_paths.py bounds it). ``x`` may be a
    bfloat16 tensor (stored values held as they are stored); with ``keep_bf16`` the bf16 path's
    result is returned so too, else every result is float32.
    """
    kh = w.shape[2]
    l1_acc = l1_acc and (kh > 2 or (kh > 1 and b is not None))  # determine_packer_l1_acc
    partial_fmt = (DataFormat.FLOAT32 if fp32_acc else DataFormat.BFLOAT16) if l1_acc else out_fmt
    if fp32_acc and out_fmt is DataFormat.BFLOAT16 and (bf16_convs() if bf16 is None else bf16):
        held = _conv2d_bf16(x, w, b, stride, padding, dilation, groups, fidelity, partial_fmt is DataFormat.FLOAT32,
                            relu)
        if held is not None:
            return held if keep_bf16 else held.to(torch.float32)
    x = x.to(torch.float32)  # (a bf16-held tensor's values, exactly)
    if out_fmt is DataFormat.FLOAT32:
        x = tf32(x)
    if out_fmt.block_float_bits:
        x = round_block_float(x.permute(0, 2, 3, 1), out_fmt).permute(0, 3, 1, 2)

    def finish_(acc: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """The last K block's sum, packed as a partial, + bias, stored (then ReLU)."""
        if bias is not None:
            acc = _store_(acc, partial_fmt).add_(bias)
        return _store_(acc, out_fmt, relu)

    bias = None if b is None else b.reshape(1, -1, 1, 1)
    if fp32_acc and (partial_fmt is DataFormat.FLOAT32 or kh == 1):
        return finish_(_one_block(x, w, stride, padding, dilation, groups, fidelity), bias)
    phases = fidelity.phases
    bf16_dest = not fp32_acc and groups == 1  # (a grouped conv's rows are summed as with an fp32 destination)
    # the padded activations, and their SrcB "hi" part, as far as the fidelity reads them
    xp = _padded(x, padding) if phases >= 3 or bf16_dest else None
    xp_hi = _padded(x, padding, B_HI_BITS) if phases < 4 and not bf16_dest else None
    src = xp if xp is not None else xp_hi
    assert src is not None
    oh = (src.shape[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    acc: torch.Tensor | None = None
    for r in range(kh):
        rows = slice(r * dilation[0], r * dilation[0] + (oh - 1) * stride[0] + 1)
        if bf16_dest:
            partial = bf16_destination_block(src[:, :, rows].contiguous(memory_format=torch.channels_last),
                                             w[:, :, r:r + 1], stride, dilation, fidelity, acc)
        else:
            block = _one_block(src[:, :, rows], w[:, :, r:r + 1], stride, (0, 0, 0, 0), dilation, groups, fidelity,
                               None if xp_hi is None else xp_hi[:, :, rows])
            partial = block if acc is None else acc.add_(block)
        if r == kh - 1:
            return finish_(partial, bias)
        acc = _store_(partial, partial_fmt)
    raise AssertionError("a kernel row is the last")


def _padded(x: torch.Tensor, padding: tuple[int, int, int, int], keep: int | None = None) -> torch.Tensor:
    """F.pad(x, padding) as a channels-last tensor (and with ``keep``, truncate_mantissa of it), in
    one pass: zero borders, the interior written once."""
    out, inner = _zero_bordered(x.shape, padding, x.shape[1], torch.float32)
    src = x.permute(0, 2, 3, 1).to(torch.float32)
    if keep is None:
        inner.copy_(src)
    else:
        torch.bitwise_and(src.view(torch.int32), ~((1 << (23 - keep)) - 1), out=inner.view(torch.int32))
    return out.permute(0, 3, 1, 2)


def _zero_bordered(shape: torch.Size, padding: tuple[int, int, int, int], channels: int,
                   dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A padded NHWC buffer for an NCHW ``shape`` with ``channels`` channels: its borders zeroed,
    its interior (the second tensor, a view) left for the caller to write once."""
    left, right, top, bottom = padding
    n, _, h, w = shape
    out = torch.empty((n, h + top + bottom, w + left + right, channels), dtype=dtype)
    for border in (out[:, :top], out[:, top + h:], out[:, top:top + h, :left], out[:, top:top + h, left + w:]):
        border.zero_()
    return out, out[:, top:top + h, left:left + w]


def is_short(w: torch.Tensor, groups: int) -> bool:
    """Whether a conv of weights ``w`` [O, I/groups, kh, kw] is summed by :func:`taps_matmul`: an
    ungrouped one with a short reduction (ttnn/precision.py: the convs that keep float32 weights)."""
    return groups == 1 and w.shape[1] * w.shape[2] * w.shape[3] < SHORT_REDUCTION


def taps_matmul(x: torch.Tensor, w: torch.Tensor, stride: tuple[int, int], padding: tuple[int, int],
                dilation: tuple[int, int]) -> torch.Tensor:
    """A conv with few products per output (the image's first) as one fp32 matmul of its taps,
    [pixels, K] x [K, O]: each pixel's sum in the same order whatever the batch (torch's conv
    algorithms choose their order by shape), and faster than a conv over one or three channels."""
    n, o = x.shape[0], w.shape[0]
    cols = F.unfold(x, w.shape[2:], dilation=dilation, padding=padding, stride=stride)  # [N, K, L]
    oh = (x.shape[2] + 2 * padding[0] - dilation[0] * (w.shape[2] - 1) - 1) // stride[0] + 1
    ow = cols.shape[2] // oh
    y = cols.transpose(1, 2).reshape(-1, cols.shape[1]) @ w.reshape(o, -1).t()  # [N*L, O]
    return y.reshape(n, oh, ow, o).permute(0, 3, 1, 2)


def _one_block(x: torch.Tensor, w: torch.Tensor, stride: tuple[int, int], padding: tuple[int, int, int, int],
               dilation: tuple[int, int], groups: int, fidelity: MathFidelity,
               x_hi: torch.Tensor | None = None) -> torch.Tensor:
    """The conv of ``x`` with ``w`` in one K block: the sum of the convs of the fidelity's operand
    pairs (:func:`operand_phases`, merged), a new tensor (so the caller may update it in place)."""
    left, right, top, bottom = padding
    same = (left, top) == (right, bottom)
    src = x if same else _padded(x, padding)
    pad = (top, left) if same else (0, 0)
    pairs = operand_phases(w, src, fidelity, b_hi=x_hi if same else None)
    if is_short(w, groups):
        terms = [taps_matmul(xb, wa, stride, pad, dilation) for wa, xb in pairs]
        return terms[0] if len(terms) == 1 else terms[0].add_(terms[1])
    terms = [F.conv2d(xb, wa, stride=stride, padding=pad, dilation=dilation, groups=groups) for wa, xb in pairs]
    return terms[0] if len(terms) == 1 else terms[0].add_(terms[1])


# The bf16 path: where a conv's result is stored in bf16, its sums taken by oneDNN's bf16
# convolutions (bf16 operands, fp32 accumulation, one rounding to bf16 at the end, or a post-op
# add of the reloaded partial before it): the multiplier's truncated operands are bf16 values,
# their products exact in fp32, so this is the model above up to the order of the fp32 sums.

BF16_CONV_ENV = "SPC_EMU_BF16_CONV"
_BF16_HI_MASK = ~((1 << (7 - B_HI_BITS)) - 1)  # SrcB "hi": bf16 keeps 7 mantissa bits
_BIAS_FAR_ABOVE_DENORMALS = 2.0**-100  # a denormal is under half this value's fp32 ulp


def bf16_convs() -> bool:
    """Whether :func:`conv2d_device` takes the bf16 path: ``SPC_EMU_BF16_CONV=1`` where oneDNN has
    bf16 convolutions at all, ``=0`` never, and unset (or anything else) where the CPU also does
    bf16 dot products natively (AVX512-BF16 or AMX-BF16; elsewhere they are emulated and slower
    than the fp32 path)."""
    setting = os.environ.get(BF16_CONV_ENV, "")
    if setting == "0":
        return False
    return bf16_convs_available() and (setting == "1" or _cpu_dots_bf16())


@functools.cache
def bf16_convs_available() -> bool:
    """Whether oneDNN runs bf16 convolutions (with its post-op add) on this CPU."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


@functools.cache
def _cpu_dots_bf16() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return not {"avx512_bf16", "amx_bf16"}.isdisjoint(line.split(":", 1)[1].split())
    except OSError:
        pass
    return False


_BF16_WEIGHTS: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _weight_operands_bf16(w: torch.Tensor, fidelity: MathFidelity) -> torch.Tensor | None:
    """The SrcA parts the bf16 path convolves with at ``fidelity`` (:func:`operand_phases`,
    merged; HiFi3's two along the input channels), one bf16 channels-last tensor made once per
    weight tensor; None if a part is not a bf16 value (float32 weights)."""
    made = _BF16_WEIGHTS.get(w)
    if made is None:
        made = _BF16_WEIGHTS[w] = {}
    if fidelity not in made:
        w32 = w.to(torch.float32)
        phases = fidelity.phases
        parts = [w32] if phases in (2, 4) else [truncate_mantissa(w32, A_HI_BITS)]
        if phases == 3:
            parts = [w32, truncate_mantissa(w32, A_HI_BITS)]
        joined = torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]
        held = joined.to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
        made[fidelity] = held if torch.equal(held.to(torch.float32), joined) else None
    return made[fidelity]


def _activation_operands_bf16(x: torch.Tensor, fidelity: MathFidelity) -> torch.Tensor:
    """The SrcB parts matching :func:`_weight_operands_bf16`, bf16: ``x`` (stored bf16 values),
    its "hi" part (the last mantissa bit cleared), or HiFi3's hi and lo along the channels."""
    xb = x if x.dtype is torch.bfloat16 else x.to(torch.bfloat16)
    if fidelity.phases == 4:
        return xb
    hi = torch.bitwise_and(xb.view(torch.int16), _BF16_HI_MASK).view(torch.bfloat16)
    if fidelity.phases < 3:
        return hi
    return torch.cat([hi, xb - hi], dim=1)  # the difference is one bit: exact


def _conv2d_bf16(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, stride: tuple[int, int],
                 padding: tuple[int, int, int, int], dilation: tuple[int, int], groups: int,
                 fidelity: MathFidelity, partial_fp32: bool, relu: bool) -> torch.Tensor | None:
    """A bf16-stored conv result as a bf16 tensor (channels-last NCHW), by bf16 convolutions.

    One K block with a single rounding (``partial_fp32``, or one kernel row): one conv, the bias
    in its fp32 accumulator where the partial is fp32 (else added to the packed result, in bf16
    arithmetic: one fp32 add and a rounding, as the model adds it). Kernel rows packed in bf16
    between them: each row's conv adds the packed partial to its fp32 sum as a post-op, then
    rounds once: round(partial + row), the model's step. Every packing flushes denormals. Inputs
    of few channels (the first conv's one) are convolved as 1x1 convs over their taps, which
    oneDNN runs far faster. None where the weights or bias are not bf16 values (the fp32 path
    then runs), or HiFi3 with groups."""
    if fidelity.phases == 3 and groups != 1:
        return None
    wq = _weight_operands_bf16(w, fidelity)
    if wq is None:
        return None
    bias = None
    if b is not None:
        bias = b.to(torch.bfloat16)
        if not torch.equal(bias.to(torch.float32), b.to(torch.float32)):
            return None
    left, right, top, bottom = padding
    kh, kw = w.shape[2], w.shape[3]
    single = partial_fp32 or kh == 1
    taps = groups == 1 and wq.shape[1] * kh * kw <= 32
    if single and not taps and (left, top) == (right, bottom):
        xq, pad = _activation_operands_bf16(x, fidelity).contiguous(memory_format=torch.channels_last), (top, left)
    else:
        xq, pad = _padded_operands_bf16(x, padding, fidelity), (0, 0)
    oh = (xq.shape[2] + 2 * pad[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    # A packed partial is flushed before the bias is added; where every bias value is 0 or far
    # above the denormals, a denormal partial plus the bias rounds as 0 plus it does (and the
    # result's own flush follows), so that flush changes nothing and is skipped.
    flush_first = bias is not None and not partial_fp32 and bool(
        ((b != 0) & (b.abs() < _BIAS_FAR_ABOVE_DENORMALS)).any())
    if taps:
        ow = (xq.shape[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
        xq, wq = _taps_as_channels(xq, wq, stride, dilation, oh, ow)
        stride, dilation = (1, 1), (1, 1)
    if single:
        y = F.conv2d(xq, wq.sum(dim=2, keepdim=True) if taps else wq, bias if partial_fp32 else None, stride, pad,
                     dilation, groups)
        if bias is not None and not partial_fp32:
            (_flush_bf16_(y) if flush_first else y).add_(bias.reshape(1, -1, 1, 1))
        return _flush_bf16_(y, relu)
    acc: torch.Tensor | None = None
    for r in range(kh):
        if taps:  # every tap's channels, the other rows' weights zero
            rows, w_row = xq, wq[:, :, r:r + 1]
        else:
            first = r * dilation[0]
            rows = xq[:, :, first: first + (oh - 1) * stride[0] + 1]
            w_row = wq[:, :, r:r + 1].contiguous(memory_format=torch.channels_last)
        if acc is None:
            acc = F.conv2d(rows, w_row, None, stride, 0, dilation, groups)
        else:
            torch.ops.mkldnn._convolution_pointwise_.binary(acc, rows, w_row, None, [0, 0], list(stride),
                                                            list(dilation), groups, "add", None, None, [], None)
        if r < kh - 1 or flush_first:
            _flush_bf16_(acc)
    assert acc is not None
    if bias is not None:
        acc.add_(bias.reshape(1, -1, 1, 1))
    return _flush_bf16_(acc, relu)


def _padded_operands_bf16(x: torch.Tensor, padding: tuple[int, int, int, int],
                          fidelity: MathFidelity) -> torch.Tensor:
    """:func:`_activation_operands_bf16` of ``x``, zero-padded, as a channels-last tensor, each
    part written once (as :func:`_padded` does in float32)."""
    xb = x if x.dtype is torch.bfloat16 else x.to(torch.bfloat16)
    c = xb.shape[1]
    parts = 2 if fidelity.phases == 3 else 1
    out, inner = _zero_bordered(xb.shape, padding, parts * c, torch.bfloat16)
    src = xb.permute(0, 2, 3, 1)
    if fidelity.phases == 4:
        inner.copy_(src)
    else:
        hi = inner[..., :c]
        torch.bitwise_and(src.view(torch.int16), _BF16_HI_MASK, out=hi.view(torch.int16))
        if parts == 2:
            torch.sub(src, hi, out=inner[..., c:])
    return out.permute(0, 3, 1, 2)


def _taps_as_channels(xp: torch.Tensor, wq: torch.Tensor, stride: tuple[int, int], dilation: tuple[int, int],
                      oh: int, ow: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A conv of the padded ``xp`` [N, C, H, W] with ``wq`` [O, C, kh, kw] as 1x1 convs: the
    activations every tap reads stacked along the channels, (kh, kw, C) order, zero-padded to 16
    or 32 channels: [N, K, oh, ow]; and the weights as [O, K, kh, 1], kernel row r's taps in
    column r and zeros elsewhere (so the column sum is the whole kernel's 1x1 weights)."""
    n, c = xp.shape[:2]
    o, _, kh, kw = wq.shape
    k = kh * kw * c
    kp = 16 if k <= 16 else 32
    cols = torch.empty(n, oh, ow, kp, dtype=xp.dtype)
    cols[..., k:].zero_()
    src = xp.permute(0, 2, 3, 1)
    for r in range(kh):
        for j in range(kw):
            i0, j0, t = r * dilation[0], j * dilation[1], (r * kw + j) * c
            cols[..., t:t + c] = src[:, i0: i0 + (oh - 1) * stride[0] + 1: stride[0],
                                     j0: j0 + (ow - 1) * stride[1] + 1: stride[1]]
    w1 = torch.zeros(o, kp, kh, 1, dtype=wq.dtype)
    taps = wq.permute(0, 2, 3, 1)  # [O, kh, kw, C]
    for r in range(kh):
        w1[:, r * kw * c:(r + 1) * kw * c, r, 0] = taps[:, r].reshape(o, kw * c)
    return cols.permute(0, 3, 1, 2), w1.contiguous(memory_format=torch.channels_last)


def bf16_destination_block(rows: torch.Tensor, w_row: torch.Tensor, stride: tuple[int, int],
                           dilation: tuple[int, int], fidelity: MathFidelity, acc: torch.Tensor | None) -> torch.Tensor:
    """One K block (kernel row ``w_row`` over the activation ``rows`` it reads) with a bf16
    destination, added to the reloaded partial ``acc``. DST is rewritten after every 16 K values
    of every fidelity phase; the rounding of those bf16 rewrites is not documented and is
    modelled as nearest-even (with the storage's flush)."""
    cin, kw = w_row.shape[1], w_row.shape[3]
    cin_p = -(-cin // 32) * 32 if cin >= 16 else -(-cin // 8) * 8
    ow = _width(rows, w_row, stride, dilation)
    out = acc
    k_total = kw * cin_p
    for tile in range(0, k_total, 32):
        for wa, xb in operand_phases(w_row, rows, fidelity, merged=False):
            for half in (tile, tile + 16):
                part = None
                for s, c0, c1 in _k_runs(half, min(half + 16, k_total), cin, cin_p):
                    term = F.conv2d(xb[:, c0:c1, :, s * dilation[1]:], wa[:, c0:c1, :, s:s + 1], stride=stride)
                    term = term[..., :ow]
                    part = term if part is None else part + term
                if part is not None:
                    out = round_bf16(part if out is None else out + part)
    assert out is not None
    return out


def _k_runs(k0: int, k1: int, cin: int, cin_p: int) -> list[tuple[int, int, int]]:
    """K indices [k0, k1) as (tap, first channel, end channel) runs, skipping channel padding."""
    runs = []
    k = k0
    while k < k1:
        s, c = divmod(k, cin_p)
        end = min(k1 - s * cin_p, cin_p)
        if c < cin:
            runs.append((s, c, min(end, cin)))
        k = s * cin_p + end
    return runs


def _width(rows: torch.Tensor, w_row: torch.Tensor, stride: tuple[int, int], dilation: tuple[int, int]) -> int:
    return (rows.shape[3] - dilation[1] * (w_row.shape[3] - 1) - 1) // stride[1] + 1
