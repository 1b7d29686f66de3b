"""`spc compile`: ONNX -> IR -> passes -> lowering -> .ttplan. Needs onnx and numpy only."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from msgspec import Struct, field
from msgspec.structs import replace

from spc.errors import SpcError
from spc.frontend.image_input import image_input
from spc.frontend.onnx_import import Source as SourceFile
from spc.frontend.onnx_import import read_source
from spc.frontend.reading import Reading
from spc.ir.graph import Graph, Placement
from spc.ir.macs import macs
from spc.ir.printer import print_graph
from spc.lowering.lower import find_probes, lower
from spc.lowering.roles import output_roles
from spc.memory.dram import check_dram
from spc.memory.planner import Planner, check_fits, plan_memory
from spc.memory.residency import CallRecord, predicted_ms
from spc.memory.throughput import Throughput
from spc.options import CompileOptions
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
    StageResult,
)
from spc.passes.pipeline import MEMORY, STAGES, default_pipeline
from spc.plan.io import PlanWriter, program_member, read_plan, weights_member
from spc.plan.listing import call_counts, format_program
from spc.plan.program import Program
from spc.plan.schema import MAX_INPUTS, MAX_METADATA_ENTRIES, MAX_METADATA_KEY, MAX_METADATA_VALUE, validate_program
from spc.plan.verify import verify_plan
from spc.records import asdict
from spc.ttnn.memory import MemoryOverrides
from spc.ttnn.precision import PrecisionPlan
from spc.ttnn.targets import Target, get_target
from spc.validation.translation import COMPACT, Source, Verdict, culprit, snapshot, start


class CompileResult(Struct):
    """What a compile made: the final graph, the pass records, notes, and the plan written."""

    graph: Graph
    records: list[PassRecord]
    notes: list[str] = field(default_factory=list)
    plan: Path | None = None
    macs: tuple[int, int] = (0, 0)  # multiply-adds on the device, on the host
    recognised: list[str] = field(default_factory=list)
    explained: str | None = None  # --explain: the named rule's or fusion's attempts
    validation_s: float | None = None  # how long the validation took (None: not run)


class ProgramBuilder(Struct, frozen=True):
    """How a compiled graph becomes a planned program: lowered with the compile's read-back and
    kernel options, its memory chosen for the target (with the forced blocks) and checked to fit.
    The plan is made so, and so is each trial of the precision search (tuning/ cannot import this
    module: the search is handed the object)."""

    src: Path  # the model, named in errors
    chip: Target
    memory: MemoryOverrides = field(default_factory=MemoryOverrides)
    dense: bool = False
    keypoint_capacity: int | None = None
    kernels: bool = False

    def lower(self, g: Graph, notes: list[str] | None = None) -> tuple[Program, dict[str, np.ndarray]]:
        program, tensors = lower(g, find_probes(g), compact=not self.dense, capacity=self.keypoint_capacity,
                                 notes=notes, kernels=self.kernels)
        program.roles = output_roles(g)
        return program, tensors

    def plan(self, program: Program) -> Planner:
        """Choose every block's memory configuration (rewriting ``program``) and check that it fits."""
        planner = plan_memory(program, self.chip, self.memory)
        check_fits(planner.records, self.chip, str(self.src), self.memory)
        check_dram(program, self.chip, str(self.src))
        return planner

    def trial(self, g: Graph) -> tuple[Program, dict[str, np.ndarray], list[CallRecord]]:
        """The program, its tensors and the planner's walk, as the compile would write them."""
        program, tensors = self.lower(g)
        return program, tensors, self.plan(program).records


