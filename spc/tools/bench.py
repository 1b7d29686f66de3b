"""`spc bench`: a plan's per-frame phases on a backend, beside the hand-written port's figures.

On a device (``--backend ttnn``): after a warm-up frame (kernels compiled, conv weights prepared,
the program captured as a trace), each frame's phases — host pre-processing, the input write on
command queue 1, the trace replay and the read-back (one blocking read: the replay ends inside
it), host post-processing — and the traced forward alone (replays back to back, input already
on the device). On ``emu`` or ``ttnn-mock`` the same loop runs, but its times are the CPU's:
they describe the runtime's overhead, not a device. Numpy only (and ttnn for its backends).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from msgspec import Struct, field

from spc.memory.throughput import Throughput
from spc.plan.io import Plan
from spc.runtime.inputs import load_input
from spc.runtime.runner import Runner

HAND_PORT = {"forward_ms": 2.81, "e2e_fps": 40.7}  # seed-tt-superpoint model card, p150, 480x640


class BenchReport(Struct):
    backend: str
    traced: bool
    frames: int
    phases_ms: dict[str, float] = field(default_factory=dict)  # medians per frame
    forward_ms: float | None = None  # traced replay alone
    overflows: int = 0
    # what spc predicts for a p150, per frame (memory/throughput.py): beside the measured phases
    predicted_ms: dict[str, float] = field(default_factory=dict)


def bench_plan(plan: Plan, files: list[Path], backend: str, frames: int, trace: bool = True) -> BenchReport:
    shape = [int(d) for d in plan.program.inputs[0].shape]
    arrays = [load_input(f, shape, plan.program.image) for f in files]
    samples: dict[str, list[float]] = {}
    with Runner(plan, backend, trace) as runner:
        runner.run(arrays[0])  # warm-up: compile, prepare weights, capture
        for i in range(frames):
            t0 = time.perf_counter()
            result = runner.run(arrays[i % len(arrays)])
            samples.setdefault("wall", []).append(time.perf_counter() - t0)
            for k, v in result.seconds.items():
                samples.setdefault(k, []).append(v)
        traced = getattr(runner.device, "trace_id", None) is not None
        forward = runner.device.replay_seconds(frames) * 1e3 if traced else None
        overflows = runner.overflows
    phases = {k: statistics.median(v) * 1e3 for k, v in samples.items() if k != "wall"}
    report = BenchReport(backend, traced, frames, phases, forward, overflows, predicted(plan))
    report.phases_ms["wall"] = statistics.median(samples["wall"]) * 1e3
    return report


def predicted(plan: Plan) -> dict[str, float]:
    """The plan's predicted phases on a card, ms per frame (and frames/s)."""
    t = Throughput.of(plan)
    b = t.batch
    out = {k: t.as_dict()[f"{k}_s"] * 1e3 / b for k in ("upload", "device", "overlap", "readback", "host_post", "run")}
    return {**out, "fps": t.fps}


def print_bench(r: BenchReport) -> None:
    mode = "trace replay" if r.traced else "call by call"
    print(f"{r.frames} frames on {r.backend} ({mode}); medians per frame")
    print(f"{'phase':38} {'ms':>9}")
    order = ["host_pre", "device", *sorted(k for k in r.phases_ms if k.startswith("device.")), "host_post"]
    for k in order:
        if k in r.phases_ms:
            print(f"{'  ' + k.removeprefix('device.') if '.' in k else k:38} {r.phases_ms[k]:>9.3f}")
    wall = r.phases_ms["wall"]
    on_device = r.backend == "ttnn"
    # the hand port's figures are a p150's: beside a CPU's times a ratio would mean nothing
    vs = f"   vs hand port {HAND_PORT['e2e_fps']} fps: {1e3 / wall / HAND_PORT['e2e_fps']:.2f}x" if on_device else ""
    print(f"{'end to end (wall)':38} {wall:>9.3f}   {1e3 / wall:8.1f} fps{vs}")
    if r.forward_ms is not None:
        print(f"{'device forward (trace replay alone)':38} {r.forward_ms:>9.3f}   {1e3 / r.forward_ms:8.1f} fps   "
              f"vs hand port {HAND_PORT['forward_ms']} ms: {HAND_PORT['forward_ms'] / r.forward_ms:.2f}x")
    if not on_device:
        print(f"(on {r.backend}, not a device: these are this CPU's times, for the runtime's overhead only; "
              "no comparison with the hand port's p150 figures)")
    if r.overflows:
        print(f"{r.overflows} frame(s) overflowed the compact read-back and were read densely")
    p = r.predicted_ms
    if p:
        print(f"predicted for a p150, ms per frame (docs/end-to-end.md): upload {p['upload']:.3f} (beside the "
              f"previous trace: {p['overlap']:.3f} hidden), device {p['device']:.3f}, read-back {p['readback']:.3f}, "
              f"host post {p['host_post']:.3f}; {p['run']:.3f} per frame, {p['fps']:.1f} fps"
              + ("; measured above: h2d, replay+d2h, host_post, wall" if on_device else ""))
