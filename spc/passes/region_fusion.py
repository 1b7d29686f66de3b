"""The one driver of the recognisers that fuse a region by its value (score fold, NMS, L2 norm).

A fusion declares what it looks for; :meth:`RegionFusion.run` does the rest, the same way for
each: every live value of the graph, in order, is offered to :meth:`candidate` (None: not an
entry; else what the entry tells, e.g. NMS's radius); the region of :attr:`ops` after it is grown
(passes/semantic_match.py), :meth:`search` finds the value that equals the fused op's meaning, or
says why not, and :meth:`fuse` replaces the region. `--explain` hears each step. A fusion that
fires nowhere reports :meth:`why_not`.

Before (fuse-l2norm's declaration, its search aside)::

    class FuseL2Norm(RegionFusion):
        ops = NORM_OPS
        def candidate(self, g, entry): ...    # a static float map a norm starts from
        def search(self, g, region, entry, found, misses): ...
        def fuse(self, g, ctx, region, entry, found, match, stats): ...

After: ``FuseL2Norm().run(g, ctx)`` -> ``PassResult(modified, {"fused": n, ...})``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from spc.ir.graph import Graph, Value
from spc.passes.manager import Pass, PassContext, PassResult
from spc.passes.semantic_match import Region, describe_region, grow_region


class RegionFusion(Pass):
    ops: ClassVar[frozenset[str] | set[str]] = frozenset()  # what a region may hold

    def candidate(self, g: Graph, entry: Value) -> tuple[str, Any] | None:
        """(the attempt's label, what the entry tells the search), or None when ``entry`` starts
        no region of this fusion."""
        raise NotImplementedError

    def describe(self, region: Region, found: Any) -> list[str]:
        """The attempt's steps after the region is grown (--explain)."""
        return [describe_region(region)]

    def search(self, g: Graph, region: Region, entry: Value, found: Any, misses: list[str] | None) -> Any | None:
        """The match (the exit, its nodes and what the fused op needs), or None; ``misses``
        (when explaining) collects why each try failed."""
        raise NotImplementedError

    def stopped(self, found: Any, misses: list[str]) -> str:
        """Why an entry's region fused nothing (--explain)."""
        raise NotImplementedError

    def fuse(self, g: Graph, ctx: PassContext, region: Region, entry: Value, found: Any, match: Any,
             stats: dict[str, Any]) -> str:
        """Replace the region; returns what --explain says it fired as. ``stats``: the pass's."""
        raise NotImplementedError

    def why_not(self, g: Graph, tried: list[str]) -> str:
        """Why the pass fused nothing, from the entries it tried (none: no entry at all)."""
        raise NotImplementedError

    def begin(self, stats: dict[str, Any]) -> None:
        """The pass's own figures before any entry (NMS: the source's rounds)."""

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        fused, tried = 0, []
        stats: dict[str, Any] = {"fused": 0}
        self.begin(stats)
        for entry in list(g.values()):
            if entry.producer is not None and entry.producer not in g.nodes:
                continue  # in a region fused already
            offered = self.candidate(g, entry)
            if offered is None:
                continue
            label, found = offered
            tried.append(label)
            attempt = ctx.attempt(self.name, label)
            region = grow_region(g, entry, self.ops)
            if attempt:
                for step in self.describe(region, found):
                    attempt.step(step)
            misses: list[str] | None = [] if attempt else None
            match = self.search(g, region, entry, found, misses)
            if match is None:
                if attempt:
                    attempt.stopped(self.stopped(found, misses or []))
                continue
            fired = self.fuse(g, ctx, region, entry, found, match, stats)
            if attempt:
                attempt.fired(fired)
            fused += 1
            tried.pop()
        stats["fused"] = fused
        if not fused:
            stats["why_not"] = self.why_not(g, tried)
        return PassResult(fused > 0, stats)
