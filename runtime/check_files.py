"""`spc check` over files: run both sides per input and print one row per input."""

from __future__ import annotations

from pathlib import Path

from spc.lowering.plan import Plan
from spc.runtime.check import Comparison, ImageReport, find_source
from spc.runtime.inputs import load_input


def check_files(plan: Plan, plan_path: Path, files: list[Path], onnx: Path | None, backend: str) -> list[ImageReport]:
    src = find_source(plan, plan_path, onnx)
    shape = [int(d) for d in plan.program.inputs[0].shape]
    arrays = [load_input(f, shape) for f in files]
    probes = {role: t.name for role, t in plan.program.probes.items()}
    return Comparison(src, probes, arrays, [f.name for f in files]).reports(plan, backend)


def print_reports(reports: list[ImageReport]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="spc plan vs onnxruntime (top-500 keypoints, 2 px)")
    for col in ("input", "score PCC", "desc PCC", "precision", "recall", "F1", "desc cos", "kp ours/ref"):
        table.add_column(col, justify="left" if col == "input" else "right")
    for r in reports:
        table.add_row(r.input, f"{r.score_pcc:.5f}", f"{r.descriptor_pcc:.5f}", f"{r.precision:.4f}",
                      f"{r.recall:.4f}", f"{r.f1:.4f}", f"{r.descriptor_cosine:.5f}",
                      f"{r.keypoints}/{r.ref_keypoints}")
    # rich assumes 80 columns off a terminal, which would truncate the input names
    console = Console()
    console.width = max(console.width, 112)
    console.print(table)
