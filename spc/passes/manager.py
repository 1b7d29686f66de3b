"""Pass infrastructure: passes, an ordered named pipeline, and instruments around it.

A pass declares a kebab-case ``name``, a one-line ``summary`` and the passes it ``requires``
to have run before it; the manager enforces the order, verifies the IR after every pass and,
when a pass fails, says which passes already ran. Instruments (dumps, printing, timing) watch
the pipeline from outside, as TVM's pass instruments do; a failing instrument only warns.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from spc.errors import SpcError
from spc.ir.graph import Graph
from spc.ir.verify import VerifyError, verify


@dataclass
class PassResult:
    modified: bool
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class PassContext:
    """Options shared by the pipeline (from the command line) and notes passes leave for the user."""

    options: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        self.notes.append(text)


class Pass:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    requires: ClassVar[tuple[str, ...]] = ()

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        raise NotImplementedError


class Instrument:
    def before_all(self, g: Graph) -> None: ...
    def after_pass(self, index: int, p: Pass, g: Graph, result: PassResult, seconds: float) -> None: ...
    def after_all(self, g: Graph, records: list[PassRecord]) -> None: ...


@dataclass
class PassRecord:
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
                 stop_after: str | None = None, verify_each: bool = True) -> None:
        names = [p.name for p in passes]
        if stop_after is not None and stop_after not in names:
            raise SpcError(f"--stop-after {stop_after}: no such pass (passes: {', '.join(names)})")
        self.passes = passes
        self.instruments = instruments or []
        self.stop_after = stop_after
        self.verify_each = verify_each
        self.records: list[PassRecord] = []

    def run(self, g: Graph, ctx: PassContext) -> Graph:
        self._each("before_all", g)
        ran: list[str] = []
        for i, p in enumerate(self.passes, start=1):
            missing = [r for r in p.requires if r not in ran]
            if missing:
                raise PassError(f"pass {p.name} requires {', '.join(missing)} to run before it")
            before = g.op_counts()
            t0 = time.perf_counter()
            try:
                result = p.run(g, ctx)
                if self.verify_each:
                    verify(g)
            except VerifyError as exc:
                raise PassError(f"IR invalid after pass {p.name} (ran: {', '.join(ran) or 'none'}): {exc}") from None
            except SpcError:
                raise
            except Exception as exc:
                raise PassError(f"pass {p.name} failed (ran before it: {', '.join(ran) or 'none'}): "
                                f"{type(exc).__name__}: {exc}") from exc
            seconds = time.perf_counter() - t0
            ran.append(p.name)
            self.records.append(PassRecord(i, p.name, seconds, result.modified, result.stats, before,
                                           g.op_counts()))
            for inst in self.instruments:
                self._safe(inst.after_pass, i, p, g, result, seconds)
            if p.name == self.stop_after:
                break
        self._each("after_all", g, self.records)
        return g

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


class DumpDir(Instrument):
    """``--dump-dir DIR``: ``NN-<pass>.ir`` and ``NN-<pass>.dot`` per pass, and a summary."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def before_all(self, g: Graph) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for old in list(self.folder.glob("[0-9][0-9]-*.ir")) + list(self.folder.glob("[0-9][0-9]-*.dot")):
            old.unlink()  # only our own files, so a stale dump cannot be mistaken for this run's
        self._write(0, "input", g)

    def after_pass(self, index: int, p: Pass, g: Graph, result: PassResult, seconds: float) -> None:
        self._write(index, p.name, g)

    def _write(self, index: int, name: str, g: Graph) -> None:
        from spc.ir.dot import to_dot

        (self.folder / f"{index:02d}-{name}.ir").write_text(str(g))
        (self.folder / f"{index:02d}-{name}.dot").write_text(to_dot(g))

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
