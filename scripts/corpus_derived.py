"""The corpus as deployment tools leave it, through spc: simplified, float16, optimised, upgraded.

    make corpus-derived     # .venv-tf (onnxsim, onnxslim, onnxconverter-common too), then this

Each row takes an export of tests/corpus at 480x640 and applies one tool the way its users call
it: onnxsim's ``simplify``, onnxslim's ``slim``, onnxconverter-common's
``convert_float_to_float16(keep_io_types=True)``, onnxruntime's offline optimisation at the basic
level (``optimized_model_filepath``), onnx's version converter to opset 21. The tools that are not
spc's own dependencies run in ``.venv-tf``. Then: compile (with the validation), `spc check`
against onnxruntime on the same derived ONNX on the six natural images (emu backend).
A derived model onnxruntime itself refuses is reported as such, not compiled.
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
    "fp16": ("import onnx, sys, warnings; warnings.simplefilter('ignore'); from onnxconverter_common import float16; "
             "onnx.save(float16.convert_float_to_float16(onnx.load(sys.argv[1]), keep_io_types=True), sys.argv[2])"),
}
ROWS = [("hf_dynamo_named", "onnxsim"), ("hf_dynamo_named", "onnxslim"), ("fixed_k_op20", "onnxsim"),
        ("magicleap_legacy_op11", "onnxslim"), ("magicleap_legacy_op11", "fp16"), ("magicleap_dynamo_op18", "fp16"),
        ("superpoint_open_op17", "fp16"), ("hf_dynamo_named", "fp16"), ("hf_dynamo_named", "ort-basic"),
        ("fixed_k_op20", "ort-basic"), ("hf_legacy", "opset21")]


def derive(src: Path, tool: str, out: Path, tf_python: str) -> None:
    if tool in TOOLS:
        subprocess.run([tf_python, "-c", TOOLS[tool], str(src), str(out)], check=True, capture_output=True)
    elif tool == "ort-basic":
        import onnxruntime as ort

        o = ort.SessionOptions()
        o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        o.optimized_model_filepath = str(out)
        ort.InferenceSession(str(src), o, providers=["CPUExecutionProvider"])
    elif tool == "opset21":
        import onnx
        from onnx import version_converter

        onnx.save(version_converter.convert_version(onnx.load(src), 21), out)


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from evalset import IMAGES, corpus_options, evaluation_images, size_of

    args = corpus_options(__doc__, ROOT).parse_args()
    import onnxruntime as ort

    from spc.compiler import compile_onnx
    from spc.errors import SpcError
    from spc.plan.io import read_plan
    from spc.tools.check import check_files
    from tests.corpus.exports import build

    h, w = size_of(args)
    files = evaluation_images(args.work, IMAGES)
    print("| export | tool | recognised | F1 median (min) | min score PCC | min desc PCC | compile s | notes |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    failed = 0
    for base, tool in ROWS:
        src = build(base, args.work, h, w)
        out = args.work / f"{base}_{tool}_{h}x{w}.onnx"
        derive(src, tool, out, args.tf_python)
        try:
            ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        except Exception as exc:  # the tool made a model its own runtime refuses
            print(f"| {base} | {tool} | onnxruntime refuses it: {str(exc).splitlines()[0][:110]} | | | | | |")
            continue
        plan_path = out.with_suffix(".ttplan")
        t0 = time.perf_counter()
        try:
            result = compile_onnx(out, plan_path)
        except SpcError as exc:
            failed += 1
            print(f"| {base} | {tool} | refused: {str(exc)[:140]} | | | | | |")
            continue
        seconds = time.perf_counter() - t0
        plan = read_plan(plan_path)
        fired = ", ".join(r.split(":")[0].removeprefix("fuse-").removeprefix("insert-device-")
                          for r in plan.manifest["recognised"] if "not fired" not in r) or "-"
        reports = check_files(plan, plan_path, files, out, "emu")
        f1 = [r.f1 for r in reports if not math.isnan(r.f1)]
        f1_text = f"{statistics.median(f1):.3f} ({min(f1):.3f})" if f1 else "-"
        score = min((r.score_pcc for r in reports), default=math.nan)
        desc = min((r.descriptor_pcc for r in reports), default=math.nan)
        notes = "; ".join(n[:60] for n in result.notes if n.startswith("validation:")) or ""
        print(f"| {base} | {tool} | {fired} | {f1_text} | {score:.4f} | {desc:.4f} | {seconds:.1f} | {notes} |",
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
