"""SuperPoint from Flax through jax2onnx, through spc: compile, run, keypoints against onnxruntime.

    make corpus-jax         # .venv-jax (jax, flax, jax2onnx), then this at 480x640

The Flax model (tests/corpus/jax_superpoint.py) is built and exported in ``.venv-jax`` (JAX pins
its own numpy and ml_dtypes); spc compiles the export, runs it on the emu backend, and compares
keypoints with onnxruntime on the same ONNX: top 500 by score, 2 px, one to one
(tuning/metrics.py), and the matched descriptors' cosine. The export's keypoints are fixed K,
(x, y) pixels, so no role of spc's is needed to read them.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from evalset import IMAGES, corpus_options, evaluation_images, size_of

    ap = corpus_options(__doc__, ROOT)
    ap.add_argument("--jax-python", default=str(ROOT / ".venv-jax" / "bin" / "python"))
    ap.add_argument("--k", type=int, default=1024, help="the export's fixed keypoint count")
    args = ap.parse_args()
    import onnxruntime as ort
    from PIL import Image

    from spc.compiler import compile_onnx
    from spc.frontend.weights import demo_weights_path, load_state_file
    from spc.plan.io import read_plan
    from spc.runtime.runner import Runner
    from spc.tuning.metrics import keypoint_agreement

    h, w = size_of(args)
    weights = args.work / "demo_weights_hf.npz"
    np.savez(weights, **load_state_file(demo_weights_path()))
    src = args.work / f"jax2onnx_flax_k{args.k}_{h}x{w}.onnx"
    subprocess.run([args.jax_python, str(ROOT / "tests/corpus/jax_superpoint.py"), str(weights), str(src), str(h),
                    str(w), str(args.k)], check=True, capture_output=True)
    plan_path = src.with_suffix(".ttplan")
    t0 = time.perf_counter()
    result = compile_onnx(src, plan_path)
    seconds = time.perf_counter() - t0
    for note in result.notes:
        print(f"note: {note}")
    plan = read_plan(plan_path)
    sess = ort.InferenceSession(str(src))
    f1s, cos = [], []
    with Runner(plan) as runner:
        for f in evaluation_images(args.work, IMAGES):
            grey = np.asarray(Image.open(f).convert("L").resize((w, h)), np.float32) / 255
            x = grey.reshape(1, h, w, 1)
            ours = list(runner.run(x).outputs.values())
            ref = sess.run(None, {sess.get_inputs()[0].name: x})
            a = keypoint_agreement(ours[0].astype(np.float32), ours[1], ours[2], ref[0].astype(np.float32), ref[1],
                                   ref[2])
            f1s.append(a.f1)
            cos.append(a.descriptor_cosine)
            print(f"{f.name}: F1 {a.f1:.3f}, descriptor cosine {a.descriptor_cosine:.4f}")
    print(f"| jax2onnx_flax_k{args.k} | {plan.manifest['recognised']} | {plan.manifest['device_ops']} "
          f"| F1 {statistics.median(f1s):.3f} ({min(f1s):.3f}) | cosine min {min(cos):.4f} | compile {seconds:.1f} s |")
    return 0 if statistics.median(f1s) >= 0.97 and min(cos) >= 0.99 else 1


if __name__ == "__main__":
    sys.exit(main())
