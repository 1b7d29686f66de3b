"""spc/ttnn/calls: each ttnn call defined once, and every part of it there (or, for the emulation,
in emulator/device.py under the same name); the two executable meanings of each element-wise,
reduction and movement call (numpy for the validation, torch for the emulator) agree."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from spc.emulator.device import EMULATIONS
from spc.plan.program import TtOp
from spc.ttnn.calls import CALLS, MEANINGS, Call, Ref, ShapeError, describe
from spc.ttnn.calls.definition import define
from spc.ttnn.calls.elementwise import BINARY, MASKS, UNARY
from spc.ttnn.formats import DataFormat

RNG = np.random.default_rng(11)
# no shape rule: where's result is its condition's shape (the runtime checks it), a kernel is
# checked against its own composition
UNSHAPED = {"ttnn.where", "spc.kernel"}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_call_is_defined_whole(name: str) -> None:
    d = CALLS[name]
    assert name in EMULATIONS, f"{name} has no emulation in emulator/device.py"
    assert (d.shape is None) == (name in UNSHAPED)
    if name == "spc.kernel":
        assert d.spell is d.meaning is d.golden is None
        return
    assert name in MEANINGS and d.spell is not None
    assert d.golden == name  # ttnn.get_golden_function(ttnn.<name>) is its reference
    assert d.inputs[0] <= d.inputs[1] and d.required <= set(d.args)


def test_a_call_is_defined_once() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        define("ttnn.relu", None, None, None)


def _domain(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Seeded float32 values where the function is defined and not near a pole."""
    if name in ("log", "sqrt", "rsqrt", "reciprocal"):
        return RNG.uniform(0.1, 4, shape).astype(np.float32)
    if name == "acosh":
        return RNG.uniform(1.1, 4, shape).astype(np.float32)
    if name in ("asin", "acos", "atanh"):
        return RNG.uniform(-0.9, 0.9, shape).astype(np.float32)
    if name == "tan":
        return RNG.uniform(-1.2, 1.2, shape).astype(np.float32)
    if name in ("round", "floor", "ceil", "sign"):  # away from the .5 ties and integers torch and numpy may split
        return (RNG.integers(-8, 8, shape) + RNG.uniform(0.1, 0.4, shape)).astype(np.float32)
    x = RNG.normal(0, 2, shape).astype(np.float32)
    if name in MASKS:  # ties, so that eq/ne/ge/le see equal values
        x = np.round(x)
    return x


