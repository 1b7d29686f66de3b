"""The `spc` command line. Each command imports only what it needs."""

from __future__ import annotations

# Each command imports the modules it uses inside its own function: `spc --help` then loads click
# and a few modules of under a millisecond each (here), not numpy (~75 ms), spc.files (~7 ms) or the
# compiler (~200 ms), and no command loads another's (`spc compile` no torch, onnxruntime or onnx).
import contextlib
import functools
import importlib.util
import json
import math
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from spc import console
from spc.errors import SpcError
from spc.records import asdict
from spc.text import one_line
from spc.ttnn.targets import DEFAULT_TARGET, TARGETS
from spc.tuning.thresholds import Thresholds

if TYPE_CHECKING:
    from spc.frontend.reading import Reading

# a module of an optional extra, missing: what needs it and what to install (pyproject.toml)
_FULL = "pip install 'spc[full]' (torch, transformers, onnxscript, onnxruntime)"
_EXTRAS = {
    "torch": f"this command needs torch (export, the emu backend, check): {_FULL}",
    "transformers": f"spc export needs transformers (the HF SuperPoint model): {_FULL}",
    "onnxscript": f"spc export needs onnxscript (torch.onnx's exporter): {_FULL}",
    "onnxruntime": f"this command compares against onnxruntime: {_FULL}",
    "matplotlib": f"spc report draws its charts with matplotlib: {_FULL[:-1]}, matplotlib)",
    "ttnn": "the ttnn backends need ttnn 0.81.1 (Python 3.10/3.12): `make mock-env`, or pip install ttnn==0.81.1",
}


_VERBOSITY_KEY = "spc.verbosity"
# commands that read files and write files, nothing else (no device to close, no cluster to stop,
# no temporary folder left to atexit): once their result is written and their output flushed, the
# interpreter's teardown does nothing for the user, and the console script ends there, as mypy's
# does (mypy.util.hard_exit). Measured 2026-12-03: the compile 0.90x of one with the teardown (30 pairs)
_FAST_EXIT = frozenset({"compile", "inspect", "emit-py"})
_ran: list[str] = []  # the commands that ran in this process (entry() reads the last)
_entry: list[bool] = []  # [True] once entry() runs: the process ends after its command


def _ends_process(command: str | None) -> bool:
    """Whether the process ends as soon as ``command`` returns (:func:`entry`'s fast exit)."""
    return bool(_entry) and command in _FAST_EXIT


def _one_line_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """User errors become one line on stderr and exit 1; nothing else prints a traceback unless
    SPC_DEBUG=1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context(silent=True)
        console.set_level(ctx.meta.get(_VERBOSITY_KEY, console.NORMAL) if ctx else console.NORMAL)
        _ran.append(ctx.info_name if ctx and ctx.info_name else fn.__name__)
        try:
            with warnings.catch_warnings():  # numpy's remarks on a hostile model's NaNs are not the user's
                warnings.simplefilter("ignore", RuntimeWarning)
                return fn(*args, **kwargs)
        except SpcError as exc:  # one line, whatever the message quotes (an option's value may hold a line break)
            click.echo("spc: error: " + str(exc).replace("\r", "\\r").replace("\n", "\\n"), err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("spc: interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:  # the reader went away (`| head`): nothing to say, and nothing at exit's flush
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        except Exception as exc:
            if os.environ.get("SPC_DEBUG"):
                raise
            if isinstance(exc, ModuleNotFoundError) and exc.name in _EXTRAS:  # a base install
                click.echo(f"spc: error: {_EXTRAS[exc.name]}", err=True)
                sys.exit(1)
            if isinstance(exc, OSError) and exc.filename is not None:  # the file system's answer: the user's to fix
                from spc.files import os_error

                click.echo(f"spc: error: {os_error(exc.filename, exc, 'cannot use')}", err=True)
                sys.exit(1)
            first = str(exc).splitlines()[0] if str(exc) else ""
            click.echo(f"spc: internal error: {type(exc).__name__}: {first} (SPC_DEBUG=1 shows the traceback)",
                       err=True)
            sys.exit(2)
        finally:  # in-process callers (tests, notebooks) start each command afresh
            console.set_level(console.NORMAL)

    return wrapper


def _collector_paused(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The command without the cyclic garbage collector (spc/process.py), except ``--precision
    auto`` and ``--batch auto``, whose trials and whole compiles leave garbage for it (the IR's
    nodes and values refer to each other); not resumed after a command that ends the process
    (:func:`entry`'s fast exit), where it would collect all the command made for nothing."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from spc.process import collector_paused

        ctx = click.get_current_context(silent=True)
        last = ctx is not None and _ends_process(ctx.info_name)
        with collector_paused(kwargs.get("precision") != "auto" and kwargs.get("batch") != "auto", resume=not last):
            return fn(*args, **kwargs)

    return wrapper


def _set_verbosity(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:  # ctx.meta is shared by the group's and the command's contexts
        ctx.meta[_VERBOSITY_KEY] = console.QUIET if param.name == "quiet" else console.VERBOSE


def _verbosity(fn: Callable[..., Any]) -> Callable[..., Any]:
    """-q/-v, taken before the command (`spc -q run ...`) or after it (`spc run ... -q`)."""
    fn = click.option("-v", "--verbose", is_flag=True, expose_value=False, callback=_set_verbosity,
                      help="also say what each step did and how long it took (stderr)")(fn)
    return click.option("-q", "--quiet", is_flag=True, expose_value=False, callback=_set_verbosity,
                        help="print only errors and the result asked for (tables, --json)")(fn)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog="\b\nA first run:\n  spc export -o superpoint.onnx\n  spc compile superpoint.onnx -o sp.ttplan\n"
                    "  spc run sp.ttplan img.jpg -o kp.npz\n  spc check sp.ttplan img.jpg\n\n"
                    "`spc COMMAND --help` shows a command's options and examples.")
@click.version_option(package_name="spc")
@_verbosity
def main() -> None:
    """spc: compile SuperPoint ONNX models to Tenstorrent ttnn programs."""


def _command(short_help: str, examples: list[str], name: str | None = None) -> Callable[..., Any]:
    """A subcommand: its one-line help, examples after its options, and -q/-v."""
    epilog = "\b\nExamples:\n" + "\n".join(f"  {e}" for e in examples)
    return lambda fn: main.command(name=name, short_help=short_help, epilog=epilog)(_verbosity(fn))


_JSON = click.option("--json", "as_json", is_flag=True, help="print the result as JSON (stdout)")


def _json_text(obj: Any, indent: int | None = None) -> str:
    """``--json``'s text: JSON itself, a NaN or infinity (a PCC of a constant map) as null."""
    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean(obj), indent=indent, allow_nan=False)


