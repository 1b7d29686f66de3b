"""SuperPoint from Flax through jax2onnx, through spc: compile, run, keypoints against onnxruntime.

    make corpus-jax         # .venv-jax (jax, flax, jax2onnx), then this at 480x640

The Flax model (tests/corpus/jax_superpoint.py) is built and exported in ``.venv-jax`` (JAX pins
its own numpy and ml_dtypes); spc compiles the export, runs it on the emu backend, and compares
keypoints with onnxruntime on the same ONNX: top 500 by score, 2 px, one to one
(tuning/metrics.py), and the matched descriptors' cosine. The export's keypoints are fixed K,
(x, y) pixels, so no role of spc's is needed to read them.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from evalset import corpus_options, fixed_k_through_spc

    ap = corpus_options(__doc__, ROOT)
    ap.add_argument("--jax-python", default=str(ROOT / ".venv-jax" / "bin" / "python"))
    ap.add_argument("--k", type=int, default=1024, help="the export's fixed keypoint count")
    args = ap.parse_args()
    return fixed_k_through_spc(args, args.jax_python, ROOT / "tests/corpus/jax_superpoint.py",
                               f"jax2onnx_flax_k{args.k}")


if __name__ == "__main__":
    sys.exit(main())
