"""`spc inspect PLAN`: what a plan is and what it will do on the device, call by call, and per frame.

First a header from the manifest: the source ONNX (name, sha256), the input and output specs,
the target, the precision preset and rules, the compile options, the spc and plan-format
versions, and where the weights came from when the source recorded it (``spc export`` writes
``spc.weights.*`` into the ONNX metadata_props; ``spc compile`` keeps them as model_metadata).
Everything in it is the plan's data, printed escaped and bounded, never as markup.

Per call: the ttnn op, its precision block, its output (values, format), its memory
configuration (L1 or DRAM path and slices, as the memory planner chose: memory/planner.py) and shard
(cores x rows x channels of the output on one core), the L1 its
busiest core needs while it runs and the room left (memory/residency.py: the L1 model checked
against ttnn's allocator), and its predicted time and share (memory/cost.py). Per frame:
predicted device time, bytes host-to-device and device-to-host, layout conversions, calls.
"""

from __future__ import annotations

import json
import os
from typing import Any

from msgspec import Struct, field

from spc.memory.call_specs import op_memory, writes_dram
from spc.memory.dram import dram_peak
from spc.memory.l1 import L1Use
from spc.memory.residency import walk
from spc.memory.throughput import D2H_CALL_S, HOST_POST_S, UPLOAD_S, Throughput, device_seconds
from spc.plan.io import Plan
from spc.plan.program import TtOp, numel
from spc.records import asdict
from spc.ttnn.formats import DataFormat
from spc.ttnn.memory import BufferType
from spc.ttnn.targets import get_target
from spc.version import __version__

CONVERSIONS = {"ttnn.to_layout", "ttnn.typecast", "ttnn.to_memory_config"}


class CallRow(Struct):
    index: int
    op: str
    block: str
    values: int
    dtype: str
    memory: str
    shard: str  # per core: rows x columns of the output (height-sharded calls)
    l1_peak: int  # bytes on the busiest core while the call runs, tensors already in L1 included
    headroom: int
    predicted_us: float
    share: float
    l1_before: int = 0  # of l1_peak, the tensors earlier calls left in L1 (the rest is the call's own)


class PlanReport(Struct):
    target: str
    precision: str
    calls: list[CallRow]
    predicted_device_ms: float
    h2d_bytes: int
    d2h_bytes: int
    layout_conversions: int
    l1_budget: int
    host_pre: int = 0  # host nodes before the device stage
    host_post: int = 0  # and after it
    host_reasons: list[str] = field(default_factory=list)  # why the first host-post nodes are not on the device
    device_macs_share: float = 1.0
    # the header: what the plan is
    plan_file: str = ""
    source: dict[str, str] = field(default_factory=dict)  # the ONNX it was compiled from: file, sha256
    image: dict[str, str] | None = None  # how a picture fills the input (plan/program.py ImageInput)
    inputs: list[dict[str, Any]] = field(default_factory=list)  # name, dtype, shape
    outputs: list[dict[str, Any]] = field(default_factory=list)
    precision_rules: list[dict[str, Any]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)  # the compile options, as the manifest records them
    spc_version: str = ""
    format_version: int = 0
    weights: dict[str, str] = field(default_factory=dict)  # spc.weights.* of the source, without the prefix
    model_metadata: dict[str, str] = field(default_factory=dict)  # the source's metadata_props, as kept
    # a run end to end (memory/throughput.py): images, device time, host calls, frames per second
    throughput: dict[str, Any] = field(default_factory=dict)
    dram_peak_bytes: int = 0  # the most bytes alive at once, every tensor counted as in DRAM (memory/dram.py)
    dram_bytes: int = 0  # one chip's
    batch_search: list[dict[str, Any]] = field(default_factory=list)  # --batch auto: each size tried

    def as_dict(self) -> dict:
        return asdict(self)


def _memory(op: TtOp) -> str:
    if "slice_config" in op.args:
        mem = op_memory(op)
        if mem.path is BufferType.L1:
            return "L1 height-sharded" + (f", act_block_h {mem.act_block_h}" if mem.act_block_h else "")
        return f"DRAM, {mem.slices} {mem.slicing.type.dim} slice(s)"
    return "DRAM" if writes_dram(op) else "as input"


def _shard(op: TtOp, use: L1Use) -> str:
    if op.op not in ("ttnn.conv2d", "ttnn.max_pool2d") or not use.shard_rows:
        return ""
    where = "" if use.output_in_l1 else " per slice"
    return f"{use.cores} x [{use.shard_rows}, {op.shape[-1]}]{where}"


