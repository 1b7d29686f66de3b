"""--precision auto: the search's decisions on a synthetic scorer, and the real scorer once."""

from __future__ import annotations

from pathlib import Path

import pytest
from msgspec.structs import replace

from spc.ttnn.precision import PrecisionPlan
from spc.tuning.precision_search import Score, search_plans
from spc.tuning.thresholds import Thresholds

BLOCKS = ["enc.a", "enc.b", "head"]


class Synthetic:
    """Cost: phases + weight bytes per block. Accuracy: a block loses F1 when its fidelity has
    fewer phases than ``sensitive[block]``, or when its weights are block-float. Counts what it scores."""

    def __init__(self, sensitive: dict[str, int], scale: dict[str, float] | None = None) -> None:
        self.sensitive = sensitive
        self.scale = scale or {}  # a block's share of the cost
        self.scored: list[PrecisionPlan] = []
        self.bases: list[PrecisionPlan] = []

    def predict(self, plan: PrecisionPlan) -> float:
        return sum(self.scale.get(b, 1.0) * (plan.for_block(b).math_fidelity.phases
                                             + 2 * plan.for_block(b).weights_dtype.bytes_per_value) for b in BLOCKS)

    def __call__(self, plan: PrecisionPlan, hopeless=None, cheaper_than=None) -> Score:  # type: ignore[no-untyped-def]
        f1 = 0.98
        for b in BLOCKS:
            p = plan.for_block(b)
            if p.math_fidelity.phases < self.sensitive.get(b, 1):
                f1 -= 0.05
            if p.weights_dtype.block_float_bits and b in self.sensitive:
                f1 -= 0.05
        cost = self.predict(plan)
        if cheaper_than is not None and cost >= cheaper_than:
            return Score.partial({}, 2, cost)
        self.scored.append(plan)
        return Score(f1=f1, descriptor_pcc=0.999, score_pcc=0.999, device_ms=cost, f1s=(f1, f1 + 0.01),
                     descriptor_pccs=(0.999, 0.999))

    def base(self, plan: PrecisionPlan) -> None:
        self.bases.append(plan)


def synthetic(sensitive: dict[str, int]) -> Synthetic:
    return Synthetic(sensitive)


def test_keeps_sensitive_blocks_and_cheapens_the_rest() -> None:
    result = search_plans(BLOCKS, synthetic({"head": 4}), Thresholds(), log=lambda s: None)
    chosen = {b: result.plan.for_block(b) for b in BLOCKS}
    assert chosen["head"].math_fidelity.value == "HiFi4" and chosen["head"].weights_dtype.value == "bfloat16"
    assert chosen["enc.a"].weights_dtype.value == "bfloat4_b" and chosen["enc.a"].math_fidelity.value == "LoFi"
    assert result.score.f1 >= result.reference.f1 - 0.01 and result.score.device_ms < result.reference.device_ms


def test_takes_a_whole_preset_when_it_passes() -> None:
    result = search_plans(BLOCKS, synthetic({}), Thresholds(), log=lambda s: None)
    assert result.plan == PrecisionPlan("fast") and "fast" in result.message


def test_says_so_when_nothing_cheaper_passes() -> None:
    everything = {b: 4 for b in BLOCKS}
    result = search_plans(BLOCKS, synthetic(everything), Thresholds(), log=lambda s: None)
    assert result.plan == PrecisionPlan("accurate") and "no plan cheaper" in result.message


def test_gate_is_paired_per_input() -> None:
    ref = Score(0.95, 0.999, 0.999, 1.0, f1s=(0.90, 0.95, 0.99), descriptor_pccs=(0.999,) * 3)
    # the median holds (0.95) but one input drops 0.03 below its own reference: fails
    worse = Score(0.95, 0.999, 0.999, 0.5, f1s=(0.93, 0.95, 0.96), descriptor_pccs=(0.999,) * 3)
    assert worse.passes(ref.f1 - 0.01, 0.998) and not worse.within(ref, 0.01, 0.001)


