"""Accuracy of compiled plans against onnxruntime, as markdown tables for docs/results.md.

    .venv/bin/python scripts/accuracy.py                       # 480x640, six natural images
    .venv/bin/python scripts/accuracy.py --size 240x320 --size 720x1280 --single-pass

For each size: export HF SuperPoint (demo weights), compile, run `spc check` on scikit-image's
camera, astronaut, coffee, chelsea, rocket and brick, and print one row per image.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", action="append", help="HxW (repeatable; default 480x640)")
    ap.add_argument("--single-pass", action="store_true", help="also measure --nms-single-pass at each size")
    ap.add_argument("--work", type=Path, default=Path("bench-out"))
    args = ap.parse_args()

    from evalset import evaluation_images, exported

    from spc.compiler import compile_onnx
    from spc.plan.io import read_plan
    from spc.tools.check import check_files

    files = evaluation_images(args.work)
    variants = [False, True] if args.single_pass else [False]
    for size in args.size or ["480x640"]:
        h, w = (int(v) for v in size.split("x"))
        src = exported(args.work, h, w)
        for single in variants:
            plan_path = args.work / f"superpoint_{h}x{w}{'_single' if single else ''}.ttplan"
            compile_onnx(src, plan_path, nms_single_pass=single)
            reports = check_files(read_plan(plan_path), plan_path, files, src, "emu")
            title = f"{h}x{w}" + (", single-pass NMS (--nms-single-pass)" if single else "")
            print(f"\n{title}\n")
            print("| image | score PCC | descriptor PCC | precision | recall | F1 | desc. cosine "
                  "| keypoints (spc/ORT) |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|")
            for r in reports:
                print(f"| {r.input} | {r.score_pcc:.4f} | {r.descriptor_pcc:.4f} | {r.precision:.3f} | {r.recall:.3f} "
                      f"| {r.f1:.3f} | {r.descriptor_cosine:.4f} | {r.keypoints}/{r.ref_keypoints} |")
            f1 = [r.f1 for r in reports]
            print(f"\nmin score PCC {min(r.score_pcc for r in reports):.4f}, "
                  f"min descriptor PCC {min(r.descriptor_pcc for r in reports):.4f}, "
                  f"F1 median {statistics.median(f1):.3f} (min {min(f1):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