@_command("HF SuperPoint -> ONNX (post-processing included).",
          ["spc export -o superpoint.onnx", "spc export -o sp240.onnx --height 240 --width 320",
           "spc export -o mine.onnx --weights superpoint_v1.pth --max-keypoints 1024",
           "spc export -o sp_b4.onnx --batch 4"])
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("superpoint.onnx"), show_default=True)
@click.option("--height", default=480, show_default=True, help="input height (multiple of 8)")
@click.option("--width", default=640, show_default=True, help="input width (multiple of 8)")
@click.option("--channels", default=3, show_default=True, help="input channels (HF's processor gives 3)")
@click.option("--batch", type=click.IntRange(1, 64), default=1, show_default=True,
              help="images per run (HF's batched forward: outputs padded to the batch's largest keypoint count)")
@click.option("--weights", default=None, help="HF folder, state-dict file or hub id (default: demo weights)")
@click.option("--threshold", type=float, default=None, help="keypoint threshold (HF default 0.005)")
@click.option("--max-keypoints", type=int, default=None, help="keep the top K keypoints (HF default -1: all)")
@click.option("--overwrite", is_flag=True, help="replace the output if it exists (default: refuse)")
@_JSON
@_one_line_errors
def export(output: Path, height: int, width: int, channels: int, batch: int, weights: str | None,
           threshold: float | None, max_keypoints: int | None, overwrite: bool, as_json: bool) -> None:
    """Export Hugging Face SuperPoint (post-processing included) to ONNX."""
    from spc.files import check_outputs

    check_outputs([output], _files_of([Path(weights)] if weights else []), overwrite)
    from spc.frontend.export import export_onnx  # torch + transformers (~1.5 s): after the output is known to be free

    export_onnx(output, height, width, channels, weights, threshold, max_keypoints,
                log=(lambda line: None) if as_json else console.info, batch=batch)
    if as_json:
        import onnx

        meta = {p.key: p.value for p in onnx.load(str(output), load_external_data=False).metadata_props}
        click.echo(_json_text({"output": str(output), "input_shape": [batch, channels, height, width], "opset": 18,
                               "metadata": meta}, indent=1, sort_keys=True))
    else:
        console.info(f"wrote {output} ({height}x{width}x{channels}{f', batch {batch}' if batch > 1 else ''}, opset 18)")


@_command("ONNX -> .ttplan (passes, precision, lowering).",
          ["spc compile superpoint.onnx -o sp.ttplan", "spc compile superpoint.onnx -o sp.ttplan --precision auto",
           "spc compile model.onnx -o sp.ttplan --input-shape 1,1,480,640 --target n150",
           "spc compile superpoint.onnx --dump-dir dumps/ --explain fuse-score-fold",
           "spc -v compile superpoint.onnx -o sp.ttplan --memory-config 'encoder.*=l1:abh=2'"], name="compile")
@click.argument("source", type=click.Path(path_type=Path), required=False)
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None, help="plan file (.ttplan)")
@click.option("--dump-dir", type=click.Path(path_type=Path), default=None,
              help="write NN-<pass>.ir/.dot/.onnx (.onnx: for Netron), NN-device-program.onnx + summary")
@click.option("--print-ir-after-all", is_flag=True, help="print the IR after every pass (stderr)")
@click.option("--stop-after", default=None, metavar="PASS", help="stop the pipeline after PASS (writes no plan)")
@click.option("--disable-pass", "disable_pass", multiple=True, metavar="PASS",
              help="do not run PASS: what it would fuse is lowered op by op (repeatable; the manifest says so)")
@click.option("--nms-single-pass", is_flag=True, help="cheaper NMS without suppression rounds (changes results)")
@click.option("--precision", type=click.Choice(["accurate", "balanced", "fast", "auto"]), default=None,
              help="precision preset, or auto: search per block (default accurate; docs/precision.md)")
@click.option("--precision-config", type=click.Path(path_type=Path), default=None,
              help="TOML file: a preset and per-block overrides")
@click.option("--calib", type=click.Path(path_type=Path), default=None,
              help="auto: folder of calibration images (default: the shipped set)")
