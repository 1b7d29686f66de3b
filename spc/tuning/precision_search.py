"""`spc compile --precision auto`: the cheapest per-block precision that keeps task accuracy.

The gate is the task, not a tensor: keypoint F1 and descriptor-map PCC against onnxruntime fp32
on the source ONNX. By default the gate is paired: on *every* calibration input, F1 within 0.01
and descriptor PCC within 0.001 of what the `accurate` plan gets on that input (a median over a
few inputs let the greedy search walk to the edge and lose 0.05 F1 on other images). Absolute
floors may be given instead (--min-f1 on the median, --min-desc-pcc on the worst input).

The search, cheapest first, measured with the emulator (ttnn/numerics.py) and ranked by
the predicted device time (memory/cost.py):

1. `accurate`, to anchor the thresholds, then the presets `fast` and `balanced`; the cheapest
   that passes is the starting point.
2. Sensitivity: for each convolution block, in graph order, the cheapest cheaper setting that
   passes with every other block left as it is.
3. Combination: all of those at once; if that fails, add them one at a time, biggest saving
   first, keeping each only if the plan still passes.

Each trial re-stamps precision on the compiled graph, then lowers it and plans its memory again
through the compile's own path (compiler.Lowering: its memory, read-back and kernel options); no
re-import, no re-running of the other passes.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spc.errors import SpcError
from spc.ir.graph import Graph
from spc.memory.residency import CallRecord, predicted_ms
from spc.plan.program import Program
from spc.ttnn.formats import DataFormat, MathFidelity
from spc.ttnn.precision import PrecisionPlan
from spc.tuning.thresholds import Thresholds

CALIBRATION_DIR = Path(__file__).parent / "calibration"
# cheaper-than-accurate settings of a convolution block
OPTIONS: tuple[dict[str, Any], ...] = tuple(
    {"weights_dtype": w, "math_fidelity": f} for w, f in (
        (DataFormat.BFLOAT4_B, MathFidelity.LOFI),
        (DataFormat.BFLOAT8_B, MathFidelity.LOFI),
        (DataFormat.BFLOAT16, MathFidelity.LOFI),
        (DataFormat.BFLOAT8_B, MathFidelity.HIFI2),
        (DataFormat.BFLOAT16, MathFidelity.HIFI2),
        (DataFormat.BFLOAT16, MathFidelity.HIFI3),
    ))


@dataclass(frozen=True)
class Score:
    f1: float  # median over the calibration inputs
    descriptor_pcc: float  # worst input
    score_pcc: float  # worst input
    device_ms: float  # predicted
    f1s: tuple[float, ...] = ()  # per input
    descriptor_pccs: tuple[float, ...] = ()  # per input

    @staticmethod
    def of(reports: list, device_ms: float) -> Score:
        """Median F1 and worst PCCs over per-input reports (tuning/comparison.ImageReport)."""
        return Score(statistics.median(r.f1 for r in reports), min(r.descriptor_pcc for r in reports),
                     min(r.score_pcc for r in reports), device_ms, tuple(r.f1 for r in reports),
                     tuple(r.descriptor_pcc for r in reports))

    def passes(self, min_f1: float, min_desc: float) -> bool:
        return self.f1 >= min_f1 and self.descriptor_pcc >= min_desc

    def within(self, ref: Score, f1_drop: float, desc_drop: float) -> bool:
        """Paired: no input loses more than the margins against ``ref`` on that same input."""
        return (all(a >= b - f1_drop for a, b in zip(self.f1s, ref.f1s))
                and all(a >= b - desc_drop for a, b in zip(self.descriptor_pccs, ref.descriptor_pccs)))


@dataclass
class Trial:
    what: str
    plan: PrecisionPlan
    score: Score
    passed: bool


@dataclass
class SearchResult:
    plan: PrecisionPlan
    score: Score
    reference: Score
    thresholds: Thresholds
    trials: list[Trial] = field(default_factory=list)
    message: str = ""

    def manifest(self) -> dict[str, Any]:
        return {"chosen": self.plan.describe(), "metrics": vars(self.score), "accurate": vars(self.reference),
                "thresholds": vars(self.thresholds), "trials": len(self.trials), "message": self.message}


# a compiled graph -> its planned program, the program's tensors and the planner's walk, as the
# compile makes them (compiler.Lowering.trial: the compile's memory, read-back and kernel options)
LowerAndPlan = Callable[[Graph], tuple[Program, dict[str, np.ndarray], list[CallRecord]]]


class Evaluator:
    """Scores precision plans of one compiled graph on calibration inputs."""

    def __init__(self, g: Graph, src: Path, inputs: list[np.ndarray], choose: Callable[[PrecisionPlan], None],
                 lower_and_plan: LowerAndPlan) -> None:
        from spc.lowering.lower import find_probes
        from spc.tuning.comparison import Comparison

        self.g = g
        # applies a plan to the graph: the compiler re-runs choose-precision through its pass manager
        self.choose = choose
        self.lower_and_plan = lower_and_plan
        self.comparison = Comparison(src, find_probes(g), inputs)

    def __call__(self, plan: PrecisionPlan) -> Score:
        from spc.plan.io import Plan

        self.choose(plan)
        program, tensors, records = self.lower_and_plan(self.g)  # formats change buffer sizes: planned again
        reports = self.comparison.reports(Plan({}, program, tensors, ""))
        return Score.of(reports, predicted_ms(records))


def calibration_inputs(folder: Path | None, shape: list[int]) -> list[np.ndarray]:
    from spc.runtime.inputs import expand_paths, load_input

    files = expand_paths([folder or CALIBRATION_DIR])
    if not files:
        raise SpcError(f"{folder}: no calibration inputs")
    return [load_input(f, shape) for f in files]


def conv_blocks(g: Graph) -> list[str]:
    return [n.block for n in g.nodes if n.op.name == "spc.Conv2d" and n.block is not None]


def search(g: Graph, src: Path, choose: Callable[[PrecisionPlan], None], lower_and_plan: LowerAndPlan,
           calib: Path | None = None, thresholds: Thresholds | None = None,
           log: Callable[[str], None] = print) -> SearchResult:
    """Search the precision of compiled graph ``g`` (from ``src``) on calibration inputs;
    ``choose`` applies a plan to ``g``, ``lower_and_plan`` makes the plan a trial scores, as the
    compile would (see :class:`Evaluator`)."""
    shape = [int(d) for d in g.inputs[0].type.static_shape]
    evaluate = Evaluator(g, src, calibration_inputs(calib, shape), choose, lower_and_plan)
    return search_plans(conv_blocks(g), evaluate, thresholds or Thresholds(), log)


def search_plans(blocks: list[str], evaluate: Callable[[PrecisionPlan], Score], thresholds: Thresholds,
                 log: Callable[[str], None] = print) -> SearchResult:
    """The search itself, over any scorer of plans (the emulator in :func:`search`)."""
    trials: list[Trial] = []

    def ok(s: Score) -> bool:
        if absolute:
            return s.passes(min_f1, min_desc)
        return s.within(ref, thresholds.f1_drop, thresholds.desc_pcc_drop)

    def trial(what: str, plan: PrecisionPlan) -> Trial:
        s = evaluate(plan)
        t = Trial(what, plan, s, ok(s))
        trials.append(t)
        log(f"  {'pass' if t.passed else 'fail'}  {s.device_ms:7.3f} ms  F1 {s.f1:.4f}  desc PCC "
            f"{s.descriptor_pcc:.5f}  score PCC {s.score_pcc:.5f}  {what}")
        return t

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
        msg = "even `accurate` misses the thresholds on the calibration inputs; keeping `accurate`"
        log("  " + msg)
        return SearchResult(accurate, ref, ref, thresholds, trials, msg)

    current = max((trial(f"preset {p}", PrecisionPlan(p)) for p in ("fast", "balanced")),
                  key=lambda t: (t.passed, -t.score.device_ms))
    if not current.passed:
        current = trials[0]
    if current.plan.preset == "fast":
        return SearchResult(current.plan, current.score, ref, thresholds, trials, "the `fast` preset passes")

    allowed: dict[str, tuple[dict[str, Any], float]] = {}
    for block in blocks:
        for option in OPTIONS:
            plan = current.plan.with_rule(block, **option)
            if _same(current.plan, plan, block):
                break  # options are ordered cheapest first: nothing cheaper is left for this block
            t = trial(f"{block}: {option['weights_dtype'].value} {option['math_fidelity'].value}", plan)
            if t.passed and t.score.device_ms < current.score.device_ms:
                allowed[block] = (option, current.score.device_ms - t.score.device_ms)
                break
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
    saved = ref.device_ms - best.score.device_ms
    if best.plan == accurate:
        msg = "no plan cheaper than `accurate` meets the thresholds on the calibration inputs; keeping `accurate`"
    else:
        msg = (f"chose {len(best.plan.rules)} block override(s) on preset {best.plan.preset}: "
               f"{best.score.device_ms:.3f} ms predicted ({saved:.3f} ms less than accurate)")
    log("  " + msg)
    return SearchResult(best.plan, best.score, ref, thresholds, trials, msg)


def _same(base: PrecisionPlan, plan: PrecisionPlan, block: str) -> bool:
    return base.for_block(block) == plan.for_block(block)
