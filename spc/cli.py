"""The `spc` command line. Each command imports only what it needs."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from spc.errors import SpcError


def _one_line_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """User errors become one line on stderr and exit 1; nothing else prints a traceback unless
    SPC_DEBUG=1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SpcError as exc:
            click.echo(f"spc: error: {exc}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("spc: interrupted", err=True)
            sys.exit(130)
        except Exception as exc:
            if os.environ.get("SPC_DEBUG"):
                raise
            first = str(exc).splitlines()[0] if str(exc) else ""
            click.echo(f"spc: internal error: {type(exc).__name__}: {first} (SPC_DEBUG=1 shows the traceback)",
                       err=True)
            sys.exit(2)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="spc")
def main() -> None:
    """spc: compile SuperPoint ONNX models to Tenstorrent ttnn programs."""


@main.command(short_help="HF SuperPoint -> ONNX (post-processing included).")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("superpoint.onnx"), show_default=True)
@click.option("--height", default=480, show_default=True, help="input height (multiple of 8)")
@click.option("--width", default=640, show_default=True, help="input width (multiple of 8)")
@click.option("--channels", default=3, show_default=True, help="input channels (HF's processor gives 3)")
@click.option("--weights", default=None, help="HF folder, state-dict file or hub id (default: demo weights)")
@click.option("--threshold", type=float, default=None, help="keypoint threshold (HF default 0.005)")
@click.option("--max-keypoints", type=int, default=None, help="keep the top K keypoints (HF default -1: all)")
@_one_line_errors
def export(output: Path, height: int, width: int, channels: int, weights: str | None, threshold: float | None,
           max_keypoints: int | None) -> None:
    """Export Hugging Face SuperPoint (post-processing included) to ONNX."""
    from spc.frontend.export import export_onnx

    export_onnx(output, height, width, channels, weights, threshold, max_keypoints)
    click.echo(f"wrote {output} ({height}x{width}x{channels}, opset 18)")


@main.command(name="compile", short_help="ONNX -> .ttplan (passes, precision, lowering).")
@click.argument("source", type=click.Path(path_type=Path), required=False)
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None, help="plan file (.ttplan)")
@click.option("--dump-dir", type=click.Path(path_type=Path), default=None, help="write NN-<pass>.ir/.dot + summary")
@click.option("--print-ir-after-all", is_flag=True, help="print the IR after every pass (stderr)")
@click.option("--stop-after", default=None, metavar="PASS", help="stop the pipeline after PASS (writes no plan)")
@click.option("--nms-single-pass", is_flag=True, help="cheaper NMS without suppression rounds (changes results)")
@click.option("--precision", type=click.Choice(["accurate", "balanced", "fast", "auto"]), default=None,
              help="precision preset, or auto: search per block (default accurate; docs/precision.md)")
@click.option("--precision-config", type=click.Path(path_type=Path), default=None,
              help="TOML file: a preset and per-block overrides")
@click.option("--calib", type=click.Path(path_type=Path), default=None,
              help="auto: folder of calibration images (default: the shipped set)")
@click.option("--min-f1", type=float, default=None, help="auto: absolute keypoint F1 floor")
@click.option("--min-desc-pcc", type=float, default=None, help="auto: absolute descriptor PCC floor")
@click.option("--target", type=click.Choice(["p150", "n150", "n300"]), default="p150", show_default=True,
              help="the chip the plan is for (targets.py)")
@click.option("--memory-config", "memory_config", multiple=True, metavar="BLOCK=SPEC",
              help="force a block's memory configuration: l1, l1:abh=N, dram:height=N, dram:width=N "
                   "(blocks by glob; repeatable; docs/memory.md)")
@click.option("--dense", is_flag=True,
              help="read the score and descriptor maps back whole (default: top-K keypoints computed on the device)")
@click.option("--keypoint-capacity", type=click.IntRange(32, 2048), default=None, metavar="K",
              help="device keypoint slots when the model keeps every keypoint (default: one per 128 pixels, "
                   "at most 2048); a frame with more is read densely")
