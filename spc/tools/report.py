"""`spc report PLAN [INPUT] -o report.html`: one self-contained HTML page about a plan.

Sections: what the plan is and its per-frame totals, the pass pipeline and what each pass
recognised, L1 on the fullest core call by call against the budget, the predicted time per call,
the device program as a table and, given an input, the per-layer comparison with onnxruntime and
the keypoints drawn on the image.

Every figure comes from the functions `spc inspect`, `spc run` and `spc check --per-layer` use
(tools/inspect.py's :func:`plan_report` over the memory model's one walk, tools/run.py's overlay,
tuning/per_layer.py), so the page cannot disagree with the commands. The page needs no network when
it is viewed: charts are matplotlib's SVG pasted inline, the overlay a ``data:`` PNG, the style in
the page. A plan is untrusted input: every string from it goes through :func:`html.escape` (and, in a
chart, has its ``$`` escaped, so that matplotlib's mathtext never reads it). The same plan and input
give the same bytes (matplotlib's SVG ids are salted by a fixed string and it writes no date).
"""

from __future__ import annotations

import base64
import contextlib
import html
import io
import re
import string
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from msgspec import Struct, field

from spc.errors import SpcError
from spc.files import atomic_write
from spc.passes.pipeline import default_pipeline
from spc.plan.io import Plan
from spc.tools.inspect import CallRow, PlanReport, clean, header_lines, plan_report
from spc.version import __version__

MIN_PCC = 0.99  # the per-layer floor when no comparison says its own (tuning/per_layer.py's default)


class PassRow(Struct):
    index: int
    name: str
    summary: str  # what the pass does (the pipeline's own one-liner)
    result: str  # what it recognised, from the manifest ("1 region(s)", "not fired (...)")


class InputResult(Struct):
    """What the plan made of the input: the keypoint overlay and the per-layer comparison."""

    name: str
    keypoints: int | None = None  # None: the plan's outputs hold no keypoints
    overlay_png: bytes | None = None
    per_layer: dict[str, Any] | None = None  # PerLayerReport.as_dict()
    per_layer_note: str = ""  # why there is no per-layer comparison
    keypoints_from: str = "the plan's outputs"  # or, for raw heads, the standard extraction


class ReportData(Struct):
    plan: PlanReport
    passes: list[PassRow]
    notes: list[str] = field(default_factory=list)
    input: InputResult | None = None
    min_pcc: float = MIN_PCC


# -- gathering ---------------------------------------------------------------------------------


def pass_rows(manifest: dict[str, Any]) -> list[PassRow]:
    """The pipeline as the plan records it, each pass with its one-line summary (when this spc
    knows the name) and what the manifest says it recognised."""
    known = {p.name: p.summary for p in default_pipeline()}
    known["choose-memory-config"] = "per conv and pool block: L1 or DRAM slices (memory/planner.py)"
    found: dict[str, str] = {}
    for line in manifest.get("recognised") or []:
        if isinstance(line, str) and ": " in line:
            name, what = line.split(": ", 1)
            found.setdefault(name, what)
    names = [n for n in manifest.get("pipeline") or [] if isinstance(n, str)]
    return [PassRow(i, n, known.get(n, ""), found.get(n, "")) for i, n in enumerate(names, 1)]


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _first_frame(plan: Plan, path: Path, allow_nonfinite: bool) -> Any:
    """The input as `spc run` frames it (its original kept for the overlay); a video's first frame;
    for a plan of B images, framed as one of them."""
    from spc.runtime.batches import image_shape  # as in run_input: only a report with INPUT
    from spc.runtime.frames import frames, probe

    shape = [int(d) for d in plan.program.inputs[0].shape]
    shape = image_shape(shape) if plan.images_per_run > 1 else shape
    image = plan.program.image
    stream = frames([probe(path, shape, allow_nonfinite, image=image)], shape, keep_original=True,
                    allow_nonfinite=allow_nonfinite, image=image)
    try:
        return next(stream)
    finally:
        stream.close()  # a video: stop ffmpeg after the first frame


