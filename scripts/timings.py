"""Side-by-side timings, one run: spc vs onnxruntime on the same ONNX, on this CPU.

    make bench                                 # 480x640
    .venv/bin/python scripts/timings.py --height 240 --width 320 --frames 10

Prints compile time next to onnxruntime's session build (with graph optimisation and saving
the optimised model), the emulated device frame next to an onnxruntime frame, and the host
stages. The emu backend is a numerics model, not a speed model: its time says nothing about
the device; it is here so regressions in the runtime's own overhead show.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--frames", type=int, default=5)
    ap.add_argument("--work", type=Path, default=Path("bench-out"))
    args = ap.parse_args()

    import numpy as np
    import onnxruntime as ort
    from evalset import evaluation_images, exported

    from spc.compiler import compile_onnx
    from spc.plan.io import read_plan
    from spc.runtime.inputs import load_input
    from spc.runtime.runner import Runner

    src = exported(args.work, args.height, args.width)
    plan_path = src.with_suffix(".ttplan")

    compile_onnx(src, plan_path)  # warm: the in-process row is the steady state, the command row is cold
    compile_s, _ = timed(lambda: compile_onnx(src, plan_path), 3)
    cli_t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "spc.cli", "compile", str(src), "-o", str(plan_path)], check=True,
                   capture_output=True)
    cli_s = time.perf_counter() - cli_t0

    def build_ort() -> ort.InferenceSession:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.optimized_model_filepath = str(Path(tempfile.mkdtemp()) / "opt.onnx")
        return ort.InferenceSession(str(src), opts, providers=["CPUExecutionProvider"])

    ort_build_s, session = timed(build_ort, 3)

    (image,) = evaluation_images(args.work, ("astronaut",))
    x = load_input(image, [1, 3, args.height, args.width])
    plan = read_plan(plan_path)
    torch_t0 = time.perf_counter()
    import torch  # noqa: F401  (the emu backend's one heavy import, timed on its own)

    torch_s = time.perf_counter() - torch_t0
    prep_t0 = time.perf_counter()
    runner = Runner(plan)
    prepare_s = time.perf_counter() - prep_t0
    runner.run(x)  # warm-up
    session.run(None, {"pixel_values": x})
    runs = [runner.run(x) for _ in range(args.frames)]
    emu_frame = statistics.median(sum(r.seconds.values()) for r in runs)
    device = statistics.median(r.seconds["device"] for r in runs)
    host_pre = statistics.median(r.seconds["host_pre"] for r in runs)
    host_post = statistics.median(r.seconds["host_post"] for r in runs)
    ort_frame, _ = timed(lambda: session.run(None, {"pixel_values": x}), args.frames)
    runner.close()

    # every precision preset's emulation, against the plain bf16 emulation (issue: <= 3x)
    from spc.ttnn.precision import PRESETS, PrecisionPlan

    plain = PrecisionPlan("accurate").with_rule("*", math_fidelity="HiFi4", packer_l1_acc=True)
    preset_rows = []
    for name in ["plain bf16 (HiFi4, fp32 acc)", *PRESETS]:
        plan = plain if name.startswith("plain") else PrecisionPlan(name)
        path = args.work / "bench_preset.ttplan"
        compile_onnx(src, path, precision=plan)
        with Runner(read_plan(path)) as r:
            r.run(x)
            t, _ = timed(lambda r=r: r.run(x), max(2, args.frames // 2))
        preset_rows.append((name, t))

    rows = [
        ("compile (in process)", compile_s, "ORT session build + optimise + save", ort_build_s),
        ("`spc compile` command, wall", cli_s, "ORT session build + optimise + save", ort_build_s),
        ("emu frame (host + emulated device)", emu_frame, "ORT frame (fp32, CPU)", ort_frame),
        ("  of which emulated device stage", device, "ORT frame (fp32, CPU)", ort_frame),
        ("  of which host pre-processing", host_pre, "ORT frame (fp32, CPU)", ort_frame),
        ("  of which host post-processing", host_post, "ORT frame (fp32, CPU)", ort_frame),
        ("emu prepare (weights, binding; once)", prepare_s, "ORT session build + optimise + save", ort_build_s),
        ("import torch (emu backend only)", torch_s, "ORT session build + optimise + save", ort_build_s),
    ]
    print(f"spc vs onnxruntime, {args.height}x{args.width}, {args.frames} frames (median), "
          f"{np.__name__} {np.__version__}, onnxruntime {ort.__version__}")
    print(f"{'spc':<40}{'ms':>10}   {'onnxruntime':<38}{'ms':>10}   {'ratio':>7}")
    for name, ours, ref_name, ref in rows:
        print(f"{name:<40}{ours * 1e3:>10.1f}   {ref_name:<38}{ref * 1e3:>10.1f}   {ours / ref:>6.2f}x")
    base = preset_rows[0][1]
    print(f"\n{'emu frame by precision preset':<40}{'ms':>10}   {'vs plain bf16':>13}")
    for name, t in preset_rows:
        print(f"{name:<40}{t * 1e3:>10.1f}   {t / base:>12.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
