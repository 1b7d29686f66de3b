"""`spc compile`: ONNX -> IR -> passes -> lowering -> .ttplan. Needs onnx and numpy only."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from spc.errors import SpcError
from spc.frontend.onnx_import import import_onnx
from spc.ir.graph import Graph, Placement
from spc.ir.macs import macs
from spc.ir.printer import print_graph
from spc.lowering.lower import find_probes, lower
from spc.lowering.roles import output_roles
from spc.memory.planner import check_fits, plan_memory
from spc.memory.residency import CallRecord, predicted_ms
from spc.passes.explain import Explainer
from spc.passes.manager import (
    DumpDir,
    Instrument,
    Pass,
    PassContext,
    PassManager,
    PassRecord,
    PipelineOptions,
    PrintAfterAll,
)
from spc.passes.pipeline import default_pipeline
from spc.plan.io import write_plan
from spc.plan.listing import call_counts, format_program
from spc.ttnn.memory import MemoryOverrides
from spc.ttnn.precision import PrecisionPlan
from spc.ttnn.targets import get_target
from spc.tuning.thresholds import Thresholds


@dataclass
class AutoPrecision:
    """``--precision auto``: where the calibration inputs are and what must hold."""

    calib: Path | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    log: Callable[[str], None] = print


@dataclass
class CompileResult:
    graph: Graph
    records: list[PassRecord]
    notes: list[str] = field(default_factory=list)
    plan: Path | None = None
    macs: tuple[int, int] = (0, 0)  # multiply-adds on the device, on the host
    recognised: list[str] = field(default_factory=list)
    explained: str | None = None  # --explain: the named rule's or fusion's attempts


def check_input(g: Graph, src: Path) -> None:
    """One static, floating-point input: what a single-image vision model takes."""
    if len(g.inputs) != 1:
        names = ", ".join(v.name for v in g.inputs) or "none"
        raise SpcError(f"{src}: spc compiles models with one input (an image); this one has {len(g.inputs)}: {names}")
    t = g.inputs[0].type
    if not t.is_static or not t.dtype.is_float:
        raise SpcError(f"{src}: input {g.inputs[0].name} is {t}; spc needs a static floating-point input: "
                       "give its size with --input-shape (e.g. 1,1,480,640) or export a fixed size")


def recognised(records: list[PassRecord]) -> list[str]:
    """What the fusion passes recognised, and for each that did not fire, the first reason."""
    out = []
    for r in records:
        if "fused" not in r.stats and "recognised" not in r.stats:
            continue
        fired = r.stats.get("fused", r.stats.get("recognised", 0))
        if fired:
            out.append(f"{r.name}: {fired} region(s)")
        else:
            why = r.stats.get("why_not") or "no candidate"
            out.append(f"{r.name}: not fired ({why})")
    return out


def explainer_for(name: str | None, pipeline: list[Pass]) -> Explainer | None:
    """What ``--explain NAME`` listens to: a rule, or a pass (all its rules, or the recogniser)."""
    if name is None:
        return None
    known = {n: p for p in pipeline for n in p.explains}
    if name not in known:
        fusions = [p.name for p in pipeline if p.explains == (p.name,)]
        rules = [n for p in pipeline for n in p.explains if n != p.name and (p.name,) != p.explains]
        raise SpcError(f"--explain {name}: no such rule or fusion; fusions: {', '.join(fusions)}; rules: "
                       f"{', '.join(rules)} (or a rule pass: "
                       f"{', '.join(p.name for p in pipeline if len(p.explains) > 1)})")
    return Explainer(frozenset({name}))


def compile_onnx(src: Path, out: Path | None, *, dump_dir: Path | None = None, print_ir: bool = False,
                 stop_after: str | None = None, nms_single_pass: bool = False, target: str = "p150",
                 precision: PrecisionPlan | None = None, auto: AutoPrecision | None = None,
                 memory: MemoryOverrides | None = None, dense: bool = False,
                 keypoint_capacity: int | None = None, kernels: bool = False,
                 input_shape: list[int] | None = None, explain: str | None = None) -> CompileResult:
    """Compile ``src``; with ``auto``, search the precision plan on calibration inputs first
    (tuning/precision_search.py: needs torch and onnxruntime, unlike the rest of compile)."""
    chip = get_target(target)
    g = import_onnx(src, input_shape=input_shape)
    check_input(g, src)
    instruments: list[Instrument] = []
    if dump_dir is not None:
        instruments.append(DumpDir(dump_dir))
    if print_ir:
        instruments.append(PrintAfterAll())
    precision = precision or PrecisionPlan()
    memory = memory or MemoryOverrides()
    pipeline = default_pipeline()
    ctx = PassContext(PipelineOptions(precision=precision, nms_single_pass=nms_single_pass),
                      explainer=explainer_for(explain, pipeline))
    pm = PassManager(pipeline, instruments, stop_after=stop_after)
    pm.run(g, ctx)
    result = CompileResult(g, pm.records, ctx.notes)
    if ctx.explainer is not None:
        owner = next(p.name for p in pipeline if explain in p.explains)
        why = next((r.stats.get("why_not") for r in pm.records if r.name == owner), None)
        result.explained = ctx.explainer.format(why)
    if stop_after is not None or out is None:
        pm.close(g)
        return result
    search_report = None
    if auto is not None:
        from spc.tuning.precision_search import search

        def choose(plan: PrecisionPlan) -> None:  # a search trial: verified, not recorded
            pm.rerun("choose-precision", g, PassContext(replace(ctx.options, precision=plan)), record=False)

        found = search(g, src, choose, auto.calib, auto.thresholds, log=auto.log, target=chip)
        precision, search_report = found.plan, found.manifest()
        ctx = PassContext(replace(ctx.options, precision=precision), ctx.notes)
        pm.rerun("choose-precision", g, ctx)
    pass_notes = len(ctx.notes)
    program, tensors = lower(g, find_probes(g), compact=not dense, capacity=keypoint_capacity, notes=ctx.notes,
                             kernels=kernels)
    program.roles = output_roles(g)

    records: list[CallRecord] = []  # the planner's walk: the fit check and the predicted time read it

    def choose_memory() -> tuple[dict, dict[str, int], dict[str, int], str]:
        before = call_counts(program)
        planner = plan_memory(program, chip, memory)
        ctx.notes[pass_notes:pass_notes] = planner.notes  # the planner's notes, before the lowering's
        check_fits(planner.records, chip, str(src), memory)
        records[:] = planner.records
        return {"target": chip.name, **planner.stats}, before, call_counts(program), format_program(program)

    pm.stage("choose-memory-config", choose_memory)
    pm.close(g)
    device_macs = sum(macs(n) for n in g.nodes if n.placement is Placement.DEVICE)
    host_macs = sum(macs(n) for n in g.nodes if n.placement is not Placement.DEVICE)
    manifest = {
        "target": target,
        "source": {"file": src.name, "sha256": hashlib.sha256(src.read_bytes()).hexdigest()},
        "inputs": [vars(t) for t in program.inputs],
        "outputs": [vars(t) for t in program.outputs],
        "options": {"input_shape": input_shape, "nms_single_pass": nms_single_pass, "precision": precision.describe(),
                    "memory_config": memory.describe(), "dense": dense, "keypoint_capacity": keypoint_capacity,
                    "kernels": kernels},
        "precision_search": search_report,
        "predicted_device_ms": round(predicted_ms(records), 4),
        "pipeline": [r.name for r in pm.records],
        "notes": ctx.notes,
        "device_ops": len(program.device_ops),
        "macs": {"device": device_macs, "host": host_macs},
        "recognised": recognised(pm.records),
        # the first host nodes after the device stage and why they are not on the device
        "host_reasons": [why for why in next((r.stats.get("host_reasons", []) for r in pm.records
                                              if r.name == "partition-host-device"), [])
                         if why.split(" (", 1)[0] in {n.name for n in g.nodes}],
    }
    write_plan(out, program, tensors, print_graph(g), manifest)
    result.plan, result.macs, result.recognised = out, (device_macs, host_macs), manifest["recognised"]
    return result
