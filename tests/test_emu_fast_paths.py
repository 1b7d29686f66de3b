"""The emulator's fast paths against the model as the facts read (tests/emulator_reference.py;
docs/precision.md, "How the emulator is fast"). Bit for bit: bf16 rounding, the conv model's fp32 path over every setting it
has, top-k, max-pool on stored values, and whole plans of every precision preset on the sample
images, every call's result; none of those changes the fp32 summation order, so those
comparisons are of float32 bit patterns. The bf16 conv path (oneDNN's bf16 convolutions, taken
where the CPU has bf16 dot products) changes only that order, so it is held to a stated bound
instead: every conv output element within one bf16 ulp of the reference, and each preset's
frames on the sample images within BF16_FRAME_BOUND of the fp32 path's.
"""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from spc.emulator.numerics import (
    BF16_CONV_ENV,
    bf16_convs,
    bf16_convs_available,
    conv2d_device,
    conv_weight_storage,
    round_bf16,
    store_bf16_,
)
from spc.plan.program import DEFAULT_IMAGE
from spc.ttnn.formats import DataFormat, MathFidelity
from tests.emulator_reference import conv2d_device_reference, reference_program, round_bf16_reference

needs_bf16_convs = pytest.mark.skipif(not bf16_convs_available(),
                                      reason="oneDNN has no bf16 convolutions on this CPU: only the fp32 path runs")


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


def _conv_case(geometry: tuple) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    cin, cout, h, w, kh, kw = geometry[:6]
    x = bf16_values(1, cin, h, w, seed=cin + h).contiguous(memory_format=torch.channels_last)
    return x, bf16_values(cout, cin, kh, kw, seed=cout), bf16_values(cout, seed=cout + 1)


def _stored_weights(raw_w: torch.Tensor, raw_b: torch.Tensor, fmt: DataFormat,
                    bias: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    wt = conv_weight_storage(raw_w, fmt).contiguous(memory_format=torch.channels_last)
    return wt, conv_weight_storage(raw_b[:, None, None, None], fmt).reshape(-1) if bias else None


def _conv_settings(cin: int) -> list[tuple]:
    """(weights format, fidelity, fp32 destination, L1 accumulation, output format, bias, ReLU):
    an fp32 destination with every output format, and a bf16 one (slow to run, K in 16-wide
    steps: fewer settings, and only below 32 input channels)."""
    settings = [(DataFormat.BFLOAT8_B if fidelity is MathFidelity.LOFI else DataFormat.BFLOAT16, fidelity, True,
                 l1_acc, out_fmt, bias, bias)
                for fidelity, l1_acc, out_fmt, bias in itertools.product(
                    MathFidelity, (True, False), (DataFormat.BFLOAT16, DataFormat.FLOAT32, DataFormat.BFLOAT8_B),
                    (True, False))]
    if cin < 32:
        settings += [(DataFormat.BFLOAT16, fidelity, False, l1_acc, out_fmt, True, relu)
                     for fidelity, l1_acc, out_fmt, relu in itertools.product(
                         (MathFidelity.LOFI, MathFidelity.HIFI3), (True, False),
                         (DataFormat.BFLOAT16, DataFormat.BFLOAT8_B), (True, False))]
        settings.append((DataFormat.BFLOAT16, MathFidelity.HIFI2, False, False, DataFormat.FLOAT32, False, False))
    return settings


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: f"{g[0]}to{g[1]}_k{g[4]}x{g[5]}_s{g[6][0]}")
def test_conv_model_is_the_reference_in_every_setting(geometry: tuple) -> None:
    """The fp32 path (the only one on CPUs without bf16 convolutions), bit for bit."""
    cin, (stride, padding, dilation) = geometry[0], geometry[6:]
    x, raw_w, raw_b = _conv_case(geometry)
    for setting in _conv_settings(cin):
        weights_fmt, fidelity, fp32_acc, l1_acc, out_fmt, bias, relu = setting
        wt, b = _stored_weights(raw_w, raw_b, weights_fmt, bias)
        args = (x, wt, b, stride, padding, dilation, 1, fidelity, fp32_acc, out_fmt, l1_acc)
        want = conv2d_device_reference(*args, relu=relu)
        got = conv2d_device(*args, relu=relu, bf16=False)
        assert same_bits(got, want), setting


