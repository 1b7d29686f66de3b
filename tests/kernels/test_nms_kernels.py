"""The NMS kernels: TT-Lang in tt-lang-sim against the references, bit for bit; the references
against the stock calls they replace (emulated plans with and without kernels); the plan with
kernels smaller; and on the mock p150, the kernels' composed calls."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spc.compiler import compile_onnx
from spc.plan.io import read_plan
from spc.plan.program import DEFAULT_IMAGE
from spc.runtime.runner import Runner
from tests.test_ttnn_mock import ROOT


def test_tt_lang_kernels_match_their_references_exactly() -> None:
    # its own process: the simulator rebinds torch.bfloat16 for the whole process
    done = subprocess.run([sys.executable, "-m", "spc.emulator.kernel_sim", "--json"], capture_output=True, text=True,
                          check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    kernels = {r["kernel"] for r in results}
    assert kernels == {"nms_select", "nms_suppress", "nms_admit", "window_max_select", "keypoint_corners",
                       "descriptor_blend"}
    assert {r["input"] for r in results} == {"random 64x96", "natural 64x96", "random 120x160", "natural 120x160",
                                             "positions 480x640", "positions 120x160", "random K=64",
                                             "natural K=256"}
    assert all(r["exact"] for r in results), [r for r in results if not r["exact"]]


@pytest.fixture(scope="module")
def plans(small_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("kernels")
    out = {}
    for kernels in (False, True):
        for single in (False, True):
            path = folder / f"k{int(kernels)}_s{int(single)}.ttplan"
            compile_onnx(small_onnx, path, kernels=kernels, nms_single_pass=single)
            out[f"{'on' if kernels else 'off'}{'_single' if single else ''}"] = path
    return out


def test_kernels_give_the_same_outputs_with_fewer_calls(plans: dict[str, Path], images: dict[str, Path]) -> None:
    from spc.runtime.inputs import load_input
    from spc.tools.inspect import plan_report

    x = load_input(images["astronaut"], [1, 3, 120, 160], DEFAULT_IMAGE)
    # NMS: 8 element-wise calls fewer (2 rounds), 1 (single pass); keypoint read-back: 28 + 20
    for suffix, saved in (("", 8 + 28 + 20), ("_single", 1 + 28 + 20)):
        off, on = read_plan(plans["off" + suffix]), read_plan(plans["on" + suffix])
        with Runner(off) as a, Runner(on) as b:
            want, got = a.run(x, dense=True), b.run(x, dense=True)
        for name in want.outputs:
            np.testing.assert_array_equal(got.outputs[name], want.outputs[name])
        np.testing.assert_array_equal(got.dense["nms_map"], want.dense["nms_map"])
        r_off, r_on = plan_report(off), plan_report(on)
        assert len(r_off.calls) - len(r_on.calls) == saved
        assert any(c.op.startswith("kernel nms_") for c in r_on.calls)
        assert any(c.op == "kernel keypoint_corners" for c in r_on.calls)
        # the blend takes the gathered bfloat16 descriptors and stores bfloat16: 5 typecasts fewer
        assert r_off.layout_conversions - r_on.layout_conversions == 5
        assert not any(c.op.startswith("kernel") for c in r_off.calls)


def test_the_mock_p150_runs_the_kernels_composed(ttnn_python: str, plans: dict[str, Path],
                                                 images: dict[str, Path], tmp_path: Path) -> None:
    done = subprocess.run([ttnn_python, "-m", "spc.cli", "run", str(plans["on"]), str(images["camera"]), "-o",
                           str(tmp_path / "k.npz"), "--backend", "ttnn-mock"], capture_output=True, text=True,
                          check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if "kernels run as their composed ttnn calls" in line]
    assert len(notes) == 1  # said once


def test_keypoint_corners_reference_is_its_composed_calls() -> None:
    """The emulator runs the kernel's reference when kernels are on and the stock calls when off:
    they must agree bit for bit (kernels/keypoints.py)."""
    import torch

    from spc.emulator.device import EMULATIONS
    from spc.kernels import KERNELS
    from spc.plan.program import TtOp

    q = {"inner": 632, "border": 4, "wc": 80, "hc": 60, "half_cell": 3.5, "sx": 79 / 635.5, "sy": 59 / 475.5}
    p = torch.arange(0, 472 * 632, 37, dtype=torch.float32)[None]
    outs = [f"c{i}" for i in range(8)]
    env = {"p": p}
    for step in KERNELS["keypoint_corners"].composed(["p"], outs, q):
        op = TtOp(**step)
        env[op.output] = EMULATIONS[op.op]([env[i] for i in op.inputs], {}, op.args)
    for got, name in zip(KERNELS["keypoint_corners"].reference(p, **q), outs):
        assert torch.equal(got, env[name]), name


def test_kernels_read_the_tensors_a_dram_sliced_nms_renames(small_onnx: Path, images: dict[str, Path],
                                                             tmp_path: Path) -> None:
    """A DRAM-sliced NMS pool's result is reshaped under a new name (memory/planner.py); the kernel
    that reads it reads the new name in its composed calls too, so the plan verifies (1080x1920
    plans with --kernels on were refused so), and gives the plan without kernels' outputs."""
    from spc.runtime.inputs import load_input
    from spc.ttnn.memory import MemoryOverrides

    sliced = MemoryOverrides.from_cli(["nms=dram:width=2"])
    for kernels in (False, True):
        compile_onnx(small_onnx, tmp_path / f"{kernels}.ttplan", kernels=kernels, memory=sliced)
    off, on = read_plan(tmp_path / "False.ttplan"), read_plan(tmp_path / "True.ttplan")
    flat = {op.output for op in on.program.device_ops if op.output.endswith("/flat")}
    reads = [i for op in on.program.device_ops if op.op == "spc.kernel" for step in op.args["composed"]
             for i in step["inputs"]]
    assert flat and flat & set(reads)
    x = load_input(images["camera"], [1, 3, 120, 160], DEFAULT_IMAGE)
    with Runner(off) as a, Runner(on) as b:
        want, got = a.run(x, dense=True), b.run(x, dense=True)
    for name in want.outputs:
        np.testing.assert_array_equal(got.outputs[name], want.outputs[name])
