"""The L1 model and the memory-configuration pass against ttnn's real allocator (mock p150).

Both directions: configurations the model accepts allocate there, with circular buffers equal to
the model's to the byte and tensors within 1.5 %; configurations it rejects, forced with
--memory-config, are refused there, at that block. Runs scripts/l1_agreement.py in the ttnn
environment (`make mock-env`); see docs/memory.md.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from spc.compiler import compile_onnx
from spc.ttnn.memory import MemoryOverrides
from tests.test_ttnn_mock import ROOT

SIZED = ("conv2d", "max_pool2d")


def agreement(python: str, plan: Path) -> list[dict]:
    out = plan.with_suffix(".json")
    done = subprocess.run([python, str(ROOT / "scripts" / "l1_agreement.py"), str(plan), "--json", str(out)],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text())


def compiled(exports, size: tuple[int, int], tmp_path: Path, *overrides: str) -> Path:
    plan = tmp_path / ("forced.ttplan" if overrides else "chosen.ttplan")
    compile_onnx(exports(*size), plan, memory=MemoryOverrides.from_cli(overrides))
    return plan


@pytest.mark.parametrize("size", [(480, 640), (720, 1280)], ids=["480x640", "720x1280"])
def test_chosen_plans_allocate_as_the_model_says(ttnn_python: str, exports, size, tmp_path: Path) -> None:
    rows = agreement(ttnn_python, compiled(exports, size, tmp_path))
    assert all(r["ttnn_fits"] and r["model_fits"] for r in rows), [r for r in rows if not r["ttnn_fits"]]
    sized = [r for r in rows if r["op"] in SIZED]
    assert len(sized) >= 17  # 12 convs, 3 encoder pools, NMS window maxima
    for r in sized:
        assert r["model_cb"] == r["ttnn_cb"], r
        assert abs(r["model_l1"] - r["ttnn_l1"]) <= 0.015 * r["ttnn_l1"], r


# configurations the model rejects, each forced on a block: ttnn must refuse that very block
REJECTED = [
    ((480, 640), "encoder.conv_blocks.0.conv_a=l1"),  # whole-shard activation blocks
    ((480, 640), "encoder.conv_blocks.0.conv_b=dram:height=2"),  # too few slices
    ((480, 640), "encoder.conv_blocks.0.conv_b=dram:width=2"),
    ((720, 1280), "encoder.conv_blocks.2.conv_b=l1"),  # the clash the default configuration hit
    ((720, 1280), "node_max_pool2d=l1"),
]


@pytest.mark.parametrize(("size", "override"), REJECTED, ids=[o for _, o in REJECTED])
def test_rejected_configurations_fail_on_the_device(ttnn_python: str, exports, size, override: str,
                                                    tmp_path: Path) -> None:
    block = override.split("=")[0]
    rows = agreement(ttnn_python, compiled(exports, size, tmp_path, override))
    last = rows[-1]
    assert last["block"] == block and not last["model_fits"] and not last["ttnn_fits"], last
    # ttnn's three ways of saying it: CBs reach L1 tensors, CBs pass the top of L1, no room for a tensor
    assert any(m in last["error"] for m in ("clash with L1 buffers", "beyond max L1 size", "Out of Memory")), last


def test_forced_configurations_the_model_accepts_allocate(ttnn_python: str, exports, tmp_path: Path) -> None:
    forced = ("encoder.conv_blocks.0.conv_b=dram:height=4", "encoder.conv_blocks.1.conv_a=l1:abh=4",
              "node_max_pool2d_1=dram:width=3", "encoder.conv_blocks.3.*=dram:height=2", "nms=dram:height=3")
    rows = agreement(ttnn_python, compiled(exports, (480, 640), tmp_path, *forced))
    assert all(r["ttnn_fits"] and r["model_fits"] for r in rows)
    for r in rows:
        if r["op"] in SIZED:
            assert r["model_cb"] == r["ttnn_cb"], r


def test_spc_run_reports_a_shard_too_large_in_one_line(ttnn_python: str, exports, tmp_path: Path,
                                                       images: dict[str, Path]) -> None:
    plan = compiled(exports, (480, 640), tmp_path, "encoder.conv_blocks.0.conv_a=l1")
    out = tmp_path / "never.npz"
    done = subprocess.run([ttnn_python, "-m", "spc.cli", "run", str(plan), str(images["camera"]), "-o", str(out),
                           "--backend", "ttnn-mock"], capture_output=True, text=True, check=False, cwd=ROOT)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and not out.exists()
    assert last.startswith("spc: error: ttnn rejected ttnn.conv2d for block encoder.conv_blocks.0.conv_a:")
    assert "clash with L1 buffers" in last


def test_a_batch_of_four_runs_as_the_model_says(ttnn_python: str, exports, tmp_path: Path,
                                                images: dict[str, Path]) -> None:
    """`spc compile --batch 4` at 240x320: every call allocates on the mock as the model says
    (before batches were modelled, ttnn refused its second conv: docs/memory.md, "Batches"), and
    `spc run` on the mock runs it with no ttnn error."""
    plan = tmp_path / "batch4.ttplan"
    compile_onnx(exports(240, 320), plan, batch=4)
    rows = agreement(ttnn_python, plan)
    assert all(r["ttnn_fits"] and r["model_fits"] for r in rows), [r for r in rows if not r["ttnn_fits"]]
    sized = [r for r in rows if r["op"] in SIZED]
    assert len(sized) >= 12 + 3 + 4 * 5  # the encoder and heads once, each image's NMS maxima
    for r in sized:
        assert r["model_cb"] == r["ttnn_cb"], r
        assert abs(r["model_l1"] - r["ttnn_l1"]) <= 0.015 * r["ttnn_l1"], r
    out = tmp_path / "out"
    done = subprocess.run([ttnn_python, "-m", "spc.cli", "run", str(plan), str(images["camera"]), str(images["coffee"]),
                           "-o", str(out), "--backend", "ttnn-mock"], capture_output=True, text=True, check=False,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "error" not in done.stderr.lower(), done.stderr[-2000:]