@pytest.mark.parametrize(("batch", "cin", "cout", "groups"), [(2, 16, 32, 2), (1, 16, 16, 16)], ids=str)
def test_conv_model_is_the_reference_with_groups(batch: int, cin: int, cout: int, groups: int) -> None:
    x = bf16_values(batch, cin, 9, 10, seed=4).contiguous(memory_format=torch.channels_last)
    raw_w, raw_b = bf16_values(cout, cin // groups, 3, 3, seed=5), bf16_values(cout, seed=6)
    for setting in _conv_settings(cin):
        weights_fmt, fidelity, fp32_acc, l1_acc, out_fmt, bias, relu = setting
        wt, b = _stored_weights(raw_w, raw_b, weights_fmt, bias)
        args = (x, wt, b, (1, 1), (1, 1, 1, 1), (1, 1), groups, fidelity, fp32_acc, out_fmt, l1_acc)
        assert same_bits(conv2d_device(*args, relu=relu, bf16=False), conv2d_device_reference(*args, relu=relu)), \
            setting


# the bf16 path's own cases besides GEOMETRIES: a 1-channel input and 3 channels (convolved as 1x1
# convs over their taps), 64 channels (oneDNN's blocked kernels), a 1x1 conv to 65 channels (the
# score head)
BF16_GEOMETRIES = GEOMETRIES + [
    (1, 64, 12, 16, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
    (3, 16, 9, 11, 3, 3, (2, 1), (1, 1, 1, 1), (1, 1)),
    (64, 32, 12, 14, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
    (64, 65, 8, 8, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1)),
]


def within_one_bf16_ulp(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Where ``got`` is within one bf16 ulp of ``want`` (the ulp of the larger magnitude), or,
    where the sum cancels to far below its terms, within 2^-16 of the largest magnitude in
    ``want``: a different order of the same fp32 sum, rounded once to bf16."""
    d = (got - want).abs()
    larger = torch.maximum(got.abs(), want.abs()).clamp_min(2.0**-126)
    ulp = torch.pow(2.0, torch.floor(torch.log2(larger)) - 7)
    return (d <= ulp) | (d <= 2.0**-16 * want.abs().max())


@needs_bf16_convs
@pytest.mark.parametrize("geometry", BF16_GEOMETRIES, ids=lambda g: f"{g[0]}to{g[1]}_k{g[4]}x{g[5]}_s{g[6][0]}")
def test_bf16_conv_path_is_the_reference_up_to_summation_order(geometry: tuple) -> None:
    """Every setting the bf16 path takes (an fp32 destination, a bf16 result; the four
    fidelities; fp32 partials or packed ones; bias; ReLU): each element within one bf16 ulp of
    the reference (within_one_bf16_ulp), and nearly all equal."""
    stride, padding, dilation = geometry[6:]
    x, raw_w, raw_b = _conv_case(geometry)
    tiny_b = raw_b.clone()
    tiny_b[0] = 2.0**-120  # a bias near the denormals: the packed partial is flushed before it is added
    for fidelity, l1_acc, bias, relu in itertools.product(MathFidelity, (True, False), (None, raw_b, tiny_b),
                                                         (True, False)):
        weights_fmt = DataFormat.BFLOAT8_B if fidelity is MathFidelity.LOFI else DataFormat.BFLOAT16
        wt, b = _stored_weights(raw_w, raw_b if bias is None else bias, weights_fmt, bias is not None)
        args = (x, wt, b, stride, padding, dilation, 1, fidelity, True, DataFormat.BFLOAT16, l1_acc)
        want = conv2d_device_reference(*args, relu=relu)
        got = conv2d_device(*args, relu=relu, bf16=True)
        setting = (fidelity, l1_acc, None if b is None else float(b[0]), relu)
        assert got.dtype == torch.float32 and got.shape == want.shape, setting
        assert bool(within_one_bf16_ulp(got, want).all()), setting
        assert float((got == want).float().mean()) > 0.99, setting
        assert same_bits(round_bf16_reference(got), got), setting  # stored bf16 values, flushed
        # the same from a bf16-held input, held in bf16 (emu.py keeps such tensors so)
        held = conv2d_device(x.to(torch.bfloat16), *args[1:], relu=relu, bf16=True, keep_bf16=True)
        assert held.dtype == torch.bfloat16 and same_bits(held.to(torch.float32), got), setting


@needs_bf16_convs
@pytest.mark.parametrize(("batch", "cin", "cout", "groups"), [(2, 16, 32, 1), (2, 16, 32, 2), (3, 1, 16, 1),
                                                          (2, 32, 32, 32)], ids=str)
def test_bf16_conv_path_takes_batches_and_groups(batch: int, cin: int, cout: int, groups: int) -> None:
    """(HiFi3 with groups runs the fp32 path: its two operand pairs are joined along the channels.)"""
    x = bf16_values(batch, cin, 9, 10, seed=1).contiguous(memory_format=torch.channels_last)
    raw_w, raw_b = bf16_values(cout, cin // groups, 3, 3, seed=2), bf16_values(cout, seed=3)
    for fidelity, l1_acc in itertools.product(MathFidelity, (True, False)):
        weights_fmt = DataFormat.BFLOAT8_B if fidelity is MathFidelity.LOFI else DataFormat.BFLOAT16
        wt, b = _stored_weights(raw_w, raw_b, weights_fmt, True)
        args = (x, wt, b, (1, 1), (1, 1, 1, 1), (1, 1), groups, fidelity, True, DataFormat.BFLOAT16, l1_acc)
        got, want = conv2d_device(*args, relu=True, bf16=True), conv2d_device_reference(*args, relu=True)
        assert bool(within_one_bf16_ulp(got, want).all()), (fidelity, l1_acc)


@needs_bf16_convs
def test_bf16_path_steps_aside_for_what_it_does_not_model() -> None:
    """fp32 results, bf16 destinations and float32 weights (not bf16 values) run the fp32 path, bit for bit."""
    geometry = GEOMETRIES[1]
    x, raw_w, raw_b = _conv_case(geometry)
    stride, padding, dilation = geometry[6:]
    fp32_w = raw_w * (1 + 2.0**-12)  # not a bf16 value
    for w, fp32_acc, out_fmt in ((raw_w, True, DataFormat.FLOAT32), (raw_w, False, DataFormat.BFLOAT16),
                                 (fp32_w, True, DataFormat.BFLOAT16)):
        args = (x, w, raw_b, stride, padding, dilation, 1, MathFidelity.HIFI4, fp32_acc, out_fmt, True)
        want = conv2d_device_reference(*args)
        assert same_bits(conv2d_device(*args, bf16=True, keep_bf16=True), want), (fp32_acc, out_fmt)


def test_bf16_path_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    from spc.emulator import numerics

    monkeypatch.setenv(BF16_CONV_ENV, "0")
    assert not bf16_convs()
    monkeypatch.setenv(BF16_CONV_ENV, "1")
    assert bf16_convs() is bf16_convs_available()
    monkeypatch.delenv(BF16_CONV_ENV)
    assert bf16_convs() is (bf16_convs_available() and numerics._cpu_dots_bf16())


def _topk_case(x: torch.Tensor, k: int, largest: bool) -> None:
    from spc.emulator.device import topk, topk_by_sort

    a = {"dim": -1, "k": k, "largest": largest}
    for got, want in zip(topk([x], {}, a), topk_by_sort([x], {}, a)):
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
    from spc.emulator.device import max_pool2d, max_pool2d_of_stored

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


def test_every_preset_runs_the_reference_bits(preset_plans: dict[str, Path], images: dict[str, Path],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call's result, not only the outputs (``fast`` with the fused kernels, as their
    reference functions run here too), on the fp32 conv path."""
    from spc.plan.io import read_plan
    from spc.runtime.emu import EmuProgram
    from spc.runtime.host import run_host
    from spc.runtime.inputs import load_input
    from tests.conftest import SMALL

    monkeypatch.setenv(BF16_CONV_ENV, "0")
    for name, path in preset_plans.items():
        plan = read_plan(path)
        p = plan.program
        fast, reference = EmuProgram(p, plan.weights), reference_program(p, plan.weights)
        every = list(dict.fromkeys(r for op in p.device_ops for r in op.results))
        for image in images.values():
            env = {p.inputs[0].name: load_input(image, [1, 3, *SMALL], DEFAULT_IMAGE)}
            run_host(p.host_pre, env, plan.weights)
            device_in = {t.name: t.layout.to_device(env[t.name]) for t in p.device_inputs}
            got, want = fast.run(device_in, every), reference.run(device_in, every)
            for tensor in every:
                g, w = np.ascontiguousarray(got[tensor]), np.ascontiguousarray(want[tensor])
                assert g.dtype == w.dtype and g.shape == w.shape, (name, image.name, tensor)
                assert np.array_equal(g.view(np.uint8), w.view(np.uint8)), (name, image.name, tensor)


# What the bf16 conv path may change in a frame at 120x160 (docs/precision.md), against the fp32
# path's frame on the same image: the keypoints the two share (at least this share of those
# either finds: a score that moves by an ulp can win or lose an NMS tie), and, at the shared
# keypoints and over the dense maps, scores and descriptors (unit vectors) within these.
BF16_FRAME_BOUND = {"shared_keypoints": 0.8, "scores": 0.02, "descriptors": 0.02, "score_map": 0.02,
                    "descriptor_map": 0.02}


def _frame_difference(a, b) -> dict[str, float]:
    """How far frame ``b`` (a RunResult) is from ``a``, in BF16_FRAME_BOUND's terms."""
    def found(r) -> dict[tuple[float, ...], int]:
        keep = r.outputs["mask"][0].astype(bool)
        return {tuple(k): i for i, k in enumerate(r.outputs["keypoints"][0].tolist()) if keep[i]}

    fa, fb = found(a), found(b)
    shared = fa.keys() & fb.keys()
    out = {"shared_keypoints": len(shared) / max(len(fa.keys() | fb.keys()), 1)}
    for name in ("scores", "descriptors"):
        va, vb = a.outputs[name][0], b.outputs[name][0]
        out[name] = max((float(np.abs(va[fa[k]] - vb[fb[k]]).max()) for k in shared), default=0.0)
    for role in ("score_map", "descriptor_map"):
        out[role] = float(np.abs(a.dense[role].astype(np.float64) - b.dense[role]).max())
    return out


@needs_bf16_convs
def test_bf16_path_frames_are_within_the_bound(preset_plans: dict[str, Path], images: dict[str, Path],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Every preset on the three sample images: the bf16 path's frames against the fp32 path's
    (which the test above holds to the reference), within BF16_FRAME_BOUND; and the bf16 path is
    deterministic: a second run, and the calls run one by one on float32 tensors (as the
    precision search resumes them, EmuProgram.resume), give the same bytes."""
    from spc.plan.io import read_plan
    from spc.runtime.emu import EmuProgram
    from spc.runtime.host import run_host
    from spc.runtime.inputs import load_input
    from spc.runtime.runner import Runner
    from tests.conftest import SMALL

    for name, path in preset_plans.items():
        plan = read_plan(path)
        inputs = {image: load_input(file, [1, 3, *SMALL], DEFAULT_IMAGE) for image, file in images.items()}
        frames = {}
        for setting in ("0", "1"):
            monkeypatch.setenv(BF16_CONV_ENV, setting)
            with Runner(plan) as runner:
                frames[setting] = {image: runner.run(x, dense=True) for image, x in inputs.items()}
        for image in inputs:
            got = _frame_difference(frames["0"][image], frames["1"][image])
            assert got["shared_keypoints"] >= BF16_FRAME_BOUND["shared_keypoints"], (name, image, got)
            for key, bound in BF16_FRAME_BOUND.items():
                if key != "shared_keypoints":
                    assert got[key] <= bound, (name, image, key, got)

        p = plan.program
        program = EmuProgram(p, plan.weights)
        every = list(dict.fromkeys(r for op in p.device_ops for r in op.results))
        env = {p.inputs[0].name: inputs["astronaut"]}
        run_host(p.host_pre, env, plan.weights)
        device_in = {t.name: t.layout.to_device(env[t.name]) for t in p.device_inputs}
        first, second = program.run(device_in, every), program.run(device_in, every)
        resumed = program.resume(program.environment(device_in), {})
        for tensor in every:
            want = np.ascontiguousarray(first[tensor]).view(np.uint8)
            assert np.array_equal(np.ascontiguousarray(second[tensor]).view(np.uint8), want), (name, tensor)
            assert np.array_equal(np.ascontiguousarray(resumed[tensor].numpy()).view(np.uint8), want), (name, tensor)