def test_says_so_when_even_accurate_misses_absolute_thresholds() -> None:
    result = search_plans(BLOCKS, synthetic({}), Thresholds(min_f1=0.99), log=lambda s: None)
    assert result.plan == PrecisionPlan("accurate") and "even `accurate` misses" in result.message


def test_real_scorer_on_the_small_export(small_onnx: Path) -> None:
    from spc.compiler import ProgramBuilder
    from spc.frontend.onnx_import import import_onnx
    from spc.passes.manager import PassContext, PassManager, PipelineOptions
    from spc.passes.pipeline import default_pipeline
    from spc.plan.program import DEFAULT_IMAGE
    from spc.ttnn.targets import get_target
    from spc.tuning.precision_search import CALIBRATION_DIR, Evaluator, calibration_inputs

    g = import_onnx(small_onnx)
    pm = PassManager(default_pipeline())
    pm.run(g, PassContext())
    inputs = calibration_inputs(CALIBRATION_DIR, [1, 3, 120, 160], DEFAULT_IMAGE)
    assert len(inputs) == 3
    evaluate = Evaluator(g, small_onnx, inputs[:1],
                         lambda plan: pm.rerun("choose-precision", g, PassContext(PipelineOptions(precision=plan)),
                                               record=False),
                         ProgramBuilder(small_onnx, get_target("p150")).trial)
    accurate, fast = evaluate(PrecisionPlan("accurate")), evaluate(PrecisionPlan("fast"))
    assert accurate.descriptor_pcc > 0.99 and accurate.score_pcc > 0.99
    assert accurate.f1 > 0.9  # the trial plan has the graph's output roles: its keypoints are compared
    assert fast.device_ms < accurate.device_ms
    assert fast.score_pcc < accurate.score_pcc  # the demo weights do not survive LoFi + bfp8
    with pytest.raises(Exception, match="not a preset"):
        PrecisionPlan("auto")


def test_a_block_that_needs_accurate_costs_three_trials_not_six() -> None:
    """Settings no more precise than a failing one are not tried; probing starts mid-way."""
    scorer = synthetic({"head": 4})
    search_plans(BLOCKS, scorer, Thresholds(), log=lambda s: None)
    head = [p for p in scorer.scored if [r[0] for r in p.rules] == ["head"]]
    assert len(head) == 3  # bfp8 HiFi2, bf16 HiFi2, bf16 HiFi3: each rules out the less precise ones
    assert scorer.bases == [PrecisionPlan("accurate")]  # balanced fails: the trials start from accurate


def test_blocks_that_cannot_save_enough_are_not_tried() -> None:
    scorer = Synthetic({"head": 4}, scale={"enc.a": 1.0, "enc.b": 0.0001, "head": 2.0})
    lines: list[str] = []
    result = search_plans(BLOCKS, scorer, Thresholds(), log=lines.append)
    skipped = [line for line in lines if "skip" in line and "enc.b" in line]
    assert 0 < len(skipped) < 6  # saves < MIN_SAVING: not emulated, nor the dearer options after it
    assert not any("enc.b" in [r[0] for r in p.rules] for p in scorer.scored)
    assert result.plan.for_block("enc.b") == PrecisionPlan("accurate").for_block("enc.b")
    assert result.plan.for_block("enc.a").math_fidelity.value == "LoFi"


class Exclusive(Synthetic):
    """enc.a and enc.b each pass alone but not together (nor under a cheaper preset)."""

    def __call__(self, plan: PrecisionPlan, hopeless=None, cheaper_than=None) -> Score:  # type: ignore[no-untyped-def]
        s = super().__call__(plan, hopeless, cheaper_than)
        both = all(plan.for_block(b) != PrecisionPlan("accurate").for_block(b) for b in ("enc.a", "enc.b"))
        bad = both or plan.preset != "accurate"
        return replace(s, f1s=tuple(f - 0.05 * bad for f in s.f1s)) if s.f1s else s