@click.option("--min-f1", type=float, default=None, help="auto: absolute keypoint F1 floor")
@click.option("--min-desc-pcc", type=float, default=None, help="auto: absolute descriptor PCC floor")
@click.option("--target", type=click.Choice(list(TARGETS)), default=DEFAULT_TARGET, show_default=True,
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
@click.option("--batch", default="1", show_default=True, metavar="B|auto",
              help="B images per run from a batch-1 model: the image-wise layers batched, the rest once per "
                   "image, outputs stacked as a batch-B export stacks them; auto: of 1, 2, 4, 8 the most "
                   "frames/s predicted end to end (spc inspect shows the figures)")
@click.option("--max-latency-ms", type=click.FloatRange(min=0, min_open=True), default=None, metavar="MS",
              help="with --batch auto: the longest predicted run")
@click.option("--explain", default=None, metavar="RULE|FUSION",
              help="print every candidate of a rewrite rule or fusion, how far it matched and why it stopped "
                   "(names: --list-passes); writes a plan only with -o")
@click.option("--list-passes", is_flag=True, help="list the pipeline (and what --explain can name) and exit")
@click.option("--no-verify", "no_verify", is_flag=True,
              help="write the plan without checking it against the model (default: the plan is run on a seeded "
                   "image and compared with the model's own meaning first; the manifest says which)")
@click.option("--overwrite", is_flag=True,
              help="replace an existing plan, and earlier dumps in --dump-dir (default: refuse)")
@_JSON
@_one_line_errors
@_collector_paused
def compile_(source: Path | None, output: Path | None, dump_dir: Path | None, print_ir_after_all: bool,
             stop_after: str | None, disable_pass: tuple[str, ...], nms_single_pass: bool, precision: str | None,
             precision_config: Path | None,
             calib: Path | None, min_f1: float | None, min_desc_pcc: float | None, target: str,
             memory_config: tuple[str, ...], dense: bool, keypoint_capacity: int | None, kernels: str,
             input_shape: str | None, batch: str, max_latency_ms: float | None, explain: str | None,
             list_passes: bool, no_verify: bool, overwrite: bool, as_json: bool) -> None:
    """Compile an ONNX model into a .ttplan."""
    from spc.process import tune_for_compile

    tune_for_compile()  # before numpy's first import (the compiler's)
    reading = _read_ahead(source, input_shape, list_passes or batch == "auto")
    from spc.compiler import Watch, compile_onnx
    from spc.options import AutoPrecision, CompileOptions
    from spc.passes.pipeline import STAGES, default_pipeline
    from spc.ttnn.memory import MemoryOverrides
    from spc.ttnn.precision import PrecisionPlan, load_precision_config

    if list_passes:
        for i, p in enumerate(default_pipeline(), 1):
            click.echo(f"{i:2d}  {p.name:<24} {p.summary}")
            rules = [r for r in p.explains if r != p.name]
            if rules:
                click.echo(f"    {'':<24} rules: {', '.join(rules)}")
        for i, st in enumerate(STAGES, len(default_pipeline()) + 1):
            click.echo(f"{i:2d}  {st.name:<24} {st.summary}")
        return
    if source is None:
        raise SpcError("compile needs the ONNX file to compile (spc compile SOURCE -o PLAN)")
    if output is None and stop_after is None and explain is None:
        output = source.with_suffix(".ttplan")
    inputs = _files_of([source, *(p for p in (precision_config, calib) if p is not None)])
    if output is not None and stop_after is None:  # the plan is written: never over an input or earlier plan
        from spc.files import check_outputs

        check_outputs([output], inputs, overwrite)
    if dump_dir is not None:
        _check_dump_dir(dump_dir, [*inputs, *([output] if output else [])], overwrite)
    images = _batch_option(batch, max_latency_ms)
    auto = None
    if precision == "auto":
        if images != 1:
            raise SpcError("--precision auto searches on single images, not with --batch: give --batch a "
                           "preset (--precision balanced) or the blocks' choices (--precision-config FILE)")
        if precision_config:
            raise SpcError("--precision auto searches the precision itself; drop --precision-config")
        auto = AutoPrecision(calib, Thresholds(min_f1=min_f1, min_desc_pcc=min_desc_pcc), log=console.note)
        console.note("precision search (emulated, against onnxruntime on the calibration inputs):")
    plan = (load_precision_config(precision_config, precision) if precision_config
            else PrecisionPlan("accurate" if precision in (None, "auto") else precision))
    options = CompileOptions(target=target, precision=plan, auto=auto, memory=MemoryOverrides.from_cli(memory_config),
                             nms_single_pass=nms_single_pass, dense=dense, keypoint_capacity=keypoint_capacity,
                             kernels=kernels == "on", input_shape=_shape_option(input_shape), verify=not no_verify,
                             disabled_passes=tuple(dict.fromkeys(disable_pass)))
    searched = None
    if images is None:  # --batch auto: every size compiled, the best kept
        from spc.compiler import choose_batch

        if stop_after is not None or explain is not None:
            raise SpcError("--batch auto compiles whole plans: give a batch size with --stop-after or --explain")
        images, searched = choose_batch(source, max_latency_ms, options)
        console.note("batch sizes (predicted end to end): " + ", ".join(
            f"{r['batch']}: {r['fps']:.1f} frames/s, {r['run_s'] * 1e3:.1f} ms per run" if r["fits"]
            else f"{r['batch']}: does not fit" for r in searched) + f"; chosen {images}")
    try:
        result = compile_onnx(source, output, options, batch=images, batch_search=searched, reading=reading,
                              watch=Watch(dump_dir, print_ir_after_all, stop_after, explain))
    except OSError as exc:  # writing the dumps (the plan's own write reports itself)
        if dump_dir is None:
            raise
        from spc.files import os_error

        raise os_error(exc.filename or dump_dir, exc, "cannot write the dumps") from None
    if result.explained is not None:
        click.echo(result.explained, nl=False)
    for r in result.records:  # -v: what each pass did (the dumps' summary.txt in full)
        console.detail(f"{r.index:3d}  {r.name:<26} {r.seconds * 1e3:9.1f} ms  {'changed' if r.modified else '-'}")
    if result.validation_s is not None:
        console.detail(f"     {'validation':<26} {result.validation_s * 1e3:9.1f} ms  (docs/validation.md)")
    counts = result.graph.op_counts()
    report: dict[str, Any] = {"plan": str(result.plan) if result.plan else None, "notes": result.notes,
                              "recognised": result.recognised,
                              "passes": [{"name": r.name, "ms": round(r.seconds * 1e3, 3), "changed": r.modified}
                                         for r in result.records]}
    lines: list[str] = []
    if result.plan is not None:
        from spc.ir.graph import Placement

        dev = sum(1 for n in result.graph.nodes if n.placement is Placement.DEVICE)
        macs = result.macs
        fused = {k: v for k, v in counts.items() if k.startswith("spc.")}
        report.update(device_ops=dev, host_ops=len(result.graph.nodes) - dev, fused=fused,
                      device_macs_share=round(macs[0] / (macs[0] + macs[1]), 6) if sum(macs) else None)
        share = f"; {100 * macs[0] / (macs[0] + macs[1]):.1f} % of multiply-adds on the device" if sum(macs) else ""
        lines += [f"wrote {result.plan}: {dev} device ops, {len(result.graph.nodes) - dev} host ops "
                  f"({', '.join(f'{k} x{v}' for k, v in fused.items())}){share}",
                  "recognised: " + "; ".join(result.recognised)]
    elif stop_after is not None:
        lines.append(f"stopped after {stop_after}; no plan written")
    if dump_dir is not None:
        lines.append(f"dumps in {dump_dir}/ (summary.txt)")
    if as_json:
        click.echo(_json_text(report, indent=1))
        return
    for note in result.notes:
        console.note(note)
    for line in lines:
        console.info(line)


def _files_of(paths: list[Path]) -> list[Path]:
    """The files a command reads: files as given, a folder's files (one level: an HF folder, a
    calibration set)."""
    out: list[Path] = []
    for p in paths:
        out.append(p)
        if p.is_dir():
            with contextlib.suppress(OSError):  # the command itself says why it cannot read the folder
                out.extend(f for f in p.iterdir() if f.is_file())
    return out


_DUMP_PATTERNS = ("[0-9][0-9]-*.ir", "[0-9][0-9]-*.dot", "[0-9][0-9]-*.txt", "[0-9][0-9]-*.onnx", "summary.txt")


def _batch_option(text: str, max_latency_ms: float | None) -> int | None:
    """--batch: a size (1..64), or None for auto."""
    if text == "auto":
        return None
    if max_latency_ms is not None:
        raise SpcError("--max-latency-ms bounds --batch auto; drop it or use --batch auto")
    try:
        b = int(text)
    except ValueError:
        raise SpcError(f"--batch {text!r}: expected a number of images (1..64) or auto") from None
    if not 1 <= b <= 64:
        raise SpcError(f"--batch {b}: expected 1..64 images per run, or auto")
    return b


def _check_dump_dir(dump_dir: Path, inputs: list[Path], overwrite: bool) -> None:
    """--dump-dir replaces its own earlier dumps (NN-<pass>.ir/.dot/.onnx/.txt, summary.txt): only with
    --overwrite, and never an input or the plan that happens to be named like one."""
    from spc.files import file_keys

    if os.path.lexists(dump_dir) and not dump_dir.is_dir():
        raise SpcError(f"--dump-dir {dump_dir}: is a file, not a folder; give a folder for the dumps")
    folder = {k for k in file_keys(dump_dir) if k[0] == "path"}
    for p in inputs:
        if {k for k in file_keys(p.parent) if k[0] == "path"} & folder and any(p.match(g) for g in _DUMP_PATTERNS):
            raise SpcError(f"{p}: --dump-dir {dump_dir} writes files of this name; choose another --dump-dir")
    if dump_dir.is_dir() and not overwrite:
        old = sorted(f for g in _DUMP_PATTERNS for f in dump_dir.glob(g))
        if old:
            raise SpcError(f"--dump-dir {dump_dir}: holds earlier dumps ({old[0].name}, ...); pass --overwrite "
                           "to replace them, or choose another folder")


def _read_ahead(source: Path | None, input_shape: str | None, skip: bool) -> Reading | None:
    """The model read, and checked and its shapes inferred in a forked child, while this process
    imports the compiler (frontend/reading.py); None where the command reads no one model. What
    the read finds is raised where the compile reads the model: the options are checked first.
    The child ends with the command (a refusal of an option, Ctrl-C)."""
    ctx = click.get_current_context(silent=True)
    if source is None or skip or ctx is None:  # (no context: nothing would end the child)
        return None
    try:
        shape = _shape_option(input_shape)
    except SpcError:  # refused where the options are read
        return None
    from spc.frontend.reading import begin

    reading = begin(source, shape, ahead=True)
    ctx.call_on_close(reading.cancel)
    return reading


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
    if importlib.util.find_spec("ttnn") is not None:
        return
    checkout = Path(__file__).resolve().parents[1]  # a source checkout keeps its ttnn environment there
    python = os.environ.get("SPC_TTNN_PYTHON") or str(checkout / ".venv-ttnn" / "bin" / "python")
    if not Path(python).exists():
        raise SpcError("the ttnn backends need ttnn 0.81.1 (Python 3.10/3.12): run `make mock-env`, or set "
                       "SPC_TTNN_PYTHON to a Python that has it")
    os.execv(python, [python, "-m", "spc.cli", *sys.argv[1:]])


def _inputs(paths: tuple[Path, ...], skipped: Any = None) -> list[Path]:
    """The input files: folders walked whole (runtime/inputs.py; what they left out counted in
    ``skipped``, a Skipped)."""
    from spc.runtime.inputs import expand_paths

    if not paths:
        raise SpcError("no input given")
    return expand_paths(list(paths), skipped)


def _run_target(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--target", type=click.Choice(list(TARGETS)), default=None,
                        help=f"the chip the plan must be for (default: {DEFAULT_TARGET}); a plan for another "
                             "is refused unless this names its target")(fn)


def _read_plan(path: Path, target: str | None) -> Any:
    from spc.plan.io import read_plan

    if path.suffix.lower() == ".onnx" and path.is_file():
        raise SpcError(f"{path}: an ONNX model, not a plan; compile it first: spc compile {path} -o "
                       f"{path.with_suffix('.ttplan').name}")
    return read_plan(path, target or DEFAULT_TARGET)


_NONFINITE = click.option("--allow-nonfinite", is_flag=True,
                          help="run on inputs holding NaN, inf or values beyond float32 (default: refuse them)")


def _extraction_options(fn: Callable) -> Callable:
    """SuperPoint's standard extraction, for a plan whose model returns raw heads (runtime/extraction.py)."""
    for option in reversed([
            click.option("--threshold", type=float, default=0.005, show_default=True,
                         help="raw-heads plans: the score a keypoint must pass"),
            click.option("--nms-radius", type=click.IntRange(0, 64), default=4, show_default=True,
                         help="raw-heads plans: the NMS window's radius (pixels)"),
            click.option("--border", type=click.IntRange(0, 4096), default=4, show_default=True,
                         help="raw-heads plans: pixels removed at every side"),
            click.option("--max-keypoints", type=click.IntRange(-1, 1 << 20), default=-1, show_default=True,
                         help="raw-heads plans: keep the top K by score (-1: every one above the threshold)")]):
        fn = option(fn)
    return fn


@_command("Run a plan on images, videos or .npy files -> .npz or an hloc features.h5.",
          ["spc run sp.ttplan img.jpg -o kp.npz", "spc run sp.ttplan images/ -o out/ --viz viz/",
           "spc run sp.ttplan images/ --format h5 -o features.h5 --resize fit",
           "spc run sp.ttplan clip.mp4 -o out/ --json",
           "spc run sp.ttplan frame.npy --dense", "spc run sp.ttplan img.jpg --backend ttnn-mock",
           "spc run sp.ttplan photos/ -o out/ --ray", "spc run sp.ttplan list.txt -o out/ --ray 10.0.0.5:6379"])
@click.argument("plan", type=click.Path(path_type=Path))
@click.argument("inputs", nargs=-1, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="npz: .npz for one input (default: beside it, x.png -> x.png.npz), a folder for several: each "
                   "input's path below the folder holding all inputs, plus .npz (a/x.png b/x.jpg -> "
                   "OUT/a/x.png.npz OUT/b/x.jpg.npz); a video's frames add .frame_000001 ... before .npz. "
                   "h5: the one .h5 file (default ./features.h5; a folder: its features.h5), one group per "
                   "input named by that relative path (a video's frames: VIDEO/frame_000001 ...)")
@click.option("--format", "fmt", type=click.Choice(["npz", "h5"]), default="npz", show_default=True,
              help="npz: the ONNX outputs as the model returns them, plus image_size; h5: hloc's features.h5 "
                   "(keypoints (N,2) in original-image pixels, scores, descriptors (D,N), image_size (W,H)), "
                   "appended to an existing file (docs/outputs.md)")
@click.option("--resize", type=click.Choice(["stretch", "fit"]), default="stretch", show_default=True,
              help="images of another size than the plan's: stretch to it, or fit: keep the aspect ratio, "
                   "pad with zeros at the right or bottom (keypoints there are dropped)")
@click.option("--dense", is_flag=True, help="also save the device's score and descriptor maps (npz)")
@click.option("--viz", type=click.Path(path_type=Path), default=None,
              help="overlay PNG on the original image (a folder for several, named as -o's .npz files with .png)")
@click.option("--overwrite", is_flag=True,
              help="replace existing .npz/PNG files or .h5 groups (default: refuse, writing nothing)")
@click.option("--json", "as_json", is_flag=True,
              help="one JSON object per frame (input, frame, output, keypoints, image_size, resized), then a summary")
@_NONFINITE
@click.option("--backend", type=click.Choice(["emu", "ttnn-mock", "ttnn"]), default="emu", show_default=True,
              help="emu: CPU with device numerics; ttnn-mock: real ttnn on a mock p150 (validation only)")
@_run_target
@click.option("--no-trace", is_flag=True, help="ttnn: run call by call instead of replaying a captured trace")
@click.option("--ray", "ray_address", is_flag=False, flag_value="", default=None, metavar="[ADDRESS]",
              help="run one DATASET (a folder tree, a glob or a list file) on Ray Data: at the cluster at ADDRESS, "
                   "or without one a local Ray on 127.0.0.1; resumable (images done by this plan are skipped, "
                   "--overwrite redoes them); -o is a folder; pip install 'spc[ray]'")
@click.option("--ray-actors", type=click.IntRange(1, 4096), default=None,
              help="--ray: device actors (default: one per CPU core for emu, else one)")
@click.option("--coords", type=click.Choice(["onnx", "pixels"]), default="onnx", show_default=True,
              help="npz: onnx: the model's outputs as it returns them; pixels: keypoints (N,2) in the original "
                   "image's pixels, scores (N,), descriptors (N,D), as h5 and the Python API give them")
@click.option("--keep-going", is_flag=True,
              help="an input that cannot be read is reported with its reason and skipped; the others run (exit "
                   "status 1 says some failed)")
@click.option("--skip-existing", is_flag=True,
              help="keep the results this plan made already (their plan sha256 is this plan's): a rerun after an "
                   "interruption goes on where it stopped")
@_extraction_options
@_one_line_errors
def run(plan: Path, inputs: tuple[Path, ...], output: Path | None, fmt: str, resize: str, dense: bool,
        viz: Path | None, overwrite: bool, as_json: bool, allow_nonfinite: bool, backend: str, target: str | None,
        no_trace: bool, ray_address: str | None = None, ray_actors: int | None = None, coords: str = "onnx",
        keep_going: bool = False,
        skip_existing: bool = False, threshold: float = 0.005, nms_radius: int = 4, border: int = 4,
        max_keypoints: int = -1) -> None:
    """Run a plan on images, videos or .npy inputs; write the model's outputs as .npz, or hloc's
    features.h5 layout with --format h5.

    Every input is checked from its header before anything is written; frames are then decoded as
    they are needed, two ahead, so memory does not grow with the number of inputs. No output
    replaces an input, the plan or another output of the run; existing results are kept unless
    --overwrite is given."""
    if backend.startswith("ttnn"):
        _ttnn_interpreter()
    if ray_address is not None:
        from spc.tools.ray_run import run_cli

        if coords != "onnx" or keep_going or skip_existing:
            raise SpcError("--ray keeps going past bad images and skips what this plan made by itself, and writes "
                           "the model's outputs (--coords onnx): drop --coords, --keep-going and --skip-existing")

        run_cli(plan, inputs, output, ray_address or None, fmt=fmt, viz=viz, backend=backend, actors=ray_actors,
                resize=resize, dense=dense, allow_nonfinite=allow_nonfinite, as_json=as_json, target=target,
                redo=overwrite)
        return
    from spc.runtime.extraction import Extraction
    from spc.runtime.inputs import Skipped
    from spc.tools.run import run_files

    skipped = Skipped()
    files = _inputs(inputs, skipped)
    loaded = _read_plan(plan, target)
    if len(loaded.program.inputs) > 1:  # a matcher's tensors, not images
        from spc.tools.run_tensors import run_tensor_files

        run_tensor_files(loaded, files, output, backend, trace=not no_trace, plan_path=plan, overwrite=overwrite,
                         allow_nonfinite=allow_nonfinite, as_json=as_json,
                         image_options={"--viz": viz, "--format": fmt, "--resize": resize, "--dense": dense,
                                        "--coords": coords, "--keep-going": keep_going,
                                        "--skip-existing": skip_existing})
        return
    run_files(loaded, files, output, viz, dense, backend, trace=not no_trace, plan_path=plan,
              overwrite=overwrite, allow_nonfinite=allow_nonfinite, fmt=fmt, resize=resize, as_json=as_json,
              extraction=Extraction(threshold, nms_radius, border, max_keypoints),
              root=inputs[0] if len(inputs) == 1 and inputs[0].is_dir() else None, keep_going=keep_going,
              skip_existing=skip_existing, skipped=skipped, coords=coords)


@_command("Extract and match image pairs -> hloc's features.h5 and matches.h5.",
          ["spc match sp.ttplan lg.ttplan img0.jpg img1.jpg", "spc match sp.ttplan lg.ttplan images/ --pairs pairs.txt "
           "-o out/", "spc match sp.ttplan lg.ttplan images/ --viz viz/ --json"])
@click.argument("extractor", type=click.Path(path_type=Path))
@click.argument("matcher", type=click.Path(path_type=Path))
@click.argument("inputs", nargs=-1, type=click.Path(path_type=Path))
@click.option("--pairs", "pairs_file", type=click.Path(path_type=Path), default=None,
              help="hloc's pairs file, a line 'name0 name1' per pair, names relative to the folder given (default: "
                   "every pair of the inputs)")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="matches.h5 (default ./matches.h5; a folder: its matches.h5)")
