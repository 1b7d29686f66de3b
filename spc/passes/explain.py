"""``spc compile --explain NAME``: for one rewrite rule or fusion, every candidate it looked at,
how far it matched and why it stopped.

A pass that recognises something asks the context for an :class:`Attempt` per candidate
(``ctx.attempt(fusion, candidate)``; None when nobody asked, so the passes pay nothing then),
adds the steps that held and ends it with :meth:`Attempt.fired` or :meth:`Attempt.stopped`::

    fuse-score-fold  %logits (65 channels)
      region: 9 nodes (onnx.Softmax, onnx.Slice, onnx.Reshape x3, ...)
      stopped: no region value equals the fold; nearest %x (onnx.Transpose): max |diff| 0.51 ...

Rules (passes/rewrite.py) are explained per node whose op is their pattern's root, down to the
input that did not match or the check that said no.
"""

from __future__ import annotations

from msgspec import Struct, field


class Attempt(Struct):
    """One candidate of a rule or fusion: the steps it took and how it ended."""

    fusion: str  # the rule or fusion pass
    candidate: str  # what it tried: a node, a value
    steps: list[str] = field(default_factory=list)
    outcome: str = "not finished"
    fired_: bool = False

    def step(self, text: str) -> None:
        self.steps.append(text)

    def fired(self, text: str = "") -> None:
        self.outcome, self.fired_ = "fired" + (f": {text}" if text else ""), True

    def stopped(self, why: str) -> None:
        self.outcome = f"stopped: {why}"


class Explainer(Struct):
    """Collects the attempts of the fusions and rules named ``names``."""

    names: frozenset[str]
    attempts: list[Attempt] = field(default_factory=list)

    def begin(self, fusion: str, candidate: str, also: str = "") -> Attempt | None:
        """An attempt of ``fusion`` (or of the pass ``also`` it belongs to) if it is explained."""
        if fusion not in self.names and also not in self.names:
            return None
        a = Attempt(fusion, candidate)
        self.attempts.append(a)
        return a

    def format(self, why_not: str | None = None) -> str:
        """The attempts, deduplicated; ``why_not`` (the pass's own summary) when there were none."""
        if not self.attempts:
            why = f" ({why_not})" if why_not else ""
            return f"{', '.join(sorted(self.names))}: no candidate in this graph{why}\n"
        seen: set[tuple[str, str, tuple[str, ...], str]] = set()
        lines = []
        for a in self.attempts:
            key = (a.fusion, a.candidate, tuple(a.steps), a.outcome)
            if key in seen:  # a rule set runs to a fixed point: the same miss every round
                continue
            seen.add(key)
            lines.append(f"{a.fusion}  {a.candidate}")
            lines += [f"  {s}" for s in a.steps]
            lines.append(f"  {a.outcome}")
        tried = {(a.fusion, a.candidate) for a in self.attempts}
        fired = {(a.fusion, a.candidate) for a in self.attempts if a.fired_}
        lines.append(f"{len(fired)} candidate(s) fired, {len(tried - fired)} did not")
        return "\n".join(lines) + "\n"
