"""The export corpus through spc: compile, `spc check` against onnxruntime, the mock p150.

    .venv/bin/python scripts/corpus_report.py                       # 480x640, six natural images
    .venv/bin/python scripts/corpus_report.py --size 120x160 --images 2 --no-mock

For each export of tests/corpus (docs/corpus.md): build it at the size, compile it, run `spc check`
on scikit-image's natural images (emu backend) and print one row: what fusions fired, device ops,
the share of multiply-adds on the device, keypoint F1 (median, min), score-map and descriptor PCC
(min), and whether every call ran on the mock p150 (`--no-mock` to skip). Keypoints are the
model's own outputs, or for a model returning raw heads, SuperPoint's standard extraction of its
logits on both sides (tuning/superpoint.py).
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="480x640", help="HxW")
    ap.add_argument("--images", type=int, default=6, help="how many of the six natural images")
    ap.add_argument("--only", action="append", help="export name (repeatable)")
    ap.add_argument("--no-mock", action="store_true", help="skip the mock p150 run")
    ap.add_argument("--work", type=Path, default=Path("bench-out/corpus"))
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    from evalset import IMAGES, evaluation_images

    from spc.compiler import compile_onnx
    from spc.plan.io import read_plan
    from spc.tools.check import check_files
    from tests.corpus.exports import CORPUS, build

    h, w = (int(v) for v in args.size.split("x"))
    args.work.mkdir(parents=True, exist_ok=True)
    files = evaluation_images(args.work, IMAGES[: args.images])
    python = ROOT / ".venv-ttnn" / "bin" / "python"
    print(f"corpus at {h}x{w}, {len(files)} image(s), emu backend against onnxruntime\n")
    print("| export | opset | recognised | ttnn calls | MACs on device | F1 median (min) | min score PCC "
          "| min desc PCC | mock p150 | compile s |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---|---:|")
    failed = 0
    for name, export in CORPUS.items():
        if args.only and name not in args.only:
            continue
        src = build(name, args.work, h, w)
        plan_path = args.work / f"{name}_{h}x{w}.ttplan"
        t0 = time.perf_counter()
        try:
            shape = [1, export.channels, h, w] if export.dynamic_axes else None  # --input-shape for a dynamic export
            result = compile_onnx(src, plan_path, input_shape=shape)
        except Exception as exc:  # a corpus export that does not compile is the finding
            failed += 1
            print(f"| {name} | {export.opset} | compile failed: {str(exc)[:120]} | | | | | | | |")
            continue
        seconds = time.perf_counter() - t0
        plan = read_plan(plan_path)
        macs = plan.manifest["macs"]
        share = macs["device"] / max(macs["device"] + macs["host"], 1)
        fired = ", ".join(r.split(":")[0].removeprefix("fuse-").removeprefix("insert-device-")
                          for r in plan.manifest["recognised"] if "not fired" not in r)
        reports = check_files(plan, plan_path, files, src, "emu")
        f1 = [r.f1 for r in reports if not math.isnan(r.f1)]
        f1_text = f"{statistics.median(f1):.3f} ({min(f1):.3f})" if f1 else "-"
        score = min((r.score_pcc for r in reports), default=math.nan)
        desc = min((r.descriptor_pcc for r in reports), default=math.nan)
        mock = "-"
        if not args.no_mock:
            done = subprocess.run([str(python), "-m", "spc.runtime.ttnn_mock.check_plans", str(plan_path)],
                                  capture_output=True, text=True, check=False, cwd=ROOT)
            mock = "ok" if done.returncode == 0 else "error: " + (done.stdout + done.stderr).strip()[-160:]
            failed += done.returncode != 0
        print(f"| {name} | {export.opset} | {fired} | {plan.manifest['device_ops']} | {100 * share:.2f} % "
              f"| {f1_text} | {score:.4f} | {desc:.4f} | {mock} | {seconds:.1f} |", flush=True)
        del result
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