def check_input(g: Graph, src: Path) -> None:
    """One static floating-point input (an image), or static inputs of any numeric type (the
    tensors a matcher takes: keypoints, descriptors, sizes), at most :data:`MAX_INPUTS`."""
    if not g.inputs:
        raise SpcError(f"{src}: the model has no inputs; spc compiles models that take an image or tensors")
    if len(g.inputs) > MAX_INPUTS:
        raise SpcError(f"{src}: the model has {len(g.inputs)} inputs; a plan takes at most {MAX_INPUTS}")
    if len(g.inputs) == 1:
        t = g.inputs[0].type
        if not t.is_static or not t.dtype.is_float:
            raise SpcError(f"{src}: input {g.inputs[0].name} is {t}; spc needs a static floating-point input: "
                           "give its size with --input-shape (e.g. 1,1,480,640) or export a fixed size")
        return
    for v in g.inputs:
        if not v.type.is_static:
            raise SpcError(f"{src}: input {v.name} is {v.type}; spc needs static inputs: export the model with "
                           "fixed sizes (--input-shape fixes a model of one input)")


BATCHES = (1, 2, 4, 8)  # what --batch auto tries


def choose_batch(src: Path, max_latency_ms: float | None, options: CompileOptions) -> tuple[int, list[dict]]:
    """``--batch auto``: the batch size of :data:`BATCHES` with the most frames per second end to end
    (memory/throughput.py: the predicted device time and ttnn's host cost per call) whose run takes
    at most ``max_latency_ms``; each size compiled in full (a size that does not fit is reported
    with its reason). Returns the size and one row per size tried."""
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="spc-batch-") as tmp:
        for b in BATCHES:
            path = Path(tmp) / f"b{b}.ttplan"
            try:
                compile_onnx(src, path, replace(options, batch=b))
            except SpcError as exc:
                rows.append({"batch": b, "fits": False, "why": str(exc).removeprefix(f"{src}: ")[:300]})
                continue
            plan = read_plan(path, options.target)
            t = Throughput.of(plan)
            rows.append({"fits": True, **{k: round(v, 6) if isinstance(v, float) else v
                                          for k, v in t.as_dict().items()}})
    ok = [r for r in rows if r["fits"] and (max_latency_ms is None or r["run_s"] * 1e3 <= max_latency_ms)]
    if not ok:
        raise SpcError(f"{src}: --batch auto: no batch of {', '.join(map(str, BATCHES))} fits"
                       + (f" within --max-latency-ms {max_latency_ms:g}" if max_latency_ms is not None else "")
                       + "; " + "; ".join(f"{r['batch']}: " + (r.get("why") or f"{r['run_s'] * 1e3:.1f} ms per run")
                                          for r in rows))
    best = max(ok, key=lambda r: (r["fps"], -r["batch"]))
    for r in rows:
        r["chosen"] = r is best
    return best["batch"], rows


def _batch(g: Graph, src: Path, batch: int) -> int:
    """The batch batch-images gives a batch-1 model (1: none; a model that takes ``batch`` images
    already needs none)."""
    if batch < 1:
        raise SpcError(f"--batch must be at least 1, got {batch}")
    if batch > 1 and len(g.inputs) > 1:
        raise SpcError(f"{src}: --batch {batch} batches images, and the model takes {len(g.inputs)} inputs; "
                       "export it for the batch you want")
    first = g.inputs[0].type.shape[0] if g.inputs[0].type.rank else None
    if batch == 1 or first == batch:
        return 1
    if first != 1:
        raise SpcError(f"{src}: --batch {batch}: the model takes {first} images at once ({g.inputs[0].type}); "
                       "--batch rewrites a batch-1 model")
    return batch


def model_metadata(props: list[tuple[str, str]], notes: list[str]) -> dict[str, str]:
    """The source model's ``metadata_props`` for the manifest, bounded as plan/schema.py says:
    the first :data:`MAX_METADATA_ENTRIES` by key, keys and values cut to their caps (marked
    ``...``), the first of repeated keys. Kept as data: nothing reads them as settings."""

    def cut(text: str, cap: int) -> str:
        return text if len(text) <= cap else text[:cap - 3] + "..."

    found: dict[str, str] = {}
    cuts = 0
    for k, v in props:
        key, value = cut(k, MAX_METADATA_KEY), cut(v, MAX_METADATA_VALUE)
        cuts += (key, value) != (k, v)
        found.setdefault(key, value)
    kept = dict(sorted(found.items())[:MAX_METADATA_ENTRIES])
    if len(found) > len(kept):
        notes.append(f"the model's metadata_props hold {len(found)} keys; the plan keeps the first "
                     f"{MAX_METADATA_ENTRIES} by key")
    if cuts:
        notes.append(f"{cuts} metadata_props entries cut to {MAX_METADATA_KEY} characters a key, "
                     f"{MAX_METADATA_VALUE} a value")
    return kept


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