def plan_report(plan: Plan, plan_file: str = "") -> PlanReport:
    p = plan.program
    target = get_target(plan.manifest.get("target", "p150"))
    records = walk(p, target)
    total = device_seconds(sum(r.seconds for r in records)) or 1.0
    dtypes = {op.output: op.dtype for op in p.device_ops}
    dtypes.update({name: dt for op in p.device_ops for name, dt in zip(op.extra_outputs, op.extra_dtypes)})
    rows = [CallRow(i, f"kernel {r.op.args['kernel']}" if r.op.op == "spc.kernel" else r.op.op,
                    r.op.block or r.op.source, r.values, r.op.dtype.value, _memory(r.op),
                    _shard(r.op, r.placed.use), r.placed.total, r.placed.headroom, device_seconds(r.seconds) * 1e6,
                    device_seconds(r.seconds) / total,
                    r.placed.live_before)
            for i, r in enumerate(records)]
    h2d = sum(int(numel(t.device_shape) * p.input_format(t.name).bytes_per_value) for t in p.device_inputs)
    d2h = sum(int(numel(t.device_shape) * dtypes.get(t.name, DataFormat.BFLOAT16).bytes_per_value)
              for t in p.device_outputs)
    preset = plan.manifest.get("options", {}).get("precision", {})
    precision = preset.get("preset", "?") + (f" + {len(preset['rules'])} override(s)" if preset.get("rules") else "")
    macs = plan.manifest.get("macs", {})
    share = macs.get("device", 1) / max(macs.get("device", 1) + macs.get("host", 0), 1)
    m = plan.manifest
    metadata = dict(m.get("model_metadata") or {})
    return PlanReport(target.name, precision, rows, total * 1e3, h2d, d2h,
                      sum(1 for op in p.device_ops if op.op in CONVERSIONS), target.l1_budget_bytes,
                      len(p.host_pre), len(p.host_post), list(m.get("host_reasons", [])), share,
                      plan_file=plan_file, source=dict(m.get("source", {})),
                      inputs=[dict(t) for t in m.get("inputs", [])], outputs=[dict(t) for t in m.get("outputs", [])],
                      precision_rules=list(preset.get("rules", [])), options=dict(m.get("options", {})),
                      spc_version=str(m.get("spc_version", "")), format_version=int(m.get("format_version", 0)),
                      weights={k.removeprefix("spc.weights."): v for k, v in metadata.items()
                               if k.startswith("spc.weights.")},
                      model_metadata=metadata,
                      throughput={**Throughput.of(plan, total).as_dict(), "chips": target.chips},
                      batch_search=[dict(r) for r in m.get("batch_search") or [] if isinstance(r, dict)],
                      dram_peak_bytes=dram_peak(p)[0], dram_bytes=target.dram_bytes,
                      image=asdict(p.image) if p.image.layout != "none" else None)


