"""`make bench`: spc beside its yardsticks on this CPU, side by side, in one run.

    make bench                                              # 480x640, every figure
    .venv/bin/python scripts/timings.py --quick             # without --precision auto and the suite
    .venv/bin/python scripts/timings.py --height 240 --width 320

Each row is a figure of issue 14 beside its reference and the ratio:

* `spc compile` as a fresh process against onnxruntime's ahead-of-time step as a fresh process
  (a session with ORT_ENABLE_ALL that saves the optimised model), run in turn, A B A B ...; the
  ratio is the median of the pairs' ratios. Bytecode is compiled first, as a wheel install does.
* the in-process passes (warm) against their 100 ms budget;
* the `emu` frame of each precision preset against an onnxruntime fp32 frame (goals: accurate
  1.0x, the others 1.5x), and the host post-processing against its 2 ms budget;
* `spc compile --precision auto` against its 60 s budget, and the test suite against 4 minutes.

The emulator models the device's numerics, not its speed: its time says nothing about the device.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ORT_AOT = """
import sys, tempfile
import onnxruntime as ort
o = ort.SessionOptions()
o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
o.optimized_model_filepath = tempfile.mkdtemp() + "/optimised.onnx"
o.log_severity_level = 3
ort.InferenceSession(sys.argv[1], o, providers=["CPUExecutionProvider"])
"""


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def paired(a: list[str], b: list[str], runs: int) -> tuple[float, float, float]:
    """Medians of A and B and the median of the pairs' A/B, run in turn after one warm-up each."""
    wall(a), wall(b)
    pairs = [(wall(a), wall(b)) for _ in range(runs)]
    return (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs),
            statistics.median(p[0] / p[1] for p in pairs))


class Table:
    def __init__(self) -> None:
        self.rows: list[tuple[str, float, str, float, str]] = []

    def add(self, name: str, ours_s: float, ref_name: str, ref_s: float, goal: str = "") -> None:
        self.rows.append((name, ours_s, ref_name, ref_s, goal))

    def print(self) -> None:
        print(f"{'spc':<44}{'ms':>10}   {'reference':<40}{'ms':>10}   {'ratio':>7}  goal")
        for name, ours, ref_name, ref, goal in self.rows:
            print(f"{name:<44}{ours * 1e3:>10.1f}   {ref_name:<40}{ref * 1e3:>10.1f}   {ours / ref:>6.2f}x  {goal}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--frames", type=int, default=5)
    ap.add_argument("--runs", type=int, default=15, help="pairs of fresh compile / onnxruntime processes")
    ap.add_argument("--quick", action="store_true", help="skip --precision auto and the test suite")
    ap.add_argument("--work", type=Path, default=Path("bench-out"))
    args = ap.parse_args()

    import numpy as np
    import onnxruntime as ort
    from evalset import evaluation_images, exported

    from spc.compiler import compile_onnx
    from spc.plan.io import read_plan
    from spc.plan.program import DEFAULT_IMAGE
    from spc.runtime.inputs import load_input
    from spc.runtime.runner import Runner
    from spc.ttnn.precision import PRESETS, PrecisionPlan

    src = exported(args.work, args.height, args.width)
    plan_path = args.work / f"bench_{args.height}x{args.width}.ttplan"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(__file__).parents[1] / "spc")],
                   check=True, capture_output=True)
    table = Table()

    # 1. the compile command, fresh processes, against onnxruntime's ahead-of-time step
    spc_cmd = [sys.executable, "-m", "spc.cli", "compile", str(src), "-o", str(plan_path), "--overwrite"]
    ort_cmd = [sys.executable, "-c", ORT_AOT, str(src)]
    ours, ref, ratio = paired(spc_cmd, ort_cmd, args.runs)
    table.add("`spc compile` command (fresh process)", ours, "onnxruntime AOT (fresh process)", ref, "<= 2x")
    print(f"compile command: median of {args.runs} pairs' ratios {ratio:.2f}x")
    # the same without the validation (docs/validation.md): what it costs
    quick, ref2, ratio2 = paired([*spc_cmd, "--no-verify"], ort_cmd, args.runs)
    table.add("  `spc compile --no-verify` (fresh process)", quick, "onnxruntime AOT (fresh process)", ref2, "")
    print(f"compile command without validation: median of {args.runs} pairs' ratios {ratio2:.2f}x")

    # 2. the passes in process (warm: the import and the first call's costs are the row above)
    runs: list[list] = []
    warm = args.work / "bench_warm.ttplan"

    def compile_once() -> None:
        warm.unlink(missing_ok=True)
        runs.append(compile_onnx(src, warm).records)

    compile_once()
    runs.clear()
    compile_s = median_time(compile_once, 5)
    # each pass's median over the runs: one run's figures swing with the machine's load
    passes = [(r.name, statistics.median(run[i].seconds for run in runs)) for i, r in enumerate(runs[0])]
    pass_s = sum(s for _, s in passes)
    table.add("passes in process (warm)", pass_s, "budget", 0.100, "<= 1x")
    table.add("  compile_onnx in process (import to plan)", compile_s, "onnxruntime AOT (fresh process)", ref, "")

    # 3. the emulator per preset against onnxruntime fp32, and the host stages
    (image,) = evaluation_images(args.work, ("astronaut",))
    x = load_input(image, [1, 3, args.height, args.width], DEFAULT_IMAGE)
    session = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: x}
    session.run(None, feed)
    ort_frame = median_time(lambda: session.run(None, feed), args.frames)
    host_post = []
    for preset in PRESETS:
        path = args.work / f"bench_{preset}.ttplan"
        path.unlink(missing_ok=True)
        compile_onnx(src, path, precision=PrecisionPlan(preset))
        with Runner(read_plan(path)) as runner:
            runner.run(x)
            runs = [runner.run(x) for _ in range(args.frames)]
        frame = statistics.median(sum(v for k, v in r.seconds.items() if "." not in k) for r in runs)
        host_post.append(statistics.median(r.seconds["host_post"] for r in runs))
        table.add(f"emu frame, {preset}", frame, "onnxruntime fp32 frame", ort_frame,
                  "<= 1x" if preset == "accurate" else "<= 1.5x")
    table.add("  host post-processing per frame", statistics.median(host_post), "budget", 0.002, "<= 1x")

    # 4. the precision search and the suite, as commands
    if not args.quick:
        auto = args.work / "bench_auto.ttplan"
        auto_s = wall([sys.executable, "-m", "spc.cli", "compile", str(src), "-o", str(auto), "--overwrite",
                       "--precision", "auto"])
        table.add("`spc compile --precision auto`", auto_s, "budget", 60.0, "<= 1x")
        t0 = time.perf_counter()
        suite = subprocess.run([sys.executable, "-m", "pytest"], cwd=Path(__file__).parents[1],
                               capture_output=True, text=True)
        suite_s = time.perf_counter() - t0
        last = (suite.stdout.strip().splitlines() or ["?"])[-1]
        table.add(f"test suite ({last.strip('= ')})", suite_s, "budget", 240.0, "<= 1x")

    print(f"\nspc vs references, {args.height}x{args.width}; {args.frames} frames (median); numpy {np.__version__}, "
          f"onnxruntime {ort.__version__}")
    table.print()
    print("\nslowest passes (in process): " + ", ".join(f"{n} {s * 1e3:.1f} ms" for n, s in
                                                        sorted(passes, key=lambda p: -p[1])[:4]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