def compare_layers(plan: Plan, plan_path: Path, x: np.ndarray, onnx: Path, name: str,
                   min_pcc: float | None) -> tuple[dict[str, Any] | None, str]:
    """`spc check --per-layer`'s comparison on ``x``, as its JSON; a plan it cannot compare
    (compiled before plans recorded their tensors' model values) leaves the section a note, as
    the rest of the page does not depend on it."""
    from spc.tuning.per_layer import per_layer  # onnx + onnxruntime (~60 ms): only a report with INPUT compares

    try:
        return per_layer(plan, plan_path, x, onnx, name=name, min_pcc=min_pcc).as_dict(), ""
    except SpcError as exc:
        return None, f"no per-layer comparison: {exc}"


def run_input(plan: Plan, plan_path: Path, path: Path, onnx: Path | None, allow_nonfinite: bool = False,
              min_pcc: float | None = None) -> InputResult:
    """Run the plan on ``path`` (emu) for its keypoints and overlay, and compare it layer by layer
    with onnxruntime on the source ONNX."""
    # running the plan (~35 ms: the runtime, rich, PIL) and onnxruntime: only a report with INPUT
    from spc.runtime.batches import fill, image_of
    from spc.runtime.extraction import STANDARD, frame_keypoints, has_keypoints
    from spc.runtime.runner import Runner
    from spc.tools.run import in_original, overlay_png
    from spc.tuning.comparison import find_source

    src = find_source(plan, plan_path, onnx)  # before any work: a plan without its ONNX is refused here
    frame = _first_frame(plan, path, allow_nonfinite)
    batch = plan.images_per_run
    x = fill([frame.x], batch) if batch > 1 else frame.x  # a batch plan: B copies; the page shows the first
    out = InputResult(str(path.name) + ("" if frame.index is None else f" (frame {frame.index})"))
    roles = plan.program.roles

    if has_keypoints(roles) and frame.original is not None:
        shape = [int(d) for d in plan.program.inputs[0].shape]
        with Runner(plan, "emu") as runner:
            result = runner.run(x)
        result = image_of(result, 0, batch) if batch > 1 else result
        got = frame_keypoints(result.outputs, roles, *plan.program.image.frame_size(shape))
        found = None if got is None else got[0]
        if got is not None and got[1] == STANDARD:
            out.keypoints_from = f"{STANDARD}, as spc check does"
        if found is not None:
            xy, scores, _ = in_original(found, frame.geometry)
            scale = float(frame.geometry.scale.mean()) if frame.geometry is not None else 1.0
            out.keypoints, out.overlay_png = len(xy), overlay_png(frame.original, xy, scores, scale)
    out.per_layer, out.per_layer_note = compare_layers(plan, plan_path, x, src, out.name, min_pcc)
    return out


def gather(plan: Plan, plan_path: Path, input_path: Path | None = None, onnx: Path | None = None,
           allow_nonfinite: bool = False, min_pcc: float | None = None) -> ReportData:
    m = plan.manifest
    data = ReportData(plan_report(plan, str(plan_path.name)), pass_rows(m), _strings(m.get("notes")))
    if input_path is not None:
        data.input = run_input(plan, plan_path, input_path, onnx, allow_nonfinite, min_pcc)
        if data.input.per_layer is not None:  # the floor the comparison marked tensors against
            data.min_pcc = _num(data.input.per_layer.get("min_pcc", MIN_PCC))
    return data


# -- charts (matplotlib, as inline SVG) ---------------------------------------------------------

_COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]


# the charts' look; applied only while a chart is drawn and written (matplotlib.rc_context), so
# that spc leaves the caller's matplotlib settings as they were
_STYLE = {"svg.fonttype": "none",  # text stays text: small, and the page's font shows it
          "font.size": 9, "axes.spines.top": False, "axes.spines.right": False}


