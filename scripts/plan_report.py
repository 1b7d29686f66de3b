"""What spc plans for each size and chip, beside the hand-written port's measured figures.

    .venv/bin/python scripts/plan_report.py                       # 240x320 .. 1080x1920, p150 and n150
    .venv/bin/python scripts/plan_report.py --sizes 480x640 --targets p150

For each plan (accurate precision; exports made once into --work): how many blocks run from L1
and how many DRAM-sliced, the fullest core's L1 against the chip's, the predicted device time
(memory/cost.py) beside the matrix-engine floor (convolution multiply-adds at the blocks'
fidelity on every core, nothing else) and the hand port's 2.81 ms (p150, 480x640), and bytes
per frame each way, compact read-back against dense. Nothing here runs a device.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HAND_PORT_MS = 2.81  # seed-tt-superpoint model card: traced device forward, p150, 480x640
HAND_PORT_D2H_MB = 1.8


def floor_ms(program, target) -> float:
    from spc.plan.program import numel

    seconds = 0.0
    for op in program.device_ops:
        if op.op == "ttnn.conv2d":
            a = op.args
            kh, kw = a["kernel_size"]
            flops = 2.0 * numel(op.shape) * a["in_channels"] * kh * kw / a["groups"]
            seconds += flops * a["compute_config"].math_fidelity.phases / target.peak_flops_per_phase
    return seconds * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="240x320,480x640,720x1280,1080x1920")
    ap.add_argument("--targets", default="p150,n150")
    ap.add_argument("--work", type=Path, default=Path("bench-out"))
    args = ap.parse_args()

    from spc.compiler import compile_onnx
    from spc.frontend.export import export_onnx
    from spc.memory.residency import block_memory
    from spc.plan.io import read_plan
    from spc.tools.inspect import plan_report
    from spc.ttnn.targets import get_target

    args.work.mkdir(parents=True, exist_ok=True)
    print(f"{'size':>10} {'chip':>5} {'L1/DRAM blocks':>15} {'fullest core':>13} {'pred. ms':>9} {'floor ms':>9} "
          f"{'vs hand 2.81':>12} {'H2D MB':>7} {'D2H MB':>7} {'dense D2H':>9} {'calls':>6}")
    for size in args.sizes.split(","):
        h, w = (int(v) for v in size.split("x"))
        onnx = args.work / f"superpoint_{h}x{w}.onnx"
        if not onnx.exists():
            export_onnx(onnx, h, w)
        for name in args.targets.split(","):
            target = get_target(name)
            plan_path = args.work / f"plan_{h}x{w}_{name}.ttplan"
            compile_onnx(onnx, plan_path, target=name)
            dense_path = args.work / f"plan_{h}x{w}_{name}_dense.ttplan"
            compile_onnx(onnx, dense_path, target=name, dense=True)
            report, dense = plan_report(read_plan(plan_path)), plan_report(read_plan(dense_path))
            paths = [m.path.value for m in block_memory(read_plan(plan_path).program).values()]
            fullest = max(c.l1_peak for c in report.calls) / target.l1_budget_bytes
            floor = floor_ms(read_plan(plan_path).program, target)
            vs = f"{report.predicted_device_ms / HAND_PORT_MS:.2f}x" if (name, size) == ("p150", "480x640") else ""
            print(f"{size:>10} {name:>5} {paths.count('l1'):>7}/{paths.count('dram'):<7} {fullest:>12.0%} "
                  f"{report.predicted_device_ms:>9.3f} {floor:>9.3f} {vs:>12} {report.h2d_bytes / 1e6:>7.3f} "
                  f"{report.d2h_bytes / 1e6:>7.3f} {dense.d2h_bytes / 1e6:>9.3f} {len(report.calls):>6}")
    print(f"hand port (p150, 480x640, top-500 keypoints): {HAND_PORT_MS} ms device forward, "
          f"{HAND_PORT_D2H_MB} MB read back per frame")
    return 0


if __name__ == "__main__":
    sys.exit(main())
