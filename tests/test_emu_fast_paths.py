"""The emulator's fast paths against its reference formulation, bit for bit (docs/precision.md,
"How the emulator is fast"): bf16 rounding, the conv model over every setting it has, top-k,
max-pool on stored values, and whole plans of every precision preset on the sample images,
every call's result. No fast path changes the fp32 summation order, so nothing here has a
tolerance: every comparison is of float32 bit patterns.
"""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from spc.ttnn.formats import DataFormat, MathFidelity
from spc.ttnn.numerics import (
    conv2d_device,
    conv2d_device_reference,
    conv_weight_storage,
    round_bf16,
    round_bf16_reference,
    store_bf16_,
)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def bf16_values(*shape: int, seed: int) -> torch.Tensor:
    """Device values: bf16-exact, of mixed signs and magnitudes, with zeros."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) * torch.pow(2.0, torch.randint(-6, 4, shape, generator=g).float())
    x[torch.rand(*shape, generator=g) < 0.3] = 0.0
    return round_bf16_reference(x)


def test_bf16_rounding_is_the_reference_on_every_kind_of_value() -> None:
    g = torch.Generator().manual_seed(0)
    n = 1 << 20
    edges = [0.0, -0.0, float("nan"), float("inf"), -float("inf"), f32(0x007F8000), -f32(0x007F8000),
             f32(0x007F7FFF), -f32(0x007F7FFF), f32(0x00800000), f32(0x7F7FFFFF), -f32(0x7F7FFFFF), 1 + 2**-8,
             1 + 3 * 2**-8, 2.0**-149, -(2.0**-149), f32(0x7F7F8000), f32(0x00008000)]
    random_bits = torch.randint(-(2**31), 2**31 - 1, (n,), generator=g, dtype=torch.int64).to(torch.int32)
    scaled = torch.randn(n, generator=g) * torch.pow(2.0, torch.randint(-150, 128, (n,), generator=g).float())
    for x in (torch.tensor(edges), random_bits.view(torch.float32), scaled):
        want = round_bf16_reference(x)
        assert same_bits(round_bf16(x), want)
        assert same_bits(store_bf16_(x.clone()), want)
        assert same_bits(store_bf16_(x.clone(), relu=True), torch.relu(want))


# geometry: (cin, cout, h, w, kh, kw, stride, padding (left, right, top, bottom), dilation)
GEOMETRIES = [
    (1, 16, 9, 11, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),  # the first conv: one input channel
    (40, 24, 7, 10, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),  # channels over one 32-wide K tile
    (20, 16, 9, 9, 3, 3, (2, 2), (0, 1, 2, 1), (2, 1)),  # strided, dilated, padded unevenly
    (24, 16, 6, 7, 2, 3, (1, 1), (1, 1, 0, 1), (1, 1)),  # two kernel rows
]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: f"{g[0]}to{g[1]}_k{g[4]}x{g[5]}_s{g[6][0]}")
def test_conv_model_is_the_reference_in_every_setting(geometry: tuple) -> None:
    cin, cout, h, w, kh, kw, stride, padding, dilation = geometry
    x = bf16_values(1, cin, h, w, seed=cin + h).contiguous(memory_format=torch.channels_last)
    raw_w, raw_b = bf16_values(cout, cin, kh, kw, seed=cout), bf16_values(cout, seed=cout + 1)
    # the fast path's settings (an fp32 destination, a bf16 or fp32 result), and one each of those
    # it hands to the reference (a bf16 destination, a block-float result)
    settings = [(DataFormat.BFLOAT8_B if fidelity is MathFidelity.LOFI else DataFormat.BFLOAT16, fidelity, True,
                 l1_acc, out_fmt, bias, bias)
                for fidelity, l1_acc, out_fmt, bias in itertools.product(
                    MathFidelity, (True, False), (DataFormat.BFLOAT16, DataFormat.FLOAT32), (True, False))]
    if cin < 32:  # (the reference's bf16 destination is slow to run: K in 16-wide steps)
        settings += [(DataFormat.BFLOAT16, MathFidelity.HIFI2, False, False, DataFormat.BFLOAT16, True, True),
                     (DataFormat.BFLOAT8_B, MathFidelity.LOFI, True, False, DataFormat.BFLOAT8_B, True, False)]
    for weights_fmt, fidelity, fp32_acc, l1_acc, out_fmt, bias, relu in settings:
        wt = conv_weight_storage(raw_w, weights_fmt).contiguous(memory_format=torch.channels_last)
        b = conv_weight_storage(raw_b[:, None, None, None], weights_fmt).reshape(-1) if bias else None
        args = (x, wt, b, stride, padding, dilation, 1, fidelity, fp32_acc, out_fmt, l1_acc)
        want = conv2d_device_reference(*args, relu=relu)
        got = conv2d_device(*args, relu=relu)
        assert same_bits(got, want), (weights_fmt, fidelity, fp32_acc, l1_acc, out_fmt, bias, relu)


def _topk_case(x: torch.Tensor, k: int, largest: bool) -> None:
    from spc.runtime.emu_ops import topk, topk_reference

    a = {"dim": -1, "k": k, "largest": largest}
    for got, want in zip(topk([x], {}, a), topk_reference([x], {}, a)):
        assert same_bits(got, want), (k, largest)


def test_topk_keeps_the_stable_sort_order() -> None:
    g = torch.Generator().manual_seed(3)
    levels = torch.randint(-4, 5, (1, 1, 1, 5000), generator=g).float() / 4  # many ties, +-0 among them
    levels[levels == 0] = torch.where(torch.rand(int((levels == 0).sum()), generator=g) < 0.5, 0.0, -0.0)
    sparse = torch.zeros(1, 1, 1, 5000)
    sparse[..., ::97] = torch.rand(52, generator=g)  # an NMS map: fewer scores than k, the rest ties at 0
    for x in (levels, sparse):
        for k, largest in itertools.product((1, 17, 600, 4999), (True, False)):
            _topk_case(x, k, largest)
    with_nan = levels.clone()
    with_nan[..., 10] = float("nan")  # the fast path steps aside
    _topk_case(with_nan, 17, True)
    _topk_case(with_nan, 17, False)


@pytest.mark.parametrize("pool", [((2, 2), (2, 2), (0, 0)), ((9, 9), (1, 1), (4, 4)), ((3, 2), (1, 1), (1, 0)),
                                  ((3, 3), (2, 2), (1, 1))], ids=str)
def test_max_pool_on_stored_values_is_the_reference(pool: tuple) -> None:
    from spc.runtime.emu_ops import max_pool2d, max_pool2d_of_stored

    kernel, stride, padding = pool
    for c, h, w in ((1, 30, 41), (16, 12, 10)):
        x = bf16_values(1, 1, h * w, c, seed=c)
        a = {"batch_size": 1, "input_h": h, "input_w": w, "kernel_size": list(kernel), "stride": list(stride),
             "padding": list(padding), "dilation": [1, 1], "ceil_mode": False}
        assert same_bits(max_pool2d_of_stored([x], {}, a), max_pool2d([x], {}, a))


@pytest.fixture(scope="module")
def preset_plans(small_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from spc.compiler import compile_onnx
    from spc.ttnn.precision import PRESETS, PrecisionPlan

    folder = tmp_path_factory.mktemp("fast-paths")
    plans = {}
    for name in PRESETS:
        plans[name] = folder / f"{name}.ttplan"
        compile_onnx(small_onnx, plans[name], precision=PrecisionPlan(name), kernels=name == "fast")
    return plans


def test_every_preset_runs_the_reference_bits(preset_plans: dict[str, Path], images: dict[str, Path]) -> None:
    """Every call's result, not only the outputs (``fast`` with the fused kernels, as their
    reference functions run here too)."""
    from spc.plan.io import read_plan
    from spc.runtime.emu import EmuProgram
    from spc.runtime.host import run_host
    from spc.runtime.inputs import load_input
    from tests.conftest import SMALL

    for name, path in preset_plans.items():
        plan = read_plan(path)
        p = plan.program
        fast, reference = EmuProgram(p, plan.weights), EmuProgram(p, plan.weights, reference=True)
        every = list(dict.fromkeys(r for op in p.device_ops for r in op.results))
        for image in images.values():
            env = {p.inputs[0].name: load_input(image, [1, 3, *SMALL])}
            run_host(p.host_pre, env, plan.weights)
            device_in = {t.name: t.layout.to_device(env[t.name]) for t in p.device_inputs}
            got, want = fast.run(device_in, every), reference.run(device_in, every)
            for tensor in every:
                g, w = np.ascontiguousarray(got[tensor]), np.ascontiguousarray(want[tensor])
                assert g.dtype == w.dtype and g.shape == w.shape, (name, image.name, tensor)
                assert np.array_equal(g.view(np.uint8), w.view(np.uint8)), (name, image.name, tensor)
