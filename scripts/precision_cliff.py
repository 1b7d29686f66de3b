"""The precision cliff of SuperPoint in the emulator, as a markdown table.

    .venv/bin/python scripts/precision_cliff.py                 # 480x640, six natural images

Each row compiles the same ONNX with one precision plan (ttnn/precision.py), runs `spc check`
against onnxruntime fp32 on scikit-image's natural images, and reports the worst score and
descriptor PCC, the keypoint F1 (median and min) and the plan's predicted device time
(memory/cost.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from spc.ttnn.precision import PrecisionPlan

CONFIGS: list[tuple[str, PrecisionPlan]] = [
    ("LoFi + bfp8 weights everywhere (`fast`)", PrecisionPlan("fast")),
    ("bfp8 encoder weights", PrecisionPlan("accurate").with_rule("encoder.*", weights_dtype="bfloat8_b")),
    ("LoFi encoder", PrecisionPlan("accurate").with_rule("encoder.*", math_fidelity="LoFi")),
    ("HiFi4 + fp32 DST, no L1 acc", PrecisionPlan("accurate").with_rule("*", packer_l1_acc=False)),
    ("`balanced`: HiFi2 + fp32 DST + L1 acc", PrecisionPlan("balanced")),
    ("`accurate`: HiFi4 + fp32 DST + L1 acc", PrecisionPlan("accurate")),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="480x640")
    ap.add_argument("--work", type=Path, default=Path("bench-out"))
    ap.add_argument("--with-auto", action="store_true",
                    help="also `--precision auto` (runs the search on the shipped calibration images first)")
    ap.add_argument("--with-bf16-dest", action="store_true",
                    help="also ttnn's conv default (bf16 DST): slow to emulate (every 16-K rewrite of DST)")
    args = ap.parse_args()
    configs = list(CONFIGS)
    if args.with_bf16_dest:
        configs.insert(3, ("ttnn's conv default: HiFi4, bf16 DST, no L1 acc",
                           PrecisionPlan("accurate").with_rule("*", fp32_dest_acc_en=False, packer_l1_acc=False)))

    from evalset import evaluation_images, exported

    from spc.compiler import compile_onnx
    from spc.plan.io import read_plan
    from spc.tools.check import check_files

    h, w = (int(v) for v in args.size.split("x"))
    src = exported(args.work, h, w)
    files = evaluation_images(args.work)
    if args.with_auto:
        from spc.options import AutoPrecision

        found = compile_onnx(src, args.work / "cliff_auto.ttplan", auto=AutoPrecision(log=lambda line: None))
        chosen = read_plan(found.plan).manifest["precision_search"]["chosen"]
        configs.append(("`auto` (searched on tuning/calibration/)", PrecisionPlan.from_description(chosen)))
    print(f"{h}x{w}, {len(files)} images, against onnxruntime fp32\n")
    print("| precision | min score PCC | min descriptor PCC | F1 median (min) | predicted device ms | emu s/frame |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, plan in configs:
        plan_path = args.work / "cliff.ttplan"
        compile_onnx(src, plan_path, precision=plan)
        loaded = read_plan(plan_path)
        t0 = time.perf_counter()
        reports = check_files(loaded, plan_path, files, src, "emu")
        per_frame = (time.perf_counter() - t0) / len(files)
        f1 = [r.f1 for r in reports]
        print(f"| {label} | {min(r.score_pcc for r in reports):.4f} | {min(r.descriptor_pcc for r in reports):.4f} "
              f"| {statistics.median(f1):.3f} ({min(f1):.3f}) | {loaded.manifest['predicted_device_ms']:.3f} "
              f"| {per_frame:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