@click.option("--features", type=click.Path(path_type=Path), default=None,
              help="features.h5, the keypoints the matches index (default: beside the matches)")
@click.option("--viz", type=click.Path(path_type=Path), default=None,
              help="a folder: one PNG per pair, the two images side by side and a line per match")
@click.option("--resize", type=click.Choice(["stretch", "fit"]), default="stretch", show_default=True,
              help="images of another size than the extractor's: as spc run resizes them")
@click.option("--keypoint-coords", "coords", type=click.Choice(["pixels", "normalized"]), default="pixels",
              show_default=True, help="the matcher's keypoint inputs: pixels, or LightGlue's normalised coordinates "
                                      "(for an export that takes them so and no image size)")
@click.option("--overwrite", is_flag=True, help="replace features, pairs and PNGs already written")
@click.option("--skip-existing", is_flag=True,
              help="keep what these two plans made already: a rerun after an interruption goes on where it stopped")
@_JSON
@_NONFINITE
@click.option("--backend", type=click.Choice(["emu", "ttnn-mock", "ttnn"]), default="emu", show_default=True)
@_run_target
@click.option("--no-trace", is_flag=True, help="ttnn: run call by call instead of replaying a captured trace")
@_extraction_options
@_one_line_errors
def match(extractor: Path, matcher: Path, inputs: tuple[Path, ...], pairs_file: Path | None, output: Path | None,
          features: Path | None, viz: Path | None, resize: str, coords: str, overwrite: bool, skip_existing: bool,
          as_json: bool, allow_nonfinite: bool, backend: str, target: str | None, no_trace: bool,
          threshold: float = 0.005, nms_radius: int = 4, border: int = 4, max_keypoints: int = -1) -> None:
    """Extract every image of the pairs with EXTRACTOR (its K best keypoints, K the matcher's), then
    match every pair with MATCHER (LightGlue, SuperGlue or any model taking two images' keypoints and
    descriptors, recognised by their shapes). Writes hloc's features.h5 and matches.h5 (matches0,
    matching_scores0 per pair) as hloc's extract_features and match_features write them."""
    if backend.startswith("ttnn"):
        _ttnn_interpreter()
    from spc.runtime.extraction import Extraction
    from spc.tools.match import match_files

    files = _inputs(inputs)
    match_files(_read_plan(extractor, target), _read_plan(matcher, target), files, pairs_file, output, features, viz,
                backend, extract_path=extractor, match_path=matcher, trace=not no_trace, overwrite=overwrite,
                skip_existing=skip_existing, as_json=as_json,
                root=inputs[0] if len(inputs) == 1 and inputs[0].is_dir() else None, resize=resize, coords=coords,
                allow_nonfinite=allow_nonfinite, extraction=Extraction(threshold, nms_radius, border, max_keypoints))