@contextlib.contextmanager
def _figure(height: float, salt: str) -> Iterator[tuple[Any, Any]]:
    """A figure 12 inches wide and one axes, drawn under the charts' style; ``salt`` seeds its
    SVG ids (one per chart, so that two charts' ids never meet in the page). A bare Figure, not
    pyplot: no backend is chosen and no global figure is kept."""
    with matplotlib.rc_context({**_STYLE, "svg.hashsalt": salt,
                                "axes.prop_cycle": matplotlib.cycler(color=_COLORS)}):
        fig = Figure(figsize=(12, height))
        yield fig, fig.add_subplot()


def svg_of(fig: Any) -> str:
    """The figure as an ``<svg>`` element to paste into HTML: deterministic (ids salted, no date;
    called inside :func:`_figure`), without the XML prolog, the DOCTYPE, the RDF metadata or
    namespace declarations (inline SVG in HTML needs none, and they are the only URLs matplotlib
    writes)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"\s*<metadata>.*?</metadata>", "", svg, flags=re.S)
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    return svg.replace("xlink:href=", "href=").strip()  # SVG 2's href: no xlink namespace needed


def _plain(text: str) -> str:
    """A string from the plan as matplotlib text: a "$" stays a character, never starts TeX (the
    log axes' 10^k labels need mathtext on)."""
    return text.replace("$", r"\$")  # no "$" left unescaped: matplotlib shows the text as it is


def _kib(n: float) -> float:
    return n / 1024.0


def l1_chart(calls: list[CallRow], budget: int) -> str:
    """Per call: the L1 its busiest core holds while it runs — tensors earlier calls left there
    and the call's own (staged input, halo, output, circular buffers) — against the budget."""
    with _figure(2.7, "spc-report-l1") as (fig, ax):
        x = np.arange(len(calls))
        before = np.array([_kib(c.l1_before) for c in calls])
        own = np.array([_kib(max(c.l1_peak - c.l1_before, 0)) for c in calls])
        ax.bar(x, before, width=0.85, color="#a1b9d9", label="tensors left in L1 by earlier calls")
        ax.bar(x, own, width=0.85, bottom=before, color=_COLORS[0], label="the call's own (halo, output, buffers)")
        ax.axhline(_kib(budget), color=_COLORS[3], linestyle="--", linewidth=1.2,
                   label=f"budget {_kib(budget):,.0f} KiB per core")
        if calls:
            top = int(np.argmax(before + own))
            share = calls[top].l1_peak / budget if budget else 0.0
            ax.annotate(f"fullest: call {top}, {share:.0%} of the budget", (top, before[top] + own[top]),
                        xytext=(24, -2), textcoords="offset points", ha="left", va="center", fontsize=8,
                        arrowprops={"arrowstyle": "-", "linewidth": 0.6, "color": "#555555"})
        ax.set_xlim(-1, max(len(calls), 1))
        ax.set_ylim(0, _kib(budget) * 1.12 if budget else None)
        ax.set_xlabel("ttnn call (program order)")
        ax.set_ylabel("KiB on the busiest core")
        ax.legend(loc="upper right", fontsize=8, frameon=False, ncols=3, bbox_to_anchor=(1, 1.22))
        ax.grid(axis="y", alpha=0.3)
        return svg_of(fig)


def _kinds(calls: list[CallRow], most: int = 5) -> list[str]:
    """Each call's kind for the time chart: the ``most`` ops that take the longest, the rest "other"."""
    total: dict[str, float] = {}
    for c in calls:
        total[c.op] = total.get(c.op, 0.0) + c.predicted_us
    top = sorted(total, key=lambda k: (-total[k], k))[:most]
    return [c.op if c.op in top else "other" for c in calls]


def time_chart(calls: list[CallRow]) -> str:
    """Predicted time per call by op, and the running total per frame."""
    with _figure(2.7, "spc-report-time") as (fig, ax):
        kinds = _kinds(calls)
        us = np.array([c.predicted_us for c in calls])
        x = np.arange(len(calls))
        order = sorted(set(kinds), key=lambda k: (k == "other", k))
        for i, kind in enumerate(order):
            pick = np.array([k == kind for k in kinds])
            ax.bar(x[pick], us[pick], width=0.85, color=_COLORS[i % len(_COLORS)],
                   label=_plain(clean(kind.removeprefix("ttnn."), 40)))
        ax.set_xlim(-1, max(len(calls), 1))
        ax.set_xlabel("ttnn call (program order)")
        ax.set_ylabel("predicted µs")
        ax.grid(axis="y", alpha=0.3)
        run = ax.twinx()
        run.plot(x, np.cumsum(us) / 1e3, color="#333333", linewidth=1.2, label="running total (ms)")
        run.set_ylabel("running total, ms")
        run.set_ylim(0, None)
        run.spines["right"].set_visible(True)
        handles = [*ax.get_legend_handles_labels()[0], *run.get_legend_handles_labels()[0]]
        ax.legend(handles=handles, loc="upper left", fontsize=8, frameon=False, ncols=len(handles),
                  bbox_to_anchor=(0, 1.22))
        return svg_of(fig)


def _num(v: Any) -> float:
    """A number from the per-layer rows (untrusted shape: anything else is NaN)."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def pcc_chart(rows: list[dict[str, Any]], min_pcc: float) -> str:
    """Per tensor in program order: 1 - PCC against onnxruntime on a log scale (agreement to
    0.9999 and to 0.99 are then as far apart as they matter), the floor as a line. A tensor
    without a PCC (a constant one) is a gap, not a point."""
    with _figure(3.2, "spc-report-pcc") as (fig, ax):
        pcc = np.array([_num(r.get("pcc")) for r in rows])
        err = np.clip(1.0 - pcc, 1e-7, 2.0)  # NaN stays NaN: a gap
        x = np.arange(len(rows))
        under = pcc < min_pcc
        ax.plot(x, err, color=_COLORS[0], linewidth=1, marker="o", markersize=3, label="1 - PCC per tensor")
        if under.any():
            ax.plot(x[under], err[under], linestyle="none", marker="o", markersize=6, color=_COLORS[3],
                    label=f"under PCC {min_pcc}")
        ax.axhline(1.0 - min_pcc, color=_COLORS[3], linestyle="--", linewidth=1.2, label=f"PCC {min_pcc}")
        ax.set_yscale("log")
        low = float(np.nanmin(err)) if np.isfinite(err).any() else 1e-7
        ax.set_ylim(max(low / 4, 2.5e-8), 2.5)
        ax.set_xlim(-1, max(len(rows), 1))
        if len(rows) <= 48:  # few enough to name: the tensors' own (ONNX) names
            ax.set_xticks(x, [_plain(clean(r.get("name", ""), 24)) for r in rows], rotation=40, ha="right",
                          fontsize=7.5)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("tensor (program order)")
        ax.set_ylabel("1 - PCC (log)")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(loc="upper left", fontsize=8, frameon=False, ncols=3, bbox_to_anchor=(0, 1.16))
        return svg_of(fig)


# -- the page ------------------------------------------------------------------------------------


def e(value: Any, limit: int = 200) -> str:
    """A value from the plan or the model as HTML text: one line, bounded, escaped."""
    return html.escape(clean(value, limit), quote=True)


def _table(headers: list[str], rows: list[list[str]], numeric: Collection[int], classes: list[str] | None = None,
           nowrap: Collection[int] = ()) -> str:
    """Cells are HTML already escaped by the caller; ``numeric`` columns right-aligned,
    ``nowrap`` columns (shapes, shards) kept on one line."""
    def cls(i: int) -> str:
        return " ".join(c for c, on in (("n", i in numeric), ("nw", i in nowrap)) if on)

    head = "".join(f'<th class="{cls(i)}">{html.escape(h)}</th>' for i, h in enumerate(headers))
    body = []
    for k, row in enumerate(rows):
        tr = f' class="{classes[k]}"' if classes and classes[k] else ""
        cells = "".join(f'<td class="{cls(i)}">{c}</td>' for i, c in enumerate(row))
        body.append(f"<tr{tr}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _card(label: str, value: str, sub: str = "") -> str:
    return (f'<div class="card"><div class="v">{value}</div><div class="l">{html.escape(label)}</div>'
            + (f'<div class="s">{sub}</div>' if sub else "") + "</div>")


def _cards(data: ReportData) -> str:
    r = data.plan
    fullest = max(r.calls, key=lambda c: c.l1_peak, default=None)
    cards = [_card("predicted device time per frame", f"{r.predicted_device_ms:.3f} ms", "an estimate"),
             _card("ttnn calls", f"{len(r.calls)}", f"{r.layout_conversions} layout conversions"),
             _card("fullest core", f"{fullest.l1_peak / r.l1_budget:.0%}" if fullest and r.l1_budget else "-",
                   f"call {fullest.index}, {fullest.l1_peak / 1024:,.0f} of {r.l1_budget / 1024:,.0f} KiB"
                   if fullest else ""),
             _card("host to device per frame", f"{r.h2d_bytes / 1e6:.3f} MB"),
             _card("device to host per frame", f"{r.d2h_bytes / 1e6:.3f} MB"),
             _card("multiply-adds on the device", f"{r.device_macs_share:.1%}",
                   f"host: {r.host_pre} op(s) before, {r.host_post} after")]
    if data.input is not None and data.input.keypoints is not None:
        cards.append(_card("keypoints", f"{data.input.keypoints:,}", e(data.input.name, 80)))
    return '<div class="cards">' + "".join(cards) + "</div>"


def _passes(data: ReportData) -> str:
    rows = [[str(p.index), f"<code>{e(p.name, 64)}</code>", e(p.summary, 200),
             e(p.result, 300) if p.result else ""] for p in data.passes]
    classes = ["miss" if p.result.startswith("not fired") else ("hit" if p.result else "") for p in data.passes]
    out = _table(["#", "pass", "what it does", "recognised"], rows, {0}, classes)
    extra = [f"<li>{e(n, 600)}</li>" for n in data.notes[:64]]
    extra += [f"<li>on the host: {e(w, 600)}</li>" for w in data.plan.host_reasons[:16]]
    if extra:
        out += '<ul class="notes">' + "".join(extra) + "</ul>"
    return out


def _program(report: PlanReport) -> str:
    rows = [[str(c.index), f"<code>{e(c.op.removeprefix('ttnn.'), 64)}</code>", e(c.block, 120), f"{c.values:,}",
             e(c.dtype, 32), e(c.memory, 80), e(c.shard, 80), f"{c.l1_peak / 1024:,.0f}", f"{c.headroom / 1024:,.0f}",
             f"{c.predicted_us:.1f}", f"{c.share:.1%}"] for c in report.calls]
    return _table(["#", "call", "block", "output values", "format", "memory", "cores x shard", "L1 peak KiB",
                   "headroom KiB", "pred. µs", "share"], rows, {0, 3, 7, 8, 9, 10}, nowrap={6})


def _fmt(v: Any, digits: int) -> str:
    """Fixed decimals, so that a column's figures line up; huge values in e-notation."""
    x = _num(v)
    return "-" if np.isnan(x) else f"{x:.{digits}e}" if abs(x) >= 1e6 else f"{x:.{digits}f}"


def _dicts(d: dict[str, Any], key: str) -> list[dict[str, Any]]:
    rows = d.get(key, [])
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _shape(v: Any) -> str:
    return "[" + ", ".join(clean(d, 16) for d in v[:8]) + (", ..." if len(v) > 8 else "") + "]" \
        if isinstance(v, list) else ""


def _per_layer_section(data: ReportData) -> str:
    """PerLayerReport.as_dict() (tuning/per_layer.py): the tensors in program order as a chart
    and a table, the blocks with the error each adds, what could not be compared."""
    inp = data.input
    if inp is None:
        return '<p class="none">Give an input (<code>spc report PLAN IMAGE</code>) for the per-layer comparison.</p>'
    if inp.per_layer is None:
        return f'<p class="none">{e(inp.per_layer_note, 400)}</p>'
    d = inp.per_layer
    rows, blocks, skipped = _dicts(d, "tensors"), _dicts(d, "blocks"), _dicts(d, "skipped")
    first, worst = d.get("first_under"), d.get("worst_block")
    said = [f"input <b>{e(inp.name, 120)}</b>: {len(rows)} tensors compared with onnxruntime on the source ONNX "
            f"({len(skipped)} not comparable, {_num(d.get('internal', 0)):.0f} inside fused ops)"]
    said.append(f"first tensor under PCC {data.min_pcc}: <b>{e(first, 300)}</b>" if first
                else f"no tensor under PCC {data.min_pcc}")
    if worst:
        said.append(f"the block that adds the most error: <b>{e(worst, 300)}</b>")
    tensors = _table(["#", "call", "tensor", "op", "block", "precision", "shape", "PCC", "max abs err", "rel err"],
                     [[str(i), "input" if _num(r.get("call")) < 0 else _fmt(r.get("call"), 0),
                       f"<code>{e(r.get('name', ''), 120)}</code>",
                       e(r.get("op", ""), 40), e(r.get("block", ""), 120), e(r.get("precision", ""), 100),
                       e(_shape(r.get("shape")), 80), _fmt(r.get("pcc"), 6), _fmt(r.get("max_abs"), 4),
                       _fmt(r.get("rel_err"), 4)] for i, r in enumerate(rows)],
                     {0, 1, 7, 8, 9}, ["miss" if _num(r.get("pcc")) < data.min_pcc else "" for r in rows],
                     nowrap={6})
    out = f'<p>{"; ".join(said)}.</p>'
    if rows:
        out += f'<div class="chart">{pcc_chart(rows, data.min_pcc)}</div>'
    out += f'<div class="scroll">{tensors}</div>'
    if blocks:
        out += ('<h3>Blocks: the relative error they receive, make, and add when run alone on onnxruntime\'s '
                'inputs</h3>')
        out += '<div class="scroll short">' + _table(
            ["block", "precision", "input error", "output error", "growth", "added alone"],
            [[e(b.get("block", ""), 120), e(b.get("precision", ""), 100), _fmt(b.get("input_error"), 4),
              _fmt(b.get("output_error"), 4), _fmt(b.get("growth"), 4), _fmt(b.get("local_error"), 4)]
             for b in blocks], {2, 3, 4, 5},
            ["worst" if worst is not None and b.get("block") == worst else "" for b in blocks]) + "</div>"
    return out


def _overlay_section(data: ReportData) -> str:
    inp = data.input
    if inp is None:
        return '<p class="none">Give an input (<code>spc report PLAN IMAGE</code>) to see its keypoints.</p>'
    if inp.overlay_png is None:
        return '<p class="none">This plan\'s outputs hold no keypoints (spc inspect lists its outputs).</p>'
    uri = "data:image/png;base64," + base64.b64encode(inp.overlay_png).decode("ascii")
    return (f'<p>{inp.keypoints:,} keypoints on <b>{e(inp.name, 120)}</b> from {html.escape(inp.keypoints_from)} '
            '(emulator; circles grow with the score), as <code>spc run --viz</code> draws them.</p>'
            f'<img class="overlay" alt="keypoints" src="{uri}">')


_PAGE = string.Template("""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="spc $version">
<title>spc report: $title</title>
<style>
:root { --fg: #1d2330; --mute: #5b6475; --line: #e3e6ec; --bg: #f6f7f9; --accent: #4c72b0; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
       font: 14px/1.45 "DejaVu Sans", "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1220px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 22px; margin: 0 0 2px; }
h2 { font-size: 16px; margin: 0 0 10px; }
.sub { color: var(--mute); margin: 0 0 16px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 16px 18px;
          margin: 0 0 16px; }
.row { display: grid; grid-template-columns: minmax(0, 1.25fr) minmax(0, 1fr); gap: 16px; align-items: start; }
@media (max-width: 900px) { .row { grid-template-columns: minmax(0, 1fr); } }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(138px, 1fr)); gap: 10px;
         margin: 0 0 12px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; background: #fbfcfd; }
.card .v { font-size: 20px; font-weight: 600; }
.card .l { color: var(--mute); font-size: 12px; }
.card .s { color: var(--mute); font-size: 11px; }
summary { cursor: pointer; color: var(--mute); font-size: 12.5px; }
pre.meta { margin: 6px 0 0; font: 12px/1.5 "DejaVu Sans Mono", monospace; color: var(--mute);
           white-space: pre-wrap; word-break: break-all; }
table { border-collapse: collapse; width: 100%; font-size: 12.5px; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { position: sticky; top: 0; background: #eef1f5; font-weight: 600; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.hit td:last-child { color: #2e7d32; }
tr.miss td { background: #fdecea; }
tr.worst td { background: #fff4dc; font-weight: 600; }
td.nw, th.nw { white-space: nowrap; }
code { font: 12px "DejaVu Sans Mono", monospace; white-space: nowrap; }
.scroll { max-height: 420px; overflow: auto; border: 1px solid var(--line); border-radius: 6px; }
.chart svg { width: 100%; height: auto; display: block; }
.note, .none { color: var(--mute); font-size: 12.5px; }
ul.notes { color: var(--mute); font-size: 12.5px; margin: 8px 0 0; padding-left: 18px; }
.scroll.short { max-height: 260px; }
h3 { font-size: 13.5px; margin: 14px 0 6px; }
img.overlay { max-width: 100%; height: auto; display: block; border-radius: 4px; }
</style>
</head>
<body>
<main>
<h1>spc report: $title</h1>
<p class="sub">$subtitle</p>
<section id="summary"><h2>Plan</h2>
$cards
<details><summary>what the plan is: source, inputs and outputs, options, weights (spc inspect's header)</summary>
<pre class="meta">$header</pre>
</details>
</section>
<div class="row">
<section id="passes"><h2>Passes</h2>
$passes
</section>
<section id="overlay"><h2>Keypoints</h2>
$overlay
</section>
</div>
<section id="l1"><h2>L1 on the fullest core, call by call</h2>
<div class="chart">$l1_chart</div>
<p class="note">Each call's peak on its busiest core (memory/residency.py's walk, the model checked against
ttnn's allocator: docs/memory.md); the budget is what buffers and tensors share on one core of $target.</p>
</section>
<section id="time"><h2>Predicted time per call</h2>
<div class="chart">$time_chart</div>
<p class="note">memory/cost.py's roofline per call: good for ranking configurations, probably optimistic as an
absolute figure (docs/memory.md says how far to trust it).</p>
</section>
<section id="per-layer"><h2>Per-layer comparison with onnxruntime</h2>
$per_layer
</section>
<section id="program"><h2>Device program: $calls ttnn calls</h2>
<div class="scroll">$program</div>
</section>
</main>
</body>
</html>
""")


def render(data: ReportData) -> str:
    r = data.plan
    return _PAGE.substitute(
        version=html.escape(__version__), title=e(r.plan_file or "plan", 120),
        subtitle=f"target {e(r.target, 32)} · precision {e(r.precision, 100)} · {len(r.calls)} ttnn calls · "
                 f"predicted {r.predicted_device_ms:.3f} ms per frame",
        cards=_cards(data), header="\n".join(html.escape(line) for line in header_lines(r)),
        passes=_passes(data), l1_chart=l1_chart(r.calls, r.l1_budget), time_chart=time_chart(r.calls),
        target=e(r.target, 32), per_layer=_per_layer_section(data), overlay=_overlay_section(data), calls=len(r.calls),
        program=_program(r))


def write_report(plan: Plan, plan_path: Path, output: Path, input_path: Path | None = None,
                 onnx: Path | None = None, allow_nonfinite: bool = False, min_pcc: float | None = None) -> ReportData:
    """Gather, render and write the page whole (or not at all)."""
    data = gather(plan, plan_path, input_path, onnx, allow_nonfinite, min_pcc)
    atomic_write(output, render(data).encode("utf-8"))
    return data