@click.option("--kernels", type=click.Choice(["on", "off"]), default="off", show_default=True,
              help="fused kernels (TT-Lang, kernels/: NMS, keypoint read-back) instead of the stock ttnn calls "
                   "they replace")
@click.option("--input-shape", default=None, metavar="N,C,H,W",
              help="the input's size, for an export with dynamic axes (e.g. 1,1,480,640)")
@click.option("--explain", default=None, metavar="RULE|FUSION",
              help="print every candidate of a rewrite rule or fusion, how far it matched and why it stopped "
                   "(names: --list-passes); writes a plan only with -o")
@click.option("--list-passes", is_flag=True, help="list the pipeline (and what --explain can name) and exit")
@_one_line_errors
def compile_(source: Path | None, output: Path | None, dump_dir: Path | None, print_ir_after_all: bool,
             stop_after: str | None, nms_single_pass: bool, precision: str | None, precision_config: Path | None,
             calib: Path | None, min_f1: float | None, min_desc_pcc: float | None, target: str,
             memory_config: tuple[str, ...], dense: bool, keypoint_capacity: int | None, kernels: str,
             input_shape: str | None, explain: str | None, list_passes: bool) -> None:
    """Compile an ONNX model into a .ttplan."""
    from spc.compiler import AutoPrecision, compile_onnx
    from spc.passes.pipeline import default_pipeline
    from spc.ttnn.memory import MemoryOverrides
    from spc.ttnn.precision import PrecisionPlan, load_precision_config
    from spc.tuning.thresholds import Thresholds

    if list_passes:
        for i, p in enumerate(default_pipeline(), 1):
            click.echo(f"{i:2d}  {p.name:<24} {p.summary}")
            rules = [r for r in p.explains if r != p.name]
            if rules:
                click.echo(f"    {'':<24} rules: {', '.join(rules)}")
        click.echo(f"{len(default_pipeline()) + 1:2d}  {'choose-memory-config':<24} per conv and pool block: L1 or "
                   "DRAM slices (memory/planner.py, on the lowered program)")
        return
    if source is None:
        raise SpcError("compile needs the ONNX file to compile (spc compile SOURCE -o PLAN)")
    if output is None and stop_after is None and explain is None:
        output = source.with_suffix(".ttplan")
    auto = None
    if precision == "auto":
        if precision_config:
            raise SpcError("--precision auto searches the precision itself; drop --precision-config")
        auto = AutoPrecision(calib, Thresholds(min_f1=min_f1, min_desc_pcc=min_desc_pcc),
                             log=lambda line: click.echo(line, err=True))
        click.echo("precision search (emulated, against onnxruntime on the calibration inputs):", err=True)
    plan = (load_precision_config(precision_config, precision) if precision_config
            else PrecisionPlan("accurate" if precision in (None, "auto") else precision))
    result = compile_onnx(source, output, dump_dir=dump_dir, print_ir=print_ir_after_all, stop_after=stop_after,
                          nms_single_pass=nms_single_pass, target=target, precision=plan, auto=auto,
                          memory=MemoryOverrides.from_cli(memory_config), dense=dense,
                          keypoint_capacity=keypoint_capacity, kernels=kernels == "on",
                          input_shape=_shape_option(input_shape), explain=explain)
    if result.explained is not None:
        click.echo(result.explained, nl=False)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    counts = result.graph.op_counts()
    if result.plan is not None:
        dev = sum(1 for n in result.graph.nodes if n.placement.value == "device")
        macs = result.macs
        share = f"; {100 * macs[0] / (macs[0] + macs[1]):.1f} % of multiply-adds on the device" if sum(macs) else ""
        click.echo(f"wrote {result.plan}: {dev} device ops, {len(result.graph.nodes) - dev} host ops "
                   f"({', '.join(f'{k} x{v}' for k, v in counts.items() if k.startswith('spc.'))}){share}")
        click.echo("recognised: " + "; ".join(result.recognised))
    elif stop_after is not None:
        click.echo(f"stopped after {stop_after}; no plan written")
    if dump_dir is not None:
        click.echo(f"dumps in {dump_dir}/ (summary.txt)")


