"""`spc inspect PLAN`: what a plan will do on the device, call by call, and per frame.

Per call: the ttnn op, its precision block, its output (device layout, format), its memory
configuration, and its predicted time and share (lowering/cost.py, a roofline on the plan's
target). Per frame: predicted device time, bytes host-to-device and device-to-host, layout
conversions, calls. L1 use per core is not shown until the L1 model exists.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from spc.lowering.cost import BYTES_PER_VALUE, estimate, numel
from spc.lowering.plan import Plan
from spc.targets import get_target

CONVERSIONS = {"ttnn.to_layout", "ttnn.typecast"}


@dataclass
class CallRow:
    index: int
    op: str
    block: str
    values: int
    dtype: str
    memory: str
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

    def as_dict(self) -> dict:
        return asdict(self)


def _memory(args: dict) -> str:
    if "conv_config" in args:
        return args["conv_config"]["shard_layout"]
    return args.get("memory_config", "default")


def plan_report(plan: Plan) -> PlanReport:
    p = plan.program
    target = get_target(plan.manifest.get("target", "p150"))
    costs = estimate(p, plan.weights, target)
    total = sum(c.seconds for c in costs) or 1.0
    dtypes = {op.output: op.dtype for op in p.device_ops}
    rows = [CallRow(i, c.op.op, c.op.block or c.op.source, c.values, c.op.dtype, _memory(c.op.args),
                    c.seconds * 1e6, c.seconds / total) for i, c in enumerate(costs)]
    h2d = sum(numel(t.device_shape) * 2 for t in p.device_inputs)  # uploaded as bf16
    d2h = sum(int(numel(t.device_shape) * BYTES_PER_VALUE[dtypes.get(t.name, "bfloat16")]) for t in p.device_outputs)
    preset = plan.manifest.get("options", {}).get("precision", {})
    precision = preset.get("preset", "?") + (f" + {len(preset['rules'])} override(s)" if preset.get("rules") else "")
    return PlanReport(target.name, precision, rows, total * 1e3, h2d, d2h,
                      sum(1 for op in p.device_ops if op.op in CONVERSIONS))


def print_report(report: PlanReport) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"device program: {len(report.calls)} ttnn calls, target {report.target}, "
                        f"precision {report.precision}")
    for col in ("#", "call", "block", "output values", "format", "memory", "pred. us", "share"):
        table.add_column(col, justify="right" if col in ("#", "output values", "pred. us", "share") else "left")
    for r in report.calls:
        table.add_row(str(r.index), r.op.removeprefix("ttnn."), r.block, f"{r.values:,}", r.dtype, r.memory,
                      f"{r.predicted_us:.1f}", f"{r.share:.1%}")
    console = Console()
    console.width = max(console.width, 140)
    console.print(table)
    console.print(f"predicted device time per frame: {report.predicted_device_ms:.3f} ms (roofline placeholder; "
                  "rank plans with it, do not quote it)")
    console.print(f"host-to-device per frame: {report.h2d_bytes / 1e6:.3f} MB; device-to-host per frame: "
                  f"{report.d2h_bytes / 1e6:.3f} MB; layout conversions: {report.layout_conversions}; "
                  f"ttnn calls: {len(report.calls)}")
