"""Pass infrastructure: passes, an ordered named pipeline, and instruments around it.

A pass declares a kebab-case ``name``, a one-line ``summary`` and the passes it ``requires``
to have run before it; the manager enforces the order, verifies the IR after every pass and,
when a pass fails, says which passes already ran. Options come frozen (:class:`PipelineOptions`):
a pass reads them, never writes them. A pass run again with other options (the precision search's
choice) goes through :meth:`PassManager.rerun`, verified and recorded like the first run; a stage
that works on the lowered program (the memory planner) is recorded by :meth:`PassManager.stage`.
Instruments (dumps, printing, timing) watch all of it from outside, as TVM's pass instruments do;
a failing instrument only warns. :meth:`PassManager.close` ends the run (the dump's summary).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from msgspec import Struct, field

from spc.errors import SpcError
from spc.ir.dot import to_dot
from spc.ir.graph import Graph
from spc.ir.verify import VerifyError, verify
from spc.passes.explain import Attempt, Explainer
from spc.ttnn.precision import PrecisionPlan

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from spc.plan.program import Program


class PassResult(Struct):
    """What a pass reports: whether it changed the graph, and its figures."""

    modified: bool
    stats: dict[str, Any] = field(default_factory=dict)


class StageResult(Struct):
    """What a stage on the lowered program leaves: its stats, the op (call) counts before and after,
    its result as text (the dumps' ``NN-<name>.txt``) and, for instruments that show it, the
    program itself with the plan's tensors (the dumps' device-program graph)."""

    stats: dict[str, Any]
    ops_before: dict[str, int]
    ops_after: dict[str, int]
    text: str | Callable[[], str]  # or what makes it, when an instrument shows it (a listing: ~5 ms)
    program: Program | None = None
    tensors: Mapping[str, np.ndarray] = field(default_factory=dict)

    def shown(self) -> str:
        return self.text() if callable(self.text) else self.text


class Stage(Struct, frozen=True):
    """A stage on the lowered program, after the graph passes (the memory planner): named and
    summarised as a pass is, listed by `--list-passes`, recorded by :meth:`PassManager.stage`."""

    name: str
    summary: str


class PipelineOptions(Struct, frozen=True):
    """What the command line decides for the passes."""

    precision: PrecisionPlan = field(default_factory=PrecisionPlan)  # choose-precision
    nms_single_pass: bool = False  # insert-device-nms: one suppression round instead of the source's
    # fusions that do not run: the compile's validation found their plan departing from the source
    # (compiler.py), so their regions are lowered op by op; each with the departure, for the record
    unfused: dict[str, str] = field(default_factory=dict)


class PassContext(Struct):
    """The pipeline's options, the notes passes leave for the user, and who listens to the
    recognisers (``--explain``)."""

    options: PipelineOptions = field(default_factory=PipelineOptions)
    notes: list[str] = field(default_factory=list)
    explainer: Explainer | None = None

    def attempt(self, fusion: str, candidate: str) -> Attempt | None:
        """A candidate of ``fusion``, to describe when it is being explained (else None)."""
        return self.explainer.begin(fusion, candidate) if self.explainer is not None else None

    def note(self, text: str) -> None:
        self.notes.append(text)


class Pass:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    requires: ClassVar[tuple[str, ...]] = ()
    # what `--explain` can name in this pass: its rules, or the pass itself for a recogniser
    explains: ClassVar[tuple[str, ...]] = ()
    # the ops a fusion makes: a departure the validation finds at one of them is this pass's
    creates: ClassVar[tuple[str, ...]] = ()

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        raise NotImplementedError


class Instrument:
    def before_all(self, g: Graph) -> None: ...
    def after_pass(self, index: int, p: Pass, g: Graph, result: PassResult, seconds: float) -> None: ...
    def after_stage(self, record: PassRecord, g: Graph, result: StageResult) -> None: ...
    def after_all(self, g: Graph, records: list[PassRecord]) -> None: ...


class PassRecord(Struct):
    """One pass as it ran: time, change, figures and the op counts around it."""

    index: int
    name: str
    seconds: float
    modified: bool
    stats: dict[str, Any]
    ops_before: dict[str, int]
    ops_after: dict[str, int]


class PassError(SpcError):
    pass


class PassManager:
    def __init__(self, passes: list[Pass], instruments: list[Instrument] | None = None,
                 stop_after: str | None = None, verify_each: bool = True, stages: tuple[Stage, ...] = ()) -> None:
        names = [p.name for p in passes] + [st.name for st in stages]
        if stop_after is not None and stop_after not in names:
            raise SpcError(f"--stop-after {stop_after}: no such pass (passes: {', '.join(names)})")
        self.passes = passes
        self.stages = stages
        self.instruments = instruments or []
        self.stop_after = stop_after
        self.verify_each = verify_each
        self.records: list[PassRecord] = []

    @property
    def stops_in_graph(self) -> bool:
        """Whether ``stop_after`` names a graph pass (nothing is lowered then)."""
        return self.stop_after is not None and self.stop_after in {p.name for p in self.passes}

    def run(self, g: Graph, ctx: PassContext) -> Graph:
        self._each("before_all", g)
        ran: list[str] = []
        for p in self.passes:
            missing = [r for r in p.requires if r not in ran]
            if missing:
                raise PassError(f"pass {p.name} requires {', '.join(missing)} to run before it")
            self._run_one(p, g, ctx, ran)
            ran.append(p.name)
            if p.name == self.stop_after:
                break
        return g

    def rerun(self, name: str, g: Graph, ctx: PassContext, record: bool = True) -> PassResult:
        """Run pipeline pass ``name`` again (with ``ctx``'s options): verified, and unless
        ``record`` is false (a search's trials) recorded and shown to the instruments."""
        p = next((p for p in self.passes if p.name == name), None)
        ran = [r.name for r in self.records]
        if p is None or name not in ran:
            raise PassError(f"pass {name} cannot run again: it has not run in this pipeline")
        return self._run_one(p, g, ctx, ran, record=record)

    def stage(self, name: str, g: Graph, fn: Callable[[], StageResult]) -> None:
        """Record a stage after the graph passes, on what was lowered from ``g``: ``fn`` runs it
        (the instruments are shown ``g`` beside its result)."""
        t0 = time.perf_counter()
        result = fn()
        before, after = result.ops_before, result.ops_after
        rec = PassRecord(len(self.records) + 1, name, time.perf_counter() - t0, before != after, result.stats,
                         before, after)
        self.records.append(rec)
        for inst in self.instruments:
            self._safe(inst.after_stage, rec, g, result)

    def close(self, g: Graph) -> None:
        """The run is over: instruments write what covers all of it (the dump's summary)."""
        self._each("after_all", g, self.records)

    def _run_one(self, p: Pass, g: Graph, ctx: PassContext, ran: list[str], record: bool = True) -> PassResult:
        before = g.op_counts()
        t0 = time.perf_counter()
        try:
            if p.name in ctx.options.unfused:
                result = PassResult(False, {"fused": 0, "why_not": f"dropped: {ctx.options.unfused[p.name]}"})
            else:
                result = p.run(g, ctx)
            # a pass that left the IR as it was cannot have broken it (MLIR skips these too)
            if self.verify_each and result.modified:
                verify(g)
        except VerifyError as exc:
            raise PassError(f"IR invalid after pass {p.name} (ran: {', '.join(ran) or 'none'}): {exc}") from None
        except SpcError:
            raise
        except Exception as exc:
            raise PassError(f"pass {p.name} failed (ran before it: {', '.join(ran) or 'none'}): "
                            f"{type(exc).__name__}: {exc}") from exc
        seconds = time.perf_counter() - t0
        if record:
            i = len(self.records) + 1
            self.records.append(PassRecord(i, p.name, seconds, result.modified, result.stats, before, g.op_counts()))
            for inst in self.instruments:
                self._safe(inst.after_pass, i, p, g, result, seconds)
        return result

    def _each(self, hook: str, *args: Any) -> None:
        for inst in self.instruments:
            self._safe(getattr(inst, hook), *args)

    @staticmethod
    def _safe(fn, *args: Any) -> None:
        try:
            fn(*args)
        except OSError as exc:  # a dump that cannot be written must not fail the compile
            print(f"warning: instrument {type(fn.__self__).__name__} failed: {exc}", file=sys.stderr)


class PrintAfterAll(Instrument):
    """``--print-ir-after-all``: the IR after every pass, on stderr."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stderr

    def after_pass(self, index: int, p: Pass, g: Graph, result: PassResult, seconds: float) -> None:
        print(f"// ----- IR after {p.name} ({'modified' if result.modified else 'unchanged'}) -----",
              file=self.stream)
        print(str(g), file=self.stream)

    def after_stage(self, record: PassRecord, g: Graph, result: StageResult) -> None:
        print(f"// ----- after {record.name} -----", file=self.stream)
        print(result.shown(), file=self.stream)


class DumpDir(Instrument):
    """``--dump-dir DIR``: per pass ``NN-<pass>.ir`` (the IR text), ``NN-<pass>.dot`` (Graphviz) and
    ``NN-<pass>.onnx`` (the IR as ONNX, for Netron: ir/to_onnx.py); per stage on the lowered program
    ``NN-<stage>.txt`` and, when it shows the program, the IR's .dot and .onnx with the program's
    choices (memory, stored formats) and ``NN-device-program.onnx``, the ttnn calls as a graph
    (plan/to_onnx.py); a summary."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def before_all(self, g: Graph) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for old in [f for ext in ("ir", "dot", "txt", "onnx") for f in self.folder.glob(f"[0-9][0-9]-*.{ext}")]:
            old.unlink()  # only our own files, so a stale dump cannot be mistaken for this run's
        self._write(0, "input", g)

    def after_pass(self, index: int, p: Pass, g: Graph, result: PassResult, seconds: float) -> None:
        self._write(index, p.name, g)

    def _write(self, index: int, name: str, g: Graph) -> None:
        (self.folder / f"{index:02d}-{name}.ir").write_text(str(g))
        self._views(index, name, g)

    def _views(self, index: int, name: str, g: Graph, notes: Mapping[str, Mapping[str, str]] | None = None,
               stored: Mapping[str, str] | None = None) -> None:
        from spc.ir.to_onnx import to_onnx  # onnx's package (~40 ms): only --dump-dir writes these views

        (self.folder / f"{index:02d}-{name}.dot").write_text(to_dot(g, notes, stored))
        self._save(f"{index:02d}-{name}.onnx", lambda: to_onnx(g, notes, stored, doc=f"spc: the IR after {name}"))

    def _save(self, file: str, build: Callable[[], onnx.ModelProto]) -> None:
        path = self.folder / file
        try:
            data = build().SerializeToString()  # protobuf refuses a model over 2 GB
        except Exception as exc:  # a view that cannot be built must not fail the compile, nor hide the others
            print(f"warning: {path}: not written ({type(exc).__name__}: {exc}); the .ir and .dot dumps are",
                  file=sys.stderr)
            return
        path.write_bytes(data)

    def after_stage(self, record: PassRecord, g: Graph, result: StageResult) -> None:
        (self.folder / f"{record.index:02d}-{record.name}.txt").write_text(result.shown())
        program = result.program
        if program is None:
            return
        from spc.plan.to_onnx import ir_notes, program_to_onnx  # onnx's package, as in _views

        notes, stored = ir_notes(program)
        self._views(record.index, record.name, g, notes, stored)
        self._save(f"{record.index:02d}-device-program.onnx", lambda: program_to_onnx(program, result.tensors))

    def after_all(self, g: Graph, records: list[PassRecord]) -> None:
        (self.folder / "summary.txt").write_text(format_summary(records))


def format_summary(records: list[PassRecord]) -> str:
    lines = [f"{'#':>2}  {'pass':<28} {'ms':>8}  {'nodes':>11}  changes", ""]
    for r in records:
        nb, na = sum(r.ops_before.values()), sum(r.ops_after.values())
        delta = []
        for op in sorted(set(r.ops_before) | set(r.ops_after)):
            b, a = r.ops_before.get(op, 0), r.ops_after.get(op, 0)
            if a != b:
                delta.append(f"{op} {b}->{a}")
        stats = ", ".join(f"{k}={v}" for k, v in r.stats.items())
        lines.append(f"{r.index:>2}  {r.name:<28} {r.seconds * 1000:>8.1f}  {nb:>4} -> {na:<4}  "
                     + ("; ".join(delta) or "-") + (f"  [{stats}]" if stats else ""))
    return "\n".join(lines) + "\n"