def _shape_option(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        dims = [int(d) for d in text.replace("x", ",").split(",")]
    except ValueError:
        raise SpcError(f"--input-shape {text!r}: expected sizes separated by commas, e.g. 1,1,480,640") from None
    if not dims or any(d < 1 or d > 1 << 20 for d in dims):
        raise SpcError(f"--input-shape {text!r}: every size must be between 1 and {1 << 20}")
    return dims


def _ttnn_interpreter() -> None:
    """The ttnn backends need ttnn, which exists for Python 3.10/3.12 only: when this interpreter
    lacks it, run the same command under the project's ttnn environment (`make mock-env`)."""
    import importlib.util

    if importlib.util.find_spec("ttnn") is not None:
        return
    checkout = Path(__file__).resolve().parents[1]  # a source checkout keeps its ttnn environment there
    python = os.environ.get("SPC_TTNN_PYTHON") or str(checkout / ".venv-ttnn" / "bin" / "python")
    if not Path(python).exists():
        raise SpcError("the ttnn backends need ttnn 0.81.1 (Python 3.10/3.12): run `make mock-env`, or set "
                       "SPC_TTNN_PYTHON to a Python that has it")
    os.execv(python, [python, "-m", "spc.cli", *sys.argv[1:]])


def _inputs(paths: tuple[Path, ...]) -> list[Path]:
    from spc.runtime.inputs import expand_paths

    if not paths:
        raise SpcError("no input given")
    return expand_paths(list(paths))


@main.command(short_help="Run a plan on images or .npy files -> .npz.")
@click.argument("plan", type=click.Path(path_type=Path))
@click.argument("inputs", nargs=-1, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help=".npz for one input, a folder for several")
@click.option("--dense", is_flag=True, help="also save the device's score and descriptor maps")
@click.option("--viz", type=click.Path(path_type=Path), default=None, help="overlay PNG (a folder for several)")
@click.option("--backend", type=click.Choice(["emu", "ttnn-mock", "ttnn"]), default="emu", show_default=True,
              help="emu: CPU with device numerics; ttnn-mock: real ttnn on a mock p150 (validation only)")
@click.option("--no-trace", is_flag=True, help="ttnn: run call by call instead of replaying a captured trace")
@_one_line_errors
def run(plan: Path, inputs: tuple[Path, ...], output: Path | None, dense: bool, viz: Path | None,
        backend: str, no_trace: bool) -> None:
    """Run a plan on images or .npy inputs; write the model's outputs as .npz."""
    if backend.startswith("ttnn"):
        _ttnn_interpreter()
    from spc.plan.io import read_plan
    from spc.tools.run import run_files

    files = _inputs(inputs)
    run_files(read_plan(plan), files, output, viz, dense, backend, trace=not no_trace)


@main.command(short_help="Per-phase timings of a plan on a backend (for hardware: ttnn).")
@click.argument("plan", type=click.Path(path_type=Path))
@click.argument("inputs", nargs=-1, type=click.Path(path_type=Path))
@click.option("--backend", type=click.Choice(["emu", "ttnn-mock", "ttnn"]), default="emu", show_default=True)
@click.option("--frames", type=click.IntRange(1, 10000), default=20, show_default=True)
@click.option("--no-trace", is_flag=True, help="ttnn: call by call instead of trace replay")
@_one_line_errors
def bench(plan: Path, inputs: tuple[Path, ...], backend: str, frames: int, no_trace: bool) -> None:
    """Time a plan frame by frame: host pre, input write, device (trace replay), read-back, host
    post; forward-only and end-to-end fps, beside the hand-written port's."""
    if backend.startswith("ttnn"):
        _ttnn_interpreter()
    from spc.plan.io import read_plan
    from spc.tools.bench import bench_plan, print_bench

    print_bench(bench_plan(read_plan(plan), _inputs(inputs), backend, frames, trace=not no_trace))


@main.command(short_help="Compare a plan with onnxruntime on the source ONNX.")
@click.argument("plan", type=click.Path(path_type=Path))
@click.argument("inputs", nargs=-1, type=click.Path(path_type=Path))
@click.option("--onnx", "onnx_path", type=click.Path(path_type=Path), default=None, help="the source ONNX")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.option("--min-f1", type=float, default=None, help="exit 1 if any image's keypoint F1 is lower")
@click.option("--min-pcc", type=float, default=None, help="exit 1 if any score/descriptor PCC is lower")
@click.option("--backend", default="emu", show_default=True)
@_one_line_errors
def check(plan: Path, inputs: tuple[Path, ...], onnx_path: Path | None, as_json: bool, min_f1: float | None,
          min_pcc: float | None, backend: str) -> None:
    """Compare a plan with onnxruntime on the source ONNX."""
    from spc.plan.io import read_plan
    from spc.tools.check import check_files, print_reports

    files = _inputs(inputs)
    loaded = read_plan(plan)
    reports = check_files(loaded, plan, files, onnx_path, backend)
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in reports], indent=1))
    else:
        print_reports(reports)
    # a measure the model has no outputs for (F1 of a model without keypoints) is not a failure
    failed = [r for r in reports if (min_f1 is not None and r.f1 < min_f1) or
              (min_pcc is not None and r.worst_pcc() < min_pcc)]
    if failed:
        click.echo(f"spc: check failed on {len(failed)} of {len(reports)} input(s): "
                   + ", ".join(r.input for r in failed), err=True)
        sys.exit(1)


