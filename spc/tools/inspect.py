"""`spc inspect PLAN`: what a plan will do on the device, call by call, and per frame.

Per call: the ttnn op, its precision block, its output (values, format), its memory
configuration (L1 or DRAM path and slices, as the memory planner chose: memory/planner.py) and shard
(cores x rows x channels of the output on one core), the L1 its
busiest core needs while it runs and the room left (memory/residency.py: the L1 model checked
against ttnn's allocator), and its predicted time and share (memory/cost.py). Per frame:
predicted device time, bytes host-to-device and device-to-host, layout conversions, calls.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from spc.memory.l1 import L1Use
from spc.memory.residency import op_memory, walk, writes_dram
from spc.plan.io import Plan
from spc.plan.program import TtOp, numel
from spc.ttnn.formats import DataFormat
from spc.ttnn.memory import BufferType
from spc.ttnn.targets import get_target

CONVERSIONS = {"ttnn.to_layout", "ttnn.typecast", "ttnn.to_memory_config"}


@dataclass
class CallRow:
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


@dataclass
class PlanReport:
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


def plan_report(plan: Plan) -> PlanReport:
    p = plan.program
    target = get_target(plan.manifest.get("target", "p150"))
    records = walk(p, target)
    total = sum(r.seconds for r in records) or 1.0
    dtypes = {op.output: op.dtype for op in p.device_ops}
    dtypes.update({name: dt for op in p.device_ops for name, dt in zip(op.extra_outputs, op.extra_dtypes)})
    rows = [CallRow(i, f"kernel {r.op.args['kernel']}" if r.op.op == "spc.kernel" else r.op.op,
                    r.op.block or r.op.source, r.values, r.op.dtype.value, _memory(r.op),
                    _shard(r.op, r.placed.use), r.placed.total, r.placed.headroom, r.seconds * 1e6, r.seconds / total)
            for i, r in enumerate(records)]
    h2d = sum(numel(t.device_shape) * 2 for t in p.device_inputs)  # uploaded as bf16
    d2h = sum(int(numel(t.device_shape) * dtypes.get(t.name, DataFormat.BFLOAT16).bytes_per_value)
              for t in p.device_outputs)
    preset = plan.manifest.get("options", {}).get("precision", {})
    precision = preset.get("preset", "?") + (f" + {len(preset['rules'])} override(s)" if preset.get("rules") else "")
    macs = plan.manifest.get("macs", {})
    share = macs.get("device", 1) / max(macs.get("device", 1) + macs.get("host", 0), 1)
    return PlanReport(target.name, precision, rows, total * 1e3, h2d, d2h,
                      sum(1 for op in p.device_ops if op.op in CONVERSIONS), target.l1_budget_bytes,
                      len(p.host_pre), len(p.host_post), list(plan.manifest.get("host_reasons", [])), share)


def print_report(report: PlanReport) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"device program: {len(report.calls)} ttnn calls, target {report.target}, "
                        f"precision {report.precision}")
    numeric = ("#", "output values", "L1 peak/core", "headroom", "pred. us", "share")
    for col in ("#", "call", "block", "output values", "format", "memory", "cores x shard", "L1 peak/core",
                "headroom", "pred. us", "share"):
        table.add_column(col, justify="right" if col in numeric else "left")
    for r in report.calls:
        table.add_row(str(r.index), r.op.removeprefix("ttnn."), r.block, f"{r.values:,}", r.dtype, r.memory, r.shard,
                      f"{r.l1_peak / 1024:,.0f} KiB", f"{r.headroom / 1024:,.0f} KiB", f"{r.predicted_us:.1f}",
                      f"{r.share:.1%}")
    console = Console()
    console.width = max(console.width, 140)
    console.print(table)
    console.print(f"predicted device time per frame: {report.predicted_device_ms:.3f} ms (an estimate: "
                  "docs/memory.md says how far to trust it); L1 per core on "
                  f"{report.target}: {report.l1_budget / 1024:,.0f} KiB for buffers and tensors")
    console.print(f"host-to-device per frame: {report.h2d_bytes / 1e6:.3f} MB; device-to-host per frame: "
                  f"{report.d2h_bytes / 1e6:.3f} MB; layout conversions: {report.layout_conversions}; "
                  f"ttnn calls: {len(report.calls)}")
    console.print(f"host: {report.host_pre} op(s) before the device stage, {report.host_post} after; "
                  f"{report.device_macs_share:.1%} of multiply-adds on the device")
    for why in report.host_reasons:
        console.print(f"  on the host (with what follows it, reading the device-to-host bytes above): {why}")