@_command("Per-phase timings of a plan on a backend (for hardware: ttnn).",
          ["spc bench sp.ttplan img.jpg --backend ttnn --frames 100", "spc bench sp.ttplan img.jpg --json"])
@click.argument("plan", type=click.Path(path_type=Path))
@click.argument("inputs", nargs=-1, type=click.Path(path_type=Path))
@click.option("--backend", type=click.Choice(["emu", "ttnn-mock", "ttnn"]), default="emu", show_default=True)
@click.option("--frames", type=click.IntRange(1, 10000), default=20, show_default=True)
@click.option("--no-trace", is_flag=True, help="ttnn: call by call instead of trace replay")
@_run_target
@_JSON
@_one_line_errors
def bench(plan: Path, inputs: tuple[Path, ...], backend: str, frames: int, no_trace: bool, target: str | None,
          as_json: bool) -> None:
    """Time a plan frame by frame: host pre, input write, device (trace replay), read-back, host
    post; forward-only and end-to-end fps, beside the hand-written port's."""
    if backend.startswith("ttnn"):
        _ttnn_interpreter()
    from spc.tools.bench import bench_plan, print_bench

    report = bench_plan(_read_plan(plan, target), _inputs(inputs), backend, frames, trace=not no_trace)
    if as_json:
        click.echo(_json_text(asdict(report), indent=1))
    else:
        print_bench(report)