def test_combination_adds_biggest_saving_first_from_each_kept_plan() -> None:
    scorer = Exclusive({}, scale={"enc.a": 1.0, "enc.b": 2.0, "head": 1.0})
    result = search_plans(BLOCKS, scorer, Thresholds(), log=lambda s: None)
    assert [r[0] for r in result.plan.rules] == ["enc.b", "head"]  # enc.b saves more than enc.a
    assert [[r[0] for r in p.rules] for p in scorer.bases] == [[], ["enc.b"], ["enc.b", "head"]]


def test_fast_is_not_tried_when_balanced_fails() -> None:
    scorer = synthetic({"enc.a": 4})
    search_plans(BLOCKS, scorer, Thresholds(), log=lambda s: None)
    assert PrecisionPlan("fast") not in scorer.scored and PrecisionPlan("balanced") in scorer.scored


def test_hopeless_partial_scores_fail_and_stop(small_onnx: Path) -> None:
    """A trial stops at the first input that rules it out; an unfinished trial never passes."""
    from spc.compiler import ProgramBuilder
    from spc.frontend.onnx_import import import_onnx
    from spc.passes.manager import PassContext, PassManager, PipelineOptions
    from spc.passes.pipeline import default_pipeline
    from spc.plan.program import DEFAULT_IMAGE
    from spc.ttnn.targets import get_target
    from spc.tuning.precision_search import CALIBRATION_DIR, Evaluator, calibration_inputs

    g = import_onnx(small_onnx)
    pm = PassManager(default_pipeline())
    pm.run(g, PassContext())
    evaluate = Evaluator(g, small_onnx, calibration_inputs(CALIBRATION_DIR, [1, 3, 120, 160], DEFAULT_IMAGE),
                         lambda plan: pm.rerun("choose-precision", g, PassContext(PipelineOptions(precision=plan)),
                                               record=False),
                         ProgramBuilder(small_onnx, get_target("p150")).trial)
    fast = evaluate(PrecisionPlan("fast"), hopeless=lambda s: True)
    assert not fast.complete and len(fast.f1s) == 1 and evaluate.stats["frames"] == 1
    assert evaluate.failures[fast.inputs[0]] == 1  # that input runs first from now on
    again = evaluate(PrecisionPlan("fast"), hopeless=lambda s: True)
    assert again == fast and evaluate.stats["frames"] == 1  # the same program is not scored twice
    skipped = evaluate(PrecisionPlan("fast"), cheaper_than=0.0)
    assert not skipped.complete and skipped.f1s == () and evaluate.stats["frames"] == 1


def test_trials_are_lowered_and_planned_as_the_compile_does(small_onnx: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A trial's plan is the compile's: its forced memory, read-back, capacity and kernel options."""
    import spc.tuning.precision_search as precision_search
    from spc.compiler import compile_onnx
    from spc.memory.residency import predicted_ms
    from spc.options import AutoPrecision
    from spc.plan.io import read_plan
    from spc.ttnn.memory import MemoryOverrides
    from spc.tuning.precision_search import SearchResult

    trials = []

    def search(g, src, choose, lower_and_plan, image, calib=None, thresholds=None, log=print):  # type: ignore[no-untyped-def]
        program, _, records = lower_and_plan(g)  # under `accurate`, as the compile then writes it
        trials.append((program, predicted_ms(records)))
        score = Score(1.0, 1.0, 1.0, 0.0)
        return SearchResult(PrecisionPlan("accurate"), score, score, Thresholds())

    monkeypatch.setattr(precision_search, "search", search)
    out = tmp_path / "p.ttplan"
    memory = MemoryOverrides.from_cli(["encoder.conv_blocks.0.*=dram:height=2"])
    compile_onnx(small_onnx, out, auto=AutoPrecision(log=lambda s: None), memory=memory, keypoint_capacity=64,
                 kernels=True)
    ((trial, ms),), written = trials, read_plan(out)
    assert trial.to_json() == written.program.to_json()
    assert round(ms, 4) == written.manifest["predicted_device_ms"]