@main.command(short_help="A plan's ttnn calls and per-frame totals.")
@click.argument("plan", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@_one_line_errors
def inspect(plan: Path, as_json: bool) -> None:
    """Show a plan's device program call by call, and its per-frame totals."""
    from spc.plan.io import read_plan
    from spc.tools.inspect import plan_report, print_report

    report = plan_report(read_plan(plan))
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=1))
    else:
        print_report(report)


@main.command(name="emit-py", short_help="A plan's device stage as a standalone ttnn program.")
@click.argument("plan", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("program.py"), show_default=True)
@_one_line_errors
def emit_py(plan: Path, output: Path) -> None:
    """Write the plan's device stage as a standalone Python program calling ttnn."""
    from spc.files import atomic_write
    from spc.plan.io import read_plan
    from spc.tools.emit_py import emit_py as emit

    atomic_write(output, emit(read_plan(plan)).encode())
    click.echo(f"wrote {output}")


@main.command(short_help="Which per-block precision choices lose accuracy.")
@click.argument("safe", type=click.Path(path_type=Path))
@click.argument("fast", type=click.Path(path_type=Path))
@click.argument("inputs", nargs=-1, type=click.Path(path_type=Path))
@click.option("--onnx", "onnx_path", type=click.Path(path_type=Path), default=None, help="the source ONNX")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@_one_line_errors
def bisect(safe: Path, fast: Path, inputs: tuple[Path, ...], onnx_path: Path | None, as_json: bool) -> None:
    """Find the smallest set of per-block precision differences that makes FAST lose accuracy."""
    from spc.plan.io import read_plan
    from spc.tuning.bisect import bisect as run_bisect

    files = _inputs(inputs)
    result = run_bisect(read_plan(safe), safe, read_plan(fast), files, onnx_path,
                        log=(lambda line: None) if as_json else (lambda line: click.echo(line, err=True)))
    if as_json:
        click.echo(json.dumps({"message": result.message, "culprits": [vars(d) for d in result.culprits],
                               "differences": [vars(d) for d in result.differences],
                               "safe": vars(result.safe), "fast": vars(result.fast)}, indent=1))
        return
    click.echo(result.message)
    for d in result.culprits:
        click.echo(f"  {d}")


if __name__ == "__main__":
    main()
