"""spc inspect and targets: per-call report and per-frame totals of a plan."""

from __future__ import annotations

import json
from pathlib import Path

from spc.plan.io import read_plan
from spc.ttnn.targets import TARGETS
from tests.conftest import spc


def test_inspect_reports_calls_and_frame_totals(small_onnx: Path, small_plan: Path, tmp_path: Path) -> None:
    from spc.compiler import compile_onnx

    dense = tmp_path / "dense.ttplan"
    compile_onnx(small_onnx, dense, dense=True)
    code, out, err = spc("inspect", dense, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert len(report["calls"]) == len(read_plan(dense).program.device_ops) == 50  # 45, and 5 packing them
    assert report["h2d_bytes"] == 120 * 160 * 2  # one bf16 grey channel
    # NMS map (1 channel) and descriptor map (256 channels at 1/8 resolution), bf16, read as one tensor
    assert report["d2h_bytes"] == (120 * 160 + 15 * 20 * 256) * 2 and report["throughput"]["readbacks"] == 1
    # the default plan reads back 160 keypoint slots side by side in float32 (the positions are not
    # exact in bf16): score, position, 256 values
    code, out, err = spc("inspect", small_plan, "--json")
    compact = json.loads(out)
    assert compact["d2h_bytes"] == 160 * (1 + 1 + 256) * 4 < report["d2h_bytes"]
    assert compact["throughput"]["readbacks"] == 1
    assert all(c["headroom"] >= 0 for c in compact["calls"]) and max(c["l1_peak"] for c in compact["calls"]) > 0
    assert abs(sum(c["share"] for c in report["calls"]) - 1.0) < 1e-9
    pools = [c for c in report["calls"] if c["op"] == "ttnn.max_pool2d"]
    assert pools[0]["values"] == 60 * 80 * 64  # a 2x2 pool quarters its input
    assert report["target"] == "p150" and report["precision"] == "accurate"
    code, out, _ = spc("inspect", small_plan)
    assert code == 0 and "device-to-host per frame" in out


def test_targets_change_the_prediction(small_onnx: Path, tmp_path: Path) -> None:
    times = {}
    for name in ("p150", "n150"):
        plan = tmp_path / f"{name}.ttplan"
        code, _, err = spc("compile", small_onnx, "-o", plan, "--target", name)
        assert code == 0, err
        manifest = read_plan(plan).manifest
        assert manifest["target"] == name
        times[name] = manifest["predicted_device_ms"]
    assert times["n150"] > times["p150"]  # 64 cores at 1 GHz against 110 at 1.35 GHz
    assert TARGETS["p150"].cores == 110 and TARGETS["n150"].cores == 64
    code, _, err = spc("compile", small_onnx, "-o", tmp_path / "x.ttplan", "--target", "n999")
    assert code == 2 and "n999" in err  # click refuses a target it does not list
