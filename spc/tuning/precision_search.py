"""`spc compile --precision auto`: the cheapest per-block precision that keeps task accuracy.

The gate is the task, not a tensor: keypoint F1 and descriptor-map PCC against onnxruntime fp32
on the source ONNX. By default the gate is paired: on *every* calibration input, F1 within 0.01
and descriptor PCC within 0.001 of what the `accurate` plan gets on that input (a median over a
few inputs let the greedy search walk to the edge and lose 0.05 F1 on other images). Absolute
floors may be given instead (--min-f1 on the median, --min-desc-pcc on the worst input).

The search, measured with the emulator (emulator/numerics.py) and ranked by the predicted device
time (memory/cost.py):

1. `accurate`, to anchor the thresholds, then the preset `balanced`, and `fast` if `balanced`
   passes (`fast` is less precise than `balanced` in every field: when `balanced` fails it
   would too); the cheapest that passes is the starting point.
2. Sensitivity: for each convolution block, the cheapest cheaper setting that passes with every
   other block left as it is. Settings are assumed monotone: one that is no more precise than a
   failing one in any field (weights' bits, fidelity phases) fails too, and is not tried; those
   left are probed from the middle of their cost order (a pass rules out the dearer ones, a
   failure the less precise ones), so a block costs about three trials, not six. A setting
   predicted to save less than :data:`MIN_SAVING` of `accurate`'s time on what it must beat
   (the starting point, or the cheapest passing setting found so far) is not emulated, nor are
   the dearer ones after it: within the cost model's noise, it would spend accuracy (and, for
   the first blocks, trials of the whole network) on nothing.
3. Combination: all of those at once; if that fails, add them one at a time, biggest saving
   first, keeping each only if the plan still passes. (Choosing block by block on top of the
   blocks chosen before, which needs no combination and half the trials, went further to the
   edge: 0.041 F1 lost on a held-out image at 480x640, against 0.018 for this.)

What a trial costs (:class:`Evaluator`): it re-stamps precision on the compiled graph, then
lowers it and plans its memory again through the compile's own path (compiler.ProgramBuilder: its
memory, read-back and kernel options); no re-import, no re-running of the other passes. The
inputs run one at a time, the one that failed most trials so far first, and a trial stops at
the first input that rules it out. Device calls whose result an earlier run of the search's current base plan
already computed are not run again (tuning/reuse.py decides which, from the calls themselves):
a trial that changes one block starts from the base's tensors at that block's input.
onnxruntime's outputs are computed once (tuning/comparison.Comparison), and a program already
scored is not scored again.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from msgspec import Struct, field
from msgspec.structs import replace

from spc.errors import SpcError
from spc.ir.graph import Graph
from spc.lowering.lower import find_probes
from spc.memory.residency import CallRecord, predicted_ms
from spc.plan.io import Plan
from spc.plan.program import ImageInput, Program
from spc.records import asdict
from spc.runtime.emu import PreparedOnce
from spc.runtime.inputs import expand_paths, load_input
from spc.ttnn.formats import DataFormat, MathFidelity
from spc.ttnn.precision import BlockPrecision, PrecisionPlan
from spc.tuning.comparison import Comparison
from spc.tuning.reuse import ProgramKeys, ReusingDevice
from spc.tuning.thresholds import Thresholds

CALIBRATION_DIR = Path(__file__).parent / "calibration"
# cheaper-than-accurate settings of a convolution block, cheapest first
OPTIONS: tuple[dict[str, Any], ...] = tuple(
    {"weights_dtype": w, "math_fidelity": f} for w, f in (
        (DataFormat.BFLOAT4_B, MathFidelity.LOFI),
        (DataFormat.BFLOAT8_B, MathFidelity.LOFI),
        (DataFormat.BFLOAT16, MathFidelity.LOFI),
        (DataFormat.BFLOAT8_B, MathFidelity.HIFI2),
        (DataFormat.BFLOAT16, MathFidelity.HIFI2),
        (DataFormat.BFLOAT16, MathFidelity.HIFI3),
    ))
MIN_SAVING = 0.0025  # of `accurate`'s predicted time: what a change must save to be tried
NAN = float("nan")


class Score(Struct, frozen=True):
    f1: float  # median over the calibration inputs run
    descriptor_pcc: float  # worst input run
    score_pcc: float  # worst input run
    device_ms: float  # predicted
    f1s: tuple[float, ...] = ()  # per input run
    descriptor_pccs: tuple[float, ...] = ()  # per input run
    inputs: tuple[int, ...] = ()  # which inputs those are (empty: all, in order)
    complete: bool = True  # every input was run (else the trial stopped early, or was not emulated)

    @staticmethod
    def of(reports: list, device_ms: float) -> Score:
        """Median F1 and worst PCCs over per-input reports (tuning/comparison.ImageReport)."""
        return Score(statistics.median(r.f1 for r in reports), min(r.descriptor_pcc for r in reports),
                     min(r.score_pcc for r in reports), device_ms, tuple(r.f1 for r in reports),
                     tuple(r.descriptor_pcc for r in reports))

    @staticmethod
    def partial(reports: Mapping[int, Any], n: int, device_ms: float) -> Score:
        """Over the reports of some of ``n`` inputs, by input index (none: not emulated)."""
        if not reports:
            return Score(NAN, NAN, NAN, device_ms, complete=False)
        got = sorted(reports)
        s = Score.of([reports[i] for i in got], device_ms)
        return Score(s.f1, s.descriptor_pcc, s.score_pcc, device_ms, s.f1s, s.descriptor_pccs, tuple(got),
                     len(got) == n)

    @property
    def indices(self) -> tuple[int, ...]:
        return self.inputs or tuple(range(len(self.f1s)))

    def passes(self, min_f1: float, min_desc: float) -> bool:
        return self.f1 >= min_f1 and self.descriptor_pcc >= min_desc

    def within(self, ref: Score, f1_drop: float, desc_drop: float) -> bool:
        """Paired: no input (of those run) loses more than the margins against ``ref`` on that same input."""
        return (all(a >= ref.f1s[i] - f1_drop for i, a in zip(self.indices, self.f1s))
                and all(a >= ref.descriptor_pccs[i] - desc_drop for i, a in zip(self.indices, self.descriptor_pccs)))


# a partial score (the inputs run so far) -> whether the trial can no longer pass
Hopeless = Callable[[Score], bool]


class Scorer(Protocol):
    """What the search measures plans with (the emulator: :class:`Evaluator`)."""

    def __call__(self, plan: PrecisionPlan, hopeless: Hopeless | None = None,
                 cheaper_than: float | None = None) -> Score:
        """Score ``plan``; stop (an incomplete score) once ``hopeless`` says so, and do not emulate
        a plan predicted no cheaper than ``cheaper_than`` (a score with no inputs)."""
        ...

    def base(self, plan: PrecisionPlan) -> None:
        """The trials to come differ from ``plan`` (scored last) in a few blocks."""
        ...


class Trial(Struct):
    what: str
    plan: PrecisionPlan
    score: Score
    passed: bool

    @property
    def emulated(self) -> bool:
        return bool(self.score.f1s)


class SearchResult(Struct):
    plan: PrecisionPlan
    score: Score
    reference: Score
    thresholds: Thresholds
    trials: list[Trial] = field(default_factory=list)
    message: str = ""
    stats: dict[str, float] = field(default_factory=dict)  # what was emulated (Evaluator.stats)

    def manifest(self) -> dict[str, Any]:
        return {"chosen": self.plan.describe(), "metrics": asdict(self.score), "accurate": asdict(self.reference),
                "thresholds": asdict(self.thresholds), "trials": len(self.trials), "message": self.message,
                "emulated": dict(self.stats)}


# a compiled graph -> its planned program, the program's tensors and the planner's walk, as the
# compile makes them (compiler.ProgramBuilder.trial: the compile's memory, read-back and kernel options)
LowerAndPlan = Callable[[Graph], tuple[Program, dict[str, np.ndarray], list[CallRecord]]]


def _program_digest(program: Program, keys: ProgramKeys) -> bytes:
    """Everything a trial's result depends on: the device program (its keys), the host stages
    and the tensors they read."""
    host = json.dumps(replace(program, device_ops=[]).to_json(), sort_keys=True, default=repr).encode()
    read = sorted({n for nodes in (program.host_pre, program.host_post, program.fallback_post)
                   for node in nodes for n in node.inputs if n})
    return hashlib.blake2b(b"".join([keys.digest, host, *(n.encode() + keys.weight(n) for n in read)]),
                           digest_size=20).digest()


class Evaluator:
    """Scores precision plans of one compiled graph on calibration inputs (a :class:`Scorer`)."""

    def __init__(self, g: Graph, src: Path, inputs: list[np.ndarray], choose: Callable[[PrecisionPlan], None],
                 lower_and_plan: LowerAndPlan) -> None:
        self.g = g
        # applies a plan to the graph: the compiler re-runs choose-precision through its pass manager
        self.choose = choose
        self.lower_and_plan = lower_and_plan
        self.comparison = Comparison(src, find_probes(g), inputs)
        self.n = len(inputs)
        self.shared: dict[bytes, Any] = {}  # the base plan's device results by key (tuning/reuse.py)
        # the last run that went through every input without being ruled out (a pass, with the
        # search's gate): what base() usually names next
        self._last: tuple[PrecisionPlan, dict[bytes, Any]] | None = None
        self._scored: dict[bytes, Score] = {}  # by program digest
        self.failures = [0] * self.n  # trials each input ruled out: it runs first
        self.prepared = PreparedOnce()  # a weight is prepared for the emulator once, not per trial
        self.stats: dict[str, float] = {"trials": 0, "emulated": 0, "frames": 0, "calls": 0, "calls_run": 0,
                                        "lowering_s": 0.0, "emulating_s": 0.0}

    def base(self, plan: PrecisionPlan) -> None:
        # content keys never go stale: a base whose run was not kept (its score was remembered)
        # leaves the old one, which still serves every block before the first it changes
        if self._last is not None and self._last[0] == plan:
            self.shared = self._last[1]

    def __call__(self, plan: PrecisionPlan, hopeless: Hopeless | None = None,
                 cheaper_than: float | None = None) -> Score:
        self.stats["trials"] += 1
        t0 = time.perf_counter()
        self.choose(plan)
        program, tensors, records = self.lower_and_plan(self.g)  # formats change buffer sizes: planned again
        ms = predicted_ms(records)
        self.stats["lowering_s"] += time.perf_counter() - t0
        if cheaper_than is not None and ms >= cheaper_than:
            return Score.partial({}, self.n, ms)
        keys = ProgramKeys(program, tensors)
        digest = _program_digest(program, keys)
        known = self._scored.get(digest)
        if known is not None and (known.complete or hopeless is not None):
            return known
        record: dict[bytes, Any] = {}
        devices: list[ReusingDevice] = []

        def reusing(emu: Any) -> ReusingDevice:
            devices.append(ReusingDevice(emu, keys, self.shared, record))
            return devices[-1]

        order = sorted(range(self.n), key=lambda i: -self.failures[i])
        reports: dict[int, Any] = {}
        score = Score.partial(reports, self.n, ms)
        ruled_out = False
        runs = self.comparison.each(Plan({}, program, tensors, ""), order=order, device=reusing)
        try:
            with self.prepared:
                for i, report in runs:
                    reports[i] = report
                    score = Score.partial(reports, self.n, ms)
                    if hopeless is not None and hopeless(score):
                        self.failures[i] += 1
                        ruled_out = True
                        break
        finally:
            runs.close()
        self.stats["emulated"] += 1
        self.stats["frames"] += len(reports)
        for d in devices:
            self.stats["calls"] += d.calls
            self.stats["calls_run"] += d.calls_run
            self.stats["emulating_s"] += d.emulating_s
        if score.complete and not ruled_out:
            self._last = (plan, record)
        self._scored[digest] = score
        return score


def calibration_inputs(folder: Path | None, shape: list[int], image: ImageInput) -> list[np.ndarray]:
    files = expand_paths([folder or CALIBRATION_DIR])
    if not files:
        raise SpcError(f"{folder}: no calibration inputs")
    return [load_input(f, shape, image) for f in files]


def conv_blocks(g: Graph) -> list[str]:
    return [n.block for n in g.nodes if n.op.name == "spc.Conv2d" and n.block is not None]


def search(g: Graph, src: Path, choose: Callable[[PrecisionPlan], None], lower_and_plan: LowerAndPlan,
           image: ImageInput, calib: Path | None = None, thresholds: Thresholds | None = None,
           log: Callable[[str], None] = print) -> SearchResult:
    """Search the precision of compiled graph ``g`` (from ``src``) on calibration inputs, read as
    ``image`` says; ``choose`` applies a plan to ``g``, ``lower_and_plan`` makes the plan a trial
    scores, as the compile would (see :class:`Evaluator`)."""
    shape = [int(d) for d in g.inputs[0].type.static_shape]
    evaluate = Evaluator(g, src, calibration_inputs(calib, shape, image), choose, lower_and_plan)
    return search_plans(conv_blocks(g), evaluate, thresholds or Thresholds(), log)


def no_more_precise(a: BlockPrecision, b: BlockPrecision) -> bool:
    """``a`` keeps no more of the weights' bits and runs no more fidelity phases than ``b``."""
    return (a.weights_dtype.tile_bytes <= b.weights_dtype.tile_bytes
            and a.math_fidelity.phases <= b.math_fidelity.phases)