class _Departed(Exception):
    """The validation found the plan departing from the source at a fusion: compile again without it."""

    def __init__(self, fusion: str, note: str) -> None:
        self.fusion, self.note = fusion, note


def compile_onnx(src: Path, out: Path | None, options: CompileOptions | None = None, *,
                 watch: Watch | None = None, batch_search: list[dict] | None = None, reading: Reading | None = None,
                 **fields: Any) -> CompileResult:
    """Compile ``src`` with ``options`` (``fields``: some of them, given by name). With
    ``options.verify`` the plan is validated against the source before it is written
    (validation/translation.py); a fusion whose plan departs is dropped, with a note, and the
    model compiled again without it. ``watch``: what is dumped, printed or explained;
    ``batch_search``: ``--batch auto``'s rows, for the manifest; ``reading``: ``src``'s read,
    begun by the caller with ``options.input_shape`` (frontend/reading.py)."""
    try:
        watch_fields = {k: fields.pop(k) for k in Watch.__struct_fields__ if k in fields}
        options = replace(options or CompileOptions(), **fields)
        watch = replace(watch or Watch(), **watch_fields)
        unfused: dict[str, str] = {}
        notes: list[str] = []
        while True:
            try:
                result = compile_once(src, out, options, watch, batch_search, unfused, reading)
            except _Departed as d:
                if d.fusion in unfused:  # dropping it changed nothing: not the fusion's doing
                    raise SpcError(f"{src}: spc bug: {d.note}; report it with the dump from --dump-dir "
                                   "(--no-verify writes the plan regardless)") from None
                unfused, reading = {**unfused, d.fusion: d.note}, None  # the graph imported again
                notes.append(f"validation: {d.note}; {d.fusion} dropped, its region compiled op by op")
                continue
            result.notes[:0] = notes
            return result
    finally:  # a read begun and not taken (a refusal before the compile read it): its child ended
        if reading is not None:
            reading.cancel()


def _judge(src: Path, verdict: Verdict, g: Graph, pipeline: list[Pass]) -> Verdict:
    """The validation's verdict (validation/translation.py); a departure raises :class:`_Departed`
    naming the fusion to drop, or refuses the model when no fusion made it."""
    d = verdict.departure
    if d is None:
        return verdict
    fusions = {op: p.name for p in pipeline for op in p.creates}
    fusion = culprit(d, g, fusions, verdict)
    if fusion is None:
        raise SpcError(f"{src}: spc bug: the plan departs from the model at {d}; no fusion made it, so the "
                       f"lowering of node {d.node} is wrong: report it with the dump from --dump-dir "
                       "(--no-verify writes the plan regardless)")
    what = "the compact keypoint read-back" if fusion == COMPACT else f"the plan with {fusion}"
    raise _Departed(fusion, f"{what} departs from the model at {d}")


def _members_and_verdict(src: Path, writer: PlanWriter, snap: Source | None, g: Graph, program: Program,
                         tensors: dict[str, np.ndarray], pipeline: list[Pass],
                         records: list[PassRecord]) -> Verdict | None:
    """The plan's program and IR given to ``writer`` (after the checks every reader applies) and,
    with ``snap``, the validation's verdict: they are made while the validation's thread runs the
    source side (validation/translation.py), after this one ran the device side. A departure is
    raised first: dropping the fusion that made it may also mend what the checks refused."""
    if snap is None:
        _give_members(src, writer, g, program, tensors)
        return None
    approximated = [v for r in records for v in r.stats.get("approximated", [])]
    pending = start(snap, g, program, tensors, approximated)
    refused: SpcError | None = None
    try:
        _give_members(src, writer, g, program, tensors)
        pending.collect()
    except SpcError as exc:
        refused = exc
    except BaseException:
        pending.cancel()
        raise
    verdict = _judge(src, pending.verdict(), g, pipeline)
    if refused is not None:
        raise refused
    return verdict


