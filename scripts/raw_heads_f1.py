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
            x = load_input(f, shape)
            semi, desc = sess.run(None, {sess.get_inputs()[0].name: x})
            got = model.run(x)
            a = keypoint_agreement(got.keypoints, got.scores, got.descriptors, *standard_keypoints(semi, desc, 8))
            f1s.append(a.f1)
            print(f"{f.name}: {len(got.keypoints)} keypoints, F1 {a.f1:.3f}, cosine {a.descriptor_cosine:.4f}")
    print(f"{args.export}: F1 median {statistics.median(f1s):.3f} (min {min(f1s):.3f})")
    return 0 if statistics.median(f1s) >= 0.97 else 1


if __name__ == "__main__":
    sys.exit(main())
