"""`spc check` over files: run both sides per input and print one row per input."""

from __future__ import annotations

import math
from pathlib import Path

from spc.plan.io import Plan
from spc.runtime.inputs import load_input
from spc.tuning.comparison import Comparison, ImageReport, find_source


def check_files(plan: Plan, plan_path: Path, files: list[Path], onnx: Path | None, backend: str,
                allow_nonfinite: bool = False) -> list[ImageReport]:
    src = find_source(plan, plan_path, onnx)
    shape = [int(d) for d in plan.program.inputs[0].shape]
    arrays = [load_input(f, shape, allow_nonfinite) for f in files]
    probes = {role: t.name for role, t in plan.program.probes.items()}
    return Comparison(src, probes, arrays, [f.name for f in files]).reports(plan, backend)


def _f(x: float, digits: int) -> str:
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def print_reports(reports: list[ImageReport]) -> None:
    from rich.console import Console
    from rich.table import Table

    via = {r.keypoints_from for r in reports if r.keypoints_from}
    how = " from the logits by SuperPoint's standard extraction" if via == {"standard extraction of the logits"} else ""
    table = Table(title=f"spc plan vs onnxruntime (top-500 keypoints{how}, 2 px)")
    for col in ("input", "score PCC", "desc PCC", "precision", "recall", "F1", "desc cos", "kp ours/ref"):
        table.add_column(col, justify="left" if col == "input" else "right")
    others = sorted({name for r in reports for name in r.outputs})
    for name in others:
        table.add_column(f"{name} PCC / max diff", justify="right")
    for r in reports:
        kp = f"{r.keypoints}/{r.ref_keypoints}" if r.keypoints_from else "-"
        cells = [f"{_f(r.outputs[n][0], 5)} / {_f(r.outputs[n][1], 3)}" if n in r.outputs else "-" for n in others]
        table.add_row(r.input, _f(r.score_pcc, 5), _f(r.descriptor_pcc, 5), _f(r.precision, 4), _f(r.recall, 4),
                      _f(r.f1, 4), _f(r.descriptor_cosine, 5), kp, *cells)
    # rich assumes 80 columns off a terminal, which would truncate the input names
    console = Console()
    console.width = max(console.width, 112)
    console.print(table)