@_command("Compare a plan with onnxruntime on the source ONNX.",
          ["spc check sp.ttplan img.jpg", "spc check sp.ttplan images/ --min-f1 0.95 --min-pcc 0.99 --json",
           "spc check sp.ttplan img.jpg --onnx elsewhere/superpoint.onnx",
           "spc check sp_b4.ttplan images/ --reference sp_b4.onnx",
           "spc check sp.ttplan img.jpg --per-layer", "spc check sp.ttplan img.jpg --per-layer --min-pcc 0.999 --json"])
@click.argument("plan", type=click.Path(path_type=Path))
@click.argument("inputs", nargs=-1, type=click.Path(path_type=Path))
@click.option("--onnx", "onnx_path", type=click.Path(path_type=Path), default=None, help="the source ONNX")
@click.option("--reference", type=click.Path(path_type=Path), default=None, metavar="ONNX",
              help="compare with onnxruntime on another export of the same network instead of the source "
                   "(a --batch plan against HF's batch-B export: spc export --batch B)")
@_JSON
@click.option("--min-f1", type=float, default=None,
              help="exit 1 if any input's keypoint F1 is lower (a matcher: its match-set F1)")
@click.option("--min-pcc", type=float, default=None,
              help="exit 1 if any score/descriptor PCC is lower (--per-layer: any tensor's; marks the first)")
