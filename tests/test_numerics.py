"""The device number formats and multiplier, against hand-computed bit patterns."""

from __future__ import annotations

import pytest
import torch

from spc.emulator.numerics import (
    operand_phases,
    round_bf16,
    round_block_float,
    round_storage,
    truncate_mantissa,
)
from spc.ttnn.formats import DataFormat, MathFidelity


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def test_bf16_rounds_to_nearest_even() -> None:
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0)
    # 1 + 3*2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties go to 1 + 2^-6
    # 1 + 2^-8 + 2^-20 is just above halfway: up to 1 + 2^-7
    got = round_bf16(t(1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -(1 + 3 * 2**-8)))
    assert got.tolist() == [1.0, 1 + 2**-6, 1 + 2**-7, -(1 + 2**-6)]


def test_bf16_flushes_denormals() -> None:
    assert round_bf16(t(2.0**-127, -(2.0**-130), 2.0**-126)).tolist() == [0.0, 0.0, 2.0**-126]


def test_bfp8_row_shares_the_largest_exponent() -> None:
    # shared exponent 2^3 (from 12.0), magnitude LSB 2^(3-6) = 1/8:
    # 12.0 -> 96/8 exact; 0.3 -> round(2.4) = 2 -> 0.25; 0.0625 -> round(0.5) = 0 (tie to even);
    # 0.1875 -> round(1.5) = 2 -> 0.25 (tie to even); -5.3 -> round(42.4) = 42 -> -5.25
    row = t(12.0, 0.3, 0.0625, 0.1875, -5.3, *([0.0] * 11))
    assert round_block_float(row, DataFormat.BFLOAT8_B)[:5].tolist() == [12.0, 0.25, 0.0, 0.25, -5.25]


def test_bfp8_saturates_instead_of_overflowing() -> None:
    # 1.9999 -> magnitude 127.99 -> rounds to 128, saturates to 127: 127/64 = 1.984375
    assert round_block_float(t(1.9999, *([0.0] * 15)), DataFormat.BFLOAT8_B)[0].item() == 127 / 64


def test_block_float_groups_are_16_wide_rows() -> None:
    # a large value in the first 16 crushes its small neighbours, not those of the next row
    x = t(*([1000.0] + [1.0] * 15 + [1.0] * 16))
    y = round_block_float(x, DataFormat.BFLOAT8_B)
    assert y[1].item() == 0.0 and y[16].item() == 1.0 and y[0].item() == 1000.0


def test_bfp4_keeps_three_bits() -> None:
    # shared exponent 2^0, LSB 2^-2: 1.0 -> 4, 0.4 -> round(1.6) = 2 -> 0.5, 1.9 -> 7.6 -> 8 -> saturate 7
    row = t(1.0, 0.4, 1.9, *([0.0] * 13))
    assert round_block_float(row, DataFormat.BFLOAT4_B)[:3].tolist() == [1.0, 0.5, 1.75]


def test_block_float_zeros_and_denormals() -> None:
    row = t(0.0, 2.0**-130, *([0.0] * 14))
    assert round_block_float(row, DataFormat.BFLOAT8_B).abs().sum().item() == 0.0


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="'float8' is not one of"):
        DataFormat.parse("float8")



def test_casts_to_integers_as_blackhole_s_sfpu_does() -> None:
    """float32 -> uint32 shifts the mantissa (toward zero, negatives to 0); -> uint16 rounds to
    nearest, clamped (ckernel_sfpu_typecast.h). The plans cast only whole numbers."""
    assert round_storage(t(2.6, -3.2, 7.0), DataFormat.UINT32).tolist() == [2.0, 0.0, 7.0]
    assert round_storage(t(2.6, -3.2, 70000.0), DataFormat.UINT16).tolist() == [3.0, 0.0, 65535.0]


def test_truncation_is_toward_zero() -> None:
    # 1.1111111b (bf16 max mantissa) keeps hidden + 4 bits: 1.1111b = 1.9375 (not rounded up to 2)
    x = t(1 + 127 / 128, -(1 + 127 / 128))
    assert truncate_mantissa(x, 4).tolist() == [1.9375, -1.9375]
    assert truncate_mantissa(x, 6).tolist() == [1 + 63 / 64, -(1 + 63 / 64)]


@pytest.mark.parametrize(("fidelity", "want"), [
    # a = 1.1111111b (weights, SrcA), b = 1.1111111b (activations, SrcB)
    ("LoFi", 1.9375 * (1 + 63 / 64)),                            # A-hi x B-hi
    ("HiFi2", (1 + 127 / 128) * (1 + 63 / 64)),                 # + A-lo x B-hi
    ("HiFi3", (1 + 127 / 128) * (1 + 63 / 64) + 1.9375 / 128),  # + A-hi x B-lo
    ("HiFi4", (1 + 127 / 128) ** 2),                            # + A-lo x B-lo
])
def test_fidelity_phases_of_one_product(fidelity: str, want: float) -> None:
    a = b = t(1 + 127 / 128)
    got = sum((pa * pb for pa, pb in operand_phases(a, b, MathFidelity(fidelity))), torch.zeros(1))
    assert got.item() == pytest.approx(want, rel=0, abs=1e-12)