def clean(value: Any, limit: int = 200) -> str:
    """A value from a file, as one printable line of at most ``limit`` characters: control
    characters escaped, the rest cut with ``...``."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
    if not text.isprintable():
        text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _spec(t: dict[str, Any]) -> str:
    shape = t.get("shape")
    dims = "?" if not isinstance(shape, list) else "[" + ", ".join(clean(d, 32) for d in shape[:32]) + (
        ", ..." if len(shape) > 32 else "") + "]"
    return f"{clean(t.get('name', '?'), 100)} {clean(t.get('dtype', '?'), 16)} {dims}"


def header_lines(report: PlanReport) -> list[str]:
    """The header of ``spc inspect PLAN``: what the plan is, each line plain text."""
    this = "" if report.spc_version == __version__ else f" (this is spc {__version__})"
    lines = [f"plan: {clean(report.plan_file or '?')}, plan format {report.format_version}, "
             f"written by spc {clean(report.spc_version, 64)}{this}",
             f"source: {clean(report.source.get('file', '?'))}, sha256 {clean(report.source.get('sha256', '?'), 64)}"]
    lines += [f"input:  {_spec(t)}" for t in report.inputs[:16]]
    if report.image is not None and report.inputs:  # how a picture fills it (docs/outputs.md)
        lines[-1] += f" (pictures read {report.image['layout']}, {report.image['colour']})"
    lines += [f"output: {_spec(t)}" for t in report.outputs[:64]]
    rules = "; ".join(" ".join(f"{clean(k, 32)}={clean(v, 64)}" for k, v in r.items()) if isinstance(r, dict)
                      else clean(r, 64) for r in report.precision_rules[:16])
    more = f"; ... {len(report.precision_rules) - 16} more" if len(report.precision_rules) > 16 else ""
    lines.append(f"target: {report.target}; precision: {clean(report.precision, 100)}"
                 + (f" (rules: {rules}{more})" if rules else ""))
    options = [f"{clean(k, 32)}={clean(v, 100)}" for k, v in report.options.items() if k != "precision"]
    lines.append("options: " + (" ".join(options[:32]) or "(none recorded)"))
    w = report.weights
    if w:
        digest = f", sha256 {clean(w['sha256'], 64)}" if "sha256" in w else ""
        digest += f", revision {clean(w['revision'], 64)}" if "revision" in w else ""
        lines.append(f"weights: {clean(w.get('source', '?'), 32)} {clean(w.get('name', '?'), 200)}{digest}")
        if "note" in w:
            lines.append(f"  {clean(w['note'], 400)}")
    elif report.model_metadata:
        lines.append("weights: not recorded by the source ONNX (no spc.weights.* in its metadata_props)")
    else:
        lines.append("weights: not recorded (the source ONNX has no metadata_props; `spc export` writes them)")
    others = [k for k in report.model_metadata if not k.startswith("spc.weights.")]
    if others:
        shown = ", ".join(f"{clean(k, 64)}={clean(report.model_metadata[k], 64)}" for k in others[:16])
        lines.append(f"model metadata: {shown}" + (f", ... {len(others) - 16} more" if len(others) > 16 else ""))
    return lines


def _console(*renderables: Any) -> Any:
    """A console as wide as the terminal; written to a file or pipe (and no COLUMNS set), as wide
    as the widest of ``renderables`` needs, so that every row stays on one line."""
    from rich.console import Console  # rich (~20 ms): only the printed table needs it, not --json or spc report
    from rich.measure import Measurement

    console = Console(highlight=False)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        wide = Console(width=10_000, highlight=False)
        need = max((Measurement.get(wide, wide.options, r).maximum for r in renderables), default=80)
        console.width = max(80, min(need, 1000))
    return console


def print_report(report: PlanReport) -> None:
    from rich.table import Table  # rich: as in _console
    from rich.text import Text

    table = Table(title=Text(f"device program: {len(report.calls)} ttnn calls, target {report.target}, "
                             f"precision {clean(report.precision, 100)}"))
    columns = ("#", "call", "block", "output values", "format", "memory", "cores x shard", "L1 peak/core",
               "headroom", "pred. us", "share")
    numeric = ("#", "output values", "L1 peak/core", "headroom", "pred. us", "share")
    rows = [tuple(Text(clean(c, 1000)) for c in (  # plan text is data, not rich markup
        str(r.index), r.op.removeprefix("ttnn."), r.block, f"{r.values:,}", r.dtype, r.memory, r.shard,
        f"{r.l1_peak / 1024:,.0f} KiB", f"{r.headroom / 1024:,.0f} KiB", f"{r.predicted_us:.1f}", f"{r.share:.1%}"))
            for r in report.calls]
    for col in columns:  # folded, never cut: a long block name wraps inside its cell
        table.add_column(col, justify="right" if col in numeric else "left", overflow="fold")
    for row in rows:
        table.add_row(*row)
    console = _console(table)
    say = lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True)
    for line in header_lines(report):
        say(line)
    console.print(table)
    per = "run" if report.throughput.get("batch", 1) > 1 else "frame"
    say(f"predicted device time per {per}: {report.predicted_device_ms:.3f} ms (an estimate: "
        "docs/memory.md says how far to trust it); L1 per core on "
        f"{report.target}: {report.l1_budget / 1024:,.0f} KiB for buffers and tensors")
    say(f"host-to-device per {per}: {report.h2d_bytes / 1e6:.3f} MB; device-to-host per {per}: "
        f"{report.d2h_bytes / 1e6:.3f} MB; layout conversions: {report.layout_conversions}; "
        f"ttnn calls: {len(report.calls)}")
    say(f"DRAM at its peak (every live tensor counted): {report.dram_peak_bytes / 2**20:,.1f} MiB of "
        f"{report.dram_bytes / 2**30:.0f} GiB per chip")
    t = report.throughput
    if t:
        b = t["batch"]
        say(f"end to end, predicted ({b} image(s) per run; the hand port's measured per-call costs, the "
            "device model calibrated on its forward: docs/end-to-end.md):")
        for phase, per_run, what in (
                ("upload", t["upload_s"], f"{t['uploads']} call(s) x {UPLOAD_S * 1e3:g} ms on CQ1"),
                ("device", t["device_s"], "the trace"),
                ("overlap", -t["overlap_s"], "the upload beside the previous run's trace"),
                ("read-back", t["readback_s"], f"{t['readbacks']} call(s) x {D2H_CALL_S * 1e3:.2f} ms"),
                ("host post", t["host_post_s"], f"{b} image(s) x {HOST_POST_S * 1e3:g} ms"),
                ("run", t["run_s"], f"{t['fps']:.1f} frames/s")):
            say(f"  {phase:<10} {per_run * 1e3:8.3f} ms per run {per_run * 1e3 / b:8.3f} ms per frame   {what}")
        if t.get("chips", 1) > 1:
            say(f"  per chip; up to {t['fps'] * t['chips']:.1f} frames/s on the {t['chips']} chips (each runs its "
                "own images; a mesh's host cost per call is not measured)")
    if report.batch_search:
        say("--batch auto tried: " + "; ".join(
            f"{clean(r.get('batch'))}: " + (f"{r.get('fps', 0):.1f} frames/s, {r.get('run_s', 0) * 1e3:.1f} ms per run"
                                            + (" (chosen)" if r.get("chosen") else "")
                                            if r.get("fits") else f"does not fit ({clean(r.get('why'), 120)})")
            for r in report.batch_search))
    say(f"host: {report.host_pre} op(s) before the device stage, {report.host_post} after; "
        f"{report.device_macs_share:.1%} of multiply-adds on the device")
    for why in report.host_reasons:
        say(f"  on the host (with what follows it, reading the device-to-host bytes above): {clean(why, 1000)}")