def _give_members(src: Path, writer: PlanWriter, g: Graph, program: Program, tensors: dict[str, np.ndarray]) -> None:
    writer.add("program.json", program_member(_check_plan(src, program, tensors)))
    writer.add("ir.txt", print_graph(g).encode())


DISABLED = "disabled with --disable-pass"


def _disabled(options: CompileOptions, pipeline: list[Pass]) -> list[str]:
    """``--disable-pass``'s passes, each one of the pipeline and none that a running pass requires."""
    names = [p.name for p in pipeline]
    for name in options.disabled_passes:
        if name in {st.name for st in STAGES}:
            raise SpcError(f"--disable-pass {name}: a plan needs its memory configurations; force a block's with "
                           "--memory-config instead")
        if name not in names:
            raise SpcError(f"--disable-pass {name}: no such pass (passes: {', '.join(names)})")
    for p in pipeline:
        needs = [r for r in p.requires if r in options.disabled_passes]
        if needs and p.name not in options.disabled_passes:
            raise SpcError(f"--disable-pass {needs[0]}: {p.name} requires it; disable {p.name} too")
    return list(options.disabled_passes)


class Watch(Struct, frozen=True):
    """How a compile is watched (never what it writes): --dump-dir, --print-ir-after-all,
    --stop-after, --explain."""

    dump_dir: Path | None = None
    print_ir: bool = False
    stop_after: str | None = None
    explain: str | None = None


def compile_once(src: Path, out: Path | None, options: CompileOptions, watch: Watch,
                 batch_search: list[dict] | None = None, unfused: dict[str, str] | None = None,
                 reading: Reading | None = None) -> CompileResult:
    """Compile ``src`` once; with ``options.auto``, search the precision plan on calibration inputs
    first (tuning/precision_search.py: needs torch and onnxruntime, unlike the rest of compile).
    ``unfused``: fusions not run (what the validation found of each); ``reading``: as compile_onnx's."""
    stop_after, explain = watch.stop_after, watch.explain
    chip = get_target(options.target)
    # the manifest's hash is of the bytes imported
    source = read_source(src, input_shape=options.input_shape, reading=reading)
    g = source.graph
    check_input(g, src)
    image, image_note = image_input(g)  # read from the graph as imported, before any pass
    unfused = unfused or {}
    snap = snapshot(g) if options.verify and stop_after is None and out is not None else None
    compact_dropped = COMPACT in unfused
    instruments: list[Instrument] = []
    if watch.dump_dir is not None:
        instruments.append(DumpDir(watch.dump_dir))
    if watch.print_ir:
        instruments.append(PrintAfterAll())
    precision = options.precision
    pipeline = default_pipeline(_batch(g, src, options.batch))
    skipped = {k: v for k, v in unfused.items() if k != COMPACT} | {d: DISABLED for d in _disabled(options, pipeline)}
    ctx = PassContext(PipelineOptions(precision=precision, nms_single_pass=options.nms_single_pass, unfused=skipped),
                      explainer=explainer_for(explain, pipeline))
    pm = PassManager(pipeline, instruments, stop_after=stop_after, stages=STAGES)
    if image_note is not None:
        ctx.notes.append(image_note)
    pm.run(g, ctx)
    result = CompileResult(g, pm.records, ctx.notes)
    if ctx.explainer is not None:
        owner = next(p.name for p in pipeline if explain in p.explains)
        why = next((r.stats.get("why_not") for r in pm.records if r.name == owner), None)
        result.explained = ctx.explainer.format(why)
    if pm.stops_in_graph or (out is None and stop_after is None):
        pm.close(g)
        return result
    lowering = ProgramBuilder(src, chip, options.memory, options.dense or compact_dropped, options.keypoint_capacity,
                              options.kernels)
    search_report = None
    auto = options.auto
    if auto is not None:
        from spc.tuning.precision_search import search  # torch + onnxruntime (~1 s): only --precision auto needs them

        def choose(plan: PrecisionPlan) -> None:  # a search trial: verified, not recorded
            pm.rerun("choose-precision", g, PassContext(replace(ctx.options, precision=plan)), record=False)

        found = search(g, src, choose, lowering.trial, image, auto.calib, auto.thresholds, log=auto.log)
        precision, search_report = found.plan, found.manifest()
        ctx = PassContext(replace(ctx.options, precision=precision), ctx.notes)
        pm.rerun("choose-precision", g, ctx)
    pass_notes = len(ctx.notes)
    program, tensors = lowering.lower(g, ctx.notes)
    program.image = image
    # the plan's file is begun now: the weights are final, and its thread writes them to the disk
    # while the memory is planned and the plan validated (plan/io.py)
    writer = PlanWriter(out) if out is not None and stop_after is None else None
    try:
        if writer is not None:
            weights = dict(tensors)
            writer.add("weights.safetensors", lambda: weights_member(weights))
        records: list[CallRecord] = []  # the planner's walk: the fit check and the predicted time read it

        def choose_memory() -> StageResult:
            before = call_counts(program)
            planner = lowering.plan(program)
            ctx.notes[pass_notes:pass_notes] = planner.notes  # the planner's notes, before the lowering's
            records[:] = planner.records
            return StageResult({"target": chip.name, **planner.stats}, before, call_counts(program),
                               lambda: format_program(program), program, tensors)

        pm.stage(MEMORY.name, g, choose_memory)
        pm.close(g)
        if writer is None:
            return result
        verdict = _members_and_verdict(src, writer, snap, g, program, tensors, pipeline, pm.records)
        manifest = _manifest(src, source, options, precision, program, verdict, search_report, batch_search, g,
                             records, pm, ctx)
    except BaseException:
        if writer is not None:
            writer.discard()
        raise
    writer.finish(manifest)
    result.plan, result.macs, result.recognised = out, _macs(g), manifest["recognised"]
    result.validation_s = verdict.seconds if verdict is not None else None
    return result


