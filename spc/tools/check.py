"""`spc check` over files: run both sides per input and print one row per input."""

from __future__ import annotations

import math
from pathlib import Path

from rich.console import Console
from rich.table import Table

from spc.errors import SpcError
from spc.plan.io import Plan, images_per_chip
from spc.runtime.batches import image_shape
from spc.runtime.extraction import STANDARD
from spc.runtime.inputs import load_input, read_npz
from spc.tools.run_tensors import input_specs
from spc.tuning.comparison import Comparison, ImageReport, find_source
from spc.tuning.per_layer import PerLayerReport, per_layer


def _read_inputs(plan: Plan, files: list[Path], allow_nonfinite: bool, one_image: bool) -> list:
    """Each file as the plan's input: an .npz of its tensors, or an image of the plan's input
    shape (``one_image``: one image of a plan that runs several)."""
    if len(plan.program.inputs) > 1:
        return [read_npz(f, input_specs(plan), allow_nonfinite) for f in files]
    shape = [int(d) for d in plan.program.inputs[0].shape]
    one = image_shape(shape) if one_image else shape
    return [load_input(f, one, plan.program.image, allow_nonfinite) for f in files]


def check_files(plan: Plan, plan_path: Path, files: list[Path], onnx: Path | None, backend: str,
                allow_nonfinite: bool = False, reference: Path | None = None) -> list[ImageReport]:
    """``reference``: another export of the same network to run onnxruntime on (its batch may be
    the plan's, or 1), instead of the source the plan was compiled from."""
    src = reference if reference is not None else find_source(plan, plan_path, onnx)
    batch = plan.images_per_run  # a batch plan: single images, run B at a time (N*B on N chips)
    arrays = _read_inputs(plan, files, allow_nonfinite, one_image=batch > 1)
    # the dense maps are the source's values by name: another export's names are its own
    probes = {role: t.name for role, t in plan.program.probes.items()} if reference is None else {}
    return Comparison(src, probes, arrays, [f.name for f in files], batch).reports(plan, backend)


def per_layer_files(plan: Plan, plan_path: Path, files: list[Path], onnx: Path | None, min_pcc: float | None,
                    allow_nonfinite: bool = False) -> list[PerLayerReport]:
    if images_per_chip(plan.program) > 1:
        raise SpcError(f"{plan_path}: --per-layer compares plans that run one image; this one runs "
                       f"{images_per_chip(plan.program)} at a time (--batch): compile the model without --batch to see "
                       "where it departs from onnxruntime (a batch plan computes each image as that plan does: "
                       "docs/batch.md)")
    arrays = _read_inputs(plan, files, allow_nonfinite, one_image=False)  # all checked before the first run
    return [per_layer(plan, plan_path, x, onnx, f.name, min_pcc) for f, x in zip(files, arrays)]


def _f(x: float, digits: int) -> str:
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def print_reports(reports: list[ImageReport]) -> None:
    via = {r.keypoints_from for r in reports if r.keypoints_from}
    how = " from the logits by SuperPoint's standard extraction" if via == {STANDARD} else ""
    # a model without keypoints (nor raw heads) gets no keypoint columns, not a row of "-"
    title = f"spc plan vs onnxruntime (top-500 keypoints{how}, 2 px)" if via else "spc plan vs onnxruntime"
    table = Table(title=title)
    keypoint_cols = ["precision", "recall", "F1", "desc cos", "kp ours/ref"] if via else []
    # a model without the maps (a matcher) gets no columns of "-" for them
    maps = via or any(not (math.isnan(r.score_pcc) and math.isnan(r.descriptor_pcc)) for r in reports)
    cols = ["input", *(["score PCC", "desc PCC"] if maps else []), *keypoint_cols]
    for col in cols:
        table.add_column(col, justify="left" if col == "input" else "right")
    others = sorted({name for r in reports for name in r.outputs})
    exact = {name for r in reports for name in r.exact}
    for name in others:
        table.add_column(f"{name} equal / differing / set F1" if name in exact else f"{name} PCC / max diff",
                         justify="right")
    for r in reports:
        kp = f"{r.keypoints}/{r.ref_keypoints}" if r.keypoints_from else "-"
        cells = [("-" if n not in r.outputs else
                  f"{_f(r.outputs[n][0], 5)} / {r.outputs[n][1]:.0f} / {_f(r.outputs[n][2], 4)}" if n in exact
                  else f"{_f(r.outputs[n][0], 5)} / {_f(r.outputs[n][1], 3)}") for n in others]
        keypoint_cells = [_f(r.precision, 4), _f(r.recall, 4), _f(r.f1, 4), _f(r.descriptor_cosine, 5), kp]
        map_cells = [_f(r.score_pcc, 5), _f(r.descriptor_pcc, 5)] if maps else []
        table.add_row(r.input, *map_cells, *(keypoint_cells if via else []), *cells)
    # rich assumes 80 columns off a terminal, which would truncate the input names
    console = Console()
    console.width = max(console.width, 112)
    console.print(table)


def _e(x: float) -> str:
    return "-" if math.isnan(x) else "inf" if math.isinf(x) else f"{x:.2e}"


def print_per_layer(r: PerLayerReport) -> None:
    table = Table(title=f"{r.input}: device tensors vs onnxruntime, in program order")
    for col in ("call", "tensor", "op", "block", "precision", "PCC", "max abs", "rel err", ""):
        table.add_column(col, justify="right" if col in ("call", "PCC", "max abs", "rel err") else "left")
    for t in r.tensors:
        marks = []
        if t.name == r.first_under:
            marks.append(f"first under {r.min_pcc:g}")
        if t.block == r.worst_block:
            marks.append("adds the most error")
        style = "bold red" if t.name == r.first_under else "bold" if marks else None
        table.add_row("in" if t.call < 0 else str(t.call), t.name, t.op, t.block, t.precision, _f(t.pcc, 5),
                      _e(t.max_abs), _e(t.rel_err), ", ".join(marks), style=style)
    console = Console()
    console.width = max(console.width, 180)  # off a terminal rich assumes 80 columns: names would be cut
    console.print(table)
    blocks = Table(title="per block: relative error of what it reads, of what it makes, and its own "
                         "(run alone on onnxruntime's inputs)")
    for col in ("block", "precision", "in", "out", "growth", "own"):
        blocks.add_column(col, justify="left" if col in ("block", "precision") else "right")
    for b in r.blocks:
        blocks.add_row(b.block, b.precision, _e(b.input_error), _e(b.output_error), f"{b.growth:+.2e}",
                       _e(b.local_error), style="bold" if b.block == r.worst_block else None)
    console.print(blocks)
    console.print(f"compared {len(r.tensors)} tensors; not compared: {len(r.skipped)} model values "
                  f"(below), {r.internal} device tensors the lowering made (fused ops' insides, copies)")
    for s in r.skipped:
        console.print(f"  {s.name}: {s.reason}")
    under = r.under()
    console.print(f"under {r.min_pcc:g}: " + (f"{len(under)} tensor(s), first {r.first_under}" if under else "none")
                  + f"; adds the most error: {r.worst_block or '-'}")
