"""The corpus as deployment tools leave it, through spc: simplified, float16, optimised, upgraded.

    make corpus-derived     # .venv-tf (onnxsim, onnxslim, onnxoptimizer, onnxconverter-common too), then this

Each row takes an export of tests/corpus at 480x640 and applies one tool the way its users call
it: onnxsim's ``simplify``, onnxslim's ``slim``, onnxoptimizer's ``optimize`` (its default passes),
onnxconverter-common's ``convert_float_to_float16(keep_io_types=True)``, onnxruntime's offline optimisation at the basic
level (``optimized_model_filepath``), onnx's version converter to opset 21, onnxruntime's static
quantization (``quantize_static``, QDQ, int8 weights per channel, uint8 activations, calibrated on
three scikit-image images outside the evaluation set). The tools that are not
spc's own dependencies run in ``.venv-tf``. Then: compile (with the validation), `spc check`
against onnxruntime on the same derived ONNX on the six natural images (emu backend).
A derived model onnxruntime itself refuses is reported as such, not compiled. For a quantized
model the last column is onnxruntime's own slack: its integer kernels (the default optimisation)
against the same graph run unoptimised (Q, DQ and float convolutions), keypoint F1 median.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TOOLS = {
    "onnxsim": "import onnx, onnxsim, sys; m, ok = onnxsim.simplify(onnx.load(sys.argv[1])); onnx.save(m, sys.argv[2])",
    "onnxslim": "import onnx, onnxslim, sys; onnx.save(onnxslim.slim(onnx.load(sys.argv[1])), sys.argv[2])",
    "onnxoptimizer": ("import onnx, onnxoptimizer, sys; "
                      "onnx.save(onnxoptimizer.optimize(onnx.load(sys.argv[1])), sys.argv[2])"),
    "fp16": ("import onnx, sys, warnings; warnings.simplefilter('ignore'); from onnxconverter_common import float16; "
             "onnx.save(float16.convert_float_to_float16(onnx.load(sys.argv[1]), keep_io_types=True), sys.argv[2])"),
}
ROWS = [("hf_dynamo_named", "onnxsim"), ("hf_dynamo_named", "onnxslim"), ("fixed_k_op20", "onnxsim"),
        ("magicleap_legacy_op11", "onnxslim"), ("magicleap_legacy_op11", "fp16"), ("magicleap_dynamo_op18", "fp16"),
        ("superpoint_open_op17", "fp16"), ("hf_dynamo_named", "fp16"), ("hf_dynamo_named", "ort-basic"),
        ("fixed_k_op20", "ort-basic"), ("hf_legacy", "opset21"), ("magicleap_dynamo_op18", "qdq"),
        ("magicleap_legacy_op13_3ch", "qdq"), ("superpoint_open_op17", "qdq"), ("hf_dynamo_named", "qdq"),
        ("hf_dynamo_named", "onnxoptimizer"), ("fixed_k_op20", "onnxoptimizer"),
        ("magicleap_legacy_op11", "onnxoptimizer")]
CALIBRATION = ("moon", "grass", "gravel")  # scikit-image's, not among evalset.IMAGES


def derive(src: Path, tool: str, out: Path, tf_python: str) -> None:
    if tool in TOOLS:
        subprocess.run([tf_python, "-c", TOOLS[tool], str(src), str(out)], check=True, capture_output=True)
    elif tool == "ort-basic":
        import onnxruntime as ort

        o = ort.SessionOptions()
        o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        o.optimized_model_filepath = str(out)
        ort.InferenceSession(str(src), o, providers=["CPUExecutionProvider"])
    elif tool == "qdq":
        quantize(src, out)
    elif tool == "opset21":
        import onnx
        from onnx import version_converter

        onnx.save(version_converter.convert_version(onnx.load(src), 21), out)


def quantize(src: Path, out: Path) -> None:
    import numpy as np
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from skimage import data, transform

    spec = onnx.load(src).graph.input[0]
    shape = [d.dim_value or 1 for d in spec.type.tensor_type.shape.dim]
    h, w = shape[-2], shape[-1]
    feeds = [{spec.name: np.broadcast_to(transform.resize(getattr(data, n)() / 255.0, (h, w)).astype(np.float32),
                                         shape).copy()} for n in CALIBRATION]

    class Images(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter(feeds)

        def get_next(self) -> dict | None:
            return next(self.feeds, None)

    quantize_static(str(src), str(out), Images(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)


def against_the_graph(model: Path, plan, files: list[Path]) -> tuple[str, str]:
    """Keypoint F1 medians against the graph's own meaning (onnxruntime unoptimised,
    ORT_DISABLE_ALL: Q, DQ and float convolutions): of onnxruntime's integer kernels (its own
    slack), and of spc's plan (emu)."""
    import onnxruntime as ort

    from spc.plan.program import DEFAULT_IMAGE
    from spc.runtime.inputs import load_input
    from spc.runtime.runner import Runner, RunResult
    from spc.tuning.comparison import compare

    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sessions = [ort.InferenceSession(str(model), o, providers=["CPUExecutionProvider"])
                for o in (plain, ort.SessionOptions())]
    spec = sessions[0].get_inputs()[0].name
    shape = [int(d) for d in plan.program.inputs[0].shape]
    ort_f1, spc_f1 = [], []
    with Runner(plan) as runner:
        for f in files:
            x = load_input(f, shape, DEFAULT_IMAGE)
            graph, kernels = ({o.name: v for o, v in zip(s.get_outputs(), s.run(None, {spec: x}))} for s in sessions)
            ort_f1.append(compare(f.name, RunResult(kernels, {}), graph, {}, plan.program.roles, shape[-1],
                                  shape[-2]).f1)
            spc_f1.append(compare(f.name, runner.run(x), graph, {}, plan.program.roles, shape[-1], shape[-2]).f1)

    def median(values: list[float]) -> str:
        kept = [v for v in values if not math.isnan(v)]
        return f"{statistics.median(kept):.3f}" if kept else "-"

    return median(ort_f1), median(spc_f1)


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from evalset import IMAGES, corpus_options, evaluation_images, size_of

    ap = corpus_options(__doc__, ROOT)
    ap.add_argument("--tools", nargs="*", help="only the rows of these tools (onnxsim, qdq, ...)")
    args = ap.parse_args()
    import onnxruntime as ort

    from spc.compiler import compile_onnx
    from spc.errors import SpcError
    from spc.plan.io import read_plan
    from spc.tools.check import check_files
    from tests.corpus.exports import build

    h, w = size_of(args)
    files = evaluation_images(args.work, IMAGES)
    print("| export | tool | recognised | F1 median (min) | min score PCC | min desc PCC | compile s | notes | "
          "onnxruntime's own F1 | spc against the graph |")
    print("|---|---|---|---:|---:|---:|---:|---|---:|---:|")
    failed = 0
    for base, tool in [r for r in ROWS if not args.tools or r[1] in args.tools]:
        src = build(base, args.work, h, w)
        out = args.work / f"{base}_{tool}_{h}x{w}.onnx"
        derive(src, tool, out, args.tf_python)
        try:
            ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        except Exception as exc:  # the tool made a model its own runtime refuses
            print(f"| {base} | {tool} | onnxruntime refuses it: {str(exc).splitlines()[0][:110]} | | | | | | | |")
            continue
        plan_path = out.with_suffix(".ttplan")
        t0 = time.perf_counter()
        try:
            result = compile_onnx(out, plan_path)
        except SpcError as exc:
            failed += 1
            print(f"| {base} | {tool} | refused: {str(exc)[:140]} | | | | | | | |")
            continue
        seconds = time.perf_counter() - t0
        plan = read_plan(plan_path)
        fired = ", ".join(r.split(":")[0].removeprefix("fuse-").removeprefix("insert-device-")
                          for r in plan.manifest["recognised"] if "not fired" not in r) or "-"
        try:
            reports = check_files(plan, plan_path, files, out, "emu")
        except SpcError as exc:  # (a plan that takes no picture: the row says so, the others still run)
            failed += 1
            print(f"| {base} | {tool} | {fired} | `spc check` refused: {str(exc)[:140]} | | | | | | |")
            continue
        f1 = [r.f1 for r in reports if not math.isnan(r.f1)]
        f1_text = f"{statistics.median(f1):.3f} ({min(f1):.3f})" if f1 else "-"
        score = min((r.score_pcc for r in reports), default=math.nan)
        desc = min((r.descriptor_pcc for r in reports), default=math.nan)
        notes = "; ".join(n[:60] for n in result.notes if n.startswith("validation:")) or ""
        slack, ours = against_the_graph(out, plan, files) if tool == "qdq" else ("", "")
        print(f"| {base} | {tool} | {fired} | {f1_text} | {score:.4f} | {desc:.4f} | {seconds:.1f} | {notes} | "
              f"{slack} | {ours} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