def _conv(x, w, b=None, **kw):
    from spc.emulator.numerics import conv2d_device

    args = dict(stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, fidelity=MathFidelity.HIFI4,
                fp32_acc=True, out_fmt=DataFormat.BFLOAT16)
    args.update(kw)
    return conv2d_device(x, w, b, **args)


def test_conv_is_exact_where_the_arithmetic_is() -> None:
    """Small integers: every product and sum is exact, so the device result is the exact conv."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, (1, 40, 7, 9), generator=g).float()
    w = torch.randint(-2, 3, (8, 40, 3, 3), generator=g).float()
    b = torch.randint(-5, 6, (8,), generator=g).float()
    want = F.conv2d(x, w, b, padding=1)
    for acc in (True, False):
        got = _conv(x, w, b, padding=(1, 1, 1, 1), fp32_acc=acc)
        assert torch.equal(got, want)


def test_bf16_destination_rounds_every_16_k_values() -> None:
    """1x1 conv, 64 channels of ones: weights 1.0 (k 0-15), 2^-8 (k 16-47). Each 16-wide step
    adds 0.0625 to 16, which rounds back to 16 in a bf16 DST; fp32 DST keeps 16.125."""
    x = torch.ones(1, 64, 1, 1)
    w = torch.zeros(1, 64, 1, 1)
    w[0, :16] = 1.0
    w[0, 16:48] = 2.0**-8
    assert _conv(x, w, fp32_acc=False).item() == 16.0
    assert _conv(x, w, fp32_acc=True).item() == 16.125


def test_partials_are_packed_between_kernel_rows() -> None:
    """3x1 kernel: rows contribute 256, 1, 1. Packed in bf16 after each row (ulp 2 at 256),
    257 is a tie and goes to 256, twice; fp32 partials (packer L1 accumulation) reach 258."""
    x = torch.ones(1, 1, 3, 1)
    w = torch.tensor([256.0, 1.0, 1.0]).reshape(1, 1, 3, 1)
    assert _conv(x, w).item() == 256.0
    assert _conv(x, w, l1_acc=True).item() == 258.0
    # with a bias the matmul result is packed before the add: in bf16 without L1 accumulation
    # (256 + 1.5 = 257.5 -> 258), in fp32 with it (258 + 1.5 = 259.5 -> 260)
    b = torch.tensor([1.5])
    assert _conv(x, w, b).item() == 258.0
    assert _conv(x, w, b, l1_acc=True).item() == 260.0


def test_bfp8_weights_share_exponents_across_output_channels() -> None:
    from spc.emulator.numerics import conv_weight_storage

    w = torch.zeros(32, 2, 1, 1)
    w[0, 0] = 100.0   # output channel 0 of tap (0, 0, cin 0) ...
    w[1, 0] = 0.01    # ... crushes output channel 1 of the same tap (same face row)
    w[1, 1] = 0.01    # but not the same output channel at another input channel
    w[16, 0] = 0.01   # nor output channel 16 (next face row)
    s = conv_weight_storage(w, DataFormat.BFLOAT8_B)
    assert s[0, 0].item() == 100.0 and s[1, 0].item() == 0.0
    assert s[1, 1].item() != 0.0 and s[16, 0].item() != 0.0


def test_float32_weights_are_read_to_nine_mantissa_bits() -> None:
    """SrcA holds TF32 and the multiplier reads hidden + 4 + 5 of its bits: 2^-9 survives, 2^-10
    and below do not (toward zero); bf16 weights are read whole."""
    from spc.emulator.numerics import conv_weight_storage

    w = torch.tensor([1 + 2.0**-9 + 2.0**-10 + 2.0**-20, -(1 + 2.0**-10), 1 + 2.0**-7]).reshape(3, 1, 1, 1)
    s = conv_weight_storage(w, DataFormat.FLOAT32).flatten().tolist()
    assert s == [1 + 2.0**-9, -1.0, 1 + 2.0**-7]
    assert conv_weight_storage(w, DataFormat.BFLOAT16).flatten().tolist()[2] == 1 + 2.0**-7


def test_a_float32_result_conv_reads_its_float32_input_as_tf32() -> None:
    """Tilized in float32 (its result's format), the input reaches SrcB as TF32: 10 mantissa bits,
    the rest dropped toward zero; a conv stored in bf16 reads what it is given (the lowering casts
    a float32 input to bf16 first, as ttnn's fast tilize does)."""
    from spc.emulator.numerics import conv2d_device

    x = torch.tensor([1 + 2.0**-10 + 2.0**-11 + 2.0**-20]).reshape(1, 1, 1, 1)
    w = torch.ones(1, 1, 1, 1)
    args = ((1, 1), (0, 0, 0, 0), (1, 1), 1, MathFidelity.HIFI4, True)
    assert conv2d_device(x, w, None, *args, DataFormat.FLOAT32).item() == 1 + 2.0**-10
    assert conv2d_device(x, w, None, *args, DataFormat.BFLOAT16).item() == 1.0  # stored in bf16: 7 bits