def _macs(g: Graph) -> tuple[int, int]:
    """Multiply-adds on the device and on the host."""
    device = sum(macs(n) for n in g.nodes if n.placement is Placement.DEVICE)
    return device, sum(macs(n) for n in g.nodes if n.placement is not Placement.DEVICE)


def _manifest(src: Path, source: SourceFile, options: CompileOptions, precision: PrecisionPlan, program: Program,
              verdict: Verdict | None, search_report: dict | None, batch_search: list[dict] | None, g: Graph,
              records: list[CallRecord], pm: PassManager, ctx: PassContext) -> dict[str, Any]:
    """The plan's manifest (plan/io.py completes it with the members' hashes and its digest)."""
    metadata = model_metadata(source.metadata, ctx.notes)
    device_macs, host_macs = _macs(g)
    return {
        "target": options.target,
        "source": {"file": src.name, "sha256": source.sha256, "path": os.path.abspath(src)},
        "inputs": [asdict(t) for t in program.inputs],
        "outputs": [asdict(t) for t in program.outputs],
        "options": options.manifest(precision),
        # what the validation compared (validation/translation.py), or that --no-verify skipped it
        "validation": verdict.manifest() if verdict is not None else "skipped (--no-verify)",
        "precision_search": search_report,
        "batch_search": batch_search,  # --batch auto: each batch size tried (choose_batch)
        "model_metadata": metadata,  # the source's metadata_props (spc export: where the weights came from)
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


def _check_plan(src: Path, program: Program, tensors: dict[str, np.ndarray]) -> dict:
    """The checks every reader applies (plan/schema.py, plan/verify.py), before the plan is
    written: a model whose plan would be refused (NaN weights, a group count that does not divide
    the channels, no outputs, ...) is refused now, naming the model, not when it is run. Returns
    the program's JSON, which is what is written."""
    program_json = program.to_json()
    try:
        validate_program(program_json, str(src))
        verify_plan(program, tensors)
    except SpcError as exc:
        text = str(exc).removeprefix(f"{src}: ").removesuffix("; recompile the plan")
        raise SpcError(f"{src}: the model compiles to a plan spc would refuse to run ({text}); check the model "
                       "(onnxruntime runs it?) and fix it") from None
    return program_json