@click.option("--per-layer", is_flag=True,
              help="compare every device tensor that holds an ONNX value, in program order (emu; docs/accuracy.md)")
@click.option("--backend", type=click.Choice(["emu", "ttnn-mock", "ttnn"]), default="emu", show_default=True)
@_run_target
@_NONFINITE
@_one_line_errors
def check(plan: Path, inputs: tuple[Path, ...], onnx_path: Path | None, reference: Path | None, as_json: bool,
          min_f1: float | None, min_pcc: float | None, per_layer: bool, backend: str, target: str | None,
          allow_nonfinite: bool) -> None:
    """Compare a plan with onnxruntime on the source ONNX.

    With --per-layer: every device tensor that holds a value of the ONNX model, in program order,
    with its PCC, largest difference, relative error, block and precision; the first tensor under
    --min-pcc (default 0.99 for the mark) and the block that adds the most error are marked."""
    from spc.tools.check import check_files, per_layer_files, print_per_layer, print_reports

    files = _inputs(inputs)
    loaded = _read_plan(plan, target)
    if reference is not None and onnx_path is not None:
        raise SpcError("--reference replaces the source ONNX in the comparison: give one of --onnx, --reference")
    if per_layer:
        if reference is not None:
            raise SpcError("--per-layer compares the plan's tensors with the source's values: drop --reference")
        if backend != "emu":
            raise SpcError("--per-layer reads every device tensor, which only the emu backend keeps")
        if min_f1 is not None:
            raise SpcError("--min-f1 is a bar for the end-to-end check; --per-layer compares tensors (--min-pcc)")
        layers = per_layer_files(loaded, plan, files, onnx_path, min_pcc, allow_nonfinite=allow_nonfinite)
        if as_json:
            click.echo(_json_text([r.as_dict() for r in layers], indent=1))
        else:
            for r in layers:
                print_per_layer(r)
        low = [r for r in layers if min_pcc is not None and r.first_under is not None]
        if low:
            click.echo(f"spc: check failed on {len(low)} of {len(layers)} input(s): "
                       + ", ".join(f"{r.input} ({r.first_under})" for r in low), err=True)
            sys.exit(1)
        return
    reports = check_files(loaded, plan, files, onnx_path, backend, allow_nonfinite=allow_nonfinite,
                          reference=reference)
    if as_json:
        click.echo(_json_text([r.as_dict() for r in reports], indent=1))
    else:
        print_reports(reports)
    # a measure the model has no outputs for (F1 of a model without keypoints) is not a failure
    failed = [r for r in reports if (min_f1 is not None and r.worst_f1() < min_f1) or
              (min_pcc is not None and r.worst_pcc() < min_pcc)]
    if failed:
        click.echo(f"spc: check failed on {len(failed)} of {len(reports)} input(s): "
                   + ", ".join(r.input for r in failed), err=True)
        sys.exit(1)


def _is_plan(path: Path) -> bool:
    """``spc inspect``'s choice: a .ttplan is a plan, a .onnx a model, anything else a plan when it
    is a zip (what a plan is), else a model. Neither reader trusts the choice."""
    if path.suffix.lower() in (".ttplan", ".onnx"):
        return path.suffix.lower() == ".ttplan"
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PK\x03\x04"
    except OSError:
        return True  # the plan reader says what is wrong with the path


@_command("What a plan (or an ONNX model) is; a plan's ttnn calls and per-frame totals.",
          ["spc inspect sp.ttplan", "spc inspect sp.ttplan --json", "spc inspect superpoint.onnx"])
@click.argument("path", metavar="PLAN|MODEL.onnx", type=click.Path(path_type=Path))
@_JSON
@_one_line_errors
def inspect(path: Path, as_json: bool) -> None:
    """Show what a plan is (source ONNX, input/output specs, target, precision, options, versions,
    weights origin), then its device program call by call and its per-frame totals.

    Given an ONNX model instead: its opsets, producer, inputs and outputs, initializers, nodes by
    op type and metadata_props (the model is validated as `spc compile` reads it; no torch needed)."""
    if not _is_plan(path):
        from spc.tools.inspect_onnx import model_report, report_lines

        model = model_report(path)
        click.echo(_json_text(model.as_dict(), indent=1) if as_json else "\n".join(report_lines(model)))
        return
    from spc.plan.io import read_plan
    from spc.tools.inspect import plan_report, print_report

    report = plan_report(read_plan(path), str(path))
    if as_json:
        click.echo(_json_text(report.as_dict(), indent=1))
    else:
        print_report(report)


