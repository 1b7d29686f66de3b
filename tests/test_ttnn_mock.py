"""The plan's ttnn program run by the real ttnn 0.81.1 library on a mock Blackhole p150.

Values read back are zeros (nothing executes); what is checked is that ttnn accepts every call:
arguments, layouts, memory configurations, L1 allocation and circular buffers. The ttnn
environment comes from `make mock-env` (part of `make test`); without it these tests fail,
they do not skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spc.lowering.plan import read_plan, write_plan

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ttnn_python() -> str:
    python = os.environ.get("SPC_TTNN_PYTHON") or str(ROOT / ".venv-ttnn" / "bin" / "python")
    if not Path(python).exists():
        pytest.fail("no ttnn environment: run `make mock-env` (the README's test command does)")
    return python


def run(python: str, *args: object) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "spc.cli", *map(str, args)], capture_output=True, text=True, check=False,
                          cwd=ROOT)


def test_plan_runs_on_the_mock_p150(ttnn_python: str, small_plan: Path, images: dict[str, Path],
                                    tmp_path: Path) -> None:
    out = tmp_path / "mock.npz"
    done = run(ttnn_python, "run", small_plan, images["camera"], "-o", out, "--dense", "--backend", "ttnn-mock")
    assert done.returncode == 0, done.stderr
    got = np.load(out)
    assert got["score_map"].shape == (1, 120, 160) and got["descriptor_map"].shape == (1, 256, 15, 20)
    assert not got["score_map"].any()  # mock device: nothing executes


@pytest.mark.parametrize("size", [(240, 320), (480, 640)], ids=["240x320", "480x640"])
@pytest.mark.parametrize("preset", ["accurate", "balanced", "fast"])
def test_every_preset_at_real_sizes(ttnn_python: str, exports, size: tuple[int, int], preset: str,
                                    images: dict[str, Path], tmp_path: Path) -> None:
    """720x1280 is not here: at the default HEIGHT_SHARDED configuration the circular buffers of
    encoder.conv_blocks.2.conv_b clash with L1 buffers there; choosing memory configurations per
    block is the memory-planning pass's job."""
    from spc.compiler import compile_onnx
    from spc.ir.precision import PrecisionPlan

    plan = tmp_path / f"{preset}.ttplan"
    compile_onnx(exports(*size), plan, precision=PrecisionPlan(preset))
    done = run(ttnn_python, "run", plan, images["camera"], "-o", tmp_path / "out.npz", "--backend", "ttnn-mock")
    assert done.returncode == 0, done.stderr


def test_main_interpreter_hands_over_to_the_ttnn_one(ttnn_python: str, small_plan: Path, images: dict[str, Path],
                                                     tmp_path: Path) -> None:
    out = tmp_path / "mock.npz"
    done = run(sys.executable, "run", small_plan, images["camera"], "-o", out, "--backend", "ttnn-mock")
    assert done.returncode == 0, done.stderr
    assert out.exists()


def test_a_call_ttnn_rejects_fails_in_one_line(ttnn_python: str, small_plan: Path, images: dict[str, Path],
                                               tmp_path: Path) -> None:
    plan = read_plan(small_plan)
    first = plan.program.device_ops[0]
    first.args["in_channels"] = 3  # the image has 1 channel: ttnn's own checks must refuse it
    broken = tmp_path / "broken.ttplan"
    manifest = {k: v for k, v in plan.manifest.items() if k not in ("members", "format", "format_version")}
    write_plan(broken, plan.program, plan.weights, plan.ir_text, manifest)
    out = tmp_path / "never.npz"
    done = run(ttnn_python, "run", broken, images["camera"], "-o", out, "--backend", "ttnn-mock")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    assert lines[-1].startswith("spc: error: ttnn rejected ttnn.conv2d for block encoder.conv_blocks.0.conv_a:")
    assert not out.exists()