def _both(name: str, ins: list[np.ndarray], args: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    want = np.asarray(MEANINGS[name](ins, {}, args))
    got = EMULATIONS[name]([torch.from_numpy(x.copy()) for x in ins], {}, args)
    return want, np.asarray(got.to(torch.float32))


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_meaning_and_emulation_agree(name: str) -> None:
    want, got = _both(f"ttnn.{name}", [_domain(name, (4, 64))], {})
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("scalar", [False, True])
def test_binary_meaning_and_emulation_agree(name: str, scalar: bool) -> None:
    x = _domain(name, (4, 64))
    if scalar:
        ins, args = [x], {"scalar": 1.0 if name in MASKS else 1.5}
    else:
        y = _domain(name, (1, 64))  # broadcast along the first axis
        if name == "divide":
            y = np.abs(y) + 0.5
        ins, args = [x, y], {}
    want, got = _both(f"ttnn.{name}", ins, args)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize(("name", "args", "inputs"), [
    ("ttnn.elu", {"alpha": 0.7}, 1), ("ttnn.celu", {"alpha": 1.3}, 1), ("ttnn.selu", {"scale": 1.05, "alpha": 1.67}, 1),
    ("ttnn.leaky_relu", {"negative_slope": 0.1}, 1), ("ttnn.pow", {"exponent": 2.0}, 1),
    ("ttnn.clamp", {"min": -1.0, "max": 0.5}, 1), ("ttnn.clamp", {"min": 0.0}, 1),
    ("ttnn.typecast", {"dtype": DataFormat.FLOAT32}, 1), ("ttnn.softmax", {"dim": -1}, 1),
    ("ttnn.sum", {"dim": -1, "keepdim": True}, 1), ("ttnn.mean", {"dim": [0, 1], "keepdim": False}, 1),
    ("ttnn.max", {"dim": 0, "keepdim": True}, 1), ("ttnn.min", {"dim": -1, "keepdim": False}, 1),
    ("ttnn.reshape", {"shape": [1, 4, 8, 8]}, 1), ("ttnn.permute", {"dims": [1, 0]}, 1),
    ("ttnn.transpose", {"dim1": 0, "dim2": 1}, 1), ("ttnn.slice", {"starts": [1, 0], "ends": [3, 64], "steps": [1, 2]}, 1),
    ("ttnn.concat", {"dim": 0}, 2), ("ttnn.pad", {"padding": [[0, 1], [2, 0]], "value": -1.0}, 1),
    ("ttnn.expand", {"output_shape": [3, 4, 64]}, 1), ("ttnn.repeat", {"repeat_dims": [2, 1]}, 1),
    ("ttnn.where", {"true_value": 1.0, "false_value": -2.0}, 1), ("ttnn.where", {}, 3),
    ("ttnn.matmul", {}, 2),
    *(("ttnn.upsample", {"batch_size": 2, "input_h": 2, "input_w": 4, "channels": 8, "scale_factor": s, "mode": m}, 1)
      for m in ("nearest", "bilinear") for s in ([2, 2], [3, 1])),
])
def test_meaning_and_emulation_agree(name: str, args: dict[str, Any], inputs: int) -> None:
    shapes = {"ttnn.matmul": [(4, 64), (64, 8)], "ttnn.upsample": [(2, 2, 4, 8)]}.get(name, [(4, 64)] * inputs)
    ins = [RNG.normal(0, 2, s).astype(np.float32) for s in shapes]
    if name == "ttnn.where":
        ins[0] = (ins[0] > 0).astype(np.float32)
    want, got = _both(name, ins, args)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)
    d = CALLS[name]
    if d.shape is not None:  # the shape rule counts what the meaning made
        assert d.shape([list(s) for s in shapes], args, {}) == want.size


def test_topk_meaning_and_emulation_agree_on_ties() -> None:
    row = np.round(RNG.normal(0, 2, (1, 1, 1, 300))).astype(np.float32)  # many ties
    for largest in (True, False):
        args = {"dim": -1, "k": 40, "largest": largest, "sorted": True}
        want = MEANINGS["ttnn.topk"]([row], {}, args)
        got = EMULATIONS["ttnn.topk"]([torch.from_numpy(row.copy())], {}, args)
        for w, g in zip(want, got):
            np.testing.assert_array_equal(np.asarray(g), w)


def test_a_shape_rule_names_what_is_wrong() -> None:
    with pytest.raises(ShapeError, match="do not broadcast"):
        CALLS["ttnn.add"].shape([[4, 3], [4, 5]], {}, {})
    with pytest.raises(ShapeError, match="reshapes 12 values"):
        CALLS["ttnn.reshape"].shape([[4, 3]], {"shape": [5]}, {})
    with pytest.raises(ShapeError, match="k = 9 of 8 values"):
        CALLS["ttnn.topk"].shape([[1, 8]], {"dim": -1, "k": 9}, {})


def test_a_spelling_is_the_call_on_its_inputs() -> None:
    op = TtOp("ttnn.add", ["a", "b"], "c", {}, {}, "n1")
    assert describe(op) == Call("ttnn.add", (Ref("a"), Ref("b")))
    op = TtOp("ttnn.topk", ["x"], "v", {"dim": -1, "k": 5, "largest": True, "sorted": True}, {}, "n2")
    assert describe(op) == Call("ttnn.topk", (Ref("x"), 5), {"dim": -1, "largest": True, "sorted": True})


def test_what_a_call_takes_of_l1() -> None:
    """The circular buffers the memory model counts for calls without a window model of their own."""
    assert CALLS["ttnn.add"].buffers({}, 2) == 16384 and CALLS["ttnn.add"].buffers({"scalar": 2.0}, 1) == 0
    assert CALLS["ttnn.topk"].buffers({"k": 1000}, 1) == 36864 + 576 * 1024  # k rounded up to 32