def search_plans(blocks: list[str], evaluate: Scorer, thresholds: Thresholds,
                 log: Callable[[str], None] = print) -> SearchResult:
    """The search itself, over any scorer of plans (the emulator in :func:`search`)."""
    trials: list[Trial] = []

    def ok(s: Score) -> bool:
        if not s.complete:
            return False
        if absolute:
            return s.passes(min_f1, min_desc)
        return s.within(ref, thresholds.f1_drop, thresholds.desc_pcc_drop)

    def hopeless(s: Score) -> bool:
        if absolute:  # the median is below the floor once more than half the inputs are
            below = sum(1 for f in s.f1s if not f >= min_f1)
            return 2 * below > len(ref.f1s) or not s.descriptor_pcc >= min_desc
        return not s.within(ref, thresholds.f1_drop, thresholds.desc_pcc_drop)

    def spent() -> float:
        return getattr(evaluate, "stats", {}).get("emulating_s", 0.0)

    def trial(what: str, plan: PrecisionPlan, cheaper_than: float | None = None) -> Trial:
        before = spent()
        s = evaluate(plan, hopeless, cheaper_than)
        t = Trial(what, plan, s, ok(s))
        trials.append(t)
        if not t.emulated:
            log(f"  skip  {s.device_ms:7.3f} ms  predicted to save too little  {what}")
            return t
        ran = "" if s.complete else f"  (stopped after {len(s.f1s)} of {len(ref.f1s)} inputs)"
        took = f"  {spent() - before:.1f} s" if spent() else ""
        log(f"  {'pass' if t.passed else 'fail'}  {s.device_ms:7.3f} ms  F1 {s.f1:.4f}  desc PCC "
            f"{s.descriptor_pcc:.5f}  score PCC {s.score_pcc:.5f}  {what}{ran}{took}")
        return t

    def result(best: Trial, msg: str) -> SearchResult:
        log("  " + msg)
        stats = {k: round(v, 1) for k, v in getattr(evaluate, "stats", {}).items()}
        if stats:
            n = dict.fromkeys(("trials", "emulated", "frames", "calls", "calls_run", "emulating_s", "lowering_s"),
                              0.0) | stats
            log(f"  {n['trials']:.0f} trials, {n['emulated']:.0f} emulated: {n['frames']:.0f} frames, "
                f"{n['calls_run']:.0f} of {n['calls']:.0f} device calls run (the rest shared with the base "
                f"plan); {n['emulating_s']:.0f} s emulating, {n['lowering_s']:.0f} s lowering and planning")
        return SearchResult(best.plan, best.score, ref, thresholds, trials, msg, stats)

    accurate = PrecisionPlan("accurate")
    absolute = thresholds.min_f1 is not None or thresholds.min_desc_pcc is not None
    ref = evaluate(accurate)
    min_f1 = thresholds.min_f1 if thresholds.min_f1 is not None else ref.f1 - thresholds.f1_drop
    min_desc = (thresholds.min_desc_pcc if thresholds.min_desc_pcc is not None
                else ref.descriptor_pcc - thresholds.desc_pcc_drop)
    trials.append(Trial("accurate (reference)", accurate, ref, ok(ref)))
    log(f"  reference `accurate`: F1 {ref.f1:.4f} desc PCC {ref.descriptor_pcc:.5f} {ref.device_ms:.3f} ms")
    if absolute:
        log(f"  thresholds: median F1 >= {min_f1:.4f}, worst descriptor PCC >= {min_desc:.5f}")
    else:
        log(f"  thresholds: on every input, F1 within {thresholds.f1_drop} and descriptor PCC within "
            f"{thresholds.desc_pcc_drop} of `accurate` on that input")
    if not trials[0].passed:
        return result(trials[0], "even `accurate` misses the thresholds on the calibration inputs; "
                      "keeping `accurate`")
    evaluate.base(accurate)

    current = trials[0]
    balanced = trial("preset balanced", PrecisionPlan("balanced"), cheaper_than=ref.device_ms)
    if balanced.passed:
        evaluate.base(balanced.plan)
        current = balanced
        fast = trial("preset fast", PrecisionPlan("fast"), cheaper_than=balanced.score.device_ms)
        if fast.passed:
            return result(fast, "the `fast` preset passes")
    least = MIN_SAVING * ref.device_ms  # what an option must be predicted to save (docstring, 2.)

    def cheapest(block: str) -> tuple[dict[str, Any], float] | None:
        """The cheapest option that passes for ``block`` alone, and what it saves (see the docstring)."""
        options = []
        for option in OPTIONS:  # cheapest first
            plan = current.plan.with_rule(block, **option)
            if _same(current.plan, plan, block):
                break  # nothing dearer is cheaper than what the block has
            options.append((option, plan))
        tried: set[int] = set()
        failed: list[BlockPrecision] = []
        best: tuple[int, Trial] | None = None
        limit = len(options)  # only options before this one are still worth trying
        while True:
            live = [i for i, (_, plan) in enumerate(options) if i not in tried and i < limit
                    and not any(no_more_precise(plan.for_block(block), f) for f in failed)]
            if not live:
                break
            i = live[len(live) // 2]
            tried.add(i)
            option, plan = options[i]
            t = trial(f"{block}: {option['weights_dtype'].value} {option['math_fidelity'].value}", plan,
                      cheaper_than=(best[1] if best else current).score.device_ms - least)
            if t.passed:
                best, limit = (i, t), i
            elif t.emulated:
                failed.append(plan.for_block(block))
            else:  # saves too little: the dearer options would save less still
                limit = i
        return None if best is None else (options[best[0]][0], current.score.device_ms - best[1].score.device_ms)

    allowed: dict[str, tuple[dict[str, Any], float]] = {}
    for block in blocks:
        found = cheapest(block)
        if found is not None:
            allowed[block] = found
    best = current
    if allowed:
        combined = current.plan
        for block, (option, _) in allowed.items():
            combined = combined.with_rule(block, **option)
        t = trial(f"all {len(allowed)} together", combined)
        if t.passed:
            best = t
        else:
            plan = current.plan
            for block, (option, _) in sorted(allowed.items(), key=lambda kv: -kv[1][1]):
                t = trial(f"+ {block}", plan.with_rule(block, **option))
                if t.passed:
                    plan, best = t.plan, t
                    evaluate.base(plan)
    saved = ref.device_ms - best.score.device_ms
    if best.plan == accurate:
        msg = "no plan cheaper than `accurate` meets the thresholds on the calibration inputs; keeping `accurate`"
    else:
        msg = (f"chose {len(best.plan.rules)} block override(s) on preset {best.plan.preset}: "
               f"{best.score.device_ms:.3f} ms predicted ({saved:.3f} ms less than accurate)")
    return result(best, msg)


def _same(base: PrecisionPlan, plan: PrecisionPlan, block: str) -> bool:
    return base.for_block(block) == plan.for_block(block)
