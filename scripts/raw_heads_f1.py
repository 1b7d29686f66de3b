"""A raw-heads export through the Python API: keypoints against onnxruntime + SuperPoint's standard extraction.

    .venv/bin/python scripts/raw_heads_f1.py            # MagicLeap's export, 480x640, the six natural images

``spc.compile(...).run(x)`` on each image's plan input, against onnxruntime on the same ONNX with
the same extraction (runtime/extraction.py); `spc run --format h5` and `--viz` take the same
keypoints (docs/outputs.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from evalset import IMAGES, evaluation_images

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--export", default="magicleap_legacy_op11")
    ap.add_argument("--work", type=Path, default=Path("bench-out/corpus"))
    args = ap.parse_args()
    import onnxruntime as ort

    import spc
    from spc.plan.program import DEFAULT_IMAGE
    from spc.runtime.extraction import standard_keypoints
    from spc.runtime.inputs import load_input
    from spc.tuning.metrics import keypoint_agreement
    from tests.corpus.exports import build

    args.work.mkdir(parents=True, exist_ok=True)
    src = build(args.export, args.work, 480, 640)
    sess = ort.InferenceSession(str(src))
    f1s = []
    with spc.compile(src) as model:
        shape = model.input_shape
        for f in evaluation_images(args.work, IMAGES):
            x = load_input(f, shape, DEFAULT_IMAGE)
            semi, desc = sess.run(None, {sess.get_inputs()[0].name: x})
            got = model.run(x)
            a = keypoint_agreement(got.keypoints, got.scores, got.descriptors, *standard_keypoints(semi, desc, 8))
            f1s.append(a.f1)
            print(f"{f.name}: {len(got.keypoints)} keypoints, F1 {a.f1:.3f}, cosine {a.descriptor_cosine:.4f}")
    print(f"{args.export}, Model.run: F1 median {statistics.median(f1s):.3f} (min {min(f1s):.3f})")
    # the same images through `spc run --format h5 --viz`: .npy inputs of the plan's shape, so the
    # h5's keypoints are in the plan's pixels, as the reference's
    import subprocess

    import h5py
    import numpy as np

    plan = args.work / f"{args.export}_raw.ttplan"
    subprocess.run([sys.executable, "-m", "spc.cli", "compile", str(src), "-o", str(plan), "--overwrite"],
                   check=True, capture_output=True)
    arrays = args.work / "raw_heads_inputs"
    arrays.mkdir(exist_ok=True)
    refs = {}
    for f in evaluation_images(args.work, IMAGES):
        x = load_input(f, shape, DEFAULT_IMAGE)
        np.save(arrays / f"{f.stem}.npy", x)
        refs[f"{f.stem}.npy"] = standard_keypoints(*sess.run(None, {sess.get_inputs()[0].name: x}), 8)
    h5 = args.work / "raw_heads.h5"
    h5.unlink(missing_ok=True)
    subprocess.run([sys.executable, "-m", "spc.cli", "run", str(plan), str(arrays), "--format", "h5", "-o", str(h5),
                    "--viz", str(args.work / "raw_heads_viz"), "--overwrite"], check=True, capture_output=True)
    h5_f1 = []
    with h5py.File(h5, "r") as fd:
        for name, want in refs.items():
            g = fd[name]
            h5_f1.append(keypoint_agreement(g["keypoints"][()], g["scores"][()], g["descriptors"][()].T, *want).f1)
    overlays = len(list((args.work / "raw_heads_viz").glob("*.png")))
    print(f"{args.export}, spc run --format h5: F1 median {statistics.median(h5_f1):.3f} (min {min(h5_f1):.3f}); "
          f"{overlays} overlays")
    return 0 if min(statistics.median(f1s), statistics.median(h5_f1)) >= 0.97 and overlays == len(refs) else 1


if __name__ == "__main__":
    sys.exit(main())
