"""A float16-converted export three ways: onnxruntime's float16 run against its float32 source,
spc's plan against each, keypoint F1 on the six natural images (emu backend).

    .venv/bin/python scripts/fp16_slack.py superpoint_open_op17
    .venv/bin/python scripts/fp16_slack.py superpoint_open_op17 --precision-config blocks32.toml

The float16 model is made as corpus_derived.py makes it (onnxconverter-common's
``convert_float_to_float16(keep_io_types=True)`` in ``.venv-tf``). Where spc departs from both
by the same, the float16 conversion is not the cause: the device's own formats are.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from corpus_derived import TOOLS
    from evalset import IMAGES, corpus_options, evaluation_images, size_of

    ap = corpus_options(__doc__, ROOT)
    ap.add_argument("export", help="a tests/corpus export (e.g. superpoint_open_op17)")
    ap.add_argument("--precision-config", type=Path, help="spc compile's --precision-config")
    args = ap.parse_args()
    import onnxruntime as ort

    from spc.compiler import compile_onnx
    from spc.plan.io import read_plan
    from spc.plan.program import DEFAULT_IMAGE
    from spc.runtime.inputs import load_input
    from spc.runtime.runner import Runner, RunResult
    from spc.ttnn.precision import PrecisionPlan, load_precision_config
    from spc.tuning.comparison import compare
    from tests.corpus.exports import build

    h, w = size_of(args)
    m32 = build(args.export, args.work, h, w)
    m16 = args.work / f"{args.export}_fp16_{h}x{w}.onnx"
    subprocess.run([args.tf_python, "-c", TOOLS["fp16"], str(m32), str(m16)], check=True, capture_output=True)
    plan_path = m16.with_suffix(".ttplan")
    precision = load_precision_config(args.precision_config) if args.precision_config else PrecisionPlan()
    compile_onnx(m16, plan_path, precision=precision)
    plan = read_plan(plan_path)
    sessions = [ort.InferenceSession(str(m), providers=["CPUExecutionProvider"]) for m in (m16, m32)]
    shape = [int(d) for d in plan.program.inputs[0].shape]
    f1: dict[str, list[float]] = {"onnxruntime float16 against float32": [], "spc against onnxruntime float16": [],
                                  "spc against onnxruntime float32": []}
    with Runner(plan) as runner:
        for f in evaluation_images(args.work, IMAGES):
            x = load_input(f, shape, DEFAULT_IMAGE)
            o16, o32 = ({o.name: v for o, v in zip(s.get_outputs(), s.run(None, {s.get_inputs()[0].name: x}))}
                        for s in sessions)
            ours = runner.run(x)
            for key, got, want in zip(f1, (RunResult(o16, {}), ours, ours), (o32, o16, o32)):
                f1[key].append(compare(f.name, got, want, {}, plan.program.roles, shape[-1], shape[-2]).f1)
    for key, values in f1.items():
        print(f"{key}: keypoint F1 median {statistics.median(values):.3f} (min {min(values):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