@_command("One self-contained HTML page about a plan (with INPUT: per-layer check, keypoints).",
          ["spc report sp.ttplan -o report.html", "spc report sp.ttplan img.jpg -o report.html",
           "spc report sp.ttplan img.jpg -o report.html --onnx elsewhere/superpoint.onnx"])
@click.argument("plan", type=click.Path(path_type=Path))
@click.argument("input_path", metavar="[INPUT]", required=False, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("report.html"), show_default=True,
              help="the HTML page (one file: charts, image and style inside it)")
@click.option("--onnx", "onnx_path", type=click.Path(path_type=Path), default=None,
              help="the source ONNX, for the per-layer comparison (default: beside the plan)")
@click.option("--min-pcc", type=float, default=None,
              help="per-layer: mark tensors under this PCC (default: spc check --per-layer's, 0.99)")
@click.option("--overwrite", is_flag=True, help="replace the output if it exists (default: refuse)")
@_run_target
@_NONFINITE
@_JSON
@_one_line_errors
def report(plan: Path, input_path: Path | None, output: Path, onnx_path: Path | None, min_pcc: float | None,
           overwrite: bool, target: str | None, allow_nonfinite: bool, as_json: bool) -> None:
    """Write one HTML page that needs no network to view: what the plan is, the pass pipeline, L1
    on the fullest core and the predicted time call by call (charts), the device program as a
    table; given an INPUT (an image or a .npy), also the per-layer comparison with onnxruntime on
    the source ONNX and the keypoints drawn on the image (emulator)."""
    from spc.files import check_outputs
    from spc.tools.report import write_report

    check_outputs([output], [plan, *(p for p in (input_path, onnx_path) if p is not None)], overwrite)
    data = write_report(_read_plan(plan, target), plan, output, input_path, onnx_path, allow_nonfinite, min_pcc)
    kp = data.input.keypoints if data.input is not None else None
    if as_json:
        click.echo(_json_text({"output": str(output), "input": str(input_path) if input_path else None,
                               "keypoints": kp, "per_layer": bool(data.input and data.input.per_layer)}))
    else:
        console.info(f"wrote {output}" + (f" ({kp} keypoints on {input_path.name})" if kp is not None and input_path
                                           else ""))


@_command("A plan's device stage as a standalone ttnn program.",
          ["spc emit-py sp.ttplan -o program.py", "python program.py sp.ttplan input.npy out.npz --mock"],
          name="emit-py")
@click.argument("plan", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("program.py"), show_default=True)
@click.option("--overwrite", is_flag=True, help="replace the output if it exists (default: refuse)")
@_run_target
@_JSON
@_one_line_errors
def emit_py(plan: Path, output: Path, overwrite: bool, target: str | None, as_json: bool) -> None:
    """Write the plan's device stage as a standalone Python program calling ttnn."""
    from spc.files import atomic_write, check_outputs
    from spc.tools.emit_py import emit_py as emit

    check_outputs([output], [plan], overwrite)
    atomic_write(output, emit(_read_plan(plan, target)).encode())
    if as_json:
        click.echo(_json_text({"output": str(output)}))
    else:
        console.info(f"wrote {output}")


@_command("Which per-block precision choices lose accuracy.",
          ["spc bisect accurate.ttplan fast.ttplan images/", "spc bisect accurate.ttplan fast.ttplan img.jpg --json"])
@click.argument("safe", type=click.Path(path_type=Path))
@click.argument("fast", type=click.Path(path_type=Path))
@click.argument("inputs", nargs=-1, type=click.Path(path_type=Path))
@click.option("--onnx", "onnx_path", type=click.Path(path_type=Path), default=None, help="the source ONNX")
@_JSON
@_one_line_errors
def bisect(safe: Path, fast: Path, inputs: tuple[Path, ...], onnx_path: Path | None, as_json: bool) -> None:
    """Find the smallest set of per-block precision differences that makes FAST lose accuracy."""
    from spc.plan.io import read_plan
    from spc.tuning.bisect import bisect as run_bisect

    files = _inputs(inputs)
    result = run_bisect(read_plan(safe), safe, read_plan(fast), files, onnx_path,
                        log=(lambda line: None) if as_json else console.note)
    if as_json:
        click.echo(_json_text({"message": result.message, "culprits": [asdict(d) for d in result.culprits],
                               "differences": [asdict(d) for d in result.differences],
                               "safe": asdict(result.safe), "fast": asdict(result.fast)}, indent=1))
        return
    click.echo(result.message)
    for d in result.culprits:
        click.echo(f"  {d}")


def entry() -> None:
    """The ``spc`` console script and ``python -m spc.cli``: :data:`main`, then, after a command of
    :data:`_FAST_EXIT`, the process ends without the interpreter's teardown (its files are
    written: files.atomic_write syncs them; stdout and stderr are flushed here)."""
    _entry.append(True)
    try:
        code: Any = main.main(prog_name="spc", standalone_mode=False)
        code = code if isinstance(code, int) else 0
    except SystemExit as exc:
        code = exc.code
    except click.exceptions.NoArgsIsHelpError as exc:  # `spc` alone: its help, as `spc --help`
        click.echo(exc.format_message())
        code = 0
    except click.ClickException as exc:  # bad usage (an unknown option, a missing argument): one line, exit 1
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        sys.stderr.write(f"spc: error: {one_line(exc.format_message())}{hint}\n")
        code = 1
    except click.Abort:  # ctrl-c at a prompt
        sys.stderr.write("spc: error: interrupted\n")
        code = 1
    if not (_ran and _ends_process(_ran[-1]) and (code is None or isinstance(code, int))):
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing more can reach it
            stream.flush()
    os._exit(code or 0)


if __name__ == "__main__":
    entry()
